//! Running a scenario on recording devices: the pool's geometry ([`Setup`]),
//! the operations a scenario performs ([`Script`]) and what a run leaves
//! behind ([`Recorded`]).

use super::model::{key_bytes, value_bytes, Group, KeyState, Op, Val};
use crate::trace::{Event, Image, RecordingDevice, Trace};
use crate::workload::Violation;
use masse::device::{Device, MemDevice};
use masse::{BandStatus, Db, DeviceSpec, Mode, Options, PoolConfig, TrimPolicy, WriteBatch};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A pool on in-memory devices, small enough that segments and bands are
/// crossed after a few operations.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Setup {
    /// `tiered`, `capacity-only` or `scm-only`.
    pub mode: String,
    /// Fast device size (tiered only).
    pub fast_size: u64,
    /// Capacity device size.
    pub cap_size: u64,
    /// Segment size.
    pub segment: u32,
    /// Band size.
    pub band: u64,
    /// Checkpoint slot size (capacity-only and scm-only; `None` = default).
    pub checkpoint: Option<u64>,
    /// Bands GC frees keep their contents (no TRIM, as on a pool file by
    /// default) instead of reading as zeros: reused slots hold stale records.
    #[serde(default)]
    pub keep_freed: bool,
    /// Format version the pool is created with (`None`: the newest). Only
    /// creating reads it: a recorded trace's pool opens in its own version.
    #[serde(default)]
    pub format: Option<u32>,
    /// GC moves in an open band of their own (`Options::gc_separate`; a
    /// trace recorded before the option existed had them with user writes).
    #[serde(default)]
    pub gc_separate: bool,
    /// `Options::cold_age_bands` (0: the engine's automatic, half the
    /// pool): a small value makes user writes cold within a few bands.
    #[serde(default)]
    pub cold_age: u64,
}

impl Setup {
    /// A small pool: 32 KiB segments, bands of 8 segments, about 20 bands.
    pub fn small(mode: &str) -> Setup {
        Setup {
            mode: mode.to_string(),
            fast_size: if mode == "tiered" { 40 << 20 } else { 0 },
            cap_size: 8 << 20,
            segment: 32 << 10,
            band: 4096 + 8 * (32 << 10),
            checkpoint: (mode != "tiered").then_some(1 << 20),
            keep_freed: false,
            format: None,
            gc_separate: masse::Options::default().gc_separate,
            cold_age: 0,
        }
    }

    /// The engine's mode.
    pub fn engine_mode(&self) -> Mode {
        match self.mode.as_str() {
            "tiered" => Mode::Tiered,
            "scm-only" => Mode::ScmOnly,
            _ => Mode::CapacityOnly,
        }
    }

    /// Device sizes in pool order (fast device first).
    pub fn sizes(&self) -> Vec<u64> {
        match self.engine_mode() {
            Mode::Tiered => vec![self.fast_size, self.cap_size],
            _ => vec![self.cap_size],
        }
    }

    /// The pool configuration over `devs` (in [`Setup::sizes`] order).
    pub fn config(&self, devs: Vec<Arc<dyn Device>>) -> PoolConfig {
        let mut devs = devs.into_iter().map(DeviceSpec::Device);
        let mut c = PoolConfig::default();
        if self.engine_mode() == Mode::Tiered {
            c.fast = devs.next();
        }
        c.capacity = devs.collect();
        c.mode = Some(self.engine_mode());
        c.segment_size = Some(self.segment);
        c.band_size = Some(self.band);
        c.checkpoint_size = self.checkpoint;
        c.format_version = self.format;
        c
    }

    /// The pool configuration over plain in-memory devices.
    pub fn config_mem(&self, devs: &[MemDevice]) -> PoolConfig {
        self.config(
            devs.iter()
                .map(|d| Arc::new(d.clone()) as Arc<dyn Device>)
                .collect(),
        )
    }
}

/// Engine options for scenarios: nothing happens behind the scenario's back
/// (no background GC, checkpoints only when asked and at close).
pub fn options(setup: &Setup) -> Options {
    Options {
        background_gc: false,
        checkpoint_interval: 0,
        histograms: false,
        gc_separate: setup.gc_separate,
        cold_age_bands: setup.cold_age,
        trim_freed_bands: if setup.keep_freed {
            TrimPolicy::Never
        } else {
            TrimPolicy::Auto
        },
        ..Options::default()
    }
}

