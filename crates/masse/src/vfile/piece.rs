//! Chunk values with a checksum per piece (file layer format 2, docs/vfile.md §2).
//!
//! A chunk record's value is the chunk's bytes cut into pieces of `piece`
//! bytes (1 KiB), each followed by a crc32c of the chunk's key, the piece's
//! number and its bytes; the last piece is padded with zeros. The engine's
//! record crc covers a whole record, so without these a read of 4 KiB of a
//! 16 KiB chunk had to fetch all 16 KiB to be verified; with them it fetches
//! only the pieces it needs ([`crate::Db::get_parts`]) and checks each. The key
//! in the crc makes a piece of another chunk (a stale location) fail its check.
//! Format 1 file layers (no pieces) keep whole-chunk reads.

use super::error::{VfsError, VfsResult};
use std::ops::Range;

/// Piece size of new file layers.
pub const PIECE: u32 = 1024;
const CRC: usize = 4;

/// How chunk values are laid out: `piece` 0 is format 1 (bare bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    /// Bytes per piece, 0 for none.
    pub piece: u32,
}

fn piece_crc(seed: u32, j: usize, data: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(seed, &(j as u32).to_le_bytes());
    crc32c::crc32c_append(c, data)
}

fn corrupt(key: &[u8], what: &str) -> VfsError {
    VfsError::Corrupt(format!("chunk record {key:02x?}: {what}"))
}

impl Codec {
    /// Whether chunks carry piece checksums (and can be read in parts).
    pub fn pieces(&self) -> bool {
        self.piece > 0
    }

    fn stride(&self) -> usize {
        self.piece as usize + CRC
    }

    /// Bytes of the stored value of a chunk holding `n` bytes.
    pub fn stored_len(&self, n: usize) -> usize {
        if !self.pieces() {
            return n;
        }
        n.div_ceil(self.piece as usize) * self.stride()
    }

    /// The stored value of a chunk holding `data`.
    pub fn encode(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        if !self.pieces() {
            return data.to_vec();
        }
        let p = self.piece as usize;
        let seed = crc32c::crc32c(key);
        let mut v = Vec::with_capacity(data.len().div_ceil(p) * self.stride());
        for (j, d) in data.chunks(p).enumerate() {
            let at = v.len();
            v.extend_from_slice(d);
            v.resize(at + p, 0);
            let c = piece_crc(seed, j, &v[at..at + p]);
            v.extend_from_slice(&c.to_le_bytes());
        }
        v
    }

    /// The chunk's bytes from a whole stored value (already verified by the
    /// record's checksum; the pieces are checked all the same, cheaply, so that
    /// a value that does not follow the format is reported, not returned).
    pub fn decode(&self, key: &[u8], v: Vec<u8>) -> VfsResult<Vec<u8>> {
        if !self.pieces() {
            return Ok(v);
        }
        if v.len() % self.stride() != 0 {
            return Err(corrupt(key, "length is not a whole number of pieces"));
        }
        self.decode_part(key, 0, &v)
    }

    /// The value range holding chunk bytes `o..o + n`, and the chunk offset
    /// where that range's data starts.
    pub fn part_range(&self, o: usize, n: usize) -> (Range<usize>, usize) {
        let p = self.piece as usize;
        let (first, end) = (o / p, (o + n).div_ceil(p));
        (first * self.stride()..end * self.stride(), first * p)
    }

    /// Verify and strip pieces read from value offset `first * stride` on.
    /// `Db::get_parts` hands out exactly the value's bytes, so a tail shorter
    /// than a piece is a cut piece: corrupt.
    pub fn decode_part(&self, key: &[u8], first: usize, b: &[u8]) -> VfsResult<Vec<u8>> {
        let (p, s) = (self.piece as usize, self.stride());
        if b.len() % s != 0 {
            return Err(corrupt(key, "a piece is cut short"));
        }
        let seed = crc32c::crc32c(key);
        let mut out = Vec::with_capacity(b.len() / s * p);
        for (j, w) in b.chunks_exact(s).enumerate() {
            let (d, c) = w.split_at(p);
            let want = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if piece_crc(seed, first + j, d) != want {
                return Err(corrupt(
                    key,
                    &format!("piece {} checksum mismatch", first + j),
                ));
            }
            out.extend_from_slice(d);
        }
        Ok(out)
    }

    /// Whether a part read from value offset `first * stride` checks out.
    pub fn check_part(&self, key: &[u8], first: usize, b: &[u8]) -> bool {
        self.decode_part(key, first, b).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Codec = Codec { piece: 1024 };

    #[test]
    fn round_trip_and_parts() {
        let key = b"\0vfCkey";
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let v = C.encode(key, &data);
        assert_eq!(v.len(), 5 * 1028);
        assert_eq!(v.len(), C.stored_len(data.len()));
        let back = C.decode(key, v.clone()).unwrap();
        assert_eq!(&back[..5000], &data[..]);
        assert!(back[5000..].iter().all(|&b| b == 0));
        // A part: bytes 1500..3100 live in pieces 1..=3.
        let (r, at) = C.part_range(1500, 1600);
        assert_eq!((r.clone(), at), (1028..4112, 1024));
        let part = C.decode_part(key, 1, &v[r]).unwrap();
        assert_eq!(&part[1500 - at..3100 - at], &data[1500..3100]);
    }

    #[test]
    fn damage_and_foreign_pieces_fail() {
        let key = b"\0vfCkey";
        let data = vec![9u8; 4096];
        let mut v = C.encode(key, &data);
        assert!(
            C.decode(b"\0vfCother", v.clone()).is_err(),
            "another chunk's bytes"
        );
        let (r, _) = C.part_range(2048, 10);
        assert!(
            !C.check_part(key, 1, &v[r.clone()]),
            "piece numbers are in the crc"
        );
        assert!(C.check_part(key, 2, &v[r.clone()]));
        v[2 * 1028 + 5] ^= 1;
        assert!(!C.check_part(key, 2, &v[r]));
        assert!(C.decode(key, v).is_err());
    }

    #[test]
    fn a_cut_piece_is_corrupt() {
        let key = b"k";
        let mut v = C.encode(key, &[1u8; 1024]);
        assert!(C.decode_part(key, 0, &v).is_ok());
        v.push(0);
        assert!(C.decode_part(key, 0, &v).is_err());
        v.truncate(v.len() - 2);
        assert!(C.decode_part(key, 0, &v).is_err());
    }

    #[test]
    fn format_one_is_bare() {
        let c = Codec { piece: 0 };
        assert_eq!(c.encode(b"k", b"abc"), b"abc");
        assert_eq!(c.decode(b"k", b"abc".to_vec()).unwrap(), b"abc");
    }
}
