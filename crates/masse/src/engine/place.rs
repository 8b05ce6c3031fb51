//! Placement: where a record goes in the log (paper §2.4).
//!
//! Records fill the open segment one after another; a record that does not
//! fit closes it and opens the next; a record larger than a segment gets a
//! segment of several slots to itself; a band with too few slots left is
//! sealed and the next free band opened (its header queued for the writer).
//! `Cursor::place` (layout.rs) follows the same steps for space admission.

use super::segment::{OpenSegment, SegmentBuf, WriteState};
use super::state::Engine;
use super::writer_jobs::WriterJob;
use crate::device::round_up;
use crate::error::{Error, Result};
use crate::format::v3seg::{V3Cursor, V3Slot};
use crate::format::{BandHeader, Loc, BAND_IN_USE, SEG_FOOTER, SEG_HEADER, SUMMARY_ENTRY};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

impl Engine {
    /// Find room for a record of `len` bytes; returns the segment, the offset,
    /// and the band payload the record used up: its room in the segment, the
    /// header and footer of a segment it opened, and what it left unusable (the
    /// end of a segment it did not fit in, the slots of a band too few for it).
    /// Segments it opened are added to `new_segs`.
    pub(super) fn place(
        &self,
        ws: &mut WriteState,
        len: usize,
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegmentBuf>, usize, u64)> {
        match self.layout.own_slots(len) {
            None => self.place_shared(ws, len, new_segs),
            Some(k) => self.place_alone(ws, len, k, new_segs),
        }
    }

    /// A record that shares a one-slot segment with others.
    fn place_shared(
        &self,
        ws: &mut WriteState,
        len: usize,
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegmentBuf>, usize, u64)> {
        let seg = self.layout.seg as usize;
        let len8 = round_up(len, 8);
        let mut used_up = 0u64;
        loop {
            let o = self.open_segment(ws, new_segs, &mut used_up)?;
            if let Some(off) = self.layout.fit(seg, o.used, o.entries.len(), len) {
                let pad = (off - round_up(o.used, 8)) as u64;
                self.status.placed(o.buf.band, o.buf.slot, len8 as u32, pad);
                used_up += (off + len8 + SUMMARY_ENTRY).saturating_sub(o.used) as u64;
                o.used = off + len8;
                return Ok((o.buf.clone(), off, used_up));
            }
            self.close_open(ws, &mut used_up);
        }
    }

    /// One record larger than a segment: a segment of `k` slots of its own.
    fn place_alone(
        &self,
        ws: &mut WriteState,
        len: usize,
        k: u64,
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegmentBuf>, usize, u64)> {
        let len8 = round_up(len, 8);
        let mut used_up = 0u64;
        let mut o = self.own_segment(ws, k, new_segs, &mut used_up)?;
        o.used = SEG_HEADER + len8;
        self.status.set_placed(o.buf.slot, len8 as u32);
        let buf = o.buf.clone();
        ws.close_segment(o);
        Ok((buf, SEG_HEADER, used_up))
    }

    /// Version 3: find room for a record of `base` bytes before its trailer
    /// ([`crate::format::Codec::base_len`]) with sequence number `seq`;
    /// returns the segment, where and how the record goes (mark, offset,
    /// trailer, exact length) and the band payload it used up, as `place`.
    /// A record goes to a segment of its own when it would not fit an empty
    /// one as its first record (after a mark, with its absolute seq).
    pub(super) fn place_v3(
        &self,
        ws: &mut WriteState,
        rec: (usize, u64, bool, bool),
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegmentBuf>, V3Slot, u64)> {
        let (base, seq, more, tomb) = rec;
        let first = V3Cursor::new(self.layout.codec.seq_rule()).slot(base, seq, more, tomb);
        let Some(k) = self.layout.own_slots(first.len) else {
            return self.place_shared_v3(ws, rec, new_segs);
        };
        let mut used_up = 0u64;
        let mut o = self.own_segment(ws, k, new_segs, &mut used_up)?;
        o.v3.advance(&first, seq);
        o.used = o.v3.end;
        self.status
            .set_placed(o.buf.slot, Loc::len8_of(first.len) as u32);
        let buf = o.buf.clone();
        ws.close_segment(o);
        Ok((buf, first, used_up))
    }

