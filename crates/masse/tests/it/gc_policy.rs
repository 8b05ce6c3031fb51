//! GC's victim choice: greedy (the default where GC moves share bands with
//! user writes; cost-benefit where they have their own) takes the band that wins back the
//! most space; cost-benefit prefers an old band with somewhat less dead space
//! over a young one whose records are still dying — and still does after a
//! reopen, when band ages come from log order.
use crate::common;
use common::*;
use masse::device::{Device, FileDevice, MemDevice, OpenOptions};
use masse::{Db, DeviceSpec, GcPolicy, Mode, Options, PoolConfig, TrimPolicy};
use std::sync::Arc;

/// The band currently open for writes.
fn open_band(db: &Db) -> Option<u32> {
    db.band_status()
        .iter()
        .find(|b| b.state == "open")
        .map(|b| b.band)
}

/// Write keys from `*next` on until a new band opens; returns the band they
/// filled and the keys written to it.
fn fill_band(db: &Db, next: &mut u64) -> (u32, Vec<u64>) {
    let mut keys = Vec::new();
    let band = loop {
        if let Some(b) = open_band(db) {
            break b;
        }
        db.put(&key(*next), &value(*next, 0, 200)).expect("put");
        *next += 1;
    };
    while open_band(db) == Some(band) {
        db.put(&key(*next), &value(*next, 0, 200)).expect("put");
        keys.push(*next);
        *next += 1;
    }
    // The key that opened the next band lives there, not in `band`.
    keys.pop();
    (band, keys)
}

fn overwrite(db: &Db, keys: &[u64]) {
    for &k in keys {
        db.put(&key(k), &value(k, 1, 200)).expect("overwrite");
    }
}

/// Two candidate bands and the keys written to each.
struct Candidates {
    /// 30 % dead, sealed long ago.
    old: u32,
    old_keys: Vec<u64>,
    /// 55 % dead, sealed just before the overwrites.
    young: u32,
    young_keys: Vec<u64>,
}

fn old_and_young(db: &Db) -> Candidates {
    let mut next = 0;
    fill_band(db, &mut next); // the first band starts with the pool's first writes
    let (old, old_keys) = fill_band(db, &mut next);
    for _ in 0..10 {
        fill_band(db, &mut next);
    }
    let (young, young_keys) = fill_band(db, &mut next);
    overwrite(db, &old_keys[..old_keys.len() * 3 / 10]);
    overwrite(db, &young_keys[..young_keys.len() * 55 / 100]);
    db.flush().expect("flush");
    Candidates {
        old,
        old_keys,
        young,
        young_keys,
    }
}

/// Every key of both candidate bands reads back its newest version (GC moved
/// the live ones of the band it emptied).
fn check_values(db: &Db, c: &Candidates) {
    let (o, y) = (&c.old_keys, &c.young_keys);
    let rewritten =
        |k: &u64| o[..o.len() * 3 / 10].contains(k) || y[..y.len() * 55 / 100].contains(k);
    for k in o.iter().chain(y.iter()) {
        let want = value(*k, rewritten(k) as u64, 200);
        assert_eq!(db.get(&key(*k)).expect("get"), Some(want), "key {k}");
    }
}

fn state(db: &Db, band: u32) -> &'static str {
    db.band_status()[band as usize].state
}

fn pool_with(p: &MemPool, policy: GcPolicy) -> Db {
    pool_trimming(&p.config(), policy, TrimPolicy::Auto)
}

fn pool_trimming(cfg: &PoolConfig, policy: GcPolicy, trim: TrimPolicy) -> Db {
    let o = Options {
        background_gc: false,
        gc_policy: policy,
        trim_freed_bands: trim,
        ..opts()
    };
    Db::create(cfg, o).expect("create")
}

fn small_pool() -> MemPool {
    MemPool::tiered(48 << 20, 32 << 20).with_geometry(16 << 10, 256 << 10)
}

/// One GC pass empties band `emptied` and leaves `kept` sealed; every value
/// of both bands still reads back.
fn gc_empties(db: &Db, c: &Candidates, emptied: u32, kept: u32) {
    assert!(db.gc_once().expect("gc"));
    assert_eq!(state(db, emptied), "free", "band {emptied} emptied");
    assert_eq!(state(db, kept), "sealed", "band {kept} kept");
    check_values(db, c);
}

