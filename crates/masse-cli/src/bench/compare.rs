//! `masse bench-compare` (hidden; used by `bench/compare-rocksdb`): turn the outputs of
//! one engine's run of one workload — `masse bench`, or `db_bench` with one RocksDB
//! configuration ("variant") — into an observation (a JSON line), and a file of them into
//! the Markdown side-by-side tables, with masse held against the best RocksDB variant of
//! each workload and the targets worked out (`compare_report`).

use super::compare_report;
use crate::error::{io_err, CliError, CliResult};
use clap::{Args, Subcommand};
use masse_cli::dbbench::{parse_output, Histo, Output};
use masse_cli::qos::{iops_consistency, Latency, ACT_MS};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Subcommand, Debug)]
pub enum What {
    /// Print masse's observation of one run as a JSON line.
    Masse(Box<MasseArgs>),
    /// Print one RocksDB variant's observation of one run as a JSON line.
    Rocksdb(Box<RocksdbArgs>),
    /// Print the Markdown tables of a file of observations.
    Table {
        /// File of JSON observations (one per line).
        rows: PathBuf,
    },
}

/// What both engines' observations share: the workload cell and the device bound.
#[derive(Args, Debug, Clone)]
pub struct CellArgs {
    /// The workload's name, e.g. "Table 4".
    #[arg(long)]
    pub label: String,
    /// GNU time output (`%e %U %S %M %O %I`) of the fill process.
    #[arg(long)]
    pub fill_time: Option<PathBuf>,
    /// GNU time output of the run process.
    #[arg(long)]
    pub time: PathBuf,
    /// Queue depth of the fio measurement below (threads × batch).
    #[arg(long)]
    pub fio_qd: Option<u64>,
    /// fio's 4 KiB random-read IOPS on the capacity filesystem at that queue depth.
    #[arg(long)]
    pub fio_iops: Option<f64>,
    /// fio's 99.9th-percentile read latency at that queue depth, µs: the device's own tail.
    #[arg(long)]
    pub fio_p999_us: Option<f64>,
    /// fio's 4 KiB random-read IOPS with as many threads of blocking reads (QD1 each) as the
    /// run has clients: the device as the engines' one-key gets meet it.
    #[arg(long)]
    pub fio_blocking_iops: Option<f64>,
    /// The 99.9th-percentile read latency of that fio run, µs.
    #[arg(long)]
    pub fio_blocking_p999_us: Option<f64>,
    /// Bytes on the fast tier at the end of the run (RocksDB: WAL + SSTs placed there).
    #[arg(long)]
    pub fast_bytes: Option<u64>,
}

#[derive(Args, Debug)]
pub struct MasseArgs {
    #[command(flatten)]
    pub cell: CellArgs,
    /// `masse bench --json` of the fill.
    #[arg(long)]
    pub fill_json: PathBuf,
    /// `masse bench --json` of the run.
    #[arg(long)]
    pub json: PathBuf,
    /// What ran, for the table (default: "masse <version>").
    #[arg(long)]
    pub binary: Option<String>,
}

#[derive(Args, Debug)]
pub struct RocksdbArgs {
    #[command(flatten)]
    pub cell: CellArgs,
    /// The RocksDB configuration's name (release, tuned, blob, tiered, ...).
    #[arg(long)]
    pub variant: String,
    /// db_bench's standard output of the fill.
    #[arg(long)]
    pub fill_out: PathBuf,
    /// db_bench's standard output of the run (with --histogram --statistics).
    #[arg(long)]
    pub out: PathBuf,
    /// db_bench's standard error of the run (its "RocksDB: version" line).
    #[arg(long)]
    pub err: Option<PathBuf>,
    /// db_bench's --report_file of the run (per-second throughput), if any.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Block cache given to RocksDB, bytes.
    #[arg(long)]
    pub cache_size: u64,
    #[arg(long)]
    pub bench: String,
    #[arg(long)]
    pub threads: u64,
    /// Keys per MultiGet (multireadrandom), 1 otherwise.
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
    #[arg(long)]
    pub num: u64,
    #[arg(long)]
    pub key_size: u64,
    #[arg(long)]
    pub value_size: u64,
    #[arg(long, default_value_t = 100)]
    pub readwritepercent: u64,
}

