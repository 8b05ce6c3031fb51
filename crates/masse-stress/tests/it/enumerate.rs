//! Crash-point enumeration, the size the default suite runs (`EnumConfig::ci`):
//! each test runs one scenario in each of its modes, cuts power after every
//! device write and sync of its trace (with torn variants), recovers and checks
//! each crash state, then continues two crash states and crashes them again.
//! A failure prints the crash point, the lost blocks, the symptom and the
//! command that rebuilds exactly that crash state from the saved trace.
//! The long mode is `masse stress --enumerate` (docs/testing.md).

use masse_stress::enumerate::script::Recorded;
use masse_stress::enumerate::{
    load_run, rebuild, replay, run_scenario, save_run, scenarios, CrashSpec, EnumConfig,
};
use masse_stress::trace::{BlockId, Image, Replayer};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn save_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("enumerate-failures")
}

fn enumerate(name: &str, tweak: impl Fn(&mut EnumConfig)) {
    enumerate_in(name, None, tweak)
}

/// [`enumerate`] in `only` mode instead of every mode of the scenario.
fn enumerate_in(name: &str, only: Option<&str>, tweak: impl Fn(&mut EnumConfig)) {
    let sc = scenarios::all()
        .into_iter()
        .find(|s| s.name == name)
        .expect("scenario");
    let mut cfg = EnumConfig {
        save_dir: Some(save_dir()),
        ..EnumConfig::ci()
    };
    tweak(&mut cfg);
    let mut failures = Vec::new();
    for mode in sc.modes.iter().filter(|m| only.is_none_or(|o| o == **m)) {
        let r = run_scenario(&sc, mode, &cfg, &mut |_, _, _| {});
        eprintln!(
            "{name} {mode}: {} crash points, {} crash states ({} duplicates skipped); \
             double crashes: {} runs, {} points, {} states; {} failing; {:.1} s",
            r.first.crash_points,
            r.first.crash_states,
            r.first.duplicates + r.double.duplicates,
            r.double_runs,
            r.double.crash_points,
            r.double.crash_states,
            r.first.failures + r.double.failures,
            r.seconds
        );
        failures.extend(r.failures.iter().map(|f| f.to_string()));
    }
    assert!(
        failures.is_empty(),
        "crash states broke a guarantee:\n{}",
        failures.join("")
    );
}

#[test]
fn batches_across_segment_boundaries() {
    enumerate("batch-segments", |_| {});
}

/// Block marks (format 3 and 4) at boundaries, skips, straddlers, a reopen in
/// mid-segment.
#[test]
fn block_marks_at_4k_boundaries() {
    enumerate("marks", |_| {});
}

/// Pools of format version 2 (made by older builds, or with
/// `--format-version 2`) keep writing that format: the scenarios that cross
/// segment, band and seal boundaries, on it.
#[test]
fn version_2_pools_batches_bands_and_seals() {
    for name in ["batch-segments", "batch-band-gc", "seal"] {
        enumerate(name, |c| c.format = Some(2));
    }
}

/// Pools of format version 3 keep writing it (its seq chains keep the
/// largest seq seen; version 4's follow each record): the scenarios whose
/// segments mix seqs out of order (block marks and moves, GC moves in their
/// own band with cold user writes, a batch across a band boundary and GC of
/// its end), on it.
#[test]
fn version_3_pools_marks_moves_and_gc() {
    for name in ["marks", "cold-writes", "batch-band-gc"] {
        enumerate(name, |c| c.format = Some(3));
    }
}

/// Freed bands are not TRIMmed on pool files by default (`TrimPolicy::Auto`),
/// so writes land over stale segments of the band's earlier life.
#[test]
fn reuse_of_freed_bands_that_keep_their_old_segments() {
    enumerate("reuse-untrimmed", |_| {});
}

#[test]
fn a_batch_across_a_band_boundary_then_gc_of_its_end() {
    enumerate("batch-band-gc", |_| {});
}

/// Multi-slot records, early seals, GC freeing their bands, and the
/// continued runs after torn bursts (issue 44's histories).
#[test]
fn multi_slot_records_early_seals_and_gc_histories() {
    enumerate("multi-slot", |_| {});
}

#[test]
fn capacity_only_seals() {
    enumerate("seal", |_| {});
}

#[test]
fn checkpoints_gc_and_a_clean_reopen() {
    enumerate("checkpoint-gc", |_| {});
}

#[test]
fn concurrent_writers_in_one_group_commit() {
    enumerate("concurrent", |_| {});
}

#[test]
fn scm_only_in_place_updates() {
    enumerate("scm-inplace", |_| {});
}

/// GC moves in an open band of their own beside the user writes' band.
#[test]
fn separate_gc_streams() {
    enumerate("streams", |_| {});
}

/// User writes of long-unwritten keys in the GC moves' band.
#[test]
fn cold_user_writes() {
    enumerate("cold-writes", |_| {});
}

/// Overwrites absorbed in the open DRAM segment.
#[test]
fn absorbed_overwrites() {
    enumerate("absorb", |_| {});
}

/// The tiered scenarios with GC moves among the user writes
/// (`Options::gc_separate` off; the other tests run the engine's default).
#[test]
fn tiered_gc_moves_with_user_writes() {
    for name in ["batch-band-gc", "checkpoint-gc", "reuse-untrimmed"] {
        enumerate_in(name, Some("tiered"), |c| c.gc_separate = Some(false));
    }
}

#[test]
fn the_pad_wraps_around() {
    // Its images are 64 MiB: the continued runs belong to the long mode.
    enumerate("pad-wrap", |c| c.double_crashes = 0);
}

/// A saved failure rebuilds exactly the crash state it was found in: same
/// trace, same crash point, same lost blocks — whatever the writer thread's
/// timing in a new run.
#[test]
fn a_saved_trace_rebuilds_the_same_crash_state() {
    let sc = scenarios::all()
        .into_iter()
        .find(|s| s.name == "seal")
        .expect("scenario");
    let rec: Recorded = sc.record("capacity-only", 1).expect("record");
    // A crash point with several unsynced blocks; lose the first of them.
    let mut rp = Replayer::new(&rec.base);
    let mut pick = None;
    for (i, e) in rec.events.iter().enumerate() {
        rp.apply(e);
        let u = rp.unsynced();
        if i + 1 > rec.first_crash && e.is_device_event() && u.len() >= 3 {
            pick = Some((i + 1, u[0]));
            break;
        }
    }
    let (k, first): (usize, BlockId) = pick.expect("a crash point with unsynced blocks");
    let lost: BTreeSet<BlockId> = [first].into_iter().collect();
    let (devs, _, _) = rebuild(&rec, k, &lost);
    let before = Image::read(&devs).expect("image");

    let dir = tempfile::tempdir().expect("tmp");
    let spec = CrashSpec {
        k,
        lost: vec![first],
        unsynced: 3,
        symptom: vec!["(test)".into()],
        context: String::new(),
    };
    let path = save_run(&rec, "seal", "first run", &[spec], dir.path()).expect("save");
    let (h, again) = load_run(&path).expect("load");
    assert_eq!(h.failures.len(), 1);
    assert_eq!(h.failures[0].lost, vec![first]);
    let (devs, _, _) = rebuild(&again, k, &lost);
    let after = Image::read(&devs).expect("image");
    assert_eq!(before.sizes, after.sizes);
    assert_eq!(
        before.blocks, after.blocks,
        "the replayed crash state differs"
    );
    // The replay command's library call checks that state again.
    let (_, replayed) = replay(&path, None).expect("replay");
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].saved.k, k);
}
