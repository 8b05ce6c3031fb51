//! Keys chosen by an attacker must not replace other keys (issue 12, defect 8).
//!
//! The index tells keys apart by 64 fingerprint bits plus 10 shard bits of the
//! key's digest, and a put or delete whose digest matches an existing entry
//! replaces it. Format version 1 used unkeyed XXH3-128, whose 9–16-byte path
//! can be inverted: the two 16-byte keys below share fingerprint
//! 0xba94fb9ba1619e95 and shard 254 under it (constructed in microseconds, not
//! searched for). Pools now digest keys with SipHash-2-4 under a secret
//! per-pool key, which no client can compute.
use crate::common;
use common::*;
use masse::Db;

const A: [u8; 16] = [
    0x05, 0xcb, 0x55, 0x74, 0xa4, 0x91, 0x4a, 0x41, 0x55, 0xe8, 0x63, 0x47, 0xa4, 0xae, 0xdd, 0x18,
];
const B: [u8; 16] = [
    0x28, 0xcd, 0x5a, 0x08, 0x78, 0xdc, 0xf8, 0x64, 0x7a, 0xee, 0x6c, 0x3b, 0x78, 0xe3, 0x6f, 0x3d,
];

#[test]
fn the_keys_collide_under_the_unkeyed_digest() {
    let (a, b) = (masse::index::digest(&A), masse::index::digest(&B));
    assert_ne!(a, b);
    assert_eq!(a as u64, b as u64, "fingerprints");
    assert_eq!(a >> 118, b >> 118, "shard bits");
}

#[test]
fn colliding_keys_do_not_replace_each_other() {
    for p in [
        MemPool::tiered(64 << 20, 16 << 20),
        MemPool::capacity_only(16 << 20),
    ] {
        let db = Db::create(&p.config(), opts()).expect("create");
        db.put(&A, b"value of A").expect("put A");
        db.put(&B, b"value of B").expect("put B");
        assert_eq!(
            db.get(&A).expect("get A").as_deref(),
            Some(&b"value of A"[..])
        );
        assert_eq!(
            db.get(&B).expect("get B").as_deref(),
            Some(&b"value of B"[..])
        );
        assert!(db.delete(&B).expect("delete B"));
        assert_eq!(
            db.get(&A).expect("get A").as_deref(),
            Some(&b"value of A"[..]),
            "deleting B deleted A"
        );
        drop(db); // and across a crash
        let db = Db::open(&p.config(), opts()).expect("reopen");
        assert_eq!(
            db.get(&A).expect("get A").as_deref(),
            Some(&b"value of A"[..])
        );
        assert_eq!(db.get(&B).expect("get B"), None);
        db.close().expect("close");
    }
}

/// Two pools digest the same key differently: nothing learned from one pool
/// (or from the code) tells where a key lands in another.
#[test]
fn every_pool_has_its_own_digest_key() {
    let p1 = MemPool::capacity_only(16 << 20);
    let p2 = MemPool::capacity_only(16 << 20);
    let d1 = Db::create(&p1.config(), opts()).expect("create");
    let d2 = Db::create(&p2.config(), opts()).expect("create");
    d1.put(&A, b"x").expect("put");
    d2.put(&A, b"x").expect("put");
    let t1 = d1.trace_key(&A).expect("trace");
    let t2 = d2.trace_key(&A).expect("trace");
    assert!(t1.iter().any(|l| l.ends_with("<- index")));
    assert!(t2.iter().any(|l| l.ends_with("<- index")));
    // The superblocks carry different secrets.
    let sb = |p: &MemPool| {
        use masse::device::{AlignedBuf, Device};
        let mut b = AlignedBuf::new(4096);
        p.caps[0].read_at(&mut b, 0).expect("read");
        b[masse::format::SB_KEY_DIGEST_AT..masse::format::SB_KEY_DIGEST_AT + 20].to_vec()
    };
    assert_ne!(sb(&p1), sb(&p2));
    d1.close().expect("close");
    d2.close().expect("close");
}
