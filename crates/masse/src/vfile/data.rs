//! The file-data path: buffered writes, write-outs, truncation and the
//! write-back thread (docs/vfile.md §3); reads are in `read.rs`.

use super::record::{chunk_key, inode_key};
use super::*;

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

    pub(super) fn read_chunk(
        &self,
        st: &NodeState,
        ino: u64,
        idx: u64,
    ) -> VfsResult<Option<Vec<u8>>> {
        // Only bytes below the durable size are valid on disk (see `write_locked`).
        let disk_size = st.disk.size;
        let start = idx * self.cs;
        if start >= disk_size {
            return Ok(None);
        }
        self.c.chunk_reads.fetch_add(1, Relaxed);
        let k = chunk_key(ino, idx);
        match self.db.get(&k)? {
            Some(v) => self
                .durable_part(st, ino, idx, self.codec.decode(&k, v)?)
                .map(Some),
            None => Ok(None),
        }
    }

    /// A stored chunk checked against the chunk size and clamped to the durable
    /// size (see `write_locked`).
    pub(super) fn durable_part(
        &self,
        st: &NodeState,
        ino: u64,
        idx: u64,
        mut v: Vec<u8>,
    ) -> VfsResult<Vec<u8>> {
        if v.len() as u64 > self.cs {
            return Err(VfsError::Corrupt(format!(
                "chunk {idx} of inode {ino} holds {} bytes, more than the chunk size",
                v.len()
            )));
        }
        let valid = (st.disk.size - idx * self.cs).min(self.cs) as usize;
        v.truncate(valid);
        Ok(v)
    }

    pub(super) fn write_locked(
        &self,
        st: &mut NodeState,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> VfsResult<()> {
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

    pub(super) fn setattr(&self, ino: u64, a: &SetAttr) -> VfsResult<Attr> {
        let n = self.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        if let Some(size) = a.size {
            match st.inode.kind {
                Kind::File => {}
                Kind::Dir => return Err(VfsError::IsDir),
                Kind::Symlink => return Err(VfsError::Invalid("truncate of a symbolic link")),
            }
            if size > MAX_FILE_SIZE {
                return Err(VfsError::FileTooLarge);
            }
            self.truncate_locked(ino, &mut st, size)?;
        }
        let now = Time::now();
        let meta = a.perm.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some();
        if meta {
            {
                let i = &mut st.inode;
                if let Some(p) = a.perm {
                    i.perm = p & 0o7777;
                }
                if let Some(u) = a.uid {
                    i.uid = u;
                }
                if let Some(g) = a.gid {
                    i.gid = g;
                }
                if let Some(t) = a.atime {
                    i.atime = t;
                }
                if let Some(t) = a.mtime {
                    i.mtime = t;
                }
                i.ctime = now;
            }
            // Attribute changes are durable on return: write the durable inode with
            // them (buffered data and its size stay buffered).
            let mut d = st.disk.clone();
            d.perm = st.inode.perm;
            d.uid = st.inode.uid;
            d.gid = st.inode.gid;
            d.atime = st.inode.atime;
            d.mtime = st.inode.mtime;
            d.ctime = st.inode.ctime;
            self.db.put(&inode_key(ino), &d.encode())?;
            st.disk = d;
        }
        Ok(st.attr(ino, self.cs))
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

    pub(super) fn writeback_loop(&self, interval: Duration) {
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
}
