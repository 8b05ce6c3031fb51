//! Block devices: the only way the engine touches storage.
//!
//! A [`Device`] does aligned, direct reads and writes at byte offsets. Three
//! backends implement it: [`FileDevice`] (regular files and raw block devices,
//! io_uring + `O_DIRECT`, with a pread/pwrite fallback chosen automatically),
//! [`MemDevice`] (RAM, with a simulated power cut for crash tests) and
//! [`SimDevice`] (an emulated SCM/TLC/QLC drive with an FTL, a time model and
//! fault injection; device paths `sim:PROFILE:SIZE[:OPTION...]`).
//!
//! Contract for every call on the data path: `offset`, buffer length and buffer
//! address are multiples of [`IO_ALIGN`] (4 KiB). The engine never relies on a
//! page cache: reads and writes are direct where the backend allows it, and
//! `DeviceInfo::direct_io` says when it could not.
//!
//! What kind of medium is behind a path (sysfs facts, known drive models, the
//! classification rules and the settings that follow) is [`media`]'s.

mod aligned;
mod claim;
mod file;
pub mod media;
mod mem;
pub mod sim;

pub use aligned::{round_down64, round_up, round_up64, AlignedBuf, IO_ALIGN};
pub(crate) use claim::InUse;
pub use claim::{missing_device_note, on_volatile_fs, ClaimError, DeviceClaim, DeviceId};
pub use file::{FileDevice, OpenOptions};
pub use media::{
    advise, classify, facts_for_path, known_model, sysfs_facts, Advice, Class, Measured,
    SysfsFacts, Verdict,
};
pub use mem::MemDevice;
pub use sim::{SimConfig, SimDevice};

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the storage medium is, as far as the engine can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Media {
    /// Storage-class memory / ultra-low-latency SSD (Optane, Z-NAND, XL-Flash, PMEM, tmpfs).
    Scm,
    /// TLC NAND flash.
    Tlc,
    /// QLC NAND flash: large indirection unit, slow random writes.
    Qlc,
    /// Rotating disk.
    Hdd,
    /// Process memory (tests).
    Memory,
    /// Not identified.
    Unknown,
}

impl Media {
    /// Short lower-case name used in the CLI, stats and the superblock.
    pub fn name(self) -> &'static str {
        match self {
            Media::Scm => "scm",
            Media::Tlc => "tlc",
            Media::Qlc => "qlc",
            Media::Hdd => "hdd",
            Media::Memory => "memory",
            Media::Unknown => "unknown",
        }
    }

    /// On-disk code (superblock field).
    pub fn code(self) -> u8 {
        match self {
            Media::Unknown => 0,
            Media::Scm => 1,
            Media::Tlc => 2,
            Media::Qlc => 3,
            Media::Hdd => 4,
            Media::Memory => 5,
        }
    }

    /// Inverse of [`Media::code`]; unknown codes map to `Unknown`.
    pub fn from_code(c: u8) -> Media {
        match c {
            1 => Media::Scm,
            2 => Media::Tlc,
            3 => Media::Qlc,
            4 => Media::Hdd,
            5 => Media::Memory,
            _ => Media::Unknown,
        }
    }

    /// Parse a name as printed by [`Media::name`].
    pub fn parse(s: &str) -> Option<Media> {
        Some(match s {
            "scm" => Media::Scm,
            "tlc" => Media::Tlc,
            "qlc" => Media::Qlc,
            "hdd" => Media::Hdd,
            "memory" => Media::Memory,
            "unknown" => Media::Unknown,
            _ => return None,
        })
    }
}

/// How a device's I/O is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Backend {
    /// io_uring with batched submission.
    IoUring,
    /// pread/pwrite system calls (fallback).
    Pread,
    /// In-process memory.
    Memory,
}

impl Backend {
    /// Short name for stats.
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Pread => "pread",
            Backend::Memory => "memory",
        }
    }
}

