//! A batch whose last record never reached the device is not applied — and must
//! stay unapplied after later writes: records written after recovery must not
//! complete the cut-short group. Found by the `masse stress` kill loop (scm-only,
//! seed 35: a batch member in flight at one crash came back two crashes later).
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::{Db, WriteBatch};

#[test]
fn writes_after_recovery_do_not_complete_a_cut_short_batch() {
    let p = MemPool::capacity_only(16 << 20).with_geometry(64 << 10, 1 << 20);
    let dev = p.caps[0].clone();
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"A", b"before").expect("put");
    let mut b = WriteBatch::new();
    b.put(b"K1", b"batch-member-one").expect("batch");
    b.put(b"K2", b"batch-member-two").expect("batch");
    db.write(b).expect("write batch");
    drop(db); // crash

    // As if the crash had come before the batch's last record reached the device.
    let k2 = find_bytes(&dev, b"batch-member-two").expect("K2 on the device");
    let at = k2 & !4095;
    let mut blk = AlignedBuf::new(4096);
    dev.read_at(&mut blk, at).expect("read");
    let s = (k2 - at) as usize;
    for x in &mut blk[s - 26..s + 16] {
        *x = 0; // K2's record header, key and value
    }
    dev.write_at(&blk, at).expect("write");
    dev.sync().expect("sync");

    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(db.get(b"K1").expect("get"), None, "half a batch applied");
    assert_eq!(db.get(b"K2").expect("get"), None);
    db.put(b"X", b"after").expect("put"); // lands right after K1, in the same segment
    drop(db); // crash again
    let db = Db::open(&p.config(), opts()).expect("recover again");
    assert_eq!(db.get(b"X").expect("get").as_deref(), Some(&b"after"[..]));
    assert_eq!(db.get(b"A").expect("get").as_deref(), Some(&b"before"[..]));
    assert_eq!(
        db.get(b"K1").expect("get"),
        None,
        "a later write completed the cut-short batch"
    );
    db.close().expect("close");
}
