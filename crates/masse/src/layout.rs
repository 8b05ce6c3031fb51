//! Address arithmetic: bands, slots and where they live on the capacity devices;
//! and the placement rule (where a record goes in the open segment, when it
//! needs a segment or a band of its own), kept here in one place because both
//! placement and space admission must follow it exactly.

use crate::device::round_up;
use crate::format::v3::{MARK_LEN, MAX_SKIP_GAP, V3_FOOTER, V3_HEADER};
use crate::format::v3seg::{V3Cursor, V3_MAX_ENTRY, V3_MAX_TRAILER};
use crate::format::{Codec, Geometry, Loc, SEG_FOOTER, SEG_HEADER, SUMMARY_ENTRY};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Most padding a small record may leave behind to avoid straddling a 4 KiB block.
pub(crate) const MAX_STRADDLE_PAD: usize = 512;

/// Derived geometry, cheap to query on the hot path.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub geo: Geometry,
    /// The pool's record format, which the placement rule follows.
    pub codec: Codec,
    /// Segment (slot) size.
    pub seg: u64,
    /// Slots in each band.
    pub slots_per_band: u64,
    /// Bands in the pool.
    pub bands: u32,
    /// First global band number of each capacity device.
    dev_band_start: Vec<u32>,
    /// Version 3: how many records of a length (by [`Loc`] length code) one
    /// segment holds, found by placing them the first time it is asked (0:
    /// not yet); marks and skips make a formula inexact for some sizes.
    v3_fill: Arc<Vec<AtomicU32>>,
}

impl Layout {
    pub fn new(geo: Geometry, codec: Codec) -> Layout {
        let seg = geo.segment_size as u64;
        let slots_per_band = (geo.band_size - geo.band_header_size as u64) / seg;
        let mut dev_band_start = Vec::with_capacity(geo.bands_per_device.len());
        let mut total = 0u32;
        for &n in &geo.bands_per_device {
            dev_band_start.push(total);
            total += n;
        }
        Layout {
            geo,
            codec,
            seg,
            slots_per_band,
            bands: total,
            dev_band_start,
            v3_fill: Arc::new((0..4096).map(|_| AtomicU32::new(0)).collect()),
        }
    }

    /// Total slots in the pool.
    pub fn total_slots(&self) -> u64 {
        self.bands as u64 * self.slots_per_band
    }

    pub fn band_of_slot(&self, slot: u64) -> u32 {
        (slot / self.slots_per_band) as u32
    }

    pub fn slot_in_band(&self, slot: u64) -> u64 {
        slot % self.slots_per_band
    }

    pub fn first_slot(&self, band: u32) -> u64 {
        band as u64 * self.slots_per_band
    }

    /// (capacity device index, byte offset of the band header).
    pub fn band_addr(&self, band: u32) -> (usize, u64) {
        let dev = match self.dev_band_start.binary_search(&band) {
            Ok(i) => {
                // Devices with zero bands share a start; take the last one starting here.
                let mut j = i;
                while j + 1 < self.dev_band_start.len() && self.dev_band_start[j + 1] == band {
                    j += 1;
                }
                j
            }
            Err(i) => i - 1,
        };
        let local = (band - self.dev_band_start[dev]) as u64;
        (dev, self.geo.data_start + local * self.geo.band_size)
    }

    /// (capacity device index, byte offset of the slot).
    pub fn slot_addr(&self, slot: u64) -> (usize, u64) {
        let (dev, base) = self.band_addr(self.band_of_slot(slot));
        (
            dev,
            base + self.geo.band_header_size as u64 + self.slot_in_band(slot) * self.seg,
        )
    }

    /// [`Layout::slot_addr`] plus the device offset where the payload of
    /// `slot`'s band ends: a record at `slot` (even one spanning several
    /// slots) lies before it, so a read sized by a location's length bound
    /// ([`crate::format::Loc::len8`]) is cut there rather than run off the
    /// band. One division, as `slot_addr` (this is on every get's path).
    pub fn slot_span(&self, slot: u64) -> (usize, u64, u64) {
        let band = slot / self.slots_per_band;
        let sib = slot - band * self.slots_per_band;
        let (dev, base) = self.band_addr(band as u32);
        let payload = base + self.geo.band_header_size as u64;
        (
            dev,
            payload + sib * self.seg,
            payload + self.slots_per_band * self.seg,
        )
    }

