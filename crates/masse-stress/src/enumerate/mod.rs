//! Crash-point enumeration, in the spirit of CrashMonkey, ALICE and
//! TigerBeetle's simulator: a deterministic scenario runs once on recording
//! in-memory devices ([`script`]); then, for every device write, discard and
//! sync in its trace, the pool is rebuilt as it would be after a power cut at
//! that point — with every choice of surviving unsynced 4 KiB blocks for small
//! sets (all of them, none, each one lost, seeded random subsets otherwise) —
//! opened (recovery), and checked against the expected state ([`model`]).
//! A few crash states are then opened on recording devices again and a second
//! scenario runs on them, whose crash points are enumerated the same way
//! (crashes two crashes later, and crashes during recovery).
//!
//! The engine's writer thread runs concurrently, so a second run of the same
//! scenario may interleave differently. A failing run's trace is therefore
//! saved ([`crate::trace::TraceFile`]) with its failing crash points and
//! surviving-block sets; [`replay`] rebuilds exactly those crash states.

pub mod model;
pub mod scenarios;
pub mod script;

use crate::trace::{device_names, BlockId, Image, Replayer, TraceFile};
use crate::workload::Rng;
use masse::device::MemDevice;
use masse::Db;
use model::{check_db, trace_keys, Expected, KeyState, Op, Tracker};
use script::{options, Recorded, Script, Setup};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Which surviving-block sets are tried at each crash point.
#[derive(Clone, Debug, Serialize)]
pub struct Torn {
    /// With this many unsynced blocks or fewer, every subset survives once.
    pub exhaustive_upto: u32,
    /// With more, each single block is lost once, for up to this many blocks.
    pub singles_upto: u32,
    /// And this many seeded random subsets.
    pub random: u32,
}

/// What to enumerate and how.
#[derive(Clone, Debug, Serialize)]
pub struct EnumConfig {
    /// Surviving-block sets.
    pub torn: Torn,
    /// Check every n-th crash point of a first run (1: all).
    pub every: usize,
    /// Only the scenarios' focus ranges (long scenarios in quick runs).
    pub focus_only: bool,
    /// Crash states each first run continues from (double crashes).
    pub double_crashes: usize,
    /// Check every n-th crash point of a continued run.
    pub double_every: usize,
    /// Seed of the random subsets.
    pub seed: u64,
    /// Threads that open and check crash states.
    pub jobs: usize,
    /// Stop enumerating a run after this many failing crash states.
    pub max_failures: usize,
    /// Where failing traces are saved (`None`: not saved).
    pub save_dir: Option<PathBuf>,
    /// Scenario size factor (1: the CI size).
    pub scale: u32,
    /// Format version of the scenarios' pools (`None`: the newest).
    pub format: Option<u32>,
    /// `Options::gc_separate` for every scenario (`None`: each scenario's own,
    /// the engine's default unless it says otherwise).
    pub gc_separate: Option<bool>,
}

impl Default for EnumConfig {
    fn default() -> Self {
        EnumConfig {
            torn: Torn {
                exhaustive_upto: 3,
                singles_upto: 12,
                random: 2,
            },
            every: 1,
            focus_only: false,
            double_crashes: 3,
            double_every: 1,
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_failures: 1,
            save_dir: None,
            scale: 1,
            format: None,
            gc_separate: None,
        }
    }
}

impl EnumConfig {
    /// The size the default test suite runs: every crash point of the first
    /// runs (the focus of long scenarios), fewer torn variants, two continued
    /// runs checked at every other point, and the first failure ends a run.
    pub fn ci() -> EnumConfig {
        EnumConfig {
            torn: Torn {
                exhaustive_upto: 2,
                singles_upto: 4,
                random: 1,
            },
            focus_only: true,
            double_crashes: 2,
            double_every: 2,
            max_failures: 1,
            ..EnumConfig::default()
        }
    }
}

