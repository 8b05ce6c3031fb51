//! The engine on emulated drives (sim:optane fast tier, sim:qlc capacity
//! tier): every acknowledged write survives a power cut of both drives, the
//! pool takes its geometry from the drive (segments a multiple of the 64 KiB
//! IU, bands whole reclaim units), and the QLC drive sees only whole-IU
//! writes (no read-modify-write), so its WAF stays at 1.

use masse::device::sim::{ProfileKind, SimConfig, SimDevice};
use masse::device::Device;
use masse::{Db, DeviceSpec, Options, PoolConfig};
use std::sync::Arc;

fn cfg(fast: &SimDevice, cap: &SimDevice) -> PoolConfig {
    PoolConfig::tiered(
        DeviceSpec::Device(Arc::new(fast.clone()) as Arc<dyn Device>),
        DeviceSpec::Device(Arc::new(cap.clone()) as Arc<dyn Device>),
    )
}

fn opts() -> Options {
    Options {
        histograms: false,
        ..Options::default()
    }
}

fn val(i: u64, round: u64) -> Vec<u8> {
    format!("value-{i}-{round}-")
        .repeat(1 + (i % 40) as usize)
        .into_bytes()
}

#[test]
fn tiered_sim_pool_survives_power_cuts() {
    let fast = SimDevice::new(SimConfig::new(ProfileKind::Optane, 128 << 20).virtual_time())
        .expect("fast");
    let cap =
        SimDevice::new(SimConfig::new(ProfileKind::Qlc, 1 << 30).virtual_time()).expect("cap");
    let db = Db::create(&cfg(&fast, &cap), opts()).expect("create");
    // Formatting writes two 4 KiB superblocks; count from here.
    let s0 = cap.stats();
    let g = db.geometry().clone();
    assert_eq!(g.iu, 64 << 10);
    assert_eq!(g.segment_size % g.iu, 0);
    assert_eq!(
        g.band_size % cap.info().reclaim_unit,
        0,
        "band not whole reclaim units"
    );
    let mut db = Some(db);
    let n = 6000u64;
    for round in 0..3u64 {
        let d = db.take().expect("db");
        for i in 0..n {
            d.put(format!("k{i}").as_bytes(), &val(i, round))
                .expect("put");
        }
        // Acknowledged: now cut the power without closing.
        drop(d);
        fast.power_cut();
        cap.power_cut();
        let d = Db::open(&cfg(&fast, &cap), opts()).expect("recover");
        for i in (0..n).step_by(7) {
            assert_eq!(
                d.get(format!("k{i}").as_bytes()).expect("get").as_deref(),
                Some(&val(i, round)[..]),
                "key {i} after power cut {round}"
            );
        }
        db = Some(d);
    }
    db.take().expect("db").close().expect("close");
    let s = cap.stats();
    let host = s.ftl.host_write_bytes - s0.ftl.host_write_bytes;
    let nand = s.ftl.nand_write_bytes - s0.ftl.nand_write_bytes;
    assert!(host > 0);
    assert_eq!(
        s.ftl.rmw_ius - s0.ftl.rmw_ius,
        0,
        "the engine wrote partial IUs to the QLC drive"
    );
    let waf = nand as f64 / host as f64;
    assert!((waf - 1.0).abs() < 0.01, "QLC device WAF {waf}");
    cap.check_ftl().expect("ftl");
}
