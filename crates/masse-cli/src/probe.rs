//! `masse probe DEVICE`: what the system says about a device, a short active
//! measurement, the media class that follows and the engine settings for it.

use crate::error::{CliError, CliResult};
use clap::Args;
use hdrhistogram::Histogram;
use masse::device::{
    advise, classify, facts_for_path, known_model, Advice, AlignedBuf, Class, Device, FileDevice,
    Measured, OpenOptions, SimDevice, SysfsFacts, Verdict,
};
use masse_cli::units::{fmt_bytes, parse_size};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// What to probe: a directory or file (the measurement runs on a temporary file next to
    /// it, on the same filesystem), a raw block device (measured only with --force), or an
    /// emulated drive such as sim:qlc:64GiB.
    #[arg(value_name = "DEVICE")]
    pub device: String,

    /// Allow the write measurement on a raw block device. It WRITES OVER the first
    /// --region bytes of the device: only for a device whose data you do not need.
    #[arg(long)]
    pub force: bool,

    /// Only report what the system says (sysfs, model table); no measurement.
    #[arg(long)]
    pub no_measure: bool,

    /// Duration of the measurement in seconds (at most 30). Default: 8.
    #[arg(long, value_name = "SECONDS", default_value_t = 8.0)]
    pub seconds: f64,

    /// Size of the region (temporary file) the measurement uses. Default: 256 MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub region: Option<u64>,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Everything the probe found.
#[derive(serde::Serialize, Debug, Clone)]
pub struct ProbeReport {
    pub device: String,
    pub facts: SysfsFacts,
    pub measured: Option<Measured>,
    /// Where the measurement ran, or why it did not.
    pub measured_on: String,
    pub verdict: Verdict,
    pub advice: Advice,
    /// Emulated drives: what the model itself recorded during the measurement
    /// (device-side latencies, free of this host's CPU and timer overheads).
    pub emulator: Option<masse::device::sim::SimStats>,
}

/// Removes the temporary test file on drop.
struct TempRegion(Option<PathBuf>);
impl Drop for TempRegion {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("constant histogram bounds are valid")
}

fn io_err(e: std::io::Error) -> CliError {
    CliError::new(format!("probe I/O failed: {e}"))
}

/// QD1 4 KiB random reads for `dur`; latencies in ns.
fn read_phase(
    dev: &dyn Device,
    region: u64,
    dur: Duration,
    seed: u64,
) -> CliResult<Histogram<u64>> {
    let mut h = hist();
    let mut b = AlignedBuf::new(4096);
    let mut x = seed | 1;
    let blocks = region / 4096;
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let off = (xorshift(&mut x) % blocks) * 4096;
        let t = Instant::now();
        dev.read_at(&mut b, off).map_err(io_err)?;
        let _ = h.record(t.elapsed().as_nanos().max(1) as u64);
    }
    Ok(h)
}

/// `threads` writers for `dur`: 4 KiB at random, or 256 KiB sequential in
/// each thread's own stripe. Returns bytes written per second.
fn write_phase(
    dev: &Arc<dyn Device>,
    region: u64,
    threads: usize,
    dur: Duration,
    random: bool,
    stop: &AtomicBool,
) -> CliResult<f64> {
    let start = Instant::now();
    let end = start + dur;
    let total: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let dev = dev.clone();
                s.spawn(move || -> std::io::Result<u64> {
                    let bs = if random { 4096 } else { 256 << 10 };
                    let mut b = AlignedBuf::new(bs);
                    b.fill(0x5a ^ t as u8);
                    let mut x = 0x9e37_79b9 + t as u64 * 7919;
                    let stripe = (region / threads as u64) / bs as u64 * bs as u64;
                    let mut pos = 0u64;
                    let mut n = 0u64;
                    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                        let off = if random {
                            (xorshift(&mut x) % (region / 4096)) * 4096
                        } else {
                            let o = t as u64 * stripe + pos;
                            pos = (pos + bs as u64) % stripe.max(bs as u64);
                            o
                        };
                        dev.write_at(&b, off)?;
                        n += bs as u64;
                    }
                    Ok(n)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("writer thread panicked")))
                    .unwrap_or(0)
            })
            .sum()
    });
    let secs = start.elapsed().as_secs_f64();
    Ok(total as f64 / secs.max(1e-9))
}

