//! `masse mount DIR`: serve the pool's file layer through FUSE until unmounted.

use crate::error::{CliError, CliResult};
use crate::metrics::{EngineSlot, Metrics, MetricsArgs};
use crate::pool::{open_pool, size_arg, PoolArgs};
use clap::Args;
use masse::vfile::{Vfs, VfsOptions};
use masse::Options;
use masse_fuse::{MasseFs, MountOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct MountArgs {
    #[command(flatten)]
    pub pool: PoolArgs,

    /// Directory to mount the file system on (must exist).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Threads serving kernel requests (each with its own /dev/fuse descriptor).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub threads: usize,

    /// Bypass the kernel page cache (FOPEN_DIRECT_IO on every open): every read and
    /// write goes to the engine, as in the paper's no-read-cache runs. Shared writable
    /// mmap is then refused by the kernel. Default: off (the kernel caches reads).
    #[arg(long)]
    pub direct_io: bool,

    /// Let users other than the one mounting use the mount (FUSE allow_other; a
    /// non-root user needs `user_allow_other` in /etc/fuse.conf). Default: off.
    #[arg(long)]
    pub allow_other: bool,

    /// Chunk size of file data records, used only when the pool has no file layer
    /// yet (the first mount creates it): a power of two from 4K to 1M. Reads fetch
    /// only the 1 KiB pieces they need whatever the size; an fsync rewrites the
    /// file's partly written tail chunk, so small synced writes (a database WAL)
    /// favour small chunks, large sequential files larger ones. Database files
    /// (RocksDB, SQLite): keep 16K. Default: 16K (docs/vfile.md, "Chunks").
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub chunk_size: Option<u64>,

    /// Seconds after which written data not yet fsynced is made durable anyway
    /// (0: only at fsync, last close, the buffer limits and unmount).
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub writeback_secs: u64,

    /// Inodes kept in memory when neither open nor holding unwritten data (the
    /// least recently used beyond this are dropped and read again when needed), so
    /// the mount's memory stays bounded however many files it sees. Default: 4096.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub cache_inodes: usize,

    /// At unmount, print the time spent per FUSE operation (count, total, mean, max)
    /// and the file layer's and engine's counters.
    #[arg(long)]
    pub stats: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

pub fn run(a: &MountArgs) -> CliResult<i32> {
    if !a.dir.is_dir() {
        return Err(CliError::new(format!(
            "mount point {} is not a directory",
            a.dir.display()
        )));
    }
    if a.threads == 0 || a.threads > 64 {
        return Err(CliError::new("--threads must be between 1 and 64"));
    }
    let chunk_size = match a.chunk_size {
        None => VfsOptions::default().chunk_size,
        Some(c) => u32::try_from(c)
            .ok()
            .filter(|c| c.is_power_of_two() && (4096..=1 << 20).contains(c))
            .ok_or_else(|| {
                CliError::new(format!(
                    "--chunk-size {c} must be a power of two from 4K to 1M"
                ))
            })?,
    };
    // Before the pool starts its threads (see MemoryTrimmer).
    one_arena();
    let db = Arc::new(open_pool(&a.pool, Options::default())?);
    let vopts = VfsOptions {
        chunk_size,
        writeback_interval: (a.writeback_secs > 0).then(|| Duration::from_secs(a.writeback_secs)),
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        root_owner: unsafe { (libc::geteuid(), libc::getegid()) },
        max_cached_inodes: a.cache_inodes.max(16),
        ..Default::default()
    };
    let vfs = match Vfs::open(db.clone(), vopts) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            close_db(db);
            return Err(CliError::new(format!(
                "cannot open the file layer of the pool: {e}"
            )));
        }
    };
    // A user mounting a file layer someone else created (root, typically) can read
    // it but not create files at the top: say so now rather than leave a bare EACCES.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if let Ok(root) = vfs.getattr(masse::vfile::ROOT_INO) {
        if euid != 0 && root.uid != euid && root.perm & 0o002 == 0 {
            eprintln!(
                "masse: note: the file system's root directory belongs to uid {} (mode {:o}), so \
                 uid {euid} cannot create files at its top; its owner can `chown` it on a mount",
                root.uid, root.perm
            );
        }
    }
    let fs = MasseFs::new(
        vfs.clone(),
        MountOptions {
            allow_other: a.allow_other,
            threads: a.threads,
            direct_io: a.direct_io,
            ..Default::default()
        },
    );
    let prof = fs.profile();
    let mut session = match masse_fuse::mount(fs, &a.dir) {
        Ok(s) => s,
        Err(e) => {
            let _ = vfs.close();
            drop(vfs);
            close_db(db);
            return Err(CliError::new(format!(
                "cannot mount on {}: {e} (FUSE needs /dev/fuse; as a non-root user also \
                 fusermount3 from the fuse3 package)",
                a.dir.display()
            )));
        }
    };
    let slot = EngineSlot::new();
    slot.set(db.clone());
    let mut m = Metrics::new();
    m.engine(slot.clone());
    fuse_metrics(&mut m, &prof, &vfs);
    let metrics = crate::metrics::start(&a.metrics, m)?;
    let unmounter = session.unmount_callable();
    let stop_signals = watch_signals(unmounter, a.dir.clone())?;
    println!(
        "masse: mounted on {} (chunk {} KiB, {} threads{}); unmount with `fusermount3 -u {}` \
         or Ctrl-C",
        a.dir.display(),
        vfs.chunk_size() / 1024,
        a.threads,
        if a.direct_io { ", direct I/O" } else { "" },
        a.dir.display()
    );
    let _ = std::io::stdout().flush();
    let t0 = Instant::now();
    let trimmer = MemoryTrimmer::start();
    let served = session.run();
    drop(trimmer);
    stop_signals.close();
    slot.clear();
    drop(metrics);
    let up = t0.elapsed();
    // Unmounted: make everything acknowledged durable and close the pool cleanly.
    let closed = vfs.close();
    if a.stats {
        println!(
            "masse: FUSE handler time per operation over {:.1} s mounted:",
            up.as_secs_f64()
        );
        print!("{}", prof.to_text());
        let s = vfs.stats();
        println!(
            "  file layer: {} chunk reads, {} chunk writes, {} buffer hits, {} write-outs ({:.1} MiB), {} namespace ops",
            s.chunk_reads,
            s.chunk_writes,
            s.buffer_hits,
            s.flushes,
            s.flushed_bytes as f64 / (1 << 20) as f64,
            s.namespace_ops
        );
        let es = db.stats();
        for l in &es.latency {
            println!(
                "  engine {:<6} {:>10} ops  mean {:>8.1} µs  p99 {:>8.1} µs  p99.9 {:>8.1} µs",
                l.op,
                l.count,
                l.mean_ns as f64 / 1000.0,
                l.p99_ns as f64 / 1000.0,
                l.p999_ns as f64 / 1000.0
            );
        }
    }
    drop(vfs);
    let db_closed = match Arc::try_unwrap(db) {
        Ok(db) => db.close().map_err(|e| e.to_string()),
        Err(_) => Err("the pool is still in use".to_string()),
    };
    if let Err(e) = served {
        return Err(CliError::new(format!(
            "FUSE session ended with an error: {e}"
        )));
    }
    closed.map_err(|e| CliError::new(format!("writing buffered data at unmount: {e}")))?;
    db_closed.map_err(|e| CliError::new(format!("closing the pool: {e}")))?;
    println!("masse: unmounted {}; pool closed cleanly", a.dir.display());
    Ok(0)
}

