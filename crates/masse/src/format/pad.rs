//! The write pad on the fast tier: its header (two copies) and the
//! group-commit batches in its ring.

use super::bytes::{le32, le64, Put};
use super::version::FORMAT_VERSION;

const PADH_MAGIC: &[u8; 8] = b"MASSEPAD";
const BATCH_MAGIC: u32 = 0x4244_4150; // "PADB"

/// Bytes of each pad header copy (two copies, alternately written).
pub const PAD_HEADER_SIZE: u64 = 4096;
/// Bytes of a pad batch header.
pub const BATCH_HEADER: usize = 64;
/// Batch flag: the rest of the pad ring is unused; continue at its start.
pub const BATCH_WRAP: u32 = 1;

/// Where replay of the pad ring must start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadHeader {
    /// Increments on every write; the newest valid copy wins.
    pub hdr_seq: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Virtual (monotonic) offset of the oldest live batch.
    pub tail: u64,
    /// Sequence number of the batch at `tail`.
    pub tail_batch_seq: u64,
}

impl PadHeader {
    /// Encode into a 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; PAD_HEADER_SIZE as usize];
        {
            let mut p = Put::new(&mut b);
            p.bytes(PADH_MAGIC);
            p.u32(0);
            p.u32(FORMAT_VERSION);
            p.u64(self.hdr_seq);
            p.u64(self.pool_tag);
            p.u64(self.tail);
            p.u64(self.tail_batch_seq);
        }
        let crc = crc32c::crc32c(&b[12..64]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode; `None` if blank or damaged.
    pub fn decode(b: &[u8]) -> Option<PadHeader> {
        if b.len() < 64 || &b[..8] != PADH_MAGIC || crc32c::crc32c(&b[12..64]) != le32(b, 8) {
            return None;
        }
        Some(PadHeader {
            hdr_seq: le64(b, 16),
            pool_tag: le64(b, 24),
            tail: le64(b, 32),
            tail_batch_seq: le64(b, 40),
        })
    }
}

/// Header of one group-commit batch on the pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Consecutive batch number.
    pub batch_seq: u64,
    /// Virtual offset the batch was written at (detects stale ring content).
    pub virt: u64,
    /// Payload bytes (records, each 8-byte aligned) after the header.
    pub payload_len: u32,
    /// Records in the payload.
    pub nrec: u32,
    /// `BATCH_WRAP` or 0.
    pub flags: u32,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
}

/// Encode a batch header into the first `BATCH_HEADER` bytes of `buf`, with the crc
/// covering the header and the `payload_len` bytes that follow it.
pub fn encode_batch(buf: &mut [u8], h: &BatchHeader) {
    {
        let mut p = Put::new(&mut buf[..BATCH_HEADER]);
        p.u32(BATCH_MAGIC);
        p.u32(0);
        p.u64(h.batch_seq);
        p.u64(h.virt);
        p.u32(h.payload_len);
        p.u32(h.nrec);
        p.u32(h.flags);
        p.u32(FORMAT_VERSION);
        p.u64(h.pool_tag);
    }
    let end = BATCH_HEADER + h.payload_len as usize;
    let crc = crc32c::crc32c(&buf[8..end]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Decode the batch header at the start of `buf` (header only; no crc check).
pub fn peek_batch(buf: &[u8]) -> Option<BatchHeader> {
    if buf.len() < BATCH_HEADER || le32(buf, 0) != BATCH_MAGIC {
        return None;
    }
    Some(BatchHeader {
        batch_seq: le64(buf, 8),
        virt: le64(buf, 16),
        payload_len: le32(buf, 24),
        nrec: le32(buf, 28),
        flags: le32(buf, 32),
        pool_tag: le64(buf, 40),
    })
}

/// Verify a batch's crc; `buf` starts at the header and holds the whole payload.
pub fn verify_batch(buf: &[u8], h: &BatchHeader) -> bool {
    let end = BATCH_HEADER + h.payload_len as usize;
    end <= buf.len() && crc32c::crc32c(&buf[8..end]) == le32(buf, 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_header_roundtrip() {
        let p = PadHeader {
            hdr_seq: 1,
            pool_tag: 2,
            tail: 3,
            tail_batch_seq: 4,
        };
        assert_eq!(PadHeader::decode(&p.encode()), Some(p));
    }
}
