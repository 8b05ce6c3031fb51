//! Pool configuration (what `create` formats) and runtime options.

use crate::device::{Device, FileDevice, Media, OpenOptions, SimConfig, SimDevice};
use crate::error::{Error, Result};
use crate::format::Mode;
use std::path::PathBuf;
use std::sync::Arc;

/// One device of a pool: a path (file or block device) or an already-open device.
#[derive(Clone)]
pub enum DeviceSpec {
    /// A file or raw block device; `create_size` creates a file of that size if it does not exist.
    Path {
        /// Where it is.
        path: PathBuf,
        /// Size for a file that does not exist yet.
        create_size: Option<u64>,
    },
    /// A device object (e.g. a [`crate::device::MemDevice`] in tests).
    Device(Arc<dyn Device>),
}

impl std::fmt::Debug for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Path { path, create_size } => {
                write!(f, "{}{:?}", path.display(), create_size)
            }
            DeviceSpec::Device(d) => write!(f, "{}", d.info().path),
        }
    }
}

impl DeviceSpec {
    /// A path to an existing file or block device.
    pub fn path(p: impl Into<PathBuf>) -> DeviceSpec {
        DeviceSpec::Path {
            path: p.into(),
            create_size: None,
        }
    }

    /// A file path, created with `size` bytes if it does not exist.
    pub fn file(p: impl Into<PathBuf>, size: u64) -> DeviceSpec {
        DeviceSpec::Path {
            path: p.into(),
            create_size: Some(size),
        }
    }

    /// A device named on a command line: `sim:PROFILE:SIZE[:OPTION...]` builds
    /// an emulated drive (see [`crate::device::SimConfig::parse`]); anything
    /// else is a file or block device path, created with `create_size` bytes
    /// if given and missing.
    pub fn parse(arg: &str, create_size: Option<u64>) -> Result<DeviceSpec> {
        if SimConfig::is_sim_path(arg) {
            let dev = SimDevice::open(arg)
                .map_err(|e| Error::InvalidConfig(format!("emulated device {arg}: {e}")))?;
            return Ok(DeviceSpec::Device(Arc::new(dev)));
        }
        Ok(DeviceSpec::Path {
            path: PathBuf::from(arg),
            create_size,
        })
    }

    pub(crate) fn open(&self, io: &IoChoice) -> Result<Arc<dyn Device>> {
        match self {
            DeviceSpec::Device(d) => Ok(d.clone()),
            DeviceSpec::Path { path, create_size } => {
                let opts = OpenOptions {
                    create_size: *create_size,
                    force_pread: io.force_pread,
                    force_buffered: io.force_buffered,
                };
                let dev = FileDevice::open(path, &opts)
                    .map_err(|e| Error::io(&path.display().to_string(), "opening the device", e))?;
                Ok(Arc::new(dev))
            }
        }
    }
}

/// I/O mechanism overrides (normally automatic).
#[derive(Clone, Debug, Default)]
pub struct IoChoice {
    /// Use pread/pwrite even if io_uring works.
    pub force_pread: bool,
    /// Do not use `O_DIRECT` (testing only: data then goes through the page cache).
    pub force_buffered: bool,
}

/// The devices of a pool and, for `create`, its geometry.
#[derive(Clone, Debug, Default)]
pub struct PoolConfig {
    /// Fast-tier device (SCM-class write pad). `None` = capacity-only or SCM-only.
    pub fast: Option<DeviceSpec>,
    /// Capacity-tier devices (at least one).
    pub capacity: Vec<DeviceSpec>,
    /// Configuration family; `None` = derived (fast given → tiered; capacity media SCM → scm-only; else capacity-only).
    pub mode: Option<Mode>,
    /// Segment size in bytes (default: 256 KiB, or 8 KiB for scm-only).
    pub segment_size: Option<u32>,
    /// LBand size in bytes (default: 64 MiB, at least 16 segments, at most 1/16 of the smallest capacity device).
    pub band_size: Option<u64>,
    /// Write pad size on the fast tier (default: 1/4 of the fast device, at most 1 GiB, at least 32 MiB).
    pub pad_size: Option<u64>,
    /// Size of one index checkpoint slot (default: the rest of the fast device split in two;
    /// without a fast tier, 1/32 of the first capacity device each).
    pub checkpoint_size: Option<u64>,
    /// Indirection unit to align segments to (default: from the media: 64 KiB for QLC, else 4 KiB).
    pub iu: Option<u32>,
    /// Override of the capacity media class recorded at create.
    pub capacity_media: Option<Media>,
    /// I/O mechanism overrides.
    pub io: IoChoice,
    /// Format version to create (default: the newest, 4). Versions 3 and 2
    /// write older formats (version 3 stores seqs less compactly after GC
    /// moves; version 2 has the larger record), for pools an older build
    /// must still open; `open` always uses the pool's own version.
    pub format_version: Option<u32>,
}

