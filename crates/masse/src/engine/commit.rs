//! Group commit (paper §2.4, Table 1): the leader turns queued requests into
//! one durable group.
//!
//! Tiered: the leader decides what to apply, reserves room on the write pad,
//! places each record in the open DRAM segment (its final capacity-tier
//! address is known at once), writes the whole group to the pad with one
//! aligned write and sync, copies the records into the segment buffers,
//! updates the index and acknowledges. Full segments go to the single writer.
//! Capacity-only and scm-only skip the pad: the writer flushes the dirty tail
//! of the open segment and syncs before the group is acknowledged.

use super::pad::{PadRing, Reserved};
use super::request::{Next, Outcome, PendingRecord, RecordKind, Req, Wake, WriteClass};
use super::segment::{OpenSegment, SegmentBuf, Stream, WriteState};
use super::state::Engine;
use super::stream::{Pick, StreamChoice};
use super::writer_jobs::WriterJob;
use crate::device::{round_down64, round_up, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{canonical, Digest};
use crate::layout::Cursor;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

/// Where one record of a group went (and, version 3, the block mark in
/// front of it).
struct Placed {
    buf: Arc<SegmentBuf>,
    off: usize,
    /// Version 3: a block mark first, at this offset with this `back`.
    mark: Option<(usize, u16)>,
    loc: Loc,
}

/// What the leader decided to do with a group's requests.
struct Selection<'b> {
    /// Requests admitted, each with the indexes of the records to place.
    take: Vec<(&'b Arc<Req>, Vec<usize>)>,
    /// Per admitted request, the stream of each of its records (by index in
    /// the request; empty: all `User`).
    streams: Vec<Vec<Pick>>,
    /// Per admitted request: a lone put that may be written over its key's
    /// record in a segment still in DRAM (tiered, `Options::absorb_overwrites`).
    absorb: Vec<bool>,
    /// Segment bytes of the records to place.
    bytes: usize,
    /// scm-only: lone puts written over their old record, and the page images.
    in_place: Vec<&'b Arc<Req>>,
    pages: Vec<(usize, u64, AlignedBuf)>,
}

/// A group's records once placed: per request, where each went and its stamped bytes.
struct PlacedGroup {
    placed: Vec<Vec<Placed>>,
    stamped: Vec<Vec<Vec<u8>>>,
    /// The pad batch's payload (tiered).
    payload: Vec<u8>,
    /// Segments that need the pad from this group's batch on: those it
    /// opened and every one it put records in.
    new_segs: Vec<u64>,
    /// Records written over their key's record in an open segment (`absorb`).
    absorbed: usize,
}

/// Admission's copy of both streams' write positions (see `Engine::admit`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    pub user: Cursor,
    pub gc: Cursor,
}

/// Which records of a group are kept: deletes of absent keys and stale GC
/// moves are dropped.
struct GroupFilter {
    /// Which keys this group already writes; needed only to judge its deletes.
    has_deletes: bool,
    /// Keyed by canonical digest, as `user_in_group`.
    put_in_group: HashMap<Digest, bool>,
    /// Keys a user write of this group already wrote, by canonical digest
    /// (`index::canonical`): a GC move's digest comes from a summary, which
    /// may keep fewer bits than a freshly computed one.
    user_in_group: HashSet<Digest>,
}

impl GroupFilter {
    fn new(batch: &[Arc<Req>]) -> GroupFilter {
        GroupFilter {
            has_deletes: batch
                .iter()
                .any(|r| r.recs.iter().any(|p| p.kind == RecordKind::Delete)),
            put_in_group: HashMap::new(),
            user_in_group: HashSet::new(),
        }
    }

    /// A lone user put of a key this group did not write yet: it may be
    /// written over its key's record, in place on the device (scm-only) or
    /// in an open DRAM segment (tiered). An earlier record of the group for
    /// the key would be placed after the old one and win; GC moves need no
    /// check: they come from victim bands, never from open segments.
    fn lone_new_put(&self, r: &Req) -> bool {
        r.class == WriteClass::User
            && r.recs.len() == 1
            && r.recs[0].kind == RecordKind::Put
            && !self.user_in_group.contains(&canonical(r.recs[0].digest))
    }

    fn keep(&mut self, e: &Engine, p: &PendingRecord) -> bool {
        let keep = match p.kind {
            RecordKind::Put | RecordKind::Replay(_) => {
                if self.has_deletes {
                    self.put_in_group.insert(canonical(p.digest), true);
                }
                true
            }
            RecordKind::Delete => {
                let live = self
                    .put_in_group
                    .get(&canonical(p.digest))
                    .copied()
                    .unwrap_or_else(|| {
                        e.index
                            .get(p.digest)
                            .map(|l| !Loc(l).is_tombstone())
                            .unwrap_or(false)
                    });
                if live {
                    self.put_in_group.insert(canonical(p.digest), false);
                }
                live
            }
            // A move placed after a user write of the same key in this group
            // would sit at a later position, and recovery ("later position
            // wins") would bring the moved, older version back. Drop it: the
            // user write makes the old record dead anyway.
            RecordKind::Relocate(old, _) => {
                e.index.get(p.digest) == Some(old.0)
                    && !self.user_in_group.contains(&canonical(p.digest))
            }
        };
        if keep && !matches!(p.kind, RecordKind::Relocate(..)) {
            self.user_in_group.insert(canonical(p.digest));
        }
        keep
    }
}

impl Engine {
    /// Queue requests as separate groups-to-be; wait for all of them, leading
    /// group commits when handed the leadership.
    pub fn submit_all(&self, reqs: Vec<Arc<Req>>) -> Result<u32> {
        let Some(last) = reqs.last().cloned() else {
            return Ok(0);
        };
        let _writing = self.requests.spin.writer();
        if self.requests.push(&reqs) {
            self.lead(&last);
        }
        // Wait for every request, even after one failed or stalled: a request
        // still queued may be handed the leadership, and nobody else would take it.
        let mut n = 0;
        let mut err = None;
        for r in reqs {
            match self.await_req(&r, &last) {
                Outcome::Done(k) => n += k,
                Outcome::Failed(m) => {
                    err.get_or_insert(Error::Closed(m));
                }
                Outcome::Stalled => {
                    err.get_or_insert(Error::NoSpace(
                        "no free band for a replay or GC write".into(),
                    ));
                }
            }
        }
        err.map_or(Ok(n), Err)
    }

