//! vFile calls: files and directories by path, for programs that need a file
//! system (the RocksDB plugin). Paths are absolute within the pool's file layer
//! (`/db/000012.sst`; a missing leading `/` means the same).

use crate::error::*;
use crate::kv::bytes;
use crate::pool::{cstr, masse_pool, out_ptr, pool_ref, Shared};
use masse::vfile::{Attr, Kind, SetAttr, Vfs, ROOT_INO};
use std::ffi::c_char;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// Create the file if it does not exist.
pub const MASSE_O_CREATE: u32 = 1;
/// With `MASSE_O_CREATE`: fail with `MASSE_EXISTS` if it exists.
pub const MASSE_O_EXCL: u32 = 2;
/// Truncate the file to 0 bytes at open.
pub const MASSE_O_TRUNC: u32 = 4;

/// Kind of an inode in `masse_attr`.
pub const MASSE_KIND_FILE: u32 = 1;
/// A directory.
pub const MASSE_KIND_DIR: u32 = 2;
/// A symbolic link.
pub const MASSE_KIND_SYMLINK: u32 = 3;

/// What `stat` tells about a file or directory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct masse_attr {
    /// Inode number.
    pub ino: u64,
    /// `MASSE_KIND_FILE`, `MASSE_KIND_DIR` or `MASSE_KIND_SYMLINK`.
    pub kind: u32,
    /// Permission bits.
    pub perm: u32,
    /// Size in bytes (a directory: its number of entries).
    pub size: u64,
    /// Hard links.
    pub nlink: u32,
    /// Preferred I/O size: the file layer's chunk size.
    pub blksize: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

fn stat_of(a: &Attr) -> masse_attr {
    let t = a
        .mtime
        .to_system()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    masse_attr {
        ino: a.ino,
        kind: match a.kind {
            Kind::File => MASSE_KIND_FILE,
            Kind::Dir => MASSE_KIND_DIR,
            Kind::Symlink => MASSE_KIND_SYMLINK,
        },
        perm: a.perm,
        size: a.size,
        nlink: a.nlink,
        blksize: a.blksize,
        mtime_sec: t.as_secs() as i64,
        mtime_nsec: t.subsec_nanos(),
        uid: a.uid,
        gid: a.gid,
    }
}

/// The components of `path`, `.` and empty ones dropped.
fn parts(path: &str) -> impl Iterator<Item = &[u8]> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::as_bytes)
}

/// The inode `path` names.
fn resolve(vfs: &Vfs, path: &str) -> R<u64> {
    let mut ino = ROOT_INO;
    for c in parts(path) {
        ino = vfs.lookup(ino, c)?.ino;
    }
    Ok(ino)
}

/// The directory holding `path`'s last component, and that component.
fn parent_of<'p>(vfs: &Vfs, path: &'p str) -> R<(u64, &'p [u8])> {
    let comps: Vec<&[u8]> = parts(path).collect();
    let (name, dirs) = comps.split_last().ok_or_else(|| {
        fail(
            MASSE_INVALID,
            format!("`{path}` names the root, not an entry"),
        )
    })?;
    if *name == b".." {
        return Err(fail(MASSE_INVALID, format!("`{path}` ends in `..`")));
    }
    let mut ino = ROOT_INO;
    for c in dirs {
        ino = vfs.lookup(ino, c)?.ino;
    }
    Ok((ino, name))
}

fn ids() -> (u32, u32) {
    // SAFETY: plain libc calls with no arguments.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Run `f` on the pool's file layer and a path argument.
fn with_path(
    pool: *const masse_pool,
    path: *const c_char,
    f: impl FnOnce(&Arc<Shared>, &Arc<Vfs>, &str) -> R<()>,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        let path = cstr(path, "path")?;
        let vfs = p.sh.vfs()?;
        f(&p.sh, &vfs, path)
    })
}

/// An open file. Reads, writes and syncs on one handle may come from several
/// threads at once; `masse_file_close` must be the last call on it.
pub struct masse_file {
    vfs: Arc<Vfs>,
    pool: Arc<Shared>,
    ino: u64,
}

fn file_ref<'a>(f: *const masse_file) -> R<&'a masse_file> {
    // SAFETY: the caller passes a live handle (or NULL, refused here).
    unsafe { f.as_ref() }.ok_or_else(|| fail(MASSE_INVALID, "file is NULL"))
}

