//! # masse-nbd — an NBD server for masse volumes
//!
//! Serves [`masse::vblock`] volumes (and, as a baseline, raw devices or files with
//! `O_DIRECT`) over the Network Block Device protocol, as specified in
//! NetworkBlockDevice/nbd `doc/proto.md`: fixed newstyle handshake (options
//! `EXPORT_NAME`, `ABORT`, `LIST`, `INFO`, `GO`, `STRUCTURED_REPLY`,
//! `LIST_META_CONTEXT`, `SET_META_CONTEXT`; `STARTTLS` refused, anything else
//! answered `NBD_REP_ERR_UNSUP`), commands `READ`, `WRITE`, `DISC`, `FLUSH`, `TRIM`,
//! `CACHE`, `WRITE_ZEROES` (with `FAST_ZERO`) and `BLOCK_STATUS` (`base:allocation`),
//! simple and structured replies, replies out of order with many requests in flight,
//! over TCP and Unix sockets. See `docs/nbd.md`.
//!
//! ```no_run
//! use masse_nbd::{Export, Server, ServerConfig, VolumeBackend};
//! use std::sync::Arc;
//! # fn f(vol: masse::vblock::Volume) -> Result<(), Box<dyn std::error::Error>> {
//! let mut srv = Server::new(
//!     vec![Export { name: "disk0".into(), backend: Arc::new(VolumeBackend::new(vol)), read_only: false }],
//!     ServerConfig::default(),
//! )?;
//! srv.listen_tcp("127.0.0.1:10809")?;
//! let stop = srv.stop_handle();   // stop.stop() from elsewhere ends run()
//! srv.run()?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// The map, top down: `server` (lifecycle and run loop) admits clients through
// `slots`, over the sockets of `transport`; each connection (`conn`) does its
// `handshake`, then queues `job`s for the workers, within the memory `budget`;
// they all read the `config` and the `shared` state and count into `stats`.
// `backend` is the storage an export serves; `proto` the NBD wire constants.
pub mod backend;
mod budget;
mod config;
mod conn;
mod handshake;
mod job;
pub mod proto;
pub mod server;
mod shared;
mod slots;
mod stats;
mod transport;

pub use backend::{Backend, BackendError, RawBackend, Status, VolumeBackend};
pub use server::{Export, Server, ServerConfig, ServerError, ServerStats, StopHandle};
