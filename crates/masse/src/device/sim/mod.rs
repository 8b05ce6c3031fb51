//! [`SimDevice`]: an emulated SSD (3D XPoint, Z-NAND, TLC or QLC NAND) with a
//! flash translation layer, a time model and fault injection.
//!
//! Real Optane and QLC drives are rare; the emulator lets every user and every
//! test see what the engine does to them, inside the drive: NAND bytes written
//! per host byte (device write amplification), erases, GC time, and read
//! latency when reads queue behind programs and erases on the same die.
//!
//! - Data is kept sparsely by logical 4 KiB block (only written blocks use
//!   memory); the FTL ([`ftl`]) keeps the mapping per indirection unit.
//! - Time ([`TimeMode`]): in **real** mode each command returns at its modelled
//!   completion time (the caller sleeps), so engines and benchmarks see
//!   realistic latency, throughput and tails; in **virtual** mode nothing
//!   sleeps, the device's clock advances by each command's modelled latency as
//!   if one caller issued them one after another, and results are
//!   deterministic.
//! - Faults ([`FaultConfig`]) are drawn from a seeded generator.
//!
//! A device path `sim:PROFILE:SIZE[:OPTION...]` names one, e.g.
//! `sim:qlc:64GiB`, `sim:optane:4GiB:time=virtual`,
//! `sim:qlc:8GiB:seed=7:bitflip=1e-6`. See [`SimConfig::parse`].

pub mod faults;
pub mod ftl;
pub mod profile;
mod store;
mod timing;

pub use faults::{FaultConfig, FaultCounters};
pub use ftl::FtlCounters;
pub use profile::{Profile, ProfileKind};

use super::{
    check_aligned, check_range, Backend, ClaimError, Device, DeviceClaim, DeviceId, DeviceInfo,
    InUse, IoCounters, IO_ALIGN,
};
use faults::{block_flip_probability, Rng};
use ftl::Ftl;
use hdrhistogram::Histogram;
use parking_lot::{Mutex, RwLock};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use store::{Store, BLOCK};

/// How the emulator's clock relates to the wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TimeMode {
    /// Commands complete at their modelled time: the caller waits.
    Real,
    /// Nothing waits; a device clock advances by each command's latency.
    Virtual,
}

/// Everything that defines an emulated drive.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimConfig {
    /// Drive class.
    pub profile: ProfileKind,
    /// User-visible capacity in bytes (rounded up to 4 KiB).
    pub capacity: u64,
    /// Clock mode (default real).
    pub time: TimeMode,
    /// Random faults (default none).
    pub faults: FaultConfig,
    /// Override of the profile's indirection unit.
    pub iu: Option<u32>,
    /// Override of the profile's over-provisioning (fraction of capacity).
    pub op: Option<f64>,
    /// Override of the erase block size per die.
    pub erase_block: Option<u64>,
    /// Keep no data (reads return zeros): for FTL and timing studies on
    /// drives larger than memory.
    pub nodata: bool,
    /// Name reported as the device path (default: the canonical spec).
    pub name: Option<String>,
}

/// Parse a size such as `4096`, `64K`, `1.5GiB`, `8G` (binary units).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(num_end);
    let unit = unit.trim();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(unit);
    let mul: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return None,
    };
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let bytes = v * mul as f64;
    if bytes > u64::MAX as f64 / 2.0 {
        return None;
    }
    Some(bytes.round() as u64)
}

fn fmt_size(b: u64) -> String {
    for (s, u) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << s && b.is_multiple_of(1 << s) {
            return format!("{}{u}", b >> s);
        }
    }
    format!("{b}")
}

impl SimConfig {
    /// A drive of `profile` with `capacity` bytes, real time, no faults.
    pub fn new(profile: ProfileKind, capacity: u64) -> SimConfig {
        SimConfig {
            profile,
            capacity,
            time: TimeMode::Real,
            faults: FaultConfig::default(),
            iu: None,
            op: None,
            erase_block: None,
            nodata: false,
            name: None,
        }
    }

    /// The same, in virtual time.
    pub fn virtual_time(mut self) -> SimConfig {
        self.time = TimeMode::Virtual;
        self
    }

