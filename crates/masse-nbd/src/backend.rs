//! What an export serves: a masse volume ([`VolumeBackend`]) or a raw device or file
//! opened with `O_DIRECT` ([`RawBackend`], the baseline for comparisons).
//!
//! Separate because the server knows storage only through the [`Backend`] trait:
//! nothing else in the crate depends on masse itself.

use crate::proto::*;
use masse::vblock::{Volume, VolumeError};
use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A failed operation: the NBD error code to send and a message for the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{msg} (NBD error {errno})")]
pub struct BackendError {
    /// One of the `proto::E*` values.
    pub errno: u32,
    /// Human-readable detail (sent in structured error replies).
    pub msg: String,
}

impl BackendError {
    /// An error with code `errno`.
    pub fn new(errno: u32, msg: impl Into<String>) -> BackendError {
        BackendError {
            errno,
            msg: msg.into(),
        }
    }
}

/// Result alias.
pub type BResult<T> = Result<T, BackendError>;

impl From<VolumeError> for BackendError {
    fn from(e: VolumeError) -> BackendError {
        let errno = match &e {
            VolumeError::Engine(masse::Error::NoSpace(_)) => ENOSPC,
            VolumeError::OutOfRange { .. } | VolumeError::Unaligned { .. } => EINVAL,
            _ => EIO,
        };
        BackendError::new(errno, e.to_string())
    }
}

fn io_error(what: &str, e: std::io::Error) -> BackendError {
    let errno = match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => ENOSPC,
        Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EROFS) => EPERM,
        Some(libc::EINVAL) => EINVAL,
        _ => EIO,
    };
    BackendError::new(errno, format!("{what}: {e}"))
}

/// One extent of allocation status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Bytes.
    pub len: u64,
    /// `base:allocation` flags (`STATE_HOLE`, `STATE_ZERO`).
    pub flags: u32,
}

/// The storage behind an export. Offsets and lengths are checked by the server
/// (in bounds, multiples of [`Backend::min_block_size`]) before a call.
pub trait Backend: Send + Sync {
    /// Export size in bytes.
    fn size(&self) -> u64;
    /// Smallest addressable unit: requests are multiples of it.
    fn min_block_size(&self) -> u32;
    /// Size at which I/O is efficient (no read-modify-write).
    fn preferred_block_size(&self) -> u32;
    /// Read `buf.len()` bytes at `offset`. `buf` is 4 KiB-aligned.
    fn read(&self, offset: u64, buf: &mut [u8]) -> BResult<()>;
    /// Write `data` (4 KiB-aligned) at `offset`; persisted before return when `fua`.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> BResult<()>;
    /// Several writes, applied in order (later ones win where they overlap); all
    /// persisted before return when `fua`. Backends that can, do them as one batch.
    fn write_many(&self, writes: &[(u64, &[u8])], fua: bool) -> BResult<()> {
        for (off, d) in writes {
            self.write(*off, d, false)?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }
    /// Persist every write that has returned.
    fn flush(&self) -> BResult<()>;
    /// Discard a range (advisory).
    fn trim(&self, offset: u64, len: u64, fua: bool) -> BResult<()>;
    /// Make a range read as zeros. With `fast`, fail at once with `ENOTSUP` unless
    /// it is cheaper than writing zeros.
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool, fast: bool) -> BResult<()>;
    /// Whether `block_status` gives real information (`base:allocation` is offered).
    fn has_block_status(&self) -> bool;
    /// Allocation status from `offset`: at least one extent, at most `len` bytes.
    fn block_status(&self, offset: u64, len: u64) -> BResult<Vec<Status>>;
    /// One line describing the export (for `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`).
    fn description(&self) -> String;
}

// ---------------------------------------------------------------------------

/// A masse volume. Every write is durable when it returns (the engine acknowledges a
/// put once it is on the fast-tier pad), so FUA costs nothing extra.
pub struct VolumeBackend {
    vol: Volume,
}

impl VolumeBackend {
    /// Serve `vol`.
    pub fn new(vol: Volume) -> VolumeBackend {
        VolumeBackend { vol }
    }
    /// The volume served.
    pub fn volume(&self) -> &Volume {
        &self.vol
    }
}

