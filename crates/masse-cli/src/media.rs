//! Media identification for `masse probe` and `masse create`: what sysfs says
//! about a device, a table of known drive models, and the classification of
//! those facts together with an active measurement. Pure functions over a
//! sysfs root directory, so recorded sysfs trees can be classified in tests.

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
    pub rotational: Option<bool>,
    pub logical_block_size: Option<u32>,
    pub physical_block_size: Option<u32>,
    pub optimal_io_size: Option<u32>,
    pub discard_granularity: Option<u32>,
    /// `none`, `host-aware`, `host-managed`.
    pub zoned: Option<String>,
    /// Drive model string (NVMe/SATA `device/model`).
    pub model: Option<String>,
    /// Filesystem type when the path is on a memory filesystem (tmpfs, ramfs).
    pub memory_fs: Option<String>,
    /// Why no block device was found, if none was.
    pub note: Option<String>,
}

/// Media class, as `masse probe` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Storage-class memory / ultra-low-latency SSD (Optane, Z-NAND, XL-Flash, PMEM, RAM).
    Scm,
    Tlc,
    Qlc,
    Hdd,
    Unknown,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Scm => "scm",
            Class::Tlc => "tlc",
            Class::Qlc => "qlc",
            Class::Hdd => "hdd",
            Class::Unknown => "unknown",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Class::Scm => "SCM / ultra-low-latency (write in place, symmetric, ~10 µs)",
            Class::Tlc => "TLC NAND flash",
            Class::Qlc => "QLC NAND flash (large IU, slow small random writes)",
            Class::Hdd => "rotating disk",
            Class::Unknown => "unknown",
        }
    }

    pub fn media(self) -> masse::device::Media {
        use masse::device::Media;
        match self {
            Class::Scm => Media::Scm,
            Class::Tlc => Media::Tlc,
            Class::Qlc => Media::Qlc,
            Class::Hdd => Media::Hdd,
            Class::Unknown => Media::Unknown,
        }
    }
}

/// An entry of the known-model table.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct KnownModel {
    /// Substring matched (case-insensitive) against the model string.
    pub pattern: &'static str,
    pub name: &'static str,
    pub class: Class,
    /// Indirection unit when the vendor documents one (0 = not known).
    pub iu: u32,
}

const K: u32 = 1024;

/// Known drive models. Order matters: the first match wins.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        pattern: "P5800X",
        name: "Intel Optane P5800X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4800X",
        name: "Intel Optane DC P4800X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4801X",
        name: "Intel Optane DC P4801X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "905P",
        name: "Intel Optane 905P",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "900P",
        name: "Intel Optane 900P",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "OPTANE",
        name: "Intel Optane",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "SZ985",
        name: "Samsung Z-SSD SZ985",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "MZPZ",
        name: "Samsung Z-SSD",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "983 ZET",
        name: "Samsung 983 ZET (Z-NAND)",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "FL6",
        name: "KIOXIA FL6 (XL-Flash)",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4320",
        name: "Intel D5-P4320 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P4326",
        name: "Intel D5-P4326 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P5316",
        name: "Solidigm D5-P5316 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P5336",
        name: "Solidigm D5-P5336 (QLC)",
        class: Class::Qlc,
        iu: 16 * K,
    },
    KnownModel {
        pattern: "P5430",
        name: "Solidigm D5-P5430 (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "660P",
        name: "Intel 660p (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "670P",
        name: "Intel 670p (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "QVO",
        name: "Samsung QVO (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "5210",
        name: "Micron 5210 ION (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM963",
        name: "Samsung PM963 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM983",
        name: "Samsung PM983 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM9A3",
        name: "Samsung PM9A3 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1725",
        name: "Samsung PM1725 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1733",
        name: "Samsung PM1733 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1735",
        name: "Samsung PM1735 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P4510",
        name: "Intel DC P4510 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P4610",
        name: "Intel DC P4610 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5510",
        name: "Intel D7-P5510 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5520",
        name: "Solidigm D7-P5520 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5620",
        name: "Solidigm D7-P5620 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_7300",
        name: "Micron 7300 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_7450",
        name: "Micron 7450 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_9300",
        name: "Micron 9300 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "KCD6",
        name: "KIOXIA CD6 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "KCM6",
        name: "KIOXIA CM6 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "SN640",
        name: "WD Ultrastar DC SN640 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "SN650",
        name: "WD Ultrastar DC SN650 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
];