/// One failing crash state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrashSpec {
    /// Crash after the first `k` events of the run's trace.
    pub k: usize,
    /// Unsynced blocks that did not survive (device index, offset); every
    /// other unsynced block did.
    pub lost: Vec<BlockId>,
    /// Unsynced blocks at the crash point.
    pub unsynced: usize,
    /// What was wrong.
    pub symptom: Vec<String>,
    /// The event before the cut and the operations in flight.
    pub context: String,
}

/// A failure, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Scenario name.
    pub scenario: String,
    /// Pool mode.
    pub mode: String,
    /// `first run`, or `after crash N` for a continued run.
    pub run: String,
    /// Events in the run's trace.
    pub events: usize,
    /// The crash state.
    pub crash: CrashSpec,
    /// The saved trace, if any.
    pub trace_file: Option<PathBuf>,
    /// Command that rebuilds the crash state.
    pub replay: Option<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.crash;
        writeln!(
            f,
            "{} ({}, {}): crash after event {} of {} ({}); lost {} of {} unsynced blocks {}",
            self.scenario,
            self.mode,
            self.run,
            c.k,
            self.events,
            c.context,
            c.lost.len(),
            c.unsynced,
            blocks_text(&c.lost, self.mode == "tiered")
        )?;
        for s in &c.symptom {
            writeln!(f, "    {s}")?;
        }
        if let Some(r) = &self.replay {
            writeln!(f, "    replay: {r}")?;
        }
        Ok(())
    }
}

/// Blocks as `fast@0x…` / `cap0@0x…`.
pub fn blocks_text(b: &[BlockId], tiered: bool) -> String {
    let names = device_names(
        tiered,
        1 + b.iter().map(|x| x.0 as usize).max().unwrap_or(0),
    );
    let mut s: Vec<String> = b
        .iter()
        .take(8)
        .map(|(d, o)| format!("{}@{o:#x}", names[*d as usize]))
        .collect();
    if b.len() > 8 {
        s.push(format!("… {} more", b.len() - 8));
    }
    format!("[{}]", s.join(", "))
}

/// Figures of one enumerated run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunFigures {
    /// Operations in the run.
    pub ops: usize,
    /// Events in its trace.
    pub events: usize,
    /// Crash points (device events) tried.
    pub crash_points: u64,
    /// Crash states opened and checked.
    pub crash_states: u64,
    /// Crash states skipped as identical to one already checked.
    pub duplicates: u64,
    /// Failing crash states.
    pub failures: u64,
    /// Keys compared over all checks.
    pub keys_checked: u64,
    /// Over the failing states: keys whose acknowledged state was not found.
    pub acked_lost: u64,
    /// Failing states that lost acknowledged state with nothing reported.
    pub silent_loss_states: u64,
}

impl RunFigures {
    fn add(&mut self, o: &RunFigures) {
        self.ops += o.ops;
        self.events += o.events;
        self.crash_points += o.crash_points;
        self.crash_states += o.crash_states;
        self.duplicates += o.duplicates;
        self.failures += o.failures;
        self.keys_checked += o.keys_checked;
        self.acked_lost += o.acked_lost;
        self.silent_loss_states += o.silent_loss_states;
    }
}

/// What one scenario in one mode found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScenarioReport {
    /// Scenario name.
    pub scenario: String,
    /// Pool mode.
    pub mode: String,
    /// The first run.
    pub first: RunFigures,
    /// The continued runs (double crashes), summed.
    pub double: RunFigures,
    /// Continued runs.
    pub double_runs: u64,
    /// Failures (the first few per run).
    pub failures: Vec<Failure>,
    /// Failing crash states by symptom (first symptom line, numbers elided).
    pub symptoms: BTreeMap<String, u64>,
    /// Wall time.
    pub seconds: f64,
}

/// A symptom with its numbers elided, so failures group by kind.
pub fn signature(symptom: &str) -> String {
    let mut out = String::new();
    let mut prev_digit = false;
    let mut quoted = false;
    for c in symptom.chars() {
        if c == '"' {
            quoted = !quoted;
            if quoted {
                out.push_str("\"…\"");
            }
            continue;
        }
        if quoted {
            continue;
        }
        if c.is_ascii_digit() || (prev_digit && c.is_ascii_hexdigit()) || (prev_digit && c == 'x') {
            if !prev_digit {
                out.push('N');
            }
            prev_digit = true;
        } else {
            prev_digit = false;
            out.push(c);
        }
    }
    match out.char_indices().nth(140) {
        Some((i, _)) => out[..i].to_string(),
        None => out,
    }
}

