//! vFile: a POSIX-style file layer on the key-value engine (paper §2.8.1, §3).
//!
//! Files, directories and symlinks are records in the same pool as any key:
//! an inode record per inode, directory entries in linear-hashing bucket pages
//! per directory, and file data as fixed-size chunk records keyed by
//! (inode, chunk index) — the paper's Table 2 translation of pread/pwrite into
//! gets and puts of block-sized values. Layout and rules: `docs/vfile.md`.
//!
//! Durability rules:
//! - namespace changes (create, mkdir, symlink, link, unlink, rmdir, rename) and
//!   attribute changes (chmod, chown, utimes, truncate to a smaller size) are
//!   durable when the call returns; each is one atomic `WriteBatch`, so a crash
//!   leaves either the old or the new namespace, never a mix;
//! - file data written with [`Vfs::write`] is buffered per inode in DRAM (the
//!   layer's write-back buffer, standing in for a page cache) and becomes durable
//!   at [`Vfs::fsync`], at the last [`Vfs::release`], when the buffer passes its
//!   limits, when it is older than the write-back interval, or at [`Vfs::sync_all`].
//!
//! The layer takes no dependency on FUSE; `masse-fuse` maps kernel requests to it.

mod cache;
mod data;
mod dir;
mod error;
mod piece;
mod read;
mod record;
mod space;
mod writeout;

pub use error::{VfsError, VfsResult};
pub use record::{is_file_layer_key, Kind, Time, VFS_VERSION};

use crate::{Db, WriteBatch};
use cache::evictable;
use dir::{bucket_count, DirPages};
use parking_lot::{Condvar, Mutex, RwLock};
use record::{
    chunk_key, decode_orphans, decode_page, encode_orphans, encode_page, inode_key, orphan_key,
    page_key, super_key, DEntry, Inode, Super,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Longest name of a directory entry, bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest file size (1 TiB): bounds the chunk range a delete must probe.
pub const MAX_FILE_SIZE: u64 = 1 << 40;
/// Longest symlink target, bytes.
pub const MAX_SYMLINK_LEN: usize = 4095;

/// Inode numbers reserved per durable superblock update.
const INO_LEASE: u64 = 1024;

/// Run-time options of the file layer.
#[derive(Clone, Debug)]
pub struct VfsOptions {
    /// Chunk size used when the file layer is first created on a pool (power of
    /// two, 4 KiB – 1 MiB). An existing file layer keeps the size it was made with.
    pub chunk_size: u32,
    /// A file whose buffered (not yet durable) data passes this is written out.
    pub max_dirty_per_file: usize,
    /// When all buffered data passes this, each writer writes its own file out.
    pub max_dirty_total: usize,
    /// Buffered data older than this is written out by a background thread;
    /// `None` keeps it until fsync, last close, a limit, or `sync_all`.
    pub writeback_interval: Option<Duration>,
    /// Owner (uid, gid) of the root directory when the file layer is first created.
    /// A user who mounts a new pool expects to own its root, as with a freshly
    /// made file system they own; an existing file layer keeps its owner.
    pub root_owner: (u32, u32),
    /// Inodes kept in DRAM when neither open nor holding buffered data: beyond
    /// this, the least recently used clean ones are dropped (and read again from
    /// the pool when needed), whether or not the kernel still remembers them.
    pub max_cached_inodes: usize,
}

impl Default for VfsOptions {
    fn default() -> Self {
        VfsOptions {
            chunk_size: 16 * 1024,
            max_dirty_per_file: 8 << 20,
            max_dirty_total: 256 << 20,
            writeback_interval: Some(Duration::from_secs(5)),
            root_owner: (0, 0),
            max_cached_inodes: 4096,
        }
    }
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes (directories: number of entries).
    pub size: u64,
    /// 512-byte blocks allocated (holes take none; at most the size rounded up).
    pub blocks: u64,
    /// Preferred I/O size: the chunk size.
    pub blksize: u32,
    /// Access time (not updated by reads).
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
    /// Status change time.
    pub ctime: Time,
}

/// Attribute changes for [`Vfs::setattr`]; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend with a hole).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Time>,
    /// New modification time.
    pub mtime: Option<Time>,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
}

/// Space and inode figures for `statfs`.
#[derive(Clone, Debug)]
pub struct StatFs {
    /// Bytes of records the capacity tier holds (every band's payload).
    pub total_bytes: u64,
    /// Bytes not holding live records (the reserve bands included).
    pub free_bytes: u64,
    /// Bytes file data can still take: the engine's user-available space (reserve
    /// bands left out) less buffered data not yet written. Writes of new data are
    /// refused with ENOSPC beyond it.
    pub avail_bytes: u64,
    /// Chunk size.
    pub block_size: u32,
    /// Inode numbers handed out so far.
    pub inodes_used: u64,
}

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

