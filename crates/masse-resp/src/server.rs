//! The RESP server: one event-loop thread multiplexes every connection (epoll
//! through `mio`), a pool of worker threads runs the commands.
//!
//! Why this shape. An idle or slow client must cost only its socket and buffers,
//! not a thread: a thousand idle connections are a thousand entries in the loop.
//! Engine calls block (a write returns once durable), so commands cannot run on the
//! loop; they run on workers, and the group commit of the engine merges the writes
//! of all workers waiting at once. A connection is owned by exactly one thread at a
//! time — the loop while it waits for input, a worker while its commands run — so
//! there are no per-connection locks. A worker that finishes a batch flushes the
//! replies itself and keeps reading that client while it has more requests ready
//! (bounded), so a pipelining client does not bounce through the loop.
//!
//! Limits: see [`Config`]. A protocol violation is answered with Redis's error and
//! the connection closed; a client whose unsent replies exceed `max_output` is not
//! read until they drain (TCP backpressure), so no client can make the server
//! buffer more than its own limits.
//!
//! Stopping ([`StopHandle::stop`], SIGTERM/SIGINT wired to it by the caller, or the
//! SHUTDOWN command): stop accepting, close idle connections, let every batch
//! already running finish (its writes are durable and answered), then close the
//! rest and return; the caller then closes the pool.

use crate::cmd::{run_batch, After, Client, Ctx};
use crate::keys::Stripes;
use crate::proto::{Args, Limits, Out, Parser};
use crossbeam_channel::{Receiver, Sender};
use masse::Db;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Server settings. `Default` gives Redis-like limits bounded by masse's own.
#[derive(Debug, Clone)]
pub struct Config {
    /// Password of the `default` user (`requirepass`); None: no AUTH needed.
    pub password: Option<Vec<u8>>,
    /// Request limits.
    pub limits: Limits,
    /// Clients connected at once; more are told so and closed.
    pub max_clients: usize,
    /// Threads running commands (the most commands in the engine at once, hence
    /// the widest group commit).
    pub workers: usize,
    /// Close clients idle this long (Redis `timeout`); None: never.
    pub idle_timeout: Option<Duration>,
    /// Largest reply to one command (MGET of many large values).
    pub max_reply: usize,
    /// Unsent reply bytes above which a client is not read until they drain.
    pub max_output: usize,
    /// Without a password, serve only loopback and Unix-socket clients (Redis's
    /// protected mode): others get a `-DENIED` error and are closed.
    pub protected_mode: bool,
    /// Log connections on stderr.
    pub verbose: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            password: None,
            limits: Limits {
                max_bulk: masse::MAX_VALUE_LEN.min(512 << 20),
                max_args: 1 << 20,
                max_inline: 64 << 10,
                max_query: 32 << 20,
            },
            max_clients: 10_000,
            workers: 128,
            idle_timeout: None,
            max_reply: 64 << 20,
            max_output: 4 << 20,
            protected_mode: true,
            verbose: false,
        }
    }
}

/// Counters of a running server (INFO's stats section).
#[derive(Default, Debug)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections open now.
    pub connected: AtomicU64,
    /// Connections refused (max clients).
    pub rejected: AtomicU64,
    /// Commands run.
    pub commands: AtomicU64,
    /// Bytes read from clients.
    pub net_in: AtomicU64,
    /// Bytes sent to clients.
    pub net_out: AtomicU64,
    /// Reads that found their key.
    pub hits: AtomicU64,
    /// Reads that did not.
    pub misses: AtomicU64,
    /// Error replies sent.
    pub error_replies: AtomicU64,
    /// Connections closed for a protocol violation or a limit.
    pub protocol_errors: AtomicU64,
    /// Failed AUTH attempts.
    pub auth_failures: AtomicU64,
    /// Connections closed after [`MAX_AUTH_FAILURES`] failed AUTHs.
    pub auth_disconnects: AtomicU64,
}

impl ServerStats {
    /// One line for the end-of-run report.
    pub fn report(&self) -> String {
        let l = |a: &AtomicU64| a.load(Relaxed);
        format!(
            "connections {} (rejected {}, protocol errors {}); commands {} (error replies {}); bytes in {} out {}",
            l(&self.connections),
            l(&self.rejected),
            l(&self.protocol_errors),
            l(&self.commands),
            l(&self.error_replies),
            l(&self.net_in),
            l(&self.net_out)
        )
    }
}

