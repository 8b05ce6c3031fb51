//! `Db::space`: the user-available figure shrinks as data is written, errs low
//! (a pool accepts at least what it says is available), is near zero once a
//! write has failed with NoSpace, and comes back when data is deleted.
use crate::common;
use common::*;
use masse::{Db, Error};

#[test]
fn available_space_tracks_writes_and_errs_low() {
    let p = MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 512 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    let s0 = db.space();
    assert_eq!(s0.live_bytes, 0);
    assert!(s0.user_available_bytes > 0);
    assert!(
        s0.user_available_bytes < (s0.bands_total - s0.user_reserve_bands) as u64 * s0.band_payload,
        "the reserve bands are not available: {s0:?}"
    );
    let vlen = 4000usize;
    let rec = db.record_room(key(0).len(), vlen);
    assert!(rec > 4000 + 24, "a record costs more than its value: {rec}");
    let promised = s0.user_available_bytes / rec;
    let mut n = 0u64;
    let failed_at = loop {
        match db.put(&key(n), &value(n, 0, vlen)) {
            Ok(()) => n += 1,
            Err(Error::NoSpace(_)) => break n,
            Err(e) => panic!("put {n}: {e}"),
        }
        if n == promised / 2 {
            let s = db.space();
            let drop = s0.user_available_bytes - s.user_available_bytes;
            assert!(
                drop >= n * rec && drop <= n * rec + n * rec / 16 + s.band_payload / 64,
                "available fell by {drop} after {n} records of {rec} bytes of room"
            );
        }
    };
    assert!(
        failed_at >= promised,
        "the pool took {failed_at} records but said {promised} would fit: {}",
        db.stats().to_text()
    );
    let full = db.space();
    assert!(
        full.user_available_bytes < full.band_payload,
        "a full pool reports {} bytes available",
        full.user_available_bytes
    );
    for i in 0..failed_at / 2 {
        db.delete(&key(i)).expect("delete");
    }
    let after = db.space();
    assert!(
        after.user_available_bytes >= (failed_at / 2) * rec * 4 / 5,
        "deleted data counts as available again (less the tombstones): {after:?} after deleting {} records",
        failed_at / 2
    );
    db.close().expect("close");
}
