//! What `masse bench` reports per benchmark: the db_bench summary line, latency
//! percentiles, the ops/s time series, IOPS consistency, ACT shares, the engine's own
//! figures and CPU time; as text and as JSON.

use super::benchmarks::{Outcome, KINDS};
use hdrhistogram::Histogram;
use masse::Stats;
use masse_cli::dbbench::Summary;
use masse_cli::qos::{
    act_pass, act_shares, iops_consistency, iops_p999, whole_intervals, ActShare, Latency,
};
use masse_cli::units::fmt_bytes;
use std::collections::BTreeMap;

/// Engine figures over one benchmark (differences of `Db::stats` before and after).
#[derive(serde::Serialize, Clone, Debug, Default)]
pub struct EngineDelta {
    /// Key + value bytes the benchmark wrote.
    pub user_bytes_written: u64,
    /// Bytes written to the capacity devices (segments, GC moves, band headers).
    pub capacity_bytes_written: u64,
    /// Bytes written to the fast device (write pad, checkpoints).
    pub fast_bytes_written: u64,
    /// Bytes read from the capacity devices (gets, GC).
    pub capacity_bytes_read: u64,
    /// Gets that cost a device read (records not in a DRAM segment buffer); a record
    /// spanning two pages is one read of both.
    pub device_reads: u64,
    /// capacity_bytes_written ÷ user_bytes_written.
    pub capacity_bytes_per_user_byte: Option<f64>,
    pub gc_bands_freed: u64,
    pub gc_bytes_moved: u64,
    pub write_stalls: u64,
    /// At the end of the benchmark.
    pub index_entries: u64,
    pub index_bytes: u64,
    pub index_bytes_per_key: f64,
}

fn dev_sum(s: &Stats, role: &str, f: impl Fn(&masse::device::IoSnapshot) -> u64) -> u64 {
    s.devices
        .iter()
        .filter(|d| d.role == role)
        .map(|d| f(&d.io))
        .sum()
}

impl EngineDelta {
    pub fn between(a: &Stats, b: &Stats, user_bytes_written: u64) -> EngineDelta {
        let d = |f: &dyn Fn(&Stats) -> u64| f(b).saturating_sub(f(a));
        let cap_w = d(&|s| dev_sum(s, "capacity", |io| io.bytes_written));
        EngineDelta {
            user_bytes_written,
            capacity_bytes_written: cap_w,
            fast_bytes_written: d(&|s| dev_sum(s, "fast", |io| io.bytes_written)),
            capacity_bytes_read: d(&|s| dev_sum(s, "capacity", |io| io.bytes_read)),
            device_reads: d(&|s| s.reads_from_device),
            capacity_bytes_per_user_byte: (user_bytes_written > 0)
                .then(|| cap_w as f64 / user_bytes_written as f64),
            gc_bands_freed: d(&|s| s.gc_bands_freed),
            gc_bytes_moved: d(&|s| s.gc_bytes_moved),
            write_stalls: d(&|s| s.write_stalls),
            index_entries: b.index_entries,
            index_bytes: b.index_bytes,
            index_bytes_per_key: b.index_bytes_per_key,
        }
    }
}

/// One point of the per-interval series.
#[derive(serde::Serialize, Clone, Debug)]
pub struct IntervalPoint {
    /// End of the interval, seconds since the benchmark started.
    pub t: f64,
    /// Operations per second in the interval, per kind, and all together.
    pub ops_per_sec: BTreeMap<String, f64>,
    /// p50 and p99 latency in the interval, µs, per kind (2 significant digits).
    pub p50_us: BTreeMap<String, f64>,
    pub p99_us: BTreeMap<String, f64>,
    /// ACT shares of the interval per kind: percent over 1, 2, 4, 8, 64 ms (the ACT tool
    /// reports them per time slice).
    pub act_percent: BTreeMap<String, Vec<f64>>,
}

