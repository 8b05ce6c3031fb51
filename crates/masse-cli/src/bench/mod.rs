//! `masse bench`: RocksDB db_bench's workloads, flags and summary line on a masse pool,
//! plus the latency QoS a data-center buyer reads (percentiles to p99.999, IOPS
//! consistency, ACT shares), the engine's own figures, a JSON report and SVG plots.

mod benchmarks;
pub mod compare;
mod compare_report;
mod plot;
mod report;

use crate::error::{io_err, CliError, CliResult};
use crate::machine::{command_line, Machine};
use crate::place::{plan, shm_free, Place, PlanArgs};
use crate::pool::{open_pool, GeometryArgs, ModeArg, PoolArgs, PoolLayout};
use crate::workload::{count_arg, out, write_json};
use benchmarks::{Bench, Spec};
use clap::Args;
use masse::format::{Codec, FORMAT_VERSION};
use masse::{Db, Options, Stats, MAX_KEY_LEN, MAX_VALUE_LEN};
use masse_cli::dbbench::Seeds;
use masse_cli::keydist::{KeyDist, Zipfian, DEFAULT_THETA};
use masse_cli::rng::SplitMix64;
use masse_cli::units::{fmt_bytes, parse_count};
use report::{cpu_secs, proc_status_bytes, BenchReport, EngineDelta};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// gflags-style booleans: `--flag`, `--flag=1`, `--flag=true`, `--flag=0`, `--flag=false`.
fn bool_arg(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "t" | "yes" | "y" => Ok(true),
        "0" | "false" | "f" | "no" | "n" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (use true/false or 1/0)")),
    }
}

fn int_arg(s: &str) -> Result<i64, String> {
    if let Some(rest) = s.strip_prefix('-') {
        return parse_count(rest).map(|v| -(v as i64));
    }
    parse_count(s).map(|v| v as i64)
}

const AFTER: &str = "\
Benchmarks (db_bench's names and semantics; every thread does --num operations unless
--reads/--writes/--duration say otherwise, as in db_bench):
  fillseq                 each thread writes keys 0..num in order (fresh pool)
  fillrandom              each thread writes --writes (default --num) uniformly random keys (fresh pool)
  overwrite               as fillrandom, on the existing data
  readrandom              each thread reads --reads (default --num) random keys
  readrandomwriterandom   each thread does --num operations: in every 100, --readwritepercent gets then puts
  readwhilewriting        --threads readers as readrandom, plus one writer putting random keys until they finish
  deleterandom            each thread deletes --num random keys
  multireadrandom         each thread reads --reads random keys in batches of --batch_size, one
                          Db::get_many per batch (its device reads go out together); the
                          read latency is per batch, as db_bench's
Keys are drawn and formatted as db_bench 7.8 does (its 64-bit Mersenne Twister seeded
with --seed + the thread's number; the key number in big-endian binary, padded with
'0' to --key_size), so with the same --seed the same keys are read and written and
\"found\" counts match db_bench's. To fill N keys as db_bench does: --benchmarks=fillrandom
--threads=1 --num=N. With --key_dist=zipfian the benchmarks after the fill draw keys
with YCSB's skew instead (popularity ∝ 1/rank^--zipf_theta, hot keys scattered over
[0, num)); db_bench has no such flag, so those runs have no RocksDB counterpart here.

Pools (--db): tiered (default: fast tier in /dev/shm, capacity tier under --dir or
$TMPDIR or /var/tmp), capacity-only, scm-only (one device in /dev/shm); temporary files
removed at the end unless --keep. Or --db=DIR: the pool lives in DIR/capacity.masse
(+ /dev/shm/masse-bench-<hash of DIR>/fast.masse) and stays, for --use_existing_db. Or
name devices with --fast/--capacity.

Report: the db_bench summary line per benchmark, then latency percentiles per operation
(to p99.999), ACT shares (>1,2,4,8,64 ms), IOPS consistency (PM863 definition, over
--report_interval_seconds intervals), engine figures (bytes written per device per user
byte, GC, index DRAM) and CPU per operation. --json writes all of it, with the per-interval
series; --report_dir writes report.json and SVG plots (latency CDF, ops/s over time,
latency vs throughput).

