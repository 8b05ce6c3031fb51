//! Resumable scans (`Index::scan_shard`, `Db::scan`, `Db::key_count`): the order is
//! (shard, fingerprint) whatever the table's state, and a scan interleaved with
//! writes, deletes, GC and reopen returns every key present throughout.
use crate::common;
use common::*;
use masse::index::{fingerprint, Index};
use masse::Db;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};

/// Digest with the given high half (shard bits on top) and fingerprint.
fn dg(hi: u64, fp: u64) -> u128 {
    ((hi as u128) << 64) | fp as u128
}

/// The index's identity of a digest: (shard, fingerprint).
fn ident(d: u128, shards: usize) -> (usize, u64) {
    let bits = shards.trailing_zeros();
    let shard = if bits == 0 {
        0
    } else {
        ((d >> 64) as u64 >> (64 - bits)) as usize
    };
    (shard, fingerprint(d))
}

/// What `scan_shard(shard, from)` must visit, from a model of the index.
fn expected(model: &BTreeMap<(usize, u64), u64>, shard: usize, from: u64) -> Vec<(u64, u64)> {
    model
        .range((shard, from)..=(shard, u64::MAX))
        .map(|((_, fp), l)| (*fp, *l))
        .collect()
}

fn visited(ix: &Index, shard: usize, from: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    ix.scan_shard(shard, from, |fp, l| {
        v.push((fp, l));
        true
    });
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random inserts and removes, fingerprints crowded near 0 and near u64::MAX so
    /// that clusters wrap around the table's end; every `from` is checked.
    #[test]
    fn scan_shard_is_fingerprint_order(
        shards in prop_oneof![Just(1usize), Just(4)],
        ops in proptest::collection::vec((any::<bool>(), 0u8..3, any::<u64>(), 0u64..4), 1..400),
        froms in proptest::collection::vec(any::<u64>(), 1..8),
    ) {
        let ix = Index::with_shards(shards, 0);
        let mut model = BTreeMap::new();
        for (i, (ins, region, x, hi)) in ops.iter().enumerate() {
            let fp = match region { 0 => x % 64 + 1, 1 => u64::MAX - x % 64, _ => *x };
            let d = dg(hi << 62, fp);
            if *ins {
                ix.insert(d, i as u64);
                model.insert(ident(d, shards), i as u64);
            } else {
                ix.remove(d);
                model.remove(&ident(d, shards));
            }
        }
        for shard in 0..shards {
            let mut all = froms.clone();
            all.extend([0, 1, u64::MAX]);
            all.extend(model.keys().map(|k| k.1));
            all.extend(model.keys().map(|k| k.1.wrapping_add(1)));
            for from in all {
                prop_assert_eq!(visited(&ix, shard, from), expected(&model, shard, from));
            }
        }
    }
}

#[test]
fn scan_shard_stops_when_asked() {
    let ix = Index::with_shards(1, 0);
    for i in 1..=100u64 {
        ix.insert(dg(0, i * 1000), i);
    }
    let mut seen = Vec::new();
    ix.scan_shard(0, 50_500, |fp, _| {
        seen.push(fp);
        seen.len() < 3
    });
    assert_eq!(seen, vec![51_000, 52_000, 53_000]);
}

/// Every key of the scan, driving it to completion with `between` run after each page.
fn full_scan(db: &Db, count: usize, mut between: impl FnMut(usize)) -> Vec<Vec<u8>> {
    let mut cursor = 0;
    let mut keys = Vec::new();
    for page in 0.. {
        let p = db.scan(cursor, count).expect("scan");
        keys.extend(p.keys);
        if p.next == 0 {
            return keys;
        }
        assert!(p.next > cursor || page == 0, "the cursor moves forward");
        cursor = p.next;
        between(page);
    }
    unreachable!()
}

#[test]
fn empty_pool_scans_to_nothing() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    assert_eq!(db.scan(0, 10).expect("scan"), masse::ScanPage::default());
    assert_eq!(db.key_count(), 0);
}

#[test]
fn scan_returns_each_key_once_and_counts_match() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..3000 {
        db.put(&key(i), &value(i, 0, 40)).expect("put");
    }
    for i in (0..3000).step_by(3) {
        db.delete(&key(i)).expect("delete");
    }
    let keys = full_scan(&db, 17, |_| {});
    let set: HashSet<_> = keys.iter().cloned().collect();
    assert_eq!(set.len(), keys.len(), "no key twice");
    let want: HashSet<_> = (0..3000).filter(|i| i % 3 != 0).map(key).collect();
    assert_eq!(set, want);
    assert_eq!(db.key_count(), 2000);
}

/// Keys present for the whole scan are all returned although, between pages,
/// other keys are inserted and deleted, present keys are overwritten (moving their
/// records), GC runs and the pool is checkpointed.
#[test]
fn cursor_survives_concurrent_writes_and_gc() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(64 << 10, 1 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    let stable: Vec<u64> = (0..2000).collect();
    for &i in &stable {
        db.put(&key(i), &value(i, 0, 200)).expect("put");
    }
    for i in 10_000..11_000 {
        db.put(&key(i), &value(i, 0, 200)).expect("put");
    }
    let mut next_new = 20_000;
    let keys = full_scan(&db, 25, |page| {
        for j in 0..40 {
            db.put(&key(next_new), &value(next_new, 0, 200))
                .expect("new key");
            next_new += 1;
            let s = (page as u64 * 40 + j) % 2000;
            db.put(&key(s), &value(s, page as u64 + 1, 200))
                .expect("overwrite");
        }
        for d in 0..10 {
            db.delete(&key(10_000 + (page as u64 * 10 + d) % 1000))
                .expect("delete");
        }
        if page % 5 == 0 {
            while db.gc_once().expect("gc") {}
            db.checkpoint().expect("checkpoint");
        }
    });
    let got: HashSet<_> = keys.into_iter().collect();
    for &i in &stable {
        assert!(
            got.contains(&key(i)),
            "key {i} present throughout was not returned"
        );
    }
    assert!(db.stats().gc_bands_freed > 0, "GC ran during the scan");
}

/// A cursor is a position, not a handle: it stays valid across a restart.
#[test]
fn cursor_survives_reopen() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..500 {
        db.put(&key(i), &value(i, 0, 30)).expect("put");
    }
    let first = db.scan(0, 100).expect("scan");
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("open");
    let mut keys = first.keys;
    let mut cursor = first.next;
    while cursor != 0 {
        let pg = db.scan(cursor, 100).expect("scan");
        keys.extend(pg.keys);
        cursor = pg.next;
    }
    let set: HashSet<_> = keys.into_iter().collect();
    assert_eq!(set, (0..500).map(key).collect::<HashSet<_>>());
}
