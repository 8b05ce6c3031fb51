//! A checkpoint names records in segments still in DRAM. After a crash lost
//! such a segment, the next run writes other records into its slot; a later
//! crash that loads the same checkpoint must not take the old entries as
//! pointing there. Recovery used to keep them once the slot was written
//! again, and a key then read another record's bytes (or a deleted key came
//! back as an entry into garbage). It keeps only entries below the band's
//! checkpointed written slots now (design.md §10.4 step 2).
use crate::common;
use common::*;
use masse::Db;

fn opts() -> masse::Options {
    masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        checkpoint_on_close: false,
        ..common::opts()
    }
}

/// Writes `before`, then `k` = "the value", then a checkpoint; then
/// `after`; then crashes, reopens (replay places the pad's records again,
/// at other offsets), makes them durable, crashes again and reopens.
fn twice(before: &[(u64, &[u8])], after: &dyn Fn(&Db)) -> Db {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for &(i, v) in before {
        db.put(&key(i), v).expect("put");
    }
    db.put(&key(7), b"the value").expect("put");
    db.checkpoint().expect("checkpoint"); // names key 7 in the DRAM segment
    after(&db);
    drop(db); // crash: the segment never reached the capacity tier
    let db = Db::open(&p.config(), opts()).expect("first recovery");
    db.seal_open_segments().expect("seal");
    drop(db); // crash again, before another checkpoint
    let db = Db::open(&p.config(), opts()).expect("second recovery");
    assert_eq!(db.stats().recovery_source, "checkpoint");
    db
}

#[test]
fn a_lost_segments_entries_do_not_point_into_its_successor() {
    let big = vec![b'x'; 3000];
    let db = twice(&[(1, &big), (1, b"short")], &|_| {});
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&b"the value"[..])
    );
    assert_eq!(
        db.get(&key(1)).expect("get").as_deref(),
        Some(&b"short"[..])
    );
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}

#[test]
fn a_deleted_key_stays_deleted() {
    let big = vec![b'x'; 3000];
    let db = twice(&[(1, &big), (1, b"short")], &|db| {
        assert!(db.delete(&key(7)).expect("delete"));
    });
    assert_eq!(db.get(&key(7)).expect("get"), None);
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}

/// The history both tests below share: key 7 goes into a segment still in
/// DRAM when a checkpoint names it; the segment is then sealed (durable, so
/// the pad lets go of its batches) and the process crashes.
fn checkpoint_then_seal() -> MemPool {
    let p = MemPool::tiered(64 << 20, 16 << 20).with_geometry(32 << 10, 512 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(&key(1), b"before").expect("put");
    db.seal_open_segments().expect("seal");
    db.put(&key(7), b"a value only this segment holds")
        .expect("put");
    db.checkpoint().expect("checkpoint"); // names key 7 in the DRAM segment
    db.seal_open_segments().expect("seal"); // durable; the pad lets go
    drop(db); // crash
    p
}

/// A key the checkpoint named in a DRAM segment whose segment then became
/// durable (its pad batches released) and was later wiped is lost, and the
/// open must say so: the entry dropped as the checkpoint loads is counted
/// when neither the scan nor the pad brings the key back.
#[test]
fn a_key_of_a_lost_segment_is_reported() {
    use masse::device::{AlignedBuf, Device};
    let p = checkpoint_then_seal();
    let cap = &p.caps[0];
    let at = find_bytes(cap, b"a value only this segment holds").expect("on the tier");
    // Wipe the segment: from its header (the nearest "SEGH" block before the
    // value) for one segment's length. It then looks never written.
    let mut b = AlignedBuf::new(4096);
    let mut blk = at & !4095;
    loop {
        cap.read_at(&mut b, blk).expect("read");
        if &b[..4] == b"SEGH" {
            break;
        }
        blk = blk
            .checked_sub(4096)
            .expect("a segment header before the value");
    }
    let zero = AlignedBuf::new(32 << 10);
    cap.write_at(&zero, blk).expect("wipe");
    cap.sync().expect("sync");
    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(db.stats().recovery_source, "checkpoint");
    assert_eq!(
        db.get(&key(7)).expect("get"),
        None,
        "the wiped value came back?"
    );
    let st = db.stats();
    assert_eq!(st.corruptions, 1, "key 7, and only key 7, is lost");
    assert!(
        st.recovery_warnings.iter().any(|w| w.contains("lost")),
        "the loss was not reported: {:?}",
        st.recovery_warnings
    );
    assert_eq!(
        db.get(&key(1)).expect("get").as_deref(),
        Some(&b"before"[..])
    );
    db.close().expect("close");
}

/// The same history without the wipe: the entry dropped as the checkpoint
/// loads comes back from the scan, and nothing is reported (the loss count
/// of the test above is not a false positive).
#[test]
fn a_rescanned_key_is_not_reported() {
    let p = checkpoint_then_seal();
    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(db.stats().recovery_source, "checkpoint");
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&b"a value only this segment holds"[..])
    );
    let st = db.stats();
    assert_eq!(st.corruptions, 0, "{:?}", st.recovery_warnings);
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
    db.close().expect("close");
}