    /// The same, with these faults.
    pub fn with_faults(mut self, f: FaultConfig) -> SimConfig {
        self.faults = f;
        self
    }

    /// True when `s` names an emulated device (starts with `sim:`).
    pub fn is_sim_path(s: &str) -> bool {
        s.starts_with("sim:")
    }

    /// Parse `sim:PROFILE:SIZE[:OPTION]...`. Profiles: `optane`, `znand`,
    /// `tlc`, `qlc`. Options: `time=real|virtual`, `seed=N`,
    /// `read_err=P`, `write_err=P`, `torn=P` (probabilities per command),
    /// `bitflip=P` (per stored bit), `iu=SIZE`, `op=FRACTION`, `eb=SIZE`
    /// (erase block per die), `nodata`.
    pub fn parse(spec: &str) -> Result<SimConfig, String> {
        let usage = "expected sim:PROFILE:SIZE[:OPTION...], e.g. sim:qlc:64GiB or \
                     sim:optane:4GiB:time=virtual:seed=7 (profiles: optane, znand, tlc, qlc)";
        let rest = spec
            .strip_prefix("sim:")
            .ok_or_else(|| format!("{spec:?}: {usage}"))?;
        let mut parts = rest.split(':');
        let prof = parts.next().unwrap_or("");
        let profile = ProfileKind::parse(prof)
            .ok_or_else(|| format!("{spec:?}: unknown profile {prof:?}; {usage}"))?;
        let size = parts.next().unwrap_or("");
        let capacity = parse_size(size)
            .filter(|&c| c >= 1 << 20)
            .ok_or_else(|| format!("{spec:?}: bad size {size:?} (at least 1MiB); {usage}"))?;
        let mut c = SimConfig::new(profile, capacity);
        for opt in parts {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            let prob = |v: &str| -> Result<f64, String> {
                v.parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("{spec:?}: {k}={v:?} must be a probability in [0, 1]"))
            };
            let size = |v: &str| -> Result<u64, String> {
                parse_size(v).ok_or_else(|| format!("{spec:?}: {k}={v:?} is not a size"))
            };
            match k {
                "time" => {
                    c.time = match v {
                        "real" => TimeMode::Real,
                        "virtual" | "virt" => TimeMode::Virtual,
                        _ => return Err(format!("{spec:?}: time={v:?} (real or virtual)")),
                    }
                }
                "seed" => {
                    c.faults.seed = v
                        .parse()
                        .map_err(|_| format!("{spec:?}: seed={v:?} is not an integer"))?
                }
                "read_err" | "read_error" => c.faults.read_error = prob(v)?,
                "write_err" | "write_error" => c.faults.write_error = prob(v)?,
                "torn" | "torn_write" => c.faults.torn_write = prob(v)?,
                "bitflip" | "bit_flip" => c.faults.bitflip = prob(v)?,
                "iu" => {
                    let iu = size(v)?;
                    if !iu.is_power_of_two() || !(4096..=1 << 20).contains(&iu) {
                        return Err(format!(
                            "{spec:?}: iu={v} must be a power of two, 4KiB..1MiB"
                        ));
                    }
                    c.iu = Some(iu as u32);
                }
                "op" => {
                    c.op = Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|x| (0.0..=4.0).contains(x))
                            .ok_or_else(|| {
                                format!("{spec:?}: op={v:?} (a fraction such as 0.07)")
                            })?,
                    )
                }
                "eb" | "erase_block" => c.erase_block = Some(size(v)?),
                "nodata" => c.nodata = true,
                _ => return Err(format!("{spec:?}: unknown option {k:?}; {usage}")),
            }
        }
        c.name = Some(spec.to_string());
        Ok(c)
    }

    /// Canonical spec string (round-trips through [`SimConfig::parse`]).
    pub fn spec(&self) -> String {
        let mut s = format!("sim:{}:{}", self.profile.name(), fmt_size(self.capacity));
        if self.time == TimeMode::Virtual {
            s.push_str(":time=virtual");
        }
        let f = &self.faults;
        if f.seed != 0 {
            s.push_str(&format!(":seed={}", f.seed));
        }
        for (k, v) in [
            ("read_err", f.read_error),
            ("write_err", f.write_error),
            ("torn", f.torn_write),
            ("bitflip", f.bitflip),
        ] {
            if v > 0.0 {
                s.push_str(&format!(":{k}={v}"));
            }
        }
        if let Some(iu) = self.iu {
            s.push_str(&format!(":iu={}", fmt_size(iu as u64)));
        }
        if let Some(op) = self.op {
            s.push_str(&format!(":op={op}"));
        }
        if let Some(eb) = self.erase_block {
            s.push_str(&format!(":eb={}", fmt_size(eb)));
        }
        if self.nodata {
            s.push_str(":nodata");
        }
        s
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LatencySummary {
    /// Commands measured.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// 99.99th percentile.
    pub p9999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

fn summary(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        count: h.len(),
        mean_ns: h.mean(),
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        p9999_ns: h.value_at_quantile(0.9999),
        max_ns: h.max(),
    }
}

/// A snapshot of what happened inside an emulated drive.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SimStats {
    /// The device's spec string.
    pub spec: String,
    /// FTL counters (host and NAND bytes, erases, GC).
    pub ftl: FtlCounters,
    /// Device write amplification (NAND bytes / host bytes written).
    pub waf: f64,
    /// Injected faults per class.
    pub faults: FaultCounters,
    /// Modelled read latency (command arrival to data at the host).
    pub read_latency: LatencySummary,
    /// Modelled write latency (arrival to acknowledgement).
    pub write_latency: LatencySummary,
    /// Least and most erased block.
    pub erase_min: u32,
    /// Most erased block.
    pub erase_max: u32,
    /// Erase blocks in the drive.
    pub blocks: u32,
    /// Physical NAND bytes (0 for write-in-place media).
    pub physical_bytes: u64,
    /// Bytes of data held in memory.
    pub resident_bytes: u64,
    /// The device clock (ns).
    pub now_ns: u64,
}

