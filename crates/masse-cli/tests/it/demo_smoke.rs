//! Scenario: `masse demo` on temporary files runs its phases, verifies every
//! value, prints a line per phase and the engine statistics, writes a JSON
//! report, and removes its files.

use std::process::Command;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

#[test]
fn demo_runs_phases_and_prints_stats() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let work = dir.path().join("pool");
    let json = dir.path().join("report.json");
    let o = Command::new(MASSE)
        .args([
            "demo",
            "--num",
            "20000",
            "--threads",
            "2",
            "--phases",
            "fill,read,overwrite,verify",
        ])
        .args(["--fast-size", "128M", "--dir"])
        .arg(&work)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run masse demo");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(o.status.code(), Some(0), "demo failed");

    for phase in ["fill", "read", "overwrite", "verify"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{phase} ")))
            .unwrap_or_else(|| panic!("no line for phase {phase}"));
        for field in [
            "ops", "ops/s", "MB/s", "avg", "p50", "p99", "p99.9", "p99.99", "max",
        ] {
            assert!(line.contains(field), "phase line lacks {field:?}: {line}");
        }
        assert!(!line.contains("WRONG"), "{line}");
    }
    let verify = out
        .lines()
        .find(|l| l.starts_with("verify "))
        .expect("verify line");
    assert!(verify.contains("found 20000/20000"), "{verify}");
    for stat in [
        "host write amplification",
        "bytes/key",
        "write pad",
        "device fast",
        "device capacity",
    ] {
        assert!(out.contains(stat), "stats lack {stat:?}");
    }
    for header in ["command", "machine", "mode", "segment size", "band size"] {
        assert!(out.contains(header), "header lacks {header:?}");
    }

    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("JSON report written"))
            .expect("report is JSON");
    let phases = j["phases"].as_array().expect("phases array");
    assert_eq!(phases.len(), 4);
    assert_eq!(phases[0]["phase"], "fill");
    assert_eq!(phases[0]["ops"], 20000);
    assert_eq!(phases[3]["wrong_values"], 0);
    assert_eq!(j["verified_ok"], true);
    assert!(
        j["stats"]["puts"].as_u64().is_some_and(|p| p >= 40000),
        "fill + overwrite puts"
    );

    // Without --keep the pool files are gone (the fast-tier temp dir too).
    let left: Vec<_> = std::fs::read_dir(&work)
        .expect("--dir still exists")
        .collect();
    assert!(left.is_empty(), "demo left files behind: {left:?}");
    if let Some(f) = j["workload"]["fast_path"].as_str() {
        assert!(
            !std::path::Path::new(f).exists(),
            "fast-tier file {f} left behind"
        );
    }
}

#[test]
fn demo_refuses_bad_arguments() {
    for args in [
        &["demo", "--num", "0"][..],
        &["demo", "--num", "1e6", "--key-size", "4"],
        &["demo", "--utilization", "1.5"],
        &["demo", "--phases", "fill,bogus"],
        &["demo", "--threads", "0"],
        &["demo", "--key-dist", "zipfian", "--zipf-theta=-1"],
        &["demo", "--key-dist", "pareto"],
    ] {
        let o = Command::new(MASSE)
            .args(args)
            .output()
            .expect("run masse demo");
        assert_eq!(o.status.code(), Some(2), "{args:?} should be refused");
        assert!(!o.stderr.is_empty());
    }
}

/// Run `masse demo` with `args` on temporary files (128 MiB fast tier), require
/// success, and return its stdout and JSON report.
fn run_demo(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json = dir.path().join("report.json");
    let o = Command::new(MASSE)
        .arg("demo")
        .args(args)
        .args(["--fast-size", "128M", "--dir"])
        .arg(dir.path().join("pool"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run masse demo");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!(
        "stdout:\n{out}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "demo failed");
    let j = serde_json::from_slice(&std::fs::read(&json).expect("JSON report written"))
        .expect("report is JSON");
    (out, j)
}

/// Zipfian overwrites and reads (--key-dist zipfian): every value still verifies, since
/// each thread draws only over the keys it owns, and the report names the distribution.
/// (The skew itself is checked in keydist.rs's unit tests and in bench_cli.rs.)
#[test]
fn demo_zipfian_overwrites_verify() {
    let (out, j) = run_demo(&[
        "--num",
        "20000",
        "--threads",
        "2",
        "--phases",
        "fill,overwrite,readwrite,verify",
        "--key-dist",
        "zipfian",
    ]);
    assert!(out.contains("zipfian keys, theta 0.99"), "workload line");
    let verify = out
        .lines()
        .find(|l| l.starts_with("verify "))
        .expect("verify line");
    assert!(verify.contains("found 20000/20000"), "{verify}");
    assert_eq!(j["workload"]["key_dist"], "zipfian");
    assert_eq!(j["workload"]["zipf_theta"], 0.99);
    assert_eq!(j["verified_ok"], true);
}

/// Churn at 80 % utilization with --gc-policy cost-benefit: GC passes overlap reads of
/// the readwrite phase, and the report splits that phase's reads into those a GC pass
/// overlapped and the rest (issue 18's "read p99.9 during GC" figure); GC freed bands
/// over the run and every value still verifies.
#[test]
fn demo_churn_reports_reads_during_gc() {
    let (out, j) = run_demo(&[
        "--num",
        "200000",
        "--threads",
        "2",
        "--phases",
        "fill,overwrite,readwrite,verify",
        "--utilization",
        "0.8",
        "--gc-policy",
        "cost-benefit",
    ]);
    assert!(
        out.contains("cost-benefit GC"),
        "workload line names the policy"
    );
    for row in ["reads while GC ran", "reads without GC"] {
        assert!(out.contains(row), "readwrite lacks {row:?}");
    }
    assert_eq!(j["workload"]["gc_policy"], "cost-benefit");
    assert_eq!(j["workload"]["trim"], "auto", "TRIM policy recorded");
    let rw = &j["phases"][2];
    assert_eq!(rw["phase"], "readwrite");
    let during = rw["read_latency_during_gc_us"]["count"]
        .as_u64()
        .unwrap_or(0);
    let without = rw["read_latency_without_gc_us"]["count"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(during + without, rw["reads"].as_u64().unwrap_or(0));
    assert!(during > 0, "GC ran during the readwrite phase");
    assert!(j["stats"]["gc_bands_freed"].as_u64().unwrap_or(0) > 0);
    assert_eq!(j["verified_ok"], true);
}
