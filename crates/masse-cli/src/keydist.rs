//! How benchmark keys are drawn: uniformly (db_bench's way) or zipfian (YCSB's
//! skewed "request distribution", θ = 0.99 by default), for measuring what
//! skewed churn does to GC (docs/benchmarks.md, "Overwrite churn").
//!
//! A zipfian draw picks a popularity rank — rank 0 the hottest key — with
//! probability ∝ 1/(rank+1)^θ (`rand_distr::Zipf`, rejection-inversion: O(1)
//! per draw, no O(n) set-up), then scatters the rank over the key space with a
//! fixed permutation, so the hot keys are spread over the whole key range (as
//! YCSB's "scrambled zipfian") instead of all being the smallest key numbers.

use crate::dbbench::Mt64;
use crate::rng::SplitMix64;
use rand_distr::{Distribution, Zipf};
use std::convert::Infallible;

/// The key distributions `masse bench` and `masse demo` offer.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
    /// Every key equally likely (db_bench's only distribution).
    #[default]
    Uniform,
    /// Key popularity ∝ 1/rank^θ (--zipf-theta), hot keys scattered over the key space.
    Zipfian,
}

/// θ of YCSB's zipfian request distribution (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const DEFAULT_THETA: f64 = 0.99;

/// Draws zipfian key numbers in `[0, n)` ([`KeyDist::Zipfian`]; uniform draws stay
/// each tool's own: db_bench's in `masse bench`, multiply-shift in `masse demo`).
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    zipf: Zipf<f64>,
}

impl Zipfian {
    /// A generator over `[0, n)`; `theta` must lie in `[0, 10]` (0 is uniform,
    /// 0.99 YCSB's default).
    pub fn new(n: u64, theta: f64) -> Result<Zipfian, String> {
        let n = n.max(1);
        if !(0.0..=10.0).contains(&theta) {
            return Err(format!("zipfian theta must lie in [0, 10], not {theta}"));
        }
        let zipf = Zipf::new(n as f64, theta)
            .map_err(|e| format!("zipfian over {n} keys with theta {theta}: {e}"))?;
        Ok(Zipfian { n, zipf })
    }

    /// The next key number: a popularity rank, scattered over the key space.
    pub fn next<R: rand_core::Rng>(&self, rng: &mut R) -> u64 {
        // Samples lie in [1, n] (as floats); clamp against rounding at 2^53+.
        let rank = (self.zipf.sample(rng) as u64).clamp(1, self.n) - 1;
        scatter(rank, self.n)
    }
}

/// A fixed permutation of `[0, n)`: `rank × P mod n` with `P = 2^61 − 1`, a prime
/// larger than any `n` here, so `P` and `n` are coprime and the map is a bijection.
/// Consecutive ranks land about `P mod n` apart: the hot set is spread out.
pub fn scatter(rank: u64, n: u64) -> u64 {
    const P: u128 = (1 << 61) - 1;
    ((rank as u128 * P) % n.max(1) as u128) as u64
}

/// Both of the CLI's generators serve `rand_distr` (rand_core's infallible `TryRng`
/// is what makes a type an `Rng`): 64 bits per draw, the high half for 32.
macro_rules! try_rng_from_next_u64 {
    ($($t:ty),*) => {$(
        impl rand_core::TryRng for $t {
            type Error = Infallible;
            fn try_next_u32(&mut self) -> Result<u32, Infallible> {
                Ok((self.next_u64() >> 32) as u32)
            }
            fn try_next_u64(&mut self) -> Result<u64, Infallible> {
                Ok(self.next_u64())
            }
            fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
                for c in dst.chunks_mut(8) {
                    let b = self.next_u64().to_le_bytes();
                    c.copy_from_slice(&b[..c.len()]);
                }
                Ok(())
            }
        }
    )*};
}
try_rng_from_next_u64!(SplitMix64, Mt64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_is_a_permutation() {
        for n in [1u64, 2, 3, 7, 64, 1000, 4099] {
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let k = scatter(r, n);
                assert!(k < n);
                assert!(!seen[k as usize], "n {n}: {k} twice");
                seen[k as usize] = true;
            }
        }
    }

    /// With θ = 0.99 over 10^4 keys, the hottest key takes ≈ 1/H(10^4, 0.99) ≈ 10 %
    /// of the draws and the hottest 1 % of keys about half; uniform would give 0.01 %
    /// and 1 %. Fails if the draw is not skewed (or skewed the wrong way).
    #[test]
    fn zipfian_is_skewed_as_zipf_says() {
        let n = 10_000u64;
        let g = Zipfian::new(n, DEFAULT_THETA).expect("gen");
        let mut rng = SplitMix64::new(3);
        let mut count = vec![0u64; n as usize];
        let draws = 400_000;
        for _ in 0..draws {
            count[g.next(&mut rng) as usize] += 1;
        }
        let h: f64 = (1..=n).map(|k| (k as f64).powf(-DEFAULT_THETA)).sum();
        let top = count[scatter(0, n) as usize] as f64 / draws as f64;
        assert!(
            (top - 1.0 / h).abs() < 0.01,
            "hottest key {top}, expected {}",
            1.0 / h
        );
        let hot1: u64 = (0..n / 100).map(|r| count[scatter(r, n) as usize]).sum();
        let want: f64 = (1..=n / 100)
            .map(|k| (k as f64).powf(-DEFAULT_THETA))
            .sum::<f64>()
            / h;
        let got = hot1 as f64 / draws as f64;
        assert!(
            (got - want).abs() < 0.02,
            "hottest 1 %: {got}, expected {want}"
        );
    }

    #[test]
    fn bad_theta_is_an_error() {
        assert!(Zipfian::new(10, -1.0).is_err());
        assert!(Zipfian::new(10, f64::NAN).is_err());
        let g = Zipfian::new(1, DEFAULT_THETA).expect("one key");
        assert_eq!(g.next(&mut SplitMix64::new(1)), 0);
    }
}