    /// Queue a request and wait for it, leading group commits when handed the leadership.
    pub fn submit(&self, req: Arc<Req>) -> Outcome {
        let _writing = self.requests.spin.writer();
        if self.requests.push(std::slice::from_ref(&req)) {
            self.lead(&req);
        }
        self.await_req(&req, &req)
    }

    fn await_req(&self, r: &Arc<Req>, mine: &Arc<Req>) -> Outcome {
        // Only a commit to a fast tier is short enough to spin for; without
        // a pad the leader waits for the capacity device.
        let spin = match self.pad {
            Some(_) => self.opts.commit_spin,
            None => std::time::Duration::ZERO,
        };
        loop {
            match r.wait(&self.requests.spin, spin) {
                Wake::Done(o) => return o,
                Wake::Lead => self.lead(mine),
            }
        }
    }

    /// Run group commits until `mine` (the caller's last request; FIFO order means
    /// all of the caller's requests) is done, then hand leadership on.
    ///
    /// A group's callers are woken after the write state is released and,
    /// once the leader's own request is among them, after leadership has
    /// passed on. Each wake-up is a futex wake (on a VM, an inter-processor
    /// interrupt); done inside the commit, they lengthened every group by one
    /// per caller, and the next group's callers waited for them. Now the next
    /// leader commits while this group's callers wake.
    fn lead(&self, mine: &Arc<Req>) {
        let mut acks = Vec::new();
        loop {
            let max = self.opts.max_batch_bytes.min(self.max_group_bytes());
            let batch = match self.requests.next(mine, max) {
                Next::Commit(b) => b,
                Next::Stop => return,
            };
            let mut ws = self.write_state.lock();
            let res = self.commit_group(&mut ws, &batch, &mut acks);
            // Fail before another thread can take the write state: it must
            // not seal or checkpoint what this group left half done.
            if let Err(e) = &res {
                self.fail(format!("write path failed: {e}"));
            }
            drop(ws);
            let mine_acked = res.is_ok() && acks.iter().any(|(r, _)| Arc::ptr_eq(r, mine));
            if mine_acked {
                self.requests.hand_on();
            }
            for (r, found) in acks.drain(..) {
                r.complete(Outcome::Done(found));
            }
            if let Err(e) = res {
                let m = e.to_string();
                for r in &batch {
                    if !r.is_done() {
                        r.complete(Outcome::Failed(m.clone()));
                    }
                }
            }
            if mine_acked {
                return;
            }
        }
    }

    /// Where admission starts a group: the current write position, taken as if
    /// the open segment were already sealed. Pad reservation may force-seal it
    /// before the group is placed (§4.8), and placing from a later position never
    /// ends earlier, so the simulation can only overestimate.
    pub fn admission_cursor(&self, ws: &WriteState) -> Cursor {
        self.cursor_at(ws.cur_band, ws.next_sib)
    }

    fn cursor_at(&self, band: Option<u32>, next_sib: u64) -> Cursor {
        Cursor {
            open: None,
            band_left: match band {
                Some(_) => self.layout.slots_per_band - next_sib,
                None => 0,
            },
            bands_taken: 0,
        }
    }

    /// Admission cursors of both streams (`admission_cursor` for each).
    pub fn admission(&self, ws: &WriteState) -> Admission {
        Admission {
            user: self.admission_cursor(ws),
            gc: self.cursor_at(ws.parked.cur_band, ws.parked.next_sib),
        }
    }

    /// Whether a request of `recs` of `class` would be admitted now, each
    /// record counted in the stream `select` would place it in.
    pub fn admits(&self, ws: &WriteState, class: WriteClass, recs: &[PendingRecord]) -> bool {
        let codec = self.layout.codec;
        let choice = self.streams_on().then(StreamChoice::default);
        let mut a = self.admission(ws);
        let recs = recs.iter().map(|p| {
            let s = choice
                .as_ref()
                .map_or(Stream::User, |c| c.choose(self, ws, p).stream);
            (p.len(codec), s)
        });
        self.admit(&mut a, class, recs)
    }

    /// Space admission: place records of `lens` after `cur` (the records the
    /// group already took) as `place` will, and admit them if the free bands that
    /// takes leave `class`'s reserve untouched; then `cur` moves past them.
    /// Counting whole segments and bands, not bytes, is what keeps the leader's
    /// `new_segment` from ever finding the free list empty: a record too big to
    /// share a segment takes all of its k slots, and a band's last slots go
    /// unused when they are fewer than k.
    pub fn admit(
        &self,
        cur: &mut Admission,
        class: WriteClass,
        recs: impl Iterator<Item = (usize, Stream)>,
    ) -> bool {
        let mut c = *cur;
        for (len, s) in recs {
            match s {
                Stream::User => c.user.place(&self.layout, len),
                Stream::Gc => c.gc.place(&self.layout, len),
            }
        }
        if class != WriteClass::Replay {
            let reserve = class.reserve_bands();
            let bt = self.bands.lock();
            let free = bt.free_count();
            let taken = c.user.bands_taken + c.gc.bands_taken;
            // Where GC moves share the user writes' open band, user writes
            // stop once free bands are below their reserve, even those that
            // fit the open band: that band's slots, and the band a GC pass
            // opens, are the room the pass counted on when it began. Filling
            // them stalled the pass for good and failed writes with
            // `NoSpace` at 75 % live data (`gc_churn::capacity_only_90_percent`
            // with spinning commit waits, docs/benchmarks.md). Deletes (reserve
            // 1) go by the same rule only while a pass has a victim: once it
            // has opened the last free band, deletes that fit would fill the
            // band its moves need. With no victim they may use the open
            // band's last slots, so they can always make room. (`gc_active`
            // would not do: a pass sets it before it looks for a victim, and
            // passes that find none ran every 20 ms on a full pool, failing
            // deletes there with `NoSpace`.)
            // (`victims` scans the band table: asked only below the reserve.)
            let held_for_gc = free < reserve
                && !self.streams_on()
                && match class {
                    WriteClass::User => true,
                    WriteClass::Delete => bt.victims() > 0,
                    WriteClass::Gc | WriteClass::Replay => false,
                };
            drop(bt);
            if held_for_gc || taken > free.saturating_sub(reserve) {
                return false;
            }
        }
        *cur = c;
        true
    }

