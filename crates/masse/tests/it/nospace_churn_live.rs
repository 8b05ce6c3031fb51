//! Issue 44: overwrites do not grow live data, so while GC can win space back
//! they must wait for it, never fail.
//! An NBD volume at 79 % live got ENOSPC within seconds under random 4 KiB
//! overwrites. Here four threads overwrite 4 KiB values at 75 and 80 % live
//! (of the raw capacity tier) on a pool of 48 bands of 1 MiB, capacity-only
//! and tiered, and every put must succeed. It does not reproduce the NBD
//! failure, whose cause is still open (issue 44).
//! On 48 bands a fill stops near 85 % of raw, where the user writes' reserve
//! and GC's working room (about 4 bands) begin.
use crate::common;
use common::*;
use masse::Db;

const VALUE: usize = 4096;
const THREADS: u64 = 4;

fn churn(p: MemPool, util: f64, rounds: u64) {
    let db = Db::create(&p.config(), opts()).expect("create");
    let st = db.stats();
    let payload = st.bands_total as u64 * st.band_size;
    let rec = masse::format::record_footprint(key(0).len(), VALUE);
    let n = ((payload as f64 * util) / rec as f64) as u64 / THREADS * THREADS;
    for i in 0..n {
        if let Err(e) = db.put(&key(i), &value(i, 0, VALUE)) {
            panic!("fill to {util} failed at key {i} of {n}: {e}");
        }
    }
    // Each thread owns the keys i ≡ t (mod THREADS), so the last value of
    // each key is known.
    let vers: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let db = &db;
                s.spawn(move || {
                    let mut last = Vec::new();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                    for j in 1..=rounds * n / THREADS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (x % (n / THREADS)) * THREADS + t;
                        if let Err(e) = db.put(&key(i), &value(i, j, VALUE)) {
                            let st = db.stats();
                            panic!(
                                "overwrite {j} at {:.1} % live failed: {e}\n{}",
                                st.live_bytes as f64 * 100.0 / payload as f64,
                                st.to_text()
                            );
                        }
                        last.push((i, j));
                    }
                    last
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("writer")).collect()
    });
    let mut want = std::collections::HashMap::new();
    for (i, j) in vers.into_iter().flatten() {
        want.insert(i, j);
    }
    for (i, j) in want {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, j, VALUE)[..])
        );
    }
    db.close().expect("close");
}

fn small(util: f64) {
    churn(
        MemPool::capacity_only(48 << 20).with_geometry(64 << 10, 1 << 20),
        util,
        3,
    );
    churn(
        MemPool::tiered(48 << 20, 48 << 20).with_geometry(64 << 10, 1 << 20),
        util,
        3,
    );
}

#[test]
fn small_bands_75() {
    small(0.75);
}

#[test]
fn small_bands_80() {
    small(0.80);
}
