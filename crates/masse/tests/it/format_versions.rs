//! Pools keep the format version they were created with. A version-3 pool's
//! segments keep version 3's seq-chain rule and say so in their footers (a
//! build before version 4 reads them); a new pool writes version 4. Both
//! after GC has moved records (old seqs among new ones, where the two rules
//! store different bytes) and after a reopen.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device, MemDevice};
use masse::format::v3::{decode_v3_tail, SeqRule};
use masse::{Db, GcPolicy, Options};

const SEG: usize = 64 << 10;
const KEYS: u64 = 6000;

/// Footers found on `dev`, by version (3, 4), each checked to decode with
/// its own rule and to be refused with the other; and how many of those
/// segments hold a seq below an earlier record's (a GC move after a newer
/// record), where the two rules store different bytes.
fn footers(dev: &MemDevice) -> ([usize; 2], usize) {
    let cap = dev.info().capacity as usize;
    let mut img = AlignedBuf::new(cap);
    dev.read_at(&mut img, 0).expect("read");
    let (mut found, mut out_of_order) = ([0usize; 2], 0);
    for end in (SEG..=cap).step_by(4096) {
        let f = &img[end - 64..end];
        if f[..4] != 0x4647_4553u32.to_le_bytes() {
            continue;
        }
        let version = u32::from_le_bytes([f[4], f[5], f[6], f[7]]);
        let (own, other) = match version {
            3 => (SeqRule::Max, SeqRule::Follow),
            4 => (SeqRule::Follow, SeqRule::Max),
            _ => continue,
        };
        let seg = &img[end - SEG..end];
        let Ok((foot, entries)) = decode_v3_tail(seg, own) else {
            continue; // not a one-slot segment ending here (a stale slot)
        };
        assert_eq!(foot.rule, own);
        assert!(decode_v3_tail(seg, other).is_err(), "footer at {end}");
        found[version as usize - 3] += 1;
        if entries.windows(2).any(|w| w[1].seq < w[0].seq) {
            out_of_order += 1;
        }
    }
    (found, out_of_order)
}

/// Write old keys, then newer ones, overwrite most of the newer and half
/// of the old, and let GC empty the newer keys' bands first and the old
/// keys' after: its band then gets the survivors' seqs out of order. Reopen;
/// every key reads its last value and the pool checks clean.
fn churn(version: u32) -> ([usize; 2], usize) {
    let p = MemPool::tiered(64 << 20, 16 << 20)
        .with_geometry(SEG as u32, 1 << 20)
        .with_format(version);
    // Greedy victims: the band with the most garbage (the newer keys') first.
    let o = Options {
        gc_policy: GcPolicy::Greedy,
        ..opts()
    };
    let db = Db::create(&p.config(), o.clone()).expect("create");
    assert_eq!(db.format_version(), version);
    let mut ver = vec![0u64; 2 * KEYS as usize];
    let mut put = |i: u64, v: u64| {
        ver[i as usize] = v;
        db.put(&key(i), &value(i, v, 100)).expect("put");
    };
    (0..2 * KEYS).for_each(|i| put(i, 0));
    (KEYS..2 * KEYS)
        .filter(|i| i % 10 != 0)
        .for_each(|i| put(i, 1));
    (0..KEYS).filter(|i| i % 2 == 0).for_each(|i| put(i, 1));
    while db.gc_once().expect("gc") {}
    db.seal_open_segments().expect("seal");
    assert!(db.stats().gc_records_moved > 0, "GC moved records");
    db.close().expect("close");
    let db = Db::open(&p.config(), o).expect("open");
    assert_eq!(db.format_version(), version, "the pool keeps its version");
    for i in 0..2 * KEYS {
        let want = value(i, ver[i as usize], 100);
        assert_eq!(db.get(&key(i)).expect("get"), Some(want), "key {i}");
    }
    let r = db.check().expect("check");
    assert!(r.is_clean(), "{:?}", r.errors);
    db.close().expect("close");
    footers(&p.caps[0])
}

#[test]
fn a_version_3_pool_keeps_writing_version_3() {
    let ([v3, v4], moves) = churn(3);
    assert!(v3 > 0 && v4 == 0, "footers: {v3} of version 3, {v4} of 4");
    assert!(moves > 0, "no segment with seqs out of order");
}

#[test]
fn new_pools_write_version_4() {
    let ([v3, v4], moves) = churn(4);
    assert!(v4 > 0 && v3 == 0, "footers: {v3} of version 3, {v4} of 4");
    assert!(moves > 0, "no segment with seqs out of order");
}