/// Open the regular file `path`; `flags` is a sum of `MASSE_O_*`, `mode` the
/// permission bits of a file it creates. Close it with `masse_file_close`.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn masse_file_open(
    pool: *const masse_pool,
    path: *const c_char,
    flags: u32,
    mode: u32,
    out: *mut *mut masse_file,
) -> masse_status {
    with_path(pool, path, |sh, vfs, path| {
        out_ptr(out)?;
        let (dir, name) = parent_of(vfs, path)?;
        let (uid, gid) = ids();
        let attr = match vfs.lookup(dir, name) {
            Ok(a) if flags & MASSE_O_CREATE != 0 && flags & MASSE_O_EXCL != 0 => {
                return Err(fail(
                    MASSE_EXISTS,
                    format!("{path} exists (inode {})", a.ino),
                ))
            }
            Ok(a) => a,
            Err(masse::vfile::VfsError::NotFound) if flags & MASSE_O_CREATE != 0 => {
                match vfs.create(dir, name, mode & 0o7777, uid, gid) {
                    // Another thread created it first: open theirs (unless EXCL).
                    Err(masse::vfile::VfsError::Exists) if flags & MASSE_O_EXCL == 0 => {
                        vfs.lookup(dir, name)?
                    }
                    r => r?,
                }
            }
            Err(e) => return Err(e.into()),
        };
        match attr.kind {
            Kind::File => {}
            Kind::Dir => return Err(fail(MASSE_IS_DIR, format!("{path} is a directory"))),
            Kind::Symlink => return Err(fail(MASSE_INVALID, format!("{path} is a symlink"))),
        }
        vfs.open_file(attr.ino)?;
        let f = masse_file {
            vfs: vfs.clone(),
            pool: sh.clone(),
            ino: attr.ino,
        };
        if flags & MASSE_O_TRUNC != 0 && attr.size > 0 {
            let t = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            if let Err(e) = vfs.setattr(attr.ino, &t) {
                let _ = vfs.release(attr.ino);
                return Err(e.into());
            }
        }
        sh.handles.fetch_add(1, SeqCst);
        *out = Box::into_raw(Box::new(f));
        Ok(())
    })
}

/// Read up to `len` bytes at `off` into `buf`; `*nread` is how many (short only
/// at the end of the file; holes read as zeros).
///
/// # Safety
/// `f` is an open file; `buf` has room for `len` bytes; `nread` is writable.
#[no_mangle]
pub unsafe extern "C" fn masse_file_pread(
    f: *const masse_file,
    buf: *mut u8,
    len: usize,
    off: u64,
    nread: *mut usize,
) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        if nread.is_null() || (buf.is_null() && len > 0) {
            return Err(fail(MASSE_INVALID, "buf or nread is NULL"));
        }
        let dst = if len == 0 {
            &mut [][..]
        } else {
            std::slice::from_raw_parts_mut(buf, len)
        };
        *nread = f.vfs.read_into(f.ino, off, dst)?;
        Ok(())
    })
}

/// One read of `masse_file_read_many`.
#[repr(C)]
pub struct masse_read_req {
    /// File offset.
    pub offset: u64,
    /// Bytes wanted.
    pub len: usize,
    /// Where they go (room for `len` bytes).
    pub buf: *mut u8,
    /// Out: bytes read (short only at the end of the file).
    pub result: usize,
    /// Out: this read's status.
    pub status: masse_status,
}

/// Several reads of one file, their device reads issued together (RocksDB's
/// MultiRead). All or nothing: on success every request has its `result` and
/// `status` `MASSE_OK`; on failure every `status` is the call's status.
///
/// # Safety
/// `f` is an open file; `reqs` holds `n` requests, each `buf` with room for `len`.
#[no_mangle]
pub unsafe extern "C" fn masse_file_read_many(
    f: *const masse_file,
    reqs: *mut masse_read_req,
    n: usize,
) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        if n == 0 {
            return Ok(());
        }
        if reqs.is_null() {
            return Err(fail(MASSE_INVALID, "reqs is NULL"));
        }
        let reqs = std::slice::from_raw_parts_mut(reqs, n);
        let mut bufs: Vec<(u64, &mut [u8])> = Vec::with_capacity(n);
        for r in reqs.iter() {
            if r.buf.is_null() && r.len > 0 {
                return Err(fail(MASSE_INVALID, "a request's buf is NULL"));
            }
            let b = if r.len == 0 {
                &mut [][..]
            } else {
                std::slice::from_raw_parts_mut(r.buf, r.len)
            };
            bufs.push((r.offset, b));
        }
        match f.vfs.read_many_into(f.ino, &mut bufs) {
            Ok(got) => {
                for (r, n) in reqs.iter_mut().zip(got) {
                    r.result = n;
                    r.status = MASSE_OK;
                }
                Ok(())
            }
            Err(e) => {
                let e = Fail::from(e);
                for r in reqs.iter_mut() {
                    r.result = 0;
                    r.status = e.status;
                }
                Err(e)
            }
        }
    })
}

