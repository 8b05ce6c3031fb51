//! The engine: public API, group commit, placement into segments, reads.
//!
//! Write path (tiered): a caller encodes its record, queues it and either waits
//! or becomes the *leader*. The leader takes everything queued, reserves room on
//! the fast-tier pad, places each record in the open DRAM segment (its final
//! capacity-tier address is known at once), writes the whole group to the pad
//! with one aligned write, copies the records into the segment buffers, updates
//! the index and acknowledges. Full segments go to the single writer thread,
//! which writes them sequentially to the open band and then lets the pad space
//! go. Capacity-only mode skips the pad and has the writer flush the dirty tail
//! of the open segment before acknowledging.

use crate::config::{Options, PoolConfig};
use crate::device::{round_down64, round_up, AlignedBuf, Device};
use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{Digest, Index};
use crate::layout::{Cursor, Layout};
use crate::pool::{self, Pool};
use crate::stats::{ld, Counters, DeviceStats, Histos, Op, Stats};
use crate::writer::{self, WMsg};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Shared state

/// State of one LBand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BandState {
    Free,
    /// Receiving segments (exactly one band at a time).
    Open,
    /// Full or closed; may still have segments in flight to the writer.
    Sealed,
    /// Being emptied by GC.
    Victim,
    /// GC found an unreadable live record here; kept out of GC so nothing is lost silently.
    Pinned,
}

#[derive(Clone, Debug)]
pub(crate) struct BandInfo {
    pub state: BandState,
    /// Segment sequence number of the band's first segment (incarnation id).
    pub first_seq: u64,
    /// Slots durably written.
    pub written_slots: u64,
    /// Segments created in this band not yet durable.
    pub inflight: u32,
}

pub(crate) struct BandTable {
    pub bands: Vec<BandInfo>,
    pub free: VecDeque<u32>,
}

impl BandTable {
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }
}

/// A segment held in DRAM: the open one and those queued for the writer.
pub(crate) struct SegBuf {
    pub size: usize,
    pub slot: u64,
    pub nslots: u32,
    pub seq: u64,
    pub band: u32,
    pub data: RwLock<AlignedBuf>,
}

pub(crate) struct OpenSeg {
    pub buf: Arc<SegBuf>,
    pub used: usize,
    pub entries: Vec<SummaryEntry>,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Bytes from the start already durable on the device (capacity-only partial flushes).
    pub flushed: usize,
}

pub(crate) struct WriteState {
    pub open: Option<OpenSeg>,
    pub to_seal: Vec<OpenSeg>,
    pub next_seq: u64,
    pub next_seg: u64,
    pub cur_band: Option<u32>,
    pub next_sib: u64,
    /// The segment closed last: its sequence number and the end of its
    /// records (written into the next segment's header as `prev_end`).
    pub last_closed: Option<(u64, u32)>,
}

/// Class of a write, which decides how much reserve space it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    User,
    Delete,
    Gc,
    Replay,
}

impl Class {
    pub(crate) fn reserve_bands(self) -> u32 {
        match self {
            Class::User => 2,
            Class::Delete => 1,
            Class::Gc | Class::Replay => 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Put,
    Delete,
    /// GC move: applied only if the index still points at `old`.
    Relocate(Loc),
    /// Pad replay at open: always applied.
    Replay,
}

#[derive(Clone)]
pub(crate) struct PRec {
    pub digest: Digest,
    /// Encoded record (seq and seg tag are stamped by the leader, except for moves).
    pub bytes: Vec<u8>,
    pub kind: Kind,
}

pub(crate) enum Outcome {
    /// Applied; the number of deletes that found their key.
    Done(u32),
    /// Not enough space for this class; the caller waits for GC and resubmits.
    Stalled,
    Failed(String),
}

pub(crate) struct Req {
    pub recs: Vec<PRec>,
    pub class: Class,
    state: Mutex<ReqState>,
    cv: Condvar,
}

#[derive(Default)]
struct ReqState {
    outcome: Option<Outcome>,
    /// The previous leader handed group-commit leadership to this request's thread.
    promoted: bool,
}

/// What a waiting caller is told.
enum Wake {
    Done(Outcome),
    Lead,
}

impl Req {
    pub fn new(recs: Vec<PRec>, class: Class) -> Arc<Req> {
        Arc::new(Req {
            recs,
            class,
            state: Mutex::new(ReqState::default()),
            cv: Condvar::new(),
        })
    }
    fn complete(&self, o: Outcome) {
        self.state.lock().outcome = Some(o);
        self.cv.notify_all();
    }
    fn is_done(&self) -> bool {
        self.state.lock().outcome.is_some()
    }
    fn promote(&self) {
        self.state.lock().promoted = true;
        self.cv.notify_all();
    }
    fn wait(&self) -> Wake {
        let mut g = self.state.lock();
        loop {
            if let Some(o) = g.outcome.take() {
                return Wake::Done(o);
            }
            if std::mem::take(&mut g.promoted) {
                return Wake::Lead;
            }
            self.cv.wait(&mut g);
        }
    }
}

struct Queue {
    reqs: Vec<Arc<Req>>,
    leader: bool,
}

/// The fast-tier write pad: a ring of 4 KiB-aligned group-commit batches.
pub(crate) struct PadRing {
    pub dev: Arc<dyn Device>,
    pub base: u64,
    pub size: u64,
    pub hdr_off: u64,
    pub st: Mutex<PadState>,
    pub cv: Condvar,
}

pub(crate) struct PadState {
    /// Virtual (ever-growing) offsets; physical = base + virt % size.
    pub head: u64,
    pub tail: u64,
    pub next_batch: u64,
    /// (segment seq, virt of the first batch with records in it) for segments not yet durable.
    pub marks: VecDeque<(u64, u64)>,
    /// A batch reserved but not yet attached to segments.
    pub pending: Option<u64>,
    /// Start of the pad region being replayed at open; held until replay is re-persisted.
    pub hold: Option<u64>,
    /// (virt, batch seq) of batches written, for the header's tail_batch_seq.
    pub batches: VecDeque<(u64, u64)>,
    pub hdr_seq: u64,
}

impl PadState {
    /// Oldest pad position still needed.
    pub fn needed_from(&self) -> u64 {
        let mut t = self.head;
        if let Some(&(_, v)) = self.marks.front() {
            t = t.min(v);
        }
        if let Some(v) = self.pending {
            t = t.min(v);
        }
        if let Some(v) = self.hold {
            t = t.min(v);
        }
        t
    }
}

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
}

pub(crate) struct Inner {
    pub layout: Layout,
    pub pool: Pool,
    pub tag: u64,
    pub epoch: u64,
    pub opts: Options,
    pub index: Index,
    /// Live bytes per slot and per band.
    pub slot_live: Box<[AtomicU32]>,
    /// Bytes of records placed in each slot (8-aligned lengths), for the status table:
    /// death size = placed − live.
    pub slot_placed: Box<[AtomicU32]>,
    pub band_live: Box<[AtomicU64]>,
    /// Live records per band (their summary entries cost space too).
    pub band_live_n: Box<[AtomicU32]>,
    /// Band payload the live records of each band would take if rewritten
    /// (`Layout::room_cost`): bytes undercount records that need a segment, or
    /// most of one, to themselves.
    pub band_live_room: Box<[AtomicU64]>,
    /// Padding and records placed in each band since it was opened: its packing efficiency.
    pub band_pad: Box<[AtomicU64]>,
    pub band_nrec: Box<[AtomicU32]>,
    pub band_min_seq: Box<[AtomicU64]>,
    pub bands: Mutex<BandTable>,
    pub space_cv: Condvar,
    pub bufs: RwLock<HashMap<u64, Arc<SegBuf>>>,
    pub next_seg_hint: AtomicU64,
    /// Next record sequence number, mirrored for checkpoints.
    pub seq_hint: AtomicU64,
    queue: Mutex<Queue>,
    pub ws: Mutex<WriteState>,
    pub pad: Option<PadRing>,
    pub writer: Mutex<Option<Sender<WMsg>>>,
    pub c: Counters,
    pub h: Histos,
    pub gc_lock: Mutex<()>,
    /// Band payload used up by placing GC moves (see `place`). Passes are
    /// serialised, so a pass's own cost is the change over the pass, whatever
    /// users write meanwhile.
    pub gc_room_used: AtomicU64,
    /// Open iterators (each holds `gc_lock`).
    pub iterators: AtomicU64,
    pub maint: (Mutex<bool>, Condvar),
    pub failed: Mutex<Option<String>>,
    pub ckpt_lock: Mutex<u64>,
    pub bytes_since_ckpt: AtomicU64,
    pub recovery: Mutex<RecoveryInfo>,
    /// scm-only in-place updates, as a seqlock: odd while pages are being
    /// overwritten. A read that fails its checksum while this moved raced an
    /// in-place update (it may have seen half a page) and is retried.
    pub inplace_gen: AtomicU64,
    /// What background work is running right now, for [`Db::activity`].
    pub gc_active: AtomicBool,
    pub ckpt_active: AtomicBool,
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
    pub(crate) inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
}

/// Several puts and deletes applied atomically: after a crash, all or none.
#[derive(Default)]
pub struct WriteBatch {
    recs: Vec<PRec>,
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
        self.recs.push(PRec {
            digest: 0,
            bytes: encode_new(key, value, 0),
            kind: Kind::Put,
        });
        self.bytes += (key.len() + value.len()) as u64;
        Ok(())
    }
    /// Add a delete.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        check_kv(key, b"")?;
        self.recs.push(PRec {
            digest: 0,
            bytes: encode_new(key, b"", REC_TOMBSTONE),
            kind: Kind::Delete,
        });
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

/// Encode a caller's record. Its seq, segment tag and crc are stamped once by the
/// group-commit leader (`stamp`), so no crc is computed here.
fn encode_new(key: &[u8], value: &[u8], flags: u8) -> Vec<u8> {
    let mut b = vec![0u8; record_len(key.len(), value.len())];
    encode_record_unsealed(&mut b, 0, 0, flags, key, value);
    b
}

/// Rewrite seq, flags and seg tag of an encoded record and recompute its crc.
fn stamp(rec: &mut [u8], seg_tag: u32, seq: u64, flags: u8) {
    rec[8..16].copy_from_slice(&seq.to_le_bytes());
    rec[REC_FLAGS_AT] = flags;
    retag_record(rec, seg_tag);
}

impl Db {
    /// Format the devices in `cfg` as a new pool and open it. Refuses devices that
    /// already hold a masse pool.
    pub fn create(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        let pool = pool::create(cfg, false)?;
        Self::start(pool, opts)
    }

