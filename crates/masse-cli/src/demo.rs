//! `masse demo`: make a pool (temporary files by default), run a db_bench-style
//! workload in phases, verify every value, and print throughput, latency
//! percentiles and the engine's own statistics.

use crate::error::{CliError, CliResult, EXIT_VERIFY_FAILED};
use crate::machine::{command_line, Machine};
use crate::place::{plan, Place, PlanArgs};
use crate::pool::{pool_flags, size_arg, GeometryArgs, PoolArgs, PoolLayout};
use crate::workload::{count_arg, new_hist, out, run_threads, write_json, Progress, Ticker};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use masse::format::{Codec, FORMAT_VERSION};
use masse::{Db, GcPolicy, Options, Stats, TrimPolicy, MAX_KEY_LEN, MAX_VALUE_LEN};
use masse_cli::keydist::{KeyDist, Zipfian, DEFAULT_THETA};
use masse_cli::qos::Latency as Lat;
use masse_cli::rng::{mix64, SplitMix64};
use masse_cli::units::fmt_bytes;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// `masse::GcPolicy` on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPolicyArg {
    /// Cost-benefit where GC moves have a band of their own (tiered pools with
    /// --gc-separate, the default), greedy elsewhere.
    Auto,
    /// The band that wins back the most space.
    Greedy,
    /// (1 − u) · age / (1 + u): old bands' free space counts for more.
    CostBenefit,
}

/// A GC duty share: above 0, at most 1.
fn duty_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!(
            "{s:?} is not a share above 0 and at most 1 (e.g. 0.5)"
        )),
    }
}

/// `masse::TrimPolicy` on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrimArg {
    /// TRIM on drives, not on pool files (where it is a hole punch that stalls gets).
    Auto,
    /// TRIM every band GC frees, a hole punch on a pool file.
    Always,
    /// Never TRIM.
    Never,
}

impl From<TrimArg> for TrimPolicy {
    fn from(t: TrimArg) -> TrimPolicy {
        match t {
            TrimArg::Auto => TrimPolicy::Auto,
            TrimArg::Always => TrimPolicy::Always,
            TrimArg::Never => TrimPolicy::Never,
        }
    }
}

impl From<GcPolicyArg> for GcPolicy {
    fn from(p: GcPolicyArg) -> GcPolicy {
        match p {
            GcPolicyArg::Auto => GcPolicy::Auto,
            GcPolicyArg::CostBenefit => GcPolicy::CostBenefit,
            GcPolicyArg::Greedy => GcPolicy::Greedy,
        }
    }
}

/// One step of the demo workload.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Write every key once (each thread a disjoint range of keys, in order).
    Fill,
    /// Random reads; every value found is checked.
    Read,
    /// Random overwrites with a new version of the value.
    Overwrite,
    /// Random mix of reads and overwrites (--read-percent).
    Readwrite,
    /// Delete about half of the keys (chosen by a hash of the key and --seed).
    Delete,
    /// Read every key and check it holds exactly the last version written (or is absent).
    Verify,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Fill => "fill",
            Phase::Read => "read",
            Phase::Overwrite => "overwrite",
            Phase::Readwrite => "readwrite",
            Phase::Delete => "delete",
            Phase::Verify => "verify",
        }
    }
}

