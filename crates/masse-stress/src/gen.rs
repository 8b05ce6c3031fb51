//! Deterministic keys and values: key `i` and version `v` always produce the
//! same bytes, so the oracle stores only numbers and a value read back can be
//! checked exactly. Sizes cover the engine's limits: 1-byte and 1024-byte keys,
//! empty values and values of the maximum length.

use masse::{MAX_KEY_LEN, MAX_VALUE_LEN};
use xxhash_rust::xxh3::xxh3_64_with_seed;

fn mix(a: u64, b: u64) -> u64 {
    xxh3_64_with_seed(&a.to_le_bytes(), b ^ 0x9e37_79b9_7f4a_7c15)
}

/// Length of key `i`: 1 byte for `i < 16`, the maximum for one key in 1009,
/// otherwise 8–48 bytes.
pub fn key_len(i: u64) -> usize {
    if i < 16 {
        1
    } else if i % 1009 == 16 {
        MAX_KEY_LEN
    } else {
        8 + (mix(i, 1) % 41) as usize
    }
}

/// Key `i`: a single hex digit for `i < 16`, else `"{i:x}-"` and filler.
pub fn key(i: u64) -> Vec<u8> {
    if i < 16 {
        return vec![b"0123456789abcdef"[i as usize]];
    }
    let mut k = format!("{i:x}-").into_bytes();
    let len = key_len(i).max(k.len());
    let h = mix(i, 2);
    while k.len() < len {
        k.push(b'a' + ((h >> (k.len() % 60)) as usize + k.len()) as u8 % 26);
    }
    k
}

/// The key number of `k`, if `k` is exactly some `key(i)` with `i < nkeys`.
pub fn parse_key(k: &[u8], nkeys: u64) -> Option<u64> {
    let i = if k.len() == 1 {
        (k[0] as char).to_digit(16)? as u64
    } else {
        let dash = k.iter().position(|&b| b == b'-')?;
        u64::from_str_radix(std::str::from_utf8(&k[..dash]).ok()?, 16).ok()?
    };
    (i < nkeys && key(i) == k).then_some(i)
}

/// Whether key `i`'s values keep one length through all its versions: one
/// key in eight, spread over every worker's keys. Overwrites of these keys
/// can be absorbed in DRAM (the engine writes a put over its key's record in
/// the open segment only at the same length, design.md §4.10); every other
/// key changes length from version to version, which almost never allows it.
pub fn steady(i: u64) -> bool {
    mix(i, 5).is_multiple_of(8)
}

/// Length of version `ver` of key `i`'s value: mostly 16–315 bytes, 2 % empty,
/// 3 % under 12 bytes, 10 % 4–16 KiB, and the engine's maximum for a few keys;
/// the same for every version of a [`steady`] key.
pub fn value_len(i: u64, ver: u32) -> usize {
    match steady(i) {
        // At least 12 bytes, so every version names itself: a lost overwrite
        // cannot pass for the value it should have replaced.
        true => len_of(i, 1).max(12),
        false => len_of(i, ver),
    }
}

fn len_of(i: u64, ver: u32) -> usize {
    let h = mix(i, 3 + ver as u64);
    if i % 4999 == 7 && h % 4 == 0 {
        return MAX_VALUE_LEN;
    }
    match h % 100 {
        0..=1 => 0,
        2..=4 => 1 + (h >> 8) as usize % 11,
        5..=14 => 4096 + (h >> 8) as usize % 12_288,
        _ => 16 + (h >> 8) as usize % 300,
    }
}

/// Version `ver ≥ 1` of key `i`'s value. Values of 12 bytes or more start with
/// `ver` (u32) and `i` (u64), so a value found anywhere names its origin.
pub fn value(i: u64, ver: u32) -> Vec<u8> {
    let len = value_len(i, ver);
    let mut v = Vec::with_capacity(len);
    if len >= 12 {
        v.extend_from_slice(&ver.to_le_bytes());
        v.extend_from_slice(&i.to_le_bytes());
    }
    let mut block = 0u64;
    while v.len() < len {
        let w = mix(i ^ (block << 40), ver as u64 + 7).to_le_bytes();
        let n = (len - v.len()).min(8);
        v.extend_from_slice(&w[..n]);
        block += 1;
    }
    v
}

/// Whether `v` is some version of key `i`'s value (checked exactly for values
/// that carry their version; shorter ones only by length plausibility).
pub fn is_some_version(i: u64, v: &[u8], max_ver: u32) -> bool {
    if v.len() < 12 {
        return v.len() <= 11;
    }
    let ver = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    let mut ib = [0u8; 8];
    ib.copy_from_slice(&v[4..12]);
    ver >= 1 && ver <= max_ver && u64::from_le_bytes(ib) == i && value(i, ver) == v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000 {
            let k = key(i);
            assert!(!k.is_empty() && k.len() <= MAX_KEY_LEN);
            assert!(seen.insert(k.clone()), "duplicate key {i}");
            assert_eq!(parse_key(&k, 20_000), Some(i));
        }
        assert!(seen.iter().any(|k| k.len() == 1));
        assert!(seen.iter().any(|k| k.len() == MAX_KEY_LEN));
        assert_eq!(parse_key(b"zz", 100), None);
    }

    #[test]
    fn values_cover_the_limits_and_name_their_version() {
        let lens: Vec<usize> = (0..20_000u64)
            .map(|i| value_len(i, 1 + (i % 3) as u32))
            .collect();
        assert!(lens.contains(&0));
        assert!(lens.contains(&MAX_VALUE_LEN));
        let v = value(12345, 7);
        assert_eq!(v, value(12345, 7));
        assert_ne!(v, value(12345, 8));
        if v.len() >= 12 {
            assert!(is_some_version(12345, &v, 7));
            assert!(!is_some_version(12345, &v, 6));
            assert!(!is_some_version(12346, &v, 7));
        }
    }

    #[test]
    fn steady_keys_keep_their_length_and_still_name_their_version() {
        let steady_keys: Vec<u64> = (0..8_000).filter(|&i| steady(i)).collect();
        assert!(
            (800..1_200).contains(&steady_keys.len()),
            "{}",
            steady_keys.len()
        );
        // Spread over every worker's keys (key i belongs to thread i % threads).
        for threads in [2, 3, 4, 8] {
            for t in 0..threads {
                assert!(steady_keys.iter().any(|&i| i % threads == t));
            }
        }
        for &i in &steady_keys {
            assert!((2..9).all(|v| value_len(i, v) == value_len(i, 1)));
            assert_ne!(value(i, 2), value(i, 3), "key {i}");
            assert!(is_some_version(i, &value(i, 3), 3));
            assert!(!is_some_version(i, &value(i, 3), 2));
        }
        let changing = (0..100u64).filter(|&i| !steady(i));
        assert!(
            changing
                .filter(|&i| value_len(i, 1) != value_len(i, 2))
                .count()
                > 50
        );
    }
}