#[derive(Default)]
struct Counters {
    chunk_reads: AtomicU64,
    chunk_writes: AtomicU64,
    buffer_hits: AtomicU64,
    flushes: AtomicU64,
    flushed_bytes: AtomicU64,
    namespace_ops: AtomicU64,
    purged: AtomicU64,
    writes_refused: AtomicU64,
    writeout_errors: AtomicU64,
    evictions: AtomicU64,
}

/// A buffered chunk.
struct DirtyChunk {
    /// Bytes from the chunk start (shorter = zeros after).
    data: Vec<u8>,
    /// The chunk had no record when buffered: writing it takes new space, which
    /// was admitted against the pool's free space (`Shared::pending_new`).
    new: bool,
    /// Store it even if all zeros (space reserved by `fallocate`).
    keep: bool,
}

struct NodeState {
    /// The inode as the layer sees it (may be ahead of `disk` for files).
    inode: Inode,
    /// The inode as last made durable.
    disk: Inode,
    /// Buffered chunks by index.
    dirty: BTreeMap<u64, DirtyChunk>,
    /// How many of `dirty` are `new`.
    new_dirty: u64,
    /// A write-out that failed where no caller could be told (the write-back
    /// thread, a last release): reported by the next write, flush or fsync.
    wb_err: Option<VfsError>,
    attr_dirty: bool,
    dirty_since: Option<Instant>,
    /// Open handles (files).
    open: u32,
    /// Purged or removed: every call gets NotFound.
    gone: bool,
    /// Directories: pages, loaded on first use.
    dir: Option<DirPages>,
}

struct Node {
    ino: u64,
    st: RwLock<NodeState>,
    /// Used since the cache last looked (CLOCK: a second chance before eviction).
    used: AtomicBool,
}

struct Shared {
    db: Arc<Db>,
    cs: u64,
    /// Layout of chunk values (piece checksums from format 2 on).
    codec: piece::Codec,
    opts: VfsOptions,
    max_batch: usize,
    /// Bytes per batch of a write-out or a chunk deletion: at most a quarter of a
    /// band, so that rewriting data on a nearly full pool goes in steps GC can
    /// follow (each step's dead copies make room for the next).
    step: usize,
    nodes: Mutex<HashMap<u64, Arc<Node>>>,
    /// Serialises namespace changes (they are durable batches; data I/O does not take it).
    ns: Mutex<()>,
    ino: Mutex<(u64, u64)>,
    orphans: Mutex<Vec<u64>>,
    dirty_total: AtomicUsize,
    /// Band room admitted for buffered new chunks not yet written.
    pending_new: AtomicU64,
    /// Band room one chunk record takes (`Db::record_room`).
    chunk_room: u64,
    /// The engine's user-available bytes and when they were read (`None`: stale).
    space: Mutex<Option<(Instant, u64)>>,
    c: Counters,
    stop: (Mutex<bool>, Condvar),
}