/// Write `len` bytes at `off`, growing the file as needed. Buffered: durable at
/// `masse_file_sync`/`masse_file_datasync`, at the last close, or after the
/// pool's write-back interval.
///
/// # Safety
/// `f` is an open file; `buf` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn masse_file_pwrite(
    f: *const masse_file,
    buf: *const u8,
    len: usize,
    off: u64,
) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        f.vfs.write(f.ino, off, bytes(buf, len, "buf")?)?;
        Ok(())
    })
}

/// Write `len` bytes at the end of the file (atomically with respect to other
/// appends); `*offset`, if not NULL, is where they went.
///
/// # Safety
/// `f` is an open file; `buf` points to `len` bytes; `offset` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn masse_file_append(
    f: *const masse_file,
    buf: *const u8,
    len: usize,
    offset: *mut u64,
) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        let at = f.vfs.append(f.ino, bytes(buf, len, "buf")?)?;
        if !offset.is_null() {
            *offset = at;
        }
        Ok(())
    })
}

/// Make the file's data and attributes durable (fsync).
///
/// # Safety
/// `f` is an open file.
#[no_mangle]
pub unsafe extern "C" fn masse_file_sync(f: *const masse_file) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        f.vfs.fsync(f.ino)?;
        Ok(())
    })
}

/// Make the file's data durable (fdatasync). The file layer writes a file's
/// size with its data in one atomic batch, so this costs what `masse_file_sync`
/// costs.
///
/// # Safety
/// `f` is an open file.
#[no_mangle]
pub unsafe extern "C" fn masse_file_datasync(f: *const masse_file) -> masse_status {
    masse_file_sync(f)
}

/// Set the file's size: shrinking is durable on return, growing adds a hole.
///
/// # Safety
/// `f` is an open file.
#[no_mangle]
pub unsafe extern "C" fn masse_file_truncate(f: *const masse_file, size: u64) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        let t = SetAttr {
            size: Some(size),
            ..Default::default()
        };
        f.vfs.setattr(f.ino, &t)?;
        Ok(())
    })
}

/// Attributes of an open file.
///
/// # Safety
/// `f` is an open file; `st` is writable.
#[no_mangle]
pub unsafe extern "C" fn masse_file_stat(
    f: *const masse_file,
    st: *mut masse_attr,
) -> masse_status {
    guard(|| {
        let f = file_ref(f)?;
        let st = st
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "st is NULL"))?;
        *st = stat_of(&f.vfs.getattr(f.ino)?);
        Ok(())
    })
}

/// Close the file (its buffered data is written out at the last close of it)
/// and free the handle, even when the write-out fails (that is the status).
///
/// # Safety
/// `f` is NULL or an open file; no other call on it runs or follows.
#[no_mangle]
pub unsafe extern "C" fn masse_file_close(f: *mut masse_file) -> masse_status {
    guard(|| {
        if f.is_null() {
            return Ok(());
        }
        let f = Box::from_raw(f);
        let r = f.vfs.release(f.ino);
        f.pool.handles.fetch_sub(1, SeqCst);
        r?;
        Ok(())
    })
}

/// Attributes of `path`.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string; `st` writable.
#[no_mangle]
pub unsafe extern "C" fn masse_stat(
    pool: *const masse_pool,
    path: *const c_char,
    st: *mut masse_attr,
) -> masse_status {
    with_path(pool, path, |_, vfs, path| {
        let st = st
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "st is NULL"))?;
        *st = stat_of(&vfs.getattr(resolve(vfs, path)?)?);
        Ok(())
    })
}

/// Create the directory `path` (its parent must exist), durably.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn masse_mkdir(
    pool: *const masse_pool,
    path: *const c_char,
    mode: u32,
) -> masse_status {
    with_path(pool, path, |_, vfs, path| {
        let (dir, name) = parent_of(vfs, path)?;
        let (uid, gid) = ids();
        vfs.mkdir(dir, name, mode & 0o7777, uid, gid)?;
        Ok(())
    })
}

/// Remove the empty directory `path`, durably.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn masse_rmdir(pool: *const masse_pool, path: *const c_char) -> masse_status {
    with_path(pool, path, |_, vfs, path| {
        let (dir, name) = parent_of(vfs, path)?;
        vfs.rmdir(dir, name)?;
        Ok(())
    })
}

/// Remove the name `path` (not a directory), durably. An open file stays
/// readable through its handles until they close.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn masse_unlink(
    pool: *const masse_pool,
    path: *const c_char,
) -> masse_status {
    with_path(pool, path, |_, vfs, path| {
        let (dir, name) = parent_of(vfs, path)?;
        vfs.unlink(dir, name)?;
        Ok(())
    })
}

/// Rename `from` to `to` atomically and durably, replacing a file at `to`.
///
/// # Safety
/// `pool` is an open pool; `from`, `to` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn masse_rename(
    pool: *const masse_pool,
    from: *const c_char,
    to: *const c_char,
) -> masse_status {
    with_path(pool, from, |_, vfs, from| {
        let to = cstr(to, "to")?;
        let (d1, n1) = parent_of(vfs, from)?;
        let (d2, n2) = parent_of(vfs, to)?;
        vfs.rename(d1, n1, d2, n2, false)?;
        Ok(())
    })
}

