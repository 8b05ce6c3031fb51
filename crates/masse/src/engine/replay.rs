//! Pad replay at open: which of the records recovery read from the pad's
//! durable tail must be placed again.
//!
//! The pad holds every write since its tail, but many of them also reached
//! the capacity tier before the crash: the tail moves only when *every*
//! segment with records of its oldest batch is durable, and a segment left
//! open (an idle `User` segment while GC kept writing) holds it for a long
//! time. Placing all of them again wrote a second copy of records the pool
//! already held; on a pool near full that could take more room than GC could
//! make, and the open failed ("no free band", design.md §12).
//!
//! A key's state after recovery must be its last write. Every write since the
//! tail is on the pad, in commit order, so for a key the pad holds, that is
//! its last record there; the scan of the capacity tier has already set the
//! index to the newest durable copy. So only a key's last record on the pad
//! can matter, and it needs placing only if the pool does not already read
//! as it says: the value it holds, or absent for a delete. Comparing states,
//! not positions, holds however the two write streams' segments reached the
//! tier (a cold user write in the `Gc` stream's segment can be durable while
//! an older write in the `User` stream's is not). Dropping a batch's other
//! records keeps its atomicity: each is overwritten by a later record that is
//! either placed or already the pool's state.
//!
//! The copies the scan found may have been written without being synced
//! (a killed process, not a power cut, leaves them in a cache), and once
//! replay is over nothing holds the pad's region any more. So before relying
//! on them, every capacity device is synced.
//!
//! Until replay is over the index names an older copy of every key still to
//! be replayed. GC making room for replay must not move such a copy: the move
//! would be written to the pad after the newer record, and a second crash
//! would then replay the older value last. Their bands are kept from GC
//! ([`BandTable::awaiting_replay`](super::band::BandTable)) until the group
//! holding the newer record is placed.

use super::check::{entry_record, seqs_agree};
use super::request::PendingRecord;
use super::scanner::{BandScanner, Found, Source};
use super::state::Engine;
use crate::error::Result;
use crate::format::Loc;
use std::collections::{BTreeMap, HashMap};

/// What replay must place: `groups` (in order; the empty ones dropped), the
/// bands each group's records unpin once placed (`pins`, one list per group),
/// and how many of the pad's records were `skipped` (overwritten later on the
/// pad, or already the pool's state).
pub(crate) struct ToReplay {
    pub groups: Vec<Vec<PendingRecord>>,
    pub pins: Vec<Vec<u32>>,
    pub skipped: u64,
}

/// The records of `groups` (the pad's, in commit order) that replay must
/// place again; see the module comment. Pins the bands holding the current
/// copies of their keys ([`placed`] and [`done`] unpin them).
pub(crate) fn still_needed(e: &Engine, groups: Vec<Vec<PendingRecord>>) -> Result<ToReplay> {
    let needed = needed(e, &groups)?;
    let mut r = ToReplay {
        groups: Vec::with_capacity(groups.len()),
        pins: Vec::with_capacity(groups.len()),
        skipped: 0,
    };
    for (g, keep) in groups.into_iter().zip(needed) {
        r.skipped += keep.iter().filter(|&&k| !k).count() as u64;
        let g: Vec<PendingRecord> = g
            .into_iter()
            .zip(keep)
            .filter_map(|(p, k)| k.then_some(p))
            .collect();
        if !g.is_empty() {
            let pins: Vec<u32> = g
                .iter()
                .filter_map(|p| e.index.get(p.digest))
                .map(|l| e.layout.band_of_slot(Loc(l).slot()))
                .collect();
            r.groups.push(g);
            r.pins.push(pins);
        }
    }
    let mut bt = e.bands.lock();
    for &b in r.pins.iter().flatten() {
        *bt.awaiting_replay.entry(b).or_default() += 1;
    }
    Ok(r)
}

