//! Model-based random operations against a BTreeMap, with clean reopens,
//! simulated crashes (drop without close) and power cuts, in every configuration.
use crate::common;
use common::*;
use masse::{Db, GcPolicy, Options, WriteBatch};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16, u16),
    Del(u16),
    Get(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Reopen,
    Crash,
    PowerCut,
    Gc,
}

fn op() -> impl Strategy<Value = Op> {
    op_with_gc(2)
}

fn op_with_gc(gc: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0u16..300, any::<u16>(), 0u16..3000).prop_map(|(k, v, l)| Op::Put(k, v, l)),
        10 => (0u16..300).prop_map(Op::Del),
        20 => (0u16..300).prop_map(Op::Get),
        5 => prop::collection::vec((0u16..300, prop::option::of(0u16..2000)), 1..8).prop_map(Op::Batch),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        2 => Just(Op::PowerCut),
        gc => Just(Op::Gc),
    ]
}

/// Few keys and two value lengths: most puts find their key's newest record
/// in the open segment at the same length, and are absorbed there
/// (`Options::absorb_overwrites`) between crashes, power cuts, GC and batches.
fn op_hot() -> impl Strategy<Value = Op> {
    let len = prop_oneof![Just(200u16), Just(1500u16)];
    prop_oneof![
        50 => (0u16..24, any::<u16>(), len).prop_map(|(k, v, l)| Op::Put(k, v, l)),
        6 => (0u16..24).prop_map(Op::Del),
        15 => (0u16..24).prop_map(Op::Get),
        5 => prop::collection::vec((0u16..24, prop::option::of(Just(200u16))), 1..4).prop_map(Op::Batch),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        2 => Just(Op::PowerCut),
        4 => Just(Op::Gc),
    ]
}

fn val(k: u16, v: u16, len: u16) -> Vec<u8> {
    value(k as u64, v as u64, len as usize)
}

fn run(p: MemPool, ops: Vec<Op>) {
    run_with(p, ops, opts())
}

fn run_with(p: MemPool, ops: Vec<Op>, opts: Options) {
    let opts = || opts.clone();
    let mut model: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let mut db = Some(Db::create(&p.config(), opts()).expect("create"));
    for op in ops {
        let d = db.as_ref().expect("open");
        match op {
            Op::Put(k, v, l) => {
                let value = val(k, v, l);
                d.put(&key(k as u64), &value).expect("put");
                model.insert(k, value);
            }
            Op::Del(k) => {
                let existed = d.delete(&key(k as u64)).expect("delete");
                assert_eq!(existed, model.remove(&k).is_some(), "delete result for {k}");
            }
            Op::Get(k) => {
                assert_eq!(
                    d.get(&key(k as u64)).expect("get"),
                    model.get(&k).cloned(),
                    "get {k}"
                );
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(l) => b.put(&key(*k as u64), &val(*k, *l, *l)).expect("batch put"),
                        None => b.delete(&key(*k as u64)).expect("batch del"),
                    }
                }
                d.write(b).expect("write batch");
                for (k, v) in items {
                    match v {
                        Some(l) => {
                            model.insert(k, val(k, l, l));
                        }
                        None => {
                            model.remove(&k);
                        }
                    }
                }
            }
            Op::Reopen => {
                db.take().expect("open").close().expect("close");
                db = Some(Db::open(&p.config(), opts()).expect("reopen"));
            }
            Op::Crash => {
                drop(db.take());
                db = Some(Db::open(&p.config(), opts()).expect("recover after crash"));
            }
            Op::PowerCut => {
                drop(db.take());
                p.power_cut();
                db = Some(Db::open(&p.config(), opts()).expect("recover after power cut"));
            }
            Op::Gc => {
                let _ = d.gc_once().expect("gc");
            }
        }
    }
    let d = db.take().expect("open");
    for (k, v) in &model {
        assert_eq!(
            d.get(&key(*k as u64)).expect("get").as_ref(),
            Some(v),
            "final get {k}"
        );
    }
    let n = d.iter().map(|r| r.expect("iter")).count();
    assert_eq!(n, model.len(), "iteration count");
    let rep = d.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    assert_eq!(rep.live_keys as usize, model.len());
    d.close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn tiered_matches_model(ops in prop::collection::vec(op(), 1..400)) {
        run(MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10), ops);
    }

    /// GC four times as often, with GC moves in a stream of their own (the
    /// default, `Options::gc_separate`: two open bands, and the placement
    /// rule that keeps recovery's "later position wins" true), the same with
    /// user writes cold after one band (`cold_user_writes`; the automatic
    /// age, half of this pool, is never reached here), and among the user
    /// writes.
    #[test]
    fn tiered_gc_streams_match_model(ops in prop::collection::vec(op_with_gc(8), 1..400)) {
        let p = || MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10);
        let sep = Options { gc_separate: true, gc_policy: GcPolicy::CostBenefit, ..opts() };
        run_with(p(), ops.clone(), sep.clone());
        let cold = Options { cold_age_bands: 1, ..sep };
        run_with(p(), ops.clone(), cold);
        let mixed = Options { gc_separate: false, gc_policy: GcPolicy::Greedy, ..opts() };
        run_with(p(), ops, mixed);
    }

    /// Overwrites absorbed in the open segment, with the option on and off.
    #[test]
    fn tiered_absorbed_overwrites_match_model(ops in prop::collection::vec(op_hot(), 1..500)) {
        let p = || MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10);
        run_with(p(), ops.clone(), opts());
        run_with(p(), ops, Options { absorb_overwrites: false, ..opts() });
    }

    #[test]
    fn capacity_only_matches_model(ops in prop::collection::vec(op(), 1..400)) {
        run(MemPool::capacity_only(24 << 20).with_geometry(16 << 10, 256 << 10), ops);
    }

    #[test]
    fn scm_only_matches_model(ops in prop::collection::vec(op(), 1..300)) {
        run(MemPool::scm_only(24 << 20).with_geometry(8 << 10, 128 << 10), ops);
    }
}
