//! The scenarios crash points are enumerated in: deterministic operation
//! lists on small pools, each built to cross a boundary where crash
//! consistency is hard (segment and band ends, GC, checkpoints, the pad's
//! wrap, in-place updates, capacity-only seals). A few steps adapt to the
//! pool's band table (e.g. "fill until the open segment is the band's last"),
//! which the engine decides deterministically for a single writer; the
//! operations actually performed are what the trace records.

use super::script::{Recorded, Script, Setup, Write};
use crate::workload::Violation;
use std::collections::BTreeSet;

/// A scenario.
pub struct Scenario {
    /// Name (`--scenario`).
    pub name: &'static str,
    /// What it exercises.
    pub about: &'static str,
    /// Modes it runs in.
    pub modes: &'static [&'static str],
    /// The pool for a mode.
    pub setup: fn(&str) -> Setup,
    /// The operations; `scale` ≥ 1 repeats or lengthens them.
    pub script: fn(&mut Script, u32) -> Result<(), Violation>,
}

impl Scenario {
    /// Runs the scenario once on recording devices.
    pub fn record(&self, mode: &str, scale: u32) -> Result<Recorded, Violation> {
        self.record_with(mode, scale, None, None)
    }

    /// [`Scenario::record`] on a pool of format version `format` (`None`:
    /// the newest), with `Options::gc_separate` set to `gc_separate` (`None`:
    /// the scenario's own).
    pub fn record_with(
        &self,
        mode: &str,
        scale: u32,
        format: Option<u32>,
        gc_separate: Option<bool>,
    ) -> Result<Recorded, Violation> {
        let base = (self.setup)(mode);
        let setup = Setup {
            format,
            gc_separate: gc_separate.unwrap_or(base.gc_separate),
            ..base
        };
        let mut s = Script::create(&setup)?;
        (self.script)(&mut s, scale.max(1))?;
        s.finish()
    }
}

const ALL: &[&str] = &["tiered", "capacity-only", "scm-only"];

/// Every scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "batch-segments",
            about: "batches (with deletes) across segment boundaries, checkpoints between steps",
            modes: ALL,
            setup: Setup::small,
            script: batch_segments,
        },
        Scenario {
            name: "batch-band-gc",
            about: "a batch across a band boundary; its last key overwritten; GC frees that band",
            modes: ALL,
            setup: Setup::small,
            script: batch_band_gc,
        },
        Scenario {
            name: "seal",
            about: "overwrites that seal a segment every few writes (capacity-only tail + footer)",
            modes: &["capacity-only", "scm-only"],
            setup: Setup::small,
            script: seal,
        },
        Scenario {
            name: "checkpoint-gc",
            about: "overwrites, deletes, GC relocating live records, checkpoints, a clean reopen",
            modes: ALL,
            setup: Setup::small,
            script: checkpoint_gc,
        },
        Scenario {
            name: "concurrent",
            about: "several writers at once: group commits with several writes in flight",
            modes: ALL,
            setup: Setup::small,
            script: concurrent,
        },
        Scenario {
            name: "scm-inplace",
            about: "in-place updates of sealed records, size changes, deletes, GC",
            modes: &["scm-only"],
            setup: scm_setup,
            script: scm_inplace,
        },
        Scenario {
            name: "reuse-untrimmed",
            about: "GC frees bands that keep their old segments (no TRIM, as on a pool file); writes reuse them",
            modes: &["capacity-only", "tiered"],
            setup: untrimmed_setup,
            script: reuse_untrimmed,
        },
        Scenario {
            name: "marks",
            about: "block marks (formats 3 and 4): records ending on 4 KiB boundaries, skips, straddlers, batches split by a mark, a reopen mid-segment",
            modes: ALL,
            setup: Setup::small,
            script: marks,
        },
        Scenario {
            name: "streams",
            about: "GC moves in a band of their own beside the user writes' band: writes of moved keys, a new key, a delete and put again, GC of both kinds of band, a reopen",
            modes: &["tiered"],
            setup: streams_setup,
            script: streams,
        },
        Scenario {
            name: "cold-writes",
            about: "user writes of keys left alone for a while join the GC moves' band (cold): puts, a delete, a batch across both bands, GC of bands of cold writes, a reopen",
            modes: &["tiered"],
            setup: cold_setup,
            script: cold_writes,
        },
        Scenario {
            name: "absorb",
            about: "overwrites absorbed in the open DRAM segment: hot keys rewritten while segments fill and seal, a batch's records absorbed, a length change, a delete and put again, GC of what survived, a reopen with absorbed writes on the pad only",
            modes: &["tiered"],
            setup: Setup::small,
            script: absorb,
        },
        Scenario {
            name: "multi-slot",
            about: "records larger than a segment seal bands early; batches start with one; GC frees their bands",
            modes: ALL,
            setup: Setup::small,
            script: multi_slot,
        },
        Scenario {
            name: "pad-wrap",
            about: "the write pad wraps around (tiered, smallest pad), GC keeps up",
            modes: &["tiered"],
            setup: pad_setup,
            script: pad_wrap,
        },
    ]
}

