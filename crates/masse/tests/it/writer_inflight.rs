//! The writer keeps at most `Options::writer_inflight_bytes` of segment writes
//! in flight on a capacity device: a get queued behind a batch of segment
//! writes waits for all of it, and GC's moves seal segments in bursts (issue
//! 18, item 4: read p99.9 during GC). With no limit, the same burst goes as one
//! batch, which shows the test can tell the two apart.
use crate::common;
use common::*;
use masse::Db;
use std::sync::atomic::Ordering::SeqCst;

const SEG: u32 = 64 << 10;
const BAND: u64 = 4096 + 16 * SEG as u64;

/// The largest single `write_batch` while a stuck writer lets eight sealed
/// segments pile up behind it, then every record read back.
fn largest_batch(inflight: usize) -> usize {
    let fast = masse::device::MemDevice::new(64 << 20);
    let (cfg, cap) = scripted_tiered(&fast, 32 << 20, SEG, BAND);
    let opts = masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        writer_inflight_bytes: inflight,
        ..common::opts()
    };
    let db = Db::create(&cfg, opts).expect("create");
    let big = 30_000;
    // Seal one segment and hold the writer in its write …
    cap.block_writes.store(true, SeqCst);
    for i in 0..3 {
        db.put(&key(i), &value(i, 0, big)).expect("put");
    }
    cap.wait_blocked();
    // … while puts seal eight more (two 30 KB records per 64 KiB segment).
    for i in 3..20 {
        db.put(&key(i), &value(i, 0, big)).expect("put");
    }
    cap.block_writes.store(false, SeqCst);
    db.flush().expect("flush");
    for i in 0..20 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, big)[..]),
            "key {i}"
        );
    }
    db.close().expect("close");
    cap.max_batch.load(SeqCst)
}

#[test]
fn segment_writes_go_in_batches_of_at_most_the_limit() {
    let limit = 2 * SEG as usize;
    let most = largest_batch(limit);
    assert!(
        most > 0 && most <= limit,
        "a batch of {most} bytes with a {limit}-byte limit"
    );
}

#[test]
fn without_a_limit_the_piled_up_burst_goes_as_one_batch() {
    let most = largest_batch(0);
    assert!(
        most >= 6 * SEG as usize,
        "the test no longer builds a burst: largest batch {most} bytes"
    );
}
