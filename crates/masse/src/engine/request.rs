//! Write requests and the queue they wait in for the group commit.
//!
//! A caller's records form one request, which is one atomic group: all of it
//! is applied, or (after a crash) none. Requests queue here; the first caller
//! to find no leader becomes the leader and commits everything queued
//! (`commit.rs`), the others sleep on their request until it is done or they
//! are handed the leadership.

use crate::format::{Codec, Loc};
use crate::index::Digest;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Class of a write, which decides how much reserve space it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteClass {
    User,
    Delete,
    Gc,
    Replay,
}

impl WriteClass {
    /// Free bands this class must leave untouched: user writes keep a reserve
    /// for deletes, deletes one for GC, so deleting data or moving it can always
    /// make room.
    pub(crate) fn reserve_bands(self) -> u32 {
        match self {
            WriteClass::User => 2,
            WriteClass::Delete => 1,
            WriteClass::Gc | WriteClass::Replay => 0,
        }
    }
}

/// What a record in a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Put,
    Delete,
    /// GC move of the record at `old` with sequence number `seq`, which it
    /// keeps (it is the same version, moved): applied only if the index still
    /// points at `old`.
    Relocate(Loc, u64),
    /// Pad replay at open: always applied. Holds the copy the index named
    /// before replay took it out (`replay::still_needed`), which placement
    /// must still land after (design.md §9.5, rule 2).
    Replay(Option<Loc>),
}

/// A record on its way into a group commit: what it says, in no format yet.
/// The leader encodes it once its place (and so its seq, tag or trailer) is
/// known.
#[derive(Clone)]
pub(crate) struct PendingRecord {
    pub digest: Digest,
    /// The key, then the value.
    pub kv: Vec<u8>,
    pub key_len: usize,
    pub tombstone: bool,
    pub kind: RecordKind,
}

