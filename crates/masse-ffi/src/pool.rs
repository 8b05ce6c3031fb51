//! Pools: open/create/close, and the options that name their devices.

use crate::error::*;
use masse::vfile::{Vfs, VfsOptions};
use masse::{Db, DeviceSpec, Options, PoolConfig};
use parking_lot::{Mutex, RwLock};
use std::collections::HashSet;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// `masse_pool_options.create`: open an existing pool; fail if there is none.
pub const MASSE_OPEN_EXISTING: u32 = 0;
/// Format new devices; fail if any already holds a pool (never overwrites).
pub const MASSE_CREATE_NEW: u32 = 1;
/// Create the pool when none of its device files exists yet, open it otherwise.
pub const MASSE_OPEN_OR_CREATE: u32 = 2;

/// Where a pool lives and how to open it. Fill it with
/// `masse_pool_options_init` first, then set the fields you need: later
/// versions may add fields at the end, and `struct_size` tells them apart.
#[repr(C)]
pub struct masse_pool_options {
    /// `sizeof(masse_pool_options)`, set by `masse_pool_options_init`.
    pub struct_size: usize,
    /// Fast-tier (SCM-class write pad) device path; NULL for a pool without one.
    pub fast: *const c_char,
    /// Capacity-tier device paths (1 to 16).
    pub capacity: *const *const c_char,
    /// Number of entries in `capacity`.
    pub capacity_count: usize,
    /// Size of the fast-tier file to make when it does not exist (0: it must exist).
    pub fast_size: u64,
    /// Size of each capacity file to make when it does not exist (0: it must exist).
    pub capacity_size: u64,
    /// `MASSE_OPEN_EXISTING`, `MASSE_CREATE_NEW` or `MASSE_OPEN_OR_CREATE`.
    pub create: u32,
    /// Chunk size of file data, used when the pool gets its file layer (first
    /// file call on a pool without one): a power of two, 4096 to 1048576.
    /// 0: 16 KiB.
    pub chunk_size: u32,
    /// File data not fsynced is made durable after this many milliseconds
    /// anyway; 0: only at fsync, close, the buffer limits and pool close.
    pub writeback_ms: u32,
    /// Expected number of keys (pre-sizes the index; 0: grow as needed).
    pub expected_keys: u64,
}

/// An open pool. Every call on it is thread-safe.
pub struct masse_pool {
    pub(crate) sh: Arc<Shared>,
}

pub(crate) struct Shared {
    pub db: Arc<Db>,
    vfs_opts: VfsOptions,
    vfs: RwLock<Option<Arc<Vfs>>>,
    /// Files, iterators and locks still open: a pool closes only without them.
    pub handles: AtomicUsize,
    /// Inodes locked with `masse_lock`.
    pub locks: Mutex<HashSet<u64>>,
}

impl Shared {
    /// The file layer, opened (and on a pool without one, created) on first use.
    pub fn vfs(&self) -> R<Arc<Vfs>> {
        if let Some(v) = self.vfs.read().as_ref() {
            return Ok(v.clone());
        }
        let mut w = self.vfs.write();
        if let Some(v) = w.as_ref() {
            return Ok(v.clone());
        }
        let v = Arc::new(Vfs::open(self.db.clone(), self.vfs_opts.clone())?);
        *w = Some(v.clone());
        Ok(v)
    }
}

pub(crate) fn cstr<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return Err(fail(MASSE_INVALID, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string that outlives the call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail(MASSE_INVALID, format!("{what} is not UTF-8")))
}

/// Fill `o` with the defaults: no devices, `MASSE_OPEN_EXISTING`, 16 KiB chunks,
/// 5 s write-back.
///
/// # Safety
/// `o` points to writable memory for one `masse_pool_options`.
#[no_mangle]
pub unsafe extern "C" fn masse_pool_options_init(o: *mut masse_pool_options) {
    if o.is_null() {
        return;
    }
    o.write(masse_pool_options {
        struct_size: std::mem::size_of::<masse_pool_options>(),
        fast: std::ptr::null(),
        capacity: std::ptr::null(),
        capacity_count: 0,
        fast_size: 0,
        capacity_size: 0,
        create: MASSE_OPEN_EXISTING,
        chunk_size: 0,
        writeback_ms: 5000,
        expected_keys: 0,
    });
}

