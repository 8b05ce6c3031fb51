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
