//! Injected device faults, in process, on in-memory devices — deterministic
//! from a seed, so a failing round replays. Each round builds a fresh pool,
//! runs the random workload against the oracle, injects one fault class, and
//! checks the behaviour users are promised:
//!
//! * power cut (unsynced writes lost) and torn power cut (an arbitrary subset
//!   of unsynced 4 KiB blocks lands): no acknowledged write or delete is lost,
//!   in-flight writes are whole or absent, batches are atomic;
//! * bit flip in stored data: detected and reported for that key only, never
//!   returned as data; the rest of the pool reads back exactly;
//! * read I/O errors: surfaced to the caller as errors, never as wrong data; the
//!   pool reopens consistent;
//! * write I/O errors: surfaced to the caller; the pool reopens consistent with
//!   every acknowledged write.

use crate::gen::{key, value};
use crate::oracle::Oracle;
use crate::workload::{run, verify, Rng, RunConfig, VerifyReport, Violation};
use masse::device::{AlignedBuf, Device, MemDevice};
use masse::{Db, DeviceSpec, Mode, Options, PoolConfig};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// The fault classes, in the order rounds cycle through them.
pub const CLASSES: [&str; 5] = [
    "power_cut",
    "torn_power_cut",
    "bit_flip",
    "read_errors",
    "write_errors",
];

/// A fault run.
#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// Rounds (each: fresh pool, workload, one fault, verification).
    pub rounds: u64,
    /// Seed of everything random.
    pub seed: u64,
    /// Keys per round.
    pub nkeys: u64,
    /// Worker threads.
    pub threads: usize,
    /// Operations before the fault is armed.
    pub warmup_ops: u64,
    /// Hot keys per worker (`RunConfig::hot_keys`).
    pub hot_keys: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            rounds: 10,
            seed: 1,
            nkeys: 3000,
            threads: 3,
            warmup_ops: 4000,
            hot_keys: RunConfig::default().hot_keys,
        }
    }
}

/// What a fault run did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FaultReport {
    /// Rounds run.
    pub rounds: u64,
    /// Faults injected per class.
    pub injected: std::collections::BTreeMap<String, u64>,
    /// Bit flips that hit a live record and were reported as corruption.
    pub flips_detected: u64,
    /// Bit flips that hit bytes no live key uses (the key read back exactly).
    pub flips_in_dead_data: u64,
    /// Operations that got an I/O error back from the engine.
    pub errors_surfaced: u64,
    /// Operations acknowledged (all verified after the fault).
    pub acked_ops: u64,
    /// Keys checked by verifications.
    pub keys_verified: u64,
    /// In-flight writes found applied / absent after a fault.
    pub in_flight_applied: u64,
    /// In-flight writes found absent after a fault.
    pub in_flight_absent: u64,
}

struct Pool {
    fast: Option<MemDevice>,
    cap: MemDevice,
    mode: Mode,
}

impl Pool {
    fn devices(&self) -> Vec<&MemDevice> {
        self.fast.iter().chain(std::iter::once(&self.cap)).collect()
    }
    fn config(&self) -> PoolConfig {
        let d = |m: &MemDevice| DeviceSpec::Device(Arc::new(m.clone()) as Arc<dyn Device>);
        let mut c = match &self.fast {
            Some(f) => PoolConfig::tiered(d(f), d(&self.cap)),
            None => PoolConfig::capacity_only(d(&self.cap)),
        };
        c.mode = Some(self.mode);
        c.segment_size = Some(32 << 10);
        c.band_size = Some(512 << 10);
        c
    }
}

fn opts() -> Options {
    Options {
        histograms: false,
        checkpoint_interval: 2 << 20,
        ..Options::default()
    }
}

fn strict(rep: &VerifyReport, what: &str) -> Result<(), Violation> {
    if rep.violations.is_empty() && rep.corrupt.is_empty() && rep.io_errors == 0 {
        Ok(())
    } else {
        Err(Violation(format!(
            "{what}: {:?} (corrupt keys {:?}, I/O errors {})",
            &rep.violations[..rep.violations.len().min(5)],
            &rep.corrupt[..rep.corrupt.len().min(5)],
            rep.io_errors
        )))
    }
}