    /// Like [`Db::create`], but overwrites an existing pool on the devices.
    pub fn create_force(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        let pool = pool::create(cfg, true)?;
        Self::start(pool, opts)
    }

    /// Open an existing pool; recovers from a crash if the last run did not close.
    pub fn open(cfg: &PoolConfig, opts: Options) -> Result<Db> {
        let pool = pool::open(cfg)?;
        Self::start(pool, opts)
    }

    fn start(pool: Pool, opts: Options) -> Result<Db> {
        let t0 = Instant::now();
        let read = pool::read_epoch(&pool)?;
        let prev = read.block;
        // With one copy unreadable, the lost one may have held prev + 1 (a run
        // that wrote segments with it): skip it, so no epoch is ever used twice.
        let epoch = prev.epoch + if read.both_copies { 1 } else { 2 };
        pool::write_epoch(
            &pool,
            &EpochBlock {
                epoch,
                pool_tag: pool.pool_tag(),
                clean: 0,
            },
        )?;
        let layout = Layout::new(pool.geo.clone());
        let nslots = layout.total_slots() as usize;
        let nbands = layout.bands as usize;
        let pad = pool.fast.as_ref().map(|f| PadRing {
            dev: f.clone(),
            base: pool.geo.pad_offset,
            size: pool.geo.pad_size,
            hdr_off: EPOCH_OFFSET + EPOCH_AREA,
            st: Mutex::new(PadState {
                head: 0,
                tail: 0,
                next_batch: 1,
                marks: VecDeque::new(),
                pending: None,
                hold: None,
                batches: VecDeque::new(),
                hdr_seq: 0,
            }),
            cv: Condvar::new(),
        });
        let inner = Arc::new(Inner {
            tag: pool.pool_tag(),
            epoch,
            index: Index::with_capacity(opts.expected_keys),
            slot_live: (0..nslots).map(|_| AtomicU32::new(0)).collect(),
            slot_placed: (0..nslots).map(|_| AtomicU32::new(0)).collect(),
            band_live: (0..nbands).map(|_| AtomicU64::new(0)).collect(),
            band_live_n: (0..nbands).map(|_| AtomicU32::new(0)).collect(),
            band_live_room: (0..nbands).map(|_| AtomicU64::new(0)).collect(),
            band_pad: (0..nbands).map(|_| AtomicU64::new(0)).collect(),
            band_nrec: (0..nbands).map(|_| AtomicU32::new(0)).collect(),
            band_min_seq: (0..nbands).map(|_| AtomicU64::new(u64::MAX)).collect(),
            bands: Mutex::new(BandTable {
                bands: vec![
                    BandInfo {
                        state: BandState::Free,
                        first_seq: 0,
                        written_slots: 0,
                        inflight: 0
                    };
                    nbands
                ],
                free: VecDeque::new(),
            }),
            space_cv: Condvar::new(),
            bufs: RwLock::new(HashMap::new()),
            next_seg_hint: AtomicU64::new(epoch << 40),
            seq_hint: AtomicU64::new(1),
            queue: Mutex::new(Queue {
                reqs: Vec::new(),
                leader: false,
            }),
            ws: Mutex::new(WriteState {
                open: None,
                to_seal: Vec::new(),
                next_seq: 1,
                next_seg: epoch << 40,
                cur_band: None,
                next_sib: 0,
                last_closed: None,
            }),
            pad,
            writer: Mutex::new(None),
            c: Counters::default(),
            h: Histos::new(),
            gc_lock: Mutex::new(()),
            gc_room_used: AtomicU64::new(0),
            iterators: AtomicU64::new(0),
            maint: (Mutex::new(false), Condvar::new()),
            failed: Mutex::new(None),
            ckpt_lock: Mutex::new(0),
            bytes_since_ckpt: AtomicU64::new(0),
            recovery: Mutex::new(RecoveryInfo::default()),
            inplace_gen: AtomicU64::new(0),
            gc_active: AtomicBool::new(false),
            ckpt_active: AtomicBool::new(false),
            layout,
            pool,
            opts,
        });
        // Rebuild the index and band table; then start the writer and replay the pad.
        let pad_recs = crate::recovery::recover(&inner, prev.clean != 0)?;
        let mut threads = Vec::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        *inner.writer.lock() = Some(tx);
        {
            let i2 = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("masse-writer".into())
                    .spawn(move || writer::run(i2, rx))
                    .map_err(|e| Error::Closed(format!("cannot start the writer thread: {e}")))?,
            );
        }
        let db = Db {
            inner: inner.clone(),
            threads: Mutex::new(threads),
            closed: AtomicBool::new(false),
        };
        let npad = pad_recs.iter().map(|g| g.len() as u64).sum();
        let reqs: Vec<_> = pad_recs
            .into_iter()
            .map(|g| Req::new(g, Class::Replay))
            .collect();
        db.inner.submit_all(reqs)?;
        if let Some(p) = &inner.pad {
            p.st.lock().hold = None;
        }
        {
            let mut r = inner.recovery.lock();
            r.pad_records = npad;
            r.us = t0.elapsed().as_micros() as u64;
            tracing::info!(epoch, recovery = %r.source, segments_replayed = r.segments, pad_records = npad, took_ms = r.us / 1000, warnings = r.warnings.len(), "pool opened");
            r.warnings
                .iter()
                .for_each(|w| tracing::warn!(warning = %w, "recovery found damage"));
        }
        let i2 = inner.clone();
        let h = std::thread::Builder::new()
            .name("masse-maint".into())
            .spawn(move || crate::gc::maintenance(i2))
            .map_err(|e| Error::Closed(format!("cannot start the maintenance thread: {e}")))?;
        db.threads.lock().push(h);
        Ok(db)
    }