RocksDB tuning flags (--bloom_bits, --cache_size, --compression_type, --wal_dir, --sync,
--use_direct_reads, --multiread_batched, --async_io, ...) are accepted and ignored, so one
command line serves both tools.";

/// Arguments of `masse bench`.
#[derive(Args, Debug)]
#[command(after_help = AFTER)]
pub struct BenchArgs {
    /// Comma-separated benchmarks to run in order: fillseq, fillrandom, overwrite,
    /// readrandom, readrandomwriterandom, readwhilewriting, deleterandom, multireadrandom.
    #[arg(long, value_name = "LIST", default_value = "fillrandom,readrandom")]
    pub benchmarks: String,

    /// Number of keys: keys are drawn from [0, num) (1000000, 1e7, 10M...).
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = count_arg)]
    pub num: u64,

    /// Key size in bytes.
    #[arg(
        long = "key_size",
        alias = "key-size",
        value_name = "BYTES",
        default_value_t = 16
    )]
    pub key_size: usize,

    /// Value size in bytes.
    #[arg(
        long = "value_size",
        alias = "value-size",
        value_name = "BYTES",
        default_value_t = 100
    )]
    pub value_size: usize,

    /// Concurrent threads (each does the benchmark's full operation count, as in db_bench).
    #[arg(long, value_name = "T", default_value_t = 1)]
    pub threads: usize,

    /// Seconds to run the random benchmarks (0 = run by operation counts). Ignored by
    /// fillseq and deleterandom, as in db_bench.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub duration: f64,

    /// Reads per thread (negative = --num).
    #[arg(long, value_name = "N", default_value = "-1", value_parser = int_arg, allow_hyphen_values = true)]
    pub reads: i64,

    /// Writes per thread (negative = --num).
    #[arg(long, value_name = "N", default_value = "-1", value_parser = int_arg, allow_hyphen_values = true)]
    pub writes: i64,

    /// Keys per batch of multireadrandom (one `Db::get_many` call each).
    #[arg(long = "batch_size", alias = "batch-size", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub batch_size: u64,

    /// Percentage of reads in readrandomwriterandom.
    #[arg(long, value_name = "PCT", default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub readwritepercent: u32,

    /// Seed base of the per-thread generators (0 = derived from the time, printed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Distribution of the keys the random benchmarks (not the fills) read, write and
    /// delete: uniform (db_bench's) or zipfian (YCSB's skew, hot keys scattered over the
    /// key space; --zipf_theta sets the skew). Fills stay uniform, so there is data to skew over.
    #[arg(
        long = "key_dist",
        alias = "key-dist",
        value_enum,
        value_name = "DIST",
        default_value = "uniform"
    )]
    pub key_dist: KeyDist,

    /// θ of --key_dist=zipfian: key popularity ∝ 1/rank^θ (0 = uniform; YCSB's 0.99).
    #[arg(long = "zipf_theta", alias = "zipf-theta", value_name = "THETA", default_value_t = DEFAULT_THETA)]
    pub zipf_theta: f64,

    /// Also print each operation's histogram in db_bench's format.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value = "false", value_parser = bool_arg)]
    pub histogram: bool,

    /// Open the existing pool (--db=DIR or --fast/--capacity) instead of making one;
    /// fill benchmarks are then skipped, as in db_bench.
    #[arg(long = "use_existing_db", alias = "use-existing-db", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value = "false", value_parser = bool_arg)]
    pub use_existing_db: bool,

    /// Pool: tiered, capacity-only, scm-only, or a directory to keep the pool in.
    #[arg(long, value_name = "PRESET|DIR", default_value = "tiered")]
    pub db: String,

    /// Directory for the capacity-tier file of a preset pool (default $TMPDIR or /var/tmp).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Seconds per interval of the time series and IOPS consistency.
    #[arg(
        long = "report_interval_seconds",
        value_name = "SECS",
        default_value_t = 1.0
    )]
    pub report_interval_seconds: f64,

    /// Write the full report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write report.json and the SVG plots into this directory (created if needed).
    #[arg(long = "report_dir", alias = "report-dir", value_name = "DIR")]
    pub report_dir: Option<PathBuf>,

    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,

    /// Keep temporary pool files at the end and print their paths.
    #[arg(long)]
    pub keep: bool,

    /// Format over an existing masse pool on --fast/--capacity devices.
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub geo: GeometryArgs,

    /// RocksDB-only tuning flags, accepted and ignored.
    #[arg(long = "bloom_bits", hide = true)]
    pub bloom_bits: Option<String>,
    #[arg(long = "cache_size", hide = true)]
    pub cache_size: Option<String>,
    #[arg(long = "cache_index_and_filter_blocks", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub cache_index_and_filter_blocks: Option<String>,
    #[arg(long = "compression_type", hide = true)]
    pub compression_type: Option<String>,
    #[arg(long = "wal_dir", hide = true)]
    pub wal_dir: Option<String>,
    #[arg(long = "sync", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub sync: Option<String>,
    #[arg(long = "use_direct_reads", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub use_direct_reads: Option<String>,
    #[arg(long = "use_direct_io_for_flush_and_compaction", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub use_direct_io_for_flush_and_compaction: Option<String>,
    #[arg(long = "statistics", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub statistics: Option<String>,
    #[arg(long = "max_background_jobs", hide = true)]
    pub max_background_jobs: Option<String>,
    #[arg(long = "report_file", hide = true)]
    pub report_file: Option<String>,
    #[arg(long = "multiread_batched", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub multiread_batched: Option<String>,
    #[arg(long = "async_io", hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub async_io: Option<String>,
}