/// Per record of `groups`: whether replay must place it. Syncs the capacity
/// devices if any is skipped for being the pool's state already.
fn needed(e: &Engine, groups: &[Vec<PendingRecord>]) -> Result<Vec<Vec<bool>>> {
    let last = last_writes(groups);
    let held = already_held(e, groups, &last);
    if held.iter().any(|&h| h) {
        for d in &e.pool.caps {
            crate::pool::sync(d, "syncing a capacity device before pad replay")?;
        }
    }
    Ok(groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            g.iter()
                .enumerate()
                .map(|(ri, r)| match last.get(r.key()) {
                    Some(&(at, n)) => at == (gi, ri) && !held[n],
                    None => true,
                })
                .collect()
        })
        .collect())
}

/// A group was placed: the older copies of its keys are dead, so their bands
/// may be GC victims again (unless other keys still pin them).
pub(crate) fn placed(e: &Engine, pins: &[u32]) {
    let mut bt = e.bands.lock();
    for b in pins {
        if let Some(n) = bt.awaiting_replay.get_mut(b) {
            *n -= 1;
            if *n == 0 {
                bt.awaiting_replay.remove(b);
            }
        }
    }
}

/// Replay is over: GC may move every band again.
pub(crate) fn done(e: &Engine) {
    e.bands.lock().awaiting_replay.clear();
}

/// For every key on the pad: where its last record is (group, record) and
/// its number among the last records.
fn last_writes(groups: &[Vec<PendingRecord>]) -> HashMap<&[u8], ((usize, usize), usize)> {
    let mut last: HashMap<&[u8], ((usize, usize), usize)> = HashMap::new();
    for (gi, g) in groups.iter().enumerate() {
        for (ri, r) in g.iter().enumerate() {
            last.insert(r.key(), ((gi, ri), 0));
        }
    }
    for (n, v) in last.values_mut().enumerate() {
        v.1 = n;
    }
    last
}

/// A last record the index may already hold: its number, where the index
/// points, and the record.
type Candidate<'r> = (usize, Loc, &'r PendingRecord);

/// Per last record (by its number): whether the pool already holds it as its
/// key's state. The index must point at a record of the key that says what
/// it says (its value, or a tombstone). With no entry a delete is still
/// placed: the key may have an older copy the index does not name (a
/// checkpoint covered it) that a later full scan would find. Each segment
/// named is read once and its records checked as `check` does (checksum,
/// summary entry, seq); only a record that passes counts. After a power cut
/// a segment written whole can have a valid footer over blocks that never
/// landed, and such a block can hold an earlier incarnation's record: replay
/// supersedes those, as it always did, and nothing is reported.
fn already_held(
    e: &Engine,
    groups: &[Vec<PendingRecord>],
    last: &HashMap<&[u8], ((usize, usize), usize)>,
) -> Vec<bool> {
    let mut by_slot: BTreeMap<u64, Vec<Candidate<'_>>> = BTreeMap::new();
    for &((gi, ri), n) in last.values() {
        let r = &groups[gi][ri];
        if let Some(l) = e.index.get(r.digest).map(Loc) {
            if l.is_tombstone() == r.tombstone {
                by_slot.entry(l.slot()).or_default().push((n, l, r));
            }
        }
    }
    let mut held = vec![false; last.len()];
    for (slot, cands) in by_slot {
        verify_segment(e, slot, &cands, &mut held);
    }
    held
}