/// Add the hard link `to` to the file `from`, durably.
///
/// # Safety
/// `pool` is an open pool; `from`, `to` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn masse_link(
    pool: *const masse_pool,
    from: *const c_char,
    to: *const c_char,
) -> masse_status {
    with_path(pool, from, |_, vfs, from| {
        let to = cstr(to, "to")?;
        let ino = resolve(vfs, from)?;
        let (d2, n2) = parent_of(vfs, to)?;
        vfs.link(ino, d2, n2)?;
        Ok(())
    })
}

/// One entry of a directory listing.
#[repr(C)]
pub struct masse_dirent {
    /// The name, NUL-terminated.
    pub name: *mut c_char,
    /// Inode number.
    pub ino: u64,
    /// `MASSE_KIND_*`.
    pub kind: u32,
}

/// The entries of directory `path` (without `.` and `..`), as an array of
/// `*count` entries; free it with `masse_list_free`.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string; `entries`, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn masse_list(
    pool: *const masse_pool,
    path: *const c_char,
    entries: *mut *mut masse_dirent,
    count: *mut usize,
) -> masse_status {
    with_path(pool, path, |_, vfs, path| {
        out_ptr(entries)?;
        if count.is_null() {
            return Err(fail(MASSE_INVALID, "count is NULL"));
        }
        let list = vfs.readdir(resolve(vfs, path)?)?;
        let mut v: Vec<masse_dirent> = Vec::with_capacity(list.len());
        for e in list {
            // Names never hold NUL (the file layer refuses them).
            let name = std::ffi::CString::new(e.name).unwrap_or_default();
            v.push(masse_dirent {
                name: name.into_raw(),
                ino: e.ino,
                kind: match e.kind {
                    Kind::File => MASSE_KIND_FILE,
                    Kind::Dir => MASSE_KIND_DIR,
                    Kind::Symlink => MASSE_KIND_SYMLINK,
                },
            });
        }
        *count = v.len();
        *entries = Box::into_raw(v.into_boxed_slice()) as *mut masse_dirent;
        Ok(())
    })
}

/// Free a listing from `masse_list`.
///
/// # Safety
/// `entries`/`count` are exactly what `masse_list` returned (or NULL).
#[no_mangle]
pub unsafe extern "C" fn masse_list_free(entries: *mut masse_dirent, count: usize) {
    if entries.is_null() {
        return;
    }
    let v = Box::from_raw(std::ptr::slice_from_raw_parts_mut(entries, count));
    for e in v.iter() {
        if !e.name.is_null() {
            drop(std::ffi::CString::from_raw(e.name));
        }
    }
}

/// A lock taken with `masse_lock`.
pub struct masse_file_lock {
    pool: Arc<Shared>,
    ino: u64,
}

/// Lock `path` for this process (creating the file if needed), as RocksDB locks
/// its `LOCK` file: `MASSE_BUSY` while someone holds it. A pool is open in one
/// process at a time, so the lock is held within the pool, by inode.
///
/// # Safety
/// `pool` is an open pool; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn masse_lock(
    pool: *const masse_pool,
    path: *const c_char,
    out: *mut *mut masse_file_lock,
) -> masse_status {
    with_path(pool, path, |sh, vfs, path| {
        out_ptr(out)?;
        let (dir, name) = parent_of(vfs, path)?;
        let (uid, gid) = ids();
        let ino = match vfs.lookup(dir, name) {
            Ok(a) => a.ino,
            Err(masse::vfile::VfsError::NotFound) => match vfs.create(dir, name, 0o644, uid, gid) {
                Err(masse::vfile::VfsError::Exists) => vfs.lookup(dir, name)?.ino,
                r => r?.ino,
            },
            Err(e) => return Err(e.into()),
        };
        if !sh.locks.lock().insert(ino) {
            return Err(fail(MASSE_BUSY, format!("{path} is locked")));
        }
        sh.handles.fetch_add(1, SeqCst);
        *out = Box::into_raw(Box::new(masse_file_lock {
            pool: sh.clone(),
            ino,
        }));
        Ok(())
    })
}

/// Release a lock and free it (NULL is fine).
///
/// # Safety
/// `l` is NULL or a lock from `masse_lock` not yet released.
#[no_mangle]
pub unsafe extern "C" fn masse_unlock(l: *mut masse_file_lock) -> masse_status {
    guard(|| {
        if l.is_null() {
            return Ok(());
        }
        let l = Box::from_raw(l);
        l.pool.locks.lock().remove(&l.ino);
        l.pool.handles.fetch_sub(1, SeqCst);
        Ok(())
    })
}
