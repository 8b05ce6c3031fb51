//! Memory and speed of the in-DRAM hash index.
//!
//! ```text
//! cargo run --release -p masse --example index_mem -- --keys 10000000 [--threads N]
//!     [--shards S] [--max-load F] [--growth G] [--loc-bits L] [--presize]
//! ```
//!
//! `--loc-bits` is the width of the locations the index stores (default 49:
//! what the engine uses for a pool of 2^17 segments, e.g. Table 4 at 10^8
//! keys; 64 is the generic index). Locations stored are the key numbers
//! masked to that width.
//!
//! Inserts N distinct random digests (splitmix64 of the key number) with
//! distinct locations, then reports bytes/key (`memory_bytes`, the index's own
//! figure, and peak RSS from /proc as a cross-check), insert, get-hit and
//! get-miss rates, and probe displacement.

use std::time::Instant;

use masse::index::{Digest, Index, IndexOptions, DEFAULT_GROWTH, DEFAULT_MAX_LOAD, DEFAULT_SHARDS};

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Digest of key number `i`: distinct for distinct `i` (splitmix64 is a bijection).
fn key(i: u64) -> Digest {
    ((splitmix(i) as u128) << 64) | splitmix(i ^ 0x5555_5555_5555_5555) as u128
}

fn proc_status(field: &str) -> Option<u64> {
    proc_field("/proc/self/status", field)
}

fn proc_field(file: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(file).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

struct Args {
    keys: u64,
    threads: usize,
    shards: usize,
    max_load: f64,
    growth: f64,
    loc_bits: u32,
    presize: bool,
}

fn parse_args() -> Result<Args, String> {
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut a = Args {
        keys: 10_000_000,
        threads: nproc,
        shards: DEFAULT_SHARDS,
        max_load: DEFAULT_MAX_LOAD,
        growth: DEFAULT_GROWTH,
        loc_bits: 49,
        presize: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => {
                a.keys = val()?
                    .replace('_', "")
                    .parse()
                    .map_err(|e| format!("--keys: {e}"))?
            }
            "--threads" => a.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--shards" => a.shards = val()?.parse().map_err(|e| format!("--shards: {e}"))?,
            "--max-load" => a.max_load = val()?.parse().map_err(|e| format!("--max-load: {e}"))?,
            "--growth" => a.growth = val()?.parse().map_err(|e| format!("--growth: {e}"))?,
            "--loc-bits" => a.loc_bits = val()?.parse().map_err(|e| format!("--loc-bits: {e}"))?,
            "--presize" => a.presize = true,
            "-h" | "--help" => {
                return Err("usage: index_mem [--keys N] [--threads N] [--shards S] \
                            [--max-load F] [--growth G] [--loc-bits L] [--presize]"
                    .into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    a.threads = a.threads.max(1);
    Ok(a)
}

/// Runs `f(i)` for i in 0..n split over `threads` threads; returns seconds and
/// the sum of what the calls returned.
fn par(n: u64, threads: usize, f: impl Fn(u64) -> u64 + Sync) -> (f64, u64) {
    let t0 = Instant::now();
    let chunk = n.div_ceil(threads as u64);
    let total: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as u64)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    let lo = (t * chunk).min(n);
                    let hi = ((t + 1) * chunk).min(n);
                    (lo..hi).map(f).sum::<u64>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(u64::MAX)).sum()
    });
    (t0.elapsed().as_secs_f64(), total)
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let cmd: Vec<String> = std::env::args().collect();
    println!("command: {}", cmd.join(" "));
    println!(
        "machine: nproc={} cpu=\"{}\"",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model()
    );
    let n = a.keys;
    let rss0 = proc_status("VmRSS:").unwrap_or(0);
    let ix = Index::with_options(IndexOptions {
        shards: a.shards,
        expected_keys: if a.presize { n as usize } else { 0 },
        max_load: a.max_load,
        growth: a.growth,
        loc_bits: a.loc_bits,
    });
    println!(
        "config: keys={n} threads={} shards={} max_load={} growth={} loc_bits={} presize={}",
        a.threads,
        ix.shard_count(),
        a.max_load,
        a.growth,
        a.loc_bits,
        a.presize
    );
    let mask = u64::MAX >> (64 - a.loc_bits.clamp(1, 64));

    // Insert in a scattered order (key numbers permuted by the thread split).
    let (t_ins, dup) = par(n, a.threads, |i| {
        ix.insert(key(i), i & mask).is_some() as u64
    });
    let mem = ix.memory_bytes();
    let st = ix.stats();
    let hwm = proc_status("VmHWM:").unwrap_or(0);
    println!("keys:            {}", ix.len());
    println!(
        "memory_bytes:    {mem} ({:.1} MiB)",
        mem as f64 / (1 << 20) as f64
    );
    println!("bytes/key:       {:.2}", mem as f64 / n.max(1) as f64);
    println!(
        "load factor:     {:.4} (capacity {} slots)",
        st.len as f64 / st.capacity.max(1) as f64,
        st.capacity
    );
    println!(
        "displacement:    mean {:.2}, max {}",
        st.mean_displacement, st.max_displacement
    );
    println!(
        "slots:           at most {} bytes; {} entries in overflow maps",
        st.max_slot_bytes, st.overflow
    );
    println!(
        "peak RSS:        {} bytes ({:.2} bytes/key over the {:.1} MiB baseline)",
        hwm,
        hwm.saturating_sub(rss0) as f64 / n.max(1) as f64,
        rss0 as f64 / (1 << 20) as f64
    );
    println!(
        "huge pages:      {} MiB of anonymous memory in transparent huge pages",
        proc_field("/proc/self/smaps_rollup", "AnonHugePages:").unwrap_or(0) >> 20
    );
    println!(
        "insert:          {:.2} Mops/s ({:.2} s){}",
        n as f64 / t_ins / 1e6,
        t_ins,
        if dup > 0 {
            format!(" [{dup} DUPLICATES!]")
        } else {
            String::new()
        }
    );

    // Random hits: key numbers drawn uniformly at random.
    let (t_get, bad) = par(n, a.threads, |j| {
        let i = splitmix(j ^ 0xABCD) % n;
        (ix.get(key(i)) != Some(i & mask)) as u64
    });
    println!(
        "get (hits):      {:.2} Mops/s ({:.2} s){}",
        n as f64 / t_get / 1e6,
        t_get,
        if bad > 0 {
            format!(" [{bad} WRONG]")
        } else {
            String::new()
        }
    );
    // Misses: key numbers >= n were never inserted.
    let (t_miss, fp) = par(n, a.threads, |j| ix.get(key(n + j)).is_some() as u64);
    println!(
        "get (misses):    {:.2} Mops/s ({:.2} s), {fp} false hits",
        n as f64 / t_miss / 1e6,
        t_miss
    );
    if dup > 0 || bad > 0 || fp > 0 {
        std::process::exit(1);
    }
}
