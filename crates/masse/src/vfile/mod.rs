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
//!
//! Where each part lives:
//! - this file: the [`Vfs`] handle, the state its calls share (`Shared`), and
//!   [`Vfs::open`]/[`Vfs::close`];
//! - the namespace: `namespace.rs` (lookup, listing, create, link, unlink, rmdir,
//!   inode numbers), `rename.rs`, `orphan.rs` (open handles, and inodes whose last
//!   name went while open), `dir.rs` (directory bucket pages);
//! - the data path: `data.rs` (writes, truncation, chunk deletion), `read.rs`,
//!   `fallocate.rs`, `piece.rs` (chunk values with piece checksums);
//! - write-back: `writeout.rs` (the DRAM buffer's write-outs, flush and fsync,
//!   the write-back thread), `space.rs` (admitting new data against free space);
//! - around them: `node.rs` (an inode in DRAM), `cache.rs` (the table of them),
//!   `attr.rs` (stat and setattr), `record.rs` (keys and values), `batch.rs`,
//!   `options.rs`, `stats.rs`, `error.rs`.

mod attr;
mod batch;
mod cache;
mod data;
mod dir;
mod error;
mod fallocate;
mod namespace;
mod node;
mod options;
mod orphan;
mod piece;
mod read;
mod record;
mod rename;
mod space;
mod stats;
mod writeout;

pub use attr::{Attr, SetAttr};
pub use error::{VfsError, VfsResult};
pub use namespace::DirEntry;
pub use options::VfsOptions;
pub use record::{is_file_layer_key, Kind, Time, VFS_VERSION};
pub use space::StatFs;
pub use stats::VfsStats;

use crate::Db;
use batch::Batch;
use node::Node;
use parking_lot::{Condvar, Mutex};
use record::{chunk_key, inode_key, super_key, Inode, Super};
use stats::Counters;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Longest name of a directory entry, bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest file size (1 TiB): bounds the chunk range a delete must probe.
pub const MAX_FILE_SIZE: u64 = 1 << 40;
/// Longest symlink target, bytes.
pub const MAX_SYMLINK_LEN: usize = 4095;

/// The state every call of a [`Vfs`] shares; the write-back thread holds it too.
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

impl Vfs {
    /// Open the file layer on `db`, creating it (root directory, superblock) if the
    /// pool has none. Purges inodes left unlinked-but-open by a crash.
    pub fn open(db: Arc<Db>, opts: VfsOptions) -> VfsResult<Vfs> {
        let max_batch = db.max_batch_bytes();
        let sup = match db.get(&super_key())? {
            Some(v) => Super::decode(&v)?,
            None => create(&db, &opts, max_batch)?,
        };
        let orphans = orphan::read_list(&db)?;
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
        *vfs.flusher.lock() = vfs.sh.start_writeback()?;
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

    /// Stop the write-back thread and make all buffered data durable. The engine
    /// stays open: close it afterwards (`Arc::try_unwrap(db)?.close()`).
    pub fn close(&self) -> VfsResult<()> {
        if self.closed.swap(true, Relaxed) {
            return Ok(());
        }
        self.sh.stop_writeback();
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

/// Make the file layer on a pool that has none: its superblock and root directory.
fn create(db: &Db, opts: &VfsOptions, max_batch: usize) -> VfsResult<Super> {
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
    b.commit(db, max_batch)?;
    Ok(s)
}
