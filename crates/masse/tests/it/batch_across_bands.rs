//! An atomic batch whose first record lands in the last segment of band A and
//! whose last record lands in band B must survive GC of band B and a crash:
//! the batch was acknowledged, so its first key keeps the batch's value (a put)
//! or stays deleted (a delete). Recovery used to wait for the batch's last
//! record, which GC had reclaimed, and threw the whole batch away, bringing back
//! the key's previous value (issue 12, defect 1).
use crate::common;
use common::*;
use masse::{Db, Mode, WriteBatch};

const SEG: u32 = 16 << 10;
/// A band of one header block and 8 segments.
const BAND: u64 = 4096 + 8 * SEG as u64;
/// A value that takes a segment to itself.
const BIG: usize = 15_000;

/// Band holding the record the index points at for `key` (from `trace_key`).
fn band_of(db: &Db, key: &[u8]) -> u32 {
    let t = db.trace_key(key).expect("trace");
    let line = t
        .iter()
        .find(|l| l.ends_with("<- index"))
        .unwrap_or_else(|| panic!("{key:?} not indexed: {t:?}"));
    line.split_whitespace()
        .nth(1)
        .expect("band")
        .parse()
        .expect("band number")
}

fn pool(mode: Mode) -> MemPool {
    let p = match mode {
        Mode::Tiered => MemPool::tiered(64 << 20, 16 << 20),
        Mode::CapacityOnly => MemPool::capacity_only(16 << 20),
        Mode::ScmOnly => MemPool::scm_only(16 << 20),
    };
    p.with_geometry(SEG, BAND)
}

fn opts() -> masse::Options {
    masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        checkpoint_on_close: false,
        ..common::opts()
    }
}

/// Fill the open band so that the next small record goes into its last segment
/// and the next big one into a new band; then write the batch `[K, T]` (K a put
/// or a delete), overwrite T, make band B a GC victim, GC it and crash.
fn straddle_then_gc(mode: Mode, delete: bool, checkpoint_first: bool) {
    let p = pool(mode);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"K", b"previous value").expect("put K");
    db.put(b"spacer", b"x").expect("put");
    if checkpoint_first {
        db.checkpoint().expect("checkpoint");
    }
    // One big record per segment until the open band's last segment is open.
    let start = band_of(&db, b"spacer");
    let mut i = 0u64;
    loop {
        db.put(&key(i), &value(i, 0, BIG)).expect("fill");
        i += 1;
        let b = band_of(&db, &key(i - 1));
        if b != start {
            // Crossed into a new band: start counting from there.
            return straddle_in(db, p, mode, delete, i);
        }
        assert!(i < 64, "never left band {start}");
    }
}

fn straddle_in(db: Db, p: MemPool, mode: Mode, delete: bool, mut i: u64) {
    let a = band_of(&db, &key(i - 1));
    // Slots 0..7 of band A get one big record each (slot 0 already has one).
    for _ in 0..7 {
        db.put(&key(i), &value(i, 0, BIG)).expect("fill");
        i += 1;
    }
    assert_eq!(band_of(&db, &key(i - 1)), a, "fill left band {a} early");
    let mut b = WriteBatch::new();
    if delete {
        b.delete(b"K").expect("batch");
    } else {
        b.put(b"K", b"batch value").expect("batch");
    }
    b.put(b"T", &value(999, 1, BIG)).expect("batch");
    db.write(b).expect("batch");
    if !delete {
        assert_eq!(
            band_of(&db, b"K"),
            a,
            "K not in the last segment of band {a}"
        );
    }
    let band_b = band_of(&db, b"T");
    assert_ne!(band_b, a, "the batch did not straddle two bands");
    // Overwrite T, then fill band B with keys that die, so B becomes the best victim.
    db.put(b"T", b"overwritten").expect("overwrite T");
    let mut dying = Vec::new();
    while band_of(&db, &key(i - 1)) == band_b || dying.is_empty() {
        db.put(&key(i), &value(i, 0, BIG)).expect("fill B");
        dying.push(i);
        i += 1;
    }
    for &d in &dying {
        db.delete(&key(d)).expect("delete");
    }
    db.put(b"T", b"overwritten again").expect("move T out of B");
    db.flush().expect("flush");
    let freed = db.gc_once().expect("gc");
    assert!(freed, "GC freed nothing");
    assert!(
        db.band_status()[band_b as usize].state == "free",
        "GC freed another band than B"
    );
    let want: Option<&[u8]> = if delete { None } else { Some(b"batch value") };
    assert_eq!(db.get(b"K").expect("get").as_deref(), want);
    drop(db); // crash
    let db = Db::open(&p.config(), opts()).expect("recover");
    assert_eq!(
        db.get(b"K").expect("get after recovery").as_deref(),
        want,
        "{mode:?}: the batch's first key lost its acknowledged state"
    );
    assert_eq!(
        db.get(b"T").expect("get T").as_deref(),
        Some(&b"overwritten again"[..])
    );
    let st = db.stats();
    assert!(
        st.recovery_warnings.is_empty(),
        "{:?}",
        st.recovery_warnings
    );
    db.close().expect("close");
}

#[test]
fn tiered_put_survives_gc_of_the_batch_end() {
    straddle_then_gc(Mode::Tiered, false, false);
}

#[test]
fn tiered_delete_stays_deleted() {
    straddle_then_gc(Mode::Tiered, true, false);
}

#[test]
fn capacity_only_put_survives_gc_of_the_batch_end() {
    straddle_then_gc(Mode::CapacityOnly, false, false);
}

#[test]
fn capacity_only_delete_stays_deleted() {
    straddle_then_gc(Mode::CapacityOnly, true, false);
}

#[test]
fn capacity_only_with_checkpoint() {
    straddle_then_gc(Mode::CapacityOnly, false, true);
}

#[test]
fn tiered_with_checkpoint() {
    straddle_then_gc(Mode::Tiered, false, true);
}
