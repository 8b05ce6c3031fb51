//! scm-only mode follows the 3D XPoint rules: an update of the same size
//! overwrites the old record in place (one 4 KiB page write) instead of
//! appending, so overwrite churn needs no GC; different sizes still append.
//! In-place updates survive a clean reopen and a power cut, concurrent readers
//! never see a torn or foreign value, and the pool checks clean.
use crate::common;
use common::*;
use masse::Db;
use std::sync::Arc;

const N: u64 = 2000;

fn fill(db: &Db, ver: u64, len: usize) {
    for i in 0..N {
        db.put(&key(i), &value(i, ver, len)).expect("put");
    }
}

fn verify(db: &Db, ver: u64, len: usize) {
    for i in 0..N {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, ver, len)[..]),
            "key {i}"
        );
    }
}

#[test]
fn same_size_updates_are_written_in_place() {
    let p = MemPool::scm_only(64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    fill(&db, 0, 100);
    let before = db.stats();
    fill(&db, 1, 100);
    let after = db.stats();
    let inplace = after.inplace_writes - before.inplace_writes;
    // Everything but the records still in the open (DRAM) segment goes in place.
    assert!(
        inplace >= N - 100,
        "only {inplace} of {N} updates went in place"
    );
    let appended = after.segment_bytes_written + after.partial_flushes * 4096
        - before.segment_bytes_written
        - before.partial_flushes * 4096;
    // Only the updates that did not go in place appended anything (at most a
    // tail rewrite of two 4 KiB blocks each); the in-place ones appended nothing.
    assert!(
        appended <= (N - inplace) * 8192,
        "{appended} bytes appended for {} updates not in place",
        N - inplace
    );
    verify(&db, 1, 100);
    // A different size cannot go in place: appended, and the old record dies.
    let before = db.stats();
    fill(&db, 2, 120);
    assert_eq!(db.stats().inplace_writes, before.inplace_writes);
    verify(&db, 2, 120);
    // And same-size updates of those appended records go in place again.
    fill(&db, 3, 120);
    assert!(db.stats().inplace_writes >= before.inplace_writes + N - 100);
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");

    let db = Db::open(&p.config(), opts()).expect("reopen");
    verify(&db, 3, 120);
    db.close().expect("close");
}

#[test]
fn in_place_updates_survive_a_power_cut() {
    let p = MemPool::scm_only(64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    fill(&db, 0, 64);
    db.checkpoint().expect("checkpoint");
    fill(&db, 1, 64);
    assert!(db.stats().inplace_writes > 0);
    // Crash: no close; whatever was not synced is gone.
    drop(db);
    p.power_cut();
    let db = Db::open(&p.config(), opts()).expect("recover");
    verify(&db, 1, 64);
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
}

#[test]
fn readers_never_see_a_torn_in_place_update() {
    let p = MemPool::scm_only(64 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    fill(&db, 0, 200);
    let rounds = 6u64;
    let mut hs = Vec::new();
    for t in 0..2u64 {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            for ver in 1..=rounds {
                for i in (t..N).step_by(2) {
                    db.put(&key(i), &value(i, ver, 200)).expect("put");
                }
            }
        }));
    }
    for r in 0..3u64 {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            for j in 0..30_000u64 {
                let i = (j * 7919 + r * 13) % N;
                let v = db.get(&key(i)).expect("get never fails").expect("present");
                assert!(
                    (0..=rounds).any(|ver| v == value(i, ver, 200)),
                    "key {i}: a value that was never written"
                );
            }
            for kv in db.iter() {
                kv.expect("iteration never fails");
            }
        }));
    }
    for h in hs {
        h.join().expect("thread");
    }
    verify(&db, rounds, 200);
    assert!(db.stats().inplace_writes > N);
    let db = Arc::try_unwrap(db).ok().expect("sole owner");
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
}

#[test]
fn gc_and_in_place_updates_interleave() {
    // Sizes flip at random, so updates alternate between in place and appended,
    // and the appended ones leave garbage that GC must collect while in-place
    // updates keep landing in the bands it picks from.
    // Small enough that the appended updates (about 10 MiB) must be collected.
    let p = MemPool::scm_only(12 << 20).with_geometry(8 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    let n = 30_000u64;
    let len = |i: u64, ver: u64| if (i ^ ver) % 3 == 0 { 120 } else { 100 };
    let mut ver = vec![0u64; n as usize];
    for i in 0..n {
        db.put(&key(i), &value(i, 0, len(i, 0))).expect("fill");
    }
    let mut x = 99u64;
    for _ in 0..n * 3 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % n;
        let v = ver[i as usize] + 1;
        ver[i as usize] = v;
        db.put(&key(i), &value(i, v, len(i, v))).expect("update");
    }
    let st = db.stats();
    assert!(st.gc_bands_freed > 0, "GC must have run: {}", st.to_text());
    assert!(st.inplace_writes > n, "{}", st.to_text());
    for i in 0..n {
        let v = ver[i as usize];
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, v, len(i, v))[..]),
            "key {i}"
        );
    }
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
}