impl PoolConfig {
    /// A tiered pool: `fast` as write pad, `capacity` as the log.
    pub fn tiered(fast: DeviceSpec, capacity: DeviceSpec) -> PoolConfig {
        PoolConfig {
            fast: Some(fast),
            capacity: vec![capacity],
            ..Default::default()
        }
    }

    /// A pool with a capacity device only.
    pub fn capacity_only(capacity: DeviceSpec) -> PoolConfig {
        PoolConfig {
            capacity: vec![capacity],
            mode: Some(Mode::CapacityOnly),
            ..Default::default()
        }
    }

    /// A pool on one SCM device.
    pub fn scm_only(dev: DeviceSpec) -> PoolConfig {
        PoolConfig {
            capacity: vec![dev],
            mode: Some(Mode::ScmOnly),
            ..Default::default()
        }
    }
}

/// How GC picks the band to empty (design.md §9.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GcPolicy {
    /// The default: [`GcPolicy::CostBenefit`] where GC moves fill a band of
    /// their own (`Options::gc_separate` on a tiered pool), where it cut
    /// zipfian churn's write amplification by 40 %; [`GcPolicy::Greedy`]
    /// elsewhere, where cost-benefit measured no better (docs/benchmarks.md,
    /// "Overwrite churn", "Hot/cold separation").
    #[default]
    Auto,
    /// The band that wins back the most space, the oldest on a tie.
    Greedy,
    /// LFS's cost-benefit: the band with the highest `(1 − u) · age / (1 + u)`,
    /// `u` its live share, `age` the bands written since it was sealed. Space
    /// freed in a band whose records have stayed put is worth more: it stays
    /// free, while a young band's records are still dying on their own.
    CostBenefit,
}

/// Whether GC TRIMs the bands it frees (design.md §9.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrimPolicy {
    /// TRIM on drives (a block device, the emulator, a memory device); skip it
    /// on a pool file in a host file system (and on a loop device over one).
    /// There the TRIM is a hole punch, which costs twice: on ext4 it waits
    /// for every direct I/O in flight on the file and holds new ones off, so
    /// gets stall behind it (reads while GC ran: p99.9 2.3–2.9 ms with it,
    /// 0.8–1.2 ms without, docs/benchmarks.md "Overwrite churn"), and it
    /// gives back blocks `create` reserved, so rewriting the band later needs
    /// the host file system to have free space again. What it gains reaches a
    /// drive only if the host file system passes discards on (`-o discard`
    /// or `fstrim`); for a QLC drive under a pool file, choose `Always`.
    #[default]
    Auto,
    /// TRIM every freed band, whatever the device (hole punch on a file: gives
    /// the host file system the space back while the band is free).
    Always,
    /// Never TRIM: the drive moves dead bands' pages in its own GC.
    Never,
}

impl TrimPolicy {
    /// Does this policy TRIM freed bands on the device described by `info`?
    pub fn trims(self, info: &crate::device::DeviceInfo) -> bool {
        match self {
            TrimPolicy::Auto => !info.hole_punch_discard,
            TrimPolicy::Always => true,
            TrimPolicy::Never => false,
        }
    }
}

