//! # masse-resp — masse over the Redis protocol
//!
//! A server speaking RESP2 (and RESP3 after `HELLO 3`) in front of a masse pool:
//! strings only (GET, SET, MGET, MSET, INCR, APPEND, SCAN, ...), every write
//! durable before its reply, writes of all clients merged by the engine's group
//! commit. See `docs/resp.md` for the command set, semantics and limits.
//!
//! ```no_run
//! use masse_resp::{Config, Server};
//! use std::sync::Arc;
//! # fn f(db: masse::Db) -> Result<(), Box<dyn std::error::Error>> {
//! let mut srv = Server::new(Arc::new(db), Config::default())?;
//! srv.listen_tcp("127.0.0.1:6379")?;
//! let stop = srv.stop_handle(); // stop.stop() from elsewhere ends run()
//! srv.run()?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod admin;
mod cmd;
mod data;
pub mod glob;
pub mod keys;
pub mod proto;
pub mod server;
mod table;

pub use proto::Limits;
pub use server::{Config, Server, ServerError, ServerStats, StopHandle};

/// The Redis version masse reports (HELLO, INFO): the command semantics it follows.
pub const REDIS_VERSION: &str = "7.0.0";
