//! Concurrent readers and writers: every thread's last acknowledged value is
//! what everyone reads afterwards, and readers never see a value that was never written.
use crate::common;
use common::*;
use masse::Db;
use std::sync::Arc;

#[test]
fn readers_and_writers() {
    let p = MemPool::tiered(64 << 20, 32 << 20).with_geometry(32 << 10, 512 << 10);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let threads = 8u64;
    let per = 3000u64;
    let mut hs = Vec::new();
    for t in 0..threads {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            // Each writer owns keys t, t+threads, ...; rewrites them several times.
            for round in 0..3u64 {
                for j in 0..per / 3 {
                    let k = t + threads * j;
                    db.put(&key(k), &value(k, round, 50 + (k % 200) as usize))
                        .expect("put");
                }
            }
        }));
    }
    for r in 0..4u64 {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            for j in 0..20_000u64 {
                let k = (j * 7919 + r) % (threads * per / 3);
                if let Some(v) = db.get(&key(k)).expect("get") {
                    let ok = (0..3).any(|round| v == value(k, round, 50 + (k % 200) as usize));
                    assert!(ok, "reader saw a value never written for key {k}");
                }
            }
        }));
    }
    for h in hs {
        h.join().expect("thread");
    }
    for k in 0..threads * per / 3 {
        assert_eq!(
            db.get(&key(k)).expect("get").as_deref(),
            Some(&value(k, 2, 50 + (k % 200) as usize)[..])
        );
    }
    let db = Arc::try_unwrap(db).ok().expect("sole owner");
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
}