/// A file system on a masse pool. `Send + Sync`.
pub struct Vfs {
    sh: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

fn chunks_of(size: u64, cs: u64) -> u64 {
    size.div_ceil(cs)
}

/// Encoded size of a record in a batch (header + key + value, 8-byte aligned).
fn rec_cost(k: usize, v: usize) -> usize {
    (24 + k + v).div_ceil(8) * 8
}

fn check_name(name: &[u8]) -> VfsResult<()> {
    if name.is_empty() {
        return Err(VfsError::Invalid("empty name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(VfsError::NameTooLong(name.len()));
    }
    if name == b"." || name == b".." {
        return Err(VfsError::Invalid(
            "`.` and `..` cannot be created or removed",
        ));
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(VfsError::Invalid("a name cannot contain `/` or NUL"));
    }
    Ok(())
}

/// A batch that knows its size.
struct Batch {
    b: WriteBatch,
    bytes: usize,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            b: WriteBatch::new(),
            bytes: 0,
        }
    }
    fn put(&mut self, k: &[u8], v: &[u8]) -> VfsResult<()> {
        self.bytes += rec_cost(k.len(), v.len());
        self.b.put(k, v)?;
        Ok(())
    }
    fn del(&mut self, k: &[u8]) -> VfsResult<()> {
        self.bytes += rec_cost(k.len(), 0);
        self.b.delete(k)?;
        Ok(())
    }
    fn commit(self, db: &Db, max: usize) -> VfsResult<()> {
        if self.bytes > max {
            return Err(VfsError::NoSpace(format!(
                "one metadata change needs {} bytes, more than the pool's largest atomic batch ({max})",
                self.bytes
            )));
        }
        db.write(self.b)?;
        Ok(())
    }
}

impl NodeState {
    fn attr(&self, ino: u64, cs: u64) -> Attr {
        let i = &self.inode;
        Attr {
            ino,
            kind: i.kind,
            perm: i.perm,
            uid: i.uid,
            gid: i.gid,
            nlink: i.nlink,
            size: i.size,
            blocks: self.blocks(cs),
            blksize: cs as u32,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
        }
    }
    /// 512-byte blocks allocated: a file's stored and buffered-new chunks (holes
    /// take none), never more than its size rounded up.
    fn blocks(&self, cs: u64) -> u64 {
        let i = &self.inode;
        let size = i.size.div_ceil(512) * 512;
        if i.kind != Kind::File {
            return size / 512;
        }
        let chunks = i.stored_chunks.saturating_add(self.new_dirty);
        chunks.saturating_mul(cs).min(size) / 512
    }
    fn live(&self) -> VfsResult<()> {
        if self.gone {
            Err(VfsError::NotFound)
        } else {
            Ok(())
        }
    }
    /// Buffered bytes, counted as whole chunks (what the buffers may grow to).
    fn dirty_bytes(&self, cs: u64) -> usize {
        self.dirty.len() * cs as usize
    }
}

impl Vfs {
    /// Open the file layer on `db`, creating it (root directory, superblock) if the
    /// pool has none. Purges inodes left unlinked-but-open by a crash.
    pub fn open(db: Arc<Db>, opts: VfsOptions) -> VfsResult<Vfs> {
        let max_batch = db.max_batch_bytes();
        let sup = match db.get(&super_key())? {
            Some(v) => Super::decode(&v)?,
            None => {
                let cs = opts.chunk_size;
                if !cs.is_power_of_two() || !(4096..=1 << 20).contains(&cs) {
                    return Err(VfsError::Invalid(
                        "chunk size must be a power of two from 4 KiB to 1 MiB",
                    ));
                }
                let s = Super {
                    chunk_size: cs,
                    ino_limit: ROOT_INO + 1,
                    piece: piece::PIECE.min(cs),
                };
                let (uid, gid) = opts.root_owner;
                let root = Inode::new(Kind::Dir, 0o755, uid, gid, ROOT_INO);
                let mut b = Batch::new();
                b.put(&inode_key(ROOT_INO), &root.encode())?;
                b.put(&super_key(), &s.encode())?;
                b.commit(&db, max_batch)?;
                s
            }
        };
        let orphans = match db.get(&orphan_key())? {
            Some(v) => decode_orphans(&v)?,
            None => Vec::new(),
        };
        let codec = piece::Codec { piece: sup.piece };
        // A full chunk's record as stored (with its piece checksums in format 2).
        let chunk_room = db.record_room(
            chunk_key(0, 0).len(),
            codec.stored_len(sup.chunk_size as usize),
        );
        let step = (max_batch / 2)
            .min(4 << 20)
            .min((db.space().band_payload / 4) as usize)
            .max(4096);
        let sh = Arc::new(Shared {
            db,
            cs: sup.chunk_size as u64,
            codec,
            opts,
            max_batch,
            step,
            nodes: Mutex::new(HashMap::new()),
            ns: Mutex::new(()),
            ino: Mutex::new((sup.ino_limit, sup.ino_limit)),
            orphans: Mutex::new(orphans.clone()),
            dirty_total: AtomicUsize::new(0),
            pending_new: AtomicU64::new(0),
            chunk_room,
            space: Mutex::new(None),
            c: Counters::default(),
            stop: (Mutex::new(false), Condvar::new()),
        });
        let vfs = Vfs {
            sh,
            flusher: Mutex::new(None),
            closed: AtomicBool::new(false),
        };
        for ino in orphans {
            vfs.sh.purge(ino)?;
        }
        if let Some(iv) = vfs.sh.opts.writeback_interval {
            let sh = vfs.sh.clone();
            let h = std::thread::Builder::new()
                .name("masse-vfile-wb".into())
                .spawn(move || sh.writeback_loop(iv))
                .map_err(|e| {
                    VfsError::Engine(crate::Error::Closed(format!(
                        "cannot start the write-back thread: {e}"
                    )))
                })?;
            *vfs.flusher.lock() = Some(h);
        }
        Ok(vfs)
    }

    /// The engine underneath.
    pub fn db(&self) -> &Arc<Db> {
        &self.sh.db
    }

    /// Chunk size of this file layer.
    pub fn chunk_size(&self) -> u32 {
        self.sh.cs as u32
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> VfsResult<Attr> {
        let n = self.sh.node(ino)?;
        let st = n.st.read();
        st.live()?;
        Ok(st.attr(ino, self.sh.cs))
    }

    /// Look `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> VfsResult<Attr> {
        if name.len() > MAX_NAME_LEN {
            return Err(VfsError::NameTooLong(name.len()));
        }
        let ino = {
            let d = self.sh.node(parent)?;
            if name == b"." {
                parent
            } else if name == b".." {
                let st = d.st.read();
                st.live()?;
                st.inode.parent
            } else {
                self.sh
                    .with_dir(&d, |p| p.find(name).map(|e| e.ino))?
                    .ok_or(VfsError::NotFound)?
            }
        };
        self.getattr(ino)
    }

