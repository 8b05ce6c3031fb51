//! An inode in DRAM: the inode as the layer sees it and as it is durable, its
//! buffered chunks, open handles, and a directory's loaded pages, under one lock.

use super::dir::DirPages;
use super::error::{VfsError, VfsResult};
use super::record::Inode;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// A buffered chunk.
pub(super) struct DirtyChunk {
    /// Bytes from the chunk start (shorter = zeros after).
    pub(super) data: Vec<u8>,
    /// The chunk had no record when buffered: writing it takes new space, which
    /// was admitted against the pool's free space (`Shared::pending_new`).
    pub(super) new: bool,
    /// Store it even if all zeros (space reserved by `fallocate`).
    pub(super) keep: bool,
}

/// What a node holds, under its lock.
pub(super) struct NodeState {
    /// The inode as the layer sees it (may be ahead of `disk` for files).
    pub(super) inode: Inode,
    /// The inode as last made durable.
    pub(super) disk: Inode,
    /// Buffered chunks by index.
    pub(super) dirty: BTreeMap<u64, DirtyChunk>,
    /// How many of `dirty` are `new`.
    pub(super) new_dirty: u64,
    /// A write-out that failed where no caller could be told (the write-back
    /// thread, a last release): reported by the next write, flush or fsync.
    pub(super) wb_err: Option<VfsError>,
    /// The inode differs from `disk` (beyond what `dirty` holds).
    pub(super) attr_dirty: bool,
    /// When the oldest buffered change was made (the write-back thread's age).
    pub(super) dirty_since: Option<Instant>,
    /// Open handles (files).
    pub(super) open: u32,
    /// Purged or removed: every call gets NotFound.
    pub(super) gone: bool,
    /// Directories: pages, loaded on first use.
    pub(super) dir: Option<DirPages>,
}

/// One cached inode.
pub(super) struct Node {
    /// Its inode number.
    pub(super) ino: u64,
    /// Its state.
    pub(super) st: RwLock<NodeState>,
    /// Used since the cache last looked (CLOCK: a second chance before eviction).
    pub(super) used: AtomicBool,
}

impl Node {
    /// A node for `inode`, marked used (so the cache gives it a first chance).
    pub(super) fn new(ino: u64, inode: Inode, dir: Option<DirPages>) -> Arc<Node> {
        Arc::new(Node {
            ino,
            st: RwLock::new(NodeState {
                disk: inode.clone(),
                inode,
                dirty: BTreeMap::new(),
                new_dirty: 0,
                wb_err: None,
                attr_dirty: false,
                dirty_since: None,
                open: 0,
                gone: false,
                dir,
            }),
            used: AtomicBool::new(true),
        })
    }
}

impl NodeState {
    /// NotFound once the inode is purged or removed.
    pub(super) fn live(&self) -> VfsResult<()> {
        if self.gone {
            Err(VfsError::NotFound)
        } else {
            Ok(())
        }
    }
    /// Buffered bytes, counted as whole chunks (what the buffers may grow to).
    pub(super) fn dirty_bytes(&self, cs: u64) -> usize {
        self.dirty.len() * cs as usize
    }
}