/// Static facts about a device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    /// Path it was opened from (or a name for memory devices).
    pub path: String,
    /// The storage behind the device, whatever path named it: the same file
    /// through a symlink or a hard link has the same identity.
    pub identity: DeviceId,
    /// True when the contents do not survive a reboot although `sync`
    /// succeeds: a file on tmpfs or ramfs. (In-process devices model drives
    /// and say false; they live only as long as the process anyway.)
    pub volatile: bool,
    /// Usable bytes.
    pub capacity: u64,
    /// Logical block size (smallest addressable unit).
    pub logical_block_size: u32,
    /// Physical block size reported by the system.
    pub physical_block_size: u32,
    /// Optimal I/O size reported by the system (0 if none).
    pub optimal_io_size: u32,
    /// Discard granularity (0 if discard is unsupported).
    pub discard_granularity: u32,
    /// Best guess at the medium.
    pub media: Media,
    /// I/O mechanism in use.
    pub backend: Backend,
    /// True when data bypasses the page cache (`O_DIRECT`).
    pub direct_io: bool,
    /// True when the device is a raw block device rather than a file.
    pub block_device: bool,
    /// True when [`Device::discard`] punches a hole in a file of a host file
    /// system rather than telling a drive: the hole punch waits for the
    /// file's direct I/O in flight, and gives back space the file had reserved.
    pub hole_punch_discard: bool,
    /// Whether the system reports the device as rotational.
    pub rotational: bool,
    /// The drive's indirection unit (FTL mapping granularity) in bytes, when
    /// known (an emulated drive, a drive from the known-model table); 0 when
    /// unknown. Segments are always a multiple of it.
    pub indirection_unit: u32,
    /// The drive's reclaim unit (erase block / superblock the FTL frees at
    /// once) in bytes, when known; 0 when unknown. LBands default to a multiple
    /// of it, so freeing a band frees whole reclaim units inside the drive.
    pub reclaim_unit: u64,
}

/// Cumulative I/O counters of one device.
#[derive(Default, Debug)]
pub struct IoCounters {
    /// Bytes read.
    pub bytes_read: AtomicU64,
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// Read operations.
    pub reads: AtomicU64,
    /// Write operations.
    pub writes: AtomicU64,
    /// Flush/sync operations.
    pub syncs: AtomicU64,
    /// Bytes discarded (TRIM).
    pub bytes_discarded: AtomicU64,
}

impl IoCounters {
    /// Record a read of `n` bytes.
    pub fn read(&self, n: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }
    /// Record a write of `n` bytes.
    pub fn write(&self, n: usize) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
    }
    /// Snapshot.
    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            bytes_discarded: self.bytes_discarded.load(Ordering::Relaxed),
        }
    }
}

/// Plain copy of [`IoCounters`].
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct IoSnapshot {
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Read operations.
    pub reads: u64,
    /// Write operations.
    pub writes: u64,
    /// Flush/sync operations.
    pub syncs: u64,
    /// Bytes discarded.
    pub bytes_discarded: u64,
}

/// A storage device with aligned direct access.
///
/// All methods may be called from many threads at once.
pub trait Device: Send + Sync {
    /// Static facts about the device.
    fn info(&self) -> &DeviceInfo;

    /// Fill `buf` from `offset`, all of it, or fail: the engine reads into
    /// reused buffers, so a short read reported as success would hand it the
    /// bytes of an earlier read. Aligned per the module contract.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Write `buf` at `offset`. Aligned per the module contract. Completion means
    /// the device accepted the data; it is durable only after [`Device::sync`].
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Write several buffers, submitted together where the backend can batch.
    fn write_batch(&self, ops: &[(u64, &[u8])]) -> io::Result<()> {
        for (off, buf) in ops {
            self.write_at(buf, *off)?;
        }
        Ok(())
    }

    /// Read several ranges, submitted together where the backend can batch.
    fn read_batch(&self, ops: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (off, buf) in ops.iter_mut() {
            self.read_at(buf, *off)?;
        }
        Ok(())
    }

    /// Make every completed write durable (fdatasync / cache flush).
    fn sync(&self) -> io::Result<()>;

    /// Tell the device that a range no longer holds data (TRIM / punch hole).
    /// Contents of the range are unspecified afterwards.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Cumulative I/O counters.
    fn counters(&self) -> &IoCounters;

    /// Claim the device for one open pool until the returned claim is dropped:
    /// a second claim (from another process, or another open in this one) is
    /// refused with [`ClaimError::Busy`]. The default, for devices that cannot
    /// be shared, claims nothing.
    fn claim(&self) -> Result<DeviceClaim, ClaimError> {
        Ok(DeviceClaim::unshared())
    }
}

/// Check the alignment contract; returns an `InvalidInput` error when violated.
pub(crate) fn check_aligned(buf_ptr: *const u8, len: usize, offset: u64) -> io::Result<()> {
    if buf_ptr as usize % IO_ALIGN != 0 || len % IO_ALIGN != 0 || offset % IO_ALIGN as u64 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "unaligned I/O: buffer {:p}, length {len}, offset {offset} (all must be multiples of {IO_ALIGN})",
                buf_ptr
            ),
        ));
    }
    Ok(())
}

/// Check that `[offset, offset+len)` lies within `capacity`.
pub(crate) fn check_range(len: usize, offset: u64, capacity: u64) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O beyond end of device: offset {offset} + {len} > {capacity}"),
        )),
    }
}