    /// List directory `ino` (without `.` and `..`), a snapshot.
    pub fn readdir(&self, ino: u64) -> VfsResult<Vec<DirEntry>> {
        let d = self.sh.node(ino)?;
        self.sh.with_dir(&d, |p| {
            p.list()
                .map(|e| DirEntry {
                    name: e.name.clone(),
                    ino: e.ino,
                    kind: e.kind,
                })
                .collect()
        })
    }

    /// Create a regular file; `Exists` if the name is taken.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        self.sh
            .make(parent, name, Inode::new(Kind::File, perm, uid, gid, parent))
    }

    /// Create a directory.
    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        self.sh
            .make(parent, name, Inode::new(Kind::Dir, perm, uid, gid, parent))
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        if target.is_empty() || target.len() > MAX_SYMLINK_LEN {
            return Err(VfsError::Invalid("symlink target must be 1-4095 bytes"));
        }
        let mut i = Inode::new(Kind::Symlink, 0o777, uid, gid, parent);
        i.target = target.to_vec();
        i.size = target.len() as u64;
        self.sh.make(parent, name, i)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> VfsResult<Vec<u8>> {
        let n = self.sh.node(ino)?;
        let st = n.st.read();
        st.live()?;
        if st.inode.kind != Kind::Symlink {
            return Err(VfsError::Invalid("not a symbolic link"));
        }
        Ok(st.inode.target.clone())
    }

    /// Add a hard link `newparent/newname` to file `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> VfsResult<Attr> {
        self.sh.link(ino, newparent, newname)
    }

    /// Remove the name `parent/name` (not a directory). The inode's data is kept
    /// while it is open and freed at the last release.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> VfsResult<()> {
        self.sh.remove(parent, name, false)
    }

    /// Remove the empty directory `parent/name`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> VfsResult<()> {
        self.sh.remove(parent, name, true)
    }

    /// Atomically rename `parent/name` to `newparent/newname`, replacing a target of
    /// a compatible kind (an empty directory for a directory). With `noreplace`, an
    /// existing target is `Exists`.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> VfsResult<()> {
        self.sh.rename(parent, name, newparent, newname, noreplace)
    }

    /// Note an open handle of `ino` (its data outlives an unlink until released).
    pub fn open_file(&self, ino: u64) -> VfsResult<Attr> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        st.open += 1;
        Ok(st.attr(ino, self.sh.cs))
    }

    /// Close a handle opened with [`Vfs::open_file`]/[`Vfs::create`]: writes the file's
    /// buffered data out at the last close and frees an unlinked inode.
    pub fn release(&self, ino: u64) -> VfsResult<()> {
        let n = self.sh.node(ino)?;
        let purge = {
            let mut st = n.st.write();
            st.open = st.open.saturating_sub(1);
            if st.gone {
                return Ok(());
            }
            if st.open > 0 {
                return Ok(());
            }
            if st.inode.nlink == 0 {
                true
            } else {
                // Normally nothing is left: `flush` wrote it at close. A failure
                // here stays on the inode for the next writer to hear.
                self.sh.flush_locked(ino, &mut st)?;
                false
            }
        };
        if purge {
            self.sh.purge(ino)?;
        }
        Ok(())
    }

    /// Read up to `len` bytes at `off` (short at end of file; holes read as zeros).
    /// Only the bytes asked for are read from the engine where the chunk format
    /// allows it (`read.rs`).
    pub fn read(&self, ino: u64, off: u64, len: usize) -> VfsResult<Vec<u8>> {
        self.sh.read_vec(ino, off, len)
    }

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

    /// Change attributes; a size change truncates (durably, when shrinking) or
    /// extends with a hole.
    pub fn setattr(&self, ino: u64, a: &SetAttr) -> VfsResult<Attr> {
        self.sh.setattr(ino, a)
    }

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

    /// Make every file's buffered data durable.
    pub fn sync_all(&self) -> VfsResult<()> {
        self.sh.flush_older(None)
    }

    /// Drop `ino` from the DRAM cache if it is clean and not open (FUSE `forget`).
    pub fn forget(&self, ino: u64) {
        let mut t = self.sh.nodes.lock();
        if t.get(&ino).is_some_and(|n| evictable(ino, n)) {
            t.remove(&ino);
        }
    }

    /// Space figures.
    pub fn statfs(&self) -> StatFs {
        self.sh.space_stale();
        let s = self.sh.db.space();
        let total = s.band_payload * s.bands_total as u64;
        StatFs {
            total_bytes: total,
            free_bytes: total.saturating_sub(s.live_bytes),
            avail_bytes: self.sh.avail_data_bytes(),
            block_size: self.sh.cs as u32,
            inodes_used: self.sh.ino.lock().0,
        }
    }

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

    /// Stop the write-back thread and make all buffered data durable. The engine
    /// stays open: close it afterwards (`Arc::try_unwrap(db)?.close()`).
    pub fn close(&self) -> VfsResult<()> {
        if self.closed.swap(true, Relaxed) {
            return Ok(());
        }
        {
            let mut s = self.sh.stop.0.lock();
            *s = true;
            self.sh.stop.1.notify_all();
        }
        if let Some(h) = self.flusher.lock().take() {
            let _ = h.join();
        }
        self.sync_all()
    }
}