/// Arguments of `masse demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub geo: GeometryArgs,

    /// Directory for the demo's capacity-tier file (and for the fast-tier file when
    /// /dev/shm is missing or too small). Created if needed. Default: a new temporary
    /// directory under $TMPDIR, or /var/tmp when TMPDIR is unset. Not used with --capacity.
    #[arg(long, value_name = "DIR", conflicts_with = "capacity")]
    pub dir: Option<PathBuf>,

    /// Number of keys (1000000, 1e6, 1e7, 200k...).
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = count_arg)]
    pub num: u64,

    /// Worker threads sharing each phase's work.
    #[arg(long, value_name = "T", default_value_t = 2)]
    pub threads: usize,

    /// Key size in bytes: the key number in decimal, zero-padded to this width (as in
    /// db_bench).
    #[arg(long, value_name = "BYTES", default_value = "16", value_parser = size_arg)]
    pub key_size: u64,

    /// Value size in bytes; values are pseudo-random bytes derived from the key number
    /// and its version, so every read can be verified.
    #[arg(long, value_name = "BYTES", default_value = "100", value_parser = size_arg)]
    pub value_size: u64,

    /// Phases to run, in order, comma-separated: fill, read, overwrite, readwrite,
    /// delete, verify.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fill,read,overwrite,verify"
    )]
    pub phases: Vec<Phase>,

    /// Run the overwrite and readwrite phases for this many seconds instead of --num
    /// operations. Default: --num operations.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Operations in each read, overwrite and readwrite phase (default: --num, or with
    /// --duration as many as the time allows). With --duration the timed phases stop at
    /// whichever comes first. A fixed count makes the write amplification of two runs
    /// comparable: the fill, written once, dilutes it less the more overwrites follow.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: Option<u64>,

    /// Share of reads in the readwrite phase, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub read_percent: u8,

    /// Size the demo's capacity file so that the live data is about this fraction
    /// (0 < F < 1) of the capacity tier, to measure write amplification under GC
    /// (e.g. 0.5 or 0.8). Default: capacity = 4x the data size, at least 256 MiB.
    #[arg(long, value_name = "F", conflicts_with = "capacity_size")]
    pub utilization: Option<f64>,

    /// Distribution of the keys the read, overwrite and readwrite phases pick: uniform, or
    /// zipfian (YCSB's skew: popularity ∝ 1/rank^--zipf-theta, hot keys scattered over the
    /// key space) to measure skewed churn. Each thread draws over the keys it owns.
    #[arg(long, value_enum, value_name = "DIST", default_value = "uniform")]
    pub key_dist: KeyDist,

    /// θ of --key-dist zipfian (0 = uniform; YCSB's default 0.99).
    #[arg(long, value_name = "THETA", default_value_t = DEFAULT_THETA)]
    pub zipf_theta: f64,

    /// How GC picks the band to empty: greedy (the most space won), cost-benefit
    /// (LFS: space won × age over the cost of moving the band), or auto (the
    /// engine's default: cost-benefit where GC moves have a band of their own).
    #[arg(long, value_enum, value_name = "POLICY", default_value = "auto")]
    pub gc_policy: GcPolicyArg,

    /// Most bytes of segment writes the writer keeps in flight on a capacity device
    /// (0 = no limit). Fewer keep gets from queueing behind GC's bursts of segment
    /// writes; more raise peak write bandwidth. Default: 0.
    #[arg(long, value_name = "BYTES", value_parser = size_arg)]
    pub writer_inflight: Option<u64>,

    /// Microseconds a writer waiting for another thread's group commit spins
    /// (yielding the CPU after 2 µs) before it sleeps, on tiered pools while a
    /// CPU is free (`Options::commit_spin`; 0 = sleep at once). Default: the
    /// engine's (50).
    #[arg(long, value_name = "MICROS")]
    pub commit_spin: Option<u64>,

    /// Share of wall time background GC works while free bands are not short; it
    /// rests between segments for the rest (`Options::gc_duty`). 1 = no rest.
    /// Default: the engine's (0.5).
    #[arg(long, value_name = "F", value_parser = duty_arg)]
    pub gc_duty: Option<f64>,

    /// Free bands below which background GC starts (`Options::gc_low_bands`).
    /// Free bands hold no data, so the steady state keeps about this many idle:
    /// fewer leave more room to GC in (less write amplification), more absorb
    /// longer write bursts before a writer waits for GC. Default: the engine's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(3..))]
    pub gc_low_bands: Option<u32>,

    /// Tiered pools: GC moves fill an open band of their own instead of sharing
    /// the user writes' one (`Options::gc_separate`, hot/cold separation; the
    /// engine's default). Pays under skewed overwrites, with cost-benefit victims.
    /// `--gc-separate false` puts them with the user writes.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub gc_separate: bool,

    /// With `--gc-separate`: a user write of a key whose newest copy is in a band
    /// sealed more than half the pool's bands ago goes into the GC moves' band
    /// (`Options::cold_user_writes`; the engine's default). `false`: every user
    /// write goes to the user writes' band.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub cold_user_writes: bool,

    /// Tiered pools: a put of a key whose newest record is still in the open
    /// DRAM segment, at the same length, is written over it there instead of
    /// appended (`Options::absorb_overwrites`; the engine's default). `false`:
    /// every put is appended.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub absorb_overwrites: bool,

    /// Whether GC TRIMs the bands it frees: `auto` on drives but not on pool files,
    /// where the TRIM is a hole punch that stalls concurrent gets.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    pub trim: TrimArg,

    /// Same as `--trim never` (kept for the commands docs/benchmarks.md cites).
    #[arg(long, conflicts_with = "trim")]
    pub no_trim: bool,

    /// Seed of the per-thread random generators and of the values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Also write the full report (machine, layout, phases, engine stats) as JSON to
    /// this file. Default: none.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Keep the pool files at the end and print their paths. Default: temporary files
    /// are removed (files given with --fast/--capacity are never removed).
    #[arg(long)]
    pub keep: bool,

    /// Overwrite a masse pool that already exists on the given devices or in --dir.
    /// Default: refuse.
    #[arg(long)]
    pub force: bool,

    /// Write an index checkpoint after the last phase (and report how long it took).
    /// Default: only the checkpoint written by close.
    #[arg(long)]
    pub checkpoint_at_end: bool,

    /// After the phases, print READY on its own line, flush, and sleep forever without
    /// closing, for SIGKILL recovery measurements. Implies --keep.
    #[arg(long, conflicts_with = "no_close")]
    pub hang_at_end: bool,

    /// After the phases, exit without closing the pool (a simulated crash; the next
    /// open recovers). Implies --keep.
    #[arg(long)]
    pub no_close: bool,
}

