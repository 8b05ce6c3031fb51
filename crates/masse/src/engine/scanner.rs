//! Reading a band segment by segment: the one scanner that recovery, GC,
//! `check` and `trace_key` share.
//!
//! A band's slots hold segments written in order. Each starts with a header
//! naming it (sequence number, pool) and ends with a summary and footer listing
//! its records; records are self-checking and carry a tag derived from their
//! segment's sequence number. The scanner reads a band in 4 MiB chunks (GC:
//! one segment at a time, see `with_chunk_bytes`) and yields every segment it
//! can make sense of with its records' summary entries: from the summary when
//! header, summary and footer are valid, otherwise by parsing the records
//! themselves.
//!
//! Damage costs only the damaged unit. A slot whose header does not decode is
//! read with the sequence number it must hold (one more than the segment before
//! it, at least the band's first) when records carrying that tag follow the
//! header; and if nothing can be read there but a newer segment follows later
//! in the band, the slots in between are reported as a gap (a write torn at a
//! crash, or damage) and the scan goes on. Only when no newer segment follows
//! does the band end there.

use crate::device::{AlignedBuf, Device};
use crate::error::{Error, Result};
use crate::format::*;
use crate::format::{v3, v3seg};
use crate::index::Digest;
use crate::layout::{Layout, MAX_STRADDLE_PAD};
use std::sync::Arc;

/// How a segment's entries were obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Header, summary and footer valid.
    Summary,
    /// Header valid; summary or footer missing or unreadable (a partly written
    /// segment, a torn seal, or damage): records parsed one by one.
    Parsed,
    /// Header unreadable; records parsed with the sequence number the slot must hold.
    HeaderDamaged,
}

/// One segment found in a band.
pub(crate) struct Segment<'d> {
    /// Slot within the band.
    pub slot: u64,
    /// Slots it spans.
    pub nslots: u64,
    /// Its sequence number.
    pub seq: u64,
    /// Its records, in placement order.
    pub entries: Vec<SummaryEntry>,
    /// End of its record area.
    pub used: usize,
    /// Where the entries came from.
    pub source: Source,
    /// The header's `prev_end` (0: unknown, or the header was damaged).
    pub prev_end: u32,
    /// The header's `prev_band` (`None`: unknown, or the header was damaged).
    pub prev_band: Option<u32>,
    /// The whole segment (`nslots` slots).
    pub data: &'d [u8],
}

/// What the scanner reports, in slot order.
pub(crate) enum Found<'d> {
    /// A segment.
    Segment(Segment<'d>),
    /// Slots `[slot, slot + n)` hold nothing readable. `blank`: their first
    /// block is zeros or a stale header (never written, or a write torn at a
    /// crash); otherwise it looks damaged.
    Gap { slot: u64, n: u64, blank: bool },
}

/// Where a scan stopped.
pub(crate) struct ScanEnd {
    /// First slot after the last segment (or gap) found.
    pub end: u64,
    /// Bytes read from the device.
    pub bytes_read: u64,
}

/// Reads the slots of one band.
pub(crate) struct BandScanner<'a> {
    l: &'a Layout,
    dev: &'a Arc<dyn Device>,
    /// Device offset of slot 0.
    base: u64,
    tag: u64,
    first_seq: u64,
    /// Above every segment sequence number on the pool (the next one the
    /// engine will give out): bounds the repair of a band's last segment.
    seq_limit: u64,
    digest: &'a dyn Fn(&[u8]) -> Digest,
    chunk: AlignedBuf,
    /// Bytes read at once (rounded down to whole segments, at least one).
    chunk_bytes: usize,
    chunk_start: u64,
    chunk_len: u64,
    big: AlignedBuf,
    bytes_read: u64,
}

/// Slots read at once by default (4 MiB).
const CHUNK_BYTES: usize = 4 << 20;

