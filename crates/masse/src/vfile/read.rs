//! File reads: only the chunk bytes asked for (docs/vfile.md §2, "Chunks").
//!
//! A read gathers, over all the ranges it serves, which bytes of which chunks
//! it needs; buffered chunks are copied from the write-back buffer, and the
//! rest go to the engine in one call: with piece checksums (format 2) only the
//! pieces holding the wanted bytes are read ([`crate::Db::get_parts`]), without
//! them (format 1) whole chunks ([`crate::Db::get_many`]).

use super::error::{VfsError, VfsResult};
use super::node::NodeState;
use super::record::{chunk_key, Kind};
use super::{Shared, Vfs};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// Chunk bytes fetched from the engine: `data` holds chunk offsets `at..`.
struct Part {
    at: usize,
    data: Vec<u8>,
}

impl Vfs {
    /// Read up to `len` bytes at `off` (short at end of file; holes read as zeros).
    /// Only the bytes asked for are read from the engine where the chunk format
    /// allows it (see the module documentation).
    pub fn read(&self, ino: u64, off: u64, len: usize) -> VfsResult<Vec<u8>> {
        self.sh.read_vec(ino, off, len)
    }

    /// Read into `buf` at `off`; returns the bytes read (short only at the end of
    /// the file; holes read as zeros).
    pub fn read_into(&self, ino: u64, off: u64, buf: &mut [u8]) -> VfsResult<usize> {
        let mut one = [(off, buf)];
        Ok(self.read_many_into(ino, &mut one)?[0])
    }

    /// Several reads of one file at once (a database's batched block reads):
    /// the engine reads of all of them are issued together. Returns the bytes
    /// read per request.
    pub fn read_many_into(&self, ino: u64, reqs: &mut [(u64, &mut [u8])]) -> VfsResult<Vec<usize>> {
        let n = self.sh.node(ino)?;
        let st = n.st.read();
        st.live()?;
        self.sh.read_many_locked(&st, ino, reqs)
    }
}

impl Shared {
    /// Chunk `idx` of `ino` as durable (None: a hole, or past the durable size).
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

    /// [`Vfs::read`]: a buffer of the bytes there are.
    pub(super) fn read_vec(&self, ino: u64, off: u64, len: usize) -> VfsResult<Vec<u8>> {
        let n = self.node(ino)?;
        let st = n.st.read();
        st.live()?;
        let have = st.inode.size.saturating_sub(off).min(len as u64) as usize;
        let mut out = vec![0u8; have];
        self.read_many_locked(&st, ino, &mut [(off, &mut out[..])])?;
        Ok(out)
    }

    fn read_many_locked(
        &self,
        st: &NodeState,
        ino: u64,
        reqs: &mut [(u64, &mut [u8])],
    ) -> VfsResult<Vec<usize>> {
        match st.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(VfsError::IsDir),
            Kind::Symlink => return Err(VfsError::Invalid("read of a symbolic link")),
        }
        let (size, cs) = (st.inode.size, self.cs);
        // Per chunk to fetch: the span of its bytes any request wants.
        let mut want: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for (off, buf) in reqs.iter() {
            let end = size.min(off.saturating_add(buf.len() as u64));
            let mut pos = *off;
            while pos < end {
                let idx = pos / cs;
                let (o, e) = ((pos - idx * cs) as usize, (end - idx * cs).min(cs) as usize);
                if !st.dirty.contains_key(&idx) && idx * cs < st.disk.size {
                    let w = want.entry(idx).or_insert((o, e));
                    *w = (w.0.min(o), w.1.max(e));
                }
                pos = idx * cs + e as u64;
            }
        }
        let parts = self.fetch(st, ino, &want)?;
        Ok(reqs
            .iter_mut()
            .map(|(off, buf)| self.fill(st, &parts, *off, buf))
            .collect())
    }

    /// Copy what `[off, off + buf.len())` holds into `buf`; zeros where nothing is.
    fn fill(&self, st: &NodeState, parts: &HashMap<u64, Part>, off: u64, buf: &mut [u8]) -> usize {
        let cs = self.cs;
        let end = st.inode.size.min(off.saturating_add(buf.len() as u64));
        let mut pos = off;
        while pos < end {
            let idx = pos / cs;
            let o = (pos - idx * cs) as usize;
            let n = ((idx + 1) * cs).min(end) as usize - pos as usize;
            let dst = &mut buf[(pos - off) as usize..][..n];
            let (at, src): (usize, &[u8]) = match st.dirty.get(&idx) {
                Some(b) => {
                    self.c.buffer_hits.fetch_add(1, Relaxed);
                    (0, &b.data)
                }
                None => parts.get(&idx).map_or((0, &[][..]), |p| (p.at, &p.data)),
            };
            let from = o.saturating_sub(at).min(src.len());
            let m = (src.len() - from).min(n);
            dst[..m].copy_from_slice(&src[from..from + m]);
            dst[m..].fill(0);
            pos += n as u64;
        }
        end.saturating_sub(off) as usize
    }

    /// The chunk bytes `want` names, from the engine in one call; clamped to the
    /// durable size (bytes past it are leftovers of an interrupted write-out).
    fn fetch(
        &self,
        st: &NodeState,
        ino: u64,
        want: &BTreeMap<u64, (usize, usize)>,
    ) -> VfsResult<HashMap<u64, Part>> {
        let mut out = HashMap::with_capacity(want.len());
        if want.is_empty() {
            return Ok(out);
        }
        self.c.chunk_reads.fetch_add(want.len() as u64, Relaxed);
        let keys: Vec<Vec<u8>> = want.keys().map(|&i| chunk_key(ino, i)).collect();
        let codec = self.codec;
        if !codec.pieces() {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let vals = match refs.len() {
                1 => vec![self.db.get(refs[0])?],
                _ => self.db.get_many(&refs)?,
            };
            for (&idx, v) in want.keys().zip(vals) {
                if let Some(v) = v {
                    let data = self.durable_part(st, ino, idx, v)?;
                    out.insert(idx, Part { at: 0, data });
                }
            }
            return Ok(out);
        }
        let ranges: Vec<(Range<usize>, usize)> = want
            .values()
            .map(|&(o, e)| codec.part_range(o, e - o))
            .collect();
        let parts: Vec<(&[u8], Range<usize>)> = keys
            .iter()
            .zip(&ranges)
            .map(|(k, r)| (&k[..], r.0.clone()))
            .collect();
        let first = |i: usize| ranges[i].1 / codec.piece as usize;
        let got = self
            .db
            .get_parts(&parts, |i, b| codec.check_part(&keys[i], first(i), b))?;
        for (i, (&idx, v)) in want.keys().zip(got).enumerate() {
            let Some(v) = v else { continue };
            let at = ranges[i].1;
            let mut data = codec.decode_part(&keys[i], first(i), &v)?;
            let valid = (st.disk.size - idx * self.cs).min(self.cs) as usize;
            data.truncate(valid.saturating_sub(at));
            out.insert(idx, Part { at, data });
        }
        Ok(out)
    }
}
