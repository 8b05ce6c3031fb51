//! Virtual block devices ("volumes") on the key-value engine.
//!
//! A volume is a byte range of a fixed size, addressed in logical blocks of 512 or
//! 4096 bytes and stored in *chunks* (a power of two, from the block size up to
//! 1 MiB). Each chunk that holds data is one record, keyed by (volume id, chunk
//! number); a chunk without a record reads as zeros, so a new volume costs nothing
//! and trimmed or zeroed chunks give their space back. The volumes of a pool are
//! listed in one directory record. Keys beginning with `0xFF "MVB"` are reserved
//! for this module (see `docs/format.md`, "Volumes").
//!
//! Durability: every write, trim and write-zeroes is durable when it returns,
//! because the engine acknowledges a put only once it is on the fast-tier pad (or
//! in the capacity log); [`Volume::flush`] therefore only drains the writer and
//! reports a failed engine. A write smaller than a chunk is a read-modify-write of
//! that chunk, serialised with every other write to the same chunk by striped
//! locks, so concurrent writers to disjoint blocks of one chunk never lose data.
//!
//! ```no_run
//! use masse::vblock::{self, VolumeSpec};
//! # fn f(db: std::sync::Arc<masse::Db>) -> Result<(), masse::vblock::VolumeError> {
//! vblock::create_volume(&db, "disk0", VolumeSpec::new(1 << 30))?;
//! let vol = vblock::open_volume(db.clone(), "disk0")?;
//! vol.write(4096, &[7u8; 4096])?;
//! let mut buf = vec![0u8; 8192];
//! vol.read(0, &mut buf)?;           // first 4 KiB zeros, then 7s
//! # Ok(()) }
//! ```

use crate::error::Error;
use crate::{Db, WriteBatch};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

/// Errors of the volume layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The engine failed (I/O, corruption, no space, closed...).
    #[error(transparent)]
    Engine(#[from] Error),
    /// No volume of that name.
    #[error("no volume named {0:?}")]
    NotFound(String),
    /// A volume of that name exists already.
    #[error("a volume named {0:?} already exists")]
    Exists(String),
    /// The name is empty, too long, or contains NUL.
    #[error("invalid volume name {0:?}: names are 1 to {MAX_NAME_LEN} bytes of UTF-8 without NUL")]
    InvalidName(String),
    /// Size, block size or chunk size unusable.
    #[error("invalid volume geometry: {0}")]
    InvalidSpec(String),
    /// The request reaches past the end of the volume.
    #[error("request at offset {offset} length {len} is outside the volume ({size} bytes)")]
    OutOfRange {
        /// Request offset.
        offset: u64,
        /// Request length.
        len: u64,
        /// Volume size.
        size: u64,
    },
    /// The request is not aligned to the logical block size.
    #[error(
        "request at offset {offset} length {len} is not aligned to the block size {block_size}"
    )]
    Unaligned {
        /// Request offset.
        offset: u64,
        /// Request length.
        len: u64,
        /// Logical block size.
        block_size: u32,
    },
    /// The volume directory or a chunk record does not have the expected shape.
    #[error("volume metadata is corrupt: {0}")]
    Corrupt(String),
    /// A delete of this volume was interrupted; delete it again to finish.
    #[error("volume {0:?} is being deleted (an earlier delete was interrupted); delete it again to finish")]
    Deleting(String),
}

/// Result alias for this module.
pub type VResult<T> = std::result::Result<T, VolumeError>;

/// Longest volume name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest chunk size.
pub const MAX_CHUNK_SIZE: u32 = 1 << 20;
/// Default chunk size: one 4 KiB block per record, so 4 KiB writes never read.
pub const DEFAULT_CHUNK_SIZE: u32 = 4096;

/// Geometry of a new volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Size in bytes: a positive multiple of `block_size`.
    pub size: u64,
    /// Logical block size: 512 or 4096.
    pub block_size: u32,
    /// Bytes per record: a power of two, `block_size..=MAX_CHUNK_SIZE`.
    pub chunk_size: u32,
}

impl VolumeSpec {
    /// `size` bytes with 4 KiB blocks and 4 KiB chunks.
    pub fn new(size: u64) -> VolumeSpec {
        VolumeSpec {
            size,
            block_size: 4096,
            chunk_size: DEFAULT_CHUNK_SIZE,
        }
    }