#[test]
fn greedy_takes_the_band_with_most_dead_space() {
    let db = pool_with(&small_pool(), GcPolicy::Greedy);
    let c = old_and_young(&db);
    gc_empties(&db, &c, c.young, c.old);
    db.close().expect("close");
}

#[test]
fn cost_benefit_prefers_the_old_band() {
    let p = small_pool();
    let db = pool_with(&p, GcPolicy::CostBenefit);
    let c = old_and_young(&db);
    gc_empties(&db, &c, c.old, c.young);
    db.close().expect("close");
    // The moved records survive a reopen.
    let db = Db::open(&p.config(), opts()).expect("reopen");
    check_values(&db, &c);
    db.close().expect("close");
}

#[test]
fn cost_benefit_dates_bands_by_log_order_after_reopen() {
    let p = small_pool();
    let db = pool_with(&p, GcPolicy::CostBenefit);
    let c = old_and_young(&db);
    db.close().expect("close");
    // Ages are not persisted: after a reopen they come from the bands' order.
    let o = Options {
        background_gc: false,
        gc_policy: GcPolicy::CostBenefit,
        ..opts()
    };
    let db = Db::open(&p.config(), o).expect("reopen");
    gc_empties(&db, &c, c.old, c.young);
    db.close().expect("close");
}

/// `Options::trim_freed_bands` on a drive (here a memory device): `Auto` and
/// `Always` TRIM the band GC frees, `Never` does not; either way it is free
/// and every value reads back.
#[test]
fn freed_bands_are_trimmed_on_drives_unless_never() {
    for trim in [TrimPolicy::Auto, TrimPolicy::Always, TrimPolicy::Never] {
        let p = small_pool();
        let db = pool_trimming(&p.config(), GcPolicy::Greedy, trim);
        let c = old_and_young(&db);
        let before = p.caps[0].counters().snapshot().bytes_discarded;
        gc_empties(&db, &c, c.young, c.old);
        let trimmed = p.caps[0].counters().snapshot().bytes_discarded - before;
        assert_eq!(
            trimmed > 0,
            trim != TrimPolicy::Never,
            "{trim:?}: {trimmed} bytes discarded"
        );
        db.close().expect("close");
    }
}

/// On a pool file the TRIM is a hole punch: `Auto` skips it (it stalls gets
/// and gives back blocks `create` reserved), `Always` punches, and the host
/// file then holds fewer blocks.
#[test]
fn pool_files_are_punched_only_when_always() {
    for trim in [TrimPolicy::Auto, TrimPolicy::Always] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cap");
        let o = OpenOptions {
            create_size: Some(32 << 20),
            ..Default::default()
        };
        let cap = Arc::new(FileDevice::open(&path, &o).expect("open pool file"));
        assert!(cap.info().hole_punch_discard);
        let cfg = PoolConfig {
            fast: Some(DeviceSpec::Device(Arc::new(MemDevice::new(48 << 20)))),
            capacity: vec![DeviceSpec::Device(cap.clone())],
            mode: Some(Mode::Tiered),
            segment_size: Some(16 << 10),
            band_size: Some(256 << 10),
            ..Default::default()
        };
        let db = pool_trimming(&cfg, GcPolicy::Greedy, trim);
        let c = old_and_young(&db);
        let blocks = || std::os::unix::fs::MetadataExt::blocks(&path.metadata().expect("stat"));
        let (before, blocks_before) = (cap.counters().snapshot().bytes_discarded, blocks());
        gc_empties(&db, &c, c.young, c.old);
        let trimmed = cap.counters().snapshot().bytes_discarded - before;
        // A file system without hole punching (discard granularity 0) makes
        // `Always` a no-op too.
        let punched = trim == TrimPolicy::Always && cap.info().discard_granularity > 0;
        assert_eq!(trimmed > 0, punched, "{trim:?}: {trimmed} bytes discarded");
        assert_eq!(blocks() < blocks_before, punched, "{trim:?}: host blocks");
        db.close().expect("close");
    }
}
