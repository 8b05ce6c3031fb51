//! Updates written over the old record: scm-only pools on the device (§4.9;
//! the paper's 3D XPoint rule: write in place, 4 KiB-aligned), tiered pools
//! in a segment still open in DRAM (absorbed overwrites, §4.10).
//!
//! scm-only: a lone put that keeps its record's exact length rewrites the record's 4 KiB
//! page through the single writer and syncs before the ack. The record keeps
//! the old one's segment tag, sequence number and flags (version 3: its seq
//! trailer), so the segment's
//! summary still describes it and nothing else (index, space accounting,
//! checkpoints, recovery) changes. A single 4 KiB page write is atomic on the
//! media this mode is for (power-loss protected SCM), so a crash leaves the
//! old or the new record, whole. Readers retry behind the `inplace_gen`
//! seqlock when a read overlapped an update.

use super::band::BandState;
use super::request::{Outcome, PendingRecord, Req};
use super::segment::{SegmentBuf, Stream, WriteState};
use super::state::Engine;
use super::writer_jobs::WriterJob;
use crate::device::{round_down64, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::*;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

/// Page images to write: `(device, offset, page)`.
pub(super) type Pages = Vec<(usize, u64, AlignedBuf)>;

impl Engine {
    /// If `p`'s key has a live record of exactly the new record's length on the
    /// device (not in DRAM, not in a band GC is emptying) that lies within one
    /// 4 KiB page, patch the new record into that page's image in `pages`
    /// (reading the page once) and return true. Called under the write state,
    /// so GC cannot pick the band meanwhile.
    pub(super) fn try_in_place(&self, p: &PendingRecord, pages: &mut Pages) -> Result<bool> {
        let Some((dev, abs)) = self.in_place_target(p) else {
            return Ok(false);
        };
        let page = round_down64(abs, 4096);
        let i = match pages.iter().position(|(d, o, _)| *d == dev && *o == page) {
            Some(i) => i,
            None => {
                let mut b = AlignedBuf::new(4096);
                let d = &self.pool.caps[dev];
                d.read_at(&mut b, page).map_err(|e| {
                    Error::io(&d.info().path, "reading a page to update in place", e)
                })?;
                pages.push((dev, page, b));
                pages.len() - 1
            }
        };
        let at = (abs - page) as usize;
        let img = &mut pages[i].2;
        // A record that runs past the page does not decode from it.
        let Some(bytes) = self.rewrite_like(&img[at..], p) else {
            return Ok(false);
        };
        img[at..at + bytes.len()].copy_from_slice(&bytes);
        Ok(true)
    }

    /// `p` encoded as the live record `old` of the same key and exact length
    /// would be, keeping its tag, seq and flags; `None` if `old` is not a
    /// record we can vouch for (append instead), a delete, another key's, or
    /// of another length.
    fn rewrite_like(&self, old: &[u8], p: &PendingRecord) -> Option<Vec<u8>> {
        let new = match self.layout.codec {
            Codec::V2 => {
                let (h, key, _) = decode_record(old).ok()?;
                let ok = h.flags & REC_TOMBSTONE == 0 && key == p.key();
                ok.then(|| Codec::encode_v2(h.seg_tag, h.seq, h.flags, p.key(), p.value()))?
            }
            Codec::V3 | Codec::V4 => {
                let r = v3::decode_v3_record(old).ok()?;
                let ok = !r.tombstone && r.key == p.key();
                ok.then(|| Codec::encode_v3(false, p.key(), p.value(), r.trailer))?
            }
        };
        let old_len = self.layout.codec.decode(old).ok()?.len;
        (new.len() == old_len).then_some(new)
    }

    /// Tiered pools (`Options::absorb_overwrites`): if `p`'s key has a live
    /// record of exactly the new record's length in stream `s`'s open
    /// segment (or, for `User`, the held one: closed last, not yet handed
    /// to the writer), the segment, the record's location and `p` encoded over it
    /// (keeping its tag, seq and flags, as `rewrite_like`), for the leader
    /// to copy over the old record once the group is on the pad.
    ///
    /// The old record is the key's newest copy (the index names it), so
    /// the new version takes the newest position of all the key's copies,
    /// as an appended record would (design.md §10.5). The caller makes sure
    /// no earlier record of the group wrote the key, and that `s` is the
    /// stream the record was chosen for, so a later record of the group
    /// for the key follows it there (stream.rs, rule 1).
    pub(super) fn absorb_target(
        &self,
        ws: &WriteState,
        s: Stream,
        p: &PendingRecord,
    ) -> Option<(Arc<SegmentBuf>, Loc, Vec<u8>)> {
        let loc = self.same_size_live(p)?;
        let o = ws.absorbing(s, loc.slot())?;
        let off = loc.offset() as usize;
        let end = (off + loc.len8() as usize).min(o.used);
        let bytes = {
            let d = o.buf.data.read();
            self.rewrite_like(d.get(off..end)?, p)?
        };
        Some((Arc::clone(&o.buf), loc, bytes))
    }

    /// Where `p`'s key's live record is, if it is a put whose length may be
    /// the new record's (`rewrite_like` compares the exact lengths).
    fn same_size_live(&self, p: &PendingRecord) -> Option<Loc> {
        let loc = Loc(self.index.get(p.digest)?);
        let codec = self.layout.codec;
        let len = p.len(codec);
        let may_fit =
            len <= loc.len8() as usize && len + codec.max_extra() >= loc.len_min() as usize;
        (!loc.is_tombstone() && may_fit).then_some(loc)
    }

    /// The device and byte offset of `p`'s live record, if it may be overwritten:
    /// a length that may be the same (`try_in_place` compares the old
    /// record's exact length), on the device, in a band GC is not emptying.
    fn in_place_target(&self, p: &PendingRecord) -> Option<(usize, u64)> {
        let loc = self.same_size_live(p)?;
        if self.segments.contains(loc.slot()) {
            return None;
        }
        let band = self.layout.band_of_slot(loc.slot());
        if !matches!(
            self.bands.lock().bands[band as usize].state,
            BandState::Open | BandState::Sealed
        ) {
            return None;
        }
        let (dev, base) = self.layout.slot_addr(loc.slot());
        Some((dev, base + loc.offset() as u64))
    }

    /// Write the patched pages through the single writer, like every capacity
    /// write, durable (synced) before the puts in `reqs` are acknowledged.
    pub(super) fn write_in_place(&self, pages: Pages, reqs: &[&Arc<Req>]) -> Result<()> {
        let n = pages.len() as u64;
        self.inplace_gen.fetch_add(1, SeqCst);
        let res = self
            .send(WriterJob::InPlace(pages))
            .and_then(|_| self.writer_barrier());
        self.inplace_gen.fetch_add(1, SeqCst);
        res?;
        let c = &self.counters;
        c.inplace_writes.fetch_add(reqs.len() as u64, Relaxed);
        c.inplace_bytes.fetch_add(n * 4096, Relaxed);
        c.commit_records.fetch_add(reqs.len() as u64, Relaxed);
        for r in reqs {
            r.complete(Outcome::Done(0));
        }
        Ok(())
    }
}
