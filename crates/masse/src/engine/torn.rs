//! Capacity-only / scm-only recovery: was the burst before a segment torn by
//! a crash, and what follows such a tear (design.md §10.4, "A torn burst").
//!
//! Without a pad, a group commit's records are acknowledged when one sync
//! makes them all durable; a power cut before that sync may keep any subset
//! of the burst's 4 KiB blocks (design.md §10.6). Each segment header says
//! where the writer left the segment before it (`prev_end`) and, from format
//! version 5, in which band (`prev_band`). If that segment ends earlier when
//! replayed, or is missing where it must be, records of the burst never
//! reached the device: the burst was never acknowledged, and neither was
//! anything the same run wrote after it. Those segments are **voided**: not
//! applied, and erased once by the recovery that judged them
//! (`recovery::void_torn`), so that no later open judges them again after GC
//! has freed the bands that told (issue 44).
//!
//! What this file must not do is infer a tear from what GC took away:
//! * the run that follows a tear is recognised by the epoch in its segment
//!   seqs, never by a gap in record seqs (GC moves keep their old seqs);
//! * a predecessor missing because GC freed its band is recognised by the
//!   FREE header's `freed_after` (written after a sync that covered every
//!   segment up to it) or by its band's newer incarnation, never by a blank
//!   tail in some other band.

use super::scanner::Segment;
use crate::layout::Layout;

/// Epoch of a segment sequence number (`epoch << 40 | counter`).
pub(crate) fn epoch_of(seg_seq: u64) -> u64 {
    seg_seq >> 40
}

/// A segment voided as part of a torn burst: `(band, slot in band, slots)`.
pub(crate) type Voided = (u32, u64, u64);

/// Where the segment replayed last left the writer.
#[derive(Clone, Copy)]
struct LastSeg {
    seq: u64,
    /// End of its records.
    end: usize,
    band: u32,
    /// The slot after it.
    next_slot: u64,
}

/// What the band headers and the replay plan say, as the judgement needs it.
pub(crate) struct BandFacts {
    /// Per band, the `first_seq` of the incarnation in use (`None` = free).
    pub first: Vec<Option<u64>>,
    /// Per band, the slot replay starts at (past the checkpoint's slots).
    pub start_slot: Vec<u64>,
    /// The newest `freed_after` of any FREE band header.
    pub freed_max: u64,
}

/// The torn-burst judgement, fed the segments and gaps of replay in write order.
pub(crate) struct Tears<'l> {
    layout: &'l Layout,
    enabled: bool,
    facts: BandFacts,
    /// Per band, the newest segment replay found in it.
    found_last: Vec<Option<u64>>,
    last: Option<LastSeg>,
    /// A blank gap since the last segment (any band; the rule of format
    /// versions ≤ 4) and since the last segment or start of this band.
    blank_since: bool,
    blank_in_band: bool,
    /// The epoch whose segments are being voided, from a tear on.
    cutting: Option<u64>,
    /// Segments voided, in replay order.
    pub voided: Vec<Voided>,
    /// Records in them.
    pub records: u64,
}

