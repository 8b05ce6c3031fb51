//! The public handle: [`Db`], [`WriteBatch`] and [`Iter`].
//!
//! A thin layer over the engine (`engine/`): it checks its arguments, encodes
//! records, submits them to the group commit (`engine/commit.rs`), waits for
//! GC when a write has no space, and starts and stops the engine's threads —
//! the single writer (`engine/writer.rs`) and maintenance
//! (`engine/maintenance.rs`).

use crate::config::{Options, PoolConfig};
use crate::engine::check::{self, CheckReport};
use crate::engine::request::{Outcome, PendingRecord, RecordKind, Req, WriteClass};
use crate::engine::state::Engine;
use crate::engine::status::BandStatus;
use crate::engine::{checkpoint, damage, gc, maintenance, recovery, replay, report, writer};
use crate::error::{Error, Result};
use crate::format::*;
use crate::pool::{self, Pool};
use crate::stats::{Op, Stats};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Background work running at one instant (see [`Db::activity`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// A GC pass is choosing or emptying a band.
    pub gc: bool,
    /// An index checkpoint is being written.
    pub checkpoint: bool,
}

// ---------------------------------------------------------------------------
// Public handle

/// A masse pool, open for reads and writes. `Send + Sync`: share it with `Arc`.
pub struct Db {
    pub(crate) engine: Arc<Engine>,
    /// The writer thread, joined last: background work still needs it.
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Background threads (maintenance), joined before the writer is drained.
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
}

/// Several puts and deletes applied atomically: after a crash, all or none.
#[derive(Default)]
pub struct WriteBatch {
    recs: Vec<PendingRecord>,
    bytes: u64,
    deletes: u64,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }
    /// Add a put.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_kv(key, value)?;
        // The digest depends on the pool (format v2 keys it): set by `Db::write`.
        self.recs
            .push(PendingRecord::new(key, value, false, RecordKind::Put));
        self.bytes += (key.len() + value.len()) as u64;
        Ok(())
    }
    /// Add a delete.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        check_kv(key, b"")?;
        self.recs
            .push(PendingRecord::new(key, b"", true, RecordKind::Delete));
        self.deletes += 1;
        Ok(())
    }
    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.recs.len()
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
}