struct State {
    ftl: Ftl,
    rng: Rng,
    faults: FaultConfig,
    flip_block_p: f64,
    fcount: FaultCounters,
    vclock: u64,
    read_hist: Histogram<u64>,
    write_hist: Histogram<u64>,
}

struct Inner {
    cfg: SimConfig,
    profile: Profile,
    info: DeviceInfo,
    counters: IoCounters,
    store: Store,
    state: Mutex<State>,
    /// I/O holds it shared; a power cut holds it exclusively.
    epoch: RwLock<()>,
    start: Instant,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    /// Writes still allowed before every write fails (u64::MAX = unlimited).
    write_budget: AtomicU64,
    /// Set while an open pool uses the drive (shared by clones).
    in_use: InUse,
}

/// An emulated SSD. Cloning yields another handle on the same drive, so a test
/// can keep one, drop the engine after a power cut and reopen.
#[derive(Clone)]
pub struct SimDevice {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimDevice({})", self.inner.info.path)
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} (emulated drive fault)"))
}

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 1000 s at 3 significant digits; the bounds are constants.
    Histogram::new_with_bounds(1, 1_000_000_000_000, 3)
        .expect("constant histogram bounds are valid")
}

/// The erase block per die of a new drive of `capacity` bytes, checked to be
/// small enough to model. Small drives get smaller erase blocks so every die
/// has enough of them for GC to behave as on a full-size drive (≥ 32 blocks
/// per die); a scaled-down erase block keeps the profile's erase time per
/// byte, so erases take the same share of die time as on the full-size drive.
fn erase_block(cfg: &SimConfig, profile: &mut Profile, capacity: u64) -> io::Result<u64> {
    let iu = profile.iu as u64;
    let dies = profile.dies() as u64;
    let mut eb = cfg.erase_block.unwrap_or(profile.erase_block).max(iu);
    eb = eb.div_ceil(iu) * iu;
    if cfg.erase_block.is_none() && !profile.in_place {
        let raw = capacity as f64 * (1.0 + profile.op);
        while eb / 2 >= iu * 4 && raw / ((eb * dies) as f64) < 32.0 {
            eb /= 2;
        }
    }
    let logical_ius = capacity.div_ceil(iu);
    let phys_est = (logical_ius as f64 * (1.0 + profile.op) * 1.1) as u64 + 64 * dies * (eb / iu);
    if phys_est >= u32::MAX as u64 / 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("emulated drive of {capacity} bytes with a {iu}-byte IU is too large to model"),
        ));
    }
    if !profile.in_place && profile.erase_block > 0 && eb < profile.erase_block {
        profile.t_erase =
            (profile.t_erase as u128 * eb as u128 / profile.erase_block as u128) as u64;
    }
    Ok(eb)
}

