//! A clean close leaves nothing on the write pad for the next open to replay.
//! The close used to seal only the GC stream's open segment. A user segment
//! that stayed open while GC kept moving records held the pad's tail at its
//! first batch, so the next open replayed every GC batch written since: each
//! moved record was placed a second time, and a pool near full then failed
//! to open with "no free band" (`gc_churn::tiered_90_percent`, about 1 run in
//! 150 under load).
use crate::common;
use common::*;
use masse::Db;

#[test]
fn a_clean_close_leaves_nothing_to_replay() {
    let p = MemPool::tiered(48 << 20, 24 << 20).with_geometry(32 << 10, 512 << 10);
    let o = masse::Options {
        background_gc: false,
        ..opts()
    };
    let db = Db::create(&p.config(), o.clone()).expect("create");
    let n = 20_000u64;
    for i in 0..n {
        db.put(&key(i), &value(i, 0, 200)).expect("fill");
    }
    // Garbage in every band, so GC has victims to move records out of.
    for i in (0..n).step_by(2) {
        db.put(&key(i), &value(i, 1, 200)).expect("overwrite");
    }
    // The user stream's open segment takes a record, then stays open while
    // GC writes batch after batch of moves behind it.
    db.put(b"last user write", b"x").expect("put");
    for _ in 0..4 {
        db.gc_once().expect("gc");
    }
    assert!(db.stats().gc_bytes_moved > 0, "GC must have moved records");
    db.close().expect("close");
    let db = Db::open(&p.config(), o).expect("reopen");
    let st = db.stats();
    assert_eq!(
        st.recovery_pad_records,
        0,
        "a clean close left records on the pad: {}",
        st.to_text()
    );
    for i in 0..n {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 1 - i % 2, 200)[..]),
            "key {i}"
        );
    }
    assert_eq!(
        db.get(b"last user write").expect("get").as_deref(),
        Some(&b"x"[..])
    );
    db.close().expect("close");
}
