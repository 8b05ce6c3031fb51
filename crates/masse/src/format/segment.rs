//! A segment (one slot of a band, or several for one oversized record): the
//! header at its start, records after it, and the summary and footer at its
//! end.

use super::bytes::{le32, le64, Get, Put};
use super::version::FORMAT_VERSION;
use crate::error::{Error, Result};

/// Bytes of the segment header at the start of every segment.
pub const SEG_HEADER: usize = 64;
const SEGH_MAGIC: u32 = 0x4847_4553; // "SEGH"

/// Header at offset 0 of every segment. It names the segment before the footer
/// exists, so a partially written segment (capacity-only mode) can be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Global segment sequence number (`epoch << 40 | counter`).
    pub segment_seq: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Slots the segment spans.
    pub nslots: u32,
    /// End of the record area of segment `segment_seq - 1` as the writer left
    /// it when this segment opened; 0 if not known (a segment opened first
    /// after an open, or format version 1). Recovery compares it with what it
    /// finds there: a shorter segment lost records to a torn write.
    pub prev_end: u32,
    /// Band that holds segment `segment_seq - 1` (format version 5; `None` when
    /// `prev_end` is 0, or in headers older builds wrote). Recovery looks
    /// there when that segment is missing: a band GC freed since tells a
    /// missing predecessor apart from one a crash tore away (design.md §10.4).
    pub prev_band: Option<u32>,
}

impl SegmentHeader {
    /// Encode into the first `SEG_HEADER` bytes of `b`.
    pub fn encode_into(&self, b: &mut [u8]) {
        {
            let mut p = Put::new(&mut b[..SEG_HEADER]);
            p.u32(SEGH_MAGIC);
            p.u32(0);
            p.u64(self.segment_seq);
            p.u64(self.pool_tag);
            p.u32(self.nslots);
            p.u32(FORMAT_VERSION);
            p.u32(self.prev_end);
            // Stored as band + 1, so the zero of older headers means unknown.
            p.u32(self.prev_band.map_or(0, |b| b + 1));
        }
        let crc = crc32c::crc32c(&b[8..SEG_HEADER]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode; `None` if blank or damaged.
    pub fn decode(b: &[u8]) -> Option<SegmentHeader> {
        if b.len() < SEG_HEADER
            || le32(b, 0) != SEGH_MAGIC
            || crc32c::crc32c(&b[8..SEG_HEADER]) != le32(b, 4)
        {
            return None;
        }
        Some(SegmentHeader {
            segment_seq: le64(b, 8),
            pool_tag: le64(b, 16),
            nslots: le32(b, 24),
            prev_end: le32(b, 32),
            prev_band: le32(b, 36).checked_sub(1),
        })
    }
}

/// Bytes of the segment footer (at the very end of a segment).
pub const SEG_FOOTER: usize = 64;
/// Bytes of one summary entry (placed just before the footer, growing down).
pub const SUMMARY_ENTRY: usize = 32;
const SEG_MAGIC: u32 = 0x4647_4553; // "SEGF"

/// One entry of a segment summary: enough to rebuild the index without reading records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    /// Key digest.
    pub digest: u128,
    /// Record sequence number.
    pub seq: u64,
    /// Byte offset of the record within the segment.
    pub offset: u32,
    /// Record length (unpadded).
    pub len: u32,
    /// True for a tombstone.
    pub tombstone: bool,
    /// True if more records of the same atomic group follow.
    pub more: bool,
}

/// Segment footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentFooter {
    /// Global segment sequence number.
    pub segment_seq: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Number of records (and summary entries).
    pub nrec: u32,
    /// Slots the segment spans (1, or more for one oversized record).
    pub nslots: u32,
    /// Bytes of the record area in use.
    pub data_len: u32,
    /// Smallest record sequence number in the segment.
    pub min_seq: u64,
    /// Largest record sequence number in the segment.
    pub max_seq: u64,
}

