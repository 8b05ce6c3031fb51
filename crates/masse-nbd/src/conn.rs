//! One connection: the handshake, then the transmission phase as a small event
//! loop on the connection's thread.
//!
//! The loop reads requests without blocking, admits each against the
//! connection's in-flight limits and the server-wide memory [`Budget`] *before*
//! reading its payload (when either is spent it stops reading the socket: the
//! client is slowed by TCP/Unix back-pressure, nothing is allocated), and hands
//! it to the worker pool (or runs it itself when nothing else is in flight).
//!
//! Replies go through the connection's own queue: a worker appends its reply
//! and sends what the socket takes at once, never waiting for the client; what
//! the socket does not take is sent by the loop when it becomes writable. A
//! client that stops reading therefore stalls only itself — its requests stop
//! being read once its replies hold its in-flight limit — and it is dropped when
//! its replies make no progress for `stall_timeout`.
//!
//! Everything here belongs to one connection; what connections share is in
//! `shared.rs`, and admission (who gets a connection at all) in `slots.rs`.

use crate::budget::{Payload, Waker};
use crate::config::Export;
use crate::handshake::{be16, be32, be64, handshake, Deadline, Violation};
use crate::job::{self, Job, BATCH_BYTES, BATCH_MAX};
use crate::proto::*;
use crate::shared::{lock, Shared};
use crate::transport::Stream;
use std::collections::VecDeque;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Phases of a connection, as the acceptor sees them.
pub(crate) const HANDSHAKE: u8 = 0;
pub(crate) const TRANSMISSION: u8 = 1;

/// What the acceptor knows of a connection, to choose whom to close when the
/// server is full.
pub(crate) struct ConnInfo {
    pub(crate) id: u64,
    epoch: Instant,
    last_heard_ms: AtomicU64,
    pub(crate) phase: AtomicU8,
    /// Requests read and not yet answered (replies unsent included).
    pub(crate) busy: AtomicUsize,
}

impl ConnInfo {
    pub(crate) fn new(id: u64, epoch: Instant) -> ConnInfo {
        let i = ConnInfo {
            id,
            epoch,
            last_heard_ms: AtomicU64::new(0),
            phase: AtomicU8::new(HANDSHAKE),
            busy: AtomicUsize::new(0),
        };
        i.heard();
        i
    }
    /// The client sent something.
    pub(crate) fn heard(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_heard_ms.store(ms, Relaxed);
    }
    /// Time since the client last sent anything (or connected).
    pub(crate) fn silent_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_heard_ms.load(Relaxed)))
    }
}

/// A reply waiting to be sent, and what its request holds until then.
pub(crate) struct Out {
    buf: OutBuf,
    pos: usize,
    cost: usize,
}

enum OutBuf {
    Small(Vec<u8>),
    Big(Payload),
}

impl Out {
    pub(crate) fn small(v: Vec<u8>) -> Out {
        Out {
            buf: OutBuf::Small(v),
            pos: 0,
            cost: 0,
        }
    }
    /// `p[start..]` is the reply.
    pub(crate) fn big(p: Payload, start: usize) -> Out {
        Out {
            buf: OutBuf::Big(p),
            pos: start,
            cost: 0,
        }
    }
    fn rest(&self) -> &[u8] {
        match &self.buf {
            OutBuf::Small(v) => &v[self.pos..],
            OutBuf::Big(p) => &p[self.pos..],
        }
    }
}

#[derive(Default)]
struct Outbox {
    q: VecDeque<Out>,
    /// Someone (a worker or the loop) is sending; others only queue.
    sending: bool,
    /// Since when the socket has refused replies with none of them moving.
    stuck_since: Option<Instant>,
}

pub(crate) struct Conn {
    pub(crate) sh: Arc<Shared>,
    pub(crate) export: Arc<Export>,
    pub(crate) structured: bool,
    pub(crate) meta: bool,
    sock: Stream,
    out: Mutex<Outbox>,
    /// Requests and payload bytes held: from admission until the reply is sent.
    held: Mutex<(usize, usize)>,
    /// The loop waits for `held` to fall (set and cleared under `held`'s lock).
    waiting: AtomicBool,
    waker: Arc<Waker>,
    broken: AtomicBool,
    info: Arc<ConnInfo>,
    peer: String,
}

