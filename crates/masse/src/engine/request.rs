//! Write requests and the queue they wait in for the group commit.
//!
//! A caller's records form one request, which is one atomic group: all of it
//! is applied, or (after a crash) none. Requests queue here; the first caller
//! to find no leader becomes the leader and commits everything queued
//! (`commit.rs`), the others sleep on their request until it is done or they
//! are handed the leadership.

use crate::device::round_up;
use crate::format::{retag_record, Loc, REC_FLAGS_AT, REC_SEQ_AT};
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
    /// GC move: applied only if the index still points at `old`.
    Relocate(Loc),
    /// Pad replay at open: always applied.
    Replay,
}

/// A record on its way into a group commit.
#[derive(Clone)]
pub(crate) struct PendingRecord {
    pub digest: Digest,
    /// Encoded record (seq and seg tag are stamped by the leader, except for moves).
    pub bytes: Vec<u8>,
    pub kind: RecordKind,
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
    pub fn new(recs: Vec<PendingRecord>, class: WriteClass) -> Arc<Req> {
        Arc::new(Req {
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
    /// Bytes the request's records take in a segment.
    pub fn bytes(&self) -> usize {
        self.recs.iter().map(|p| round_up(p.bytes.len(), 8)).sum()
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

/// Rewrite seq, flags and seg tag of an encoded record and recompute its crc:
/// the leader stamps each record once its place is known.
pub(crate) fn stamp(rec: &mut [u8], seg_tag: u32, seq: u64, flags: u8) {
    rec[REC_SEQ_AT..REC_SEQ_AT + 8].copy_from_slice(&seq.to_le_bytes());
    rec[REC_FLAGS_AT] = flags;
    retag_record(rec, seg_tag);
}
