//! Band garbage collection (paper §2.6) and the maintenance thread.
//!
//! A pass picks the sealed band with the most invalid bytes (oldest first on a
//! tie), reads its segments sequentially, and re-submits every record the index
//! still points at through the normal write path: persisted to the fast-tier pad
//! (the GC write pad) and merged into the open segment. Once all moves are
//! acknowledged the band holds nothing live; the writer marks it free, TRIMs it
//! and returns it to the free list. Tombstones are moved too, unless no band
//! still in use can hold an older version of their key (then they are dropped).

use crate::db::{BandState, Class, Inner, Kind, PRec, Req};
use crate::device::round_up;
use crate::error::{Error, Result};
use crate::format::*;
use crate::scan::{BandScanner, Found};
use crate::writer::{WMsg, Waiter};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
pub(crate) fn min_gain(inner: &Inner) -> u64 {
    (inner.layout.band_payload() / 64).max(4096)
}

/// Free bands below which GC runs.
pub(crate) fn low_watermark(inner: &Inner) -> u32 {
    if inner.opts.gc_low_bands > 0 {
        inner.opts.gc_low_bands
    } else {
        (inner.layout.bands / 16)
            .max(4)
            .min(inner.layout.bands / 2)
            .max(3)
    }
}

/// Background loop: GC when free bands run low, checkpoints by bytes written.
pub(crate) fn maintenance(inner: Arc<Inner>) {
    loop {
        {
            let mut stop = inner.maint.0.lock();
            if *stop {
                return;
            }
            inner.maint.1.wait_for(&mut stop, Duration::from_millis(20));
            if *stop {
                return;
            }
        }
        if inner.check_failed().is_err() {
            continue;
        }
        if inner.opts.background_gc {
            // Keep going while below the watermark: GC pace follows the write rate.
            for _ in 0..64 {
                let free = inner.bands.lock().free_count();
                if free >= low_watermark(&inner) || *inner.maint.0.lock() {
                    break;
                }
                match gc_pass(&inner, false) {
                    Ok(GcOutcome::Freed { .. }) => {}
                    Ok(GcOutcome::NoVictim) => break,
                    Err(e) => {
                        if !matches!(e, Error::NoSpace(_)) {
                            inner.fail(format!("GC failed: {e}"));
                        }
                        break;
                    }
                }
            }
        }
        let iv = inner.opts.checkpoint_interval;
        if iv > 0 && inner.bytes_since_ckpt.load(Relaxed) >= iv {
            if let Err(e) = crate::recovery::checkpoint(&inner) {
                inner.fail(format!("checkpoint failed: {e}"));
            }
        }
    }
}

/// Called by a writer whose request of records `lens` did not get space: run
/// GC until the request would be admitted, or report `NoSpace` once GC proves
/// nothing can be reclaimed.
pub(crate) fn wait_for_space(inner: &Inner, class: Class, lens: &[usize]) -> Result<()> {
    let fits = || {
        let ws = inner.ws.lock();
        let mut c = inner.admission_cursor(&ws);
        inner.admit(&mut c, class, lens.iter().copied())
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut futile = 0;
    loop {
        inner.check_failed()?;
        if fits() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NoSpace(
                "timed out waiting for GC to free space".into(),
            ));
        }
        match gc_pass(inner, true)? {
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
                // A band being freed by another pass, or segments in flight, may still help.
                let busy = {
                    let ws = inner.ws.lock();
                    let sealed_in_flight = inner.bufs.read().len() > ws.open.is_some() as usize;
                    let bt = inner.bands.lock();
                    sealed_in_flight || bt.bands.iter().any(|b| b.state == BandState::Victim)
                };
                if !busy {
                    if fits() {
                        return Ok(());
                    }
                    let bt = inner.bands.lock();
                    let payload = inner.layout.band_payload();
                    let (mut n, mut best) = (0u64, 0u64);
                    for (i, b) in bt.bands.iter().enumerate() {
                        if b.state == BandState::Sealed {
                            n += 1;
                            best = best.max(payload.saturating_sub(inner.band_cost(i)));
                        }
                    }
                    return Err(Error::NoSpace(format!(
                        "{} free bands; the best of {n} full bands would win back only {:.1} % of a band \
                         (GC needs ≥ {:.1} %); delete data to make room",
                        bt.free_count(),
                        best as f64 * 100.0 / payload as f64,
                        min_gain(inner) as f64 * 100.0 / payload as f64
                    )));
                }
                let mut bt = inner.bands.lock();
                inner.space_cv.wait_for(&mut bt, Duration::from_millis(5));
            }
        }
    }
}

