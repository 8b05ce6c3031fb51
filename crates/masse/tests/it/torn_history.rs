//! Torn bursts across histories (issue 44): a pool without a fast tier
//! crashes in the middle of a group commit, recovers, lets GC free bands,
//! and crashes again. The judgement recovery made about the torn burst must
//! hold at every later open, and GC freeing a band must never look like a
//! tear. Each test failed on main 0dc2daf.
use crate::common;
use common::*;
use masse::device::{Device, MemDevice};
use masse::{Db, DeviceSpec, Mode, Options, PoolConfig, WriteBatch};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

const SEG: u32 = 16 << 10;
/// A band header block and eight slots (the fewest a band may have).
const BAND: u64 = 4096 + 8 * SEG as u64;
/// Three such records fill a segment.
const V: usize = 5000;

fn pool() -> (PoolConfig, Arc<Scripted>) {
    let dev = Scripted::new(MemDevice::new(16 << 20));
    let cfg = PoolConfig {
        capacity: vec![DeviceSpec::Device(dev.clone() as Arc<dyn Device>)],
        mode: Some(Mode::CapacityOnly),
        segment_size: Some(SEG),
        band_size: Some(BAND),
        ..Default::default()
    };
    (cfg, dev)
}

fn options() -> Options {
    Options {
        background_gc: false,
        checkpoint_interval: 0,
        ..opts()
    }
}

fn k(name: &str, i: u64) -> Vec<u8> {
    format!("{name}{i:04}").into_bytes()
}

fn put_all(db: &Db, name: &str, r: std::ops::Range<u64>, ver: u64) {
    for i in r {
        db.put(&k(name, i), &value(i, ver, V)).expect("put");
    }
}

fn expect_all(db: &Db, name: &str, r: std::ops::Range<u64>, ver: u64) {
    for i in r {
        assert_eq!(
            db.get(&k(name, i)).expect("get").as_deref(),
            Some(&value(i, ver, V)[..]),
            "{name}{i}: an acknowledged write was lost"
        );
    }
}

/// The batch `b0 b1 b2` (its start fits the open segment, its end opens the
/// next one) is written but its sync never happens; the power cut then keeps
/// every block of the burst except the one with `b0`'s value. Returns with
/// the pool crashed.
fn tear_batch(db: Db, dev: &Scripted) {
    // Drain the writer first (the held segment included), so that as far as
    // the test can arrange it the batch's burst is the one to meet the
    // failing sync.
    db.flush().expect("flush");
    let mut b = WriteBatch::new();
    for i in 0..3 {
        b.put(&k("b", i), &value(100 + i, 0, V)).expect("batch");
    }
    dev.syncs_left.store(0, SeqCst);
    let err = db
        .write(b)
        .expect_err("the batch was acknowledged without a sync");
    // Usually the batch's burst reaches the device and the cut loses only
    // `b0`'s block. In a few runs in a hundred the writer meets the failing
    // sync with an earlier burst and the batch is never written: the crash
    // then loses it whole, a weaker case the checks still hold for (found by
    // a CI run; what that earlier burst holds is not yet understood).
    drop(db);
    match find_bytes(&dev.mem, &value(100, 0, V)) {
        Some(at) => dev.mem.power_cut_with(|off| off != at & !4095),
        None => {
            eprintln!("tear_batch: the batch was not written ({err}); it is lost whole");
            dev.mem.power_cut_with(|_| true)
        }
    }
    dev.syncs_left.store(-1, SeqCst);
}

fn expect_no_batch(db: &Db) {
    for i in 0..3 {
        assert_eq!(
            db.get(&k("b", i)).expect("get"),
            None,
            "b{i}: a record of a torn, never acknowledged batch was applied"
        );
    }
}

fn expect_quiet(db: &Db) {
    let st = db.stats();
    assert_eq!(st.corruptions, 0, "{:?}", st.recovery_warnings);
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
}

fn band_state(db: &Db, band: u32) -> &'static str {
    db.band_status()
        .into_iter()
        .find(|b| b.band == band)
        .map(|b| b.state)
        .unwrap_or("?")
}

/// GC until `band` is free (each pass frees the best victim).
fn gc_until_free(db: &Db, band: u32) {
    for _ in 0..8 {
        if band_state(db, band) == "free" {
            return;
        }
        db.gc_once().expect("gc");
    }
    assert_eq!(band_state(db, band), "free", "GC did not free band {band}");
}

/// Issue 44, defect 1: after a torn burst, GC of the next run moves live
/// records (keeping their old seqs) and frees their band; the next crash
/// must not take those moves for part of the torn burst.
#[test]
fn gc_moves_after_a_torn_burst_survive_the_next_crash() {
    let (cfg, dev) = pool();
    let db = Db::create(&cfg, options()).expect("create");
    put_all(&db, "k", 0..24, 0); // band 0, full
    put_all(&db, "k", 0..21, 1); // band 0 is now mostly garbage; band 1 slots 0-6
    put_all(&db, "x", 0..2, 0); // band 1's last slot holds two records
    tear_batch(db, &dev);

    let db = Db::open(&cfg, options()).expect("recover");
    expect_no_batch(&db);
    expect_quiet(&db);
    gc_until_free(&db, 0); // moves k21..k23, before any user write
    drop(db);

    let db = Db::open(&cfg, options()).expect("recover again");
    expect_all(&db, "k", 0..21, 1);
    expect_all(&db, "k", 21..24, 0);
    expect_all(&db, "x", 0..2, 0);
    expect_no_batch(&db);
    expect_quiet(&db);
    db.close().expect("close");
}

