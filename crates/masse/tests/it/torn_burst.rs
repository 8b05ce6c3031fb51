//! After an ordinary crash, a writer burst may leave a segment whose footer
//! never landed followed by an intact later segment of the same burst. That is
//! a torn write at the crash frontier, not damage: every record of it is still
//! on the pad. Recovery used to count it as a corruption and warn that the
//! summary was damaged (issue 12, defect 7).
use crate::common;
use common::*;
use masse::{Db, WriteBatch};
use std::sync::atomic::Ordering::SeqCst;

const SEG: u32 = 16 << 10;
const BAND: u64 = 4096 + 8 * SEG as u64;
const BIG: usize = 15_000;

#[test]
fn a_torn_segment_followed_by_an_intact_one_is_not_corruption() {
    let fast = masse::device::MemDevice::new(64 << 20);
    let (cfg, cap) = scripted_tiered(&fast, 16 << 20, SEG, BAND);
    // Each segment goes to the writer as soon as the next put closes it: the
    // held segment (`absorb_overwrites`, design.md §4.10) would keep the one
    // the second put closes in DRAM, and the writer would never get stuck.
    let opts = masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        absorb_overwrites: false,
        ..common::opts()
    };
    let db = Db::create(&cfg, opts.clone()).expect("create");
    let slot0 = db.geometry().data_start + db.geometry().band_header_size as u64;
    db.put(&key(0), &value(0, 0, BIG)).expect("put");
    // The writer gets stuck writing the segment the next put seals …
    cap.block_writes.store(true, SeqCst);
    db.put(&key(1), &value(1, 0, BIG)).expect("put");
    cap.wait_blocked();
    // … while one batch seals two more segments behind it.
    let mut b = WriteBatch::new();
    for i in 2..5 {
        b.put(&key(i), &value(i, 0, BIG)).expect("batch");
    }
    db.write(b).expect("batch (durable on the pad)");
    // The stuck burst completes and syncs; the next one (both segments) is
    // written but its sync never happens.
    cap.syncs_left.store(1, SeqCst);
    cap.block_writes.store(false, SeqCst);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.put(b"probe", b"x").is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never failed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(db);
    // Power cut: every unsynced block survives except the footer block of the
    // first segment of the failed burst.
    // (key 0 sealed in slot 0 by the stuck burst; keys 1–3 in slots 1–3, sealed
    // by the batch; key 4 in slot 4, open in DRAM.)
    let footer1 = slot0 + 2 * SEG as u64 - 4096;
    cap.mem.power_cut_with(|off| off != footer1);
    cap.syncs_left.store(-1, SeqCst);

    let db = Db::open(&cfg, opts).expect("recover");
    for i in 0..5 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, BIG)[..]),
            "key {i}"
        );
    }
    let st = db.stats();
    assert_eq!(st.corruptions, 0, "a torn write counted as corruption");
    assert!(
        st.recovery_warnings.is_empty(),
        "a torn write reported as damage: {:?}",
        st.recovery_warnings
    );
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}