    /// Bytes of band payload (slots only).
    pub fn band_payload(&self) -> u64 {
        self.slots_per_band * self.seg
    }

    /// Offset at which a record of `len` bytes goes in a segment of `size` bytes
    /// holding `used` bytes in `entries` records, or `None` if it does not fit
    /// (records, their summary entries and the footer must all fit). Version 2;
    /// version 3 places with [`V3Cursor`].
    pub fn fit(&self, size: usize, used: usize, entries: usize, len: usize) -> Option<usize> {
        let mut off = round_up(used, 8);
        // A small record that would straddle a 4 KiB boundary moves to the next
        // block when that wastes little, so most gets need one 4 KiB read.
        if len <= 4096
            && off / 4096 != (off + len - 1) / 4096
            && round_up(off, 4096) - off <= MAX_STRADDLE_PAD
        {
            off = round_up(off, 4096);
        }
        let end = off + round_up(len, 8) + (entries + 1) * SUMMARY_ENTRY + SEG_FOOTER;
        (end <= size).then_some(off)
    }

    /// Slots of the segment of its own that a record too big for a one-slot
    /// segment gets; `None` if it fits in one (even an empty one: `fit` always
    /// succeeds on a fresh segment then). Version 3: `len` is the record's
    /// length as the first of a segment (after a mark, with its absolute seq),
    /// and a summary entry is counted at its longest, so the answer is a
    /// function of `len` alone.
    pub fn own_slots(&self, len: usize) -> Option<u64> {
        let seg = self.seg as usize;
        let need = match self.codec {
            Codec::V2 => SEG_HEADER + round_up(len, 8) + SUMMARY_ENTRY + SEG_FOOTER,
            Codec::V3 | Codec::V4 => SEG_HEADER + MARK_LEN + len + V3_MAX_ENTRY + V3_FOOTER,
        };
        (need > seg).then(|| need.div_ceil(seg) as u64)
    }

    /// Slots of a segment of one record whose record area ends at `end` (a
    /// segment header's `prev_end`): [`Layout::own_slots`] inverted.
    pub fn slots_of_end(&self, end: usize) -> u64 {
        let first = match self.codec {
            Codec::V2 => SEG_HEADER,
            Codec::V3 | Codec::V4 => SEG_HEADER + MARK_LEN,
        };
        self.own_slots(end.saturating_sub(first)).unwrap_or(1)
    }

    /// Version 3: room a shared segment is sure to have for records' own
    /// bytes (each at its longest, trailer and summary entry included),
    /// whatever their marks and skips cost: every 4 KiB block may lose a skip
    /// gap and hold a mark and the gap before it.
    fn v3_sure_room(&self) -> usize {
        let blocks = (self.seg as usize).div_ceil(4096);
        (self.seg as usize - SEG_HEADER - V3_FOOTER)
            .saturating_sub(blocks * (MAX_SKIP_GAP + 2 * MARK_LEN))
    }

    /// Bytes of band payload a record of `len8` bytes costs when rewritten among
    /// records like it: a big record's whole segment, plus its share of the band
    /// tail that k-slot segments cannot fill; a small one's share of a segment
    /// (record, summary entry, header/footer and the end no such record fits in).
    /// GC's cost model (`Inner::band_cost`) sums it over a band's live records.
    pub fn room_cost(&self, len8: u32) -> u64 {
        let len8 = len8 as usize;
        match self.own_slots(len8) {
            Some(k) => self.slots_per_band * self.seg / (self.slots_per_band / k).max(1),
            None => {
                let room = self.seg as usize - SEG_HEADER - SEG_FOOTER;
                let per_seg = match self.codec {
                    Codec::V2 => room / (len8 + SUMMARY_ENTRY),
                    Codec::V3 | Codec::V4 => self.v3_records_per_segment(len8),
                };
                self.seg / per_seg.max(1) as u64
            }
        }
    }
}

impl Layout {
    /// Version 3: how many records of `len` bytes (with consecutive seqs) a
    /// one-slot segment holds, by placing them; cached per length code.
    fn v3_records_per_segment(&self, len: usize) -> usize {
        let slot = &self.v3_fill[Loc::len_code_of(len) as usize];
        let known = slot.load(Relaxed);
        if known > 0 {
            return known as usize;
        }
        let (mut c, seg) = (V3Cursor::new(self.codec.seq_rule()), self.seg as usize);
        loop {
            let seq = 1 + c.nrec as u64;
            let s = c.slot(len.max(V3_HEADER + 1), seq, false, false);
            if c.need(&s) > seg {
                break;
            }
            c.advance(&s, seq);
        }
        let n = c.nrec.max(1);
        slot.store(n as u32, Relaxed);
        n
    }
}

