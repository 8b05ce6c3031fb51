//! Band garbage collection (paper §2.6).
//!
//! A pass picks a sealed band by cost-benefit (LFS: space won × age over the
//! cost of reading the band and writing its live share) or greedily (the most
//! space won), per `Options::gc_policy` (always greedily for a writer waiting
//! for space); reads its segments one at a time, and
//! re-submits every record the index still points at through the normal write
//! path: persisted to the fast-tier pad
//! (the GC write pad) and merged into the open segment. Once all moves are
//! acknowledged the band holds nothing live; the writer marks it free, TRIMs it
//! and returns it to the free list. Tombstones are moved too, unless no band
//! still in use can hold an older version of their key (then they are dropped).

use super::band::BandState;
use super::request::{PendingRecord, RecordKind, Req, WriteClass};
use super::scanner::{BandScanner, Found};
use super::state::{ActiveFlag, Engine};
use super::writer_jobs::{Waiter, WriterJob};
use crate::config::GcPolicy;
use crate::error::{Error, Result};
use crate::format::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Why a GC pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The maintenance thread: only below the low watermark, by `Options::gc_policy`.
    Background,
    /// `Db::gc_once`: regardless of the watermark, by `Options::gc_policy`.
    OnDemand,
    /// A writer is waiting for space: regardless of the watermark, and greedy,
    /// since it needs the most space now rather than the best long-run choice
    /// (an old band barely above `min_gain` can outscore a half-dead young one).
    ForSpace,
}

/// What a GC pass did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GcOutcome {
    /// A band was freed; `net` is its payload less the band payload its moved
    /// records used up where they went.
    Freed { band: u32, net: i64 },
    /// No sealed band has any invalid bytes.
    NoVictim,
}

/// Least space a GC pass must win back (1/64 of a band). Below it the pool counts
/// as full: moving a band to win less would cost more than 64 bytes of writes per
/// byte won, and estimation error (padding of future writes) could make it a loss.
pub(crate) fn min_gain(e: &Engine) -> u64 {
    (e.layout.band_payload() / 64).max(4096)
}

/// Free bands below which GC runs.
pub(crate) fn low_watermark(e: &Engine) -> u32 {
    if e.opts.gc_low_bands > 0 {
        e.opts.gc_low_bands
    } else {
        auto_low_watermark(e.layout.bands)
    }
}

/// The automatic watermark for a pool of `bands`: `bands/32` within [5, 16].
/// Free bands hold nothing, so the steady state leaves about this many idle:
/// a watermark of 8 of 133 bands ran the rest at 85 % live instead of 80 %
/// (host WAF 3.994 under uniform churn against 3.555 at 5, same run). They only buffer
/// bursts while GC catches up: the user writes' reserve (2), a band for a
/// pass's moves, one in which a pass may rest (`Pacer`) and one for a burst.
/// At 4, passes never rest and writers still stalled (twice, 0.1 s, in one
/// of three churn runs). GC's pace, not the buffer, sustains a write load,
/// so large pools need no more than 16 (1 GiB of 64 MiB bands).
fn auto_low_watermark(bands: u32) -> u32 {
    (bands / 32).clamp(5, 16).min(bands / 2).max(3)
}

