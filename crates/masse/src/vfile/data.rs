//! The file-data path: writes into the write-back buffer, truncation, and
//! the deletion of chunk records (docs/vfile.md §3). Reads are in `read.rs`,
//! write-outs of the buffer in `writeout.rs`, `fallocate` in `fallocate.rs`.

use super::batch::Batch;
use super::error::{VfsError, VfsResult};
use super::node::{DirtyChunk, NodeState};
use super::record::{chunk_key, Kind, Time};
use super::{Shared, Vfs, MAX_FILE_SIZE};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Chunks of size `cs` a file of `size` bytes spans.
pub(super) fn chunks_of(size: u64, cs: u64) -> u64 {
    size.div_ceil(cs)
}

/// The part of one chunk a byte range `[off, end)` covers.
struct Span {
    /// Chunk index.
    idx: u64,
    /// Offset in the chunk.
    o: usize,
    /// Bytes.
    n: usize,
    /// Offset in the range.
    at: usize,
}

/// The chunks of size `cs` that `[off, end)` covers, in order.
fn spans(off: u64, end: u64, cs: u64) -> impl Iterator<Item = Span> {
    let first = off / cs;
    let last = if end > off { (end - 1) / cs + 1 } else { first };
    (first..last).map(move |idx| {
        let from = (idx * cs).max(off);
        let to = ((idx + 1) * cs).min(end);
        Span {
            idx,
            o: (from - idx * cs) as usize,
            n: (to - from) as usize,
            at: (from - off) as usize,
        }
    })
}

impl Vfs {
    /// Write `data` at `off`, extending the file as needed; returns bytes written.
    /// Buffered: durable at fsync (see the module documentation).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> VfsResult<usize> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        self.sh.write_locked(&mut st, ino, off, data)?;
        Ok(data.len())
    }

    /// Append `data` at the end of file; returns the offset it was written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> VfsResult<u64> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        let off = st.inode.size;
        self.sh.write_locked(&mut st, ino, off, data)?;
        Ok(off)
    }
}

impl Shared {
    /// Delete chunk records `from..to` of `ino`, skipping ones the index has never
    /// seen, in batches. Returns how many there were.
    pub(super) fn delete_chunks(&self, ino: u64, from: u64, to: u64) -> VfsResult<u64> {
        let mut b = Batch::new();
        let limit = self.step;
        let mut n = 0;
        for idx in from..to {
            let k = chunk_key(ino, idx);
            if !self.db.may_contain(&k).unwrap_or(true) {
                continue;
            }
            b.del(&k)?;
            n += 1;
            if b.bytes >= limit {
                std::mem::replace(&mut b, Batch::new()).commit(&self.db, self.max_batch)?;
            }
        }
        if b.bytes > 0 {
            b.commit(&self.db, self.max_batch)?;
        }
        // Deleted data is space again: the next refusal reads the space afresh.
        Ok(n)
    }

    /// Buffer `data` at `off` of a file whose lock the caller holds: admit the
    /// new space it takes, then copy it into buffered chunks.
    fn write_locked(&self, st: &mut NodeState, ino: u64, off: u64, data: &[u8]) -> VfsResult<()> {
        match st.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(VfsError::IsDir),
            Kind::Symlink => return Err(VfsError::Invalid("write to a symbolic link")),
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(VfsError::FileTooLarge)?;
        if data.is_empty() {
            return Ok(());
        }
        if let Some(e) = st.wb_err.take() {
            // An earlier write-out of this file failed: its writer hears it now.
            return Err(e);
        }
        let cs = self.cs;
        // New space this write takes (chunks neither buffered nor stored) is
        // admitted before anything is buffered, so a full pool refuses the write
        // itself rather than a later write-out.
        let first = off / cs;
        let fresh: Vec<bool> = (first..=(end - 1) / cs)
            .map(|i| !st.dirty.contains_key(&i) && !self.stored(ino, i))
            .collect();
        let mut unbuffered = fresh.iter().filter(|&&f| f).count() as u64;
        self.admit(unbuffered)?;
        let before = st.dirty_bytes(self.cs);
        for Span { idx, o, n, at } in spans(off, end, cs) {
            if !st.dirty.contains_key(&idx) {
                let new = fresh[(idx - first) as usize];
                let whole = o == 0 && n == cs as usize;
                if let Err(e) = self.buffer_chunk(st, ino, idx, whole, new) {
                    // Give back the room of what will not be buffered now.
                    self.release_new(unbuffered);
                    return Err(e);
                }
                unbuffered -= new as u64;
            }
            if let Some(d) = st.dirty.get_mut(&idx) {
                if d.data.len() < o + n {
                    d.data.resize(o + n, 0);
                }
                d.data[o..o + n].copy_from_slice(&data[at..at + n]);
            }
        }
        let now = Time::now();
        let i = &mut st.inode;
        i.size = i.size.max(end);
        i.alloc_chunks = i.alloc_chunks.max(end.div_ceil(cs));
        i.mtime = now;
        i.ctime = now;
        st.attr_dirty = true;
        st.dirty_since.get_or_insert_with(Instant::now);
        let after = st.dirty_bytes(self.cs);
        if after >= before {
            self.dirty_total.fetch_add(after - before, Relaxed);
        }
        if after > self.opts.max_dirty_per_file
            || self.dirty_total.load(Relaxed) > self.opts.max_dirty_total
        {
            self.flush_for_caller(ino, st)?;
        }
        Ok(())
    }

