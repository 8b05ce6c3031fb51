//! Recovery at open (paper §2.7).
//!
//! A checkpoint (checkpoint.rs) records `replay_from`: the oldest segment that
//! was not yet durable when its snapshot started. Recovery loads the newest valid checkpoint (or none), drops entries
//! that point into bands freed or reused since, replays every segment from
//! `replay_from` on in write order — newer position wins, so replay is
//! idempotent — and finally re-applies the write pad from its durable tail.
//! Without a usable checkpoint the same code replays every segment.

use super::band::BandState;
use super::checkpoint::load_checkpoint;
use super::pad::{replay_start, Batch, PadReader};
use super::request::{PendingRecord, RecordKind};
use super::scanner::{BandScanner, Found, Segment, Source};
use super::segment::{OpenSegment, SegmentBuf};
use super::state::Engine;
use super::torn::{BandFacts, Tears};
use crate::device::{round_up, round_up64, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::v3seg::V3Cursor;
use crate::format::*;
use crate::index::{fingerprint, Digest};
use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Instant;

/// Sequence numbers skipped at every open, so no record of a new run follows on
/// from a group of the last run that a crash cut short (groups are told apart
/// by consecutive seqs, see [`Replay`]).
const SEQ_GAP_AT_OPEN: u64 = 1 << 20;

/// A band to replay: its incarnation and the slot replay starts at.
struct BandPlan {
    band: u32,
    first_seq: u64,
    start_slot: u64,
}

/// What the band headers say: per band, the first segment seq of the incarnation
/// in use (`None` = free), and whether it had to be inferred (then it is pinned).
struct BandHeaders {
    first: Vec<Option<u64>>,
    inferred: Vec<bool>,
    /// The newest `freed_after` of a FREE header (format version 5).
    freed_max: u64,
}

/// Rebuild the index, band table and write state. Returns the pad groups to re-apply.
pub(crate) fn recover(e: &Engine, clean: bool) -> Result<Vec<Vec<PendingRecord>>> {
    let t0 = Instant::now();
    // 1. Band headers say which bands are in use and which incarnation they hold.
    let hdrs = read_band_headers(e)?;
    // 2. Newest valid checkpoint, if any.
    let ck = load_checkpoint(e)?;
    let (source, replay_from, ck_bands, ck_next_seq) = match &ck {
        Some((h, bands)) => (
            "checkpoint",
            h.replay_from_seq,
            Some(bands.clone()),
            h.next_record_seq,
        ),
        None => ("scan", 0, None, 1),
    };
    let matches = |b: usize| -> Option<BandRecord> {
        let cb = ck_bands.as_ref()?.get(b)?;
        (cb.in_use && Some(cb.first_seq) == hdrs.first[b]).then_some(*cb)
    };
    let unscanned = match ck {
        Some(_) => keep_checkpointed(e, &matches),
        None => HashSet::new(),
    };
    // 3. Plan: which slots of which bands to replay, in write order.
    let (plans, min_seq, written) = plan_replay(&hdrs, replay_from, &matches);
    let mut rp = Replay::new(e, &hdrs, &plans, ck_next_seq);
    rp.min_seq = min_seq;
    rp.written = written;
    // 4. Replay segments, band by band in write order.
    let newest = plans.last().map(|p| p.band);
    for p in &plans {
        rp.band(p, Some(p.band) == newest)?;
    }
    rp.finish();
    void_torn(e, &mut rp)?;
    make_durable(e)?;
    // 5. The pad: everything from its durable tail is re-applied below, in order.
    let groups = match &e.pad {
        Some(_) => read_pad(e, clean)?,
        None => Vec::new(),
    };
    // 6–7. Entries pointing where nothing valid was found; space accounting.
    drop_dangling(e, &hdrs, &rp.written, &groups, unscanned);
    account_live(e);
    // 8. Band table and write state.
    restore_state(e, &hdrs, &rp, newest)?;
    let mut r = e.recovery.lock();
    r.source = if clean {
        format!("{source} (clean shutdown)")
    } else {
        source.to_string()
    };
    r.segments = rp.segments;
    r.us = t0.elapsed().as_micros() as u64;
    Ok(groups)
}

/// Step 3: which slots of which bands to replay, in write order, with the
/// per-band oldest seq and written slots the checkpoint vouches for.
fn plan_replay(
    hdrs: &BandHeaders,
    replay_from: u64,
    matches: &dyn Fn(usize) -> Option<BandRecord>,
) -> (Vec<BandPlan>, Vec<u64>, Vec<u64>) {
    let mut plans: Vec<BandPlan> = Vec::new();
    let mut min_seq = vec![u64::MAX; hdrs.first.len()];
    let mut written = vec![0; hdrs.first.len()];
    for (b, first) in hdrs.first.iter().enumerate() {
        let Some(first_seq) = *first else { continue };
        let start_slot = match matches(b) {
            Some(cb) => {
                min_seq[b] = cb.min_seq;
                written[b] = cb.written_slots as u64;
                // Records placed in segments that are not replayed are not in the
                // checkpoint; see the live-bytes fixup after replay below.
                if first_seq >= replay_from {
                    0
                } else {
                    cb.written_slots as u64
                }
            }
            None => 0,
        };
        plans.push(BandPlan {
            band: b as u32,
            first_seq,
            start_slot,
        });
    }
    plans.sort_by_key(|p| p.first_seq);
    (plans, min_seq, written)
}

/// Step 2: of the checkpoint's index entries, keep those into segments that
/// were durable when it was taken, in bands still holding the same
/// incarnation (`matches`). Entries into bands freed or reused since are
/// stale; replay re-adds what moved. So are entries the snapshot caught in
/// segments still in DRAM (at or past the band's written slots): those slots
/// are scanned anyway, and after a crash lost them a later run may have
/// written other records there, which a kept entry would point into.
/// Returns the (shard, fingerprint) of the live entries dropped for that
/// reason: a key among them that neither the scan nor the pad brings back is
/// lost (`drop_dangling`).
fn keep_checkpointed(
    e: &Engine,
    matches: &dyn Fn(usize) -> Option<BandRecord>,
) -> HashSet<(usize, u64)> {
    let l = &e.layout;
    let past_written = |loc: u64| {
        let slot = Loc(loc).slot();
        matches(l.band_of_slot(slot) as usize)
            .map(|cb| l.slot_in_band(slot) >= cb.written_slots as u64)
    };
    let mut unscanned = HashSet::new();
    e.index.retain_reporting(
        |loc| past_written(loc) == Some(false),
        |shard, fp, loc| {
            if past_written(loc) == Some(true) && !Loc(loc).is_tombstone() {
                unscanned.insert((shard, fp));
            }
        },
    );
    unscanned
}

/// Step 1: read every band header. A header is written twice in its block (format
/// version 2), so one damaged copy costs nothing. When both copies are damaged
/// but the band's first slot holds a segment of this pool, the band is taken to
/// be in use from that segment on and pinned (never reclaimed), with a warning.
fn read_band_headers(e: &Engine) -> Result<BandHeaders> {
    let l = &e.layout;
    let nb = l.bands as usize;
    let mut out = BandHeaders {
        first: vec![None; nb],
        inferred: vec![false; nb],
        freed_max: 0,
    };
    for b in 0..l.bands {
        let (dev, off) = l.band_addr(b);
        let blk = crate::pool::read_block(&e.pool.caps[dev], off, 4096, "reading band headers")?;
        let (h, copies_bad) = BandHeader::decode_copies(&blk);
        if copies_bad > 0 && h.is_some() {
            e.note(format!(
                "band {b}: one copy of its header is damaged; the other was used"
            ));
        }
        match h {
            Some(h) if h.pool_tag == e.tag && h.band == b && h.state == BAND_IN_USE => {
                out.first[b as usize] = Some(h.first_seq);
            }
            Some(h) if h.pool_tag == e.tag && h.band == b && h.state == BAND_FREE => {
                out.freed_max = out.freed_max.max(h.freed_after);
            }
            Some(_) => {}
            None if copies_bad == 0 => {}
            None => {
                let seg = crate::pool::read_block(
                    &e.pool.caps[dev],
                    off + l.geo.band_header_size as u64,
                    4096,
                    "reading band headers",
                )?;
                if let Some(sh) = SegmentHeader::decode(&seg).filter(|s| s.pool_tag == e.tag) {
                    out.first[b as usize] = Some(sh.segment_seq);
                    out.inferred[b as usize] = true;
                    e.warn(format!(
                        "band {b}: both copies of its header are damaged; its segments were \
                         replayed from segment {} on and the band is pinned (never reclaimed)",
                        sh.segment_seq
                    ));
                } else {
                    e.note(format!(
                        "band {b}: both copies of its header are damaged and it holds no \
                         segment; taken as free"
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// Replays segments into the index. Every entry goes through [`Replay::apply`]:
/// a position later in the log (band `first_seq`, slot, offset) wins, so replay
/// is idempotent and order-independent.
///
/// Atomic groups: in tiered mode every record found is applied. Each record on
/// the capacity tier was durable on the pad first, and the pad's tail passes a
/// batch only once every segment holding its records is durable; so a group
/// whose other members never reached the capacity tier is still on the pad and
/// comes back whole (step 5), and members missing because GC reclaimed their
/// band were durable — the group was complete. Without a pad (capacity-only,
/// scm-only), a group is applied only when all its members are found: they
/// carry consecutive seqs and all but the last the MORE flag. A commit is
/// acknowledged only once all its records are durable, so an acknowledged group
/// is whole on the device — unless GC reclaimed part of it, and GC sees to that:
/// before it frees a band holding the end of a group whose start lies in another
/// band, it moves the start's live records as stand-alone records (gc.rs), so
/// dropping the orphaned start here loses nothing.
struct Replay<'a> {
    e: &'a Engine,
    band_first: Vec<u64>,
    whole_groups: bool,
    group: Vec<(Digest, Loc)>,
    group_last_seq: u64,
    /// Records of groups a crash cut short, not applied.
    cut: u64,
    /// Torn bursts (capacity-only/scm-only) and the segments they void.
    tears: Tears<'a>,
    /// Footerless segments followed by others: (band, slot, seq, records).
    unread: Vec<(u32, u64, u64, usize)>,
    max_seq: u64,
    min_seq: Vec<u64>,
    written: Vec<u64>,
    segments: u64,
    /// Last footerless one-slot segment of the newest band, to keep filling.
    partial: Option<Partial>,
}

/// A partly written segment at the write frontier (capacity-only/scm-only).
struct Partial {
    band: u32,
    slot_in_band: u64,
    seq: u64,
    data: Vec<u8>,
    entries: Vec<SummaryEntry>,
    used: usize,
}

impl<'a> Replay<'a> {
    fn new(e: &'a Engine, hdrs: &BandHeaders, plans: &[BandPlan], ck_next_seq: u64) -> Replay<'a> {
        let nb = hdrs.first.len();
        let mut start_slot = vec![0; nb];
        for p in plans {
            start_slot[p.band as usize] = p.start_slot;
        }
        let facts = BandFacts {
            first: hdrs.first.clone(),
            start_slot,
            freed_max: hdrs.freed_max,
        };
        Replay {
            e,
            band_first: hdrs.first.iter().map(|f| f.unwrap_or(0)).collect(),
            whole_groups: e.pad.is_none(),
            group: Vec::new(),
            group_last_seq: 0,
            cut: 0,
            tears: Tears::new(&e.layout, e.pad.is_none(), facts),
            unread: Vec::new(),
            max_seq: ck_next_seq.saturating_sub(1),
            min_seq: vec![u64::MAX; nb],
            written: vec![0; nb],
            segments: 0,
            partial: None,
        }
    }

    fn pos(&self, loc: Loc) -> (u64, u64, u32) {
        let l = &self.e.layout;
        let b = l.band_of_slot(loc.slot()) as usize;
        (self.band_first[b], l.slot_in_band(loc.slot()), loc.offset())
    }

    fn apply(&self, d: Digest, loc: Loc) {
        self.e.index.update_with(d, |cur| match cur {
            Some(c) if self.pos(Loc(c)) >= self.pos(loc) => (Some(c), ()),
            _ => (Some(loc.0), ()),
        });
    }

    /// Replay one band from its planned start to its write frontier.
    fn band(&mut self, p: &BandPlan, newest: bool) -> Result<()> {
        let e = self.e;
        let dig = |k: &[u8]| e.digest(k);
        let mut sc = BandScanner::new(
            &e.layout,
            &e.pool.caps,
            e.tag,
            (p.band, p.first_seq),
            e.seq_limit(),
            &dig,
        );
        // A footerless segment is the frontier if nothing follows it; otherwise
        // its summary was lost (a torn seal, or damage) and its records were parsed.
        let mut unread_summary: Option<(u64, u64, usize)> = None;
        self.tears.band_start();
        let end = sc.scan(p.start_slot, e.layout.slots_per_band, true, &mut |f| {
            if let Found::Segment(s) = &f {
                if self.voided(p.band, s) {
                    return Ok(());
                }
            }
            if let Some((slot, seq, n)) = unread_summary.take() {
                self.unread.push((p.band, slot, seq, n));
            }
            self.partial = None;
            match f {
                Found::Segment(s) => {
                    if s.source == Source::Parsed {
                        unread_summary = Some((s.slot, s.seq, s.entries.len()));
                        if newest && s.nslots == 1 {
                            self.partial = Some(Partial {
                                band: p.band,
                                slot_in_band: s.slot,
                                seq: s.seq,
                                data: s.data.to_vec(),
                                entries: s.entries.clone(),
                                used: s.used,
                            });
                        }
                    }
                    self.segment(p.band, &s);
                }
                Found::Gap { slot, n, blank } => {
                    self.gap(p.band, slot, n, blank);
                    self.tears.gap(blank);
                }
            }
            Ok(())
        })?;
        let b = p.band as usize;
        self.written[b] = self.written[b].max(end.end);
        Ok(())
    }

    fn segment(&mut self, band: u32, s: &Segment<'_>) {
        let e = self.e;
        let slot = e.layout.first_slot(band) + s.slot;
        let placed: u64 = s
            .entries
            .iter()
            .map(|e| Loc::len8_of(e.len as usize) as u64)
            .sum();
        e.status.set_placed(slot, placed as u32);
        if s.source == Source::HeaderDamaged {
            e.counters.corruptions.fetch_add(1, Relaxed);
            e.warn(format!(
                "band {band} slot {}: segment header damaged; its {} records were recovered \
                 with the sequence number the slot must hold ({})",
                s.slot,
                s.entries.len(),
                s.seq
            ));
        }
        for e in &s.entries {
            self.max_seq = self.max_seq.max(e.seq);
            self.min_seq[band as usize] = self.min_seq[band as usize].min(e.seq);
            self.entry(e, Loc::new(slot, e.offset, e.len, e.tombstone));
        }
        self.segments += 1;
    }

    fn entry(&mut self, e: &SummaryEntry, loc: Loc) {
        if !self.whole_groups {
            self.apply(e.digest, loc);
            return;
        }
        // A pending group whose next record does not follow it is a group a crash
        // cut short (its last record never reached the device): it is not applied,
        // and must not be completed by later records.
        if !self.group.is_empty() && e.seq != self.group_last_seq + 1 {
            self.cut += self.group.len() as u64;
            self.group.clear();
        }
        self.group_last_seq = e.seq;
        self.group.push((e.digest, loc));
        if !e.more {
            for (d, loc) in std::mem::take(&mut self.group) {
                self.apply(d, loc);
            }
        }
    }

    /// Whether segment `s` is part of a torn burst (`torn.rs`): then none
    /// of its records is applied, and a group pending from before the tear
    /// is cut (its end was in the torn part).
    fn voided(&mut self, band: u32, s: &Segment<'_>) -> bool {
        let Some(first) = self.tears.segment(band, s) else {
            return false;
        };
        if first {
            self.cut += self.group.len() as u64;
            self.group.clear();
        }
        let top = s.entries.iter().map(|e| e.seq).max().unwrap_or(0);
        self.max_seq = self.max_seq.max(top);
        true
    }

    fn gap(&mut self, band: u32, slot: u64, n: u64, blank: bool) {
        let e = self.e;
        if blank {
            e.note(format!(
                "band {band} slots {slot}..{}: not written (a write torn at a crash); later \
                 segments of the band were replayed",
                slot + n
            ));
        } else {
            e.counters.corruptions.fetch_add(1, Relaxed);
            e.warn(format!(
                "band {band} slots {slot}..{}: unreadable (damaged); their records are lost \
                 unless newer copies exist",
                slot + n
            ));
        }
    }

    /// End of replay: a group still pending was cut short by the crash.
    /// Footerless segments that newer ones follow: a seal torn at a crash
    /// (the summary and footer are written after the records are synced), or
    /// a damaged summary. Either way every record was parsed and nothing is
    /// lost, so it is a note. A seal torn at an earlier crash stays footerless,
    /// so age cannot tell the two apart.
    fn report_unread(&mut self) {
        for (band, slot, _seq, n) in std::mem::take(&mut self.unread) {
            self.e.note(format!(
                "band {band} slot {slot}: segment summary unreadable (a seal torn at a crash, \
                 or damage); its {n} records were recovered by parsing"
            ));
        }
    }

    fn finish(&mut self) {
        self.report_unread();
        self.cut += self.group.len() as u64;
        self.group.clear();
        if self.tears.records > 0 {
            self.e.note(format!(
                "{} records written after a write torn at a crash (in the same unsynced, never \
                 acknowledged burst) were not applied, and their {} segments erased",
                self.tears.records,
                self.tears.voided.len()
            ));
        }
        if self.cut > 0 {
            self.e.note(format!(
                "{} records of atomic batches a crash cut short (never acknowledged) were \
                 not applied",
                self.cut
            ));
        }
    }
}

/// Step 4, end: erase the segments a torn burst voided (`torn.rs`), newest
/// first, each synced before the next, so the judgement is made once: a
/// later open could judge differently once GC has freed a band it read
/// (issue 44: the end of a never-acknowledged batch applied two crashes
/// later). The whole segment is zeroed, not only its header: a slot whose
/// header is gone but whose records carry the expected tag would be
/// recovered as a damaged header. An open cut short while erasing leaves
/// the newest voided segments erased and the rest as they were, which the
/// next recovery judges the same way. Nothing else writes before this.
fn void_torn(e: &Engine, rp: &mut Replay<'_>) -> Result<()> {
    let l = &e.layout;
    let what = "erasing the segments of a write torn at a crash";
    for &(band, slot, nslots) in rp.tears.voided.iter().rev() {
        let (dev, off) = l.slot_addr(l.first_slot(band) + slot);
        let d = &e.pool.caps[dev];
        let zeros = AlignedBuf::new((nslots * l.seg) as usize);
        d.write_at(&zeros, off)
            .map_err(|err| Error::io(&d.info().path, what, err))?;
        crate::pool::sync(d, what)?;
        let b = band as usize;
        rp.written[b] = rp.written[b].min(slot);
    }
    Ok(())
}

/// Step 4, last: sync what replay kept. The segments were read from the
/// device, but after a process crash (no power cut) some may still sit in
/// the page cache; this run's FREE headers vouch that every segment of
/// earlier runs is durable (`Engine::seg_written`), and this makes it true.
fn make_durable(e: &Engine) -> Result<()> {
    for d in &e.pool.caps {
        crate::pool::sync(d, "syncing the segments recovery kept")?;
    }
    Ok(())
}

/// Step 6: drop index entries pointing where nothing valid was found. A
/// checkpoint may point into segments that were still in DRAM (their records
/// are on the pad, re-applied below); dropped tombstones may dangle too.
/// Anything else is a lost record, and so is a key of `unscanned` (entries
/// the checkpoint had into segments then in DRAM) that neither the scan nor
/// the pad brought back.
fn drop_dangling(
    e: &Engine,
    hdrs: &BandHeaders,
    written: &[u64],
    groups: &[Vec<PendingRecord>],
    unscanned: HashSet<(usize, u64)>,
) {
    let l = &e.layout;
    // Keys by shard and fingerprint, as the index holds them: a fingerprint
    // alone could match a key of another shard and hide a lost one.
    let on_pad: HashSet<(usize, u64)> = groups
        .iter()
        .flatten()
        .map(|r| (e.index.shard_for(r.digest), fingerprint(r.digest)))
        .collect();
    let mut lost = 0u64;
    let readable = |loc: u64| {
        let loc = Loc(loc);
        let b = l.band_of_slot(loc.slot()) as usize;
        hdrs.first[b].is_some() && l.slot_in_band(loc.slot()) < written[b]
    };
    e.index.retain_reporting(readable, |shard, fp, loc| {
        if !Loc(loc).is_tombstone() && !on_pad.contains(&(shard, fp)) {
            lost += 1;
        }
    });
    lost += unscanned
        .iter()
        .filter(|&k| !on_pad.contains(k) && e.index.get_in_shard(k.0, k.1).is_none())
        .count() as u64;
    if lost > 0 {
        e.counters.corruptions.fetch_add(lost, Relaxed);
        e.warn(format!(
            "{lost} index entries pointed at segments that could not be read; those keys are lost"
        ));
    }
}

/// Step 7: live-byte accounting from the index.
fn account_live(e: &Engine) {
    e.index.for_each(|loc| e.status.add_live(Loc(loc)));
    e.status.placed_from_live();
}

/// Step 8: band table and write state; the newest band stays open, and (without
/// a pad) its footerless last segment is filled on. With separate GC writes
/// the newest band, whichever stream filled it, is resumed as the user
/// writes' band; an older band the other stream had open stays sealed, its
/// unwritten slots unused until GC empties it (the simpler first version of
/// the plan's §4.5).
fn restore_state(
    e: &Engine,
    hdrs: &BandHeaders,
    rp: &Replay<'_>,
    newest: Option<u32>,
) -> Result<()> {
    let l = &e.layout;
    let mut ws = e.write_state.lock();
    {
        let mut bt = e.bands.lock();
        for (b, first) in hdrs.first.iter().enumerate() {
            let info = &mut bt.bands[b];
            // A band whose header says in use but in which neither the scan
            // nor the checkpoint found a segment, and which holds no indexed
            // record, is free: a header the last run wrote before any of its
            // segments landed. Left in use, such bands would be lost to the
            // pad replay that follows, which may need them (the
            // `reuse-untrimmed` crash scenario found a pool that could not
            // open). Reusing it writes a new header first.
            let empty = rp.written[b] == 0
                && e.status.band_live(b) == 0
                && !hdrs.inferred[b]
                && newest != Some(b as u32);
            match first {
                Some(_) if empty => {
                    info.state = BandState::Free;
                    bt.free.push_back(b as u32);
                }
                Some(fs) => {
                    info.state = if hdrs.inferred[b] {
                        BandState::Pinned
                    } else {
                        BandState::Sealed
                    };
                    info.first_seq = *fs;
                    info.written_slots = rp.written[b];
                    e.status.set_min_seq(b, rp.min_seq[b]);
                }
                None => {
                    info.state = BandState::Free;
                    bt.free.push_back(b as u32);
                }
            }
        }
        bt.date_by_order();
        if let Some(b) = newest.filter(|&b| !hdrs.inferred[b as usize]) {
            if rp.written[b as usize] < l.slots_per_band {
                bt.bands[b as usize].state = BandState::Open;
                ws.cur_band = Some(b);
                ws.next_sib = rp.written[b as usize];
            }
        }
    }
    if let Some(p) = &rp.partial {
        if l.geo.mode != Mode::Tiered && ws.cur_band == Some(p.band) {
            seal_partial(e, p)?;
        }
    }
    // The newest band in use, resumed or not: the placement rule of separate
    // GC writes (stream.rs) compares open bands against it.
    ws.band_first = hdrs.first.iter().flatten().copied().max().unwrap_or(0);
    ws.next_seq = rp.max_seq + 1 + SEQ_GAP_AT_OPEN;
    e.seq_hint.store(ws.next_seq, SeqCst);
    e.next_seg_hint.store(ws.next_seg, SeqCst);
    Ok(())
}

/// Seal the partly written segment the last run left open, so this run
/// never appends to a segment an earlier run wrote; it opens the next slot.
///
/// Past `used` lie the remains of the write the crash interrupted: a torn
/// record, or a whole record whose block landed although the group commit
/// never completed — nothing acknowledged, yet valid-looking and of the same
/// tag. After a sync of the records, they are erased and the summary and
/// footer written, in one write from `used`'s block on, then synced; a torn
/// write of it leaves the segment footerless, and the next open does it
/// again.
///
/// Continuing the segment instead would make a burst of this run's group
/// commit span it and a new segment whose sequence number does not follow
/// its own (the epoch moved on): the new segment's header could not name it
/// (`prev_end` describes segment `seq − 1`), so a power cut that kept the new
/// segment's records but not the old one's tail would go unnoticed and the
/// end of a batch be applied without its start (found by the `marks` crash
/// scenario). Sealing costs the rest of one segment per open.
fn seal_partial(e: &Engine, p: &Partial) -> Result<()> {
    let l = &e.layout;
    let seg = l.seg as usize;
    let mut buf = AlignedBuf::new(seg);
    buf.copy_from_slice(&p.data[..seg]);
    buf[p.used..].fill(0);
    let slot = l.first_slot(p.band) + p.slot_in_band;
    let sb = Arc::new(SegmentBuf {
        size: seg,
        slot,
        nslots: 1,
        seq: p.seq,
        band: p.band,
        data: RwLock::new(buf),
    });
    let v3: Vec<_> = p.entries.iter().map(SummaryEntry::to_v3).collect();
    let mut o = OpenSegment {
        buf: sb.clone(),
        used: p.used,
        entries: p.entries.clone(),
        min_seq: p.entries.iter().map(|se| se.seq).min().unwrap_or(u64::MAX),
        max_seq: p.entries.iter().map(|se| se.seq).max().unwrap_or(0),
        flushed: p.used,
        codec: l.codec,
        v3: V3Cursor::after(&v3, l.codec.seq_rule()),
        user: false,
    };
    o.seal(e.tag);
    let from = p.used / 4096 * 4096;
    let (dev, base) = l.slot_addr(slot);
    let d = &e.pool.caps[dev];
    let what = "sealing the segment the last run left open";
    // The records were read back, but a process that died (rather than
    // lost power) may have left them in a write cache: make them durable
    // before a footer vouches for them (the two-phase seal, design.md §4.7).
    crate::pool::sync(d, what)?;
    let data = sb.data.read();
    d.write_at(&data[from..], base + from as u64)
        .map_err(|err| Error::io(&d.info().path, what, err))?;
    crate::pool::sync(d, what)
}

/// Step 5: parse the pad ring from its durable tail; set the ring state to
/// continue after it. A batch that fails its checks ends the log only if no
/// valid batch follows; a damaged batch in the middle is reported and skipped
/// (see pad.rs).
fn read_pad(e: &Engine, clean: bool) -> Result<Vec<Vec<PendingRecord>>> {
    let Some(p) = &e.pad else {
        return Ok(Vec::new());
    };
    let (tail, tail_seq, hdr_seq) = replay_start(p, e.tag, &mut |w| e.warn(w))?;
    let r = PadReader::new(p, e.tag);
    let (mut v, mut expect) = (tail, tail_seq);
    let mut groups = Vec::new();
    let mut batches = std::collections::VecDeque::new();
    // A wrap marker that did not land, and how many batches followed the one after it.
    let mut lost_marker: Option<(u64, usize)> = None;
    loop {
        let b = match r.batch_at(v, Some(expect))? {
            Some(b) => b,
            None => match r.resync(v, expect)? {
                Some(b) if only_a_wrap_marker(p.size, v, expect, &b) => {
                    lost_marker = Some((v, batches.len() + 1));
                    b
                }
                Some(b) => {
                    let lost = b.header.batch_seq - expect;
                    e.counters.corruptions.fetch_add(lost, Relaxed);
                    e.warn(format!(
                        "write pad: {lost} batch(es) from number {expect} at offset {v} damaged; \
                         their writes are lost unless they had reached the capacity tier, and \
                         a key an earlier batch also wrote reads as that earlier write; \
                         the intact later batches were replayed"
                    ));
                    b
                }
                None => {
                    if !clean {
                        note_unfinished(e, &r, v, expect)?;
                    }
                    break;
                }
            },
        };
        batches.push_back((b.virt, b.header.batch_seq));
        expect = b.header.batch_seq + 1;
        v = b.next_virt(p.size);
        let recs = pad_records(e, &b)?;
        if !recs.is_empty() {
            groups.push(recs);
        }
    }
    if let Some((at, n)) = lost_marker {
        report_lost_marker(e, at, batches.len() - n);
    }
    p.resume(tail, v, expect, hdr_seq, batches);
    Ok(groups)
}

/// Whether the one batch number missing before `b` (found at the start of
/// the next lap by `resync`) was the wrap marker at `v`: a batch that did not
/// fit between `v` and the ring's end is what makes the writer write a
/// marker there (`PadRing::reserve`). A marker holds no records.
fn only_a_wrap_marker(size: u64, v: u64, expect: u64, b: &Batch) -> bool {
    let lap = round_up64(v + 1, size);
    let need = b.next_virt(size) - b.virt;
    b.header.batch_seq == expect + 1 && b.virt == lap && need > lap - v
}

/// A wrap marker is written, unsynced, just before the next lap's first
/// batch, and that batch's sync makes both durable. A power cut before it may
/// keep the batch and lose the marker: a write torn at a crash, which costs
/// nothing (issue 44). A marker missing before a batch that later ones follow
/// was durable and then damaged; it held no records either, but damage is
/// reported as damage.
fn report_lost_marker(e: &Engine, at: u64, after: usize) {
    if after == 0 {
        e.note(format!(
            "write pad: the wrap marker at offset {at} did not land (a write torn at a crash); \
             it holds no records, and the batch after it was replayed"
        ));
    } else {
        e.counters.corruptions.fetch_add(1, Relaxed);
        e.warn(format!(
            "write pad: the wrap marker at offset {at} is damaged; it held no records, nothing \
             was lost, and the batches after it were replayed"
        ));
    }
}

/// The log ends at `v`. If a header of batch `seq` starts there, its write
/// began but the batch fails its checks: a write torn at a crash (never
/// acknowledged), or damage to the newest batch, which nothing after it can
/// prove was complete (format.md §13). Either way it ends the log; say so.
/// (Not after a clean close: then it is what an earlier crash left, never
/// overwritten because that run wrote no batch.)
fn note_unfinished(e: &Engine, r: &PadReader<'_>, v: u64, seq: u64) -> Result<()> {
    if r.begun_at(v, seq)? {
        e.note(format!(
            "write pad: the newest batch (number {seq}, at offset {v}) fails its checks and \
             ends the log: a write torn at a crash, never acknowledged; or, if it had been \
             acknowledged, damage that cost its writes"
        ));
    }
    Ok(())
}

/// The records of one pad batch, as one atomic group to re-apply.
fn pad_records(e: &Engine, b: &Batch) -> Result<Vec<PendingRecord>> {
    let payload = b.payload();
    let codec = e.layout.codec;
    let mut off = 0usize;
    let mut recs = Vec::new();
    while off < payload.len() {
        let r = codec.decode(&payload[off..])?;
        let mut p = PendingRecord::new(r.key, r.value, r.tombstone, RecordKind::Replay(None));
        p.digest = e.digest(r.key);
        recs.push(p);
        off += match codec {
            Codec::V2 => round_up(r.len, 8),
            Codec::V3 | Codec::V4 => r.len,
        };
    }
    Ok(recs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::replay::tests::db;

    /// An index entry into a segment recovery could not read names a lost
    /// key, even when a pad record shares its fingerprint: the pad brings
    /// back only keys of the same shard. Two digests here differ only in
    /// their shard bits; the pad holds one, the index (and, as a checkpoint
    /// entry into a segment then in DRAM, `unscanned`) the other.
    #[test]
    fn a_pad_key_of_another_shard_does_not_hide_a_lost_key() {
        let db = db(16 << 20);
        let e = &db.engine;
        let fp = 0x5eed_u128;
        let (lost, dangling, on_pad) = (fp, (1u128 << 112) | fp, (u128::MAX << 112) | fp);
        let shard = |d| e.index.shard_for(d);
        assert!(shard(lost) != shard(on_pad) && shard(dangling) != shard(on_pad));
        e.index.insert(dangling, Loc::new(0, 0, 64, false).0);
        let mut p = PendingRecord::new(b"k", b"v", false, RecordKind::Replay(None));
        p.digest = on_pad;
        let bands = e.layout.bands as usize;
        let hdrs = BandHeaders {
            first: vec![None; bands],
            inferred: vec![false; bands],
            freed_max: 0,
        };
        let unscanned = HashSet::from([(shard(lost), fingerprint(lost))]);
        let before = e.counters.corruptions.load(Relaxed);
        drop_dangling(e, &hdrs, &vec![0; bands], &[vec![p]], unscanned);
        assert_eq!(e.counters.corruptions.load(Relaxed) - before, 2);
        assert_eq!(e.index.get(dangling), None);
    }
}
