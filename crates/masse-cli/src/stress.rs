//! `masse stress`: the crash-consistency and fault-injection harness
//! (the `masse-stress` library) from the command line.

use crate::error::{CliError, CliResult};
use clap::Args;
use masse::Mode;
use masse_stress::crash::{child, crash_loop, default_fast_dir, StressPool};
use masse_stress::faults::{run_faults, FaultConfig};
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

    /// Pool configuration: tiered, capacity-only or scm-only.
    #[arg(long, default_value = "tiered")]
    pub mode: String,

    /// Size of the key space. Keys are 1 to 1024 bytes, values 0 bytes to the engine's
    /// maximum (a few keys), mostly a few hundred bytes.
    #[arg(long, default_value_t = 20_000)]
    pub keys: u64,

    /// Worker threads (each owns keys i ≡ t mod threads, so its gets are checked exactly).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,

    /// Single run: how long to run. With --crash-loop: stop starting new cycles after this
    /// long (a soak: e.g. --crash-loop --cycles 1000000 --duration 3600). Seconds.
    #[arg(long)]
    pub duration: Option<f64>,

    /// Seed of everything random (printed; pass it again to replay). Default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Kill loop: start a stress child, SIGKILL it at a random moment (while it recovers,
    /// verifies, writes, runs GC or checkpoints), reopen and verify; repeat.
    #[arg(long)]
    pub crash_loop: bool,

    /// Kill cycles of --crash-loop.
    #[arg(long, default_value_t = 20)]
    pub cycles: u64,

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
fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
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

fn pool_at(dir: PathBuf, mode: Mode) -> StressPool {
    StressPool {
        fast_dir: default_fast_dir(&dir),
        dir,
        mode,
        capacity_size: 96 << 20,
        fast_size: 96 << 20,
        band_size: 4 << 20,
    }
}

fn write_json(path: &Option<PathBuf>, v: &serde_json::Value) -> CliResult<()> {
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
    let mode = mode(&a.mode)?;
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
                    "{v}\nreplay: masse stress --faults --rounds {} --seed {seed}",
                    a.rounds
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
    let pool = pool_at(dir.clone(), mode);
    std::fs::create_dir_all(&pool.fast_dir)
        .map_err(|e| crate::error::io_err("creating", &pool.fast_dir, e))?;
    let cfg = RunConfig {
        threads: a.threads.max(1),
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
        crate::metrics::start_on(a.metrics.addr.as_deref(), m, !a.child)?
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
            a.mode,
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
                    .args(["--mode", &a.mode])
                    .args(["--keys", &a.keys.to_string()])
                    .args(["--threads", &cfg.threads.to_string()])
                    .args(["--seed", &s.to_string()]);
                if let Some(m) = &a.metrics.addr {
                    c.args(["--metrics", m]);
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
            .map_err(|e| format!("{e}\nreplay: masse stress --crash-loop --cycles {cycles} --keys {} --threads {} --mode {} --seed {seed}", a.keys, cfg.threads, a.mode))
    } else {
        pool.remove();
        child(&pool, a.keys, &cfg, false, true, &publish)
            .map(|r| serde_json::json!({ "seed": seed, "run": r }))
            .map_err(|v| {
                format!(
                    "{v}\nreplay: masse stress --keys {} --threads {} --mode {} --seed {seed}",
                    a.keys, cfg.threads, a.mode
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
