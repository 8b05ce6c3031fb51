//! Scenario: a writer process is SIGKILLed at a random moment; every write it
//! reported as acknowledged must survive with its exact value, every delete it
//! reported must hold, and nothing else may appear.
//!
//! The child is `masse ack-writer` (hidden command). It prints `ACK i` after the
//! put (or atomic batch) ending with key i is acknowledged, and `DEL j` after the
//! delete of key j is acknowledged. After the kill, the pool is opened with the
//! library and compared key by key, and by a full scan, with a model built from
//! those lines. Keys whose write may have been in flight at the kill may hold
//! either their old or their new state, nothing else.
//!
//! Set MASSE_TEST_SEED to replay a run (the seed is printed).

use masse::{DeviceSpec, Options, PoolConfig};
use masse_cli::ack::{ack_key, ack_value, ValueSizes};
use masse_cli::rng::SplitMix64;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Absent,
    Value { seed: u64, sizes: ValueSizes },
}

impl Expect {
    fn value(&self, k: u64) -> Option<Vec<u8>> {
        match *self {
            Expect::Absent => None,
            Expect::Value { seed, sizes } => Some(ack_value(k, seed, sizes)),
        }
    }
}

/// What the pool must hold: keys not in the map are absent.
#[derive(Default)]
struct Model {
    m: BTreeMap<u64, Expect>,
}

impl Model {
    fn get(&self, k: u64) -> Expect {
        self.m.get(&k).copied().unwrap_or(Expect::Absent)
    }
    fn set(&mut self, k: u64, e: Expect) {
        self.m.insert(k, e);
    }
}

struct Cycle {
    start: u64,
    count: u64,
    sizes: &'static str,
    batch: u64,
    /// Close the pool cleanly after verifying (false: drop it, a second crash).
    close: bool,
}

struct PoolFiles {
    fast: Option<PathBuf>,
    cap: PathBuf,
}

impl PoolFiles {
    fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(f) = &self.fast {
            a.extend(["--fast".to_string(), f.display().to_string()]);
        }
        a.extend(["--capacity".to_string(), self.cap.display().to_string()]);
        a
    }
    fn config(&self) -> PoolConfig {
        PoolConfig {
            fast: self.fast.as_ref().map(DeviceSpec::path),
            capacity: vec![DeviceSpec::path(&self.cap)],
            ..Default::default()
        }
    }
}

fn test_seed() -> u64 {
    match std::env::var("MASSE_TEST_SEED") {
        Ok(s) => s.parse().expect("MASSE_TEST_SEED must be a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

fn run_masse(args: &[String]) -> std::process::Output {
    let o = Command::new(MASSE).args(args).output().expect("run masse");
    eprintln!(
        "$ masse {}\n  exit {:?}\n{}{}",
        args.join(" "),
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Run one writer, kill it, and return its stdout lines.
fn write_and_kill(
    pool: &PoolFiles,
    c: &Cycle,
    value_seed: u64,
    rng: &mut SplitMix64,
) -> Vec<String> {
    let mut args = vec!["ack-writer".to_string()];
    args.extend(pool.args());
    args.extend([
        "--start".into(),
        c.start.to_string(),
        "--count".into(),
        c.count.to_string(),
        "--value-size".into(),
        c.sizes.to_string(),
        "--seed".into(),
        value_seed.to_string(),
        "--batch".into(),
        c.batch.to_string(),
    ]);
    let mut child = Command::new(MASSE)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn masse ack-writer");
    let stdout = child.stdout.take().expect("child stdout");
    let mut stderr = child.stderr.take().expect("child stderr");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            lines.push(line);
        }
        lines
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    // Start the clock once the pool is open, so the writer really writes.
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(l) if l == "OPEN" => {}
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ack-writer did not start ({other:?}); stderr: {}",
                err_reader.join().unwrap_or_default()
            );
        }
    }
    let delay = 200 + rng.below(601);
    std::thread::sleep(Duration::from_millis(delay));
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) of our own child, which has not been reaped yet.
    let r = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(r, 0, "kill failed: {}", std::io::Error::last_os_error());
    let status = child.wait().expect("wait for the killed child");
    let lines = reader.join().expect("stdout reader");
    let err = err_reader.join().unwrap_or_default();
    eprintln!(
        "cycle start {}: killed after {delay} ms ({status}); {} lines, last {:?}; stderr: {:?}",
        c.start,
        lines.len(),
        lines.last(),
        err.trim()
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the writer ended by itself: {status}; stderr: {err}"
    );
    assert!(!err.contains("masse: error"), "the writer failed: {err}");
    lines
}

