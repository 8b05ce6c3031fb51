//! A partly written segment reopened after a crash must not keep stale bytes
//! past its last valid record: a later crash would make recovery parse them as
//! records of the segment (they carry its tag) and resurrect an unacknowledged
//! write. Found by the `masse stress` kill loop (scm-only, seed 35: a value whose
//! write was in flight at one crash, absent after it, came back two crashes later).
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::format::{encode_record, record_len, seg_tag, SegmentHeader};
use masse::Db;

/// Forged in the version-2 record format (records carry their segment's tag);
/// recovery's erasure of the reopened segment's tail is the same in version 3.
#[test]
fn stale_record_past_a_torn_tail_is_not_resurrected() {
    let p = MemPool::capacity_only(16 << 20)
        .with_geometry(64 << 10, 1 << 20)
        .with_format(2);
    let dev = p.caps[0].clone();
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"A", b"first-record-value").expect("put");
    db.put(b"B", b"second").expect("put");
    drop(db); // crash with the open segment partly written

    // Forge what a crash in the middle of a multi-block tail write leaves: a torn
    // record right after B, and a whole record of the same segment further on
    // (an unacknowledged put of K) at a 4 KiB boundary.
    let a_at = find_bytes(&dev, b"first-record-value").expect("needle not found");
    // A is the segment's first record: after the 64-byte segment header, its own
    // 24-byte header and the 1-byte key.
    let seg_start = a_at - 64 - 24 - 1;
    assert_eq!(seg_start % 4096, 0);
    let mut seg = AlignedBuf::new(64 << 10);
    dev.read_at(&mut seg, seg_start).expect("read segment");
    let sh = SegmentHeader::decode(&seg).expect("segment header");
    let tag = seg_tag(sh.segment_seq);
    let b_end = (find_bytes(&dev, b"second").expect("needle not found") - seg_start) as usize + 8;
    for x in &mut seg[b_end..b_end + 40] {
        *x = 0xa5; // torn: not a valid record
    }
    let k_val = vec![b'K'; 100];
    let mut k = vec![0u8; record_len(1, k_val.len())];
    encode_record(&mut k, tag, 999, 0, b"K", &k_val);
    seg[8192..8192 + k.len()].copy_from_slice(&k);
    dev.write_at(&seg, seg_start).expect("write");
    dev.sync().expect("sync");

    // Recovery stops at the torn record: K was never acknowledged and is absent.
    let db = Db::open(&p.config(), opts()).expect("reopen");
    assert_eq!(db.get(b"K").expect("get"), None);
    // More acknowledged writes into the same segment, staying short of K's block...
    for i in 0..20u32 {
        db.put(format!("n{i}").as_bytes(), &[7u8; 200])
            .expect("put");
    }
    drop(db); // ...and another crash.
    let db = Db::open(&p.config(), opts()).expect("reopen again");
    for i in 0..20u32 {
        assert_eq!(
            db.get(format!("n{i}").as_bytes()).expect("get").as_deref(),
            Some(&[7u8; 200][..])
        );
    }
    assert_eq!(
        db.get(b"K").expect("get"),
        None,
        "a stale, unacknowledged record came back"
    );
    db.close().expect("close");
}
