//! Error types returned by every public call.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in masse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call on a device failed.
    #[error("I/O error on {device} while {during}: {source}")]
    Io {
        /// Device path or name.
        device: String,
        /// What the engine was doing.
        during: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A checksum or structural check failed: the data is not returned.
    #[error("corruption: {0}")]
    Corruption(String),
    /// The pool has no free space left for this write (deletes still work).
    #[error("no space left in the pool: {0}")]
    NoSpace(String),
    /// Key length outside 1..=MAX_KEY_LEN.
    #[error("invalid key length {len} (keys must be 1..={max} bytes)")]
    InvalidKey {
        /// Offending length.
        len: usize,
        /// Maximum allowed.
        max: usize,
    },
    /// Value longer than MAX_VALUE_LEN.
    #[error("value too large: {len} bytes (maximum {max})")]
    ValueTooLarge {
        /// Offending length.
        len: usize,
        /// Maximum allowed.
        max: usize,
    },
    /// A record or batch bigger than this pool's geometry can store atomically
    /// (a record must fit in one band; a batch in one group commit). Nothing was written.
    #[error(
        "{what} of {len} bytes is too large for this pool (at most {max} bytes with its geometry)"
    )]
    TooLarge {
        /// "record" or "write batch".
        what: &'static str,
        /// Encoded size.
        len: usize,
        /// The pool's limit.
        max: usize,
    },
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The device holds no masse superblock (never formatted, or foreign data).
    #[error("{path}: not a masse device ({why}); use `masse create` to format it")]
    NotMasse {
        /// Device path.
        path: String,
        /// Why it was rejected.
        why: String,
    },
    /// The device was written by a newer masse format.
    #[error("{path}: format version {found} is newer than this build supports ({supported}); upgrade masse")]
    FormatTooNew {
        /// Device path.
        path: String,
        /// Version on the device.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// The devices given do not form one pool (different pool ids, roles or geometry).
    #[error("device set mismatch: {0}")]
    Mismatch(String),
    /// A device of the pool was not given.
    #[error("missing device: {0}")]
    MissingDevice(String),
    /// Formatting would destroy an existing pool.
    #[error("{path} already holds a masse pool (id {pool_id:032x}); refusing to format it without --force")]
    AlreadyFormatted {
        /// Device path.
        path: PathBuf,
        /// Pool id found.
        pool_id: u128,
    },
    /// A device of the pool is in use by another open pool: another process,
    /// or another open in this one. A pool is open in one process at a time;
    /// nothing was read or written.
    #[error("{path} is in use by {}; a pool can be open in only one process at a time", .holder.as_deref().unwrap_or("another process"))]
    Busy {
        /// Device path.
        path: String,
        /// Who holds it, when that can be known: "pid 1234 (masse serve nbd …)",
        /// "another open pool in this process (pid 1234)", "a filesystem mounted at /mnt".
        holder: Option<String>,
    },
    /// The database was closed or a background thread failed.
    #[error("database is closed or failed: {0}")]
    Closed(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(device: &str, during: &'static str, source: io::Error) -> Error {
        Error::Io {
            device: device.to_string(),
            during,
            source,
        }
    }
}