/// Keeps the mount's heap close to what it uses. With one malloc arena per FUSE
/// thread, short-lived buffers interleaved with long-lived inodes left each arena
/// mostly free yet resident: a mount that saw 20 000 small files kept ~60 MB after
/// they were gone (issue 13). So: one arena for the process (set before any
/// thread starts), and every few seconds `malloc_trim`, which returns free pages
/// from the middle of the heap (microseconds when there is nothing to return).
struct MemoryTrimmer(Option<std::sync::mpsc::Sender<()>>);

impl MemoryTrimmer {
    fn start() -> MemoryTrimmer {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("masse-trim".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(2))
                {
                    trim_heap();
                }
            });
        MemoryTrimmer(spawned.ok().map(|_| tx))
    }
}

impl Drop for MemoryTrimmer {
    fn drop(&mut self) {
        // Dropping the sender ends the thread at its next wake-up.
        self.0.take();
    }
}

/// One malloc arena for the whole process (call before starting threads).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_arena() {
    // SAFETY: mallopt has no preconditions; M_ARENA_MAX only caps new arenas.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_arena() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

fn close_db(db: Arc<masse::Db>) {
    if let Ok(db) = Arc::try_unwrap(db) {
        let _ = db.close();
    }
}

/// On SIGINT, SIGTERM or SIGHUP, unmount (which ends `Session::run`). A busy mount
/// is detached lazily: the kernel finishes it when the last file is closed.
fn watch_signals(
    mut unmounter: masse_fuse::fuser::SessionUnmounter,
    dir: PathBuf,
) -> CliResult<signal_hook::iterator::Handle> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut sigs = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| CliError::new(format!("cannot install signal handlers: {e}")))?;
    let handle = sigs.handle();
    std::thread::Builder::new()
        .name("masse-signals".into())
        .spawn(move || {
            if let Some(sig) = sigs.forever().next() {
                eprintln!("masse: signal {sig}: unmounting {}", dir.display());
                if let Err(e) = unmounter.unmount() {
                    eprintln!("masse: unmount failed ({e}); detaching lazily");
                    lazy_unmount(&dir);
                }
            }
        })
        .map_err(|e| CliError::new(format!("cannot start the signal thread: {e}")))?;
    Ok(handle)
}

