//! `Options::gc_duty`: a background GC pass rests between segments while
//! free bands are not short, and GC still keeps up: space is reclaimed and
//! every value reads back. At duty 1.0 it never rests (the default is 0.5).
//! A close while a pass runs is clean.
use crate::common;
use common::*;
use masse::{Db, Options, Stats};
use std::time::{Duration, Instant};

/// Overwrite churn on a small pool until background GC has rested (or, for
/// `duty` 1, for as many rounds); the stats at the end.
fn churn(duty: f64) -> Stats {
    let p = MemPool::tiered(64 << 20, 32 << 20).with_geometry(16 << 10, 256 << 10);
    let (db, ver) = churn_on(&p, duty);
    check_values(&db, &ver, 7);
    let st = db.stats();
    db.close().expect("close");
    st
}

/// Every `step`-th key reads back at its newest version `ver`.
fn check_values(db: &Db, ver: &[u64], step: usize) {
    for (i, v) in ver.iter().enumerate().step_by(step) {
        let want = value(i as u64, *v, 200);
        assert_eq!(
            db.get(&key(i as u64)).expect("get").as_deref(),
            Some(&want[..]),
            "key {i}"
        );
    }
}

/// The churn of [`churn`] on pool `p`; the open database and each key's
/// newest version.
fn churn_on(p: &MemPool, duty: f64) -> (Db, Vec<u64>) {
    let o = Options {
        gc_duty: duty,
        ..opts()
    };
    let db = Db::create(&p.config(), o).expect("create");
    let n = 60_000u64; // ≈ 60 % of the capacity tier live
    let mut ver = vec![0u64; n as usize];
    for i in 0..n {
        db.put(&key(i), &value(i, 0, 200)).expect("fill");
    }
    let (mut x, deadline) = (7u64, Instant::now() + Duration::from_secs(60));
    for _round in 0..40 {
        for _ in 0..n / 4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % n;
            ver[i as usize] += 1;
            db.put(&key(i), &value(i, ver[i as usize], 200))
                .expect("overwrite");
        }
        // Give the maintenance thread (20 ms ticks) time to work.
        std::thread::sleep(Duration::from_millis(100));
        if (duty < 1.0 && db.stats().gc_rest_us > 0) || Instant::now() > deadline {
            break;
        }
    }
    (db, ver)
}

/// Closing while a background pass is under way (at a tiny duty it rests
/// 50 ms per segment, so it is mid-band at the close) stops the pass and
/// closes cleanly: the pass used to find the writer gone, fail the database
/// ("GC failed: … closing") and leave the pool to crash recovery.
#[test]
fn a_close_during_a_gc_pass_is_clean() {
    let p = MemPool::tiered(64 << 20, 32 << 20).with_geometry(16 << 10, 256 << 10);
    let (db, ver) = churn_on(&p, 1e-300);
    assert!(db.stats().gc_rest_us > 0, "a pass was resting");
    db.close().expect("a clean close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    let st = db.stats();
    assert!(
        st.recovery_source.ends_with("(clean shutdown)"),
        "{}",
        st.to_text()
    );
    assert!(st.recovery_warnings.is_empty(), "{}", st.to_text());
    check_values(&db, &ver, 3);
    db.close().expect("close");
}

#[test]
fn background_gc_rests_only_when_asked() {
    let paced = churn(0.5);
    assert!(paced.gc_bands_freed > 0, "GC ran: {}", paced.to_text());
    assert!(
        paced.gc_rest_us > 0,
        "a paced GC rested: {}",
        paced.to_text()
    );
    let flat = churn(1.0);
    assert!(flat.gc_bands_freed > 0, "GC ran: {}", flat.to_text());
    assert_eq!(flat.gc_rest_us, 0, "GC at duty 1 never rests");
}

/// A tiny duty asks for rests far beyond any `Duration`: they are capped
/// (50 ms), not a panic, and GC still frees bands.
#[test]
fn a_tiny_duty_rests_a_bounded_time() {
    let st = churn(1e-300);
    assert!(st.gc_bands_freed > 0, "GC ran: {}", st.to_text());
    assert!(st.gc_rest_us > 0, "it rested: {}", st.to_text());
}
