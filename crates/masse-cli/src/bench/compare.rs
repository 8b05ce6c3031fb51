//! `masse bench-compare` (hidden; used by `bench/compare-rocksdb`): turn the outputs of
//! one `masse bench` run and one `db_bench` run of the same workload into a side-by-side
//! row (JSON), and rows into a Markdown table.

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
    /// Print one comparison row as a JSON line.
    Row(Box<RowArgs>),
    /// Print the Markdown table of a file of rows.
    Table {
        /// File of JSON rows (one per line).
        rows: PathBuf,
    },
}

#[derive(Args, Debug)]
pub struct RowArgs {
    #[arg(long)]
    pub label: String,
    /// `masse bench --json` of the fill.
    #[arg(long)]
    pub masse_fill_json: PathBuf,
    /// `masse bench --json` of the run.
    #[arg(long)]
    pub masse_json: PathBuf,
    /// GNU time output (`%e %U %S %M`) of the masse run.
    #[arg(long)]
    pub masse_time: PathBuf,
    /// db_bench's standard output of the fill.
    #[arg(long)]
    pub rocksdb_fill_out: PathBuf,
    /// db_bench's standard output of the run (with --histogram --statistics).
    #[arg(long)]
    pub rocksdb_out: PathBuf,
    /// GNU time output of the db_bench run.
    #[arg(long)]
    pub rocksdb_time: PathBuf,
    /// db_bench's --report_file of the run (per-second throughput), if any.
    #[arg(long)]
    pub rocksdb_csv: Option<PathBuf>,
    /// Block cache given to RocksDB, bytes.
    #[arg(long)]
    pub cache_size: u64,
    /// fio's 4 KiB random-read IOPS on the capacity filesystem at a queue depth equal to
    /// the thread count: the device-bound limit is this ÷ the read fraction.
    #[arg(long)]
    pub fio_iops: Option<f64>,
    /// fio's 99.9th-percentile read latency at that queue depth, µs: the device's own tail.
    #[arg(long)]
    pub fio_p999_us: Option<f64>,
}

/// One engine's figures in a row.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default)]
pub struct Side {
    pub fill_ops_per_sec: f64,
    pub fill_capacity_bytes_per_user_byte: Option<f64>,
    #[serde(default)]
    pub fill_capacity_bytes_written: u64,
    #[serde(default)]
    pub fill_user_bytes_written: u64,
    pub ops_per_sec: f64,
    pub ops: u64,
    pub seconds: f64,
    pub found: Option<(u64, u64)>,
    pub read: Latency,
    pub write: Latency,
    /// Percent of reads over 1, 2, 4, 8, 64 ms.
    pub read_act: Vec<f64>,
    pub iops_consistency_all_pct: Option<f64>,
    pub capacity_bytes_written: u64,
    pub user_bytes_written: u64,
    pub capacity_bytes_per_user_byte: Option<f64>,
    pub cpu_secs: f64,
    pub cpu_us_per_op: f64,
    pub peak_rss_bytes: u64,
    /// masse: index DRAM; RocksDB: block cache configured.
    pub index_or_cache_bytes: u64,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub struct Row {
    pub label: String,
    pub threads: u64,
    pub num: u64,
    pub key_size: u64,
    pub value_size: u64,
    pub readwritepercent: u64,
    /// fio's 4 KiB random-read IOPS at QD = threads on the capacity filesystem.
    #[serde(default)]
    pub fio_iops: Option<f64>,
    /// fio's read p99.9 at that queue depth, µs.
    #[serde(default)]
    pub fio_p999_us: Option<f64>,
    pub masse: Side,
    pub rocksdb: Side,
}

fn read(p: &Path) -> CliResult<String> {
    std::fs::read_to_string(p).map_err(|e| io_err("cannot read", p, e))
}

fn json(p: &Path) -> CliResult<serde_json::Value> {
    serde_json::from_str(&read(p)?)
        .map_err(|e| CliError::new(format!("{}: not JSON: {e}", p.display())))
}

/// GNU time `%e %U %S %M`: (elapsed, user + system seconds, max RSS bytes).
pub fn parse_time(s: &str) -> Option<(f64, f64, u64)> {
    let line = s.lines().rev().find(|l| !l.trim().is_empty())?;
    let w: Vec<&str> = line.split_whitespace().collect();
    if w.len() < 4 {
        return None;
    }
    Some((
        w[0].parse().ok()?,
        w[1].parse::<f64>().ok()? + w[2].parse::<f64>().ok()?,
        w[3].parse::<u64>().ok()? * 1024,
    ))
}

fn lat_of_histo(h: Option<&Histo>) -> Latency {
    h.map(|h| h.lat.clone()).unwrap_or_default()
}

fn lat_of_json(v: &serde_json::Value) -> Latency {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// RocksDB's bytes written to SST files (the capacity device): flushes + compactions.
pub fn rocksdb_capacity_bytes(o: &Output) -> u64 {
    o.tickers
        .get("rocksdb.flush.write.bytes")
        .copied()
        .unwrap_or(0)
        + o.tickers
            .get("rocksdb.compact.write.bytes")
            .copied()
            .unwrap_or(0)
}

/// Per-second throughput from db_bench's --report_file (`secs_elapsed,interval_qps`).
pub fn parse_report_csv(s: &str) -> Vec<u64> {
    s.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1)?.trim().parse::<u64>().ok())
        .collect()
}

