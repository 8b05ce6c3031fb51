//! A pool's record codec, chosen once from its superblock: format version 4
//! for pools this build creates, version 3 (the same records and segments,
//! with the older seq-chain rule) for pools created as version 3, or the
//! version-2 record (24-byte header, padded to 8 bytes, 32-byte summary
//! entries) that pools of versions 1 and 2 keep writing. No pool mixes them,
//! so nothing dispatches per segment.
//! What both share (the index, [`super::Loc`], digests) needs no codec.

use super::bytes::le32;
use super::loc::MAX_LOC_OFFSET;
use super::record::{decode_record, encode_record, peek_record, RECORD_HEADER, REC_TOMBSTONE};
use super::segment::{decode_footer, decode_summary, SummaryEntry};
use super::v3::{
    decode_v3_record, decode_v3_tail, encode_v3_record, SeqRule, Trailer, V3Entry, V3_HEADER,
};
use super::v3seg::V3_MAX_TRAILER;
use super::version::MAX_VALUE_LEN;
use crate::error::Result;

/// Which record format a pool writes and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Format versions 1 and 2 (`record.rs`, `segment.rs`).
    V2,
    /// Format version 3 (`v3.rs`, `v3seg.rs`), seq chains by
    /// [`SeqRule::Max`].
    V3,
    /// Format version 4: version 3's records and segments, seq chains by
    /// [`SeqRule::Follow`].
    V4,
}

/// A record decoded and verified by its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a delete).
    pub value: &'a [u8],
    /// A delete.
    pub tombstone: bool,
    /// Its exact encoded length.
    pub len: usize,
}

impl Codec {
    /// The codec of a pool of format `version`.
    pub fn of_version(version: u32) -> Codec {
        match version {
            0..=2 => Codec::V2,
            3 => Codec::V3,
            _ => Codec::V4,
        }
    }

    /// Whether records and segments are version 3's (`v3.rs`, `v3seg.rs`):
    /// format versions 3 and 4.
    pub fn v3_records(self) -> bool {
        self != Codec::V2
    }

    /// How the seq chains of a version-3 or -4 segment move (version 2 has
    /// none; it gets version 3's rule, which nothing asks for).
    pub fn seq_rule(self) -> SeqRule {
        match self {
            Codec::V2 | Codec::V3 => SeqRule::Max,
            Codec::V4 => SeqRule::Follow,
        }
    }

    /// Bytes of a record's fixed header: the value starts this many bytes
    /// after the key's start, less the key.
    pub fn header(self) -> usize {
        match self {
            Codec::V2 => RECORD_HEADER,
            Codec::V3 | Codec::V4 => V3_HEADER,
        }
    }

    /// A record's length before placement (header, key and value): what
    /// space admission and the pad count. Placement adds at most
    /// [`Codec::max_extra`] (v3: a seq trailer; v2: nothing, the header holds
    /// the seq, but padding to 8 follows it in a segment).
    pub fn base_len(self, key_len: usize, val_len: usize) -> usize {
        self.header() + key_len + val_len
    }

    /// Most bytes placement adds to [`Codec::base_len`].
    pub fn max_extra(self) -> usize {
        match self {
            Codec::V2 => 7,
            Codec::V3 | Codec::V4 => V3_MAX_TRAILER,
        }
    }

    /// Bytes one record of these lengths takes in a capacity segment, on
    /// average: version 2 its encoding padded to 8 and a 32-byte summary
    /// entry; version 3 its encoding, a ~12-byte summary entry and its share
    /// of the block marks (one per 4 KiB block) and of the straddle gaps. An
    /// estimate for sizing a pool from a record count; band and segment
    /// headers and free space are not included.
    pub fn footprint(self, key_len: usize, value_len: usize) -> u64 {
        let base = self.base_len(key_len, value_len) as u64;
        match self {
            Codec::V2 => base.div_ceil(8) * 8 + super::segment::SUMMARY_ENTRY as u64,
            // A mark per block; a skip gap (the record is shorter than it)
            // before about one block in two.
            Codec::V3 | Codec::V4 if base > 4080 => base + 12 + 8,
            Codec::V3 | Codec::V4 => base + 12 + ((8 + base.min(512) / 2) * base).div_ceil(4096),
        }
    }

    /// Most bytes a record may carry after its value (v3: a seq trailer).
    pub fn trailer_max(self) -> usize {
        match self {
            Codec::V2 => 0,
            Codec::V3 | Codec::V4 => V3_MAX_TRAILER,
        }
    }

