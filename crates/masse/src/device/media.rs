//! Media identification: what the system says about a device (`sysfs.rs`,
//! the only reader of sysfs), a table of known drive models (`models.rs`),
//! the classification of those facts together with an optional active
//! measurement, and the engine settings that follow from a class.
//!
//! These are the rules; the timed I/O that produces a [`Measured`] lives in
//! `masse probe`. Pure functions over a sysfs root directory, so recorded
//! sysfs trees can be classified in tests.

mod models;
mod sysfs;

pub use models::{known_model, KnownModel, KNOWN_MODELS};
pub use sysfs::{facts_for_path, facts_of_dev, sysfs_facts, SysfsFacts};

use crate::device::Media;

const K: u32 = 1024;

/// Media class, as `masse probe` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Storage-class memory / ultra-low-latency SSD (Optane, Z-NAND, XL-Flash, PMEM, RAM).
    Scm,
    /// TLC NAND flash.
    Tlc,
    /// QLC NAND flash.
    Qlc,
    /// Rotating disk.
    Hdd,
    /// Not identified.
    Unknown,
}

impl Class {
    /// Short lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Class::Scm => "scm",
            Class::Tlc => "tlc",
            Class::Qlc => "qlc",
            Class::Hdd => "hdd",
            Class::Unknown => "unknown",
        }
    }

    /// One-line description for people.
    pub fn describe(self) -> &'static str {
        match self {
            Class::Scm => "SCM / ultra-low-latency (write in place, symmetric, ~10 µs)",
            Class::Tlc => "TLC NAND flash",
            Class::Qlc => "QLC NAND flash (large IU, slow small random writes)",
            Class::Hdd => "rotating disk",
            Class::Unknown => "unknown",
        }
    }

    /// The [`Media`] recorded for this class.
    pub fn media(self) -> Media {
        match self {
            Class::Scm => Media::Scm,
            Class::Tlc => Media::Tlc,
            Class::Qlc => Media::Qlc,
            Class::Hdd => Media::Hdd,
            Class::Unknown => Media::Unknown,
        }
    }
}

/// Results of the active measurement (µs and MB/s, MB = 10^6 bytes).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// QD1 4 KiB random read latency, idle device: median.
    pub read_p50_us: f64,
    /// QD1 4 KiB random read latency, idle device: 99th percentile.
    pub read_p99_us: f64,
    /// 4 KiB random write bandwidth.
    pub rand4k_write_mbps: f64,
    /// 256 KiB sequential write bandwidth.
    pub seq256k_write_mbps: f64,
    /// QD1 4 KiB read latency while other threads write 4 KiB at random: median.
    pub loaded_read_p50_us: f64,
    /// The same, 99th percentile.
    pub loaded_read_p99_us: f64,
    /// The same, 99.9th percentile.
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
    /// The class.
    pub class: Class,
    /// Where the class comes from: `model table`, `memory filesystem`,
    /// `measurement`, `sysfs`, `emulator profile`.
    pub source: String,
    /// Why, one sentence each, the deciding one first.
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
    let opt = f
        .optimal_io_size
        .filter(|o| o.is_power_of_two() && *o >= 4096)
        .unwrap_or(0);
    if let Some(v) = by_model(f, opt) {
        return v;
    }
    if let Some(fs) = &f.memory_fs {
        return Verdict {
            class: Class::Scm,
            source: "memory filesystem".into(),
            reasons: vec![format!(
                "the path is on {fs} (RAM): byte-addressable, no FTL"
            )],
            iu: 4096,
        };
    }
    let mut reasons = Vec::new();
    if let Some(z) = f.zoned.as_deref().filter(|z| *z != "none") {
        reasons.push(format!(
            "zoned device ({z}): needs a zone-aware layout masse does not have yet"
        ));
    }
    match m {
        Some(m) => by_measurement(f, m, opt, reasons),
        None => by_sysfs(f, opt, reasons),
    }
}

/// The verdict of the known-model table, if the model is in it.
fn by_model(f: &SysfsFacts, opt: u32) -> Option<Verdict> {
    let k = f.model.as_deref().and_then(known_model)?;
    Some(Verdict {
        class: k.class,
        source: "model table".into(),
        reasons: vec![format!(
            "model {:?} is a {}",
            f.model.as_deref().unwrap_or(""),
            k.name
        )],
        iu: if k.iu > 0 { k.iu } else { opt },
    })
}

/// The verdict of a measurement, which overrides sysfs's `rotational`.
fn by_measurement(f: &SysfsFacts, m: &Measured, opt: u32, mut reasons: Vec<String>) -> Verdict {
    let (c, why) = classify_measured(m);
    reasons.push(why);
    if f.rotational == Some(true) && c != Class::Hdd {
        reasons.push(
            "sysfs says rotational=1, but the measured latency is not a disk's: the measurement wins \
             (virtual disks often report rotational)"
                .into(),
        );
    }
    Verdict {
        class: c,
        source: "measurement".into(),
        reasons,
        iu: if c == Class::Qlc {
            opt.max(64 * K)
        } else {
            opt
        },
    }
}

/// The verdict of sysfs alone: rotational means a disk, anything else is unknown.
fn by_sysfs(f: &SysfsFacts, opt: u32, mut reasons: Vec<String>) -> Verdict {
    let class = if f.rotational == Some(true) {
        reasons.push("sysfs says rotational=1 (not measured)".into());
        Class::Hdd
    } else {
        reasons.push("no known model and no measurement".into());
        Class::Unknown
    };
    Verdict {
        class,
        source: "sysfs".into(),
        reasons,
        iu: opt,
    }
}

/// Engine settings that follow from a class.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    /// `fast` (write pad), `capacity`, or `scm-only` for a lone SCM device.
    pub role: &'static str,
    /// Segment size (bytes).
    pub segment_size: u64,
    /// Band size (bytes): a multiple of the drive's reclaim unit when known.
    pub band_size: u64,
    /// Indirection unit to align to (bytes).
    pub iu: u32,
    /// Queue depth the device wants.
    pub queue_depth: u32,
    /// How to use the device, for people.
    pub note: String,
}

/// The engine settings for a verdict; `reclaim_unit` (0 = unknown) rounds the
/// band size to whole reclaim units.
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