/// A db_bench-style flag string of the workload, for the report.
#[derive(serde::Serialize)]
struct Config {
    benchmarks: Vec<Bench>,
    num: u64,
    key_size: usize,
    value_size: usize,
    threads: usize,
    duration: f64,
    reads: i64,
    writes: i64,
    readwritepercent: u32,
    batch_size: u64,
    seed: u64,
    key_dist: KeyDist,
    zipf_theta: f64,
    use_existing_db: bool,
    db: String,
    fast: Option<PathBuf>,
    capacity: Vec<PathBuf>,
    report_interval_seconds: f64,
}

#[derive(serde::Serialize)]
struct Report {
    command: String,
    date_unix: u64,
    machine: Machine,
    config: Config,
    pool: Option<PoolLayout>,
    benchmarks: Vec<BenchReport>,
    skipped: Vec<String>,
    /// Peak resident set size of the process.
    peak_rss_bytes: u64,
    stats: Option<Stats>,
    plots: Vec<PathBuf>,
}

fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where the pool lives, and whether `Place` may format over an existing pool there.
struct Where {
    place: Place,
    /// Temporary directory in /dev/shm for an scm-only preset.
    _shm: Option<tempfile::TempDir>,
    force: bool,
    geo: GeometryArgs,
    pool: PoolArgs,
}