    fn validate(&self) -> VResult<()> {
        if self.block_size != 512 && self.block_size != 4096 {
            return Err(VolumeError::InvalidSpec(format!(
                "block size {} (must be 512 or 4096)",
                self.block_size
            )));
        }
        if !self.chunk_size.is_power_of_two()
            || self.chunk_size < self.block_size
            || self.chunk_size > MAX_CHUNK_SIZE
        {
            return Err(VolumeError::InvalidSpec(format!(
                "chunk size {} (must be a power of two from the block size {} to {MAX_CHUNK_SIZE})",
                self.chunk_size, self.block_size
            )));
        }
        if self.size == 0 || self.size % self.block_size as u64 != 0 {
            return Err(VolumeError::InvalidSpec(format!(
                "size {} (must be a positive multiple of the block size {})",
                self.size, self.block_size
            )));
        }
        // Chunk numbers must fit the key, and the size must fit NBD's 63-bit offsets.
        if self.size > (1u64 << 62) {
            return Err(VolumeError::InvalidSpec(format!(
                "size {} is larger than 4 EiB",
                self.size
            )));
        }
        Ok(())
    }
}

/// A volume as recorded in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    /// Its name.
    pub name: String,
    /// Its id (never reused within a pool).
    pub id: u64,
    /// Size in bytes.
    pub size: u64,
    /// Logical block size.
    pub block_size: u32,
    /// Bytes per record.
    pub chunk_size: u32,
    /// A delete was started and not finished.
    pub deleting: bool,
}

// ---------------------------------------------------------------------------
// Keys and the directory record

const KEY_PREFIX: &[u8; 4] = b"\xffMVB";
const DIR_KEY: &[u8] = b"\xffMVBdir";
const DIR_MAGIC: &[u8; 4] = b"MVBD";

/// Whether `k` is the key of a block-layer record (the volume directory or a
/// volume's chunk), as opposed to a key-value user's key.
pub fn is_volume_key(k: &[u8]) -> bool {
    k.starts_with(KEY_PREFIX)
}
const DIR_VERSION: u32 = 1;
const FLAG_DELETING: u32 = 1;

fn chunk_key(id: u64, chunk: u64) -> [u8; 21] {
    let mut k = [0u8; 21];
    k[..4].copy_from_slice(KEY_PREFIX);
    k[4] = b'c';
    k[5..13].copy_from_slice(&id.to_be_bytes());
    k[13..21].copy_from_slice(&chunk.to_be_bytes());
    k
}

struct Directory {
    next_id: u64,
    vols: Vec<VolumeInfo>,
}

