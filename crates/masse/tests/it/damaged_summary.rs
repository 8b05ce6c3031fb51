//! A damaged segment summary in the middle of a band does not end recovery of
//! that band: its records are parsed instead, later segments are replayed, and
//! the problem is reported (a note: every record was recovered, and a seal
//! torn at a crash looks the same).
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::Db;

#[test]
fn recovery_parses_past_a_damaged_summary() {
    let p = MemPool::capacity_only(32 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..3000 {
        db.put(&key(i), &value(i, 0, 150)).expect("put");
    }
    let g = db.geometry().clone();
    drop(db); // crash: recovery must scan (no checkpoint)
              // Damage the footer of the first segment of the first band.
    let dev = &p.caps[0];
    let seg_end = g.data_start + g.band_header_size as u64 + g.segment_size as u64;
    let mut b = AlignedBuf::new(4096);
    dev.read_at(&mut b, seg_end - 4096).expect("read");
    b[4096 - 30] ^= 0xff;
    dev.write_at(&b, seg_end - 4096).expect("write");
    let db = Db::open(&p.config(), opts()).expect("recover");
    let st = db.stats();
    assert_eq!(st.recovery_source, "scan");
    assert!(
        st.recovery_notes
            .iter()
            .any(|w| w.contains("summary unreadable")),
        "{:?}",
        st.recovery_notes
    );
    for i in 0..3000 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 150)[..]),
            "key {i}"
        );
    }
    db.close().expect("close");
}
