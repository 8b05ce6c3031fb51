//! The in-DRAM hash index (MASSé §2.5): key digest → record location.
//!
//! # What is stored
//!
//! A key is known to the index only by its 128-bit [`Digest`],
//! `xxh3_128(key)` (see [`digest`](fn@digest); XXH3 is specified
//! bit-exactly, so digests are stable across platforms and crate versions).
//! The index maps a digest to a *location*, an opaque `u64` chosen by the
//! engine: the index never interprets it, and two locations are the same iff
//! their `u64`s are equal.
//!
//! An entry is the digest's *fingerprint* `fp` — its low 64 bits, 0 remapped
//! to 1 — and its location. The high 64 bits of the digest are *not* stored;
//! their top `log2(S)` bits select one of `S` shards (a power of two, default
//! [`DEFAULT_SHARDS`]) and are implied by which shard holds the entry.
//!
//! # Layout
//!
//! Each shard sits behind its own [`parking_lot::RwLock`] (cache-line aligned,
//! so locks of different shards never share a line): readers of different
//! shards never contend, a writer locks one shard, and growing a shard (a
//! rehash) happens under that shard's write lock only, touching 1/S of the
//! index. A shard is one flat table of *any* capacity `cap` (not a power of
//! two), open addressing with linear probing and wrap-around at the end.
//!
//! **Quotienting.** With `q = ⌊log2 cap⌋`, the top `q` bits of `fp` are its
//! quotient and pick the home slot `(quot · cap) >> q` (one multiply; distinct
//! quotients get distinct homes because `cap ≥ 2^q`); only the other `64 − q`
//! bits, the remainder, are stored. Each slot also stores how far the entry
//! sits from its home (7 bits, up to 126), which is how the quotient is
//! recovered — home = slot − displacement — when the shard grows and when
//! backward-shift deletion must know whether an entry may move back. A slot
//! is `7 + (64 − q) + loc_bits` bits rounded up to bytes: the engine passes
//! the width of its locations ([`IndexOptions::loc_bits`], 35 + log2 of the
//! pool's segment count), so at 10^8 keys (q = 16) in a pool of up to 2^22
//! segments a slot is 14 bytes, not 16. The rare entry that would be displaced
//! more than 126 slots, or whose location is wider, goes to a small per-shard
//! overflow map instead (about 2 in 10^6 entries at load 0.95; none in the
//! 10^8-key runs of `examples/index_mem.rs`).
//!
//! Clusters are kept ordered by (home slot, remainder), i.e. by `fp` — the
//! Robin Hood / Amble–Knuth ordered variant of linear probing — so a lookup of
//! an absent key stops as soon as it meets an entry that would sort after it,
//! instead of running to the end of the cluster; this is what makes a high
//! load factor affordable. Deletion is by backward shift: no tombstones, and
//! the table after any sequence of operations is exactly as if the surviving
//! keys had been inserted in fp order.
//!
//! A shard grows by [`DEFAULT_GROWTH`] (×1.125) when its load would exceed
//! [`DEFAULT_MAX_LOAD`] (0.95). Because keys are spread uniformly, all shards
//! fill at the same pace; if they all had the same capacity they would all
//! grow at the same moment and the whole index would swing between load 0.95
//! and 0.84. Instead each shard's capacities follow its own geometric ladder
//! `min_cap · g^(k + i/S)`, staggered by its shard number `i`, so at any key
//! count the shards' loads are spread evenly (in log scale) over
//! `[max_load/g, max_load]` and the index as a whole costs a steady
//! `slot · (g − 1) / (max_load · ln g)` bytes/key: 15.6 with 14-byte slots
//! (×1.25 would give 16.5; its fewer rehashes insert faster). An index built
//! with [`Index::with_capacity`] for the number of keys it will hold is sized
//! to just under `max_load` up front (≈ 14.9 bytes/key at 10^8 keys) and does
//! not grow. Measured figures are in `docs/benchmarks.md` ("Index DRAM per key").