    /// One group commit, under the write state. Requests applied go to
    /// `acks` with their found-delete counts, for the caller to complete
    /// once it has released the write state; requests not applied (stalled,
    /// written in place) are answered here.
    pub(super) fn commit_group(
        &self,
        ws: &mut WriteState,
        batch: &[Arc<Req>],
        acks: &mut Vec<(Arc<Req>, u32)>,
    ) -> Result<()> {
        let mut sel = self.select(ws, batch)?;
        if !sel.in_place.is_empty() {
            self.write_in_place(std::mem::take(&mut sel.pages), &sel.in_place)?;
        }
        if sel.bytes == 0 {
            acks.extend(sel.take.iter().map(|(r, _)| (Arc::clone(r), 0)));
            return Ok(());
        }
        // Reserve pad room before placing anything, so a forced seal never takes this
        // group's records. Records replayed from the pad at open are still on it in
        // their original batches: they are placed, not written again.
        let replay_only = sel.take.iter().all(|(r, _)| r.class == WriteClass::Replay);
        let pad_virt = match &self.pad {
            Some(p) if !replay_only => Some(self.reserve_pad(p, ws, BATCH_HEADER + sel.bytes)?),
            _ => None,
        };
        let g = self.place_group(ws, &sel, pad_virt.is_some())?;
        self.persist(ws, pad_virt, &g)?;
        self.apply(&sel.take, &g.placed, acks);
        self.seq_hint.store(ws.next_seq, SeqCst);
        // Hand sealed segments to the writer (tiered; capacity-only did it in `persist`).
        if self.pad.is_some() {
            self.flush_segments(ws, false)?;
        }
        Ok(())
    }