/// What an enumeration found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EnumReport {
    /// Per scenario and mode.
    pub scenarios: Vec<ScenarioReport>,
    /// Totals.
    pub total: RunFigures,
    /// Wall time.
    pub seconds: f64,
}

/// The lost-block sets tried at a crash point with `unsynced` blocks.
pub fn variants(unsynced: &[BlockId], torn: &Torn, rng: &mut Rng) -> Vec<BTreeSet<BlockId>> {
    let n = unsynced.len();
    let all: BTreeSet<BlockId> = unsynced.iter().copied().collect();
    if n == 0 {
        return vec![BTreeSet::new()];
    }
    if n <= torn.exhaustive_upto as usize {
        return (0u64..1 << n)
            .map(|m| {
                (0..n)
                    .filter(|i| m & (1 << i) != 0)
                    .map(|i| unsynced[i])
                    .collect()
            })
            .collect();
    }
    let mut out = vec![all, BTreeSet::new()];
    out.extend(singles(unsynced, torn.singles_upto as usize).map(|b| [b].into_iter().collect()));
    for _ in 0..torn.random {
        out.push(
            unsynced
                .iter()
                .filter(|_| rng.below(2) == 0)
                .copied()
                .collect(),
        );
    }
    out
}

/// The blocks lost alone at a crash point: the first `upto` unsynced blocks,
/// and always the first and last of each device. A burst's edges are where
/// a single lost block matters most: the open segment's rewritten tail
/// before the burst's new segments, and the pad's wrap marker at the ring's
/// end, written just before the next lap's first batch (issue 44 found that
/// CI-sized runs never lost the marker alone).
fn singles(unsynced: &[BlockId], upto: usize) -> impl Iterator<Item = BlockId> + '_ {
    let mut edges = BTreeSet::new();
    for dev in unsynced.iter().map(|b| b.0).collect::<BTreeSet<_>>() {
        let mut on = unsynced.iter().filter(|b| b.0 == dev);
        edges.extend(on.next());
        edges.extend(on.next_back());
    }
    let first: BTreeSet<BlockId> = unsynced.iter().take(upto).copied().collect();
    let extra: Vec<BlockId> = edges.difference(&first).copied().collect();
    unsynced.iter().take(upto).copied().chain(extra)
}

/// How long opening and checking one crash state may take before it counts
/// as a hang (the checks themselves take milliseconds).
pub const STATE_TIMEOUT: Duration = Duration::from_secs(120);

/// Opens a crash state and checks it against `exp`. Runs on its own thread:
/// an open or a read that never returns is reported as a hang (with
/// `Db::debug_state` when the open got that far) instead of stopping the
/// enumeration; the stuck thread is left behind.
pub fn check_state(setup: &Setup, devs: &[MemDevice], exp: &Expected) -> model::Checked {
    let slot: Arc<Mutex<Option<Arc<Db>>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let (setup2, devs2, exp2, slot2) = (setup.clone(), devs.to_vec(), exp.clone(), slot.clone());
    let spawned = std::thread::Builder::new()
        .name("masse-enum-check".into())
        .spawn(move || {
            let _ = tx.send(open_and_check(&setup2, &devs2, &exp2, &slot2));
        });
    if let Err(e) = spawned {
        return failed(format!("cannot start a check thread: {e}"));
    }
    match rx.recv_timeout(STATE_TIMEOUT) {
        Ok(c) => c,
        Err(_) => {
            let db = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
            failed(format!(
                "hang: opening and checking this crash state did not finish in {} s; {}",
                STATE_TIMEOUT.as_secs(),
                db.map_or("the open (recovery) never returned".into(), |d| d
                    .debug_state())
            ))
        }
    }
}

