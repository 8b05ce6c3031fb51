//! `masse stress`: the crash-consistency and fault-injection harness
//! (the `masse-stress` library) from the command line.

use crate::error::{CliError, CliResult};
use clap::Args;
use masse::Mode;
use masse_stress::crash::{child, crash_loop, default_fast_dir, StressPool};
use masse_stress::faults::{run_faults, FaultConfig};
use masse_stress::watchdog::{HangHook, HangReport};
use masse_stress::workload::RunConfig;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Exit code when the harness finds a broken guarantee.
pub const EXIT_STRESS_FAILED: i32 = 5;

#[derive(Args, Debug, Clone)]
pub struct StressArgs {
    /// Directory for the pool's capacity file and the oracle (the fast-tier file goes
    /// to /dev/shm). Default: a new temporary directory, removed afterwards unless --keep.
    #[arg(long)]
    pub dir: Option<PathBuf>,

    /// Pool configuration: tiered, capacity-only or scm-only. Default: tiered; with
    /// --enumerate and --damage, every mode a scenario runs in.
    #[arg(long)]
    pub mode: Option<String>,

    /// Size of the key space. Keys are 1 to 1024 bytes, values 0 bytes to the engine's
    /// maximum (a few keys), mostly a few hundred bytes.
    #[arg(long, default_value_t = 20_000)]
    pub keys: u64,

    /// Worker threads (each owns keys i ≡ t mod threads, so its gets are checked exactly).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,

    /// Hot keys per worker: one put in four rewrites one of them at the length it
    /// already has, so tiered pools absorb the overwrite in DRAM (design.md §4.10)
    /// and kills land among absorbed writes. 0: puts pick keys uniformly.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub hot_keys: u64,

    /// Single run: how long to run. With --crash-loop: stop starting new cycles after this
    /// long (a soak: e.g. --crash-loop --cycles 1000000 --duration 3600). Seconds.
    #[arg(long)]
    pub duration: Option<f64>,

    /// Seed of everything random (printed; pass it again to replay). Default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Kill loop: start a stress child, SIGKILL it at a random moment (while it recovers,
    /// verifies, writes, runs GC or checkpoints), reopen and verify; repeat. While each
    /// child works, a second open of the pool is tried and must be refused as busy.
    #[arg(long)]
    pub crash_loop: bool,

    /// Tiered pools: GC moves in an open band of their own (`Options::gc_separate`,
    /// the engine's default); `--gc-separate false` puts them with the user writes.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub gc_separate: bool,

    /// Kill cycles of --crash-loop.
    #[arg(long, default_value_t = 20)]
    pub cycles: u64,

    /// Hang watchdog: a put, delete, batch, get, iteration or checkpoint that has not
    /// finished after this many seconds fails the run, printing the engine's write-path
    /// state (group-commit queue and leader, pad, bands, writer queue) and a thread dump.
    /// 0 turns it off.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub hang_timeout: f64,

    /// Longest time a child runs before it is killed, in ms (log-uniform from 2 ms).
    #[arg(long, default_value_t = 1500)]
    pub max_kill_delay: u64,

    /// In-process fault injection on in-memory devices instead: power cuts, torn writes,
    /// bit flips, read and write I/O errors, one class per round.
    #[arg(long)]
    pub faults: bool,

    /// Rounds of --faults.
    #[arg(long, default_value_t = 20)]
    pub rounds: u64,

    /// Crash-point enumeration: deterministic scenarios run once on in-memory devices that
    /// record every write, discard and sync; then the pool is rebuilt as after a power cut at
    /// each of those points (with torn variants: which unsynced 4 KiB blocks survive),
    /// recovered and checked (acknowledged writes present, in-flight ones whole or absent, a
    /// full iteration, `check`, no recovery warning); a few crash states are continued and
    /// crashed again. Failing traces are saved for --replay-trace.
    #[arg(long)]
    pub enumerate: bool,

