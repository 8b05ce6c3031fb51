//! An index checkpoint slot: its header and the band table in its payload
//! (the index shard images in the payload are `index::image`'s).

use super::bytes::{le32, Get, Put};
use super::version::CHECKPOINT_VERSION;
use crate::error::Result;

const CKPT_MAGIC: &[u8; 8] = b"MASSECKP";

/// Header of a checkpoint slot (first 4 KiB of the slot); the payload follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointHeader {
    /// Layout version of the header and payload ([`CHECKPOINT_VERSION`] when
    /// written by this build; the engine loads no other version, it scans).
    pub version: u32,
    /// Increments with every checkpoint; the newest valid slot wins.
    pub ckpt_seq: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Every segment with a sequence number ≥ this was not durable when the
    /// snapshot started and is replayed from the capacity tier.
    pub replay_from_seq: u64,
    /// Next record sequence number at snapshot start.
    pub next_record_seq: u64,
    /// Index shard count of the images.
    pub shards: u32,
    /// Bands described in the band table.
    pub bands: u32,
    /// Payload bytes after the header.
    pub payload_len: u64,
    /// xxh3-64 of the payload.
    pub payload_hash: u64,
    /// Wall-clock duration of the snapshot, microseconds (informational).
    pub took_us: u64,
}

/// Bytes reserved for the checkpoint header.
pub const CKPT_HEADER: u64 = 4096;

impl CheckpointHeader {
    /// Encode into a 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; CKPT_HEADER as usize];
        {
            let mut p = Put::new(&mut b);
            p.bytes(CKPT_MAGIC);
            p.u32(0);
            p.u32(self.version);
            p.u64(self.ckpt_seq);
            p.u64(self.pool_tag);
            p.u64(self.replay_from_seq);
            p.u64(self.next_record_seq);
            p.u32(self.shards);
            p.u32(self.bands);
            p.u64(self.payload_len);
            p.u64(self.payload_hash);
            p.u64(self.took_us);
        }
        let crc = crc32c::crc32c(&b[12..128]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode; `None` if blank or damaged.
    pub fn decode(b: &[u8]) -> Option<CheckpointHeader> {
        if b.len() < 128 || &b[..8] != CKPT_MAGIC || crc32c::crc32c(&b[12..128]) != le32(b, 8) {
            return None;
        }
        let version = le32(b, 12);
        if version > CHECKPOINT_VERSION {
            return None;
        }
        let mut g = Get::new(&b[16..128]);
        Some(CheckpointHeader {
            version,
            ckpt_seq: g.u64().ok()?,
            pool_tag: g.u64().ok()?,
            replay_from_seq: g.u64().ok()?,
            next_record_seq: g.u64().ok()?,
            shards: g.u32().ok()?,
            bands: g.u32().ok()?,
            payload_len: g.u64().ok()?,
            payload_hash: g.u64().ok()?,
            took_us: g.u64().ok()?,
        })
    }
}

/// Per-band entry of the checkpoint's band table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BandRecord {
    /// 0 = free, 1 = in use.
    pub in_use: bool,
    /// First segment sequence number of the incarnation (valid when in use).
    pub first_seq: u64,
    /// Slots holding valid segments.
    pub written_slots: u32,
    /// Smallest record sequence number stored in the band.
    pub min_seq: u64,
}

/// Bytes per band table entry.
pub const BAND_RECORD: usize = 24;

impl BandRecord {
    /// Append the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.min_seq.to_le_bytes());
        out.extend_from_slice(&self.written_slots.to_le_bytes());
        out.extend_from_slice(&(self.in_use as u32).to_le_bytes());
    }

    /// Decode one entry.
    pub fn decode(b: &[u8]) -> Result<BandRecord> {
        let mut g = Get::new(b);
        let first_seq = g.u64()?;
        let min_seq = g.u64()?;
        let written_slots = g.u32()?;
        let in_use = g.u32()? != 0;
        Ok(BandRecord {
            in_use,
            first_seq,
            written_slots,
            min_seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_header_roundtrip() {
        let c = CheckpointHeader {
            version: CHECKPOINT_VERSION,
            ckpt_seq: 1,
            pool_tag: 2,
            replay_from_seq: 3,
            next_record_seq: 4,
            shards: 5,
            bands: 6,
            payload_len: 7,
            payload_hash: 8,
            took_us: 9,
        };
        assert_eq!(CheckpointHeader::decode(&c.encode()), Some(c));
    }
}
