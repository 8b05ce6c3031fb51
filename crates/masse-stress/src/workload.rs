//! Random operations against a pool with an expected-state oracle, and the
//! verification that a reopened pool matches the oracle.
//!
//! Every key is owned by one worker thread (key `i` by thread `i % threads`),
//! so a thread knows the exact state of its keys: a get of an own key must
//! return exactly the last acknowledged version. Before a write, the thread
//! records it as in flight in the oracle; after the acknowledgement, as acked.
//! A process killed in between leaves the write "in flight": after reopening,
//! the key must hold either the acked or the in-flight version, wholly.

use crate::gen::{is_some_version, key, parse_key, steady, value};
use crate::oracle::{Oracle, ACT_CKPT, ACT_GC, NONE};
use crate::watchdog::{HangHook, HangReport, Watch};
use masse::{Db, Error, WriteBatch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// A small deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c908)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// What a run does.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Worker threads.
    pub threads: usize,
    /// Stop after this long.
    pub duration: Duration,
    /// Stop after this many operations in total (0: no limit).
    pub max_ops: u64,
    /// Seed of the operation mix.
    pub seed: u64,
    /// Write an index checkpoint this often (zero: never).
    pub checkpoint_every: Duration,
    /// Percent of operations that are writes (put, delete, batch).
    pub write_percent: u64,
    /// Hot keys per worker: one put in four goes to one of the worker's first
    /// `hot_keys` [`steady`](crate::gen::steady) keys, so the same key is
    /// written again at the same length while its record is still in DRAM
    /// and the engine absorbs the overwrite (design.md §4.10). 0: none.
    pub hot_keys: u64,
    /// In fault-injection runs, I/O and corruption errors end a worker quietly
    /// instead of failing the run.
    pub tolerate_errors: bool,
    /// An operation that has not finished after this long is a hang: the run
    /// fails with the engine's write-path state and a thread dump (zero: no
    /// watchdog). See [`crate::watchdog`].
    pub hang_timeout: Duration,
    /// Called on a hang; without it the report is printed and the process
    /// exits with [`crate::watchdog::EXIT_HANG`].
    pub on_hang: Option<HangHook>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            threads: 4,
            duration: Duration::from_secs(10),
            max_ops: 0,
            seed: 1,
            checkpoint_every: Duration::from_millis(100),
            write_percent: 60,
            hot_keys: 4,
            tolerate_errors: false,
            hang_timeout: Duration::from_secs(60),
            on_hang: None,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunReport {
    /// Acknowledged puts.
    pub puts: u64,
    /// Acknowledged deletes.
    pub deletes: u64,
    /// Acknowledged batches, and the records in them.
    pub batches: u64,
    /// Records in acknowledged batches.
    pub batch_records: u64,
    /// Gets checked exactly against the oracle.
    pub gets: u64,
    /// Full iterations checked.
    pub iterations: u64,
    /// Writes refused with `NoSpace` or `TooLarge` (not applied; allowed).
    pub no_space: u64,
    /// Errors that ended a worker (fault runs only).
    pub errors: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
}

/// A broken guarantee, or an unexpected engine error.
#[derive(Debug)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Default)]
struct Counts {
    puts: AtomicU64,
    deletes: AtomicU64,
    batches: AtomicU64,
    batch_records: AtomicU64,
    gets: AtomicU64,
    iterations: AtomicU64,
    no_space: AtomicU64,
    errors: AtomicU64,
    checkpoints: AtomicU64,
}

/// Runs random operations until the duration or op budget is spent, `stop` is
/// set, or (strict mode) a guarantee is broken.
pub fn run(
    db: &Db,
    o: &Oracle,
    cfg: &RunConfig,
    stop: &AtomicBool,
) -> Result<RunReport, Violation> {
    let counts = Counts::default();
    let ops = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let deadline = Instant::now() + cfg.duration;
    // One slot per worker, and the last one for the checkpoint thread.
    let watch = Watch::new(cfg.threads.max(1) + 1);
    let hang: std::sync::Mutex<Option<HangReport>> = std::sync::Mutex::new(None);
    let result: Result<(), Violation> = std::thread::scope(|s| {
        if !cfg.hang_timeout.is_zero() {
            s.spawn(|| watchdog(db, &watch, cfg, &done, &hang));
        }
        // Mirror what the engine is doing into the oracle header, so a parent that
        // kills this process can tell what the kill interrupted.
        s.spawn(|| mirror(db, o, &done));
        if !cfg.checkpoint_every.is_zero() {
            s.spawn(|| {
                while !done.load(SeqCst) {
                    std::thread::sleep(cfg.checkpoint_every);
                    if done.load(SeqCst) {
                        break;
                    }
                    let slot = cfg.threads.max(1);
                    watch.begin(slot, || "checkpoint".into());
                    if db.checkpoint().is_ok() {
                        counts.checkpoints.fetch_add(1, SeqCst);
                    }
                    watch.end(slot);
                }
            });
        }
        let workers: Vec<_> = (0..cfg.threads.max(1))
            .map(|t| {
                let (counts, ops, done, stop, watch) = (&counts, &ops, &done, stop, &watch);
                // Named, so a hang report's thread dump tells the workers apart.
                let b = std::thread::Builder::new().name(format!("stress-worker-{t}"));
                b.spawn_scoped(s, move || {
                    let sh = Shared {
                        counts,
                        ops,
                        stop,
                        done,
                        watch,
                    };
                    let r = worker(db, o, cfg, t, &sh, deadline);
                    if r.is_err() {
                        done.store(true, SeqCst);
                    }
                    r
                })
            })
            .collect();
        let workers: Vec<_> = match workers.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(w) => w,
            Err(e) => {
                done.store(true, SeqCst);
                return Err(Violation(format!("cannot start a worker thread: {e}")));
            }
        };
        let mut res = Ok(());
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(v)) => {
                    if res.is_ok() {
                        res = Err(v);
                    }
                }
                Err(_) => res = Err(Violation("a worker thread panicked".into())),
            }
        }
        done.store(true, SeqCst);
        res
    });
    if let Some(h) = hang.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(Violation(h.to_string()));
    }
    result?;
    Ok(RunReport {
        puts: counts.puts.load(SeqCst),
        deletes: counts.deletes.load(SeqCst),
        batches: counts.batches.load(SeqCst),
        batch_records: counts.batch_records.load(SeqCst),
        gets: counts.gets.load(SeqCst),
        iterations: counts.iterations.load(SeqCst),
        no_space: counts.no_space.load(SeqCst),
        errors: counts.errors.load(SeqCst),
        checkpoints: counts.checkpoints.load(SeqCst),
    })
}

