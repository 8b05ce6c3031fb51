//! FUSE face of masse: serves the library's vFile layer ([`masse::vfile::Vfs`]) to the
//! kernel with the `fuser` crate, so unmodified programs (cp, sqlite3, git, RocksDB)
//! run on the engine. This crate only translates: every decision about data,
//! durability and errors is the file layer's.
//!
//! Each request handler is timed; [`Profile`] keeps the count and time per
//! operation, so `masse mount --stats` can say where the time goes.

#![deny(missing_docs)]

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use masse::vfile::{Attr, DirEntry, Kind, SetAttr, Time, Vfs, VfsError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use fuser;

/// How the mount behaves.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Let other users than the one mounting use the mount (`allow_other`; a
    /// non-root user needs `user_allow_other` in /etc/fuse.conf).
    pub allow_other: bool,
    /// Threads serving kernel requests.
    pub threads: usize,
    /// Open every file with FOPEN_DIRECT_IO: no kernel page cache, so every read and
    /// write reaches the engine (the paper's "no read cache"). Shared mmap, which
    /// goes through the page cache, is allowed where the kernel offers
    /// FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6 and later); older kernels refuse it.
    pub direct_io: bool,
    /// How long the kernel may cache names and attributes.
    pub attr_ttl: Duration,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            threads: 4,
            direct_io: false,
            attr_ttl: Duration::from_secs(1),
        }
    }
}

/// FUSE operations counted by the profile.
const OPS: [&str; 23] = [
    "lookup",
    "getattr",
    "setattr",
    "readlink",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "releasedir",
    "statfs",
    "create",
    "forget",
    "fallocate",
];

fn op_index(name: &str) -> usize {
    OPS.iter().position(|o| *o == name).unwrap_or(0)
}

/// Count, total and largest handler time per FUSE operation.
#[derive(Default)]
pub struct Profile {
    count: [AtomicU64; 23],
    ns: [AtomicU64; 23],
    max_ns: [AtomicU64; 23],
    bytes: [AtomicU64; 23],
}

/// One line of a profile.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpProfile {
    /// FUSE operation.
    pub op: &'static str,
    /// Requests handled.
    pub count: u64,
    /// Total time inside the handler (file layer + engine + device), µs.
    pub total_us: u64,
    /// Mean handler time, µs.
    pub mean_us: f64,
    /// Largest handler time, µs.
    pub max_us: u64,
    /// Bytes moved (read and write).
    pub bytes: u64,
}

impl Profile {
    fn record(&self, i: usize, t0: Instant, bytes: u64) {
        let ns = t0.elapsed().as_nanos() as u64;
        self.count[i].fetch_add(1, Relaxed);
        self.ns[i].fetch_add(ns, Relaxed);
        self.max_ns[i].fetch_max(ns, Relaxed);
        self.bytes[i].fetch_add(bytes, Relaxed);
    }

    /// Operations seen so far, busiest (by total time) first.
    pub fn snapshot(&self) -> Vec<OpProfile> {
        let mut v: Vec<OpProfile> = (0..OPS.len())
            .filter(|&i| self.count[i].load(Relaxed) > 0)
            .map(|i| {
                let c = self.count[i].load(Relaxed);
                let ns = self.ns[i].load(Relaxed);
                OpProfile {
                    op: OPS[i],
                    count: c,
                    total_us: ns / 1000,
                    mean_us: ns as f64 / 1000.0 / c as f64,
                    max_us: self.max_ns[i].load(Relaxed) / 1000,
                    bytes: self.bytes[i].load(Relaxed),
                }
            })
            .collect();
        v.sort_by_key(|p| std::cmp::Reverse(p.total_us));
        v
    }

    /// A table for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "  {:<11} {:>11} {:>12} {:>10} {:>10} {:>12}",
            "FUSE op", "count", "total ms", "mean µs", "max µs", "MiB"
        );
        for p in self.snapshot() {
            let _ = writeln!(
                s,
                "  {:<11} {:>11} {:>12.1} {:>10.1} {:>10} {:>12.1}",
                p.op,
                p.count,
                p.total_us as f64 / 1000.0,
                p.mean_us,
                p.max_us,
                p.bytes as f64 / (1 << 20) as f64
            );
        }
        s
    }
}

/// The filesystem served to the kernel.
pub struct MasseFs {
    vfs: Arc<Vfs>,
    opts: MountOptions,
    prof: Arc<Profile>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
}

fn errno(e: &VfsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn fattr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.to_system(),
        mtime: a.mtime.to_system(),
        ctime: a.ctime.to_system(),
        crtime: a.ctime.to_system(),
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: a.blksize,
        flags: 0,
    }
}

fn time_of(t: TimeOrNow) -> Time {
    match t {
        TimeOrNow::SpecificTime(s) => Time::from_system(s),
        TimeOrNow::Now => Time::now(),
    }
}

