//! Where a workload run (`masse demo`, `masse bench`) puts its pool: the devices given
//! on the command line, or new files (the fast tier in /dev/shm, the capacity tier in a
//! directory), sized for the data, and removed at the end unless kept.

use crate::error::{io_err, CliError, CliResult};
use crate::pool::{create_pool, GeometryArgs, ModeArg, PoolArgs};
use masse::{Db, Options};
use std::path::{Path, PathBuf};

/// What `plan` needs to know.
pub struct PlanArgs<'a> {
    pub pool: &'a PoolArgs,
    pub geo: &'a GeometryArgs,
    /// Directory for new files (default: a temporary directory).
    pub dir: Option<&'a Path>,
    /// Target share of the capacity tier holding live data.
    pub utilization: Option<f64>,
    /// Prefix of temporary directories, e.g. "masse-demo-".
    pub prefix: &'a str,
}

/// Files of the demo pool and what to remove at the end.
pub struct Place {
    pub fast: Option<PathBuf>,
    pub caps: Vec<PathBuf>,
    pub fast_size: Option<u64>,
    pub cap_size: u64,
    /// Segment and band sizes chosen by --utilization.
    pub segment: Option<u64>,
    pub band: Option<u64>,
    /// Temporary directories made for the demo (removed on drop unless kept).
    temp_dirs: Vec<tempfile::TempDir>,
    /// Files made in a user-given --dir (removed at the end unless kept).
    dir_files: Vec<PathBuf>,
    /// Whether the devices were given explicitly (then nothing is removed).
    pub explicit: bool,
    pub keep: bool,
}

impl Place {
    /// Keep everything on disk and return the paths to print.
    pub fn keep(&mut self) {
        self.keep = true;
        for d in &mut self.temp_dirs {
            d.disable_cleanup(true);
        }
    }

    /// The pool's files, fast tier first, separated by spaces (to print).
    pub fn files(&self) -> String {
        let files: Vec<String> = self
            .fast
            .iter()
            .chain(self.caps.iter())
            .map(|p| p.display().to_string())
            .collect();
        files.join(" ")
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.keep {
            for f in &self.dir_files {
                let _ = std::fs::remove_file(f);
            }
        }
    }
}

pub fn shm_free() -> Option<u64> {
    let p = std::ffi::CString::new("/dev/shm").ok()?;
    // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(p.as_ptr(), &mut st) };
    (r == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

pub fn default_base_dir() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/var/tmp"),
    }
}

fn temp_dir_in(base: &Path, prefix: &str) -> CliResult<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .map_err(|e| io_err("cannot create a temporary directory in", base, e))
}

pub const MIB: u64 = 1 << 20;

/// Segments a band must hold at least (the engine refuses fewer).
const MIN_BAND_SEGS: u64 = 8;

pub fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Sizes that make `data` bytes about `util` of the capacity tier.
struct Sizing {
    cap: u64,
    /// Segment and band sizes chosen for the demo (when not given on the command line).
    pub segment: Option<u64>,
    pub band: Option<u64>,
}

/// Size the capacity file (and, unless given, segments and bands) so that `data` bytes
/// are about `util` of the capacity tier, with enough bands (about 128) that GC's free-band
/// watermark (bands/32 within [5, 16]) stays a small share of it.
fn size_for_utilization(data: u64, util: f64, geo: &GeometryArgs, has_fast: bool) -> Sizing {
    let target = (data as f64 / util).ceil() as u64;
    let iu = geo.iu.unwrap_or(4096).max(4096);
    let seg = match geo.segment_size {
        Some(s) => s,
        None => {
            // Smaller segments for small data sets, so there can be 64+ bands of
            // 8+ segments (the least a band may hold, pool.rs).
            let mut s: u64 = 256 << 10;
            while s > (8 << 10).max(iu) && target / (MIN_BAND_SEGS * s) < 64 {
                s /= 2;
            }
            s
        }
    };
    let band = geo.band_size.unwrap_or_else(|| {
        let k = (target / 128 / seg).clamp(MIN_BAND_SEGS, (64 * MIB / seg).max(MIN_BAND_SEGS));
        k * seg + iu
    });
    let payload = ((band.saturating_sub(iu)) / seg).max(1) * seg;
    let nbands = target.div_ceil(payload).max(4);
    let usable = nbands * band;
    // Space before band 0: 1 MiB with a fast tier, else two checkpoint slots too.
    let meta = |cap: u64| -> u64 {
        if has_fast {
            round_up(16384, MIB.max(iu))
        } else {
            let slot = geo.checkpoint_size.unwrap_or(cap / 32) / 4096 * 4096;
            round_up(16384 + 2 * slot, MIB.max(iu))
        }
    };
    let mut cap = usable + meta(usable);
    for _ in 0..8 {
        cap = usable + meta(cap);
    }
    Sizing {
        cap: round_up(cap, 4096),
        segment: geo.segment_size.is_none().then_some(seg),
        band: geo.band_size.is_none().then_some(band),
    }
}