// ---------------------------------------------------------------------------
// Keys, values, versions

/// Low bits: version of the last value written (0 = never written); top bit: deleted.
const DELETED: u32 = 1 << 31;

fn live(v: u32) -> bool {
    v != 0 && v & DELETED == 0
}

fn version(v: u32) -> u32 {
    v & !DELETED
}

/// The key number `k` in decimal, zero-padded to the width of `buf`.
fn fmt_key(buf: &mut [u8], mut k: u64) {
    buf.fill(b'0');
    let mut i = buf.len();
    while k > 0 && i > 0 {
        i -= 1;
        buf[i] = b'0' + (k % 10) as u8;
        k /= 10;
    }
}

/// Value of key `k` at `version`: deterministic pseudo-random bytes.
fn fill_value(buf: &mut [u8], seed: u64, k: u64, version: u32) {
    let s = mix64(
        mix64(k ^ seed.wrapping_mul(0xA24B_AED4_963E_E407))
            ^ (version as u64).wrapping_mul(0x9FB2_1C65_1E98_DF25),
    );
    SplitMix64::new(s).fill(buf);
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

// ---------------------------------------------------------------------------
// Phases

struct Ctx<'a> {
    db: &'a Db,
    versions: Vec<AtomicU32>,
    num: u64,
    /// Operations per read, overwrite or readwrite phase (`--ops`).
    ops: Option<u64>,
    threads: usize,
    key_size: usize,
    value_size: usize,
    seed: u64,
    read_percent: u8,
    key_dist: KeyDist,
    zipf_theta: f64,
    abort: AtomicBool,
}

struct Tally {
    ops: u64,
    bytes: u64,
    reads: u64,
    hits: u64,
    writes: u64,
    deletes: u64,
    deletes_found: u64,
    bad: u64,
    bad_msgs: Vec<String>,
    all: Histogram<u64>,
    rd: Histogram<u64>,
    wr: Histogram<u64>,
    /// Reads (readwrite phase) during which a GC pass was running, and the rest.
    rd_gc: Histogram<u64>,
    rd_quiet: Histogram<u64>,
}

impl Tally {
    fn new() -> CliResult<Tally> {
        Ok(Tally {
            ops: 0,
            bytes: 0,
            reads: 0,
            hits: 0,
            writes: 0,
            deletes: 0,
            deletes_found: 0,
            bad: 0,
            bad_msgs: Vec::new(),
            all: new_hist(3)?,
            rd: new_hist(3)?,
            wr: new_hist(3)?,
            rd_gc: new_hist(3)?,
            rd_quiet: new_hist(3)?,
        })
    }
    fn bad(&mut self, msg: String) {
        self.bad += 1;
        if self.bad_msgs.len() < 20 {
            self.bad_msgs.push(msg);
        }
    }
    fn merge(&mut self, o: Tally) -> CliResult<()> {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.reads += o.reads;
        self.hits += o.hits;
        self.writes += o.writes;
        self.deletes += o.deletes;
        self.deletes_found += o.deletes_found;
        self.bad += o.bad;
        self.bad_msgs.extend(o.bad_msgs);
        self.bad_msgs.truncate(20);
        let e =
            |e: hdrhistogram::AdditionError| CliError::new(format!("merging histograms: {e:?}"));
        self.all.add(&o.all).map_err(e)?;
        self.rd.add(&o.rd).map_err(e)?;
        self.wr.add(&o.wr).map_err(e)?;
        self.rd_gc.add(&o.rd_gc).map_err(e)?;
        self.rd_quiet.add(&o.rd_quiet).map_err(e)?;
        Ok(())
    }
}

/// Results of one phase.
#[derive(serde::Serialize, Clone, Debug)]
pub struct PhaseReport {
    pub phase: Phase,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub mb_per_sec: f64,
    pub bytes: u64,
    pub reads: u64,
    pub read_hits: u64,
    pub writes: u64,
    pub deletes: u64,
    pub deletes_found: u64,
    pub wrong_values: u64,
    pub latency_us: Lat,
    pub read_latency_us: Option<Lat>,
    pub write_latency_us: Option<Lat>,
    /// Readwrite reads while a GC pass ran (at their start or end), and the others:
    /// how much GC costs the reads of the same run.
    pub read_latency_during_gc_us: Option<Lat>,
    pub read_latency_without_gc_us: Option<Lat>,
}

