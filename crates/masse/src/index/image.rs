//! Shard images: one shard of the index, bit-exact, as a checkpoint stores it.
//!
//! Layout (little-endian): capacity `cap` (u64), count of table entries (u64),
//! bytes per slot `b` (u8), `q = ⌊log2 cap⌋` (u8), location bits (u8), the
//! displacement field's width 7 (u8), overflow entries `m` (u32); then the
//! `cap · b` bytes of the table verbatim; then `m` overflow entries as
//! `fp` (u64), `loc` (u64), fingerprints strictly increasing.
//!
//! Images of earlier layouts (checkpoint versions ≤ 3) are not loaded: the
//! engine scans the log instead (docs/format.md §9.3).

use std::collections::BTreeMap;
use std::fmt;

use super::shard::Shard;
use super::table::{home_at, log2, min_cap_for, slot_bytes, Probe, Slot, Table};
use super::Index;

/// Size of the header of a shard image.
const IMAGE_HEADER: usize = 24;

/// Bytes of an overflow entry in an image.
const PAIR_BYTES: usize = 16;

/// Why a shard image was rejected by [`Index::load_shard_image`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexImageError {
    /// The shard number is not below the index's shard count.
    NoSuchShard {
        /// Requested shard.
        shard: usize,
        /// Shard count of the index.
        shards: usize,
    },
    /// The image length does not match the capacity in its header.
    BadLength {
        /// Length the header implies (`None`: overflows).
        expected: Option<u64>,
        /// Actual length of the image.
        actual: usize,
    },
    /// The entry count in the header is not the number of non-empty slots.
    BadCount {
        /// Count in the header.
        header: u64,
        /// Non-empty slots in the image.
        actual: u64,
    },
    /// The table would have no empty slot (capacity must exceed count).
    Full {
        /// Capacity in the header.
        capacity: u64,
    },
    /// A slot is out of probe order (or a fingerprint is duplicated), so lookups would miss it.
    Disordered {
        /// Slot index.
        slot: u64,
    },
    /// The slot geometry in the header does not follow from the capacity.
    BadGeometry {
        /// Capacity in the header.
        capacity: u64,
    },
    /// An overflow entry is out of order, zero, or also in the table.
    BadOverflow {
        /// Index of the overflow entry.
        entry: u64,
    },
}

impl fmt::Display for IndexImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexImageError::NoSuchShard { shard, shards } => {
                write!(
                    f,
                    "index image: shard {shard} out of range (index has {shards} shards)"
                )
            }
            IndexImageError::BadLength {
                expected: Some(e),
                actual,
            } => {
                write!(f, "index image: length {actual} bytes, header implies {e}")
            }
            IndexImageError::BadLength {
                expected: None,
                actual,
            } => {
                write!(
                    f,
                    "index image: length {actual} bytes, header capacity overflows"
                )
            }
            IndexImageError::BadCount { header, actual } => {
                write!(
                    f,
                    "index image: header says {header} entries, table holds {actual}"
                )
            }
            IndexImageError::Full { capacity } => {
                write!(
                    f,
                    "index image: no empty slot in a table of capacity {capacity}"
                )
            }
            IndexImageError::Disordered { slot } => {
                write!(
                    f,
                    "index image: slot {slot} is out of probe order or duplicated"
                )
            }
            IndexImageError::BadGeometry { capacity } => {
                write!(
                    f,
                    "index image: slot geometry does not fit a table of capacity {capacity}"
                )
            }
            IndexImageError::BadOverflow { entry } => {
                write!(
                    f,
                    "index image: overflow entry {entry} is out of order or duplicated"
                )
            }
        }
    }
}

impl std::error::Error for IndexImageError {}

