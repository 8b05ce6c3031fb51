//! Smaller defects of issue 12 (item 7), one test each.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::format::{Superblock, SuperblockProbe};
use masse::Db;

/// A superblock with a valid checksum but nonsense geometry must be refused
/// with an error, before the epoch is bumped — not panic (divide by zero).
#[test]
fn nonsensical_geometry_with_a_valid_checksum_is_refused() {
    type Mutate = fn(&mut masse::Geometry);
    let cases: [(&str, Mutate); 7] = [
        ("segment size 0", |g| g.segment_size = 0),
        ("band smaller than its header", |g| g.band_size = 1024),
        ("band header 0", |g| g.band_header_size = 0),
        ("iu 0", |g| g.iu = 0),
        ("no bands", |g| g.bands_per_device = vec![0]),
        ("data start past the device", |g| g.data_start = 1 << 50),
        ("checkpoint slots past the device", |g| {
            g.ckpt_slot_size = 1 << 50
        }),
    ];
    for (what, mutate) in cases {
        let p = MemPool::capacity_only(16 << 20);
        Db::create(&p.config(), opts())
            .expect("create")
            .close()
            .expect("close");
        let dev = &p.caps[0];
        let mut b = AlignedBuf::new(8192);
        dev.read_at(&mut b, 0).expect("read");
        let SuperblockProbe::Found(mut sb) = Superblock::decode(&b[..4096]) else {
            panic!("no superblock")
        };
        mutate(&mut sb.geometry);
        let enc = sb.encode();
        b[..4096].copy_from_slice(&enc);
        b[4096..].copy_from_slice(&enc);
        dev.write_at(&b, 0).expect("write");
        let mut epoch_before = AlignedBuf::new(8192);
        dev.read_at(&mut epoch_before, 8192).expect("read epoch");
        let cfg = p.config();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Db::open(&cfg, opts()).map(|_| ())
        }));
        match r {
            Err(_) => panic!("{what}: open panicked"),
            Ok(Ok(())) => panic!("{what}: open accepted it"),
            Ok(Err(_)) => {}
        }
        let mut epoch_after = AlignedBuf::new(8192);
        dev.read_at(&mut epoch_after, 8192).expect("read epoch");
        assert!(epoch_before[..] == epoch_after[..], "{what}: epoch bumped");
    }
}

/// `close` of a database that has failed must say so.
#[test]
fn close_of_a_failed_database_is_an_error() {
    let p = MemPool::capacity_only(16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"a", b"1").expect("put");
    p.caps[0].set_fail_writes(true);
    assert!(db.put(b"b", b"2").is_err());
    p.caps[0].set_fail_writes(false);
    assert!(db.close().is_err(), "close hid the failure");
}

/// The status table of an exactly full open segment: no free bytes, not 2^32 − 32.
#[test]
fn band_status_of_an_exactly_full_segment() {
    const SEG: u32 = 16 << 10;
    let p = MemPool::capacity_only(16 << 20).with_geometry(SEG, 4096 + 8 * SEG as u64);
    let db = Db::create(&p.config(), opts()).expect("create");
    // header 64 + record + one summary entry 32 + footer 64 = the whole segment
    let rec = SEG as usize - 64 - 32 - 64;
    let v = vec![7u8; rec - 24 - 1];
    db.put(b"k", &v).expect("put");
    let open: Vec<_> = db
        .band_status()
        .into_iter()
        .flat_map(|b| b.segments)
        .filter(|s| s.use_state == "open")
        .collect();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].free_size, 0);
    db.close().expect("close");
}