/// Write the summary entries and footer at the end of `seg` (a whole segment buffer).
pub fn encode_segment_tail(seg: &mut [u8], entries: &[SummaryEntry], f: &SegmentFooter) {
    let n = seg.len();
    let foot = n - SEG_FOOTER;
    let sum_start = foot - entries.len() * SUMMARY_ENTRY;
    for (i, e) in entries.iter().enumerate() {
        let at = sum_start + i * SUMMARY_ENTRY;
        let mut p = Put::new(&mut seg[at..at + SUMMARY_ENTRY]);
        p.u128(e.digest);
        p.u64(e.seq);
        p.u32(e.offset);
        p.u32(e.len | if e.tombstone { 1 << 31 } else { 0 } | if e.more { 1 << 30 } else { 0 });
    }
    {
        let mut p = Put::new(&mut seg[foot..]);
        p.u32(SEG_MAGIC);
        p.u32(0); // crc
        p.u64(f.segment_seq);
        p.u64(f.pool_tag);
        p.u32(f.nrec);
        p.u32(f.nslots);
        p.u32(f.data_len);
        p.u32(FORMAT_VERSION);
        p.u64(f.min_seq);
        p.u64(f.max_seq);
    }
    let crc = crc32c::crc32c(&seg[sum_start..foot]);
    let crc = crc32c::crc32c_append(crc, &seg[foot + 8..]);
    seg[foot + 4..foot + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Decode the footer from the last `SEG_FOOTER` bytes of `tail`; `None` if absent.
/// The summary checksum is verified by [`decode_summary`].
pub fn decode_footer(tail: &[u8]) -> Option<SegmentFooter> {
    if tail.len() < SEG_FOOTER {
        return None;
    }
    let f = &tail[tail.len() - SEG_FOOTER..];
    if le32(f, 0) != SEG_MAGIC {
        return None;
    }
    Some(SegmentFooter {
        segment_seq: le64(f, 8),
        pool_tag: le64(f, 16),
        nrec: le32(f, 24),
        nslots: le32(f, 28),
        data_len: le32(f, 32),
        min_seq: le64(f, 40),
        max_seq: le64(f, 48),
    })
}

/// Verify and decode the summary of a complete segment buffer (`seg` = whole segment).
pub fn decode_summary(seg: &[u8], f: &SegmentFooter) -> Result<Vec<SummaryEntry>> {
    let n = seg.len();
    let foot = n - SEG_FOOTER;
    let sum_len = (f.nrec as usize)
        .checked_mul(SUMMARY_ENTRY)
        .filter(|&l| l <= foot)
        .ok_or_else(|| Error::Corruption("segment summary larger than segment".into()))?;
    let sum_start = foot - sum_len;
    if f.data_len as usize > sum_start {
        return Err(Error::Corruption("segment data overlaps summary".into()));
    }
    let crc = crc32c::crc32c(&seg[sum_start..foot]);
    let crc = crc32c::crc32c_append(crc, &seg[foot + 8..]);
    if crc != le32(seg, foot + 4) {
        return Err(Error::Corruption(
            "segment summary checksum mismatch".into(),
        ));
    }
    let mut out = Vec::with_capacity(f.nrec as usize);
    for i in 0..f.nrec as usize {
        let mut g =
            Get::new(&seg[sum_start + i * SUMMARY_ENTRY..sum_start + (i + 1) * SUMMARY_ENTRY]);
        let digest = g.u128()?;
        let seq = g.u64()?;
        let offset = g.u32()?;
        let lf = g.u32()?;
        let len = lf & !(3 << 30);
        // No valid record starts at or past 512 KiB (the largest one-slot
        // segment; a multi-slot segment holds one record, at the start), and
        // a location could not hold such an offset.
        if offset as u64 + len as u64 > f.data_len as u64 || offset >= super::loc::MAX_LOC_OFFSET {
            return Err(Error::Corruption(
                "summary entry outside segment data".into(),
            ));
        }
        out.push(SummaryEntry {
            digest,
            seq,
            offset,
            len,
            tombstone: lf & (1 << 31) != 0,
            more: lf & (1 << 30) != 0,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_tail_roundtrip() {
        let mut seg = vec![0u8; 8192];
        let e = vec![SummaryEntry {
            digest: 5,
            seq: 6,
            offset: 0,
            len: 30,
            tombstone: true,
            more: true,
        }];
        let f = SegmentFooter {
            segment_seq: 3,
            pool_tag: 4,
            nrec: 1,
            nslots: 1,
            data_len: 32,
            min_seq: 6,
            max_seq: 6,
        };
        encode_segment_tail(&mut seg, &e, &f);
        let f2 = decode_footer(&seg).expect("footer");
        assert_eq!(f2, f);
        assert_eq!(decode_summary(&seg, &f2).expect("summary"), e);
        seg[8192 - 70] ^= 1;
        assert!(decode_summary(&seg, &f2).is_err());
    }
}