fn check_kv(key: &[u8], value: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

impl Db {
    /// Format the devices in `cfg` as a new pool and open it. Refuses devices that
    /// already hold a masse pool.
    pub fn create(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        opts.validate()?;
        let pool = pool::create(cfg, false)?;
        Self::start(pool, opts)
    }

    /// Like [`Db::create`], but overwrites an existing pool on the devices.
    pub fn create_force(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        opts.validate()?;
        let pool = pool::create(cfg, true)?;
        Self::start(pool, opts)
    }

    /// Open an existing pool; recovers from a crash if the last run did not close.
    pub fn open(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        opts.validate()?;
        let pool = pool::open(cfg)?;
        Self::start(pool, opts)
    }

    /// Recover the pool, then start the writer, re-apply the pad and start
    /// maintenance.
    fn start(pool: Pool, opts: Options) -> Result<Db> {
        let t0 = Instant::now();
        let (epoch, clean, damage_rec) = begin_epoch(&pool)?;
        let engine = Arc::new(Engine::new(pool, opts, epoch));
        damage::carry(&engine, damage_rec);
        // Rebuild the index and band table; then start the writer and replay the pad.
        let pad_recs = recovery::recover(&engine, clean)?;
        damage::after_recovery(&engine)?;
        let replay = replay::still_needed(&engine, pad_recs)?;
        engine.recovery.lock().pad_skipped = replay.skipped;
        let db = Db {
            engine: engine.clone(),
            writer: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        };
        let (e, rx) = (engine.clone(), engine.writer.open());
        *db.writer.lock() = Some(spawn("masse-writer", "writer", move || writer::run(e, rx))?);
        let npad = replay.groups.iter().map(|g| g.len() as u64).sum();
        replay::place(&engine, replay.groups)?;
        // Replayed records in the held segment would otherwise stay only on the
        // pad until the next segment fills, and be placed again after another
        // crash; send it now, as before the held segment existed.
        engine.release_held()?;
        if let Some(p) = &engine.pad {
            p.end_hold();
        }
        log_open(&engine, t0, npad);
        let e = engine.clone();
        let h = spawn("masse-maint", "maintenance", move || maintenance::run(e))?;
        db.threads.lock().push(h);
        Ok(db)
    }

    /// Store `value` under `key`. Returns once the write is durable.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let t = Instant::now();
        check_kv(key, value)?;
        let e = &self.engine;
        let mut rec = PendingRecord::new(key, value, false, RecordKind::Put);
        rec.digest = e.digest(key);
        e.check_record_fits(rec.len(e.layout.codec))?;
        self.write_records(vec![rec], WriteClass::User)?;
        e.counters.puts.fetch_add(1, Relaxed);
        e.counters
            .user_bytes
            .fetch_add((key.len() + value.len()) as u64, Relaxed);
        e.record(Op::Put, t);
        Ok(())
    }

    /// Remove `key`. Returns whether it existed. Durable on return.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let t = Instant::now();
        check_kv(key, b"")?;
        let mut rec = PendingRecord::new(key, b"", true, RecordKind::Delete);
        rec.digest = self.engine.digest(key);
        let n = self.write_records(vec![rec], WriteClass::Delete)?;
        self.engine.counters.deletes.fetch_add(1, Relaxed);
        self.engine.record(Op::Delete, t);
        Ok(n > 0)
    }

    /// Apply a batch atomically. Durable on return.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let e = &self.engine;
        let class = if batch.deletes as usize == batch.recs.len() {
            WriteClass::Delete
        } else {
            WriteClass::User
        };
        let max = e.max_group_bytes();
        let codec = e.layout.codec;
        let total: usize = batch.recs.iter().map(|r| r.batch_cost()).sum();
        if total > max {
            return Err(Error::TooLarge {
                what: "write batch",
                len: total,
                max,
            });
        }
        for r in &batch.recs {
            e.check_record_fits(r.len(codec))?;
        }
        let (n, bytes, deletes) = (batch.recs.len() as u64, batch.bytes, batch.deletes);
        let mut recs = batch.recs;
        for r in &mut recs {
            r.digest = e.digest(r.key());
        }
        self.write_records(recs, class)?;
        let c = &e.counters;
        c.batches.fetch_add(1, Relaxed);
        c.puts.fetch_add(n - deletes, Relaxed);
        c.deletes.fetch_add(deletes, Relaxed);
        c.user_bytes.fetch_add(bytes, Relaxed);
        e.record(Op::Batch, t);
        Ok(())
    }

    /// Submit records as one atomic group, waiting for GC to make space if needed.
    fn write_records(&self, recs: Vec<PendingRecord>, class: WriteClass) -> Result<u32> {
        let e = &self.engine;
        let mut req = Req::new(recs, class, e.layout.codec);
        let mut stalled_since: Option<Instant> = None;
        loop {
            e.check_failed()?;
            match e.submit(req.clone()) {
                Outcome::Done(n) => {
                    if let Some(t) = stalled_since {
                        let waited = t.elapsed().as_micros() as u64;
                        tracing::debug!(waited_us = waited, "write stalled for free space");
                        e.counters.stalls.fetch_add(1, Relaxed);
                        e.counters.stall_us.fetch_add(waited, Relaxed);
                    }
                    return Ok(n);
                }
                Outcome::Failed(m) => return Err(Error::Closed(m)),
                Outcome::Stalled => {
                    stalled_since.get_or_insert_with(Instant::now);
                    gc::wait_for_space(e, class, &req.recs)?;
                    // The leader may still hold the request; stalls are rare, so copy.
                    req = Req::new(req.recs.clone(), class, e.layout.codec);
                }
            }
        }
    }

    /// The largest write batch, in encoded bytes, that [`Db::write`] accepts as one
    /// atomic group (records cost their key + value + a 24-byte header, rounded up
    /// to 8 bytes, in every format version: about what a version-3 record takes
    /// with its summary entry). Layers that batch many records use it to split
    /// their work.
    pub fn max_batch_bytes(&self) -> usize {
        self.engine.max_group_bytes()
    }

    /// The value stored under `key`, if any. An empty value is a value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let t = Instant::now();
        check_kv(key, b"")?;
        let e = &self.engine;
        let r = e.get(key);
        e.counters.gets.fetch_add(1, Relaxed);
        if let Ok(Some(v)) = &r {
            e.counters.get_hits.fetch_add(1, Relaxed);
            e.counters.read_bytes.fetch_add(v.len() as u64, Relaxed);
        }
        e.record(Op::Get, t);
        r
    }

    /// The values stored under `keys`, in order, with their device reads issued
    /// together (one io_uring submission per capacity device) rather than one after
    /// another: a caller that needs several records at once, such as a file read
    /// spanning several chunks, waits for about one device read instead of one each.
    /// Each answer is what [`Db::get`] would return for its key at some moment
    /// during the call; the first error ends the call.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let t = Instant::now();
        for k in keys {
            check_kv(k, b"")?;
        }
        let e = &self.engine;
        let r = e.get_many(keys);
        if let Ok(vals) = &r {
            e.counters.gets.fetch_add(vals.len() as u64, Relaxed);
            for v in vals.iter().flatten() {
                e.counters.get_hits.fetch_add(1, Relaxed);
                e.counters.read_bytes.fetch_add(v.len() as u64, Relaxed);
            }
            for _ in 0..vals.len() {
                e.record(Op::Get, t);
            }
        }
        r
    }

    /// True if `key` holds a value. Costs one device read to verify the key.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Whether the DRAM index holds a live entry for `key`, without a device read.
    /// `false` is exact; `true` is a 64-bit fingerprint match, so it may (rarely) be
    /// another key's entry. For callers that only need a hint, such as block
    /// allocation status, where a spurious "present" is harmless.
    pub fn may_contain(&self, key: &[u8]) -> Result<bool> {
        check_kv(key, b"")?;
        Ok(match self.engine.index.get(self.engine.digest(key)) {
            Some(l) => !Loc(l).is_tombstone(),
            None => false,
        })
    }

    /// Unordered iteration over live keys and values. Holds off GC while it lives,
    /// so records cannot move under it; writes made meanwhile may or may not be seen.
    pub fn iter(&self) -> Iter<'_> {
        self.engine.iterators.fetch_add(1, SeqCst);
        let guard = self.engine.gc_lock.lock();
        Iter {
            db: self,
            _gc: guard,
            shard: 0,
            locs: Vec::new(),
            pos: 0,
        }
    }

    /// Wait until every segment closed so far is on the capacity tier,
    /// the one held for absorbed overwrites (design.md §4.10) included.
    /// (Acknowledged writes are already durable; this only sends the held
    /// segment and drains the writer.)
    pub fn flush(&self) -> Result<()> {
        self.engine.check_failed()?;
        self.engine.release_held()?;
        self.engine.writer_barrier()
    }

    /// Seal the open segments now and wait until every segment is on the
    /// capacity tier: the write pad then holds nothing the capacity tier
    /// lacks. For crash tests, which need crash states where recovery has
    /// only the capacity tier to go by. Each call costs the unused rest of
    /// the open segments, so it is no part of the normal API.
    #[doc(hidden)]
    pub fn seal_open_segments(&self) -> Result<()> {
        self.engine.check_failed()?;
        self.engine.seal_open()?;
        self.engine.writer_barrier()
    }

    /// Run one GC pass now (normally GC runs by itself). Returns whether a band was freed.
    pub fn gc_once(&self) -> Result<bool> {
        Ok(matches!(
            gc::gc_pass(&self.engine, gc::Pass::OnDemand)?,
            gc::GcOutcome::Freed { .. }
        ))
    }

    /// Write an index checkpoint now.
    pub fn checkpoint(&self) -> Result<()> {
        checkpoint::checkpoint(&self.engine).map(|_| ())
    }

    /// Close cleanly: drain the writer, checkpoint the index, stop the threads.
    pub fn close(self) -> Result<()> {
        self.shutdown(true)
    }

    fn shutdown(&self, clean: bool) -> Result<()> {
        if self.closed.swap(true, SeqCst) {
            return Ok(());
        }
        let e = &self.engine;
        {
            let mut s = e.stop.0.lock();
            *s = true;
            e.stop.1.notify_all();
        }
        // Background work ends first (a GC pass stops at its next segment): a
        // pass still running moved records while the index was checkpointed and
        // then found the writer gone, failing the database at close, so the
        // clean epoch was skipped.
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // A database that failed says so at close, with the cause.
        let mut res = if clean { e.check_failed() } else { Ok(()) };
        if clean && res.is_ok() {
            // Every open segment holds the pad from its first batch on; sealed
            // and written here, the next open has nothing to replay. Sealing
            // only the GC stream's left the user stream's, and a user segment
            // idle while GC ran held every GC batch since: the next open
            // placed those records again, a second copy of each, and a pool
            // near full failed to open ("no free band", design.md §9.5).
            res = e.seal_open().and_then(|_| e.writer_barrier());
            if res.is_ok() && e.opts.checkpoint_on_close {
                res = checkpoint::checkpoint(e).map(|_| ());
            }
        }
        // Stop the writer: closing its queue ends its loop once drained.
        e.writer.close();
        if let Some(t) = self.writer.lock().take() {
            let _ = t.join();
        }
        if clean && res.is_ok() && e.check_failed().is_ok() {
            // A new epoch in the other copy: the current copy is never rewritten in place.
            let b = EpochBlock {
                epoch: e.epoch + 1,
                pool_tag: e.tag,
                clean: 1,
                damage: damage::at_close(e),
            };
            res = pool::write_epoch(&e.pool, &b);
        }
        tracing::info!(clean = clean && res.is_ok(), "pool closed");
        res
    }

    /// The Segment Status Table (paper §2.6): per band its state and invalid bytes,
    /// per segment its use state, free size and death (invalid) size.
    pub fn band_status(&self) -> Vec<BandStatus> {
        let e = &self.engine;
        let open: Vec<(u64, u32)> = {
            let ws = e.write_state.lock();
            ws.open_segments()
                .map(|o| (o.buf.slot, o.room_left()))
                .collect()
        };
        let bt = e.bands.lock();
        e.status.rows(&bt.bands, &open)
    }

    /// A snapshot of the engine's counters.
    pub fn stats(&self) -> Stats {
        report::stats(&self.engine)
    }

    /// Per operation (put, get, delete, batch), how many latency samples fell at or
    /// below each bound (ascending, ns), with their count and exact sum: what a
    /// Prometheus histogram exports. `reset_latency` starts them over.
    pub fn latency_buckets(&self, bounds_ns: &[u64]) -> Vec<crate::stats::LatencyBuckets> {
        self.engine.latency.buckets(bounds_ns)
    }

    /// Forget the latency samples so far (e.g. between benchmark phases).
    pub fn reset_latency(&self) {
        self.engine.latency.reset();
    }

    /// Every record of `key` still in the pool (band, segment, offset, seq,
    /// tombstone, which one the index points at): a diagnostic for crash tests.
    pub fn trace_key(&self, key: &[u8]) -> Result<Vec<String>> {
        check::trace_key(&self.engine, key)
    }

    /// What background work is running at this instant: for crash-test harnesses
    /// that want to know what a kill interrupted, and for monitoring.
    pub fn activity(&self) -> Activity {
        Activity {
            gc: self.engine.gc_active.load(SeqCst),
            checkpoint: self.engine.ckpt_active.load(SeqCst),
        }
    }

    /// A one-paragraph dump of the write path's state (group-commit queue and
    /// leader, pad ring, bands, writer queue, failure): for hang watchdogs and
    /// bug reports. Takes only short-lived locks, so it answers even when a
    /// writer is stuck.
    pub fn debug_state(&self) -> String {
        report::debug_state(&self.engine, self.activity())
    }

    /// What the caller should know about the pool's devices, e.g. that one is
    /// on tmpfs and does not survive a reboot. `masse create` and `masse demo`
    /// print these; a library user should show them too.
    pub fn pool_warnings(&self) -> &[String] {
        &self.engine.pool.warnings
    }

    /// The pool geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.engine.pool.geo
    }

    /// The pool's on-disk format version (docs/format.md §1): 3 for pools
    /// `create` makes, 1 or 2 for older ones (which keep the version-2 records).
    pub fn format_version(&self) -> u32 {
        self.engine.pool.version
    }

    /// Offline-style consistency check of the open pool: reads every live record
    /// and verifies checksums, keys against digests, and the space accounting.
    pub fn check(&self) -> Result<CheckReport> {
        check::check(&self.engine)
    }

    /// The pool's damage record: damage found since an operator last cleared
    /// it, in this run or an earlier one (`None`: none). While it is set, a
    /// key whose newest copy was lost reads as an older value or as absent.
    pub fn damage(&self) -> Option<DamageRecord> {
        Some(damage::current(&self.engine)).filter(|d| d.is_set())
    }

    /// Clear the damage record, durably: the operator has dealt with it.
    pub fn clear_damage(&self) -> Result<()> {
        self.engine.check_failed()?;
        damage::clear(&self.engine)
    }
}

