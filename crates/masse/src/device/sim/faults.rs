//! Fault injection: deterministic from a seed.
//!
//! Every injected fault is drawn from one xorshift generator in the order the
//! device processes operations, so the same seed and the same sequence of
//! operations give the same faults. Classes:
//!
//! - **read errors**: a read fails with `EIO` (probability per read command);
//! - **write errors**: a write fails with `EIO` and nothing lands;
//! - **torn writes**: a write lands only partly (a prefix of whole 4 KiB
//!   blocks, possibly empty) and fails with `EIO`;
//! - **bit flips**: a stored 4 KiB block gets one bit inverted when written
//!   (probability per stored bit; the corruption persists, as media errors do);
//! - **power cut** (on demand, [`super::SimDevice::power_cut`]): writes not yet
//!   flushed are lost; with [`super::SimDevice::power_cut_torn`] each unflushed
//!   4 KiB block independently survives or not.

/// Probabilities of each fault class and the seed they are drawn from.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct FaultConfig {
    /// Seed of the fault generator.
    pub seed: u64,
    /// Probability that a read command fails.
    pub read_error: f64,
    /// Probability that a write command fails without writing anything.
    pub write_error: f64,
    /// Probability that a write command is torn (a prefix lands, then `EIO`).
    pub torn_write: f64,
    /// Probability per stored bit of being flipped when written.
    pub bitflip: f64,
}

impl FaultConfig {
    /// True when no random fault is configured.
    pub fn is_quiet(&self) -> bool {
        self.read_error == 0.0
            && self.write_error == 0.0
            && self.torn_write == 0.0
            && self.bitflip == 0.0
    }
}

/// How many faults of each class were injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounters {
    /// Reads failed.
    pub read_errors: u64,
    /// Writes failed with nothing written.
    pub write_errors: u64,
    /// Writes torn.
    pub torn_writes: u64,
    /// 4 KiB blocks of torn writes that landed.
    pub torn_blocks_landed: u64,
    /// Bits flipped in stored data.
    pub bit_flips: u64,
    /// Simulated power cuts.
    pub power_cuts: u64,
    /// Unflushed 4 KiB blocks lost at power cuts.
    pub blocks_lost: u64,
    /// Unflushed 4 KiB blocks that survived power cuts.
    pub blocks_survived: u64,
}

/// A small deterministic generator (xorshift64*), so results do not depend on
/// an external crate's algorithm choices across versions.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, never zero
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (never draws when `p` is 0, so a quiet
    /// configuration does not perturb the sequence of another class).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Probability that a 4 KiB block (32768 bits) gets at least one flip.
pub(crate) fn block_flip_probability(per_bit: f64) -> f64 {
    if per_bit <= 0.0 {
        return 0.0;
    }
    1.0 - (1.0 - per_bit.min(1.0)).powf(32768.0)
}