impl Index {
    /// A self-describing little-endian image of shard `shard` (the layout is
    /// in this module's documentation). An out-of-range `shard` gives an
    /// empty vector (which [`Index::load_shard_image`] rejects).
    pub fn shard_image(&self, shard: usize) -> Vec<u8> {
        let Some(p) = self.shards.get(shard) else {
            return Vec::new();
        };
        let s = p.0.read();
        let t = &s.table;
        let raw = t.raw();
        let mut out = Vec::with_capacity(IMAGE_HEADER + raw.len() + s.overflow.len() * PAIR_BYTES);
        out.extend_from_slice(&(t.cap() as u64).to_le_bytes());
        out.extend_from_slice(&((s.len - s.overflow.len()) as u64).to_le_bytes());
        out.extend_from_slice(&[
            t.slot_bytes() as u8,
            log2(t.cap()) as u8,
            t.lbits() as u8,
            7,
        ]);
        out.extend_from_slice(&(s.overflow.len() as u32).to_le_bytes());
        out.extend_from_slice(raw);
        for (fp, loc) in &s.overflow {
            out.extend_from_slice(&fp.to_le_bytes());
            out.extend_from_slice(&loc.to_le_bytes());
        }
        out
    }

    /// Validates `image` (see [`Index::shard_image`]) and installs it as shard
    /// `shard`, replacing its contents. On error the shard is unchanged.
    ///
    /// Checks: the geometry follows from the capacity; the length is exact;
    /// count = non-empty slots < capacity (or both 0); no stray bits; every
    /// entry's home is a home and it is reachable from it in probe order with
    /// no duplicate fingerprint; overflow fingerprints increase and are not in
    /// the table. An image whose location width differs from this index's is
    /// converted (re-placed), not rejected.
    pub fn load_shard_image(&self, shard: usize, image: &[u8]) -> Result<(), IndexImageError> {
        let p = self.shard_slot(shard)?;
        let (table, overflow, count) = parse_image(image)?;
        let s = self.adopt(table, overflow, count);
        *p.write() = s;
        Ok(())
    }

    fn shard_slot(&self, shard: usize) -> Result<&parking_lot::RwLock<Shard>, IndexImageError> {
        self.shards
            .get(shard)
            .map(|p| &p.0)
            .ok_or(IndexImageError::NoSuchShard {
                shard,
                shards: self.shards.len(),
            })
    }

    /// A shard of a validated image, converted to this index's location width
    /// if the image's differs.
    fn adopt(&self, table: Table, mut overflow: BTreeMap<u64, u64>, count: usize) -> Shard {
        if table.cap() == 0 || table.lbits() == self.lbits {
            let len = count + overflow.len();
            return Shard::with_len(table, overflow, len, self.max_load);
        }
        let mut spill = Vec::new();
        let entries = table.entries();
        let cap = table.cap().max(self.min_cap);
        let t = Table::from_sorted(cap, self.lbits, entries, &mut spill);
        overflow.extend(spill);
        Shard::from_table(t, overflow, self.max_load)
    }
}

/// Little-endian u64 at byte `at` of `b` (0 past the end).
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// A validated image: its table, its overflow map, and the table's entry count.
type Parsed = (Table, BTreeMap<u64, u64>, usize);

/// Decodes and validates a shard image.
pub(super) fn parse_image(image: &[u8]) -> Result<Parsed, IndexImageError> {
    if image.len() < IMAGE_HEADER {
        return Err(IndexImageError::BadLength {
            expected: Some(IMAGE_HEADER as u64),
            actual: image.len(),
        });
    }
    let (cap64, count) = (word(image, 0), word(image, 8));
    let (b, q, lbits, fbits) = (image[16], image[17], image[18], image[19]);
    let m = u32::from_le_bytes([image[20], image[21], image[22], image[23]]) as u64;
    let expected = cap64
        .checked_mul(b as u64)
        .and_then(|t| t.checked_add(m * PAIR_BYTES as u64))
        .and_then(|t| t.checked_add(IMAGE_HEADER as u64));
    if expected != Some(image.len() as u64) {
        return Err(IndexImageError::BadLength {
            expected,
            actual: image.len(),
        });
    }
    // The length matched, so the capacity fits in memory (and in usize).
    let cap = cap64 as usize;
    let geometry_ok = (1..=64).contains(&lbits)
        && fbits == 7
        && if cap == 0 {
            b == 0 && q == 0
        } else {
            cap >= min_cap_for(lbits as u32)
                && q as u32 == log2(cap)
                && b as usize == slot_bytes(cap, lbits as u32)
        };
    if !geometry_ok {
        return Err(IndexImageError::BadGeometry { capacity: cap64 });
    }
    let raw_end = IMAGE_HEADER + cap * b as usize;
    let table = Table::from_raw(cap, lbits as u32, &image[IMAGE_HEADER..raw_end])
        .ok_or(IndexImageError::BadGeometry { capacity: cap64 })?;
    check_table(&table, count)?;
    let overflow = parse_overflow(&table, &image[raw_end..])?;
    Ok((table, overflow, count as usize))
}