enum Admit {
    Go,
    Wait,
}

impl Conn {
    /// Queue a reply and send what the socket takes now; never blocks.
    pub(crate) fn send(&self, mut out: Out, cost: usize) {
        out.cost = cost;
        let mut ob = lock(&self.out);
        if self.broken.load(Relaxed) {
            drop(ob);
            self.release(1, cost);
            return;
        }
        ob.q.push_back(out);
        if ob.sending {
            return;
        }
        ob.sending = true;
        drop(ob);
        self.pump();
    }

    /// Send queued replies until the queue is empty or the socket is full. The
    /// caller has the `sending` turn; this gives it back.
    fn pump(&self) {
        let mut moved = false;
        loop {
            let mut o = {
                let mut ob = lock(&self.out);
                match ob.q.pop_front() {
                    Some(o) => o,
                    None => {
                        ob.sending = false;
                        ob.stuck_since = None;
                        return;
                    }
                }
            };
            while !o.rest().is_empty() {
                match self.sock.send_now(o.rest()) {
                    Ok(n) => {
                        o.pos += n;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let mut ob = lock(&self.out);
                        ob.q.push_front(o);
                        ob.sending = false;
                        if moved || ob.stuck_since.is_none() {
                            ob.stuck_since = Some(Instant::now());
                        }
                        drop(ob);
                        // The loop sends the rest when the socket is writable.
                        self.waker.wake();
                        return;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.release(1, o.cost);
                        self.fail(&format!("cannot send a reply ({e})"), e.kind());
                        return;
                    }
                }
            }
            self.release(1, o.cost);
        }
    }

    /// The loop's turn to send, if nobody is sending and something waits.
    fn pump_if_idle(&self) {
        let mut ob = lock(&self.out);
        if ob.sending || ob.q.is_empty() {
            return;
        }
        ob.sending = true;
        drop(ob);
        self.pump();
    }

    /// The connection cannot go on: close it, and drop (and release) every reply.
    fn fail(&self, why: &str, kind: io::ErrorKind) {
        if !self.broken.swap(true, SeqCst) {
            let quiet = matches!(
                kind,
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            );
            if self.sh.cfg.verbose || !quiet {
                eprintln!("masse-nbd: {}: {why}; closing the connection", self.peer);
            }
            self.sock.shutdown(Shutdown::Both);
        }
        let dropped: Vec<Out> = {
            let mut ob = lock(&self.out);
            ob.sending = false;
            ob.q.drain(..).collect()
        };
        for o in dropped {
            self.release(1, o.cost);
        }
        self.waker.wake();
    }

    /// Take what a request of `cost` payload bytes holds, or say to wait (the
    /// loop is then woken when replies or the budget free something).
    fn admit(&self, cost: usize) -> Admit {
        let cfg = &self.sh.cfg;
        let mut h = lock(&self.held);
        if h.0 > 0 && (h.0 + 1 > cfg.max_inflight || h.1 + cost > cfg.max_inflight_bytes) {
            self.waiting.store(true, SeqCst);
            return Admit::Wait;
        }
        if cost > 0 && !self.sh.budget.acquire(self.info.id, cost, &self.waker) {
            return Admit::Wait;
        }
        h.0 += 1;
        h.1 += cost;
        self.info.busy.store(h.0, Relaxed);
        Admit::Go
    }

    fn release(&self, n: usize, cost: usize) {
        let mut h = lock(&self.held);
        h.0 -= n.min(h.0);
        h.1 -= cost.min(h.1);
        self.info.busy.store(h.0, Relaxed);
        let wake = self.waiting.swap(false, SeqCst);
        drop(h);
        self.sh.budget.release(cost);
        if wake {
            self.waker.wake();
        }
    }

    /// Requests held; when some are, the loop is woken as they finish.
    fn held_or_wait(&self) -> usize {
        let h = lock(&self.held);
        if h.0 > 0 {
            self.waiting.store(true, SeqCst);
        }
        h.0
    }

    fn stuck_for(&self) -> Option<Duration> {
        lock(&self.out).stuck_since.map(|t| t.elapsed())
    }

