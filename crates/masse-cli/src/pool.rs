//! How every command names its pool (`PoolArgs`), the geometry options of
//! `create`/`demo` (`GeometryArgs`), and the printed pool layout.

use crate::error::{CliError, CliResult};
use clap::{Args, ValueEnum};
use masse::device::Media;
use masse::{Db, DeviceSpec, Geometry, IoChoice, Mode, PoolConfig};
use masse_cli::units::{fmt_bytes, parse_size};
use std::path::{Path, PathBuf};

pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// The devices of a pool. Every command takes them; a pool is always named by its devices.
#[derive(Args, Debug, Clone, Default)]
pub struct PoolArgs {
    /// Fast-tier device: a file or block device on SCM-class media (Optane, Z-NAND,
    /// XL-Flash, PMEM, or a file on tmpfs such as /dev/shm), or an emulated drive
    /// such as sim:optane:4GiB (see docs/media.md). It holds the write pad and the
    /// index checkpoints. Optional: without it the pool is capacity-only (or
    /// scm-only). Default: none.
    #[arg(long, value_name = "PATH", help_heading = "Pool devices")]
    pub fast: Option<PathBuf>,

    /// Capacity-tier device: a file or block device (QLC/TLC SSD), or an emulated
    /// drive such as sim:qlc:64GiB, that receives only
    /// large sequential writes, in LBands. Repeat for several devices; give them in the
    /// same order every time. At least one is required (except for `demo`, which then
    /// makes temporary files).
    #[arg(long, value_name = "PATH", help_heading = "Pool devices")]
    pub capacity: Vec<PathBuf>,

    /// Size of the --fast file when it does not exist yet (or is smaller): 4096, 64K,
    /// 256M, 1G, 1.5GiB... (K/M/G/T are binary). Used by `create`, `demo` only.
    /// Default: none for `create` (a missing file is an error); 1 GiB for `demo`.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool devices")]
    pub fast_size: Option<u64>,

    /// Size of each --capacity file when it does not exist yet (or is smaller), as for
    /// --fast-size. Used by `create`, `demo` only. Default: none for `create`; for `demo`
    /// 4x the data size (at least 256 MiB), or derived from --utilization.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool devices")]
    pub capacity_size: Option<u64>,

    /// Use pread/pwrite system calls instead of io_uring. Default: io_uring when the
    /// kernel allows it, else pread/pwrite automatically.
    #[arg(long, help_heading = "Pool devices")]
    pub pread: bool,

    /// Do not use O_DIRECT: data then goes through the page cache (testing only).
    /// Default: O_DIRECT wherever the filesystem accepts it.
    #[arg(long, help_heading = "Pool devices")]
    pub buffered: bool,
}

/// The `sim:PROFILE:SIZE[:OPTION...]` string of an emulated device, if `p` is one.
pub fn sim_arg(p: &Path) -> Option<&str> {
    p.to_str()
        .filter(|s| masse::device::SimConfig::is_sim_path(s))
}

/// Emulated drives this process made, so commands can report what happened
/// inside them.
static SIMS: std::sync::Mutex<Vec<masse::device::SimDevice>> = std::sync::Mutex::new(Vec::new());

fn remember_sim(d: &masse::device::SimDevice) {
    if let Ok(mut v) = SIMS.lock() {
        v.push(d.clone());
    }
}

/// Per emulated drive of this process: its spec, host bytes written, NAND bytes written.
pub fn sim_stats() -> Vec<(String, u64, u64)> {
    let Ok(v) = SIMS.lock() else {
        return Vec::new();
    };
    v.iter()
        .map(|d| {
            let s = d.stats();
            (
                s.spec.to_string(),
                s.ftl.host_write_bytes,
                s.ftl.nand_write_bytes,
            )
        })
        .collect()
}

/// One line per emulated drive of this process: what happened inside it.
pub fn sim_report() -> Vec<String> {
    let Ok(v) = SIMS.lock() else {
        return Vec::new();
    };
    v.iter()
        .map(|d| {
            let s = d.stats();
            let us = |n: u64| n as f64 / 1000.0;
            format!(
                "emulated {}: host writes {}, NAND writes {} (device WAF {:.2}), {} IU read-modify-writes, \
                 GC copied {}, {} erases; modelled read latency µs p50 {:.0} p99 {:.0} p99.9 {:.0} max {:.0}",
                s.spec,
                fmt_bytes(s.ftl.host_write_bytes),
                fmt_bytes(s.ftl.nand_write_bytes),
                s.waf,
                s.ftl.rmw_ius,
                fmt_bytes(s.ftl.gc_write_bytes),
                s.ftl.erases,
                us(s.read_latency.p50_ns),
                us(s.read_latency.p99_ns),
                us(s.read_latency.p999_ns),
                us(s.read_latency.max_ns),
            )
        })
        .collect()
}