/// The whole measurement on `dev`'s first `region` bytes.
pub fn measure(dev: &Arc<dyn Device>, region: u64, seconds: f64) -> CliResult<Measured> {
    let t0 = Instant::now();
    let seconds = seconds.clamp(0.5, 30.0);
    let threads = 4;
    let region = region.min(dev.info().capacity) / (1 << 20) * (1 << 20);
    if region < 4 << 20 {
        return Err(CliError::new("probe region must be at least 4 MiB"));
    }
    // Fill the region so reads hit written data (untimed; bounded by 1/4 of the budget).
    {
        let b = AlignedBuf::new(1 << 20);
        let fill_end = Instant::now() + Duration::from_secs_f64(seconds / 4.0);
        let mut off = 0;
        while off < region && Instant::now() < fill_end {
            dev.write_at(&b, off).map_err(io_err)?;
            off += 1 << 20;
        }
        dev.sync().map_err(io_err)?;
    }
    let phase = Duration::from_secs_f64(seconds * 0.75 / 4.0);
    let stop = AtomicBool::new(false);
    let idle = read_phase(dev.as_ref(), region, phase, 1)?;
    let rand = write_phase(dev, region, threads, phase, true, &stop)?;
    let seq = write_phase(dev, region, threads, phase, false, &stop)?;
    dev.sync().map_err(io_err)?;
    // Reads while writers run.
    let loaded = std::thread::scope(|s| -> CliResult<Histogram<u64>> {
        let w = s.spawn(|| write_phase(dev, region, threads, phase, true, &stop));
        std::thread::sleep(Duration::from_millis(20));
        let h = read_phase(
            dev.as_ref(),
            region,
            phase.saturating_sub(Duration::from_millis(40)),
            2,
        );
        stop.store(true, Ordering::Relaxed);
        let _ = w.join();
        h
    })?;
    dev.sync().map_err(io_err)?;
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Ok(Measured {
        read_p50_us: us(&idle, 0.5),
        read_p99_us: us(&idle, 0.99),
        rand4k_write_mbps: rand / 1e6,
        seq256k_write_mbps: seq / 1e6,
        loaded_read_p50_us: us(&loaded, 0.5),
        loaded_read_p99_us: us(&loaded, 0.99),
        loaded_read_p999_us: us(&loaded, 0.999),
        write_threads: threads,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Probe a device path (file, directory, block device or `sim:` spec).
/// `measure_secs = None` skips the measurement.
pub fn probe(
    device: &str,
    measure_secs: Option<f64>,
    force: bool,
    region: Option<u64>,
    skip_if_known: bool,
) -> CliResult<ProbeReport> {
    let region = region.unwrap_or(256 << 20);
    if masse::device::SimConfig::is_sim_path(device) {
        let sim = SimDevice::open(device).map_err(|e| CliError::new(format!("{device}: {e}")))?;
        let info = masse::device::Device::info(&sim).clone();
        let facts = SysfsFacts {
            disk: Some(device.to_string()),
            rotational: Some(false),
            logical_block_size: Some(info.logical_block_size),
            physical_block_size: Some(info.physical_block_size),
            optimal_io_size: Some(info.optimal_io_size),
            discard_granularity: Some(info.discard_granularity),
            zoned: Some("none".into()),
            model: Some(sim.profile().model.to_string()),
            note: Some("emulated drive (masse media emulator)".into()),
            ..Default::default()
        };
        let virtual_time = sim.config().time == masse::device::sim::TimeMode::Virtual;
        let handle = sim.clone();
        let dev: Arc<dyn Device> = Arc::new(sim);
        let (measured, on) = match measure_secs {
            Some(_) if virtual_time => (
                None,
                "not measured: virtual time has no wall-clock latency (use time=real)".to_string(),
            ),
            Some(s) => (
                Some(measure(&dev, region.min(info.capacity / 2), s)?),
                format!(
                    "the emulated drive itself (first {})",
                    fmt_bytes(region.min(info.capacity / 2))
                ),
            ),
            None => (None, "not measured (--no-measure)".into()),
        };
        let mut verdict = classify(&facts, measured.as_ref());
        if info.indirection_unit > 0 {
            verdict.iu = info.indirection_unit;
        }
        let advice = advise(&verdict, info.reclaim_unit);
        let emulator = measured.as_ref().map(|_| handle.stats());
        return Ok(ProbeReport {
            emulator,
            device: device.into(),
            facts,
            measured,
            measured_on: on,
            verdict,
            advice,
        });
    }
    let path = Path::new(device);
    let facts = facts_for_path(path);
    let md = std::fs::metadata(path).ok();
    let is_block = md.as_ref().is_some_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_block_device()
    });
    let skip = skip_if_known
        && (facts.memory_fs.is_some() || facts.model.as_deref().and_then(known_model).is_some());
    let (measured, on) = match measure_secs {
        None => (None, "not measured (--no-measure)".to_string()),
        Some(_) if skip => (None, "not measured: the system already identifies the media".to_string()),
        Some(_) if is_block && !force => (
            None,
            "not measured: a raw block device is only measured with --force (the measurement writes)".to_string(),
        ),
        Some(s) => {
            let (target, _guard) = if is_block {
                (path.to_path_buf(), TempRegion(None))
            } else {
                let dir = if md.as_ref().is_some_and(|m| m.is_dir()) {
                    path.to_path_buf()
                } else {
                    path.parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
                };
                let f = dir.join(format!(".masse-probe-{}", std::process::id()));
                (f.clone(), TempRegion(Some(f)))
            };
            let opts = OpenOptions { create_size: if is_block { None } else { Some(region) }, ..Default::default() };
            let dev: Arc<dyn Device> = Arc::new(
                FileDevice::open(&target, &opts).map_err(|e| CliError::new(format!("probe: opening {}: {e}", target.display())))?,
            );
            if !dev.info().direct_io {
                eprintln!("masse probe: warning: O_DIRECT is not available on {}; figures include the page cache", target.display());
            }
            let m = measure(&dev, region, s)?;
            (Some(m), format!("{} ({}, O_DIRECT {})", target.display(), fmt_bytes(region), if dev.info().direct_io { "yes" } else { "no" }))
        }
    };
    let verdict = classify(&facts, measured.as_ref());
    let advice = advise(&verdict, 0);
    Ok(ProbeReport {
        emulator: None,
        device: device.into(),
        facts,
        measured,
        measured_on: on,
        verdict,
        advice,
    })
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".to_string(), |x| x.to_string())
}

pub fn to_text(r: &ProbeReport) -> String {
    use std::fmt::Write;
    let f = &r.facts;
    let mut s = String::new();
    let _ = writeln!(s, "masse probe {}", r.device);
    let _ = writeln!(
        s,
        "  block device   {}{}{}",
        f.disk.as_deref().unwrap_or("none"),
        f.dev
            .as_ref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        if f.partition { ", on a partition" } else { "" }
    );
    let _ = writeln!(
        s,
        "  sysfs          rotational {}, logical block {}, physical block {}, optimal I/O {}, discard granularity {}, zoned {}",
        f.rotational.map_or("?".into(), |r| (r as u8).to_string()),
        opt(&f.logical_block_size),
        opt(&f.physical_block_size),
        opt(&f.optimal_io_size),
        opt(&f.discard_granularity),
        f.zoned.as_deref().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "  model          {}",
        f.model.as_deref().unwrap_or("(none reported)")
    );
    if let Some(n) = &f.note {
        let _ = writeln!(s, "  note           {n}");
    }
    let _ = writeln!(s, "  measured on    {}", r.measured_on);
    if let Some(m) = &r.measured {
        let _ = writeln!(
            s,
            "    QD1 4 KiB random read        p50 {:.1} µs   p99 {:.1} µs",
            m.read_p50_us, m.read_p99_us
        );
        let _ = writeln!(
            s,
            "    4 KiB random write           {:.1} MB/s ({} threads)",
            m.rand4k_write_mbps, m.write_threads
        );
        let _ = writeln!(
            s,
            "    256 KiB sequential write     {:.1} MB/s ({} threads); random/sequential = {:.1}%",
            m.seq256k_write_mbps,
            m.write_threads,
            m.rand_seq_ratio() * 100.0
        );
        let _ = writeln!(
            s,
            "    QD1 read under 4 KiB writes  p50 {:.1} µs   p99 {:.1} µs   p99.9 {:.1} µs",
            m.loaded_read_p50_us, m.loaded_read_p99_us, m.loaded_read_p999_us
        );
        let _ = writeln!(s, "    took {:.1} s", m.seconds);
    }
    if let Some(e) = &r.emulator {
        let us = |n: u64| n as f64 / 1000.0;
        let _ = writeln!(
            s,
            "  modelled       (the emulator's own figures; the wall-clock ones above include this host's CPU and timer costs)"
        );
        let _ = writeln!(
            s,
            "    reads        p50 {:.1} µs   p99 {:.1} µs   p99.9 {:.1} µs   max {:.1} µs ({} reads, idle and under writes)",
            us(e.read_latency.p50_ns),
            us(e.read_latency.p99_ns),
            us(e.read_latency.p999_ns),
            us(e.read_latency.max_ns),
            e.read_latency.count
        );
        let _ = writeln!(
            s,
            "    writes       p50 {:.1} µs   p99 {:.1} µs; device WAF {:.2}, {} IU read-modify-writes, {} erases",
            us(e.write_latency.p50_ns),
            us(e.write_latency.p99_ns),
            e.waf,
            e.ftl.rmw_ius,
            e.ftl.erases
        );
    }
    let v = &r.verdict;
    let _ = writeln!(
        s,
        "  class          {} — {} (from {})",
        v.class.name(),
        v.class.describe(),
        v.source
    );
    for why in &v.reasons {
        let _ = writeln!(s, "    because      {why}");
    }
    let a = &r.advice;
    let _ = writeln!(s, "  engine settings");
    let _ = writeln!(s, "    role           {}", a.role);
    let _ = writeln!(s, "    segment size   {}", fmt_bytes(a.segment_size));
    let _ = writeln!(s, "    band size      {}", fmt_bytes(a.band_size));
    let _ = writeln!(s, "    IU alignment   {}", fmt_bytes(a.iu as u64));
    let _ = writeln!(s, "    queue depth    {}", a.queue_depth);
    let _ = writeln!(s, "    use            {}", a.note);
    s
}

pub fn run(a: &ProbeArgs) -> CliResult<i32> {
    if !(a.seconds > 0.0 && a.seconds <= 30.0) {
        return Err(CliError::new("--seconds must be in (0, 30]"));
    }
    let secs = if a.no_measure { None } else { Some(a.seconds) };
    let r = probe(&a.device, secs, a.force, a.region, false)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| CliError::new(e.to_string()))?
        );
    } else {
        print!("{}", to_text(&r));
    }
    Ok(0)
}

/// What `masse create` learns about one device it was not told the media of:
/// `None` when the device already knows (tmpfs, emulator) or the probe fails.
pub fn class_for_create(path: &Path) -> Option<(Class, Verdict)> {
    let r = probe(
        &path.display().to_string(),
        Some(1.5),
        false,
        Some(64 << 20),
        true,
    )
    .ok()?;
    Some((r.verdict.class, r.verdict))
}
