//! What a server is told: its exports ([`Export`]) and tunables ([`ServerConfig`]),
//! and the checks that refuse an unusable combination before anything starts.
//!
//! Separate from `server.rs` because connections, the handshake and requests read
//! the configuration too; they depend on this file, not on the server.

use crate::backend::Backend;
use crate::proto::{MAX_PAYLOAD, MAX_STRING};
use std::sync::Arc;
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

/// Why `exports` and `cfg` cannot make a server, if they cannot: at least one
/// export, names valid NBD strings and distinct, limits positive, the buffer
/// memory large enough for one request of the largest size.
pub(crate) fn check(exports: &[Export], cfg: &ServerConfig) -> Result<(), String> {
    if exports.is_empty() {
        return Err("no export to serve".into());
    }
    for (i, e) in exports.iter().enumerate() {
        if e.name.len() > MAX_STRING || e.name.contains('\0') {
            return Err(format!(
                "export name {:?} is not a valid NBD string",
                e.name
            ));
        }
        if exports[..i].iter().any(|o| o.name == e.name) {
            return Err(format!("export name {:?} is given twice", e.name));
        }
    }
    if cfg.workers == 0 || cfg.max_inflight == 0 || cfg.max_connections == 0 {
        return Err("workers, max_inflight and max_connections must be positive".into());
    }
    if cfg.max_buffer_bytes < MAX_PAYLOAD as usize {
        return Err(format!(
            "the buffer memory limit must hold at least one {} MiB request",
            MAX_PAYLOAD >> 20
        ));
    }
    if cfg.handshake_timeout.is_zero() || cfg.stall_timeout.is_zero() {
        return Err("the handshake and stall timeouts must be positive".into());
    }
    Ok(())
}