    /// Store `value` under `key`. Returns once the write is durable.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let t = Instant::now();
        check_kv(key, value)?;
        let rec = PRec {
            digest: self.inner.digest(key),
            bytes: encode_new(key, value, 0),
            kind: Kind::Put,
        };
        self.inner.check_record_fits(rec.bytes.len())?;
        self.inner.write(vec![rec], Class::User)?;
        self.inner.c.puts.fetch_add(1, Relaxed);
        self.inner
            .c
            .user_bytes
            .fetch_add((key.len() + value.len()) as u64, Relaxed);
        self.inner.record(Op::Put, t);
        Ok(())
    }

    /// Remove `key`. Returns whether it existed. Durable on return.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let t = Instant::now();
        check_kv(key, b"")?;
        let rec = PRec {
            digest: self.inner.digest(key),
            bytes: encode_new(key, b"", REC_TOMBSTONE),
            kind: Kind::Delete,
        };
        let n = self.inner.write(vec![rec], Class::Delete)?;
        self.inner.c.deletes.fetch_add(1, Relaxed);
        self.inner.record(Op::Delete, t);
        Ok(n > 0)
    }

    /// Apply a batch atomically. Durable on return.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let class = if batch.deletes as usize == batch.recs.len() {
            Class::Delete
        } else {
            Class::User
        };
        let max = self.inner.max_group_bytes();
        let total: usize = batch.recs.iter().map(|r| round_up(r.bytes.len(), 8)).sum();
        if total > max {
            return Err(Error::TooLarge {
                what: "write batch",
                len: total,
                max,
            });
        }
        for r in &batch.recs {
            self.inner.check_record_fits(r.bytes.len())?;
        }
        let (n, bytes, deletes) = (batch.recs.len() as u64, batch.bytes, batch.deletes);
        let mut recs = batch.recs;
        for r in &mut recs {
            r.digest = self.inner.digest(record_key(&r.bytes));
        }
        self.inner.write(recs, class)?;
        self.inner.c.batches.fetch_add(1, Relaxed);
        self.inner.c.puts.fetch_add(n - deletes, Relaxed);
        self.inner.c.deletes.fetch_add(deletes, Relaxed);
        self.inner.c.user_bytes.fetch_add(bytes, Relaxed);
        self.inner.record(Op::Batch, t);
        Ok(())
    }

    /// The largest write batch, in encoded bytes, that [`Db::write`] accepts as one
    /// atomic group (records cost their key + value + a 24-byte header, rounded up
    /// to 8 bytes). Layers that batch many records use it to split their work.
    pub fn max_batch_bytes(&self) -> usize {
        self.inner.max_group_bytes()
    }

    /// The value stored under `key`, if any. An empty value is a value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let t = Instant::now();
        check_kv(key, b"")?;
        let r = self.inner.get(key);
        self.inner.c.gets.fetch_add(1, Relaxed);
        if let Ok(Some(v)) = &r {
            self.inner.c.get_hits.fetch_add(1, Relaxed);
            self.inner.c.read_bytes.fetch_add(v.len() as u64, Relaxed);
        }
        self.inner.record(Op::Get, t);
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
        let r = self.inner.get_many(keys);
        if let Ok(vals) = &r {
            self.inner.c.gets.fetch_add(vals.len() as u64, Relaxed);
            for v in vals.iter().flatten() {
                self.inner.c.get_hits.fetch_add(1, Relaxed);
                self.inner.c.read_bytes.fetch_add(v.len() as u64, Relaxed);
            }
            for _ in 0..vals.len() {
                self.inner.record(Op::Get, t);
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
        Ok(match self.inner.index.get(self.inner.digest(key)) {
            Some(l) => !Loc(l).is_tombstone(),
            None => false,
        })
    }

    /// Unordered iteration over live keys and values. Holds off GC while it lives,
    /// so records cannot move under it; writes made meanwhile may or may not be seen.
    pub fn iter(&self) -> Iter<'_> {
        self.inner.iterators.fetch_add(1, SeqCst);
        let guard = self.inner.gc_lock.lock();
        Iter {
            db: self,
            _gc: guard,
            shard: 0,
            locs: Vec::new(),
            pos: 0,
        }
    }

    /// Wait until every segment sealed so far is on the capacity tier.
    /// (Acknowledged writes are already durable; this only drains the writer.)
    pub fn flush(&self) -> Result<()> {
        self.inner.check_failed()?;
        self.inner.writer_barrier()
    }

    /// Run one GC pass now (normally GC runs by itself). Returns whether a band was freed.
    pub fn gc_once(&self) -> Result<bool> {
        Ok(matches!(
            crate::gc::gc_pass(&self.inner, true)?,
            crate::gc::GcOutcome::Freed { .. }
        ))
    }

    /// Write an index checkpoint now.
    pub fn checkpoint(&self) -> Result<()> {
        crate::recovery::checkpoint(&self.inner).map(|_| ())
    }

    /// Close cleanly: drain the writer, checkpoint the index, stop the threads.
    pub fn close(self) -> Result<()> {
        self.shutdown(true)
    }

    fn shutdown(&self, clean: bool) -> Result<()> {
        if self.closed.swap(true, SeqCst) {
            return Ok(());
        }
        {
            let mut s = self.inner.maint.0.lock();
            *s = true;
            self.inner.maint.1.notify_all();
        }
        // A database that failed says so at close, with the cause.
        let mut res = if clean {
            self.inner.check_failed()
        } else {
            Ok(())
        };
        if clean && res.is_ok() {
            res = self.inner.writer_barrier();
            if res.is_ok() && self.inner.opts.checkpoint_on_close {
                res = crate::recovery::checkpoint(&self.inner).map(|_| ());
            }
        }
        // Stop the writer: dropping the sender ends its loop once drained.
        self.inner.writer.lock().take();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if clean && res.is_ok() && self.inner.check_failed().is_ok() {
            // A new epoch in the other copy: the current copy is never rewritten in place.
            let e = EpochBlock {
                epoch: self.inner.epoch + 1,
                pool_tag: self.inner.tag,
                clean: 1,
            };
            res = pool::write_epoch(&self.inner.pool, &e);
        }
        tracing::info!(clean = clean && res.is_ok(), "pool closed");
        res
    }

    /// The Segment Status Table (paper §2.6): per band its state and invalid bytes,
    /// per segment its use state, free size and death (invalid) size.
    pub fn band_status(&self) -> Vec<BandStatus> {
        let inner = &self.inner;
        let l = &inner.layout;
        let (open_slot, open_free) = {
            let ws = inner.ws.lock();
            match ws.open.as_ref() {
                // Room for one more record's bytes: its summary entry and the
                // footer must fit too (an exactly full segment has none left).
                Some(o) => (
                    Some(o.buf.slot),
                    o.buf
                        .size
                        .saturating_sub(o.used + (o.entries.len() + 1) * SUMMARY_ENTRY + SEG_FOOTER)
                        as u32,
                ),
                None => (None, 0),
            }
        };
        let bt = inner.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .map(|(b, info)| {
                let first = l.first_slot(b as u32);
                let segments = (0..l.slots_per_band)
                    .map(|i| {
                        let slot = first + i;
                        let placed = inner.slot_placed[slot as usize].load(Relaxed);
                        let live = inner.slot_live[slot as usize].load(Relaxed);
                        let use_state = if Some(slot) == open_slot {
                            "open"
                        } else if info.state != BandState::Free
                            && (i < info.written_slots || placed > 0)
                        {
                            "used"
                        } else {
                            "free"
                        };
                        SegmentStatus {
                            slot,
                            use_state,
                            free_size: match use_state {
                                "open" => open_free,
                                "used" => 0,
                                _ => l.seg as u32,
                            },
                            death_size: placed.saturating_sub(live),
                        }
                    })
                    .collect::<Vec<_>>();
                let live = inner.band_live[b].load(Relaxed);
                BandStatus {
                    band: b as u32,
                    state: match info.state {
                        BandState::Free => "free",
                        BandState::Open => "open",
                        BandState::Sealed => "sealed",
                        BandState::Victim => "gc",
                        BandState::Pinned => "pinned",
                    },
                    first_seq: info.first_seq,
                    written_slots: info.written_slots,
                    live_bytes: live,
                    invalid_bytes: segments.iter().map(|s| s.death_size as u64).sum(),
                    segments,
                }
            })
            .collect()
    }

    /// A snapshot of the engine's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Per operation (put, get, delete, batch), how many latency samples fell at or
    /// below each bound (ascending, ns), with their count and exact sum: what a
    /// Prometheus histogram exports. `reset_latency` starts them over.
    pub fn latency_buckets(&self, bounds_ns: &[u64]) -> Vec<crate::stats::LatencyBuckets> {
        self.inner.h.buckets(bounds_ns)
    }

    /// Forget the latency samples so far (e.g. between benchmark phases).
    pub fn reset_latency(&self) {
        self.inner.h.reset();
    }

    /// Every record of `key` still in the pool (band, segment, offset, seq,
    /// tombstone, which one the index points at): a diagnostic for crash tests.
    pub fn trace_key(&self, key: &[u8]) -> Result<Vec<String>> {
        crate::check::trace_key(self, key)
    }

    /// What background work is running at this instant: for crash-test harnesses
    /// that want to know what a kill interrupted, and for monitoring.
    pub fn activity(&self) -> Activity {
        Activity {
            gc: self.inner.gc_active.load(SeqCst),
            checkpoint: self.inner.ckpt_active.load(SeqCst),
        }
    }

    /// A one-paragraph dump of the write path's state (group-commit queue and
    /// leader, pad ring, bands, writer queue, failure): for hang watchdogs and
    /// bug reports. Takes only short-lived locks, so it answers even when a
    /// writer is stuck.
    pub fn debug_state(&self) -> String {
        let i = &self.inner;
        let (queued, leader, stalled) = {
            let q = i.queue.lock();
            let stalled = q.reqs.iter().filter(|r| r.is_done()).count();
            (q.reqs.len(), q.leader, stalled)
        };
        let pad = i.pad.as_ref().map(|p| {
            let s = p.st.lock();
            format!(
                "pad head {} tail {} marks {} pending {:?} hold {:?}; ",
                s.head,
                s.tail,
                s.marks.len(),
                s.pending,
                s.hold
            )
        });
        let (free, victims) = {
            let bt = i.bands.lock();
            let v = bt
                .bands
                .iter()
                .filter(|b| b.state == BandState::Victim)
                .count();
            (bt.free_count(), v)
        };
        let writer = i.writer.lock().as_ref().map(|tx| tx.len());
        format!(
            "queue {queued} requests ({stalled} already completed), leader active {leader}; {}\
             bands free {free} of {}, victims {victims}; writer queue {writer:?}; \
             segments in DRAM {}; activity {:?}; failed {:?}",
            pad.unwrap_or_default(),
            i.layout.bands,
            i.bufs.read().len(),
            self.activity(),
            i.failed.lock().clone()
        )
    }

    /// The pool geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.inner.pool.geo
    }

    /// Offline-style consistency check of the open pool: reads every live record
    /// and verifies checksums, keys against digests, and the space accounting.
    pub fn check(&self) -> Result<crate::check::CheckReport> {
        crate::check::check(self)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // Dropping without close() is a simulated crash: threads stop, nothing
        // more is written; everything acknowledged is already durable.
        let _ = self.shutdown(false);
    }
}

/// One segment's row of the Segment Status Table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentStatus {
    /// Global slot number.
    pub slot: u64,
    /// "free", "open" (receiving records) or "used".
    pub use_state: &'static str,
    /// Bytes still free for records (0 once sealed).
    pub free_size: u32,
    /// Bytes of records that were overwritten or deleted.
    pub death_size: u32,
}

/// One band's row of the Segment Status Table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BandStatus {
    /// Band number.
    pub band: u32,
    /// "free", "open", "sealed", "gc" (being emptied) or "pinned" (holds an unreadable record).
    pub state: &'static str,
    /// Sequence number of the band's first segment.
    pub first_seq: u64,
    /// Segments durably written.
    pub written_slots: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Bytes of dead records (the sum of the segments' death sizes).
    pub invalid_bytes: u64,
    /// Per-segment rows.
    pub segments: Vec<SegmentStatus>,
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
        self.db.inner.iterators.fetch_sub(1, SeqCst);
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        let inner = &self.db.inner;
        loop {
            while self.pos < self.locs.len() {
                let loc = Loc(self.locs[self.pos]);
                self.pos += 1;
                if loc.is_tombstone() {
                    continue;
                }
                let mut tries = 0;
                loop {
                    let gen = inner.inplace_gen.load(SeqCst);
                    let r = inner.read_record(loc).and_then(|b| {
                        let (_, k, v) = decode_record(&b)?;
                        Ok((k.to_vec(), v.to_vec()))
                    });
                    tries += 1;
                    if r.is_err() && tries < 16 && inner.inplace_raced(gen) {
                        continue; // an in-place update overlapped the read
                    }
                    return Some(r);
                }
            }
            if self.shard >= inner.index.shard_count() {
                return None;
            }
            self.locs.clear();
            self.pos = 0;
            inner
                .index
                .for_each_in_shard(self.shard, |l| self.locs.push(l));
            self.shard += 1;
        }
    }
}

// ---------------------------------------------------------------------------
// Engine internals

impl Inner {
    pub(crate) fn record(&self, op: Op, t: Instant) {
        if self.opts.histograms {
            self.h.record(op, t.elapsed().as_nanos() as u64);
        }
    }

    pub(crate) fn check_failed(&self) -> Result<()> {
        match &*self.failed.lock() {
            Some(m) => Err(Error::Closed(m.clone())),
            None => Ok(()),
        }
    }

    /// The digest of `key` in this pool (format v2: keyed with the pool's secret).
    #[inline]
    pub(crate) fn digest(&self, key: &[u8]) -> Digest {
        self.pool.key_digest.digest(key)
    }

    /// Record a recovery warning: damage found, or data lost.
    pub(crate) fn warn(&self, msg: String) {
        self.recovery.lock().warnings.push(msg);
    }

    /// Record a recovery note: what an ordinary crash leaves behind, or damage
    /// that cost nothing.
    pub(crate) fn note(&self, msg: String) {
        self.recovery.lock().notes.push(msg);
    }

