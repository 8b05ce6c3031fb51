//! The band header at the start of every LBand of a capacity device.

use super::bytes::{le32, le64, Put};
use super::version::FORMAT_VERSION;

const BAND_MAGIC: &[u8; 8] = b"MASSEBND";

/// Band header state: in use (holds segments from `first_seq` on).
pub const BAND_IN_USE: u32 = 1;
/// Band header state: free (contents are garbage).
pub const BAND_FREE: u32 = 2;

/// The header at the start of every LBand, rewritten when the band is opened or freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandHeader {
    /// `BAND_IN_USE` or `BAND_FREE`.
    pub state: u32,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Global band number.
    pub band: u32,
    /// Segment sequence number of the band's first slot (identifies the incarnation).
    pub first_seq: u64,
    /// FREE headers (format version 5): the newest segment seq the writer had
    /// written, and synced, before it wrote this header; 0 in IN_USE headers
    /// and in headers older builds wrote. A segment at or below it cannot be
    /// part of a burst a crash tore (design.md §10.4, "A torn burst").
    pub freed_after: u64,
}

/// Offset of the band header's second copy within its block (format version 2).
pub const BAND_HEADER_COPY: usize = 2048;

impl BandHeader {
    /// Encode into a 4 KiB block: the header at offset 0 and a second copy at
    /// [`BAND_HEADER_COPY`], so a damaged byte costs one copy, not the band.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        self.encode_copy(&mut b[..64]);
        let (first, second) = b.split_at_mut(BAND_HEADER_COPY);
        second[..64].copy_from_slice(&first[..64]);
        b
    }

    fn encode_copy(&self, b: &mut [u8]) {
        {
            let mut p = Put::new(b);
            p.bytes(BAND_MAGIC);
            p.u32(0);
            p.u32(self.state);
            p.u64(self.pool_tag);
            p.u32(self.band);
            p.u32(FORMAT_VERSION);
            p.u64(self.first_seq);
            p.u64(self.freed_after);
        }
        let crc = crc32c::crc32c(&b[12..64]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode one copy; `None` for a blank, foreign or damaged header.
    pub fn decode(b: &[u8]) -> Option<BandHeader> {
        if b.len() < 64 || &b[..8] != BAND_MAGIC || crc32c::crc32c(&b[12..64]) != le32(b, 8) {
            return None;
        }
        Some(BandHeader {
            state: le32(b, 12),
            pool_tag: le64(b, 16),
            band: le32(b, 24),
            first_seq: le64(b, 32),
            freed_after: le64(b, 40),
        })
    }

    /// Decode a header block: the first valid copy, and how many copies are
    /// damaged (neither valid nor blank). A version-1 block has one copy and a
    /// blank second.
    pub fn decode_copies(block: &[u8]) -> (Option<BandHeader>, u32) {
        let copies = [
            &block[..64],
            &block[BAND_HEADER_COPY..BAND_HEADER_COPY + 64],
        ];
        let mut found = None;
        let mut damaged = 0;
        for c in copies {
            match Self::decode(c) {
                Some(h) => {
                    found = found.or(Some(h));
                }
                None if c.iter().all(|&x| x == 0) => {}
                None => damaged += 1,
            }
        }
        (found, damaged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn band_header_roundtrip() {
        let b = BandHeader {
            state: BAND_IN_USE,
            pool_tag: 1,
            band: 2,
            first_seq: 3,
            freed_after: 4,
        };
        assert_eq!(BandHeader::decode(&b.encode()), Some(b));
    }
}