impl Layout {
    /// Straddle padding per record when records of `len8` bytes follow one
    /// another in a segment, as the writer places equal-sized records, over
    /// the first 32 KiB (at most 512 records): for GC's cost model after a restart, when a band's
    /// actual padding is unknown. Fixed sizes repeat one pattern per block,
    /// so this is exact for them where an average over random offsets is not
    /// (a 3,584-byte record pads ~500 bytes each time).
    pub fn straddle_pad(&self, len8: usize) -> u64 {
        const WINDOW: usize = 32 << 10;
        let len8 = len8.max(8);
        if self.codec.v3_records() {
            // Marks and skip gaps, with consecutive seqs (no trailers).
            let mut c = V3Cursor::new(self.codec.seq_rule());
            let mut pad = 0u64;
            while c.end < SEG_HEADER + WINDOW && c.nrec < 512 {
                let s = c.slot(len8, 1 + c.nrec as u64, false, false);
                pad += (s.spot.record - c.end) as u64;
                c.advance(&s, 1 + c.nrec as u64);
            }
            return pad.checked_div(c.nrec as u64).unwrap_or(0);
        }
        let (mut used, mut n, mut pad) = (SEG_HEADER, 0u64, 0u64);
        while used < SEG_HEADER + WINDOW && n < 512 {
            let Some(off) = self.fit(usize::MAX / 2, used, 0, len8) else {
                break;
            };
            pad += (off - round_up(used, 8)) as u64;
            used = off + len8;
            n += 1;
        }
        pad.checked_div(n).unwrap_or(0)
    }
}

/// The pool's address math for tools that read or damage blocks directly
/// (the metadata damage harness in `masse-stress`, inspectors): the engine's own
/// [`Layout`] functions, so no tool re-derives the format (docs/format.md §2.4).
/// Each returns `None` for a geometry that does not describe a valid layout
/// or for a band or slot outside the pool.
impl Geometry {
    /// Bands in the pool, over all capacity devices (numbered globally).
    pub fn bands(&self) -> u32 {
        self.bands_per_device.iter().sum()
    }

    /// Slots (segment positions) in each band; 0 for an invalid geometry.
    pub fn slots_per_band(&self) -> u64 {
        (self.band_size.saturating_sub(self.band_header_size as u64))
            .checked_div(self.segment_size as u64)
            .unwrap_or(0)
    }

    /// Where band `band` starts, i.e. its header block: (capacity device
    /// index, byte offset on that device).
    pub fn band_addr(&self, band: u32) -> Option<(usize, u64)> {
        (band < self.bands() && self.slots_per_band() > 0)
            .then(|| Layout::new(self.clone(), Codec::V2).band_addr(band))
    }

    /// Where global slot `slot` (`band · slots_per_band + slot in band`)
    /// starts: (capacity device index, byte offset on that device).
    pub fn slot_addr(&self, slot: u64) -> Option<(usize, u64)> {
        let spb = self.slots_per_band();
        (spb > 0 && slot < self.bands() as u64 * spb)
            .then(|| Layout::new(self.clone(), Codec::V2).slot_addr(slot))
    }
}

/// The write position as far as space is concerned: what `Inner::place` does
/// to it, record by record, without the buffers. Space admission runs records
/// through a copy to learn how many free bands they would really take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    /// `(bytes used, records)` of the open one-slot segment, if there is one
    /// (version 3: bytes as counted by `place`, not offsets).
    pub open: Option<(usize, usize)>,
    /// Slots not yet allocated in the open band (0 when there is none).
    pub band_left: u64,
    /// Bands taken from the free list on the way.
    pub bands_taken: u32,
}

