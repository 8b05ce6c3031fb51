//! The NBD server: listeners, admission of connections, and the worker pool.
//!
//! Threads, no async runtime. Each connection has one thread: it does the
//! handshake, then runs the connection's event loop (`conn.rs`): it reads
//! requests without blocking and hands them to a pool of worker threads shared by
//! all connections, which execute them and queue their replies on the
//! connection, sent without ever blocking a worker. So replies go out in
//! completion order, and a client that stops reading slows only itself.
//!
//! Memory: a connection holds at most `max_inflight` requests and
//! `max_inflight_bytes` of payload from header to reply, and all connections
//! together at most `max_buffer_bytes` (`budget.rs`); beyond either, the
//! connection stops reading its socket.
//!
//! Connections: at most `max_connections`, admitted by `slots.rs`. The handshake must finish within `handshake_timeout`; a connection
//! whose replies or request payload make no progress for `stall_timeout` is
//! closed.
//!
//! Queues and locks here are `std` ones (futex, no `sched_yield` spinning): with
//! dozens of mostly idle workers on a 2-core machine, spinning waiters cost more
//! than they save.
//!
//! Stopping ([`StopHandle::stop`], or SIGTERM/SIGINT wired to it by the caller):
//! stop accepting, shut the read side of every connection (no new requests are
//! taken), let every request already read finish and be answered, then return.

use crate::backend::Backend;
use crate::budget::Budget;
use crate::job::Job;
use crate::proto::{MAX_PAYLOAD, MAX_STRING};
use crate::slots::Conns;
use crate::transport::Listener;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::TcpListener;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

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
    /// Connections served at once (handshakes included). Beyond it a new client
    /// takes the place of an idle one if there is one (see `idle_timeout`), else
    /// it is refused with a message saying so.
    pub max_connections: usize,
    /// Requests read and not yet answered, per connection.
    pub max_inflight: usize,
    /// Payload bytes (write data, read replies) held per connection, from a
    /// request's header until its reply is sent; beyond it the connection's
    /// socket is not read. At least one request always runs.
    pub max_inflight_bytes: usize,
    /// Payload bytes held by all connections together: the server's buffer
    /// memory. Beyond it connections stop reading, in turn, until replies free
    /// some. At least 32 MiB (one request of the largest size).
    pub max_buffer_bytes: usize,
    /// The whole handshake must be done within this.
    pub handshake_timeout: Duration,
    /// When the server is full, a connection with nothing in flight that has sent
    /// nothing for this long is closed to admit a new client. Idle connections
    /// are never closed while there is room. `Duration::ZERO`: never.
    pub idle_timeout: Duration,
    /// A connection whose replies the client does not read, or whose request
    /// payload stops arriving, for this long is closed.
    pub stall_timeout: Duration,
    /// Log each connection and disconnection on stderr (protocol errors are always logged).
    pub verbose: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers: 32,
            max_connections: 256,
            max_inflight: 128,
            max_inflight_bytes: 32 << 20,
            max_buffer_bytes: 256 << 20,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(30),
            verbose: false,
        }
    }
}

/// Counters of a running server, for reports and profiles.
#[derive(Default, Debug)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused (the server was full).
    pub refused: AtomicU64,
    /// Idle (or silent handshaking) connections closed to admit a new client.
    pub evicted: AtomicU64,
    /// Connections closed because their replies were not read, or a request's
    /// payload stopped arriving, for `stall_timeout`.
    pub stalled: AtomicU64,
    /// Times a connection stopped reading because the server's buffer memory
    /// (`max_buffer_bytes`) was spent.
    pub buffer_waits: AtomicU64,
    /// Most buffer memory held at once, bytes.
    pub buffer_peak: AtomicU64,
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
            "connections {} (refused {}, idle ones closed for newcomers {}, stalled {}, \
             protocol errors {}); requests {} (errors {}):",
            self.connections.load(Relaxed),
            self.refused.load(Relaxed),
            self.evicted.load(Relaxed),
            self.stalled.load(Relaxed),
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
            "\nbytes read {} written {}; buffer memory peak {:.1} MiB, waits for it {}",
            self.bytes_read.load(Relaxed),
            self.bytes_written.load(Relaxed),
            self.buffer_peak.load(Relaxed) as f64 / (1 << 20) as f64,
            self.buffer_waits.load(Relaxed)
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

