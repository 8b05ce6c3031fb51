//! Shard images: one shard of the index, bit-exact, as a checkpoint stores it.

use std::fmt;

use super::table::{displacement, empty_table, max_len_for, Slot, SLOT_BYTES};
use super::Index;

/// Size of the header of a shard image (capacity, count).
const IMAGE_HEADER: usize = 16;

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
        }
    }
}

impl std::error::Error for IndexImageError {}

impl Index {
    /// A self-describing little-endian image of shard `shard`: table capacity
    /// (u64), entry count (u64), then every slot as `fp` (u64), `loc` (u64),
    /// empty slots included. An out-of-range `shard` gives an empty vector
    /// (which [`Index::load_shard_image`] rejects).
    pub fn shard_image(&self, shard: usize) -> Vec<u8> {
        let Some(p) = self.shards.get(shard) else {
            return Vec::new();
        };
        let s = p.0.read();
        let mut out = Vec::with_capacity(IMAGE_HEADER + s.table.len() * SLOT_BYTES);
        out.extend_from_slice(&(s.table.len() as u64).to_le_bytes());
        out.extend_from_slice(&(s.len as u64).to_le_bytes());
        for e in s.table.iter() {
            out.extend_from_slice(&e[0].to_le_bytes());
            out.extend_from_slice(&e[1].to_le_bytes());
        }
        out
    }

    /// Validates `image` (see [`Index::shard_image`]) and installs it as shard
    /// `shard`, replacing its contents. On error the shard is unchanged.
    ///
    /// Checks: length = 16 + 16 × capacity; count = number of non-empty slots;
    /// capacity > count (or both 0); every entry reachable from its home slot
    /// in probe order with no duplicate fingerprint.
    pub fn load_shard_image(&self, shard: usize, image: &[u8]) -> Result<(), IndexImageError> {
        let Some(p) = self.shards.get(shard) else {
            return Err(IndexImageError::NoSuchShard {
                shard,
                shards: self.shards.len(),
            });
        };
        let t = parse_image(image)?;
        let len = t.iter().filter(|e| e[0] != 0).count();
        let mut s = p.0.write();
        s.max_len = max_len_for(t.len(), self.max_load);
        s.table = t;
        s.len = len;
        Ok(())
    }
}

