//! A pool truly filled with records bigger than a segment, by several writers
//! at once, reports a clear `NoSpace` to each of them and stays healthy: every
//! acknowledged record is intact, deletes work, and after them writes succeed
//! again. (Space admission used to count such a record at its byte length,
//! about half of the 2-slot segment it takes, so concurrent writers overran the
//! free bands and the group commit failed the whole database instead, or a
//! delete got `NoSpace` from GC passes judged futile while writers took what
//! they freed.) The race shows in a minority of runs, so the scenario runs
//! several times on fresh pools.
use crate::common;
use common::*;
use masse::{Db, Error};
use std::sync::Arc;

const ROUNDS: usize = 12;
const THREADS: u64 = 4;
const VALUE: usize = 64 << 10;

fn val(k: u64, ver: u64) -> Vec<u8> {
    let mut v = vec![(k as u8) ^ (ver as u8) | 1; VALUE];
    v[..8].copy_from_slice(&k.to_le_bytes());
    v[8..16].copy_from_slice(&ver.to_le_bytes());
    v
}

#[test]
fn concurrent_big_records_fill_the_pool_cleanly() {
    for r in 0..ROUNDS {
        round(r);
    }
}

fn round(r: usize) {
    // 15 bands of 1 MiB, 64 KiB segments: a 64 KiB value takes 2 slots.
    let p = MemPool::tiered(64 << 20, 16 << 20).with_geometry(64 << 10, 1 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let bands = db.stats().bands_total;
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0.. {
                    let k = i * THREADS + t;
                    match db.put(&key(k), &val(k, 0)) {
                        Ok(()) => acked.push(k),
                        Err(Error::NoSpace(msg)) => return (acked, Ok(msg)),
                        Err(e) => return (acked, Err(format!("thread {t} put {i}: {e}"))),
                    }
                }
                unreachable!()
            })
        })
        .collect();
    let mut acked = Vec::new();
    for h in hs {
        let (a, end) = h.join().expect("writer thread");
        match end {
            Ok(msg) => assert!(!msg.is_empty(), "NoSpace without a reason"),
            Err(e) => panic!("round {r}: a full pool must give NoSpace, not: {e}"),
        }
        acked.extend(a);
    }
    acked.sort_unstable();
    // The pool really was full: all but the bands kept for GC (2) and one more
    // hold live records, 7 to a band.
    let per_band = 7;
    assert!(
        acked.len() as u64 >= (bands as u64 - 3) * per_band,
        "round {r}: only {} records in {bands} bands",
        acked.len()
    );
    for &k in &acked {
        assert_eq!(
            db.get(&key(k)).expect("get").as_deref(),
            Some(&val(k, 0)[..]),
            "key {k}"
        );
    }
    // Deletes work on the full pool and make room again.
    let (gone, kept): (Vec<u64>, Vec<u64>) = acked.iter().partition(|&&k| k % 2 == 0);
    for &k in &gone {
        assert!(db
            .delete(&key(k))
            .unwrap_or_else(|e| panic!("round {r}: delete on a full pool: {e}")));
    }
    let fresh: Vec<u64> = (0..gone.len() as u64 / 2).map(|i| 1_000_000 + i).collect();
    for &k in &fresh {
        db.put(&key(k), &val(k, 1))
            .unwrap_or_else(|e| panic!("round {r}: put after deletes: {e}"));
    }
    let verify = |db: &Db| {
        for &k in &gone {
            assert_eq!(db.get(&key(k)).expect("get"), None, "deleted key {k}");
        }
        for &k in &kept {
            assert_eq!(
                db.get(&key(k)).expect("get").as_deref(),
                Some(&val(k, 0)[..]),
                "key {k}"
            );
        }
        for &k in &fresh {
            assert_eq!(
                db.get(&key(k)).expect("get").as_deref(),
                Some(&val(k, 1)[..]),
                "key {k}"
            );
        }
    };
    verify(&db);
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "round {r}: {:?}", rep.errors);
    Arc::into_inner(db)
        .expect("sole owner")
        .close()
        .expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    verify(&db);
    db.close().expect("close");
}
