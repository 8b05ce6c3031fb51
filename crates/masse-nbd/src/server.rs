//! The NBD server: listeners, the fixed-newstyle handshake, and the transmission
//! phase with many requests in flight per connection.
//!
//! Threads, no async runtime. Per connection one thread reads requests (and, in the
//! handshake, does the whole negotiation); a pool of worker threads shared by all
//! connections executes requests and writes each reply under the connection's
//! writer lock, so replies go out in completion order (out of order with respect
//! to requests). A connection has at most `max_inflight` requests (and
//! `max_inflight_bytes` of payload) queued or running; its reader stops reading
//! until one completes. When nothing else of the connection is in flight and no
//! further request is already buffered, the reader executes the request itself:
//! at queue depth 1 this saves two thread wake-ups per request.
//!
//! Queues and locks here are `std` ones (futex, no `sched_yield` spinning): with
//! dozens of mostly idle workers on a 2-core machine, spinning waiters cost more
//! than they save.
//!
//! Stopping ([`StopHandle::stop`], or SIGTERM/SIGINT wired to it by the caller):
//! stop accepting, shut the read side of every connection (no new requests are
//! taken), let every request already read finish and be answered, then return.

use crate::backend::{Backend, BackendError};
use crate::proto::*;
use masse::device::AlignedBuf;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One export: a name and what it serves.
pub struct Export {
    /// Name clients ask for. The first export is also the default export ("").
    pub name: String,
    /// The storage.
    pub backend: Arc<dyn Backend>,
    /// Refuse writes, trims and write-zeroes (`NBD_FLAG_READ_ONLY`).
    pub read_only: bool,
}

/// Tunables. `Default` gives sane values.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Worker threads shared by all connections (requests executing at once).
    pub workers: usize,
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Requests queued or running per connection.
    pub max_inflight: usize,
    /// Payload bytes (write data and read replies) queued or running per connection.
    pub max_inflight_bytes: usize,
    /// Longest wait for the client during the handshake.
    pub handshake_timeout: Duration,
    /// Longest a reply may wait for the client to read (a client that stops reading
    /// is disconnected after this).
    pub send_timeout: Duration,
    /// Log each connection and disconnection on stderr (protocol errors are always logged).
    pub verbose: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers: 32,
            max_connections: 256,
            max_inflight: 128,
            max_inflight_bytes: 64 << 20,
            handshake_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            verbose: false,
        }
    }
}

/// Counters of a running server, for reports and profiles.
#[derive(Default, Debug)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused (too many).
    pub refused: AtomicU64,
    /// Connections closed for a protocol violation.
    pub protocol_errors: AtomicU64,
    /// Requests by command: read, write, flush, trim, cache, write-zeroes, block-status.
    pub requests: [AtomicU64; 8],
    /// Requests answered with an error.
    pub errors: AtomicU64,
    /// Payload bytes read by clients.
    pub bytes_read: AtomicU64,
    /// Payload bytes written by clients.
    pub bytes_written: AtomicU64,
    /// Total nanoseconds requests waited between being read and a worker taking them.
    pub queue_ns: AtomicU64,
    /// Total nanoseconds in the backend.
    pub backend_ns: AtomicU64,
    /// Total nanoseconds building and sending replies (including the writer lock).
    pub reply_ns: AtomicU64,
}

impl ServerStats {
    /// A short multi-line report.
    pub fn report(&self) -> String {
        let names = [
            "read",
            "write",
            "disc",
            "flush",
            "trim",
            "cache",
            "write-zeroes",
            "block-status",
        ];
        let total: u64 = self.requests.iter().map(|c| c.load(Relaxed)).sum();
        let mut s = format!(
            "connections {} (refused {}, protocol errors {}); requests {} (errors {}):",
            self.connections.load(Relaxed),
            self.refused.load(Relaxed),
            self.protocol_errors.load(Relaxed),
            total,
            self.errors.load(Relaxed)
        );
        for (n, c) in names.iter().zip(self.requests.iter()) {
            let c = c.load(Relaxed);
            if c > 0 {
                s.push_str(&format!(" {n} {c}"));
            }
        }
        s.push_str(&format!(
            "\nbytes read {} written {}",
            self.bytes_read.load(Relaxed),
            self.bytes_written.load(Relaxed)
        ));
        if total > 0 {
            let us = |v: &AtomicU64| v.load(Relaxed) as f64 / total as f64 / 1000.0;
            s.push_str(&format!(
                "\nmean per request: queue {:.1} us, backend {:.1} us, reply {:.1} us",
                us(&self.queue_ns),
                us(&self.backend_ns),
                us(&self.reply_ns)
            ));
        }
        s
    }
}