/// Mirrors what the engine is doing into the oracle header until the run
/// ends: the activity bits every millisecond, and the overwrites absorbed in
/// DRAM every 100 ms (an engine counter of this open, added as it grows).
fn mirror(db: &Db, o: &Oracle, done: &AtomicBool) {
    let mut absorbed = db.stats().absorbed_writes;
    let mut tick = 0u32;
    while !done.load(SeqCst) {
        let a = db.activity();
        o.set_activity(if a.gc { ACT_GC } else { 0 } | if a.checkpoint { ACT_CKPT } else { 0 });
        tick += 1;
        if tick % 100 == 0 {
            let now = db.stats().absorbed_writes;
            o.absorbed().fetch_add(now.saturating_sub(absorbed), SeqCst);
            absorbed = now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let now = db.stats().absorbed_writes;
    o.absorbed().fetch_add(now.saturating_sub(absorbed), SeqCst);
}

/// Watches the workers' operations until the run ends; on a hang, reports
/// and either calls the hook (and ends the run) or exits the process.
fn watchdog(
    db: &Db,
    watch: &Watch,
    cfg: &RunConfig,
    done: &AtomicBool,
    hang: &std::sync::Mutex<Option<HangReport>>,
) {
    let tick = (cfg.hang_timeout / 10).clamp(Duration::from_millis(10), Duration::from_millis(200));
    while !done.load(SeqCst) {
        std::thread::sleep(tick);
        let Some(st) = watch.stalled(cfg.hang_timeout) else {
            continue;
        };
        let rep = crate::watchdog::report(watch, st, db);
        match &cfg.on_hang {
            Some(h) => {
                (h.0)(&rep);
                *hang.lock().unwrap_or_else(|p| p.into_inner()) = Some(rep);
                done.store(true, SeqCst);
                return;
            }
            None => {
                eprintln!("{rep}");
                std::process::exit(crate::watchdog::EXIT_HANG);
            }
        }
    }
}

/// What the workers of a run share.
struct Shared<'a> {
    counts: &'a Counts,
    ops: &'a AtomicU64,
    stop: &'a AtomicBool,
    done: &'a AtomicBool,
    watch: &'a Watch,
}

/// How a worker treats an engine error on a write: `Ok(true)` = not applied
/// (NoSpace), `Ok(false)` = stop quietly (fault runs), `Err` = fail the run.
fn on_write_error(e: &Error, cfg: &RunConfig, what: &str) -> Result<bool, Violation> {
    match e {
        // Refused before anything was written: the pool is full, or the record or
        // batch is larger than this pool's geometry can store atomically.
        Error::NoSpace(_) | Error::TooLarge { .. } => Ok(true),
        _ if cfg.tolerate_errors => Ok(false),
        _ => Err(Violation(format!("{what} failed: {e}"))),
    }
}

fn worker(
    db: &Db,
    o: &Oracle,
    cfg: &RunConfig,
    t: usize,
    sh: &Shared,
    deadline: Instant,
) -> Result<(), Violation> {
    let Shared {
        counts,
        ops,
        stop,
        done,
        watch,
    } = *sh;
    let threads = cfg.threads.max(1) as u64;
    let mine = (o.nkeys() + threads - 1 - t as u64) / threads;
    if mine == 0 {
        return Ok(());
    }
    let mut rng = Rng::new(cfg.seed.wrapping_mul(1000).wrapping_add(t as u64));
    let own = |rng: &mut Rng| t as u64 + threads * rng.below(mine);
    let hot: Vec<u64> = (0..mine)
        .map(|j| t as u64 + threads * j)
        .filter(|&i| steady(i))
        .take(cfg.hot_keys as usize)
        .collect();
    // A put's key: now and then a hot one (see `RunConfig::hot_keys`).
    let put_key = |rng: &mut Rng| match hot.len() as u64 {
        n if n > 0 && rng.below(4) == 0 => hot[rng.below(n) as usize],
        _ => own(rng),
    };
    let batch_id = t as u32 + 1;
    loop {
        if stop.load(SeqCst) || done.load(SeqCst) || Instant::now() >= deadline {
            return Ok(());
        }
        if cfg.max_ops > 0 && ops.fetch_add(1, SeqCst) >= cfg.max_ops {
            return Ok(());
        }
        let r = rng.below(100);
        if r < cfg.write_percent {
            let kind = rng.below(10);
            if kind < 7 {
                // put
                let i = put_key(&mut rng);
                let v = o.max_ver(i).load(SeqCst) + 1;
                o.max_ver(i).store(v, SeqCst);
                o.pending(i).store(v, SeqCst);
                watch.begin(t, || format!("put of key {i} version {v}"));
                let r = db.put(&key(i), &value(i, v));
                watch.end(t);
                match r {
                    Ok(()) => {
                        o.acked(i).store(v, SeqCst);
                        o.pending(i).store(NONE, SeqCst);
                        counts.puts.fetch_add(1, SeqCst);
                        o.acked_ops().fetch_add(1, SeqCst);
                    }
                    Err(e) => {
                        if !on_write_error(&e, cfg, "put")? {
                            counts.errors.fetch_add(1, SeqCst);
                            return Ok(());
                        }
                        o.pending(i).store(NONE, SeqCst);
                        counts.no_space.fetch_add(1, SeqCst);
                    }
                }
            } else if kind < 9 {
                // delete
                let i = own(&mut rng);
                o.pending(i).store(0, SeqCst);
                watch.begin(t, || format!("delete of key {i}"));
                let r = db.delete(&key(i));
                watch.end(t);
                match r {
                    Ok(existed) => {
                        if existed != (o.acked(i).load(SeqCst) != 0) {
                            return Err(Violation(format!(
                                "delete of key {i} said existed={existed}, oracle has version {}",
                                o.acked(i).load(SeqCst)
                            )));
                        }
                        o.acked(i).store(0, SeqCst);
                        o.pending(i).store(NONE, SeqCst);
                        counts.deletes.fetch_add(1, SeqCst);
                        o.acked_ops().fetch_add(1, SeqCst);
                    }
                    Err(e) => {
                        if !on_write_error(&e, cfg, "delete")? {
                            counts.errors.fetch_add(1, SeqCst);
                            return Ok(());
                        }
                        o.pending(i).store(NONE, SeqCst);
                        counts.no_space.fetch_add(1, SeqCst);
                    }
                }
            } else {
                // atomic batch over 2..=6 distinct own keys, puts and deletes
                let n = (2 + rng.below(5)).min(mine);
                let mut keys: Vec<u64> = Vec::new();
                while (keys.len() as u64) < n {
                    let i = own(&mut rng);
                    if !keys.contains(&i) {
                        keys.push(i);
                    }
                }
                let mut b = WriteBatch::new();
                for &i in &keys {
                    o.batch(i).store(batch_id, SeqCst);
                    let res = if rng.below(4) == 0 {
                        o.pending(i).store(0, SeqCst);
                        b.delete(&key(i))
                    } else {
                        let v = o.max_ver(i).load(SeqCst) + 1;
                        o.max_ver(i).store(v, SeqCst);
                        o.pending(i).store(v, SeqCst);
                        b.put(&key(i), &value(i, v))
                    };
                    res.map_err(|e| Violation(format!("building a batch: {e}")))?;
                }
                watch.begin(t, || format!("batch of keys {keys:?}"));
                let r = db.write(b);
                watch.end(t);
                match r {
                    Ok(()) => {
                        for &i in &keys {
                            o.acked(i).store(o.pending(i).load(SeqCst), SeqCst);
                            o.pending(i).store(NONE, SeqCst);
                            o.batch(i).store(0, SeqCst);
                        }
                        counts.batches.fetch_add(1, SeqCst);
                        counts.batch_records.fetch_add(keys.len() as u64, SeqCst);
                        o.acked_ops().fetch_add(1, SeqCst);
                    }
                    Err(e) => {
                        if !on_write_error(&e, cfg, "batch")? {
                            counts.errors.fetch_add(1, SeqCst);
                            return Ok(());
                        }
                        for &i in &keys {
                            o.pending(i).store(NONE, SeqCst);
                            o.batch(i).store(0, SeqCst);
                        }
                        counts.no_space.fetch_add(1, SeqCst);
                    }
                }
            }
        } else if r == 99 && rng.below(500) == 0 {
            watch.begin(t, || "full iteration".into());
            let r = iterate_loosely(db, o, cfg);
            watch.end(t);
            r?;
            counts.iterations.fetch_add(1, SeqCst);
        } else {
            // get of an own key: exact
            let i = own(&mut rng);
            let want = o.acked(i).load(SeqCst);
            watch.begin(t, || format!("get of key {i}"));
            let r = db.get(&key(i));
            watch.end(t);
            match r {
                Ok(got) => {
                    let ok = match (&got, want) {
                        (None, 0) => true,
                        (Some(g), w) if w != 0 => *g == value(i, w),
                        _ => false,
                    };
                    if !ok {
                        return Err(Violation(format!(
                            "get of key {i} returned {} but the last acknowledged version is {want}",
                            describe(i, got.as_deref())
                        )));
                    }
                    counts.gets.fetch_add(1, SeqCst);
                }
                Err(e) if cfg.tolerate_errors => {
                    let _ = e;
                    counts.errors.fetch_add(1, SeqCst);
                    return Ok(());
                }
                Err(e) => return Err(Violation(format!("get of key {i} failed: {e}"))),
            }
        }
    }
}

/// An iteration while others write: every key yielded must be one of ours and
/// its value some version that was written for it.
fn iterate_loosely(db: &Db, o: &Oracle, cfg: &RunConfig) -> Result<(), Violation> {
    for kv in db.iter() {
        match kv {
            Ok((k, v)) => {
                let Some(i) = parse_key(&k, o.nkeys()) else {
                    return Err(Violation(format!(
                        "iteration yielded a foreign key {:?}",
                        lossy(&k)
                    )));
                };
                if !is_some_version(i, &v, o.max_ver(i).load(SeqCst)) {
                    return Err(Violation(format!(
                        "iteration yielded for key {i} a value never written: {}",
                        describe(i, Some(&v))
                    )));
                }
            }
            Err(_) if cfg.tolerate_errors => return Ok(()),
            Err(e) => return Err(Violation(format!("iteration failed: {e}"))),
        }
    }
    Ok(())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned()
}

fn describe(i: u64, v: Option<&[u8]>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) if v.len() >= 12 => format!(
            "{} bytes claiming version {} of key {}{}",
            v.len(),
            u32::from_le_bytes([v[0], v[1], v[2], v[3]]),
            u64::from_le_bytes(v[4..12].try_into().unwrap_or([0; 8])),
            if is_some_version(i, v, u32::MAX - 1) {
                ""
            } else {
                " (not a value ever generated)"
            }
        ),
        Some(v) => format!("{} bytes", v.len()),
    }
}

