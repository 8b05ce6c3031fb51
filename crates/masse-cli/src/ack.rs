//! Keys and values of the crash-test child `masse ack-writer`.
//!
//! The child writes key [`ack_key`]`(i)` with value [`ack_value`]`(i, seed, sizes)`;
//! the test that kills it recomputes the same values to check what survived.

use crate::rng::{mix64, SplitMix64};
use std::str::FromStr;

/// Key number `i` of the crash-test writer: `ack` followed by `i` zero-padded to 12 digits.
pub fn ack_key(i: u64) -> Vec<u8> {
    format!("ack{i:012}").into_bytes()
}

/// Value lengths of the crash-test writer: a fixed size (`100`) or an inclusive
/// range (`100..4000`) from which each key's length is drawn deterministically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueSizes {
    /// Smallest length.
    pub min: usize,
    /// Largest length (inclusive).
    pub max: usize,
}

impl ValueSizes {
    /// A fixed length.
    pub fn fixed(n: usize) -> ValueSizes {
        ValueSizes { min: n, max: n }
    }
}

impl std::fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..{}", self.min, self.max)
        }
    }
}

impl FromStr for ValueSizes {
    type Err = String;
    fn from_str(s: &str) -> Result<ValueSizes, String> {
        let num = |t: &str| crate::units::parse_size(t).map(|v| v as usize);
        let (min, max) = match s.split_once("..") {
            Some((a, b)) => (num(a)?, num(b.trim_start_matches('='))?),
            None => {
                let n = num(s)?;
                (n, n)
            }
        };
        if min > max {
            return Err(format!(
                "value size range {s:?} is empty (minimum above maximum)"
            ));
        }
        if max > masse::MAX_VALUE_LEN {
            return Err(format!(
                "value size {max} exceeds the maximum of {} bytes",
                masse::MAX_VALUE_LEN
            ));
        }
        Ok(ValueSizes { min, max })
    }
}

/// The value written under [`ack_key`]`(i)` by a writer run with `seed` and `sizes`:
/// deterministic pseudo-random bytes whose length lies in `sizes`.
pub fn ack_value(i: u64, seed: u64, sizes: ValueSizes) -> Vec<u8> {
    let mut r = SplitMix64::new(mix64(i ^ mix64(seed ^ 0x6163_6b00)));
    let span = (sizes.max - sizes.min) as u64;
    let len = sizes.min
        + if span == 0 {
            0
        } else {
            r.below(span + 1) as usize
        };
    let mut v = vec![0u8; len];
    r.fill(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_sized() {
        let s: ValueSizes = "100..4000".parse().unwrap();
        assert_eq!(
            s,
            ValueSizes {
                min: 100,
                max: 4000
            }
        );
        let mut lens = std::collections::HashSet::new();
        for i in 0..200 {
            let v = ack_value(i, 3, s);
            assert!((100..=4000).contains(&v.len()));
            assert_eq!(v, ack_value(i, 3, s));
            assert_ne!(v, ack_value(i, 4, s));
            lens.insert(v.len());
        }
        assert!(lens.len() > 100, "lengths should vary");
        assert_eq!(ack_value(9, 0, ValueSizes::fixed(0)).len(), 0);
        assert_eq!(ack_key(42), b"ack000000000042".to_vec());
        assert!("5..4".parse::<ValueSizes>().is_err());
        assert!("99999999".parse::<ValueSizes>().is_err());
    }
}
