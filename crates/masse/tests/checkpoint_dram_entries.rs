//! A checkpoint names records in segments still in DRAM. After a crash lost
//! such a segment, the next run writes other records into its slot; a later
//! crash that loads the same checkpoint must not take the old entries as
//! pointing there. Recovery used to keep them once the slot was written
//! again, and a key then read another record's bytes (or a deleted key came
//! back as an entry into garbage). It keeps only entries below the band's
//! checkpointed written slots now (design.md §10.4 step 2).
mod common;
use common::*;
use masse::Db;

fn opts() -> masse::Options {
    masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        checkpoint_on_close: false,
        ..common::opts()
    }
}

/// Writes `before`, then `k` = "the value", then a checkpoint; then
/// `after`; then crashes, reopens (replay places the pad's records again,
/// at other offsets), makes them durable, crashes again and reopens.
fn twice(before: &[(u64, &[u8])], after: &dyn Fn(&Db)) -> Db {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for &(i, v) in before {
        db.put(&key(i), v).expect("put");
    }
    db.put(&key(7), b"the value").expect("put");
    db.checkpoint().expect("checkpoint"); // names key 7 in the DRAM segment
    after(&db);
    drop(db); // crash: the segment never reached the capacity tier
    let db = Db::open(&p.config(), opts()).expect("first recovery");
    db.seal_open_segments().expect("seal");
    drop(db); // crash again, before another checkpoint
    let db = Db::open(&p.config(), opts()).expect("second recovery");
    assert_eq!(db.stats().recovery_source, "checkpoint");
    db
}

#[test]
fn a_lost_segments_entries_do_not_point_into_its_successor() {
    let big = vec![b'x'; 3000];
    let db = twice(&[(1, &big), (1, b"short")], &|_| {});
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&b"the value"[..])
    );
    assert_eq!(
        db.get(&key(1)).expect("get").as_deref(),
        Some(&b"short"[..])
    );
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}

#[test]
fn a_deleted_key_stays_deleted() {
    let big = vec![b'x'; 3000];
    let db = twice(&[(1, &big), (1, b"short")], &|db| {
        assert!(db.delete(&key(7)).expect("delete"));
    });
    assert_eq!(db.get(&key(7)).expect("get"), None);
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}