impl PhaseReport {
    fn line(&self) -> String {
        let l = &self.latency_us;
        let extra = match self.phase {
            Phase::Read | Phase::Verify => format!("  found {}/{}", self.read_hits, self.reads),
            Phase::Readwrite => format!(
                "  reads {} (found {}) writes {}",
                self.reads, self.read_hits, self.writes
            ),
            Phase::Delete => format!(
                "  deleted {} (existed {})",
                self.deletes, self.deletes_found
            ),
            _ => String::new(),
        };
        let wrong = if self.wrong_values > 0 {
            format!("  WRONG VALUES {}", self.wrong_values)
        } else {
            String::new()
        };
        format!(
            "{:<10} {:>10} ops {:>8.3} s {:>10.0} ops/s {:>8.1} MB/s   latency µs: avg {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1}{extra}{wrong}",
            self.phase.name(),
            self.ops,
            self.seconds,
            self.ops_per_sec,
            self.mb_per_sec,
            l.avg,
            l.p50,
            l.p99,
            l.p999,
            l.p9999,
            l.max
        )
    }
}

impl Ctx<'_> {
    fn range(&self, t: usize) -> (u64, u64) {
        let (n, tt) = (self.num as u128, self.threads as u128);
        (
            (n * t as u128 / tt) as u64,
            (n * (t as u128 + 1) / tt) as u64,
        )
    }

    /// Keys owned by thread `t` are those with `k % threads == t`: a writer never
    /// races another on a key, so the expected version of every key is exact.
    fn owned(&self, t: usize) -> u64 {
        let t = t as u64;
        if t >= self.num {
            0
        } else {
            (self.num - 1 - t) / self.threads as u64 + 1
        }
    }

    /// Operations of a read, overwrite or readwrite phase: `--ops`, else
    /// unbounded in a timed phase, else `--num`.
    fn phase_ops(&self, timed: bool) -> u64 {
        match self.ops {
            Some(n) => n,
            None if timed => u64::MAX,
            None => self.num,
        }
    }

    /// Thread `t`'s share of `n` operations.
    fn ops_for(&self, t: usize, n: u64) -> u64 {
        let tt = self.threads as u64;
        n / tt + u64::from((t as u64) < n % tt)
    }

    fn key_name(&self, k: u64) -> String {
        let mut b = vec![0u8; self.key_size];
        fmt_key(&mut b, k);
        String::from_utf8_lossy(&b).into_owned()
    }

    fn write_one(
        &self,
        k: u64,
        key: &mut [u8],
        val: &mut [u8],
        tl: &mut Tally,
        rw: bool,
    ) -> CliResult<()> {
        fmt_key(key, k);
        let slot = &self.versions[k as usize];
        let nv = version(slot.load(Relaxed)) + 1;
        fill_value(val, self.seed, k, nv);
        let t0 = Instant::now();
        self.db
            .put(key, val)
            .map_err(|e| CliError::new(format!("put of key {} failed: {e}", self.key_name(k))))?;
        let ns = t0.elapsed().as_nanos() as u64;
        slot.store(nv, Relaxed);
        tl.all.saturating_record(ns.max(1));
        if rw {
            tl.wr.saturating_record(ns.max(1));
        }
        tl.writes += 1;
        tl.bytes += (key.len() + val.len()) as u64;
        Ok(())
    }

    fn read_one(
        &self,
        k: u64,
        key: &mut [u8],
        val: &mut [u8],
        tl: &mut Tally,
        rw: bool,
    ) -> CliResult<()> {
        fmt_key(key, k);
        let v = self.versions[k as usize].load(Relaxed);
        let gc_before = rw && self.db.activity().gc;
        let t0 = Instant::now();
        let got = self
            .db
            .get(key)
            .map_err(|e| CliError::new(format!("get of key {} failed: {e}", self.key_name(k))))?;
        let ns = t0.elapsed().as_nanos().max(1) as u64;
        tl.all.saturating_record(ns);
        if rw {
            tl.rd.saturating_record(ns);
            if gc_before || self.db.activity().gc {
                tl.rd_gc.saturating_record(ns);
            } else {
                tl.rd_quiet.saturating_record(ns);
            }
        }
        tl.reads += 1;
        tl.bytes += key.len() as u64;
        match (live(v), got) {
            (true, Some(g)) => {
                tl.hits += 1;
                tl.bytes += g.len() as u64;
                fill_value(val, self.seed, k, version(v));
                if g != *val {
                    let at = g
                        .iter()
                        .zip(val.iter())
                        .position(|(a, b)| a != b)
                        .unwrap_or(g.len().min(val.len()));
                    tl.bad(format!(
                        "key {}: wrong value: expected version {} ({} bytes), got {} bytes differing from byte {at}",
                        self.key_name(k),
                        version(v),
                        val.len(),
                        g.len()
                    ));
                }
            }
            (true, None) => tl.bad(format!(
                "key {}: missing, but version {} was written and acknowledged",
                self.key_name(k),
                version(v)
            )),
            (false, Some(g)) => {
                tl.hits += 1;
                tl.bad(format!(
                    "key {}: found a {}-byte value, but the key was {}",
                    self.key_name(k),
                    g.len(),
                    if v == 0 { "never written" } else { "deleted" }
                ))
            }
            (false, None) => {}
        }
        Ok(())
    }

    fn delete_one(&self, k: u64, key: &mut [u8], tl: &mut Tally) -> CliResult<()> {
        fmt_key(key, k);
        let slot = &self.versions[k as usize];
        let v = slot.load(Relaxed);
        let t0 = Instant::now();
        let existed = self.db.delete(key).map_err(|e| {
            CliError::new(format!("delete of key {} failed: {e}", self.key_name(k)))
        })?;
        tl.all
            .saturating_record((t0.elapsed().as_nanos() as u64).max(1));
        slot.store(v | DELETED, Relaxed);
        tl.deletes += 1;
        tl.bytes += key.len() as u64;
        if existed {
            tl.deletes_found += 1;
        }
        if existed != live(v) {
            tl.bad(format!(
                "key {}: delete reported existed={existed}, but the key was {}",
                self.key_name(k),
                if live(v) { "live" } else { "absent" }
            ));
        }
        Ok(())
    }

    fn worker(
        &self,
        phase: Phase,
        t: usize,
        progress: &Progress,
        deadline: Option<Instant>,
    ) -> CliResult<Tally> {
        let mut tl = Tally::new()?;
        let mut key = vec![0u8; self.key_size];
        let mut val = vec![0u8; self.value_size];
        let mut rng = SplitMix64::new(mix64(self.seed ^ mix64(((phase as u64) << 32) | t as u64)));
        let mut ticker = Ticker::new(progress);
        let mut tick = |tl: &mut Tally| {
            tl.ops += 1;
            ticker.tick(1);
        };
        let owned = self.owned(t);
        let (lo, hi) = self.range(t);
        // Uniform draws stay the multiply-shift ones the demo always made.
        let zipf = (self.key_dist == KeyDist::Zipfian)
            .then(|| Zipfian::new(owned, self.zipf_theta))
            .transpose()
            .map_err(CliError::new)?;
        let rand_key = |rng: &mut SplitMix64| {
            let j = match &zipf {
                Some(g) => g.next(rng),
                None => rng.below(owned),
            };
            t as u64 + self.threads as u64 * j
        };
        match phase {
            Phase::Fill | Phase::Verify | Phase::Delete => {
                for k in lo..hi {
                    if self.abort.load(Relaxed) {
                        break;
                    }
                    match phase {
                        Phase::Fill => self.write_one(k, &mut key, &mut val, &mut tl, false)?,
                        Phase::Verify => self.read_one(k, &mut key, &mut val, &mut tl, false)?,
                        _ => {
                            if mix64(k ^ mix64(self.seed ^ 0xde1e7e)) & 1 == 0 {
                                continue;
                            }
                            self.delete_one(k, &mut key, &mut tl)?
                        }
                    }
                    tick(&mut tl);
                }
            }
            Phase::Read | Phase::Overwrite | Phase::Readwrite => {
                if owned == 0 {
                    return Ok(tl);
                }
                let timed = deadline.is_some() && phase != Phase::Read;
                let limit = self.ops_for(t, self.phase_ops(timed));
                let mut i = 0;
                while i < limit {
                    if self.abort.load(Relaxed) {
                        break;
                    }
                    if phase != Phase::Read {
                        if let Some(d) = deadline {
                            if Instant::now() >= d {
                                break;
                            }
                        }
                    }
                    let k = rand_key(&mut rng);
                    let read = match phase {
                        Phase::Read => true,
                        Phase::Overwrite => false,
                        _ => rng.below(100) < self.read_percent as u64,
                    };
                    let rw = phase == Phase::Readwrite;
                    if read {
                        self.read_one(k, &mut key, &mut val, &mut tl, rw)?;
                    } else {
                        self.write_one(k, &mut key, &mut val, &mut tl, rw)?;
                    }
                    tick(&mut tl);
                    i += 1;
                }
            }
        }
        ticker.flush();
        Ok(tl)
    }

    fn run_phase(&self, phase: Phase, duration: Option<f64>) -> CliResult<PhaseReport> {
        let timed = duration.filter(|_| matches!(phase, Phase::Overwrite | Phase::Readwrite));
        let total = match phase {
            Phase::Delete => (0..self.num)
                .filter(|&k| mix64(k ^ mix64(self.seed ^ 0xde1e7e)) & 1 == 1)
                .count() as u64,
            Phase::Read | Phase::Overwrite | Phase::Readwrite => self.ops.unwrap_or(self.num),
            _ => self.num,
        };
        let progress = Progress::start(phase.name(), timed, total);
        let deadline = timed.map(|d| progress.started() + Duration::from_secs_f64(d));
        let results = run_threads(
            self.threads,
            &progress,
            "a demo worker thread panicked",
            |t| {
                let r = self.worker(phase, t, &progress, deadline);
                if r.is_err() {
                    self.abort.store(true, Relaxed);
                }
                r
            },
        );
        let secs = progress.finish();
        let mut tally = Tally::new()?;
        for r in results {
            tally.merge(r?)?;
        }
        for m in &tally.bad_msgs {
            eprintln!("masse demo: {} phase: {m}", phase.name());
        }
        Ok(PhaseReport {
            phase,
            ops: tally.ops,
            seconds: secs,
            ops_per_sec: tally.ops as f64 / secs.max(1e-9),
            mb_per_sec: tally.bytes as f64 / 1e6 / secs.max(1e-9),
            bytes: tally.bytes,
            reads: tally.reads,
            read_hits: tally.hits,
            writes: tally.writes,
            deletes: tally.deletes,
            deletes_found: tally.deletes_found,
            wrong_values: tally.bad,
            latency_us: Lat::of(&tally.all),
            read_latency_us: (phase == Phase::Readwrite).then(|| Lat::of(&tally.rd)),
            write_latency_us: (phase == Phase::Readwrite).then(|| Lat::of(&tally.wr)),
            read_latency_during_gc_us: (phase == Phase::Readwrite).then(|| Lat::of(&tally.rd_gc)),
            read_latency_without_gc_us: (phase == Phase::Readwrite)
                .then(|| Lat::of(&tally.rd_quiet)),
        })
    }
}