// ---------------------------------------------------------------------------
// Sockets

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        };
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
    fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp".into()),
            Stream::Unix(_) => "unix socket".into(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                // Replies are small and latency-bound (spec: disable Nagle).
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Server

/// Stops a running [`Server::run`] from another thread or a signal handler.
#[derive(Clone)]
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

struct Shared {
    exports: Vec<Arc<Export>>,
    cfg: ServerConfig,
    stopping: AtomicBool,
    stats: Arc<ServerStats>,
    jobs: JobQueue,
}

/// Requests waiting for a worker. Unbounded: every connection bounds its own share.
struct JobQueue {
    q: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
}

/// Lock, ignoring poisoning: a panicking worker must not take the server down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl JobQueue {
    fn push(&self, j: Job) -> Result<(), Job> {
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
    fn pop(&self) -> Option<Job> {
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
    fn close(&self) {
        lock(&self.q).1 = true;
        self.cv.notify_all();
    }
}

/// An NBD server over a fixed set of exports.
pub struct Server {
    shared: Arc<Shared>,
    listeners: Vec<Listener>,
    stop_rx: UnixStream,
    stop: StopHandle,
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

impl Server {
    /// A server for `exports` (at least one; names must be distinct).
    pub fn new(exports: Vec<Export>, cfg: ServerConfig) -> Result<Server, ServerError> {
        if exports.is_empty() {
            return Err(ServerError::Config("no export to serve".into()));
        }
        for (i, e) in exports.iter().enumerate() {
            if e.name.len() > MAX_STRING || e.name.contains('\0') {
                return Err(ServerError::Config(format!(
                    "export name {:?} is not a valid NBD string",
                    e.name
                )));
            }
            if exports[..i].iter().any(|o| o.name == e.name) {
                return Err(ServerError::Config(format!(
                    "export name {:?} is given twice",
                    e.name
                )));
            }
        }
        if cfg.workers == 0 || cfg.max_inflight == 0 || cfg.max_connections == 0 {
            return Err(ServerError::Config(
                "workers, max_inflight and max_connections must be positive".into(),
            ));
        }
        let (stop_tx, stop_rx) = UnixStream::pair().map_err(ioe("socketpair"))?;
        stop_tx.set_nonblocking(true).map_err(ioe("socketpair"))?;
        Ok(Server {
            shared: Arc::new(Shared {
                exports: exports.into_iter().map(Arc::new).collect(),
                cfg,
                stopping: AtomicBool::new(false),
                stats: Arc::new(ServerStats::default()),
                jobs: JobQueue {
                    q: Mutex::new((VecDeque::new(), false)),
                    cv: Condvar::new(),
                },
            }),
            listeners: Vec::new(),
            stop_rx,
            stop: StopHandle {
                tx: Arc::new(stop_tx),
            },
        })
    }

    /// Listen on a TCP address (e.g. `127.0.0.1:10809`, `[::]:10809`). Returns the
    /// bound address (useful with port 0).
    pub fn listen_tcp(&mut self, addr: &str) -> Result<std::net::SocketAddr, ServerError> {
        let l = TcpListener::bind(addr).map_err(ioe(format!("cannot listen on {addr}")))?;
        l.set_nonblocking(true)
            .map_err(ioe(format!("cannot listen on {addr}")))?;
        let a = l
            .local_addr()
            .map_err(ioe(format!("cannot listen on {addr}")))?;
        self.listeners.push(Listener::Tcp(l));
        Ok(a)
    }

    /// Listen on a Unix socket at `path`. A stale socket file (nothing listening) is
    /// replaced; a live one is an error. The file is removed when the server stops.
    pub fn listen_unix(&mut self, path: &Path) -> Result<(), ServerError> {
        let what = || format!("cannot listen on {}", path.display());
        if path.exists() {
            use std::os::unix::fs::FileTypeExt;
            let md = std::fs::symlink_metadata(path).map_err(ioe(what()))?;
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
        self.listeners.push(Listener::Unix(l, path.to_path_buf()));
        Ok(())
    }

    /// A handle that stops [`Server::run`].
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.shared.stats.clone()
    }

    /// Serve until stopped; then finish every request already read, answer it, close
    /// every connection, flush every writable export and return.
    pub fn run(self) -> Result<(), ServerError> {
        if self.listeners.is_empty() {
            return Err(ServerError::Config(
                "no listener (TCP or Unix socket)".into(),
            ));
        }
        let mut workers = Vec::new();
        for i in 0..self.shared.cfg.workers {
            let sh = self.shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn(move || {
                    while let Some(job) = sh.jobs.pop() {
                        job.run();
                    }
                })
                .map_err(ioe("cannot start a worker thread"))?;
            workers.push(h);
        }
        let mut conns: HashMap<u64, (Stream, JoinHandle<()>)> = HashMap::new();
        let mut next_id = 0u64;
        let mut fds: Vec<libc::pollfd> = self
            .listeners
            .iter()
            .map(|l| l.fd())
            .chain(std::iter::once(self.stop_rx.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        'serve: loop {
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("masse-nbd: poll failed: {e}; stopping");
                break;
            }
            if fds[fds.len() - 1].revents != 0 {
                break 'serve;
            }
            conns.retain(|_, (_, h)| !h.is_finished());
            for (i, l) in self.listeners.iter().enumerate() {
                if fds[i].revents == 0 {
                    continue;
                }
                loop {
                    let s = match l.accept() {
                        Ok(s) => s,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            // EMFILE and friends: back off instead of spinning.
                            eprintln!("masse-nbd: accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                            break;
                        }
                    };
                    if conns.len() >= self.shared.cfg.max_connections {
                        self.shared.stats.refused.fetch_add(1, Relaxed);
                        s.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(ctl) = s.try_clone() else { continue };
                    self.shared.stats.connections.fetch_add(1, Relaxed);
                    let sh = self.shared.clone();
                    let id = next_id;
                    next_id += 1;
                    match std::thread::Builder::new()
                        .name(format!("nbd-conn-{id}"))
                        .spawn(move || serve_connection(sh, s))
                    {
                        Ok(h) => {
                            conns.insert(id, (ctl, h));
                        }
                        Err(e) => {
                            eprintln!("masse-nbd: cannot start a connection thread: {e}");
                            ctl.shutdown(Shutdown::Both);
                        }
                    }
                }
            }
        }
        // Stop: no new connections, no new requests; finish and answer the rest.
        self.shared.stopping.store(true, SeqCst);
        for (s, _) in conns.values() {
            s.shutdown(Shutdown::Read);
        }
        for (_, (_, h)) in conns.drain() {
            let _ = h.join();
        }
        // Everything acknowledged is made durable before returning, FUA or not.
        let mut result = Ok(());
        for e in &self.shared.exports {
            if e.read_only {
                continue;
            }
            if let Err(err) = e.backend.flush() {
                eprintln!(
                    "masse-nbd: flushing export {:?} at shutdown failed: {err}",
                    e.name
                );
                result = Err(ServerError::Config(format!(
                    "flushing export {:?} at shutdown failed: {err}",
                    e.name
                )));
            }
        }
        let Server {
            shared, listeners, ..
        } = self;
        for l in &listeners {
            if let Listener::Unix(_, p) = l {
                let _ = std::fs::remove_file(p);
            }
        }
        shared.jobs.close();
        drop(shared);
        for w in workers {
            let _ = w.join();
        }
        result
    }
}

// ---------------------------------------------------------------------------
// Handshake

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// A protocol violation: the connection is closed.
#[derive(Debug)]
struct Violation(String);

impl From<io::Error> for Violation {
    fn from(e: io::Error) -> Violation {
        Violation(format!("socket: {e}"))
    }
}

/// What the handshake settled.
struct Session {
    export: Arc<Export>,
    structured: bool,
    meta: bool,
}

fn opt_reply(s: &mut Stream, opt: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b)
}

fn opt_error(s: &mut Stream, opt: u32, kind: u32, msg: &str) -> io::Result<()> {
    opt_reply(s, opt, kind, msg.as_bytes())
}

fn transmission_flags(e: &Export, structured: bool) -> u16 {
    let mut f =
        FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_CAN_MULTI_CONN | FLAG_SEND_CACHE;
    if e.read_only {
        f |= FLAG_READ_ONLY;
    } else {
        f |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        // Reads always go out as one content chunk, so "don't fragment" holds anyway.
        f |= FLAG_SEND_DF;
    }
    f
}

/// Cursor over option data; running short is an invalid option.
struct Cur<'a>(&'a [u8]);
impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(be16)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(be32)
    }
    fn string(&mut self, n: usize) -> Option<&'a str> {
        if n > MAX_STRING {
            return None;
        }
        std::str::from_utf8(self.take(n)?).ok()
    }
}