/// One engine's figures in one workload cell.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default)]
pub struct Side {
    pub fill_ops_per_sec: f64,
    /// Bytes the fill process wrote to the capacity filesystem (GNU time %O × 512).
    pub fill_capacity_bytes_written: u64,
    /// Key + value bytes the fill wrote.
    pub fill_user_bytes_written: u64,
    pub ops_per_sec: f64,
    pub ops: u64,
    pub seconds: f64,
    /// (found, reads) over all threads (RocksDB: thread 0, as db_bench prints it).
    pub found: Option<(u64, u64)>,
    pub read: Latency,
    pub write: Latency,
    /// Percent of reads over 1, 2, 4, 8, 64 ms.
    pub read_act: Vec<f64>,
    pub iops_consistency_all_pct: Option<f64>,
    /// Bytes the run process wrote to the capacity filesystem (GNU time %O × 512): the
    /// same measure for every engine and layout (tmpfs, the fast tier, is not counted).
    pub capacity_bytes_written: u64,
    /// Bytes the run process read from the capacity filesystem (GNU time %I × 512).
    pub capacity_bytes_read: u64,
    /// The engine's own count of capacity writes in the run (masse: device counters;
    /// RocksDB: flush + compaction writes, blob files included), a cross-check.
    pub engine_capacity_bytes_written: u64,
    pub user_bytes_written: u64,
    /// masse: gets that cost a device read (its counter).
    pub device_reads: Option<u64>,
    pub cpu_secs: f64,
    pub cpu_us_per_op: f64,
    pub peak_rss_bytes: u64,
    /// masse: index DRAM; RocksDB: block cache configured.
    pub index_or_cache_bytes: u64,
    /// masse: its fast tier (pad + checkpoint slots); RocksDB: bytes on the fast tier.
    pub fast_bytes: Option<u64>,
}

/// One engine (variant) in one workload cell: a line of the observations file.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub struct Obs {
    pub label: String,
    pub bench: String,
    pub threads: u64,
    pub batch: u64,
    pub num: u64,
    pub key_size: u64,
    pub value_size: u64,
    pub readwritepercent: u64,
    /// "masse" or "rocksdb".
    pub engine: String,
    /// RocksDB's configuration name; "masse" for masse.
    pub variant: String,
    /// What ran, e.g. "RocksDB 11.8.1" or "RocksDB 7.8.3, assertions enabled".
    pub binary: String,
    pub fio_qd: Option<u64>,
    pub fio_iops: Option<f64>,
    pub fio_p999_us: Option<f64>,
    /// fio with `threads` blocking readers (absent in observations from before 2026-11-30).
    #[serde(default)]
    pub fio_blocking_iops: Option<f64>,
    #[serde(default)]
    pub fio_blocking_p999_us: Option<f64>,
    pub side: Side,
}

fn read(p: &Path) -> CliResult<String> {
    std::fs::read_to_string(p).map_err(|e| io_err("cannot read", p, e))
}

fn json(p: &Path) -> CliResult<serde_json::Value> {
    serde_json::from_str(&read(p)?)
        .map_err(|e| CliError::new(format!("{}: not JSON: {e}", p.display())))
}

/// What GNU time `-f "%e %U %S %M %O %I"` reports for one process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub elapsed: f64,
    /// User + system seconds.
    pub cpu: f64,
    pub max_rss_bytes: u64,
    /// File-system output / input in bytes (512-byte blocks: the kernel's per-process
    /// write_bytes / read_bytes, storage I/O only; tmpfs counts none).
    pub written: u64,
    pub read: u64,
}