/// The table entry matching a model string.
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    let m = model.to_ascii_uppercase().replace(' ', "_");
    let plain = model.to_ascii_uppercase();
    KNOWN_MODELS.iter().find(|k| {
        let p = k.pattern.to_ascii_uppercase();
        plain.contains(&p) || m.contains(&p.replace(' ', "_"))
    })
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
/// `sys` (normally `/sys`).
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
    f.zoned = read_trim(&q.join("zoned"));
    f.model = read_trim(&dir.join("device/model"))
        .or_else(|| read_trim(&dir.join("device/device/model")));
    f
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
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut f = sysfs_facts(Path::new("/sys"), major, minor);
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
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    match s.f_type as u64 {
        0x0102_1994 => Some("tmpfs"),
        0x8584_58f6 => Some("ramfs"),
        _ => None,
    }
}

/// Results of the active measurement (µs and MB/s, MB = 10^6 bytes).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// QD1 4 KiB random read latency, idle device.
    pub read_p50_us: f64,
    pub read_p99_us: f64,
    /// 4 KiB random write bandwidth.
    pub rand4k_write_mbps: f64,
    /// 256 KiB sequential write bandwidth.
    pub seq256k_write_mbps: f64,
    /// QD1 4 KiB read latency while other threads write 4 KiB at random.
    pub loaded_read_p50_us: f64,
    pub loaded_read_p99_us: f64,
    pub loaded_read_p999_us: f64,
    /// Writer threads (queue depth) used for the write phases.
    pub write_threads: usize,
    /// Seconds the measurement took.
    pub seconds: f64,
}

impl Measured {
    /// Small random writes as a fraction of sequential bandwidth.
    pub fn rand_seq_ratio(&self) -> f64 {
        if self.seq256k_write_mbps <= 0.0 {
            return 0.0;
        }
        self.rand4k_write_mbps / self.seq256k_write_mbps
    }
}

/// The verdict: a class and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    pub class: Class,
    /// Where the class comes from: `model table`, `memory filesystem`,
    /// `measurement`, `sysfs`, `emulator profile`.
    pub source: String,
    pub reasons: Vec<String>,
    /// Indirection unit to align to (bytes), when known.
    pub iu: u32,
}

/// Class from the measurement alone.
pub fn classify_measured(m: &Measured) -> (Class, String) {
    let r = m.rand_seq_ratio();
    if m.read_p50_us >= 1500.0 {
        return (
            Class::Hdd,
            format!("QD1 4 KiB reads take {:.0} µs (seek-bound)", m.read_p50_us),
        );
    }
    if m.read_p50_us < 30.0 && r >= 0.3 {
        return (
            Class::Scm,
            format!(
                "QD1 4 KiB reads take {:.1} µs and 4 KiB random writes reach {:.0}% of sequential bandwidth",
                m.read_p50_us,
                r * 100.0
            ),
        );
    }
    if r < 0.2 {
        return (
            Class::Qlc,
            format!(
                "4 KiB random writes reach only {:.1}% of 256 KiB sequential bandwidth ({:.0} vs {:.0} MB/s): \
                 treat as QLC-like (large writes only)",
                r * 100.0,
                m.rand4k_write_mbps,
                m.seq256k_write_mbps
            ),
        );
    }
    (
        Class::Tlc,
        format!(
            "QD1 4 KiB reads take {:.0} µs, 4 KiB random writes reach {:.0}% of sequential bandwidth",
            m.read_p50_us,
            r * 100.0
        ),
    )
}