fn find_export(sh: &Shared, name: &str) -> Option<Arc<Export>> {
    if name.is_empty() {
        return sh.exports.first().cloned();
    }
    sh.exports.iter().find(|e| e.name == name).cloned()
}

/// Parse NBD_OPT_{LIST,SET}_META_CONTEXT data: export name and queries.
fn parse_meta(data: &[u8]) -> Option<(&str, Vec<&str>)> {
    let mut c = Cur(data);
    let nl = c.u32()? as usize;
    let name = c.string(nl)?;
    let nq = c.u32()? as usize;
    let mut qs = Vec::new();
    for _ in 0..nq {
        let ql = c.u32()? as usize;
        qs.push(c.string(ql)?);
    }
    c.0.is_empty().then_some((name, qs))
}

fn handshake(sh: &Shared, s: &mut Stream) -> Result<Option<Session>, Violation> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let mut b4 = [0u8; 4];
    s.read_exact(&mut b4)?;
    let cflags = be32(&b4);
    if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(Violation(format!("unknown client flags {cflags:#x}")));
    }
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let mut structured = false;
    // Export name for which base:allocation was selected.
    let mut meta: Option<String> = None;
    for _ in 0..4096 {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        if be64(&h) != IHAVEOPT {
            return Err(Violation(format!("bad option magic {:#x}", be64(&h))));
        }
        let opt = be32(&h[8..]);
        let len = be32(&h[12..]);
        if len > MAX_OPTION_LEN {
            return Err(Violation(format!(
                "option {opt} carries {len} bytes (at most {MAX_OPTION_LEN} accepted)"
            )));
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data)?;
        if sh.stopping.load(Relaxed) && opt != OPT_ABORT {
            if opt == OPT_EXPORT_NAME {
                return Ok(None);
            }
            opt_error(s, opt, REP_ERR_SHUTDOWN, "server is shutting down")?;
            continue;
        }
        match opt {
            OPT_EXPORT_NAME => {
                let Some(e) = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|n| find_export(sh, n))
                else {
                    // This option cannot fail politely: the spec says close.
                    return Err(Violation(format!(
                        "NBD_OPT_EXPORT_NAME for unknown export {:?}",
                        String::from_utf8_lossy(&data[..data.len().min(256)])
                    )));
                };
                let mut b = Vec::with_capacity(134);
                b.extend_from_slice(&e.backend.size().to_be_bytes());
                b.extend_from_slice(&transmission_flags(&e, structured).to_be_bytes());
                if !no_zeroes {
                    b.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&b)?;
                let meta = meta.as_deref() == Some(e.name.as_str());
                return Ok(Some(Session {
                    export: e,
                    structured,
                    meta,
                }));
            }
            OPT_ABORT => {
                let _ = opt_reply(s, opt, REP_ACK, &[]);
                return Ok(None);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    opt_error(s, opt, REP_ERR_INVALID, "NBD_OPT_LIST takes no data")?;
                    continue;
                }
                for e in &sh.exports {
                    let mut d = Vec::new();
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(e.backend.description().as_bytes());
                    opt_reply(s, opt, REP_SERVER, &d)?;
                }
                opt_reply(s, opt, REP_ACK, &[])?;
            }
            OPT_STARTTLS => {
                opt_error(s, opt, REP_ERR_POLICY, "this server does not offer TLS")?;
            }
            OPT_INFO | OPT_GO => {
                let mut c = Cur(&data);
                let parsed = (|| {
                    let nl = c.u32()? as usize;
                    let name = c.string(nl)?;
                    let n = c.u16()? as usize;
                    let mut reqs = Vec::with_capacity(n);
                    for _ in 0..n {
                        reqs.push(c.u16()?);
                    }
                    c.0.is_empty().then_some((name.to_string(), reqs))
                })();
                let Some((name, reqs)) = parsed else {
                    opt_error(s, opt, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data")?;
                    continue;
                };
                let Some(e) = find_export(sh, &name) else {
                    opt_error(
                        s,
                        opt,
                        REP_ERR_UNKNOWN,
                        &format!("no export named {name:?}"),
                    )?;
                    continue;
                };
                let mut d = Vec::with_capacity(12);
                d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                d.extend_from_slice(&e.backend.size().to_be_bytes());
                d.extend_from_slice(&transmission_flags(&e, structured).to_be_bytes());
                opt_reply(s, opt, REP_INFO, &d)?;
                if reqs.contains(&INFO_NAME) {
                    let mut d = INFO_NAME.to_be_bytes().to_vec();
                    d.extend_from_slice(e.name.as_bytes());
                    opt_reply(s, opt, REP_INFO, &d)?;
                }
                if reqs.contains(&INFO_DESCRIPTION) {
                    let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
                    d.extend_from_slice(e.backend.description().as_bytes());
                    opt_reply(s, opt, REP_INFO, &d)?;
                }
                // Always sent: the minimum block size is enforced.
                let min = e.backend.min_block_size();
                let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                d.extend_from_slice(&min.to_be_bytes());
                d.extend_from_slice(&e.backend.preferred_block_size().max(min).to_be_bytes());
                d.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
                opt_reply(s, opt, REP_INFO, &d)?;
                opt_reply(s, opt, REP_ACK, &[])?;
                if opt == OPT_GO {
                    let meta = meta.as_deref() == Some(e.name.as_str());
                    return Ok(Some(Session {
                        export: e,
                        structured,
                        meta,
                    }));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    opt_error(
                        s,
                        opt,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    )?;
                    continue;
                }
                structured = true;
                opt_reply(s, opt, REP_ACK, &[])?;
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = opt == OPT_SET_META_CONTEXT;
                if set {
                    // Replaced even when this option fails.
                    meta = None;
                }
                if !structured {
                    opt_error(
                        s,
                        opt,
                        REP_ERR_INVALID,
                        "negotiate structured replies first",
                    )?;
                    continue;
                }
                let Some((name, queries)) = parse_meta(&data) else {
                    opt_error(s, opt, REP_ERR_INVALID, "malformed meta context data")?;
                    continue;
                };
                if queries.iter().any(|q| !q.contains(':')) {
                    opt_error(s, opt, REP_ERR_INVALID, "a query lacks its namespace")?;
                    continue;
                }
                let Some(e) = find_export(sh, name) else {
                    opt_error(
                        s,
                        opt,
                        REP_ERR_UNKNOWN,
                        &format!("no export named {name:?}"),
                    )?;
                    continue;
                };
                let offered = e.backend.has_block_status();
                let selected = offered
                    && if set {
                        queries.contains(&META_BASE_ALLOCATION)
                    } else {
                        queries.is_empty()
                            || queries
                                .iter()
                                .any(|q| *q == META_BASE_ALLOCATION || *q == "base:")
                    };
                if selected {
                    let id = if set { META_ID_BASE_ALLOCATION } else { 0 };
                    let mut d = id.to_be_bytes().to_vec();
                    d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
                    opt_reply(s, opt, REP_META_CONTEXT, &d)?;
                    if set {
                        meta = Some(e.name.clone());
                    }
                }
                opt_reply(s, opt, REP_ACK, &[])?;
            }
            _ => {
                opt_error(
                    s,
                    opt,
                    REP_ERR_UNSUP,
                    &format!("option {opt} is not supported"),
                )?;
            }
        }
    }
    Err(Violation("too many options".into()))
}

