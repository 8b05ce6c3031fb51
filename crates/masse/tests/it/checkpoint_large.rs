//! A checkpoint larger than the loader's 8 MiB read piece: the index comes back
//! whole from it at open, and a byte damaged past the first piece is caught by the
//! payload hash (the open then rebuilds the index by scanning instead).
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::Db;

const KEYS: u64 = 800_000;

#[test]
fn large_checkpoint_round_trip_and_damage() {
    let p = MemPool::tiered(256 << 20, 512 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..KEYS {
        db.put(&key(i), &i.to_le_bytes()).expect("put");
    }
    let g = db.geometry().clone();
    db.close().expect("close (writes a checkpoint)");

    let db = Db::open(&p.config(), opts()).expect("open");
    let st = db.stats();
    assert!(
        st.recovery_source.starts_with("checkpoint"),
        "{}",
        st.recovery_source
    );
    for i in (0..KEYS).step_by(97) {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(i.to_le_bytes().to_vec())
        );
    }
    assert_eq!(db.stats().index_entries, KEYS);
    // One more checkpoint to learn its size (header + payload); the close writes
    // the other slot with the same contents.
    db.checkpoint().expect("checkpoint");
    let size = db.stats().checkpoint_bytes;
    assert!(
        size > (9 << 20),
        "the checkpoint must span more than one 8 MiB piece: {size} bytes"
    );
    db.close().expect("close");

    // Damage one byte near the end of the payload (past the first piece), in both slots.
    let fast = p.fast.as_ref().expect("fast tier");
    for s in 0..2 {
        let at = g.ckpt_offset + s * g.ckpt_slot_size + size - 1000;
        let base = at & !4095;
        let mut b = AlignedBuf::new(4096);
        fast.read_at(&mut b, base).expect("read");
        b[(at - base) as usize] ^= 0x10;
        fast.write_at(&b, base).expect("write");
    }
    let db = Db::open(&p.config(), opts()).expect("open after damage");
    assert!(
        db.stats().recovery_source.starts_with("scan"),
        "a damaged checkpoint must not be used: {}",
        db.stats().recovery_source
    );
    for i in (0..KEYS).step_by(89) {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(i.to_le_bytes().to_vec())
        );
    }
    db.close().expect("close");
}