/// GNU time's last line `%e %U %S %M [%O %I]` (older files have the first four only).
pub fn parse_time(s: &str) -> Option<Usage> {
    let line = s.lines().rev().find(|l| !l.trim().is_empty())?;
    let w: Vec<&str> = line.split_whitespace().collect();
    if w.len() < 4 {
        return None;
    }
    let blocks = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) * 512;
    Some(Usage {
        elapsed: w[0].parse().ok()?,
        cpu: w[1].parse::<f64>().ok()? + w[2].parse::<f64>().ok()?,
        max_rss_bytes: w[3].parse::<u64>().ok()? * 1024,
        written: blocks(4),
        read: blocks(5),
    })
}

fn usage(p: &Path) -> CliResult<Usage> {
    parse_time(&read(p)?)
        .ok_or_else(|| CliError::new(format!("{}: not GNU time output", p.display())))
}

fn lat_of_histo(h: Option<&Histo>) -> Latency {
    h.map(|h| h.lat.clone()).unwrap_or_default()
}

fn lat_of_json(v: &serde_json::Value) -> Latency {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// RocksDB's own count of bytes written to SST and blob files: flushes + compactions
/// (their I/O statistics count every file the job writes, blob files included).
pub fn rocksdb_capacity_bytes(o: &Output) -> u64 {
    let t = |k: &str| o.tickers.get(k).copied().unwrap_or(0);
    t("rocksdb.flush.write.bytes") + t("rocksdb.compact.write.bytes")
}

/// Per-second throughput from db_bench's --report_file (`secs_elapsed,interval_qps`).
pub fn parse_report_csv(s: &str) -> Vec<u64> {
    s.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1)?.trim().parse::<u64>().ok())
        .collect()
}

fn fio_of(c: &CellArgs) -> (Option<u64>, Option<f64>, Option<f64>) {
    (c.fio_qd, c.fio_iops, c.fio_p999_us)
}

/// masse's observation from its fill and run reports and the two processes' usage.
pub fn masse_obs(a: &MasseArgs) -> CliResult<Obs> {
    let mj = json(&a.json)?;
    let mf = json(&a.fill_json)?;
    let cfg = &mj["config"];
    let b = mj["benchmarks"]
        .as_array()
        .and_then(|v| v.last())
        .cloned()
        .ok_or_else(|| CliError::new("masse report has no benchmark"))?;
    let fb = mf["benchmarks"]
        .as_array()
        .and_then(|v| v.first())
        .cloned()
        .unwrap_or_default();
    let run = usage(&a.cell.time)?;
    let fill = a.cell.fill_time.as_deref().map(usage).transpose()?;
    let all_ops = b["reads"].as_u64().unwrap_or(0) + b["writes"].as_u64().unwrap_or(0);
    let e = &b["engine"];
    let fast = mf["pool"]["devices"].as_array().and_then(|d| {
        d.iter()
            .find(|x| x["role"] == "fast")
            .and_then(|x| x["capacity"].as_u64())
    });
    let side = Side {
        fill_ops_per_sec: fb["ops_per_sec"].as_f64().unwrap_or(0.0),
        fill_capacity_bytes_written: fill
            .map(|u| u.written)
            .unwrap_or_else(|| fb["engine"]["capacity_bytes_written"].as_u64().unwrap_or(0)),
        fill_user_bytes_written: fb["engine"]["user_bytes_written"].as_u64().unwrap_or(0),
        ops_per_sec: b["ops_per_sec"].as_f64().unwrap_or(0.0),
        ops: b["ops"].as_u64().unwrap_or(0),
        seconds: b["seconds"].as_f64().unwrap_or(0.0),
        found: Some((
            b["found"].as_u64().unwrap_or(0),
            b["reads"].as_u64().unwrap_or(0),
        )),
        read: lat_of_json(&b["latency_us"]["read"]),
        write: lat_of_json(&b["latency_us"]["write"]),
        read_act: b["act_shares"]["read"]
            .as_array()
            .map(|v| v.iter().filter_map(|x| x["percent"].as_f64()).collect())
            .unwrap_or_default(),
        // "all" exists only when the run mixed kinds; a read-only run's is its reads'.
        iops_consistency_all_pct: b["iops_consistency_pct"]["all"]
            .as_f64()
            .or(b["iops_consistency_pct"]["read"].as_f64()),
        capacity_bytes_written: run.written,
        capacity_bytes_read: run.read,
        engine_capacity_bytes_written: e["capacity_bytes_written"].as_u64().unwrap_or(0),
        user_bytes_written: e["user_bytes_written"].as_u64().unwrap_or(0),
        device_reads: e["device_reads"].as_u64(),
        cpu_secs: run.cpu,
        cpu_us_per_op: run.cpu * 1e6 / all_ops.max(1) as f64,
        peak_rss_bytes: run.max_rss_bytes,
        index_or_cache_bytes: e["index_bytes"].as_u64().unwrap_or(0),
        fast_bytes: a.cell.fast_bytes.or(fast),
    };
    let (fio_qd, fio_iops, fio_p999_us) = fio_of(&a.cell);
    let bench = b["name"].as_str().unwrap_or("?").to_string();
    Ok(Obs {
        label: a.cell.label.clone(),
        batch: if bench == "multireadrandom" {
            cfg["batch_size"].as_u64().unwrap_or(1)
        } else {
            1
        },
        bench,
        threads: cfg["threads"].as_u64().unwrap_or(0),
        num: cfg["num"].as_u64().unwrap_or(0),
        key_size: cfg["key_size"].as_u64().unwrap_or(0),
        value_size: cfg["value_size"].as_u64().unwrap_or(0),
        readwritepercent: cfg["readwritepercent"].as_u64().unwrap_or(0),
        engine: "masse".into(),
        variant: "masse".into(),
        binary: a
            .binary
            .clone()
            .unwrap_or_else(|| format!("masse {}", env!("CARGO_PKG_VERSION"))),
        fio_qd,
        fio_iops,
        fio_p999_us,
        fio_blocking_iops: a.cell.fio_blocking_iops,
        fio_blocking_p999_us: a.cell.fio_blocking_p999_us,
        side,
    })
}