impl<'a> BandScanner<'a> {
    /// A scanner of `band`, whose incarnation starts at segment `first_seq`,
    /// on a pool whose segment sequence numbers are all below `seq_limit`.
    pub fn new(
        l: &'a Layout,
        caps: &'a [Arc<dyn Device>],
        tag: u64,
        band: (u32, u64),
        seq_limit: u64,
        digest: &'a dyn Fn(&[u8]) -> Digest,
    ) -> BandScanner<'a> {
        let (band, first_seq) = band;
        let (dev, off) = l.band_addr(band);
        BandScanner {
            l,
            dev: &caps[dev],
            base: off + l.geo.band_header_size as u64,
            tag,
            first_seq,
            seq_limit,
            digest,
            chunk: AlignedBuf::new(0),
            chunk_bytes: CHUNK_BYTES,
            chunk_start: 0,
            chunk_len: 0,
            big: AlignedBuf::new(0),
            bytes_read: 0,
        }
    }

    /// Read `bytes` at a time instead of 4 MiB (one segment at least). GC
    /// reads one segment at a time: the disk serves a read as one request up
    /// to its `max_sectors_kb` (4 MiB here), and a user's 4 KiB get queued
    /// behind a 4 MiB transfer waits milliseconds.
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// Scan slots `from..until`, calling `f` for every segment and gap in slot
    /// order. With `to_end`, the scan ends at the last segment a newer one does
    /// not follow (recovery: the band's write frontier); otherwise everything
    /// up to `until` is expected to be written (GC, check), and unreadable
    /// slots at the end are reported as a gap.
    pub fn scan(
        &mut self,
        from: u64,
        until: u64,
        to_end: bool,
        f: &mut dyn FnMut(Found<'_>) -> Result<()>,
    ) -> Result<ScanEnd> {
        let mut i = from;
        let mut last_seq = 0u64;
        while i < until {
            if let Some((seq, k)) = self.valid_header(i, last_seq)? {
                let seg = self.read_segment(i, seq, k)?;
                last_seq = seq;
                i += k;
                f(Found::Segment(seg))?;
                continue;
            }
            let next = self.next_valid(i + 1, until, last_seq)?;
            if let Some(seg) = self.damaged_header(i, last_seq, next)? {
                last_seq = seg.seq;
                i += seg.nslots;
                f(Found::Segment(seg))?;
                continue;
            }
            let blank = self.looks_blank(i, last_seq)?;
            match next {
                Some((j, _)) => {
                    f(Found::Gap {
                        slot: i,
                        n: j - i,
                        blank,
                    })?;
                    i = j;
                }
                None if to_end => break,
                None => {
                    f(Found::Gap {
                        slot: i,
                        n: until - i,
                        blank,
                    })?;
                    i = until;
                }
            }
        }
        Ok(ScanEnd {
            end: i,
            bytes_read: self.bytes_read,
        })
    }

    /// The band's last segment before slot `end` (its sequence number, and
    /// whether its last record carries MORE), or `None` if no valid header ends
    /// exactly there.
    pub fn last_segment(&mut self, end: u64) -> Result<Option<(u64, bool)>> {
        for j in (end.saturating_sub(self.l.slots_per_band)..end).rev() {
            if let Some((seq, k)) = self.valid_header(j, 0)? {
                if j + k != end {
                    return Ok(None);
                }
                let seg = self.read_segment(j, seq, k)?;
                let more = seg.entries.last().is_some_and(|e| e.more);
                return Ok(Some((seq, more)));
            }
        }
        Ok(None)
    }

    /// `(seq, slots)` of a valid header of this pool's current incarnation at
    /// slot `i`, newer than `last_seq`.
    fn valid_header(&mut self, i: u64, last_seq: u64) -> Result<Option<(u64, u64)>> {
        let spb = self.l.slots_per_band;
        let h = SegmentHeader::decode(self.slots(i, 1)?);
        Ok(h.and_then(|h| {
            let k = h.nslots.max(1) as u64;
            let ok = h.pool_tag == self.tag
                && h.segment_seq >= self.first_seq
                && h.segment_seq > last_seq
                && i + k <= spb;
            ok.then_some((h.segment_seq, k))
        }))
    }

    /// The first slot in `from..until` with a valid header, and its seq.
    fn next_valid(&mut self, from: u64, until: u64, last_seq: u64) -> Result<Option<(u64, u64)>> {
        for j in from..until {
            if let Some((seq, _)) = self.valid_header(j, last_seq)? {
                return Ok(Some((j, seq)));
            }
        }
        Ok(None)
    }

    fn read_segment(&mut self, i: u64, seq: u64, k: u64) -> Result<Segment<'_>> {
        let tag = self.tag;
        let digest = self.digest;
        let codec = self.l.codec;
        let data = self.slots(i, k)?;
        let (entries, used, source) = match codec.decode_tail(data, seq, tag) {
            Some((e, used)) => (e, used, Source::Summary),
            None => {
                let (e, used) = parse_segment(codec, data, seq, digest);
                (e, used, Source::Parsed)
            }
        };
        let hdr = SegmentHeader::decode(data);
        let prev_end = hdr.map_or(0, |h| h.prev_end);
        let prev_band = hdr.and_then(|h| h.prev_band);
        Ok(Segment {
            slot: i,
            nslots: k,
            seq,
            entries,
            used,
            source,
            prev_end,
            prev_band,
            data,
        })
    }

    /// A slot whose header does not decode but whose records carry the tag of a
    /// sequence number it may hold: after `last_seq` (and not before the band's
    /// first), before the next valid segment's (`next`) or, for the band's last
    /// segment, before `seq_limit`.
    fn damaged_header(
        &mut self,
        i: u64,
        last_seq: u64,
        next: Option<(u64, u64)>,
    ) -> Result<Option<Segment<'_>>> {
        let codec = self.l.codec;
        // A header that decodes is not damaged: `valid_header` refused it as
        // an earlier incarnation's, another pool's or out of range. Such a
        // slot (a reused band's unwritten tail, untrimmed) holds stale
        // records that must never be taken for this incarnation's.
        if SegmentHeader::decode(&self.slots(i, 1)?[..SEG_HEADER]).is_some() {
            return Ok(None);
        }
        let Some((tag, lens)) = first_record(codec, self.slots(i, 1)?) else {
            return Ok(None);
        };
        let lo = self.first_seq.max(last_seq + 1);
        // Version 3 knows the first record's length only up to its trailer:
        // try each segment size it allows; the one whose record parses and
        // gives that size is the writer's.
        let l = self.l;
        let mut ks: Vec<u64> = lens.map(|n| l.own_slots(n).unwrap_or(1)).to_vec();
        ks.dedup();
        let fits = |k: u64| i + k <= l.slots_per_band && !next.is_some_and(|(j, _)| i + k > j);
        ks.retain(|&k| fits(k));
        let Some(seq) = self.seq_of_damaged(i, &ks, tag, lo, next.map(|(_, seq)| seq))? else {
            return Ok(None);
        };
        let digest = self.digest;
        let mut found = None;
        for k in ks {
            let (entries, used) = parse_segment(codec, self.slots(i, k)?, seq, digest);
            let first_k = entries
                .first()
                .map(|f| l.own_slots(f.len as usize).unwrap_or(1));
            if first_k == Some(k) {
                found = Some((k, entries, used));
                break;
            }
        }
        let Some((k, entries, used)) = found else {
            return Ok(None);
        };
        Ok(Some(Segment {
            slot: i,
            nslots: k,
            seq,
            entries,
            used,
            source: Source::HeaderDamaged,
            prev_end: 0,
            prev_band: None,
            data: self.slots(i, k)?,
        }))
    }

    /// The sequence number of the segment at slot `i` (`ks`: the sizes it
    /// may have) whose header is damaged and whose first record carries
    /// `tag`: at least `lo`, below the next valid segment's (`next`) or, for
    /// a band's last segment, below the pool's `seq_limit`. A sealed
    /// segment's footer names it outright. Otherwise it is searched for by
    /// its tag, likeliest numbers first ([`seq_candidates`]); for a band's
    /// last segment only a band's worth of numbers after `lo` and at the
    /// start of each later run, so that a wrong number sharing the 32-bit
    /// tag stays as unlikely as before. (The search once ran over the whole
    /// range: across a reopen, whose run starts its numbers at `epoch << 40`,
    /// that was seconds of hashing ending at a wrong number, and the last
    /// segment's range was too short to hold the right one.)
    fn seq_of_damaged(
        &mut self,
        i: u64,
        ks: &[u64],
        tag: u32,
        lo: u64,
        next: Option<u64>,
    ) -> Result<Option<u64>> {
        let (codec, pool_tag) = (self.l.codec, self.tag);
        let hi = next.unwrap_or(self.seq_limit);
        for &k in ks {
            if let Some((seq, t, n)) = codec.tail_names(self.slots(i, k)?) {
                let named = t == pool_tag && n as u64 == k && (lo..hi).contains(&seq);
                if named && seg_tag(seq) == tag {
                    return Ok(Some(seq));
                }
            }
        }
        let (span, cap) = match next {
            Some(_) => (SEQ_SPAN, SEQ_SEARCH_CAP),
            None => (self.l.slots_per_band, LAST_SEARCH_CAP),
        };
        Ok(seq_candidates(lo, hi, span, cap).find(|&c| seg_tag(c) == tag))
    }

    /// Whether slot `i`'s header area is zeros or a stale header (never written
    /// in this incarnation) rather than garbage (damage).
    fn looks_blank(&mut self, i: u64, last_seq: u64) -> Result<bool> {
        let (tag, first) = (self.tag, self.first_seq);
        let b = &self.slots(i, 1)?[..SEG_HEADER];
        if b.iter().all(|&x| x == 0) {
            return Ok(true);
        }
        Ok(SegmentHeader::decode(b).is_some_and(|h| {
            h.pool_tag != tag || h.segment_seq < first || h.segment_seq <= last_seq
        }))
    }

    /// Slots `[i, i + k)`, from the current chunk or read.
    fn slots(&mut self, i: u64, k: u64) -> Result<&[u8]> {
        let seg = self.l.seg as usize;
        if i >= self.chunk_start && i + k <= self.chunk_start + self.chunk_len {
            let rel = (i - self.chunk_start) as usize * seg;
            return Ok(&self.chunk[rel..rel + k as usize * seg]);
        }
        let per_chunk = (self.chunk_bytes / seg).max(1) as u64;
        if k <= per_chunk {
            let n = per_chunk.min(self.l.slots_per_band - i).max(k);
            if self.chunk.len() != n as usize * seg {
                self.chunk = AlignedBuf::new(n as usize * seg);
            }
            self.read(i, n)?;
            self.chunk_start = i;
            self.chunk_len = n;
            return Ok(&self.chunk[..k as usize * seg]);
        }
        let mut big = AlignedBuf::new(k as usize * seg);
        let off = self.base + i * seg as u64;
        self.dev
            .read_at(&mut big, off)
            .map_err(|e| Error::io(&self.dev.info().path, "reading a segment", e))?;
        self.bytes_read += big.len() as u64;
        self.big = big;
        Ok(&self.big[..])
    }

    fn read(&mut self, i: u64, n: u64) -> Result<()> {
        let seg = self.l.seg;
        let off = self.base + i * seg;
        self.dev
            .read_at(&mut self.chunk, off)
            .map_err(|e| Error::io(&self.dev.info().path, "reading segments", e))?;
        self.bytes_read += n * seg;
        Ok(())
    }
}

