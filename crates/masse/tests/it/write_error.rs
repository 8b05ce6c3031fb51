//! A write I/O error on the capacity tier fails the writes that needed it with
//! an error — it must not leave them waiting forever (found by the fault harness,
//! masse-stress seed 42: a barrier queued behind the failing write was dropped) —
//! and the pool reopens with every acknowledged write.
use crate::common;
use common::*;
use masse::Db;
use std::sync::mpsc;
use std::time::Duration;

fn put_fails_promptly(p: MemPool) {
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..300 {
        db.put(&key(i), &value(i, 0, 200)).expect("put");
    }
    for c in &p.caps {
        c.set_fail_writes(true);
    }
    if let Some(f) = &p.fast {
        f.set_fail_writes(true);
    }
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        // Enough to need the capacity tier in any mode.
        let mut r = Ok(());
        for i in 300..3000 {
            r = db.put(&key(i), &value(i, 0, 200));
            if r.is_err() {
                break;
            }
        }
        let _ = tx.send(r.is_err());
        drop(db);
    });
    let failed = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("writes hung after a device write error");
    assert!(
        failed,
        "writes kept succeeding on a device that fails every write"
    );
    h.join().expect("thread");
    for c in &p.caps {
        c.set_fail_writes(false);
    }
    if let Some(f) = &p.fast {
        f.set_fail_writes(false);
    }
    let db = Db::open(&p.config(), opts()).expect("reopen");
    for i in 0..300 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 200)[..])
        );
    }
    db.close().expect("close");
}

#[test]
fn capacity_only() {
    put_fails_promptly(MemPool::capacity_only(16 << 20).with_geometry(32 << 10, 512 << 10));
}

#[test]
fn tiered() {
    put_fails_promptly(MemPool::tiered(64 << 20, 16 << 20).with_geometry(32 << 10, 512 << 10));
}