// ---------------------------------------------------------------------------
// Transmission

struct Conn {
    sh: Arc<Shared>,
    export: Arc<Export>,
    structured: bool,
    meta: bool,
    wr: Mutex<Stream>,
    /// Requests and payload bytes queued or running.
    inflight: Mutex<(usize, usize)>,
    cv: Condvar,
    broken: AtomicBool,
}

struct Job {
    conn: Arc<Conn>,
    flags: u16,
    kind: u16,
    handle: u64,
    offset: u64,
    len: u32,
    payload: Option<AlignedBuf>,
    queued: Instant,
    /// Further writes read in the same burst, executed with this one as one batch.
    more: Vec<Job>,
}

/// Most writes, and bytes, the reader gathers into one batch.
const BATCH_MAX: usize = 64;
const BATCH_BYTES: usize = 1 << 20;

/// Room before the data of a read reply, so the data starts 4 KiB-aligned (for
/// `O_DIRECT`) and the header sits right before it: one buffer, one send.
const READ_HEADROOM: usize = 4096;

enum Done {
    Empty,
    /// A buffer holding the reply header and data at `start..`.
    Read(AlignedBuf, usize),
    Status(Vec<crate::backend::Status>),
}

impl Job {
    fn run(self) {
        if !self.more.is_empty() {
            return self.run_batch();
        }
        let sh = &self.conn.sh;
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
        self.finished();
    }

