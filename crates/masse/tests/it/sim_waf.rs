//! Device write amplification of the FTL model on known patterns:
//! sequential overwrites of the whole drive give WAF ≈ 1; uniform random
//! IU-sized writes at known over-provisioning land between the analytic
//! greedy-GC approximation and the (worse) FIFO-cleaning expectation; 4 KiB
//! random writes to a 64 KiB-IU QLC drive pay the read-modify-write (16x)
//! on top of GC.

use masse::device::sim::{ProfileKind, SimConfig, SimDevice};
use masse::device::{AlignedBuf, Device};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn fill(dev: &SimDevice, bs: usize) {
    let b = AlignedBuf::new(bs);
    let cap = dev.info().capacity;
    let mut off = 0;
    while off + bs as u64 <= cap {
        dev.write_at(&b, off).expect("write");
        off += bs as u64;
    }
}

#[test]
fn sequential_overwrites_give_waf_one() {
    let dev =
        SimDevice::new(SimConfig::new(ProfileKind::Qlc, 256 << 20).virtual_time()).expect("sim");
    for _ in 0..3 {
        fill(&dev, 256 << 10);
    }
    let s = dev.stats();
    assert!(s.ftl.erases > 0, "the drive never erased");
    assert!((s.waf - 1.0).abs() < 0.01, "sequential WAF {}", s.waf);
    assert_eq!(
        s.ftl.gc_write_bytes, 0,
        "GC relocated data on a sequential workload"
    );
}

/// FIFO cleaning under uniform random writes: the valid fraction x of a
/// victim solves x = exp(-alpha (1 - x)), alpha = physical / logical; WAF = 1/(1-x).
fn fifo_waf(alpha: f64) -> f64 {
    let mut x: f64 = 0.5;
    for _ in 0..200 {
        x = (-alpha * (1.0 - x)).exp();
    }
    1.0 / (1.0 - x)
}

/// Desnoyers' approximation for greedy cleaning: (1 + rho) / (2 rho),
/// rho = (physical - logical) / logical.
fn greedy_waf(alpha: f64) -> f64 {
    let rho = alpha - 1.0;
    (1.0 + rho) / (2.0 * rho)
}

#[test]
fn uniform_random_matches_greedy_gc_expectation() {
    let cap = 128u64 << 20;
    let mut cfg = SimConfig::new(ProfileKind::Tlc, cap).virtual_time();
    cfg.op = Some(0.15);
    cfg.nodata = true;
    let dev = SimDevice::new(cfg).expect("sim");
    fill(&dev, 256 << 10);
    let b = AlignedBuf::new(4096);
    let blocks = cap / 4096;
    let mut x = 42u64;
    // Reach steady state, then measure.
    for _ in 0..blocks * 2 {
        dev.write_at(&b, (xorshift(&mut x) % blocks) * 4096)
            .expect("write");
    }
    let s0 = dev.stats();
    for _ in 0..blocks * 2 {
        dev.write_at(&b, (xorshift(&mut x) % blocks) * 4096)
            .expect("write");
    }
    let s1 = dev.stats();
    let waf = (s1.ftl.nand_write_bytes - s0.ftl.nand_write_bytes) as f64
        / (s1.ftl.host_write_bytes - s0.ftl.host_write_bytes) as f64;
    // Blocks that hold data in steady state: all but the open and free ones
    // (about 4 per die: host, GC, and the free reserve GC keeps).
    let dies = dev.profile().dies() as u64;
    let per_block = s1.physical_bytes / s1.blocks as u64;
    let usable = s1.physical_bytes - 4 * dies * per_block;
    let alpha = usable as f64 / cap as f64;
    let (lo, hi) = (greedy_waf(alpha), fifo_waf(alpha));
    eprintln!("alpha {alpha:.3}: greedy approx {lo:.2}, FIFO {hi:.2}, measured {waf:.2}");
    assert!(waf > 1.5, "random writes at 15% OP must amplify, got {waf}");
    assert!(
        waf >= 0.8 * lo && waf <= 1.1 * hi,
        "WAF {waf:.2} outside [{:.2}, {:.2}] (alpha {alpha:.3})",
        0.8 * lo,
        1.1 * hi
    );
}

#[test]
fn qlc_small_random_writes_pay_iu_read_modify_write() {
    let cap = 256u64 << 20;
    let dev = SimDevice::new(SimConfig::new(ProfileKind::Qlc, cap).virtual_time()).expect("sim");
    assert_eq!(dev.info().indirection_unit, 64 << 10);
    // One 4 KiB write to a fresh drive: one 64 KiB IU programmed, nothing read.
    let b = AlignedBuf::new(4096);
    dev.write_at(&b, 0).expect("write");
    let s = dev.stats();
    assert_eq!(s.ftl.nand_write_bytes, 64 << 10);
    assert_eq!(s.ftl.rmw_ius, 1);
    assert_eq!(s.ftl.nand_read_bytes, 0);
    // A second 4 KiB write into the same IU merges in the write buffer.
    dev.write_at(&b, 4096).expect("write");
    assert_eq!(dev.stats().ftl.nand_write_bytes, 64 << 10);
    // Fill the drive (pushes IU 0 out of the buffer), then rewrite 4 KiB of a
    // mapped IU: the old IU is read and a whole new one programmed.
    fill(&dev, 256 << 10);
    let s0 = dev.stats();
    dev.write_at(&b, 8192).expect("write");
    let s1 = dev.stats();
    assert_eq!(s1.ftl.rmw_ius - s0.ftl.rmw_ius, 1);
    assert_eq!(s1.ftl.nand_read_bytes - s0.ftl.nand_read_bytes, 64 << 10);
    assert!(s1.ftl.nand_write_bytes - s0.ftl.nand_write_bytes >= 64 << 10);
    // Full-span 4 KiB random writes: RMW (16x) times GC.
    let blocks = cap / 4096;
    let mut x = 7u64;
    for _ in 0..blocks / 2 {
        dev.write_at(&b, (xorshift(&mut x) % blocks) * 4096)
            .expect("write");
    }
    let s2 = dev.stats();
    let waf = (s2.ftl.nand_write_bytes - s1.ftl.nand_write_bytes) as f64
        / (s2.ftl.host_write_bytes - s1.ftl.host_write_bytes) as f64;
    assert!(waf > 16.0, "4 KiB random WAF on a 64 KiB-IU drive {waf}");
    dev.check_ftl().expect("ftl invariants");
}
