//! The kill loop: a parent repeatedly starts a stress child on the same pool
//! files, SIGKILLs it at a random moment (while it opens and recovers, verifies,
//! writes, runs GC or writes a checkpoint), and lets the next child reopen and
//! verify everything against the oracle. A final child verifies, runs
//! `check`, makes GC and a checkpoint run, closes, reopens and verifies again.

use crate::oracle::{Oracle, Phase, ACT_CKPT, ACT_GC};
use crate::workload::{run, verify, Rng, RunConfig, RunReport, VerifyReport, Violation};
use masse::{Db, DeviceSpec, Mode, Options, PoolConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pool a stress run works on: files in a directory.
#[derive(Clone, Debug)]
pub struct StressPool {
    /// Directory of the capacity file and the oracle.
    pub dir: PathBuf,
    /// Directory of the fast-tier file (tiered mode), e.g. `/dev/shm/...`.
    pub fast_dir: PathBuf,
    /// Configuration family.
    pub mode: Mode,
    /// Capacity file size.
    pub capacity_size: u64,
    /// Fast file size (tiered).
    pub fast_size: u64,
    /// Band size: small, so GC runs often.
    pub band_size: u64,
    /// GC moves in a stream of their own (`Options::gc_separate`).
    pub gc_separate: bool,
}

impl StressPool {
    /// Path of the oracle file.
    pub fn oracle_path(&self) -> PathBuf {
        self.dir.join("oracle.bin")
    }

    /// The pool's configuration.
    pub fn config(&self) -> PoolConfig {
        let cap = DeviceSpec::file(self.dir.join("capacity.img"), self.capacity_size);
        let mut c = match self.mode {
            Mode::Tiered => PoolConfig::tiered(
                DeviceSpec::file(self.fast_dir.join("fast.img"), self.fast_size),
                cap,
            ),
            Mode::ScmOnly => PoolConfig::scm_only(cap),
            _ => PoolConfig::capacity_only(cap),
        };
        c.band_size = Some(self.band_size);
        if self.mode != Mode::ScmOnly {
            c.segment_size = Some(64 << 10);
        }
        c
    }

    /// Removes the pool's files.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(self.dir.join("capacity.img"));
        let _ = std::fs::remove_file(self.fast_dir.join("fast.img"));
        let _ = std::fs::remove_file(self.oracle_path());
    }
}

/// Engine options for stress runs on `pool`: checkpoints often, so kills
/// land in them.
pub fn stress_options(pool: &StressPool) -> Options {
    Options {
        checkpoint_interval: 8 << 20,
        histograms: false,
        gc_separate: pool.gc_separate,
        ..Options::default()
    }
}

/// What one child run did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ChildReport {
    /// Whether this run created the pool.
    pub created: bool,
    /// Verification at open.
    pub verify: VerifyReport,
    /// The random operations.
    pub run: RunReport,
    /// Final mode only: verification after close and reopen.
    pub verify_after_reopen: Option<VerifyReport>,
}

fn violations(what: &str, rep: &VerifyReport) -> Result<(), Violation> {
    let mut v = rep.violations.clone();
    if !rep.corrupt.is_empty() {
        v.push(format!(
            "{} keys failed their checksum (no fault was injected): {:?}",
            rep.corrupt.len(),
            &rep.corrupt[..rep.corrupt.len().min(10)]
        ));
    }
    if rep.io_errors > 0 {
        v.push(format!(
            "{} keys could not be read (I/O error)",
            rep.io_errors
        ));
    }
    if v.is_empty() {
        Ok(())
    } else {
        Err(Violation(format!(
            "{what}: {} problems; first: {}",
            v.len(),
            v[..v.len().min(5)].join("; ")
        )))
    }
}