// ---------------------------------------------------------------------------
// The report

#[derive(serde::Serialize)]
struct Report {
    command: String,
    machine: Machine,
    workload: Workload,
    pool: Option<PoolLayout>,
    phases: Vec<PhaseReport>,
    checkpoint_at_end_ms: Option<f64>,
    close_ms: Option<f64>,
    verified_ok: bool,
    stats: Option<Stats>,
}

#[derive(serde::Serialize)]
struct Workload {
    num: u64,
    threads: usize,
    key_size: usize,
    value_size: usize,
    phases: Vec<Phase>,
    duration_secs: Option<f64>,
    /// `--ops`: operations per read, overwrite or readwrite phase.
    ops: Option<u64>,
    read_percent: u8,
    key_dist: KeyDist,
    zipf_theta: Option<f64>,
    gc_policy: GcPolicyArg,
    writer_inflight_bytes: u64,
    trim: TrimArg,
    gc_duty: f64,
    /// `None`: the engine's automatic watermark.
    gc_low_bands: Option<u32>,
    /// GC moves in a stream of their own (`Options::gc_separate`).
    gc_separate: bool,
    /// Cold user writes with the GC moves (`Options::cold_user_writes`).
    cold_user_writes: bool,
    /// Overwrites absorbed in the open DRAM segment (`Options::absorb_overwrites`).
    absorb_overwrites: bool,
    seed: u64,
    record_bytes: u64,
    data_bytes: u64,
    fast_path: Option<PathBuf>,
    capacity_paths: Vec<PathBuf>,
    capacity_file_size: u64,
    target_utilization: Option<f64>,
}

