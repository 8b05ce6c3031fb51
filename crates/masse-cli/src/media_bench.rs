//! `masse media-bench`: the evidence for "media aware". One emulated QLC drive
//! driven two ways with the same user writes (4 KiB values/blocks, uniform
//! random): (a) straight to the drive at full span, (b) through masse with an
//! emulated Optane fast tier. Reports, side by side, what happened inside the
//! QLC drive: device WAF, host WAF, NAND bytes and erases per user byte, and
//! the latency of 4 KiB reads issued while the writes run.
//!
//! Both runs use virtual time (deterministic, not bound by this machine's
//! CPU): each device's clock advances by the modelled latency of its commands,
//! the writer is a closed loop at queue depth 1, and one 4 KiB read of the
//! QLC drive is issued every `--read-every` user writes; its latency is the
//! modelled one.

use crate::error::{CliError, CliResult};
use clap::Args;
use hdrhistogram::Histogram;
use masse::device::sim::{ProfileKind, SimConfig, SimDevice, SimStats};
use masse::device::{AlignedBuf, Device};
use masse::{Db, DeviceSpec, Options, PoolConfig};
use masse_cli::units::{fmt_bytes, parse_count, parse_size};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct MediaBenchArgs {
    /// Capacity of the emulated QLC drive.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "2GiB")]
    pub qlc: u64,
    /// Capacity of the emulated Optane drive (masse's fast tier).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1GiB")]
    pub optane: u64,
    /// User writes of 4 KiB in each run. Default: 3x the QLC capacity.
    #[arg(long, value_name = "COUNT", value_parser = parse_count)]
    pub writes: Option<u64>,
    /// Keys written through masse, as a fraction of the QLC capacity in 4 KiB
    /// records (the live data masse keeps).
    #[arg(long, default_value_t = 0.5)]
    pub live: f64,
    /// Issue one 4 KiB read of the QLC drive every this many user writes.
    #[arg(long, default_value_t = 8)]
    pub read_every: u64,
    /// Also run both at this user write rate in MB/s (10^6 bytes; an open-loop
    /// schedule in virtual time: write i is issued at i x 4096 / rate unless the
    /// drive is still busy), to compare read latency at equal load. 0 = only
    /// the closed-loop runs.
    #[arg(long, value_name = "MB/S", default_value_t = 16.0)]
    pub rate: f64,
    /// Seed of the write and read streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the results (JSON and Markdown). Default: print only.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(serde::Serialize, Debug, Clone)]
struct RunResult {
    name: &'static str,
    /// User write rate the run was paced at (MB/s), or null for closed loop.
    rate_mbps: Option<f64>,
    user_bytes: u64,
    /// Bytes the host (the workload or masse) wrote to the QLC drive.
    qlc_host_bytes: u64,
    /// Bytes programmed into the QLC NAND.
    qlc_nand_bytes: u64,
    device_waf: f64,
    host_waf: f64,
    nand_per_user_byte: f64,
    erases: u64,
    erases_per_user_gib: f64,
    /// Erase block size (per die) of the emulated drive.
    erase_block: u64,
    erased_per_user_byte: f64,
    rmw_ius: u64,
    gc_copied_bytes: u64,
    /// Bytes written to the Optane fast tier (masse only).
    optane_bytes: u64,
    reads: u64,
    read_p50_us: f64,
    read_p99_us: f64,
    read_p999_us: f64,
    read_max_us: f64,
    /// Device time the QLC drive needed for the run (virtual seconds).
    device_seconds: f64,
    wall_seconds: f64,
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1_000_000_000_000, 3)
        .expect("constant histogram bounds are valid")
}

fn qlc(cap: u64) -> CliResult<SimDevice> {
    SimDevice::new(SimConfig::new(ProfileKind::Qlc, cap).virtual_time())
        .map_err(|e| CliError::new(format!("emulated QLC drive: {e}")))
}

fn io(e: impl std::fmt::Display) -> CliError {
    CliError::new(format!("media-bench: {e}"))
}