    fn wants_to_send(&self) -> bool {
        let ob = lock(&self.out);
        !ob.sending && !ob.q.is_empty()
    }
}

/// Serve one accepted connection: handshake, then transmission until the client
/// disconnects, breaks the protocol, stalls, or the server stops.
pub(crate) fn serve_connection(sh: Arc<Shared>, mut s: Stream, info: Arc<ConnInfo>) {
    let peer = s.peer();
    let verbose = sh.cfg.verbose;
    let session = {
        let mut d = Deadline::new(&mut s, sh.cfg.handshake_timeout, Some(&info));
        handshake(&sh, &mut d)
    };
    let session = match session {
        Ok(Some(x)) => x,
        Ok(None) => {
            s.shutdown(Shutdown::Both);
            return;
        }
        Err(Violation(m)) => {
            if !m.starts_with("socket:") {
                sh.stats.protocol_errors.fetch_add(1, Relaxed);
                eprintln!("masse-nbd: {peer}: protocol error in handshake: {m}; closing");
            } else if verbose {
                eprintln!("masse-nbd: {peer}: handshake ended: {m}");
            }
            s.shutdown(Shutdown::Both);
            return;
        }
    };
    if verbose {
        eprintln!(
            "masse-nbd: {peer}: serving export {:?}{}",
            session.export.name,
            if session.structured {
                " (structured replies)"
            } else {
                ""
            }
        );
    }
    let waker = match Waker::new() {
        Ok(w) => Arc::new(w),
        Err(e) => {
            eprintln!("masse-nbd: {peer}: cannot create an eventfd ({e}); closing");
            s.shutdown(Shutdown::Both);
            return;
        }
    };
    info.heard();
    info.phase.store(TRANSMISSION, Relaxed);
    let conn = Arc::new(Conn {
        sh: sh.clone(),
        export: session.export,
        structured: session.structured,
        meta: session.meta,
        sock: s,
        out: Mutex::new(Outbox::default()),
        held: Mutex::new((0, 0)),
        waiting: AtomicBool::new(false),
        waker,
        broken: AtomicBool::new(false),
        info,
        peer,
    });
    let end = Reader::new().run(&conn);
    sh.budget.forget(conn.info.id);
    match end {
        Ok(()) if verbose => eprintln!("masse-nbd: {}: disconnected", conn.peer),
        Ok(()) => {}
        Err(Violation(m)) if m.starts_with("stalled:") => {
            eprintln!("masse-nbd: {}: {m}; closing", conn.peer);
        }
        Err(Violation(m)) if m.starts_with("socket:") => {
            if verbose {
                eprintln!("masse-nbd: {}: connection ended: {m}", conn.peer);
            }
        }
        Err(Violation(m)) => {
            sh.stats.protocol_errors.fetch_add(1, Relaxed);
            eprintln!("masse-nbd: {}: protocol error: {m}; closing", conn.peer);
        }
    }
    conn.sock.shutdown(Shutdown::Both);
}

/// A write whose payload is still arriving.
struct Partial {
    job: Job,
    filled: usize,
}

/// The reading side of the loop: a buffer of raw request bytes and the request
/// being received.
struct Reader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    partial: Option<Partial>,
    /// Stop reading: the client hung up or disconnected, the server is stopping,
    /// or the protocol was broken (then `ended` says why).
    done: bool,
    ended: Option<Violation>,
    /// Admission said wait: parse nothing more until woken.
    blocked: bool,
    last_rx: Instant,
}

const READ_BUF: usize = 64 << 10;

impl Reader {
    fn new() -> Reader {
        Reader {
            buf: vec![0u8; READ_BUF],
            start: 0,
            end: 0,
            partial: None,
            done: false,
            ended: None,
            blocked: false,
            last_rx: Instant::now(),
        }
    }

