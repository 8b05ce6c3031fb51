//! The NBD server: what a caller builds, starts and stops ([`Server`],
//! [`StopHandle`]), and the run loop that ties the other parts together.
//!
//! Threads, no async runtime. The acceptor (the thread in [`Server::run`])
//! waits on the listeners and hands each new client to the connection slots
//! (`slots.rs`), which give it a thread of its own: the handshake
//! (`handshake.rs`), then the connection's event loop (`conn.rs`). That loop
//! reads requests without blocking and queues them for a pool of worker threads
//! shared by all connections (`job.rs`), which execute them and queue their
//! replies on the connection, sent without ever blocking a worker. So replies go
//! out in completion order, and a client that stops reading slows only itself.
//! Memory held for clients is bounded per connection and server-wide
//! (`budget.rs`).
//!
//! Stopping ([`StopHandle::stop`], or SIGTERM/SIGINT wired to it by the caller):
//! stop accepting, shut the read side of every connection (no new requests are
//! taken), let every request already read finish and be answered, flush every
//! writable export, then return.
//!
//! This file owns only the lifecycle; the types it is configured with live in
//! `config.rs` and `stats.rs` (re-exported here), so the parts that read them do
//! not depend on the server.

use crate::config;
use crate::shared::Shared;
use crate::slots::Conns;
use crate::transport::Listener;
use std::io::{self, Write};
use std::net::TcpListener;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::thread::JoinHandle;

pub use crate::config::{Export, ServerConfig};
pub use crate::stats::ServerStats;

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
        config::check(&exports, &cfg).map_err(ServerError::Config)?;
        let (stop_tx, stop_rx) = UnixStream::pair().map_err(ioe("socketpair"))?;
        stop_tx.set_nonblocking(true).map_err(ioe("socketpair"))?;
        Ok(Server {
            shared: Arc::new(Shared::new(exports, cfg)),
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