pub(crate) struct Shared {
    pub(crate) exports: Vec<Arc<Export>>,
    pub(crate) cfg: ServerConfig,
    pub(crate) stopping: AtomicBool,
    pub(crate) stats: Arc<ServerStats>,
    pub(crate) jobs: JobQueue,
    pub(crate) budget: Budget,
}

/// Requests waiting for a worker. Unbounded: every connection bounds its own share.
pub(crate) struct JobQueue {
    q: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
}

/// Lock, ignoring poisoning: a panicking worker must not take the server down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl JobQueue {
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

fn check_config(cfg: &ServerConfig) -> Result<(), ServerError> {
    if cfg.workers == 0 || cfg.max_inflight == 0 || cfg.max_connections == 0 {
        return Err(ServerError::Config(
            "workers, max_inflight and max_connections must be positive".into(),
        ));
    }
    if cfg.max_buffer_bytes < MAX_PAYLOAD as usize {
        return Err(ServerError::Config(format!(
            "the buffer memory limit must hold at least one {} MiB request",
            MAX_PAYLOAD >> 20
        )));
    }
    if cfg.handshake_timeout.is_zero() || cfg.stall_timeout.is_zero() {
        return Err(ServerError::Config(
            "the handshake and stall timeouts must be positive".into(),
        ));
    }
    Ok(())
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
        check_config(&cfg)?;
        let (stop_tx, stop_rx) = UnixStream::pair().map_err(ioe("socketpair"))?;
        stop_tx.set_nonblocking(true).map_err(ioe("socketpair"))?;
        let stats = Arc::new(ServerStats::default());
        Ok(Server {
            shared: Arc::new(Shared {
                exports: exports.into_iter().map(Arc::new).collect(),
                budget: Budget::new(cfg.max_buffer_bytes, stats.clone()),
                cfg,
                stopping: AtomicBool::new(false),
                stats,
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
        let workers = start_workers(&self.shared)?;
        let mut conns = Conns::new(self.shared.clone());
        self.accept_until_stopped(&mut conns);
        // Stop: no new connections, no new requests; finish and answer the rest.
        self.shared.stopping.store(true, SeqCst);
        conns.close_all();
        let result = flush_exports(&self.shared.exports);
        let Server {
            shared, listeners, ..
        } = self;
        for l in &listeners {
            l.remove_socket_file();
        }
        shared.jobs.close();
        drop(shared);
        for w in workers {
            let _ = w.join();
        }
        result
    }

    /// Hand every new client to `conns` until the stop handle is used (or
    /// `poll` fails).
    fn accept_until_stopped(&self, conns: &mut Conns) {
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
        loop {
            // SAFETY: fds is a live array of pollfd structs.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("masse-nbd: poll failed: {e}; stopping");
                return;
            }
            if fds[fds.len() - 1].revents != 0 {
                return;
            }
            for (i, l) in self.listeners.iter().enumerate() {
                if fds[i].revents != 0 {
                    conns.accept_all(l);
                }
            }
        }
    }
}

/// The worker pool: each thread runs jobs from the queue until it is closed
/// and drained.
fn start_workers(sh: &Arc<Shared>) -> Result<Vec<JoinHandle<()>>, ServerError> {
    let mut workers = Vec::new();
    for i in 0..sh.cfg.workers {
        let sh = sh.clone();
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
    Ok(workers)
}

/// Everything acknowledged is made durable before the server returns, FUA or not.
fn flush_exports(exports: &[Arc<Export>]) -> Result<(), ServerError> {
    let mut result = Ok(());
    for e in exports.iter().filter(|e| !e.read_only) {
        if let Err(err) = e.backend.flush() {
            let m = format!("flushing export {:?} at shutdown failed: {err}", e.name);
            eprintln!("masse-nbd: {m}");
            result = Err(ServerError::Config(m));
        }
    }
    result
}
