//! What a caller may tune when opening the file layer ([`VfsOptions`]).

use std::time::Duration;

/// Run-time options of the file layer.
#[derive(Clone, Debug)]
pub struct VfsOptions {
    /// Chunk size used when the file layer is first created on a pool (power of
    /// two, 4 KiB – 1 MiB). An existing file layer keeps the size it was made with.
    pub chunk_size: u32,
    /// A file whose buffered (not yet durable) data passes this is written out.
    pub max_dirty_per_file: usize,
    /// When all buffered data passes this, each writer writes its own file out.
    pub max_dirty_total: usize,
    /// Buffered data older than this is written out by a background thread;
    /// `None` keeps it until fsync, last close, a limit, or `sync_all`.
    pub writeback_interval: Option<Duration>,
    /// Owner (uid, gid) of the root directory when the file layer is first created.
    /// A user who mounts a new pool expects to own its root, as with a freshly
    /// made file system they own; an existing file layer keeps its owner.
    pub root_owner: (u32, u32),
    /// Inodes kept in DRAM when neither open nor holding buffered data: beyond
    /// this, the least recently used clean ones are dropped (and read again from
    /// the pool when needed), whether or not the kernel still remembers them.
    pub max_cached_inodes: usize,
}

impl Default for VfsOptions {
    fn default() -> Self {
        VfsOptions {
            chunk_size: 16 * 1024,
            max_dirty_per_file: 8 << 20,
            max_dirty_total: 256 << 20,
            writeback_interval: Some(Duration::from_secs(5)),
            root_owner: (0, 0),
            max_cached_inodes: 4096,
        }
    }
}