impl Cursor {
    /// Move past one record of `len` bytes ([`Codec::base_len`]), following
    /// `Engine::place`: exactly for version 2; for version 3 never ending
    /// earlier than placement does (each record counted with its longest
    /// trailer and summary entry, in the room a segment keeps whatever its
    /// marks and skips cost), which is what admission needs.
    pub fn place(&mut self, l: &Layout, len: usize) {
        let v3 = l.codec.v3_records();
        let alone = if v3 { len + V3_MAX_TRAILER } else { len };
        if let Some(k) = l.own_slots(alone) {
            self.open = None;
            self.take_slots(l, k);
            return;
        }
        loop {
            let (used, n) = match self.open {
                Some(o) => o,
                None => {
                    self.take_slots(l, 1);
                    (if v3 { 0 } else { SEG_HEADER }, 0)
                }
            };
            if v3 {
                let cost = len + V3_MAX_TRAILER + V3_MAX_ENTRY;
                // A record alone in a fresh segment always fits (`own_slots`).
                if n == 0 || used + cost <= l.v3_sure_room() {
                    self.open = Some((used + cost, n + 1));
                    return;
                }
            } else if let Some(off) = l.fit(l.seg as usize, used, n, len) {
                self.open = Some((off + round_up(len, 8), n + 1));
                return;
            }
            // Cannot loop: `own_slots` said the record fits an empty segment.
            self.open = None;
        }
    }

    /// `Inner::new_segment`: `k` slots in the open band, or a new band when the
    /// open one has fewer left (those are never used).
    fn take_slots(&mut self, l: &Layout, k: u64) {
        if self.band_left < k {
            self.bands_taken += 1;
            self.band_left = l.slots_per_band;
        }
        self.band_left -= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Mode;

    /// A tiered layout with 4 KiB band headers and IU, data from 1 MiB on.
    fn tiered(segment_size: u32, band_size: u64, bands_per_device: Vec<u32>) -> Layout {
        Layout::new(
            Geometry {
                mode: Mode::Tiered,
                segment_size,
                band_size,
                band_header_size: 4096,
                iu: 4096,
                bands_per_device,
                pad_offset: 0,
                pad_size: 0,
                ckpt_offset: 0,
                ckpt_slot_size: 0,
                data_start: 1 << 20,
                has_fast: true,
            },
            Codec::V2,
        )
    }

    /// Records of one size placed in a row pad in a fixed pattern: nothing
    /// for tiny or block-sized records, ~450 bytes each for 3,584-byte ones
    /// (the next one never fits the 512 bytes left in a block).
    #[test]
    fn straddle_pad_of_fixed_sizes() {
        let l = tiered(262144, 64 << 20, vec![4]);
        assert_eq!(l.straddle_pad(24), 0);
        assert_eq!(l.straddle_pad(4096), 0);
        assert_eq!(l.straddle_pad(8192), 0);
        assert!((1..16).contains(&l.straddle_pad(248)));
        assert!((400..512).contains(&l.straddle_pad(3584)));
    }

    #[test]
    fn addresses() {
        let l = tiered(65536, 1 << 20, vec![3, 2]);
        assert_eq!(l.slots_per_band, 15);
        assert_eq!(l.bands, 5);
        assert_eq!(l.band_addr(0), (0, 1 << 20));
        assert_eq!(l.band_addr(2), (0, 3 << 20));
        assert_eq!(l.band_addr(3), (1, 1 << 20));
        assert_eq!(l.slot_addr(16), (0, (2 << 20) + 4096 + 65536));
        assert_eq!(l.band_of_slot(16), 1);
        // slot_span: the same address, and the end of the band's payload.
        for slot in 0..75 {
            let (dev, at) = l.slot_addr(slot);
            let (bdev, band) = l.band_addr(l.band_of_slot(slot));
            assert_eq!(l.slot_span(slot), (dev, at, band + 4096 + 15 * 65536));
            assert_eq!(bdev, dev);
        }
        // The public address math is the same.
        let geo = &l.geo;
        assert_eq!(geo.bands(), 5);
        assert_eq!(geo.slots_per_band(), 15);
        assert_eq!(geo.band_addr(3), Some((1, 1 << 20)));
        assert_eq!(geo.slot_addr(16), Some((0, (2 << 20) + 4096 + 65536)));
        assert_eq!(geo.band_addr(5), None);
        assert_eq!(geo.slot_addr(75), None);
        let broken = Geometry {
            segment_size: 0,
            ..geo.clone()
        };
        assert_eq!(broken.slots_per_band(), 0);
        assert_eq!(broken.slot_addr(0), None);
    }
}