fn failed(msg: String) -> model::Checked {
    model::Checked {
        violations: vec![msg],
        ..Default::default()
    }
}

fn open_and_check(
    setup: &Setup,
    devs: &[MemDevice],
    exp: &Expected,
    slot: &Mutex<Option<Arc<Db>>>,
) -> model::Checked {
    let db = match Db::open(&setup.config_mem(devs), options(setup)) {
        Ok(db) => Arc::new(db),
        Err(e) => return failed(format!("open (recovery) failed: {e}")),
    };
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(db.clone());
    let mut c = check_db(&db, exp);
    if !c.violations.is_empty() {
        c.violations.extend(trace_keys(&db, &c.bad_keys));
    }
    slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    c
}

fn context(rec: &Recorded, k: usize, tr: &Tracker) -> String {
    let names = device_names(rec.setup.mode == "tiered", rec.setup.sizes().len());
    let ev = rec.events[k - 1].describe(&names);
    let fl: Vec<String> = tr
        .in_flight()
        .iter()
        .filter_map(|&i| Some(format!("op {i}: {}", rec.ops.get(i as usize)?.describe())))
        .collect();
    if fl.is_empty() {
        format!("after {ev}; nothing in flight")
    } else {
        format!("after {ev}; in flight: {}", fl.join(", "))
    }
}

struct Task {
    k: usize,
    lost: BTreeSet<BlockId>,
    unsynced: usize,
    devs: Vec<MemDevice>,
    exp: Expected,
    context: String,
}

/// What the checker threads of one enumeration share.
struct Checkers<'a> {
    rec: &'a Recorded,
    max_failures: usize,
    failures: Mutex<Vec<CrashSpec>>,
    stop: AtomicBool,
    keys: AtomicU64,
    states: AtomicU64,
    lost: AtomicU64,
    silent: AtomicU64,
}

impl Checkers<'_> {
    /// Checks crash states until the channel closes.
    fn work(&self, rx: &Mutex<mpsc::Receiver<Task>>) {
        loop {
            let task = match rx.lock() {
                Ok(r) => r.recv(),
                Err(_) => return,
            };
            let Ok(t) = task else { return };
            if self.stop.load(SeqCst) {
                continue;
            }
            let c = check_state(&self.rec.setup, &t.devs, &t.exp);
            self.keys.fetch_add(c.keys, SeqCst);
            self.states.fetch_add(1, SeqCst);
            self.lost.fetch_add(c.lost_keys, SeqCst);
            self.silent
                .fetch_add(u64::from(c.lost_keys > 0 && !c.reported), SeqCst);
            if c.violations.is_empty() {
                continue;
            }
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            f.push(CrashSpec {
                k: t.k,
                lost: t.lost.into_iter().collect(),
                unsynced: t.unsynced,
                symptom: c.violations,
                context: t.context,
            });
            if f.len() >= self.max_failures {
                self.stop.store(true, SeqCst);
            }
        }
    }
}

