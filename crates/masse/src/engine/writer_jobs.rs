//! What the group commit, GC and checkpoints ask of the single writer, and
//! the queue they ask through.
//!
//! Kept apart from the writer thread itself (`writer.rs`) so that the engine's
//! shared state can hold the queue without depending on the thread that
//! drains it.

use super::segment::SegmentBuf;
use crate::device::AlignedBuf;
use crate::error::{Error, Result};
use crate::format::BandHeader;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// Work for the writer.
pub(crate) enum WriterJob {
    /// Write a band header; with `free`, the band is being released by GC:
    /// after the header is durable, TRIM the band and put it on the free list.
    BandHeader {
        band: u32,
        hdr: BandHeader,
        free: Option<Arc<Waiter>>,
    },
    /// Write a sealed segment from byte `from` (earlier bytes are already durable).
    Segment { buf: Arc<SegmentBuf>, from: usize },
    /// Write bytes `[from, to)` of the open segment (capacity-only group commit).
    Flush {
        buf: Arc<SegmentBuf>,
        from: usize,
        to: usize,
    },
    /// Overwrite whole 4 KiB pages of a capacity device in place (scm-only
    /// updates): `(device, offset, page image)`.
    InPlace(Vec<(usize, u64, AlignedBuf)>),
    /// Completes once everything sent before it is durable.
    Barrier(Arc<Waiter>),
}

impl WriterJob {
    /// The completion this job signals, if any.
    pub fn waiter(&self) -> Option<&Arc<Waiter>> {
        match self {
            WriterJob::Barrier(w) | WriterJob::BandHeader { free: Some(w), .. } => Some(w),
            _ => None,
        }
    }
}

/// A one-shot completion.
pub(crate) struct Waiter {
    res: Mutex<Option<Result<(), String>>>,
    cv: Condvar,
}

impl Waiter {
    pub fn new() -> Arc<Waiter> {
        Arc::new(Waiter {
            res: Mutex::new(None),
            cv: Condvar::new(),
        })
    }
    pub fn complete(&self, r: Result<(), String>) {
        *self.res.lock() = Some(r);
        self.cv.notify_all();
    }
    pub fn wait(&self) -> Result<()> {
        let mut g = self.res.lock();
        loop {
            if let Some(r) = g.take() {
                return r.map_err(Error::Closed);
            }
            self.cv.wait(&mut g);
        }
    }
}

/// The sending end of the writer's queue (unbounded, in order).
#[derive(Default)]
pub(crate) struct WriterQueue {
    tx: Mutex<Option<Sender<WriterJob>>>,
}

impl WriterQueue {
    /// Open the queue; the writer thread drains the returned end.
    pub fn open(&self) -> Receiver<WriterJob> {
        let (tx, rx) = crossbeam_channel::unbounded();
        *self.tx.lock() = Some(tx);
        rx
    }

    /// Close the queue: the writer ends once it has drained it.
    pub fn close(&self) {
        self.tx.lock().take();
    }

    pub fn send(&self, j: WriterJob) -> Result<()> {
        match &*self.tx.lock() {
            Some(tx) => tx
                .send(j)
                .map_err(|_| Error::Closed("writer thread has stopped".into())),
            None => Err(Error::Closed("database is closing".into())),
        }
    }

    /// Wait until everything sent so far is durable.
    pub fn barrier(&self) -> Result<()> {
        let w = Waiter::new();
        self.send(WriterJob::Barrier(w.clone()))?;
        w.wait()
    }

    /// Jobs waiting for the writer (for `Db::debug_state`).
    pub fn len(&self) -> Option<usize> {
        self.tx.lock().as_ref().map(|tx| tx.len())
    }
}