/// The structural checks of a loaded table (see [`Index::load_shard_image`]).
fn check_table(t: &Table, count: u64) -> Result<(), IndexImageError> {
    let cap = t.cap();
    let mut actual = 0u64;
    // The slot before the first is the last (clusters wrap); each slot is
    // decoded once and carried as the next one's predecessor.
    let empty = Slot { f: 0, r: 0, loc: 0 };
    let mut prev = if cap == 0 { empty } else { t.slot(cap - 1) };
    for pos in 0..cap {
        let s = t.slot(pos);
        if !slot_in_order(t, pos, s, prev) {
            return Err(IndexImageError::Disordered { slot: pos as u64 });
        }
        actual += (s.f != 0) as u64;
        prev = s;
    }
    if actual != count {
        return Err(IndexImageError::BadCount {
            header: count,
            actual,
        });
    }
    if cap as u64 <= count && !(cap == 0 && count == 0) {
        return Err(IndexImageError::Full {
            capacity: cap as u64,
        });
    }
    Ok(())
}

/// Whether slot `pos` (`s`, after `prev`) is well-formed: no bits outside its
/// fields, nothing in an empty slot, a home that is some quotient's, a
/// non-zero fingerprint, and probe order: an entry displaced by d > 0 must
/// follow a non-empty slot displaced by at least d − 1, and by exactly d − 1
/// (same home) only with a smaller remainder. That makes every entry
/// reachable by `probe` and rules out duplicate fingerprints.
fn slot_in_order(t: &Table, pos: usize, s: Slot, prev: Slot) -> bool {
    let cap = t.cap();
    if t.has_stray_bits(pos) {
        return false;
    }
    if s.f == 0 {
        return s.r == 0 && s.loc == 0;
    }
    let d = (s.f - 1) as usize;
    let quot = (d < cap)
        .then(|| t.quot_of_home(home_at(pos, d, cap)))
        .flatten();
    if quot.is_none_or(|q| q == 0 && s.r == 0) {
        return false;
    }
    d == 0 || (prev.f != 0 && prev.f + 1 >= s.f && (prev.f + 1 != s.f || prev.r < s.r))
}