    /// Version 3: a record that shares a one-slot segment with others.
    fn place_shared_v3(
        &self,
        ws: &mut WriteState,
        (base, seq, more, tomb): (usize, u64, bool, bool),
        new_segs: &mut Vec<u64>,
    ) -> Result<(Arc<SegmentBuf>, V3Slot, u64)> {
        let seg = self.layout.seg as usize;
        let mut used_up = 0u64;
        loop {
            let o = self.open_segment(ws, new_segs, &mut used_up)?;
            let s = o.v3.slot(base, seq, more, tomb);
            if o.v3.need(&s) <= seg {
                let gap = (s.spot.record - o.used) as u64;
                let len8 = Loc::len8_of(s.len) as u32;
                self.status.placed(o.buf.band, o.buf.slot, len8, gap);
                used_up += gap + (s.len + s.entry_len) as u64;
                o.v3.advance(&s, seq);
                o.used = o.v3.end;
                return Ok((o.buf.clone(), s, used_up));
            }
            self.close_open(ws, &mut used_up);
        }
    }

    /// The open one-slot segment; if there is none, a new one (its header and
    /// footer, and any band tail it skips, added to `used_up`).
    fn open_segment<'w>(
        &self,
        ws: &'w mut WriteState,
        new_segs: &mut Vec<u64>,
        used_up: &mut u64,
    ) -> Result<&'w mut OpenSegment> {
        if ws.open.is_none() {
            *used_up += self.band_tail_skipped(ws, 1) + (SEG_HEADER + SEG_FOOTER) as u64;
            let o = self.new_segment(ws, 1)?;
            new_segs.push(o.buf.seq);
            ws.open = Some(o);
        }
        ws.open
            .as_mut()
            .ok_or_else(|| Error::Corruption("internal: no open segment".into()))
    }

    /// A new segment of `k` slots for one record; the open segment is closed
    /// first (its unused room, any band tail skipped and the `k` slots added
    /// to `used_up`).
    fn own_segment(
        &self,
        ws: &mut WriteState,
        k: u64,
        new_segs: &mut Vec<u64>,
        used_up: &mut u64,
    ) -> Result<OpenSegment> {
        self.close_open(ws, used_up);
        *used_up += self.band_tail_skipped(ws, k) + k * self.layout.seg;
        let o = self.new_segment(ws, k)?;
        new_segs.push(o.buf.seq);
        Ok(o)
    }

    /// The open segment takes no more records: queue it for sealing (the
    /// room it leaves unused added to `used_up`).
    fn close_open(&self, ws: &mut WriteState, used_up: &mut u64) {
        if let Some(full) = ws.open.take() {
            *used_up += full.seal_waste(self.layout.seg as usize);
            ws.close_segment(full);
        }
    }

    /// Bytes of the open band that `new_segment(ws, k)` will leave unused.
    fn band_tail_skipped(&self, ws: &WriteState, k: u64) -> u64 {
        let left = self.layout.slots_per_band - ws.next_sib;
        match ws.cur_band {
            Some(_) if left < k => left * self.layout.seg,
            _ => 0,
        }
    }

    /// Seal the current band (if any) and open a free one for the writer,
    /// queueing its header.
    fn open_band(&self, ws: &mut WriteState) -> Result<()> {
        let b = {
            let mut bt = self.bands.lock();
            if let Some(b) = ws.cur_band.take() {
                bt.seal(b);
            }
            bt.open_next(ws.next_seg)
                .ok_or_else(|| Error::NoSpace("no free band (internal reserve exhausted)".into()))?
        };
        self.status.reset_band(b);
        ws.cur_band = Some(b);
        ws.next_sib = 0;
        ws.band_first = ws.next_seg;
        let hdr = BandHeader {
            state: BAND_IN_USE,
            pool_tag: self.tag,
            band: b,
            first_seq: ws.next_seg,
            freed_after: 0,
        };
        self.send(WriterJob::BandHeader {
            band: b,
            hdr,
            free: None,
        })
    }

    /// Allocate `k` consecutive slots in the open band (opening a new band if
    /// needed) for a new segment.
    fn new_segment(&self, ws: &mut WriteState, k: u64) -> Result<OpenSegment> {
        if k > self.layout.slots_per_band {
            return Err(Error::InvalidConfig("record larger than a band".into()));
        }
        let need_band = match ws.cur_band {
            None => true,
            Some(_) => ws.next_sib + k > self.layout.slots_per_band,
        };
        if need_band {
            self.open_band(ws)?;
        }
        let band = ws
            .cur_band
            .ok_or_else(|| Error::Corruption("internal: no open band".into()))?;
        let slot = self.layout.first_slot(band) + ws.next_sib;
        ws.next_sib += k;
        let seq = ws.next_seg;
        ws.next_seg += 1;
        let seg = self.layout.seg as usize;
        let buf = SegmentBuf::new(slot, k as u32, seg, seq, band, self.tag, ws.prev_end(seq));
        let buf = Arc::new(buf);
        self.bands.lock().bands[band as usize].inflight += 1;
        self.segments.insert(buf.clone());
        self.next_seg_hint.store(ws.next_seg, SeqCst);
        Ok(OpenSegment::new(buf, self.layout.codec))
    }
}
