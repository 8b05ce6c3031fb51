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
    /// The digest of `key` in this pool.
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
