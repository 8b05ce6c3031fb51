//! Virtual time is deterministic: the same seed and the same operations give
//! the same counters, the same clock, the same latencies and the same faults;
//! another seed gives other faults.

use masse::device::sim::{FaultConfig, ProfileKind, SimConfig, SimDevice, SimStats};
use masse::device::{AlignedBuf, Device};

fn workload(seed: u64) -> (SimStats, Vec<u8>) {
    let faults = FaultConfig {
        seed,
        read_error: 0.01,
        write_error: 0.01,
        torn_write: 0.01,
        bitflip: 1e-6,
    };
    let dev = SimDevice::new(
        SimConfig::new(ProfileKind::Qlc, 64 << 20)
            .virtual_time()
            .with_faults(faults),
    )
    .expect("sim");
    let mut b = AlignedBuf::new(16384);
    let mut x = 99u64;
    for i in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % ((64 << 20) / 16384)) * 16384;
        if i % 3 == 0 {
            let _ = dev.read_at(&mut b, off);
        } else {
            b.fill(i as u8);
            let _ = dev.write_at(&b, off);
        }
        if i % 1000 == 0 {
            dev.sync().expect("sync");
        }
    }
    let mut all = AlignedBuf::new(64 << 20);
    dev.set_faults(FaultConfig::default());
    dev.read_at(&mut all, 0).expect("read");
    (dev.stats(), all.to_vec())
}

#[test]
fn same_seed_same_everything() {
    let (a, da) = workload(7);
    let (b, db) = workload(7);
    assert_eq!(
        serde_json::to_string(&a.ftl).ok(),
        serde_json::to_string(&b.ftl).ok()
    );
    assert_eq!(a.faults, b.faults);
    assert_eq!(a.now_ns, b.now_ns);
    assert_eq!(a.read_latency.p999_ns, b.read_latency.p999_ns);
    assert_eq!(a.write_latency.max_ns, b.write_latency.max_ns);
    assert!(da == db, "stored data differs between identical runs");
    assert!(a.faults.read_errors > 0 && a.faults.write_errors > 0 && a.faults.torn_writes > 0);
    assert!(a.faults.bit_flips > 0);

    let (c, dc) = workload(8);
    assert_ne!(a.faults, c.faults, "another seed gave the same faults");
    assert!(da != dc);
}