/// "RocksDB 11.8.1" from db_bench's header, with the build's assertions if it says so.
fn rocksdb_binary(o: &Output, version: Option<String>) -> String {
    let v = version.or(o.version.clone()).unwrap_or_else(|| "?".into());
    if o.assertions {
        format!("RocksDB {v}, assertions enabled")
    } else {
        format!("RocksDB {v}")
    }
}

/// One RocksDB variant's observation from db_bench's outputs and the processes' usage.
pub fn rocksdb_obs(a: &RocksdbArgs) -> CliResult<Obs> {
    let ro = parse_output(&read(&a.out)?);
    let rf = parse_output(&read(&a.fill_out)?);
    let version = match &a.err {
        Some(p) => parse_output(&read(p)?).version,
        None => None,
    };
    let s = ro
        .summaries
        .iter()
        .rev()
        .find(|s| s.name == a.bench)
        .ok_or_else(|| {
            CliError::new(format!(
                "no {} summary line in {}",
                a.bench,
                a.out.display()
            ))
        })?;
    let run = usage(&a.cell.time)?;
    let fill = a.cell.fill_time.as_deref().map(usage).transpose()?;
    let hr = ro.histograms.iter().find(|h| h.op == "read");
    let hw = ro.histograms.iter().find(|h| h.op == "write");
    let kv = a.key_size + a.value_size;
    let keys_written = |o: &Output| o.tickers.get("rocksdb.number.keys.written").copied();
    let csv = match &a.csv {
        Some(p) => parse_report_csv(&read(p).unwrap_or_default()),
        None => Vec::new(),
    };
    let side = Side {
        fill_ops_per_sec: rf
            .summaries
            .first()
            .map(|s| s.ops_per_sec as f64)
            .unwrap_or(0.0),
        fill_capacity_bytes_written: fill
            .map(|u| u.written)
            .unwrap_or_else(|| rocksdb_capacity_bytes(&rf)),
        fill_user_bytes_written: keys_written(&rf).unwrap_or(0) * kv,
        ops_per_sec: s.operations as f64 / s.seconds.max(1e-9),
        ops: s.operations,
        seconds: s.seconds,
        found: s.found(),
        read: lat_of_histo(hr),
        write: lat_of_histo(hw),
        read_act: hr
            .map(|h| {
                ACT_MS
                    .iter()
                    .map(|&ms| h.share_over_us(ms as f64 * 1000.0))
                    .collect()
            })
            .unwrap_or_default(),
        // Whole seconds only: the report file's last line may be a partial interval.
        iops_consistency_all_pct: iops_consistency(
            &csv[..csv.len().min(s.seconds.floor() as usize)],
        ),
        capacity_bytes_written: run.written,
        capacity_bytes_read: run.read,
        engine_capacity_bytes_written: rocksdb_capacity_bytes(&ro),
        user_bytes_written: keys_written(&ro).unwrap_or(0) * kv,
        device_reads: None,
        cpu_secs: run.cpu,
        cpu_us_per_op: run.cpu * 1e6 / s.operations.max(1) as f64,
        peak_rss_bytes: run.max_rss_bytes,
        index_or_cache_bytes: a.cache_size,
        fast_bytes: a.cell.fast_bytes,
    };
    let (fio_qd, fio_iops, fio_p999_us) = fio_of(&a.cell);
    Ok(Obs {
        label: a.cell.label.clone(),
        bench: a.bench.clone(),
        threads: a.threads,
        batch: a.batch,
        num: a.num,
        key_size: a.key_size,
        value_size: a.value_size,
        readwritepercent: a.readwritepercent,
        engine: "rocksdb".into(),
        variant: a.variant.clone(),
        binary: rocksdb_binary(&ro, version),
        fio_qd,
        fio_iops,
        fio_p999_us,
        fio_blocking_iops: a.cell.fio_blocking_iops,
        fio_blocking_p999_us: a.cell.fio_blocking_p999_us,
        side,
    })
}

