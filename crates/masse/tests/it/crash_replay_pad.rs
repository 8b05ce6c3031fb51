//! After a crash, pad replay places again only what the pool does not
//! already hold (engine/replay.rs). A user segment left open while GC kept
//! moving records holds the pad's tail at its first batch; replay used to
//! place every GC move written since a second time, and a pool near full
//! could then fail to open with "no free band" (design.md §12).
use crate::common;
use common::*;
use masse::Db;

fn setup(p: &MemPool, o: &masse::Options, n: u64) {
    let db = Db::create(&p.config(), o.clone()).expect("create");
    for i in 0..n {
        db.put(&key(i), &value(i, 0, 200)).expect("fill");
    }
    // Garbage in every band, so GC has victims to move records out of.
    for i in (0..n).step_by(2) {
        db.put(&key(i), &value(i, 1, 200)).expect("overwrite");
    }
    // The user stream's open segment takes records, then stays open while
    // GC writes batch after batch of moves behind it.
    db.put(b"user write", b"one").expect("put");
    db.put(&key(1), b"overwritten while open").expect("put");
    for _ in 0..4 {
        db.gc_once().expect("gc");
    }
    assert!(db.stats().gc_bytes_moved > 0, "GC must have moved records");
    // The last writes: a key GC moved, overwritten and put back as it was
    // (its last pad record equals what the tier holds), and a delete.
    db.put(&key(3), b"briefly").expect("put");
    db.put(&key(3), &value(3, 0, 200)).expect("put");
    assert!(db.delete(&key(5)).expect("delete"));
    drop(db); // a crash: the user segment was never written
}

#[test]
fn a_crash_replays_only_what_the_tier_lacks() {
    let p = MemPool::tiered(48 << 20, 24 << 20).with_geometry(32 << 10, 512 << 10);
    let o = masse::Options {
        background_gc: false,
        checkpoint_on_close: false,
        ..opts()
    };
    let n = 20_000u64;
    setup(&p, &o, n);
    let db = Db::open(&p.config(), o.clone()).expect("reopen");
    let st = db.stats();
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
    assert_eq!(st.corruptions, 0);
    // Placed again: the user writes whose segment was lost (at most these 6
    // and the GC moves still in the GC stream's open segment).
    assert!(
        st.recovery_pad_skipped > 1000,
        "GC moves already on the tier were placed again: {}",
        st.to_text()
    );
    assert!(
        st.recovery_pad_records < st.recovery_pad_skipped / 4,
        "replayed {} records, skipped {}",
        st.recovery_pad_records,
        st.recovery_pad_skipped
    );
    eprintln!(
        "replayed {} records, skipped {}",
        st.recovery_pad_records, st.recovery_pad_skipped
    );
    verify(&db, n);
    assert!(db.check().expect("check").is_clean());
    // Crash again at once: what was skipped must still be there.
    drop(db);
    let db = Db::open(&p.config(), o).expect("reopen after a second crash");
    verify(&db, n);
    db.close().expect("close");
}

fn verify(db: &Db, n: u64) {
    for i in 0..n {
        let want = match i {
            1 => Some(b"overwritten while open".to_vec()),
            5 => None,
            _ => Some(value(i, 1 - i % 2, 200)),
        };
        assert_eq!(db.get(&key(i)).expect("get"), want, "key {i}");
    }
    assert_eq!(
        db.get(b"user write").expect("get").as_deref(),
        Some(&b"one"[..])
    );
}
