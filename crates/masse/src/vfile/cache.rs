//! The DRAM inode cache: nodes are loaded on demand and dropped again when clean,
//! closed and unreferenced — at the kernel's `forget`, and, so that memory stays
//! bounded whatever the kernel remembers, whenever the cache passes
//! `VfsOptions::max_cached_inodes` (least recently used first, by CLOCK).

use super::data::chunks_of;
use super::dir::DirPages;
use super::error::{VfsError, VfsResult};
use super::node::Node;
use super::record::{chunk_key, inode_key, Inode, Kind, STORED_UNKNOWN};
use super::{Shared, Vfs, ROOT_INO};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

impl Vfs {
    /// Drop `ino` from the DRAM cache if it is clean and not open (FUSE `forget`).
    pub fn forget(&self, ino: u64) {
        let mut t = self.sh.nodes.lock();
        if t.get(&ino).is_some_and(|n| evictable(ino, n)) {
            t.remove(&ino);
        }
    }
}

/// Whether the cache may drop `n`: nobody holds it (so nobody holds its lock
/// either, and a reload cannot diverge from a copy in use), and DRAM holds nothing
/// the pool does not (no buffered data, no open handle, no unreported error).
fn evictable(ino: u64, n: &Arc<Node>) -> bool {
    if ino == ROOT_INO || Arc::strong_count(n) > 1 {
        return false;
    }
    match n.st.try_read() {
        Some(st) => st.open == 0 && st.dirty.is_empty() && !st.attr_dirty && st.wb_err.is_none(),
        None => false,
    }
}

impl Shared {
    /// The node of `ino`, loading it on a miss. The table lock is held across the
    /// load so that a load cannot race the removal of a purged inode.
    pub(super) fn node(&self, ino: u64) -> VfsResult<Arc<Node>> {
        let mut t = self.nodes.lock();
        if let Some(n) = t.get(&ino) {
            n.used.store(true, Relaxed);
            return Ok(n.clone());
        }
        let inode = self.load_inode(ino)?;
        let n = Node::new(ino, inode, None);
        self.insert_node(&mut t, n.clone());
        Ok(n)
    }

    /// A node for an inode just created (a directory starts with one empty page).
    pub(super) fn new_node(&self, ino: u64, inode: Inode) -> Arc<Node> {
        let dir = (inode.kind == Kind::Dir).then(|| DirPages {
            pages: vec![Vec::new()],
            ..Default::default()
        });
        let n = Node::new(ino, inode, dir);
        self.insert_node(&mut self.nodes.lock(), n.clone());
        n
    }

    fn insert_node(&self, t: &mut HashMap<u64, Arc<Node>>, n: Arc<Node>) {
        t.insert(n.ino, n);
        let cap = self.opts.max_cached_inodes.max(16);
        if t.len() > cap {
            // Down to 3/4 of the bound, so the scan is paid once per cap/4 loads.
            let evicted = trim(t, cap - cap / 4);
            self.c.evictions.fetch_add(evicted, Relaxed);
        }
    }

    /// Read inode `ino`, repairing what a crash may have left: chunks past the end
    /// (a crash inside a truncate or a multi-batch write-out must not let them
    /// reappear if the file grows again) and an unknown chunk count.
    fn load_inode(&self, ino: u64) -> VfsResult<Inode> {
        let v = self.db.get(&inode_key(ino))?.ok_or(VfsError::NotFound)?;
        let mut inode = Inode::decode(&v)?;
        if inode.kind != Kind::File {
            return Ok(inode);
        }
        let keep = chunks_of(inode.size, self.cs);
        let before = inode.clone();
        if inode.alloc_chunks > keep {
            self.delete_chunks(ino, keep, inode.alloc_chunks)?;
            inode.alloc_chunks = keep;
        }
        if inode.stored_chunks == STORED_UNKNOWN {
            inode.stored_chunks = self.count_chunks(ino, keep);
        }
        if inode != before {
            // Only a record of what is already so: on a full pool it is redone at
            // the next load, and the file stays usable meanwhile.
            match self.db.put(&inode_key(ino), &inode.encode()) {
                Ok(()) | Err(crate::Error::NoSpace(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(inode)
    }

    /// Chunk records of `ino` below index `n` (DRAM index probes, no device read).
    pub(super) fn count_chunks(&self, ino: u64, n: u64) -> u64 {
        (0..n)
            .filter(|&i| self.db.may_contain(&chunk_key(ino, i)).unwrap_or(true))
            .count() as u64
    }
}

/// Drop evictable nodes until `t` holds `target`: first those unused since the
/// last scan (clearing the mark of the others: their second chance), then any.
fn trim(t: &mut HashMap<u64, Arc<Node>>, target: usize) -> u64 {
    let mut evicted = 0;
    for second in [false, true] {
        let mut excess = t.len().saturating_sub(target);
        if excess == 0 {
            break;
        }
        t.retain(|&ino, n| {
            if excess == 0 {
                return true;
            }
            if !second && n.used.swap(false, Relaxed) {
                return true;
            }
            if evictable(ino, n) {
                excess -= 1;
                evicted += 1;
                return false;
            }
            true
        });
    }
    if t.capacity() > 4 * t.len() + 64 {
        t.shrink_to(2 * t.len());
    }
    evicted
}