fn encode_dir(d: &Directory) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + d.vols.len() * 64);
    b.extend_from_slice(DIR_MAGIC);
    b.extend_from_slice(&DIR_VERSION.to_le_bytes());
    b.extend_from_slice(&d.next_id.to_le_bytes());
    b.extend_from_slice(&(d.vols.len() as u32).to_le_bytes());
    for v in &d.vols {
        b.extend_from_slice(&v.id.to_le_bytes());
        b.extend_from_slice(&v.size.to_le_bytes());
        b.extend_from_slice(&v.block_size.to_le_bytes());
        b.extend_from_slice(&v.chunk_size.to_le_bytes());
        let flags = if v.deleting { FLAG_DELETING } else { 0 };
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&(v.name.len() as u16).to_le_bytes());
        b.extend_from_slice(v.name.as_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

struct Rd<'a>(&'a [u8]);
impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> VResult<&'a [u8]> {
        if self.0.len() < n {
            return Err(VolumeError::Corrupt("volume directory is truncated".into()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> VResult<u16> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }
    fn u32(&mut self) -> VResult<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> VResult<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

fn decode_dir(b: &[u8]) -> VResult<Directory> {
    if b.len() < 24 {
        return Err(VolumeError::Corrupt("volume directory is truncated".into()));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    let mut c = [0u8; 4];
    c.copy_from_slice(crc);
    if crc32c::crc32c(body) != u32::from_le_bytes(c) {
        return Err(VolumeError::Corrupt(
            "volume directory checksum mismatch".into(),
        ));
    }
    let mut r = Rd(body);
    if r.take(4)? != DIR_MAGIC {
        return Err(VolumeError::Corrupt(
            "volume directory has a bad magic".into(),
        ));
    }
    let version = r.u32()?;
    if version != DIR_VERSION {
        return Err(VolumeError::Corrupt(format!(
            "volume directory version {version} is not supported (this build reads {DIR_VERSION})"
        )));
    }
    let next_id = r.u64()?;
    let n = r.u32()?;
    let mut vols = Vec::new();
    for _ in 0..n {
        let id = r.u64()?;
        let size = r.u64()?;
        let block_size = r.u32()?;
        let chunk_size = r.u32()?;
        let flags = r.u32()?;
        let nl = r.u16()? as usize;
        let name = std::str::from_utf8(r.take(nl)?)
            .map_err(|_| VolumeError::Corrupt("volume name is not UTF-8".into()))?
            .to_string();
        let spec = VolumeSpec {
            size,
            block_size,
            chunk_size,
        };
        spec.validate()
            .map_err(|e| VolumeError::Corrupt(format!("volume {name:?}: {e}")))?;
        if id >= next_id {
            return Err(VolumeError::Corrupt(format!(
                "volume {name:?} has id {id} >= next id {next_id}"
            )));
        }
        vols.push(VolumeInfo {
            name,
            id,
            size,
            block_size,
            chunk_size,
            deleting: flags & FLAG_DELETING != 0,
        });
    }
    if !r.0.is_empty() {
        return Err(VolumeError::Corrupt(
            "volume directory has trailing bytes".into(),
        ));
    }
    Ok(Directory { next_id, vols })
}

fn read_dir(db: &Db) -> VResult<Directory> {
    match db.get(DIR_KEY)? {
        Some(b) => decode_dir(&b),
        None => Ok(Directory {
            next_id: 1,
            vols: Vec::new(),
        }),
    }
}

/// Serialises directory changes made by this process (a pool is open in one process).
static DIR_LOCK: Mutex<()> = Mutex::new(());

fn check_name(name: &str) -> VResult<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
        return Err(VolumeError::InvalidName(name.to_string()));
    }
    Ok(())
}

/// Create a volume. Its blocks read as zeros until written.
pub fn create_volume(db: &Db, name: &str, spec: VolumeSpec) -> VResult<VolumeInfo> {
    check_name(name)?;
    spec.validate()?;
    let _g = DIR_LOCK.lock();
    let mut dir = read_dir(db)?;
    if dir.vols.iter().any(|v| v.name == name) {
        return Err(VolumeError::Exists(name.to_string()));
    }
    let info = VolumeInfo {
        name: name.to_string(),
        id: dir.next_id,
        size: spec.size,
        block_size: spec.block_size,
        chunk_size: spec.chunk_size,
        deleting: false,
    };
    dir.next_id += 1;
    dir.vols.push(info.clone());
    db.put(DIR_KEY, &encode_dir(&dir))?;
    Ok(info)
}

/// The volumes of the pool, in creation order.
pub fn list_volumes(db: &Db) -> VResult<Vec<VolumeInfo>> {
    Ok(read_dir(db)?.vols)
}

/// The directory entry of one volume.
pub fn volume_info(db: &Db, name: &str) -> VResult<VolumeInfo> {
    read_dir(db)?
        .vols
        .into_iter()
        .find(|v| v.name == name)
        .ok_or_else(|| VolumeError::NotFound(name.to_string()))
}

/// Delete a volume and all its data. Crash-safe: the volume is first marked as being
/// deleted (it can no longer be opened), then its chunks are deleted, then its entry.
/// Do not delete a volume that is open.
pub fn delete_volume(db: &Db, name: &str) -> VResult<()> {
    let info = {
        let _g = DIR_LOCK.lock();
        let mut dir = read_dir(db)?;
        let v = dir
            .vols
            .iter_mut()
            .find(|v| v.name == name)
            .ok_or_else(|| VolumeError::NotFound(name.to_string()))?;
        if !v.deleting {
            v.deleting = true;
            let info = v.clone();
            db.put(DIR_KEY, &encode_dir(&dir))?;
            info
        } else {
            v.clone()
        }
    };
    let nchunks = info.size.div_ceil(info.chunk_size as u64);
    let mut batch = WriteBatch::new();
    for c in 0..nchunks {
        let k = chunk_key(info.id, c);
        if db.may_contain(&k)? {
            batch.delete(&k)?;
            if batch.len() >= 1024 {
                db.write(std::mem::take(&mut batch))?;
            }
        }
    }
    db.write(batch)?;
    let _g = DIR_LOCK.lock();
    let mut dir = read_dir(db)?;
    dir.vols.retain(|v| v.id != info.id);
    db.put(DIR_KEY, &encode_dir(&dir))?;
    Ok(())
}

/// Open a volume for I/O. Several handles (and threads) may use one volume at once.
pub fn open_volume(db: Arc<Db>, name: &str) -> VResult<Volume> {
    let info = volume_info(&db, name)?;
    if info.deleting {
        return Err(VolumeError::Deleting(name.to_string()));
    }
    Ok(Volume { db, info })
}

// ---------------------------------------------------------------------------
// Chunk locks

const STRIPES: usize = 1024;
/// Process-wide, so that every handle of a volume shares them.
static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

fn stripe(id: u64, chunk: u64) -> usize {
    let h = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ chunk).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> 54) as usize % STRIPES
}

