//! `Db::get_parts` reads only the device blocks holding the part asked for,
//! answers as a slice of `Db::get` would (records on the device, in DRAM, moved
//! by GC, deleted, never written, ranges past the end), and never returns bytes
//! nobody verified: a part the caller's check refuses is read whole and
//! checked by the record's crc, so a damaged record is an error.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::{Db, Error};
use std::ops::Range;

fn slice(v: Option<Vec<u8>>, r: &Range<usize>) -> Option<Vec<u8>> {
    v.map(|v| {
        let end = r.end.min(v.len());
        v[r.start.min(end)..end].to_vec()
    })
}

/// Parts as the engine returns them (exactly the range's bytes: a part never
/// runs past the value's end).
fn parts(db: &Db, ks: &[(Vec<u8>, Range<usize>)], accept: bool) -> Vec<Option<Vec<u8>>> {
    let reqs: Vec<(&[u8], Range<usize>)> = ks.iter().map(|(k, r)| (&k[..], r.clone())).collect();
    db.get_parts(&reqs, |_, _| accept).expect("get_parts")
}

fn agree(db: &Db, ks: &[(Vec<u8>, Range<usize>)]) {
    for accept in [true, false] {
        let got = parts(db, ks, accept);
        for ((k, r), g) in ks.iter().zip(got) {
            assert_eq!(
                g,
                slice(db.get(k).expect("get"), r),
                "key {k:?} {r:?} accept={accept}"
            );
        }
    }
}

const BIG: usize = 64 << 10;

#[test]
fn parts_read_only_their_blocks_and_match_get() {
    let p = MemPool::tiered(48 << 20, 32 << 20).with_geometry(256 << 10, 4 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..40 {
        db.put(&key(i), &value(i, 0, BIG)).expect("put");
    }
    db.flush().expect("flush");
    let dev = &p.caps[0];

    // A 1 KiB part of a 64 KiB value reads at most two 4 KiB blocks.
    let before = dev.counters().snapshot().bytes_read;
    let r = 30_000..31_024;
    let got = db
        .get_parts(&[(&key(7)[..], r.clone())], |_, _| true)
        .expect("part");
    let read = dev.counters().snapshot().bytes_read - before;
    assert_eq!(got[0].as_deref(), Some(&value(7, 0, BIG)[r]));
    assert!(read <= 8192, "a 1 KiB part read {read} bytes");
    let before = dev.counters().snapshot().bytes_read;
    db.get(&key(7)).expect("get");
    assert!(dev.counters().snapshot().bytes_read - before >= BIG as u64);

    // Newer versions (some still in DRAM), deletions, absent keys, odd ranges.
    for i in (0..40).step_by(3) {
        db.put(&key(i), &value(i, 1, 5000)).expect("overwrite");
    }
    for i in (0..40).step_by(5) {
        db.delete(&key(i)).expect("delete");
    }
    let ks: Vec<(Vec<u8>, Range<usize>)> = (0..45)
        .map(|i| {
            let r = match i % 4 {
                0 => 0..100,
                1 => 4000..9000,           // past the end of the 5000-byte versions
                2 => BIG - 10..BIG + 1000, // past every value's end
                _ => 12_345..12_345,       // empty
            };
            (key(i), r)
        })
        .collect();
    agree(&db, &ks);
    while db.gc_once().expect("gc") {}
    agree(&db, &ks);
    assert!(matches!(
        db.get_parts(&[(b"".as_slice(), 0..1)], |_, _| true),
        Err(Error::InvalidKey { .. })
    ));
    db.close().expect("close");
}

#[test]
fn a_refused_part_of_a_damaged_record_is_corruption_never_data() {
    let p = MemPool::tiered(48 << 20, 32 << 20).with_geometry(256 << 10, 4 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..8 {
        db.put(&key(i), &value(i, 0, BIG)).expect("put");
    }
    db.close().expect("close");
    // Flip one bit inside key 3's value, 20 000 bytes in.
    let v = value(3, 0, BIG);
    let at = find_bytes(&p.caps[0], &v[..64]).expect("record on the device") + 20_000;
    let base = at & !4095;
    let mut b = AlignedBuf::new(4096);
    p.caps[0].read_at(&mut b, base).expect("read");
    b[(at - base) as usize] ^= 0x10;
    p.caps[0].write_at(&b, base).expect("write");

    let db = Db::open(&p.config(), opts()).expect("open");
    let k = key(3);
    // A caller check that knows the content (as piece checksums do) refuses it.
    let check = |_: usize, b: &[u8]| b == &v[19_990..20_010];
    match db.get_parts(&[(&k[..], 19_990..20_010)], check) {
        Err(Error::Corruption(m)) => assert!(m.contains("checksum"), "{m}"),
        other => panic!("a damaged part must be an error, got {other:?}"),
    }
    // Parts away from the damage still read (their blocks are intact).
    let got = db
        .get_parts(&[(&k[..], 0..100)], |_, b| b == &v[..100])
        .expect("part");
    assert_eq!(got[0].as_deref(), Some(&v[..100]));
    db.close().expect("close");
}

/// A part that may run past the value's end is cut at the length in the
/// record's header, which nobody has checksummed: a damaged length that
/// disagrees with the index is not believed (the part is read whole, through
/// the record's checksum), so it can neither cut the part short silently nor
/// hand out other bytes.
#[test]
fn a_damaged_length_in_the_header_never_cuts_a_part() {
    damaged_length(3);
    damaged_length(2);
}

fn damaged_length(format: u32) {
    let p = MemPool::tiered(48 << 20, 32 << 20)
        .with_geometry(256 << 10, 4 << 20)
        .with_format(format);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..8 {
        db.put(&key(i), &value(i, 0, BIG)).expect("put");
    }
    db.close().expect("close");
    // Key 3's header: its value length (version 2: the header's last field,
    // just before the key; version 3: the low 21 bits of the word before the
    // key, the length + 2) loses 1 KiB, as a damaged header would claim.
    let k = key(3);
    let v = value(3, 0, BIG);
    let val_at = find_bytes(&p.caps[0], &v[..64]).expect("record on the device");
    let len_at = val_at - k.len() as u64 - 4;
    let base = len_at & !4095;
    let mut b = AlignedBuf::new(8192);
    p.caps[0].read_at(&mut b, base).expect("read");
    let o = (len_at - base) as usize;
    let stored = u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let found = match format {
        2 => stored as usize,
        _ => (stored & ((1 << 21) - 1)) as usize - 2,
    };
    assert_eq!(found, BIG, "found the value length field");
    b[o..o + 4].copy_from_slice(&(stored - 1024).to_le_bytes());
    p.caps[0].write_at(&b, base).expect("write");

    let db = Db::open(&p.config(), opts()).expect("open");
    // The last 2,000 bytes of the value, straddling the damaged length:
    // accepting any bytes, the caller would take a part 1 KiB short if the
    // header were believed.
    let r = BIG - 2000..BIG;
    match db.get_parts(&[(&k[..], r)], |_, _| true) {
        Err(Error::Corruption(m)) => assert!(m.contains("checksum"), "{m}"),
        Ok(got) => panic!(
            "a damaged header cut the part: {:?} bytes",
            got[0].as_ref().map(|p| p.len())
        ),
        Err(e) => panic!("unexpected error {e}"),
    }
    // An intact neighbour's last bytes come back whole, through its header.
    let w = value(4, 0, BIG);
    let got = db
        .get_parts(&[(&key(4)[..], BIG - 100..BIG + 50)], |_, _| true)
        .expect("part");
    assert_eq!(got[0].as_deref(), Some(&w[BIG - 100..]));
    db.close().expect("close");
}
