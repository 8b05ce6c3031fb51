//! Damage stays visible until someone looks (issue 44): after pad damage
//! lost an acknowledged write, every later open — crashed or clean — carries
//! the pool's damage record in `stats` and `Db::damage`, until an operator
//! clears it. On main 0dc2daf the only sign was one warning at the first
//! open; the next open said "checkpoint (clean shutdown)" and nothing else.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::Db;

fn opts() -> masse::Options {
    masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        ..common::opts()
    }
}

fn flip_in(dev: &masse::device::MemDevice, needle: &[u8]) {
    let at = find_bytes(dev, needle).expect("value on the pad");
    let blk = at & !4095;
    let mut b = AlignedBuf::new(4096);
    dev.read_at(&mut b, blk).expect("read");
    b[(at - blk) as usize + 3] ^= 0x01;
    dev.write_at(&b, blk).expect("write");
    dev.sync().expect("sync");
}

#[test]
fn a_damage_record_outlives_the_open_that_found_it_until_cleared() {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    assert_eq!(db.damage(), None);
    for i in 0..6 {
        db.put(&key(i), format!("pad-only value {i}").as_bytes())
            .expect("put");
    }
    drop(db); // crash: everything is on the pad only
    flip_in(p.fast.as_ref().expect("fast"), b"pad-only value 2");

    let db = Db::open(&p.config(), opts()).expect("recover");
    let d = db.damage().expect("the damage recovery found is recorded");
    assert!(d.corruptions > 0 && d.first_epoch > 0, "{d:?}");
    drop(db); // a crash: the record was written at open, not only at close

    // The damaged batch is still in the pad region this recovery replays, so
    // it is found (and counted) again; what matters is that the first record
    // survived the crash.
    let db = Db::open(&p.config(), opts()).expect("open after the crash");
    let d2 = db.damage().expect("the record was lost by a crash");
    assert_eq!(d2.first_epoch, d.first_epoch, "{d2:?}");
    assert!(d2.corruptions >= d.corruptions, "{d2:?}");
    db.close().expect("close");
    let d = d2;

    let db = Db::open(&p.config(), opts()).expect("open after a clean close");
    let st = db.stats();
    assert!(st.recovery_source.contains("clean shutdown"));
    assert_eq!(
        st.damage_recorded, d.corruptions,
        "stats must show the record"
    );
    assert!(st.to_text().contains("DAMAGE RECORDED"), "{}", st.to_text());
    db.clear_damage().expect("clear");
    assert_eq!(db.damage(), None);
    drop(db);

    let db = Db::open(&p.config(), opts()).expect("open after clearing");
    assert_eq!(db.damage(), None, "a cleared record came back");
    assert_eq!(db.stats().damage_recorded, 0);
    db.close().expect("close");
}

#[test]
fn an_ordinary_crash_records_no_damage() {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..50 {
        db.put(&key(i), &value(i, 0, 3000)).expect("put");
    }
    drop(db);
    p.power_cut();
    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(db.damage(), None, "{:?}", db.stats().recovery_warnings);
    db.close().expect("close");
}