/// Called by a writer whose request of records `recs` did not get space: run
/// GC until the request would be admitted, or report `NoSpace` once GC proves
/// nothing can be reclaimed.
pub(crate) fn wait_for_space(e: &Engine, class: WriteClass, recs: &[PendingRecord]) -> Result<()> {
    let fits = || e.admits(&e.write_state.lock(), class, recs);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut futile = 0;
    let _waiting = SpaceWaiter::new(e);
    loop {
        e.check_failed()?;
        if fits() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NoSpace(
                "timed out waiting for GC to free space".into(),
            ));
        }
        match gc_pass(e, Pass::ForSpace)? {
            GcOutcome::Freed { net, .. } => {
                // Freeing a band only to fill as much again with its moved records
                // means the pool is full of live data. Judged by the pass's own moves:
                // the space this caller sees is no measure, as other writers may take
                // the freed band at once (and a band that only refills a reserve is
                // not space for this class, yet it is progress).
                if net <= 0 {
                    futile += 1;
                    if futile >= 4 {
                        return Err(Error::NoSpace(
                            "garbage collection reclaims no net space; delete data to make room"
                                .into(),
                        ));
                    }
                } else {
                    futile = 0;
                }
            }
            GcOutcome::NoVictim => {
                // The held segment pins its band and goes out only when the next
                // one closes, which no stalled writer will do: send it now.
                e.release_held()?;
                // A band being freed by another pass, or segments in flight, may still help.
                let busy = {
                    let ws = e.write_state.lock();
                    let sealed_in_flight = e.segments.len() > ws.open_segments().count();
                    let bt = e.bands.lock();
                    sealed_in_flight || bt.bands.iter().any(|b| b.state == BandState::Victim)
                };
                if !busy {
                    if fits() {
                        return Ok(());
                    }
                    let bt = e.bands.lock();
                    let payload = e.layout.band_payload();
                    let (mut n, mut best) = (0u64, 0u64);
                    for (i, b) in bt.bands.iter().enumerate() {
                        if b.state == BandState::Sealed {
                            n += 1;
                            best = best.max(payload.saturating_sub(e.status.band_cost(i)));
                        }
                    }
                    return Err(Error::NoSpace(format!(
                        "{} free bands; the best of {n} full bands would win back only {:.1} % of a band \
                         (GC needs ≥ {:.1} %); delete data to make room",
                        bt.free_count(),
                        best as f64 * 100.0 / payload as f64,
                        min_gain(e) as f64 * 100.0 / payload as f64
                    )));
                }
                let mut bt = e.bands.lock();
                e.bands.wait_for_space(&mut bt, Duration::from_millis(5));
            }
        }
    }
}

/// At open, before pad group `recs` is replayed: if its records would not
/// find free bands, run GC passes first. Replay re-places records whose older
/// copies then die, so a long replay (a writer far behind at the crash) can
/// fill the free bands while full ones hold only garbage; without GC here
/// the open failed with "no free band" (found by the `reuse-untrimmed`
/// crash scenario). GC's moves go through the pad (tiered), so it runs only
/// while the pad has room for them besides the region held for replay;
/// otherwise placement reports the shortage as before.
pub(crate) fn room_for_replay(e: &Engine, recs: &[PendingRecord]) -> Result<()> {
    // With separate GC writes, GC's moves need a band of their own: leave
    // one free band for it (the reserve deletes keep), or a replay that took
    // the last one would leave GC unable to start.
    let class = match e.streams_on() {
        true => WriteClass::Delete,
        false => WriteClass::Gc,
    };
    let fits = || e.admits(&e.write_state.lock(), class, recs);
    let pad_room = || {
        let spare = 2 * e.layout.band_payload();
        e.pad.as_ref().is_none_or(|p| p.used() + spare <= p.size)
    };
    for _ in 0..e.layout.bands {
        if fits() || !pad_room() {
            return Ok(());
        }
        if let GcOutcome::NoVictim = gc_pass(e, Pass::ForSpace)? {
            // The held segment's band may be the one to collect.
            e.release_held()?;
            return Ok(());
        }
    }
    Ok(())
}

/// One GC pass (serialised by `gc_lock`).
pub(crate) fn gc_pass(e: &Engine, why: Pass) -> Result<GcOutcome> {
    // An open iterator holds the GC lock for its whole life; a writer stalled
    // behind it (perhaps on the iterator's own thread) must not wait forever.
    let _g = loop {
        if let Some(g) = e.gc_lock.try_lock_for(Duration::from_millis(20)) {
            break g;
        }
        if e.iterators.load(Relaxed) > 0 {
            return Err(Error::NoSpace(
                "no free space, and an open iterator holds off GC".into(),
            ));
        }
    };
    let _active = ActiveFlag::set(&e.gc_active);
    let Some(victim) = choose_victim(e, why) else {
        return Ok(GcOutcome::NoVictim);
    };
    let room_before = e.gc_room_used.load(Relaxed);
    match relocate_band(e, victim, why) {
        Ok(true) => free_victim(e, victim, e.gc_room_used.load(Relaxed) - room_before),
        Ok(false) => {
            e.bands.lock().bands[victim as usize].state = BandState::Pinned;
            Ok(GcOutcome::NoVictim)
        }
        Err(err) => {
            let mut bt = e.bands.lock();
            if bt.bands[victim as usize].state == BandState::Victim {
                bt.bands[victim as usize].state = BandState::Sealed;
            }
            Err(err)
        }
    }
}

