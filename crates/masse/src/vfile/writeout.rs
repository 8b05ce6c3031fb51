//! Writing a file's buffered data out, and what happens when that fails.
//!
//! A write-out that fails (the pool filled up after the data was admitted, or a
//! device error) drops the file's buffered data and returns the file to its
//! durable state, like a page cache marking pages clean after a writeback error;
//! the error goes to the caller when there is one (write, flush at close, fsync)
//! and is otherwise kept on the inode for the next of those calls. So data is
//! never left buffered with its loss to be discovered at unmount, and a full pool
//! cannot pin memory.
//!
//! Buffered data is written out at fsync, at close (`flush`) and the last
//! release, when a file or all files pass their limits (`data.rs`), and by the
//! write-back thread once it is older than the write-back interval.

use super::batch::{rec_cost, Batch};
use super::data::chunks_of;
use super::error::{VfsError, VfsResult};
use super::node::{Node, NodeState};
use super::record::{chunk_key, inode_key, STORED_UNKNOWN};
use super::{Shared, Vfs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

impl Vfs {
    /// Make the file's data and attributes durable (fsync and fdatasync alike).
    pub fn fsync(&self, ino: u64) -> VfsResult<()> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        self.sh.flush_for_caller(ino, &mut st)
    }

    /// Write the file's buffered data out now and report what went wrong with it,
    /// including a failed background write-out since the last report (FUSE
    /// `flush`, sent at every close: so a full pool reaches the writer at close at
    /// the latest, not at the last release, whose errors the kernel drops).
    pub fn flush(&self, ino: u64) -> VfsResult<()> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        if st.gone {
            // Unlinked and purged while open: nothing is left to write.
            return Ok(());
        }
        self.sh.flush_for_caller(ino, &mut st)
    }

    /// Make every file's buffered data durable.
    pub fn sync_all(&self) -> VfsResult<()> {
        self.sh.flush_older(None)
    }
}

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

    /// Write out files whose buffered data is older than `age` (all with `None`).
    pub(super) fn flush_older(&self, age: Option<Duration>) -> VfsResult<()> {
        let nodes: Vec<Arc<Node>> = self.nodes.lock().values().cloned().collect();
        let mut first_err = None;
        for n in nodes {
            let due = {
                let st = n.st.read();
                match (st.dirty_since, age) {
                    (None, _) => st.attr_dirty && age.is_none(),
                    (Some(_), None) => true,
                    (Some(t), Some(a)) => t.elapsed() >= a,
                }
            };
            if due {
                let mut st = n.st.write();
                if let Err(e) = self.flush_locked(n.ino, &mut st) {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The write-back thread: every fifth of the interval, write out what is older.
    fn writeback_loop(&self, interval: Duration) {
        let tick = (interval / 5).max(Duration::from_millis(100));
        loop {
            {
                let mut s = self.stop.0.lock();
                if *s {
                    return;
                }
                self.stop.1.wait_for(&mut s, tick);
                if *s {
                    return;
                }
            }
            // A failure here stays buffered and is reported by the next fsync.
            let _ = self.flush_older(Some(interval));
        }
    }

    /// Start the write-back thread, unless the options ask for none.
    pub(super) fn start_writeback(self: &Arc<Self>) -> VfsResult<Option<JoinHandle<()>>> {
        let Some(iv) = self.opts.writeback_interval else {
            return Ok(None);
        };
        let sh = self.clone();
        let h = std::thread::Builder::new()
            .name("masse-vfile-wb".into())
            .spawn(move || sh.writeback_loop(iv))
            .map_err(|e| {
                VfsError::Engine(crate::Error::Closed(format!(
                    "cannot start the write-back thread: {e}"
                )))
            })?;
        Ok(Some(h))
    }

    /// Tell the write-back thread to stop.
    pub(super) fn stop_writeback(&self) {
        let mut s = self.stop.0.lock();
        *s = true;
        self.stop.1.notify_all();
    }
}