/// Fold the writer's report into the model; returns the keys whose state is uncertain
/// (a write in flight at the kill) as (key, old state, new state).
fn apply(
    model: &mut Model,
    lines: &[String],
    c: &Cycle,
    value_seed: u64,
) -> Vec<(u64, Expect, Expect)> {
    let sizes: ValueSizes = c.sizes.parse().expect("value sizes");
    let new = Expect::Value {
        seed: value_seed,
        sizes,
    };
    let end = c.start + c.count;
    let mut last_ack: Option<u64> = None;
    let mut dels = Vec::new();
    let mut done = false;
    for l in lines {
        let mut it = l.split_whitespace();
        match (it.next(), it.next().map(str::parse::<u64>)) {
            (Some("OPEN"), None) => {}
            (Some("DONE"), None) => done = true,
            (Some("ACK"), Some(Ok(i))) => {
                let expect_next = match last_ack {
                    Some(a) => (a + c.batch).min(end - 1),
                    None => (c.start + c.batch - 1).min(end - 1),
                };
                assert_eq!(
                    i, expect_next,
                    "ACKs must come in order, batch by batch: {l:?}"
                );
                last_ack = Some(i);
            }
            (Some("DEL"), Some(Ok(j))) => dels.push(j),
            _ => panic!("unexpected line from ack-writer: {l:?}"),
        }
    }
    let acked_end = last_ack.map_or(c.start, |a| a + 1);
    for k in c.start..acked_end {
        model.set(k, new);
    }
    let planned: Vec<u64> = (c.start..acked_end)
        .filter(|j| j % 10 == 0 && *j >= 7)
        .map(|j| j - 7)
        .collect();
    assert!(
        dels.len() <= planned.len(),
        "more DELs than acknowledged puts allow"
    );
    assert_eq!(
        dels[..],
        planned[..dels.len()],
        "DELs must follow the puts in order"
    );
    for &t in &dels {
        model.set(t, Expect::Absent);
    }
    let mut uncertain = Vec::new();
    if !done {
        if dels.len() < planned.len() {
            // This delete may have been in flight; later ones were never issued.
            let t = planned[dels.len()];
            uncertain.push((t, model.get(t), Expect::Absent));
        } else {
            for k in acked_end..(acked_end + c.batch).min(end) {
                uncertain.push((k, model.get(k), new));
            }
        }
    }
    eprintln!(
        "cycle start {}: {} keys acknowledged, {} deletes acknowledged, {} uncertain{}",
        c.start,
        acked_end - c.start,
        dels.len(),
        uncertain.len(),
        if done { ", writer finished" } else { "" }
    );
    assert!(
        acked_end > c.start,
        "the writer acknowledged nothing before the kill; the test proved nothing"
    );
    uncertain
}

/// Run `f` on a thread and fail the test if it takes longer than `secs` (a hang
/// in the engine should fail the test, not stall the suite).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {secs} s: the engine hangs"),
    }
}

fn key_number(k: &[u8]) -> Option<u64> {
    std::str::from_utf8(k.strip_prefix(b"ack")?)
        .ok()?
        .parse()
        .ok()
}

