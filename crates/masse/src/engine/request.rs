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
use std::sync::Arc;

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
    /// Pad replay at open: always applied.
    Replay,
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
            Codec::V3 => self.len(codec),
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
            cv: Condvar::new(),
        })
    }
    pub fn complete(&self, o: Outcome) {
        self.state.lock().outcome = Some(o);
        self.cv.notify_all();
    }
    pub fn is_done(&self) -> bool {
        self.state.lock().outcome.is_some()
    }
    pub fn promote(&self) {
        self.state.lock().promoted = true;
        self.cv.notify_all();
    }
    pub fn wait(&self) -> Wake {
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
    /// Bytes the request's records take in a pad batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Requests waiting for a group commit, and whether a leader is at work.
#[derive(Default)]
pub(crate) struct RequestQueue {
    inner: Mutex<Queued>,
}

#[derive(Default)]
struct Queued {
    reqs: Vec<Arc<Req>>,
    leader: bool,
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
        if q.reqs.is_empty() {
            q.leader = false;
            return Next::Stop;
        }
        if mine.is_done() {
            q.reqs[0].promote();
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

    /// `(queued, leader active, already completed)`, for `Db::debug_state`.
    pub fn debug_state(&self) -> (usize, bool, usize) {
        let q = self.inner.lock();
        let done = q.reqs.iter().filter(|r| r.is_done()).count();
        (q.reqs.len(), q.leader, done)
    }
}
