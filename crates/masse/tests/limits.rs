//! Key and value limits: 1..=1024-byte keys, values up to MAX_VALUE_LEN (≥ 1 MiB,
//! spanning several segments), clear errors beyond.
mod common;
use common::*;
use masse::{Db, Error, MAX_KEY_LEN, MAX_VALUE_LEN};

#[test]
fn limits_and_large_values() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    assert!(matches!(db.put(b"", b"x"), Err(Error::InvalidKey { .. })));
    assert!(matches!(
        db.put(&vec![1u8; MAX_KEY_LEN + 1], b"x"),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(db.get(b""), Err(Error::InvalidKey { .. })));
    assert!(matches!(
        db.put(b"k", &vec![0u8; MAX_VALUE_LEN + 1]),
        Err(Error::ValueTooLarge { .. })
    ));
    let big_key = vec![7u8; MAX_KEY_LEN];
    db.put(&big_key, b"big key").expect("max key");
    let big = value(1, 1, MAX_VALUE_LEN);
    db.put(b"big", &big).expect("max value");
    let mib = value(2, 2, 1 << 20);
    db.put(b"mib", &mib).expect("1 MiB value");
    for i in 0..500 {
        db.put(&key(i), &value(i, 0, 3000)).expect("put");
    }
    assert_eq!(db.get(b"big").expect("get").as_deref(), Some(&big[..]));
    assert_eq!(db.get(b"mib").expect("get").as_deref(), Some(&mib[..]));
    assert_eq!(
        db.get(&big_key).expect("get").as_deref(),
        Some(&b"big key"[..])
    );
    drop(db);
    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(db.get(b"big").expect("get").as_deref(), Some(&big[..]));
    assert_eq!(db.get(b"mib").expect("get").as_deref(), Some(&mib[..]));
    db.flush().expect("flush");
    assert_eq!(db.get(b"mib").expect("get").as_deref(), Some(&mib[..]));
    for i in 0..500 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 3000)[..])
        );
    }
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
}