/// Between two valid segments: numbers searched after `lo` (and after each
/// later run's start) before the search moves on.
const SEQ_SPAN: u64 = 1 << 20;
/// Between two valid segments: numbers searched in all. The slot lies inside
/// what this incarnation wrote, a 32-bit tag matches a wrong number with a
/// chance below 1 in 1,024, and the search takes milliseconds.
const SEQ_SEARCH_CAP: usize = 1 << 22;
/// A band's last segment, or what may be a reused band's stale tail: numbers
/// searched in all (a band's worth after `lo` and at each later run's start).
const LAST_SEARCH_CAP: usize = 1 << 12;

/// Segment sequence numbers in `lo..hi` a segment may carry, likeliest first:
/// `span` right after `lo` (the same run as the segment before it), then
/// `span` at the start of each later run, newest first (a run's numbers
/// start at `epoch << 40`: a band resumed after a reopen, or one the other
/// write stream interleaved with, jumps there); `cap` in all.
fn seq_candidates(lo: u64, hi: u64, span: u64, cap: usize) -> impl Iterator<Item = u64> {
    let first = lo..hi.min(lo.saturating_add(span));
    let runs = ((lo >> 40) + 1..=(hi.saturating_sub(1) >> 40))
        .rev()
        .flat_map(move |k| (k << 40).max(lo)..hi.min((k << 40) + span));
    first.chain(runs).take(cap)
}