/// The pool configuration, create mode and file-layer options the C options name.
pub(crate) struct Plan {
    pub cfg: PoolConfig,
    pub paths: Vec<String>,
    pub create: u32,
    pub opts: Options,
    pub vfs: VfsOptions,
}

impl Plan {
    pub fn new(
        fast: Option<&str>,
        caps: &[&str],
        sizes: (u64, u64),
        chunk: u32,
        wb_ms: u32,
    ) -> R<Plan> {
        if caps.is_empty() || caps.len() > 16 {
            return Err(fail(
                MASSE_INVALID,
                format!("a pool has 1 to 16 capacity devices, not {}", caps.len()),
            ));
        }
        let spec = |p: &str, size: u64| match size {
            0 => DeviceSpec::path(p),
            s => DeviceSpec::file(p, s),
        };
        let cfg = PoolConfig {
            fast: fast.map(|f| spec(f, sizes.0)),
            capacity: caps.iter().map(|c| spec(c, sizes.1)).collect(),
            ..Default::default()
        };
        let mut paths: Vec<String> = caps.iter().map(|c| c.to_string()).collect();
        paths.extend(fast.map(str::to_string));
        let vfs = VfsOptions {
            chunk_size: if chunk == 0 { 16 << 10 } else { chunk },
            writeback_interval: (wb_ms > 0).then(|| Duration::from_millis(wb_ms as u64)),
            // SAFETY: plain libc calls with no arguments.
            root_owner: unsafe { (libc::geteuid(), libc::getegid()) },
            ..Default::default()
        };
        Ok(Plan {
            cfg,
            paths,
            create: MASSE_OPEN_EXISTING,
            opts: Options::default(),
            vfs,
        })
    }

    fn from_c(o: &masse_pool_options) -> R<Plan> {
        if o.struct_size != std::mem::size_of::<masse_pool_options>() {
            return Err(fail(
                MASSE_INVALID,
                "masse_pool_options.struct_size is wrong: fill the options with masse_pool_options_init",
            ));
        }
        let fast = if o.fast.is_null() {
            None
        } else {
            Some(cstr(o.fast, "options.fast")?)
        };
        if o.capacity.is_null() && o.capacity_count > 0 {
            return Err(fail(MASSE_INVALID, "options.capacity is NULL"));
        }
        let mut caps = Vec::with_capacity(o.capacity_count);
        for i in 0..o.capacity_count {
            // SAFETY: the caller's array holds `capacity_count` pointers.
            caps.push(cstr(unsafe { *o.capacity.add(i) }, "options.capacity[i]")?);
        }
        let mut p = Plan::new(
            fast,
            &caps,
            (o.fast_size, o.capacity_size),
            o.chunk_size,
            o.writeback_ms,
        )?;
        p.create = o.create;
        p.opts.expected_keys = o.expected_keys as usize;
        Ok(p)
    }

    pub fn open(self) -> R<*mut masse_pool> {
        let create = match self.create {
            MASSE_OPEN_EXISTING => false,
            MASSE_CREATE_NEW => true,
            // Only when no device file exists yet: a file that exists may hold
            // someone's data, and formatting is never a fallback of an open.
            MASSE_OPEN_OR_CREATE => self.paths.iter().all(|p| !std::path::Path::new(p).exists()),
            c => {
                return Err(fail(
                    MASSE_INVALID,
                    format!("options.create is {c}, not 0, 1 or 2"),
                ))
            }
        };
        let db = if create {
            Db::create(&self.cfg, self.opts)?
        } else {
            Db::open(&self.cfg, self.opts)?
        };
        let sh = Arc::new(Shared {
            db: Arc::new(db),
            vfs_opts: self.vfs,
            vfs: RwLock::new(None),
            handles: AtomicUsize::new(0),
            locks: Mutex::new(HashSet::new()),
        });
        Ok(Box::into_raw(Box::new(masse_pool { sh })))
    }
}