    /// Decode and verify the record at the start of `b` (which may run on).
    pub fn decode(self, b: &[u8]) -> Result<Rec<'_>> {
        match self {
            Codec::V2 => {
                let (h, key, value) = decode_record(b)?;
                Ok(Rec {
                    key,
                    value,
                    tombstone: h.flags & REC_TOMBSTONE != 0,
                    len: h.total_len(),
                })
            }
            Codec::V3 | Codec::V4 => {
                let r = decode_v3_record(b)?;
                Ok(Rec {
                    key: r.key,
                    value: r.value,
                    tombstone: r.tombstone,
                    len: r.len,
                })
            }
        }
    }

    /// `(key length, value length, a seq trailer follows)` from the header at
    /// the start of `b`, which nobody has checksummed: for readers that check
    /// them against what they know (`get_parts`). Version 2 has no trailer.
    pub fn peek(self, b: &[u8]) -> Option<(usize, usize, bool)> {
        match self {
            Codec::V2 => peek_record(b).map(|h| (h.key_len as usize, h.val_len as usize, false)),
            Codec::V3 | Codec::V4 => {
                let word = le32(b.get(..V3_HEADER)?, 4);
                let vcode = (word & ((1 << 21) - 1)) as usize;
                let key_len = ((word >> 21) & 0x3ff) as usize + 1;
                let val_len = vcode.saturating_sub(2);
                let ok = vcode != 0 && val_len <= MAX_VALUE_LEN;
                ok.then_some((key_len, val_len, word >> 31 == 1))
            }
        }
    }

    /// Encode a version-2 record placed in the segment tagged `tag` with
    /// `seq` and flags (`REC_TOMBSTONE`, `REC_MORE`).
    pub fn encode_v2(tag: u32, seq: u64, flags: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; RECORD_HEADER + key.len() + value.len()];
        encode_record(&mut b, tag, seq, flags, key, value);
        b
    }

    /// Encode a version-3 record with trailer `t`.
    pub fn encode_v3(tombstone: bool, key: &[u8], value: &[u8], t: Option<Trailer>) -> Vec<u8> {
        let len = V3_HEADER + key.len() + value.len() + V3_MAX_TRAILER;
        let mut b = Vec::with_capacity(len);
        encode_v3_record(&mut b, tombstone, key, value, t);
        b
    }
}

impl Codec {
    /// The segment sequence number, pool tag and slot count that the footer
    /// of the sealed segment `data` names, if its summary and footer decode:
    /// a segment whose header is damaged is still identified by them.
    pub fn tail_names(self, data: &[u8]) -> Option<(u64, u64, u32)> {
        let (seq, tag, nslots) = match self {
            Codec::V2 => decode_footer(data).map(|f| (f.segment_seq, f.pool_tag, f.nslots))?,
            Codec::V3 | Codec::V4 => decode_v3_tail(data, self.seq_rule())
                .ok()
                .map(|(f, _)| (f.segment_seq, f.pool_tag, f.nslots))?,
        };
        self.decode_tail(data, seq, tag).map(|_| (seq, tag, nslots))
    }

    /// The entries and the end of the record area of the sealed segment
    /// `data` (segment `seq` of the pool tagged `pool_tag`), if its summary
    /// and footer are valid and name it.
    pub fn decode_tail(
        self,
        data: &[u8],
        seq: u64,
        pool_tag: u64,
    ) -> Option<(Vec<SummaryEntry>, usize)> {
        match self {
            Codec::V2 => {
                let f = decode_footer(data)
                    .filter(|f| f.segment_seq == seq && f.pool_tag == pool_tag)?;
                let e = decode_summary(data, &f).ok()?;
                Some((e, f.data_len as usize))
            }
            Codec::V3 | Codec::V4 => {
                let (f, es) = decode_v3_tail(data, self.seq_rule())
                    .ok()
                    .filter(|(f, _)| f.segment_seq == seq && f.pool_tag == pool_tag)?;
                // No writer puts a record there (format.md §10).
                if es.iter().any(|e| e.offset >= MAX_LOC_OFFSET) {
                    return None;
                }
                Some((
                    es.iter().map(SummaryEntry::from).collect(),
                    f.data_len as usize,
                ))
            }
        }
    }
}

impl From<&V3Entry> for SummaryEntry {
    fn from(e: &V3Entry) -> SummaryEntry {
        SummaryEntry {
            digest: e.digest,
            seq: e.seq,
            offset: e.offset,
            len: e.len,
            tombstone: e.tombstone,
            more: e.more,
        }
    }
}

impl SummaryEntry {
    /// The version-3 entry of this record (its SKIP flag follows from the
    /// offsets: `v3seg::with_skips`).
    pub fn to_v3(&self) -> V3Entry {
        V3Entry {
            digest: self.digest,
            seq: self.seq,
            offset: self.offset,
            len: self.len,
            skip: false,
            tombstone: self.tombstone,
            more: self.more,
        }
    }
}

/// [`Codec::footprint`] in the format new pools are created with.
pub fn record_footprint(key_len: usize, value_len: usize) -> u64 {
    Codec::of_version(super::version::FORMAT_VERSION).footprint(key_len, value_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_codecs_decode_what_they_encode() {
        let v2 = Codec::encode_v2(9, 77, REC_TOMBSTONE, b"key", b"");
        let r = Codec::V2.decode(&v2).expect("v2");
        assert_eq!((r.key, r.tombstone, r.len), (&b"key"[..], true, 27));
        assert_eq!(Codec::V2.peek(&v2), Some((3, 0, false)));
        let v3 = Codec::encode_v3(false, b"key", b"value", None);
        let r = Codec::V3.decode(&v3).expect("v3");
        assert_eq!((r.key, r.value, r.len), (&b"key"[..], &b"value"[..], 16));
        assert_eq!(Codec::V3.peek(&v3), Some((3, 5, false)));
        assert_eq!(Codec::V3.base_len(3, 5), 16);
        assert!(Codec::V3.decode(&v2).is_err() || Codec::V2.decode(&v3).is_err());
        assert_eq!(Codec::V3.peek(&[0u8; 8]), None, "zeros are no record");
    }
}