pub fn row(a: &RowArgs) -> CliResult<Row> {
    let mj = json(&a.masse_json)?;
    let mf = json(&a.masse_fill_json)?;
    let cfg = &mj["config"];
    let num = cfg["num"].as_u64().unwrap_or(0);
    let key_size = cfg["key_size"].as_u64().unwrap_or(0);
    let value_size = cfg["value_size"].as_u64().unwrap_or(0);
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
    let (_, mcpu, mrss) = parse_time(&read(&a.masse_time)?)
        .ok_or_else(|| CliError::new("cannot parse the masse time file"))?;
    let mops = b["ops"].as_u64().unwrap_or(0);
    let all_ops = b["reads"].as_u64().unwrap_or(0) + b["writes"].as_u64().unwrap_or(0);
    let masse = Side {
        fill_ops_per_sec: fb["ops_per_sec"].as_f64().unwrap_or(0.0),
        fill_capacity_bytes_per_user_byte: fb["engine"]["capacity_bytes_per_user_byte"].as_f64(),
        fill_capacity_bytes_written: fb["engine"]["capacity_bytes_written"].as_u64().unwrap_or(0),
        fill_user_bytes_written: fb["engine"]["user_bytes_written"].as_u64().unwrap_or(0),
        ops_per_sec: b["ops_per_sec"].as_f64().unwrap_or(0.0),
        ops: mops,
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
        iops_consistency_all_pct: b["iops_consistency_pct"]["all"].as_f64(),
        capacity_bytes_written: b["engine"]["capacity_bytes_written"].as_u64().unwrap_or(0),
        user_bytes_written: b["engine"]["user_bytes_written"].as_u64().unwrap_or(0),
        capacity_bytes_per_user_byte: b["engine"]["capacity_bytes_per_user_byte"].as_f64(),
        cpu_secs: mcpu,
        cpu_us_per_op: mcpu * 1e6 / all_ops.max(1) as f64,
        peak_rss_bytes: mrss,
        index_or_cache_bytes: b["engine"]["index_bytes"].as_u64().unwrap_or(0),
    };
    let ro = parse_output(&read(&a.rocksdb_out)?);
    let rf = parse_output(&read(&a.rocksdb_fill_out)?);
    let s = ro
        .summaries
        .last()
        .ok_or_else(|| CliError::new("no db_bench summary line in the run output"))?;
    let (_, rcpu, rrss) = parse_time(&read(&a.rocksdb_time)?)
        .ok_or_else(|| CliError::new("cannot parse the db_bench time file"))?;
    let hr = ro.histograms.iter().find(|h| h.op == "read");
    let hw = ro.histograms.iter().find(|h| h.op == "write");
    let written_keys = ro
        .tickers
        .get("rocksdb.number.keys.written")
        .copied()
        .unwrap_or(0);
    let user = written_keys * (key_size + value_size);
    let cap = rocksdb_capacity_bytes(&ro);
    let fill_keys = rf
        .tickers
        .get("rocksdb.number.keys.written")
        .copied()
        .unwrap_or(0);
    let fill_cap = rocksdb_capacity_bytes(&rf);
    let r_all_ops = hr.map(|h| h.lat.count).unwrap_or(0) + hw.map(|h| h.lat.count).unwrap_or(0);
    let csv = match &a.rocksdb_csv {
        Some(p) => parse_report_csv(&read(p).unwrap_or_default()),
        None => Vec::new(),
    };
    let rocksdb = Side {
        fill_ops_per_sec: rf
            .summaries
            .first()
            .map(|s| s.ops_per_sec as f64)
            .unwrap_or(0.0),
        fill_capacity_bytes_per_user_byte: (fill_keys > 0)
            .then(|| fill_cap as f64 / (fill_keys * (key_size + value_size)) as f64),
        fill_capacity_bytes_written: fill_cap,
        fill_user_bytes_written: fill_keys * (key_size + value_size),
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
        capacity_bytes_written: cap,
        user_bytes_written: user,
        capacity_bytes_per_user_byte: (user > 0).then(|| cap as f64 / user as f64),
        cpu_secs: rcpu,
        cpu_us_per_op: rcpu * 1e6 / r_all_ops.max(1) as f64,
        peak_rss_bytes: rrss,
        index_or_cache_bytes: a.cache_size,
    };
    Ok(Row {
        label: a.label.clone(),
        threads: cfg["threads"].as_u64().unwrap_or(0),
        num,
        key_size,
        value_size,
        readwritepercent: cfg["readwritepercent"].as_u64().unwrap_or(0),
        fio_iops: a.fio_iops,
        fio_p999_us: a.fio_p999_us,
        masse,
        rocksdb,
    })
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}×", a / b)
    } else {
        "-".to_string()
    }
}

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The Markdown side-by-side table of `rows`.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    // Capacity bytes and user bytes since the fill, per table and engine: the runs of one
    // table follow each other on the same data.
    let mut cum: std::collections::HashMap<(String, u8), (u64, u64)> = Default::default();
    for r in rows {
        let (m, k) = (&r.masse, &r.rocksdb);
        let _ = writeln!(
            s,
            "### {} — {} keys, {} B keys, {} B values, readrandomwriterandom {}/{}, {} threads\n",
            r.label,
            r.num,
            r.key_size,
            r.value_size,
            r.readwritepercent,
            100 - r.readwritepercent,
            r.threads
        );
        let _ = writeln!(
            s,
            "| | masse | RocksDB | masse ÷ RocksDB |\n|---|---|---|---|"
        );
        let mut line = |name: &str, a: String, b: String, q: String| {
            let _ = writeln!(s, "| {name} | {a} | {b} | {q} |");
        };
        line(
            "ops/s",
            format!("{:.0}", m.ops_per_sec),
            format!("{:.0}", k.ops_per_sec),
            ratio(m.ops_per_sec, k.ops_per_sec),
        );
        if let Some(fio) = r.fio_iops.filter(|_| r.readwritepercent > 0) {
            // The bound: every get costs one 4 KiB device read, puts none until
            // segments flush. A get of an absent key costs no read in either engine (index /
            // bloom filter), so the second bound counts only gets that find their key
            // (masse's found share over all threads; both engines read the same keys).
            let rf = r.readwritepercent as f64 / 100.0;
            let bound = fio / rf;
            line(
                &format!(
                    "ops/s ÷ device bound (fio 4 KiB randread QD{} {fio:.0} IOPS ÷ {:.0}% reads = {bound:.0})",
                    r.threads,
                    rf * 100.0
                ),
                format!("{:.2}", m.ops_per_sec / bound),
                format!("{:.2}", k.ops_per_sec / bound),
                String::new(),
            );
            if let Some((f, n)) = m.found.filter(|&(f, n)| f > 0 && n > 0) {
                let ff = f as f64 / n as f64;
                let b2 = fio / (rf * ff);
                line(
                    &format!(
                        "ops/s ÷ device bound counting only gets that find their key ({:.0}% found: {b2:.0})",
                        ff * 100.0
                    ),
                    format!("{:.2}", m.ops_per_sec / b2),
                    format!("{:.2}", k.ops_per_sec / b2),
                    String::new(),
                );
            }
        }
        for (name, a, b) in [
            ("read p50", m.read.p50, k.read.p50),
            ("read p99", m.read.p99, k.read.p99),
            ("read p99.9", m.read.p999, k.read.p999),
            ("read p99.99", m.read.p9999, k.read.p9999),
            ("read max", m.read.max, k.read.max),
            ("write p50", m.write.p50, k.write.p50),
            ("write p99", m.write.p99, k.write.p99),
            ("write p99.9", m.write.p999, k.write.p999),
            ("write p99.99", m.write.p9999, k.write.p9999),
        ] {
            line(name, us(a), us(b), ratio(a, b));
        }
        if let Some(d) = r.fio_p999_us {
            line(
                &format!("device read p99.9 at QD{} (fio), for reference", r.threads),
                us(d),
                us(d),
                String::new(),
            );
        }
        let act = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        line(
            "reads over 1/2/4/8/64 ms, %",
            act(&m.read_act),
            act(&k.read_act),
            String::new(),
        );
        let pct = |x: Option<f64>| x.map(|v| format!("{v:.1}%")).unwrap_or("-".into());
        line(
            "IOPS consistency (all ops, 1-s intervals)",
            pct(m.iops_consistency_all_pct),
            pct(k.iops_consistency_all_pct),
            String::new(),
        );
        line(
            "CPU µs per operation (process user+sys)",
            format!("{:.1}", m.cpu_us_per_op),
            format!("{:.1}", k.cpu_us_per_op),
            ratio(m.cpu_us_per_op, k.cpu_us_per_op),
        );
        let wa = |x: Option<f64>| x.map(|v| format!("{v:.2}")).unwrap_or("-".into());
        line(
            "capacity-device bytes written per user byte (run)",
            wa(m.capacity_bytes_per_user_byte),
            wa(k.capacity_bytes_per_user_byte),
            match (
                m.capacity_bytes_per_user_byte,
                k.capacity_bytes_per_user_byte,
            ) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".into(),
            },
        );
        let mut since_fill = |side: &Side, e: u8| {
            let c = cum.entry((r.label.clone(), e)).or_insert((
                side.fill_capacity_bytes_written,
                side.fill_user_bytes_written,
            ));
            c.0 += side.capacity_bytes_written;
            c.1 += side.user_bytes_written;
            (c.1 > 0 && side.fill_user_bytes_written > 0).then(|| c.0 as f64 / c.1 as f64)
        };
        let (cm, ck) = (since_fill(m, 0), since_fill(k, 1));
        line(
            "capacity-device bytes written per user byte (fill and runs so far)",
            wa(cm),
            wa(ck),
            match (cm, ck) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".into(),
            },
        );
        line(
            "capacity-device bytes written per user byte (fill)",
            wa(m.fill_capacity_bytes_per_user_byte),
            wa(k.fill_capacity_bytes_per_user_byte),
            String::new(),
        );
        line(
            "fill ops/s (1 thread)",
            format!("{:.0}", m.fill_ops_per_sec),
            format!("{:.0}", k.fill_ops_per_sec),
            ratio(m.fill_ops_per_sec, k.fill_ops_per_sec),
        );
        line(
            "DRAM: peak RSS",
            mib(m.peak_rss_bytes),
            mib(k.peak_rss_bytes),
            ratio(m.peak_rss_bytes as f64, k.peak_rss_bytes as f64),
        );
        line(
            "DRAM: index (masse) / block cache (RocksDB)",
            mib(m.index_or_cache_bytes),
            mib(k.index_or_cache_bytes),
            String::new(),
        );
        let found = |f: Option<(u64, u64)>| {
            f.map(|(a, b)| format!("{a} of {b}"))
                .unwrap_or_else(|| "-".into())
        };
        line(
            "found (masse: all threads; RocksDB: thread 0, as db_bench prints)",
            found(m.found),
            found(k.found),
            String::new(),
        );
        s.push('\n');
    }
    s
}