pub(crate) fn out_ptr<T>(out: *mut *mut T) -> R<()> {
    if out.is_null() {
        return Err(fail(MASSE_INVALID, "the output pointer is NULL"));
    }
    Ok(())
}

/// Open (or, as `o->create` says, create) the pool on the devices `o` names and
/// store its handle in `*out`.
///
/// # Safety
/// `o` is NULL or initialised by `masse_pool_options_init`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn masse_pool_open(
    o: *const masse_pool_options,
    out: *mut *mut masse_pool,
) -> masse_status {
    guard(|| {
        out_ptr(out)?;
        let o = o
            .as_ref()
            .ok_or_else(|| fail(MASSE_INVALID, "options are NULL"))?;
        *out = Plan::from_c(o)?.open()?;
        Ok(())
    })
}

/// Open a pool described by a text spec: comma-separated `key=value` pairs,
/// `fast=PATH`, `capacity=PATH` (repeatable), `fast_size=SIZE`,
/// `capacity_size=SIZE` (with K/M/G/T suffixes), `create=no|yes|if_missing`,
/// `chunk_size=SIZE`, `writeback_ms=N`, `expected_keys=N`. Example:
/// `fast=/dev/shm/f,capacity=/var/tmp/c,fast_size=1G,capacity_size=16G,create=if_missing`.
///
/// # Safety
/// `spec` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn masse_pool_open_spec(
    spec: *const c_char,
    out: *mut *mut masse_pool,
) -> masse_status {
    guard(|| {
        out_ptr(out)?;
        let s = cstr(spec, "spec")?;
        *out = crate::spec::parse(s)?.open()?;
        Ok(())
    })
}

/// Close the pool: make buffered file data durable, write a checkpoint, release
/// the devices, and free `pool`. Fails with `MASSE_BUSY`, leaving the pool
/// open, while files, iterators or locks of it are still open. Do not call it
/// while another thread is inside a call on the same pool.
///
/// # Safety
/// `pool` is NULL or a handle from `masse_pool_open*` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn masse_pool_close(pool: *mut masse_pool) -> masse_status {
    guard(|| {
        if pool.is_null() {
            return Ok(());
        }
        let n = (&*pool).sh.handles.load(SeqCst);
        if n > 0 {
            return Err(fail(
                MASSE_BUSY,
                format!("{n} files, iterators or locks of this pool are still open"),
            ));
        }
        let p = Box::from_raw(pool);
        let vfs = p.sh.vfs.write().take();
        let mut first_err: Option<Fail> = None;
        if let Some(v) = vfs {
            if let Err(e) = v.close() {
                first_err = Some(e.into());
            }
            drop(v);
        }
        let sh = Arc::try_unwrap(p.sh)
            .map_err(|_| fail(MASSE_BUSY, "the pool is in use by another call"))?;
        let db = Arc::try_unwrap(sh.db)
            .map_err(|_| fail(MASSE_BUSY, "the pool is in use by another call"))?;
        db.close()?;
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// Make every file's buffered data durable (as `sync(2)` for this pool).
///
/// # Safety
/// `pool` is a handle from `masse_pool_open*`.
#[no_mangle]
pub unsafe extern "C" fn masse_pool_sync(pool: *const masse_pool) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        if let Some(v) = p.sh.vfs.read().as_ref() {
            v.sync_all()?;
        }
        Ok(())
    })
}

pub(crate) fn pool_ref<'a>(p: *const masse_pool) -> R<&'a masse_pool> {
    // SAFETY: the caller passes a live handle (or NULL, refused here).
    unsafe { p.as_ref() }.ok_or_else(|| fail(MASSE_INVALID, "pool is NULL"))
}
