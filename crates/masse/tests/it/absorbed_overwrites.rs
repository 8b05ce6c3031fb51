//! Tiered pools absorb overwrites (`Options::absorb_overwrites`, design.md
//! §4.10): a lone put of a key whose newest record is still in an open DRAM
//! segment, with the same length, is written over that record there, so a
//! hot key reaches the capacity tier once per segment rather than once per
//! write. The new version must win everywhere the old one could be found
//! (gets, iteration, a clean reopen, pad replay after a power cut, GC), and
//! only same-length puts of keys not written earlier in their group qualify.
use crate::common;
use common::*;
use masse::{Db, Options, WriteBatch};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn put(db: &Db, i: u64, ver: u64, len: usize) {
    db.put(&key(i), &value(i, ver, len)).expect("put");
}

fn expect(db: &Db, i: u64, ver: u64, len: usize) {
    let got = db.get(&key(i)).expect("get");
    assert_eq!(got.as_deref(), Some(&value(i, ver, len)[..]), "key {i}");
}

fn absorbed(db: &Db) -> u64 {
    db.stats().absorbed_writes
}

fn clean(db: &Db) {
    let rep = db.check().expect("check");
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

#[test]
fn same_length_overwrites_in_the_open_segment_are_absorbed() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..10 {
        put(&db, i, 0, 100);
    }
    for i in 0..10 {
        put(&db, i, 1, 100);
    }
    assert_eq!(absorbed(&db), 10);
    // Another length, and a put after a delete: appended.
    put(&db, 0, 2, 120);
    assert!(db.delete(&key(1)).expect("delete"));
    put(&db, 1, 3, 100);
    // A batch's puts are not lone puts.
    let mut b = WriteBatch::new();
    b.put(&key(2), &value(2, 4, 100)).expect("batch");
    b.put(&key(3), &value(3, 4, 100)).expect("batch");
    db.write(b).expect("write");
    assert_eq!(absorbed(&db), 10);
    // The batch's records are the keys' newest: a lone put absorbs into them.
    put(&db, 2, 5, 100);
    assert_eq!(absorbed(&db), 11);
    let want = [(0, 2, 120), (1, 3, 100), (2, 5, 100), (3, 4, 100)];
    let check_all = |db: &Db| {
        for &(i, v, l) in &want {
            expect(db, i, v, l);
        }
        for i in 4..10 {
            expect(db, i, 1, 100);
        }
        assert_eq!(db.iter().count(), 10);
    };
    check_all(&db);
    // Once its segment is sealed, a record is appended again.
    db.seal_open_segments().expect("seal");
    db.flush().expect("flush");
    put(&db, 4, 6, 100);
    assert_eq!(absorbed(&db), 11);
    expect(&db, 4, 6, 100);
    clean(&db);
    db.close().expect("close");

    let db = Db::open(&p.config(), opts()).expect("reopen");
    expect(&db, 4, 6, 100);
    for i in 5..10 {
        expect(&db, i, 1, 100);
    }
    for &(i, v, l) in &want {
        expect(&db, i, v, l);
    }
    clean(&db);
    db.close().expect("close");
}