/// Lock the stripes of `chunks` in index order, so that two writers never deadlock.
fn lock_chunks(id: u64, chunks: impl Iterator<Item = u64>) -> Vec<MutexGuard<'static, ()>> {
    let mut s: Vec<usize> = chunks.map(|c| stripe(id, c)).collect();
    s.sort_unstable();
    s.dedup();
    s.into_iter().map(|i| LOCKS[i].lock()).collect()
}

/// Most bytes of chunk data written as one engine batch: bounds the memory and the
/// lock set of one large request, and stays far below the pad's largest group.
const GROUP_BYTES: u64 = 256 << 10;

/// Reads of at least this many chunks are spread over threads.
const PARALLEL_READ_CHUNKS: u64 = 16;
/// Most threads one read uses.
const READ_THREADS: u64 = 8;

/// Longest run of chunks one `block_status` call looks at (index lookups only).
const STATUS_SCAN_CHUNKS: u64 = 1 << 17;

/// One extent of [`Volume::block_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Bytes.
    pub len: u64,
    /// No record holds this range: it reads as zeros and takes no space.
    pub hole: bool,
}

/// An open volume. `Send + Sync`.
pub struct Volume {
    db: Arc<Db>,
    info: VolumeInfo,
}

fn is_zero(b: &[u8]) -> bool {
    // OR-folding fixed blocks vectorises; this runs on every chunk written.
    let mut it = b.chunks_exact(64);
    for c in &mut it {
        if c.iter().fold(0u8, |a, &x| a | x) != 0 {
            return false;
        }
    }
    it.remainder().iter().all(|&x| x == 0)
}

/// What to do to one chunk.
enum Fill<'a> {
    Data(&'a [u8]),
    Zero,
}

