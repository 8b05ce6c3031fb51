//! Counters of the file layer: kept as atomics by the calls that count, read
//! together by [`Vfs::stats`].

use super::Vfs;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of the file layer (per open).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VfsStats {
    /// Chunk records read from the engine.
    pub chunk_reads: u64,
    /// Chunk records written (puts and hole deletes).
    pub chunk_writes: u64,
    /// Reads served from the write-back buffer.
    pub buffer_hits: u64,
    /// Write-outs of a file's buffered data.
    pub flushes: u64,
    /// Bytes of chunk values written.
    pub flushed_bytes: u64,
    /// Buffered (not yet durable) bytes now.
    pub dirty_bytes: u64,
    /// Namespace batches (create, rename, unlink...).
    pub namespace_ops: u64,
    /// Inodes purged (last link and last open gone).
    pub purged: u64,
    /// Writes refused with ENOSPC before buffering (not enough free space).
    pub writes_refused: u64,
    /// Write-outs that failed; their data was dropped and the error reported.
    pub writeout_errors: u64,
    /// Clean inodes dropped from DRAM to keep the cache within its bound.
    pub evictions: u64,
    /// Inodes in DRAM now.
    pub cached_inodes: u64,
}

/// The live counters behind [`VfsStats`] (those it does not read elsewhere).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) chunk_reads: AtomicU64,
    pub(super) chunk_writes: AtomicU64,
    pub(super) buffer_hits: AtomicU64,
    pub(super) flushes: AtomicU64,
    pub(super) flushed_bytes: AtomicU64,
    pub(super) namespace_ops: AtomicU64,
    pub(super) purged: AtomicU64,
    pub(super) writes_refused: AtomicU64,
    pub(super) writeout_errors: AtomicU64,
    pub(super) evictions: AtomicU64,
}

impl Vfs {
    /// Counters.
    pub fn stats(&self) -> VfsStats {
        let c = &self.sh.c;
        VfsStats {
            chunk_reads: c.chunk_reads.load(Relaxed),
            chunk_writes: c.chunk_writes.load(Relaxed),
            buffer_hits: c.buffer_hits.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            flushed_bytes: c.flushed_bytes.load(Relaxed),
            dirty_bytes: self.sh.dirty_total.load(Relaxed) as u64,
            namespace_ops: c.namespace_ops.load(Relaxed),
            purged: c.purged.load(Relaxed),
            writes_refused: c.writes_refused.load(Relaxed),
            writeout_errors: c.writeout_errors.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
            cached_inodes: self.sh.nodes.lock().len() as u64,
        }
    }
}
