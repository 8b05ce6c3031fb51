//! Model-based random operations against a BTreeMap on emulated drives
//! (sim:optane fast tier + sim:qlc capacity tier, virtual time), with clean
//! reopens, crashes, power cuts and torn power cuts (each unflushed 4 KiB
//! block survives or not, from the drive's seed). Afterwards the QLC drive
//! has seen no partial-IU write and its FTL is consistent.

use masse::device::sim::{FaultConfig, ProfileKind, SimConfig, SimDevice};
use masse::device::Device;
use masse::{Db, DeviceSpec, Options, PoolConfig, WriteBatch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16, u16),
    Del(u16),
    Get(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Reopen,
    Crash,
    PowerCut,
    TornPowerCut(u8),
    Gc,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0u16..300, any::<u16>(), 0u16..3000).prop_map(|(k, v, l)| Op::Put(k, v, l)),
        10 => (0u16..300).prop_map(Op::Del),
        20 => (0u16..300).prop_map(Op::Get),
        5 => prop::collection::vec((0u16..300, prop::option::of(0u16..2000)), 1..8).prop_map(Op::Batch),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        2 => Just(Op::PowerCut),
        2 => (0u8..=100).prop_map(Op::TornPowerCut),
        2 => Just(Op::Gc),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

fn val(k: u16, v: u16, len: u16) -> Vec<u8> {
    let mut x = format!("{k}/{v}/").into_bytes();
    x.resize(len as usize, b'a' + (k % 26) as u8);
    x
}

fn run(seed: u64, ops: Vec<Op>) {
    let sim = |kind, cap| {
        SimDevice::new(
            SimConfig::new(kind, cap)
                .virtual_time()
                .with_faults(FaultConfig {
                    seed,
                    ..Default::default()
                }),
        )
        .expect("sim")
    };
    let fast = sim(ProfileKind::Optane, 48 << 20);
    let cap = sim(ProfileKind::Qlc, 16 << 20);
    let cfg = PoolConfig {
        segment_size: Some(64 << 10),
        band_size: Some(1 << 20),
        ..PoolConfig::tiered(
            DeviceSpec::Device(Arc::new(fast.clone()) as Arc<dyn Device>),
            DeviceSpec::Device(Arc::new(cap.clone()) as Arc<dyn Device>),
        )
    };
    let opts = || Options {
        histograms: false,
        ..Options::default()
    };
    let mut model: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let mut db = Some(Db::create(&cfg, opts()).expect("create"));
    let rmw0 = cap.stats().ftl.rmw_ius;
    for op in ops {
        let d = db.as_ref().expect("open");
        match op {
            Op::Put(k, v, l) => {
                d.put(&key(k), &val(k, v, l)).expect("put");
                model.insert(k, val(k, v, l));
            }
            Op::Del(k) => {
                let existed = d.delete(&key(k)).expect("delete");
                assert_eq!(existed, model.remove(&k).is_some(), "delete result for {k}");
            }
            Op::Get(k) => assert_eq!(
                d.get(&key(k)).expect("get"),
                model.get(&k).cloned(),
                "get {k}"
            ),
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(l) => b.put(&key(*k), &val(*k, *l, *l)).expect("batch put"),
                        None => b.delete(&key(*k)).expect("batch del"),
                    }
                }
                d.write(b).expect("write batch");
                for (k, v) in items {
                    match v {
                        Some(l) => model.insert(k, val(k, l, l)),
                        None => model.remove(&k),
                    };
                }
            }
            Op::Reopen => {
                db.take().expect("open").close().expect("close");
                db = Some(Db::open(&cfg, opts()).expect("reopen"));
            }
            Op::Crash => {
                drop(db.take());
                db = Some(Db::open(&cfg, opts()).expect("recover after crash"));
            }
            Op::PowerCut => {
                drop(db.take());
                fast.power_cut();
                cap.power_cut();
                db = Some(Db::open(&cfg, opts()).expect("recover after power cut"));
            }
            Op::TornPowerCut(pct) => {
                drop(db.take());
                fast.power_cut_torn(pct as f64 / 100.0);
                cap.power_cut_torn(pct as f64 / 100.0);
                db = Some(Db::open(&cfg, opts()).expect("recover after torn power cut"));
            }
            Op::Gc => {
                let _ = d.gc_once().expect("gc");
            }
        }
    }
    let d = db.take().expect("open");
    for (k, v) in &model {
        assert_eq!(
            d.get(&key(*k)).expect("get").as_ref(),
            Some(v),
            "final get {k}"
        );
    }
    let rep = d.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    assert_eq!(rep.live_keys as usize, model.len());
    d.close().expect("close");
    assert_eq!(
        cap.stats().ftl.rmw_ius,
        rmw0,
        "partial-IU writes reached the QLC drive"
    );
    cap.check_ftl().expect("ftl");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn tiered_on_emulated_drives_matches_model(seed in any::<u64>(), ops in prop::collection::vec(op(), 1..300)) {
        run(seed, ops);
    }
}
