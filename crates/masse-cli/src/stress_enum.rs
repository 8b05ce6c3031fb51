//! `masse stress --enumerate`, `--damage` and `--replay-trace`: crash-point
//! enumeration and metadata damage on in-memory pools (the
//! `masse_stress::enumerate` and `masse_stress::damage` libraries).

use crate::error::{CliError, CliResult};
use crate::stress::{progress_bar, write_json, StressArgs, EXIT_STRESS_FAILED};
use masse_stress::damage::{self, DamageConfig};
use masse_stress::enumerate::{self, scenarios, EnumConfig, Torn};
use std::path::PathBuf;

fn modes(a: &StressArgs) -> Vec<String> {
    a.mode.iter().cloned().collect()
}

fn save_dir(a: &StressArgs) -> PathBuf {
    a.save_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("masse-stress-traces"))
}

fn jobs(a: &StressArgs) -> usize {
    a.jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1)
}

/// `--list-scenarios`.
pub fn list() -> CliResult<i32> {
    for (name, about, modes) in scenarios::list() {
        println!("{name:16} {about} [{}]", modes.join(", "));
    }
    Ok(0)
}

/// `--enumerate`.
pub fn run_enumerate(a: &StressArgs, seed: u64) -> CliResult<i32> {
    let cfg = EnumConfig {
        torn: Torn {
            exhaustive_upto: a.torn_exhaustive,
            singles_upto: a.torn_singles,
            random: a.torn_random,
        },
        every: a.every.max(1),
        focus_only: a.focus_only,
        double_crashes: a.double_crashes,
        double_every: a.double_every.max(1),
        seed,
        jobs: jobs(a),
        max_failures: a.max_failures.max(1),
        save_dir: Some(save_dir(a)),
        scale: a.scale.max(1),
        format: a.format_version,
        // Each scenario's own (the default) unless turned off.
        gc_separate: (!a.gc_separate).then_some(false),
    };
    eprintln!(
        "masse stress --enumerate: scenarios {}, modes {}, scale {}, format version {}, seed {seed}, {} jobs; failing traces go to {}",
        if a.scenarios.is_empty() { "all".into() } else { a.scenarios.join(",") },
        if a.mode.is_none() { "all" } else { a.mode.as_deref().unwrap_or("") },
        cfg.scale,
        cfg.format.unwrap_or(masse::format::FORMAT_VERSION),
        cfg.jobs,
        save_dir(a).display()
    );
    let bar = progress_bar(1, "crash points");
    let rep = enumerate::run_all(&a.scenarios, &modes(a), &cfg, &mut |sc, mode, run, d, t| {
        bar.set_length(t.max(1));
        bar.set_position(d);
        bar.set_message(format!("{sc} {mode} {run}"));
    });
    bar.finish_and_clear();
    for s in &rep.scenarios {
        println!(
            "{:16} {:13} {:5} crash points, {:6} crash states ({} duplicates skipped); double crashes: {} runs, {} points, {} states; {} failing states; {:.1} s",
            s.scenario,
            s.mode,
            s.first.crash_points,
            s.first.crash_states,
            s.first.duplicates + s.double.duplicates,
            s.double_runs,
            s.double.crash_points,
            s.double.crash_states,
            s.first.failures + s.double.failures,
            s.seconds
        );
        for (sig, n) in &s.symptoms {
            println!("    {n:5} × {sig}");
        }
    }
    let t = &rep.total;
    println!(
        "total: {} scenario runs, {} operations, {} crash points, {} crash states checked, {} keys compared; \
         {} failing states ({} acknowledged key states lost in them; {} states lost them silently); {:.1} s",
        rep.scenarios.len(),
        t.ops,
        t.crash_points,
        t.crash_states,
        t.keys_checked,
        t.failures,
        t.acked_lost,
        t.silent_loss_states,
        rep.seconds
    );
    let failures: Vec<&enumerate::Failure> =
        rep.scenarios.iter().flat_map(|s| &s.failures).collect();
    for f in &failures {
        eprint!("{f}");
    }
    write_json(
        &a.json,
        &serde_json::json!({ "seed": seed, "enumerate": rep }),
    )?;
    if failures.is_empty() {
        println!("no guarantee broken");
        Ok(0)
    } else {
        Err(CliError::with_code(
            format!(
                "{} failing crash states (first of each kind above)",
                t.failures
            ),
            EXIT_STRESS_FAILED,
        ))
    }
}