/// One GC pass (serialised by `gc_lock`). `urgent` ignores the watermark.
pub(crate) fn gc_pass(inner: &Inner, urgent: bool) -> Result<GcOutcome> {
    // An open iterator holds the GC lock for its whole life; a writer stalled
    // behind it (perhaps on the iterator's own thread) must not wait forever.
    let _g = loop {
        if let Some(g) = inner.gc_lock.try_lock_for(Duration::from_millis(20)) {
            break g;
        }
        if inner.iterators.load(Relaxed) > 0 {
            return Err(Error::NoSpace(
                "no free space, and an open iterator holds off GC".into(),
            ));
        }
    };
    let _active = crate::db::ActiveFlag::set(&inner.gc_active);
    let payload = inner.layout.band_payload();
    let victim = {
        // Choose under the write state: a group commit applies its records to the
        // index only after their segment may already be durable (capacity-only
        // mode), so a band is judged only once no group is half-applied.
        let ws = inner.ws.lock();
        let mut bt = inner.bands.lock();
        if !urgent && bt.free_count() >= low_watermark(inner) {
            return Ok(GcOutcome::NoVictim);
        }
        // GC may use every free band (its class keeps no reserve), but never
        // start a pass whose moves would not fit: with no room its moves would
        // stall and the band could not be freed anyway.
        let room = bt.free_count() as u64 * payload
            + inner.admission_cursor(&ws).band_left * inner.layout.seg;
        let mut best: Option<(u64, u64, u32)> = None;
        for (i, b) in bt.bands.iter().enumerate() {
            if b.state != BandState::Sealed || b.inflight > 0 {
                continue;
            }
            // What moving the band's live records costs against the band it frees:
            // a band whose records would fill a whole band again gains nothing.
            let cost = inner.band_cost(i);
            let dead = payload.saturating_sub(cost);
            if dead < min_gain(inner) || cost > room {
                continue;
            }
            let better = match best {
                None => true,
                Some((d, fs, _)) => dead > d || (dead == d && b.first_seq < fs),
            };
            if better {
                best = Some((dead, b.first_seq, i as u32));
            }
        }
        match best {
            Some((_, _, v)) => {
                bt.bands[v as usize].state = BandState::Victim;
                v
            }
            None => return Ok(GcOutcome::NoVictim),
        }
    };
    let room_before = inner.gc_room_used.load(Relaxed);
    match relocate_band(inner, victim) {
        Ok(true) => {
            let moved = inner.gc_room_used.load(Relaxed) - room_before;
            let w = Waiter::new();
            let hdr = BandHeader {
                state: BAND_FREE,
                pool_tag: inner.tag,
                band: victim,
                first_seq: 0,
            };
            inner.send(WMsg::BandHeader {
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
            inner.c.gc_runs.fetch_add(1, Relaxed);
            inner.c.gc_bands_freed.fetch_add(1, Relaxed);
            Ok(GcOutcome::Freed {
                band: victim,
                net: payload as i64 - moved as i64,
            })
        }
        Ok(false) => {
            inner.bands.lock().bands[victim as usize].state = BandState::Pinned;
            Ok(GcOutcome::NoVictim)
        }
        Err(e) => {
            let mut bt = inner.bands.lock();
            if bt.bands[victim as usize].state == BandState::Victim {
                bt.bands[victim as usize].state = BandState::Sealed;
            }
            Err(e)
        }
    }
}

/// Oldest record sequence number any in-use band other than `victim` may hold.
fn min_seq_elsewhere(inner: &Inner, victim: u32) -> u64 {
    let bt = inner.bands.lock();
    bt.bands
        .iter()
        .enumerate()
        .filter(|(i, b)| *i as u32 != victim && b.state != BandState::Free)
        .map(|(i, _)| inner.band_min_seq[i].load(Relaxed))
        .min()
        .unwrap_or(u64::MAX)
}

/// Move every live record out of `band`. Returns false if a live record could
/// not be read: the band is then pinned (never reclaimed), so nothing is lost
/// silently and the database stays up.
fn relocate_band(inner: &Inner, band: u32) -> Result<bool> {
    let (written, first_seq) = {
        let bt = inner.bands.lock();
        let b = &bt.bands[band as usize];
        (b.written_slots, b.first_seq)
    };
    let first = inner.layout.first_slot(band);
    let mut mv = Mover::new(inner, min_seq_elsewhere(inner, band));
    let dig = |k: &[u8]| inner.digest(k);
    let mut sc = BandScanner::new(
        &inner.layout,
        &inner.pool.caps,
        inner.tag,
        band,
        first_seq,
        &dig,
    );
    let end = sc.scan(0, written, false, &mut |f| {
        if let Found::Segment(s) = f {
            for e in &s.entries {
                let rec = s.data.get(e.offset as usize..(e.offset + e.len) as usize);
                mv.consider(first + s.slot, e, rec)?;
            }
        }
        Ok(())
    })?;
    inner.c.gc_bytes_read.fetch_add(end.bytes_read, Relaxed);
    if inner.pad.is_none() {
        straddling_start(inner, first_seq, &mut mv)?;
    }
    mv.flush()?;
    let left = inner.band_live[band as usize].load(Relaxed);
    if !mv.intact || left != 0 {
        inner.c.corruptions.fetch_add(1, Relaxed);
        inner.warn(format!(
            "GC: band {band} holds live records it could not read ({left} live bytes left); \
             the band is pinned and will not be reclaimed"
        ));
        return Ok(false);
    }
    Ok(true)
}

/// Collects GC moves and submits them in groups.
struct Mover<'a> {
    inner: &'a Inner,
    /// Oldest record seq any other band may hold: tombstones older than it
    /// shadow nothing and are dropped instead of moved.
    min_other: u64,
    moves: Vec<PRec>,
    bytes: usize,
    /// False once a live record could not be read.
    intact: bool,
}

impl<'a> Mover<'a> {
    fn new(inner: &'a Inner, min_other: u64) -> Mover<'a> {
        Mover {
            inner,
            min_other,
            moves: Vec::new(),
            bytes: 0,
            intact: true,
        }
    }

    /// Move the record of entry `e` of the segment in `slot` (`rec`: its bytes
    /// as read) if the index still points at it.
    fn consider(&mut self, slot: u64, e: &SummaryEntry, rec: Option<&[u8]>) -> Result<()> {
        let inner = self.inner;
        let loc = Loc::new(slot, e.offset, e.len, e.tombstone);
        if inner.index.get(e.digest) != Some(loc.0) {
            return Ok(());
        }
        let Some(rec) = rec.filter(|r| decode_record(r).is_ok()) else {
            tracing::warn!(
                slot,
                offset = e.offset,
                "GC found a corrupt record; its band is kept"
            );
            inner.c.corruptions.fetch_add(1, Relaxed);
            self.intact = false;
            return Ok(());
        };
        if e.tombstone && e.seq < self.min_other {
            if inner.index.remove_if(e.digest, loc.0) {
                inner.sub_live(loc);
                inner.c.gc_tombstones_dropped.fetch_add(1, Relaxed);
            }
            return Ok(());
        }
        // Strip the group flag: a moved record stands alone.
        let mut bytes = rec.to_vec();
        bytes[REC_FLAGS_AT] &= !REC_MORE;
        self.bytes += round_up(bytes.len(), 8);
        self.moves.push(PRec {
            digest: e.digest,
            bytes,
            kind: Kind::Relocate(loc),
        });
        if self.bytes >= inner.max_group_bytes() / 2 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.bytes = 0;
        submit_moves(self.inner, &mut self.moves)
    }
}

/// Capacity-only / scm-only: the band starting at segment `first_seq` is about
/// to be freed. If an atomic group begins in the segment before it (in another
/// band) and ends in this one, recovery would find the group's start without
/// its end and drop it (see recovery.rs `Replay`), so first move the start's
/// still-live records: moved records stand alone.
fn straddling_start(inner: &Inner, first_seq: u64, mv: &mut Mover<'_>) -> Result<()> {
    let Some(prev_seq) = first_seq.checked_sub(1) else {
        return Ok(());
    };
    // The band the previous segment went to: the newest in use that began before.
    let prev = {
        let bt = inner.bands.lock();
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
    let dig = |k: &[u8]| inner.digest(k);
    let mut sc = BandScanner::new(
        &inner.layout,
        &inner.pool.caps,
        inner.tag,
        band,
        band_first,
        &dig,
    );
    // Usually the band's last segment ends with a whole group: one segment read.
    match sc.last_segment(written)? {
        Some((seq, more)) if seq != prev_seq || !more => return Ok(()),
        _ => {}
    }
    // Members of the group still open at the end of the band: consecutive seqs,
    // each but the last carrying MORE (the last one found carries MORE too).
    let first = inner.layout.first_slot(band);
    let mut run: Vec<(u64, SummaryEntry, Option<Vec<u8>>)> = Vec::new();
    let mut last_seg = 0u64;
    sc.scan(0, written, false, &mut |f| {
        if let Found::Segment(s) = f {
            last_seg = s.seq;
            for e in &s.entries {
                if !run
                    .last()
                    .is_some_and(|(_, p, _)| p.more && p.seq + 1 == e.seq)
                {
                    run.clear();
                }
                let rec = s.data.get(e.offset as usize..(e.offset + e.len) as usize);
                run.push((first + s.slot, *e, rec.map(<[u8]>::to_vec)));
            }
        }
        Ok(())
    })?;
    if last_seg != prev_seq || !run.last().is_some_and(|(_, e, _)| e.more) {
        return Ok(());
    }
    for (slot, e, rec) in &run {
        mv.consider(*slot, e, rec.as_deref())?;
    }
    Ok(())
}

fn submit_moves(inner: &Inner, moves: &mut Vec<PRec>) -> Result<()> {
    // Each move is its own request, so a move made stale by a concurrent user
    // write is dropped alone; the group commit still writes them together.
    let reqs: Vec<_> = moves
        .drain(..)
        .map(|m| Req::new(vec![m], Class::Gc))
        .collect();
    inner.submit_all(reqs).map(|_| ())
}
