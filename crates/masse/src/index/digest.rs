//! Key digests: how a key becomes the 128-bit [`Digest`] the index knows it
//! by, and the [`fingerprint`] of a digest that a table slot stores.

use std::fmt;

/// A key's identity in the index: `xxh3_128(key)`.
pub type Digest = u128;

/// The digest of `key` as pools of format version 1 compute it: unkeyed
/// XXH3-128 (seed 0), stable across platforms and versions. Anyone who knows it
/// can search for keys that collide (for 16-byte keys they can even be
/// computed directly); pools of format version 2 use [`KeyDigest::Keyed`].
#[inline]
pub fn digest(key: &[u8]) -> Digest {
    xxhash_rust::xxh3::xxh3_128(key)
}

/// How a pool turns keys into [`Digest`]s: chosen at create and recorded in
/// the superblock.
///
/// The index tells keys apart by `64 + log2(shards)` bits of the digest alone,
/// and a put or delete whose digest matches an existing entry replaces it. If
/// whoever chooses keys (a network client, a file name) could compute digests,
/// they could search offline for a key that replaces another key. With a
/// secret per-pool key for a pseudo-random function they cannot: each guess
/// needs a write to the pool and succeeds with probability `n / 2^(64 + log2
/// shards)` for a pool of `n` keys (5e-15 at 10^8 keys).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyDigest {
    /// Format version 1: [`digest`], unkeyed.
    Xxh3,
    /// Format version 2: SipHash-2-4 with 128-bit output, keyed with the pool's
    /// secret (16 random bytes, kept in the superblock, never shown).
    Keyed([u8; 16]),
}

impl KeyDigest {
    /// The digest of `key` in this pool (all 128 bits; version-2 summaries
    /// store them whole, and builds before the canonical digest compare
    /// them whole). Compare digests from different sources as
    /// [`canonical`] forms.
    #[inline]
    pub fn digest(&self, key: &[u8]) -> Digest {
        use std::hash::Hasher;
        match self {
            KeyDigest::Xxh3 => digest(key),
            KeyDigest::Keyed(k) => {
                let mut h = siphasher::sip128::SipHasher24::new_with_key(k);
                h.write(key);
                siphasher::sip128::Hasher128::finish128(&h).into()
            }
        }
    }
}

/// Most shards an index can have: the shard number comes from digest bits
/// 112–127, the top 16 bits that [`canonical`] keeps.
pub const MAX_SHARDS: usize = 1 << 16;

/// The 80 bits of a digest the engine uses: bits 0–63 (the [`fingerprint`])
/// and 112–127 (the shard number's source, for up to [`MAX_SHARDS`] shards),
/// the rest zero. Two keys are told apart by `64 + log2(shards)` of these
/// bits, so dropping the others weakens nothing; format version 3's summaries
/// store only these. Wherever a digest read from a summary meets a freshly
/// computed one (the commit filter, check), both are compared in this form.
#[inline]
pub fn canonical(d: Digest) -> Digest {
    d & (u64::MAX as u128 | (0xffff_u128 << 112))
}

impl fmt::Debug for KeyDigest {
    // Never print the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDigest::Xxh3 => f.write_str("Xxh3"),
            KeyDigest::Keyed(_) => f.write_str("Keyed(..)"),
        }
    }
}

/// The stored fingerprint of a digest: its low 64 bits, 0 remapped to 1.
#[inline]
pub fn fingerprint(d: Digest) -> u64 {
    let fp = d as u64;
    if fp == 0 {
        1
    } else {
        fp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical digest keeps exactly what the index reads: the
    /// fingerprint and the bits the shard number comes from.
    #[test]
    fn canonical_keeps_fingerprint_and_shard_bits() {
        let d: Digest = !0u128 ^ 0x1234;
        let c = canonical(d);
        assert_eq!(fingerprint(c), fingerprint(d));
        assert_eq!((c >> 112) as u16, (d >> 112) as u16);
        assert_eq!(c & !(u64::MAX as u128 | (0xffff_u128 << 112)), 0);
        assert_eq!(canonical(c), c);
    }
}
