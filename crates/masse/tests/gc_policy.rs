//! GC's victim choice: greedy (the default) takes the band that wins back the
//! most space; cost-benefit prefers an old band with somewhat less dead space
//! over a young one whose records are still dying — and still does after a
//! reopen, when band ages come from log order.
mod common;
use common::*;
use masse::{Db, GcPolicy, Options};

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

/// Builds two candidate bands: `old` (30 % dead, sealed long ago) and `young`
/// (55 % dead, sealed just before the overwrites). Returns them.
fn old_and_young(db: &Db) -> (u32, u32) {
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
    (old, young)
}

fn state(db: &Db, band: u32) -> &'static str {
    db.band_status()[band as usize].state
}

fn pool_with(p: &MemPool, policy: GcPolicy) -> Db {
    let o = Options {
        background_gc: false,
        gc_policy: policy,
        ..opts()
    };
    Db::create(&p.config(), o).expect("create")
}

fn small_pool() -> MemPool {
    MemPool::tiered(48 << 20, 32 << 20).with_geometry(16 << 10, 256 << 10)
}

#[test]
fn greedy_takes_the_band_with_most_dead_space() {
    let db = pool_with(&small_pool(), GcPolicy::Greedy);
    let (old, young) = old_and_young(&db);
    assert!(db.gc_once().expect("gc"));
    assert_eq!(state(&db, young), "free", "greedy empties the young band");
    assert_eq!(state(&db, old), "sealed");
    db.close().expect("close");
}

#[test]
fn cost_benefit_prefers_the_old_band_also_after_reopen() {
    let p = small_pool();
    let db = pool_with(&p, GcPolicy::CostBenefit);
    let (old, young) = old_and_young(&db);
    db.close().expect("close");
    // Ages are not persisted: after a reopen they come from the bands' order.
    let o = Options {
        background_gc: false,
        gc_policy: GcPolicy::CostBenefit,
        ..opts()
    };
    let db = Db::open(&p.config(), o).expect("reopen");
    assert!(db.gc_once().expect("gc"));
    assert_eq!(state(&db, old), "free", "cost-benefit empties the old band");
    assert_eq!(state(&db, young), "sealed");
    for k in 0..100 {
        assert!(db.get(&key(k)).expect("get").is_some(), "key {k} kept");
    }
    db.close().expect("close");
}
