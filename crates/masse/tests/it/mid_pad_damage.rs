//! Damage in the middle of the write pad must cost only the damaged batch and be
//! reported; the acknowledged batches after it must come back. Pad replay used
//! to stop at the first batch failing its checksum, silently dropping every
//! later batch, and `check` did not look at the pad (issue 12, defect 6).
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::Db;

fn flip_in(dev: &masse::device::MemDevice, needle: &[u8]) {
    let at = find_bytes(dev, needle).expect("value on the pad");
    let blk = at & !4095;
    let mut b = AlignedBuf::new(4096);
    dev.read_at(&mut b, blk).expect("read");
    b[(at - blk) as usize + 3] ^= 0x01;
    dev.write_at(&b, blk).expect("write");
    dev.sync().expect("sync");
}

fn opts() -> masse::Options {
    masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        checkpoint_on_close: false,
        ..common::opts()
    }
}

#[test]
fn later_batches_survive_a_damaged_one() {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..6 {
        db.put(&key(i), format!("pad-only value {i}").as_bytes())
            .expect("put");
    }
    drop(db); // crash: everything is on the pad, nothing on the capacity tier
    flip_in(p.fast.as_ref().expect("fast"), b"pad-only value 2");
    let db = Db::open(&p.config(), opts()).expect("recover");
    for i in (0..6).filter(|&i| i != 2) {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(format!("pad-only value {i}").as_bytes()),
            "key {i}: an intact acknowledged batch after the damage was lost"
        );
    }
    let st = db.stats();
    assert!(st.corruptions > 0, "damage not counted");
    assert!(
        st.recovery_warnings.iter().any(|w| w.contains("pad")),
        "damage not reported: {:?}",
        st.recovery_warnings
    );
    db.close().expect("close");
}

#[test]
fn check_verifies_the_pad() {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..6 {
        db.put(&key(i), format!("pad-only value {i}").as_bytes())
            .expect("put");
    }
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    flip_in(p.fast.as_ref().expect("fast"), b"pad-only value 4");
    let c = db.check().expect("check");
    assert!(
        c.errors.iter().any(|e| e.contains("pad")),
        "check missed damage on the pad: {:?}",
        c.errors
    );
    drop(db);
}

/// Damage to the newest batch cannot be told from a write torn at a crash:
/// nothing after it proves it was complete, so it ends the log (format.md
/// §13). It costs only that batch, the batches before it come back, and
/// recovery says, as a note (a torn write is what an ordinary crash leaves),
/// that the newest batch failed its checks.
#[test]
fn a_damaged_newest_batch_ends_the_log_and_is_noted() {
    let p = MemPool::tiered(64 << 20, 16 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..6 {
        db.put(&key(i), format!("pad-only value {i}").as_bytes())
            .expect("put");
    }
    drop(db); // crash
    flip_in(p.fast.as_ref().expect("fast"), b"pad-only value 5");
    let db = Db::open(&p.config(), opts()).expect("recover");
    for i in 0..5 {
        assert_eq!(
            db.get(&key(i)).expect("get").as_deref(),
            Some(format!("pad-only value {i}").as_bytes()),
            "key {i}: an intact batch before the damaged newest one was lost"
        );
    }
    assert_eq!(db.get(&key(5)).expect("get"), None);
    let st = db.stats();
    assert!(
        st.recovery_notes
            .iter()
            .any(|n| n.contains("newest batch") && n.contains("fails its checks")),
        "the unfinished newest batch was not noted: {:?}",
        st.recovery_notes
    );
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
    db.close().expect("close");
}