/// Runs the fault rounds; the first broken guarantee ends the run with the round
/// and seed that showed it.
pub fn run_faults(
    cfg: &FaultConfig,
    mut progress: impl FnMut(u64, &FaultReport),
) -> Result<FaultReport, Violation> {
    let mut rep = FaultReport::default();
    for round in 0..cfg.rounds {
        let seed = cfg.seed.wrapping_mul(1_000_003).wrapping_add(round);
        let class = CLASSES[((cfg.seed + round) % CLASSES.len() as u64) as usize];
        round_once(cfg, seed, class, &mut rep)
            .map_err(|v| Violation(format!("round {round} ({class}, seed {}): {v}", cfg.seed)))?;
        *rep.injected.entry(class.to_string()).or_default() += 1;
        rep.rounds += 1;
        progress(round + 1, &rep);
    }
    Ok(rep)
}

fn round_once(
    cfg: &FaultConfig,
    seed: u64,
    class: &str,
    rep: &mut FaultReport,
) -> Result<(), Violation> {
    let mut rng = Rng::new(seed);
    let tiered = rng.below(3) != 0;
    let pool = Pool {
        fast: tiered.then(|| MemDevice::new(64 << 20)),
        cap: MemDevice::new(24 << 20),
        mode: if tiered {
            Mode::Tiered
        } else {
            Mode::CapacityOnly
        },
    };
    let o = Oracle::in_memory(cfg.nkeys, seed).map_err(|e| Violation(e.to_string()))?;
    let e = |w: &str, err: masse::Error| Violation(format!("{w}: {err}"));
    let db = Db::create(&pool.config(), opts()).map_err(|x| e("create", x))?;
    let base = RunConfig {
        threads: cfg.threads,
        duration: Duration::from_secs(60),
        max_ops: cfg.warmup_ops,
        seed,
        checkpoint_every: Duration::from_millis(50),
        write_percent: 70,
        hot_keys: cfg.hot_keys,
        tolerate_errors: false,
        ..RunConfig::default()
    };
    let stop = AtomicBool::new(false);
    run(&db, &o, &base, &stop)?;

    let faulty = RunConfig {
        max_ops: 0,
        duration: Duration::from_secs(5),
        seed: seed ^ 0xfa17,
        tolerate_errors: true,
        ..base.clone()
    };
    // Runs the workload while `inject` fires after a random delay, then stops it.
    let under_fault =
        |db: &Db, inject: &dyn Fn(), heal: &dyn Fn(), rng: &mut Rng| -> Result<u64, Violation> {
            let delay = Duration::from_millis(5 + rng.below(40));
            let window = Duration::from_millis(5 + rng.below(30));
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                let h = s.spawn(|| run(db, &o, &faulty, &stop));
                std::thread::sleep(delay);
                inject();
                std::thread::sleep(window);
                stop.store(true, SeqCst);
                let r = h
                    .join()
                    .map_err(|_| Violation("workload panicked".into()))?;
                heal();
                r.map(|r| r.errors)
            })
        };

    match class {
        "power_cut" | "torn_power_cut" => {
            // Freeze the devices (every later write fails, as if power were gone),
            // then lose what was not synced.
            let freeze = || pool.devices().iter().for_each(|d| d.set_fail_writes(true));
            rep.errors_surfaced += under_fault(&db, &freeze, &|| {}, &mut rng)?;
            drop(db);
            for d in pool.devices() {
                if class == "torn_power_cut" {
                    let mut r = Rng::new(seed ^ 0x7041);
                    d.power_cut_with(|_| r.below(2) == 0);
                } else {
                    d.power_cut();
                }
                d.set_fail_writes(false);
            }
        }
        "write_errors" => {
            let fail = || pool.devices().iter().for_each(|d| d.set_fail_writes(true));
            let heal = || pool.devices().iter().for_each(|d| d.set_fail_writes(false));
            rep.errors_surfaced += under_fault(&db, &fail, &heal, &mut rng)?;
            drop(db);
        }
        "read_errors" => {
            let fail = || pool.cap.set_fail_reads(true);
            let heal = || pool.cap.set_fail_reads(false);
            rep.errors_surfaced += under_fault(&db, &fail, &heal, &mut rng)?;
            drop(db);
        }
        "bit_flip" => {
            db.close().map_err(|x| e("close", x))?;
            let victim = flip_a_value(&pool.cap, &o, &mut rng);
            let db = Db::open(&pool.config(), opts()).map_err(|x| e("reopen after the flip", x))?;
            let v = verify(&db, &o);
            if !v.violations.is_empty() || v.io_errors > 0 {
                return Err(Violation(format!(
                    "after a bit flip: {:?}",
                    &v.violations[..v.violations.len().min(5)]
                )));
            }
            match (victim, v.corrupt.as_slice()) {
                (_, []) => rep.flips_in_dead_data += 1,
                (Some(k), [c]) if *c == k => {
                    rep.flips_detected += 1;
                    let c = db.check().map_err(|x| e("check", x))?;
                    if c.is_clean() {
                        return Err(Violation(format!(
                            "check did not report the flipped record of key {k}"
                        )));
                    }
                    // The damaged key can still be deleted; then the oracle agrees again.
                    db.delete(&key(k))
                        .map_err(|x| e("deleting the damaged key", x))?;
                    o.acked(k).store(0, SeqCst);
                }
                (k, c) => {
                    return Err(Violation(format!(
                        "flipped key {k:?} but keys {c:?} read as corrupt"
                    )));
                }
            }
            rep.keys_verified += v.keys;
            rep.acked_ops += o.acked_ops().load(SeqCst);
            db.close().map_err(|x| e("close", x))?;
            return Ok(());
        }
        other => return Err(Violation(format!("unknown fault class {other}"))),
    }

    // Reopen (recovery) and verify every acknowledged operation.
    let db = Db::open(&pool.config(), opts()).map_err(|x| e("reopen after the fault", x))?;
    let v = verify(&db, &o);
    strict(&v, "after the fault")?;
    rep.keys_verified += v.keys;
    rep.in_flight_applied += v.in_flight_applied;
    rep.in_flight_absent += v.in_flight_absent;
    // The pool keeps working: more writes, GC, a checkpoint, a clean check.
    run(
        &db,
        &o,
        &RunConfig {
            max_ops: 1000,
            ..base
        },
        &stop,
    )?;
    db.gc_once().map_err(|x| e("GC after the fault", x))?;
    db.checkpoint()
        .map_err(|x| e("checkpoint after the fault", x))?;
    let c = db.check().map_err(|x| e("check", x))?;
    if !c.is_clean() {
        return Err(Violation(format!(
            "check after the fault: {:?}",
            &c.errors[..c.errors.len().min(5)]
        )));
    }
    db.close().map_err(|x| e("close", x))?;
    let db = Db::open(&pool.config(), opts()).map_err(|x| e("clean reopen", x))?;
    strict(&verify(&db, &o), "after a clean reopen")?;
    db.close().map_err(|x| e("close", x))?;
    rep.acked_ops += o.acked_ops().load(SeqCst);
    Ok(())
}

