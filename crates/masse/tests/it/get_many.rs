//! `Db::get_many` answers exactly as `Db::get` would, key by key: records on the
//! capacity device (read in one batch), records still in DRAM buffers, deleted and
//! never-written keys, duplicates, records GC has moved, and a damaged record,
//! which is an error, never data.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::{Db, Error};

fn agree(db: &Db, keys: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let many = db.get_many(&refs).expect("get_many");
    assert_eq!(many.len(), keys.len());
    for (k, got) in keys.iter().zip(many) {
        assert_eq!(
            got,
            db.get(k).expect("get"),
            "key {}",
            String::from_utf8_lossy(k)
        );
    }
}

#[test]
fn get_many_matches_get() {
    let p = MemPool::tiered(48 << 20, 16 << 20).with_geometry(16 << 10, 256 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..3000 {
        db.put(&key(i), &value(i, 0, 100 + (i as usize % 700)))
            .expect("put");
    }
    db.flush().expect("flush");
    // Newer versions of some keys, deletions, and a tail left in DRAM buffers.
    for i in (0..3000).step_by(7) {
        db.put(&key(i), &value(i, 1, 64)).expect("overwrite");
    }
    for i in (0..3000).step_by(11) {
        db.delete(&key(i)).expect("delete");
    }
    let before = db.stats().reads_from_device;
    let mut keys: Vec<Vec<u8>> = (0..3200).step_by(3).map(key).collect();
    keys.push(key(5));
    keys.push(key(5)); // duplicates answer twice
    keys.push(b"never written".to_vec());
    agree(&db, &keys);
    assert!(
        db.stats().reads_from_device > before,
        "the batch must have read the capacity device"
    );

    // GC moves live records; answers stay the same.
    while db.gc_once().expect("gc") {}
    agree(&db, &keys);
    assert!(matches!(
        db.get_many(&[b"".as_slice()]),
        Err(Error::InvalidKey { .. })
    ));
    // Every record on the capacity tier and none left for the pad to replay
    // at the next open (a replayed copy would be read from DRAM).
    db.seal_open_segments().expect("seal");
    db.close().expect("close");

    // A damaged record is reported as corruption through the batch path too.
    // Every copy on the device is damaged: GC's moves leave dead ones behind,
    // and which comes first depends on where GC put the live one.
    let victim = value(1, 0, 101);
    let all = find_all_bytes(&p.caps[0], &victim[..40]);
    assert!(!all.is_empty(), "record on the capacity device");
    for at in all {
        let base = at & !4095;
        let mut b = AlignedBuf::new(4096);
        p.caps[0].read_at(&mut b, base).expect("read");
        b[(at + 20 - base) as usize] ^= 0x40;
        p.caps[0].write_at(&b, base).expect("write");
    }
    let db = Db::open(&p.config(), opts()).expect("open");
    let (k1, k2, k4) = (key(1), key(2), key(4));
    match db.get_many(&[&k2[..], &k1[..], &k4[..]]) {
        Err(Error::Corruption(m)) => assert!(m.contains("checksum"), "{m}"),
        other => panic!("a damaged record must be an error, got {other:?}"),
    }
    agree(&db, &[key(2), key(4), key(3000), key(2999)]);
    db.close().expect("close");
}
