//! # masse — a media-aware tiered key-value storage engine
//!
//! An implementation of MASSé (Media Aware Smart Storage Engine): small writes
//! are made durable on a fast tier (SCM-class: Optane, Z-NAND, XL-Flash, PMEM)
//! used as a write pad, merged in DRAM into large segments, and written by a
//! single writer strictly sequentially into LBands of a capacity tier
//! (QLC/TLC), so the capacity drive sees only large sequential writes. A compact
//! DRAM hash index maps key digests to record locations; band GC uses the fast
//! tier as its write pad; index checkpoints on the fast tier make recovery fast.
//!
//! ```no_run
//! use masse::{Db, DeviceSpec, Options, PoolConfig};
//! let cfg = PoolConfig::tiered(
//!     DeviceSpec::file("/dev/shm/masse-fast", 1 << 30),
//!     DeviceSpec::file("/var/tmp/masse-cap", 16 << 30),
//! );
//! let db = Db::create(&cfg, Options::default())?;
//! db.put(b"key", b"value")?;
//! assert_eq!(db.get(b"key")?.as_deref(), Some(&b"value"[..]));
//! db.close()?;
//! # Ok::<(), masse::Error>(())
//! ```
//!
//! See `docs/design.md` for the design and `docs/format.md` for the on-disk format.

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod config;
mod db;
pub mod device;
mod engine;
pub mod error;
pub mod format;
pub mod index;
mod keyscan;
mod layout;
mod part;
mod pool;
mod space;
pub mod stats;
pub mod vblock;
pub mod vfile;

pub use config::{DeviceSpec, GcPolicy, IoChoice, Options, PoolConfig, TrimPolicy};
pub use db::{Activity, Db, Iter, WriteBatch};
pub use engine::check::CheckReport;
pub use engine::status::{BandStatus, SegmentStatus};
pub use error::{Error, Result};
pub use format::{Geometry, Mode, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use keyscan::ScanPage;
pub use stats::{Space, Stats};