impl<'l> Tears<'l> {
    /// `enabled`: the pool has no pad (tiered pools re-apply the pad instead).
    pub fn new(layout: &'l Layout, enabled: bool, facts: BandFacts) -> Tears<'l> {
        let nb = facts.first.len();
        Tears {
            layout,
            enabled,
            facts,
            found_last: vec![None; nb],
            last: None,
            blank_since: false,
            blank_in_band: false,
            cutting: None,
            voided: Vec::new(),
            records: 0,
        }
    }

    /// Replay moves to another band.
    pub fn band_start(&mut self) {
        self.blank_in_band = false;
    }

    /// Replay met unreadable slots; `blank` if they were never written.
    pub fn gap(&mut self, blank: bool) {
        self.blank_since |= blank;
        self.blank_in_band |= blank;
    }

    /// Judge segment `s` of `band`. Returns `Some(first)` if it is voided,
    /// `first` when a tear was found just before it (the caller then drops the
    /// group it has pending: its end was in the torn part).
    pub fn segment(&mut self, band: u32, s: &Segment<'_>) -> Option<bool> {
        if self.cutting.is_some_and(|ep| ep != epoch_of(s.seq)) {
            // The run after the torn one: nothing it wrote is part of the tear.
            self.cutting = None;
        }
        let first = self.cutting.is_none() && self.torn_before(band, s);
        if first {
            self.cutting = Some(epoch_of(s.seq));
        }
        self.last = Some(LastSeg {
            seq: s.seq,
            end: s.used,
            band,
            next_slot: s.slot + s.nslots,
        });
        self.found_last[band as usize] = Some(s.seq);
        self.blank_since = false;
        self.blank_in_band = false;
        self.cutting?;
        self.voided.push((band, s.slot, s.nslots));
        self.records += s.entries.len() as u64;
        Some(first)
    }

    /// Did a crash tear away records written just before segment `s`?
    fn torn_before(&self, band: u32, s: &Segment<'_>) -> bool {
        if !self.enabled || s.prev_end == 0 {
            return false;
        }
        match self.last {
            Some(l) if l.seq + 1 == s.seq => l.end < s.prev_end as usize,
            // A FREE header written after a sync that covered `s`: the burst
            // that opened `s` was durable (its predecessor went to GC).
            _ if self.facts.freed_max >= s.seq => false,
            _ => match s.prev_band {
                Some(p) => self.predecessor_lost(p, band, s),
                None => self.legacy_torn(band, s),
            },
        }
    }

    /// Segment `s.seq − 1`, in band `p`, was not replayed just before `s`.
    fn predecessor_lost(&self, p: u32, band: u32, s: &Segment<'_>) -> bool {
        let pi = p as usize;
        if p == band {
            // It was in this band's slots before `s`: they were read, and a
            // blank one is a write torn away (damage is reported as damage).
            return self.blank_in_band;
        }
        match self.facts.first.get(pi).copied().flatten() {
            // The band holds a later incarnation: GC freed the one that held
            // the predecessor, after the sync that made it durable.
            Some(f) if f >= s.seq => false,
            // Same incarnation: the predecessor was its last segment. Replay
            // found others after it was planned to start, so it is gone.
            Some(_) if self.found_last[pi].is_some() => true,
            // Nothing found: if the predecessor could lie at or after the
            // slot replay started at (past the checkpoint's), it was written
            // there and is gone; otherwise the checkpoint covered it.
            Some(_) => {
                let need = self.layout.slots_of_end(s.prev_end as usize);
                self.facts.start_slot[pi] + need <= self.layout.slots_per_band
            }
            // Free, without a `freed_after` covering `s` (checked before):
            // the header that opened the band for the predecessor never landed.
            None => true,
        }
    }

    /// Segments older builds wrote name no band for their predecessor: the
    /// inference those builds made. A band GC freed can fool it, but only
    /// until this build frees a band: its `freed_after` covers every older
    /// segment, and the first open after their crash judged (and voided) them.
    fn legacy_torn(&self, band: u32, s: &Segment<'_>) -> bool {
        match self.last {
            Some(l) if l.band == band => self.blank_since,
            // The writer fills a band before it opens the next one: if the
            // first missing segment fit after the last one found, it was
            // written there and is gone (the band's tail was blank).
            Some(l) if l.seq < s.seq => {
                let lay = self.layout;
                let need = match l.seq + 2 == s.seq {
                    true => lay.slots_of_end(s.prev_end as usize),
                    false => 1,
                };
                l.next_slot + need <= lay.slots_per_band
            }
            Some(_) => false,
            None => self.blank_since,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::scanner::Source;
    use crate::format::{Codec, Geometry, Mode};

    const E: u64 = 7 << 40; // segments of epoch 7

    fn layout() -> Layout {
        Layout::new(
            Geometry {
                mode: Mode::CapacityOnly,
                segment_size: 32 << 10,
                band_size: 4096 + 8 * (32 << 10),
                band_header_size: 4096,
                iu: 4096,
                bands_per_device: vec![8],
                pad_offset: 0,
                pad_size: 0,
                ckpt_offset: 0,
                ckpt_slot_size: 0,
                data_start: 1 << 20,
                has_fast: false,
            },
            Codec::V4,
        )
    }

    fn seg(seq: u64, slot: u64, prev: Option<(u32, u32)>) -> Segment<'static> {
        Segment {
            slot,
            nslots: 1,
            seq,
            entries: Vec::new(),
            used: 1000,
            source: Source::Summary,
            prev_end: prev.map_or(0, |p| p.1),
            prev_band: prev.map(|p| p.0),
            data: &[],
        }
    }

    fn tears(l: &Layout, first: Vec<Option<u64>>, freed_max: u64) -> Tears<'_> {
        let n = first.len();
        let facts = BandFacts {
            first,
            start_slot: vec![0; n],
            freed_max,
        };
        Tears::new(l, true, facts)
    }

    #[test]
    fn a_shorter_predecessor_is_a_tear_and_voids_the_rest_of_its_epoch() {
        let l = layout();
        let mut t = tears(&l, vec![Some(E); 2], 0);
        assert_eq!(t.segment(0, &seg(E, 0, None)), None);
        assert_eq!(t.segment(0, &seg(E + 1, 1, Some((0, 2000)))), Some(true));
        assert_eq!(t.segment(1, &seg(E + 2, 0, Some((0, 1000)))), Some(false));
        // The next run (another epoch) is not part of the tear.
        assert_eq!(t.segment(1, &seg((8 << 40) + 5, 1, None)), None);
        assert_eq!(t.voided, vec![(0, 1, 1), (1, 0, 1)]);
    }

    #[test]
    fn a_predecessor_in_a_band_gc_freed_is_no_tear() {
        let l = layout();
        // Band 1 held E+1 and is free; a FREE stamp covers E+2.
        let mut t = tears(&l, vec![Some(E), None, Some(E + 2)], E + 2);
        t.segment(0, &seg(E, 0, None));
        assert_eq!(t.segment(2, &seg(E + 2, 0, Some((1, 1000)))), None);
        // Without the stamp, a free band means its IN_USE header never landed.
        let mut t = tears(&l, vec![Some(E), None, Some(E + 2)], E + 1);
        t.segment(0, &seg(E, 0, None));
        assert_eq!(t.segment(2, &seg(E + 2, 0, Some((1, 1000)))), Some(true));
    }

    #[test]
    fn a_predecessor_band_reused_since_is_no_tear() {
        let l = layout();
        let mut t = tears(&l, vec![Some(E), Some(E + 9), Some(E + 2)], 0);
        t.segment(0, &seg(E, 0, None));
        assert_eq!(t.segment(2, &seg(E + 2, 0, Some((1, 1000)))), None);
    }

    #[test]
    fn a_predecessor_missing_from_its_incarnation_is_a_tear() {
        let l = layout();
        // Band 0 holds E..; E+1 should have followed E there.
        let mut t = tears(&l, vec![Some(E), Some(E + 2)], 0);
        t.segment(0, &seg(E, 0, None));
        assert_eq!(t.segment(1, &seg(E + 2, 0, Some((0, 1000)))), Some(true));
        // In the same band: a blank slot before it is a tear, damage is not.
        let mut t = tears(&l, vec![Some(E)], 0);
        t.segment(0, &seg(E, 0, None));
        t.gap(false);
        assert_eq!(t.segment(0, &seg(E + 2, 2, Some((0, 1000)))), None);
        let mut t = tears(&l, vec![Some(E)], 0);
        t.segment(0, &seg(E, 0, None));
        t.gap(true);
        assert_eq!(t.segment(0, &seg(E + 2, 2, Some((0, 1000)))), Some(true));
    }

    #[test]
    fn pools_with_a_pad_are_never_judged() {
        let l = layout();
        let facts = BandFacts {
            first: vec![Some(E)],
            start_slot: vec![0],
            freed_max: 0,
        };
        let mut t = Tears::new(&l, false, facts);
        t.segment(0, &seg(E, 0, None));
        assert_eq!(t.segment(0, &seg(E + 1, 1, Some((0, 2000)))), None);
    }
}