    /// Whether chunk `idx` of `ino` has a record (a DRAM index probe).
    pub(super) fn stored(&self, ino: u64, idx: u64) -> bool {
        self.db.may_contain(&chunk_key(ino, idx)).unwrap_or(true)
    }

    /// Start buffering chunk `idx`. A chunk wholly overwritten needs no read;
    /// otherwise it starts from what is durable (clamped to the durable size:
    /// bytes past it are leftovers of an interrupted write-out).
    fn buffer_chunk(
        &self,
        st: &mut NodeState,
        ino: u64,
        idx: u64,
        whole: bool,
        new: bool,
    ) -> VfsResult<()> {
        let cs = self.cs;
        let data = if whole {
            Vec::with_capacity(cs as usize)
        } else {
            let mut v = self.read_chunk(st, ino, idx)?.unwrap_or_default();
            // A chunk inside the file but past what was durable is a hole.
            let inside = st.inode.size.saturating_sub(idx * cs).min(cs) as usize;
            // Grown as writes reach further: a small file's only chunk stays small.
            v.truncate(inside);
            v
        };
        st.dirty.insert(
            idx,
            DirtyChunk {
                data,
                new,
                keep: false,
            },
        );
        st.new_dirty += new as u64;
        Ok(())
    }

    pub(super) fn truncate_locked(&self, ino: u64, st: &mut NodeState, size: u64) -> VfsResult<()> {
        let now = Time::now();
        let cs = self.cs;
        if size >= st.inode.size {
            // Growing: the new range is a hole. Chunks past the durable size read
            // as zeros (read_chunk clamps), so nothing is written but the size.
            st.inode.size = size;
            st.inode.mtime = now;
            st.inode.ctime = now;
            st.attr_dirty = true;
            st.dirty_since.get_or_insert_with(Instant::now);
            return Ok(());
        }
        let keep = chunks_of(size, cs);
        self.discard_dirty(st, |i| i >= keep);
        let tail = (size % cs) as usize;
        if tail != 0 {
            let idx = size / cs;
            if !st.dirty.contains_key(&idx) {
                if let Some(data) = self.read_chunk(st, ino, idx)? {
                    let d = DirtyChunk {
                        data,
                        new: false,
                        keep: false,
                    };
                    st.dirty.insert(idx, d);
                    self.dirty_total.fetch_add(cs as usize, Relaxed);
                }
            }
            if let Some(d) = st.dirty.get_mut(&idx) {
                d.data.truncate(tail);
            }
        }
        st.inode.size = size;
        st.inode.mtime = now;
        st.inode.ctime = now;
        st.attr_dirty = true;
        // Shrinking is durable on return: the new size first (with the old
        // alloc_chunks, so a crash leaves the cut chunks to the next load to
        // delete), then the chunks past the end, then the lowered alloc_chunks.
        self.flush_locked(ino, st)?;
        if st.disk.alloc_chunks > keep {
            self.trim_tail(ino, st)?;
        }
        Ok(())
    }
}