/// Start a new epoch: returns it, whether the last run closed cleanly, and
/// the damage record it carried.
fn begin_epoch(pool: &Pool) -> Result<(u64, bool, DamageRecord)> {
    let read = pool::read_epoch(pool)?;
    let prev = read.block;
    // With one copy unreadable, the lost one may have held prev + 1 (a run
    // that wrote segments with it): skip it, so no epoch is ever used twice.
    let epoch = prev.epoch + if read.both_copies { 1 } else { 2 };
    let b = EpochBlock {
        epoch,
        pool_tag: pool.pool_tag(),
        clean: 0,
        damage: prev.damage,
    };
    pool::write_epoch(pool, &b)?;
    Ok((epoch, prev.clean != 0, prev.damage))
}

/// Record and log what the open found.
fn log_open(e: &Engine, t0: Instant, npad: u64) {
    let mut r = e.recovery.lock();
    r.pad_records = npad;
    r.us = t0.elapsed().as_micros() as u64;
    tracing::info!(epoch = e.epoch, recovery = %r.source, segments_replayed = r.segments, pad_records = npad, pad_skipped = r.pad_skipped, took_ms = r.us / 1000, warnings = r.warnings.len(), "pool opened");
    r.warnings
        .iter()
        .for_each(|w| tracing::warn!(warning = %w, "recovery found damage"));
}