/// What a verification found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Keys checked.
    pub keys: u64,
    /// Keys present after reconciliation.
    pub present: u64,
    /// In-flight writes found applied.
    pub in_flight_applied: u64,
    /// In-flight writes found not applied.
    pub in_flight_absent: u64,
    /// In-flight batches checked for atomicity.
    pub batches: u64,
    /// Keys whose record failed its checksum (allowed only where a fault was injected).
    pub corrupt: Vec<u64>,
    /// Keys that could not be read because of an I/O error.
    pub io_errors: u64,
    /// Broken guarantees.
    pub violations: Vec<String>,
}

/// Checks every key of the reopened pool against the oracle, then makes the
/// oracle match what was found (in-flight writes resolved). A key whose read
/// fails its checksum is reported in `corrupt` and left as the oracle says.
pub fn verify(db: &Db, o: &Oracle) -> VerifyReport {
    let mut rep = VerifyReport::default();
    // batch id -> (applied, absent) counts over keys where the two states differ
    let mut batches: HashMap<u32, (u64, u64)> = HashMap::new();
    for i in 0..o.nkeys() {
        rep.keys += 1;
        let acked = o.acked(i).load(SeqCst);
        let pending = o.pending(i).load(SeqCst);
        let got = match db.get(&key(i)) {
            Ok(g) => g,
            Err(Error::Corruption(_)) => {
                rep.corrupt.push(i);
                continue;
            }
            Err(Error::Io { .. }) => {
                rep.io_errors += 1;
                continue;
            }
            Err(e) => {
                rep.violations.push(format!("get of key {i} failed: {e}"));
                continue;
            }
        };
        let matches = |ver: u32| match (&got, ver) {
            (None, 0) => true,
            (Some(g), v) if v != 0 && v != NONE => *g == value(i, v),
            _ => false,
        };
        let state = if matches(acked) {
            if pending != NONE && pending != acked {
                rep.in_flight_absent += 1;
                let b = o.batch(i).load(SeqCst);
                if b != 0 {
                    batches.entry(b).or_default().1 += 1;
                }
            }
            acked
        } else if pending != NONE && matches(pending) {
            rep.in_flight_applied += 1;
            let b = o.batch(i).load(SeqCst);
            if b != 0 {
                batches.entry(b).or_default().0 += 1;
            }
            pending
        } else {
            rep.violations.push(format!(
                "key {i}: found {} but the last acknowledged version is {acked}{} [records: {}]",
                describe(i, got.as_deref()),
                if pending == NONE {
                    String::new()
                } else if pending == 0 {
                    " (a delete was in flight)".into()
                } else {
                    format!(" (version {pending} was in flight)")
                },
                db.trace_key(&key(i))
                    .map(|t| t.join("; "))
                    .unwrap_or_else(|e| e.to_string())
            ));
            continue;
        };
        o.acked(i).store(state, SeqCst);
        o.pending(i).store(NONE, SeqCst);
        o.batch(i).store(0, SeqCst);
        if state != 0 {
            rep.present += 1;
        }
    }
    for (b, (applied, absent)) in &batches {
        rep.batches += 1;
        if *applied > 0 && *absent > 0 {
            rep.violations.push(format!(
                "batch of thread {}: {applied} of its records applied, {absent} not (not atomic)",
                b - 1
            ));
        }
    }
    // Every key the pool yields is one of ours, with the state just established.
    if rep.corrupt.is_empty() && rep.io_errors == 0 {
        let mut seen = 0u64;
        for kv in db.iter() {
            match kv {
                Ok((k, v)) => {
                    seen += 1;
                    match parse_key(&k, o.nkeys()) {
                        Some(i)
                            if o.acked(i).load(SeqCst) != 0
                                && v == value(i, o.acked(i).load(SeqCst)) => {}
                        Some(i) => rep.violations.push(format!(
                            "iteration yielded key {i} with {} but the oracle has version {}",
                            describe(i, Some(&v)),
                            o.acked(i).load(SeqCst)
                        )),
                        None => rep
                            .violations
                            .push(format!("iteration yielded a foreign key {:?}", lossy(&k))),
                    }
                }
                Err(e) => rep.violations.push(format!("iteration failed: {e}")),
            }
        }
        if seen != rep.present && rep.violations.is_empty() {
            rep.violations.push(format!(
                "iteration yielded {seen} keys, {} are present",
                rep.present
            ));
        }
    }
    o.verified().fetch_add(rep.keys, SeqCst);
    rep
}
