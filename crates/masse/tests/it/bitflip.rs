//! A flipped byte in a stored record is detected and reported for that key,
//! never returned as data, and the rest of the pool stays readable.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device, MemDevice};
use masse::{Db, Error};

fn flip(dev: &MemDevice, at: u64) {
    let base = at & !4095;
    let mut b = AlignedBuf::new(4096);
    dev.read_at(&mut b, base).expect("read");
    b[(at - base) as usize] ^= 0x40;
    dev.write_at(&b, base).expect("write");
    dev.sync().expect("sync");
}

#[test]
fn flipped_byte_in_capacity_tier() {
    let p = MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..2000 {
        db.put(&key(i), &value(i, 0, 300)).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let victim = value(77, 0, 300);
    let at = find_bytes(&p.caps[0], &victim[..40]).expect("record on the capacity device");
    flip(&p.caps[0], at + 20);
    let db = Db::open(&p.config(), opts()).expect("open");
    match db.get(&key(77)) {
        Err(Error::Corruption(m)) => assert!(m.contains("checksum"), "{m}"),
        other => panic!("corrupt record must be an error, got {other:?}"),
    }
    for i in (0..2000).filter(|&i| i != 77) {
        assert_eq!(
            db.get(&key(i)).expect("others readable").as_deref(),
            Some(&value(i, 0, 300)[..])
        );
    }
    let rep = db.check().expect("check runs");
    assert!(!rep.is_clean(), "check must report the flipped byte");
    assert!(db.stats().corruptions >= 1);
    db.close().expect("close");
}

#[test]
fn flipped_byte_in_checkpoint_falls_back_to_scan() {
    let p = MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..3000 {
        db.put(&key(i), &value(i, 0, 100)).expect("put");
    }
    let g = db.geometry().clone();
    db.close().expect("close (writes a checkpoint)");
    let db = Db::open(&p.config(), opts()).expect("open");
    assert!(
        db.stats().recovery_source.starts_with("checkpoint"),
        "{}",
        db.stats().recovery_source
    );
    db.close().expect("close");
    // Damage both checkpoint slots' payloads.
    for s in 0..2 {
        flip(
            p.fast.as_ref().expect("fast"),
            g.ckpt_offset + s * g.ckpt_slot_size + 4096 + 100,
        );
    }
    let db = Db::open(&p.config(), opts()).expect("open without a usable checkpoint");
    assert_eq!(db.stats().recovery_source, "scan (clean shutdown)");
    for i in 0..3000 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(&value(i, 0, 100)[..]),
            "key {i}"
        );
    }
    db.close().expect("close");
}