impl PendingRecord {
    /// A record of `key` and `value` (empty for a delete); its digest is set
    /// by the caller, who knows the pool.
    pub fn new(key: &[u8], value: &[u8], tombstone: bool, kind: RecordKind) -> PendingRecord {
        let mut kv = Vec::with_capacity(key.len() + value.len());
        kv.extend_from_slice(key);
        kv.extend_from_slice(value);
        PendingRecord {
            digest: 0,
            kv,
            key_len: key.len(),
            tombstone,
            kind,
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.kv[..self.key_len]
    }

    pub fn value(&self) -> &[u8] {
        &self.kv[self.key_len..]
    }

    /// Its length before placement in `codec`'s format ([`Codec::base_len`]).
    pub fn len(&self, codec: Codec) -> usize {
        codec.base_len(self.key_len, self.kv.len() - self.key_len)
    }

    /// What it counts against a write batch's limit ([`crate::Db::max_batch_bytes`]):
    /// a version-2 record's padded size, in every format. A version-3 record
    /// with its seq trailer and summary entry takes about as much (a tiny
    /// one, 8 + 1 + 1 + 12 bytes against 32), so a batch within the limit
    /// (half a band's payload without a fast tier) still spans at most two
    /// bands, which GC's handling of groups across bands assumes; counting
    /// version 3's 8-byte header instead would let a batch of tiny records
    /// take more than a band.
    pub fn batch_cost(&self) -> usize {
        crate::device::round_up(crate::format::RECORD_HEADER + self.kv.len(), 8)
    }

    /// Bytes it takes in a pad batch: version 2 pads records to 8 bytes.
    pub fn pad_len(&self, codec: Codec) -> usize {
        match codec {
            Codec::V2 => crate::device::round_up(self.len(codec), 8),
            Codec::V3 | Codec::V4 => self.len(codec),
        }
    }
}

/// How a request ended.
pub(crate) enum Outcome {
    /// Applied; the number of deletes that found their key.
    Done(u32),
    /// Not enough space for this class; the caller waits for GC and resubmits.
    Stalled,
    Failed(String),
}

/// One atomic group of records and the caller waiting for it.
pub(crate) struct Req {
    pub recs: Vec<PendingRecord>,
    pub class: WriteClass,
    /// Bytes its records take in a pad batch.
    bytes: usize,
    state: Mutex<ReqState>,
    /// Set (under `state`'s lock) whenever `state` has news for the waiter,
    /// so a spinning waiter can watch it without taking the lock.
    news: AtomicBool,
    cv: Condvar,
}

#[derive(Default)]
struct ReqState {
    outcome: Option<Outcome>,
    /// The previous leader handed group-commit leadership to this request's thread.
    promoted: bool,
}

/// What a waiting caller is told.
pub(crate) enum Wake {
    Done(Outcome),
    Lead,
}

impl Req {
    pub fn new(recs: Vec<PendingRecord>, class: WriteClass, codec: Codec) -> Arc<Req> {
        Arc::new(Req {
            bytes: recs.iter().map(|p| p.pad_len(codec)).sum(),
            recs,
            class,
            state: Mutex::new(ReqState::default()),
            news: AtomicBool::new(false),
            cv: Condvar::new(),
        })
    }
    pub fn complete(&self, o: Outcome) {
        let mut g = self.state.lock();
        g.outcome = Some(o);
        self.news.store(true, Ordering::Release);
        drop(g);
        self.cv.notify_all();
    }
    pub fn is_done(&self) -> bool {
        self.state.lock().outcome.is_some()
    }
    pub fn promote(&self) {
        let mut g = self.state.lock();
        g.promoted = true;
        self.news.store(true, Ordering::Release);
        drop(g);
        self.cv.notify_all();
    }
    /// Wait for the outcome or the leadership; first spin for up to `spin`
    /// if `gate` finds a CPU free for it.
    pub fn wait(&self, gate: &SpinGate, spin: Duration) -> Wake {
        let _counted = gate.waiter();
        if !spin.is_zero() && !self.news.load(Ordering::Acquire) {
            gate.spin(spin, || self.news.load(Ordering::Acquire));
        }
        let mut g = self.state.lock();
        loop {
            if let Some(o) = g.outcome.take() {
                self.news.store(g.promoted, Ordering::Relaxed);
                return Wake::Done(o);
            }
            if std::mem::take(&mut g.promoted) {
                self.news.store(false, Ordering::Relaxed);
                return Wake::Lead;
            }
            self.cv.wait(&mut g);
        }
    }
    /// Bytes the request's records take in a pad batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Decides whether a waiting caller spins: only while the waiting callers,
/// this one included, are fewer than the CPUs (so one is left for the
/// leader it waits for; threads outside the write path, such as readers,
/// GC and the segment writer, are not counted, which is why the spin yields),
/// and the callers in the write path at most twice the CPUs.
///
/// Why spin at all: a group commit on a fast tier takes a few µs, less than
/// falling asleep on a futex and being woken costs. On the reference
/// machine (a VM, where a wake-up on another CPU is an inter-processor
/// interrupt) the futex wait and wake paths took 38 % of all CPU samples of
/// a two-thread fill and overwrite (docs/benchmarks.md, "Spinning group
/// commit waits"). Why so guarded: a busy spin with no gate ran a 16-thread
/// fill at 0.4× (the spinner held the CPU runnable writers needed), and one
/// that did not yield ran reads and writes at two threads at 0.88× (a get
/// whose read completed waited for the spinner's CPU). RocksDB's write
/// thread spins and yields the same way (`enable_write_thread_adaptive_yield`).
#[derive(Default)]
pub(crate) struct SpinGate {
    /// Callers between queueing their requests and their outcome.
    writers: AtomicUsize,
    /// Callers in [`Req::wait`], spinning or asleep.
    waiting: AtomicUsize,
}

impl SpinGate {
    /// Whether a waiter may spin now.
    fn cpu_free(&self) -> bool {
        let cpus = cpus();
        self.writers.load(Ordering::Relaxed) <= 2 * cpus
            && self.waiting.load(Ordering::Relaxed) < cpus
    }