/// Runtime tuning; none of it is persisted.
#[derive(Clone, Debug)]
pub struct Options {
    /// Write an index checkpoint after this many bytes reach the capacity tier (0 = only at close).
    pub checkpoint_interval: u64,
    /// Start GC when free bands drop below this many (0 = automatic: bands/32 within
    /// [5, 16], at most half the bands; design.md §9.1). 1 and 2 are refused
    /// ([`Options::validate`]): at or below the user writes' reserve, GC would
    /// start only once writers wait.
    pub gc_low_bands: u32,
    /// How GC picks the band to empty.
    pub gc_policy: GcPolicy,
    /// Share of wall time a background GC pass spends working while free
    /// bands are not short (at least half the low watermark, and more than one
    /// band above the user writes' reserve): after each
    /// segment it reads and moves, it rests `worked × (1/duty − 1)`, at most
    /// 50 ms. Its reads and moves then reach the capacity device spread out
    /// rather than back to back, so gets queue behind fewer of them. 1.0 =
    /// no rest. Default 0.5: in four interleaved pairs of churn demo runs on
    /// the reference machine, reads while GC ran had a p99 16–33 % and a
    /// p99.9 12–22 % lower than at 1.0 in every pair, with the same overwrite
    /// rate and write amplification (docs/benchmarks.md, "Overwrite churn").
    /// GC never rests once free bands are short or while a writer waits for
    /// space. A paced pass holds GC's lock longer, and an iterator
    /// or `check` opened meanwhile waits for it.
    pub gc_duty: f64,
    /// Tiered pools: GC moves fill an open band of their own instead of
    /// sharing the user writes' one (hot/cold separation, design.md §9.5).
    /// Records that survived GC tend to be cold, so bands of moves stay
    /// full while user bands die young, and GC then writes less under skewed
    /// overwrites — with cost-benefit victims, which [`GcPolicy::Auto`] picks
    /// then: greedy victims are young bands, and greedy GC gains less.
    /// Default on: zipfian churn's host write amplification 2.8 against 4.7,
    /// uniform churn's unchanged (docs/benchmarks.md, "Hot/cold
    /// separation"). The cost: a second open band, and one band fewer free.
    /// Ignored by capacity-only and scm-only pools.
    pub gc_separate: bool,
    /// With `gc_separate`: a user write of a key whose newest copy is in a
    /// band sealed more than half the pool's bands ago goes into the GC
    /// moves' band rather than the user writes' one, while that band is open
    /// with room (cold writes never open one). A key left alone that
    /// long tends to stay alone, like the records GC moves (design.md §9.5).
    /// Default on: under zipfian churn it cut host write amplification by
    /// 3.8 % (2.626 against 2.731), under uniform churn, where nothing is
    /// cold, it cost 0.9 % (3.530 against 3.500; docs/benchmarks.md, "Cold
    /// user writes"). Real workloads are skewed.
    pub cold_user_writes: bool,
    /// The age, in bands opened (by either write stream) since its band was
    /// sealed, past which a key's newest copy makes a user write of it cold
    /// (`cold_user_writes`); 0 (the default) = half the pool's bands. Tests
    /// set a small value to reach cold writes in a small pool.
    pub cold_age_bands: u64,
    /// Tiered pools: a lone put of a key whose newest record is still in an
    /// open segment in DRAM, and of the same encoded length, is written
    /// over that record in the buffer instead of being appended (it still
    /// goes to the pad first, like every write). A hot key overwritten many
    /// times while one segment fills then reaches the capacity tier once,
    /// the way a memtable absorbs overwrites (design.md §4.10). The `User`
    /// segment closed last stays in DRAM, absorbable, until the next one
    /// closes. Default on:
    /// under zipfian churn it absorbed 39 % of the overwrites and cut host
    /// write amplification by 27 % (1.918 against 2.627); under uniform
    /// churn it absorbs almost nothing and changed nothing measurable
    /// (docs/benchmarks.md, "Absorbed overwrites"). Ignored by
    /// capacity-only and scm-only pools (scm-only has its own in-place
    /// updates, §4.9).
    pub absorb_overwrites: bool,
    /// With `absorb_overwrites`: how long the held segment (the `User`
    /// segment closed last) may wait in DRAM for the next one to close
    /// before the maintenance thread sends it to the writer. Until then its
    /// records are on the pad only. Default 1 s: under load the next segment
    /// closes within milliseconds; a trickle of writes absorbs less, not
    /// nothing (the open segment still absorbs).
    pub absorb_hold: std::time::Duration,
    /// Largest group-commit batch in bytes.
    pub max_batch_bytes: usize,
    /// How long a writer waiting for another's group commit may spin (2 µs
    /// or less busily, then yielding the CPU between looks) before it sleeps; it
    /// spins only while fewer writers wait than there are CPUs and at most
    /// twice as many are writing. A commit to a fast tier takes a few µs,
    /// less than a sleep and wake-up cost on a VM. Default 50 µs: a
    /// two-thread fill ran 2.05× as fast with 11 % less CPU per put, 16
    /// threads were unchanged (docs/benchmarks.md, "Spinning group commit
    /// waits"). Zero = sleep at once. Tiered pools only: without a write
    /// pad the leader waits for the capacity device, far longer.
    pub commit_spin: std::time::Duration,
    /// Most bytes of segment writes the writer keeps in flight on one capacity
    /// device (0 = no limit; a segment larger than this still goes alone). A
    /// 4 KiB get that reaches the device behind a queue of large writes waits
    /// for the queue: on the reference machine, fio reads at QD1 beside a
    /// writer of 93 MB/s had p99.9 1.81 ms when the writes came in bursts of
    /// sixteen 256 KiB at once and 0.23 ms when the same bursts went one write
    /// at a time (docs/benchmarks.md, "Overwrite churn"). GC's moves arrive in
    /// such bursts. The cost is peak capacity-tier bandwidth: 1.2 GB/s at one
    /// 256 KiB write in flight there, against 3.4 GB/s at sixteen. Default 0:
    /// in the engine's churn demo 256 KiB changed nothing measurable (its
    /// bursts are short), so peak bandwidth is kept.
    pub writer_inflight_bytes: usize,
    /// TRIM the slots of each band GC frees (a hole punch in a pool file,
    /// BLKDISCARD on a block device)? Default [`TrimPolicy::Auto`]: on drives
    /// yes, since a QLC drive that is told nothing must move the dead bands'
    /// pages in its own GC; on pool files no.
    pub trim_freed_bands: TrimPolicy,
    /// Expected number of keys (pre-sizes the index).
    pub expected_keys: usize,
    /// Record latency histograms (a few tens of ns per operation).
    pub histograms: bool,
    /// Run background GC (tests may turn it off and call [`crate::Db::gc_once`]).
    pub background_gc: bool,
    /// Write a checkpoint on close.
    pub checkpoint_on_close: bool,
}

