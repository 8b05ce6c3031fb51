//! `fallocate`: space taken for a file ahead of its data, as stored chunks of
//! zeros, so later writes into the range cannot fail for want of space.

use super::error::{VfsError, VfsResult};
use super::node::{DirtyChunk, NodeState};
use super::record::{Kind, Time};
use super::{Shared, Vfs, MAX_FILE_SIZE};
use std::sync::atomic::Ordering::Relaxed;

impl Vfs {
    /// Allocate `[off, off + len)` of file `ino` (`posix_fallocate`), extending it
    /// as needed: NoSpace at once if the space is not there; otherwise the range
    /// holds stored chunks (of zeros where it had holes) when this returns, taken
    /// out of the space other writes are admitted to.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64) -> VfsResult<()> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        self.sh.fallocate_locked(ino, &mut st, off, len)
    }
}

impl Shared {
    /// Allocate `[off, off + len)` (`posix_fallocate`, mode 0): fail at once with
    /// NoSpace if the holes in it do not fit, else store them as chunks of zeros so
    /// the space is taken by the file (counted as used, and not available to any
    /// other file), growing the file to cover the range. Written in pieces of a
    /// few MiB, each durable on return like a write-out.
    pub(super) fn fallocate_locked(
        &self,
        ino: u64,
        st: &mut NodeState,
        off: u64,
        len: u64,
    ) -> VfsResult<()> {
        match st.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(VfsError::IsDir),
            Kind::Symlink => return Err(VfsError::Invalid("fallocate of a symbolic link")),
        }
        if len == 0 {
            return Err(VfsError::Invalid("fallocate of zero bytes"));
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(VfsError::FileTooLarge)?;
        if let Some(e) = st.wb_err.take() {
            return Err(e);
        }
        let cs = self.cs;
        let (first, last) = (off / cs, (end - 1) / cs);
        // At most the file's stored and buffered chunks can already be there: when
        // even the rest does not fit, say so without probing each chunk.
        let least = (last - first + 1)
            .saturating_sub(st.inode.stored_chunks.saturating_add(st.dirty.len() as u64));
        self.admit_check(least)?;
        let holes = (first..=last)
            .filter(|&i| !st.dirty.contains_key(&i) && !self.stored(ino, i))
            .count() as u64;
        self.admit_check(holes)?;
        let piece = ((4 << 20) / cs).max(1);
        let mut idx = first;
        while idx <= last {
            let stop = (idx + piece).min(last + 1);
            self.reserve_piece(ino, st, idx, stop)?;
            let now = Time::now();
            st.inode.size = st.inode.size.max(end.min(stop * cs));
            st.inode.alloc_chunks = st.inode.alloc_chunks.max(stop);
            st.inode.mtime = now;
            st.inode.ctime = now;
            st.attr_dirty = true;
            self.flush_for_caller(ino, st)?;
            idx = stop;
        }
        Ok(())
    }

    /// Buffer chunks of zeros, kept even though they are zeros, for the holes of
    /// chunks `from..to`; chunks already buffered are marked to be kept too.
    fn reserve_piece(&self, ino: u64, st: &mut NodeState, from: u64, to: u64) -> VfsResult<()> {
        let holes: Vec<u64> = (from..to)
            .filter(|&i| !st.dirty.contains_key(&i) && !self.stored(ino, i))
            .collect();
        self.admit(holes.len() as u64)?;
        for i in from..to {
            if let Some(d) = st.dirty.get_mut(&i) {
                d.keep = true;
            }
        }
        for &i in &holes {
            let d = DirtyChunk {
                data: vec![0u8; self.cs as usize],
                new: true,
                keep: true,
            };
            st.dirty.insert(i, d);
        }
        st.new_dirty += holes.len() as u64;
        self.dirty_total
            .fetch_add(holes.len() * self.cs as usize, Relaxed);
        Ok(())
    }
}
