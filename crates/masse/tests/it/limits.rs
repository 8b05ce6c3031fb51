//! Key and value limits: 1..=1024-byte keys, values up to MAX_VALUE_LEN (≥ 1 MiB,
//! spanning several segments), clear errors beyond.
use crate::common;
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

#[test]
fn a_record_larger_than_a_band_is_refused_cleanly() {
    // 512 KiB bands cannot hold a 1 MiB value: the put gets TooLarge, nothing is
    // written, and the database keeps working (it used to fail the whole pool).
    let p = MemPool::capacity_only(16 << 20).with_geometry(32 << 10, 512 << 10);
    let db = masse::Db::create(&p.config(), opts()).expect("create");
    db.put(b"small", b"v").expect("put");
    let big = vec![7u8; 1 << 20];
    match db.put(b"big", &big) {
        Err(masse::Error::TooLarge { what: "record", .. }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let mut b = masse::WriteBatch::new();
    b.put(b"big2", &big).expect("batch put");
    assert!(matches!(db.write(b), Err(masse::Error::TooLarge { .. })));
    db.put(b"after", b"ok")
        .expect("the pool still takes writes");
    assert_eq!(db.get(b"big").expect("get"), None);
    assert_eq!(db.get(b"small").expect("get").as_deref(), Some(&b"v"[..]));
    db.close().expect("close");
}

/// Options the engine cannot run with are refused with a clear error before
/// any device is touched: create leaves the devices unformatted, open leaves
/// the pool as it was.
#[test]
fn unusable_options_are_refused_before_the_devices_are_touched() {
    use masse::Options;
    let p = MemPool::tiered(64 << 20, 32 << 20);
    let bad = [
        Options {
            gc_low_bands: 1,
            ..opts()
        },
        Options {
            gc_low_bands: 2,
            ..opts()
        },
        Options {
            gc_duty: 0.0,
            ..opts()
        },
        Options {
            gc_duty: 1.5,
            ..opts()
        },
        Options {
            gc_duty: f64::NAN,
            ..opts()
        },
        Options {
            max_batch_bytes: 0,
            ..opts()
        },
    ];
    for o in &bad {
        match Db::create(&p.config(), o.clone()) {
            Err(Error::InvalidConfig(m)) => assert!(!m.is_empty()),
            Err(e) => panic!("{o:?}: {e}"),
            Ok(_) => panic!("{o:?} was accepted"),
        }
    }
    assert!(
        matches!(Db::open(&p.config(), opts()), Err(_)),
        "a refused create formatted the devices"
    );
    Db::create(&p.config(), opts())
        .expect("create")
        .close()
        .expect("close");
    for o in &bad {
        assert!(matches!(
            Db::open(&p.config(), o.clone()),
            Err(Error::InvalidConfig(_))
        ));
    }
    let o = Options {
        gc_low_bands: 3,
        ..opts()
    };
    Db::open(&p.config(), o)
        .expect("3 is allowed")
        .close()
        .expect("close");
}