/// Pool configuration family, as named on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// Fast tier as write pad in front of a log-structured capacity tier.
    Tiered,
    /// Capacity tier only: puts are group-committed straight into the log.
    CapacityOnly,
    /// One SCM device: small 4 KiB-aligned writes, no large-sequential shaping.
    ScmOnly,
}

impl ModeArg {
    pub fn mode(self) -> Mode {
        match self {
            ModeArg::Tiered => Mode::Tiered,
            ModeArg::CapacityOnly => Mode::CapacityOnly,
            ModeArg::ScmOnly => Mode::ScmOnly,
        }
    }
}

/// Media class of the capacity tier, as named on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaArg {
    Scm,
    Tlc,
    Qlc,
    Hdd,
    Unknown,
}

impl MediaArg {
    fn media(self) -> Media {
        match self {
            MediaArg::Scm => Media::Scm,
            MediaArg::Tlc => Media::Tlc,
            MediaArg::Qlc => Media::Qlc,
            MediaArg::Hdd => Media::Hdd,
            MediaArg::Unknown => Media::Unknown,
        }
    }
}

/// Geometry chosen when a pool is formatted. Every value has an automatic default.
#[derive(Args, Debug, Clone, Default)]
pub struct GeometryArgs {
    /// Configuration family. Default: tiered if --fast is given; otherwise scm-only when
    /// the capacity device is SCM-class media (e.g. a file on tmpfs), else capacity-only.
    #[arg(long, value_enum, help_heading = "Pool geometry (when formatting)")]
    pub mode: Option<ModeArg>,

    /// Segment size: the unit merged in DRAM and written to the capacity tier in one
    /// I/O; a multiple of the IU between 8 KiB and 512 KiB. Default: 256 KiB (8 KiB
    /// for scm-only), at least the IU.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool geometry (when formatting)")]
    pub segment_size: Option<u64>,

    /// LBand size: the capacity tier is written sequentially one band at a time and GC
    /// frees whole bands. Default: 64 MiB, at most 1/16 of the smallest capacity device.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool geometry (when formatting)")]
    pub band_size: Option<u64>,

    /// Write-pad size on the fast tier (tiered mode). Default: 1/4 of the fast device,
    /// between 32 MiB and 1 GiB.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool geometry (when formatting)")]
    pub pad_size: Option<u64>,

    /// Size of each of the two index-checkpoint slots. Default: the rest of the fast
    /// device split in two; without a fast tier, 1/32 of the first capacity device each.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool geometry (when formatting)")]
    pub checkpoint_size: Option<u64>,

    /// Indirection unit of the capacity devices, to align segments to (power of two,
    /// at least 4 KiB). Default: 64 KiB for QLC media, else the device's optimal I/O
    /// size if reported, else 4 KiB.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Pool geometry (when formatting)")]
    pub iu: Option<u64>,

    /// Media class to record for the capacity tier. Default: detected (tmpfs is scm,
    /// rotational disks are hdd, otherwise unknown).
    #[arg(long, value_enum, help_heading = "Pool geometry (when formatting)")]
    pub capacity_media: Option<MediaArg>,

    /// On-disk format version to create: 5 (default); 4, the same records, for a
    /// pool that a build before version 5 must still open (such builds judge torn
    /// writes without the headers' band fields, which GC can fool); 3, the same
    /// records with seq numbers stored less compactly after GC moves; or 2, the
    /// larger record format of builds before version 3. Pools of every version open
    /// with this build.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=5), help_heading = "Pool geometry (when formatting)")]
    pub format_version: Option<u32>,
}

fn to_u32(v: Option<u64>, name: &str) -> CliResult<Option<u32>> {
    v.map(|x| u32::try_from(x).map_err(|_| CliError::new(format!("{name} {x} is too large"))))
        .transpose()
}

impl PoolArgs {
    pub fn io(&self) -> IoChoice {
        IoChoice {
            force_pread: self.pread,
            force_buffered: self.buffered,
        }
    }

    fn need_capacity(&self) -> CliResult<()> {
        if self.capacity.is_empty() {
            return Err(CliError::new("no capacity device given: name the pool with --capacity PATH (and --fast PATH if it has one)"));
        }
        Ok(())
    }