/// Where the pool of a workload run (`demo`, `bench`) lives: the devices given, or new
/// files in `dir` (default: a temporary directory) with the fast tier in /dev/shm.
pub fn plan(w: &PlanArgs, data: u64) -> CliResult<Place> {
    let (pool, geo) = (w.pool, w.geo);
    let fast_default = 1u64 << 30;
    let want_fast = match geo.mode {
        Some(ModeArg::CapacityOnly) | Some(ModeArg::ScmOnly) => false,
        Some(ModeArg::Tiered) | None => true,
    };
    let has_fast = if pool.capacity.is_empty() {
        want_fast
    } else {
        pool.fast.is_some()
    };
    let (cap_size, segment, band) = match (pool.capacity_size, w.utilization) {
        (Some(s), _) => (s, None, None),
        (None, Some(u)) => {
            let z = size_for_utilization(data, u, geo, has_fast);
            (z.cap, z.segment, z.band)
        }
        (None, None) => (round_up((4 * data).max(256 * MIB), MIB), None, None),
    };
    if !pool.capacity.is_empty() {
        // Existing devices keep their geometry defaults: nothing was sized for them.
        let sized = pool.capacity.iter().all(|c| !c.exists());
        let (segment, band) = if sized { (segment, band) } else { (None, None) };
        return Ok(Place {
            fast: pool.fast.clone(),
            caps: pool.capacity.clone(),
            fast_size: Some(pool.fast_size.unwrap_or(fast_default)),
            cap_size,
            segment,
            band,
            temp_dirs: Vec::new(),
            dir_files: Vec::new(),
            explicit: true,
            keep: true,
        });
    }
    if pool.fast.is_some() {
        return Err(CliError::new(
            "--fast needs --capacity too (or give neither and the demo makes temporary files)",
        ));
    }
    let mut temp_dirs = Vec::new();
    let mut dir_files = Vec::new();
    let dir = match w.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| io_err("cannot create directory", d, e))?;
            d.to_path_buf()
        }
        None => {
            let t = temp_dir_in(&default_base_dir(), w.prefix)?;
            let p = t.path().to_path_buf();
            temp_dirs.push(t);
            p
        }
    };
    let cap = dir.join("capacity.masse");
    if w.dir.is_some() && !cap.exists() {
        dir_files.push(cap.clone());
    }
    let fast_size = pool.fast_size.unwrap_or(fast_default);
    let fast = if want_fast {
        let shm = Path::new("/dev/shm");
        let f = if shm.is_dir() && shm_free().is_some_and(|free| free >= fast_size + 64 * MIB) {
            let t = temp_dir_in(shm, w.prefix)?;
            let f = t.path().join("fast.masse");
            temp_dirs.push(t);
            f
        } else {
            let f = dir.join("fast.masse");
            if w.dir.is_some() && !f.exists() {
                dir_files.push(f.clone());
            }
            f
        };
        Some(f)
    } else {
        None
    };
    Ok(Place {
        fast,
        caps: vec![cap],
        fast_size: Some(fast_size),
        cap_size,
        segment,
        band,
        temp_dirs,
        dir_files,
        explicit: false,
        keep: false,
    })
}

impl Place {
    /// Format the planned pool. Devices given explicitly keep their size unless
    /// --fast-size/--capacity-size say otherwise; new files get the planned sizes.
    pub fn create(
        &self,
        given: &PoolArgs,
        geo: &GeometryArgs,
        force: bool,
        opts: Options,
    ) -> CliResult<Db> {
        let (fast_size, cap_size) = if self.explicit {
            let missing_fast = self.fast.as_ref().is_some_and(|f| !f.exists());
            let missing_cap = self.caps.iter().any(|c| !c.exists());
            (
                given
                    .fast_size
                    .or(if missing_fast { self.fast_size } else { None }),
                given.capacity_size.or(if missing_cap {
                    Some(self.cap_size)
                } else {
                    None
                }),
            )
        } else {
            (self.fast_size, Some(self.cap_size))
        };
        let pool = PoolArgs {
            fast: self.fast.clone(),
            capacity: self.caps.clone(),
            fast_size,
            capacity_size: cap_size,
            pread: given.pread,
            buffered: given.buffered,
        };
        let mut geo = geo.clone();
        geo.segment_size = geo.segment_size.or(self.segment);
        geo.band_size = geo.band_size.or(self.band);
        let (cfg, new_files) = pool.create_config(&geo, None, None)?;
        create_pool(&cfg, &new_files, force, opts)
    }

    /// The same devices and sizes, to format again; owns no temporary files (this one does).
    pub fn again(&self) -> Place {
        Place {
            fast: self.fast.clone(),
            caps: self.caps.clone(),
            fast_size: self.fast_size,
            cap_size: self.cap_size,
            segment: self.segment,
            band: self.band,
            temp_dirs: Vec::new(),
            dir_files: Vec::new(),
            explicit: self.explicit,
            keep: true,
        }
    }

    /// The pool's devices as `PoolArgs`, to open it again.
    pub fn pool_args(&self, given: &PoolArgs) -> PoolArgs {
        PoolArgs {
            fast: self.fast.clone(),
            capacity: self.caps.clone(),
            fast_size: None,
            capacity_size: None,
            pread: given.pread,
            buffered: given.buffered,
        }
    }
}