/// Everything measured in one benchmark.
#[derive(serde::Serialize, Clone, Debug)]
pub struct BenchReport {
    pub name: String,
    /// The db_bench-format summary line.
    pub summary_line: String,
    pub summary: Summary,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub reads: u64,
    pub found: u64,
    pub writes: u64,
    pub deletes: u64,
    /// Per operation kind ("read", "write", "delete") that occurred.
    pub latency_us: BTreeMap<String, Latency>,
    pub act_shares: BTreeMap<String, Vec<ActShare>>,
    pub act_pass: BTreeMap<String, bool>,
    pub interval_secs: f64,
    /// Operations per interval, per kind and "all"; the last interval may be partial.
    pub ops_per_interval: BTreeMap<String, Vec<u64>>,
    /// PM863 IOPS consistency over the whole intervals, percent, per kind and "all".
    pub iops_consistency_pct: BTreeMap<String, f64>,
    /// The per-interval rate 99.9 % of whole intervals reach, ops/s, per kind and "all".
    pub iops_p999: BTreeMap<String, f64>,
    pub whole_intervals: usize,
    /// The whole intervals (all of them when the run was shorter than one).
    pub intervals: Vec<IntervalPoint>,
    pub engine: EngineDelta,
    /// User + system CPU time of the whole process (engine threads included).
    pub cpu_secs: f64,
    pub cpu_us_per_op: f64,
    /// Resident set size at the end of the benchmark.
    pub rss_bytes: u64,
    /// The latency histograms (ns) for plots; not serialized.
    #[serde(skip)]
    pub hist: Vec<(String, Histogram<u64>)>,
}

impl BenchReport {
    pub fn new(
        o: Outcome,
        interval_secs: f64,
        engine: EngineDelta,
        cpu_secs: f64,
        rss: u64,
    ) -> BenchReport {
        let mut latency_us = BTreeMap::new();
        let mut act = BTreeMap::new();
        let mut pass = BTreeMap::new();
        let mut hist = Vec::new();
        let mut per = BTreeMap::new();
        let mut cons = BTreeMap::new();
        let mut p999 = BTreeMap::new();
        let len = o.series.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut all = vec![0u64; len];
        let whole = (o.seconds / interval_secs).floor() as usize;
        for (k, name) in KINDS.iter().enumerate() {
            if o.hist[k].is_empty() {
                continue;
            }
            latency_us.insert(name.to_string(), Latency::of(&o.hist[k]));
            let sh = act_shares(&o.hist[k]);
            pass.insert(name.to_string(), act_pass(&sh));
            act.insert(name.to_string(), sh);
            hist.push((name.to_string(), o.hist[k].clone()));
            let mut s = o.series[k].clone();
            s.resize(len, 0);
            for (a, b) in all.iter_mut().zip(&s) {
                *a += b;
            }
            let w = whole_intervals(&s, o.seconds, interval_secs);
            if let Some(c) = iops_consistency(w) {
                cons.insert(name.to_string(), c);
            }
            if let Some(p) = iops_p999(w) {
                p999.insert(name.to_string(), p as f64 / interval_secs);
            }
            per.insert(name.to_string(), s);
        }
        if per.len() > 1 {
            let w = whole_intervals(&all, o.seconds, interval_secs);
            if let Some(c) = iops_consistency(w) {
                cons.insert("all".to_string(), c);
            }
            if let Some(p) = iops_p999(w) {
                p999.insert("all".to_string(), p as f64 / interval_secs);
            }
        }
        per.insert("all".to_string(), all.clone());
        // A partial last interval is no rate: leave it out of the points (plots), unless
        // the run was shorter than one interval.
        let shown = if whole >= 1 { whole.min(len) } else { len };
        let intervals = (0..shown)
            .map(|i| {
                let span = if i + 1 > whole {
                    (o.seconds - i as f64 * interval_secs).max(1e-9)
                } else {
                    interval_secs
                };
                let mut ops = BTreeMap::new();
                let mut p50 = BTreeMap::new();
                let mut p99 = BTreeMap::new();
                let mut actp = BTreeMap::new();
                for (k, name) in KINDS.iter().enumerate() {
                    if let Some(s) = per.get(*name) {
                        ops.insert(name.to_string(), s[i] as f64 / span);
                        if let Some(h) = o.interval_hist.get(i).map(|h| &h[k]) {
                            if !h.is_empty() {
                                p50.insert(name.to_string(), h.value_at_quantile(0.5) as f64 / 1e3);
                                p99.insert(
                                    name.to_string(),
                                    h.value_at_quantile(0.99) as f64 / 1e3,
                                );
                                actp.insert(
                                    name.to_string(),
                                    act_shares(h).iter().map(|a| a.percent).collect(),
                                );
                            }
                        }
                    }
                }
                ops.insert("all".to_string(), all[i] as f64 / span);
                IntervalPoint {
                    t: (i as f64 * interval_secs + span).min(o.seconds),
                    ops_per_sec: ops,
                    p50_us: p50,
                    p99_us: p99,
                    act_percent: actp,
                }
            })
            .collect();
        let total_ops = o.reads + o.writes + o.deletes;
        BenchReport {
            name: o.summary.name.clone(),
            summary_line: o.summary.line(),
            seconds: o.seconds,
            ops: o.ops,
            ops_per_sec: o.ops as f64 / o.seconds.max(1e-9),
            reads: o.reads,
            found: o.found,
            writes: o.writes,
            deletes: o.deletes,
            summary: o.summary,
            latency_us,
            act_shares: act,
            act_pass: pass,
            interval_secs,
            ops_per_interval: per,
            iops_consistency_pct: cons,
            iops_p999: p999,
            whole_intervals: whole,
            intervals,
            engine,
            cpu_secs,
            cpu_us_per_op: cpu_secs * 1e6 / total_ops.max(1) as f64,
            rss_bytes: rss,
            hist,
        }
    }