    /// Configuration to open an existing pool. Nothing is created.
    pub fn open_config(&self) -> CliResult<PoolConfig> {
        self.need_capacity()?;
        let spec = |p: &PathBuf, flag: &str| -> CliResult<DeviceSpec> {
            if let Some(arg) = sim_arg(p) {
                return Err(CliError::new(format!(
                    "{flag} {arg}: an emulated device lives in the memory of one process, so a pool \
                     on it exists only during the command that created it; use it with `masse demo`, \
                     `masse probe`, `masse media-bench` or the library"
                )));
            }
            if !p.exists() {
                // After a reboot a fast tier on tmpfs is simply gone: say so.
                let why = masse::device::missing_device_note(p)
                    .unwrap_or_else(|| "create a pool with `masse create`".to_string());
                return Err(CliError::new(format!(
                    "{flag} {}: no such file or device ({why})",
                    p.display()
                )));
            }
            Ok(DeviceSpec::path(p))
        };
        Ok(PoolConfig {
            fast: self.fast.as_ref().map(|p| spec(p, "--fast")).transpose()?,
            capacity: self
                .capacity
                .iter()
                .map(|p| spec(p, "--capacity"))
                .collect::<CliResult<_>>()?,
            io: self.io(),
            ..Default::default()
        })
    }

    /// Configuration to format a new pool. Also returns the files that do not exist
    /// yet (the library creates them), so a failed create can remove them again.
    pub fn create_config(
        &self,
        geo: &GeometryArgs,
        default_fast_size: Option<u64>,
        default_cap_size: Option<u64>,
    ) -> CliResult<(PoolConfig, Vec<PathBuf>)> {
        self.need_capacity()?;
        let mut new_files = Vec::new();
        let mut spec = |p: &PathBuf,
                        size: Option<u64>,
                        flag: &str,
                        size_flag: &str|
         -> CliResult<DeviceSpec> {
            if let Some(arg) = sim_arg(p) {
                let dev = masse::device::SimDevice::open(arg)
                    .map_err(|e| CliError::new(format!("{flag} {arg}: {e}")))?;
                remember_sim(&dev);
                return Ok(DeviceSpec::Device(std::sync::Arc::new(dev)));
            }
            if p.exists() {
                return Ok(match size {
                    Some(s) => DeviceSpec::file(p, s),
                    None => DeviceSpec::path(p),
                });
            }
            let Some(size) = size else {
                return Err(CliError::new(format!(
                    "{flag} {} does not exist; give {size_flag} SIZE to create it as a file",
                    p.display()
                )));
            };
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                if !parent.is_dir() {
                    return Err(CliError::new(format!(
                        "cannot create {flag} {}: directory {} does not exist",
                        p.display(),
                        parent.display()
                    )));
                }
            }
            new_files.push(p.clone());
            Ok(DeviceSpec::file(p, size))
        };
        let fast = match &self.fast {
            Some(p) => Some(spec(
                p,
                self.fast_size.or(default_fast_size),
                "--fast",
                "--fast-size",
            )?),
            None => None,
        };
        let mut capacity = Vec::new();
        for p in &self.capacity {
            capacity.push(spec(
                p,
                self.capacity_size.or(default_cap_size),
                "--capacity",
                "--capacity-size",
            )?);
        }
        let cfg = PoolConfig {
            fast,
            capacity,
            mode: geo.mode.map(ModeArg::mode),
            segment_size: to_u32(geo.segment_size, "--segment-size")?,
            band_size: geo.band_size,
            pad_size: geo.pad_size,
            checkpoint_size: geo.checkpoint_size,
            iu: to_u32(geo.iu, "--iu")?,
            capacity_media: geo.capacity_media.map(MediaArg::media),
            io: self.io(),
            format_version: geo.format_version,
        };
        Ok((cfg, new_files))
    }
}

/// Format a pool; on failure remove the files this call created.
pub fn create_pool(
    cfg: &PoolConfig,
    new_files: &[PathBuf],
    force: bool,
    opts: masse::Options,
) -> CliResult<Db> {
    let r = if force {
        Db::create_force(cfg, opts)
    } else {
        Db::create(cfg, opts)
    };
    r.map_err(|e| {
        for f in new_files {
            let _ = std::fs::remove_file(f);
        }
        CliError::new(format!("cannot create the pool: {e}"))
    })
}

/// Open an existing pool. A pool another process has open is refused (one
/// pool, one process): the message names the holder and says what to do.
pub fn open_pool(pool: &PoolArgs, opts: masse::Options) -> CliResult<Db> {
    let cfg = pool.open_config()?;
    Db::open(&cfg, opts).map_err(|e| {
        let hint = if matches!(e, masse::Error::Busy { .. }) {
            ". Use the pool through that process (its NBD export or mount) or stop it \
             first; every command, `stats` and `check` included, needs the pool to itself, \
             and the figures of a running pool come from the process that has it open"
        } else {
            ""
        };
        CliError::new(format!("cannot open the pool: {e}{hint}"))
    })
}

/// Print what the library says the user should know about the pool's devices
/// (e.g. a fast tier on tmpfs does not survive a reboot), each line prefixed.
pub fn pool_warnings(db: &Db, prefix: &str) -> String {
    db.pool_warnings()
        .iter()
        .map(|w| format!("{prefix}{w}\n"))
        .collect()
}