//! # Why two keys are (practically) never confused
//!
//! Two distinct keys A and B are confused — a `get(B)` answers A's location, an
//! `insert(B)` overwrites A's entry — iff they land in the same shard and have
//! the same stored fingerprint, i.e. iff the top `log2 S` bits of the high
//! halves of their digests *and* the low 64 bits of their digests are equal.
//! For a good 128-bit hash these are `64 + log2 S` independent uniform bits, so
//! with `n` keys the expected number of confused pairs is
//!
//! ```text
//! E ≈ n² / 2 / (S · 2^64)
//!   S = 1024 (default):  n = 10^8 → 2.7e-7     n = 10^9 → 2.7e-5
//!   S = 1:               n = 10^8 → 2.7e-4     n = 10^9 → 2.7e-2
//! ```
//!
//! i.e. with the default shard count, a billion-key index has about a 1 in
//! 37 000 chance of containing a single confused pair at all. No device read is
//! needed on put. (A confusion on get would also be caught by the engine if it
//! compares the key stored in the record it reads.)
//!
//! Quotienting does not change this: the table stores `(remainder,
//! displacement)` where it stored `fp`, and since the home is determined by the
//! quotient and vice versa, two entries have equal `(slot − displacement,
//! remainder)` exactly when their fingerprints are equal. The overflow map is
//! keyed by the full `fp`. The identity stays `64 + log2 S` bits.
//!
//! # Checkpoints
//!
//! [`Index::shard_image`] / [`Index::load_shard_image`] save and restore one
//! shard bit-exactly (geometry, every packed slot in place, the overflow
//! map). Loading validates
//! the image, including the cluster order that lookups rely on, so a corrupt
//! image is an [`IndexImageError`], never a panic or a silently wrong index. An
//! image is only meaningful in an index with the same shard count as the one it
//! was taken from (the shard number is implied, not stored).
//!
//! # Where the code is
//!
//! This file holds the public [`Index`] handle: its shards, locks and growth
//! policy. `digest` turns keys into digests and fingerprints, `table` is one
//! shard's packed open-addressing table, `shard` a table plus its overflow
//! map, and `image` saves and restores a shard for checkpoints.

mod digest;
mod image;
mod shard;
mod table;

use std::fmt;

use parking_lot::RwLock;

pub use digest::{canonical, digest, fingerprint, Digest, KeyDigest, MAX_SHARDS};
pub use image::IndexImageError;
use shard::{Shard, Spot};
use table::{max_len_for, min_cap_for};

/// Default number of shards of [`Index::new`] and [`Index::with_capacity`].
pub const DEFAULT_SHARDS: usize = 1024;

/// Default maximum load factor of a shard: it grows before exceeding it.
pub const DEFAULT_MAX_LOAD: f64 = 0.95;

/// Default growth factor of a shard's capacity.
pub const DEFAULT_GROWTH: f64 = 1.125;

/// Default width of a location: any `u64`.
pub const DEFAULT_LOC_BITS: u32 = 64;

/// Tuning knobs of an [`Index`]; see [`Index::with_options`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexOptions {
    /// Number of shards; rounded up to a power of two, clamped to
    /// `[1, MAX_SHARDS]` (2^16).
    pub shards: usize,
    /// Number of keys to size the tables for up front (0: grow from empty).
    pub expected_keys: usize,
    /// Maximum load factor of a shard, clamped to `[0.5, 0.98]`.
    pub max_load: f64,
    /// Growth factor of a shard's capacity, clamped to `[1.05, 4.0]`.
    pub growth: f64,
    /// Width of the locations this index will mostly hold, clamped to
    /// `[1, 64]`: every location below `2^loc_bits` is stored in the table
    /// slot itself, so narrower locations make smaller slots. A wider one is
    /// still stored, exactly, in the shard's overflow map (slower, larger).
    pub loc_bits: u32,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            shards: DEFAULT_SHARDS,
            expected_keys: 0,
            max_load: DEFAULT_MAX_LOAD,
            growth: DEFAULT_GROWTH,
            loc_bits: DEFAULT_LOC_BITS,
        }
    }
}

/// Occupancy and probe-length figures of an [`Index`] (see [`Index::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IndexStats {
    /// Number of live entries.
    pub len: usize,
    /// Total number of slots over all shards, empty ones included.
    pub capacity: usize,
    /// Number of shards.
    pub shards: usize,
    /// Largest distance of an entry from its home slot (a hit probes this + 1 slots).
    pub max_displacement: usize,
    /// Mean distance of an entry from its home slot.
    pub mean_displacement: f64,
    /// Entries kept in the shards' overflow maps rather than their tables.
    pub overflow: usize,
    /// Bytes per table slot of the largest table (they shrink as tables grow).
    pub max_slot_bytes: usize,
}

/// A shard behind its lock, alone on its cache line(s).
#[repr(align(64))]
struct Padded(RwLock<Shard>);

/// The sharded in-DRAM hash index: [`Digest`] → location (`u64`).
///
/// All methods take `&self` and are thread-safe. Callbacks
/// ([`Index::update_with`], [`Index::for_each`], [`Index::retain`]) run under a
/// shard lock and must not call back into the same index.
pub struct Index {
    shards: Box<[Padded]>,
    /// `64 - log2(shards)`; 64 for a single shard.
    shard_shift: u32,
    max_load: f64,
    growth: f64,
    /// Location width of the table slots.
    lbits: u32,
    /// Smallest non-empty table (slots of `lbits` locations must fit 16 bytes).
    min_cap: usize,
}