/// Stops a running [`Server::run`] from another thread or a signal handler.
#[derive(Clone, Debug)]
pub struct StopHandle {
    tx: Arc<UnixStream>,
}

impl StopHandle {
    /// Ask the server to stop (idempotent).
    pub fn stop(&self) {
        let _ = (&*self.tx).write(&[1]);
    }
    /// A non-blocking socket whose write end stops the server: give it to a signal
    /// handler (e.g. `signal_hook::low_level::pipe::register`).
    pub fn wake_socket(&self) -> io::Result<UnixStream> {
        self.tx.try_clone()
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding or creating a socket failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
}

fn ioe(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A RESP server over one pool.
pub struct Server {
    db: Arc<Db>,
    cfg: Config,
    stats: Arc<ServerStats>,
    listeners: Vec<Listener>,
    names: Vec<String>,
    port: u16,
    stop_rx: UnixStream,
    stop: StopHandle,
}

impl Server {
    /// A server for `db`; add listeners, then [`Server::run`].
    pub fn new(db: Arc<Db>, cfg: Config) -> Result<Server, ServerError> {
        if cfg.workers == 0 || cfg.max_clients == 0 {
            return Err(ServerError::Config(
                "workers and max clients must be positive".into(),
            ));
        }
        if cfg.password.as_ref().is_some_and(|p| p.is_empty()) {
            return Err(ServerError::Config("the password is empty".into()));
        }
        let (tx, rx) = UnixStream::pair().map_err(ioe("socketpair"))?;
        tx.set_nonblocking(true).map_err(ioe("socketpair"))?;
        rx.set_nonblocking(true).map_err(ioe("socketpair"))?;
        Ok(Server {
            db,
            cfg,
            stats: Arc::new(ServerStats::default()),
            listeners: Vec::new(),
            names: Vec::new(),
            port: 0,
            stop_rx: rx,
            stop: StopHandle { tx: Arc::new(tx) },
        })
    }

    /// Listen on a TCP address (`127.0.0.1:6379`, `[::1]:6379`, port 0 for any);
    /// returns the bound address.
    pub fn listen_tcp(&mut self, addr: &str) -> Result<SocketAddr, ServerError> {
        let what = || format!("cannot listen on {addr}");
        let l = TcpListener::bind(addr).map_err(ioe(what()))?;
        // Redis's tcp-backlog (std binds with 128): bursts of connects are not dropped.
        // SAFETY: listen(2) on a socket this function owns; re-listening resizes the queue.
        unsafe { libc::listen(l.as_raw_fd(), 511) };
        l.set_nonblocking(true).map_err(ioe(what()))?;
        let a = l.local_addr().map_err(ioe(what()))?;
        if self.port == 0 {
            self.port = a.port();
        }
        self.names.push(a.to_string());
        self.listeners.push(Listener::Tcp(l));
        Ok(a)
    }

    /// Listen on a Unix socket. A stale socket file (nothing listening) is
    /// replaced, a live one is an error; the file is removed when the server stops.
    pub fn listen_unix(&mut self, path: &Path) -> Result<(), ServerError> {
        let what = || format!("cannot listen on {}", path.display());
        if let Ok(md) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !md.file_type().is_socket() {
                return Err(ServerError::Config(format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                )));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(ServerError::Config(format!(
                    "{} is in use by another server",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(ioe(what()))?;
        }
        let l = UnixListener::bind(path).map_err(ioe(what()))?;
        l.set_nonblocking(true).map_err(ioe(what()))?;
        self.names.push(path.display().to_string());
        self.listeners.push(Listener::Unix(l, path.to_path_buf()));
        Ok(())
    }

    /// A handle that stops [`Server::run`].
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// Serve until stopped; then finish the batches running, answer them, close
    /// every connection and return (the pool stays open: the caller closes it).
    pub fn run(self) -> Result<(), ServerError> {
        if self.listeners.is_empty() {
            return Err(ServerError::Config(
                "no listener (TCP or Unix socket)".into(),
            ));
        }
        let ctx = Arc::new(Ctx {
            db: self.db.clone(),
            cfg: self.cfg.clone(),
            stats: self.stats.clone(),
            stripes: Stripes::default(),
            stop: self.stop.clone(),
            stopping: Arc::new(AtomicBool::new(false)),
            auth_gate: parking_lot::Mutex::new(None),
            started: Instant::now(),
            listening: self.names.clone(),
            port: self.port,
        });
        let mut ev = EventLoop::new(ctx, self.listeners, self.stop_rx)?;
        let r = ev.serve();
        ev.drain();
        r
    }
}

// ---------------------------------------------------------------------------
// Connections

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(b),
            Sock::Unix(s) => s.read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(b),
            Sock::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One client connection and its buffers.
struct Conn {
    key: usize,
    sock: Sock,
    inbuf: Vec<u8>,
    inpos: usize,
    parser: Parser,
    out: Out,
    sent: usize,
    client: Client,
    /// Requests parsed but not run yet (a batch stopped at the output limit).
    backlog: Vec<Args>,
    /// Close once the replies are sent (QUIT, SHUTDOWN, protocol error, EOF).
    closing: bool,
    eof: bool,
    /// Last whole command received or whole reply delivered (`--timeout`).
    last_active: Instant,
    /// After a failed AUTH: neither answered nor read before this (see `auth_gate`).
    hold_until: Option<Instant>,
}

const DENIED: &[u8] = b"-DENIED masse is running in protected mode: no password is set, so only clients on this machine are served. Set a password (--requirepass or --password-file) or start the server with --no-protected-mode.\r\n";

trait WriteNb {
    fn write_all_nb(self, b: &[u8]) -> io::Result<()>;
}
impl WriteNb for &Sock {
    /// One best-effort write on a fresh socket (its buffer takes a short message).
    fn write_all_nb(self, b: &[u8]) -> io::Result<()> {
        match self {
            Sock::Tcp(t) => (&*t).write(b).map(|_| ()),
            Sock::Unix(u) => (&*u).write(b).map(|_| ()),
        }
    }
}

/// Failed AUTHs after which a connection is closed (a client must reconnect to
/// guess again).
pub const MAX_AUTH_FAILURES: u32 = 5;
/// Least time a failed AUTH's reply is held back.
pub const AUTH_FAIL_DELAY: Duration = Duration::from_millis(200);
/// Failed AUTHs answered per second, server-wide: with many connections guessing
/// at once, each waits its turn, so the guess rate stays bounded (successful AUTHs
/// are never held).
pub const AUTH_FAIL_RATE: u32 = 100;

/// When the reply to a failed AUTH may go: at least [`AUTH_FAIL_DELAY`] from now,
/// and 1/[`AUTH_FAIL_RATE`] s after the previous one.
fn next_auth_release(gate: &parking_lot::Mutex<Option<Instant>>) -> Instant {
    let mut last = gate.lock();
    let mut t = Instant::now() + AUTH_FAIL_DELAY;
    if let Some(l) = *last {
        t = t.max(l + Duration::from_secs(1) / AUTH_FAIL_RATE);
    }
    *last = Some(t);
    t
}

/// Bytes read per read call (as Redis's PROTO_IOBUF_LEN).
const READ_CHUNK: usize = 16 << 10;
/// Most commands in one batch handed to a worker.
const MAX_BATCH: usize = 1024;
/// Most argument bytes in one batch.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// Batches a worker runs for one client before giving the loop a turn.
const WORKER_ROUNDS: usize = 16;

/// What a connection needs next.
enum Step {
    Wait,
    Close,
    Run(Vec<Args>),
}

impl Conn {
    fn pending(&self) -> usize {
        self.out.buf.len() - self.sent
    }

    /// Sends what the socket takes now. Delivering the last byte of the replies
    /// counts as activity (a whole reply taken), a partial write does not.
    fn flush(&mut self, st: &ServerStats) -> io::Result<()> {
        if self.sent < self.out.buf.len() {
            self.drain_out(st)?;
            if self.sent < self.out.buf.len() {
                return Ok(());
            }
            self.last_active = Instant::now();
        }
        self.out.buf.clear();
        if self.out.buf.capacity() > 1 << 20 {
            self.out.buf.shrink_to(64 << 10);
        }
        self.sent = 0;
        Ok(())
    }

    fn drain_out(&mut self, st: &ServerStats) -> io::Result<()> {
        while self.sent < self.out.buf.len() {
            match self.sock.write(&self.out.buf[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    st.net_out.fetch_add(n as u64, Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads what the socket has, up to a chunk (or the argument being read) more
    /// than is buffered; true if it may have more (stopped early).
    fn fill(&mut self, st: &ServerStats) -> io::Result<bool> {
        if self.inpos == self.inbuf.len() {
            self.inbuf.clear();
            self.inpos = 0;
        } else if self.inpos > 0 {
            self.inbuf.drain(..self.inpos);
            self.inpos = 0;
        }
        // At least one chunk more than is buffered, so a caller that found no
        // complete request always makes progress (or hits a limit).
        let want = self.inbuf.len() + READ_CHUNK.max(self.parser.bulk_pending().unwrap_or(0));
        while self.inbuf.len() < want {
            let at = self.inbuf.len();
            self.inbuf.resize(at + READ_CHUNK, 0);
            let r = self.sock.read(&mut self.inbuf[at..]);
            let n = match r {
                Ok(n) => n,
                Err(e) => {
                    self.inbuf.truncate(at);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(false),
                        io::ErrorKind::Interrupted => continue,
                        _ => return Err(e),
                    }
                }
            };
            self.inbuf.truncate(at + n);
            if n == 0 {
                self.eof = true;
                return Ok(false);
            }
            st.net_in.fetch_add(n as u64, Relaxed);
        }
        Ok(true)
    }

    /// Parses the complete requests buffered (a bounded batch). Before AUTH, a
    /// batch ends after AUTH/HELLO so that they run before the rest is parsed
    /// with the unauthenticated limits.
    fn parse(&mut self, lim: &Limits) -> Result<Vec<Args>, String> {
        let mut cmds: Vec<Args> = Vec::new();
        let mut bytes = 0;
        while cmds.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            let authed = self.client.authed;
            match self.parser.next(&self.inbuf, &mut self.inpos, lim, authed) {
                Ok(Some(a)) => {
                    // Progress is a whole command, not a byte: a client dripping an
                    // endless one is idle (`--timeout`).
                    self.last_active = Instant::now();
                    bytes += a.iter().map(|x| x.len() + 16).sum::<usize>();
                    let gate = !authed
                        && (a[0].eq_ignore_ascii_case(b"auth")
                            || a[0].eq_ignore_ascii_case(b"hello"));
                    cmds.push(a);
                    if gate {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    if cmds.is_empty() {
                        return Err(e.0);
                    }
                    break; // run what came before; the error comes back next time
                }
            }
        }
        Ok(cmds)
    }

    /// Flush, read, parse: what this connection needs next.
    fn step(&mut self, ctx: &Ctx, stopping: bool) -> Step {
        match self.hold_until {
            Some(t) if Instant::now() < t && !stopping => return Step::Wait,
            _ => self.hold_until = None,
        }
        if self.flush(&ctx.stats).is_err() {
            return Step::Close;
        }
        if self.closing || stopping {
            return if self.pending() == 0 {
                Step::Close
            } else {
                Step::Wait
            };
        }
        if self.pending() > ctx.cfg.max_output {
            return Step::Wait; // read no more until the client reads its replies
        }
        if !self.backlog.is_empty() {
            return Step::Run(std::mem::take(&mut self.backlog));
        }
        loop {
            let more = match self.fill(&ctx.stats) {
                Ok(m) => m,
                Err(_) => return Step::Close,
            };
            match self.parse(&ctx.cfg.limits) {
                Err(e) => {
                    ctx.stats.protocol_errors.fetch_add(1, Relaxed);
                    ctx.stats.error_replies.fetch_add(1, Relaxed);
                    if ctx.cfg.verbose {
                        eprintln!(
                            "masse-resp: client {} ({}): {e}",
                            self.client.id, self.client.addr
                        );
                    }
                    self.out.err(&format!("ERR {e}"));
                    self.closing = true;
                    let _ = self.flush(&ctx.stats);
                    return if self.pending() == 0 {
                        Step::Close
                    } else {
                        Step::Wait
                    };
                }
                Ok(c) if !c.is_empty() => return Step::Run(c),
                Ok(_) if more => continue,
                Ok(_) if self.eof => {
                    self.closing = true;
                    return if self.pending() == 0 {
                        Step::Close
                    } else {
                        Step::Wait
                    };
                }
                Ok(_) => {
                    if self.inpos == self.inbuf.len() && self.parser.idle() {
                        // Waiting between requests: an idle client keeps no buffer.
                        self.inbuf = Vec::new();
                        self.inpos = 0;
                    }
                    return Step::Wait;
                }
            }
        }
    }

    /// A failed AUTH: hold the reply (and the connection) until the server-wide
    /// gate lets it go; close the connection after [`MAX_AUTH_FAILURES`].
    fn auth_failed(&mut self, ctx: &Ctx) {
        self.client.auth_failed = false;
        let n = self.client.auth_failures;
        if n >= MAX_AUTH_FAILURES {
            self.closing = true;
            ctx.stats.auth_disconnects.fetch_add(1, Relaxed);
        }
        if n == 1 || n >= MAX_AUTH_FAILURES {
            eprintln!(
                "masse-resp: AUTH failed for client {} from {} ({n} on this connection{})",
                self.client.id,
                self.client.addr,
                if self.closing { "; closing it" } else { "" }
            );
        }
        self.hold_until = Some(next_auth_release(&ctx.auth_gate));
    }

    /// Runs a batch (on a worker), then keeps serving this client while it has
    /// complete requests ready, within bounds.
    fn work(&mut self, ctx: &Ctx, stopping: &AtomicBool, mut cmds: Vec<Args>) {
        for round in 1.. {
            let errs = self.out.errors;
            let limit = ctx.cfg.max_output;
            let (after, ran) = run_batch(ctx, &mut self.client, &mut self.out, &cmds, limit);
            ctx.stats
                .error_replies
                .fetch_add(self.out.errors - errs, Relaxed);
            if after != After::Continue {
                self.closing = true;
            } else if ran < cmds.len() {
                cmds.drain(..ran);
                self.backlog = cmds;
            }
            if self.client.auth_failed {
                self.auth_failed(ctx);
                return; // the loop answers once the hold ends
            }
            if round == WORKER_ROUNDS {
                // The loop's turn: it services this connection as soon as it is back.
                let _ = self.flush(&ctx.stats);
                return;
            }
            match self.step(ctx, stopping.load(SeqCst)) {
                Step::Run(c) => cmds = c,
                _ => return,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The event loop

const STOP: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX - 2);
const LISTENER0: usize = usize::MAX - 1024;

enum Slot {
    Free,
    Idle(Box<Conn>),
    Busy,
}

struct EventLoop {
    ctx: Arc<Ctx>,
    poll: Poll,
    listeners: Vec<Listener>,
    stop_rx: UnixStream,
    slots: Vec<Slot>,
    free: Vec<usize>,
    open: usize,
    busy: usize,
    next_id: u64,
    stopping: Arc<AtomicBool>,
    jobs: Option<Sender<(Box<Conn>, Vec<Args>)>>,
    done: Receiver<Box<Conn>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    accept_later: bool,
    /// Connections held after a failed AUTH, and when each is due.
    held: Vec<(Instant, usize)>,
}

impl EventLoop {
    fn new(
        ctx: Arc<Ctx>,
        listeners: Vec<Listener>,
        stop_rx: UnixStream,
    ) -> Result<EventLoop, ServerError> {
        let poll = Poll::new().map_err(ioe("epoll"))?;
        let reg = poll.registry();
        for (i, l) in listeners.iter().enumerate() {
            let fd = match l {
                Listener::Tcp(t) => t.as_raw_fd(),
                Listener::Unix(u, _) => u.as_raw_fd(),
            };
            reg.register(&mut SourceFd(&fd), Token(LISTENER0 + i), Interest::READABLE)
                .map_err(ioe("epoll"))?;
        }
        reg.register(
            &mut SourceFd(&stop_rx.as_raw_fd()),
            STOP,
            Interest::READABLE,
        )
        .map_err(ioe("epoll"))?;
        let waker = Arc::new(Waker::new(reg, WAKE).map_err(ioe("epoll"))?);
        let (jtx, jrx) = crossbeam_channel::unbounded::<(Box<Conn>, Vec<Args>)>();
        let (dtx, drx) = crossbeam_channel::unbounded::<Box<Conn>>();
        let stopping = ctx.stopping.clone();
        let mut workers = Vec::new();
        for i in 0..ctx.cfg.workers {
            let (ctx, jrx, dtx, waker, stopping) = (
                ctx.clone(),
                jrx.clone(),
                dtx.clone(),
                waker.clone(),
                stopping.clone(),
            );
            let h = std::thread::Builder::new()
                .name(format!("resp-worker-{i}"))
                .spawn(move || {
                    while let Ok((mut c, cmds)) = jrx.recv() {
                        c.work(&ctx, &stopping, cmds);
                        let _ = dtx.send(c);
                        let _ = waker.wake();
                    }
                })
                .map_err(ioe("cannot start a worker thread"))?;
            workers.push(h);
        }
        Ok(EventLoop {
            ctx,
            poll,
            listeners,
            stop_rx,
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            busy: 0,
            next_id: 1,
            stopping,
            jobs: Some(jtx),
            done: drx,
            workers,
            accept_later: false,
            held: Vec::new(),
        })
    }

    fn serve(&mut self) -> Result<(), ServerError> {
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = Instant::now();
        loop {
            let mut timeout = if self.accept_later {
                Some(Duration::from_millis(50))
            } else {
                self.ctx.cfg.idle_timeout.map(|_| Duration::from_secs(1))
            };
            if let Some(t) = self.held.iter().map(|h| h.0).min() {
                let d = t.saturating_duration_since(Instant::now());
                timeout = Some(timeout.map_or(d, |x| x.min(d)));
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ServerError::Io {
                    what: "epoll_wait".into(),
                    source: e,
                });
            }
            for e in events.iter() {
                match e.token() {
                    STOP => return Ok(()),
                    WAKE => {}
                    Token(t) if t >= LISTENER0 => self.accept(t - LISTENER0),
                    Token(t) => self.service(t),
                }
            }
            self.take_back();
            self.release_held();
            if self.accept_later {
                self.accept_later = false;
                (0..self.listeners.len()).for_each(|i| self.accept(i));
            }
            if let Some(t) = self.ctx.cfg.idle_timeout {
                if last_sweep.elapsed() >= Duration::from_secs(1) {
                    last_sweep = Instant::now();
                    self.sweep(t);
                }
            }
        }
    }

    /// Held connections whose time has come: answer and read them again.
    fn release_held(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        self.held.retain(|&(t, k)| {
            let keep = t > now;
            if !keep {
                due.push(k);
            }
            keep
        });
        due.into_iter().for_each(|k| self.service(k));
    }

    /// Connections handed back by workers.
    fn take_back(&mut self) {
        while let Ok(c) = self.done.try_recv() {
            let k = c.key;
            self.busy -= 1;
            if let Some(t) = c.hold_until {
                self.held.push((t, k));
            }
            self.slots[k] = Slot::Idle(c);
            self.service(k);
        }
    }

    fn accept(&mut self, i: usize) {
        loop {
            let r = match &self.listeners[i] {
                Listener::Tcp(l) => l.accept().map(|(s, a)| {
                    let _ = s.set_nodelay(true);
                    let la = s.local_addr().map(|a| a.to_string()).unwrap_or_default();
                    (Sock::Tcp(s), a.to_string(), la)
                }),
                Listener::Unix(l, p) => l.accept().map(|(s, _)| {
                    (
                        Sock::Unix(s),
                        format!("{}:0", p.display()),
                        p.display().to_string(),
                    )
                }),
            };
            match r {
                Ok((s, addr, laddr)) if self.denied(&s) => {
                    self.ctx.stats.rejected.fetch_add(1, Relaxed);
                    let _ = (&s).write_all_nb(DENIED);
                    if self.ctx.cfg.verbose {
                        eprintln!("masse-resp: refused {addr} (protected mode, laddr {laddr})");
                    }
                    s.shutdown();
                }
                Ok((s, addr, laddr)) => self.admit(s, addr, laddr),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: try again shortly instead of spinning.
                    eprintln!("masse-resp: accept failed: {e}");
                    self.accept_later = true;
                    return;
                }
            }
        }
    }

    /// Protected mode: no password and a TCP peer that is not on this machine.
    fn denied(&self, s: &Sock) -> bool {
        let cfg = &self.ctx.cfg;
        match s {
            Sock::Tcp(t) if cfg.protected_mode && cfg.password.is_none() => {
                // 127.0.0.1 on a dual-stack `[::]` listener arrives as ::ffff:127.0.0.1.
                t.peer_addr()
                    .map_or(true, |a| !a.ip().to_canonical().is_loopback())
            }
            _ => false,
        }
    }

    fn admit(&mut self, mut s: Sock, addr: String, laddr: String) {
        let st = &self.ctx.stats;
        if self.open >= self.ctx.cfg.max_clients {
            st.rejected.fetch_add(1, Relaxed);
            let _ = s.write(b"-ERR max number of clients reached\r\n");
            s.shutdown();
            return;
        }
        let nb = match &s {
            Sock::Tcp(t) => t.set_nonblocking(true),
            Sock::Unix(u) => u.set_nonblocking(true),
        };
        let key = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::Free);
            self.slots.len() - 1
        });
        let fd = s.fd();
        let reg = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        );
        if nb.is_err() || reg.is_err() {
            self.free.push(key);
            return;
        }
        st.connections.fetch_add(1, Relaxed);
        st.connected.fetch_add(1, Relaxed);
        self.open += 1;
        if self.ctx.cfg.verbose {
            eprintln!("masse-resp: client {} connected from {addr}", self.next_id);
        }
        let client = Client {
            id: self.next_id,
            name: Vec::new(),
            authed: self.ctx.cfg.password.is_none(),
            addr,
            laddr,
            fd,
            created: Instant::now(),
            last_cmd: "NULL".into(),
            lib_name: Vec::new(),
            lib_ver: Vec::new(),
            auth_failures: 0,
            auth_failed: false,
        };
        self.next_id += 1;
        self.slots[key] = Slot::Idle(Box::new(Conn {
            key,
            sock: s,
            inbuf: Vec::new(),
            inpos: 0,
            parser: Parser::default(),
            out: Out::default(),
            sent: 0,
            client,
            backlog: Vec::new(),
            closing: false,
            eof: false,
            last_active: Instant::now(),
            hold_until: None,
        }));
        self.service(key);
    }

    /// Moves an idle connection along: close it, leave it waiting, or hand its
    /// requests to a worker.
    fn service(&mut self, key: usize) {
        let stopping = self.stopping.load(SeqCst);
        let Some(Slot::Idle(c)) = self.slots.get_mut(key) else {
            return; // busy: the worker's hand-back services it; free: stale event
        };
        match c.step(&self.ctx, stopping) {
            Step::Wait => {}
            Step::Close => self.close(key),
            Step::Run(cmds) => {
                let Slot::Idle(c) = std::mem::replace(&mut self.slots[key], Slot::Busy) else {
                    return;
                };
                self.busy += 1;
                if let Some(j) = &self.jobs {
                    let _ = j.send((c, cmds));
                }
            }
        }
    }

    fn close(&mut self, key: usize) {
        if let Slot::Idle(c) = std::mem::replace(&mut self.slots[key], Slot::Free) {
            let _ = self.poll.registry().deregister(&mut SourceFd(&c.sock.fd()));
            c.sock.shutdown();
            if self.ctx.cfg.verbose {
                eprintln!("masse-resp: client {} closed", c.client.id);
            }
            self.open -= 1;
            self.ctx.stats.connected.fetch_sub(1, Relaxed);
            self.free.push(key);
        }
    }

    fn sweep(&mut self, limit: Duration) {
        for k in 0..self.slots.len() {
            if let Slot::Idle(c) = &self.slots[k] {
                if c.last_active.elapsed() > limit {
                    self.close(k);
                }
            }
        }
    }

    /// Stop: no new connections or requests; batches running finish and are
    /// answered (waiting up to 2 s per client for it to take its replies).
    fn drain(&mut self) {
        self.stopping.store(true, SeqCst);
        for l in std::mem::take(&mut self.listeners) {
            if let Listener::Unix(_, p) = l {
                let _ = std::fs::remove_file(p);
            }
        }
        let mut b = [0u8; 64];
        let _ = (&self.stop_rx).read(&mut b);
        for k in 0..self.slots.len() {
            self.finish(k);
        }
        while self.busy > 0 {
            match self.done.recv_timeout(Duration::from_secs(5)) {
                Ok(c) => {
                    let k = c.key;
                    self.busy -= 1;
                    self.slots[k] = Slot::Idle(c);
                    self.finish(k);
                }
                Err(_) => eprintln!(
                    "masse-resp: waiting for {} batches still running",
                    self.busy
                ),
            }
        }
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// Sends an idle connection's remaining replies (bounded wait), then closes it.
    fn finish(&mut self, key: usize) {
        if let Slot::Idle(c) = &mut self.slots[key] {
            let deadline = Instant::now() + Duration::from_secs(2);
            while c.flush(&self.ctx.stats).is_ok() && c.pending() > 0 && Instant::now() < deadline {
                let mut p = libc::pollfd {
                    fd: c.sock.fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, for the duration of the call.
                unsafe { libc::poll(&mut p, 1, 100) };
            }
            self.close(key);
        }
    }
}