    /// Decide what to apply: in-place updates (scm-only), admission by space,
    /// and which records of each admitted request to keep.
    fn select<'b>(&self, ws: &WriteState, batch: &'b [Arc<Req>]) -> Result<Selection<'b>> {
        let mut sel = Selection {
            take: Vec::with_capacity(batch.len()),
            streams: Vec::with_capacity(batch.len()),
            absorb: Vec::with_capacity(batch.len()),
            bytes: 0,
            in_place: Vec::new(),
            pages: Vec::new(),
        };
        let mut cursor = self.admission(ws);
        let mut filter = GroupFilter::new(batch);
        let mut choice = self.streams_on().then(StreamChoice::default);
        let scm = self.pool.geo.mode == Mode::ScmOnly;
        let absorb = self.absorbs();
        for r in batch {
            if scm && filter.lone_new_put(r) && self.try_in_place(&r.recs[0], &mut sel.pages)? {
                filter.user_in_group.insert(canonical(r.recs[0].digest));
                sel.in_place.push(r);
                continue;
            }
            // Space is checked after everything this group already took, counting
            // every record of the request: the ones the filter drops only make
            // the real placement end earlier.
            let codec = self.layout.codec;
            let streams: Vec<Pick> = match &choice {
                Some(c) => r.recs.iter().map(|p| c.choose(self, ws, p)).collect(),
                None => Vec::new(),
            };
            let stream = |i: usize| streams.get(i).map_or(Stream::User, |k| k.stream);
            let recs = r
                .recs
                .iter()
                .enumerate()
                .map(|(i, p)| (p.len(codec), stream(i)));
            if !self.admit(&mut cursor, r.class, recs) {
                r.complete(Outcome::Stalled);
                continue;
            }
            sel.absorb.push(absorb && filter.lone_new_put(r));
            let mut idx = Vec::with_capacity(r.recs.len());
            for (i, p) in r.recs.iter().enumerate() {
                if filter.keep(self, p) {
                    sel.bytes += p.pad_len(codec);
                    idx.push(i);
                    if let Some(c) = &mut choice {
                        c.note(p, stream(i));
                    }
                }
            }
            sel.take.push((r, idx));
            sel.streams.push(streams);
        }
        Ok(sel)
    }

    /// Reserve pad room for a group of `len` bytes. When only the open segment
    /// holds the full pad, nothing else is on its way to the capacity tier to
    /// free space: seal it early rather than wait forever. A held segment
    /// (§4.10) goes first: it is full, so writing it frees its batches
    /// without cutting a segment short, and the reservation then waits for
    /// the writer like any other.
    fn reserve_pad(&self, p: &PadRing, ws: &mut WriteState, len: usize) -> Result<u64> {
        self.seal_idle_gc_segment(p, ws)?;
        loop {
            let open: Vec<u64> = ws.unsent_with_records().map(|o| o.buf.seq).collect();
            match p.reserve(len, self.tag, &open, &|| self.check_failed())? {
                Reserved::At(v) => return Ok(v),
                Reserved::HeldByOpenSegment if ws.held.is_some() => {
                    self.send_closed(ws, false)?;
                }
                Reserved::HeldByOpenSegment => {
                    for s in [Stream::User, Stream::Gc] {
                        if ws.close_stream(s) {
                            self.counters.forced_seals.fetch_add(1, Relaxed);
                        }
                    }
                    self.send_closed(ws, false)?;
                }
            }
        }
    }

    /// The `Gc` stream's open segment fills only while GC runs or cold user
    /// writes come, and until it is sealed it holds the pad from its first
    /// batch on. Once it holds the
    /// oldest batch still needed and the pad is half full, seal it, rather
    /// than let the pad fill and stall every writer until it is sealed.
    fn seal_idle_gc_segment(&self, p: &PadRing, ws: &mut WriteState) -> Result<()> {
        let Some(gc_seq) = ws.open_of(Stream::Gc).map(|o| o.buf.seq) else {
            return Ok(());
        };
        if p.used() * 2 < p.size || !p.holds_oldest(gc_seq) {
            return Ok(());
        }
        if ws.close_stream(Stream::Gc) {
            self.counters.forced_seals.fetch_add(1, Relaxed);
            self.flush_segments(ws, false)?;
        }
        Ok(())
    }

    /// Place every record; stamp seq and seg tag; remember where it goes.
    fn place_group(
        &self,
        ws: &mut WriteState,
        sel: &Selection<'_>,
        to_pad: bool,
    ) -> Result<PlacedGroup> {
        let mut g = PlacedGroup {
            placed: Vec::with_capacity(sel.take.len()),
            stamped: Vec::with_capacity(sel.take.len()),
            payload: Vec::with_capacity(if to_pad { sel.bytes } else { 0 }),
            new_segs: Vec::new(),
            absorbed: 0,
        };
        // An open segment receiving its first records needs the pad from this batch on.
        let empty_open: Vec<u64> = ws
            .open_segments()
            .filter(|o| o.entries.is_empty())
            .map(|o| o.buf.seq)
            .collect();
        let reqs = sel.take.iter().zip(&sel.streams).zip(&sel.absorb);
        for (((r, idx), streams), &absorb) in reqs {
            let mut pl = Vec::with_capacity(idx.len());
            let mut st = Vec::with_capacity(idx.len());
            for (j, &i) in idx.iter().enumerate() {
                let more = j + 1 < idx.len();
                let p = &r.recs[i];
                let pick = streams.get(i);
                let s = pick.map_or(Stream::User, |k| k.stream);
                let (placed, bytes) = match absorb.then(|| self.absorb(ws, s, p)).flatten() {
                    Some(x) => {
                        g.absorbed += 1;
                        x
                    }
                    None => {
                        if let Some(k) = pick {
                            self.count_pick(p, k);
                        }
                        ws.in_stream(s, |ws| self.place_record(ws, p, more, &mut g.new_segs))?
                    }
                };
                if to_pad {
                    self.pad_copy(&mut g.payload, p, &bytes);
                }
                if !g.new_segs.contains(&placed.buf.seq) {
                    g.new_segs.push(placed.buf.seq);
                }
                pl.push(placed);
                st.push(bytes);
            }
            g.placed.push(pl);
            g.stamped.push(st);
        }
        for seq in empty_open.into_iter().rev() {
            g.new_segs.insert(0, seq);
        }
        Ok(g)
    }

    /// `p` written over its key's record in stream `s`'s open segment, if it
    /// may be (`absorb_target`): no seq, no summary entry, no new bytes; the
    /// index entry and live bytes stay as they are when `apply` re-applies
    /// the same location.
    fn absorb(&self, ws: &WriteState, s: Stream, p: &PendingRecord) -> Option<(Placed, Vec<u8>)> {
        let (buf, loc, bytes) = self.absorb_target(ws, s, p)?;
        let off = loc.offset() as usize;
        let placed = Placed {
            buf,
            off,
            mark: None,
            loc,
        };
        Some((placed, bytes))
    }

    /// Count a placed record's stream choice (diverted, cold).
    fn count_pick(&self, p: &PendingRecord, k: &Pick) {
        match k.want {
            Some(w) if w != k.stream => {
                self.counters.stream_diverted.fetch_add(1, Relaxed);
            }
            Some(Stream::Gc) if !matches!(p.kind, RecordKind::Relocate(..)) => {
                self.counters.cold_writes.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }

    /// A record's bytes in the pad batch: version 2 the segment copy, padded
    /// to 8; version 3 the record without its seq trailer (replay gives it a
    /// new seq anyway), so the batch's length is known before placement.
    fn pad_copy(&self, payload: &mut Vec<u8>, p: &PendingRecord, placed: &[u8]) {
        match self.layout.codec {
            Codec::V2 => {
                payload.extend_from_slice(placed);
                payload.resize(round_up(payload.len(), 8), 0);
            }
            Codec::V3 | Codec::V4 => {
                v3::encode_v3_record(payload, p.tombstone, p.key(), p.value(), None)
            }
        }
    }

    /// Place one record, encode it, and add its summary entry to its segment.
    /// `more`: another record of the same request follows (the group flag).
    fn place_record(
        &self,
        ws: &mut WriteState,
        p: &PendingRecord,
        more: bool,
        new_segs: &mut Vec<u64>,
    ) -> Result<(Placed, Vec<u8>)> {
        // A GC move keeps its sequence number: it is the same version, moved.
        let seq = match p.kind {
            RecordKind::Relocate(_, seq) => seq,
            _ => {
                ws.next_seq += 1;
                ws.next_seq - 1
            }
        };
        let base = p.len(self.layout.codec);
        let (buf, off, mark, bytes, used_up) = match self.layout.codec {
            Codec::V2 => {
                let (buf, off, used_up) = self.place(ws, base, new_segs)?;
                let flags =
                    if p.tombstone { REC_TOMBSTONE } else { 0 } | if more { REC_MORE } else { 0 };
                let b = Codec::encode_v2(seg_tag(buf.seq), seq, flags, p.key(), p.value());
                (buf, off, None, b, used_up)
            }
            Codec::V3 | Codec::V4 => {
                let (buf, s, used_up) =
                    self.place_v3(ws, (base, seq, more, p.tombstone), new_segs)?;
                let b = Codec::encode_v3(p.tombstone, p.key(), p.value(), s.trailer);
                debug_assert_eq!(b.len(), s.len, "placement knew the record's length");
                (buf, s.spot.record, s.mark_back(), b, used_up)
            }
        };
        if matches!(p.kind, RecordKind::Relocate(..)) {
            self.gc_room_used.fetch_add(used_up, Relaxed);
        }
        segment_of(ws, &buf)?.push(SummaryEntry {
            digest: p.digest,
            seq,
            offset: off as u32,
            len: bytes.len() as u32,
            tombstone: p.tombstone,
            more,
        });
        self.status.saw_seq(buf.band, seq);
        let loc = Loc::new(buf.slot, off as u32, bytes.len() as u32, p.tombstone);
        let placed = Placed {
            buf,
            off,
            mark,
            loc,
        };
        Ok((placed, bytes))
    }

    /// Make the group durable: the pad batch (tiered), or the segment tail
    /// itself (capacity-only); then its records are in the DRAM segments.
    fn persist(&self, ws: &mut WriteState, pad_virt: Option<u64>, g: &PlacedGroup) -> Result<()> {
        let Some(p) = &self.pad else {
            self.copy_into_segments(g);
            return self.flush_segments(ws, true);
        };
        p.mark_segments(pad_virt, &g.new_segs);
        if let Some(v) = pad_virt {
            let nrec = g.stamped.iter().map(|s| s.len()).sum();
            let n = p.write(v, &g.payload, nrec, self.tag)?;
            self.counters.pad_bytes.fetch_add(n, Relaxed);
        }
        self.copy_into_segments(g);
        Ok(())
    }

    /// Copy the group's records into their segment buffers. Absorbed records
    /// change bytes under an unchanged index entry: like scm-only's in-place
    /// writes they move the `inplace_gen` seqlock, so a reader that checks
    /// only "the entry did not move" (part reads, iterators) looks again.
    fn copy_into_segments(&self, g: &PlacedGroup) {
        if g.absorbed > 0 {
            self.inplace_gen.fetch_add(1, SeqCst);
            self.counters
                .absorbed_writes
                .fetch_add(g.absorbed as u64, Relaxed);
        }
        self.copy_records(g);
        if g.absorbed > 0 {
            self.inplace_gen.fetch_add(1, SeqCst);
        }
    }

    fn copy_records(&self, g: &PlacedGroup) {
        for (pl, st) in g.placed.iter().zip(g.stamped.iter()) {
            for (p, b) in pl.iter().zip(st.iter()) {
                let mut d = p.buf.data.write();
                if let Some((m, back)) = p.mark {
                    let mut mark = Vec::with_capacity(v3::MARK_LEN);
                    v3::encode_mark(&mut mark, seg_tag(p.buf.seq), back);
                    d[m..m + mark.len()].copy_from_slice(&mark);
                }
                d[p.off..p.off + b.len()].copy_from_slice(b);
            }
        }
    }

    /// Apply to the index and account live/dead bytes; the acknowledgements
    /// go to `acks` (`lead` sends them).
    fn apply(
        &self,
        take: &[(&Arc<Req>, Vec<usize>)],
        placed: &[Vec<Placed>],
        acks: &mut Vec<(Arc<Req>, u32)>,
    ) {
        let mut nrec = 0u64;
        for ((r, idx), pl) in take.iter().zip(placed.iter()) {
            let mut found = 0u32;
            for (&i, p) in idx.iter().zip(pl.iter()) {
                nrec += 1;
                found += self.apply_record(&r.recs[i], p.loc);
            }
            acks.push((Arc::clone(r), found));
        }
        self.counters.commit_groups.fetch_add(1, Relaxed);
        self.counters.commit_records.fetch_add(nrec, Relaxed);
    }

    /// Point the index at `loc` for `rec`; returns 1 for a delete that found its key.
    fn apply_record(&self, rec: &PendingRecord, loc: Loc) -> u32 {
        if let RecordKind::Relocate(old, _) = rec.kind {
            if self.index.compare_exchange(rec.digest, old.0, loc.0) {
                self.status.add_live(loc);
                self.status.sub_live(old);
            }
            self.counters.gc_records_moved.fetch_add(1, Relaxed);
            self.counters
                .gc_bytes_moved
                .fetch_add(loc.len8() as u64, Relaxed);
            return 0;
        }
        let old = self.index.insert(rec.digest, loc.0);
        self.status.add_live(loc);
        let Some(o) = old.map(Loc) else { return 0 };
        self.status.sub_live(o);
        (rec.kind == RecordKind::Delete && !o.is_tombstone()) as u32
    }

    /// Tiered pools: close both streams' open segments and hand them to the
    /// writer (`Db::seal_open_segments`). Other pools make every group
    /// durable in its segment before acknowledging: nothing to do.
    pub(crate) fn seal_open(&self) -> Result<()> {
        match self.pad {
            Some(_) => self.seal_streams(&[Stream::User, Stream::Gc]),
            None => Ok(()),
        }
    }

    /// Separate GC writes: close the `Gc` stream's open segment and hand it
    /// to the writer (when GC is idle, at a clean close).
    pub(crate) fn seal_gc_stream(&self) -> Result<()> {
        match self.streams_on() {
            true => self.seal_streams(&[Stream::Gc]),
            false => Ok(()),
        }
    }

    /// Close the open segments of `streams` that hold records and hand them
    /// to the writer (tiered).
    fn seal_streams(&self, streams: &[Stream]) -> Result<()> {
        let mut ws = self.write_state.lock();
        let mut closed = false;
        for &s in streams {
            closed |= ws.close_stream(s);
        }
        let all = streams.contains(&Stream::User);
        match closed || (all && ws.held.is_some()) {
            true => self.send_closed(&mut ws, !all),
            false => Ok(()),
        }
    }

    /// Tiered: seal the closed segments and hand them to the writer, all of
    /// them, or (`hold`) all but the newest `User` one, which stays
    /// absorbable in DRAM until the next one closes
    /// ([`WriteState::take_closed`], design.md §4.10).
    pub(super) fn send_closed(&self, ws: &mut WriteState, hold: bool) -> Result<()> {
        for mut o in ws.take_closed(hold) {
            o.seal(self.tag);
            let from = round_down64(o.flushed as u64, 4096) as usize;
            self.send(WriterJob::Segment {
                buf: o.buf.clone(),
                from,
            })?;
        }
        Ok(())
    }

    /// Whether overwrites are absorbed in DRAM segments, and the `User`
    /// segment closed last is held for them (tiered, `absorb_overwrites`).
    pub(super) fn absorbs(&self) -> bool {
        self.opts.absorb_overwrites && self.pad.is_some()
    }

    /// Hand the held `User` segment, if any, to the writer: `Db::flush`
    /// promises every closed segment, and a writer waiting for space needs
    /// the band it pins (a band with a segment in DRAM is no GC victim).
    pub(crate) fn release_held(&self) -> Result<()> {
        if !self.absorbs() {
            return Ok(());
        }
        let mut ws = self.write_state.lock();
        match ws.held.is_some() {
            true => self.send_closed(&mut ws, false),
            false => Ok(()),
        }
    }

    /// Seal-and-send finished segments; in capacity-only mode also flush the open
    /// segment's dirty tail and wait until it is durable.
    pub(super) fn flush_segments(&self, ws: &mut WriteState, durable_tail: bool) -> Result<()> {
        if !durable_tail {
            // Tiered: every record is on the pad; a segment is written once, whole.
            return self.send_closed(ws, self.absorbs());
        }
        // Without a pad a group commit is durable once its records are: first the
        // records of the segments it sealed and of the open segment, then one sync
        // (the acknowledgement); only then the summaries and footers of the sealed
        // segments, which the writer's next burst syncs. A footer thus vouches only
        // for records already durable: a power cut that keeps a footer block but
        // not a record block cannot make recovery index bytes never written.
        let sealed: Vec<OpenSegment> = ws.to_seal.drain(..).collect();
        for o in sealed.iter().chain(ws.open.as_ref()) {
            if o.used > o.flushed {
                self.send(WriterJob::Flush {
                    buf: o.buf.clone(),
                    from: round_down64(o.flushed as u64, 4096) as usize,
                    to: round_up(o.used, 4096),
                })?;
                self.counters.partial_flushes.fetch_add(1, Relaxed);
            }
        }
        if let Some(o) = ws.open.as_mut() {
            o.flushed = o.used;
        }
        self.writer_barrier()?;
        let iu = self.layout.geo.iu as u64;
        for mut o in sealed {
            o.seal(self.tag);
            let from = round_down64(o.summary_start() as u64, iu.max(4096)) as usize;
            self.send(WriterJob::Segment {
                buf: o.buf.clone(),
                from,
            })?;
        }
        Ok(())
    }
}

/// The open or to-be-sealed segment `buf` belongs to.
fn segment_of<'w>(ws: &'w mut WriteState, buf: &Arc<SegmentBuf>) -> Result<&'w mut OpenSegment> {
    if ws.open.as_ref().is_some_and(|o| Arc::ptr_eq(&o.buf, buf)) {
        return ws
            .open
            .as_mut()
            .ok_or_else(|| Error::Corruption("internal: placed segment vanished".into()));
    }
    ws.to_seal
        .iter_mut()
        .rev()
        .find(|o| Arc::ptr_eq(&o.buf, buf))
        .ok_or_else(|| Error::Corruption("internal: placed segment vanished".into()))
}