    /// Spin until `ready()` or `limit` has passed, if a CPU is free for it;
    /// true if `ready()` was seen.
    pub fn spin(&self, limit: Duration, ready: impl Fn() -> bool) -> bool {
        if !self.cpu_free() {
            return false;
        }
        let start = Instant::now();
        // A busy spin first: a commit already under way ends within µs.
        while start.elapsed() < BUSY_SPIN.min(limit) {
            for _ in 0..64 {
                if ready() {
                    return true;
                }
                std::hint::spin_loop();
            }
        }
        // Then yield between looks, so a thread woken on this CPU (a get
        // whose read completed, the writer) runs at once rather than after
        // the spin; a yield that took long means others want this CPU, and
        // after a few of those the waiter goes to sleep (as RocksDB's write
        // thread does).
        let mut slow = 0;
        while !ready() {
            let t = Instant::now();
            if t - start >= limit || !self.cpu_free() || slow >= 3 {
                return false;
            }
            std::thread::yield_now();
            if t.elapsed() > SLOW_YIELD {
                slow += 1;
            }
        }
        true
    }

    /// Count a caller in the write path until the guard drops.
    pub fn writer(&self) -> Counted<'_> {
        Counted::new(&self.writers)
    }

    /// Count a caller waiting until the guard drops.
    pub fn waiter(&self) -> Counted<'_> {
        Counted::new(&self.waiting)
    }
}

