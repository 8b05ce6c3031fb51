//! The engine's shared state: the components every engine thread works on,
//! composed in one place.
//!
//! Each component owns its state and its rules (the band table, the Segment
//! Status Table, the segments in DRAM, the write pad, the writer's queue, the
//! request queue, the index); the processes that combine them — group commit,
//! placement, reads, GC, checkpoints, recovery — live in files of their own
//! and work on an `&Engine`. This file depends on the components only, never
//! on a process, so the module graph has no circle.

use super::band::Bands;
use super::pad::PadRing;
use super::request::RequestQueue;
use super::segment::{SegmentCache, WriteState};
use super::status::StatusTable;
use super::writer_jobs::{WriterJob, WriterQueue};
use crate::config::Options;
use crate::device::round_up;
use crate::error::{Error, Result};
use crate::format::{
    Codec, DamageRecord, Loc, EPOCH_AREA, EPOCH_OFFSET, SEG_FOOTER, SEG_HEADER, SUMMARY_ENTRY,
};
use crate::index::{Digest, Index, IndexOptions};
use crate::layout::{Layout, MAX_STRADDLE_PAD};
use crate::pool::Pool;
use crate::stats::{Counters, Histos, Op};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Instant;

/// What recovery at open found, for `Stats` and the log.
#[derive(Default, Clone)]
pub(crate) struct RecoveryInfo {
    /// Damage found at open, or data lost.
    pub warnings: Vec<String>,
    /// What an ordinary crash leaves behind (a torn write at the crash
    /// frontier, a batch cut short) and damage that cost nothing.
    pub notes: Vec<String>,
    pub source: String,
    pub us: u64,
    pub segments: u64,
    pub pad_records: u64,
    /// Pad records not placed again: overwritten later on the pad, or
    /// already the pool's state (engine/replay.rs).
    pub pad_skipped: u64,
}

/// Everything the engine's threads share.
pub(crate) struct Engine {
    pub layout: Layout,
    pub pool: Pool,
    /// The pool's identity, in every structure written.
    pub tag: u64,
    pub epoch: u64,
    pub opts: Options,
    pub index: Index,
    pub status: StatusTable,
    pub bands: Bands,
    /// Segments in DRAM: the open one and those not yet durable.
    pub segments: SegmentCache,
    /// Next segment sequence number, mirrored for checkpoints.
    pub next_seg_hint: AtomicU64,
    /// Next record sequence number, mirrored for checkpoints.
    pub seq_hint: AtomicU64,
    /// Newest segment seq whose header the writer has written (writer only),
    /// from the last seq of earlier runs on: stamped, after a sync, into FREE
    /// band headers as `freed_after`.
    pub seg_written: AtomicU64,
    pub requests: RequestQueue,
    /// Held by the group-commit leader (and briefly by GC and checkpoints).
    pub write_state: Mutex<WriteState>,
    pub pad: Option<PadRing>,
    pub writer: WriterQueue,
    pub counters: Counters,
    pub latency: Histos,
    /// Serialises GC passes; open iterators hold it too.
    pub gc_lock: Mutex<()>,
    /// Band payload used up by placing GC moves (see `place`). Passes are
    /// serialised, so a pass's own cost is the change over the pass, whatever
    /// users write meanwhile.
    pub gc_room_used: AtomicU64,
    /// Open iterators (each holds `gc_lock`).
    pub iterators: AtomicU64,
    /// Set to stop the maintenance thread; its condvar wakes it.
    pub stop: (Mutex<bool>, Condvar),
    pub failed: Mutex<Option<String>>,
    /// Serialises checkpoints; holds the sequence number of the newest one.
    pub ckpt_lock: Mutex<u64>,
    pub bytes_since_ckpt: AtomicU64,
    pub recovery: Mutex<RecoveryInfo>,
    /// The pool's damage record (format.md §4), as this run will write it
    /// into the epoch block, and the corruptions counted when it was last
    /// brought up to date.
    pub damage: Mutex<(DamageRecord, u64)>,
    /// scm-only in-place updates, as a seqlock: odd while pages are being
    /// overwritten. A read that fails its checksum while this moved raced an
    /// in-place update (it may have seen half a page) and is retried.
    pub inplace_gen: AtomicU64,
    /// What background work is running right now, for `Db::activity`.
    pub gc_active: AtomicBool,
    pub ckpt_active: AtomicBool,
    /// Writers waiting for GC to free space: a paced GC pass stops resting.
    pub space_waiters: AtomicU64,
}

