//! Basic round trips in every configuration, across clean and unclean reopen.
use crate::common;
use common::*;
use masse::Db;

fn roundtrip(p: MemPool) {
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..2000u64 {
        db.put(&key(i), &value(i, 0, (i % 300) as usize))
            .expect("put");
    }
    db.put(b"empty", b"").expect("put empty");
    assert!(db.delete(&key(5)).expect("del"));
    assert!(!db.delete(b"never-there").expect("del absent"));
    for i in 0..2000u64 {
        let got = db.get(&key(i)).expect("get");
        if i == 5 {
            assert_eq!(got, None);
        } else {
            assert_eq!(
                got.as_deref(),
                Some(&value(i, 0, (i % 300) as usize)[..]),
                "key {i}"
            );
        }
    }
    assert_eq!(db.get(b"empty").expect("get").as_deref(), Some(&b""[..]));
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    assert_eq!(db.get(&key(5)).expect("get"), None);
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&value(7, 0, 7)[..])
    );
    for i in 2000..3000u64 {
        db.put(&key(i), &value(i, 1, 100)).expect("put");
    }
    drop(db); // crash
    let db = Db::open(&p.config(), opts()).expect("recover");
    for i in 0..3000u64 {
        let got = db.get(&key(i)).expect("get");
        if i == 5 {
            assert_eq!(got, None);
        } else if i >= 2000 {
            assert_eq!(got.as_deref(), Some(&value(i, 1, 100)[..]), "key {i}");
        } else {
            assert_eq!(
                got.as_deref(),
                Some(&value(i, 0, (i % 300) as usize)[..]),
                "key {i}"
            );
        }
    }
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    assert_eq!(rep.live_keys, 3000);
    db.close().expect("close");
}

#[test]
fn tiered() {
    roundtrip(MemPool::tiered(64 << 20, 256 << 20));
}

#[test]
fn capacity_only() {
    roundtrip(MemPool::capacity_only(256 << 20));
}

#[test]
fn scm_only() {
    roundtrip(MemPool::scm_only(128 << 20));
}