fn result(
    name: &'static str,
    user: u64,
    s0: &SimStats,
    s1: &SimStats,
    h: &Histogram<u64>,
    optane_bytes: u64,
    wall: f64,
) -> RunResult {
    let host = s1.ftl.host_write_bytes - s0.ftl.host_write_bytes;
    let nand = s1.ftl.nand_write_bytes - s0.ftl.nand_write_bytes;
    let erases = s1.ftl.erases - s0.ftl.erases;
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    RunResult {
        name,
        rate_mbps: None,
        user_bytes: user,
        qlc_host_bytes: host,
        qlc_nand_bytes: nand,
        device_waf: nand as f64 / host.max(1) as f64,
        host_waf: host as f64 / user.max(1) as f64,
        nand_per_user_byte: nand as f64 / user.max(1) as f64,
        erases,
        erases_per_user_gib: erases as f64 / (user as f64 / (1u64 << 30) as f64),
        erase_block: s1.physical_bytes / s1.blocks.max(1) as u64,
        erased_per_user_byte: (erases * (s1.physical_bytes / s1.blocks.max(1) as u64)) as f64
            / user.max(1) as f64,
        rmw_ius: s1.ftl.rmw_ius - s0.ftl.rmw_ius,
        gc_copied_bytes: s1.ftl.gc_write_bytes - s0.ftl.gc_write_bytes,
        optane_bytes,
        reads: h.len(),
        read_p50_us: us(0.5),
        read_p99_us: us(0.99),
        read_p999_us: us(0.999),
        read_max_us: h.max() as f64 / 1000.0,
        device_seconds: (s1.now_ns - s0.now_ns) as f64 / 1e9,
        wall_seconds: wall,
    }
}

fn progress(n: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(n);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:>28} {bar:40} {pos}/{len} ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// (a) 4 KiB random writes over the whole drive, after a sequential fill.
/// When user write `i` is due under a rate of `rate` MB/s from `t0` (ns).
fn due(t0: u64, i: u64, rate: Option<f64>) -> Option<u64> {
    rate.map(|r| t0 + (i as f64 * 4096.0 / (r * 1e6) * 1e9) as u64)
}

fn direct(a: &MediaBenchArgs, writes: u64, rate: Option<f64>) -> CliResult<RunResult> {
    let dev = qlc(a.qlc)?;
    let cap = dev.info().capacity;
    let b = AlignedBuf::new(256 << 10);
    let mut off = 0;
    while off + b.len() as u64 <= cap {
        dev.write_at(&b, off).map_err(io)?;
        off += b.len() as u64;
    }
    let t0 = std::time::Instant::now();
    let s0 = dev.stats();
    let mut h = hist();
    let mut w = AlignedBuf::new(4096);
    let mut r = AlignedBuf::new(4096);
    let blocks = cap / 4096;
    let mut x = a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut y = x ^ 0xDEAD_BEEF;
    let pb = progress(writes, "direct 4 KiB random writes");
    let start = dev.now_ns();
    for i in 0..writes {
        if let Some(t) = due(start, i, rate) {
            dev.advance_to(t);
        }
        w[..8].copy_from_slice(&i.to_le_bytes());
        dev.write_at(&w, (xorshift(&mut x) % blocks) * 4096)
            .map_err(io)?;
        if i % a.read_every == 0 {
            let lat = dev
                .read_timed(&mut r, (xorshift(&mut y) % blocks) * 4096)
                .map_err(io)?;
            let _ = h.record(lat);
        }
        if i % 4096 == 0 {
            pb.set_position(i);
        }
    }
    pb.finish_and_clear();
    let s1 = dev.stats();
    let mut res = result(
        "direct 4 KiB random",
        writes * 4096,
        &s0,
        &s1,
        &h,
        0,
        t0.elapsed().as_secs_f64(),
    );
    res.rate_mbps = rate;
    Ok(res)
}