/// A finished scenario run.
#[derive(Clone)]
pub struct Recorded {
    /// The pool.
    pub setup: Setup,
    /// Operations, indexed by the trace's `Begin`/`End` events.
    pub ops: Vec<Op>,
    /// Device contents before the first event.
    pub base: Image,
    /// Acknowledged key states before the first event.
    pub base_state: BTreeMap<u32, KeyState>,
    /// The trace.
    pub events: Vec<Event>,
    /// Crash points before this event index are not enumerated (pool creation).
    pub first_crash: usize,
    /// Event ranges to enumerate when only the focus is wanted (empty: all).
    pub focus: Vec<(usize, usize)>,
}

/// One write of a concurrent step.
#[derive(Clone, Debug)]
pub enum Write {
    /// A put of `len` bytes.
    Put(u32, u32),
    /// A delete.
    Delete(u32),
    /// A batch: `Some(len)` puts, `None` deletes.
    Batch(Vec<(u32, Option<u32>)>),
}

/// A scenario in progress: performs operations on a pool whose devices record
/// into one trace, logs each operation's start and acknowledgement, and keeps
/// the acknowledged state (checked live after every write).
pub struct Script {
    setup: Setup,
    cfg: PoolConfig,
    trace: Arc<Trace>,
    db: Option<Db>,
    ops: Vec<Op>,
    base: Image,
    base_state: BTreeMap<u32, KeyState>,
    state: BTreeMap<u32, KeyState>,
    max_ver: HashMap<u32, u32>,
    first_crash: usize,
    focus: Vec<(usize, usize)>,
    focus_from: Option<usize>,
}

fn err(what: &str, e: impl std::fmt::Display) -> Violation {
    Violation(format!("{what}: {e}"))
}

impl Script {
    fn new(setup: &Setup, base: Image, state: BTreeMap<u32, KeyState>) -> Script {
        let trace = Trace::new();
        let devs: Vec<Arc<dyn Device>> = base
            .to_devices()
            .into_iter()
            .enumerate()
            .map(|(i, m)| Arc::new(RecordingDevice::new(i as u8, m, trace.clone())) as _)
            .collect();
        Script {
            setup: setup.clone(),
            cfg: setup.config(devs),
            trace,
            db: None,
            ops: Vec::new(),
            base,
            max_ver: state
                .iter()
                .filter_map(|(k, s)| Some((*k, s.as_ref()?.ver)))
                .collect(),
            base_state: state.clone(),
            state,
            first_crash: 0,
            focus: Vec::new(),
            focus_from: None,
        }
    }

    /// A fresh pool; crash points start once it is created.
    pub fn create(setup: &Setup) -> Result<Script, Violation> {
        let mut s = Script::new(setup, Image::blank(&setup.sizes()), BTreeMap::new());
        s.db = Some(Db::create(&s.cfg, options(setup)).map_err(|e| err("create", e))?);
        s.first_crash = s.trace.len();
        Ok(s)
    }

    /// Opens the crash state `image` (acknowledged state `acked`; `resolved`:
    /// the in-flight groups the first recovery found applied). Crash points
    /// include the recovery itself. The recovered state is checked at once.
    pub fn after_crash(
        setup: &Setup,
        image: Image,
        acked: BTreeMap<u32, KeyState>,
        resolved: Vec<Group>,
    ) -> Result<Script, Violation> {
        let mut s = Script::new(setup, image, acked);
        let groups = resolved.clone();
        let cfg = s.cfg.clone();
        s.exec(Op::Recover { groups }, |slot| {
            *slot =
                Some(Db::open(&cfg, options(setup)).map_err(|e| err("open after the crash", e))?);
            Ok(0)
        })?;
        let keys: Vec<u32> = s.state.keys().copied().collect();
        s.read_back(
            &keys,
            "right after recovery (a second open of the same crash state)",
        )?;
        Ok(s)
    }

    /// The pool and options the script runs on.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The open database (for adaptive scenarios: band status, stats).
    pub fn db(&self) -> Result<&Db, Violation> {
        self.db
            .as_ref()
            .ok_or_else(|| Violation("the database is closed".into()))
    }

    /// The band table.
    pub fn bands(&self) -> Result<Vec<BandStatus>, Violation> {
        Ok(self.db()?.band_status())
    }

    /// Keys with their acknowledged state.
    pub fn state(&self) -> &BTreeMap<u32, KeyState> {
        &self.state
    }