impl Drop for Vfs {
    fn drop(&mut self) {
        // Buffered data is written out on a normal drop; errors have nowhere to go
        // here, which is why `close` exists.
        let _ = self.close();
    }
}

impl Shared {
    fn load_pages(&self, ino: u64, inode: &Inode) -> VfsResult<DirPages> {
        let nb = bucket_count(inode.level, inode.split);
        let mut pages = Vec::with_capacity(nb as usize);
        let mut entries = 0u64;
        for b in 0..nb {
            let p = match self.db.get(&page_key(ino, b))? {
                Some(v) => decode_page(&v)?,
                None => Vec::new(),
            };
            entries += p.len() as u64;
            pages.push(p);
        }
        Ok(DirPages {
            level: inode.level,
            split: inode.split,
            pages,
            entries,
        })
    }

    /// Run `f` on the pages of directory node `d`, loading them first if needed.
    fn with_dir<T>(&self, d: &Node, f: impl FnOnce(&DirPages) -> T) -> VfsResult<T> {
        {
            let st = d.st.read();
            st.live()?;
            if st.inode.kind != Kind::Dir {
                return Err(VfsError::NotDir);
            }
            if let Some(p) = &st.dir {
                return Ok(f(p));
            }
        }
        let mut st = d.st.write();
        self.ensure_pages(d.ino, &mut st)?;
        match &st.dir {
            Some(p) => Ok(f(p)),
            None => Err(VfsError::NotDir),
        }
    }

    fn ensure_pages(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        st.live()?;
        if st.inode.kind != Kind::Dir {
            return Err(VfsError::NotDir);
        }
        if st.dir.is_none() {
            st.dir = Some(self.load_pages(ino, &st.inode)?);
        }
        Ok(())
    }

    fn alloc_ino(&self) -> VfsResult<u64> {
        let mut a = self.ino.lock();
        if a.0 >= a.1 {
            // Lease a range durably before handing any of it out, so a number is
            // never reused after a crash.
            let limit = a.1 + INO_LEASE;
            let s = Super {
                chunk_size: self.cs as u32,
                ino_limit: limit,
                piece: self.codec.piece,
            };
            self.db.put(&super_key(), &s.encode())?;
            a.1 = limit;
        }
        let i = a.0;
        a.0 += 1;
        Ok(i)
    }

    fn page_ops(&self, b: &mut Batch, dir: u64, pages: &[(u32, Vec<DEntry>)]) -> VfsResult<()> {
        for (bk, p) in pages {
            let v = encode_page(p);
            if v.len() > crate::MAX_VALUE_LEN {
                return Err(VfsError::NoSpace(
                    "a directory bucket page is full (too many long names hash alike)".into(),
                ));
            }
            if p.is_empty() {
                b.del(&page_key(dir, *bk))?;
            } else {
                b.put(&page_key(dir, *bk), &v)?;
            }
        }
        Ok(())
    }