    pub(crate) fn fail(&self, msg: String) {
        let mut f = self.failed.lock();
        if f.is_none() {
            tracing::error!(reason = %msg, "database failed: every further call returns Closed");
            *f = Some(msg);
        }
        drop(f);
        self.space_cv.notify_all();
        if let Some(p) = &self.pad {
            p.cv.notify_all();
        }
    }

    pub(crate) fn send(&self, m: WMsg) -> Result<()> {
        match &*self.writer.lock() {
            Some(tx) => tx
                .send(m)
                .map_err(|_| Error::Closed("writer thread has stopped".into())),
            None => Err(Error::Closed("database is closing".into())),
        }
    }

    pub(crate) fn writer_barrier(&self) -> Result<()> {
        let w = writer::Waiter::new();
        self.send(WMsg::Barrier(w.clone()))?;
        w.wait()
    }

    /// Largest encoded record this pool can place: one band's segments, less the
    /// segment header, footer and one summary entry. Checked before a record
    /// reaches the group commit, where a misfit would fail the whole database.
    pub(crate) fn max_record_bytes(&self) -> usize {
        let band = (self.layout.slots_per_band * self.layout.seg) as usize;
        let room = band.saturating_sub(SEG_HEADER + SEG_FOOTER + SUMMARY_ENTRY + MAX_STRADDLE_PAD);
        room.min(self.max_group_bytes())
    }