/// Enumerates the crash points of `rec`; `every`: check every n-th one.
/// `progress(points done, points)`.
pub fn enumerate_run(
    rec: &Recorded,
    cfg: &EnumConfig,
    every: usize,
    mut progress: impl FnMut(u64, u64),
) -> (RunFigures, Vec<CrashSpec>) {
    let points: Vec<usize> = crash_points(rec, cfg.focus_only, every);
    let mut fig = RunFigures {
        ops: rec.ops.len(),
        events: rec.events.len(),
        ..Default::default()
    };
    let ck = Checkers {
        rec,
        max_failures: cfg.max_failures,
        failures: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        keys: AtomicU64::new(0),
        states: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        silent: AtomicU64::new(0),
    };
    let (tx, rx) = mpsc::sync_channel::<Task>(cfg.jobs.max(1) * 2);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for _ in 0..cfg.jobs.max(1) {
            s.spawn(|| ck.work(&rx));
        }
        let mut rp = Replayer::new(&rec.base);
        let mut tr = Tracker::new(&rec.ops, &rec.base_state);
        let mut rng = Rng::new(cfg.seed);
        let mut seen: HashSet<(u64, usize, usize)> = HashSet::new();
        let mut next = points.iter().peekable();
        for (i, e) in rec.events.iter().enumerate() {
            rp.apply(e);
            tr.apply(e);
            if next.next_if_eq(&&(i + 1)).is_none() {
                continue;
            }
            if ck.stop.load(SeqCst) {
                break;
            }
            fig.crash_points += 1;
            progress(fig.crash_points, points.len() as u64);
            let unsynced = rp.unsynced();
            for lost in variants(&unsynced, &cfg.torn, &mut rng) {
                if !seen.insert((rp.state_digest(&lost), tr.begins, tr.ends)) {
                    fig.duplicates += 1;
                    continue;
                }
                let t = Task {
                    k: i + 1,
                    devs: rp.crash_state(&lost),
                    lost,
                    unsynced: unsynced.len(),
                    exp: tr.expected(),
                    context: context(rec, i + 1, &tr),
                };
                if tx.send(t).is_err() {
                    break;
                }
            }
        }
        drop(tx);
    });
    fig.crash_states = ck.states.load(SeqCst);
    fig.keys_checked = ck.keys.load(SeqCst);
    fig.acked_lost = ck.lost.load(SeqCst);
    fig.silent_loss_states = ck.silent.load(SeqCst);
    let mut f = ck.failures.into_inner().unwrap_or_else(|p| p.into_inner());
    f.sort_by_key(|c| c.k);
    fig.failures = f.len() as u64;
    (fig, f)
}

/// Crash points of a run: `k` such that event `k - 1` is a device event.
fn crash_points(rec: &Recorded, focus_only: bool, every: usize) -> Vec<usize> {
    let in_focus = |k: usize| {
        !focus_only || rec.focus.is_empty() || rec.focus.iter().any(|&(a, b)| k > a && k <= b)
    };
    rec.events
        .iter()
        .enumerate()
        .filter(|(i, e)| i + 1 >= rec.first_crash && e.is_device_event() && in_focus(i + 1))
        .map(|(i, _)| i + 1)
        .enumerate()
        .filter(|(j, _)| j % every.max(1) == 0)
        .map(|(_, k)| k)
        .collect()
}

/// The header of a saved trace: the run, and its failing crash states.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedRun {
    /// Scenario name.
    pub scenario: String,
    /// `first run` or `after crash …`.
    pub run: String,
    /// The pool.
    pub setup: Setup,
    /// The run's operations.
    pub ops: Vec<Op>,
    /// Acknowledged state before the first event.
    pub base_state: BTreeMap<u32, KeyState>,
    /// First crash point.
    pub first_crash: usize,
    /// Focus ranges.
    pub focus: Vec<(usize, usize)>,
    /// The failing crash states.
    pub failures: Vec<CrashSpec>,
    /// Damaged blocks that broke a guarantee ([`crate::damage`]).
    #[serde(default)]
    pub damage: Vec<crate::damage::DamageSpec>,
}

/// Saves `rec` with its failing crash states; returns the file.
pub fn save_run(
    rec: &Recorded,
    scenario: &str,
    run: &str,
    failures: &[CrashSpec],
    dir: &Path,
) -> std::io::Result<PathBuf> {
    save_run_with(rec, scenario, run, failures, &[], dir)
}

/// Saves `rec` with its failing crash states and damage cases.
pub fn save_run_with(
    rec: &Recorded,
    scenario: &str,
    run: &str,
    failures: &[CrashSpec],
    damage: &[crate::damage::DamageSpec],
    dir: &Path,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let tag: String = run
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("{scenario}-{}-{tag}.trace", rec.setup.mode));
    let header = SavedRun {
        scenario: scenario.to_string(),
        run: run.to_string(),
        setup: rec.setup.clone(),
        ops: rec.ops.clone(),
        base_state: rec.base_state.clone(),
        first_crash: rec.first_crash,
        focus: rec.focus.clone(),
        failures: failures.to_vec(),
        damage: damage.to_vec(),
    };
    let header = serde_json::to_string(&header).map_err(std::io::Error::other)?;
    TraceFile {
        header,
        base: rec.base.clone(),
        events: rec.events.clone(),
    }
    .save(&path)?;
    Ok(path)
}