fn place_pool(a: &BenchArgs, data: u64) -> CliResult<Where> {
    let mut geo = a.geo.clone();
    let mut pool = a.pool.clone();
    // Index checkpoints (≈ 17-19 B/key, two slots) and the pad must fit the fast tier.
    let fast_need = (a.num.saturating_mul(20) * 2 + (512 << 20)).max(1 << 30);
    let fast_need = fast_need.div_ceil(1 << 20) << 20;
    if pool.fast_size.is_none() {
        pool.fast_size = Some(fast_need);
    }
    let preset = match a.db.as_str() {
        "tiered" => Some(ModeArg::Tiered),
        "capacity-only" => Some(ModeArg::CapacityOnly),
        "scm-only" => Some(ModeArg::ScmOnly),
        _ => None,
    };
    let mut shm = None;
    let mut force = a.force;
    let mut dir = a.dir.clone();
    if !pool.capacity.is_empty() {
        if preset.is_none() {
            return Err(CliError::new(
                "--db=DIR and --fast/--capacity both name the pool: give one",
            ));
        }
        geo.mode = geo.mode.or(if a.db == "tiered" && pool.fast.is_none() {
            None
        } else {
            preset
        });
        if pool.fast.is_none() && geo.mode == Some(ModeArg::Tiered) {
            geo.mode = None;
        }
    } else if let Some(m) = preset {
        if a.use_existing_db {
            return Err(CliError::new(format!(
                "--use_existing_db needs a pool that outlives a run: --db=DIR or --fast/--capacity (--db={} makes temporary files)",
                a.db
            )));
        }
        geo.mode = Some(m);
        if m == ModeArg::ScmOnly {
            let shm_dir = Path::new("/dev/shm");
            let need = (4 * data).max(256 << 20);
            if !shm_dir.is_dir() || shm_free().is_none_or(|f| f < need + (64 << 20)) {
                return Err(CliError::new(format!(
                    "--db=scm-only needs about {} free in /dev/shm",
                    fmt_bytes(need)
                )));
            }
            let t = tempfile::Builder::new()
                .prefix("masse-bench-")
                .tempdir_in(shm_dir)
                .map_err(|e| io_err("cannot create a temporary directory in", shm_dir, e))?;
            dir = Some(t.path().to_path_buf());
            shm = Some(t);
        }
    } else {
        // --db=DIR: our own files, kept; db_bench recreates its DB unless told to reuse it.
        let d = PathBuf::from(&a.db);
        std::fs::create_dir_all(&d).map_err(|e| io_err("cannot create directory", &d, e))?;
        let canon = d.canonicalize().unwrap_or(d.clone());
        let fast_dir = PathBuf::from(format!(
            "/dev/shm/masse-bench-{:016x}",
            stable_hash(&canon.display().to_string())
        ));
        if geo.mode != Some(ModeArg::CapacityOnly) && geo.mode != Some(ModeArg::ScmOnly) {
            std::fs::create_dir_all(&fast_dir)
                .map_err(|e| io_err("cannot create directory", &fast_dir, e))?;
            pool.fast = Some(fast_dir.join("fast.masse"));
        }
        pool.capacity = vec![canon.join("capacity.masse")];
        force = true;
    }
    if pool.capacity.is_empty() && pool.fast.is_some() {
        return Err(CliError::new("--fast needs --capacity too"));
    }
    let place = plan(
        &PlanArgs {
            pool: &pool,
            geo: &geo,
            dir: dir.as_deref(),
            utilization: None,
            prefix: "masse-bench-",
        },
        data,
    )?;
    Ok(Where {
        place,
        _shm: shm,
        force,
        geo,
        pool,
    })
}

fn validate(a: &BenchArgs) -> CliResult<Vec<Bench>> {
    let mut list = Vec::new();
    for name in a
        .benchmarks
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match Bench::parse(name) {
            Some(b) => list.push(b),
            None => {
                let known: Vec<&str> = benchmarks::ALL.iter().map(|b| b.name()).collect();
                return Err(CliError::new(format!(
                    "unknown benchmark {name:?} (masse bench runs: {})",
                    known.join(", ")
                )));
            }
        }
    }
    if list.is_empty() {
        return Err(CliError::new("--benchmarks is empty"));
    }
    if a.num == 0 {
        return Err(CliError::new("--num must be at least 1"));
    }
    if a.threads == 0 || a.threads > 1024 {
        return Err(CliError::new("--threads must be between 1 and 1024"));
    }
    if a.key_size == 0 || a.key_size > MAX_KEY_LEN {
        return Err(CliError::new(format!(
            "--key_size must be between 1 and {MAX_KEY_LEN}"
        )));
    }
    if a.value_size > MAX_VALUE_LEN {
        return Err(CliError::new(format!(
            "--value_size {} exceeds the maximum of {MAX_VALUE_LEN} bytes",
            a.value_size
        )));
    }
    if !(a.duration >= 0.0 && a.duration.is_finite()) {
        return Err(CliError::new("--duration must be a number of seconds ≥ 0"));
    }
    if !(a.report_interval_seconds > 0.0 && a.report_interval_seconds.is_finite()) {
        return Err(CliError::new("--report_interval_seconds must be > 0"));
    }
    if a.key_size < 8 && a.num > 1u64 << (8 * a.key_size) {
        eprintln!(
            "masse bench: warning: --key_size {} holds only {} distinct keys, fewer than --num (db_bench keeps the low bytes too)",
            a.key_size,
            1u64 << (8 * a.key_size)
        );
    }
    Ok(list)
}