    /// Metadata damage: after each scenario (a clean close and crash states), flip a byte in
    /// every metadata block (superblocks, epoch blocks, pad headers and batches, checkpoints,
    /// band headers, segment headers, summaries, footers), reopen and check that loss stays
    /// within the damaged unit, is reported, and the database keeps working.
    #[arg(long)]
    pub damage: bool,

    /// Scenario of --enumerate / --damage (repeat for several; default: all). See
    /// --list-scenarios.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,

    /// List the scenarios of --enumerate and --damage.
    #[arg(long)]
    pub list_scenarios: bool,

    /// Scenario size factor (1 is the size the test suite runs).
    #[arg(long, default_value_t = 1)]
    pub scale: u32,

    /// --enumerate: every subset of the unsynced blocks survives once when there are at most
    /// this many.
    #[arg(long, default_value_t = 4)]
    pub torn_exhaustive: u32,

    /// --enumerate: otherwise each single unsynced block is lost once, for up to this many.
    #[arg(long, default_value_t = 64)]
    pub torn_singles: u32,

    /// --enumerate: and this many seeded random subsets survive.
    #[arg(long, default_value_t = 4)]
    pub torn_random: u32,

    /// --enumerate: crash states of each scenario that are continued (reopened, more
    /// writes, GC, a checkpoint) and crashed again at every point.
    #[arg(long, default_value_t = 6)]
    pub double_crashes: usize,

    /// --enumerate: check only every N-th crash point of a scenario's first run.
    #[arg(long, default_value_t = 1)]
    pub every: usize,

    /// --enumerate: check only every N-th crash point of the continued runs.
    #[arg(long, default_value_t = 1)]
    pub double_every: usize,

    /// --enumerate: only the focus ranges of long scenarios (e.g. the pad's wrap).
    #[arg(long)]
    pub focus_only: bool,

    /// --enumerate: create the scenarios' pools in this format version (2 to 5;
    /// default the newest, 5).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=5))]
    pub format_version: Option<u32>,

    /// --enumerate: stop a run after this many failing crash states.
    #[arg(long, default_value_t = 1000)]
    pub max_failures: usize,

    /// --damage: at most this many blocks of each kind per image (a seeded sample;
    /// default: every block).
    #[arg(long)]
    pub per_kind: Option<usize>,

    /// --damage: crash states damaged per scenario run, besides the clean close.
    #[arg(long, default_value_t = 2)]
    pub crash_images: usize,

    /// Threads that check crash states (default: one per CPU).
    #[arg(long)]
    pub jobs: Option<usize>,

    /// Where --enumerate and --damage save failing traces (default: ./masse-stress-traces).
    #[arg(long)]
    pub save_dir: Option<PathBuf>,

    /// Rebuild the failing crash states (and damaged blocks) saved in FILE and check them
    /// again: the exact crash state, whatever the writer thread's timing.
    #[arg(long, value_name = "FILE")]
    pub replay_trace: Option<PathBuf>,

    /// With --replay-trace: only the N-th saved failure (0-based).
    #[arg(long, value_name = "N")]
    pub crash: Option<usize>,

    /// With --replay-trace: enumerate every crash point of the saved trace again.
    #[arg(long)]
    pub reenumerate: bool,

    /// Keep the pool and oracle files.
    #[arg(long)]
    pub keep: bool,

    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Internal: one child run of the kill loop.
    #[arg(long, hide = true)]
    pub child: bool,

    /// Internal: the last child of the kill loop (verify, check, GC, checkpoint, reopen).
    #[arg(long = "final", hide = true)]
    pub final_check: bool,