/// (b) The same user writes as puts of 4 KiB records through masse.
fn through_masse(a: &MediaBenchArgs, writes: u64, rate: Option<f64>) -> CliResult<RunResult> {
    let dev = qlc(a.qlc)?;
    let fast = SimDevice::new(SimConfig::new(ProfileKind::Optane, a.optane).virtual_time())
        .map_err(|e| CliError::new(format!("emulated Optane drive: {e}")))?;
    let cfg = PoolConfig::tiered(
        DeviceSpec::Device(Arc::new(fast.clone()) as Arc<dyn Device>),
        DeviceSpec::Device(Arc::new(dev.clone()) as Arc<dyn Device>),
    );
    let db = Db::create(
        &cfg,
        Options {
            histograms: false,
            ..Options::default()
        },
    )
    .map_err(io)?;
    let cap = dev.info().capacity;
    // A 4 KiB record: 16-byte key + value + 24-byte header ≈ 4 KiB.
    let vlen = 4096 - 16 - 24;
    let keys = ((cap as f64 * a.live) / 4096.0) as u64;
    let t0 = std::time::Instant::now();
    let s0 = dev.stats();
    let f0 = fast.stats();
    let mut h = hist();
    let mut v = vec![0u8; vlen];
    let mut r = AlignedBuf::new(4096);
    let blocks = cap / 4096;
    let mut x = a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut y = x ^ 0xDEAD_BEEF;
    let pb = progress(writes, "4 KiB puts through masse");
    let start = dev.now_ns().max(fast.now_ns());
    for i in 0..writes {
        if let Some(t) = due(start, i, rate) {
            dev.advance_to(t);
            fast.advance_to(t);
        }
        let k = xorshift(&mut x) % keys;
        v[..8].copy_from_slice(&i.to_le_bytes());
        db.put(format!("key{k:013}").as_bytes(), &v).map_err(io)?;
        if i % a.read_every == 0 {
            // The same device-level read as in (a): what the drive's QoS is
            // while masse writes (a get would add the engine's own path).
            let lat = dev
                .read_timed(&mut r, (xorshift(&mut y) % blocks) * 4096)
                .map_err(io)?;
            let _ = h.record(lat);
        }
        if i % 4096 == 0 {
            pb.set_position(i);
        }
    }
    pb.finish_and_clear();
    db.close().map_err(io)?;
    let s1 = dev.stats();
    let f1 = fast.stats();
    let mut res = result(
        "masse (Optane pad + QLC)",
        writes * 4096,
        &s0,
        &s1,
        &h,
        f1.ftl.host_write_bytes - f0.ftl.host_write_bytes,
        t0.elapsed().as_secs_f64(),
    );
    res.rate_mbps = rate;
    Ok(res)
}

fn table(rs: &[RunResult]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| metric | {} |",
        rs.iter().map(|r| r.name).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(s, "|---|{}", "---:|".repeat(rs.len()));
    let row = |s: &mut String, name: &str, f: &dyn Fn(&RunResult) -> String| {
        let _ = writeln!(
            s,
            "| {name} | {} |",
            rs.iter().map(f).collect::<Vec<_>>().join(" | ")
        );
    };
    row(&mut s, "user writes", &|r| fmt_bytes(r.user_bytes));
    row(&mut s, "host writes to the QLC drive", &|r| {
        fmt_bytes(r.qlc_host_bytes)
    });
    row(&mut s, "NAND writes in the QLC drive", &|r| {
        fmt_bytes(r.qlc_nand_bytes)
    });
    row(&mut s, "host WAF (QLC host bytes / user bytes)", &|r| {
        format!("{:.2}", r.host_waf)
    });
    row(&mut s, "device WAF (NAND / host bytes)", &|r| {
        format!("{:.2}", r.device_waf)
    });
    row(&mut s, "NAND bytes per user byte", &|r| {
        format!("{:.2}", r.nand_per_user_byte)
    });
    row(&mut s, "erases per user GiB", &|r| {
        format!("{:.1}", r.erases_per_user_gib)
    });
    row(&mut s, "erased NAND per user byte", &|r| {
        format!("{:.2}", r.erased_per_user_byte)
    });
    row(&mut s, "IU read-modify-writes", &|r| r.rmw_ius.to_string());
    row(&mut s, "GC copies inside the drive", &|r| {
        fmt_bytes(r.gc_copied_bytes)
    });
    row(&mut s, "writes to the Optane pad", &|r| {
        fmt_bytes(r.optane_bytes)
    });
    row(&mut s, "4 KiB reads during the writes", &|r| {
        r.reads.to_string()
    });
    row(&mut s, "read p50 (µs)", &|r| {
        format!("{:.0}", r.read_p50_us)
    });
    row(&mut s, "read p99 (µs)", &|r| {
        format!("{:.0}", r.read_p99_us)
    });
    row(&mut s, "read p99.9 (µs)", &|r| {
        format!("{:.0}", r.read_p999_us)
    });
    row(&mut s, "read max (µs)", &|r| {
        format!("{:.0}", r.read_max_us)
    });
    row(&mut s, "wall time of the run (s)", &|r| {
        format!("{:.1}", r.wall_seconds)
    });
    s
}

