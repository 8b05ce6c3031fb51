//! Records: one key-value operation (put or tombstone), written into segments
//! on the capacity tier and into batches on the write pad.

use super::bytes::{le32, le64, Put};
use super::version::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};

/// The 32-bit tag records carry for the segment they were written into: a mix of
/// all 64 bits of the segment sequence number (whose top bits are the epoch), so a
/// record left in a reused slot by an earlier segment does not match by accident.
pub fn seg_tag(segment_seq: u64) -> u32 {
    let h = xxhash_rust::xxh3::xxh3_64(&segment_seq.to_le_bytes());
    (h ^ (h >> 32)) as u32
}

/// Bytes of the record header.
pub const RECORD_HEADER: usize = 24;
/// Offset in a record header of the crc32c (u32); it covers every byte after
/// itself, header and payload.
pub const REC_CRC_AT: usize = 0;
/// Offset in a record header of the segment tag (u32), the first byte the crc covers.
pub const REC_SEG_TAG_AT: usize = 4;
/// Offset in a record header of the operation sequence number (u64).
pub const REC_SEQ_AT: usize = 8;
/// Offset in a record header of the key length (u16).
pub const REC_KEY_LEN_AT: usize = 16;
/// Offset of the flags byte in a record header (a zero byte follows it).
pub const REC_FLAGS_AT: usize = 18;
/// Offset in a record header of the value length (u32), its last field.
pub const REC_VAL_LEN_AT: usize = 20;
// The offsets above tile the header exactly; a new field must move this too.
const _: () = assert!(REC_VAL_LEN_AT + 4 == RECORD_HEADER);
/// Record flag: this record is a tombstone (delete).
pub const REC_TOMBSTONE: u8 = 1;
/// Record flag: more records of the same atomic group follow; recovery applies
/// a group only when its last record (without this flag) is present.
pub const REC_MORE: u8 = 2;

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`seg_tag`] of the segment the record was written into.
    pub seg_tag: u32,
    /// Operation sequence number (version).
    pub seq: u64,
    /// Key length.
    pub key_len: u16,
    /// Flags (`REC_TOMBSTONE`).
    pub flags: u8,
    /// Value length.
    pub val_len: u32,
}

impl RecordHeader {
    /// Total encoded length (header + key + value), not padded.
    pub fn total_len(&self) -> usize {
        RECORD_HEADER + self.key_len as usize + self.val_len as usize
    }
}

/// Encoded length of a record with this key and value.
pub fn record_len(key_len: usize, val_len: usize) -> usize {
    RECORD_HEADER + key_len + val_len
}

/// Encode a record into `out` (which must be exactly `record_len` bytes).
///
/// Layout: crc32c u32 | seg_tag u32 | seq u64 | key_len u16 | flags u8 | 0 u8 |
/// val_len u32 | key | value. The crc covers everything after itself, so a record
/// copied to a segment with another tag must be re-encoded.
pub fn encode_record(out: &mut [u8], seg_tag: u32, seq: u64, flags: u8, key: &[u8], value: &[u8]) {
    encode_record_unsealed(out, seg_tag, seq, flags, key, value);
    let crc = crc32c::crc32c(&out[REC_SEG_TAG_AT..]);
    out[REC_CRC_AT..REC_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// [`encode_record`] before the crc.
fn encode_record_unsealed(
    out: &mut [u8],
    seg_tag: u32,
    seq: u64,
    flags: u8,
    key: &[u8],
    value: &[u8],
) {
    debug_assert_eq!(out.len(), record_len(key.len(), value.len()));
    {
        let mut p = Put::new(out);
        p.u32(0);
        p.u32(seg_tag);
        p.u64(seq);
        p.u16(key.len() as u16);
        p.u8(flags);
        p.u8(0);
        p.u32(value.len() as u32);
        p.bytes(key);
        p.bytes(value);
    }
}

/// Parse the header at the start of `b` without checking the crc.
pub fn peek_record(b: &[u8]) -> Option<RecordHeader> {
    if b.len() < RECORD_HEADER {
        return None;
    }
    let h = RecordHeader {
        seg_tag: le32(b, REC_SEG_TAG_AT),
        seq: le64(b, REC_SEQ_AT),
        key_len: u16::from_le_bytes([b[REC_KEY_LEN_AT], b[REC_KEY_LEN_AT + 1]]),
        flags: b[REC_FLAGS_AT],
        val_len: le32(b, REC_VAL_LEN_AT),
    };
    if h.key_len == 0 || h.key_len as usize > MAX_KEY_LEN || h.val_len as usize > MAX_VALUE_LEN {
        return None;
    }
    Some(h)
}

/// Parse and verify a whole record at the start of `b`: returns the header, key and value.
pub fn decode_record(b: &[u8]) -> Result<(RecordHeader, &[u8], &[u8])> {
    let h = peek_record(b).ok_or_else(|| Error::Corruption("record header malformed".into()))?;
    let total = h.total_len();
    if b.len() < total {
        return Err(Error::Corruption("record truncated".into()));
    }
    if crc32c::crc32c(&b[REC_SEG_TAG_AT..total]) != le32(b, REC_CRC_AT) {
        return Err(Error::Corruption("record checksum mismatch".into()));
    }
    let k = RECORD_HEADER + h.key_len as usize;
    Ok((h, &b[RECORD_HEADER..k], &b[k..total]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip_and_corruption() {
        let mut b = vec![0u8; record_len(3, 5)];
        encode_record(&mut b, 9, 42, 0, b"key", b"value");
        let (h, k, v) = decode_record(&b).expect("valid");
        assert_eq!(
            (h.seq, h.seg_tag, k, v),
            (42, 9, &b"key"[..], &b"value"[..])
        );
        b[30] ^= 1;
        assert!(decode_record(&b).is_err());
    }
}