    /// Trace events so far.
    pub fn events(&self) -> usize {
        self.trace.len()
    }

    /// Starts (`true`) or ends a focus range: the crash points a quick run
    /// enumerates in scenarios too long to enumerate whole.
    pub fn focus(&mut self, on: bool) {
        let now = self.trace.len();
        match (on, self.focus_from.take()) {
            (true, None) => self.focus_from = Some(now),
            (true, Some(f)) => self.focus_from = Some(f),
            (false, Some(f)) => self.focus.push((f, now)),
            (false, None) => {}
        }
    }

    fn next_val(&mut self, k: u32, len: u32) -> Val {
        let v = self.max_ver.entry(k).or_insert(0);
        *v += 1;
        Val {
            ver: *v,
            len: len.max(16),
        }
    }

    /// Logs the operation around `f`, then adopts its changes.
    fn exec(
        &mut self,
        op: Op,
        f: impl FnOnce(&mut Option<Db>) -> Result<u32, Violation>,
    ) -> Result<u32, Violation> {
        let i = self.ops.len() as u32;
        let groups = op.groups();
        self.ops.push(op);
        self.trace.push(Event::Begin { op: i });
        let r = f(&mut self.db)?;
        self.trace.push(Event::End { op: i, result: r });
        for (k, s) in groups.into_iter().flatten() {
            self.state.insert(k, s);
        }
        Ok(r)
    }

    /// Each key reads back as its acknowledged state.
    fn read_back(&self, keys: &[u32], when: &str) -> Result<(), Violation> {
        let db = self.db()?;
        for &k in keys {
            let want = self
                .state
                .get(&k)
                .copied()
                .flatten()
                .map(|v| value_bytes(k, v));
            let got = db.get(&key_bytes(k)).map_err(|e| err("get", e))?;
            if got != want {
                return Err(Violation(format!(
                    "live run, {when}: key {k} reads {}",
                    super::model::describe_value(k, got.as_deref())
                )));
            }
        }
        Ok(())
    }

    fn plan(&mut self, w: &Write) -> Op {
        match w {
            Write::Put(k, len) => Op::Put {
                key: *k,
                val: self.next_val(*k, *len),
            },
            Write::Delete(k) => Op::Delete { key: *k },
            Write::Batch(items) => Op::Batch {
                items: items
                    .iter()
                    .map(|(k, l)| (*k, l.map(|l| self.next_val(*k, l))))
                    .collect(),
            },
        }
    }

    /// Performs a write on `db`; returns a delete's "existed" as 0/1.
    fn perform(db: &Db, op: &Op) -> Result<u32, Violation> {
        match op {
            Op::Put { key, val } => db
                .put(&key_bytes(*key), &value_bytes(*key, *val))
                .map(|_| 0)
                .map_err(|e| err("put", e)),
            Op::Delete { key } => db
                .delete(&key_bytes(*key))
                .map(u32::from)
                .map_err(|e| err("delete", e)),
            Op::Batch { items } => {
                let mut b = WriteBatch::new();
                for (k, s) in items {
                    match s {
                        Some(v) => b.put(&key_bytes(*k), &value_bytes(*k, *v)),
                        None => b.delete(&key_bytes(*k)),
                    }
                    .map_err(|e| err("building a batch", e))?;
                }
                db.write(b).map(|_| 0).map_err(|e| err("batch", e))
            }
            other => Err(Violation(format!("not a write: {other:?}"))),
        }
    }

    fn write(&mut self, w: Write) -> Result<(), Violation> {
        let op = self.plan(&w);
        let keys = op.keys();
        let existed = match &op {
            Op::Delete { key } => Some(self.state.get(key).copied().flatten().is_some()),
            _ => None,
        };
        let o2 = op.clone();
        let r = self.exec(op, |db| {
            let db = db.as_ref().ok_or_else(|| Violation("closed".into()))?;
            Script::perform(db, &o2)
        })?;
        if let Some(e) = existed.filter(|&e| e != (r == 1)) {
            return Err(Violation(format!(
                "live run: delete of key {} said existed={}, the model says {e}",
                keys[0],
                r == 1
            )));
        }
        self.read_back(&keys, "after the write")
    }

    /// Puts a new version of `len` bytes (at least 16).
    pub fn put(&mut self, k: u32, len: u32) -> Result<(), Violation> {
        self.write(Write::Put(k, len))
    }

