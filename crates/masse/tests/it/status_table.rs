//! The Segment Status Table: overwrites and deletes show up as death size in the
//! segments that held the old records, and as invalid bytes in their band.
use crate::common;
use common::*;
use masse::format::{Codec, Loc};
use masse::Db;

#[test]
fn overwrites_and_deletes_are_accounted() {
    let p = MemPool::tiered(48 << 20, 32 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..2000 {
        db.put(&key(i), &value(i, 0, 200)).expect("put");
    }
    let before: u64 = db.band_status().iter().map(|b| b.invalid_bytes).sum();
    assert_eq!(before, 0, "nothing is dead yet");
    for i in 0..500 {
        db.put(&key(i), &value(i, 1, 200)).expect("overwrite");
    }
    for i in 500..600 {
        assert!(db.delete(&key(i)).expect("delete"));
    }
    let t = db.band_status();
    let invalid: u64 = t.iter().map(|b| b.invalid_bytes).sum();
    let live: u64 = t.iter().map(|b| b.live_bytes).sum();
    // 600 records of 232 bytes (key 19 + value 200 + header 8, counted
    // 8-aligned as the index's locations give lengths) died.
    let rec = Loc::len8_of(Codec::V3.base_len(key(0).len(), 200)) as u64;
    assert_eq!(rec, 232);
    assert!(invalid >= 600 * rec, "invalid {invalid}");
    assert_eq!(live, db.stats().live_bytes);
    assert_eq!(
        t.iter()
            .flat_map(|b| &b.segments)
            .filter(|s| s.use_state == "open")
            .count(),
        1
    );
    let used = t.iter().filter(|b| b.state != "free").count();
    assert!(used >= 2, "records span several bands");
    db.close().expect("close");
}