pub fn run(a: &BenchArgs) -> CliResult<i32> {
    let list = validate(a)?;
    let seed = if a.seed == 0 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1)
    } else {
        a.seed
    };
    // A bad --zipf_theta is refused before any pool file is made.
    if a.key_dist == KeyDist::Zipfian {
        Zipfian::new(a.num, a.zipf_theta)
            .map_err(|e| CliError::new(format!("--zipf_theta: {e}")))?;
    }
    let codec = Codec::of_version(a.geo.format_version.unwrap_or(FORMAT_VERSION));
    let rec = codec.footprint(a.key_size, a.value_size);
    let data = a.num * rec;
    let mut wh = place_pool(a, data)?;
    if a.keep {
        wh.place.keep();
    }
    let machine = Machine::probe();
    let command = command_line();
    out(format!("command   {command}"));
    out(format!("machine   {}", machine.to_line()));
    out(format!(
        "workload  --benchmarks={} --num={} --key_size={} --value_size={} --threads={} --duration={} --reads={} --writes={} --readwritepercent={} --batch_size={} --seed={}{}",
        a.benchmarks, a.num, a.key_size, a.value_size, a.threads, a.duration, a.reads, a.writes, a.readwritepercent, a.batch_size, seed,
        match a.key_dist {
            KeyDist::Uniform => String::new(),
            KeyDist::Zipfian => format!(" --key_dist=zipfian --zipf_theta={}", a.zipf_theta),
        }
    ));
    let opts = || Options {
        expected_keys: usize::try_from(a.num).unwrap_or(usize::MAX),
        ..Options::default()
    };
    let open_or_create = |wh: &Where, fresh: bool| -> CliResult<Db> {
        if fresh {
            wh.place.create(&wh.pool, &wh.geo, wh.force, opts())
        } else {
            open_pool(&wh.place.pool_args(&wh.pool), opts())
        }
    };
    let t0 = Instant::now();
    let mut db = Some(Arc::new(open_or_create(&wh, !a.use_existing_db)?));
    let layout = db.as_ref().map(|d| PoolLayout::of(d));
    let slot = crate::metrics::EngineSlot::new();
    if let Some(d) = &db {
        slot.set(d.clone());
    }
    let mut m = crate::metrics::Metrics::new();
    m.engine(slot.clone());
    let _metrics = crate::metrics::start(&a.metrics, m)?;
    if let Some(l) = &layout {
        out(format!(
            "pool      {} in {:.1} ms",
            if a.use_existing_db {
                "opened"
            } else {
                "created"
            },
            t0.elapsed().as_secs_f64() * 1e3
        ));
        out(l.to_text("          "));
    }

    // One shared buffer of random value bytes; every put takes a window of it.
    let mut values = vec![0u8; (1 << 20).max(2 * a.value_size)];
    SplitMix64::new(seed).fill(&mut values);

    let mut seeds = Seeds::new(seed);
    let mut reports: Vec<BenchReport> = Vec::new();
    let mut skipped = Vec::new();
    let mut plots = Vec::new();
    if let Some(d) = &a.report_dir {
        std::fs::create_dir_all(d).map_err(|e| io_err("cannot create directory", d, e))?;
    }
    let per = |v: i64| if v < 0 { a.num } else { v as u64 };
    for (i, &b) in list.iter().enumerate() {
        if b.fresh_db() && a.use_existing_db {
            out(format!(
                "{:<12} : skipped (--use_existing_db is true)",
                b.name()
            ));
            skipped.push(b.name().to_string());
            continue;
        }
        if b.fresh_db() && i > 0 {
            // db_bench starts every fill on a fresh database.
            if let Some(d) = db.take() {
                slot.clear();
                crate::pool::close_shared(d)?;
            }
            let mut w2 = place_pool_again(&wh);
            w2.force = true;
            let d = Arc::new(open_or_create(&w2, true)?);
            slot.set(d.clone());
            db = Some(d);
        }
        let Some(dbr) = db.as_ref() else {
            return Err(CliError::new("internal: no open pool"));
        };
        let spec = Spec {
            bench: b,
            num: a.num,
            key_size: a.key_size,
            value_size: a.value_size,
            threads: a.threads,
            duration: a.duration,
            reads: per(a.reads),
            writes: if a.writes == 0 { a.num } else { per(a.writes) },
            readwrites: if a.reads < 0 && a.writes < 0 {
                a.num
            } else {
                per(a.reads).max(per(a.writes))
            },
            readwritepercent: a.readwritepercent,
            batch: a.batch_size,
            interval: a.report_interval_seconds,
            skew: match a.key_dist {
                KeyDist::Uniform => None,
                KeyDist::Zipfian => Some(Zipfian::new(a.num, a.zipf_theta).map_err(CliError::new)?),
            },
        };
        let n = a.threads + usize::from(b == Bench::Readwhilewriting);
        let thread_seeds = seeds.next_threads(n);
        let before = dbr.stats();
        let cpu0 = cpu_secs();
        let o = benchmarks::run(dbr, &spec, &thread_seeds, &values)?;
        let cpu = cpu_secs() - cpu0;
        let after = dbr.stats();
        let engine = EngineDelta::between(&before, &after, o.user_bytes_written);
        let r = BenchReport::new(
            o,
            a.report_interval_seconds,
            engine,
            cpu,
            proc_status_bytes("VmRSS"),
        );
        out(r.to_text(a.histogram));
        if let Some(d) = &a.report_dir {
            let same = reports.iter().filter(|x| x.name == r.name).count();
            let stem = if same == 0 {
                r.name.clone()
            } else {
                format!("{}-{}", r.name, same + 1)
            };
            let files = plot::write_plots(&r, d, &stem)
                .map_err(|e| io_err("cannot write plots to", d, e))?;
            plots.extend(files);
        }
        reports.push(r);
    }
    let stats = db.as_ref().map(|d| d.stats());
    if let Some(s) = &stats {
        out("engine statistics at the end");
        out(s.to_text());
    }
    if let Some(d) = db.take() {
        slot.clear();
        crate::pool::close_shared(d)?;
    }
    let report = Report {
        command,
        date_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        machine,
        config: Config {
            benchmarks: list,
            num: a.num,
            key_size: a.key_size,
            value_size: a.value_size,
            threads: a.threads,
            duration: a.duration,
            reads: a.reads,
            writes: a.writes,
            readwritepercent: a.readwritepercent,
            batch_size: a.batch_size,
            seed,
            key_dist: a.key_dist,
            zipf_theta: a.zipf_theta,
            use_existing_db: a.use_existing_db,
            db: a.db.clone(),
            fast: wh.place.fast.clone(),
            capacity: wh.place.caps.clone(),
            report_interval_seconds: a.report_interval_seconds,
        },
        pool: layout,
        benchmarks: reports,
        skipped,
        peak_rss_bytes: proc_status_bytes("VmHWM"),
        stats,
        plots: plots.clone(),
    };
    let mut jsons = Vec::new();
    if let Some(j) = &a.json {
        jsons.push(j.clone());
    }
    if let Some(d) = &a.report_dir {
        jsons.push(d.join("report.json"));
    }
    for j in &jsons {
        write_json(j, &report)?;
        out(format!("report written to {}", j.display()));
    }
    for p in &plots {
        out(format!("plot written to {}", p.display()));
    }
    if wh.place.keep && !wh.place.explicit {
        out(format!("pool kept: {}", wh.place.files()));
    }
    Ok(0)
}

/// The same placement, to format again for the next fill benchmark.
fn place_pool_again(w: &Where) -> Where {
    Where {
        place: w.place.again(),
        _shm: None,
        force: true,
        geo: w.geo.clone(),
        pool: w.pool.clone(),
    }
}