impl Default for Index {
    fn default() -> Self {
        Index::new()
    }
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("shards", &self.shards.len())
            .field("len", &self.len())
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

impl Index {
    /// An empty index with [`DEFAULT_SHARDS`] shards that grows as needed.
    pub fn new() -> Index {
        Index::with_options(IndexOptions::default())
    }

    /// An empty index with [`DEFAULT_SHARDS`] shards sized for `expected_keys`.
    pub fn with_capacity(expected_keys: usize) -> Index {
        Index::with_options(IndexOptions {
            expected_keys,
            ..IndexOptions::default()
        })
    }

    /// An empty index with `shards` shards (rounded up to a power of two)
    /// sized for `expected_keys`.
    pub fn with_shards(shards: usize, expected_keys: usize) -> Index {
        Index::with_options(IndexOptions {
            shards,
            expected_keys,
            ..IndexOptions::default()
        })
    }

    /// An empty index with explicit tuning (out-of-range values are clamped).
    pub fn with_options(opts: IndexOptions) -> Index {
        let shards = opts.shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let max_load = if opts.max_load.is_finite() {
            opts.max_load.clamp(0.5, 0.98)
        } else {
            DEFAULT_MAX_LOAD
        };
        let growth = if opts.growth.is_finite() {
            opts.growth.clamp(1.05, 4.0)
        } else {
            DEFAULT_GROWTH
        };
        let lbits = opts.loc_bits.clamp(1, 64);
        let min_cap = min_cap_for(lbits);
        let cap = if opts.expected_keys == 0 {
            0
        } else {
            // Size every shard for its expected share plus 3 standard
            // deviations (binomial): about one shard in 700 will still grow
            // once, which costs less than a wider margin on every shard.
            let m = opts.expected_keys as f64 / shards as f64;
            let keys = m + 3.0 * m.sqrt() + 1.0;
            ((keys / max_load).ceil() as usize).max(min_cap)
        };
        let shards_vec: Vec<Padded> = (0..shards)
            .map(|_| Padded(RwLock::new(Shard::with_capacity(cap, lbits, max_load))))
            .collect();
        Index {
            shards: shards_vec.into_boxed_slice(),
            shard_shift: 64 - shards.trailing_zeros(),
            max_load,
            growth,
            lbits,
            min_cap,
        }
    }

    #[inline]
    fn shard_of(&self, d: Digest) -> &RwLock<Shard> {
        // The mask is a no-op (the index is already in range); it only lets
        // the compiler drop the bounds check.
        &self.shards[self.shard_index(d) & (self.shards.len() - 1)].0
    }

    /// Capacity of the next table of shard `i`, holding at least `needed` keys
    /// and larger than `cur`: the next rung of the shard's staggered ladder
    /// `min_cap * growth^(k + i/S)` at or above `cur * (1 + (growth-1)/2)`.
    fn next_capacity(&self, i: usize, cur: usize, needed: usize) -> usize {
        let g = self.growth;
        let min = self.min_cap as f64;
        let phase = i as f64 / self.shards.len() as f64;
        let target = (cur as f64 * (1.0 + (g - 1.0) / 2.0))
            .max(needed as f64 / self.max_load)
            .max(min);
        let k = ((target / min).ln() / g.ln() - phase).ceil();
        let rung = (min * g.powf(k + phase)).ceil();
        let mut cap = if rung.is_finite() && rung < (usize::MAX / 2) as f64 {
            rung as usize
        } else {
            cur.saturating_mul(2)
        };
        cap = cap.max(cur + 1).max(self.min_cap);
        while max_len_for(cap, self.max_load) < needed {
            cap += cap / 8 + 1;
        }
        cap
    }

    /// The shard that holds `d`: with the fingerprint, the key's identity
    /// in the index (`retain_reporting` and `get_in_shard` name keys so).
    pub fn shard_for(&self, d: Digest) -> usize {
        self.shard_index(d) & (self.shards.len() - 1)
    }

    #[inline]
    fn shard_index(&self, d: Digest) -> usize {
        let hi = (d >> 64) as u64;
        hi.checked_shr(self.shard_shift).unwrap_or(0) as usize
    }

    /// Adds `fp`, known to be absent (`spot` from `find`), growing the shard
    /// first if it is at its maximum load.
    fn insert_new(&self, i: usize, s: &mut Shard, fp: u64, loc: u64, mut spot: Spot) {
        if s.len + 1 > s.max_len {
            let cap = self.next_capacity(i, s.table.cap(), s.len + 1);
            s.regrow(cap, self.max_load);
            spot = s.find(fp);
        }
        s.add(spot, fp, loc);
    }

    /// The location of `d`, if present.
    #[inline]
    pub fn get(&self, d: Digest) -> Option<u64> {
        self.shard_of(d).read().get(fingerprint(d))
    }