/// The sealed band GC should empty next (the oldest on a tie), marked as the
/// victim; `None` if no band is worth it (or, for a background pass, free
/// bands are not low).
fn choose_victim(e: &Engine, why: Pass) -> Option<u32> {
    let payload = e.layout.band_payload();
    // Choose under the write state: a group commit applies its records to the
    // index only after their segment may already be durable (capacity-only
    // mode), so a band is judged only once no group is half-applied.
    let ws = e.write_state.lock();
    let mut bt = e.bands.lock();
    if why == Pass::Background && bt.free_count() >= low_watermark(e) {
        return None;
    }
    let policy = match (why, e.opts.gc_policy) {
        (Pass::ForSpace, _) => GcPolicy::Greedy,
        (_, GcPolicy::Auto) if e.streams_on() => GcPolicy::CostBenefit,
        (_, GcPolicy::Auto) => GcPolicy::Greedy,
        (_, p) => p,
    };
    // GC may use every free band (its class keeps no reserve), but never
    // start a pass whose moves would not fit: with no room its moves would
    // stall and the band could not be freed anyway.
    // With separate GC writes moves go to the GC stream's open band
    // (design.md §9.5; the few the placement rule diverts must fit the
    // user band, or the pass stops short and the band stays sealed).
    let a = e.admission(&ws);
    let left = match e.streams_on() {
        true => a.gc.band_left,
        false => a.user.band_left,
    };
    let room = bt.free_count() as u64 * payload + left * e.layout.seg;
    let mut best: Option<(f64, u64, u32)> = None;
    for (i, b) in bt.bands.iter().enumerate() {
        if b.state != BandState::Sealed || b.inflight > 0 {
            continue;
        }
        // What moving the band's live records costs against the band it frees:
        // a band whose records would fill a whole band again gains nothing.
        let cost = e.status.band_cost(i);
        let dead = payload.saturating_sub(cost);
        if dead < min_gain(e) || cost > room {
            continue;
        }
        let score = victim_score(policy, payload, cost, bt.age(i));
        let better = match best {
            None => true,
            Some((s, fs, _)) => score > s || (score == s && b.first_seq < fs),
        };
        if better {
            best = Some((score, b.first_seq, i as u32));
        }
    }
    let (_, _, v) = best?;
    bt.bands[v as usize].state = BandState::Victim;
    Some(v)
}

/// How much GC wants a band whose live records would take `cost` of its
/// `payload` if rewritten, `age` bands after it was sealed.
fn victim_score(policy: GcPolicy, payload: u64, cost: u64, age: u64) -> f64 {
    let u = cost as f64 / payload as f64;
    match policy {
        GcPolicy::Greedy | GcPolicy::Auto => 1.0 - u,
        // LFS: benefit (space won, weighted by how long it is likely to stay
        // free) over cost (the band is read whole, its live share written).
        GcPolicy::CostBenefit => (1.0 - u) * age as f64 / (1.0 + u),
    }
}

/// The victim holds nothing live: have the writer write its free header, TRIM
/// it and put it on the free list. `moved`: band payload its moves used up.
fn free_victim(e: &Engine, victim: u32, moved: u64) -> Result<GcOutcome> {
    let payload = e.layout.band_payload();
    let w = Waiter::new();
    let hdr = BandHeader {
        state: BAND_FREE,
        pool_tag: e.tag,
        band: victim,
        first_seq: 0,
        freed_after: 0, // the writer stamps it
    };
    e.send(WriterJob::BandHeader {
        band: victim,
        hdr,
        free: Some(w.clone()),
    })?;
    w.wait()?;
    tracing::info!(
        band = victim,
        moved_bytes = moved,
        reclaimed = payload as i64 - moved as i64,
        "GC pass freed a band"
    );
    e.counters.gc_runs.fetch_add(1, Relaxed);
    e.counters.gc_bands_freed.fetch_add(1, Relaxed);
    Ok(GcOutcome::Freed {
        band: victim,
        net: payload as i64 - moved as i64,
    })
}