/// The scenario names and what they do, for `--help`-style listings.
pub fn list() -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    all().iter().map(|s| (s.name, s.about, s.modes)).collect()
}

fn scm_setup(mode: &str) -> Setup {
    Setup {
        segment: 8 << 10,
        band: 4096 + 16 * (8 << 10),
        ..Setup::small(mode)
    }
}

fn pad_setup(mode: &str) -> Setup {
    Setup {
        fast_size: 40 << 20, // the smallest pad: 32 MiB
        cap_size: 24 << 20,
        segment: 64 << 10,
        band: 4096 + 16 * (64 << 10),
        ..Setup::small(mode)
    }
}

/// The small pool, GC moves in a stream of their own.
fn streams_setup(mode: &str) -> Setup {
    Setup {
        gc_separate: true,
        ..Setup::small(mode)
    }
}

/// The small pool, GC moves in a stream of their own, and a user write cold
/// once two bands have been opened after its key's copy's band.
fn cold_setup(mode: &str) -> Setup {
    Setup {
        gc_separate: true,
        cold_age: 2,
        ..Setup::small(mode)
    }
}

/// Cold user writes (design.md §9.5): keys written once; GC moves the
/// survivors of a half-dead band into a band of its own (the scenario fails
/// if it opens none); two bands and more of other keys' writes; then the
/// first keys written again: cold, so they join the GC band (the scenario
/// fails if none is counted cold). A batch spans a cold key, a hot key and
/// a cold delete; a cold key deleted is put again; GC empties the bands
/// that held the first writes and those the cold writes went to. The open
/// segments are sealed at each step, so recovery has only the capacity
/// tier's positions to order the versions by.
fn cold_writes(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale {
        let (b, n) = (r * 1000, 30);
        for k in b..b + n {
            s.put(k, 7000)?; // about a band: the cold keys
        }
        for k in b + 100..b + 130 {
            s.put(k, 7000)?;
        }
        for k in (b + 100..b + 130).step_by(2) {
            s.put(k, 6000)?; // half of them die
        }
        s.flush()?;
        s.gc()?;
        let check = r == 0 && s.setup().gc_separate;
        if check && open_bands(s)? != 2 {
            return Err(Violation(
                "scenario: GC did not open a band of its own".into(),
            ));
        }
        for round in 0..7 {
            for k in b + n..b + n + 12 {
                s.put(k, 5000 + round * 100)?; // hot keys
            }
        }
        s.put(b + 1, 5000)?; // cold: into the GC band
        if check && s.db()?.stats().cold_writes == 0 {
            return Err(Violation("scenario: no user write was cold".into()));
        }
        s.batch(&[(b + 2, Some(4000)), (b + n + 1, Some(4500)), (b + 3, None)])?;
        s.delete(b + 4)?;
        s.seal_open()?;
        s.put(b + 1, 5100)?; // its copy is young now
        s.put(b + 4, 3000)?; // after its delete
        s.seal_open()?;
        s.flush()?;
        for _ in 0..4 {
            if !s.gc()? {
                break;
            }
        }
        s.put(b + 5, 2500)?;
        s.seal_open()?;
    }
    s.reopen()?;
    s.put(1, 1500)?;
    s.gc()?;
    Ok(())
}

/// Bands in the state "open".
fn open_bands(s: &Script) -> Result<usize, Violation> {
    Ok(s.bands()?.iter().filter(|b| b.state == "open").count())
}