/// Issue 44, defect 3: the end of a torn batch, in the first segment of the
/// next band, stays unapplied after GC frees the band that held its start.
#[test]
fn a_torn_batch_stays_void_after_gc_frees_the_band_of_its_start() {
    let (cfg, dev) = pool();
    let db = Db::create(&cfg, options()).expect("create");
    put_all(&db, "k", 0..24, 0); // band 0
    put_all(&db, "p", 0..23, 0); // band 1: seven slots and two records
    tear_batch(db, &dev); // b0 b1 in band 1's last slot, b2 opens band 2

    let db = Db::open(&cfg, options()).expect("recover");
    expect_no_batch(&db);
    put_all(&db, "p", 0..23, 1); // band 1 is all garbage now
    gc_until_free(&db, 1);
    drop(db);

    for _ in 0..2 {
        let db = Db::open(&cfg, options()).expect("recover again");
        expect_no_batch(&db);
        expect_all(&db, "k", 0..24, 0);
        expect_all(&db, "p", 0..23, 1);
        expect_quiet(&db);
        drop(db);
    }
}

/// Issue 44, defect 2: a multi-slot record seals a band early; the band
/// that took it is later freed by GC. An ordinary crash must not turn the
/// segment that followed it into a "torn burst".
#[test]
fn a_band_gc_freed_after_an_early_seal_is_not_a_tear() {
    let (cfg, _dev) = pool();
    let db = Db::create(&cfg, options()).expect("create");
    put_all(&db, "a", 0..19, 0); // band 0: six slots full, the seventh one record
    let big = value(7, 0, 40_000); // three slots: does not fit band 0's last one
    db.put(b"R", &big).expect("put R");
    put_all(&db, "c", 0..16, 0); // band 1's slots 3-7, then band 2
    db.put(b"R", b"small now").expect("overwrite R");
    put_all(&db, "c", 0..15, 1); // band 1 is all garbage
    gc_until_free(&db, 1);
    put_all(&db, "d", 0..3, 0);
    drop(db); // an ordinary crash: every write was acknowledged

    let db = Db::open(&cfg, options()).expect("recover");
    expect_all(&db, "a", 0..19, 0);
    expect_all(&db, "c", 0..15, 1);
    expect_all(&db, "c", 15..16, 0);
    expect_all(&db, "d", 0..3, 0);
    assert_eq!(
        db.get(b"R").expect("get").as_deref(),
        Some(&b"small now"[..])
    );
    expect_quiet(&db);
    db.close().expect("close");
}

/// The pad's head (virtual offset) from `Db::debug_state`.
fn pad_head(db: &Db) -> u64 {
    let s = db.debug_state();
    let at = s.find("pad head ").expect("pad state") + "pad head ".len();
    s[at..]
        .split(' ')
        .next()
        .and_then(|x| x.parse().ok())
        .expect("pad head")
}

/// Issue 44, defect 4 (tiered): the wrap marker at the ring's end and the
/// next lap's first batch go out as one unsynced pair; a power cut that keeps
/// the batch and loses the marker is an ordinary crash, not pad damage.
#[test]
fn a_lost_wrap_marker_is_not_pad_damage() {
    let p = MemPool::tiered(48 << 20, 64 << 20);
    let o = Options {
        background_gc: false,
        checkpoint_interval: 0,
        ..opts()
    };
    let db = Db::create(&p.config(), o.clone()).expect("create");
    let (base, size) = (db.geometry().pad_offset, db.geometry().pad_size);
    let mut marker = None;
    let mut last = 0;
    for i in 0..4 * (size / 60_000) {
        let before = pad_head(&db);
        db.put(&key(i % 24), &value(i, 0, 60_000)).expect("put");
        last = i;
        if pad_head(&db) > size {
            marker = Some(before);
            break;
        }
    }
    let marker = marker.expect("the pad never wrapped");
    drop(db); // crash right after the pair
              // The marker never landed; that end of the ring was never written before.
    let fast = p.fast.as_ref().expect("fast");
    let blk = masse::device::AlignedBuf::new(4096);
    fast.write_at(&blk, base + marker % size).expect("write");
    fast.sync().expect("sync");

    let db = Db::open(&p.config(), o).expect("recover");
    let st = db.stats();
    assert_eq!(st.corruptions, 0, "{:?}", st.recovery_warnings);
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
    assert!(
        st.recovery_notes.iter().any(|n| n.contains("wrap marker")),
        "{:?}",
        st.recovery_notes
    );
    assert_eq!(
        db.get(&key(last % 24)).expect("get").as_deref(),
        Some(&value(last, 0, 60_000)[..]),
        "the batch after the marker was lost"
    );
    db.close().expect("close");
}