fn lazy_unmount(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path; umount2 does not keep the pointer.
    let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if r != 0 {
        let _ = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(dir)
            .status();
    }
}

/// The FUSE face's figures: operations, handler time and bytes per operation,
/// and the file layer's own counters.
fn fuse_metrics(m: &mut Metrics, prof: &Arc<masse_fuse::Profile>, vfs: &Arc<Vfs>) {
    let p = prof.clone();
    m.counters(
        "fuse_ops",
        "FUSE requests handled, by operation",
        "op",
        move || {
            p.snapshot()
                .iter()
                .map(|o| (o.op.to_string(), o.count as f64))
                .collect()
        },
    );
    let p = prof.clone();
    m.counters(
        "fuse_op_seconds",
        "Time inside FUSE handlers (file layer + engine + device), by operation",
        "op",
        move || {
            p.snapshot()
                .iter()
                .map(|o| (o.op.to_string(), o.total_us as f64 / 1e6))
                .collect()
        },
    );
    let p = prof.clone();
    m.counters(
        "fuse_op_bytes",
        "Bytes moved by FUSE reads and writes",
        "op",
        move || {
            p.snapshot()
                .iter()
                .filter(|o| o.bytes > 0)
                .map(|o| (o.op.to_string(), o.bytes as f64))
                .collect()
        },
    );
    let v = vfs.clone();
    m.counters(
        "vfile_events",
        "File-layer events by kind",
        "kind",
        move || {
            let s = v.stats();
            vec![
                ("chunk_read".into(), s.chunk_reads as f64),
                ("chunk_write".into(), s.chunk_writes as f64),
                ("buffer_hit".into(), s.buffer_hits as f64),
                ("writeout".into(), s.flushes as f64),
                ("namespace_op".into(), s.namespace_ops as f64),
            ]
        },
    );
    let v = vfs.clone();
    m.gauges(
        "vfile_dirty_bytes",
        "Written file data not yet durable",
        "",
        move || vec![(String::new(), v.stats().dirty_bytes as f64)],
    );
}
