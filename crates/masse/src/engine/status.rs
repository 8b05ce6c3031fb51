//! The Segment Status Table (paper §2.6): live and dead bytes per segment and
//! per band, which GC's victim choice and the space figures read.
//!
//! Per slot: live bytes and bytes of records placed (death size = placed −
//! live). Per band: live bytes, live records, the band payload those records
//! would take if rewritten, the padding and records placed since the band was
//! opened (its packing efficiency) and the oldest record sequence number it
//! holds. All counters are relaxed atomics: each is exact once the group
//! commit that changed it has finished, which is all its readers need.

use super::band::{BandInfo, BandState};
use crate::device::round_up;
use crate::format::Loc;
use crate::layout::{Layout, MAX_STRADDLE_PAD};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

pub(crate) struct StatusTable {
    layout: Layout,
    slot_live: Box<[AtomicU32]>,
    /// Bytes of records placed in each slot (8-aligned lengths).
    slot_placed: Box<[AtomicU32]>,
    band_live: Box<[AtomicU64]>,
    /// Live records per band (their summary entries cost space too).
    band_live_n: Box<[AtomicU32]>,
    /// Band payload the live records of each band would take if rewritten
    /// (`Layout::room_cost`): bytes undercount records that need a segment, or
    /// most of one, to themselves.
    band_live_room: Box<[AtomicU64]>,
    /// Padding and records placed in each band since it was opened.
    band_pad: Box<[AtomicU64]>,
    band_nrec: Box<[AtomicU32]>,
    band_min_seq: Box<[AtomicU64]>,
}

fn atomics32(n: usize) -> Box<[AtomicU32]> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

fn atomics64(n: usize, v: u64) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(v)).collect()
}

impl StatusTable {
    pub fn new(layout: &Layout) -> StatusTable {
        let slots = layout.total_slots() as usize;
        let bands = layout.bands as usize;
        StatusTable {
            layout: layout.clone(),
            slot_live: atomics32(slots),
            slot_placed: atomics32(slots),
            band_live: atomics64(bands, 0),
            band_live_n: atomics32(bands),
            band_live_room: atomics64(bands, 0),
            band_pad: atomics64(bands, 0),
            band_nrec: atomics32(bands),
            band_min_seq: atomics64(bands, u64::MAX),
        }
    }

    /// The record at `l` became live (the index points at it).
    pub fn add_live(&self, l: Loc) {
        let b = self.layout.band_of_slot(l.slot()) as usize;
        self.slot_live[l.slot() as usize].fetch_add(l.len8(), Relaxed);
        self.band_live[b].fetch_add(l.len8() as u64, Relaxed);
        self.band_live_n[b].fetch_add(1, Relaxed);
        self.band_live_room[b].fetch_add(self.layout.room_cost(l.len8()), Relaxed);
    }

    /// The record at `l` died (overwritten, deleted or moved).
    pub fn sub_live(&self, l: Loc) {
        let b = self.layout.band_of_slot(l.slot()) as usize;
        self.slot_live[l.slot() as usize].fetch_sub(l.len8(), Relaxed);
        self.band_live[b].fetch_sub(l.len8() as u64, Relaxed);
        self.band_live_n[b].fetch_sub(1, Relaxed);
        self.band_live_room[b].fetch_sub(self.layout.room_cost(l.len8()), Relaxed);
    }

    /// A band was opened: it starts with nothing placed.
    pub fn reset_band(&self, band: u32) {
        let b = band as usize;
        self.band_min_seq[b].store(u64::MAX, Relaxed);
        self.band_pad[b].store(0, Relaxed);
        self.band_nrec[b].store(0, Relaxed);
        let first = self.layout.first_slot(band) as usize;
        for u in &self.slot_placed[first..first + self.layout.slots_per_band as usize] {
            u.store(0, Relaxed);
        }
    }

    /// A record of `len8` bytes was placed in `slot` at `off`, after `pad` bytes
    /// of padding (to avoid straddling a 4 KiB block).
    pub fn placed(&self, band: u32, slot: u64, len8: u32, pad: u64) {
        self.band_pad[band as usize].fetch_add(pad, Relaxed);
        self.band_nrec[band as usize].fetch_add(1, Relaxed);
        self.slot_placed[slot as usize].fetch_add(len8, Relaxed);
    }

    /// Set the bytes placed in a slot (a segment of its own, or one replayed at open).
    pub fn set_placed(&self, slot: u64, bytes: u32) {
        self.slot_placed[slot as usize].store(bytes, Relaxed);
    }

    /// Segments known only from a checkpoint: their live records count as placed,
    /// so records that die from now on show up as death size.
    pub fn placed_from_live(&self) {
        for (placed, live) in self.slot_placed.iter().zip(self.slot_live.iter()) {
            if placed.load(Relaxed) == 0 {
                placed.store(live.load(Relaxed), Relaxed);
            }
        }
    }