/// One child run: open (or create) the pool, verify it against the oracle, run
/// random operations, then close cleanly unless `no_close`. With `final_check`,
/// also run `check`, force a GC pass and a checkpoint, close, reopen and verify.
/// `publish` is handed each pool once it is open and `None` before it is closed
/// (a live monitor, e.g. `--metrics`, must let go of it by then).
pub fn child(
    pool: &StressPool,
    nkeys: u64,
    cfg: &RunConfig,
    no_close: bool,
    final_check: bool,
    publish: &dyn Fn(Option<Arc<Db>>),
) -> Result<ChildReport, Violation> {
    let opath = pool.oracle_path();
    let err = |what: &str, e: &dyn std::fmt::Display| Violation(format!("{what}: {e}"));
    let mut rep = ChildReport::default();
    let (db, o) = if opath.exists() {
        let o = Oracle::open(&opath).map_err(|e| err("opening the oracle", &e))?;
        o.runs().fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        o.set_phase(Phase::Opening);
        let db = Db::open(&pool.config(), stress_options(pool))
            .map_err(|e| err("reopening the pool", &e))?;
        (db, o)
    } else {
        // The pool first, then the oracle: a kill in between leaves no oracle, and the
        // next run starts over with a fresh pool.
        let db = Db::create_force(&pool.config(), stress_options(pool))
            .map_err(|e| err("creating the pool", &e))?;
        let tmp = opath.with_extension("new");
        let o =
            Oracle::create(&tmp, nkeys, cfg.seed).map_err(|e| err("creating the oracle", &e))?;
        std::fs::rename(&tmp, &opath).map_err(|e| err("creating the oracle", &e))?;
        rep.created = true;
        (db, o)
    };
    let db = Arc::new(db);
    publish(Some(db.clone()));
    let close = |db: Arc<Db>| -> Result<(), Violation> {
        publish(None);
        match Arc::try_unwrap(db) {
            Ok(db) => db.close().map_err(|e| err("close", &e)),
            Err(_) => Err(err("close", &"the pool is still shared")),
        }
    };
    o.set_phase(Phase::Verifying);
    rep.verify = verify(&db, &o);
    violations("verification at open", &rep.verify)?;
    o.set_phase(Phase::Running);
    let stop = AtomicBool::new(false);
    rep.run = run(&db, &o, cfg, &stop)?;
    if final_check {
        let c = db.check().map_err(|e| err("check", &e))?;
        if !c.is_clean() {
            return Err(Violation(format!(
                "check found problems: {:?}",
                &c.errors[..c.errors.len().min(5)]
            )));
        }
        db.gc_once().map_err(|e| err("GC after the crashes", &e))?;
        db.checkpoint()
            .map_err(|e| err("checkpoint after the crashes", &e))?;
        o.set_phase(Phase::Closing);
        close(db)?;
        let db = Db::open(&pool.config(), stress_options(pool))
            .map_err(|e| err("reopening after close", &e))?;
        let db = Arc::new(db);
        publish(Some(db.clone()));
        let v = verify(&db, &o);
        violations("verification after a clean reopen", &v)?;
        rep.verify_after_reopen = Some(v);
        close(db)?;
    } else if no_close {
        std::mem::forget(db); // leave like a crash: nothing more is written
    } else {
        o.set_phase(Phase::Closing);
        close(db)?;
    }
    o.set_phase(Phase::Idle);
    Ok(rep)
}

/// What the kill loop did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LoopReport {
    /// Children killed.
    pub kills: u64,
    /// Children that finished before their kill time (then verified at the next open).
    pub finished_early: u64,
    /// Kills by what the child was doing: opening/recovery, verifying, running, closing.
    pub kills_by_phase: std::collections::BTreeMap<String, u64>,
    /// Kills while a GC pass was running.
    pub kills_during_gc: u64,
    /// Kills while a checkpoint was being written.
    pub kills_during_checkpoint: u64,
    /// Cycles in which a second open of the pool, tried while the child was
    /// working on it, was refused naming the child (one pool, one process).
    pub second_opens_refused: u64,
    /// Operations acknowledged over all children (from the oracle).
    pub acked_ops: u64,
    /// Key checks done by all verifications (from the oracle).
    pub keys_verified: u64,
    /// Overwrites the engine absorbed in DRAM over all children (from the
    /// oracle; tiered pools with `RunConfig::hot_keys`).
    pub absorbed_writes: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Runs `cycles` kill cycles (fewer if `deadline` passes first). `child_cmd(seed, final)` builds the command of one