/// Flips one byte inside the stored value of a random present key (values of
/// 32+ bytes carry their version, so they are found by content). Returns the
/// key, or `None` if no such value was found on the device.
fn flip_a_value(dev: &MemDevice, o: &Oracle, rng: &mut Rng) -> Option<u64> {
    let cap = dev.info().capacity;
    let mut buf = AlignedBuf::new(1 << 20);
    for _ in 0..50 {
        let i = rng.below(o.nkeys());
        let ver = o.acked(i).load(SeqCst);
        if ver == 0 {
            continue;
        }
        let v = value(i, ver);
        if v.len() < 32 {
            continue;
        }
        let needle = &v[..32];
        let mut off = 0;
        while off < cap {
            if dev.read_at(&mut buf, off).is_err() {
                return None;
            }
            if let Some(p) = buf.windows(32).position(|w| w == needle) {
                let at = off + p as u64 + 16 + rng.below(16);
                let base = at & !4095;
                let mut b = AlignedBuf::new(4096);
                dev.read_at(&mut b, base).ok()?;
                b[(at - base) as usize] ^= 1 << rng.below(8);
                dev.write_at(&b, base).ok()?;
                dev.sync().ok()?;
                return Some(i);
            }
            off += 1 << 20; // (a value across a 1 MiB boundary is not found; another key is tried)
        }
    }
    None
}