    pub(crate) fn check_record_fits(&self, len: usize) -> Result<()> {
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
    pub(crate) fn max_group_bytes(&self) -> usize {
        match &self.pad {
            Some(p) => (p.size / 4) as usize,
            None => (self.layout.band_payload() / 2) as usize,
        }
    }

    /// Submit records as one atomic group, waiting for space if needed.
    pub(crate) fn write(&self, recs: Vec<PRec>, class: Class) -> Result<u32> {
        let mut req = Req::new(recs, class);
        let mut stalled_since: Option<Instant> = None;
        loop {
            self.check_failed()?;
            match self.submit(req.clone()) {
                Outcome::Done(n) => {
                    if let Some(t) = stalled_since {
                        tracing::debug!(
                            waited_us = t.elapsed().as_micros() as u64,
                            "write stalled for free space"
                        );
                        self.c.stalls.fetch_add(1, Relaxed);
                        self.c
                            .stall_us
                            .fetch_add(t.elapsed().as_micros() as u64, Relaxed);
                    }
                    return Ok(n);
                }
                Outcome::Failed(m) => return Err(Error::Closed(m)),
                Outcome::Stalled => {
                    stalled_since.get_or_insert_with(Instant::now);
                    let lens: Vec<usize> = req.recs.iter().map(|p| p.bytes.len()).collect();
                    crate::gc::wait_for_space(self, class, &lens)?;
                    // The leader may still hold the request; stalls are rare, so copy.
                    let recs = req.recs.clone();
                    req = Req::new(recs, class);
                }
            }
        }
    }

    /// Queue requests as separate groups-to-be; wait for all of them, leading
    /// group commits when handed the leadership.
    pub(crate) fn submit_all(&self, reqs: Vec<Arc<Req>>) -> Result<u32> {
        let Some(last) = reqs.last().cloned() else {
            return Ok(0);
        };
        let lead = {
            let mut q = self.queue.lock();
            q.reqs.extend(reqs.iter().cloned());
            !std::mem::replace(&mut q.leader, true)
        };
        if lead {
            self.lead(&last);
        }
        // Wait for every request, even after one failed or stalled: a request
        // still queued may be handed the leadership, and nobody else would take it.
        let mut n = 0;
        let mut err = None;
        for r in reqs {
            match self.await_req(&r, &last) {
                Outcome::Done(k) => n += k,
                Outcome::Failed(m) => {
                    err.get_or_insert(Error::Closed(m));
                }
                Outcome::Stalled => {
                    err.get_or_insert(Error::NoSpace(
                        "no free band for a replay or GC write".into(),
                    ));
                }
            }
        }
        err.map_or(Ok(n), Err)
    }

    /// Queue a request and wait for it, leading group commits when handed the leadership.
    fn submit(&self, req: Arc<Req>) -> Outcome {
        let lead = {
            let mut q = self.queue.lock();
            q.reqs.push(req.clone());
            !std::mem::replace(&mut q.leader, true)
        };
        if lead {
            self.lead(&req);
        }
        self.await_req(&req, &req)
    }

    fn await_req(&self, r: &Arc<Req>, mine: &Arc<Req>) -> Outcome {
        loop {
            match r.wait() {
                Wake::Done(o) => return o,
                Wake::Lead => self.lead(mine),
            }
        }
    }

    /// Run group commits until `mine` (the caller's last request; FIFO order means
    /// all of the caller's requests) is done, then hand leadership to the oldest
    /// waiting request, so no caller is kept leading other callers' writes.
    fn lead(&self, mine: &Arc<Req>) {
        loop {
            let batch = {
                let mut q = self.queue.lock();
                if q.reqs.is_empty() {
                    q.leader = false;
                    return;
                }
                if mine.is_done() {
                    q.reqs[0].promote();
                    return;
                }
                let max = self.opts.max_batch_bytes.min(self.max_group_bytes());
                let mut total = 0usize;
                let mut n = 0;
                for r in &q.reqs {
                    let b = req_bytes(r);
                    if n > 0 && total + b > max {
                        break;
                    }
                    total += b;
                    n += 1;
                }
                q.reqs.drain(..n).collect::<Vec<_>>()
            };
            let mut ws = self.ws.lock();
            if let Err(e) = self.commit_group(&mut ws, &batch) {
                let m = e.to_string();
                self.fail(format!("write path failed: {m}"));
                for r in &batch {
                    if !r.is_done() {
                        r.complete(Outcome::Failed(m.clone()));
                    }
                }
            }
        }
    }

    /// scm-only (the 3D XPoint rule: write in place, 4 KiB-aligned): if `p`'s key
    /// has a live record of exactly the new record's length on the device (not in
    /// DRAM, not in a band GC is emptying) that lies within one 4 KiB page, patch
    /// the new record into that page's image in `pages` (reading the page once)
    /// and return true. The record keeps the old one's segment tag, sequence
    /// number and flags, so the segment's summary still describes it and nothing
    /// else (index, space accounting, checkpoints, recovery) changes. A single
    /// 4 KiB page write is atomic on the media this mode is for (power-loss
    /// protected SCM), so a crash leaves the old or the new record, whole.
    /// Called under the write state, so GC cannot pick the band meanwhile.
    fn try_in_place(&self, p: &PRec, pages: &mut Vec<(usize, u64, AlignedBuf)>) -> Result<bool> {
        let Some(l) = self.index.get(p.digest) else {
            return Ok(false);
        };
        let loc = Loc(l);
        let len = p.bytes.len();
        if loc.is_tombstone() || round_up(len, 8) as u32 != loc.len8() {
            return Ok(false);
        }
        if self.bufs.read().contains_key(&loc.slot()) {
            return Ok(false);
        }
        let band = self.layout.band_of_slot(loc.slot());
        if !matches!(
            self.bands.lock().bands[band as usize].state,
            BandState::Open | BandState::Sealed
        ) {
            return Ok(false);
        }
        let (dev, base) = self.layout.slot_addr(loc.slot());
        let abs = base + loc.offset() as u64;
        let page = round_down64(abs, 4096);
        if abs + len as u64 > page + 4096 {
            return Ok(false);
        }
        let i = match pages.iter().position(|(d, o, _)| *d == dev && *o == page) {
            Some(i) => i,
            None => {
                let mut b = AlignedBuf::new(4096);
                let d = &self.pool.caps[dev];
                d.read_at(&mut b, page).map_err(|e| {
                    Error::io(&d.info().path, "reading a page to update in place", e)
                })?;
                pages.push((dev, page, b));
                pages.len() - 1
            }
        };
        let at = (abs - page) as usize;
        let img = &mut pages[i].2;
        let old = &img[at..at + len];
        let Ok((h, old_key, _)) = decode_record(old) else {
            return Ok(false); // not a record we can vouch for: append instead
        };
        let new_h = peek_record(&p.bytes)
            .ok_or_else(|| Error::Corruption("internal: bad record".into()))?;
        let new_key = &p.bytes[RECORD_HEADER..RECORD_HEADER + new_h.key_len as usize];
        if h.total_len() != len || h.flags & REC_TOMBSTONE != 0 || old_key != new_key {
            return Ok(false);
        }
        let mut bytes = p.bytes.clone();
        stamp(&mut bytes, h.seg_tag, h.seq, h.flags);
        img[at..at + len].copy_from_slice(&bytes);
        Ok(true)
    }

    /// Where admission starts a group: the current write position, taken as if
    /// the open segment were already sealed. Pad reservation may force-seal it
    /// before the group is placed (§4.8), and placing from a later position never
    /// ends earlier, so the simulation can only overestimate.
    pub(crate) fn admission_cursor(&self, ws: &WriteState) -> Cursor {
        Cursor {
            open: None,
            band_left: match ws.cur_band {
                Some(_) => self.layout.slots_per_band - ws.next_sib,
                None => 0,
            },
            bands_taken: 0,
        }
    }

    /// Space admission: place records of `lens` after `cur` (the records the
    /// group already took) as `place` will, and admit them if the free bands that
    /// takes leave `class`'s reserve untouched; then `cur` moves past them.
    /// Counting whole segments and bands, not bytes, is what keeps the leader's
    /// `new_segment` from ever finding the free list empty: a record too big to
    /// share a segment takes all of its k slots, and a band's last slots go
    /// unused when they are fewer than k.
    pub(crate) fn admit(
        &self,
        cur: &mut Cursor,
        class: Class,
        lens: impl Iterator<Item = usize>,
    ) -> bool {
        let mut c = *cur;
        for len in lens {
            c.place(&self.layout, len);
        }
        if class != Class::Replay {
            let free = self.bands.lock().free_count();
            if c.bands_taken > free.saturating_sub(class.reserve_bands()) {
                return false;
            }
        }
        *cur = c;
        true
    }

    /// One group commit. Holds the write state (leadership) throughout.
    fn commit_group(&self, ws: &mut WriteState, batch: &[Arc<Req>]) -> Result<()> {
        // Decide what to apply. Deletes of absent keys and stale GC moves are dropped here.
        let mut take: Vec<(&Arc<Req>, Vec<usize>)> = Vec::with_capacity(batch.len());
        let mut group_bytes = 0usize;
        let mut cursor = self.admission_cursor(ws);
        // Which keys this group already writes; needed only to judge its deletes.
        let has_deletes = batch
            .iter()
            .any(|r| r.recs.iter().any(|p| p.kind == Kind::Delete));
        let mut put_in_group: HashMap<Digest, bool> = HashMap::new();
        // scm-only: lone puts of an unchanged size overwrite their record in place;
        // a key this group already writes must not be overwritten in place after
        // that (GC moves need no check: they come from victim bands, never in place).
        let scm = self.pool.geo.mode == Mode::ScmOnly;
        let mut user_in_group: std::collections::HashSet<Digest> = Default::default();
        let mut pages: Vec<(usize, u64, AlignedBuf)> = Vec::new();
        let mut in_place: Vec<&Arc<Req>> = Vec::new();
        for r in batch {
            if scm
                && r.class == Class::User
                && r.recs.len() == 1
                && r.recs[0].kind == Kind::Put
                && !user_in_group.contains(&r.recs[0].digest)
                && self.try_in_place(&r.recs[0], &mut pages)?
            {
                user_in_group.insert(r.recs[0].digest);
                in_place.push(r);
                continue;
            }
            // Space is checked after everything this group already took, counting
            // every record of the request: the ones the filter below drops only make
            // the real placement end earlier.
            if !self.admit(&mut cursor, r.class, r.recs.iter().map(|p| p.bytes.len())) {
                r.complete(Outcome::Stalled);
                continue;
            }
            let mut idx = Vec::with_capacity(r.recs.len());
            for (i, p) in r.recs.iter().enumerate() {
                let keep = match p.kind {
                    Kind::Put | Kind::Replay => {
                        if has_deletes {
                            put_in_group.insert(p.digest, true);
                        }
                        true
                    }
                    Kind::Delete => {
                        let live = put_in_group.get(&p.digest).copied().unwrap_or_else(|| {
                            self.index
                                .get(p.digest)
                                .map(|l| !Loc(l).is_tombstone())
                                .unwrap_or(false)
                        });
                        if live {
                            put_in_group.insert(p.digest, false);
                        }
                        live
                    }
                    // A move placed after a user write of the same key in this group
                    // would sit at a later position, and recovery ("later position
                    // wins") would bring the moved, older version back. Drop it: the
                    // user write makes the old record dead anyway.
                    Kind::Relocate(old) => {
                        self.index.get(p.digest) == Some(old.0)
                            && !user_in_group.contains(&p.digest)
                    }
                };
                if keep && !matches!(p.kind, Kind::Relocate(_)) {
                    user_in_group.insert(p.digest);
                }
                if keep {
                    group_bytes += round_up(p.bytes.len(), 8);
                    idx.push(i);
                }
            }
            take.push((r, idx));
        }
        if !in_place.is_empty() {
            // Through the single writer like every capacity write; durable (synced)
            // before the puts are acknowledged.
            let n = pages.len() as u64;
            self.inplace_gen.fetch_add(1, SeqCst);
            let res = self
                .send(WMsg::InPlace(std::mem::take(&mut pages)))
                .and_then(|_| self.writer_barrier());
            self.inplace_gen.fetch_add(1, SeqCst);
            res?;
            self.c
                .inplace_writes
                .fetch_add(in_place.len() as u64, Relaxed);
            self.c.inplace_bytes.fetch_add(n * 4096, Relaxed);
            self.c
                .commit_records
                .fetch_add(in_place.len() as u64, Relaxed);
            for r in in_place {
                r.complete(Outcome::Done(0));
            }
        }
        if group_bytes == 0 {
            for (r, idx) in &take {
                let _ = idx;
                r.complete(Outcome::Done(0));
            }
            return Ok(());
        }

        // Reserve pad room before placing anything, so a forced seal never takes this
        // group's records. Records replayed from the pad at open are still on it in
        // their original batches: they are placed, not written again.
        let replay_only = take.iter().all(|(r, _)| r.class == Class::Replay);
        let pad_virt = match &self.pad {
            Some(p) if !replay_only => Some(self.pad_reserve(p, ws, BATCH_HEADER + group_bytes)?),
            _ => None,
        };

        // Place every record; stamp seq and seg tag; remember where it goes.
        let mut placed: Vec<Vec<Placed>> = Vec::with_capacity(take.len());
        let mut new_segs: Vec<u64> = Vec::new();
        let open_was_empty = ws
            .open
            .as_ref()
            .map(|o| o.entries.is_empty())
            .unwrap_or(true);
        let open_seq_before = ws.open.as_ref().map(|o| o.buf.seq);
        let mut payload: Vec<u8> =
            Vec::with_capacity(if pad_virt.is_some() { group_bytes } else { 0 });
        // Records are stamped in place, so take them mutably through a copy of the bytes.
        let mut stamped: Vec<Vec<Vec<u8>>> = Vec::with_capacity(take.len());
        for (r, idx) in &take {
            let mut pl = Vec::with_capacity(idx.len());
            let mut st = Vec::with_capacity(idx.len());
            for (j, &i) in idx.iter().enumerate() {
                let p = &r.recs[i];
                let mut bytes = p.bytes.clone();
                let more = j + 1 < idx.len();
                let h = peek_record(&bytes)
                    .ok_or_else(|| Error::Corruption("internal: bad record".into()))?;
                let tomb = h.flags & REC_TOMBSTONE != 0;
                let seq = match p.kind {
                    Kind::Relocate(_) => h.seq,
                    _ => {
                        let s = ws.next_seq;
                        ws.next_seq += 1;
                        s
                    }
                };
                let (buf, off, used_up) = self.place(ws, bytes.len(), &mut new_segs)?;
                if matches!(p.kind, Kind::Relocate(_)) {
                    self.gc_room_used.fetch_add(used_up, Relaxed);
                }
                let flags = (h.flags & REC_TOMBSTONE) | if more { REC_MORE } else { 0 };
                stamp(&mut bytes, seg_tag(buf.seq), seq, flags);
                let open = ws.open.as_mut().filter(|o| Arc::ptr_eq(&o.buf, &buf));
                let o = match open {
                    Some(o) => o,
                    None => ws
                        .to_seal
                        .iter_mut()
                        .rev()
                        .find(|o| Arc::ptr_eq(&o.buf, &buf))
                        .ok_or_else(|| {
                            Error::Corruption("internal: placed segment vanished".into())
                        })?,
                };
                o.entries.push(SummaryEntry {
                    digest: p.digest,
                    seq,
                    offset: off as u32,
                    len: bytes.len() as u32,
                    tombstone: tomb,
                    more,
                });
                o.min_seq = o.min_seq.min(seq);
                o.max_seq = o.max_seq.max(seq);
                self.band_min_seq[buf.band as usize].fetch_min(seq, Relaxed);
                let loc = Loc::new(buf.slot, off as u32, bytes.len() as u32, tomb);
                if pad_virt.is_some() {
                    payload.extend_from_slice(&bytes);
                    payload.resize(round_up(payload.len(), 8), 0);
                }
                pl.push(Placed { buf, off, loc });
                st.push(bytes);
            }
            placed.push(pl);
            stamped.push(st);
        }

        // Persist: the pad (tiered), or the segment tail itself (capacity-only).
        if let Some(p) = &self.pad {
            {
                let mut s = p.st.lock();
                let v = pad_virt.or(s.hold).unwrap_or(s.tail);
                if let Some(seq) = open_seq_before.filter(|_| open_was_empty) {
                    new_segs.insert(0, seq);
                }
                for seq in new_segs.drain(..) {
                    if !s.marks.iter().any(|&(q, _)| q == seq) {
                        s.marks.push_back((seq, v));
                    }
                }
                s.pending = None;
            }
            if let Some(v) = pad_virt {
                self.pad_write(p, v, &payload, stamped.iter().map(|g| g.len()).sum())?;
            }
            self.copy_into_segments(&placed, &stamped);
        } else {
            self.copy_into_segments(&placed, &stamped);
            self.flush_segments(ws, true)?;
        }

        // Apply to the index, account live/dead bytes, acknowledge.
        let mut nrec = 0u64;
        for ((r, idx), pl) in take.iter().zip(placed.iter()) {
            let mut found = 0u32;
            for (&i, p) in idx.iter().zip(pl.iter()) {
                let rec = &r.recs[i];
                nrec += 1;
                match rec.kind {
                    Kind::Relocate(old) => {
                        if self.index.compare_exchange(rec.digest, old.0, p.loc.0) {
                            self.add_live(p.loc);
                            self.sub_live(old);
                        }
                        self.c.gc_records_moved.fetch_add(1, Relaxed);
                        self.c
                            .gc_bytes_moved
                            .fetch_add(p.loc.len8() as u64, Relaxed);
                    }
                    _ => {
                        let old = self.index.insert(rec.digest, p.loc.0);
                        self.add_live(p.loc);
                        if let Some(o) = old {
                            let o = Loc(o);
                            if rec.kind == Kind::Delete && !o.is_tombstone() {
                                found += 1;
                            }
                            self.sub_live(o);
                        }
                    }
                }
            }
            r.complete(Outcome::Done(found));
        }
        self.c.commit_groups.fetch_add(1, Relaxed);
        self.c.commit_records.fetch_add(nrec, Relaxed);
        self.seq_hint.store(ws.next_seq, SeqCst);

        // Hand sealed segments to the writer (tiered; capacity-only did it in flush_segments).
        if self.pad.is_some() {
            self.flush_segments(ws, false)?;
        }
        Ok(())
    }

    pub(crate) fn add_live(&self, l: Loc) {
        let b = self.layout.band_of_slot(l.slot()) as usize;
        self.slot_live[l.slot() as usize].fetch_add(l.len8(), Relaxed);
        self.band_live[b].fetch_add(l.len8() as u64, Relaxed);
        self.band_live_n[b].fetch_add(1, Relaxed);
        self.band_live_room[b].fetch_add(self.layout.room_cost(l.len8()), Relaxed);
    }

    pub(crate) fn sub_live(&self, l: Loc) {
        let b = self.layout.band_of_slot(l.slot()) as usize;
        self.slot_live[l.slot() as usize].fetch_sub(l.len8(), Relaxed);
        self.band_live[b].fetch_sub(l.len8() as u64, Relaxed);
        self.band_live_n[b].fetch_sub(1, Relaxed);
        self.band_live_room[b].fetch_sub(self.layout.room_cost(l.len8()), Relaxed);
    }

    /// Bytes a band's live records would occupy if rewritten: their room cost
    /// (records, summary entries, segment headers/footers and the segment and
    /// band ends they leave unusable), plus the padding this band's writes
    /// actually needed per record.
    pub(crate) fn band_cost(&self, band: usize) -> u64 {
        let live = self.band_live[band].load(Relaxed);
        let n = self.band_live_n[band].load(Relaxed) as u64;
        if n == 0 {
            return 0;
        }
        let placed = self.band_nrec[band].load(Relaxed) as u64;
        let pad_per_rec = if placed > 0 {
            self.band_pad[band].load(Relaxed) / placed
        } else {
            // Unknown after a restart: assume half the worst case.
            (live / n).min(MAX_STRADDLE_PAD as u64) / 2
        };
        self.band_live_room[band].load(Relaxed) + n * pad_per_rec + live / 64
    }

    fn copy_into_segments(&self, placed: &[Vec<Placed>], stamped: &[Vec<Vec<u8>>]) {
        for (pl, st) in placed.iter().zip(stamped.iter()) {
            for (p, b) in pl.iter().zip(st.iter()) {
                let mut d = p.buf.data.write();
                d[p.off..p.off + b.len()].copy_from_slice(b);
            }
        }
    }

    /// Seal-and-send finished segments; in capacity-only mode also flush the open
    /// segment's dirty tail and wait until it is durable.
    fn flush_segments(&self, ws: &mut WriteState, durable_tail: bool) -> Result<()> {
        if !durable_tail {
            // Tiered: every record is on the pad; a segment is written once, whole.
            for mut o in ws.to_seal.drain(..) {
                self.seal_tail(&mut o);
                let from = round_down64(o.flushed as u64, 4096) as usize;
                self.send(WMsg::Segment {
                    buf: o.buf.clone(),
                    from,
                })?;
            }
            return Ok(());
        }
        // Without a pad a group commit is durable once its records are: first the
        // records of the segments it sealed and of the open segment, then one sync
        // (the acknowledgement); only then the summaries and footers of the sealed
        // segments, which the writer's next burst syncs. A footer thus vouches only
        // for records already durable: a power cut that keeps a footer block but
        // not a record block cannot make recovery index bytes never written.
        let sealed: Vec<OpenSeg> = ws.to_seal.drain(..).collect();
        for o in sealed.iter().chain(ws.open.as_ref()) {
            if o.used > o.flushed {
                self.send(WMsg::Flush {
                    buf: o.buf.clone(),
                    from: round_down64(o.flushed as u64, 4096) as usize,
                    to: round_up(o.used, 4096),
                })?;
                self.c.partial_flushes.fetch_add(1, Relaxed);
            }
        }
        if let Some(o) = ws.open.as_mut() {
            o.flushed = o.used;
        }
        self.writer_barrier()?;
        let iu = self.layout.geo.iu as u64;
        for mut o in sealed {
            self.seal_tail(&mut o);
            let summary = o.buf.size - SEG_FOOTER - o.entries.len() * SUMMARY_ENTRY;
            let from = round_down64(summary as u64, iu.max(4096)) as usize;
            self.send(WMsg::Segment {
                buf: o.buf.clone(),
                from,
            })?;
        }
        Ok(())
    }

    /// Write summary and footer into a segment that takes no more records.
    fn seal_tail(&self, o: &mut OpenSeg) {
        let f = SegmentFooter {
            segment_seq: o.buf.seq,
            pool_tag: self.tag,
            nrec: o.entries.len() as u32,
            nslots: o.buf.nslots,
            data_len: o.used as u32,
            min_seq: if o.entries.is_empty() { 0 } else { o.min_seq },
            max_seq: o.max_seq,
        };
        let mut d = o.buf.data.write();
        encode_segment_tail(&mut d, &o.entries, &f);
    }

    /// Find room for a record of `len` bytes; returns the segment, the offset,
    /// and the band payload the record used up: its room in the segment, the
    /// header and footer of a segment it opened, and what it left unusable (the
    /// end of a segment it did not fit in, the slots of a band too few for it).
    /// `Cursor::place` follows the same steps for admission.
    fn place(
        &self,
        ws: &mut WriteState,
        len: usize,
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegBuf>, usize, u64)> {
        let seg = self.layout.seg as usize;
        let len8 = round_up(len, 8);
        let mut used_up = 0u64;
        let Some(k) = self.layout.own_slots(len) else {
            loop {
                if ws.open.is_none() {
                    used_up += self.band_tail_skipped(ws, 1) + (SEG_HEADER + SEG_FOOTER) as u64;
                    let o = self.new_segment(ws, 1)?;
                    new_segs.push(o.buf.seq);
                    ws.open = Some(o);
                }
                let o = ws
                    .open
                    .as_mut()
                    .ok_or_else(|| Error::Corruption("internal: no open segment".into()))?;
                if let Some(off) = self.layout.fit(seg, o.used, o.entries.len(), len) {
                    let band = o.buf.band as usize;
                    self.band_pad[band].fetch_add((off - round_up(o.used, 8)) as u64, Relaxed);
                    self.band_nrec[band].fetch_add(1, Relaxed);
                    used_up += (off + len8 + SUMMARY_ENTRY).saturating_sub(o.used) as u64;
                    o.used = off + len8;
                    self.slot_placed[o.buf.slot as usize].fetch_add(len8 as u32, Relaxed);
                    return Ok((o.buf.clone(), off, used_up));
                }
                if let Some(full) = ws.open.take() {
                    used_up += Self::seal_waste(seg, &full);
                    Self::close_segment(ws, full);
                }
            }
        };
        // One record larger than a segment: a segment of several slots of its own.
        if let Some(cur) = ws.open.take() {
            used_up += Self::seal_waste(seg, &cur);
            Self::close_segment(ws, cur);
        }
        used_up += self.band_tail_skipped(ws, k) + k * seg as u64;
        let mut o = self.new_segment(ws, k)?;
        new_segs.push(o.buf.seq);
        o.used = SEG_HEADER + len8;
        self.slot_placed[o.buf.slot as usize].store(len8 as u32, Relaxed);
        let buf = o.buf.clone();
        Self::close_segment(ws, o);
        Ok((buf, SEG_HEADER, used_up))
    }

    /// A segment takes no more records: queue it for sealing and remember
    /// where its records end, for the next segment's header.
    fn close_segment(ws: &mut WriteState, o: OpenSeg) {
        ws.last_closed = Some((o.buf.seq, o.used as u32));
        ws.to_seal.push(o);
    }

    /// Room left unused in a one-slot segment sealed now.
    fn seal_waste(seg: usize, o: &OpenSeg) -> u64 {
        seg.saturating_sub(o.used + o.entries.len() * SUMMARY_ENTRY + SEG_FOOTER) as u64
    }

    /// Bytes of the open band that `new_segment(ws, k)` will leave unused.
    fn band_tail_skipped(&self, ws: &WriteState, k: u64) -> u64 {
        let left = self.layout.slots_per_band - ws.next_sib;
        match ws.cur_band {
            Some(_) if left < k => left * self.layout.seg,
            _ => 0,
        }
    }

    /// Allocate `k` consecutive slots in the open band (opening a new band if needed).
    /// Seal the current band (if any) and open a free one for the writer,
    /// queueing its header.
    fn open_band(&self, ws: &mut WriteState) -> Result<()> {
        let mut bt = self.bands.lock();
        if let Some(b) = ws.cur_band.take() {
            if bt.bands[b as usize].state == BandState::Open {
                bt.bands[b as usize].state = BandState::Sealed;
            }
        }
        let b = bt
            .free
            .pop_front()
            .ok_or_else(|| Error::NoSpace("no free band (internal reserve exhausted)".into()))?;
        let info = &mut bt.bands[b as usize];
        info.state = BandState::Open;
        info.first_seq = ws.next_seg;
        info.written_slots = 0;
        info.inflight = 0;
        drop(bt);
        self.band_min_seq[b as usize].store(u64::MAX, Relaxed);
        self.band_pad[b as usize].store(0, Relaxed);
        let first = self.layout.first_slot(b) as usize;
        for u in &self.slot_placed[first..first + self.layout.slots_per_band as usize] {
            u.store(0, Relaxed);
        }
        self.band_nrec[b as usize].store(0, Relaxed);
        ws.cur_band = Some(b);
        ws.next_sib = 0;
        let hdr = BandHeader {
            state: BAND_IN_USE,
            pool_tag: self.tag,
            band: b,
            first_seq: ws.next_seg,
        };
        self.send(WMsg::BandHeader {
            band: b,
            hdr,
            free: None,
        })?;
        Ok(())
    }

    fn new_segment(&self, ws: &mut WriteState, k: u64) -> Result<OpenSeg> {
        if k > self.layout.slots_per_band {
            return Err(Error::InvalidConfig("record larger than a band".into()));
        }
        let need_band = match ws.cur_band {
            None => true,
            Some(_) => ws.next_sib + k > self.layout.slots_per_band,
        };
        if need_band {
            self.open_band(ws)?;
        }
        let band = ws
            .cur_band
            .ok_or_else(|| Error::Corruption("internal: no open band".into()))?;
        let slot = self.layout.first_slot(band) + ws.next_sib;
        ws.next_sib += k;
        let seq = ws.next_seg;
        ws.next_seg += 1;
        let mut data = AlignedBuf::new(k as usize * self.layout.seg as usize);
        let prev_end = match ws.last_closed {
            Some((s, end)) if s + 1 == seq => end,
            _ => 0,
        };
        SegmentHeader {
            segment_seq: seq,
            pool_tag: self.tag,
            nslots: k as u32,
            prev_end,
        }
        .encode_into(&mut data);
        let size = data.len();
        let buf = Arc::new(SegBuf {
            size,
            slot,
            nslots: k as u32,
            seq,
            band,
            data: RwLock::new(data),
        });
        self.bands.lock().bands[band as usize].inflight += 1;
        self.bufs.write().insert(slot, buf.clone());
        self.next_seg_hint.store(ws.next_seg, SeqCst);
        Ok(OpenSeg {
            buf,
            used: SEG_HEADER,
            entries: Vec::new(),
            min_seq: u64::MAX,
            max_seq: 0,
            flushed: 0,
        })
    }

    /// Reserve `len` bytes (rounded to 4 KiB) on the pad ring; waits while the pad is full.
    fn pad_reserve(&self, p: &PadRing, ws: &mut WriteState, len: usize) -> Result<u64> {
        let need = round_up(len, 4096) as u64;
        let mut s = p.st.lock();
        loop {
            self.check_failed()?;
            let phys = s.head % p.size;
            let wrap = if phys + need > p.size {
                p.size - phys
            } else {
                0
            };
            if s.head + wrap + need - s.tail <= p.size {
                if wrap > 0 {
                    // Mark the unused end of the ring so replay knows to continue at its start.
                    let v = s.head;
                    let bs = s.next_batch;
                    s.next_batch += 1;
                    s.batches.push_back((v, bs));
                    s.head += wrap;
                    let mut blk = AlignedBuf::new(4096);
                    encode_batch(
                        &mut blk,
                        &BatchHeader {
                            batch_seq: bs,
                            virt: v,
                            payload_len: 0,
                            nrec: 0,
                            flags: BATCH_WRAP,
                            pool_tag: self.tag,
                        },
                    );
                    p.dev
                        .write_at(&blk, p.base + v % p.size)
                        .map_err(|e| Error::io(&p.dev.info().path, "writing the pad", e))?;
                }
                let v = s.head;
                s.head += need;
                s.pending = Some(v);
                return Ok(v);
            }
            // Full. If nothing is on its way to the capacity tier, the open segment is
            // what holds the pad: seal it early rather than wait forever.
            let open_seq = ws
                .open
                .as_ref()
                .filter(|o| !o.entries.is_empty())
                .map(|o| o.buf.seq);
            let only_open = s.marks.iter().all(|m| Some(m.0) == open_seq);
            if only_open && open_seq.is_some() {
                if let Some(o) = ws.open.take() {
                    drop(s);
                    Self::close_segment(ws, o);
                    self.c.forced_seals.fetch_add(1, Relaxed);
                    self.flush_segments(ws, false)?;
                    s = p.st.lock();
                    continue;
                }
            }
            p.cv.wait_for(&mut s, Duration::from_millis(50));
        }
    }

    /// Write one group to the pad at `v` and make it durable.
    fn pad_write(&self, p: &PadRing, v: u64, payload: &[u8], nrec: usize) -> Result<()> {
        let total = round_up(BATCH_HEADER + payload.len(), 4096);
        let mut buf = AlignedBuf::new(total);
        buf[BATCH_HEADER..BATCH_HEADER + payload.len()].copy_from_slice(payload);
        let bs = {
            let mut s = p.st.lock();
            let bs = s.next_batch;
            s.next_batch += 1;
            s.batches.push_back((v, bs));
            bs
        };
        let nrec = nrec as u32;
        encode_batch(
            &mut buf,
            &BatchHeader {
                batch_seq: bs,
                virt: v,
                payload_len: payload.len() as u32,
                nrec,
                flags: 0,
                pool_tag: self.tag,
            },
        );
        let name = &p.dev.info().path;
        p.dev
            .write_at(&buf, p.base + v % p.size)
            .map_err(|e| Error::io(name, "writing the pad", e))?;
        p.dev
            .sync()
            .map_err(|e| Error::io(name, "syncing the pad", e))?;
        self.c.pad_bytes.fetch_add(total as u64, Relaxed);
        Ok(())
    }

    // -----------------------------------------------------------------------
    // Reads

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let d = self.digest(key);
        let mut last = None;
        for _ in 0..16 {
            let Some(l) = self.index.get(d) else {
                return Ok(None);
            };
            let loc = Loc(l);
            if loc.is_tombstone() {
                return Ok(None);
            }
            let gen = self.inplace_gen.load(SeqCst);
            let res = self.read_record(loc).and_then(|b| {
                let (_, k, v) = decode_record(&b)?;
                Ok((k == key).then(|| v.to_vec()))
            });
            match res {
                Ok(Some(v)) => return Ok(Some(v)),
                Ok(None) | Err(_) if self.index.get(d) != Some(l) || self.inplace_raced(gen) => {
                    // GC moved the record (or the key changed) while we read: look again.
                    self.c.read_retries.fetch_add(1, Relaxed);
                    last = Some(l);
                    continue;
                }
                // The entry is another key's (digest fingerprints collide): not found.
                Ok(None) => return Ok(None),
                Err(e @ Error::Io { .. }) => {
                    tracing::warn!(error = %e, slot = loc.slot(), "device read failed");
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, slot = loc.slot(), offset = loc.offset(), "corrupt record found by a get");
                    self.c.corruptions.fetch_add(1, Relaxed);
                    return Err(Error::Corruption(format!(
                        "record for key {:?} at segment {} offset {}: {e}",
                        String::from_utf8_lossy(&key[..key.len().min(64)]),
                        loc.slot(),
                        loc.offset()
                    )));
                }
            }
        }
        Err(Error::Corruption(format!(
            "record kept moving during read (last location {last:?})"
        )))
    }

    /// [`Db::get_many`]: index lookups, DRAM-buffered records copied, the rest read
    /// in one batch per capacity device. Anything unexpected in a batched read (a
    /// record that moved, another key's entry, a checksum failure) is settled by
    /// the single-key path, which retries moves and reports corruption.
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        // (key index, location, device, aligned start, offset of the record in the buffer)
        let mut pending: Vec<(usize, Loc, usize, u64, usize)> = Vec::new();
        let mut bufs: Vec<AlignedBuf> = Vec::new();
        let mut recheck: Vec<usize> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(l) = self.index.get(self.digest(key)) else {
                continue;
            };
            let loc = Loc(l);
            if loc.is_tombstone() {
                continue;
            }
            let in_dram = self.bufs.read().contains_key(&loc.slot());
            if in_dram {
                recheck.push(i);
                continue;
            }
            let (dev, base) = self.layout.slot_addr(loc.slot());
            let abs = base + loc.offset() as u64;
            let start = round_down64(abs, 4096);
            let end = crate::device::round_up64(abs + loc.len8() as u64, 4096);
            pending.push((i, loc, dev, start, (abs - start) as usize));
            bufs.push(AlignedBuf::new((end - start) as usize));
        }
        for dev in 0..self.pool.caps.len() {
            let mut ops: Vec<(u64, &mut [u8])> = pending
                .iter()
                .zip(bufs.iter_mut())
                .filter(|(p, _)| p.2 == dev)
                .map(|(p, b)| (p.3, &mut b[..]))
                .collect();
            if ops.is_empty() {
                continue;
            }
            let d = &self.pool.caps[dev];
            d.read_batch(&mut ops)
                .map_err(|e| Error::io(&d.info().path, "reading records", e))?;
            self.c
                .reads_from_device
                .fetch_add(ops.len() as u64, Relaxed);
        }
        for ((i, loc, _, _, s), b) in pending.iter().zip(bufs.iter()) {
            let len = loc.len8() as usize;
            match decode_record(&b[*s..*s + len]) {
                Ok((_, k, v)) if k == keys[*i] => out[*i] = Some(v.to_vec()),
                _ => recheck.push(*i),
            }
        }
        for i in recheck {
            out[i] = self.get(keys[i])?;
        }
        Ok(out)
    }

    /// The bytes of the record at `loc` (from a DRAM buffer or one device read).
    /// Whether an in-place update may have overlapped a read that started when
    /// the seqlock read `gen`.
    pub(crate) fn inplace_raced(&self, gen: u64) -> bool {
        gen & 1 == 1 || self.inplace_gen.load(SeqCst) != gen
    }

    pub(crate) fn read_record(&self, loc: Loc) -> Result<Vec<u8>> {
        let off = loc.offset() as usize;
        let len = loc.len8() as usize;
        let buf = self.bufs.read().get(&loc.slot()).cloned();
        if let Some(b) = buf {
            let d = b.data.read();
            if off + len > d.len() {
                return Err(Error::Corruption("location outside its segment".into()));
            }
            self.c.reads_from_dram.fetch_add(1, Relaxed);
            return Ok(d[off..off + len].to_vec());
        }
        let (dev, base) = self.layout.slot_addr(loc.slot());
        let abs = base + off as u64;
        let start = round_down64(abs, 4096);
        let end = crate::device::round_up64(abs + len as u64, 4096);
        let mut a = AlignedBuf::new((end - start) as usize);
        let d = &self.pool.caps[dev];
        d.read_at(&mut a, start)
            .map_err(|e| Error::io(&d.info().path, "reading a record", e))?;
        self.c.reads_from_device.fetch_add(1, Relaxed);
        let s = (abs - start) as usize;
        Ok(a[s..s + len].to_vec())
    }

    // -----------------------------------------------------------------------
    // Stats

    pub(crate) fn stats(&self) -> Stats {
        let c = &self.c;
        let user = ld(&c.user_bytes);
        let seg_bytes = ld(&c.segment_bytes);
        let (free, total) = {
            let b = self.bands.lock();
            (b.free_count(), self.layout.bands)
        };
        let pad_used = self.pad.as_ref().map(|p| {
            let s = p.st.lock();
            s.head - s.tail
        });
        let mut devices = Vec::new();
        let mut add = |d: &Arc<dyn Device>, role: &'static str| {
            let i = d.info();
            devices.push(DeviceStats {
                path: i.path.clone(),
                role,
                media: i.media.name(),
                backend: i.backend.name(),
                direct_io: i.direct_io,
                capacity: i.capacity,
                io: d.counters().snapshot(),
            });
        };
        if let Some(f) = &self.pool.fast {
            add(f, "fast");
        }
        for d in &self.pool.caps {
            add(d, "capacity");
        }
        let cap_written: u64 = devices
            .iter()
            .filter(|d| d.role == "capacity")
            .map(|d| d.io.bytes_written)
            .sum();
        let rec = self.recovery.lock().clone();
        let entries = self.index.len() as u64;
        let ibytes = self.index.memory_bytes() as u64;
        Stats {
            mode: self.pool.geo.mode.name(),
            puts: ld(&c.puts),
            gets: ld(&c.gets),
            get_hits: ld(&c.get_hits),
            deletes: ld(&c.deletes),
            batches: ld(&c.batches),
            user_bytes_written: user,
            user_bytes_read: ld(&c.read_bytes),
            reads_from_dram: ld(&c.reads_from_dram),
            reads_from_device: ld(&c.reads_from_device),
            read_retries: ld(&c.read_retries),
            commit_groups: ld(&c.commit_groups),
            commit_records: ld(&c.commit_records),
            pad_bytes_written: ld(&c.pad_bytes),
            segments_written: ld(&c.segments_written),
            segment_bytes_written: seg_bytes,
            partial_flushes: ld(&c.partial_flushes),
            inplace_writes: ld(&c.inplace_writes),
            inplace_bytes: ld(&c.inplace_bytes),
            forced_seals: ld(&c.forced_seals),
            host_write_amplification: if user > 0 {
                cap_written as f64 / user as f64
            } else {
                0.0
            },
            gc_runs: ld(&c.gc_runs),
            gc_bands_freed: ld(&c.gc_bands_freed),
            gc_bytes_read: ld(&c.gc_bytes_read),
            gc_records_moved: ld(&c.gc_records_moved),
            gc_bytes_moved: ld(&c.gc_bytes_moved),
            gc_tombstones_dropped: ld(&c.gc_tombstones_dropped),
            write_stalls: ld(&c.stalls),
            write_stall_us: ld(&c.stall_us),
            bands_total: total,
            bands_free: free,
            band_size: self.pool.geo.band_size,
            segment_size: self.pool.geo.segment_size,
            live_bytes: self.band_live.iter().map(|a| a.load(Relaxed)).sum(),
            pad_used: pad_used.unwrap_or(0),
            pad_size: self.pool.geo.pad_size,
            index_entries: entries,
            index_bytes: ibytes,
            index_bytes_per_key: if entries > 0 {
                ibytes as f64 / entries as f64
            } else {
                0.0
            },
            checkpoints: ld(&c.checkpoints),
            checkpoint_bytes: ld(&c.checkpoint_bytes),
            checkpoints_skipped: ld(&c.checkpoint_skipped),
            last_checkpoint_us: ld(&c.last_checkpoint_us),
            recovery_source: rec.source,
            recovery_us: rec.us,
            recovery_segments_replayed: rec.segments,
            recovery_pad_records: rec.pad_records,
            recovery_warnings: rec.warnings,
            recovery_notes: rec.notes,
            corruptions: ld(&c.corruptions),
            devices,
            latency: self.h.summary(),
        }
    }
}

