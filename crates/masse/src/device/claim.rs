//! One pool, one process: exclusive claims on devices, and device identity.
//!
//! Two engines on one pool would both bump the epoch from the same value and
//! append at the same positions, losing acknowledged writes. So every device of
//! an open pool is claimed for as long as the pool is open:
//!
//! - a regular file with `flock(LOCK_EX | LOCK_NB)` on the engine's own open
//!   file description (released by the kernel when the process dies, however it
//!   dies);
//! - a raw block device with the same `flock`, and an `O_EXCL` open as well,
//!   the kernel's exclusive claim, which also refuses a device that is mounted
//!   or used by device-mapper, RAID or another `O_EXCL` opener;
//! - an in-process device ([`super::MemDevice`], [`super::SimDevice`]) with an
//!   "in use" flag shared by its clones.
//!
//! A refused claim says who holds the device when that can be known: the pid
//! and command line of the process holding the `flock` (from `/proc/locks`), or
//! the mount point or holder of a block device.
//!
//! [`DeviceId`] names the storage behind a device, whatever path reached it, so
//! one file given twice (once through a symlink) is recognised.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The storage behind a device. Two devices with equal identities are the same
/// storage, whatever paths they were opened from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum DeviceId {
    /// A regular file: the filesystem's device number and the inode number.
    File {
        /// `st_dev` of the file.
        dev: u64,
        /// `st_ino` of the file.
        ino: u64,
    },
    /// A raw block device: its device number (`st_rdev`).
    Block {
        /// `st_rdev` of the device node.
        rdev: u64,
    },
    /// A device living in this process (memory, emulated drive): a number
    /// shared by all clones of one device.
    InProcess(u64),
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            DeviceId::File { dev, ino } => {
                let (ma, mi) = major_minor(dev);
                write!(f, "file with inode {ino} on device {ma}:{mi}")
            }
            DeviceId::Block { rdev } => {
                let (ma, mi) = major_minor(rdev);
                write!(f, "block device {ma}:{mi}")
            }
            DeviceId::InProcess(n) => write!(f, "in-process device #{n}"),
        }
    }
}

impl DeviceId {
    /// A fresh identity for a device living in this process (shared by its
    /// clones; never equal to another device's).
    pub fn unique() -> DeviceId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        DeviceId::InProcess(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// glibc's `major()`/`minor()` decoding of a `dev_t`.
pub(crate) fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    (major, minor)
}

/// An exclusive claim on a device for one open pool; dropping it releases the
/// device. A claim outlives nothing: keep it next to the device it claims.
#[must_use = "the device is released as soon as the claim is dropped"]
pub struct DeviceClaim {
    _held: Option<Box<dyn Send + Sync>>,
}

impl DeviceClaim {
    /// A claim that holds `guard`; the device is released when `guard` drops.
    pub fn new(guard: impl Send + Sync + 'static) -> DeviceClaim {
        DeviceClaim {
            _held: Some(Box::new(guard)),
        }
    }

    /// A claim on a device that cannot be shared (nothing to release).
    pub fn unshared() -> DeviceClaim {
        DeviceClaim { _held: None }
    }
}

impl std::fmt::Debug for DeviceClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceClaim")
    }
}

/// Why a device could not be claimed.
#[derive(Debug)]
pub enum ClaimError {
    /// Another open pool holds the device: another process, or another open
    /// of the pool in this one. `holder` says who, when it can be known.
    Busy {
        /// A noun phrase, e.g. "pid 1234 (masse serve nbd …)" or "a filesystem
        /// mounted at /mnt".
        holder: Option<String>,
    },
    /// The claim itself failed (e.g. the filesystem does not support locks).
    Io(io::Error),
}

// ---------------------------------------------------------------------------
// In-process devices

/// The "in use" flag of an in-process device, shared by its clones.
#[derive(Default)]
pub(crate) struct InUse(Arc<AtomicBool>);

/// Clears the flag when the pool holding it drops.
struct InUseGuard(Arc<AtomicBool>);