impl Options {
    /// Refuse settings the engine cannot run with: checked by `Db::create`
    /// and `Db::open` before any device is touched.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.gc_low_bands == 1 || self.gc_low_bands == 2 {
            return bad(format!(
                "gc_low_bands {} is at or below the 2 free bands user writes never take: \
                 background GC would start only once writers wait for space; use 0 \
                 (automatic) or at least 3",
                self.gc_low_bands
            ));
        }
        if !(self.gc_duty > 0.0 && self.gc_duty <= 1.0) {
            return bad(format!(
                "gc_duty {} is not a share above 0 and at most 1",
                self.gc_duty
            ));
        }
        if self.max_batch_bytes == 0 {
            return bad("max_batch_bytes 0 leaves no room for a group commit".into());
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            checkpoint_interval: 4 << 30,
            gc_low_bands: 0,
            gc_policy: GcPolicy::default(),
            gc_duty: 0.5,
            gc_separate: true,
            cold_user_writes: true,
            cold_age_bands: 0,
            absorb_overwrites: true,
            absorb_hold: std::time::Duration::from_secs(1),
            max_batch_bytes: 1 << 20,
            commit_spin: std::time::Duration::from_micros(50),
            writer_inflight_bytes: 0,
            trim_freed_bands: TrimPolicy::Auto,
            expected_keys: 0,
            histograms: true,
            background_gc: true,
            checkpoint_on_close: true,
        }
    }
}
