//! What `masse bench` shares with RocksDB's `db_bench` (version 7.8): how keys are drawn
//! and formatted, how its per-thread generators are seeded, its summary line, and a parser
//! for its output (used by `bench/compare-rocksdb`).
//!
//! Checked against db_bench 7.8.3 (Debian's `rocksdb-tools`): with the same `--seed`,
//! `--num` and `--threads`, `masse bench` draws exactly the keys db_bench draws, so
//! "found" counts match (see docs/benchmarks.md, "Keys").

use std::collections::BTreeMap;

/// The 64-bit Mersenne Twister (`std::mt19937_64`), db_bench's `Random64`.
#[derive(Clone)]
pub struct Mt64 {
    mt: Box<[u64; 312]>,
    i: usize,
}

impl Mt64 {
    /// Seeded like `std::mt19937_64(seed)`.
    pub fn new(seed: u64) -> Mt64 {
        let mut mt = Box::new([0u64; 312]);
        mt[0] = seed;
        for i in 1..312 {
            mt[i] = 6364136223846793005u64
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 62))
                .wrapping_add(i as u64);
        }
        Mt64 { mt, i: 312 }
    }

    fn twist(&mut self) {
        for i in 0..312 {
            let x = (self.mt[i] & 0xFFFF_FFFF_8000_0000) | (self.mt[(i + 1) % 312] & 0x7FFF_FFFF);
            let mut xa = x >> 1;
            if x & 1 != 0 {
                xa ^= 0xB502_6F5A_A966_19E9;
            }
            self.mt[i] = self.mt[(i + 156) % 312] ^ xa;
        }
        self.i = 0;
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        if self.i >= 312 {
            self.twist();
        }
        let mut y = self.mt[self.i];
        self.i += 1;
        y ^= (y >> 29) & 0x5555_5555_5555_5555;
        y ^= (y << 17) & 0x71D6_7FFF_EDA6_0000;
        y ^= (y << 37) & 0xFFF7_EEE0_0000_0000;
        y ^ (y >> 43)
    }

    /// The key number of db_bench's next random operation, uniform over `[0, num)`.
    /// db_bench 7.8 draws twice per operation (once to pick one of its DBs, `SelectDB`,
    /// once for the key) and takes the second draw modulo `num`.
    pub fn next_key(&mut self, num: u64) -> u64 {
        let _db = self.next_u64();
        self.next_u64() % num.max(1)
    }
}

/// Write key number `v` the way db_bench does (`GenerateKeyFromInt` without prefixes): the
/// first min(key_size, 8) bytes are `v` in big-endian binary (its low bytes when the key is
/// shorter than 8), the rest ASCII '0'.
pub fn fmt_key(buf: &mut [u8], v: u64) {
    let n = buf.len().min(8);
    let be = v.to_be_bytes();
    buf[..n].copy_from_slice(&be[8 - n..]);
    buf[n..].fill(b'0');
}

/// Seeds of db_bench's per-thread generators: thread `i` of the `k`-th thread started in
/// this process (counting every thread of every benchmark so far, from 1) gets
/// `seed + k`. `Seeds` hands them out in that order.
#[derive(Clone, Debug)]
pub struct Seeds {
    base: u64,
    started: u64,
}

impl Seeds {
    /// Seed base `--seed`.
    pub fn new(base: u64) -> Seeds {
        Seeds { base, started: 0 }
    }
    /// Seeds for the `n` threads of the next benchmark.
    pub fn next_threads(&mut self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                self.started += 1;
                self.base.wrapping_add(self.started)
            })
            .collect()
    }
}

/// db_bench's summary line of one benchmark, e.g.
/// `readrandom   :      52.129 micros/op 38360 ops/sec 60.001 seconds 2301600 operations;    4.4 MB/s (1203 of 1918 found)`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Benchmark name.
    pub name: String,
    /// Sum over threads of their busy time ÷ operations, µs (the mean latency seen by a thread).
    pub micros_per_op: f64,
    /// Operations ÷ wall time (truncated to an integer, as db_bench prints it).
    pub ops_per_sec: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Operations of all threads.
    pub operations: u64,
    /// Everything after the `;` (MB/s and the benchmark's message), trimmed.
    pub extra: String,
}

impl Summary {
    /// The line exactly as db_bench 7.8 prints it.
    pub fn line(&self) -> String {
        format!(
            "{:<12} : {:>11.3} micros/op {} ops/sec {:.3} seconds {} operations;{}{}",
            self.name,
            self.micros_per_op,
            self.ops_per_sec,
            self.seconds,
            self.operations,
            if self.extra.is_empty() { "" } else { " " },
            self.extra
        )
    }