/// What a drive built from `cfg` and `profile` reports about itself: the
/// profile's IU as block, optimal-I/O and discard unit, and its reclaim unit
/// (an erase block on every die).
fn sim_info(cfg: &SimConfig, profile: &Profile, capacity: u64, eb: u64) -> DeviceInfo {
    DeviceInfo {
        path: cfg.name.clone().unwrap_or_else(|| cfg.spec()),
        identity: DeviceId::unique(),
        volatile: false,
        capacity,
        logical_block_size: IO_ALIGN as u32,
        physical_block_size: profile.iu.max(IO_ALIGN as u32),
        optimal_io_size: if profile.in_place { 0 } else { profile.iu },
        discard_granularity: profile.iu,
        media: profile.media,
        backend: Backend::Memory,
        direct_io: true,
        block_device: false,
        hole_punch_discard: false,
        rotational: false,
        indirection_unit: profile.iu,
        reclaim_unit: if profile.in_place {
            0
        } else {
            eb * profile.dies() as u64
        },
    }
}

/// Waits shorter than this spin (yielding) instead of sleeping.
const SPIN_NS: u64 = 120_000;

thread_local! {
    static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl SimDevice {
    /// Build a drive.
    pub fn new(cfg: SimConfig) -> io::Result<SimDevice> {
        let mut profile = Profile::of(cfg.profile);
        if let Some(iu) = cfg.iu {
            profile.iu = iu;
            profile.program_unit = profile.program_unit.max(iu);
        }
        if let Some(op) = cfg.op {
            profile.op = op;
        }
        let capacity = cfg.capacity.div_ceil(IO_ALIGN as u64) * IO_ALIGN as u64;
        if capacity < 1 << 20 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an emulated drive needs at least 1 MiB",
            ));
        }
        let eb = erase_block(&cfg, &mut profile, capacity)?;
        let ftl = Ftl::new(&profile, capacity, eb);
        let info = sim_info(&cfg, &profile, capacity, eb);
        let state = State {
            ftl,
            rng: Rng::new(cfg.faults.seed),
            flip_block_p: block_flip_probability(cfg.faults.bitflip),
            faults: cfg.faults.clone(),
            fcount: FaultCounters::default(),
            vclock: 0,
            read_hist: new_hist(),
            write_hist: new_hist(),
        };
        Ok(SimDevice {
            inner: Arc::new(Inner {
                store: Store::new(cfg.nodata),
                cfg,
                profile,
                info,
                counters: IoCounters::default(),
                state: Mutex::new(state),
                epoch: RwLock::new(()),
                start: Instant::now(),
                fail_reads: AtomicBool::new(false),
                fail_writes: AtomicBool::new(false),
                write_budget: AtomicU64::new(u64::MAX),
                in_use: InUse::default(),
            }),
        })
    }

    /// Parse a `sim:` spec and build the drive.
    pub fn open(spec: &str) -> io::Result<SimDevice> {
        let cfg =
            SimConfig::parse(spec).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        SimDevice::new(cfg)
    }

    /// The configuration the drive was built from.
    pub fn config(&self) -> &SimConfig {
        &self.inner.cfg
    }

    /// The profile parameters in effect (after overrides).
    pub fn profile(&self) -> &Profile {
        &self.inner.profile
    }

    fn clock(&self, st: &State) -> u64 {
        match self.inner.cfg.time {
            TimeMode::Virtual => st.vclock,
            TimeMode::Real => self.inner.start.elapsed().as_nanos() as u64,
        }
    }

    /// The device clock in nanoseconds (virtual time, or time since creation).
    pub fn now_ns(&self) -> u64 {
        let st = self.inner.state.lock();
        self.clock(&st)
    }

    /// Virtual time: let `ns` pass with no command (the drive keeps working on
    /// what is queued). No effect in real time.
    pub fn advance(&self, ns: u64) {
        let mut st = self.inner.state.lock();
        st.vclock += ns;
    }

    /// Virtual time: move the clock forward to `t_ns` if it is behind (a
    /// command scheduled at `t_ns` by an open-loop load generator). No effect
    /// in real time.
    pub fn advance_to(&self, t_ns: u64) {
        let mut st = self.inner.state.lock();
        st.vclock = st.vclock.max(t_ns);
    }

    /// Virtual time: let the clock run until the drive is idle.
    pub fn settle(&self) {
        let mut st = self.inner.state.lock();
        st.vclock = st.vclock.max(st.ftl.time.idle_at());
    }

    /// Wait (real time) or advance the clock (virtual time) to `t`.
    fn complete(&self, st: &mut State, t: u64) -> Option<u64> {
        match self.inner.cfg.time {
            TimeMode::Virtual => {
                st.vclock = st.vclock.max(t);
                None
            }
            TimeMode::Real => Some(t),
        }
    }

    fn wait_until(&self, t: Option<u64>) {
        let Some(t) = t else { return };
        SLACK_SET.with(|s| {
            if !s.get() {
                // Sub-100 µs sleeps need a fine timer slack to be meaningful.
                // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
                }
                s.set(true);
            }
        });
        // Sleep for the bulk of the wait, then yield-spin: a VM's timers
        // overshoot short sleeps by tens of µs, which would swamp a 10 µs device.
        loop {
            let now = self.inner.start.elapsed().as_nanos() as u64;
            if now >= t {
                return;
            }
            let left = t - now;
            if left > SPIN_NS {
                std::thread::sleep(std::time::Duration::from_nanos(left - SPIN_NS));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// A snapshot of the drive's counters and modelled latencies.
    pub fn stats(&self) -> SimStats {
        let st = self.inner.state.lock();
        let (emin, emax) = st.ftl.erase_spread();
        SimStats {
            spec: self.inner.info.path.clone(),
            ftl: st.ftl.c,
            waf: st.ftl.c.waf(),
            faults: st.fcount,
            read_latency: summary(&st.read_hist),
            write_latency: summary(&st.write_hist),
            erase_min: emin,
            erase_max: emax,
            blocks: st.ftl.blocks(),
            physical_bytes: st.ftl.physical_bytes(),
            resident_bytes: self.inner.store.resident_bytes(),
            now_ns: self.clock(&st),
        }
    }

    /// Forget the latency histograms (to measure one phase).
    pub fn reset_latency(&self) {
        let mut st = self.inner.state.lock();
        st.read_hist.reset();
        st.write_hist.reset();
    }

    /// Check the FTL's mapping invariants (tests); the first violation found.
    pub fn check_ftl(&self) -> Result<(), String> {
        self.inner.state.lock().ftl.check()
    }

    /// Logical IUs currently mapped in the FTL.
    pub fn mapped_bytes(&self) -> u64 {
        let st = self.inner.state.lock();
        st.ftl.mapped_ius() * self.inner.profile.iu as u64
    }

    /// Replace the random-fault configuration (and reseed the generator).
    pub fn set_faults(&self, f: FaultConfig) {
        let mut st = self.inner.state.lock();
        st.rng = Rng::new(f.seed);
        st.flip_block_p = block_flip_probability(f.bitflip);
        st.faults = f;
    }

    /// Make every read fail (or stop failing).
    pub fn set_fail_reads(&self, on: bool) {
        self.inner.fail_reads.store(on, Ordering::SeqCst);
    }

    /// Make every write, flush and discard fail (or stop failing).
    pub fn set_fail_writes(&self, on: bool) {
        self.inner.fail_writes.store(on, Ordering::SeqCst);
    }

    /// Allow `n` more write commands, then fail every write (a drive that
    /// dies mid-run). `u64::MAX` lifts the limit.
    pub fn fail_writes_after(&self, n: u64) {
        self.inner.write_budget.store(n, Ordering::SeqCst);
    }

    /// Invert one bit of the stored data at byte `offset` (bit 0–7 of that
    /// byte). Returns false when nothing is stored there.
    pub fn flip_bit(&self, offset: u64, bit: u8) -> bool {
        let block = offset / BLOCK as u64;
        let b = (offset % BLOCK as u64) as u32 * 8 + (bit % 8) as u32;
        let ok = self.inner.store.flip(block, b);
        if ok {
            self.inner.state.lock().fcount.bit_flips += 1;
        }
        ok
    }

    /// Simulated power loss: every write and discard since the last flush is
    /// undone. Handles stay usable (the machine restarts).
    pub fn power_cut(&self) {
        self.power_cut_with(|_| false);
    }

    /// Power loss where each unflushed 4 KiB block independently survives
    /// with probability `p_survive`, drawn from the fault generator (torn,
    /// reordered writes).
    pub fn power_cut_torn(&self, p_survive: f64) {
        let mut rng = {
            let mut st = self.inner.state.lock();
            Rng::new(st.rng.next_u64())
        };
        self.power_cut_with(|_| rng.unit() < p_survive);
    }

    /// Power loss where `survives(offset)` decides, per unflushed 4 KiB block
    /// in increasing offset order, whether its new contents stay.
    pub fn power_cut_with(&self, mut survives: impl FnMut(u64) -> bool) {
        let _epoch = self.inner.epoch.write();
        let (lost, kept, unwritten) = self.inner.store.power_cut(|b| survives(b * BLOCK as u64));
        let mut st = self.inner.state.lock();
        // Blocks that were never written before are unmapped again (when they
        // make up whole IUs); others keep their new physical copy, which now
        // holds the old contents as far as the host can tell.
        for b in unwritten {
            st.ftl.trim(b * BLOCK as u64, BLOCK as u64);
        }
        st.fcount.power_cuts += 1;
        st.fcount.blocks_lost += lost;
        st.fcount.blocks_survived += kept;
    }

    fn check(&self, ptr: *const u8, len: usize, offset: u64) -> io::Result<()> {
        let ptr = if len == 0 { std::ptr::null() } else { ptr };
        check_aligned(ptr, len, offset)?;
        check_range(len, offset, self.inner.info.capacity)
    }

    fn write_one(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected("write error"));
        }
        if self
            .inner
            .write_budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
                u64::MAX => Some(u64::MAX),
                0 => None,
                n => Some(n - 1),
            })
            .is_err()
        {
            return Err(injected("write error (drive failed)"));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len() as u64;
        let (land, torn, flips, wake) = {
            let mut st = self.inner.state.lock();
            let now = self.clock(&st);
            let wp = st.faults.write_error;
            if st.rng.chance(wp) {
                st.fcount.write_errors += 1;
                return Err(injected("write error"));
            }
            let mut land = len;
            let mut torn = false;
            let tp = st.faults.torn_write;
            if st.rng.chance(tp) {
                let blocks = len / BLOCK as u64;
                land = st.rng.below(blocks) * BLOCK as u64;
                torn = true;
                st.fcount.torn_writes += 1;
                st.fcount.torn_blocks_landed += land / BLOCK as u64;
            }
            let mut done = now;
            if land > 0 {
                done = st.ftl.write(offset, land, now).map_err(|_| {
                    io::Error::other("emulated drive has no reclaimable space left (FTL full)")
                })?;
            }
            let mut flips = Vec::new();
            let fp = st.flip_block_p;
            for b in 0..land / BLOCK as u64 {
                if st.rng.chance(fp) {
                    let bit = st.rng.below(BLOCK as u64 * 8) as u32;
                    flips.push((offset / BLOCK as u64 + b, bit));
                }
            }
            let _ = st.write_hist.record(done.saturating_sub(now).max(1));
            let wake = self.complete(&mut st, done);
            (land, torn, flips, wake)
        };
        let first = offset / BLOCK as u64;
        for (i, chunk) in buf[..land as usize].chunks(BLOCK).enumerate() {
            self.inner.store.write(first + i as u64, chunk);
        }
        if !flips.is_empty() {
            let mut n = 0;
            for (b, bit) in flips {
                if self.inner.store.flip(b, bit) {
                    n += 1;
                }
            }
            self.inner.state.lock().fcount.bit_flips += n;
        }
        self.inner.counters.write(land as usize);
        self.wait_until(wake);
        if torn {
            return Err(injected("torn write"));
        }
        Ok(())
    }

    /// Read like [`Device::read_at`] and return the modelled latency of this
    /// read in nanoseconds (arrival to data at the host), for benchmarks that
    /// want their own reads' latency apart from other traffic.
    pub fn read_timed(&self, buf: &mut [u8], offset: u64) -> io::Result<u64> {
        self.check(buf.as_ptr(), buf.len(), offset)?;
        let _epoch = self.inner.epoch.read();
        self.read_inner(buf, offset)
    }

    fn read_one(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_inner(buf, offset).map(|_| ())
    }

    fn read_inner(&self, buf: &mut [u8], offset: u64) -> io::Result<u64> {
        if self.inner.fail_reads.load(Ordering::SeqCst) {
            return Err(injected("read error"));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let (wake, lat) = {
            let mut st = self.inner.state.lock();
            let rp = st.faults.read_error;
            if st.rng.chance(rp) {
                st.fcount.read_errors += 1;
                return Err(injected("read error"));
            }
            let now = self.clock(&st);
            let done = st.ftl.read(offset, buf.len() as u64, now);
            let lat = done.saturating_sub(now).max(1);
            let _ = st.read_hist.record(lat);
            (self.complete(&mut st, done), lat)
        };
        let first = offset / BLOCK as u64;
        for (i, chunk) in buf.chunks_mut(BLOCK).enumerate() {
            self.inner.store.read(first + i as u64, chunk);
        }
        self.inner.counters.read(buf.len());
        self.wait_until(wake);
        Ok(lat)
    }
}

