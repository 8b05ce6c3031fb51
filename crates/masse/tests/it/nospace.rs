//! A full pool gives NoSpace (never corruption); deletes still work; after
//! deleting, writes succeed again.
use crate::common;
use common::*;
use masse::{Db, Error};

#[test]
fn fill_delete_write_again() {
    let p = MemPool::tiered(48 << 20, 8 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    let mut n = 0u64;
    loop {
        match db.put(&key(n), &value(n, 0, 1000)) {
            Ok(()) => n += 1,
            Err(Error::NoSpace(msg)) => {
                assert!(!msg.is_empty());
                break;
            }
            Err(e) => panic!("unexpected error after {n} puts: {e}"),
        }
        assert!(n < 1_000_000, "never ran out of space");
    }
    assert!(n > 1000, "pool held only {n} records");
    // Everything acknowledged is intact.
    for i in 0..n {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 1000)[..]),
            "key {i}"
        );
    }
    // Deletes work on a full pool.
    for i in (0..n).filter(|i| i % 2 == 0) {
        assert!(db.delete(&key(i)).expect("delete on a full pool"));
    }
    // And space comes back.
    for i in 0..n / 4 {
        db.put(&key(n + i), &value(n + i, 1, 1000))
            .expect("put after deletes");
    }
    for i in 0..n {
        let want = if i % 2 == 0 {
            None
        } else {
            Some(value(i, 0, 1000))
        };
        assert_eq!(db.get(&key(i)).expect("get"), want, "key {i}");
    }
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    assert_eq!(db.get(&key(0)).expect("get"), None);
    assert_eq!(
        db.get(&key(1)).expect("get").as_deref(),
        Some(&value(1, 0, 1000)[..])
    );
    db.close().expect("close");
}
