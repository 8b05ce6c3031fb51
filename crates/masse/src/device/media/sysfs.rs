//! What the system says about the block device under a path: sysfs's queue
//! attributes and model string, and whether the path is on a memory
//! filesystem. This is the only place that reads sysfs; [`FileDevice`] and
//! `masse probe` both take their facts from here.
//!
//! [`FileDevice`]: crate::device::FileDevice

use crate::device::claim::{major_minor, RAMFS_MAGIC, TMPFS_MAGIC};
use std::path::{Path, PathBuf};

/// What the system says about the block device under a path.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SysfsFacts {
    /// Kernel name of the whole disk (e.g. `nvme0n1`, `vda`), if any.
    pub disk: Option<String>,
    /// `MAJ:MIN` of the device the path lives on.
    pub dev: Option<String>,
    /// True when the path is on a partition of `disk`.
    pub partition: bool,
    /// `queue/rotational`: the system's claim that the disk rotates.
    pub rotational: Option<bool>,
    /// `queue/logical_block_size`.
    pub logical_block_size: Option<u32>,
    /// `queue/physical_block_size`.
    pub physical_block_size: Option<u32>,
    /// `queue/optimal_io_size` (0 when the device states none).
    pub optimal_io_size: Option<u32>,
    /// `queue/discard_granularity`, as reported (see [`SysfsFacts::discard_unit`]).
    pub discard_granularity: Option<u32>,
    /// `queue/discard_max_bytes`: 0 when the device cannot discard at all.
    /// Not part of `masse probe`'s report, which never showed it.
    #[serde(skip)]
    pub discard_max_bytes: Option<u64>,
    /// `none`, `host-aware`, `host-managed`.
    pub zoned: Option<String>,
    /// Drive model string (NVMe/SATA `device/model`).
    pub model: Option<String>,
    /// Filesystem type when the path is on a memory filesystem (tmpfs, ramfs).
    pub memory_fs: Option<String>,
    /// Why no block device was found, if none was.
    pub note: Option<String>,
}

impl SysfsFacts {
    /// The discard granularity the device can really use: 0 when it cannot
    /// discard (`discard_max_bytes` 0), since such a device may still report a
    /// granularity.
    pub fn discard_unit(&self) -> Option<u32> {
        if self.discard_max_bytes == Some(0) {
            return Some(0);
        }
        self.discard_granularity
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn read_num<T: std::str::FromStr>(p: &Path) -> Option<T> {
    read_trim(p)?.parse().ok()
}

/// Read the facts of block device `MAJ:MIN` from a sysfs tree rooted at
/// `sys` (normally `/sys`). A partition answers with its whole disk's queue
/// and model.
pub fn sysfs_facts(sys: &Path, major: u32, minor: u32) -> SysfsFacts {
    let mut f = SysfsFacts {
        dev: Some(format!("{major}:{minor}")),
        ..Default::default()
    };
    let link = sys.join(format!("dev/block/{major}:{minor}"));
    let Ok(mut dir) = std::fs::canonicalize(&link) else {
        f.note = Some(format!("no {} (not a block device)", link.display()));
        return f;
    };
    if dir.join("partition").exists() {
        f.partition = true;
        if let Some(parent) = dir.parent() {
            dir = parent.to_path_buf();
        }
    }
    f.disk = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let q = dir.join("queue");
    f.rotational = read_num::<u32>(&q.join("rotational")).map(|v| v != 0);
    f.logical_block_size = read_num(&q.join("logical_block_size"));
    f.physical_block_size = read_num(&q.join("physical_block_size"));
    f.optimal_io_size = read_num(&q.join("optimal_io_size"));
    f.discard_granularity = read_num(&q.join("discard_granularity"));
    f.discard_max_bytes = read_num(&q.join("discard_max_bytes"));
    f.zoned = read_trim(&q.join("zoned"));
    f.model = read_trim(&dir.join("device/model"))
        .or_else(|| read_trim(&dir.join("device/device/model")));
    f
}

/// Facts of the block device with `dev_t` `dev`, from `/sys`.
pub fn facts_of_dev(dev: u64) -> SysfsFacts {
    let (major, minor) = major_minor(dev);
    sysfs_facts(Path::new("/sys"), major as u32, minor as u32)
}

/// Facts for a path: the block device it is (raw device) or lives on (file).
pub fn facts_for_path(path: &Path) -> SysfsFacts {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let probe_path: PathBuf = if path.exists() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    };
    let Ok(md) = std::fs::metadata(&probe_path) else {
        return SysfsFacts {
            note: Some(format!("cannot stat {}", probe_path.display())),
            ..Default::default()
        };
    };
    let dev = if md.file_type().is_block_device() {
        md.rdev()
    } else {
        md.dev()
    };
    let mut f = facts_of_dev(dev);
    if let Some(fs) = memory_fs(&probe_path) {
        f.memory_fs = Some(fs.to_string());
        f.note = Some(format!("{fs}: data lives in RAM"));
    }
    f
}

fn memory_fs(p: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs writes into the zeroed struct we own.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    match s.f_type as u32 {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_of_the_temp_filesystem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = std::fs::metadata(dir.path()).expect("stat");
        // Informational: anonymous devices (btrfs, overlay, tmpfs) have no sysfs entry.
        use std::os::unix::fs::MetadataExt;
        eprintln!(
            "sysfs facts for st_dev {:?}: {:?}",
            major_minor(meta.dev()),
            facts_of_dev(meta.dev())
        );
        let none = facts_of_dev(libc::makedev(0, 1));
        assert!(none.disk.is_none() && none.rotational.is_none());
    }
}
