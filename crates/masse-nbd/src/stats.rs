//! The server's counters ([`ServerStats`]) and their report.
//!
//! Separate because everything counts into them — the acceptor, connections,
//! requests, the memory budget — and none of those should need the server to do so.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

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