/// Separate GC writes (design.md §9.5): GC moves a band's survivors into a
/// band opened after the user writes' one; then a moved key is overwritten
/// (the write must land after the moved copy), a new key written (to the
/// newest band), a moved key deleted and, after GC may have dropped its
/// tombstone, put again; a batch spans a moved key and a user-band key;
/// GC empties a user band (its moves join the GC band) and the GC band
/// itself. The open segments are sealed at each step (`seal_open`), so the
/// crash states after it leave recovery only the capacity tier's positions
/// to tell versions apart: the pad would replay the writes after everything.
fn streams(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale {
        let b = r * 1000;
        let n = 40;
        for k in b..b + n {
            s.put(k, 7000)?; // about a band and a half
        }
        for k in (b..b + n / 2).step_by(2) {
            s.put(k, 6000)?; // half of the first band dies
        }
        s.flush()?; // a band with segments in flight is no GC victim
        s.gc()?;
        if r == 0 && s.setup().gc_separate && open_bands(s)? != 2 {
            return Err(Violation(
                "scenario: GC did not open a band of its own".into(),
            ));
        }
        s.put(b + 1, 5000)?; // moved: lands after its moved copy
        s.put(b + n + 1, 3000)?; // new: the newest band
        s.delete(b + 3)?;
        s.batch(&[(b + 5, Some(4000)), (b + n - 1, Some(4500))])?;
        s.seal_open()?;
        for k in (b + n / 2..b + n).step_by(2) {
            s.put(k, 6500)?;
        }
        if r % 2 == 1 {
            s.checkpoint()?;
        }
        s.seal_open()?;
        s.gc()?;
        s.gc()?;
        s.put(b + 3, 2000)?; // after its delete
        s.put(b + 7, 3500)?;
        s.seal_open()?;
    }
    s.reopen()?;
    s.put(1, 1500)?;
    s.gc()?;
    Ok(())
}

/// The small pool, with freed bands left untrimmed: their slots keep their
/// old segments.
fn untrimmed_setup(mode: &str) -> Setup {
    Setup {
        keep_freed: true,
        ..Setup::small(mode)
    }
}

/// Rewrites of the same keys, GC after each round, until writes land in a
/// band GC freed earlier, over its stale segments; then one more round there.
fn reuse_untrimmed(s: &mut Script, scale: u32) -> Result<(), Violation> {
    let n = 30;
    let (mut used, mut freed) = (BTreeSet::new(), BTreeSet::new());
    let mut rounds_after_reuse = 0;
    for round in 0..60 {
        for k in 0..n {
            s.put(k, 6000 + (round % 3) * 1000)?;
        }
        if open_band(s)?.is_some_and(|b| freed.contains(&b)) {
            rounds_after_reuse += 1;
            if rounds_after_reuse > scale {
                return Ok(());
            }
        }
        let in_use = |b: &masse::BandStatus| b.state == "open" || b.state == "sealed";
        used.extend(s.bands()?.iter().filter(|b| in_use(b)).map(|b| b.band));
        while s.gc()? {}
        // A band seen in use and free now was emptied by GC: its slots keep
        // their segments.
        freed.extend(
            s.bands()?
                .iter()
                .filter(|b| b.state == "free" && used.contains(&b.band))
                .map(|b| b.band),
        );
    }
    Err(Violation("no write reached a band GC had freed".into()))
}

fn batch_segments(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale {
        let b = r * 100;
        for k in 0..6 {
            s.put(b + k, 200 + 900 * k)?;
        }
        // 4 × 9 KiB: more than a 32 KiB segment.
        s.batch(&[
            (b + 1, Some(9000)),
            (b + 2, Some(9000)),
            (b + 7, Some(9000)),
            (b + 8, Some(9000)),
        ])?;
        s.checkpoint()?;
        s.batch(&[
            (b, None),
            (b + 10, Some(6000)),
            (b + 11, Some(12000)),
            (b + 3, None),
            (b + 12, Some(9000)),
        ])?;
        s.put(b + 4, 3000)?;
        s.batch(&[
            (b + 5, Some(20)),
            (b + 13, Some(25000)),
            (b + 14, Some(100)),
        ])?;
        s.delete(b + 1)?;
        s.checkpoint()?;
        s.batch(&[
            (b + 10, None),
            (b + 15, Some(18000)),
            (b + 16, Some(15000)),
            (b + 2, None),
        ])?;
        s.put(b + 7, 500)?;
    }
    Ok(())
}

/// The open band and its open segment (slot in band, free bytes), if any.
fn open_segment(s: &Script) -> Result<Option<(u32, usize, u32)>, Violation> {
    for b in s.bands()? {
        if b.state != "open" {
            continue;
        }
        if let Some((i, seg)) = b
            .segments
            .iter()
            .enumerate()
            .find(|(_, g)| g.use_state == "open")
        {
            return Ok(Some((b.band, i, seg.free_size)));
        }
    }
    Ok(None)
}