impl Drop for InUseGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl InUse {
    pub(crate) fn claim(&self) -> Result<DeviceClaim, ClaimError> {
        if self
            .0
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(ClaimError::Busy {
                holder: Some(format!(
                    "another open pool in this process (pid {})",
                    std::process::id()
                )),
            });
        }
        Ok(DeviceClaim::new(InUseGuard(self.0.clone())))
    }
}

// ---------------------------------------------------------------------------
// Files and block devices

/// Holds the `flock` (through a duplicate of the device's descriptor, so it can
/// be released while the device lives on) and, for a block device, the `O_EXCL`
/// descriptor.
struct FileGuard {
    locked: OwnedFd,
    _exclusive: Option<File>,
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        // The lock belongs to the open file description the device shares; undo
        // it explicitly, closing our duplicate alone would not.
        // SAFETY: plain syscall on a descriptor we own.
        unsafe { libc::flock(self.locked.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn retry_eintr(mut f: impl FnMut() -> libc::c_int) -> io::Result<()> {
    loop {
        if f() == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// How long a claim waits for a lock whose holder has exited. A process
/// killed with I/O in flight (io_uring) keeps its open files, and so its lock
/// or `O_EXCL` claim, until that I/O completes, shortly after it is gone.
const EXITED_HOLDER_GRACE: Duration = Duration::from_secs(3);

/// Claim the file or block device open as `file` (opened from `path`, with
/// identity `id`).
pub(crate) fn claim_file(
    file: &File,
    path: &Path,
    id: DeviceId,
) -> Result<DeviceClaim, ClaimError> {
    let fd = file.as_raw_fd();
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(ClaimError::Io(io::Error::last_os_error()));
    }
    // SAFETY: `dup` is a fresh descriptor owned by nobody else.
    let locked = unsafe { OwnedFd::from_raw_fd(dup) };
    let deadline = Instant::now() + EXITED_HOLDER_GRACE;
    loop {
        // SAFETY: plain syscall on a descriptor we own.
        match retry_eintr(|| unsafe { libc::flock(dup, libc::LOCK_EX | libc::LOCK_NB) }) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                let holder = file
                    .metadata()
                    .ok()
                    .and_then(|m| flock_holder(m.dev(), m.ino()));
                match holder {
                    Some(Holder::Live(h)) => return Err(ClaimError::Busy { holder: Some(h) }),
                    _ if Instant::now() < deadline => std::thread::sleep(RETRY_EVERY),
                    Some(Holder::Exited(pid)) => {
                        return Err(ClaimError::Busy {
                            holder: Some(format!(
                                "pid {pid}, which has exited but whose last I/O has not completed"
                            )),
                        })
                    }
                    None => return Err(ClaimError::Busy { holder: None }),
                }
            }
            Err(e) => {
                return Err(ClaimError::Io(io::Error::new(
                    e.kind(),
                    format!("cannot lock {} (flock): {e}", path.display()),
                )))
            }
        }
    }
    let _exclusive = match id {
        DeviceId::Block { rdev } => Some(open_exclusive(path, rdev, deadline)?),
        _ => None,
    };
    Ok(DeviceClaim::new(FileGuard { locked, _exclusive }))
}

/// Pause between attempts while an exited holder's claim drains.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// The kernel's exclusive claim on a block device: an `O_EXCL` open, refused
/// with `EBUSY` while it is mounted, held by device-mapper/RAID or by another
/// `O_EXCL` opener (retried until `deadline` when no such holder is found: it
/// may be a process that has just exited).
fn open_exclusive(path: &Path, rdev: u64, deadline: Instant) -> Result<File, ClaimError> {
    loop {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
            .open(path);
        let e = match f {
            Ok(f) => {
                return match f.metadata() {
                    Ok(m) if m.rdev() == rdev => Ok(f),
                    Ok(_) => Err(ClaimError::Io(io::Error::other(format!(
                        "{} names another device than the one opened a moment ago",
                        path.display()
                    )))),
                    Err(e) => Err(ClaimError::Io(e)),
                }
            }
            Err(e) => e,
        };
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(ClaimError::Io(io::Error::new(
                e.kind(),
                format!("cannot open {} exclusively (O_EXCL): {e}", path.display()),
            )));
        }
        match block_holder(rdev) {
            Some(h) => return Err(ClaimError::Busy { holder: Some(h) }),
            None if Instant::now() < deadline => std::thread::sleep(RETRY_EVERY),
            None => {
                return Err(ClaimError::Busy {
                    holder: Some("another program that opened it exclusively (O_EXCL)".into()),
                })
            }
        }
    }
}

/// Who holds a block device exclusively, when it can be seen: a mount or a
/// device-mapper/RAID holder. (Another `O_EXCL` opener cannot be seen.)
fn block_holder(rdev: u64) -> Option<String> {
    let (ma, mi) = major_minor(rdev);
    let want = format!("{ma}:{mi}");
    if let Ok(s) = std::fs::read_to_string("/proc/self/mountinfo") {
        // Fields: id parent major:minor root mount-point ...
        for l in s.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 4 && f[2] == want {
                return Some(format!("a filesystem mounted at {}", f[4]));
            }
        }
    }
    let holders: Vec<String> = std::fs::read_dir(format!("/sys/dev/block/{want}/holders"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    (!holders.is_empty()).then(|| format!("the stacked device(s) {}", holders.join(", ")))
}

/// Who holds a `flock`.
enum Holder {
    /// A running process, described as "pid N (command line)".
    Live(String),
    /// A process that has exited: its lock goes once its last I/O completes.
    Exited(u32),
}

/// The process holding a `flock` on the file `(dev, ino)`, from
/// `/proc/locks`. Its device field is the filesystem's internal device
/// number, which some filesystems (btrfs subvolumes, overlayfs) report
/// differently from `stat`; an entry matching only the inode is then
/// confirmed by finding the file among the candidate process's open
/// descriptors.
fn flock_holder(dev: u64, ino: u64) -> Option<Holder> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let (ma, mi) = major_minor(dev);
    let mut candidates = Vec::new();
    for l in locks.lines() {
        let f: Vec<&str> = l.split_whitespace().filter(|t| *t != "->").collect();
        // id: FLOCK ADVISORY WRITE pid maj:min:ino start end
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
            continue;
        }
        let (Ok(pid), Some((lmaj, lmin, lino))) = (f[4].parse::<u32>(), parse_lock_dev(f[5]))
        else {
            continue;
        };
        if lino != ino {
            continue;
        }
        if (lmaj, lmin) == (ma, mi) {
            return Some(if running(pid) {
                Holder::Live(describe_pid(pid))
            } else {
                Holder::Exited(pid)
            });
        }
        candidates.push(pid);
    }
    candidates
        .into_iter()
        .find(|&pid| has_open(pid, dev, ino))
        .map(|pid| Holder::Live(describe_pid(pid)))
}