/// Oldest record sequence number any in-use band other than `victim` may hold.
fn min_seq_elsewhere(e: &Engine, victim: u32) -> u64 {
    let bt = e.bands.lock();
    bt.bands
        .iter()
        .enumerate()
        .filter(|(i, b)| *i as u32 != victim && b.state != BandState::Free)
        .map(|(i, _)| e.status.min_seq(i))
        .min()
        .unwrap_or(u64::MAX)
}

/// Move every live record out of `band`. Returns false if a live record could
/// not be read: the band is then pinned (never reclaimed), so nothing is lost
/// silently and the database stays up.
fn relocate_band(e: &Engine, band: u32, why: Pass) -> Result<bool> {
    let (written, first_seq) = {
        let bt = e.bands.lock();
        let b = &bt.bands[band as usize];
        (b.written_slots, b.first_seq)
    };
    let first = e.layout.first_slot(band);
    let mut mv = Mover::new(e, min_seq_elsewhere(e, band));
    let mut pace = Pacer::new(e, why);
    let dig = |k: &[u8]| e.digest(k);
    // One segment per read, so user gets never queue behind a band-sized transfer.
    let mut sc = BandScanner::new(
        &e.layout,
        &e.pool.caps,
        e.tag,
        (band, first_seq),
        e.seq_limit(),
        &dig,
    )
    .with_chunk_bytes(e.layout.seg as usize);
    let end = sc.scan(0, written, false, &mut |f| {
        if let Found::Segment(s) = f {
            for se in &s.entries {
                let rec = s
                    .data
                    .get(se.offset as usize..(se.offset + se.len) as usize);
                mv.consider(first + s.slot, se, rec)?;
            }
            pace.rest();
            // A closing database waits for this pass (`Db::close`): stop at a
            // segment boundary. Moves made so far stand; the band stays sealed.
            if e.stopping() {
                return Err(Error::Closed("closing: the GC pass stopped".into()));
            }
        }
        Ok(())
    })?;
    e.counters.gc_bytes_read.fetch_add(end.bytes_read, Relaxed);
    if e.pad.is_none() {
        straddling_start(e, first_seq, &mut mv)?;
    }
    mv.flush()?;
    let left = e.status.band_live(band as usize);
    if !mv.intact || left != 0 {
        e.counters.corruptions.fetch_add(1, Relaxed);
        e.warn(format!(
            "GC: band {band} holds live records it could not read ({left} live bytes left); \
             the band is pinned and will not be reclaimed"
        ));
        return Ok(false);
    }
    Ok(true)
}

/// Counts a writer waiting for space (`Engine::space_waiters`) while it lives.
struct SpaceWaiter<'a>(&'a AtomicU64);

impl<'a> SpaceWaiter<'a> {
    /// Also wakes a background pass that is resting (`Pacer::rest`): it must
    /// not sleep on while a writer waits for the space it is making.
    fn new(e: &'a Engine) -> SpaceWaiter<'a> {
        e.space_waiters.fetch_add(1, Relaxed);
        let _stop = e.stop.0.lock();
        e.stop.1.notify_all();
        SpaceWaiter(&e.space_waiters)
    }
}

impl Drop for SpaceWaiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A background pass's rests between segments (`Options::gc_duty`).
struct Pacer<'a> {
    e: &'a Engine,
    /// `1/duty − 1`, or 0 when this pass never rests.
    factor: f64,
    since: Instant,
}

impl<'a> Pacer<'a> {
    const MAX_REST: Duration = Duration::from_millis(50);