/// The `User` segment closed last stays in DRAM, absorbable, until the next
/// one closes; then it goes to the writer and its records are appended over.
#[test]
fn the_segment_closed_last_absorbs_until_the_next_one_closes() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(32 << 10, 512 << 10);
    // Never sent for its age here (the next test covers that): a slow
    // machine must not change what is absorbed.
    let o = Options {
        absorb_hold: Duration::from_secs(3600),
        ..opts()
    };
    let db = Db::create(&p.config(), o.clone()).expect("create");
    let before = db.stats().segments_written;
    // 1000-byte values: about 31 to a 32 KiB segment. Key 0 is in the first
    // segment, key 40 in the second, which is still open.
    for i in 0..41 {
        put(&db, i, 0, 1000);
    }
    put(&db, 0, 1, 1000); // in the held segment
    put(&db, 40, 1, 1000); // in the open one
    assert_eq!(absorbed(&db), 2);
    db.flush().expect("flush"); // hands the held segment to the writer
    assert_eq!(db.stats().segments_written - before, 1);
    put(&db, 1, 1, 1000); // its segment is written: appended
    assert_eq!(absorbed(&db), 2);
    for i in 100..140 {
        put(&db, i, 0, 1000); // the second segment closes and is held
    }
    put(&db, 40, 2, 1000);
    assert_eq!(absorbed(&db), 3);
    for (i, v) in [(0, 1), (1, 1), (40, 2), (2, 0), (139, 0)] {
        expect(&db, i, v, 1000);
    }
    drop(db);
    p.power_cut();
    let db = Db::open(&p.config(), o).expect("recover");
    for (i, v) in [(0, 1), (1, 1), (40, 2), (2, 0), (139, 0)] {
        expect(&db, i, v, 1000);
    }
    clean(&db);
    db.close().expect("close");
}

/// Under a trickle of writes the held segment does not wait for the next one
/// to fill: after `absorb_hold` it goes to the writer, so its records no
/// longer live on the pad only.
#[test]
fn the_held_segment_is_written_after_absorb_hold() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(32 << 10, 512 << 10);
    let hold = Duration::from_millis(300);
    let o = Options {
        absorb_hold: hold,
        ..opts()
    };
    let db = Db::create(&p.config(), o.clone()).expect("create");
    let before = db.stats().segments_written;
    let t0 = Instant::now();
    for i in 0..41 {
        put(&db, i, 0, 1000); // the first segment closes and is held
    }
    let written = || db.stats().segments_written - before;
    if t0.elapsed() < hold {
        assert_eq!(written(), 0, "the closed segment is held");
    }
    while written() == 0 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(written(), 1, "the held segment was never written");
    assert!(t0.elapsed() >= hold, "written after {:?}", t0.elapsed());
    put(&db, 40, 1, 1000); // in the open segment: absorbed
    assert_eq!(absorbed(&db), 1);
    drop(db);
    p.power_cut();
    let db = Db::open(&p.config(), o).expect("recover");
    let s = db.stats();
    // Only the open segment's records (keys 31..=40 and the absorbed put)
    // come back from the pad; the held one's are in its written segment.
    assert!(
        (1..=12).contains(&s.recovery_pad_records),
        "{} records replayed from the pad",
        s.recovery_pad_records
    );
    for i in 0..40 {
        expect(&db, i, 0, 1000);
    }
    expect(&db, 40, 1, 1000);
    clean(&db);
    db.close().expect("close");
}

/// Hot keys overwritten many times reach the capacity tier about once per
/// segment each; without absorption every write does.
#[test]
fn hot_keys_reach_the_capacity_tier_once_per_segment() {
    let run = |on: bool| {
        let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(32 << 10, 512 << 10);
        let o = Options {
            absorb_overwrites: on,
            ..opts()
        };
        let db = Db::create(&p.config(), o).expect("create");
        for r in 0..200 {
            for i in 0..50 {
                put(&db, i, r, 100);
            }
        }
        db.seal_open_segments().expect("seal");
        db.flush().expect("flush");
        for i in 0..50 {
            expect(&db, i, 199, 100);
        }
        clean(&db);
        let s = db.stats();
        db.close().expect("close");
        (s.segment_bytes_written, s.absorbed_writes)
    };
    let (with, n) = run(true);
    let (without, none) = run(false);
    assert_eq!(none, 0);
    // All but the writes after a seal the full pad forced: the open segment
    // holds the pad from its first batch on.
    assert!(n >= 190 * 50, "{n} of {} overwrites absorbed", 199 * 50);
    assert!(
        with * 8 < without,
        "{with} capacity bytes with absorption against {without} without"
    );
}