pub fn run(a: &MediaBenchArgs) -> CliResult<i32> {
    if !(a.live > 0.0 && a.live < 0.9) {
        return Err(CliError::new("--live must be in (0, 0.9)"));
    }
    if a.read_every == 0 {
        return Err(CliError::new("--read-every must be at least 1"));
    }
    let writes = a.writes.unwrap_or(3 * a.qlc / 4096);
    let cmd: Vec<String> = std::env::args().collect();
    let machine = crate::machine::Machine::probe();
    println!("command   {}", cmd.join(" "));
    println!(
        "machine   {} CPUs ({}), {} RAM, Linux {} (virtual time: figures are the model's, not this machine's)",
        machine.nproc,
        machine.cpu_model,
        fmt_bytes(machine.mem_total_bytes),
        machine.kernel
    );
    println!(
        "workload  {} user writes of 4 KiB ({}) on sim:qlc:{} ; masse: {} keys (live data {:.0}% of the drive), fast tier sim:optane:{}; one 4 KiB device read every {} writes",
        writes,
        fmt_bytes(writes * 4096),
        fmt_bytes(a.qlc),
        ((a.qlc as f64 * a.live) / 4096.0) as u64,
        a.live * 100.0,
        fmt_bytes(a.optane),
        a.read_every
    );
    let mut rs = vec![direct(a, writes, None)?, through_masse(a, writes, None)?];
    let mut t = format!("Closed loop (the writer issues the next write as soon as the previous one is acknowledged):\n\n{}", table(&rs));
    if a.rate > 0.0 {
        let paced = vec![
            direct(a, writes, Some(a.rate))?,
            through_masse(a, writes, Some(a.rate))?,
        ];
        t.push_str(&format!(
            "\nPaced at {} MB/s of user writes (open loop; a write waits only if the drive is still busy):\n\n{}",
            a.rate,
            table(&paced)
        ));
        rs.extend(paced);
    }
    print!("{t}");
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::new(format!("{}: {e}", dir.display())))?;
        let json = serde_json::json!({
            "command": cmd.join(" "),
            "machine": machine,
            "writes": writes,
            "qlc_bytes": a.qlc,
            "optane_bytes": a.optane,
            "live": a.live,
            "read_every": a.read_every,
            "rate_mbps": a.rate,
            "seed": a.seed,
            "runs": rs,
        });
        let jp = dir.join("media-qlc.json");
        std::fs::write(&jp, serde_json::to_string_pretty(&json).unwrap_or_default())
            .map_err(|e| CliError::new(format!("{}: {e}", jp.display())))?;
        let mp = dir.join("media-qlc.md");
        std::fs::write(&mp, format!("command: `{}`\n\n{t}", cmd.join(" ")))
            .map_err(|e| CliError::new(format!("{}: {e}", mp.display())))?;
        println!("results   {} and {}", jp.display(), mp.display());
    }
    Ok(0)
}