/// Loads a saved trace.
pub fn load_run(path: &Path) -> std::io::Result<(SavedRun, Recorded)> {
    let f = TraceFile::load(path)?;
    let h: SavedRun = serde_json::from_str(&f.header)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let rec = Recorded {
        setup: h.setup.clone(),
        ops: h.ops.clone(),
        base: f.base,
        base_state: h.base_state.clone(),
        events: f.events,
        first_crash: h.first_crash,
        focus: h.focus.clone(),
    };
    Ok((h, rec))
}

/// The crash state after the first `k` events of `rec` with `lost` blocks
/// lost, and the expected state there.
pub fn rebuild(
    rec: &Recorded,
    k: usize,
    lost: &BTreeSet<BlockId>,
) -> (Vec<MemDevice>, Expected, String) {
    let mut rp = Replayer::new(&rec.base);
    let mut tr = Tracker::new(&rec.ops, &rec.base_state);
    for e in &rec.events[..k.min(rec.events.len())] {
        rp.apply(e);
        tr.apply(e);
    }
    let ctx = if k > 0 && k <= rec.events.len() {
        context(rec, k, &tr)
    } else {
        String::new()
    };
    (rp.crash_state(lost), tr.expected(), ctx)
}

/// A saved failing crash state checked again.
#[derive(Clone, Debug, Serialize)]
pub struct Replayed {
    /// As saved.
    pub saved: CrashSpec,
    /// What the check finds now (empty: the state is correct now).
    pub now: Vec<String>,
}

/// Rebuilds the saved failing crash states of a trace file, and its damaged
/// blocks (all, or the `which`-th of the list, crash states first), and
/// checks each again.
pub fn replay(path: &Path, which: Option<usize>) -> std::io::Result<(SavedRun, Vec<Replayed>)> {
    let (h, rec) = load_run(path)?;
    let mut out = Vec::new();
    for (i, spec) in h.failures.iter().enumerate() {
        if which.is_some_and(|w| w != i) {
            continue;
        }
        let lost: BTreeSet<BlockId> = spec.lost.iter().copied().collect();
        let (devs, exp, _) = rebuild(&rec, spec.k, &lost);
        let c = check_state(&rec.setup, &devs, &exp);
        out.push(Replayed {
            saved: spec.clone(),
            now: c.violations,
        });
    }
    for (j, d) in h.damage.iter().enumerate() {
        if which.is_some_and(|w| w != h.failures.len() + j) {
            continue;
        }
        let v = crate::damage::replay_damage(&rec, d);
        out.push(Replayed {
            saved: CrashSpec {
                k: d.k,
                lost: d.lost.clone(),
                unsynced: d.lost.len(),
                symptom: d.symptom.clone(),
                context: format!("{} damaged ({})", d.target.what, d.target.kind),
            },
            now: v.symptom,
        });
    }
    Ok((h, out))
}

/// The command that replays a saved trace.
pub fn replay_command(path: &Path) -> String {
    format!("masse stress --replay-trace {}", path.display())
}

/// Reports `specs` of a run as failures, saving the trace if configured.
fn report_failures(
    rep: &mut ScenarioReport,
    rec: &Recorded,
    run: &str,
    specs: Vec<CrashSpec>,
    cfg: &EnumConfig,
) {
    if specs.is_empty() {
        return;
    }
    for spec in &specs {
        let sig = signature(spec.symptom.first().map_or("", |s| s.as_str()));
        *rep.symptoms.entry(sig).or_default() += 1;
    }
    let file = cfg
        .save_dir
        .as_ref()
        .and_then(|d| save_run(rec, &rep.scenario, run, &specs, d).ok());
    // The first failure of each kind of symptom.
    let mut kinds = HashSet::new();
    for spec in specs {
        let sig = signature(spec.symptom.first().map_or("", |s| s.as_str()));
        if !kinds.insert(sig) || kinds.len() > 6 {
            continue;
        }
        rep.failures.push(Failure {
            scenario: rep.scenario.clone(),
            mode: rep.mode.clone(),
            run: run.to_string(),
            events: rec.events.len(),
            crash: spec,
            trace_file: file.clone(),
            replay: file.as_deref().map(replay_command),
        });
    }
}