/// Reads the segment at `slot` (on the capacity tier; one in DRAM holds
/// nothing durable) and marks the candidates whose records pass.
fn verify_segment(e: &Engine, slot: u64, cands: &[Candidate<'_>], held: &mut [bool]) {
    let l = &e.layout;
    if e.segments.contains(slot) {
        return;
    }
    let band = l.band_of_slot(slot);
    let first_seq = e.bands.lock().bands[band as usize].first_seq;
    let dig = |k: &[u8]| e.digest(k);
    let which = (band, first_seq);
    // One segment per read: the candidates name a few segments of many bands.
    let mut sc = BandScanner::new(l, &e.pool.caps, e.tag, which, e.seq_limit(), &dig)
        .with_chunk_bytes(l.seg as usize);
    let at = l.slot_in_band(slot);
    let codec = l.codec;
    // A read error leaves the candidates unheld: replay places them.
    let _ = sc.scan(at, at + 1, false, &mut |f| {
        let Found::Segment(s) = f else { return Ok(()) };
        if s.slot != at || s.source == Source::HeaderDamaged {
            return Ok(());
        }
        let agree = seqs_agree(codec, s.data, s.seq, &s.entries);
        for (se, ok) in s.entries.iter().zip(agree) {
            let Some(&(n, _, r)) = cands.iter().find(|c| c.1.offset() == se.offset) else {
                continue;
            };
            held[n] = ok
                && entry_record(e, s.data, se).is_ok_and(|x| {
                    x.key == r.key() && x.tombstone == r.tombstone && x.value == r.value()
                });
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceSpec, Options, PoolConfig};
    use crate::device::{Device, MemDevice};
    use crate::engine::request::RecordKind;
    use crate::Db;
    use std::sync::Arc;

    fn db() -> Db {
        let dev = |n| DeviceSpec::Device(Arc::new(MemDevice::new(n)) as Arc<dyn Device>);
        let mut c = PoolConfig::tiered(dev(48 << 20), dev(16 << 20));
        c.segment_size = Some(32 << 10);
        c.band_size = Some(512 << 10);
        let o = Options {
            background_gc: false,
            histograms: false,
            ..Options::default()
        };
        Db::create(&c, o).expect("create")
    }

    fn rec(e: &Engine, k: &[u8], v: Option<&[u8]>) -> PendingRecord {
        let mut p = PendingRecord::new(k, v.unwrap_or(b""), v.is_none(), RecordKind::Replay);
        p.digest = e.digest(k);
        p
    }

    /// Only a key's last record can matter, and only if the pool does not
    /// read as it says; a delete of a key the index does not name is placed
    /// (an older copy a checkpoint covered may exist). The band holding the
    /// current copy of a key still to be replayed is kept from GC.
    #[test]
    fn only_last_records_the_pool_lacks_are_placed() {
        let db = db();
        let e = &db.engine;
        db.put(b"held", b"v2").expect("put");
        db.put(b"stale", b"old").expect("put");
        db.seal_open_segments().expect("seal");
        let groups = vec![
            vec![rec(e, b"held", Some(b"v1")), rec(e, b"stale", Some(b"new"))],
            vec![rec(e, b"held", Some(b"v2")), rec(e, b"never", None)],
            vec![rec(e, b"gone", Some(b"x")), rec(e, b"gone", None)],
        ];
        let r = still_needed(e, groups).expect("filter");
        let left: Vec<Vec<(Vec<u8>, bool)>> = r
            .groups
            .iter()
            .map(|g| g.iter().map(|p| (p.key().to_vec(), p.tombstone)).collect())
            .collect();
        assert_eq!(
            left,
            vec![
                vec![(b"stale".to_vec(), false)],
                vec![(b"never".to_vec(), true)],
                vec![(b"gone".to_vec(), true)],
            ]
        );
        assert_eq!(r.skipped, 3);
        let stale = Loc(e.index.get(e.digest(b"stale")).expect("indexed"));
        let band = e.layout.band_of_slot(stale.slot());
        assert_eq!(e.bands.lock().awaiting_replay.get(&band), Some(&1));
        assert_eq!(
            r.pins[0],
            vec![band],
            "the group placing \"stale\" pins its band"
        );
        placed(e, &r.pins[0]);
        assert!(!e.bands.lock().awaiting_replay.contains_key(&band));
        done(e);
        assert!(e.bands.lock().awaiting_replay.is_empty());
        db.close().expect("close");
    }
}