impl MasseFs {
    /// Serve `vfs`.
    pub fn new(vfs: Arc<Vfs>, opts: MountOptions) -> MasseFs {
        MasseFs {
            vfs,
            opts,
            prof: Arc::new(Profile::default()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The per-operation profile (shared; keep it to print after unmount).
    pub fn profile(&self) -> Arc<Profile> {
        self.prof.clone()
    }

    fn open_flags(&self) -> FopenFlags {
        if self.opts.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// A write by an unprivileged process clears the file's set-user-ID bit,
    /// and its set-group-ID bit when the group may execute it (POSIX; Linux's
    /// `file_remove_privs`). Through the page cache the kernel does this
    /// itself, with a setattr; a direct-I/O write reaches the server without
    /// it, so the server does it here, when the kernel asks
    /// (FUSE_WRITE_KILL_SUIDGID) or, with `direct_io`, for any writer but
    /// root (the kernel negotiates the flag only with killpriv v2, whose
    /// truncate variant fuser's setattr cannot honour).
    fn kill_suid_sgid(&self, ino: u64) -> Result<(), VfsError> {
        let perm = self.vfs.getattr(ino)?.perm;
        let mut clear = libc::S_ISUID;
        if perm & libc::S_IXGRP != 0 {
            clear |= libc::S_ISGID;
        }
        if perm & clear == 0 {
            return Ok(());
        }
        let a = SetAttr {
            perm: Some(perm & !clear & 0o7777),
            ..SetAttr::default()
        };
        self.vfs.setattr(ino, &a).map(|_| ())
    }

    fn entry(&self, r: Result<Attr, VfsError>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&self.opts.attr_ttl, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn empty(r: Result<(), VfsError>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// Mount options for `fuser`.
pub fn fuser_config(o: &MountOptions) -> fuser::Config {
    use fuser::MountOption as M;
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        M::FSName("masse".into()),
        M::Subtype("masse".into()),
        // The kernel checks permissions against the mode bits, as for any local fs.
        M::DefaultPermissions,
        M::RW,
        M::NoAtime,
    ];
    if o.allow_other {
        c.acl = fuser::SessionACL::All;
    }
    c.n_threads = Some(o.threads.max(1));
    c.clone_fd = o.threads > 1;
    c
}

/// Mount `fs` on `dir`. The returned session serves requests when run
/// ([`fuser::Session::run`]) until the file system is unmounted.
pub fn mount(fs: MasseFs, dir: &Path) -> std::io::Result<fuser::Session<MasseFs>> {
    let cfg = fuser_config(&fs.opts);
    fuser::Session::new(fs, dir, &cfg)
}

impl Filesystem for MasseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large writes reach the file layer in one request (1 MiB when the kernel
        // allows it), and directory operations may run in parallel.
        let _ = config.set_max_write(1 << 20);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_MAX_PAGES);
        let _ = config.set_max_readahead(1 << 20);
        // With FOPEN_DIRECT_IO, shared mmap (read-only ones too) is refused
        // unless the kernel may serve it from its page cache beside direct I/O.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounted: everything acknowledged becomes durable before the process
        // closes the pool (the mount command closes it cleanly afterwards).
        let _ = self.vfs.sync_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = Instant::now();
        self.entry(self.vfs.lookup(parent.0, name.as_bytes()), reply);
        self.prof.record(op_index("lookup"), t, 0);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, _nlookup: u64) {
        let t = Instant::now();
        self.vfs.forget(ino.0);
        self.prof.record(op_index("forget"), t, 0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let t = Instant::now();
        match self.vfs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.opts.attr_ttl, &fattr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("getattr"), t, 0);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let t = Instant::now();
        let a = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_of),
            mtime: mtime.map(time_of),
        };
        match self.vfs.setattr(ino.0, &a) {
            Ok(a) => reply.attr(&self.opts.attr_ttl, &fattr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("setattr"), t, 0);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t = Instant::now();
        match self.vfs.readlink(ino.0) {
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("readlink"), t, 0);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Only regular files: devices, FIFOs and sockets are not stored.
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            reply.error(Errno::EPERM);
            return;
        }
        let t = Instant::now();
        let r = self.vfs.create(
            parent.0,
            name.as_bytes(),
            mode & !umask & 0o7777,
            req.uid(),
            req.gid(),
        );
        self.entry(r, reply);
        self.prof.record(op_index("create"), t, 0);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let t = Instant::now();
        let r = self.vfs.mkdir(
            parent.0,
            name.as_bytes(),
            mode & !umask & 0o7777,
            req.uid(),
            req.gid(),
        );
        self.entry(r, reply);
        self.prof.record(op_index("mkdir"), t, 0);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t = Instant::now();
        Self::empty(self.vfs.unlink(parent.0, name.as_bytes()), reply);
        self.prof.record(op_index("unlink"), t, 0);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t = Instant::now();
        Self::empty(self.vfs.rmdir(parent.0, name.as_bytes()), reply);
        self.prof.record(op_index("rmdir"), t, 0);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let t = Instant::now();
        let r = self.vfs.symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            req.uid(),
            req.gid(),
        );
        self.entry(r, reply);
        self.prof.record(op_index("symlink"), t, 0);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let r = self.vfs.rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags.contains(RenameFlags::RENAME_NOREPLACE),
        );
        Self::empty(r, reply);
        self.prof.record(op_index("rename"), t, 0);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let t = Instant::now();
        self.entry(self.vfs.link(ino.0, newparent.0, newname.as_bytes()), reply);
        self.prof.record(op_index("link"), t, 0);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let t = Instant::now();
        match self.vfs.open_file(ino.0) {
            Ok(a) if a.kind == Kind::Dir => {
                let _ = self.vfs.release(ino.0);
                reply.error(Errno::EISDIR)
            }
            Ok(_) => reply.opened(FileHandle(0), self.open_flags()),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("open"), t, 0);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let t = Instant::now();
        let r = self
            .vfs
            .create(
                parent.0,
                name.as_bytes(),
                mode & !umask & 0o7777,
                req.uid(),
                req.gid(),
            )
            .and_then(|a| self.vfs.open_file(a.ino).map(|_| a));
        match r {
            Ok(a) => reply.created(
                &self.opts.attr_ttl,
                &fattr(&a),
                Generation(0),
                FileHandle(0),
                self.open_flags(),
            ),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("create"), t, 0);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let t = Instant::now();
        let n = match self.vfs.read(ino.0, offset, size as usize) {
            Ok(v) => {
                reply.data(&v);
                v.len() as u64
            }
            Err(e) => {
                reply.error(errno(&e));
                0
            }
        };
        self.prof.record(op_index("read"), t, n);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let t = Instant::now();
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            || (self.opts.direct_io && req.uid() != 0);
        if kill {
            if let Err(e) = self.kill_suid_sgid(ino.0) {
                return reply.error(errno(&e));
            }
        }
        // O_APPEND: the file layer appends at its own end of file, under the inode's
        // lock, so concurrent appenders never overwrite each other.
        let r = if flags.0 & libc::O_APPEND != 0 {
            self.vfs.append(ino.0, data).map(|_| data.len())
        } else {
            self.vfs.write(ino.0, offset, data)
        };
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("write"), t, data.len() as u64);
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Sent at every close(2): the file's buffered data is written now, so a
        // full pool or a failed write-back reaches the program at close. The last
        // release would be too late: the kernel drops its errors.
        let t = Instant::now();
        Self::empty(self.vfs.flush(ino.0), reply);
        self.prof.record(op_index("flush"), t, 0);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        // Mode 0 (posix_fallocate): space is taken now or ENOSPC at once. Keeping
        // the size, punching holes, zeroing or collapsing ranges are not offered;
        // EOPNOTSUPP tells callers so without a slow fallback being any wiser.
        if mode != 0 {
            reply.error(Errno::EOPNOTSUPP);
        } else {
            Self::empty(self.vfs.fallocate(ino.0, offset, length), reply);
        }
        self.prof.record(op_index("fallocate"), t, length);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        Self::empty(self.vfs.release(ino.0), reply);
        self.prof.record(op_index("release"), t, 0);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        Self::empty(self.vfs.fsync(ino.0), reply);
        self.prof.record(op_index("fsync"), t, 0);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let t = Instant::now();
        match self.vfs.readdir(ino.0) {
            Ok(list) => {
                let fh = self.next_fh.fetch_add(1, Relaxed);
                self.dirs.lock().insert(fh, Arc::new(list));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno(&e)),
        }
        self.prof.record(op_index("opendir"), t, 0);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let t = Instant::now();
        // The listing is the snapshot taken at opendir; offsets index into it
        // (0 = start, 1 = after ".", 2 = after "..", 2 + i = after entry i).
        let list = self.dirs.lock().get(&fh.0).cloned();
        let Some(list) = list else {
            reply.error(Errno::EBADF);
            return;
        };
        let parent = self
            .vfs
            .lookup(ino.0, b"..")
            .map(|a| a.ino)
            .unwrap_or(ino.0);
        let mut off = offset;
        loop {
            let full = match off {
                0 => reply.add(ino, 1, FileType::Directory, "."),
                1 => reply.add(INodeNo(parent), 2, FileType::Directory, ".."),
                n => match list.get((n - 2) as usize) {
                    Some(e) => reply.add(
                        INodeNo(e.ino),
                        n + 1,
                        file_type(e.kind),
                        OsStr::from_bytes(&e.name),
                    ),
                    None => break,
                },
            };
            if full {
                break;
            }
            off += 1;
        }
        reply.ok();
        self.prof.record(op_index("readdir"), t, 0);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        self.dirs.lock().remove(&fh.0);
        reply.ok();
        self.prof.record(op_index("releasedir"), t, 0);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Namespace changes are durable when they return.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t = Instant::now();
        let s = self.vfs.statfs();
        let bs = s.block_size as u64;
        // Free counts the reserve bands, available does not (as ext4's root
        // reserve): df's Avail is what writes can still take.
        reply.statfs(
            s.total_bytes / bs,
            s.free_bytes / bs,
            s.avail_bytes / bs,
            s.inodes_used,
            u32::MAX as u64,
            s.block_size,
            masse::vfile::MAX_NAME_LEN as u32,
            s.block_size,
        );
        self.prof.record(op_index("statfs"), t, 0);
    }
}