    /// Deletes a key.
    pub fn delete(&mut self, k: u32) -> Result<(), Violation> {
        self.write(Write::Delete(k))
    }

    /// An atomic batch: `Some(len)` puts, `None` deletes (distinct keys).
    pub fn batch(&mut self, items: &[(u32, Option<u32>)]) -> Result<(), Violation> {
        self.write(Write::Batch(items.to_vec()))
    }

    /// Several writes from as many threads at once (distinct keys), so the
    /// group commit takes them together and several are in flight at a crash.
    pub fn concurrent(&mut self, writes: &[Write]) -> Result<(), Violation> {
        let ops: Vec<Op> = writes.iter().map(|w| self.plan(w)).collect();
        let first = self.ops.len() as u32;
        self.ops.extend(ops.iter().cloned());
        let db = self.db()?;
        let trace = &self.trace;
        let results: Vec<Result<u32, Violation>> = std::thread::scope(|s| {
            let hs: Vec<_> = ops
                .iter()
                .enumerate()
                .map(|(j, op)| {
                    s.spawn(move || {
                        let i = first + j as u32;
                        trace.push(Event::Begin { op: i });
                        let r = Script::perform(db, op)?;
                        trace.push(Event::End { op: i, result: r });
                        Ok(r)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Violation("a writer panicked".into())))
                })
                .collect()
        });
        for r in results {
            r?;
        }
        let keys: Vec<u32> = ops.iter().flat_map(|o| o.keys()).collect();
        for (k, s) in ops.iter().flat_map(|o| o.groups()).flatten() {
            self.state.insert(k, s);
        }
        self.read_back(&keys, "after concurrent writes")
    }

    /// One GC pass; returns whether a band was freed.
    pub fn gc(&mut self) -> Result<bool, Violation> {
        self.exec(Op::Gc, |db| {
            let db = db.as_ref().ok_or_else(|| Violation("closed".into()))?;
            db.gc_once().map(u32::from).map_err(|e| err("gc", e))
        })
        .map(|r| r == 1)
    }

    /// An index checkpoint.
    pub fn checkpoint(&mut self) -> Result<(), Violation> {
        self.exec(Op::Checkpoint, |db| {
            let db = db.as_ref().ok_or_else(|| Violation("closed".into()))?;
            db.checkpoint().map(|_| 0).map_err(|e| err("checkpoint", e))
        })
        .map(|_| ())
    }

    /// Drains the writer.
    pub fn flush(&mut self) -> Result<(), Violation> {
        self.exec(Op::Flush, |db| {
            let db = db.as_ref().ok_or_else(|| Violation("closed".into()))?;
            db.flush().map(|_| 0).map_err(|e| err("flush", e))
        })
        .map(|_| ())
    }

    /// Seals the open segments and drains the writer (`Db::seal_open_segments`).
    pub fn seal_open(&mut self) -> Result<(), Violation> {
        self.exec(Op::SealOpen, |db| {
            let db = db.as_ref().ok_or_else(|| Violation("closed".into()))?;
            db.seal_open_segments()
                .map(|_| 0)
                .map_err(|e| err("seal", e))
        })
        .map(|_| ())
    }

    /// A clean close and a reopen.
    pub fn reopen(&mut self) -> Result<(), Violation> {
        let (cfg, opts) = (self.cfg.clone(), options(&self.setup));
        self.exec(Op::Reopen, |slot| {
            if let Some(db) = slot.take() {
                db.close().map_err(|e| err("close", e))?;
            }
            *slot = Some(Db::open(&cfg, opts.clone()).map_err(|e| err("reopen", e))?);
            Ok(0)
        })?;
        let keys: Vec<u32> = self.state.keys().copied().collect();
        self.read_back(&keys, "after a clean reopen")
    }

    /// Closes cleanly (if open) and returns the run.
    pub fn finish(mut self) -> Result<Recorded, Violation> {
        if self.db.is_some() {
            self.exec(Op::Close, |slot| {
                if let Some(db) = slot.take() {
                    db.close().map_err(|e| err("close", e))?;
                }
                Ok(0)
            })?;
        }
        self.focus(false);
        Ok(Recorded {
            setup: self.setup,
            ops: self.ops,
            base: self.base,
            base_state: self.base_state,
            events: self.trace.snapshot(),
            first_crash: self.first_crash,
            focus: self.focus,
        })
    }
}