impl Backend for VolumeBackend {
    fn size(&self) -> u64 {
        self.vol.size()
    }
    fn min_block_size(&self) -> u32 {
        self.vol.block_size()
    }
    fn preferred_block_size(&self) -> u32 {
        self.vol.chunk_size().max(self.vol.block_size())
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> BResult<()> {
        Ok(self.vol.read(offset, buf)?)
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> BResult<()> {
        Ok(self.vol.write(offset, data)?)
    }
    fn write_many(&self, writes: &[(u64, &[u8])], _fua: bool) -> BResult<()> {
        // One engine batch: one group commit for all of them.
        Ok(self.vol.write_many(writes)?)
    }
    fn flush(&self) -> BResult<()> {
        Ok(self.vol.flush()?)
    }
    fn trim(&self, offset: u64, len: u64, _fua: bool) -> BResult<()> {
        Ok(self.vol.trim(offset, len)?)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _fua: bool, fast: bool) -> BResult<()> {
        // Whole chunks are deletes (fast); a partly covered chunk is a read-modify-write.
        if fast && !self.vol.chunk_aligned(offset, len) {
            return Err(BackendError::new(
                ENOTSUP,
                "zeroing a partial chunk is no faster than a write",
            ));
        }
        Ok(self.vol.write_zeroes(offset, len)?)
    }
    fn has_block_status(&self) -> bool {
        true
    }
    fn block_status(&self, offset: u64, len: u64) -> BResult<Vec<Status>> {
        let ext = self.vol.block_status(offset, len)?;
        Ok(ext
            .into_iter()
            .map(|e| Status {
                len: e.len,
                flags: if e.hole { STATE_HOLE | STATE_ZERO } else { 0 },
            })
            .collect())
    }
    fn description(&self) -> String {
        let i = self.vol.info();
        format!(
            "masse volume {:?}: {} bytes, {}-byte blocks, {}-byte chunks",
            i.name, i.size, i.block_size, i.chunk_size
        )
    }
}

// ---------------------------------------------------------------------------

/// A block device or regular file served directly, with `O_DIRECT` where the
/// filesystem allows it: the baseline that masse volumes are compared against.
pub struct RawBackend {
    file: File,
    path: PathBuf,
    size: u64,
    block_size: u32,
    direct: bool,
    is_blockdev: bool,
    read_only: bool,
}

impl RawBackend {
    /// Open `path` (read-only if `read_only`). `block_size` is the smallest request
    /// accepted (512 or 4096); `O_DIRECT` needs the device's logical block size.
    pub fn open(path: &Path, block_size: u32, read_only: bool) -> std::io::Result<RawBackend> {
        let open = |direct: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(!read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            // tmpfs and some filesystems refuse O_DIRECT.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false)?, false),
            Err(e) => return Err(e),
        };
        let md = file.metadata()?;
        let is_blockdev = md.file_type().is_block_device();
        let size = if is_blockdev {
            use std::io::Seek;
            let mut f = &file;
            f.seek(std::io::SeekFrom::End(0))?
        } else {
            md.len()
        };
        let size = size - size % block_size as u64;
        if size == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is empty (smaller than one {block_size}-byte block)",
                    path.display()
                ),
            ));
        }
        Ok(RawBackend {
            file,
            path: path.to_path_buf(),
            size,
            block_size,
            direct,
            is_blockdev,
            read_only,
        })
    }

    /// Whether `O_DIRECT` is in use.
    pub fn direct(&self) -> bool {
        self.direct
    }

    fn fdatasync(&self) -> BResult<()> {
        self.file.sync_data().map_err(|e| io_error("fdatasync", e))
    }

    fn zero_by_writing(&self, offset: u64, len: u64) -> BResult<()> {
        let piece = (1u64 << 20).min(len) as usize;
        let zeros = masse::device::AlignedBuf::new(piece);
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let n = ((end - pos) as usize).min(piece);
            self.file
                .write_all_at(&zeros[..n], pos)
                .map_err(|e| io_error("write", e))?;
            pos += n as u64;
        }
        Ok(())
    }
}

impl Backend for RawBackend {
    fn size(&self) -> u64 {
        self.size
    }
    fn min_block_size(&self) -> u32 {
        self.block_size
    }
    fn preferred_block_size(&self) -> u32 {
        self.block_size.max(4096)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> BResult<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| io_error("read", e))
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> BResult<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| io_error("write", e))?;
        if fua {
            self.fdatasync()?;
        }
        Ok(())
    }
    fn flush(&self) -> BResult<()> {
        if self.read_only {
            return Ok(());
        }
        self.fdatasync()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> BResult<()> {
        // Advisory: a failure to discard is not an error.
        let fd = self.file.as_raw_fd();
        if self.is_blockdev {
            let range = [offset, len];
            // BLKDISCARD = _IO(0x12, 119)
            unsafe { libc::ioctl(fd, 0x1277, range.as_ptr()) };
        } else {
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            };
        }
        if fua {
            self.fdatasync()?;
        }
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool, fast: bool) -> BResult<()> {
        let fd = self.file.as_raw_fd();
        let r = if self.is_blockdev {
            let range = [offset, len];
            // BLKZEROOUT = _IO(0x12, 127)
            unsafe { libc::ioctl(fd, 0x127f, range.as_ptr()) }
        } else {
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            }
        };
        if r != 0 {
            if fast {
                return Err(BackendError::new(
                    ENOTSUP,
                    "the device cannot zero faster than writing",
                ));
            }
            self.zero_by_writing(offset, len)?;
        }
        if fua {
            self.fdatasync()?;
        }
        Ok(())
    }
    fn has_block_status(&self) -> bool {
        false
    }
    fn block_status(&self, _offset: u64, len: u64) -> BResult<Vec<Status>> {
        // "Allocated, contents unknown" is always a correct answer.
        Ok(vec![Status { len, flags: 0 }])
    }
    fn description(&self) -> String {
        format!(
            "raw {} {}: {} bytes{}",
            if self.is_blockdev { "device" } else { "file" },
            self.path.display(),
            self.size,
            if self.direct { ", O_DIRECT" } else { "" }
        )
    }
}