impl Volume {
    /// Directory entry.
    pub fn info(&self) -> &VolumeInfo {
        &self.info
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.info.size
    }
    /// Logical block size.
    pub fn block_size(&self) -> u32 {
        self.info.block_size
    }
    /// Bytes per record.
    pub fn chunk_size(&self) -> u32 {
        self.info.chunk_size
    }
    /// The engine under the volume.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    fn check(&self, offset: u64, len: u64) -> VResult<()> {
        let bs = self.info.block_size as u64;
        if offset % bs != 0 || len % bs != 0 {
            return Err(VolumeError::Unaligned {
                offset,
                len,
                block_size: self.info.block_size,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.info.size => Ok(()),
            _ => Err(VolumeError::OutOfRange {
                offset,
                len,
                size: self.info.size,
            }),
        }
    }

    /// Bytes of chunk `c` (the last chunk may be shorter than the chunk size).
    fn chunk_len(&self, c: u64) -> usize {
        let cs = self.info.chunk_size as u64;
        (self.info.size - c * cs).min(cs) as usize
    }

    fn get_chunk(&self, c: u64) -> VResult<Option<Vec<u8>>> {
        let v = self.db.get(&chunk_key(self.info.id, c))?;
        if let Some(v) = &v {
            if v.len() != self.chunk_len(c) {
                return Err(VolumeError::Corrupt(format!(
                    "volume {:?} chunk {c} holds {} bytes, expected {}",
                    self.info.name,
                    v.len(),
                    self.chunk_len(c)
                )));
            }
        }
        Ok(v)
    }

    /// Read `buf.len()` bytes at `offset` (both multiples of the block size). Reads of
    /// many chunks fetch them from several threads at once (one engine get per chunk).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> VResult<()> {
        self.check(offset, buf.len() as u64)?;
        let cs = self.info.chunk_size as u64;
        let len = buf.len() as u64;
        let nchunks = if len == 0 {
            0
        } else {
            (offset + len - 1) / cs - offset / cs + 1
        };
        if nchunks < PARALLEL_READ_CHUNKS {
            return self.read_serial(offset, buf);
        }
        let parts = (nchunks / (PARALLEL_READ_CHUNKS / 2)).min(READ_THREADS);
        let per = nchunks.div_ceil(parts);
        std::thread::scope(|sc| {
            let mut rest = buf;
            let mut pos = offset;
            let mut hs = Vec::new();
            while !rest.is_empty() {
                // Split on chunk boundaries, `per` chunks to a part.
                let end = ((pos / cs + per) * cs).min(offset + len);
                let (part, tail) = rest.split_at_mut((end - pos) as usize);
                let at = pos;
                hs.push(sc.spawn(move || self.read_serial(at, part)));
                rest = tail;
                pos = end;
            }
            hs.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(VolumeError::Corrupt("a read thread panicked".into())))
            })
        })
    }

    fn read_serial(&self, offset: u64, buf: &mut [u8]) -> VResult<()> {
        let cs = self.info.chunk_size as u64;
        let end = offset + buf.len() as u64;
        let mut pos = offset;
        while pos < end {
            let c = pos / cs;
            let cstart = c * cs;
            let cend = (cstart + cs).min(end);
            let dst = &mut buf[(pos - offset) as usize..(cend - offset) as usize];
            match self.get_chunk(c)? {
                Some(v) => {
                    dst.copy_from_slice(&v[(pos - cstart) as usize..(cend - cstart) as usize])
                }
                None => dst.fill(0),
            }
            pos = cend;
        }
        Ok(())
    }

    /// Write `data` at `offset` (both multiples of the block size). Durable on return.
    /// Chunks that end up all zeros are deleted rather than stored.
    pub fn write(&self, offset: u64, data: &[u8]) -> VResult<()> {
        self.check(offset, data.len() as u64)?;
        self.apply(offset, data.len() as u64, |pos, len| {
            let s = (pos - offset) as usize;
            Fill::Data(&data[s..s + len])
        })
    }

    /// Make `len` bytes at `offset` read as zeros: whole chunks are deleted (their
    /// space is freed), the zeroed part of a partly covered chunk is rewritten.
    /// Durable on return.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> VResult<()> {
        self.check(offset, len)?;
        self.apply(offset, len, |_, _| Fill::Zero)
    }

    /// Discard `len` bytes at `offset`. Same as [`Volume::write_zeroes`]: discarded
    /// blocks read as zeros afterwards.
    pub fn trim(&self, offset: u64, len: u64) -> VResult<()> {
        self.write_zeroes(offset, len)
    }

    /// Whether the range `offset..offset+len` lies on whole chunks (so zeroing it only
    /// deletes records and never reads).
    pub fn chunk_aligned(&self, offset: u64, len: u64) -> bool {
        let cs = self.info.chunk_size as u64;
        let end = offset.saturating_add(len);
        offset % cs == 0 && (end % cs == 0 || end == self.info.size)
    }

    /// Everything acknowledged is already durable; this drains sealed segments to the
    /// capacity tier and reports an engine that has failed.
    pub fn flush(&self) -> VResult<()> {
        Ok(self.db.flush()?)
    }

    fn apply<'d>(
        &self,
        offset: u64,
        len: u64,
        fill: impl Fn(u64, usize) -> Fill<'d>,
    ) -> VResult<()> {
        if len == 0 {
            return Ok(());
        }
        let cs = self.info.chunk_size as u64;
        let end = offset + len;
        let first = offset / cs;
        let last = (end - 1) / cs;
        let per_group = (GROUP_BYTES / cs).max(1);
        let mut g0 = first;
        while g0 <= last {
            let g1 = (g0 + per_group).min(last + 1);
            let _locks = lock_chunks(self.info.id, g0..g1);
            let mut batch = WriteBatch::new();
            // Chunks to write one by one if the batch is refused as too large.
            let mut single: Vec<(u64, Option<Vec<u8>>)> = Vec::new();
            for c in g0..g1 {
                let cstart = c * cs;
                let clen = self.chunk_len(c);
                let cend = cstart + clen as u64;
                let s = offset.max(cstart);
                let e = end.min(cend);
                let key = chunk_key(self.info.id, c);
                let whole = s == cstart && e == cend;
                let new: Option<Vec<u8>> = match fill(s, (e - s) as usize) {
                    Fill::Data(d) if whole => (!is_zero(d)).then(|| d.to_vec()),
                    Fill::Zero if whole => None,
                    f => {
                        let mut cur = match self.get_chunk(c)? {
                            Some(v) => v,
                            None if matches!(f, Fill::Zero) => continue,
                            None => vec![0u8; clen],
                        };
                        let dst = &mut cur[(s - cstart) as usize..(e - cstart) as usize];
                        match f {
                            Fill::Data(d) => dst.copy_from_slice(d),
                            Fill::Zero => dst.fill(0),
                        }
                        (!is_zero(&cur)).then_some(cur)
                    }
                };
                match &new {
                    Some(v) => batch.put(&key, v)?,
                    // Deleting what is not there would still log a tombstone.
                    None if self.db.may_contain(&key)? => batch.delete(&key)?,
                    None => continue,
                }
                single.push((c, new));
            }
            self.commit(batch, single)?;
            g0 = g1;
        }
        Ok(())
    }

    /// Write a batch (its chunk locks held); `single` lists the same chunk updates
    /// for pools whose largest atomic group is smaller than the batch.
    fn commit(&self, batch: WriteBatch, single: Vec<(u64, Option<Vec<u8>>)>) -> VResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.db.write(batch) {
            Ok(()) => Ok(()),
            // Small pools (capacity-only with small bands) take smaller groups.
            Err(Error::InvalidConfig(_)) => {
                for (c, v) in single {
                    let key = chunk_key(self.info.id, c);
                    match v {
                        Some(v) => self.db.put(&key, &v)?,
                        None => {
                            self.db.delete(&key)?;
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Several writes as one engine batch (one group commit instead of one per
    /// write), applied in order: where they overlap, the later one wins. Durable on
    /// return. Large sets fall back to one write after the other.
    pub fn write_many(&self, writes: &[(u64, &[u8])]) -> VResult<()> {
        for (off, d) in writes {
            self.check(*off, d.len() as u64)?;
        }
        let cs = self.info.chunk_size as u64;
        let mut chunks: Vec<u64> = writes
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .flat_map(|(o, d)| o / cs..(o + d.len() as u64 - 1) / cs + 1)
            .collect();
        chunks.sort_unstable();
        chunks.dedup();
        if chunks.len() as u64 * cs > 4 * GROUP_BYTES {
            for (off, d) in writes {
                self.write(*off, d)?;
            }
            return Ok(());
        }
        let _locks = lock_chunks(self.info.id, chunks.iter().copied());
        let mut content: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        for (off, d) in writes {
            let end = off + d.len() as u64;
            let mut pos = *off;
            while pos < end {
                let c = pos / cs;
                let cstart = c * cs;
                let clen = self.chunk_len(c);
                let e = end.min(cstart + clen as u64);
                let piece = &d[(pos - off) as usize..(e - off) as usize];
                if pos == cstart && e == cstart + clen as u64 {
                    content.insert(c, piece.to_vec());
                } else {
                    let buf = match content.entry(c) {
                        std::collections::btree_map::Entry::Occupied(x) => x.into_mut(),
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(self.get_chunk(c)?.unwrap_or_else(|| vec![0u8; clen]))
                        }
                    };
                    buf[(pos - cstart) as usize..(e - cstart) as usize].copy_from_slice(piece);
                }
                pos = e;
            }
        }
        let mut batch = WriteBatch::new();
        let mut single = Vec::with_capacity(content.len());
        for (c, v) in content {
            let key = chunk_key(self.info.id, c);
            if is_zero(&v) {
                if self.db.may_contain(&key)? {
                    batch.delete(&key)?;
                    single.push((c, None));
                }
            } else {
                batch.put(&key, &v)?;
                single.push((c, Some(v)));
            }
        }
        self.commit(batch, single)
    }

    /// Allocation status from `offset` on: consecutive extents, alternating between
    /// data and holes, covering at least one block and at most `len` bytes (fewer
    /// when the range is very large). Uses the DRAM index only: no device reads.
    pub fn block_status(&self, offset: u64, len: u64) -> VResult<Vec<Extent>> {
        self.check(offset, len)?;
        let mut out: Vec<Extent> = Vec::new();
        if len == 0 {
            return Ok(out);
        }
        let cs = self.info.chunk_size as u64;
        let end = offset + len;
        let mut pos = offset;
        let mut scanned = 0;
        while pos < end && scanned < STATUS_SCAN_CHUNKS {
            let c = pos / cs;
            let cend = ((c + 1) * cs).min(end);
            let hole = !self.db.may_contain(&chunk_key(self.info.id, c))?;
            let n = cend - pos;
            match out.last_mut() {
                Some(x) if x.hole == hole => x.len += n,
                _ => out.push(Extent { len: n, hole }),
            }
            pos = cend;
            scanned += 1;
        }
        Ok(out)
    }
}
