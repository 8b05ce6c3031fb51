//! Reopening a pool again and again after crashes replays the same pad
//! records each time instead of more, reports no lost keys, and loses
//! nothing; after a clean close nothing is left to replay.
use crate::common;
use common::*;
use masse::Db;

#[test]
fn repeated_reopen_is_stable() {
    let p = MemPool::tiered(48 << 20, 32 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..50 {
        db.put(&key(i), &value(i, 0, 100)).expect("put");
    }
    drop(db); // a crash: the open segment's records are only on the pad
    let mut replayed = Vec::new();
    for round in 0..8u64 {
        let db = Db::open(&p.config(), opts()).expect("open");
        let st = db.stats();
        assert!(
            st.recovery_warnings.is_empty(),
            "round {round}: {:?}",
            st.recovery_warnings
        );
        assert_eq!(st.corruptions, 0);
        replayed.push(st.recovery_pad_records);
        for i in 0..50 {
            assert_eq!(
                db.get(&key(i)).expect("get").as_deref(),
                Some(&value(i, 0, 100)[..])
            );
        }
        drop(db);
    }
    // The open segment's 50 records stay on the pad (nothing filled a segment), and
    // every open after a crash replays exactly those — never a growing set.
    assert!(
        replayed.iter().all(|&n| n == 50),
        "pad records replayed per open: {replayed:?}"
    );
    // A clean close seals and writes the open segment (design.md §9.5).
    Db::open(&p.config(), opts())
        .expect("open")
        .close()
        .expect("close");
    let db = Db::open(&p.config(), opts()).expect("open after a clean close");
    assert_eq!(db.stats().recovery_pad_records, 0);
    for i in 0..50 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 100)[..])
        );
    }
    db.close().expect("close");
}
