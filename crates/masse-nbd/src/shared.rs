//! The state every connection and worker of one server sees ([`Shared`]), and
//! the lock helper they all use.
//!
//! Separate from `server.rs` so that connections, the handshake and requests
//! depend on this small record rather than on the server that owns them.

use crate::budget::Budget;
use crate::config::{Export, ServerConfig};
use crate::job::JobQueue;
use crate::stats::ServerStats;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// One server's exports, settings, counters, job queue and buffer memory.
pub(crate) struct Shared {
    pub(crate) exports: Vec<Arc<Export>>,
    pub(crate) cfg: ServerConfig,
    /// Set once the server stops: connections take no new requests.
    pub(crate) stopping: AtomicBool,
    pub(crate) stats: Arc<ServerStats>,
    pub(crate) jobs: JobQueue,
    pub(crate) budget: Budget,
}

impl Shared {
    pub(crate) fn new(exports: Vec<Export>, cfg: ServerConfig) -> Shared {
        let stats = Arc::new(ServerStats::default());
        Shared {
            exports: exports.into_iter().map(Arc::new).collect(),
            budget: Budget::new(cfg.max_buffer_bytes, stats.clone()),
            cfg,
            stopping: AtomicBool::new(false),
            stats,
            jobs: JobQueue::new(),
        }
    }
}

/// Lock, ignoring poisoning: a panicking worker must not take the server down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
