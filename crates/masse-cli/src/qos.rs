//! Data-center quality-of-service figures of a benchmark run: latency percentiles,
//! IOPS consistency (Samsung PM863 white paper) and ACT-style latency shares (Aerospike
//! Certification Tool). Latencies are in nanoseconds in histograms, microseconds in reports.

use hdrhistogram::Histogram;

/// Latency summary of one operation type, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    /// Operations.
    pub count: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// 99.999th percentile.
    pub p99999: f64,
    /// Maximum.
    pub max: f64,
}

impl Latency {
    /// Summary of a histogram of nanoseconds. Percentiles are the highest value
    /// equivalent to the recorded one (hdrhistogram, 3 significant digits), so they are
    /// never below the true percentile by more than 0.1 %.
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Latency {
            count: h.len(),
            avg: h.mean() / 1e3,
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            p99999: us(h.value_at_quantile(0.99999)),
            max: us(h.max()),
        }
    }
}

/// IOPS consistency as the Samsung PM863 white paper defines it:
/// `(IOPS in the 99.9th percentile ÷ average IOPS) × 100`, over per-interval IOPS.
///
/// "IOPS in the 99.9th percentile" is the rate that 99.9 % of the intervals reach: the
/// value at nearest rank ⌈0.001·n⌉ of the intervals sorted from slowest. (The paper's
/// figures are ≤ 100 % and rise as that rate nears the average, so it is the low tail.)
/// With fewer than 1000 intervals this is the slowest interval. `None` without intervals
/// or when the average is zero.
pub fn iops_consistency(per_interval: &[u64]) -> Option<f64> {
    if per_interval.is_empty() {
        return None;
    }
    let mut v = per_interval.to_vec();
    v.sort_unstable();
    let n = v.len();
    let rank = ((0.001 * n as f64).ceil() as usize).clamp(1, n);
    let p999 = v[rank - 1] as f64;
    let avg = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    (avg > 0.0).then(|| 100.0 * p999 / avg)
}

/// The 99.9th-percentile rate of `iops_consistency` (the rate 99.9 % of intervals reach).
pub fn iops_p999(per_interval: &[u64]) -> Option<u64> {
    let mut v = per_interval.to_vec();
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return None;
    }
    let rank = ((0.001 * n as f64).ceil() as usize).clamp(1, n);
    Some(v[rank - 1])
}

/// Latency thresholds of the ACT-style shares, milliseconds.
pub const ACT_MS: [u64; 5] = [1, 2, 4, 8, 64];

/// Share of operations slower than a threshold.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ActShare {
    /// Threshold, ms.
    pub over_ms: u64,
    /// Operations slower than the threshold.
    pub ops: u64,
    /// Their share of all operations, percent.
    pub percent: f64,
}

/// ACT-style shares: for each threshold of [`ACT_MS`], the operations whose latency
/// exceeds it. A recorded value counts as over the threshold when even the lowest value
/// hdrhistogram treats as equal to it is (so rounding never inflates the share).
pub fn act_shares(h: &Histogram<u64>) -> Vec<ActShare> {
    let total = h.len();
    ACT_MS
        .iter()
        .map(|&ms| {
            let thr = ms * 1_000_000;
            let ops: u64 = h
                .iter_recorded()
                .filter(|v| h.lowest_equivalent(v.value_iterated_to()) > thr)
                .map(|v| v.count_at_value())
                .sum();
            ActShare {
                over_ms: ms,
                ops,
                percent: if total == 0 {
                    0.0
                } else {
                    100.0 * ops as f64 / total as f64
                },
            }
        })
        .collect()
}

/// Whether the shares meet the ACT certification limits: at most 5 % of transactions over
/// 1 ms, 1 % over 8 ms and 0.1 % over 64 ms.
pub fn act_pass(shares: &[ActShare]) -> bool {
    let limit = |ms: u64| match ms {
        1 => Some(5.0),
        8 => Some(1.0),
        64 => Some(0.1),
        _ => None,
    };
    shares.iter().all(|s| match limit(s.over_ms) {
        Some(l) => s.percent <= l,
        None => true,
    })
}