/// Decodes an image's overflow entries: fingerprints non-zero, strictly
/// increasing, and not in the table.
fn parse_overflow(t: &Table, raw: &[u8]) -> Result<BTreeMap<u64, u64>, IndexImageError> {
    let mut out = BTreeMap::new();
    let mut last = 0u64;
    for (i, pair) in raw.chunks_exact(PAIR_BYTES).enumerate() {
        let (fp, loc) = (word(pair, 0), word(pair, 8));
        if fp <= last || matches!(t.probe(fp), Probe::Found(_)) {
            return Err(IndexImageError::BadOverflow { entry: i as u64 });
        }
        last = fp;
        out.insert(fp, loc);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check_invariants, check_invariants_of, mk, splitmix};
    use super::super::IndexOptions;
    use super::*;
    use crate::index::digest;
    use proptest::prelude::*;

    #[test]
    fn image_round_trip_and_identity() {
        let ix = Index::with_shards(8, 0);
        for i in 0..20_000u64 {
            ix.insert(digest(&i.to_le_bytes()), i * 3);
        }
        for i in (0..20_000u64).step_by(3) {
            ix.remove(digest(&i.to_le_bytes()));
        }
        let ix2 = Index::with_shards(8, 1_000_000);
        let mut bytes = 0;
        for s in 0..8 {
            let img = ix.shard_image(s);
            bytes += img.len();
            ix2.load_shard_image(s, &img).expect("loads");
            assert_eq!(ix2.shard_image(s), img, "bit-exact");
        }
        assert_eq!(ix2.memory_bytes(), ix.memory_bytes());
        let st = ix.stats();
        assert_eq!(st.overflow, 0);
        assert!(bytes <= 8 * IMAGE_HEADER + st.capacity * st.max_slot_bytes);
        for i in 0..20_000u64 {
            let d = digest(&i.to_le_bytes());
            assert_eq!(ix2.get(d), ix.get(d));
        }
        // keeps working after load (growth from a loaded table)
        for i in 20_000..40_000u64 {
            ix2.insert(digest(&i.to_le_bytes()), i);
        }
        check_invariants(&ix2);
        assert_eq!(ix2.get(digest(&39_999u64.to_le_bytes())), Some(39_999));
        // empty shards round-trip too
        let e = Index::with_shards(2, 0);
        let img = e.shard_image(1);
        assert_eq!(img.len(), IMAGE_HEADER);
        ix2.load_shard_image(1, &img).expect("empty image");
        assert_eq!(ix2.shard_image(1), img);
    }

    /// An image taken with one location width loads into an index of another:
    /// entries are re-placed, wide locations go to the overflow map.
    #[test]
    fn image_converts_between_location_widths() {
        let narrow = |bits| {
            Index::with_options(IndexOptions {
                shards: 2,
                loc_bits: bits,
                ..IndexOptions::default()
            })
        };
        let wide = narrow(64);
        for i in 0..5_000u64 {
            wide.insert(mk(splitmix(i), splitmix(!i)), i);
        }
        let small = narrow(10);
        for s in 0..2 {
            small
                .load_shard_image(s, &wide.shard_image(s))
                .expect("converts");
        }
        check_invariants(&small);
        assert_eq!(small.stats().overflow, 5_000 - 1024);
        for i in 0..5_000u64 {
            assert_eq!(small.get(mk(splitmix(i), splitmix(!i))), Some(i));
        }
    }

    /// A header field of a valid image, overwritten.
    fn patched(img: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut v = img.to_vec();
        v[at..at + bytes.len()].copy_from_slice(bytes);
        v
    }

    #[test]
    fn malformed_images_rejected() {
        // 52-bit locations: slots have unused top bits, which must be zero.
        let opts = |shards| IndexOptions {
            shards,
            loc_bits: 52,
            ..IndexOptions::default()
        };
        let ix = Index::with_options(opts(1));
        for i in 0..40u64 {
            ix.insert(mk(0, splitmix(i)), i);
        }
        let good = ix.shard_image(0);
        let other = Index::with_options(opts(2));
        other.insert(mk(0, 99), 5);
        let before = other.shard_image(0);
        let bad = |img: &[u8]| {
            let e = other.load_shard_image(0, img).expect_err("must reject");
            assert!(!e.to_string().is_empty());
            assert_eq!(other.shard_image(0), before, "shard unchanged on error");
            e
        };
        let b = good[16] as usize;
        assert!(matches!(bad(&[1, 2, 3]), IndexImageError::BadLength { .. }));
        assert!(matches!(
            bad(&good[..good.len() - 1]),
            IndexImageError::BadLength { .. }
        ));
        let huge = patched(&good, 0, &u64::MAX.to_le_bytes());
        assert!(matches!(
            bad(&huge),
            IndexImageError::BadLength { expected: None, .. }
        ));
        // Geometry: slot bytes, q, location bits and field width must follow.
        let cap = u64::from_le_bytes(good[..8].try_into().expect("8"));
        let mut wrong_b = patched(&good, 16, &[b as u8 + 1]);
        wrong_b.resize(IMAGE_HEADER + cap as usize * (b + 1), 0);
        assert!(matches!(bad(&wrong_b), IndexImageError::BadGeometry { .. }));
        for (at, v) in [(17, good[17] + 1), (18, 0), (18, 65), (19, 8)] {
            assert!(matches!(
                bad(&patched(&good, at, &[v])),
                IndexImageError::BadGeometry { .. }
            ));
        }
        // Count.
        let n = u64::from_le_bytes(good[8..16].try_into().expect("8"));
        let miscount = patched(&good, 8, &(n + 1).to_le_bytes());
        assert!(matches!(bad(&miscount), IndexImageError::BadCount { .. }));
        // An entry moved one slot up (its displacement no longer says where its
        // home is), an entry's displacement field bumped, a stray top bit.
        let slot0 = IMAGE_HEADER;
        let t = parse_image(&good).expect("good").0;
        let p = t.positions().next().expect("an entry");
        let mut bumped = good.clone();
        bumped[slot0 + p * b] += 1;
        assert!(matches!(bad(&bumped), IndexImageError::Disordered { .. }));
        let mut stray = good.clone();
        stray[slot0 + p * b + b - 1] |= 0x80;
        assert!(matches!(bad(&stray), IndexImageError::Disordered { .. }));
        let empty = (0..t.cap())
            .find(|&q| t.slot(q).f == 0)
            .expect("an empty slot");
        let mut junk = good.clone();
        junk[slot0 + empty * b + 1] = 1;
        assert!(matches!(bad(&junk), IndexImageError::Disordered { .. }));
        // Overflow entries: in order, not in the table.
        let with_overflow = |pairs: &[(u64, u64)]| {
            let mut v = patched(&good, 20, &(pairs.len() as u32).to_le_bytes());
            for (fp, loc) in pairs {
                v.extend_from_slice(&fp.to_le_bytes());
                v.extend_from_slice(&loc.to_le_bytes());
            }
            v
        };
        let in_table = t.fp_at(p);
        let free = (1..)
            .map(|x| x * 977)
            .find(|&fp| !matches!(t.probe(fp), Probe::Found(_)));
        let free = free.expect("a free fingerprint");
        assert!(other
            .load_shard_image(0, &with_overflow(&[(free, 1)]))
            .is_ok());
        other.load_shard_image(0, &before).expect("restore");
        for pairs in [
            vec![(in_table, 1)],
            vec![(free, 1), (free, 2)],
            vec![(0, 1)],
        ] {
            assert!(matches!(
                bad(&with_overflow(&pairs)),
                IndexImageError::BadOverflow { .. }
            ));
        }
        // No such shard.
        assert!(matches!(
            other.load_shard_image(2, &before),
            Err(IndexImageError::NoSuchShard {
                shard: 2,
                shards: 2
            })
        ));
        assert!(other.shard_image(2).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random corruptions of a valid image never panic; whatever loads is
        /// structurally valid and every entry it holds can be found.
        #[test]
        fn fuzzed_images_never_panic(seed: u64, flips in proptest::collection::vec((0usize..2000, any::<u8>()), 1..8)) {
            let ix = Index::with_shards(1, 0);
            for i in 0..60u64 {
                ix.insert(mk(0, splitmix(seed ^ i) % 4096 * (u64::MAX / 4096)), i);
            }
            let mut img = ix.shard_image(0);
            for (at, b) in flips {
                let at = at % img.len();
                img[at] ^= b;
            }
            if ix.load_shard_image(0, &img).is_ok() {
                check_invariants_of(&ix, false);
                let mut entries = Vec::new();
                ix.scan_shard(0, 0, |fp, loc| {
                    entries.push((fp, loc));
                    true
                });
                prop_assert_eq!(entries.len(), ix.len());
                for (fp, loc) in entries {
                    prop_assert_eq!(ix.get(mk(0, fp)), Some(loc));
                }
            }
        }

        /// Loading every shard image into an index with the same shard count
        /// reproduces identical get() results, for present and absent keys.
        #[test]
        fn image_reload_same_gets(shards in prop_oneof![Just(1usize), Just(4), Just(64)],
                                  n in 0usize..3000, seed: u64) {
            let ix = Index::with_shards(shards, 0);
            for i in 0..n as u64 {
                let d = mk(splitmix(seed ^ i), splitmix(i ^ !seed));
                ix.insert(d, i);
                if i % 5 == 0 {
                    ix.remove(mk(splitmix(seed ^ (i / 2)), splitmix((i / 2) ^ !seed)));
                }
            }
            let ix2 = Index::with_shards(shards, 0);
            for s in 0..shards {
                ix2.load_shard_image(s, &ix.shard_image(s)).expect("loads");
            }
            for i in 0..(n as u64 + 100) {
                let d = mk(splitmix(seed ^ i), splitmix(i ^ !seed));
                prop_assert_eq!(ix2.get(d), ix.get(d));
            }
            prop_assert_eq!(ix2.len(), ix.len());
        }
    }
}
