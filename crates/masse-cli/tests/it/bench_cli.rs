//! Scenario: `masse bench` runs every db_bench benchmark name on a small pool, prints
//! db_bench's summary line for each (parsable by db_bench's parsers), finds exactly the
//! keys db_bench's generator would, writes a complete JSON report and the plots.

use masse_cli::dbbench::{fmt_key, Mt64, Seeds, Summary};
use std::collections::HashSet;
use std::process::Command;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// A directory in memory when there is one: the pool is then in-memory in effect.
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}

#[test]
fn every_benchmark_runs_and_reports() {
    let dir = scratch();
    let rep = dir.path().join("report");
    let (num, threads, seed) = (20_000u64, 2usize, 7u64);
    let names = [
        "fillrandom",
        "readrandom",
        "readrandomwriterandom",
        "overwrite",
        "readwhilewriting",
        "deleterandom",
        "fillseq",
    ];
    let o = Command::new(MASSE)
        .arg("bench")
        .arg(format!("--benchmarks={}", names.join(",")))
        .arg(format!("--num={num}"))
        .arg(format!("--threads={threads}"))
        .arg(format!("--seed={seed}"))
        .args(["--key_size=16", "--value_size=100", "--readwritepercent=50"])
        .args(["--fast-size=64M", "--histogram"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--report_dir")
        .arg(&rep)
        .output()
        .expect("run masse bench");
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!(
        "stdout:\n{out}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "masse bench failed");

    // One db_bench summary line per benchmark, in order, each op count as db_bench's.
    let sums: Vec<Summary> = out.lines().filter_map(Summary::parse).collect();
    let got: Vec<&str> = sums.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(got, names);
    for s in &sums {
        assert_eq!(s.operations, num * threads as u64, "{}", s.line());
        assert!(s.ops_per_sec > 0 && s.micros_per_op > 0.0, "{}", s.line());
    }
    assert!(out.contains("Microseconds per read:"), "--histogram output");

    // readrandom after fillrandom finds exactly the keys db_bench's generator wrote:
    // threads seeded seed+1, seed+2 (fill) then seed+3, seed+4 (read); the line shows
    // thread 0's count, as db_bench's does.
    let mut seeds = Seeds::new(seed);
    let mut live = HashSet::new();
    let mut key = [0u8; 16];
    for s in seeds.next_threads(threads) {
        let mut r = Mt64::new(s);
        for _ in 0..num {
            fmt_key(&mut key, r.next_key(num));
            live.insert(key);
        }
    }
    let reader0 = seeds.next_threads(threads)[0];
    let mut r = Mt64::new(reader0);
    let found = (0..num)
        .filter(|_| {
            fmt_key(&mut key, r.next_key(num));
            live.contains(&key)
        })
        .count() as u64;
    assert_eq!(sums[1].found(), Some((found, num)), "{}", sums[1].line());
    // Two threads of 20000 uniform draws over 20000 keys leave 1 - e^-2 of them written.
    assert!((found as f64 / num as f64 - 0.8647).abs() < 0.02, "{found}");

    // The JSON report has every figure of every benchmark.
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rep.join("report.json")).expect("report.json"))
            .expect("report is JSON");
    let benches = j["benchmarks"].as_array().expect("benchmarks");
    assert_eq!(benches.len(), names.len());
    let rw = &benches[2];
    assert_eq!(rw["name"], "readrandomwriterandom");
    assert_eq!(
        rw["reads"].as_u64().unwrap() + rw["writes"].as_u64().unwrap(),
        num * threads as u64
    );
    // In every 100 operations, 50 reads then 50 writes: exactly half of each.
    assert_eq!(rw["reads"], rw["writes"]);
    for kind in ["read", "write"] {
        let l = &rw["latency_us"][kind];
        for f in [
            "count", "avg", "p50", "p99", "p999", "p9999", "p99999", "max",
        ] {
            assert!(l[f].is_number(), "latency {kind}.{f}");
        }
        assert!(
            l["p50"].as_f64() <= l["p99"].as_f64() && l["p99999"].as_f64() <= l["max"].as_f64()
        );
        let act: Vec<u64> = rw["act_shares"][kind]
            .as_array()
            .expect("ACT shares")
            .iter()
            .map(|a| a["over_ms"].as_u64().unwrap())
            .collect();
        assert_eq!(act, vec![1, 2, 4, 8, 64]);
        assert!(rw["ops_per_interval"][kind].is_array());
    }
    let iv = rw["intervals"].as_array().expect("intervals");
    assert!(!iv.is_empty());
    assert!(iv[0]["ops_per_sec"]["all"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    assert_eq!(
        iv[0]["act_percent"]["read"].as_array().map(|v| v.len()),
        Some(5)
    );
    for f in [
        "capacity_bytes_written",
        "user_bytes_written",
        "fast_bytes_written",
        "index_bytes",
        "gc_bands_freed",
    ] {
        assert!(rw["engine"][f].is_u64(), "engine.{f}");
    }
    assert!(benches[0]["engine"]["capacity_bytes_per_user_byte"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    assert!(rw["cpu_us_per_op"].as_f64().is_some_and(|x| x > 0.0));
    assert_eq!(benches[5]["deletes"], num * threads as u64);
    assert!(j["machine"]["nproc"].is_u64() && j["command"].is_string());

    // Three plots per benchmark.
    for n in names {
        for p in ["latency-cdf", "ops-over-time", "latency-vs-throughput"] {
            let f = rep.join(format!("{n}-{p}.svg"));
            let svg = std::fs::read_to_string(&f).unwrap_or_else(|_| panic!("{f:?}"));
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        }
    }
}

#[test]
fn db_bench_flag_semantics() {
    let dir = scratch();
    let run = |args: &[&str]| {
        Command::new(MASSE)
            .arg("bench")
            .args(args)
            .args(["--fast-size=64M", "--dir"])
            .arg(dir.path())
            .output()
            .expect("run masse bench")
    };
    // --reads/--writes are per thread; RocksDB-only tuning flags are accepted.
    let o = run(&[
        "--benchmarks=fillrandom,readrandom",
        "--num=5000",
        "--threads=2",
        "--writes=300",
        "--reads=200",
        "--seed=3",
        "--bloom_bits=10",
        "--compression_type=none",
        "--use_direct_reads=true",
        "--histogram=0",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let sums: Vec<Summary> = out.lines().filter_map(Summary::parse).collect();
    assert_eq!(sums[0].operations, 600);
    assert_eq!(sums[1].operations, 400);
    assert!(!out.contains("Microseconds per"));
    // --duration bounds the random benchmarks.
    let t = std::time::Instant::now();
    let o = run(&[
        "--benchmarks=readrandom",
        "--num=1000",
        "--duration=1",
        "--seed=3",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(t.elapsed().as_secs_f64() < 20.0);
    let out = String::from_utf8_lossy(&o.stdout);
    let s = out.lines().find_map(Summary::parse).expect("summary");
    assert!(s.seconds >= 1.0 && s.seconds < 3.0, "{}", s.line());
    assert_eq!(
        s.found().map(|f| f.0),
        Some(0),
        "an empty pool finds nothing"
    );
    // Unknown names and temporary pools with --use_existing_db are refused clearly.
    let o = run(&["--benchmarks=fillrandom,readfoo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown benchmark \"readfoo\""));
    let o = run(&["--benchmarks=readrandom", "--use_existing_db"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--use_existing_db"));
}

/// multireadrandom draws its keys as db_bench's MultiReadRandom does (per batch one draw
/// for the database, then one per key, key = draw % num), reads each batch with one
/// `Db::get_many`, and records one latency sample per batch, as db_bench does.
#[test]
fn multireadrandom_reads_db_benchs_keys_in_batches() {
    let dir = scratch();
    let (num, threads, seed, batch) = (20_000u64, 2usize, 1u64, 8u64);
    let json = dir.path().join("report.json");
    let o = Command::new(MASSE)
        .arg("bench")
        .args(["--benchmarks=fillrandom,multireadrandom", "--key_size=16"])
        .arg(format!("--num={num}"))
        .arg(format!("--threads={threads}"))
        .arg(format!("--seed={seed}"))
        .arg(format!("--batch_size={batch}"))
        .args([
            "--fast-size=64M",
            "--multiread_batched=true",
            "--async_io=false",
        ])
        .arg("--dir")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run masse bench");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut seeds = Seeds::new(seed);
    let mut live = HashSet::new();
    let mut key = [0u8; 16];
    for s in seeds.next_threads(threads) {
        let mut r = Mt64::new(s);
        for _ in 0..num {
            fmt_key(&mut key, r.next_key(num));
            live.insert(key);
        }
    }
    // Thread 0 of the reads: num / batch batches of (one database draw, batch key draws).
    let mut r = Mt64::new(seeds.next_threads(threads)[0]);
    let mut found = 0u64;
    for _ in 0..num / batch {
        let _db = r.next_u64();
        for _ in 0..batch {
            fmt_key(&mut key, r.next_u64() % num);
            found += u64::from(live.contains(&key));
        }
    }
    let sums: Vec<Summary> = out.lines().filter_map(Summary::parse).collect();
    assert_eq!(sums[1].name, "multireadrandom");
    assert_eq!(sums[1].operations, num * threads as u64);
    assert_eq!(sums[1].found(), Some((found, num)), "{}", sums[1].line());
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("JSON");
    let m = &j["benchmarks"][1];
    assert_eq!(m["reads"], num * threads as u64);
    // One latency sample per batch; the per-interval series counts keys.
    assert_eq!(
        m["latency_us"]["read"]["count"],
        num * threads as u64 / batch
    );
    let per: u64 = m["ops_per_interval"]["read"]
        .as_array()
        .expect("series")
        .iter()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(per, num * threads as u64);
    assert_eq!(j["config"]["batch_size"], batch);
}

/// `--key_dist=zipfian`: the fill stays db_bench's uniform draws, the reads after it draw
/// YCSB-skewed keys — exactly the keys `Zipfian` predicts from the same generator, so
/// thread 0's "found" count matches a replay, and it differs from the uniform count.
#[test]
fn zipfian_reads_draw_the_predicted_skewed_keys() {
    use masse_cli::keydist::Zipfian;
    let dir = scratch();
    let json = dir.path().join("report.json");
    let (num, seed) = (20_000u64, 11u64);
    let o = Command::new(MASSE)
        .args(["bench", "--benchmarks=fillrandom,readrandom", "--threads=1"])
        .arg(format!("--num={num}"))
        .arg(format!("--seed={seed}"))
        .args(["--key_dist=zipfian", "--zipf_theta=0.99", "--fast-size=64M"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run masse bench");
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!(
        "stdout:\n{out}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "masse bench failed");
    assert!(
        out.contains("--key_dist=zipfian --zipf_theta=0.99"),
        "workload line"
    );

    let mut seeds = Seeds::new(seed);
    let mut live = HashSet::new();
    let mut key = [0u8; 16];
    let mut r = Mt64::new(seeds.next_threads(1)[0]);
    for _ in 0..num {
        fmt_key(&mut key, r.next_key(num));
        live.insert(key);
    }
    let g = Zipfian::new(num, 0.99).expect("zipfian");
    let mut r = Mt64::new(seeds.next_threads(1)[0]);
    let (mut found, mut distinct) = (0u64, HashSet::new());
    for _ in 0..num {
        let _db = r.next_u64();
        fmt_key(&mut key, g.next(&mut r));
        distinct.insert(key);
        found += u64::from(live.contains(&key));
    }
    let sums: Vec<Summary> = out.lines().filter_map(Summary::parse).collect();
    assert_eq!(sums[1].found(), Some((found, num)), "{}", sums[1].line());
    // Skewed: 20000 zipfian draws touch far fewer distinct keys than uniform's ~63 %.
    assert!(
        distinct.len() < num as usize / 2,
        "{} distinct",
        distinct.len()
    );
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("report is JSON");
    assert_eq!(j["config"]["key_dist"], "zipfian");

    // A θ Zipf cannot take is refused before any pool file is made.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let o = Command::new(MASSE)
        .args([
            "bench",
            "--key_dist=zipfian",
            "--zipf_theta=-1",
            "--num=1000",
        ])
        .arg("--dir")
        .arg(&empty)
        .output()
        .expect("run masse bench");
    assert_eq!(o.status.code(), Some(2), "bad theta accepted");
    assert!(String::from_utf8_lossy(&o.stderr).contains("zipf_theta"));
    assert_eq!(std::fs::read_dir(&empty).expect("dir").count(), 0);
}