fn open_band(s: &Script) -> Result<Option<u32>, Violation> {
    Ok(s.bands()?
        .iter()
        .find(|b| b.state == "open")
        .map(|b| b.band))
}

/// Puts filler keys `first, first+1, …` (14 000 bytes: two to a segment)
/// until `done`; returns them.
fn fill_until(
    s: &mut Script,
    first: u32,
    mut done: impl FnMut(&Script) -> Result<bool, Violation>,
) -> Result<Vec<u32>, Violation> {
    let mut keys = Vec::new();
    while !done(s)? {
        if keys.len() > 400 {
            return Err(Violation("scenario: filling never reached its goal".into()));
        }
        let k = first + keys.len() as u32;
        s.put(k, 14_000)?;
        keys.push(k);
    }
    Ok(keys)
}

/// The reported defect 1: the batch's first record ends band A, its last
/// starts band B; the last key is overwritten, B empties, GC frees B.
fn batch_band_gc(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale + 1 {
        let b = r * 1000;
        let (k, l) = (b + 1, b + 2);
        s.put(k, 300)?;
        s.put(l, 300)?;
        // The open segment must be its band's last, with room for K but not for K and L.
        fill_until(s, b + 10, |s| {
            let spb = s.bands()?.first().map_or(0, |x| x.segments.len());
            Ok(open_segment(s)?.is_some_and(|(_, i, free)| i + 1 == spb && free > 4500))
        })?;
        let band_a = open_band(s)?;
        // Even rounds put K, odd rounds delete it (a delete must not come back either).
        s.batch(&[(k, (r % 2 == 0).then_some(4000)), (l, Some(30000))])?;
        let band_b = open_band(s)?;
        if band_b == band_a {
            return Err(Violation(
                "scenario: the batch did not cross a band boundary".into(),
            ));
        }
        let fillers = fill_until(s, b + 500, |s| Ok(open_band(s)? != band_b))?;
        s.put(l, 200)?; // the batch's last record is now dead
        for f in fillers {
            s.put(f, 100)?; // band B holds nothing live now
        }
        if r % 2 == 1 {
            s.checkpoint()?;
        }
        s.flush()?; // a band with segments in flight is no GC victim
        s.gc()?;
        let freed = s
            .bands()?
            .iter()
            .any(|x| Some(x.band) == band_b && x.state == "free");
        if !freed {
            let table: Vec<String> = s
                .bands()?
                .iter()
                .filter(|x| x.state != "free")
                .map(|x| format!("{} {} live {}", x.band, x.state, x.live_bytes))
                .collect();
            return Err(Violation(format!(
                "scenario: GC did not free the batch's second band {band_b:?}: {}",
                table.join(", ")
            )));
        }
        s.put(b + 3, 500)?;
        s.batch(&[(b + 4, Some(700)), (b + 5, Some(800))])?;
        if r % 2 == 0 {
            s.checkpoint()?;
        }
        s.put(b + 6, 900)?;
    }
    Ok(())
}

/// Overwrites of ~6–9 KiB: a 32 KiB segment seals every few writes, and
/// each seal writes the segment's tail and footer together.
fn seal(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for k in 0..8 {
        s.put(k, 300)?;
    }
    for i in 0..12 * scale {
        s.put(i % 8, 6000 + (i % 4) * 1000)?;
        if i % 5 == 4 {
            s.batch(&[
                (i % 8, Some(5000)),
                ((i + 3) % 8, Some(4000)),
                (8 + i, Some(3000)),
            ])?;
        }
    }
    s.checkpoint()?;
    for i in 0..4 {
        s.put(i, 8000)?;
    }
    Ok(())
}