/// Operations per whole interval from per-interval counts: drops the last interval when
/// the run ended inside it (a partial interval is not a rate).
pub fn whole_intervals(counts: &[u64], elapsed_secs: f64, interval_secs: f64) -> &[u64] {
    let whole = (elapsed_secs / interval_secs).floor() as usize;
    &counts[..whole.min(counts.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values_ns: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
        for &(v, n) in values_ns {
            h.record_n(v, n).expect("in range");
        }
        h
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        // 1..=100000 µs once each: p50 = 50 ms, p99 = 99 ms, max = 100 ms (±0.1 %).
        let mut h = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
        for us in 1..=100_000u64 {
            h.record(us * 1000).expect("in range");
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 100_000);
        let near = |a: f64, b: f64| (a - b).abs() <= b * 0.001 + 1e-9;
        assert!(near(l.avg, 50_000.5), "{l:?}");
        assert!(near(l.p50, 50_000.0), "{l:?}");
        assert!(near(l.p99, 99_000.0), "{l:?}");
        assert!(near(l.p999, 99_900.0), "{l:?}");
        assert!(near(l.p9999, 99_990.0), "{l:?}");
        assert!(near(l.p99999, 99_999.0), "{l:?}");
        assert!(near(l.max, 100_000.0), "{l:?}");
        assert_eq!(Latency::of(&hist(&[])), Latency::default());
    }

    #[test]
    fn iops_consistency_takes_the_slow_tail() {
        // 10 intervals: average 95, 99.9 % of them reach at least 50 -> 52.6 %.
        let v = [100, 100, 100, 100, 100, 100, 100, 100, 100, 50];
        let c = iops_consistency(&v).expect("intervals");
        assert!((c - 100.0 * 50.0 / 95.0).abs() < 1e-9, "{c}");
        // A steady rate is 100 %.
        assert_eq!(iops_consistency(&[7, 7, 7]), Some(100.0));
        // 2000 intervals: rank ceil(2) -> the second slowest counts, not the slowest.
        let mut w = vec![1000u64; 2000];
        w[0] = 10;
        w[1] = 900;
        let avg = (1998.0 * 1000.0 + 10.0 + 900.0) / 2000.0;
        let c = iops_consistency(&w).expect("intervals");
        assert!((c - 100.0 * 900.0 / avg).abs() < 1e-9, "{c}");
        assert_eq!(iops_p999(&w), Some(900));
        assert_eq!(iops_consistency(&[]), None);
        assert_eq!(iops_consistency(&[0, 0]), None);
    }

    #[test]
    fn act_shares_count_operations_over_each_threshold() {
        // 100 ops: 90 at 0.5 ms, 5 at 1.5 ms, 3 at 5 ms, 1 at 10 ms, 1 at 100 ms.
        let h = hist(&[
            (500_000, 90),
            (1_500_000, 5),
            (5_000_000, 3),
            (10_000_000, 1),
            (100_000_000, 1),
        ]);
        let s = act_shares(&h);
        let pct: Vec<f64> = s.iter().map(|x| x.percent).collect();
        assert_eq!(pct, vec![10.0, 5.0, 5.0, 2.0, 1.0]);
        assert_eq!(s[0].ops, 10);
        assert!(!act_pass(&s), "2 % over 8 ms fails the 1 % limit");
        // Exactly 1 ms is not over 1 ms.
        let h = hist(&[(1_000_000, 99), (1_000, 1)]);
        assert_eq!(act_shares(&h)[0].ops, 0);
        assert!(act_pass(&act_shares(&h)));
    }

    #[test]
    fn partial_last_interval_is_dropped() {
        assert_eq!(whole_intervals(&[5, 6, 7], 2.5, 1.0), &[5, 6]);
        assert_eq!(whole_intervals(&[5, 6], 3.0, 1.0), &[5, 6]);
    }
}