    /// Parse a summary line; `None` if `line` is not one.
    pub fn parse(line: &str) -> Option<Summary> {
        let (name, rest) = line.split_once(" : ")?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        let (head, extra) = match rest.split_once(';') {
            Some((h, e)) => (h, e.trim()),
            None => (rest, ""),
        };
        let w: Vec<&str> = head.split_whitespace().collect();
        if w.len() < 4 || w[1] != "micros/op" || w[3] != "ops/sec" {
            return None;
        }
        let micros_per_op = w[0].parse().ok()?;
        let ops_per_sec = w[2].parse().ok()?;
        // 7.8 adds "X seconds N operations"; older versions do not.
        let (seconds, operations) = if w.len() >= 8 && w[5] == "seconds" && w[7] == "operations" {
            (w[4].parse().ok()?, w[6].parse().ok()?)
        } else {
            (0.0, 0)
        };
        Some(Summary {
            name: name.to_string(),
            micros_per_op,
            ops_per_sec,
            seconds,
            operations,
            extra: extra.to_string(),
        })
    }

    /// The "found" figures of the message: `(F of N found)` (readrandom) or
    /// `( reads:R writes:W total:T found:F)` (readrandomwriterandom), as (found, reads).
    pub fn found(&self) -> Option<(u64, u64)> {
        let e = &self.extra;
        if let Some(i) = e.find(" found)") {
            let open = e[..i].rfind('(')?;
            let (f, n) = e[open + 1..i].split_once(" of ")?;
            return Some((f.trim().parse().ok()?, n.trim().parse().ok()?));
        }
        let field = |k: &str| -> Option<u64> {
            let i = e.find(k)? + k.len();
            let s: String = e[i..].chars().take_while(|c| c.is_ascii_digit()).collect();
            s.parse().ok()
        };
        Some((field("found:")?, field("reads:")?))
    }
}

/// One `Microseconds per <op>:` histogram of db_bench's `--histogram` output.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Histo {
    /// "read", "write", "delete", ...
    pub op: String,
    /// Count, mean, percentiles and max as db_bench prints them, µs (it prints no
    /// p99.999: `lat.p99999` is filled from the buckets by `quantile`).
    pub lat: crate::qos::Latency,
    /// Buckets `(low, high] -> count`, µs.
    pub buckets: Vec<(f64, f64, u64)>,
}

impl Histo {
    /// Share of samples above `us` microseconds, in percent, interpolating linearly
    /// inside the bucket that contains `us` (db_bench's buckets do not fall on 1, 2, 4,
    /// 8 or 64 ms).
    pub fn share_over_us(&self, us: f64) -> f64 {
        let total: u64 = self.buckets.iter().map(|b| b.2).sum();
        if total == 0 {
            return 0.0;
        }
        let mut over = 0.0;
        for &(lo, hi, n) in &self.buckets {
            if lo >= us {
                over += n as f64;
            } else if hi > us {
                over += n as f64 * (hi - us) / (hi - lo);
            }
        }
        100.0 * over / total as f64
    }

    /// The `q` quantile (0..1) from the buckets, interpolated linearly (db_bench prints
    /// percentiles only up to 99.99).
    pub fn quantile(&self, q: f64) -> f64 {
        let total: u64 = self.buckets.iter().map(|b| b.2).sum();
        let target = q * total as f64;
        let mut seen = 0.0;
        for &(lo, hi, n) in &self.buckets {
            if seen + n as f64 >= target && n > 0 {
                let frac = (target - seen) / n as f64;
                return (lo + frac * (hi - lo)).min(self.lat.max.max(lo));
            }
            seen += n as f64;
        }
        self.lat.max
    }
}

/// What `parse_output` finds in db_bench's standard output.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Output {
    /// Summary lines, in order.
    pub summaries: Vec<Summary>,
    /// Histograms of the last benchmark that printed them, by operation.
    pub histograms: Vec<Histo>,
    /// `--statistics` tickers (`rocksdb.x COUNT : n`).
    pub tickers: BTreeMap<String, u64>,
    /// `RocksDB:    version X` (db_bench prints it on standard error).
    pub version: Option<String>,
    /// db_bench warned "Assertions are enabled" (a build without NDEBUG) or
    /// "Optimization is disabled".
    pub assertions: bool,
}

fn num_after(s: &str, key: &str) -> Option<f64> {
    let i = s.find(key)? + key.len();
    s[i..].split_whitespace().next()?.parse().ok()
}