/// Format 3's block marks (format.md §7.6.2). Keys below 16 are one byte, so
/// a record is 8 + 1 + value bytes and a short seq trailer: from a fresh
/// segment (record at 72), a 4,013-byte value ends on the 4 KiB boundary;
/// a batch of 300, 3,700 and 200 bytes puts its last record across the next
/// boundary with a small gap, so it skips behind a mark (a group split by a
/// mark); 6,000 bytes straddle, so the next record starts behind a mark;
/// values of 4,063–4,079 bytes leave too little room for a mark and a record
/// start. Segments are 32 KiB, so the rounds meet these cases at shifting
/// offsets. A reopen in mid-segment makes capacity-only and scm-only pools
/// continue the segment the last run left open, and GC moves records (old
/// seqs: delta trailers).
fn marks(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..3 * scale {
        s.put(0, 4013)?;
        s.batch(&[(1, Some(300)), (2, Some(3700)), (3, Some(200))])?;
        s.put(4, 6000)?;
        s.batch(&[(5, Some(4063)), (6, Some(4070)), (7, Some(4079))])?;
        s.put(8, 4013 + r)?;
        s.delete(3)?;
        s.batch(&[(9, Some(10)), (10, Some(20)), (1, None), (11, Some(4000))])?;
        if r == 1 {
            s.reopen()?;
        }
    }
    s.gc()?;
    s.put(12, 100)?;
    s.checkpoint()?;
    Ok(())
}

fn checkpoint_gc(s: &mut Script, scale: u32) -> Result<(), Violation> {
    let n = 24 * scale;
    for k in 0..n {
        s.put(k, 5000 + (k % 5) * 700)?;
    }
    for k in (0..n).step_by(2) {
        s.put(k, 4000)?; // half of every early band is dead now
    }
    s.checkpoint()?;
    s.gc()?;
    for k in (1..n).step_by(6) {
        s.delete(k)?;
    }
    s.gc()?;
    s.checkpoint()?;
    s.batch(&[(3, Some(9000)), (5, None), (n + 1, Some(12000))])?;
    s.reopen()?;
    for k in (0..n).step_by(3) {
        s.put(k, 6000)?;
    }
    s.gc()?;
    s.put(n + 2, 300)?;
    Ok(())
}

fn concurrent(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..3 * scale {
        let b = (r % 3) * 20;
        s.concurrent(&[
            Write::Put(b, 7000 + r * 300),
            Write::Put(b + 1, 9000),
            Write::Batch(vec![
                (b + 2, Some(8000)),
                (b + 3, Some(11000)),
                (b + 4, None),
            ]),
            Write::Delete(b + 5),
        ])?;
        s.concurrent(&[
            Write::Batch(vec![(b + 5, Some(4000)), (b + 6, Some(13000))]),
            Write::Put(b + 7, 300),
            Write::Put(b + 8, 20000),
        ])?;
        if r == 1 {
            s.checkpoint()?;
        }
    }
    s.gc()?;
    Ok(())
}

/// scm-only: lone puts of an unchanged size overwrite sealed records in place.
fn scm_inplace(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for k in 0..24 {
        s.put(k, 1000 + (k % 3) * 100)?;
    }
    s.flush()?;
    for i in 0..16 * scale {
        let k = i % 12;
        s.put(k, 1000 + (k % 3) * 100)?; // same size: in place
    }
    s.put(12, 2500)?; // another size: appended
    s.delete(13)?;
    s.batch(&[(14, Some(1000)), (15, Some(1100))])?;
    s.checkpoint()?;
    for k in 0..6 {
        s.put(k, 1000 + (k % 3) * 100)?;
    }
    s.gc()?;
    s.put(1, 1100)?;
    Ok(())
}

/// Absorbed overwrites (design.md §4.10): a lone put of a key whose newest
/// record is in the open segment, or in the `User` segment closed last
/// (held in DRAM until the next one closes), at the same length, is written
/// over it there. Windows of hot keys are rewritten while segments fill, seal and cross
/// into a new band; a lone put absorbs into a batch's first and last records
/// (they keep the batch's MORE flags); another length is appended, and so is
/// a put after a delete, which the next put then absorbs. `seal_open` steps
/// leave recovery only the capacity tier's positions to order versions by;
/// the crash points before them find absorbed writes on the pad only. GC
/// moves the survivors; writes after a clean reopen are absorbed again. The
/// scenario fails if nothing was absorbed.
fn absorb(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale {
        let b = r * 1000;
        for w in 0..8 {
            for _ in 0..3 {
                for k in b + w * 3..b + w * 3 + 5 {
                    s.put(k, 1500)?; // 20 to a 32 KiB segment
                }
            }
            if w == 3 {
                s.seal_open()?;
            }
        }
        if r == 0 && s.db()?.stats().absorbed_writes == 0 {
            return Err(Violation("scenario: no overwrite was absorbed".into()));
        }
        s.batch(&[
            (b + 100, Some(1200)),
            (b + 101, Some(1200)),
            (b + 102, Some(900)),
        ])?;
        s.put(b + 100, 1200)?; // over the batch's first record
        s.put(b + 102, 900)?; // and its last
        s.put(b + 2, 1600)?; // another length: appended
        s.delete(b + 3)?;
        s.put(b + 3, 1500)?; // after its delete: appended
        s.put(b + 3, 1500)?; // absorbed
        if r % 2 == 1 {
            s.checkpoint()?;
        }
        s.seal_open()?;
        for k in b..b + 4 {
            s.put(k, 1500)?;
            s.put(k, 1500)?;
        }
        s.seal_open()?;
        s.gc()?;
        s.gc()?;
        s.put(b + 1, 1500)?;
        s.put(b + 1, 1500)?;
    }
    s.reopen()?;
    s.put(1, 1500)?;
    s.put(1, 1500)?;
    s.gc()?;
    Ok(())
}