/// Crash states a first run continues from: evenly spaced crash points, each
/// with all unsynced blocks lost, none lost, or a random subset lost; and as
/// many **torn** ones: crash points inside a burst of several unsynced
/// blocks, with only its first (or, every other pick, its last) block lost.
/// A torn burst's judgement must hold through the history that follows
/// (the follow-up's GC frees bands, then more crashes): the histories of
/// issue 44.
fn double_picks(rec: &Recorded, cfg: &EnumConfig) -> Vec<(usize, BTreeSet<BlockId>)> {
    let pts = crash_points(rec, false, 1);
    let n = cfg.double_crashes.min(pts.len());
    let mut rng = Rng::new(cfg.seed ^ 0xd0b1e);
    let unsynced_at = |k: usize| {
        let mut rp = Replayer::new(&rec.base);
        rec.events[..k].iter().for_each(|e| rp.apply(e));
        rp.unsynced()
    };
    let mut picks: Vec<(usize, BTreeSet<BlockId>)> = (0..n)
        .map(|j| {
            let k = pts[(j + 1) * pts.len() / (n + 1)];
            let u = unsynced_at(k);
            let lost = match j % 3 {
                0 => u.into_iter().collect(),
                1 => BTreeSet::new(),
                _ => u.into_iter().filter(|_| rng.below(2) == 0).collect(),
            };
            (k, lost)
        })
        .collect();
    let bursts: Vec<(usize, Vec<BlockId>)> = pts
        .iter()
        .map(|&k| (k, unsynced_at(k)))
        .filter(|(_, u)| u.len() >= 2)
        .collect();
    let m = cfg.double_crashes.min(bursts.len());
    picks.extend((0..m).map(|j| {
        let (k, u) = &bursts[(j + 1) * bursts.len() / (m + 1)];
        let one = if j % 2 == 0 { u[0] } else { u[u.len() - 1] };
        (*k, [one].into_iter().collect())
    }));
    picks
}

/// Continues a first run from the crash state (`k`, `lost`): opens it on
/// recording devices, runs the follow-up scenario, and returns that run.
fn continue_after(
    rec: &Recorded,
    k: usize,
    lost: &BTreeSet<BlockId>,
) -> Result<Option<Recorded>, String> {
    let (devs, exp, _) = rebuild(rec, k, lost);
    let image = Image::read(&devs).map_err(|e| e.to_string())?;
    let c = check_state(&rec.setup, &devs, &exp);
    if !c.violations.is_empty() {
        return Ok(None); // this crash state already failed in the enumeration
    }
    let mut s =
        Script::after_crash(&rec.setup, image, exp.acked.clone(), c.applied).map_err(|v| v.0)?;
    scenarios::follow_up(&mut s).map_err(|v| v.0)?;
    s.finish().map(Some).map_err(|v| v.0)
}