    /// With --crash-loop every child serves the address in turn (between a kill
    /// and the next child's open, nothing answers). Not with --faults.
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// A bar on a terminal, nothing otherwise.
pub(crate) fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>12} [{elapsed_precise}] [{wide_bar}] {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

fn mode(s: &str) -> CliResult<Mode> {
    match s {
        "tiered" => Ok(Mode::Tiered),
        "capacity-only" => Ok(Mode::CapacityOnly),
        "scm-only" => Ok(Mode::ScmOnly),
        _ => Err(CliError::new(format!(
            "unknown mode {s:?}: use tiered, capacity-only or scm-only"
        ))),
    }
}

fn pool_at(dir: PathBuf, mode: Mode, gc_separate: bool) -> StressPool {
    StressPool {
        gc_separate,
        fast_dir: default_fast_dir(&dir),
        dir,
        mode,
        capacity_size: 96 << 20,
        fast_size: 96 << 20,
        band_size: 4 << 20,
    }
}

pub(crate) fn write_json(path: &Option<PathBuf>, v: &serde_json::Value) -> CliResult<()> {
    if let Some(p) = path {
        let s = serde_json::to_string_pretty(v).map_err(|e| CliError::new(e.to_string()))?;
        std::fs::write(p, s).map_err(|e| crate::error::io_err("writing", p, e))?;
    }
    Ok(())
}

pub fn run(a: &StressArgs) -> CliResult<i32> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 & 0xffff_ffff)
            .unwrap_or(1)
    });
    if a.list_scenarios {
        return crate::stress_enum::list();
    }
    if let Some(p) = &a.replay_trace {
        return crate::stress_enum::run_replay(a, p, seed);
    }
    if a.enumerate {
        return crate::stress_enum::run_enumerate(a, seed);
    }
    if a.damage {
        return crate::stress_enum::run_damage(a, seed);
    }
    let mode_name = a.mode.as_deref().unwrap_or("tiered");
    let mode = mode(mode_name)?;
    if a.faults && a.metrics.addr.is_some() {
        return Err(CliError::new(
            "--metrics is not available with --faults: every round opens its own in-memory pool",
        ));
    }
    if a.faults {
        eprintln!("masse stress --faults: {} rounds, seed {seed}", a.rounds);
        let cfg = FaultConfig {
            rounds: a.rounds,
            seed,
            threads: a.threads.clamp(1, 8),
            hot_keys: a.hot_keys,
            ..FaultConfig::default()
        };
        let bar = progress_bar(a.rounds, "fault rounds");
        let res = run_faults(&cfg, |n, _| bar.set_position(n));
        bar.finish_and_clear();
        return match res {
            Ok(rep) => {
                println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
                write_json(&a.json, &serde_json::json!({ "seed": seed, "faults": rep }))?;
                println!("no guarantee broken (seed {seed})");
                Ok(0)
            }
            Err(v) => Err(CliError::with_code(
                format!(
                    "{v}\nreplay: masse stress --faults --rounds {} --threads {} --hot-keys {} --seed {seed}",
                    a.rounds, cfg.threads, a.hot_keys
                ),
                EXIT_STRESS_FAILED,
            )),
        };
    }

    let tmp;
    let dir = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| crate::error::io_err("creating", d, e))?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("masse-stress-")
                .tempdir_in(
                    std::env::var_os("TMPDIR")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| "/var/tmp".into()),
                )
                .map_err(|e| CliError::new(format!("creating a temporary directory: {e}")))?;
            tmp.path().to_path_buf()
        }
    };
    let pool = pool_at(dir.clone(), mode, a.gc_separate);
    std::fs::create_dir_all(&pool.fast_dir)
        .map_err(|e| crate::error::io_err("creating", &pool.fast_dir, e))?;
    let cfg = RunConfig {
        hang_timeout: Duration::from_secs_f64(a.hang_timeout.max(0.0)),
        threads: a.threads.max(1),
        hot_keys: a.hot_keys,
        duration: Duration::from_secs_f64(a.duration.unwrap_or(10.0).max(0.0)),
        seed,
        ..RunConfig::default()
    };

    let slot = crate::metrics::EngineSlot::new();
    let mut m = crate::metrics::Metrics::new();
    m.engine(slot.clone());
    // The kill loop's parent opens no pool: its children serve --metrics.
    let _metrics = if a.crash_loop && !a.child {
        None
    } else {
        crate::metrics::start_on(&a.metrics, m, !a.child)?
    };
    let publish = |db: Option<std::sync::Arc<masse::Db>>| match db {
        Some(d) => slot.set(d),
        None => slot.clear(),
    };
    if a.child {
        return match child(&pool, a.keys, &cfg, true, a.final_check, &publish) {
            Ok(rep) => {
                println!("{}", serde_json::to_string(&rep).unwrap_or_default());
                Ok(0)
            }
            Err(v) => Err(CliError::with_code(v.0, EXIT_STRESS_FAILED)),
        };
    }

    let result = if a.crash_loop {
        eprintln!(
            "masse stress --crash-loop: {} cycles, {} keys, {} threads, mode {}, seed {seed}, pool in {}",
            a.cycles,
            a.keys,
            cfg.threads,
            mode_name,
            dir.display()
        );
        pool.remove();
        let exe = std::env::current_exe()
            .map_err(|e| CliError::new(format!("finding my own executable: {e}")))?;
        let deadline = a
            .duration
            .map(|d| std::time::Instant::now() + Duration::from_secs_f64(d));
        let cycles = a.cycles;
        let bar = progress_bar(cycles, "kill cycles");
        let res = crash_loop(
            &pool,
            cycles,
            seed,
            Duration::from_millis(a.max_kill_delay.max(3)),
            |s, fin| {
                let mut c = Command::new(&exe);
                c.arg("stress")
                    .arg("--child")
                    .arg("--dir")
                    .arg(&dir)
                    .args(["--mode", mode_name])
                    .args(["--keys", &a.keys.to_string()])
                    .args(["--threads", &cfg.threads.to_string()])
                    .args(["--hot-keys", &a.hot_keys.to_string()])
                    .args(["--hang-timeout", &a.hang_timeout.to_string()])
                    .args(["--seed", &s.to_string()]);
                c.args(["--gc-separate", &a.gc_separate.to_string()]);
                if let Some(m) = &a.metrics.addr {
                    c.args(["--metrics", m]);
                }
                if let Some(f) = &a.metrics.token_file {
                    c.arg("--metrics-token-file").arg(f);
                }
                if a.metrics.paths {
                    c.arg("--metrics-paths");
                }
                if fin {
                    c.args(["--final", "--duration", "2"]);
                } else {
                    c.args(["--duration", "3600"]);
                }
                c
            },
            |n, _| {
                bar.set_position(n);
                if deadline.is_some_and(|d| std::time::Instant::now() > d) {
                    bar.set_message("time is up");
                }
            },
            deadline,
        );
        bar.finish_and_clear();
        res.map(|r| serde_json::json!({ "seed": seed, "crash_loop": r }))
            .map_err(|e| format!("{e}\nreplay: masse stress --crash-loop --cycles {cycles} --keys {} --threads {} --hot-keys {} --mode {} --seed {seed}{}", a.keys, cfg.threads, a.hot_keys, mode_name, if a.gc_separate { "" } else { " --gc-separate false" }))
    } else {
        pool.remove();
        // A hang ends the process; the pool stays for inspection.
        let kept = dir.clone();
        let cfg = RunConfig {
            on_hang: Some(HangHook(std::sync::Arc::new(move |r: &HangReport| {
                eprintln!("{r}\nthe pool is left in {} for inspection", kept.display());
                std::process::exit(EXIT_STRESS_FAILED);
            }))),
            ..cfg.clone()
        };
        child(&pool, a.keys, &cfg, false, true, &publish)
            .map(|r| serde_json::json!({ "seed": seed, "run": r }))
            .map_err(|v| {
                format!(
                    "{v}\nreplay: masse stress --keys {} --threads {} --hot-keys {} --mode {} --seed {seed}",
                    a.keys, cfg.threads, a.hot_keys, mode_name
                )
            })
    };
    if !a.keep {
        pool.remove();
        let _ = std::fs::remove_dir(&pool.fast_dir);
    }
    match result {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            write_json(&a.json, &v)?;
            println!("no guarantee broken (seed {seed})");
            Ok(0)
        }
        Err(e) => Err(CliError::with_code(e, EXIT_STRESS_FAILED)),
    }
}