    /// The loop. Returns once the client is gone (or dropped) and every request
    /// read has been answered or abandoned with the connection.
    fn run(mut self, c: &Arc<Conn>) -> Result<(), Violation> {
        let stall = c.sh.cfg.stall_timeout;
        loop {
            if c.sh.stopping.load(Relaxed) && !self.done {
                // Requests not yet parsed are not executed, never acknowledged.
                self.stop(c, None);
            }
            if !self.done && !c.broken.load(Relaxed) {
                self.blocked = false;
                if let Err(v) = self.parse(c) {
                    self.stop(c, Some(v));
                }
            }
            if (self.done || c.broken.load(Relaxed)) && c.held_or_wait() == 0 {
                return self.ended.map_or(Ok(()), Err);
            }
            let reading = !self.done && !self.blocked && !c.broken.load(Relaxed);
            // Blocked on admission, look again now and then (e.g. for a stop).
            let mut deadline = self.blocked.then_some(Duration::from_millis(200));
            if let Some(t) = c.stuck_for() {
                if t >= stall {
                    let m = format!("client read none of its replies for {} s", t.as_secs());
                    c.sh.stats.stalled.fetch_add(1, Relaxed);
                    c.fail(&m, io::ErrorKind::TimedOut);
                    continue;
                }
                deadline = Some(deadline.map_or(stall - t, |d: Duration| d.min(stall - t)));
            }
            if self.partial.is_some() && !self.done {
                let t = self.last_rx.elapsed();
                if t >= stall {
                    c.sh.stats.stalled.fetch_add(1, Relaxed);
                    let m = format!(
                        "stalled: a write's payload stopped arriving for {} s",
                        t.as_secs()
                    );
                    self.stop(c, Some(Violation(m)));
                    continue;
                }
                deadline = Some(deadline.map_or(stall - t, |d: Duration| d.min(stall - t)));
            }
            let (readable, writable) = poll(c, reading, c.wants_to_send(), deadline)?;
            if writable {
                c.pump_if_idle();
            }
            if readable {
                if let Err(v) = self.fill(c) {
                    self.stop(c, Some(v));
                }
            }
        }
    }

    /// Stop reading requests; with a violation, remember why.
    fn stop(&mut self, c: &Conn, why: Option<Violation>) {
        self.done = true;
        if let Some(p) = self.partial.take() {
            // Never executed, never answered: give back what it held.
            c.release(1, job::cost(p.job.kind, p.job.len));
        }
        if self.ended.is_none() {
            self.ended = why;
        }
    }

    /// Turn buffered bytes into requests, as far as admission allows, and
    /// dispatch them (consecutive writes as one batch).
    fn parse(&mut self, c: &Arc<Conn>) -> Result<(), Violation> {
        let mut jobs: Vec<Job> = Vec::new();
        let mut batch_bytes = 0usize;
        let result = loop {
            if self.partial.is_some() || self.end - self.start < 28 {
                break Ok(());
            }
            let h = &self.buf[self.start..self.start + 28];
            let magic = be32(h);
            if magic != REQUEST_MAGIC {
                break Err(Violation(format!("bad request magic {magic:#x}")));
            }
            let (flags, kind, handle) = (be16(&h[4..]), be16(&h[6..]), be64(&h[8..]));
            let (offset, len) = (be64(&h[16..]), be32(&h[24..]));
            if kind == CMD_DISC {
                self.start += 28;
                self.done = true;
                break Ok(());
            }
            if kind == CMD_WRITE && len > MAX_PAYLOAD {
                // The payload cannot be skipped cheaply; the spec allows a hard
                // disconnect above 32 MiB.
                break Err(Violation(format!(
                    "write of {len} bytes exceeds the maximum {MAX_PAYLOAD}"
                )));
            }
            if let Admit::Wait = c.admit(job::cost(kind, len)) {
                self.blocked = true;
                break Ok(());
            }
            self.start += 28;
            let j = Job {
                conn: c.clone(),
                flags,
                kind,
                handle,
                offset,
                len,
                payload: None,
                queued: Instant::now(),
                more: Vec::new(),
            };
            let Some(j) = self.with_payload(j) else {
                break Ok(());
            };
            // Writes already whole in the buffer go to the engine as one batch.
            let joins = kind == CMD_WRITE
                && jobs.last().is_some_and(|b| {
                    b.kind == CMD_WRITE
                        && b.more.len() + 1 < BATCH_MAX.min(c.sh.cfg.max_inflight)
                        && batch_bytes + len as usize <= BATCH_BYTES
                });
            match jobs.last_mut() {
                Some(b) if joins => {
                    batch_bytes += len as usize;
                    b.more.push(j);
                }
                _ => {
                    batch_bytes = len as usize;
                    jobs.push(j);
                }
            }
        };
        self.compact();
        self.dispatch(c, jobs);
        result
    }

