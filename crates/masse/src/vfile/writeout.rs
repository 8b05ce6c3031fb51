//! Writing a file's buffered data out, and what happens when that fails.
//!
//! A write-out that fails (the pool filled up after the data was admitted, or a
//! device error) drops the file's buffered data and returns the file to its
//! durable state, like a page cache marking pages clean after a writeback error;
//! the error goes to the caller when there is one (write, flush at close, fsync)
//! and is otherwise kept on the inode for the next of those calls. So data is
//! never left buffered with its loss to be discovered at unmount, and a full pool
//! cannot pin memory.

use super::record::{chunk_key, inode_key, STORED_UNKNOWN};
use super::*;

impl Shared {
    /// Write a file's buffered chunks and attributes; on failure drop them (see the
    /// module documentation) and keep the error for the file's next write, flush
    /// or fsync as well as returning it.
    pub(super) fn flush_locked(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        if st.gone || (st.dirty.is_empty() && !st.attr_dirty) {
            return Ok(());
        }
        self.write_out(ino, st)
            .inspect_err(|e| self.write_out_failed(ino, st, e))
    }

    /// [`Shared::flush_locked`] for a caller that reports to the writer (write,
    /// flush at close, fsync): an error kept from an earlier write-out comes
    /// first, and an error returned here is not kept.
    pub(super) fn flush_for_caller(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        if let Some(e) = st.wb_err.take() {
            return Err(e);
        }
        self.flush_locked(ino, st).inspect_err(|_| st.wb_err = None)
    }

    /// The batches of a write-out. The inode goes in the last one; when the data
    /// needs several, the first raises the durable `alloc_chunks` (and marks the
    /// chunk count unknown) so that a crash in between leaves only chunks the next
    /// load deletes, and a count it takes again (docs/vfile.md §3).
    fn write_out(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        self.trim_tail(ino, st)?;
        if st.inode.stored_chunks == STORED_UNKNOWN {
            st.inode.stored_chunks = self.count_chunks(ino, st.inode.alloc_chunks);
        }
        let limit = self.step;
        let key_len = chunk_key(ino, 0).len();
        let total: usize = st
            .dirty
            .values()
            .map(|d| rec_cost(key_len, self.codec.stored_len(d.data.len())))
            .sum::<usize>()
            + 256;
        let mut b = Batch::new();
        let mut first = None;
        if total > limit {
            let mut f = st.disk.clone();
            f.alloc_chunks = f.alloc_chunks.max(st.inode.alloc_chunks);
            f.stored_chunks = STORED_UNKNOWN;
            b.put(&inode_key(ino), &f.encode())?;
            first = Some(f);
        }
        let (mut written, mut nchunks, mut stored) = (0u64, 0u64, st.inode.stored_chunks);
        let before = stored;
        for (&idx, d) in &st.dirty {
            let k = chunk_key(ino, idx);
            if !d.keep && d.data.iter().all(|&x| x == 0) {
                // All zeros: a hole costs a tombstone (if anything) instead of a chunk.
                if !d.new {
                    b.del(&k)?;
                    nchunks += 1;
                    stored = stored.saturating_sub(1);
                }
            } else {
                b.put(&k, &self.codec.encode(&k, &d.data))?;
                written += d.data.len() as u64;
                nchunks += 1;
                stored += d.new as u64;
            }
            if b.bytes >= limit {
                std::mem::replace(&mut b, Batch::new()).commit(&self.db, self.max_batch)?;
                if let Some(f) = first.take() {
                    // Durable now: a failure further on must know the raised bound.
                    st.disk = f;
                }
            }
        }
        st.inode.stored_chunks = stored;
        b.put(&inode_key(ino), &st.inode.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.discard_dirty(st, |_| true);
        st.disk = st.inode.clone();
        st.attr_dirty = false;
        st.dirty_since = None;
        // The new chunks now take pool space: count them off the reading rather
        // than read it again (a pass over every band) after each write-out.
        self.space_taken(stored.saturating_sub(before));
        self.c.flushes.fetch_add(1, Relaxed);
        self.c.flushed_bytes.fetch_add(written, Relaxed);
        self.c.chunk_writes.fetch_add(nchunks, Relaxed);
        Ok(())
    }

    /// After a failed write-out: drop the buffered data, return to the durable
    /// inode, delete chunks a cut multi-batch write-out left past the durable size,
    /// and keep the error for the file's next write, flush or fsync.
    fn write_out_failed(&self, ino: u64, st: &mut NodeState, e: &VfsError) {
        self.c.writeout_errors.fetch_add(1, Relaxed);
        self.discard_dirty(st, |_| true);
        st.inode = st.disk.clone();
        st.attr_dirty = false;
        st.dirty_since = None;
        // Best effort: a write-out retries it first.
        let _ = self.trim_tail(ino, st);
        st.wb_err = Some(e.again());
        self.space_stale();
    }

    /// Delete chunk records past the durable size below the durable
    /// `alloc_chunks` (left by a write-out or a truncate cut short), so they can
    /// never reappear inside the file, and lower the bound.
    pub(super) fn trim_tail(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        let keep = chunks_of(st.disk.size, self.cs);
        let hi = st.disk.alloc_chunks;
        if hi <= keep {
            return Ok(());
        }
        let known = st.disk.stored_chunks != STORED_UNKNOWN;
        match self.delete_chunks(ino, keep, hi) {
            Ok(n) if known => st.disk.stored_chunks -= n.min(st.disk.stored_chunks),
            Ok(_) => st.disk.stored_chunks = self.count_chunks(ino, keep),
            Err(e) => {
                // Some may be gone: count again at the next write-out.
                st.disk.stored_chunks = STORED_UNKNOWN;
                st.inode.stored_chunks = STORED_UNKNOWN;
                return Err(e);
            }
        }
        st.disk.alloc_chunks = keep;
        self.db.put(&inode_key(ino), &st.disk.encode())?;
        st.inode.alloc_chunks = st
            .inode
            .alloc_chunks
            .min(keep)
            .max(chunks_of(st.inode.size, self.cs));
        st.inode.stored_chunks = st.disk.stored_chunks;
        Ok(())
    }

    /// Drop buffered chunks whose index satisfies `gone`, releasing what they held
    /// of the write-back buffer and of the admitted new space.
    pub(super) fn discard_dirty(&self, st: &mut NodeState, gone: impl Fn(u64) -> bool) {
        let before = st.dirty.len();
        let mut new = 0;
        st.dirty.retain(|&i, d| {
            let drop = gone(i);
            new += (drop && d.new) as u64;
            !drop
        });
        st.new_dirty -= new.min(st.new_dirty);
        self.release_new(new);
        let bytes = (before - st.dirty.len()) * self.cs as usize;
        self.dirty_total
            .fetch_sub(bytes.min(self.dirty_total.load(Relaxed)), Relaxed);
    }

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