pub fn run(a: &DemoArgs) -> CliResult<i32> {
    // Validate before touching any file.
    if a.num == 0 {
        return Err(CliError::new("--num must be at least 1"));
    }
    if a.threads == 0 || a.threads > 1024 {
        return Err(CliError::new("--threads must be between 1 and 1024"));
    }
    let key_size = a.key_size as usize;
    let value_size = a.value_size as usize;
    if key_size < digits(a.num - 1) || key_size > MAX_KEY_LEN {
        return Err(CliError::new(format!(
            "--key-size {key_size} cannot hold key numbers up to {} (need {}..={MAX_KEY_LEN} bytes)",
            a.num - 1,
            digits(a.num - 1)
        )));
    }
    if value_size > MAX_VALUE_LEN {
        return Err(CliError::new(format!(
            "--value-size {value_size} exceeds the maximum of {MAX_VALUE_LEN} bytes"
        )));
    }
    if let Some(u) = a.utilization {
        if !(u > 0.0 && u < 1.0) {
            return Err(CliError::new(format!(
                "--utilization {u} must be between 0 and 1 (e.g. 0.5)"
            )));
        }
    }
    if let Some(d) = a.duration {
        if !(d > 0.0 && d.is_finite()) {
            return Err(CliError::new(format!(
                "--duration {d} must be a positive number of seconds"
            )));
        }
    }
    if a.phases.is_empty() {
        return Err(CliError::new("--phases is empty"));
    }
    if a.key_dist == KeyDist::Zipfian {
        Zipfian::new(a.num, a.zipf_theta)
            .map_err(|e| CliError::new(format!("--zipf-theta: {e}")))?;
    }
    let num =
        usize::try_from(a.num).map_err(|_| CliError::new("--num is too large for this machine"))?;

    // DRAM: 4 bytes per key of version tracking here, ~20-30 bytes per key of engine index.
    let mem = Machine::probe().mem_total_bytes;
    let need = a.num.saturating_mul(32);
    if mem > 0 && need > mem / 4 * 3 {
        return Err(CliError::new(format!(
            "--num {} needs about {} of RAM (index and version tracking) but the machine has {}",
            a.num,
            fmt_bytes(need),
            fmt_bytes(mem)
        )));
    }
    let codec = Codec::of_version(a.geo.format_version.unwrap_or(FORMAT_VERSION));
    let rec = codec.footprint(key_size, value_size);
    let data = a.num * rec;
    let mut place = plan(
        &PlanArgs {
            pool: &a.pool,
            geo: &a.geo,
            dir: a.dir.as_deref(),
            utilization: a.utilization,
            prefix: "masse-demo-",
        },
        data,
    )?;
    if a.keep || a.hang_at_end || a.no_close {
        place.keep();
    }
    let r = run_on(a, &mut place, data, rec, num);
    if r.is_err() && place.keep && !place.explicit {
        eprintln!("masse demo: pool files kept: {}", place.files());
    }
    r
}