/// The segment tag the first record of a slot carries (version 3: its mark)
/// and the least and most its length (as the segment's first record) may
/// be, from a header nobody has checksummed yet.
fn first_record(codec: Codec, slot: &[u8]) -> Option<(u32, [usize; 2])> {
    match codec {
        Codec::V2 => {
            let h = peek_record(&slot[SEG_HEADER..])?;
            Some((h.seg_tag, [h.total_len(); 2]))
        }
        Codec::V3 | Codec::V4 => {
            let at = SEG_HEADER + v3::MARK_LEN;
            let (k, v, _) = codec.peek(&slot[at..])?;
            let tag = slot.get(SEG_HEADER + 4..at)?;
            let base = codec.base_len(k, v);
            Some((
                u32::from_le_bytes(tag.try_into().ok()?),
                [base + 1, base + codec.max_extra()],
            ))
        }
    }
}

/// Parse the records of a segment without a (valid) summary, in the pool's
/// format: [`parse_records`], or `v3seg::parse_v3_records`.
pub(crate) fn parse_segment(
    codec: Codec,
    seg: &[u8],
    seq: u64,
    digest: &dyn Fn(&[u8]) -> Digest,
) -> (Vec<SummaryEntry>, usize) {
    match codec {
        Codec::V2 => parse_records(seg, seq, digest),
        Codec::V3 | Codec::V4 => {
            let limit = MAX_LOC_OFFSET as usize;
            let rule = codec.seq_rule();
            let (es, end) = v3seg::parse_v3_records(seg, seg_tag(seq), limit, digest, rule);
            (es.iter().map(SummaryEntry::from).collect(), end)
        }
    }
}