/// Decodes and validates a shard image into a table.
pub(super) fn parse_image(image: &[u8]) -> Result<Box<[Slot]>, IndexImageError> {
    let word = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        if let Some(s) = image.get(i * 8..i * 8 + 8) {
            b.copy_from_slice(s);
        }
        u64::from_le_bytes(b)
    };
    if image.len() < IMAGE_HEADER {
        return Err(IndexImageError::BadLength {
            expected: Some(IMAGE_HEADER as u64),
            actual: image.len(),
        });
    }
    let cap64 = word(0);
    let count = word(1);
    let expected = cap64
        .checked_mul(SLOT_BYTES as u64)
        .and_then(|b| b.checked_add(IMAGE_HEADER as u64));
    if expected != Some(image.len() as u64) {
        return Err(IndexImageError::BadLength {
            expected,
            actual: image.len(),
        });
    }
    // The length matched, so the capacity fits in memory (and in usize).
    let cap = (image.len() - IMAGE_HEADER) / SLOT_BYTES;
    let mut t = empty_table(cap);
    let mut actual = 0u64;
    for (i, e) in t.iter_mut().enumerate() {
        *e = [word(2 + 2 * i), word(3 + 2 * i)];
        if e[0] != 0 {
            actual += 1;
        }
    }
    if actual != count {
        return Err(IndexImageError::BadCount {
            header: count,
            actual,
        });
    }
    if cap64 <= count && !(cap64 == 0 && count == 0) {
        return Err(IndexImageError::Full { capacity: cap64 });
    }
    // Probe order: an entry displaced by d > 0 must follow a non-empty slot
    // whose entry is displaced by at least d - 1, and by exactly d - 1 (same
    // home) only with a smaller fingerprint. This makes every entry reachable
    // by `probe` and rules out duplicate fingerprints.
    for pos in 0..cap {
        let fp = t[pos][0];
        if fp == 0 {
            continue;
        }
        let d = displacement(fp, pos, cap);
        if d == 0 {
            continue;
        }
        let prev = if pos == 0 { cap - 1 } else { pos - 1 };
        let pfp = t[prev][0];
        let ok = pfp != 0 && {
            let pd = displacement(pfp, prev, cap);
            d < pd + 1 || (d == pd + 1 && pfp < fp)
        };
        if !ok {
            return Err(IndexImageError::Disordered { slot: pos as u64 });
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check_invariants, check_invariants_of, mk, splitmix};
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
        assert_eq!(bytes, 8 * 16 + ix.stats().capacity * 16);
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
        assert_eq!(img.len(), 16);
        ix2.load_shard_image(1, &img).expect("empty image");
        assert_eq!(ix2.shard_image(1), img);
    }

    fn image(cap: u64, count: u64, slots: &[(u64, u64)]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&cap.to_le_bytes());
        v.extend_from_slice(&count.to_le_bytes());
        for (a, b) in slots {
            v.extend_from_slice(&a.to_le_bytes());
            v.extend_from_slice(&b.to_le_bytes());
        }
        v
    }

    #[test]
    fn malformed_images_rejected() {
        let ix = Index::with_shards(2, 0);
        ix.insert(mk(0, 99), 5);
        let before = ix.shard_image(0);
        let bad = |img: &[u8]| {
            let e = ix.load_shard_image(0, img).expect_err("must reject");
            assert!(!e.to_string().is_empty());
            assert_eq!(ix.shard_image(0), before, "shard unchanged on error");
            e
        };
        // too short, bad lengths, overflowing capacity
        assert!(matches!(bad(&[1, 2, 3]), IndexImageError::BadLength { .. }));
        assert!(matches!(
            bad(&image(4, 0, &[(0, 0); 3])),
            IndexImageError::BadLength { .. }
        ));
        let mut trailing = image(1, 0, &[(0, 0)]);
        trailing.push(0);
        assert!(matches!(bad(&trailing), IndexImageError::BadLength { .. }));
        assert!(matches!(
            bad(&image(u64::MAX, 0, &[])),
            IndexImageError::BadLength { expected: None, .. }
        ));
        // count mismatch
        assert!(matches!(
            bad(&image(
                4,
                2,
                &[(0, 0), (u64::MAX / 4 + 1, 9), (0, 0), (0, 0)]
            )),
            IndexImageError::BadCount {
                header: 2,
                actual: 1
            }
        ));
        // full table, and nonzero count in zero capacity
        assert!(matches!(
            bad(&image(1, 1, &[(5, 5)])),
            IndexImageError::Full { .. }
        ));
        assert!(matches!(
            bad(&image(0, 1, &[])),
            IndexImageError::BadCount { .. }
        ));
        // entry separated from its home by an empty slot (home of fp 1 in cap 4 is 0)
        assert!(matches!(
            bad(&image(4, 1, &[(0, 0), (1, 1), (0, 0), (0, 0)])),
            IndexImageError::Disordered { slot: 1 }
        ));
        // duplicate fingerprint
        assert!(matches!(
            bad(&image(4, 2, &[(1, 1), (1, 2), (0, 0), (0, 0)])),
            IndexImageError::Disordered { slot: 1 }
        ));
        // same home out of fp order
        assert!(matches!(
            bad(&image(4, 2, &[(3, 1), (2, 2), (0, 0), (0, 0)])),
            IndexImageError::Disordered { slot: 1 }
        ));
        // home order violated (fp with home 2 before fp with home 0)
        let h2 = u64::MAX / 2 + 5;
        assert!(matches!(
            bad(&image(4, 3, &[(0, 0), (0, 0), (h2, 1), (7, 2)])),
            IndexImageError::BadCount { .. }
        ));
        assert!(matches!(
            bad(&image(4, 3, &[(9, 0), (0, 0), (h2, 1), (7, 2)])),
            IndexImageError::Disordered { slot: 3 }
        ));
        // no such shard
        assert!(matches!(
            ix.load_shard_image(2, &before),
            Err(IndexImageError::NoSuchShard {
                shard: 2,
                shards: 2
            })
        ));
        assert!(ix.shard_image(2).is_empty());
        // a valid wrapped cluster is accepted: home 3 entries wrapping to slot 0
        let h3 = u64::MAX - 10;
        let ok = image(4, 2, &[(h3 + 1, 2), (0, 0), (0, 0), (h3, 1)]);
        ix.load_shard_image(1, &ok)
            .expect("wrapped cluster is valid");
        assert_eq!(ix.get(mk(u64::MAX, h3)), Some(1));
        assert_eq!(ix.get(mk(u64::MAX, h3 + 1)), Some(2));
        assert_eq!(ix.get(mk(u64::MAX, h3 + 2)), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random corruptions of a valid image never panic; whatever loads is
        /// structurally valid and every key in it can be found.
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
                let cap = (img.len() - 16) / 16;
                for s in 0..cap {
                    let fp = u64::from_le_bytes(img[16 + 16 * s..24 + 16 * s].try_into().expect("8"));
                    let loc = u64::from_le_bytes(img[24 + 16 * s..32 + 16 * s].try_into().expect("8"));
                    if fp != 0 {
                        prop_assert_eq!(ix.get(mk(0, fp)), Some(loc));
                    }
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