fn run_on(a: &DemoArgs, place: &mut Place, data: u64, rec: u64, num: usize) -> CliResult<i32> {
    let (key_size, value_size) = (a.key_size as usize, a.value_size as usize);
    let trim = if a.no_trim { TrimArg::Never } else { a.trim };

    let machine = Machine::probe();
    let command = command_line();
    out(format!("command   {command}"));
    out(format!("machine   {}", machine.to_line()));
    let phases: Vec<&str> = a.phases.iter().map(|p| p.name()).collect();
    out(format!(
        "workload  {} keys of {key_size} bytes, values of {value_size} bytes ({} of records); {} threads; phases {}; seed {}{}{}{}{}",
        a.num,
        fmt_bytes(data),
        a.threads,
        phases.join(","),
        a.seed,
        a.duration.map(|d| format!("; overwrite/readwrite for {d} s")).unwrap_or_default()
            + &a.ops.map(|n| format!("; {n} ops per read/overwrite/readwrite phase")).unwrap_or_default(),
        match a.key_dist {
            KeyDist::Uniform => String::new(),
            KeyDist::Zipfian => format!("; zipfian keys, theta {}", a.zipf_theta),
        },
        match a.gc_policy {
            GcPolicyArg::CostBenefit => "; cost-benefit GC",
            GcPolicyArg::Greedy => "; greedy GC",
            GcPolicyArg::Auto => "",
        },
        a.writer_inflight
            .map(|b| format!("; writer in flight {}", fmt_bytes(b)))
            .unwrap_or_default()
            + &a
                .gc_duty
                .map(|d| format!("; GC duty {d}"))
                .unwrap_or_default()
            + &a
                .gc_low_bands
                .map(|n| format!("; GC below {n} free bands"))
                .unwrap_or_default()
            + &a
                .commit_spin
                .map(|n| format!("; commit spin {n} µs"))
                .unwrap_or_default()
            + if a.gc_separate { "" } else { "; GC moves with user writes" }
            + if a.cold_user_writes || !a.gc_separate { "" } else { "; no cold user writes with GC moves" }
            + if a.absorb_overwrites { "" } else { "; overwrites not absorbed" }
            + match trim {
                TrimArg::Auto => "",
                TrimArg::Always => "; TRIM always",
                TrimArg::Never => "; no TRIM",
            }
    ));

    let mut opts = Options {
        expected_keys: num,
        gc_policy: a.gc_policy.into(),
        ..Options::default()
    };
    opts.trim_freed_bands = trim.into();
    if let Some(d) = a.gc_duty {
        opts.gc_duty = d;
    }
    let gc_duty = opts.gc_duty;
    if let Some(n) = a.gc_low_bands {
        opts.gc_low_bands = n;
    }
    opts.gc_separate = a.gc_separate;
    opts.cold_user_writes = a.cold_user_writes;
    opts.absorb_overwrites = a.absorb_overwrites;
    if let Some(b) = a.writer_inflight {
        opts.writer_inflight_bytes = b as usize;
    }
    if let Some(us) = a.commit_spin {
        opts.commit_spin = std::time::Duration::from_micros(us);
    }
    let writer_inflight_bytes = opts.writer_inflight_bytes as u64;
    let t0 = Instant::now();
    let db = place.create(&a.pool, &a.geo, a.force, opts)?;
    let layout = PoolLayout::of(&db);
    out(format!(
        "pool      created in {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    ));
    print!("{}", layout.to_text("          "));
    // Not a reason to stop a demo, but worth knowing before keeping its files.
    print!("{}", crate::pool::pool_warnings(&db, "          note: "));
    let g = &layout.geometry;
    let bands: u64 = g.bands_per_device.iter().map(|&b| b as u64).sum();
    let tier = bands * g.band_size;
    out(format!(
        "          live data will be about {} = {:.0}% of the {} capacity tier{}",
        fmt_bytes(data),
        100.0 * data as f64 / tier.max(1) as f64,
        fmt_bytes(tier),
        a.utilization
            .map(|u| format!(" (--utilization {u})"))
            .unwrap_or_default()
    ));
    if data > tier {
        out("          warning: the data does not fit the capacity tier; writes will fail with 'no space'");
    }

    let mut report = Report {
        command,
        machine,
        workload: Workload {
            num: a.num,
            threads: a.threads,
            key_size,
            value_size,
            phases: a.phases.clone(),
            duration_secs: a.duration,
            ops: a.ops,
            read_percent: a.read_percent,
            key_dist: a.key_dist,
            zipf_theta: (a.key_dist == KeyDist::Zipfian).then_some(a.zipf_theta),
            gc_policy: a.gc_policy,
            writer_inflight_bytes,
            trim,
            gc_duty,
            gc_low_bands: a.gc_low_bands,
            gc_separate: a.gc_separate,
            cold_user_writes: a.cold_user_writes,
            absorb_overwrites: a.absorb_overwrites,
            seed: a.seed,
            record_bytes: rec,
            data_bytes: data,
            fast_path: place.fast.clone(),
            capacity_paths: place.caps.clone(),
            capacity_file_size: place.cap_size,
            target_utilization: a.utilization,
        },
        pool: Some(layout),
        phases: Vec::new(),
        checkpoint_at_end_ms: None,
        close_ms: None,
        verified_ok: true,
        stats: None,
    };

    let ctx = Ctx {
        db: &db,
        versions: (0..num).map(|_| AtomicU32::new(0)).collect(),
        num: a.num,
        ops: a.ops,
        threads: a.threads,
        key_size,
        value_size,
        seed: a.seed,
        read_percent: a.read_percent,
        key_dist: a.key_dist,
        zipf_theta: a.zipf_theta,
        abort: AtomicBool::new(false),
    };
    out("phases    (MB = 10^6 bytes of keys and values; latency per operation)");
    let mut failed_phase = None;
    for &phase in &a.phases {
        let r = match ctx.run_phase(phase, a.duration) {
            Ok(r) => r,
            Err(e) => {
                out(format!("{:<10} failed", phase.name()));
                out("engine statistics at the failure");
                print!("{}", db.stats().to_text());
                return Err(e);
            }
        };
        out(r.line());
        if let (Some(rl), Some(wl), Some(gl), Some(ql)) = (
            &r.read_latency_us,
            &r.write_latency_us,
            &r.read_latency_during_gc_us,
            &r.read_latency_without_gc_us,
        ) {
            let rows = [
                ("reads", rl),
                ("writes", wl),
                ("reads while GC ran", gl),
                ("reads without GC", ql),
            ];
            for (what, l) in rows {
                out(format!(
                    "  {what:<18} {:>10} ops {:>29}latency µs: avg {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1}",
                    l.count, "", l.avg, l.p50, l.p99, l.p999, l.p9999, l.max
                ));
            }
        }
        let bad = r.wrong_values;
        report.phases.push(r);
        if bad > 0 {
            failed_phase = Some((phase, bad));
            report.verified_ok = false;
            break;
        }
    }
    drop(ctx);

    if a.checkpoint_at_end {
        let t = Instant::now();
        db.checkpoint()
            .map_err(|e| CliError::new(format!("checkpoint failed: {e}")))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        report.checkpoint_at_end_ms = Some(ms);
        out(format!("checkpoint written in {ms:.1} ms"));
    }

    let stats = db.stats();
    out("engine statistics");
    print!("{}", stats.to_text());
    report.stats = Some(stats);
    for line in crate::pool::sim_report() {
        out(line);
    }

    if failed_phase.is_some() {
        place.keep();
    }
    let pool_cmd = pool_flags(place.fast.as_deref(), &place.caps);
    let on_sim = place.caps.iter().any(|c| crate::pool::sim_arg(c).is_some());
    if on_sim {
        out("the pool lived on emulated drives: it ends with this process");
    } else if place.explicit {
        out(format!(
            "pool left on the devices given: inspect it with `masse stats{pool_cmd}`"
        ));
    } else if place.keep {
        out(format!(
            "pool kept: inspect it with `masse stats{pool_cmd}`"
        ));
        if place
            .fast
            .as_ref()
            .is_some_and(|f| f.starts_with("/dev/shm"))
        {
            out("          (the fast-tier file is in /dev/shm: it is lost at reboot; delete the files when done)");
        }
    }

    if a.hang_at_end || a.no_close {
        if let Some(j) = &a.json {
            write_json(j, &report)?;
        }
        if a.no_close {
            out("exiting without closing the pool (simulated crash)");
            std::process::exit(0);
        }
        out("READY");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }

    let t = Instant::now();
    let closed = db.close();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    closed.map_err(|e| CliError::new(format!("closing the pool failed: {e}")))?;
    report.close_ms = Some(ms);
    out(format!("closed in {ms:.1} ms"));
    if let Some(j) = &a.json {
        write_json(j, &report)?;
        out(format!("report written to {}", j.display()));
    }
    if let Some((phase, bad)) = failed_phase {
        return Err(CliError::with_code(
            format!(
                "verification failed: {bad} wrong value(s) in the {} phase (see above); pool kept for inspection:{pool_cmd}",
                phase.name()
            ),
            EXIT_VERIFY_FAILED,
        ));
    }
    Ok(0)
}