pub fn run(a: &CompareArgs) -> CliResult<i32> {
    match &a.what {
        What::Row(r) => {
            let row = row(r)?;
            let line = serde_json::to_string(&row)
                .map_err(|e| CliError::new(format!("cannot encode the row: {e}")))?;
            println!("{line}");
        }
        What::Table { rows } => {
            let text = read(rows)?;
            let mut v = Vec::new();
            for (i, l) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                v.push(serde_json::from_str::<Row>(l).map_err(|e| {
                    CliError::new(format!("{} line {}: {e}", rows.display(), i + 1))
                })?);
            }
            print!("{}", table(&v));
        }
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
    }

    #[test]
    fn table_shows_ratios_and_write_amplification_since_the_fill() {
        let side = |ops: f64, cap: u64, fill_cap: u64| Side {
            ops_per_sec: ops,
            capacity_bytes_written: cap,
            user_bytes_written: 100,
            capacity_bytes_per_user_byte: Some(cap as f64 / 100.0),
            fill_capacity_bytes_written: fill_cap,
            fill_user_bytes_written: 100,
            found: Some((50, 100)),
            ..Side::default()
        };
        let row = |threads| Row {
            label: "Table 4".into(),
            threads,
            num: 1000,
            key_size: 23,
            value_size: 100,
            readwritepercent: 50,
            fio_iops: Some(1000.0),
            fio_p999_us: Some(2500.0),
            masse: side(3000.0, 150, 150),
            rocksdb: side(1000.0, 700, 300),
        };
        let t = table(&[row(2), row(16)]);
        assert!(t.contains("| ops/s | 3000 | 1000 | 3.00× |"), "{t}");
        // Bound 1000 / 50 % = 2000 ops/s; with half the gets finding their key, 4000.
        assert!(t.contains("= 2000) | 1.50 | 0.50 |"), "{t}");
        assert!(t.contains("found: 4000) | 0.75 | 0.25 |"), "{t}");
        assert!(t.contains("| 2.50 ms | 2.50 ms |"), "{t}");
        // Since the fill: masse (150 + 150) / 200, RocksDB (300 + 700) / 200; then one more run.
        assert!(
            t.contains("(fill and runs so far) | 1.50 | 5.00 | 0.30× |"),
            "{t}"
        );
        assert!(
            t.contains("(fill and runs so far) | 1.50 | 5.67 | 0.26× |"),
            "{t}"
        );
    }

    #[test]
    fn parses_gnu_time_and_report_csv() {
        assert_eq!(
            parse_time("61.02 50.10 9.90 123456\n"),
            Some((61.02, 60.0, 123456 * 1024))
        );
        assert_eq!(parse_time("Command exited with non-zero status 1\n"), None);
        assert_eq!(
            parse_report_csv("secs_elapsed,interval_qps\n1,100\n2,120\n"),
            vec![100, 120]
        );
    }
}