/// Runs one scenario in one mode: the first run, its enumeration, and the
/// double crashes. `progress(run label, done, total)`.
pub fn run_scenario(
    sc: &scenarios::Scenario,
    mode: &str,
    cfg: &EnumConfig,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> ScenarioReport {
    let t0 = Instant::now();
    let mut rep = ScenarioReport {
        scenario: sc.name.to_string(),
        mode: mode.to_string(),
        ..Default::default()
    };
    let rec = match sc.record_with(mode, cfg.scale, cfg.format, cfg.gc_separate) {
        Ok(r) => r,
        Err(v) => {
            rep.first.failures = 1;
            rep.failures
                .push(live_failure(&rep, "first run (live)", v.0, None));
            return rep;
        }
    };
    let (fig, specs) = enumerate_run(&rec, cfg, cfg.every, |d, t| progress("first run", d, t));
    rep.first = fig;
    report_failures(&mut rep, &rec, "first run", specs, cfg);
    for (k, lost) in double_picks(&rec, cfg) {
        let label = format!("after crash at event {k}");
        match continue_after(&rec, k, &lost) {
            Ok(None) => {}
            Ok(Some(rec2)) => {
                let (fig, specs) =
                    enumerate_run(&rec2, cfg, cfg.double_every, |d, t| progress(&label, d, t));
                rep.double.add(&fig);
                rep.double_runs += 1;
                report_failures(&mut rep, &rec2, &label, specs, cfg);
            }
            Err(msg) => {
                // The continued run itself broke a guarantee: keep the first crash state.
                let spec = CrashSpec {
                    k,
                    lost: lost.iter().copied().collect(),
                    unsynced: 0,
                    symptom: vec![msg],
                    context: format!("{label}, live"),
                };
                rep.double.failures += 1;
                report_failures(&mut rep, &rec, &format!("{label} (live)"), vec![spec], cfg);
            }
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    rep
}

fn live_failure(rep: &ScenarioReport, run: &str, msg: String, k: Option<usize>) -> Failure {
    Failure {
        scenario: rep.scenario.clone(),
        mode: rep.mode.clone(),
        run: run.to_string(),
        events: 0,
        crash: CrashSpec {
            k: k.unwrap_or(0),
            lost: Vec::new(),
            unsynced: 0,
            symptom: vec![msg],
            context: "live run".into(),
        },
        trace_file: None,
        replay: None,
    }
}

/// Runs the scenarios whose names match `filter` (all when empty) in the
/// modes matching `modes` (all when empty).
pub fn run_all(
    filter: &[String],
    modes: &[String],
    cfg: &EnumConfig,
    progress: &mut dyn FnMut(&str, &str, &str, u64, u64),
) -> EnumReport {
    let t0 = Instant::now();
    let mut rep = EnumReport::default();
    for sc in scenarios::all() {
        if !filter.is_empty() && !filter.iter().any(|f| f == sc.name) {
            continue;
        }
        for &mode in sc.modes {
            if !modes.is_empty() && !modes.iter().any(|m| m == mode) {
                continue;
            }
            let r = run_scenario(&sc, mode, cfg, &mut |run, d, t| {
                progress(sc.name, mode, run, d, t)
            });
            rep.total.add(&r.first);
            rep.total.add(&r.double);
            rep.scenarios.push(r);
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_elide_numbers_and_keys() {
        assert_eq!(
            signature("get of key 12 failed: record for key \"1f-abc\" at segment 3 offset 0x40"),
            "get of key N failed: record for key \"…\" at segment N offset N"
        );
        assert_eq!(signature(&"x".repeat(500)).chars().count(), 140);
    }

    #[test]
    fn torn_variants_cover_the_unsynced_blocks() {
        let torn = Torn {
            exhaustive_upto: 3,
            singles_upto: 2,
            random: 1,
        };
        let mut rng = Rng::new(1);
        let three: Vec<BlockId> = vec![(0, 0), (0, 4096), (1, 0)];
        let v = variants(&three, &torn, &mut rng);
        assert_eq!(v.len(), 8, "every subset of 3 blocks");
        assert_eq!(v.iter().collect::<BTreeSet<_>>().len(), 8);
        let five: Vec<BlockId> = (0..5).map(|i| (0, i * 4096)).collect();
        let v = variants(&five, &torn, &mut rng);
        assert_eq!(
            v.len(),
            2 + 3 + 1,
            "all, none, two first singles and the device's last block alone, one random"
        );
        assert!(
            v.contains(&[(0, 4 * 4096)].into_iter().collect()),
            "the last block alone"
        );
        assert_eq!(v[0].len(), 5);
        assert!(v[1].is_empty());
        assert_eq!(variants(&[], &torn, &mut rng), vec![BTreeSet::new()]);
    }
}