/// `--damage`.
pub fn run_damage(a: &StressArgs, seed: u64) -> CliResult<i32> {
    let cfg = DamageConfig {
        seed,
        per_kind: a.per_kind.unwrap_or(usize::MAX),
        crash_images: a.crash_images,
        jobs: jobs(a),
    };
    eprintln!(
        "masse stress --damage: scenarios {}, seed {seed}, {} crash images per run, {} jobs",
        if a.scenarios.is_empty() {
            "all".into()
        } else {
            a.scenarios.join(",")
        },
        cfg.crash_images,
        cfg.jobs
    );
    let bar = progress_bar(1, "damaged blocks");
    let dir = save_dir(a);
    let rep = damage::run_all(
        &a.scenarios,
        &modes(a),
        &cfg,
        a.scale.max(1),
        Some(&dir),
        &mut |sc, mode, d, t| {
            bar.set_length(t.max(1));
            bar.set_position(d);
            bar.set_message(format!("{sc} {mode}"));
        },
    );
    bar.finish_and_clear();
    for s in &rep.scenarios {
        let f = &s.figures;
        println!(
            "{:16} {:13} {} images, {:4} blocks damaged, {} fatal as defined, {} keys lost (reported), {} silent losses, {} lost at the log's end as defined, {} losses beyond the unit, {} times down; {} failing blocks; {:.1} s",
            s.scenario, s.mode, f.images, f.blocks_damaged, f.fatal_as_defined, f.keys_lost_reported,
            f.silent_losses, f.frontier_losses, f.losses_beyond_unit, f.database_down, f.failures, s.seconds
        );
        for (kind, n) in &s.failures_by_kind {
            println!("    {n:5} × {kind}");
        }
    }
    let t = &rep.total;
    println!(
        "total: {} blocks damaged in {} images ({:?}); {} silent losses, {} keys lost at the pad log's end as defined, {} losses beyond the damaged unit, {} times the database went down, {} failing blocks; {:.1} s",
        t.blocks_damaged, t.images, t.by_kind, t.silent_losses, t.frontier_losses, t.losses_beyond_unit, t.database_down, t.failures, rep.seconds
    );
    let failures: Vec<&damage::DamageFailure> =
        rep.scenarios.iter().flat_map(|s| &s.failures).collect();
    for f in &failures {
        eprint!("{f}");
    }
    write_json(&a.json, &serde_json::json!({ "seed": seed, "damage": rep }))?;
    if t.failures == 0 {
        println!("no guarantee broken");
        Ok(0)
    } else {
        Err(CliError::with_code(
            format!(
                "{} damaged blocks broke a guarantee (first of each kind above)",
                t.failures
            ),
            EXIT_STRESS_FAILED,
        ))
    }
}

/// `--replay-trace FILE [--crash N] [--reenumerate]`.
pub fn run_replay(a: &StressArgs, path: &std::path::Path, seed: u64) -> CliResult<i32> {
    let io = |e: std::io::Error| crate::error::io_err("reading", path, e);
    if a.reenumerate {
        let (h, rec) = enumerate::load_run(path).map_err(io)?;
        let cfg = EnumConfig {
            seed,
            jobs: jobs(a),
            max_failures: a.max_failures.max(1),
            every: a.every.max(1),
            ..EnumConfig::default()
        };
        let bar = progress_bar(1, "crash points");
        let (fig, specs) = enumerate::enumerate_run(&rec, &cfg, cfg.every, |d, t| {
            bar.set_length(t);
            bar.set_position(d);
        });
        bar.finish_and_clear();
        println!("{} ({}, {}): {fig:?}", h.scenario, h.setup.mode, h.run);
        for s in &specs {
            println!(
                "crash after event {} ({}); lost {:?}:\n    {}",
                s.k,
                s.context,
                s.lost,
                s.symptom.join("\n    ")
            );
        }
        return Ok(if specs.is_empty() {
            0
        } else {
            EXIT_STRESS_FAILED
        });
    }
    let (h, out) = enumerate::replay(path, a.crash).map_err(io)?;
    println!(
        "{} ({}, {}): {} saved failures",
        h.scenario,
        h.setup.mode,
        h.run,
        out.len()
    );
    let mut still = 0;
    for r in &out {
        let tiered = h.setup.mode == "tiered";
        println!(
            "crash after event {} ({}); lost {}",
            r.saved.k,
            r.saved.context,
            enumerate::blocks_text(&r.saved.lost, tiered)
        );
        println!("  saved:  {}", r.saved.symptom.join("\n          "));
        if r.now.is_empty() {
            println!("  now:    correct");
        } else {
            still += 1;
            println!("  now:    {}", r.now.join("\n          "));
        }
    }
    write_json(&a.json, &serde_json::json!({ "replayed": out }))?;
    Ok(if still == 0 { 0 } else { EXIT_STRESS_FAILED })
}