/// Parse db_bench's standard output. Progress lines (`... finished N ops`) may be mixed
/// into the same lines (they end with `\r` on a terminal, spaces otherwise).
pub fn parse_output(text: &str) -> Output {
    let mut out = Output::default();
    let mut cur: Option<Histo> = None;
    for raw in text.lines() {
        // Progress output runs into the next line's start; keep what follows the last one.
        let line = match raw.rfind("ops  ") {
            Some(i) if raw.contains("... finished") => raw[i + 3..].trim_start(),
            _ => raw,
        };
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("RocksDB:") {
            out.version = v
                .trim()
                .strip_prefix("version")
                .map(|v| v.trim().to_string());
        }
        if line.starts_with("WARNING: Assertions are enabled")
            || line.starts_with("WARNING: Optimization is disabled")
        {
            out.assertions = true;
        }
        if let Some(s) = Summary::parse(line) {
            out.summaries.push(s);
            out.histograms.clear();
            continue;
        }
        if let Some(op) = line
            .strip_prefix("Microseconds per ")
            .and_then(|r| r.strip_suffix(':'))
        {
            if let Some(h) = cur.take() {
                out.histograms.push(h);
            }
            cur = Some(Histo {
                op: op.to_string(),
                ..Histo::default()
            });
            continue;
        }
        if let Some(h) = cur.as_mut() {
            if line.starts_with("Count:") {
                h.lat.count = num_after(line, "Count:").unwrap_or(0.0) as u64;
                h.lat.avg = num_after(line, "Average:").unwrap_or(0.0);
            } else if line.starts_with("Min:") {
                h.lat.max = num_after(line, "Max:").unwrap_or(0.0);
            } else if line.starts_with("Percentiles:") {
                h.lat.p50 = num_after(line, "P50:").unwrap_or(0.0);
                h.lat.p99 = num_after(line, "P99:").unwrap_or(0.0);
                h.lat.p999 = num_after(line, "P99.9:").unwrap_or(0.0);
                h.lat.p9999 = num_after(line, "P99.99:").unwrap_or(0.0);
            } else if line.starts_with('[') || line.starts_with('(') {
                let inner = line[1..].split(']').next().unwrap_or("");
                let mut p = inner.split(',');
                let lo = p.next().and_then(|x| x.trim().parse::<f64>().ok());
                let hi = p.next().and_then(|x| x.trim().parse::<f64>().ok());
                let n = line
                    .split(']')
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|x| x.parse::<u64>().ok());
                if let (Some(lo), Some(hi), Some(n)) = (lo, hi, n) {
                    h.buckets.push((lo, hi, n));
                }
            } else if line.is_empty() && !h.buckets.is_empty() {
                if let Some(h) = cur.take() {
                    out.histograms.push(h);
                }
            }
        }
        if let Some((k, v)) = line.split_once(" COUNT : ") {
            if let Ok(v) = v.trim().parse() {
                out.tickers.insert(k.trim().to_string(), v);
            }
        }
    }
    if let Some(h) = cur.take() {
        out.histograms.push(h);
    }
    for h in &mut out.histograms {
        h.lat.p99999 = h.quantile(0.99999);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt64_matches_the_cpp_standard() {
        // The C++ standard requires the 10000th output of a default-seeded
        // (5489) mt19937_64 to be 9981545732273789042.
        let mut r = Mt64::new(5489);
        let mut v = 0;
        for _ in 0..10000 {
            v = r.next_u64();
        }
        assert_eq!(v, 9981545732273789042);
    }

    #[test]
    fn keys_are_big_endian_then_ascii_zeros() {
        let mut k = [0u8; 16];
        fmt_key(&mut k, 0x0102);
        assert_eq!(&k[..8], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&k[8..], b"00000000");
        let mut s = [0u8; 4];
        fmt_key(&mut s, 0x0A0B_0C0D_0E0F);
        assert_eq!(s, [0x0C, 0x0D, 0x0E, 0x0F]);
    }

    #[test]
    fn seeds_count_threads_across_benchmarks() {
        let mut s = Seeds::new(100);
        assert_eq!(s.next_threads(2), vec![101, 102]);
        assert_eq!(s.next_threads(3), vec![103, 104, 105]);
    }

    #[test]
    fn summary_line_round_trips() {
        let l = "readrandom   :       1.548 micros/op 1259049 ops/sec 0.032 seconds 40000 operations;  120.3 MB/s (17313 of 20000 found)";
        let s = Summary::parse(l).expect("a summary line");
        assert_eq!(s.name, "readrandom");
        assert_eq!(s.ops_per_sec, 1259049);
        assert_eq!(s.operations, 40000);
        assert_eq!(s.found(), Some((17313, 20000)));
        assert_eq!(Summary::parse(&s.line()).as_ref(), Some(&s));
        let rw = Summary::parse("readrandomwriterandom :       2.051 micros/op 968874 ops/sec 0.041 seconds 40000 operations; ( reads:18000 writes:2000 total:20000 found:15756)").expect("rrwr");
        assert_eq!(rw.found(), Some((15756, 18000)));
        assert!(Summary::parse("Keys:       16 bytes each").is_none());
    }

    #[test]
    fn histogram_shares_interpolate_inside_buckets() {
        let mut h = Histo {
            buckets: vec![
                (0.0, 1000.0, 50),
                (1000.0, 3000.0, 40),
                (3000.0, 9000.0, 10),
            ],
            ..Histo::default()
        };
        h.lat.max = 9000.0;
        assert!((h.share_over_us(1000.0) - 50.0).abs() < 1e-9);
        assert!((h.share_over_us(2000.0) - 30.0).abs() < 1e-9);
        assert!((h.share_over_us(6000.0) - 5.0).abs() < 1e-9);
        assert!((h.quantile(0.5) - 1000.0).abs() < 1e-9);
        assert!((h.quantile(0.95) - 6000.0).abs() < 1e-9);
    }
}