/// Most padding a small record may leave behind to avoid straddling a 4 KiB block.
pub(crate) const MAX_STRADDLE_PAD: usize = 512;

/// Where one record of a group went.
struct Placed {
    buf: Arc<SegBuf>,
    off: usize,
    loc: Loc,
}

fn req_bytes(r: &Req) -> usize {
    r.recs.iter().map(|p| round_up(p.bytes.len(), 8)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::DeviceSpec;

    fn pool(dev: &MemDevice) -> PoolConfig {
        let mut c =
            PoolConfig::capacity_only(DeviceSpec::Device(Arc::new(dev.clone()) as Arc<dyn Device>));
        c.segment_size = Some(32 << 10);
        c.band_size = Some(512 << 10);
        c
    }

    fn opts() -> Options {
        Options {
            background_gc: false,
            histograms: false,
            ..Options::default()
        }
    }

    /// A GC move of key K and a user write of K in the same group commit: the
    /// move must not be placed after the write, or recovery ("later position
    /// wins") resurrects the moved, older version. Found by `masse stress`
    /// (scm-only kill loop, seed 13: deleted keys came back after a crash).
    fn move_and_write_in_one_group(mut user: PRec, expect: Option<&[u8]>) {
        let dev = MemDevice::new(16 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        db.put(b"K", b"old value").expect("put");
        db.put(b"other", b"x").expect("put");
        let inner = &db.inner;
        let d = inner.digest(b"K");
        let loc = Loc(inner.index.get(d).expect("K indexed"));
        let mut bytes = inner.read_record(loc).expect("read K");
        bytes.truncate(peek_record(&bytes).expect("header").total_len()); // as GC copies it
        let mv = Req::new(
            vec![PRec {
                digest: d,
                bytes,
                kind: Kind::Relocate(loc),
            }],
            Class::Gc,
        );
        let class = if user.kind == Kind::Delete {
            Class::Delete
        } else {
            Class::User
        };
        user.digest = d;
        let w = Req::new(vec![user], class);
        {
            let mut ws = inner.ws.lock();
            inner
                .commit_group(&mut ws, &[w.clone(), mv.clone()])
                .expect("commit");
        }
        assert_eq!(db.get(b"K").expect("get").as_deref(), expect);
        drop(db); // crash: reopen recovers from the log
        let db = Db::open(&pool(&dev), opts()).expect("reopen");
        assert_eq!(db.get(b"K").expect("get after recovery").as_deref(), expect);
        db.close().expect("close");
    }

    #[test]
    fn a_move_after_a_delete_in_one_group_does_not_resurrect() {
        let del = PRec {
            digest: 0,
            bytes: encode_new(b"K", b"", REC_TOMBSTONE),
            kind: Kind::Delete,
        };
        move_and_write_in_one_group(del, None);
    }

    #[test]
    fn a_move_after_a_put_in_one_group_does_not_win() {
        let put = PRec {
            digest: 0,
            bytes: encode_new(b"K", b"new value", 0),
            kind: Kind::Put,
        };
        move_and_write_in_one_group(put, Some(b"new value"));
    }

    /// A request of a multi-request `submit_all` that was still queued when an
    /// earlier one came back `Stalled` must still be waited for: another leader
    /// may hand it the leadership, and if nobody waits on it the queue's leader
    /// flag stays set and every later write blocks (issue 12, defect 4).
    #[test]
    fn a_stalled_submit_all_leaves_no_orphan_leader() {
        let dev = MemDevice::new(16 << 20);
        let opts = Options {
            max_batch_bytes: 4096,
            ..opts()
        };
        let db = Db::create(&pool(&dev), opts).expect("create");
        let inner = db.inner.clone();
        // Use up every slot of the open band (15 segments of 32 KiB): a record
        // that needs a new segment then needs a new band.
        for i in 0..15u32 {
            db.put(&i.to_le_bytes(), &vec![2u8; 30_000]).expect("fill");
        }
        // No free band at all: any GC-class request that needs one stalls.
        let hidden: Vec<u32> = inner.bands.lock().free.drain(..).collect();
        let rec = |k: &[u8], n: usize| PRec {
            digest: inner.digest(k),
            bytes: encode_new(k, &vec![1u8; n], 0),
            kind: Kind::Put,
        };
        // Another caller leads; its request x is queued first.
        let x = Req::new(vec![rec(b"x", 100)], Class::Replay);
        {
            let mut q = inner.queue.lock();
            q.leader = true;
            q.reqs.push(x.clone());
        }
        // A GC-style submit of two requests queues behind x and waits.
        let r1 = Req::new(vec![rec(b"r1", 100)], Class::Gc);
        let r2 = Req::new(vec![rec(b"r2", 5000)], Class::Gc);
        let i2 = inner.clone();
        let t = std::thread::spawn(move || i2.submit_all(vec![r1, r2]));
        while inner.queue.lock().reqs.len() < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The leader commits [x, r1] (r2 does not fit the group), hands off, returns.
        inner.lead(&x);
        assert!(
            t.join().expect("join").is_err(),
            "the stalled move was not reported"
        );
        inner.bands.lock().free.extend(hidden);
        // Every later write must still get through.
        let (tx, rx) = std::sync::mpsc::channel();
        let db = Arc::new(db);
        let d2 = db.clone();
        std::thread::spawn(move || tx.send(d2.put(b"later", b"write").is_ok()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "writes hang behind an orphaned request"
        );
    }

    /// Space admission is only sound if `Cursor::place` predicts exactly what
    /// `place` does: records of every kind of size (small ones that straddle
    /// 4 KiB, ones that fill most of a segment, ones that need 2–4 slots of
    /// their own) must leave the open segment, the open band and the free list
    /// where the cursor said.
    #[test]
    fn the_cursor_predicts_placement() {
        let dev = MemDevice::new(16 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        let inner = &db.inner;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut kinds = [0u32; 3];
        for i in 0..240u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = match rng % 3 {
                0 => 1 + (rng >> 8) as usize % 6000,
                1 => (16 << 10) + (rng >> 8) as usize % (16 << 10),
                _ => (32 << 10) + (rng >> 8) as usize % (72 << 10),
            };
            let value = vec![i as u8; len];
            let k = format!("k{i}");
            let rec_len = record_len(k.len(), len);
            let (mut want, free) = {
                let ws = inner.ws.lock();
                let c = Cursor {
                    open: ws.open.as_ref().map(|o| (o.used, o.entries.len())),
                    ..inner.admission_cursor(&ws)
                };
                (c, inner.bands.lock().free_count())
            };
            want.place(&inner.layout, rec_len);
            kinds[inner
                .layout
                .own_slots(rec_len)
                .map_or(0, |k| (k - 1).min(2)) as usize] += 1;
            db.put(k.as_bytes(), &value).expect("put");
            let ws = inner.ws.lock();
            let got = inner.admission_cursor(&ws).band_left;
            let open = ws.open.as_ref().map(|o| (o.used, o.entries.len()));
            let taken = free - inner.bands.lock().free_count();
            assert_eq!(
                (open, got, taken),
                (want.open, want.band_left, want.bands_taken),
                "record {i} of {rec_len} bytes"
            );
        }
        // Every kind of size was tried.
        assert!(kinds.iter().all(|&n| n > 20), "{kinds:?}");
        db.close().expect("close");
    }
}
