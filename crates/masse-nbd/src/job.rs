//! Requests: validation, execution on the backend, the reply each gets, and the
//! queue ([`JobQueue`]) where they wait for a worker.
//!
//! Separate from `conn.rs` because a job runs on a worker thread, not on its
//! connection's: it touches the connection only to queue its reply.

use crate::backend::{BackendError, Status};
use crate::budget::Payload;
use crate::conn::{Conn, Out};
use crate::proto::*;
use crate::shared::lock;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

pub(crate) struct Job {
    pub(crate) conn: Arc<Conn>,
    pub(crate) flags: u16,
    pub(crate) kind: u16,
    pub(crate) handle: u64,
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) payload: Option<Payload>,
    pub(crate) queued: Instant,
    /// Further writes read in the same burst, executed with this one as one batch.
    pub(crate) more: Vec<Job>,
}

/// Most writes, and bytes, the reader gathers into one batch.
pub(crate) const BATCH_MAX: usize = 64;
pub(crate) const BATCH_BYTES: usize = 1 << 20;

/// Room before the data of a read reply, so the data starts 4 KiB-aligned (for
/// `O_DIRECT`) and the header sits right before it: one buffer, one send.
const READ_HEADROOM: usize = 4096;

enum Done {
    Empty,
    /// A buffer holding the reply header and data at `start..`.
    Read(Payload, usize),
    Status(Vec<Status>),
}

/// Payload bytes a request of `kind` and `len` holds from its header until its
/// reply is sent (write data, then read data).
pub(crate) fn cost(kind: u16, len: u32) -> usize {
    match kind {
        CMD_READ | CMD_WRITE => len.min(MAX_PAYLOAD) as usize,
        _ => 0,
    }
}