/// Parse the records of a version-2 segment without a (valid) summary: records are
/// self-checking and carry their segment's tag, so stale bytes from an earlier
/// use of the slot are never taken for records. Returns the entries and the end
/// of the last record.
pub(crate) fn parse_records(
    seg: &[u8],
    seq: u64,
    digest: &dyn Fn(&[u8]) -> Digest,
) -> (Vec<SummaryEntry>, usize) {
    let mut out = Vec::new();
    let mut off = SEG_HEADER;
    let mut end = SEG_HEADER;
    let tag = seg_tag(seq);
    let try_at = |o: usize| -> Option<(RecordHeader, Digest, usize)> {
        let (h, k, _) = decode_record(seg.get(o..)?).ok()?;
        (h.seg_tag == tag).then(|| (h, digest(k), h.total_len()))
    };
    while off + RECORD_HEADER <= seg.len() {
        let found = try_at(off).map(|r| (off, r)).or_else(|| {
            // Placement skips to the next 4 KiB page only over a short gap (the
            // straddle rule); a longer gap is not the writer's and ends the parse.
            let a = crate::device::round_up(off, 4096);
            if a != off && a - off <= MAX_STRADDLE_PAD && a + RECORD_HEADER <= seg.len() {
                try_at(a).map(|r| (a, r))
            } else {
                None
            }
        });
        let Some((o, (h, d, len))) = found else { break };
        if o >= MAX_LOC_OFFSET as usize {
            break; // no writer puts a record there (format.md §10)
        }
        out.push(SummaryEntry {
            digest: d,
            seq: h.seq,
            offset: o as u32,
            len: len as u32,
            tombstone: h.flags & REC_TOMBSTONE != 0,
            more: h.flags & REC_MORE != 0,
        });
        end = o + crate::device::round_up(len, 8);
        off = end;
    }
    (out, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_come_after_the_last_segment_then_at_each_later_run() {
        let lo = (1 << 40) + 10;
        let hi = (3 << 40) + 5;
        let c: Vec<u64> = seq_candidates(lo, hi, 100, 1000).collect();
        assert_eq!(c[0], lo, "the number right after the last segment first");
        assert_eq!(c[100], 3 << 40, "then the newest run's first numbers");
        assert_eq!(c[105], 2 << 40, "the newest run stops at `hi`");
        assert_eq!(c[204], (2 << 40) + 99);
        assert_eq!(c.len(), 205);
        assert!(c.iter().all(|s| (lo..hi).contains(s)));
        // Many runs in between: the search is capped.
        assert_eq!(seq_candidates(1 << 40, 100 << 40, 100, 1000).count(), 1000);
        assert_eq!(seq_candidates(7, 7, 100, 1000).count(), 0);
    }
}