#[cfg(test)]
mod tests {
    use super::super::band::BandState;
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::{Db, DeviceSpec, Options, PoolConfig};
    use std::time::Duration;

    fn pool(dev: &MemDevice) -> PoolConfig {
        let mut c =
            PoolConfig::capacity_only(DeviceSpec::Device(Arc::new(dev.clone()) as Arc<dyn Device>));
        c.segment_size = Some(32 << 10);
        c.band_size = Some(512 << 10);
        c
    }

    fn opts() -> Options {
        Options {
            background_gc: false,
            histograms: false,
            ..Options::default()
        }
    }

    /// A user put of `k` (value "v") or, with `del`, a delete of it.
    fn user_rec(e: &Engine, k: &[u8], del: bool) -> PendingRecord {
        let (kind, v): (_, &[u8]) = if del {
            (RecordKind::Delete, b"")
        } else {
            (RecordKind::Put, b"v")
        };
        let mut p = PendingRecord::new(k, v, del, kind);
        p.digest = e.digest(k);
        p
    }

    /// `commit_group` applies a group but wakes nobody: its requests come
    /// back in `acks` with their found deletes, for `lead` to answer after
    /// it has released the write state and handed leadership on.
    #[test]
    fn a_group_is_applied_before_anyone_is_woken() {
        let dev = MemDevice::new(8 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        db.put(b"K", b"v").expect("put");
        let e = &db.engine;
        let codec = e.layout.codec;
        let put = Req::new(vec![user_rec(e, b"J", false)], WriteClass::User, codec);
        let del = Req::new(vec![user_rec(e, b"K", true)], WriteClass::Delete, codec);
        let mut acks = Vec::new();
        {
            let mut ws = e.write_state.lock();
            e.commit_group(&mut ws, &[put.clone(), del.clone()], &mut acks)
                .expect("commit");
        }
        assert!(!put.is_done() && !del.is_done(), "a caller was woken");
        let got: Vec<(bool, u32)> = acks
            .iter()
            .map(|(r, n)| (Arc::ptr_eq(r, &put), *n))
            .collect();
        assert_eq!(got, vec![(true, 0), (false, 1)]);
        assert_eq!(db.get(b"J").expect("get"), Some(b"v".to_vec()));
        assert_eq!(db.get(b"K").expect("get"), None);
        db.close().expect("close");
    }

    /// A lone put is written over its key's record in the open segment only
    /// if no earlier record of its group wrote the key: K's batch is placed
    /// after K's old record, so a lone put of K absorbed into the old one
    /// would lose to the batch at recovery ("later position wins"). L's lone
    /// put comes first in its group and is absorbed; L's batch then follows
    /// it. A power cut and a scan of the capacity tier must give each key
    /// its last write.
    #[test]
    fn only_a_lone_put_of_a_key_new_to_its_group_is_absorbed() {
        let (fast, cap) = (MemDevice::new(48 << 20), MemDevice::new(8 << 20));
        let cfg = crate::engine::replay::tests::config(&fast, &cap);
        let db = Db::create(&cfg, opts()).expect("create");
        db.put(b"K", b"v1").expect("put");
        db.put(b"L", b"l1").expect("put");
        let e = &db.engine;
        let codec = e.layout.codec;
        let req = |kvs: &[(&[u8], &[u8])]| {
            let recs = kvs.iter().map(|&(k, v)| {
                let mut p = PendingRecord::new(k, v, false, RecordKind::Put);
                p.digest = e.digest(k);
                p
            });
            Req::new(recs.collect(), WriteClass::User, codec)
        };
        let group = [
            req(&[(b"K", b"v2"), (b"J", b"j1")]),
            req(&[(b"K", b"v3")]),
            req(&[(b"L", b"l2")]),
            req(&[(b"L", b"l3"), (b"M", b"m1")]),
        ];
        let before = e.counters.absorbed_writes.load(Relaxed);
        let mut acks = Vec::new();
        e.commit_group(&mut e.write_state.lock(), &group, &mut acks)
            .expect("commit");
        assert_eq!(e.counters.absorbed_writes.load(Relaxed) - before, 1);
        let want: [(&[u8], &[u8]); 4] =
            [(b"K", b"v3"), (b"J", b"j1"), (b"L", b"l3"), (b"M", b"m1")];
        for (k, v) in want {
            assert_eq!(db.get(k).expect("get").as_deref(), Some(v));
        }
        db.seal_open_segments().expect("seal");
        db.flush().expect("flush");
        drop(db);
        fast.power_cut();
        cap.power_cut();
        let db = Db::open(&cfg, opts()).expect("recover");
        for (k, v) in want {
            assert_eq!(
                db.get(k).expect("get").as_deref(),
                Some(v),
                "{k:?} after recovery"
            );
        }
        db.close().expect("close");
    }

    /// A GC move of key K and a user write of K in the same group commit: the
    /// move must not be placed after the write, or recovery ("later position
    /// wins") resurrects the moved, older version. Found by `masse stress`
    /// (scm-only kill loop, seed 13: deleted keys came back after a crash).
    ///
    /// `summary_digest`: the move carries the digest in the form a format-3
    /// summary keeps (canonical, 80 bits), the user write the full one; the
    /// filter must still see one key.
    fn move_and_write_in_one_group(
        mut user: PendingRecord,
        expect: Option<&[u8]>,
        summary_digest: bool,
    ) {
        let dev = MemDevice::new(16 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        db.put(b"K", b"old value").expect("put");
        db.put(b"other", b"x").expect("put");
        let inner = &db.engine;
        let d = inner.digest(b"K");
        let loc = Loc(inner.index.get(d).expect("K indexed"));
        let codec = inner.layout.codec;
        let (k, v) = inner
            .with_record(loc, |b| {
                let r = codec.decode(b)?;
                Ok((r.key.to_vec(), r.value.to_vec()))
            })
            .expect("read K");
        assert_ne!(canonical(d), d, "the full digest has more bits");
        let mut m = PendingRecord::new(&k, &v, false, RecordKind::Relocate(loc, 1));
        m.digest = if summary_digest { canonical(d) } else { d };
        let mv = Req::new(vec![m], WriteClass::Gc, codec);
        let class = if user.kind == RecordKind::Delete {
            WriteClass::Delete
        } else {
            WriteClass::User
        };
        user.digest = d;
        let w = Req::new(vec![user], class, codec);
        {
            let mut ws = inner.write_state.lock();
            inner
                .commit_group(&mut ws, &[w.clone(), mv.clone()], &mut Vec::new())
                .expect("commit");
        }
        assert_eq!(db.get(b"K").expect("get").as_deref(), expect);
        drop(db); // crash: reopen recovers from the log
        let db = Db::open(&pool(&dev), opts()).expect("reopen");
        assert_eq!(db.get(b"K").expect("get after recovery").as_deref(), expect);
        db.close().expect("close");
    }

    #[test]
    fn a_move_after_a_delete_in_one_group_does_not_resurrect() {
        let del = PendingRecord::new(b"K", b"", true, RecordKind::Delete);
        move_and_write_in_one_group(del.clone(), None, false);
        move_and_write_in_one_group(del, None, true);
    }

    #[test]
    fn a_move_after_a_put_in_one_group_does_not_win() {
        let put = PendingRecord::new(b"K", b"new value", false, RecordKind::Put);
        move_and_write_in_one_group(put.clone(), Some(b"new value"), false);
        move_and_write_in_one_group(put, Some(b"new value"), true);
    }

    /// A request of a multi-request `submit_all` that was still queued when an
    /// earlier one came back `Stalled` must still be waited for: another leader
    /// may hand it the leadership, and if nobody waits on it the queue's leader
    /// flag stays set and every later write blocks (issue 12, defect 4).
    #[test]
    fn a_stalled_submit_all_leaves_no_orphan_leader() {
        let dev = MemDevice::new(16 << 20);
        let opts = Options {
            max_batch_bytes: 4096,
            ..opts()
        };
        let db = Db::create(&pool(&dev), opts).expect("create");
        let inner = db.engine.clone();
        // Use up every slot of the open band (15 segments of 32 KiB): a record
        // that needs a new segment then needs a new band.
        for i in 0..15u32 {
            db.put(&i.to_le_bytes(), &vec![2u8; 30_000]).expect("fill");
        }
        // No free band at all: any GC-class request that needs one stalls.
        let hidden: Vec<u32> = inner.bands.lock().free.drain(..).collect();
        let rec = |k: &[u8], n: usize| {
            let mut p = PendingRecord::new(k, &vec![1u8; n], false, RecordKind::Put);
            p.digest = inner.digest(k);
            p
        };
        let codec = inner.layout.codec;
        // Another caller leads; its request x is queued first.
        let x = Req::new(vec![rec(b"x", 100)], WriteClass::Replay, codec);
        assert!(
            inner.requests.push(std::slice::from_ref(&x)),
            "no leader yet"
        );
        // A GC-style submit of two requests queues behind x and waits.
        let r1 = Req::new(vec![rec(b"r1", 100)], WriteClass::Gc, codec);
        let r2 = Req::new(vec![rec(b"r2", 5000)], WriteClass::Gc, codec);
        let i2 = inner.clone();
        let t = std::thread::spawn(move || i2.submit_all(vec![r1, r2]));
        while inner.requests.debug_state().0 < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The leader commits [x, r1] (r2 does not fit the group), hands off, returns.
        inner.lead(&x);
        assert!(
            t.join().expect("join").is_err(),
            "the stalled move was not reported"
        );
        inner.bands.lock().free.extend(hidden);
        // Every later write must still get through.
        let (tx, rx) = std::sync::mpsc::channel();
        let db = Arc::new(db);
        let d2 = db.clone();
        std::thread::spawn(move || tx.send(d2.put(b"later", b"write").is_ok()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "writes hang behind an orphaned request"
        );
    }

    /// Where GC moves share the user writes' band, a user write is refused
    /// once free bands are below its reserve, even when it fits the open
    /// band; a delete still goes in. Without the rule users filled the room
    /// a GC pass counted on, the pass stalled, and writes failed with
    /// `NoSpace` at 75 % live data.
    #[test]
    fn user_writes_leave_a_short_shared_band_to_gc() {
        let dev = MemDevice::new(16 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        db.put(b"a", b"1").expect("put");
        let inner = &db.engine;
        let admits = |class, del| {
            let ws = inner.write_state.lock();
            inner.admits(&ws, class, &[user_rec(inner, b"b", del)])
        };
        assert!(admits(WriteClass::User, false), "room to spare");
        // Leave one free band: the open band still has room for the record.
        let free = inner.bands.lock().free.len();
        let hidden: Vec<u32> = inner.bands.lock().free.drain(..free - 1).collect();
        assert!(
            !admits(WriteClass::User, false),
            "a user write took GC's room"
        );
        assert!(
            admits(WriteClass::Delete, true),
            "a delete must still go in"
        );
        assert!(admits(WriteClass::Gc, false));
        inner.bands.lock().free.extend(hidden);
        assert!(admits(WriteClass::User, false));
        db.close().expect("close");
    }

    /// With no free band left, a delete that fits the open band goes in
    /// unless a GC pass runs: the pass opened the last band for its moves,
    /// and deletes filling it would stall the pass with its victim half moved.
    #[test]
    fn deletes_leave_the_last_band_to_a_running_gc_pass() {
        let dev = MemDevice::new(16 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        db.put(b"a", b"1").expect("put");
        let inner = &db.engine;
        let admits = |class| {
            let mut p = PendingRecord::new(b"a", b"", true, RecordKind::Delete);
            p.digest = inner.digest(b"a");
            let ws = inner.write_state.lock();
            inner.admits(&ws, class, &[p])
        };
        let hidden: Vec<u32> = inner.bands.lock().free.drain(..).collect();
        inner.gc_active.store(true, SeqCst);
        assert!(
            admits(WriteClass::Delete),
            "a pass that has no victim yet (it may find none) holds no room"
        );
        let set = |s| std::mem::replace(&mut inner.bands.lock().bands[0].state, s);
        let was = set(BandState::Victim);
        assert!(
            !admits(WriteClass::Delete),
            "a delete took the band a GC pass is moving into"
        );
        assert!(admits(WriteClass::Gc), "the pass's own moves go in");
        set(was);
        inner.gc_active.store(false, SeqCst);
        assert!(admits(WriteClass::Delete), "no pass runs: a delete goes in");
        inner.bands.lock().free.extend(hidden);
        db.close().expect("close");
    }

    /// Space admission is only sound if `Cursor::place` predicts exactly what
    /// `place` does: records of every kind of size (small ones that straddle
    /// 4 KiB, ones that fill most of a segment, ones that need 2–4 slots of
    /// their own) must leave the open segment, the open band and the free list
    /// where the cursor said.
    #[test]
    fn the_cursor_predicts_placement() {
        let dev = MemDevice::new(16 << 20);
        let cfg = PoolConfig {
            format_version: Some(2),
            ..pool(&dev)
        };
        let db = Db::create(&cfg, opts()).expect("create");
        let inner = &db.engine;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut kinds = [0u32; 3];
        for i in 0..240u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = match rng % 3 {
                0 => 1 + (rng >> 8) as usize % 6000,
                1 => (16 << 10) + (rng >> 8) as usize % (16 << 10),
                _ => (32 << 10) + (rng >> 8) as usize % (72 << 10),
            };
            let value = vec![i as u8; len];
            let k = format!("k{i}");
            let rec_len = record_len(k.len(), len);
            let (mut want, free) = {
                let ws = inner.write_state.lock();
                let c = Cursor {
                    open: ws.open.as_ref().map(|o| (o.used, o.entries.len())),
                    ..inner.admission_cursor(&ws)
                };
                (c, inner.bands.lock().free_count())
            };
            want.place(&inner.layout, rec_len);
            kinds[inner
                .layout
                .own_slots(rec_len)
                .map_or(0, |k| (k - 1).min(2)) as usize] += 1;
            db.put(k.as_bytes(), &value).expect("put");
            let ws = inner.write_state.lock();
            let got = inner.admission_cursor(&ws).band_left;
            let open = ws.open.as_ref().map(|o| (o.used, o.entries.len()));
            let taken = free - inner.bands.lock().free_count();
            assert_eq!(
                (open, got, taken),
                (want.open, want.band_left, want.bands_taken),
                "record {i} of {rec_len} bytes"
            );
        }
        // Every kind of size was tried.
        assert!(kinds.iter().all(|&n| n > 20), "{kinds:?}");
        db.close().expect("close");
    }

    /// Versions 3 and 4: the cursor cannot follow marks, skips and trailers exactly,
    /// so it must never end before placement does. Batches of records of
    /// every kind of size, each admitted from the engine's admission cursor
    /// as `select` does, must end no further on than the cursor said.
    #[test]
    fn the_v3_cursor_never_ends_before_placement() {
        let dev = MemDevice::new(64 << 20);
        let db = Db::create(&pool(&dev), opts()).expect("create");
        let inner = &db.engine;
        assert_eq!(inner.layout.codec, Codec::V4);
        let spb = inner.layout.slots_per_band;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for i in 0..150u64 {
            let mut b = crate::WriteBatch::new();
            let mut lens = Vec::new();
            for j in 0..1 + next() % 40 {
                if lens.iter().sum::<usize>() > 150 << 10 {
                    break; // a group is at most half a band's payload
                }
                let r = next();
                let len = match r % 8 {
                    0 => (16 << 10) + (r >> 8) as usize % (40 << 10),
                    1..=3 => 3000 + (r >> 8) as usize % 2000,
                    _ => 1 + (r >> 8) as usize % 300,
                };
                let k = format!("k{i}-{j}");
                b.put(k.as_bytes(), &vec![1u8; len]).expect("put");
                lens.push(Codec::V4.base_len(k.len(), len));
            }
            let (mut c, free, left) = {
                let ws = inner.write_state.lock();
                let c = inner.admission_cursor(&ws);
                (c, inner.bands.lock().free_count(), c.band_left)
            };
            for &n in &lens {
                c.place(&inner.layout, n);
            }
            if c.bands_taken > free.saturating_sub(2) {
                break; // admission would refuse it
            }
            db.write(b).expect("write");
            let ws = inner.write_state.lock();
            let taken = (free - inner.bands.lock().free_count()) as u64;
            let used = taken * spb + left - inner.admission_cursor(&ws).band_left;
            let said = c.bands_taken as u64 * spb + left - c.band_left;
            assert!(
                used <= said,
                "batch {i}: {used} slots used, cursor said {said}"
            );
        }
        db.close().expect("close");
    }
}