/// Start an engine thread; `close` and `Drop` join it.
fn spawn(name: &str, what: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::Closed(format!("cannot start the {what} thread: {e}")))
}

impl Drop for Db {
    fn drop(&mut self) {
        // Dropping without close() is a simulated crash: threads stop, nothing
        // more is written; everything acknowledged is already durable.
        let _ = self.shutdown(false);
    }
}

/// Iterator returned by [`Db::iter`].
pub struct Iter<'a> {
    db: &'a Db,
    _gc: parking_lot::MutexGuard<'a, ()>,
    shard: usize,
    locs: Vec<u64>,
    pos: usize,
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        self.db.engine.iterators.fetch_sub(1, SeqCst);
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        let e = &self.db.engine;
        loop {
            while self.pos < self.locs.len() {
                let loc = Loc(self.locs[self.pos]);
                self.pos += 1;
                if !loc.is_tombstone() {
                    return Some(read_pair(e, loc));
                }
            }
            if self.shard >= e.index.shard_count() {
                return None;
            }
            self.locs.clear();
            self.pos = 0;
            e.index.for_each_in_shard(self.shard, |l| self.locs.push(l));
            self.shard += 1;
        }
    }
}

/// The key and value of the record at `loc`, retried while an in-place update
/// overlaps the read.
fn read_pair(e: &Engine, loc: Loc) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut tries = 0;
    loop {
        let gen = e.inplace_gen.load(SeqCst);
        let r = e.with_record(loc, |b| {
            let r = e.layout.codec.decode(b)?;
            Ok((r.key.to_vec(), r.value.to_vec()))
        });
        tries += 1;
        if r.is_err() && tries < 16 && e.inplace_raced(gen) {
            continue; // an in-place update overlapped the read
        }
        return r;
    }
}