impl Device for SimDevice {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(buf.as_ptr(), buf.len(), offset)?;
        let _epoch = self.inner.epoch.read();
        self.read_one(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(buf.as_ptr(), buf.len(), offset)?;
        let _epoch = self.inner.epoch.read();
        self.write_one(buf, offset)
    }

    fn write_batch(&self, ops: &[(u64, &[u8])]) -> io::Result<()> {
        for (off, buf) in ops {
            self.check(buf.as_ptr(), buf.len(), *off)?;
        }
        let _epoch = self.inner.epoch.read();
        for (off, buf) in ops {
            self.write_one(buf, *off)?;
        }
        Ok(())
    }

    fn read_batch(&self, ops: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (off, buf) in ops.iter() {
            self.check(buf.as_ptr(), buf.len(), *off)?;
        }
        let _epoch = self.inner.epoch.read();
        for (off, buf) in ops.iter_mut() {
            self.read_one(buf, *off)?;
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected("flush error"));
        }
        let _epoch = self.inner.epoch.read();
        self.inner.store.flush();
        let wake = {
            let mut st = self.inner.state.lock();
            let now = self.clock(&st);
            // Power-loss-protected write buffer: a flush costs one command.
            let t = now + self.inner.profile.t_overhead;
            self.complete(&mut st, t)
        };
        self.inner.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.wait_until(wake);
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let ulen = usize::try_from(len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("discard length {len} too large"),
            )
        })?;
        check_aligned(std::ptr::null(), ulen, offset)?;
        check_range(ulen, offset, self.inner.info.capacity)?;
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected("discard error"));
        }
        if len == 0 {
            return Ok(());
        }
        let _epoch = self.inner.epoch.read();
        {
            let mut st = self.inner.state.lock();
            st.ftl.trim(offset, len);
        }
        let first = offset / BLOCK as u64;
        for b in first..first + len / BLOCK as u64 {
            self.inner.store.discard(b);
        }
        self.inner
            .counters
            .bytes_discarded
            .fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    fn counters(&self) -> &IoCounters {
        &self.inner.counters
    }

    /// One open pool at a time, across all clones of the device.
    fn claim(&self) -> Result<DeviceClaim, ClaimError> {
        self.inner.in_use.claim()
    }
}