    fn new(e: &'a Engine, why: Pass) -> Pacer<'a> {
        let duty = e.opts.gc_duty;
        let rests = why == Pass::Background && duty > 0.0 && duty < 1.0;
        Pacer {
            e,
            factor: if rests { 1.0 / duty - 1.0 } else { 0.0 },
            since: Instant::now(),
        }
    }

    /// Rest in proportion to the work since the last rest, unless free bands
    /// are short ([`bands_short`]) or a writer waits for space; a close cuts
    /// the rest short.
    fn rest(&mut self) {
        if self.factor > 0.0 {
            let free = self.e.bands.lock().free_count();
            let short =
                bands_short(free, low_watermark(self.e)) || self.e.space_waiters.load(Relaxed) > 0;
            // A tiny duty makes a huge factor: cap the rest, never overflow.
            let rest =
                Duration::try_from_secs_f64(self.since.elapsed().as_secs_f64() * self.factor)
                    .unwrap_or(Self::MAX_REST)
                    .min(Self::MAX_REST);
            if !short && !rest.is_zero() {
                let t0 = Instant::now();
                let mut stop = self.e.stop.0.lock();
                // Checked again under the lock `SpaceWaiter::new` notifies under,
                // so a writer that starts waiting now cannot be missed.
                if !*stop && self.e.space_waiters.load(Relaxed) == 0 {
                    self.e.stop.1.wait_for(&mut stop, rest);
                }
                drop(stop);
                let rested = t0.elapsed().as_nanos() as u64;
                self.e.counters.gc_rest_ns.fetch_add(rested, Relaxed);
            }
        }
        self.since = Instant::now();
    }
}

/// Whether `free` bands are too few for a background pass to rest, under
/// watermark `low`: below half the watermark, or no more than one band above
/// the user writes' reserve. A pass resting there let the next band's writes
/// find only the reserve and stall (a watermark of 4 under zipfian churn: 320
/// stalls, 7.8 s in 120 s).
fn bands_short(free: u32, low: u32) -> bool {
    free * 2 < low || free <= WriteClass::User.reserve_bands() + 1
}

/// Collects GC moves and submits them in groups.
struct Mover<'a> {
    e: &'a Engine,
    /// Oldest record seq any other band may hold: tombstones older than it
    /// shadow nothing and are dropped instead of moved.
    min_other: u64,
    moves: Vec<PendingRecord>,
    bytes: usize,
    /// False once a live record could not be read.
    intact: bool,
}