/// child (the stress subcommand on the same pool with that seed); the final one
/// must verify and exit 0. `max_delay` bounds the time before a kill (the delay
/// is log-uniform from 2 ms, so some kills land while the child recovers).
pub fn crash_loop(
    pool: &StressPool,
    cycles: u64,
    seed: u64,
    max_delay: Duration,
    mut child_cmd: impl FnMut(u64, bool) -> Command,
    mut progress: impl FnMut(u64, &LoopReport),
    deadline: Option<Instant>,
) -> Result<LoopReport, String> {
    let t0 = Instant::now();
    let mut rng = Rng::new(seed);
    let mut rep = LoopReport::default();
    for cycle in 0..cycles {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        // One kill in four lands early (log-uniform 2–300 ms after the start: opening,
        // recovery, verification); the others a uniform time into the random work.
        let frac = |rng: &mut Rng| rng.below(1 << 20) as f64 / (1 << 20) as f64;
        let early = rng.below(4) == 0;
        let delay = if early {
            let (lo, hi) = (2.0f64.ln(), 300.0f64.ln());
            Duration::from_micros(((lo + (hi - lo) * frac(&mut rng)).exp() * 1000.0) as u64)
        } else {
            max_delay.mul_f64(frac(&mut rng))
        };
        let child_seed = seed.wrapping_mul(7919).wrapping_add(cycle + 1);
        let mut cmd = child_cmd(child_seed, false);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut ch = cmd
            .spawn()
            .map_err(|e| format!("starting a stress child: {e}"))?;
        // The oracle's phase is the last child's until this one opens the pool
        // (and counts a run): only a phase set after that is this child's.
        let runs_before = Oracle::open(&pool.oracle_path())
            .ok()
            .map(|o| o.runs().load(std::sync::atomic::Ordering::SeqCst));
        let started = Instant::now();
        let mut until = if early { Some(started + delay) } else { None };
        let mut exited = None;
        // Mapped once the child has created it (the first child creates it late).
        let mut oracle: Option<Oracle> = None;
        loop {
            if let Some(st) = ch.try_wait().map_err(|e| e.to_string())? {
                exited = Some(st);
                break;
            }
            match until {
                Some(u) if Instant::now() >= u => break,
                Some(_) => {}
                None => {
                    // Wait for the child to reach its random work (bounded, in case it
                    // never does: then it is killed wherever it is).
                    if oracle.is_none() {
                        oracle = Oracle::open(&pool.oracle_path()).ok();
                    }
                    let running = oracle.as_ref().is_some_and(|o| {
                        let ours = match runs_before {
                            Some(r) => o.runs().load(std::sync::atomic::Ordering::SeqCst) > r,
                            None => true,
                        };
                        ours && o.phase() == Phase::Running
                    });
                    if running {
                        if let Err(e) = second_open_refused(pool, ch.id()) {
                            let _ = ch.kill();
                            let _ = ch.wait();
                            return Err(format!("cycle {cycle} (child seed {child_seed}): {e}"));
                        }
                        rep.second_opens_refused += 1;
                    }
                    if running || started.elapsed() > Duration::from_secs(30) {
                        until = Some(Instant::now() + delay);
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        match exited {
            Some(st) if st.success() => rep.finished_early += 1,
            Some(st) => {
                let mut msg = String::new();
                if let Some(mut e) = ch.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut msg);
                }
                return Err(format!(
                    "cycle {cycle} (child seed {child_seed}): the child failed ({st}):\n{msg}"
                ));
            }
            None => {
                // What the child is doing right now (the oracle is shared memory).
                if oracle.is_none() {
                    oracle = Oracle::open(&pool.oracle_path()).ok();
                }
                let (phase, act) = match &oracle {
                    Some(o) => (o.phase(), o.activity()),
                    None => (Phase::Opening, 0), // still creating the pool
                };
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe {
                    libc::kill(ch.id() as i32, libc::SIGKILL);
                }
                let _ = ch.wait();
                rep.kills += 1;
                *rep.kills_by_phase
                    .entry(phase.name().to_string())
                    .or_default() += 1;
                if phase == Phase::Running && act & ACT_GC != 0 {
                    rep.kills_during_gc += 1;
                }
                if phase == Phase::Running && act & ACT_CKPT != 0 {
                    rep.kills_during_checkpoint += 1;
                }
            }
        }
        progress(cycle + 1, &rep);
    }
    // The last word: verify, check, GC, checkpoint, clean reopen.
    let mut cmd = child_cmd(seed.wrapping_add(cycles + 1), true);
    let out = cmd
        .output()
        .map_err(|e| format!("starting the final child: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "final verification failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if let Ok(o) = Oracle::open(&pool.oracle_path()) {
        rep.acked_ops = o.acked_ops().load(std::sync::atomic::Ordering::SeqCst);
        rep.keys_verified = o.verified().load(std::sync::atomic::Ordering::SeqCst);
        rep.absorbed_writes = o.absorbed().load(std::sync::atomic::Ordering::SeqCst);
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    Ok(rep)
}

/// One pool, one process: while the child `pid` works on the pool, a second
/// open must be refused as busy, naming the child. (That it does not disturb
/// the child is checked by the next open's verification against the oracle.)
fn second_open_refused(pool: &StressPool, pid: u32) -> Result<(), String> {
    match Db::open(&pool.config(), stress_options(pool)) {
        Err(masse::Error::Busy { path, holder }) => {
            let h = holder.unwrap_or_default();
            if h.contains(&format!("pid {pid}")) {
                Ok(())
            } else {
                Err(format!(
                    "a second open was refused, but it named {h:?}, not the child (pid {pid}) that holds {path}"
                ))
            }
        }
        Err(e) => Err(format!(
            "a second open of the pool while the child (pid {pid}) works on it failed with \
             \"{e}\" instead of being refused as busy"
        )),
        Ok(db) => {
            drop(db); // like a crash: nothing more is written
            Err(format!(
                "a second open of the pool succeeded while the child (pid {pid}) works on it"
            ))
        }
    }
}

/// A directory for the fast tier: under `/dev/shm` when it exists.
pub fn default_fast_dir(dir: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(format!(
            "masse-stress-{}",
            dir.file_name().and_then(|n| n.to_str()).unwrap_or("pool")
        ))
    } else {
        dir.to_path_buf()
    }
}