    /// Maps `d` to `loc`; returns the previous location, if any.
    pub fn insert(&self, d: Digest, loc: u64) -> Option<u64> {
        self.update_with(d, |old| (Some(loc), old))
    }

    /// Replaces the location of `d` by `new` only if it currently is `current`.
    /// Returns whether it did.
    pub fn compare_exchange(&self, d: Digest, current: u64, new: u64) -> bool {
        let fp = fingerprint(d);
        let mut s = self.shard_of(d).write();
        let spot = s.find(fp);
        if s.loc(spot, fp) != Some(current) {
            return false;
        }
        s.set(spot, fp, new);
        true
    }

    /// Removes `d`; returns its location, if it was present.
    pub fn remove(&self, d: Digest) -> Option<u64> {
        let fp = fingerprint(d);
        let mut s = self.shard_of(d).write();
        let spot = s.find(fp);
        s.remove(spot, fp)
    }

    /// Removes `d` only if its location is `current`. Returns whether it did.
    pub fn remove_if(&self, d: Digest, current: u64) -> bool {
        let fp = fingerprint(d);
        let mut s = self.shard_of(d).write();
        let spot = s.find(fp);
        if s.loc(spot, fp) != Some(current) {
            return false;
        }
        s.remove(spot, fp);
        true
    }

    /// Atomic read-modify-write of `d`'s entry under its shard's write lock:
    /// `f` gets the current location (`None`: absent) and returns the new one
    /// (`None`: remove / stay absent) and a result, which is returned.
    ///
    /// `f` must not call into this index (it would deadlock). If `f` panics,
    /// the entry is left unchanged.
    pub fn update_with<R>(&self, d: Digest, f: impl FnOnce(Option<u64>) -> (Option<u64>, R)) -> R {
        let fp = fingerprint(d);
        let i = self.shard_index(d);
        let mut s = self.shard_of(d).write();
        let spot = s.find(fp);
        let (new, r) = f(s.loc(spot, fp));
        match (spot, new) {
            (Spot::Vacant(..), Some(loc)) => self.insert_new(i, &mut s, fp, loc, spot),
            (Spot::Vacant(..), None) => {}
            (_, Some(loc)) => s.set(spot, fp, loc),
            (_, None) => {
                s.remove(spot, fp);
            }
        }
        r
    }

    /// Number of entries (sums the shards; not a snapshot under concurrent writes).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|p| p.0.read().len).sum()
    }

    /// Whether the index holds no entry.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|p| p.0.read().len == 0)
    }

    /// Heap and struct bytes of the index: every table slot (empty ones
    /// included), the overflow maps and the shard headers. This is the honest
    /// DRAM figure.
    pub fn memory_bytes(&self) -> usize {
        let tables: usize = self.shards.iter().map(|p| p.0.read().heap_bytes()).sum();
        std::mem::size_of::<Index>() + std::mem::size_of_val(&*self.shards) + tables
    }

    /// Number of shards (a power of two).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Removes every entry and frees every table.
    pub fn clear(&self) {
        for p in self.shards.iter() {
            let mut s = p.0.write();
            *s = Shard::with_capacity(0, self.lbits, self.max_load);
        }
    }

    /// Calls `f` with the location of every entry, shard by shard, each shard
    /// under its read lock (`f` must not write to this index).
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        for p in self.shards.iter() {
            p.0.read().for_each(&mut f);
        }
    }

    /// Calls `f` with the location of every entry of one shard, under its read lock.
    pub fn for_each_in_shard(&self, shard: usize, f: impl FnMut(u64)) {
        if let Some(p) = self.shards.get(shard) {
            p.0.read().for_each(f);
        }
    }

    /// Calls `f(fingerprint, location)` for the entries of shard `shard` whose
    /// [`fingerprint`] is at least `from`, in increasing fingerprint order, under
    /// the shard's read lock, until `f` returns `false`.
    ///
    /// An entry's place in this order — (shard, fingerprint) — depends on its
    /// digest only, not on the table's capacity or on other entries, so a scan
    /// resumed from a fingerprint across calls (and across growth, inserts and
    /// removals in between) visits every entry present throughout exactly once.
    pub fn scan_shard(&self, shard: usize, from: u64, f: impl FnMut(u64, u64) -> bool) {
        if let Some(p) = self.shards.get(shard) {
            p.0.read().scan(from, f);
        }
    }

    /// Removes every entry whose location fails `f` (called once per entry,
    /// shard by shard, each shard under its write lock).
    pub fn retain(&self, f: impl FnMut(u64) -> bool) {
        self.retain_reporting(f, |_, _, _| {});
    }

    /// Like [`Index::retain`], and calls `removed(shard, fingerprint, location)`
    /// for each entry removed, so a caller can match them against known
    /// digests or look them up again ([`Index::get_in_shard`]).
    pub fn retain_reporting(
        &self,
        mut keep: impl FnMut(u64) -> bool,
        mut removed: impl FnMut(usize, u64, u64),
    ) {
        for (i, p) in self.shards.iter().enumerate() {
            p.0.write()
                .retain(&mut keep, &mut |fp, loc| removed(i, fp, loc));
        }
    }

    /// The location of the entry with fingerprint `fp` in shard `shard`, if
    /// present: the lookup for a caller that kept what
    /// [`Index::retain_reporting`] reported rather than the digest.
    pub fn get_in_shard(&self, shard: usize, fp: u64) -> Option<u64> {
        self.shards.get(shard)?.0.read().get(fp)
    }

    /// Occupancy and displacement figures (scans every table).
    pub fn stats(&self) -> IndexStats {
        let mut st = IndexStats {
            shards: self.shards.len(),
            ..IndexStats::default()
        };
        let mut total_disp = 0u128;
        for p in self.shards.iter() {
            let s = p.0.read();
            let t = &s.table;
            st.len += s.len;
            st.capacity += t.cap();
            st.overflow += s.overflow.len();
            st.max_slot_bytes = st.max_slot_bytes.max(t.slot_bytes());
            for pos in 0..t.cap() {
                let f = t.f(pos) as usize;
                if f != 0 {
                    total_disp += (f - 1) as u128;
                    st.max_displacement = st.max_displacement.max(f - 1);
                }
            }
        }
        if st.len > st.overflow {
            st.mean_displacement = total_disp as f64 / (st.len - st.overflow) as f64;
        }
        st
    }
}