/// One caller counted in a [`SpinGate`] count, for as long as it lives.
pub(crate) struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(n: &'a AtomicUsize) -> Counted<'a> {
        n.fetch_add(1, Ordering::Relaxed);
        Counted(n)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a waiter spins busily before it starts to yield.
const BUSY_SPIN: Duration = Duration::from_micros(2);

/// A yield that took longer than this ran another thread.
const SLOW_YIELD: Duration = Duration::from_micros(3);

/// The CPUs this process may use.
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Requests waiting for a group commit, and whether a leader is at work.
#[derive(Default)]
pub(crate) struct RequestQueue {
    inner: Mutex<Queued>,
    /// Who is writing and waiting: whether a waiter may spin.
    pub spin: SpinGate,
}

#[derive(Default)]
struct Queued {
    reqs: Vec<Arc<Req>>,
    leader: bool,
}

impl Queued {
    fn hand_on(&mut self) {
        match self.reqs.first() {
            Some(r) => r.promote(),
            None => self.leader = false,
        }
    }
}

/// What the leader should do next.
pub(crate) enum Next {
    /// Commit these requests as one group.
    Commit(Vec<Arc<Req>>),
    /// Nothing left (leadership lapsed) or handed on: stop leading.
    Stop,
}

impl RequestQueue {
    /// Queue `reqs`; true if the caller must become the leader.
    pub fn push(&self, reqs: &[Arc<Req>]) -> bool {
        let mut q = self.inner.lock();
        q.reqs.extend(reqs.iter().cloned());
        !std::mem::replace(&mut q.leader, true)
    }

    /// The leader's next group, up to `max` bytes (the first request is always
    /// taken). Once `mine` is done, leadership passes to the oldest waiting
    /// request, so no caller is kept leading other callers' writes.
    pub fn next(&self, mine: &Req, max: usize) -> Next {
        let mut q = self.inner.lock();
        if q.reqs.is_empty() || mine.is_done() {
            q.hand_on();
            return Next::Stop;
        }
        let mut total = 0usize;
        let mut n = 0;
        for r in &q.reqs {
            let b = r.bytes();
            if n > 0 && total + b > max {
                break;
            }
            total += b;
            n += 1;
        }
        Next::Commit(q.reqs.drain(..n).collect())
    }

    /// The leader stops: leadership passes to the oldest waiting request,
    /// or lapses when none waits.
    pub fn hand_on(&self) {
        self.inner.lock().hand_on();
    }

    /// `(queued, leader active, already completed)`, for `Db::debug_state`.
    pub fn debug_state(&self) -> (usize, bool, usize) {
        let q = self.inner.lock();
        let done = q.reqs.iter().filter(|r| r.is_done()).count();
        (q.reqs.len(), q.leader, done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn req() -> Arc<Req> {
        Req::new(Vec::new(), WriteClass::User, Codec::V3)
    }

    /// `f` on a thread of its own, failing the test if it hangs (a lost
    /// wake-up) rather than hanging the test.
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(f()).unwrap());
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a waiter never woke: lost wake-up")
    }

    /// An outcome arriving before the wait, during the spin or after the
    /// waiter fell asleep is seen every time, and a hand-over of the
    /// leadership likewise, and before the outcome that follows it.
    #[test]
    fn a_waiter_sees_what_comes_while_it_spins_or_sleeps() {
        let gate = Arc::new(SpinGate::default());
        for delay_us in [0u64, 20, 5_000] {
            for promote in [false, true] {
                let r = req();
                let (r2, g2) = (r.clone(), gate.clone());
                let (go, went) = mpsc::channel::<()>();
                let waiter = std::thread::spawn(move || {
                    within_10s(move || {
                        let mut wakes = Vec::new();
                        loop {
                            match r2.wait(&g2, Duration::from_millis(1)) {
                                Wake::Lead => {
                                    wakes.push("lead");
                                    go.send(()).unwrap();
                                }
                                Wake::Done(Outcome::Done(7)) => return (wakes, "done"),
                                Wake::Done(_) => return (wakes, "wrong outcome"),
                            }
                        }
                    })
                });
                std::thread::sleep(Duration::from_micros(delay_us));
                if promote {
                    r.promote();
                    // The outcome comes only after the leadership was taken.
                    went.recv_timeout(Duration::from_secs(10)).unwrap();
                }
                r.complete(Outcome::Done(7));
                let (wakes, end) = waiter.join().unwrap();
                assert_eq!(end, "done");
                assert_eq!(wakes, if promote { vec!["lead"] } else { vec![] });
                assert!(!r.news.load(Ordering::Relaxed), "news left up");
            }
        }
        assert_eq!(gate.waiting.load(Ordering::Relaxed), 0);
    }

    /// The spin itself sees news that comes while it runs, and gives up at
    /// its limit when nothing comes (on one CPU it never spins).
    #[test]
    fn the_spin_sees_news_and_gives_up_at_its_limit() {
        let gate = SpinGate::default();
        let _me = gate.waiter();
        let looks = std::cell::Cell::new(0);
        let seen = gate.spin(Duration::from_secs(5), || {
            looks.set(looks.get() + 1);
            looks.get() >= 10
        });
        assert_eq!(seen, cpus() > 1);
        assert_eq!(looks.get(), if cpus() > 1 { 10 } else { 0 });
        let t0 = Instant::now();
        assert!(!gate.spin(Duration::from_millis(2), || false));
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    /// Spinning is allowed only with a CPU to spare: fewer waiters than
    /// CPUs, and no more than twice as many writers as CPUs.
    #[test]
    fn spinning_stops_when_callers_crowd_in() {
        let gate = SpinGate::default();
        let _w = gate.writer();
        let me = gate.waiter();
        assert_eq!(gate.cpu_free(), cpus() > 1, "one writer waiting");
        let crowd: Vec<_> = (0..2 * cpus()).map(|_| gate.writer()).collect();
        assert!(!gate.cpu_free(), "more writers than twice the CPUs");
        assert!(!gate.spin(Duration::from_secs(60), || true), "spun anyway");
        drop(crowd);
        let waiters: Vec<_> = (1..cpus()).map(|_| gate.waiter()).collect();
        assert!(!gate.cpu_free(), "as many waiters as CPUs");
        drop(waiters);
        drop(me);
        assert_eq!(gate.waiting.load(Ordering::Relaxed), 0);
    }
}
