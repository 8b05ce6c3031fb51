//! Overwrite churn of records bigger than a segment must never report a full
//! pool while the live data is a small part of it.
//!
//! 8 threads overwrite 16 keys with 64 KiB values on a pool of 1 MiB bands and
//! 64 KiB segments: each record needs a 2-slot segment of its own (128 KiB), the
//! live set is 1 MiB of 64 MiB, so every `NoSpace` is a bug. Space admission
//! used to count such a record at its byte length (~66 KiB), so writers took
//! the free bands kept for GC and a group commit found the free list empty
//! ("internal reserve exhausted", which fails the whole database); and a
//! stalled writer took bands that GC freed but other writers used at once for
//! GC winning nothing. The race showed in about half the runs, so the scenario
//! runs several times on fresh pools. Afterwards every key must hold the last
//! value its one writer put, before and after a reopen.
use crate::common;
use common::*;
use masse::Db;
use std::sync::Arc;

const ROUNDS: usize = 5;
const THREADS: u64 = 8;
const PUTS: u64 = 800;
const KEYS: u64 = 16;
const VALUE: usize = 64 << 10;

/// Thread `t`'s `i`-th value for key `k`: its identity up front, then filler.
fn val(k: u64, i: u64) -> Vec<u8> {
    let mut v = vec![(i as u8) | 1; VALUE];
    v[..8].copy_from_slice(&k.to_le_bytes());
    v[8..16].copy_from_slice(&i.to_le_bytes());
    v
}

/// Key that thread `t` writes at step `i`: keys `t` and `t + 8`, alternately, so
/// each key has one writer and a known last value.
fn key_of(t: u64, i: u64) -> u64 {
    (i * THREADS + t) % KEYS
}

fn expected(k: u64) -> Vec<u8> {
    let t = k % THREADS;
    let last = (0..PUTS)
        .rev()
        .find(|&i| key_of(t, i) == k)
        .expect("key written");
    val(k, last)
}

fn verify(db: &Db, round: usize) {
    for k in 0..KEYS {
        let got = db.get(&key(k)).expect("get");
        assert!(
            got.as_deref() == Some(&expected(k)[..]),
            "round {round}: key {k} does not hold its last value"
        );
    }
}

fn round(r: usize) {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(64 << 10, 1 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..PUTS {
                    let k = key_of(t, i);
                    if let Err(e) = db.put(&key(k), &val(k, i)) {
                        return Some(format!("thread {t} put {i}: {e}"));
                    }
                }
                None
            })
        })
        .collect();
    let errs: Vec<String> = hs
        .into_iter()
        .filter_map(|h| h.join().expect("writer thread"))
        .collect();
    assert!(
        errs.is_empty(),
        "round {r}: {} writers failed on a pool holding 1 MiB live of 64 MiB: {:?}\n{}",
        errs.len(),
        errs,
        db.stats().to_text()
    );
    verify(&db, r);
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "round {r}: {:?}", rep.errors);
    let db = Arc::into_inner(db).expect("sole owner");
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    verify(&db, r);
    db.close().expect("close");
}

#[test]
fn overwriting_big_records_never_reports_a_full_pool() {
    for r in 0..ROUNDS {
        round(r);
    }
}