impl<'a> Mover<'a> {
    fn new(e: &'a Engine, min_other: u64) -> Mover<'a> {
        Mover {
            e,
            min_other,
            moves: Vec::new(),
            bytes: 0,
            intact: true,
        }
    }

    /// Move the record of summary entry `se` of the segment in `slot` (`rec`:
    /// its bytes as read) if the index still points at it.
    fn consider(&mut self, slot: u64, se: &SummaryEntry, rec: Option<&[u8]>) -> Result<()> {
        let e = self.e;
        let loc = Loc::new(slot, se.offset, se.len, se.tombstone);
        if e.index.get(se.digest) != Some(loc.0) {
            return Ok(());
        }
        let codec = e.layout.codec;
        let Some(r) = rec.and_then(|r| codec.decode(r).ok()) else {
            tracing::warn!(
                slot,
                offset = se.offset,
                "GC found a corrupt record; its band is kept"
            );
            e.counters.corruptions.fetch_add(1, Relaxed);
            self.intact = false;
            return Ok(());
        };
        if se.tombstone && se.seq < self.min_other {
            if e.index.remove_if(se.digest, loc.0) {
                e.status.sub_live(loc);
                e.counters.gc_tombstones_dropped.fetch_add(1, Relaxed);
            }
            return Ok(());
        }
        // Re-encoded where it lands; the group flag is not kept: a moved
        // record stands alone.
        let mut m = PendingRecord::new(
            r.key,
            r.value,
            r.tombstone,
            RecordKind::Relocate(loc, se.seq),
        );
        m.digest = se.digest;
        self.bytes += m.pad_len(codec);
        self.moves.push(m);
        if self.bytes >= e.max_group_bytes() / 2 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.bytes = 0;
        submit_moves(self.e, &mut self.moves)
    }
}

/// Capacity-only / scm-only: the band starting at segment `first_seq` is about
/// to be freed. If an atomic group begins in the segment before it (in another
/// band) and ends in this one, recovery would find the group's start without
/// its end and drop it (see recovery.rs `Replay`), so first move the start's
/// still-live records: moved records stand alone.
fn straddling_start(e: &Engine, first_seq: u64, mv: &mut Mover<'_>) -> Result<()> {
    let Some(prev_seq) = first_seq.checked_sub(1) else {
        return Ok(());
    };
    // The band the previous segment went to: the newest in use that began before.
    let prev = {
        let bt = e.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state != BandState::Free && b.first_seq < first_seq)
            .max_by_key(|(_, b)| b.first_seq)
            .map(|(i, b)| (i as u32, b.first_seq, b.written_slots))
    };
    let Some((band, band_first, written)) = prev else {
        return Ok(());
    };
    let dig = |k: &[u8]| e.digest(k);
    let mut sc = BandScanner::new(
        &e.layout,
        &e.pool.caps,
        e.tag,
        (band, band_first),
        e.seq_limit(),
        &dig,
    )
    .with_chunk_bytes(e.layout.seg as usize);
    // Usually the band's last segment ends with a whole group: one segment read.
    match sc.last_segment(written)? {
        Some((seq, more)) if seq != prev_seq || !more => return Ok(()),
        _ => {}
    }
    // Members of the group still open at the end of the band: consecutive seqs,
    // each but the last carrying MORE (the last one found carries MORE too).
    let first = e.layout.first_slot(band);
    let mut run: Vec<(u64, SummaryEntry, Option<Vec<u8>>)> = Vec::new();
    let mut last_seg = 0u64;
    sc.scan(0, written, false, &mut |f| {
        if let Found::Segment(s) = f {
            last_seg = s.seq;
            for se in &s.entries {
                if !run
                    .last()
                    .is_some_and(|(_, p, _)| p.more && p.seq + 1 == se.seq)
                {
                    run.clear();
                }
                let rec = s
                    .data
                    .get(se.offset as usize..(se.offset + se.len) as usize);
                run.push((first + s.slot, *se, rec.map(<[u8]>::to_vec)));
            }
        }
        Ok(())
    })?;
    if last_seg != prev_seq || !run.last().is_some_and(|(_, se, _)| se.more) {
        return Ok(());
    }
    for (slot, se, rec) in &run {
        mv.consider(*slot, se, rec.as_deref())?;
    }
    Ok(())
}

fn submit_moves(e: &Engine, moves: &mut Vec<PendingRecord>) -> Result<()> {
    // Each move is its own request, so a move made stale by a concurrent user
    // write is dropped alone; the group commit still writes them together.
    let reqs: Vec<_> = moves
        .drain(..)
        .map(|m| Req::new(vec![m], WriteClass::Gc, e.layout.codec))
        .collect();
    e.submit_all(reqs).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::{auto_low_watermark, bands_short};

    #[test]
    fn the_automatic_watermark_keeps_few_bands_idle() {
        // Tiny pools: never more than half the bands, never fewer than 3.
        assert_eq!(auto_low_watermark(6), 3);
        assert_eq!(auto_low_watermark(8), 4);
        assert_eq!(auto_low_watermark(10), 5);
        // The churn demo's pool (133 bands): 5, not bands/16 = 8.
        assert_eq!(auto_low_watermark(133), 5);
        assert_eq!(auto_low_watermark(320), 10);
        // Large pools: 16 bands, not a sixteenth of the tier.
        assert_eq!(auto_low_watermark(512), 16);
        assert_eq!(auto_low_watermark(250_000), 16);
    }

    #[test]
    fn a_pass_never_rests_one_band_above_the_user_reserve() {
        // The user reserve is 2: at 3 free bands a rest could let writers stall.
        assert!(bands_short(3, 4));
        assert!(bands_short(3, 5));
        assert!(!bands_short(4, 5));
        // Below half the watermark, as before.
        assert!(bands_short(7, 16));
        assert!(!bands_short(8, 16));
    }
}