/// Writes until the pad wraps: 32 MiB of 60 KB batches; GC reclaims as the
/// same keys are overwritten. The focus is the batches around the wrap.
fn pad_wrap(s: &mut Script, scale: u32) -> Result<(), Violation> {
    let pad = 32u64 << 20;
    let batch = 61_440; // a 60 000-byte value's batch, rounded to 4 KiB
    for i in 0..(600 * scale) {
        let pos = s.db()?.stats().pad_bytes_written % pad;
        let near = pos + 4 * batch >= pad || pos < 2 * batch;
        if near {
            s.focus(true);
        } else {
            s.focus(false);
        }
        if near && i % 3 == 0 {
            s.batch(&[(i % 16, Some(30_000)), (16 + i % 8, Some(29_000))])?;
        } else {
            s.put(i % 24, 60_000)?;
        }
        if i % 10 == 9 {
            s.gc()?;
        }
    }
    s.focus(false);
    Ok(())
}

/// Records larger than a segment (multi-slot segments, format.md §7.4),
/// the common case of scm-only pools' 8 KiB segments: a band sealed early
/// because one does not fit its free tail, a batch whose first record is
/// one and whose end lands in the segment after it, then everything in the
/// band that took them overwritten and GC until it frees nothing more
/// (issue 44, defect 2: a band freed by GC after an early seal turned a
/// later segment into a false tear). The follow-up's crashes then come
/// after that history.
fn multi_slot(s: &mut Script, scale: u32) -> Result<(), Violation> {
    for r in 0..scale + 1 {
        let b = r * 1000;
        for k in 0..10 {
            s.put(b + k, 6000)?;
        }
        s.put(b + 50, 70_000)?; // three 32 KiB slots
        s.batch(&[(b + 51, Some(40_000)), (b + 52, Some(3000)), (b + 1, None)])?;
        for k in 10..20 {
            s.put(b + k, 6000)?;
        }
        s.put(b + 50, 100)?;
        s.put(b + 51, 100)?;
        for k in 10..20 {
            s.put(b + k, 7000)?;
        }
        s.flush()?; // a band with segments in flight is no GC victim
        for _ in 0..4 {
            if !s.gc()? {
                break;
            }
        }
        s.batch(&[(b + 60, Some(45_000)), (b + 61, Some(5000))])?;
        s.put(b + 62, 800)?;
    }
    Ok(())
}

/// What a continued run does after a crash: GC before any user write, then
/// overwrites, a batch with a delete, GC, a checkpoint, more writes (then the
/// clean close).
pub fn follow_up(s: &mut Script) -> Result<(), Violation> {
    // GC first, before any user write, until it frees nothing more: it moves
    // live records (which keep their old seqs) out of the bands the crash
    // left and frees the bands the first recovery's judgement read (issue
    // 44's histories).
    for _ in 0..4 {
        if !s.gc()? {
            break;
        }
    }
    let keys: Vec<u32> = s.state().keys().copied().collect();
    let pick: Vec<u32> = (0..6)
        .filter_map(|j| keys.get(j * keys.len().max(1) / 6).copied())
        .collect();
    for (j, &k) in pick.iter().enumerate() {
        s.put(k, 200 + 3000 * j as u32)?;
    }
    let fresh = keys.last().map_or(0, |k| k + 1);
    if pick.len() >= 2 {
        s.batch(&[(pick[0], None), (pick[1], Some(9000)), (fresh, Some(20000))])?;
    }
    s.flush()?;
    s.gc()?;
    s.checkpoint()?;
    s.put(fresh + 1, 700)?;
    if let Some(&k) = pick.get(2) {
        s.put(k, 5000)?;
    }
    Ok(())
}