    fn finished(&self) {
        let mut n = lock(&self.conn.inflight);
        n.0 -= 1;
        n.1 -= self.cost();
        drop(n);
        self.conn.cv.notify_all();
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
                    j.finished();
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
        for j in &ok {
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
            j.finished();
        }
        sh.stats
            .reply_ns
            .fetch_add(t1.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Payload bytes this request holds while in flight.
    fn cost(&self) -> usize {
        match self.kind {
            CMD_READ | CMD_WRITE => self.len.min(MAX_PAYLOAD) as usize,
            _ => 0,
        }
    }

    /// Flags, permissions, bounds and alignment, with the error each violation gets.
    fn validate(&self) -> Result<(), BackendError> {
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
                let mut buf = AlignedBuf::new(READ_HEADROOM + len as usize);
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

    fn reply(&self, mut r: Result<Done, BackendError>) {
        let c = &*self.conn;
        let h = self.handle;
        let mut small = Vec::with_capacity(64);
        let out: &[u8] = match &mut r {
            Ok(Done::Read(buf, start)) => {
                let start = *start;
                let data_len = buf.len() - start;
                if data_len == 0 && c.structured {
                    small.extend_from_slice(&structured_header(REPLY_TYPE_NONE, h, 0));
                    &small
                } else {
                    // Header written into the headroom: header and data go out in one send.
                    let s = if c.structured {
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
                    &buf[s..]
                }
            }
            Ok(Done::Empty) => {
                small.extend_from_slice(&simple_header(0, h));
                &small
            }
            Ok(Done::Status(st)) => {
                small.extend_from_slice(&structured_header(
                    REPLY_TYPE_BLOCK_STATUS,
                    h,
                    4 + 8 * st.len() as u32,
                ));
                small.extend_from_slice(&META_ID_BASE_ALLOCATION.to_be_bytes());
                for x in st {
                    let l = x.len.min(u32::MAX as u64) as u32;
                    small.extend_from_slice(&l.to_be_bytes());
                    small.extend_from_slice(&x.flags.to_be_bytes());
                }
                &small
            }
            Err(e) => {
                if c.structured {
                    let mut msg = e.msg.as_bytes();
                    if msg.len() > 1024 {
                        let mut n = 1024;
                        while !e.msg.is_char_boundary(n) {
                            n -= 1;
                        }
                        msg = &msg[..n];
                    }
                    small.extend_from_slice(&structured_header(
                        REPLY_TYPE_ERROR,
                        h,
                        6 + msg.len() as u32,
                    ));
                    small.extend_from_slice(&e.errno.to_be_bytes());
                    small.extend_from_slice(&(msg.len() as u16).to_be_bytes());
                    small.extend_from_slice(msg);
                } else {
                    small.extend_from_slice(&simple_header(e.errno, h));
                }
                &small
            }
        };
        if c.broken.load(Relaxed) {
            return;
        }
        let mut w = lock(&c.wr);
        if let Err(e) = w.write_all(out) {
            if !c.broken.swap(true, SeqCst) {
                if c.sh.cfg.verbose || e.kind() != io::ErrorKind::BrokenPipe {
                    eprintln!("masse-nbd: cannot send a reply ({e}); closing the connection");
                }
                w.shutdown(Shutdown::Both);
            }
        }
    }
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

fn serve_connection(sh: Arc<Shared>, mut s: Stream) {
    let peer = s.peer();
    let verbose = sh.cfg.verbose;
    let _ = s.set_read_timeout(Some(sh.cfg.handshake_timeout));
    let _ = s.set_write_timeout(Some(sh.cfg.send_timeout));
    let session = match handshake(&sh, &mut s) {
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
    // Clients may idle for as long as they like once connected.
    let _ = s.set_read_timeout(None);
    let Ok(wr) = s.try_clone() else {
        s.shutdown(Shutdown::Both);
        return;
    };
    let conn = Arc::new(Conn {
        sh: sh.clone(),
        export: session.export,
        structured: session.structured,
        meta: session.meta,
        wr: Mutex::new(wr),
        inflight: Mutex::new((0, 0)),
        cv: Condvar::new(),
        broken: AtomicBool::new(false),
    });
    let mut rd = BufReader::with_capacity(64 << 10, s);
    let end = transmission(&conn, &mut rd);
    // Whatever ended the session, answer what was already taken before closing.
    {
        let mut n = lock(&conn.inflight);
        while n.0 > 0 {
            n = conn.cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
    match end {
        Ok(()) => {
            if verbose {
                eprintln!("masse-nbd: {peer}: disconnected");
            }
        }
        Err(Violation(m)) => {
            if m.starts_with("socket:") {
                if verbose {
                    eprintln!("masse-nbd: {peer}: connection ended: {m}");
                }
            } else {
                sh.stats.protocol_errors.fetch_add(1, Relaxed);
                eprintln!("masse-nbd: {peer}: protocol error: {m}; closing");
            }
        }
    }
    rd.get_ref().shutdown(Shutdown::Both);
}

/// Read requests until NBD_CMD_DISC (Ok), end of stream (Ok) or a violation.
fn transmission(conn: &Arc<Conn>, rd: &mut BufReader<Stream>) -> Result<(), Violation> {
    let sh = &conn.sh;
    loop {
        let mut h = [0u8; 28];
        match rd.read_exact(&mut h) {
            Ok(()) => {}
            // A client may simply hang up; so does a stopping server (read side shut).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        if conn.broken.load(Relaxed) {
            return Ok(());
        }
        let magic = be32(&h);
        if magic != REQUEST_MAGIC {
            return Err(Violation(format!("bad request magic {magic:#x}")));
        }
        let flags = be16(&h[4..]);
        let kind = be16(&h[6..]);
        let handle = be64(&h[8..]);
        let offset = be64(&h[16..]);
        let len = be32(&h[24..]);
        if kind == CMD_DISC {
            return Ok(());
        }
        let payload = if kind == CMD_WRITE {
            if len > MAX_PAYLOAD {
                // The payload cannot be skipped cheaply; the spec allows a hard
                // disconnect above 32 MiB.
                return Err(Violation(format!(
                    "write of {len} bytes exceeds the maximum {MAX_PAYLOAD}"
                )));
            }
            let mut b = AlignedBuf::new(len as usize);
            rd.read_exact(&mut b).map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    Violation("connection closed in the middle of a write payload".into())
                } else {
                    e.into()
                }
            })?;
            Some(b)
        } else {
            None
        };
        let now = Instant::now();
        let mut job = Job {
            conn: conn.clone(),
            flags,
            kind,
            handle,
            offset,
            len,
            payload,
            queued: now,
            more: Vec::new(),
        };
        let (mut count, mut cost) = (1, job.cost());
        if kind == CMD_WRITE {
            // Writes already sitting in the buffer go to the engine as one batch.
            while count < BATCH_MAX.min(sh.cfg.max_inflight) {
                let b = rd.buffer();
                if b.len() < 28 || be32(b) != REQUEST_MAGIC || be16(&b[6..]) != CMD_WRITE {
                    break;
                }
                let l = be32(&b[24..]) as usize;
                if b.len() < 28 + l || cost + l > BATCH_BYTES {
                    break;
                }
                let mut p = AlignedBuf::new(l);
                p.copy_from_slice(&b[28..28 + l]);
                let next = Job {
                    conn: conn.clone(),
                    flags: be16(&b[4..]),
                    kind: CMD_WRITE,
                    handle: be64(&b[8..]),
                    offset: be64(&b[16..]),
                    len: l as u32,
                    payload: Some(p),
                    queued: now,
                    more: Vec::new(),
                };
                rd.consume(28 + l);
                count += 1;
                cost += l;
                job.more.push(next);
            }
        }
        let idle = {
            let mut n = lock(&conn.inflight);
            while n.0 > 0
                && (n.0 + count > sh.cfg.max_inflight || n.1 + cost > sh.cfg.max_inflight_bytes)
            {
                n = conn.cv.wait(n).unwrap_or_else(|e| e.into_inner());
            }
            n.0 += count;
            n.1 += cost;
            n.0 == count
        };
        if idle && rd.buffer().is_empty() {
            // Nothing else to do meanwhile: skip the hand-off to a worker.
            job.run();
        } else if let Err(job) = sh.jobs.push(job) {
            // Only when the pool is closed, which `run` does after joining connections.
            job.run();
        }
    }
}