    /// create / mkdir / symlink.
    fn make(&self, parent: u64, name: &[u8], mut inode: Inode) -> VfsResult<Attr> {
        check_name(name)?;
        let _ns = self.ns.lock();
        let d = self.node(parent)?;
        let mut ds = d.st.write();
        self.ensure_pages(parent, &mut ds)?;
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        if pages.find(name).is_some() {
            return Err(VfsError::Exists);
        }
        let ino = self.alloc_ino()?;
        inode.parent = parent;
        let mut plan = pages.plan();
        plan.insert(dir::entry(name, ino, inode.kind));
        let (level, split, entries, changed) = plan.into_pages();
        let mut dnode = ds.inode.clone();
        dnode.level = level;
        dnode.split = split;
        dnode.size = entries;
        dnode.mtime = inode.mtime;
        dnode.ctime = inode.mtime;
        if inode.kind == Kind::Dir {
            dnode.nlink += 1;
        }
        let mut b = Batch::new();
        self.page_ops(&mut b, parent, &changed)?;
        b.put(&inode_key(parent), &dnode.encode())?;
        b.put(&inode_key(ino), &inode.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(p) = ds.dir.as_mut() {
            p.apply(level, split, entries, changed);
        }
        ds.disk = dnode.clone();
        ds.inode = dnode;
        let n = self.new_node(ino, inode);
        let st = n.st.read();
        Ok(st.attr(ino, self.cs))
    }

    fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> VfsResult<Attr> {
        check_name(newname)?;
        let _ns = self.ns.lock();
        let f = self.node(ino)?;
        let d = self.node(newparent)?;
        if Arc::ptr_eq(&f, &d) {
            return Err(VfsError::IsDir);
        }
        let mut ds = d.st.write();
        self.ensure_pages(newparent, &mut ds)?;
        let mut fs = f.st.write();
        fs.live()?;
        if fs.inode.kind == Kind::Dir {
            return Err(VfsError::IsDir);
        }
        if fs.inode.nlink == 0 {
            return Err(VfsError::NotFound);
        }
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        if pages.find(newname).is_some() {
            return Err(VfsError::Exists);
        }
        let now = Time::now();
        let mut plan = pages.plan();
        plan.insert(dir::entry(newname, ino, fs.inode.kind));
        let (level, split, entries, changed) = plan.into_pages();
        let mut dnode = ds.inode.clone();
        dnode.level = level;
        dnode.split = split;
        dnode.size = entries;
        dnode.mtime = now;
        dnode.ctime = now;
        let mut fdisk = fs.disk.clone();
        fdisk.nlink += 1;
        fdisk.ctime = now;
        let mut b = Batch::new();
        self.page_ops(&mut b, newparent, &changed)?;
        b.put(&inode_key(newparent), &dnode.encode())?;
        b.put(&inode_key(ino), &fdisk.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(p) = ds.dir.as_mut() {
            p.apply(level, split, entries, changed);
        }
        ds.disk = dnode.clone();
        ds.inode = dnode;
        fs.disk = fdisk;
        fs.inode.nlink += 1;
        fs.inode.ctime = now;
        Ok(fs.attr(ino, self.cs))
    }

    /// unlink (`want_dir` false) or rmdir (`want_dir` true).
    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> VfsResult<()> {
        if name.len() > MAX_NAME_LEN {
            return Err(VfsError::NameTooLong(name.len()));
        }
        if name == b"." {
            return Err(VfsError::Invalid("cannot remove `.`"));
        }
        if name == b".." {
            return Err(VfsError::NotEmpty);
        }
        check_name(name)?;
        let _ns = self.ns.lock();
        let d = self.node(parent)?;
        let mut ds = d.st.write();
        self.ensure_pages(parent, &mut ds)?;
        let e = ds
            .dir
            .as_ref()
            .and_then(|p| p.find(name).cloned())
            .ok_or(VfsError::NotFound)?;
        match (want_dir, e.kind == Kind::Dir) {
            (true, false) => return Err(VfsError::NotDir),
            (false, true) => return Err(VfsError::IsDir),
            _ => {}
        }
        let c = self.node(e.ino)?;
        let mut cs = c.st.write();
        cs.live()?;
        if want_dir {
            self.ensure_pages(e.ino, &mut cs)?;
            if cs.dir.as_ref().map(|p| p.entries).unwrap_or(0) > 0 {
                return Err(VfsError::NotEmpty);
            }
        }
        let now = Time::now();
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        let mut plan = pages.plan();
        plan.remove(name);
        let (level, split, entries, changed) = plan.into_pages();
        let mut dnode = ds.inode.clone();
        dnode.level = level;
        dnode.split = split;
        dnode.size = entries;
        dnode.mtime = now;
        dnode.ctime = now;
        let mut b = Batch::new();
        self.page_ops(&mut b, parent, &changed)?;
        let mut orph = self.orphans.lock();
        let mut new_orph = None;
        let mut cdisk = cs.disk.clone();
        if want_dir {
            dnode.nlink = dnode.nlink.saturating_sub(1);
            b.del(&inode_key(e.ino))?;
            let nb = bucket_count(cs.inode.level, cs.inode.split);
            for bk in 0..nb {
                b.del(&page_key(e.ino, bk))?;
            }
        } else {
            cdisk.nlink = cdisk.nlink.saturating_sub(1);
            cdisk.ctime = now;
            if cdisk.nlink == 0 {
                let mut o = orph.clone();
                o.push(e.ino);
                b.put(&orphan_key(), &encode_orphans(&o))?;
                new_orph = Some(o);
            }
            b.put(&inode_key(e.ino), &cdisk.encode())?;
        }
        b.put(&inode_key(parent), &dnode.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(o) = new_orph {
            *orph = o;
        }
        drop(orph);
        if let Some(p) = ds.dir.as_mut() {
            p.apply(level, split, entries, changed);
        }
        ds.disk = dnode.clone();
        ds.inode = dnode;
        drop(ds);
        let purge = if want_dir {
            cs.gone = true;
            cs.dir = None;
            self.nodes.lock().remove(&e.ino);
            false
        } else {
            cs.inode.nlink = cdisk.nlink;
            cs.inode.ctime = now;
            cs.disk = cdisk;
            cs.inode.nlink == 0 && cs.open == 0
        };
        drop(cs);
        if purge {
            self.purge(e.ino)?;
        }
        Ok(())
    }

    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> VfsResult<()> {
        check_name(name)?;
        check_name(newname)?;
        let _ns = self.ns.lock();
        let sd = self.node(parent)?;
        let dd = self.node(newparent)?;
        let src = self
            .with_dir(&sd, |p| p.find(name).cloned())?
            .ok_or(VfsError::NotFound)?;
        let tgt = self.with_dir(&dd, |p| p.find(newname).cloned())?;
        if parent == newparent && name == newname {
            return Ok(());
        }
        if let Some(t) = &tgt {
            if noreplace {
                return Err(VfsError::Exists);
            }
            if t.ino == src.ino {
                // Two names of one inode: POSIX says do nothing.
                return Ok(());
            }
            match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
                (true, false) => return Err(VfsError::NotDir),
                (false, true) => return Err(VfsError::IsDir),
                _ => {}
            }
            if t.ino == parent {
                return Err(VfsError::NotEmpty);
            }
        }
        if src.kind == Kind::Dir {
            // Refuse to move a directory under itself: walk up from the destination.
            let mut cur = newparent;
            loop {
                if cur == src.ino {
                    return Err(VfsError::Invalid("cannot move a directory into itself"));
                }
                if cur == ROOT_INO {
                    break;
                }
                let n = self.node(cur)?;
                let p = n.st.read().inode.parent;
                if p == cur {
                    break;
                }
                cur = p;
            }
        }
        let moved = self.node(src.ino)?;
        if tgt.is_some() && src.kind == Kind::File {
            // Replacing a file by a renamed one is the atomic-update idiom: write the
            // new file's data out first so the new name never shows a shorter file
            // (ext4's auto_da_alloc does the same).
            let mut ms = moved.st.write();
            self.flush_locked(src.ino, &mut ms)?;
        }
        let tnode = match &tgt {
            Some(t) => Some(self.node(t.ino)?),
            None => None,
        };
        let same = parent == newparent;
        // Lock parents in inode order, then the children.
        let (mut g1, mut g2) = if same {
            (sd.st.write(), None)
        } else if parent < newparent {
            let a = sd.st.write();
            let b = dd.st.write();
            (a, Some(b))
        } else {
            let b = dd.st.write();
            let a = sd.st.write();
            (a, Some(b))
        };
        let mut ms = moved.st.write();
        ms.live()?;
        let mut ts = match &tnode {
            Some(t) => {
                let mut g = t.st.write();
                g.live()?;
                if g.inode.kind == Kind::Dir {
                    self.ensure_pages(t.ino, &mut g)?;
                    if g.dir.as_ref().map(|p| p.entries).unwrap_or(0) > 0 {
                        return Err(VfsError::NotEmpty);
                    }
                }
                Some(g)
            }
            None => None,
        };
        let now = Time::now();
        let is_dir = src.kind == Kind::Dir;
        let tgt_dir = tgt.as_ref().map(|t| t.kind == Kind::Dir).unwrap_or(false);
        let mut b = Batch::new();
        let mut orph = self.orphans.lock();
        let mut new_orph = None;

        // Directory pages and inodes.
        let src_pages = g1.dir.as_ref().ok_or(VfsError::NotDir)?;
        let mut p1 = src_pages.plan();
        p1.remove(name);
        let entry = dir::entry(newname, src.ino, src.kind);
        let (r1, r2);
        let mut sinode = g1.inode.clone();
        sinode.mtime = now;
        sinode.ctime = now;
        let mut dinode = None;
        if same {
            p1.insert(entry);
            r1 = p1.into_pages();
            r2 = None;
            if tgt_dir {
                sinode.nlink = sinode.nlink.saturating_sub(1);
            }
        } else {
            r1 = p1.into_pages();
            let g2r = g2.as_ref().ok_or(VfsError::NotDir)?;
            let mut p2 = g2r.dir.as_ref().ok_or(VfsError::NotDir)?.plan();
            p2.insert(entry);
            r2 = Some(p2.into_pages());
            let mut di = g2r.inode.clone();
            di.mtime = now;
            di.ctime = now;
            if is_dir {
                sinode.nlink = sinode.nlink.saturating_sub(1);
                di.nlink += 1;
            }
            if tgt_dir {
                di.nlink = di.nlink.saturating_sub(1);
            }
            dinode = Some(di);
        }
        sinode.level = r1.0;
        sinode.split = r1.1;
        sinode.size = r1.2;
        self.page_ops(&mut b, parent, &r1.3)?;
        if let (Some(r2), Some(di)) = (&r2, dinode.as_mut()) {
            di.level = r2.0;
            di.split = r2.1;
            di.size = r2.2;
            self.page_ops(&mut b, newparent, &r2.3)?;
            b.put(&inode_key(newparent), &di.encode())?;
        }
        b.put(&inode_key(parent), &sinode.encode())?;

        // The moved inode: ctime, and its parent pointer when it is a directory.
        let mut mdisk = ms.disk.clone();
        mdisk.ctime = now;
        if is_dir {
            mdisk.parent = newparent;
        }
        b.put(&inode_key(src.ino), &mdisk.encode())?;

        // The replaced target.
        let mut tdisk = None;
        if let (Some(t), Some(tg)) = (&tgt, ts.as_ref()) {
            if tgt_dir {
                b.del(&inode_key(t.ino))?;
                for bk in 0..bucket_count(tg.inode.level, tg.inode.split) {
                    b.del(&page_key(t.ino, bk))?;
                }
            } else {
                let mut td = tg.disk.clone();
                td.nlink = td.nlink.saturating_sub(1);
                td.ctime = now;
                if td.nlink == 0 {
                    let mut o = orph.clone();
                    o.push(t.ino);
                    b.put(&orphan_key(), &encode_orphans(&o))?;
                    new_orph = Some(o);
                }
                b.put(&inode_key(t.ino), &td.encode())?;
                tdisk = Some(td);
            }
        }
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(o) = new_orph {
            *orph = o;
        }
        drop(orph);

        // Install in DRAM.
        if let Some(p) = g1.dir.as_mut() {
            p.apply(r1.0, r1.1, r1.2, r1.3);
        }
        g1.disk = sinode.clone();
        g1.inode = sinode;
        if let (Some(g2), Some(r2), Some(di)) = (g2.as_mut(), r2, dinode) {
            if let Some(p) = g2.dir.as_mut() {
                p.apply(r2.0, r2.1, r2.2, r2.3);
            }
            g2.disk = di.clone();
            g2.inode = di;
        }
        ms.inode.ctime = now;
        ms.inode.parent = mdisk.parent;
        ms.disk = mdisk;
        drop(ms);
        drop(g1);
        drop(g2);
        let mut purge = None;
        if let (Some(t), Some(tg)) = (&tgt, ts.as_mut()) {
            if tgt_dir {
                tg.gone = true;
                tg.dir = None;
                self.nodes.lock().remove(&t.ino);
            } else if let Some(td) = tdisk {
                tg.inode.nlink = td.nlink;
                tg.inode.ctime = now;
                tg.disk = td;
                if tg.inode.nlink == 0 && tg.open == 0 {
                    purge = Some(t.ino);
                }
            }
        }
        drop(ts);
        if let Some(i) = purge {
            self.purge(i)?;
        }
        Ok(())
    }

    /// Delete every record of an inode without names, then drop it from the
    /// orphan list. Safe to repeat after a crash.
    fn purge(&self, ino: u64) -> VfsResult<()> {
        let n = match self.node(ino) {
            Ok(n) => n,
            Err(VfsError::NotFound) => {
                // Already gone (a crash after the inode delete): just unlist it.
                return self.unlist_orphan(ino, None);
            }
            Err(e) => return Err(e),
        };
        let mut st = n.st.write();
        if st.gone {
            return Ok(());
        }
        self.discard_dirty(&mut st, |_| true);
        st.attr_dirty = false;
        st.dirty_since = None;
        st.wb_err = None;
        if st.inode.kind == Kind::File {
            let hi = st.disk.alloc_chunks.max(st.inode.alloc_chunks);
            self.delete_chunks(ino, 0, hi)?;
        }
        self.unlist_orphan(ino, Some(ino))?;
        st.gone = true;
        drop(st);
        self.nodes.lock().remove(&ino);
        self.c.purged.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Remove `ino` from the orphan list, deleting inode `del` in the same batch.
    fn unlist_orphan(&self, ino: u64, del: Option<u64>) -> VfsResult<()> {
        let mut o = self.orphans.lock();
        let mut nv: Vec<u64> = o.iter().copied().filter(|&x| x != ino).collect();
        let mut b = Batch::new();
        if let Some(d) = del {
            b.del(&inode_key(d))?;
        }
        if nv.len() != o.len() {
            if nv.is_empty() {
                b.del(&orphan_key())?;
            } else {
                b.put(&orphan_key(), &encode_orphans(&nv))?;
            }
        }
        if b.bytes > 0 {
            b.commit(&self.db, self.max_batch)?;
        }
        std::mem::swap(&mut *o, &mut nv);
        Ok(())
    }
}