/// Open the pool with the library and compare it with the model, resolving uncertain keys.
fn verify(pool: &PoolFiles, model: &mut Model, uncertain: &[(u64, Expect, Expect)], close: bool) {
    let cfg = pool.config();
    let db = within(120, "opening (recovering) the pool", move || {
        masse::Db::open(&cfg, Options::default())
    })
    .expect("open the pool after the kill");
    let st = db.stats();
    eprintln!(
        "recovered via {} in {} µs ({} segments, {} pad records replayed), {} checksum failures",
        st.recovery_source,
        st.recovery_us,
        st.recovery_segments_replayed,
        st.recovery_pad_records,
        st.corruptions
    );
    let mut bad = Vec::new();
    let unc: HashSet<u64> = uncertain.iter().map(|u| u.0).collect();
    for (&k, e) in &model.m {
        if unc.contains(&k) {
            continue;
        }
        let got = db.get(&ack_key(k)).expect("get");
        let want = e.value(k);
        if got != want {
            bad.push(format!(
                "key {k}: expected {}, found {}",
                want.map_or("absent".to_string(), |v| format!("{} bytes", v.len())),
                got.as_ref().map_or("nothing".to_string(), |v| format!(
                    "{} other bytes",
                    v.len()
                ))
            ));
        }
    }
    for &(k, old, new) in uncertain {
        let got = db.get(&ack_key(k)).expect("get");
        if got == new.value(k) {
            model.set(k, new);
        } else if got == old.value(k) {
            model.set(k, old);
        } else {
            bad.push(format!(
                "key {k} (in flight at the kill): neither its old nor its new state"
            ));
        }
    }
    // A full scan: exactly the keys the model says, with their values.
    let mut seen = 0u64;
    for item in db.iter() {
        let (k, v) = item.expect("iterate");
        let Some(n) = key_number(&k) else {
            bad.push(format!("unexpected key {:?}", String::from_utf8_lossy(&k)));
            continue;
        };
        seen += 1;
        if model.get(n).value(n).as_deref() != Some(&v[..]) {
            bad.push(format!(
                "scan: key {n} holds {} bytes the model does not expect",
                v.len()
            ));
        }
    }
    let present = model
        .m
        .iter()
        .filter(|(_, e)| **e != Expect::Absent)
        .count() as u64;
    if seen != present {
        bad.push(format!("scan found {seen} keys, the model has {present}"));
    }
    assert!(
        bad.is_empty(),
        "{} problems after recovery, first ones:\n{}",
        bad.len(),
        bad[..bad.len().min(20)].join("\n")
    );
    eprintln!("verified {} keys ({present} present)", model.m.len());
    if close {
        within(120, "closing the pool", move || db.close()).expect("close");
    } else {
        drop(db); // a crash of the verifying process too
    }
}

fn fast_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("masse-sigkill-")
        .tempdir_in(base)
        .expect("temporary directory")
}

fn scenario(tiered: bool, cycles: &[Cycle]) {
    let seed = test_seed();
    eprintln!(
        "sigkill_recovery ({}): seed {seed} (set MASSE_TEST_SEED={seed} to replay)",
        if tiered { "tiered" } else { "capacity-only" }
    );
    let mut rng = SplitMix64::new(seed);
    let fdir = fast_dir();
    let cdir = tempfile::tempdir().expect("temporary directory");
    let pool = PoolFiles {
        fast: tiered.then(|| fdir.path().join("fast")),
        cap: cdir.path().join("cap"),
    };
    let mut args = vec!["create".to_string()];
    args.extend(pool.args());
    args.extend(["--capacity-size".into(), "1G".into()]);
    if tiered {
        args.extend(["--fast-size".into(), "256M".into()]);
    } else {
        args.extend(["--mode".into(), "capacity-only".into()]);
    }
    assert_eq!(run_masse(&args).status.code(), Some(0), "create failed");

    let mut model = Model::default();
    for c in cycles {
        let value_seed = rng.next_u64() >> 1;
        let lines = write_and_kill(&pool, c, value_seed, &mut rng);
        let uncertain = apply(&mut model, &lines, c, value_seed);
        verify(&pool, &mut model, &uncertain, c.close);
    }
    let mut args = vec!["check".to_string()];
    args.extend(pool.args());
    let o = run_masse(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "masse check failed after the crashes"
    );
}

#[test]
fn sigkill_tiered_three_cycles() {
    scenario(
        true,
        &[
            Cycle {
                start: 0,
                count: 100_000,
                sizes: "100..4000",
                batch: 1,
                close: true,
            },
            Cycle {
                start: 1_000_000,
                count: 100_000,
                sizes: "1000..4000",
                batch: 8,
                close: false,
            },
            Cycle {
                start: 2_000_000,
                count: 100_000,
                sizes: "100..400",
                batch: 1,
                close: true,
            },
        ],
    );
}

#[test]
fn sigkill_capacity_only() {
    scenario(
        false,
        &[Cycle {
            start: 0,
            count: 100_000,
            sizes: "100..4000",
            batch: 3,
            close: true,
        }],
    );
}