/// One device of the layout.
#[derive(serde::Serialize, Clone, Debug)]
pub struct DeviceLayout {
    pub path: String,
    pub role: &'static str,
    pub media: &'static str,
    pub capacity: u64,
    pub backend: &'static str,
    pub direct_io: bool,
    /// LBands on this device (capacity devices).
    pub bands: Option<u32>,
}

/// What a pool looks like: geometry and devices.
#[derive(serde::Serialize, Clone, Debug)]
pub struct PoolLayout {
    /// On-disk format version (docs/format.md §1).
    pub format_version: u32,
    pub geometry: Geometry,
    pub devices: Vec<DeviceLayout>,
}

impl PoolLayout {
    pub fn of(db: &Db) -> PoolLayout {
        let geometry = db.geometry().clone();
        let mut cap_i = 0;
        let devices = db
            .stats()
            .devices
            .iter()
            .map(|d| {
                let bands = if d.role == "capacity" {
                    let b = geometry.bands_per_device.get(cap_i).copied();
                    cap_i += 1;
                    b
                } else {
                    None
                };
                DeviceLayout {
                    path: d.path.clone(),
                    role: d.role,
                    media: d.media,
                    capacity: d.capacity,
                    backend: d.backend,
                    direct_io: d.direct_io,
                    bands,
                }
            })
            .collect();
        PoolLayout {
            format_version: db.format_version(),
            geometry,
            devices,
        }
    }

    /// Human-readable layout, one fact per line, indented by `ind`.
    pub fn to_text(&self, ind: &str) -> String {
        use std::fmt::Write;
        let g = &self.geometry;
        let mut s = String::new();
        let total_bands: u64 = g.bands_per_device.iter().map(|&b| b as u64).sum();
        let _ = writeln!(s, "{ind}mode               {}", g.mode.name());
        let _ = writeln!(s, "{ind}format version     {}", self.format_version);
        let _ = writeln!(
            s,
            "{ind}segment size       {}",
            fmt_bytes(g.segment_size as u64)
        );
        let _ = writeln!(
            s,
            "{ind}band size          {} ({} bands in all, {} of capacity tier; band header {})",
            fmt_bytes(g.band_size),
            total_bands,
            fmt_bytes(total_bands * g.band_size),
            fmt_bytes(g.band_header_size as u64)
        );
        let where_meta = if g.has_fast {
            "on the fast tier"
        } else {
            "on capacity device 0"
        };
        if g.pad_size > 0 {
            let _ = writeln!(
                s,
                "{ind}write pad          {} on the fast tier",
                fmt_bytes(g.pad_size)
            );
        } else {
            let _ = writeln!(
                s,
                "{ind}write pad          none (puts are group-committed to the capacity tier)"
            );
        }
        let _ = writeln!(
            s,
            "{ind}checkpoint slots   2 x {} {where_meta}",
            fmt_bytes(g.ckpt_slot_size)
        );
        let _ = writeln!(s, "{ind}indirection unit   {}", fmt_bytes(g.iu as u64));
        for d in &self.devices {
            let bands = match d.bands {
                Some(b) => format!(", {b} bands of {}", fmt_bytes(g.band_size)),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "{ind}device {:<9}   {}: media {}, {}, I/O {}, O_DIRECT {}{}",
                d.role,
                d.path,
                d.media,
                fmt_bytes(d.capacity),
                d.backend,
                if d.direct_io {
                    "yes"
                } else {
                    "no (page cache)"
                },
                bands
            );
        }
        s
    }
}

/// A shell-ready command line naming this pool, e.g. for `masse stats`.
pub fn pool_flags(fast: Option<&Path>, caps: &[PathBuf]) -> String {
    let mut s = String::new();
    if let Some(f) = fast {
        s.push_str(&format!(
            " --fast {}",
            crate::machine::shell_quote(&f.display().to_string())
        ));
    }
    for c in caps {
        s.push_str(&format!(
            " --capacity {}",
            crate::machine::shell_quote(&c.display().to_string())
        ));
    }
    s
}

/// Close a pool shared through an `Arc` once every other holder has let go
/// (scrapes are stopped first with `EngineSlot::clear`).
pub fn close_shared(db: std::sync::Arc<Db>) -> CliResult<()> {
    match std::sync::Arc::try_unwrap(db) {
        Ok(db) => db
            .close()
            .map_err(|e| CliError::new(format!("closing the pool failed: {e}"))),
        Err(db) => db.flush().map_err(|e| {
            CliError::new(format!(
                "flushing the pool failed (it is still in use): {e}"
            ))
        }),
    }
}