    /// Band `band` holds a record with sequence number `seq`.
    pub fn saw_seq(&self, band: u32, seq: u64) {
        self.band_min_seq[band as usize].fetch_min(seq, Relaxed);
    }

    /// Oldest record sequence number band `band` may hold.
    pub fn min_seq(&self, band: usize) -> u64 {
        self.band_min_seq[band].load(Relaxed)
    }

    pub fn set_min_seq(&self, band: usize, seq: u64) {
        self.band_min_seq[band].store(seq, Relaxed);
    }

    /// Live bytes in band `band`.
    pub fn band_live(&self, band: usize) -> u64 {
        self.band_live[band].load(Relaxed)
    }

    /// Live bytes in the pool.
    pub fn live_total(&self) -> u64 {
        self.band_live.iter().map(|a| a.load(Relaxed)).sum()
    }

    /// Bytes a band's live records would occupy if rewritten: their room cost
    /// (records, summary entries, segment headers/footers and the segment and
    /// band ends they leave unusable), plus the padding this band's writes
    /// actually needed per record.
    pub fn band_cost(&self, band: usize) -> u64 {
        let live = self.band_live[band].load(Relaxed);
        let n = self.band_live_n[band].load(Relaxed) as u64;
        if n == 0 {
            return 0;
        }
        let placed = self.band_nrec[band].load(Relaxed) as u64;
        let pad_per_rec = self.band_pad[band]
            .load(Relaxed)
            .checked_div(placed)
            // Unknown after a restart: the padding of records of the average
            // size placed in a row (exact for fixed sizes), and at least twice
            // the expectation over random offsets for mixed sizes — a record of
            // L ≤ 4 KiB crosses a block boundary with odds L/4096, the gap g
            // before it is ~U(0, L), and it is padded only when g ≤ 512, so
            // E = min(L, 512)² / 8192. (Half the worst case, L/2, made a band
            // of 248-byte records 30 % dead look 98 % full after a restart.)
            .unwrap_or_else(|| {
                let avg = live / n;
                let l = avg.min(MAX_STRADDLE_PAD as u64);
                let in_a_row = self.layout.straddle_pad(round_up(avg as usize, 8));
                in_a_row.max(l * l / 4096)
            });
        self.band_live_room[band].load(Relaxed) + n * pad_per_rec + live / 64
    }

    /// The table as [`Db::band_status`](crate::Db::band_status) reports it.
    /// `open` holds the open segments' slots and the room each has left.
    pub fn rows(&self, bands: &[BandInfo], open: &[(u64, u32)]) -> Vec<BandStatus> {
        bands
            .iter()
            .enumerate()
            .map(|(b, info)| {
                let segments = self.segment_rows(b as u32, info, open);
                BandStatus {
                    band: b as u32,
                    state: info.state.name(),
                    first_seq: info.first_seq,
                    written_slots: info.written_slots,
                    live_bytes: self.band_live[b].load(Relaxed),
                    invalid_bytes: segments.iter().map(|s| s.death_size as u64).sum(),
                    segments,
                }
            })
            .collect()
    }

    fn segment_rows(&self, b: u32, info: &BandInfo, open: &[(u64, u32)]) -> Vec<SegmentStatus> {
        let l = &self.layout;
        let first = l.first_slot(b);
        (0..l.slots_per_band)
            .map(|i| {
                let slot = first + i;
                let placed = self.slot_placed[slot as usize].load(Relaxed);
                let live = self.slot_live[slot as usize].load(Relaxed);
                let (use_state, free_size) = match open.iter().find(|o| o.0 == slot) {
                    Some(&(_, free)) => ("open", free),
                    _ if info.state != BandState::Free
                        && (i < info.written_slots || placed > 0) =>
                    {
                        ("used", 0)
                    }
                    _ => ("free", l.seg as u32),
                };
                SegmentStatus {
                    slot,
                    use_state,
                    free_size,
                    death_size: placed.saturating_sub(live),
                }
            })
            .collect()
    }
}

/// One segment's row of the Segment Status Table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentStatus {
    /// Global slot number.
    pub slot: u64,
    /// "free", "open" (receiving records) or "used".
    pub use_state: &'static str,
    /// Bytes still free for records (0 once sealed).
    pub free_size: u32,
    /// Bytes of records that were overwritten or deleted.
    pub death_size: u32,
}

/// One band's row of the Segment Status Table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BandStatus {
    /// Band number.
    pub band: u32,
    /// "free", "open", "sealed", "gc" (being emptied) or "pinned" (holds an unreadable record).
    pub state: &'static str,
    /// Sequence number of the band's first segment.
    pub first_seq: u64,
    /// Segments durably written.
    pub written_slots: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Bytes of dead records (the sum of the segments' death sizes).
    pub invalid_bytes: u64,
    /// Per-segment rows.
    pub segments: Vec<SegmentStatus>,
}