impl Job {
    pub(crate) fn run(self) {
        if !self.more.is_empty() {
            return self.run_batch();
        }
        let sh = self.conn.sh.clone();
        let t0 = Instant::now();
        sh.stats
            .queue_ns
            .fetch_add((t0 - self.queued).as_nanos() as u64, Relaxed);
        if let Some(c) = sh.stats.requests.get(self.kind as usize) {
            c.fetch_add(1, Relaxed);
        }
        let r = self.execute();
        let t1 = Instant::now();
        sh.stats
            .backend_ns
            .fetch_add((t1 - t0).as_nanos() as u64, Relaxed);
        if r.is_err() {
            sh.stats.errors.fetch_add(1, Relaxed);
        }
        self.reply(r);
        sh.stats
            .reply_ns
            .fetch_add(t1.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Several writes: the valid ones go to the backend as one batch, each gets its reply.
    fn run_batch(mut self) {
        let more = std::mem::take(&mut self.more);
        let jobs: Vec<Job> = std::iter::once(self).chain(more).collect();
        let sh = jobs[0].conn.sh.clone();
        let t0 = Instant::now();
        let mut ok = Vec::with_capacity(jobs.len());
        for j in jobs {
            sh.stats
                .queue_ns
                .fetch_add((t0 - j.queued).as_nanos() as u64, Relaxed);
            sh.stats.requests[CMD_WRITE as usize].fetch_add(1, Relaxed);
            match j.validate() {
                Ok(()) => ok.push(j),
                Err(e) => {
                    sh.stats.errors.fetch_add(1, Relaxed);
                    j.reply(Err(e));
                }
            }
        }
        let writes: Vec<(u64, &[u8])> = ok
            .iter()
            .map(|j| (j.offset, j.payload.as_deref().unwrap_or(&[])))
            .collect();
        let fua = ok.iter().any(|j| j.flags & CMD_FLAG_FUA != 0);
        let r = if writes.is_empty() {
            Ok(())
        } else {
            ok[0].conn.export.backend.write_many(&writes, fua)
        };
        drop(writes);
        let t1 = Instant::now();
        sh.stats
            .backend_ns
            .fetch_add((t1 - t0).as_nanos() as u64 * ok.len() as u64, Relaxed);
        for mut j in ok {
            // The data is written: free it before the reply waits for the client.
            j.payload = None;
            match &r {
                Ok(()) => {
                    sh.stats.bytes_written.fetch_add(j.len as u64, Relaxed);
                    j.reply(Ok(Done::Empty));
                }
                Err(e) => {
                    sh.stats.errors.fetch_add(1, Relaxed);
                    j.reply(Err(e.clone()));
                }
            }
        }
        sh.stats
            .reply_ns
            .fetch_add(t1.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Flags, permissions, bounds and alignment, with the error each violation gets.
    pub(crate) fn validate(&self) -> Result<(), BackendError> {
        let c = &*self.conn;
        let e = &*c.export;
        let b = &*e.backend;
        let size = b.size();
        let bs = b.min_block_size() as u64;
        let (off, len) = (self.offset, self.len as u64);
        let allowed = CMD_FLAG_FUA
            | match self.kind {
                CMD_READ if c.structured => CMD_FLAG_DF,
                CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
                _ => 0,
            };
        if self.flags & !allowed != 0 {
            return Err(BackendError::new(
                EINVAL,
                format!(
                    "flags {:#x} are not valid for command {}",
                    self.flags, self.kind
                ),
            ));
        }
        let writes = matches!(self.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        if writes && e.read_only {
            return Err(BackendError::new(EPERM, "the export is read-only"));
        }
        let in_bounds = off.checked_add(len).is_some_and(|end| end <= size);
        let check_range = |beyond: u32| -> Result<(), BackendError> {
            if !in_bounds {
                return Err(BackendError::new(
                    beyond,
                    format!("offset {off} length {len} is beyond the export size {size}"),
                ));
            }
            if off % bs != 0 || len % bs != 0 {
                return Err(BackendError::new(
                    EINVAL,
                    format!("offset {off} length {len} is not a multiple of the block size {bs}"),
                ));
            }
            Ok(())
        };
        match self.kind {
            CMD_READ => {
                if self.len > MAX_PAYLOAD {
                    return Err(BackendError::new(
                        EINVAL,
                        format!("read of {len} bytes exceeds the maximum {MAX_PAYLOAD}"),
                    ));
                }
                check_range(EINVAL)
            }
            CMD_WRITE | CMD_WRITE_ZEROES => check_range(ENOSPC),
            CMD_TRIM | CMD_CACHE => check_range(EINVAL),
            CMD_FLUSH => Ok(()),
            CMD_BLOCK_STATUS => {
                if !c.meta {
                    return Err(BackendError::new(
                        EINVAL,
                        "no metadata context was negotiated",
                    ));
                }
                if len == 0 {
                    return Err(BackendError::new(EINVAL, "zero-length block status"));
                }
                check_range(EINVAL)
            }
            k => Err(BackendError::new(EINVAL, format!("unknown command {k}"))),
        }
    }

    fn execute(&self) -> Result<Done, BackendError> {
        self.validate()?;
        let c = &*self.conn;
        let b = &*c.export.backend;
        let (off, len) = (self.offset, self.len as u64);
        let fua = self.flags & CMD_FLAG_FUA != 0;
        match self.kind {
            CMD_READ => {
                let mut buf = Payload::new(READ_HEADROOM + len as usize);
                b.read(off, &mut buf[READ_HEADROOM..])?;
                c.sh.stats.bytes_read.fetch_add(len, Relaxed);
                Ok(Done::Read(buf, READ_HEADROOM))
            }
            CMD_WRITE => {
                let data = self.payload.as_deref().unwrap_or(&[]);
                if !data.is_empty() {
                    b.write(off, data, fua)?;
                }
                c.sh.stats.bytes_written.fetch_add(len, Relaxed);
                Ok(Done::Empty)
            }
            CMD_FLUSH => {
                b.flush()?;
                Ok(Done::Empty)
            }
            CMD_TRIM => {
                if len > 0 {
                    b.trim(off, len, fua)?;
                }
                Ok(Done::Empty)
            }
            CMD_WRITE_ZEROES => {
                if len > 0 {
                    let fast = self.flags & CMD_FLAG_FAST_ZERO != 0;
                    b.write_zeroes(off, len, fua, fast)?;
                }
                Ok(Done::Empty)
            }
            // Nothing to prefetch into: masse keeps no read cache by design.
            CMD_CACHE => Ok(Done::Empty),
            CMD_BLOCK_STATUS => {
                let mut st = b.block_status(off, len)?;
                st.retain(|x| x.len > 0);
                if st.is_empty() {
                    return Err(BackendError::new(EIO, "no block status for the range"));
                }
                if self.flags & CMD_FLAG_REQ_ONE != 0 {
                    st.truncate(1);
                }
                Ok(Done::Status(st))
            }
            k => Err(BackendError::new(EINVAL, format!("unknown command {k}"))),
        }
    }

    /// Build the reply and hand it to the connection, which sends it when the
    /// socket takes it (never blocking this worker) and then releases what the
    /// request held.
    fn reply(self, r: Result<Done, BackendError>) {
        let h = self.handle;
        let structured = self.conn.structured;
        let out = match r {
            Ok(Done::Read(mut buf, start)) => {
                let data_len = buf.len() - start;
                if data_len == 0 && structured {
                    Out::small(structured_header(REPLY_TYPE_NONE, h, 0).to_vec())
                } else {
                    // Header written into the headroom: header and data go out in one send.
                    let s = if structured {
                        // One OFFSET_DATA chunk, final.
                        let s = start - 28;
                        buf[s..s + 20].copy_from_slice(&structured_header(
                            REPLY_TYPE_OFFSET_DATA,
                            h,
                            (data_len + 8) as u32,
                        ));
                        buf[s + 20..start].copy_from_slice(&self.offset.to_be_bytes());
                        s
                    } else {
                        let s = start - 16;
                        buf[s..start].copy_from_slice(&simple_header(0, h));
                        s
                    };
                    Out::big(buf, s)
                }
            }
            Ok(Done::Empty) => Out::small(simple_header(0, h).to_vec()),
            Ok(Done::Status(st)) => {
                let mut b = Vec::with_capacity(24 + 8 * st.len());
                b.extend_from_slice(&structured_header(
                    REPLY_TYPE_BLOCK_STATUS,
                    h,
                    4 + 8 * st.len() as u32,
                ));
                b.extend_from_slice(&META_ID_BASE_ALLOCATION.to_be_bytes());
                for x in st {
                    let l = x.len.min(u32::MAX as u64) as u32;
                    b.extend_from_slice(&l.to_be_bytes());
                    b.extend_from_slice(&x.flags.to_be_bytes());
                }
                Out::small(b)
            }
            Err(e) => Out::small(error_reply(&e, h, structured)),
        };
        let cost = cost(self.kind, self.len);
        let Job { conn, payload, .. } = self;
        drop(payload);
        conn.send(out, cost);
    }
}

fn error_reply(e: &BackendError, h: u64, structured: bool) -> Vec<u8> {
    if !structured {
        return simple_header(e.errno, h).to_vec();
    }
    let mut msg = e.msg.as_bytes();
    if msg.len() > 1024 {
        let mut n = 1024;
        while !e.msg.is_char_boundary(n) {
            n -= 1;
        }
        msg = &msg[..n];
    }
    let mut b = Vec::with_capacity(26 + msg.len());
    b.extend_from_slice(&structured_header(
        REPLY_TYPE_ERROR,
        h,
        6 + msg.len() as u32,
    ));
    b.extend_from_slice(&e.errno.to_be_bytes());
    b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    b.extend_from_slice(msg);
    b
}

fn simple_header(err: u32, handle: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&err.to_be_bytes());
    b[8..].copy_from_slice(&handle.to_be_bytes());
    b
}

fn structured_header(kind: u16, handle: u64, len: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&REPLY_FLAG_DONE.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b[16..].copy_from_slice(&len.to_be_bytes());
    b
}

/// Requests waiting for a worker. Unbounded: every connection bounds its own share.
///
/// A `std` mutex and condvar (futex, no `sched_yield` spinning): with dozens of
/// mostly idle workers on a 2-core machine, spinning waiters cost more than
/// they save.
pub(crate) struct JobQueue {
    /// The jobs, and whether the queue is closed.
    q: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
}

impl JobQueue {
    pub(crate) fn new() -> JobQueue {
        JobQueue {
            q: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
        }
    }
    /// Queue a job for a worker; the job back if the queue is closed.
    pub(crate) fn push(&self, j: Job) -> Result<(), Job> {
        let mut g = lock(&self.q);
        if g.1 {
            return Err(j);
        }
        g.0.push_back(j);
        drop(g);
        self.cv.notify_one();
        Ok(())
    }
    /// The next job, or None once closed and drained.
    pub(crate) fn pop(&self) -> Option<Job> {
        let mut g = lock(&self.q);
        loop {
            if let Some(j) = g.0.pop_front() {
                return Some(j);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
    /// Take no more jobs; workers return once the queue is drained.
    pub(crate) fn close(&self) {
        lock(&self.q).1 = true;
        self.cv.notify_all();
    }
}