    /// A write gets its payload from the buffer; if more must be read first it
    /// becomes the partial request (`None`). Other requests pass through.
    fn with_payload(&mut self, mut j: Job) -> Option<Job> {
        if j.kind != CMD_WRITE {
            return Some(j);
        }
        let len = j.len as usize;
        let mut p = Payload::new(len);
        let have = len.min(self.end - self.start);
        p[..have].copy_from_slice(&self.buf[self.start..self.start + have]);
        self.start += have;
        j.payload = Some(p);
        if have < len {
            self.partial = Some(Partial {
                job: j,
                filled: have,
            });
            self.last_rx = Instant::now();
            return None;
        }
        Some(j)
    }

    fn compact(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > READ_BUF / 2 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// To the workers; when this is all the connection has in flight and nothing
    /// else is buffered, run it here (saves two thread wake-ups at queue depth 1).
    fn dispatch(&self, c: &Arc<Conn>, jobs: Vec<Job>) {
        let alone = jobs.len() == 1
            && self.start == self.end
            && self.partial.is_none()
            && lock(&c.held).0 == 1 + jobs[0].more.len();
        for j in jobs {
            if alone {
                j.run();
            } else if let Err(j) = c.sh.jobs.push(j) {
                // Only when the pool is closed, which `run` does after joining connections.
                j.run();
            }
        }
    }

    /// Read what the socket has: into the partial request's payload, else into
    /// the buffer. End of stream stops reading (mid-payload it is a violation).
    fn fill(&mut self, c: &Arc<Conn>) -> Result<(), Violation> {
        loop {
            let n = match &mut self.partial {
                Some(p) => {
                    let buf = p.job.payload.as_mut().map(|b| &mut b[p.filled..]);
                    c.sock.recv_now(buf.unwrap_or(&mut []))
                }
                None if self.end < READ_BUF => c.sock.recv_now(&mut self.buf[self.end..]),
                None => return Ok(()),
            };
            let n = match n {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                if self.partial.is_some() {
                    return Err(Violation(
                        "connection closed in the middle of a write payload".into(),
                    ));
                }
                // A client may simply hang up; so does a stopping server (read side shut).
                self.stop(c, None);
                return Ok(());
            }
            c.info.heard();
            self.last_rx = Instant::now();
            match &mut self.partial {
                Some(p) => {
                    p.filled += n;
                    if p.filled == p.job.len as usize {
                        let Partial { job, .. } = self.partial.take().expect("partial");
                        self.dispatch(c, vec![job]);
                        return Ok(());
                    }
                }
                None => {
                    self.end += n;
                    return Ok(());
                }
            }
        }
    }
}

/// Wait for the socket (readable if `read`, writable if `write`), a wake-up, or
/// the deadline. Returns (readable, writable).
fn poll(
    c: &Conn,
    read: bool,
    write: bool,
    deadline: Option<Duration>,
) -> Result<(bool, bool), Violation> {
    let mut ev = 0;
    if read {
        ev |= libc::POLLIN;
    }
    if write {
        ev |= libc::POLLOUT;
    }
    let mut fds = [
        libc::pollfd {
            // Nothing wanted: leave the socket out, or a hang-up would spin us.
            fd: if ev == 0 { -1 } else { c.sock.fd() },
            events: ev,
            revents: 0,
        },
        libc::pollfd {
            fd: c.waker.fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = deadline.map_or(-1, |d| d.as_millis().clamp(1, i32::MAX as u128) as i32);
    // SAFETY: two valid pollfd structs that outlive the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok((false, false));
        }
        return Err(e.into());
    }
    if fds[1].revents != 0 {
        c.waker.drain();
    }
    let r = fds[0].revents;
    let err = r & (libc::POLLERR | libc::POLLHUP) != 0;
    // An error or hang-up shows on the next read (or send).
    Ok((
        read && (r & libc::POLLIN != 0 || err),
        write && (r & libc::POLLOUT != 0 || err),
    ))
}
