//! The two clocks of the emulator: in real time a command returns no earlier
//! than its modelled completion (so callers see the drive's latency); in
//! virtual time nothing sleeps and the device clock advances by exactly the
//! modelled latencies of commands issued one after another.

use masse::device::sim::{ProfileKind, SimConfig, SimDevice};
use masse::device::{AlignedBuf, Device};
use std::time::Instant;

#[test]
fn real_time_waits_for_the_model() {
    let dev = SimDevice::new(SimConfig::new(ProfileKind::Qlc, 64 << 20)).expect("sim");
    let b = AlignedBuf::new(64 << 10);
    dev.write_at(&b, 0).expect("write");
    dev.reset_latency();
    let mut r = AlignedBuf::new(4096);
    let t = Instant::now();
    for _ in 0..50 {
        dev.read_at(&mut r, 0).expect("read");
    }
    let wall = t.elapsed().as_nanos() as u64;
    let s = dev.stats();
    let modelled = (s.read_latency.mean_ns * s.read_latency.count as f64) as u64;
    assert_eq!(s.read_latency.count, 50);
    // A mapped QLC read costs the 120 µs sense at least.
    assert!(s.read_latency.p50_ns >= 120_000, "{:?}", s.read_latency);
    assert!(
        wall >= modelled * 99 / 100,
        "wall {wall} ns < modelled {modelled} ns"
    );
}

#[test]
fn virtual_time_advances_by_the_model_without_sleeping() {
    let dev =
        SimDevice::new(SimConfig::new(ProfileKind::Qlc, 64 << 20).virtual_time()).expect("sim");
    let b = AlignedBuf::new(64 << 10);
    dev.write_at(&b, 0).expect("write");
    dev.settle();
    let t0 = dev.now_ns();
    let mut r = AlignedBuf::new(4096);
    let mut sum = 0;
    let wall = Instant::now();
    for _ in 0..2000 {
        sum += dev.read_timed(&mut r, 0).expect("read");
    }
    // 2000 x ≥ 120 µs = ≥ 240 ms of device time, in far less wall time.
    assert_eq!(
        dev.now_ns() - t0,
        sum,
        "clock advanced by other than the read latencies"
    );
    assert!(sum >= 2000 * 120_000);
    assert!(
        wall.elapsed().as_nanos() < sum as u128,
        "virtual time slept"
    );
    dev.advance(1_000_000);
    assert_eq!(dev.now_ns() - t0, sum + 1_000_000);
}