/// Combine the system's facts and (optionally) a measurement. A known model
/// wins; then a memory filesystem; then the measurement (which overrides
/// `rotational`, since virtual disks often claim to rotate); then sysfs.
pub fn classify(f: &SysfsFacts, m: Option<&Measured>) -> Verdict {
    let mut reasons = Vec::new();
    let opt = f
        .optimal_io_size
        .filter(|o| o.is_power_of_two() && *o >= 4096)
        .unwrap_or(0);
    if let Some(k) = f.model.as_deref().and_then(known_model) {
        reasons.push(format!(
            "model {:?} is a {}",
            f.model.as_deref().unwrap_or(""),
            k.name
        ));
        return Verdict {
            class: k.class,
            source: "model table".into(),
            reasons,
            iu: if k.iu > 0 { k.iu } else { opt },
        };
    }
    if let Some(fs) = &f.memory_fs {
        reasons.push(format!(
            "the path is on {fs} (RAM): byte-addressable, no FTL"
        ));
        return Verdict {
            class: Class::Scm,
            source: "memory filesystem".into(),
            reasons,
            iu: 4096,
        };
    }
    if let Some(z) = f.zoned.as_deref().filter(|z| *z != "none") {
        reasons.push(format!(
            "zoned device ({z}): needs a zone-aware layout masse does not have yet"
        ));
    }
    if let Some(m) = m {
        let (c, why) = classify_measured(m);
        reasons.push(why);
        if f.rotational == Some(true) && c != Class::Hdd {
            reasons.push(
                "sysfs says rotational=1, but the measured latency is not a disk's: the measurement wins \
                 (virtual disks often report rotational)"
                    .into(),
            );
        }
        return Verdict {
            class: c,
            source: "measurement".into(),
            reasons,
            iu: if c == Class::Qlc {
                opt.max(64 * K)
            } else {
                opt
            },
        };
    }
    match f.rotational {
        Some(true) => {
            reasons.push("sysfs says rotational=1 (not measured)".into());
            Verdict {
                class: Class::Hdd,
                source: "sysfs".into(),
                reasons,
                iu: opt,
            }
        }
        _ => {
            reasons.push("no known model and no measurement".into());
            Verdict {
                class: Class::Unknown,
                source: "sysfs".into(),
                reasons,
                iu: opt,
            }
        }
    }
}

/// Engine settings that follow from a class.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    /// `fast` (write pad), `capacity`, or `scm-only` for a lone SCM device.
    pub role: &'static str,
    pub segment_size: u64,
    pub band_size: u64,
    pub iu: u32,
    pub queue_depth: u32,
    pub note: String,
}

pub fn advise(v: &Verdict, reclaim_unit: u64) -> Advice {
    let iu = v.iu.max(4096);
    let band = |b: u64| match b.checked_div(reclaim_unit) {
        Some(n) => n.max(1) * reclaim_unit,
        None => b,
    };
    match v.class {
        Class::Scm => Advice {
            role: "fast",
            segment_size: 8 << 10,
            band_size: band(64 << 20),
            iu,
            queue_depth: 4,
            note: "write pad and checkpoints of a tiered pool (--fast); alone, an scm-only pool".into(),
        },
        Class::Qlc => Advice {
            role: "capacity",
            segment_size: (256u64 << 10).max(iu as u64),
            band_size: band(64 << 20),
            iu: iu.max(64 * K),
            queue_depth: 32,
            note: "capacity tier behind an SCM fast tier: large IU-aligned sequential writes only, whole-band TRIM".into(),
        },
        Class::Tlc => Advice {
            role: "capacity",
            segment_size: (256u64 << 10).max(iu as u64),
            band_size: band(64 << 20),
            iu,
            queue_depth: 16,
            note: "capacity tier (or capacity-only pool)".into(),
        },
        Class::Hdd => Advice {
            role: "capacity",
            segment_size: 512 << 10,
            band_size: band(256 << 20),
            iu,
            queue_depth: 4,
            note: "capacity tier only; seeks make reads slow, a fast tier is strongly advised".into(),
        },
        Class::Unknown => Advice {
            role: "capacity",
            segment_size: 256 << 10,
            band_size: band(64 << 20),
            iu,
            queue_depth: 16,
            note: "defaults; run `masse probe` with a measurement to refine".into(),
        },
    }
}