/// The pad holds every absorbed write: after a power cut, each key reads its
/// last acknowledged version, whether its segment reached the capacity tier
/// or not.
#[test]
fn absorbed_overwrites_survive_a_power_cut() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(32 << 10, 512 << 10);
    let db = Db::create(&p.config(), opts()).expect("create");
    let n = 400u64;
    let mut ver = vec![0u64; n as usize];
    for i in 0..n {
        put(&db, i, 0, 200);
    }
    db.checkpoint().expect("checkpoint");
    // Each round writes a window of keys several times: the later writes of
    // a window find its first in the open segment, and windows cross
    // segment boundaries.
    for w in 0..40u64 {
        for rep in 0..4 {
            for i in (w * 10)..(w * 10 + 12).min(n) {
                ver[i as usize] = w * 10 + rep + 1;
                put(&db, i, ver[i as usize], 200);
            }
        }
    }
    assert!(absorbed(&db) > 1000, "{}", db.stats().to_text());
    drop(db);
    p.power_cut();
    let db = Db::open(&p.config(), opts()).expect("recover");
    for i in 0..n {
        expect(&db, i, ver[i as usize], 200);
    }
    clean(&db);
    // And once more after GC has moved what survived.
    while db.gc_once().expect("gc") {}
    for i in 0..n {
        expect(&db, i, ver[i as usize], 200);
    }
    db.close().expect("close");
}

#[test]
fn readers_never_see_a_torn_absorbed_overwrite() {
    let p = MemPool::tiered(64 << 20, 64 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let n = 64u64;
    let rounds = 150u64;
    for i in 0..n {
        put(&db, i, 0, 300);
    }
    let mut hs = Vec::new();
    for t in 0..2u64 {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            for ver in 1..=rounds {
                for i in (t..n).step_by(2) {
                    put(&db, i, ver, 300);
                }
            }
        }));
    }
    for r in 0..2u64 {
        let db = db.clone();
        hs.push(std::thread::spawn(move || {
            for j in 0..15_000u64 {
                let i = (j * 31 + r) % n;
                let v = db.get(&key(i)).expect("get").expect("present");
                assert!(
                    (0..=rounds).any(|ver| v == value(i, ver, 300)),
                    "key {i}: a value that was never written"
                );
            }
        }));
    }
    for h in hs {
        h.join().expect("thread");
    }
    for i in 0..n {
        expect(&db, i, rounds, 300);
    }
    assert!(absorbed(&db) > n * rounds / 2, "{}", db.stats().to_text());
    let db = Arc::try_unwrap(db).ok().expect("sole owner");
    clean(&db);
    db.close().expect("close");
}

/// The held segment keeps its batches on the pad, so with small records on
/// the smallest pad (32 MiB: one 4 KiB batch per lone put) the pad fills
/// before the open segment does. The held segment, full, then goes to the
/// writer first; only if that frees nothing would the open one be cut short.
#[test]
fn a_full_pad_sends_the_held_segment_before_cutting_the_open_one_short() {
    let p = MemPool::tiered(96 << 20, 256 << 20).with_geometry(256 << 10, 4 << 20);
    let mut cfg = p.config();
    cfg.pad_size = Some(32 << 20);
    let o = Options {
        absorb_hold: Duration::from_secs(3600),
        ..opts()
    };
    let db = Db::create(&cfg, o.clone()).expect("create");
    // Records of 8-byte keys and values take about 40 bytes of a 256 KiB
    // segment: some 6,000 lone puts, 24 MiB of pad, fill one.
    let n = 20_000;
    for i in 0..n {
        put(&db, i, 0, 8);
    }
    let s = db.stats();
    assert!(
        s.segments_written >= 2,
        "{} segments written",
        s.segments_written
    );
    assert_eq!(s.forced_seals, 0, "segments were cut short for pad room");
    drop(db);
    p.power_cut();
    let db = Db::open(&cfg, o).expect("recover");
    for i in 0..n {
        expect(&db, i, 0, 8);
    }
    clean(&db);
    db.close().expect("close");
}
