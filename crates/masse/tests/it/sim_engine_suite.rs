//! The engine's own scenarios on emulated drives (sim:optane fast tier,
//! sim:qlc / sim:tlc capacity tier, virtual time): GC churn keeps every value,
//! checks clean and leaves the QLC drive's WAF at 1 even while masse's band GC
//! runs; atomic batches survive a torn power cut (unflushed blocks kept at
//! random); random bit flips on the capacity drive are reported as corruption,
//! never returned as data; a capacity-only pool on a TLC drive works.

use masse::device::sim::{FaultConfig, ProfileKind, SimConfig, SimDevice};
use masse::device::Device;
use masse::{Db, DeviceSpec, Error, Mode, Options, PoolConfig, WriteBatch};
use std::sync::Arc;

fn sim(kind: ProfileKind, cap: u64) -> SimDevice {
    SimDevice::new(SimConfig::new(kind, cap).virtual_time()).expect("sim")
}

fn spec(d: &SimDevice) -> DeviceSpec {
    DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>)
}

fn opts() -> Options {
    Options {
        histograms: false,
        ..Options::default()
    }
}

fn val(i: u64, ver: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{i}:{ver}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn gc_churn_on_qlc_keeps_device_waf_at_one() {
    let fast = sim(ProfileKind::Optane, 128 << 20);
    let cap = sim(ProfileKind::Qlc, 256 << 20);
    let cfg = PoolConfig::tiered(spec(&fast), spec(&cap));
    let db = Db::create(&cfg, opts()).expect("create");
    let s0 = cap.stats();
    let st = db.stats();
    let len = 4000;
    let n = (st.bands_total as f64 * st.band_size as f64 * 0.6 / (len + 80) as f64) as u64;
    let mut ver = vec![0u64; n as usize];
    for i in 0..n {
        db.put(format!("k{i}").as_bytes(), &val(i, 0, len))
            .expect("fill");
    }
    let mut x = 77u64;
    for _ in 0..n * 3 {
        let i = xorshift(&mut x) % n;
        ver[i as usize] += 1;
        db.put(format!("k{i}").as_bytes(), &val(i, ver[i as usize], len))
            .expect("churn");
    }
    let st = db.stats();
    assert!(
        st.gc_bands_freed > 0,
        "masse GC never ran: {}",
        st.to_text()
    );
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    db.close().expect("close");
    let db = Db::open(&cfg, opts()).expect("reopen");
    for i in (0..n).step_by(5) {
        assert_eq!(
            db.get(format!("k{i}").as_bytes()).expect("get").as_deref(),
            Some(&val(i, ver[i as usize], len)[..]),
            "key {i}"
        );
    }
    db.close().expect("close");
    let s1 = cap.stats();
    let waf = (s1.ftl.nand_write_bytes - s0.ftl.nand_write_bytes) as f64
        / (s1.ftl.host_write_bytes - s0.ftl.host_write_bytes) as f64;
    assert_eq!(
        s1.ftl.rmw_ius, s0.ftl.rmw_ius,
        "partial-IU writes reached the QLC drive"
    );
    assert_eq!(
        s1.ftl.gc_write_bytes, 0,
        "the QLC drive had to relocate data"
    );
    assert!(
        (waf - 1.0).abs() < 0.01,
        "QLC device WAF {waf} under masse GC"
    );
    cap.check_ftl().expect("ftl");
}

#[test]
fn batches_survive_a_torn_power_cut() {
    let fast = sim(ProfileKind::Optane, 128 << 20);
    let cap = sim(ProfileKind::Qlc, 512 << 20);
    let cfg = PoolConfig::tiered(spec(&fast), spec(&cap));
    let db = Db::create(&cfg, opts()).expect("create");
    for b in 0..400u64 {
        let mut wb = WriteBatch::new();
        for j in 0..10u64 {
            wb.put(format!("b{b}-{j}").as_bytes(), &val(b, j, 700))
                .expect("batch put");
        }
        db.write(wb).expect("write batch");
    }
    drop(db);
    // Unflushed blocks (none were acknowledged) survive or not at random.
    fast.power_cut_torn(0.5);
    cap.power_cut_torn(0.5);
    let db = Db::open(&cfg, opts()).expect("recover");
    for b in 0..400u64 {
        for j in 0..10u64 {
            assert_eq!(
                db.get(format!("b{b}-{j}").as_bytes())
                    .expect("get")
                    .as_deref(),
                Some(&val(b, j, 700)[..]),
                "batch {b} entry {j}"
            );
        }
    }
    assert!(db.check().expect("check").is_clean());
    db.close().expect("close");
}

#[test]
fn bit_flips_on_the_capacity_drive_are_reported_not_returned() {
    let fast = sim(ProfileKind::Optane, 128 << 20);
    let cap = sim(ProfileKind::Qlc, 256 << 20);
    let cfg = PoolConfig::tiered(spec(&fast), spec(&cap));
    let db = Db::create(&cfg, opts()).expect("create");
    // From here on the QLC drive corrupts about 1 stored block in 30.
    cap.set_faults(FaultConfig {
        seed: 11,
        bitflip: 1e-6,
        ..Default::default()
    });
    let n = 20_000u64;
    for i in 0..n {
        db.put(format!("k{i}").as_bytes(), &val(i, 1, 500))
            .expect("put");
    }
    db.close().expect("close");
    let db = Db::open(&cfg, opts()).expect("reopen");
    let (mut ok, mut bad) = (0, 0);
    for i in 0..n {
        match db.get(format!("k{i}").as_bytes()) {
            Ok(Some(v)) => {
                assert_eq!(v, val(i, 1, 500), "key {i}: wrong data returned");
                ok += 1;
            }
            Err(Error::Corruption(_)) => bad += 1,
            other => panic!("key {i}: {other:?}"),
        }
    }
    let flips = cap.stats().faults.bit_flips;
    assert!(flips > 0, "no flips injected");
    assert!(bad > 0, "{flips} flips but no corruption reported");
    assert!(ok > bad, "ok {ok} bad {bad}");
    let _ = db.close();
}

#[test]
fn capacity_only_pool_on_tlc() {
    let cap = sim(ProfileKind::Tlc, 256 << 20);
    let cfg = PoolConfig {
        capacity: vec![spec(&cap)],
        mode: Some(Mode::CapacityOnly),
        ..Default::default()
    };
    let db = Db::create(&cfg, opts()).expect("create");
    for i in 0..3000u64 {
        db.put(format!("k{i}").as_bytes(), &val(i, 0, 300))
            .expect("put");
    }
    drop(db);
    cap.power_cut();
    let db = Db::open(&cfg, opts()).expect("recover");
    for i in 0..3000u64 {
        assert_eq!(
            db.get(format!("k{i}").as_bytes()).expect("get").as_deref(),
            Some(&val(i, 0, 300)[..])
        );
    }
    db.close().expect("close");
    // Each durable group commit rewrites the log's tail 4 KiB block; the
    // drive's write buffer absorbs most of those rewrites.
    let s = cap.stats();
    assert!(
        s.ftl.host_write_bytes > 0 && s.ftl.buffer_merged_ius > 0,
        "{:?}",
        s.ftl
    );
    cap.check_ftl().expect("ftl");
}