    /// The report as text: the summary line first (db_bench parsers read only that),
    /// then indented detail lines.
    pub fn to_text(&self, histogram: bool) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.summary_line);
        if histogram {
            for (name, h) in &self.hist {
                let _ = write!(s, "{}", db_bench_histogram(name, h));
            }
        }
        let _ = writeln!(
            s,
            "  all threads: {} reads ({} found), {} writes, {} deletes in {:.3} s",
            self.reads, self.found, self.writes, self.deletes, self.seconds
        );
        for (name, l) in &self.latency_us {
            let _ = writeln!(
                s,
                "  {name:<6} µs  n={} avg {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} p99.999 {:.1} max {:.1}",
                l.count, l.avg, l.p50, l.p99, l.p999, l.p9999, l.p99999, l.max
            );
            if let Some(a) = self.act_shares.get(name) {
                let shares: Vec<String> = a
                    .iter()
                    .map(|x| format!(">{}ms {:.3}%", x.over_ms, x.percent))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {name:<6} ACT {}  ({})",
                    shares.join("  "),
                    if self.act_pass.get(name) == Some(&true) {
                        "within ACT limits"
                    } else {
                        "over ACT limits: >1ms 5%, >8ms 1%, >64ms 0.1%"
                    }
                );
            }
        }
        if !self.iops_consistency_pct.is_empty() {
            let c: Vec<String> = self
                .iops_consistency_pct
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k} {v:.1}% (p99.9 {:.0} ops/s)",
                        self.iops_p999.get(k).copied().unwrap_or(0.0)
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "  IOPS consistency over {} whole {}-s intervals: {}",
                self.whole_intervals,
                self.interval_secs,
                c.join(", ")
            );
        }
        let e = &self.engine;
        let _ = writeln!(
            s,
            "  engine: capacity written {} ({} per user byte), fast written {}, capacity read {} in {} device reads, GC {} bands / {} moved, {} stalls; index {} entries, {} ({:.2} B/key)",
            fmt_bytes(e.capacity_bytes_written),
            e.capacity_bytes_per_user_byte
                .map(|x| format!("{x:.3}"))
                .unwrap_or_else(|| "-".into()),
            fmt_bytes(e.fast_bytes_written),
            fmt_bytes(e.capacity_bytes_read),
            e.device_reads,
            e.gc_bands_freed,
            fmt_bytes(e.gc_bytes_moved),
            e.write_stalls,
            e.index_entries,
            fmt_bytes(e.index_bytes),
            e.index_bytes_per_key
        );
        let _ = writeln!(
            s,
            "  CPU: {:.2} s user+system, {:.1} µs per operation; RSS {}",
            self.cpu_secs,
            self.cpu_us_per_op,
            fmt_bytes(self.rss_bytes)
        );
        s
    }
}

/// A histogram in db_bench's `--histogram` format (its bucket table left out).
fn db_bench_histogram(name: &str, h: &Histogram<u64>) -> String {
    let us = |ns: u64| ns as f64 / 1e3;
    format!(
        "Microseconds per {name}:\nCount: {} Average: {:.4}  StdDev: {:.2}\nMin: {:.0}  Median: {:.4}  Max: {:.0}\nPercentiles: P50: {:.2} P75: {:.2} P99: {:.2} P99.9: {:.2} P99.99: {:.2}\n\n",
        h.len(),
        h.mean() / 1e3,
        h.stdev() / 1e3,
        us(h.min()),
        us(h.value_at_quantile(0.5)),
        us(h.max()),
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.75)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.value_at_quantile(0.9999)),
    )
}

/// CPU time (user + system) of this process so far, seconds.
pub fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A `kB` field of /proc/self/status (VmRSS, VmHWM), in bytes.
pub fn proc_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let rest = l.strip_prefix(field)?.strip_prefix(':')?;
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}