/// Is `pid` a running process (not gone, not a zombie)?
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')' (comm may hold one).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// `maj:min:ino` of `/proc/locks` (major and minor in hex, inode in decimal).
fn parse_lock_dev(s: &str) -> Option<(u64, u64, u64)> {
    let mut it = s.split(':');
    let ma = u64::from_str_radix(it.next()?, 16).ok()?;
    let mi = u64::from_str_radix(it.next()?, 16).ok()?;
    let ino = it.next()?.parse().ok()?;
    Some((ma, mi, ino))
}

/// Does process `pid` have the file `(dev, ino)` open?
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .any(|m| m.dev() == dev && m.ino() == ino)
}

/// "pid N (its command line)", shortened to a readable length.
fn describe_pid(pid: u32) -> String {
    const MAX: usize = 160;
    if pid == std::process::id() {
        return format!("another open pool in this process (pid {pid})");
    }
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if cmd.is_empty() {
        return format!("pid {pid}");
    }
    let mut cmd = cmd;
    if cmd.chars().count() > MAX {
        cmd = cmd.chars().take(MAX).collect::<String>() + "…";
    }
    format!("pid {pid} ({cmd})")
}

// ---------------------------------------------------------------------------
// Volatile filesystems

/// `statfs` magic of tmpfs (and devtmpfs).
pub(crate) const TMPFS_MAGIC: u32 = 0x0102_1994;
/// `statfs` magic of ramfs.
pub(crate) const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// The filesystem type of the file open as `fd`, by `statfs` magic.
pub(crate) fn fs_magic(fd: i32) -> Option<u32> {
    // SAFETY: statfs is plain old data; fstatfs fills it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    let r = unsafe { libc::fstatfs(fd, &mut s) };
    // f_type is signed on some targets; magics are 32-bit values.
    (r == 0).then_some(s.f_type as u32)
}