#[cfg(test)]
mod tests {
    use super::image::parse_image;
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Checks every structural invariant of every shard.
    pub(super) fn check_invariants(ix: &Index) {
        check_invariants_of(ix, true);
    }

    pub(super) fn check_invariants_of(ix: &Index, load_bound: bool) {
        for i in 0..ix.shard_count() {
            let s = ix.shards[i].0.read();
            let in_table = s.table.positions().count();
            assert_eq!(in_table + s.overflow.len(), s.len, "shard {i} len");
            assert!(
                !load_bound || s.len <= s.max_len || s.table.cap() == 0,
                "shard {i} over max load"
            );
            if s.table.cap() != 0 {
                assert!(in_table < s.table.cap());
            }
            for pos in s.table.positions() {
                let fp = s.table.fp_at(pos);
                assert!(matches!(s.table.probe(fp), table::Probe::Found(p) if p == pos));
                assert!(!s.overflow.contains_key(&fp), "in table and overflow");
            }
            let img = ix.shard_image(i);
            parse_image(&img).expect("valid probe order");
        }
    }

    pub(super) fn mk(hi: u64, lo: u64) -> Digest {
        ((hi as u128) << 64) | lo as u128
    }

    pub(super) fn splitmix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(usize, u64),
        Remove(usize),
        Cas(usize, u64, u64),
        RemoveIf(usize, u64),
        Update(usize, Option<u64>),
        Get(usize),
        Retain(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0usize..300;
        let v = 0u64..6;
        prop_oneof![
            4 => (k.clone(), v.clone()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => k.clone().prop_map(Op::Remove),
            2 => (k.clone(), v.clone(), v.clone()).prop_map(|(k, a, b)| Op::Cas(k, a, b)),
            1 => (k.clone(), v.clone()).prop_map(|(k, a)| Op::RemoveIf(k, a)),
            2 => (k.clone(), proptest::option::of(v.clone())).prop_map(|(k, a)| Op::Update(k, a)),
            2 => k.prop_map(Op::Get),
            1 => (0u64..6).prop_map(Op::Retain),
        ]
    }

    /// Key universe: the low half (fingerprint) is drawn from few values in a
    /// narrow range so that homes collide and clusters get long and wrap; the
    /// high half varies (and selects shards). `mode` picks the flavour.
    fn universe(mode: u8, seed: u64) -> Vec<Digest> {
        (0..300u64)
            .map(|i| {
                let r = splitmix(seed ^ i.wrapping_mul(0x1234_5677));
                let hi = splitmix(r);
                let lo = match mode {
                    // random 64-bit fingerprints
                    0 => splitmix(r ^ 7),
                    // fingerprints crowded at the very top: homes near the end, wrap-around
                    1 => u64::MAX - (r % 512),
                    // all keys in one narrow band of homes, with 0 (remapped to 1) and 1 in play
                    2 => r % 64,
                    // identical low halves for pairs of keys in different shards
                    _ => splitmix(i / 2),
                };
                mk(hi, lo)
            })
            .collect()
    }

    fn run_model(shards: usize, mode: u8, seed: u64, ops: &[Op]) {
        let keys = universe(mode, seed);
        let ix = Index::with_options(IndexOptions {
            shards,
            expected_keys: 0,
            max_load: [0.9, 0.98][(seed % 2) as usize],
            growth: [1.05, 1.25, 1.125][(seed % 3) as usize],
            // 2 bits: locations 4 and 5 live in the overflow map.
            loc_bits: [2, 8, 64][(seed / 6 % 3) as usize],
        });
        // The model is keyed by what the index can tell apart: (shard, fp).
        let id = |d: Digest| (ix.shard_index(d), fingerprint(d));
        let mut model: HashMap<(usize, u64), u64> = HashMap::new();
        for op in ops {
            match *op {
                Op::Insert(k, v) => {
                    let d = keys[k];
                    assert_eq!(ix.insert(d, v), model.insert(id(d), v));
                }
                Op::Remove(k) => {
                    let d = keys[k];
                    assert_eq!(ix.remove(d), model.remove(&id(d)));
                }
                Op::Cas(k, a, b) => {
                    let d = keys[k];
                    let exp = model.get(&id(d)) == Some(&a);
                    if exp {
                        model.insert(id(d), b);
                    }
                    assert_eq!(ix.compare_exchange(d, a, b), exp);
                }
                Op::RemoveIf(k, a) => {
                    let d = keys[k];
                    let exp = model.get(&id(d)) == Some(&a);
                    if exp {
                        model.remove(&id(d));
                    }
                    assert_eq!(ix.remove_if(d, a), exp);
                }
                Op::Update(k, new) => {
                    let d = keys[k];
                    let old = model.get(&id(d)).copied();
                    match new {
                        Some(v) => model.insert(id(d), v),
                        None => model.remove(&id(d)),
                    };
                    let seen = ix.update_with(d, |cur| (new, cur));
                    assert_eq!(seen, old);
                }
                Op::Get(k) => {
                    let d = keys[k];
                    assert_eq!(ix.get(d), model.get(&id(d)).copied());
                }
                Op::Retain(x) => {
                    let mut calls = 0usize;
                    let mut gone = Vec::new();
                    ix.retain_reporting(
                        |loc| {
                            calls += 1;
                            loc != x
                        },
                        |shard, fp, loc| gone.push((shard, fp, loc)),
                    );
                    for &(shard, fp, _) in &gone {
                        assert_eq!(ix.get_in_shard(shard, fp), None, "reported, still there");
                    }
                    let mut gone: Vec<(u64, u64)> =
                        gone.into_iter().map(|(_, fp, loc)| (fp, loc)).collect();
                    assert_eq!(calls, model.len(), "retain calls f once per entry");
                    let mut want: Vec<(u64, u64)> = model
                        .iter()
                        .filter(|(_, v)| **v == x)
                        .map(|(k, v)| (k.1, *v))
                        .collect();
                    gone.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(gone, want, "each removed entry is reported once");
                    model.retain(|_, v| *v != x);
                }
            }
            assert_eq!(ix.len(), model.len());
        }
        check_invariants(&ix);
        for &d in &keys {
            assert_eq!(ix.get(d), model.get(&id(d)).copied());
            let by_shard = ix.get_in_shard(ix.shard_index(d), fingerprint(d));
            assert_eq!(by_shard, ix.get(d), "get_in_shard agrees with get");
        }
        let mut seen = Vec::new();
        ix.for_each(|l| seen.push(l));
        let mut want: Vec<u64> = model.values().copied().collect();
        seen.sort_unstable();
        want.sort_unstable();
        assert_eq!(seen, want);
        // Round trip through images into a fresh index.
        let ix2 = Index::with_shards(shards, 0);
        for i in 0..ix.shard_count() {
            ix2.load_shard_image(i, &ix.shard_image(i))
                .expect("own image loads");
        }
        for &d in &keys {
            assert_eq!(ix2.get(d), ix.get(d));
        }
        assert_eq!(ix2.len(), ix.len());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn model_random(shards in prop_oneof![Just(1usize), Just(4)], mode in 0u8..4, seed: u64,
                        ops in proptest::collection::vec(op(), 1..600)) {
            run_model(shards, mode, seed, &ops);
        }
    }

    /// The model with real digests of a HashMap<u128, u64> (no confusions
    /// expected), many keys, one shard: growth through many rungs.
    #[test]
    fn model_many_keys_one_shard() {
        let ix = Index::with_shards(1, 0);
        let mut model: HashMap<u128, u64> = HashMap::new();
        for i in 0..200_000u64 {
            let d = digest(&i.to_le_bytes());
            let r = splitmix(i);
            match r % 5 {
                0..=2 => assert_eq!(ix.insert(d, r), model.insert(d, r)),
                3 => {
                    let j = splitmix(r) % (i + 1);
                    let dj = digest(&j.to_le_bytes());
                    assert_eq!(ix.remove(dj), model.remove(&dj));
                }
                _ => {
                    let j = splitmix(r) % (i + 1);
                    let dj = digest(&j.to_le_bytes());
                    assert_eq!(ix.get(dj), model.get(&dj).copied());
                }
            }
        }
        assert_eq!(ix.len(), model.len());
        for (d, v) in &model {
            assert_eq!(ix.get(*d), Some(*v));
        }
        check_invariants(&ix);
        let st = ix.stats();
        assert!(st.len as f64 / st.capacity as f64 > 0.6, "{st:?}");
    }

    /// Entries the table cannot record (displacement over 126, or a location
    /// wider than the slots) live in the overflow map and behave like any other.
    #[test]
    fn overflow_holds_entries_the_table_cannot() {
        let ix = Index::with_options(IndexOptions {
            shards: 1,
            loc_bits: 8,
            ..IndexOptions::default()
        });
        // 400 fingerprints below 2^40: one quotient, so one home, at every size.
        let d = |i: u64| mk(0, i * 7 + 1);
        for i in 0..400u64 {
            assert_eq!(ix.insert(d(i), i % 200), None);
        }
        assert_eq!(ix.insert(mk(0, 1 << 62), 1 << 40), None, "wide location");
        let st = ix.stats();
        assert!(st.overflow >= 400 - 127, "{st:?}");
        assert!(st.max_displacement <= table::MAX_DISP as usize);
        check_invariants(&ix);
        for i in 0..400u64 {
            assert_eq!(ix.get(d(i)), Some(i % 200));
        }
        assert_eq!(ix.get(mk(0, 1 << 62)), Some(1 << 40));
        assert!(ix.compare_exchange(mk(0, 1 << 62), 1 << 40, 3));
        assert_eq!(ix.get(mk(0, 1 << 62)), Some(3));
        // Scans merge table and overflow in fingerprint order.
        let mut seen = Vec::new();
        ix.scan_shard(0, 0, |fp, _| {
            seen.push(fp);
            true
        });
        assert_eq!(seen.len(), 401);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        // Removals from both places, retain, and an image round trip.
        for i in (0..400u64).step_by(2) {
            assert_eq!(ix.remove(d(i)), Some(i % 200));
        }
        ix.retain(|l| l % 3 != 0);
        check_invariants(&ix);
        let ix2 = Index::with_options(IndexOptions {
            shards: 1,
            loc_bits: 8,
            ..IndexOptions::default()
        });
        ix2.load_shard_image(0, &ix.shard_image(0)).expect("loads");
        for i in 0..400u64 {
            let want = (i % 2 == 1 && (i % 200) % 3 != 0).then_some(i % 200);
            assert_eq!(ix2.get(d(i)), want, "key {i}");
        }
        assert_eq!(ix2.len(), ix.len());
    }

    #[test]
    fn zero_fingerprint_is_stored() {
        let ix = Index::with_shards(1, 0);
        let d0 = mk(5, 0);
        assert_eq!(ix.get(d0), None);
        assert_eq!(ix.insert(d0, 42), None);
        assert_eq!(ix.get(d0), Some(42));
        // fp 0 and fp 1 are the same identity (documented remap).
        assert_eq!(ix.get(mk(5, 1)), Some(42));
        assert_eq!(ix.remove(d0), Some(42));
        assert!(ix.is_empty());
    }

    #[test]
    fn shards_are_selected_by_high_bits() {
        let ix = Index::with_shards(4, 0);
        assert_eq!(ix.shard_count(), 4);
        for s in 0..4u64 {
            ix.insert(mk(s << 62, 77), s);
        }
        assert_eq!(ix.len(), 4);
        for s in 0..4usize {
            let img = ix.shard_image(s);
            assert_eq!(
                u64::from_le_bytes(img[8..16].try_into().expect("8 bytes")),
                1
            );
        }
        for s in 0..4u64 {
            assert_eq!(ix.get(mk(s << 62, 77)), Some(s));
        }
    }

    #[test]
    fn concurrent_inserts_and_gets() {
        let ix = Index::with_shards(16, 0);
        let per = 50_000u64;
        std::thread::scope(|sc| {
            for t in 0..8u64 {
                let ix = &ix;
                sc.spawn(move || {
                    for i in 0..per {
                        let k = t * per + i;
                        assert_eq!(ix.insert(digest(&k.to_le_bytes()), k), None);
                        // read back something this thread wrote earlier
                        let j = t * per + splitmix(k) % (i + 1);
                        assert_eq!(ix.get(digest(&j.to_le_bytes())), Some(j));
                        if i % 4 == 0 {
                            // contended RMW on shared counters keys
                            let c = digest(&(1_000_000_000 + (i / 4) % 64).to_le_bytes());
                            ix.update_with(c, |v| (Some(v.unwrap_or(0) + 1), ()));
                        }
                    }
                });
            }
        });
        assert_eq!(ix.len() as u64, 8 * per + 64);
        for k in 0..8 * per {
            assert_eq!(ix.get(digest(&k.to_le_bytes())), Some(k));
        }
        let mut total = 0;
        for c in 0..64u64 {
            total += ix
                .get(digest(&(1_000_000_000 + c).to_le_bytes()))
                .expect("counter present");
        }
        assert_eq!(total, 8 * per / 4);
        check_invariants(&ix);
    }

    #[test]
    fn memory_grows_with_keys_and_is_honest() {
        let ix = Index::new();
        let empty = ix.memory_bytes();
        assert!(empty >= DEFAULT_SHARDS * 64, "shard headers are counted");
        let mut last = empty;
        let mut grew = 0;
        for step in 1..=20u64 {
            for i in (step - 1) * 50_000..step * 50_000 {
                ix.insert(digest(&i.to_le_bytes()), i);
            }
            let m = ix.memory_bytes();
            assert!(m >= last);
            if m > last {
                grew += 1;
            }
            last = m;
            let st = ix.stats();
            let tables: usize = (0..ix.shard_count())
                .map(|i| {
                    let s = ix.shards[i].0.read();
                    s.table.cap() * s.table.slot_bytes()
                        + if s.table.cap() > 0 { 16 } else { 0 }
                        + s.overflow.len() * shard::OVERFLOW_ENTRY_BYTES
                })
                .sum();
            assert_eq!(m, empty + tables);
            assert!(st.capacity > st.len);
            assert!(st.max_slot_bytes <= 16);
        }
        assert!(grew >= 10, "memory grows step by step ({grew})");
        let per_key = last as f64 / ix.len() as f64;
        assert!(per_key > 13.0 && per_key < 21.0, "{per_key} bytes/key");
        ix.clear();
        assert!(ix.is_empty());
        assert_eq!(ix.memory_bytes(), empty);
    }

    #[test]
    fn staggered_growth_keeps_memory_smooth() {
        // With staggered ladders, bytes/key stays within a narrow band as keys
        // are added, instead of jumping by the growth factor at once.
        let ix = Index::with_shards(256, 0);
        let mut worst: f64 = 0.0;
        let mut best = f64::MAX;
        let mut i = 0u64;
        for step in 1..=40u64 {
            let target = 20_000 * step;
            while i < target {
                ix.insert(mk(splitmix(i), splitmix(!i)), i);
                i += 1;
            }
            if step >= 10 {
                let bpk = ix.memory_bytes() as f64 / ix.len() as f64;
                worst = worst.max(bpk);
                best = best.min(bpk);
            }
        }
        assert!(worst - best < 1.5, "bytes/key between {best} and {worst}");
        assert!(worst < 19.0, "{worst}");
    }

    #[test]
    fn presized_index_does_not_grow() {
        let n = 1_000_000u64;
        let ix = Index::with_capacity(n as usize);
        let m0 = ix.memory_bytes();
        for i in 0..n {
            ix.insert(digest(&i.to_le_bytes()), i);
        }
        // At most a handful of the 1024 shards may have grown once.
        let m1 = ix.memory_bytes();
        assert!(m1 as f64 <= m0 as f64 * 1.01, "{m0} -> {m1}");
        let bpk = m1 as f64 / n as f64;
        assert!(bpk < 20.0, "{bpk}");
    }

    #[test]
    fn retain_and_for_each() {
        let ix = Index::with_shards(4, 0);
        for i in 0..10_000u64 {
            ix.insert(digest(&i.to_le_bytes()), i);
        }
        let mut sum = 0u64;
        ix.for_each(|l| sum += l);
        assert_eq!(sum, (0..10_000u64).sum::<u64>());
        let mut per_shard = 0u64;
        for sh in 0..ix.shard_count() + 1 {
            ix.for_each_in_shard(sh, |l| per_shard += l);
        }
        assert_eq!(per_shard, sum);
        ix.retain(|l| l % 3 != 0);
        check_invariants(&ix);
        for i in 0..10_000u64 {
            let want = if i % 3 != 0 { Some(i) } else { None };
            assert_eq!(ix.get(digest(&i.to_le_bytes())), want);
        }
        ix.retain(|_| false);
        assert!(ix.is_empty());
        check_invariants(&ix);
    }

    #[test]
    fn index_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Index>();
        assert_send_sync::<IndexImageError>();
    }
}