fn print_line(o: &Obs) -> CliResult<()> {
    let line = serde_json::to_string(o)
        .map_err(|e| CliError::new(format!("cannot encode the observation: {e}")))?;
    println!("{line}");
    Ok(())
}

/// The observations of a file, one JSON object per line.
pub fn read_rows(p: &Path) -> CliResult<Vec<Obs>> {
    let text = read(p)?;
    let mut v = Vec::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        v.push(
            serde_json::from_str::<Obs>(l)
                .map_err(|e| CliError::new(format!("{} line {}: {e}", p.display(), i + 1)))?,
        );
    }
    Ok(v)
}

pub fn run(a: &CompareArgs) -> CliResult<i32> {
    match &a.what {
        What::Masse(m) => print_line(&masse_obs(m)?)?,
        What::Rocksdb(r) => print_line(&rocksdb_obs(r)?)?,
        What::Table { rows } => print!("{}", compare_report::render(&read_rows(rows)?)),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// db_bench 7.8.3's output of a readrandomwriterandom run (recorded by
    /// bench/compare-rocksdb --quick: 2 threads, 10 s, --histogram --statistics).
    const RECORDED: &str =
        include_str!("../../tests/data/db_bench-7.8.3-readrandomwriterandom.out");

    #[test]
    fn parses_a_recorded_db_bench_run() {
        let o = parse_output(RECORDED);
        assert_eq!(o.summaries.len(), 1);
        let s = &o.summaries[0];
        assert_eq!(s.name, "readrandomwriterandom");
        assert_eq!(s.ops_per_sec, 39632);
        assert_eq!(s.operations, 397998);
        assert!((s.seconds - 10.042).abs() < 1e-9);
        assert_eq!(s.found(), Some((80500, 80500)));
        let r = o
            .histograms
            .iter()
            .find(|h| h.op == "read")
            .expect("read histogram");
        let w = o
            .histograms
            .iter()
            .find(|h| h.op == "write")
            .expect("write histogram");
        assert_eq!(r.lat.count, 199000);
        assert_eq!(w.lat.count, 198998);
        // Every bucket line was read: the buckets add up to the count.
        assert_eq!(r.buckets.iter().map(|b| b.2).sum::<u64>(), r.lat.count);
        assert_eq!(w.buckets.iter().map(|b| b.2).sum::<u64>(), w.lat.count);
        assert!((w.lat.p999 - 286.62).abs() < 1e-9 && (w.lat.max - 17822.0).abs() < 1e-9);
        // p99.999 from the buckets: within the last bucket, at most the max.
        assert!(
            w.lat.p99999 > 9900.0 && w.lat.p99999 <= 17822.0,
            "{}",
            w.lat.p99999
        );
        // Writes over 1 ms: the buckets from (870, 1300] on, the first one in part
        // (300/430 of its 6 samples) -> (4.19 + 19+15+27+15+5+2+1) / 198998.
        let over = w.share_over_us(1000.0);
        let want = 100.0 * (6.0 * 300.0 / 430.0 + 84.0) / 198998.0;
        assert!((over - want).abs() < 1e-9, "{over} vs {want}");
        assert_eq!(o.tickers.get("rocksdb.number.keys.written"), Some(&198998));
        assert_eq!(rocksdb_capacity_bytes(&o), 16402095);
        // The 7.8.3 build says it has assertions on; the label must say so too.
        assert!(o.assertions);
        assert_eq!(
            rocksdb_binary(&o, Some("7.8.3".into())),
            "RocksDB 7.8.3, assertions enabled"
        );
        let release = parse_output("RocksDB:    version 11.8.1\nDB path: [/x]\n");
        assert!(!release.assertions);
        assert_eq!(rocksdb_binary(&release, None), "RocksDB 11.8.1");
    }

    /// The same workload on the release build of 11.8.1 (bench/compare-rocksdb smoke
    /// run, `tuned` variant, 2 threads, 3 s): the format the new comparison parses.
    const RECORDED_11_8: &str =
        include_str!("../../tests/data/db_bench-11.8.1-readrandomwriterandom.out");

    #[test]
    fn parses_a_recorded_db_bench_11_8_release_run() {
        let o = parse_output(RECORDED_11_8);
        let s = o.summaries.last().expect("a summary line");
        assert_eq!(s.name, "readrandomwriterandom");
        assert_eq!((s.ops_per_sec, s.operations), (33844, 102998));
        assert_eq!(s.found(), Some((21482, 26000)));
        for (op, count) in [("read", 51500), ("write", 51498)] {
            let h = o.histograms.iter().find(|h| h.op == op).expect(op);
            assert_eq!(h.lat.count, count);
            assert_eq!(h.buckets.iter().map(|b| b.2).sum::<u64>(), count, "{op}");
        }
        let r = o.histograms.iter().find(|h| h.op == "read").expect("read");
        assert!((r.lat.p999 - 7491.0).abs() < 1e-9 && (r.lat.max - 32171.0).abs() < 1e-9);
        assert_eq!(o.tickers.get("rocksdb.number.keys.written"), Some(&51498));
        // A release build: no assertion warning in the header.
        assert!(!o.assertions);
        assert_eq!(rocksdb_binary(&o, Some("11.8.1".into())), "RocksDB 11.8.1");
    }

    #[test]
    fn parses_gnu_time_with_and_without_io_counts() {
        let u = parse_time("61.02 50.10 9.90 123456 2048 4096\n").expect("six fields");
        assert_eq!(u.max_rss_bytes, 123456 * 1024);
        assert!((u.cpu - 60.0).abs() < 1e-9);
        assert_eq!((u.written, u.read), (2048 * 512, 4096 * 512));
        let old = parse_time("61.02 50.10 9.90 123456\n").expect("four fields");
        assert_eq!((old.written, old.read), (0, 0));
        assert_eq!(parse_time("Command exited with non-zero status 1\n"), None);
        assert_eq!(
            parse_report_csv("secs_elapsed,interval_qps\n1,100\n2,120\n"),
            vec![100, 120]
        );
    }
}