/// Whether `path` (or, when it does not exist, its nearest existing ancestor)
/// is on a memory filesystem (tmpfs, ramfs), whose contents do not survive a
/// reboot.
pub fn on_volatile_fs(path: &Path) -> bool {
    let mut p = Some(path);
    while let Some(q) = p {
        if let Ok(f) = File::open(q) {
            return matches!(fs_magic(f.as_raw_fd()), Some(m) if m == TMPFS_MAGIC || m == RAMFS_MAGIC);
        }
        p = q.parent().filter(|d| !d.as_os_str().is_empty());
    }
    false
}

/// The explanation to add when a device of a pool is missing: on a memory
/// filesystem it was most likely lost at a reboot.
pub fn missing_device_note(path: &Path) -> Option<String> {
    on_volatile_fs(path).then(|| {
        format!(
            "{} is on tmpfs/ramfs (memory), whose contents do not survive a reboot or \
             power loss: a fast tier there holds the newest acknowledged writes and the \
             index checkpoints, and without it the pool cannot be opened",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_dev_fields_parse() {
        assert_eq!(parse_lock_dev("fe:00:10010994"), Some((0xfe, 0, 10010994)));
        assert_eq!(parse_lock_dev("00:2a:7"), Some((0, 0x2a, 7)));
        assert_eq!(parse_lock_dev("zz:00:7"), None);
        assert_eq!(parse_lock_dev("fe:00"), None);
    }

    #[test]
    fn major_minor_decoding_matches_libc() {
        for (ma, mi) in [(8u32, 1u32), (254, 0), (259, 1_048_577), (4095, 255)] {
            let dev = libc::makedev(ma, mi);
            assert_eq!(major_minor(dev), (ma as u64, mi as u64));
        }
    }

    /// A second claim on one file is refused and names this process; the
    /// first claim's release lets a third succeed.
    #[test]
    fn file_claims_exclude_each_other_and_name_the_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![0u8; 4096]).expect("write");
        let a = File::open(&path).expect("open");
        let b = File::open(&path).expect("open");
        let m = a.metadata().expect("stat");
        let id = DeviceId::File {
            dev: m.dev(),
            ino: m.ino(),
        };
        let first = claim_file(&a, &path, id).expect("first claim");
        match claim_file(&b, &path, id) {
            Err(ClaimError::Busy { holder }) => {
                let h = holder.expect("the holder is known");
                assert!(h.contains(&format!("pid {}", std::process::id())), "{h}");
            }
            other => panic!("second claim: {other:?}"),
        }
        drop(first);
        let _third = claim_file(&b, &path, id).expect("claim after release");
    }

    #[test]
    fn this_process_runs_and_a_reaped_child_does_not() {
        assert!(running(std::process::id()));
        let mut c = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        assert!(!running(pid));
    }

    #[test]
    fn in_process_claims_exclude_each_other_until_dropped() {
        let u = InUse::default();
        let c = u.claim().expect("first");
        assert!(matches!(u.claim(), Err(ClaimError::Busy { .. })));
        drop(c);
        let _c = u.claim().expect("after release");
    }
}
