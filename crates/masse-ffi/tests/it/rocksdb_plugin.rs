//! RocksDB's own behaviour on the masse FileSystem plugin (plugins/rocksdb/):
//! the release db_bench and ldb built with the plugin, on a temporary pool.
//!
//! The binaries come from `MASSE_ROCKSDB_DB_BENCH` (a db_bench with the plugin;
//! `.ci/run` builds it and sets this), or else from the machine's cached RocksDB
//! build through `plugins/rocksdb/build.sh --no-full-build` (relinks the plugin
//! with this build's libmasse_ffi.a in under a minute). Without either, the tests
//! skip with a message, and fail under `MASSE_REQUIRE_TOOLS=1`. How CI covers
//! the plugin: docs/rocksdb-plugin.md.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// db_bench with the plugin (ldb is beside it), or None: skip.
fn db_bench() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(find_db_bench).as_deref()
}

fn find_db_bench() -> Option<PathBuf> {
    let require = std::env::var_os("MASSE_REQUIRE_TOOLS").is_some();
    if let Some(p) = std::env::var_os("MASSE_ROCKSDB_DB_BENCH") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new(repo().join("plugins/rocksdb/build.sh"))
        .args(["--no-full-build", "--no-cargo", "--jobs", "1"])
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            Some(PathBuf::from(text.lines().last().unwrap_or("").trim()))
        }
        other => {
            let why = format!("no RocksDB build with the masse plugin ({other:?}); plugins/rocksdb/build.sh makes one");
            assert!(!require, "{why} (MASSE_REQUIRE_TOOLS is set)");
            eprintln!("skipping: {why}");
            None
        }
    }
}

fn ldb(bench: &Path) -> PathBuf {
    bench.with_file_name("ldb")
}

/// A temporary pool: its URI and the directories holding its device files.
struct Pool {
    uri: String,
    _fast: tempfile::TempDir,
    _cap: tempfile::TempDir,
}

fn pool() -> Pool {
    let shm = Path::new("/dev/shm");
    let fast_root = if shm.is_dir() { shm } else { Path::new("/tmp") };
    let fast = tempfile::Builder::new()
        .prefix("masse-rdb-f")
        .tempdir_in(fast_root)
        .unwrap();
    let cap = tempfile::Builder::new()
        .prefix("masse-rdb-c")
        .tempdir_in("/var/tmp")
        .unwrap();
    let uri = format!(
        "masse://fast={}/f,capacity={}/c,fast_size=128M,capacity_size=512M,create=if_missing",
        fast.path().display(),
        cap.path().display()
    );
    Pool {
        uri,
        _fast: fast,
        _cap: cap,
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// "(63659 of 100000 found)" on a benchmark's result line.
fn found(out: &str, bench: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{bench} ")))
        .unwrap_or_else(|| panic!("no {bench} line in:\n{out}"));
    let i = line.rfind('(').expect("found count");
    line[i..].to_string()
}

const WORKLOAD: &[&str] = &[
    "--benchmarks=fillrandom,readrandom,multireadrandom,verifychecksum",
    "--num=20000",
    "--seed=1234",
    "--threads=1",
    "--compression_type=none",
    "--write_buffer_size=262144",
    "--target_file_size_base=262144",
    "--cache_size=0",
];

/// The same deterministic fillrandom/readrandom/MultiGet/verify on a local
/// directory and on the plugin: same hits, same database (ldb scan).
#[test]
fn db_bench_fill_read_verify_matches_local_fs() {
    let Some(bench) = db_bench() else { return };
    let local = tempfile::Builder::new()
        .prefix("masse-rdb-l")
        .tempdir_in("/var/tmp")
        .unwrap();
    let ldir = local.path().join("db");
    let want = run(Command::new(bench)
        .args(WORKLOAD)
        .arg(format!("--db={}", ldir.display())));
    let p = pool();
    let got = run(Command::new(bench)
        .args(WORKLOAD)
        .args(["--db=/db", "--use_direct_reads=true"])
        .arg(format!("--fs_uri={}", p.uri)));
    assert!(got.contains("verifychecksum :"), "{got}");
    for b in ["readrandom", "multireadrandom"] {
        assert_eq!(found(&got, b), found(&want, b), "{b} on masse vs local");
    }
    let scan = |extra: &[String]| run(Command::new(ldb(bench)).args(extra).args(["scan", "--hex"]));
    let a = scan(&[format!("--db={}", ldir.display())]);
    let b = scan(&["--db=/db".into(), format!("--fs_uri={}", p.uri)]);
    assert!(a.lines().count() > 10_000, "local scan too short");
    assert!(
        a == b,
        "ldb scan differs: masse has {} lines, local {}",
        b.lines().count(),
        a.lines().count()
    );
}

/// The last "... finished N ops" db_bench printed (a lower bound on the
/// operations that had returned).
fn last_progress(err: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(err);
    text.split(['\r', '\n'])
        .filter_map(|l| {
            l.trim()
                .strip_prefix("... finished ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// SIGKILL db_bench in the middle of a synced fillseq, reopen: every key a
/// returned Put wrote is there, and the database verifies and takes writes.
#[test]
fn crash_mid_sync_write_keeps_acknowledged_keys() {
    let Some(bench) = db_bench() else { return };
    let p = pool();
    let uri = format!("--fs_uri={}", p.uri);
    let mut child = Command::new(bench)
        .args([
            "--benchmarks=fillseq",
            "--sync=1",
            "--num=100000000",
            "--db=/db",
        ])
        .args(["--compression_type=none", "--write_buffer_size=1048576"])
        .arg(&uri)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn db_bench");
    let err = Arc::new(Mutex::new(Vec::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = err.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    // Past several memtable flushes (SST files, not just the WAL), or 20 s.
    let t0 = Instant::now();
    while last_progress(&err.lock().unwrap()) < 30_000 && t0.elapsed() < Duration::from_secs(20) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "db_bench ended early: {}",
            String::from_utf8_lossy(&err.lock().unwrap())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let acked = last_progress(&err.lock().unwrap());
    child.kill().expect("SIGKILL db_bench");
    child.wait().unwrap();
    reader.join().unwrap();
    assert!(acked >= 1000, "too few writes before the kill: {acked}");

    let out = run(Command::new(ldb(bench)).args(["--db=/db", &uri, "scan", "--hex", "--no_value"]));
    // fillseq keys: the key number as 8 big-endian bytes, padded with '0's.
    let keys: BTreeSet<u64> = out
        .lines()
        .filter_map(|l| u64::from_str_radix(l.trim().strip_prefix("0x")?.get(..16)?, 16).ok())
        .collect();
    let missing: Vec<u64> = (0..acked).filter(|k| !keys.contains(k)).take(5).collect();
    eprintln!(
        "crash test: {acked} writes acknowledged, {} keys recovered",
        keys.len()
    );
    assert!(
        missing.is_empty(),
        "{acked} acknowledged, {} recovered; missing e.g. {missing:?}",
        keys.len()
    );
    let again = run(Command::new(bench)
        .args([
            "--benchmarks=verifychecksum,fillrandom",
            "--use_existing_db=true",
            "--num=1000",
        ])
        .args(["--db=/db", "--compression_type=none", &uri]));
    assert!(again.contains("fillrandom   :"), "{again}");
}
