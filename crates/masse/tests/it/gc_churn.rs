//! GC correctness under overwrite churn at > 90 % utilization: every value stays
//! readable, space is reclaimed, the pool checks clean, and write amplification is sane.
use crate::common;
use common::*;
use masse::Db;

fn churn(p: MemPool, value_len: usize, util: f64) {
    let db = Db::create(&p.config(), opts()).expect("create");
    let st = db.stats();
    let payload = st.bands_total as u64 * st.band_size;
    // Live data ≈ util of the raw capacity tier (records with their summary
    // entries and marks, in the format new pools are created with).
    let rec = masse::format::record_footprint(key(0).len(), value_len);
    let n = ((payload as f64 * util) / rec as f64) as u64;
    let mut ver = vec![0u64; n as usize];
    for i in 0..n {
        db.put(&key(i), &value(i, 0, value_len)).expect("fill");
    }
    let mut x = 12345u64;
    for _ in 0..n * 4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % n;
        ver[i as usize] += 1;
        db.put(&key(i), &value(i, ver[i as usize], value_len))
            .expect("overwrite under churn");
    }
    for i in 0..n {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, ver[i as usize], value_len)[..]),
            "key {i}"
        );
    }
    let st = db.stats();
    assert!(st.gc_bands_freed > 0, "GC must have run: {}", st.to_text());
    // Records alone fill ≥ 75 % of the raw capacity tier; with summary entries and
    // padding the bands in use are > 90 % live, so greedy GC must move ~9 bytes per
    // user byte (1/(1-0.89)). Bound it well above that to catch runaway GC only.
    let raw = st.bands_total as f64 * st.band_size as f64;
    assert!(
        st.live_bytes as f64 / raw > 0.70,
        "utilization {}",
        st.live_bytes as f64 / raw
    );
    let gc_amp = st.gc_bytes_moved as f64 / st.user_bytes_written as f64;
    assert!(
        gc_amp < 16.0,
        "GC moved {gc_amp:.2} bytes per user byte: {}",
        st.to_text()
    );
    // With a write pad the capacity tier sees only full segments, so host WAF ≈ 1 + GC.
    // Without one, every durable group commit also rewrites a 4 KiB tail block.
    if st.mode == "tiered" {
        assert!(
            st.host_write_amplification < gc_amp * 1.3 + 2.0,
            "WAF {}",
            st.host_write_amplification
        );
    }
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    assert_eq!(rep.live_keys, n);
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    for i in (0..n).step_by(7) {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, ver[i as usize], value_len)[..])
        );
    }
    db.close().expect("close");
}

#[test]
fn tiered_90_percent() {
    churn(
        MemPool::tiered(48 << 20, 24 << 20).with_geometry(32 << 10, 512 << 10),
        200,
        0.80,
    );
}

#[test]
fn capacity_only_90_percent() {
    churn(
        MemPool::capacity_only(24 << 20).with_geometry(32 << 10, 512 << 10),
        200,
        0.80,
    );
}

/// Deletes in bursts beside puts in a full capacity-only pool (GC moves share
/// the user writes' band): two threads each delete a run of their keys and
/// put them back, over and over, while GC passes reclaim the tombstoned
/// space. Deletes keep a reserve of one band where user writes keep two, and
/// a GC pass may take the last free band: this is the load under which a
/// burst of deletes could fill the band a pass had just opened for its moves
/// (the admission rule against that is unit-tested in `engine::commit`; this
/// test did not reproduce the stall without the rule, in 3 runs).
#[test]
fn capacity_only_delete_bursts() {
    let p = MemPool::capacity_only(24 << 20).with_geometry(32 << 10, 512 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    let st = db.stats();
    let payload = st.bands_total as u64 * st.band_size;
    let value_len = 200;
    let rec = masse::format::record_footprint(key(0).len(), value_len);
    let n = ((payload as f64 * 0.75) / rec as f64) as u64 / 2 * 2;
    for i in 0..n {
        db.put(&key(i), &value(i, 0, value_len)).expect("fill");
    }
    let half = n / 2;
    let burst = 12000.min(half);
    let vers: Vec<Vec<u64>> = std::thread::scope(|s| {
        let run = |t: u64| {
            let db = &db;
            move || {
                let mut ver = vec![0u64; half as usize];
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                for _ in 0..12 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let start = x % (half - burst + 1);
                    for j in start..start + burst {
                        db.delete(&key(t * half + j)).expect("delete in a burst");
                    }
                    for j in start..start + burst {
                        ver[j as usize] += 1;
                        let i = t * half + j;
                        db.put(&key(i), &value(i, ver[j as usize], value_len))
                            .expect("put back after a burst");
                    }
                }
                ver
            }
        };
        let a = s.spawn(run(0));
        let b = s.spawn(run(1));
        vec![a.join().expect("thread 0"), b.join().expect("thread 1")]
    });
    for i in 0..n {
        let v = vers[(i / half) as usize][(i % half) as usize];
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, v, value_len)[..]),
            "key {i}"
        );
    }
    assert!(db.stats().gc_bands_freed > 0, "GC must have run");
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
    assert_eq!(rep.live_keys, n);
    db.close().expect("close");
}