impl Engine {
    /// The state of a pool opened in `epoch`, before recovery fills it.
    pub fn new(pool: Pool, opts: Options, epoch: u64) -> Engine {
        let layout = Layout::new(pool.geo.clone(), Codec::of_version(pool.version));
        let pad = pool.fast.as_ref().map(|f| {
            let g = &pool.geo;
            PadRing::new(
                f.clone(),
                g.pad_offset,
                g.pad_size,
                EPOCH_OFFSET + EPOCH_AREA,
            )
        });
        Engine {
            tag: pool.pool_tag(),
            epoch,
            index: Index::with_options(IndexOptions {
                expected_keys: opts.expected_keys,
                loc_bits: Loc::bits_for(layout.total_slots()),
                ..IndexOptions::default()
            }),
            status: StatusTable::new(&layout),
            bands: Bands::new(layout.bands as usize),
            segments: SegmentCache::default(),
            next_seg_hint: AtomicU64::new(epoch << 40),
            seq_hint: AtomicU64::new(1),
            // Every segment an earlier run left that this open keeps was
            // judged by its recovery and made durable by the sync that ends
            // it (`recovery::make_durable`): a FREE header this run writes
            // before its first segment vouches for all of them (issue 44: a
            // band GC freed before any write, stamped 0, made the next
            // open take the segment after it for a tear).
            seg_written: AtomicU64::new((epoch << 40).saturating_sub(1)),
            requests: RequestQueue::default(),
            write_state: Mutex::new(WriteState::new(epoch)),
            pad,
            writer: WriterQueue::default(),
            counters: Counters::default(),
            latency: Histos::new(),
            gc_lock: Mutex::new(()),
            gc_room_used: AtomicU64::new(0),
            iterators: AtomicU64::new(0),
            stop: (Mutex::new(false), Condvar::new()),
            failed: Mutex::new(None),
            ckpt_lock: Mutex::new(0),
            bytes_since_ckpt: AtomicU64::new(0),
            recovery: Mutex::new(RecoveryInfo::default()),
            damage: Mutex::new((DamageRecord::default(), 0)),
            inplace_gen: AtomicU64::new(0),
            gc_active: AtomicBool::new(false),
            ckpt_active: AtomicBool::new(false),
            space_waiters: AtomicU64::new(0),
            layout,
            pool,
            opts,
        }
    }

    /// Record an operation's latency (when histograms are on).
    pub fn record(&self, op: Op, t: Instant) {
        if self.opts.histograms {
            self.latency.record(op, t.elapsed().as_nanos() as u64);
        }
    }

    /// Whether the database is closing (`stop` is set).
    pub fn stopping(&self) -> bool {
        *self.stop.0.lock()
    }

    pub fn check_failed(&self) -> Result<()> {
        match &*self.failed.lock() {
            Some(m) => Err(Error::Closed(m.clone())),
            None => Ok(()),
        }
    }

    /// Above every segment sequence number on the pool: the next one this
    /// run gives out (during recovery, the first of this run, `epoch << 40`,
    /// above every earlier run's).
    pub fn seq_limit(&self) -> u64 {
        self.next_seg_hint.load(SeqCst)
    }

    /// The digest of `key` in this pool (format v2: keyed with the pool's secret).
    #[inline]
    pub fn digest(&self, key: &[u8]) -> Digest {
        self.pool.key_digest.digest(key)
    }

    /// Record a recovery warning: damage found, or data lost.
    pub fn warn(&self, msg: String) {
        self.recovery.lock().warnings.push(msg);
    }

    /// Record a recovery note: what an ordinary crash leaves behind, or damage
    /// that cost nothing.
    pub fn note(&self, msg: String) {
        self.recovery.lock().notes.push(msg);
    }

    /// The database failed: every further call returns `Closed` with `msg`.
    /// Wakes everyone who waits for space or pad room, so they see it.
    pub fn fail(&self, msg: String) {
        let mut f = self.failed.lock();
        if f.is_none() {
            tracing::error!(reason = %msg, "database failed: every further call returns Closed");
            *f = Some(msg);
        }
        drop(f);
        self.bands.notify_space();
        if let Some(p) = &self.pad {
            p.wake();
        }
    }

    pub fn send(&self, j: WriterJob) -> Result<()> {
        self.writer.send(j)
    }

    /// Wait until everything sent to the writer so far is durable.
    pub fn writer_barrier(&self) -> Result<()> {
        self.writer.barrier()
    }

    /// Largest encoded record this pool can place: one band's segments, less the
    /// segment header, footer and one summary entry. Checked before a record
    /// reaches the group commit, where a misfit would fail the whole database.
    pub fn max_record_bytes(&self) -> usize {
        let band = (self.layout.slots_per_band * self.layout.seg) as usize;
        let room = band.saturating_sub(SEG_HEADER + SEG_FOOTER + SUMMARY_ENTRY + MAX_STRADDLE_PAD);
        room.min(self.max_group_bytes())
    }

    pub fn check_record_fits(&self, len: usize) -> Result<()> {
        let max = self.max_record_bytes();
        if round_up(len, 8) > max {
            return Err(Error::TooLarge {
                what: "record",
                len,
                max,
            });
        }
        Ok(())
    }

    /// Largest group the pad can always take.
    pub fn max_group_bytes(&self) -> usize {
        match &self.pad {
            Some(p) => (p.size / 4) as usize,
            None => (self.layout.band_payload() / 2) as usize,
        }
    }

    /// Whether an in-place update may have overlapped a read that started when
    /// the seqlock read `gen`.
    pub fn inplace_raced(&self, gen: u64) -> bool {
        gen & 1 == 1 || self.inplace_gen.load(SeqCst) != gen
    }
}

/// Sets a flag for as long as it lives (cleared on every exit path).
pub(crate) struct ActiveFlag<'a>(&'a AtomicBool);

impl<'a> ActiveFlag<'a> {
    pub fn set(f: &'a AtomicBool) -> ActiveFlag<'a> {
        f.store(true, SeqCst);
        ActiveFlag(f)
    }
}

impl Drop for ActiveFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, SeqCst);
    }
}
