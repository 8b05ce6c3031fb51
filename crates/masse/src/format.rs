//! The on-disk format, in one place. Described for humans in `docs/format.md`;
//! any change here must bump [`FORMAT_VERSION`] and update that document.
//!
//! All integers are little-endian. Every structure carries a checksum
//! (crc32c for small structures, xxh3-64 for checkpoint payloads) and is
//! rejected, never trusted, when the checksum fails.

use crate::error::{Error, Result};

/// Version written by this build. Devices with a higher version are refused.
/// Version 2 (this build) adds the pool's key-digest secret to the superblock
/// and a second copy of every band header; version-1 pools keep opening (with
/// the unkeyed digest they were created with).
pub const FORMAT_VERSION: u32 = 2;

/// Offset in the superblock of the key-digest kind (u32) and secret (16 bytes),
/// format version 2: past the largest capacity-device table (120 + 4 · 64).
pub const SB_KEY_DIGEST_AT: usize = 512;

/// Size of one superblock copy; two copies sit at offsets 0 and 4096.
pub const SUPERBLOCK_SIZE: usize = 4096;
/// Bytes reserved at the start of every device for the two superblock copies.
pub const SUPERBLOCK_AREA: u64 = 8192;

/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted (2 MiB minus room for the header and the longest key).
pub const MAX_VALUE_LEN: usize = (1 << 21) - 4096;

const SB_MAGIC: &[u8; 8] = b"MASSE\0SB";
const BAND_MAGIC: &[u8; 8] = b"MASSEBND";
const PADH_MAGIC: &[u8; 8] = b"MASSEPAD";
const CKPT_MAGIC: &[u8; 8] = b"MASSECKP";
const SEG_MAGIC: u32 = 0x4647_4553; // "SEGF"
const BATCH_MAGIC: u32 = 0x4244_4150; // "PADB"

// ---------------------------------------------------------------------------
// Little helpers

/// Sequential little-endian writer over a byte slice.
pub(crate) struct Put<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Put<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Put { buf, pos: 0 }
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Sequential little-endian reader; every read is bounds-checked.
pub(crate) struct Get<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Get<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Get { buf, pos: 0 }
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(Error::Corruption("truncated structure".into())),
        }
    }
    pub(crate) fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.arr::<1>()?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub(crate) fn u128(&mut self) -> Result<u128> {
        Ok(u128::from_le_bytes(self.arr()?))
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

// ---------------------------------------------------------------------------
// Superblock

/// What a device does in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Role {
    /// Fast tier: write pad and index checkpoints.
    Fast,
    /// Capacity tier: LBands of segments.
    Capacity,
}

/// Pool configuration family (paper §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Mode {
    /// Fast tier (SCM) as write pad in front of a log-structured capacity tier.
    Tiered,
    /// Capacity tier only: durable puts are group-committed straight into the log.
    CapacityOnly,
    /// SCM only: small 4 KiB-aligned writes, no large-sequential shaping.
    ScmOnly,
}

impl Mode {
    fn code(self) -> u8 {
        match self {
            Mode::Tiered => 1,
            Mode::CapacityOnly => 2,
            Mode::ScmOnly => 3,
        }
    }
    fn from_code(c: u8) -> Option<Mode> {
        Some(match c {
            1 => Mode::Tiered,
            2 => Mode::CapacityOnly,
            3 => Mode::ScmOnly,
            _ => return None,
        })
    }
    /// Name used in the CLI and stats.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tiered => "tiered",
            Mode::CapacityOnly => "capacity-only",
            Mode::ScmOnly => "scm-only",
        }
    }
}

/// Geometry shared by every device of a pool; identical in all superblocks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Configuration family.
    pub mode: Mode,
    /// Segment (slot) size in bytes.
    pub segment_size: u32,
    /// LBand size in bytes.
    pub band_size: u64,
    /// Bytes at the start of each band holding the band header (≥ 4 KiB, IU-aligned).
    pub band_header_size: u32,
    /// Indirection unit of the capacity devices used for alignment.
    pub iu: u32,
    /// Bands on each capacity device, in device order.
    pub bands_per_device: Vec<u32>,
    /// Where the write pad lives: (device role index, offset, size). Size 0 = no pad.
    pub pad_offset: u64,
    /// Pad size in bytes (0 when there is no fast tier).
    pub pad_size: u64,
    /// Offset of the two checkpoint slots (on the fast device, or capacity device 0).
    pub ckpt_offset: u64,
    /// Size of one checkpoint slot.
    pub ckpt_slot_size: u64,
    /// Offset of band 0 on every capacity device.
    pub data_start: u64,
    /// True when the pool has a fast-tier device.
    pub has_fast: bool,
}

impl Geometry {
    /// Check that the geometry describes a pool this build can address: every
    /// field in range and every region inside its device's layout. A superblock
    /// with a valid checksum but an impossible geometry (a bug, or a crafted
    /// device) is refused at open instead of dividing by zero later.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let (seg, iu) = (self.segment_size as u64, self.iu as u64);
        let hdr = self.band_header_size as u64;
        if !iu.is_power_of_two() || !(4096..=1 << 20).contains(&iu) {
            return Err(format!("indirection unit {iu}"));
        }
        if seg % iu != 0 || !(8192..=512 << 10).contains(&seg) {
            return Err(format!("segment size {seg} (indirection unit {iu})"));
        }
        if hdr < 4096 || hdr % iu != 0 || hdr % 4096 != 0 {
            return Err(format!("band header size {hdr}"));
        }
        if self.band_size % iu != 0 || self.band_size < hdr + 8 * seg {
            return Err(format!(
                "band size {} (header {hdr}, segment {seg})",
                self.band_size
            ));
        }
        let ndev = self.bands_per_device.len();
        let bands: u64 = self.bands_per_device.iter().map(|&n| n as u64).sum();
        if !(1..=64).contains(&ndev) || bands == 0 {
            return Err(format!("{ndev} capacity devices with {bands} bands"));
        }
        let slots = bands * ((self.band_size - hdr) / seg);
        if slots >= MAX_SLOTS || bands > u32::MAX as u64 {
            return Err(format!("{slots} segments"));
        }
        self.validate_regions()
    }

    fn validate_regions(&self) -> std::result::Result<(), String> {
        let aligned = |x: u64| x % 4096 == 0;
        let meta_end = EPOCH_OFFSET + EPOCH_AREA;
        let ckpt_end = self
            .ckpt_slot_size
            .checked_mul(2)
            .and_then(|c| c.checked_add(self.ckpt_offset))
            .ok_or("checkpoint region overflows")?;
        if !aligned(self.ckpt_offset) || !aligned(self.ckpt_slot_size) || !aligned(self.data_start)
        {
            return Err("unaligned region".into());
        }
        if self.has_fast != (self.mode == Mode::Tiered) {
            return Err(format!(
                "mode {} with has_fast {}",
                self.mode.name(),
                self.has_fast
            ));
        }
        if self.has_fast {
            let pad_end = self
                .pad_offset
                .checked_add(self.pad_size)
                .ok_or("pad overflows")?;
            if self.pad_size < 4096 * 4
                || !aligned(self.pad_offset)
                || !aligned(self.pad_size)
                || self.pad_offset < meta_end + 2 * PAD_HEADER_SIZE
                || pad_end > self.ckpt_offset
            {
                return Err(format!(
                    "pad at {} of {} bytes",
                    self.pad_offset, self.pad_size
                ));
            }
        } else if self.pad_size != 0 || self.ckpt_offset < meta_end || ckpt_end > self.data_start {
            return Err("metadata regions overlap".into());
        }
        if self.data_start < meta_end {
            return Err(format!("data start {}", self.data_start));
        }
        Ok(())
    }

    /// Bytes of capacity device `i` this geometry uses.
    pub fn capacity_used(&self, i: usize) -> Option<u64> {
        let n = *self.bands_per_device.get(i)? as u64;
        n.checked_mul(self.band_size)?.checked_add(self.data_start)
    }
}

/// Contents of one superblock copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Format version that wrote it.
    pub version: u32,
    /// Random pool identity; every device of the pool carries the same.
    pub pool_id: u128,
    /// Role of this device.
    pub role: Role,
    /// Index among the capacity devices (0 for the fast device).
    pub device_index: u32,
    /// Bytes of this device the pool uses.
    pub device_capacity: u64,
    /// Media class recorded at create time.
    pub media: u8,
    /// Seconds since the epoch at create time.
    pub created_unix: u64,
    /// Pool geometry.
    pub geometry: Geometry,
    /// How keys are digested in this pool (version 1: unkeyed XXH3).
    pub key_digest: crate::index::KeyDigest,
}

/// Result of looking for a superblock on a device.
pub enum SuperblockProbe {
    /// A valid superblock.
    Found(Superblock),
    /// No masse magic at all: foreign or blank device.
    NotMasse(String),
    /// Masse magic but a version newer than ours.
    TooNew(u32),
}

impl Superblock {
    /// Encode into a 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_SIZE];
        let g = &self.geometry;
        {
            let mut p = Put::new(&mut b);
            p.bytes(SB_MAGIC);
            p.u32(self.version);
            p.u32(0); // crc placeholder, at offset 12
            p.u128(self.pool_id);
            p.u8(match self.role {
                Role::Fast => 1,
                Role::Capacity => 2,
            });
            p.u8(g.mode.code());
            p.u8(self.media);
            p.u8(g.has_fast as u8);
            p.u32(self.device_index);
            p.u64(self.device_capacity);
            p.u64(self.created_unix);
            p.u32(g.segment_size);
            p.u32(g.band_header_size);
            p.u64(g.band_size);
            p.u32(g.iu);
            p.u64(g.pad_offset);
            p.u64(g.pad_size);
            p.u64(g.ckpt_offset);
            p.u64(g.ckpt_slot_size);
            p.u64(g.data_start);
            p.u32(g.bands_per_device.len() as u32);
            for &n in &g.bands_per_device {
                p.u32(n);
            }
        }
        if self.version >= 2 {
            let mut p = Put::new(&mut b[SB_KEY_DIGEST_AT..SB_KEY_DIGEST_AT + 20]);
            match self.key_digest {
                crate::index::KeyDigest::Xxh3 => p.u32(0),
                crate::index::KeyDigest::Keyed(k) => {
                    p.u32(1);
                    p.bytes(&k);
                }
            }
        }
        let crc = crc32c::crc32c(&b[16..]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode one 4 KiB copy.
    pub fn decode(b: &[u8]) -> SuperblockProbe {
        if b.len() < SUPERBLOCK_SIZE || &b[..8] != SB_MAGIC {
            return SuperblockProbe::NotMasse("no masse superblock magic".into());
        }
        let version = le32(b, 8);
        // Checksum first: a flipped bit in the version field is damage, not a newer format.
        // (Every format version keeps the magic, version and crc32c at these offsets.)
        if crc32c::crc32c(&b[16..SUPERBLOCK_SIZE]) != le32(b, 12) {
            return SuperblockProbe::NotMasse("superblock checksum mismatch".into());
        }
        if version > FORMAT_VERSION {
            return SuperblockProbe::TooNew(version);
        }
        match Self::decode_fields(b, version) {
            Ok(sb) => SuperblockProbe::Found(sb),
            Err(e) => SuperblockProbe::NotMasse(format!("malformed superblock: {e}")),
        }
    }

    fn decode_fields(b: &[u8], version: u32) -> Result<Superblock> {
        let mut g = Get::new(&b[16..SUPERBLOCK_SIZE]);
        let pool_id = g.u128()?;
        let role = match g.u8()? {
            1 => Role::Fast,
            2 => Role::Capacity,
            r => return Err(Error::Corruption(format!("unknown role {r}"))),
        };
        let mode =
            Mode::from_code(g.u8()?).ok_or_else(|| Error::Corruption("unknown mode".into()))?;
        let media = g.u8()?;
        let has_fast = g.u8()? != 0;
        let device_index = g.u32()?;
        let device_capacity = g.u64()?;
        let created_unix = g.u64()?;
        let segment_size = g.u32()?;
        let band_header_size = g.u32()?;
        let band_size = g.u64()?;
        let iu = g.u32()?;
        let pad_offset = g.u64()?;
        let pad_size = g.u64()?;
        let ckpt_offset = g.u64()?;
        let ckpt_slot_size = g.u64()?;
        let data_start = g.u64()?;
        let ndev = g.u32()?;
        if ndev == 0 || ndev > 64 {
            return Err(Error::Corruption(format!(
                "bad capacity device count {ndev}"
            )));
        }
        let mut bands_per_device = Vec::with_capacity(ndev as usize);
        for _ in 0..ndev {
            bands_per_device.push(g.u32()?);
        }
        let key_digest = match version {
            1 => crate::index::KeyDigest::Xxh3,
            _ => {
                let mut g = Get::new(&b[SB_KEY_DIGEST_AT..SB_KEY_DIGEST_AT + 20]);
                match g.u32()? {
                    0 => crate::index::KeyDigest::Xxh3,
                    1 => crate::index::KeyDigest::Keyed(g.arr()?),
                    k => return Err(Error::Corruption(format!("unknown key digest {k}"))),
                }
            }
        };
        let sb = Superblock {
            version,
            pool_id,
            role,
            device_index,
            device_capacity,
            media,
            created_unix,
            geometry: Geometry {
                mode,
                segment_size,
                band_size,
                band_header_size,
                iu,
                bands_per_device,
                pad_offset,
                pad_size,
                ckpt_offset,
                ckpt_slot_size,
                data_start,
                has_fast,
            },
            key_digest,
        };
        sb.geometry
            .validate()
            .map_err(|e| Error::Corruption(format!("impossible geometry: {e}")))?;
        Ok(sb)
    }
}

/// Offset of the two epoch blocks on the metadata device (after the superblocks).
pub const EPOCH_OFFSET: u64 = SUPERBLOCK_AREA;
/// Bytes of the epoch area (two 4 KiB copies, written alternately).
pub const EPOCH_AREA: u64 = 8192;
const EPOCH_MAGIC: &[u8; 8] = b"MASSEEPO";

/// Incremented and made durable on every open; segment sequence numbers carry it
/// in their top bits so a run never reuses a number a crashed run may have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochBlock {
    /// The epoch.
    pub epoch: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// 1 if the previous run closed cleanly.
    pub clean: u32,
}

impl EpochBlock {
    /// Encode into a 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        {
            let mut p = Put::new(&mut b);
            p.bytes(EPOCH_MAGIC);
            p.u32(0);
            p.u32(self.clean);
            p.u64(self.epoch);
            p.u64(self.pool_tag);
        }
        let crc = crc32c::crc32c(&b[12..64]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        b
    }
    /// Decode; `None` if blank or damaged.
    pub fn decode(b: &[u8]) -> Option<EpochBlock> {
        if b.len() < 64 || &b[..8] != EPOCH_MAGIC || crc32c::crc32c(&b[12..64]) != le32(b, 8) {
            return None;
        }
        Some(EpochBlock {
            clean: le32(b, 12),
            epoch: le64(b, 16),
            pool_tag: le64(b, 24),
        })
    }
}

// ---------------------------------------------------------------------------
// Records

/// The 32-bit tag records carry for the segment they were written into: a mix of
/// all 64 bits of the segment sequence number (whose top bits are the epoch), so a
/// record left in a reused slot by an earlier segment does not match by accident.
pub fn seg_tag(segment_seq: u64) -> u32 {
    let h = xxhash_rust::xxh3::xxh3_64(&segment_seq.to_le_bytes());
    (h ^ (h >> 32)) as u32
}

/// Bytes of the record header.
pub const RECORD_HEADER: usize = 24;
/// Offset of the flags byte in a record header.
pub const REC_FLAGS_AT: usize = 18;
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

/// Bytes one record takes in a capacity segment: its encoding padded to 8
/// bytes, plus its entry in the segment summary. An estimate for sizing a
/// pool from a record count; band and segment headers and free space are not
/// included.
pub fn record_footprint(key_len: usize, value_len: usize) -> u64 {
    (record_len(key_len, value_len) as u64).div_ceil(8) * 8 + SUMMARY_ENTRY as u64
}

/// Encode a record into `out` (which must be exactly `record_len` bytes).
///
/// Layout: crc32c u32 | seg_tag u32 | seq u64 | key_len u16 | flags u8 | 0 u8 |
/// val_len u32 | key | value. The crc covers everything after itself, so a record
/// copied to a segment with another tag must be re-encoded.
pub fn encode_record(out: &mut [u8], seg_tag: u32, seq: u64, flags: u8, key: &[u8], value: &[u8]) {
    encode_record_unsealed(out, seg_tag, seq, flags, key, value);
    let crc = crc32c::crc32c(&out[4..]);
    out[..4].copy_from_slice(&crc.to_le_bytes());
}

/// Like [`encode_record`] but leaves the crc zero, for a record whose seq and
/// segment tag are stamped (and crc computed, by [`retag_record`]) later.
pub fn encode_record_unsealed(
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

/// Re-stamp an encoded record with a new segment tag (recomputes the crc).
pub fn retag_record(rec: &mut [u8], seg_tag: u32) {
    rec[4..8].copy_from_slice(&seg_tag.to_le_bytes());
    let crc = crc32c::crc32c(&rec[4..]);
    rec[..4].copy_from_slice(&crc.to_le_bytes());
}

/// Parse the header at the start of `b` without checking the crc.
pub fn peek_record(b: &[u8]) -> Option<RecordHeader> {
    if b.len() < RECORD_HEADER {
        return None;
    }
    let h = RecordHeader {
        seg_tag: le32(b, 4),
        seq: le64(b, 8),
        key_len: u16::from_le_bytes([b[16], b[17]]),
        flags: b[REC_FLAGS_AT],
        val_len: le32(b, 20),
    };
    if h.key_len == 0 || h.key_len as usize > MAX_KEY_LEN || h.val_len as usize > MAX_VALUE_LEN {
        return None;
    }
    Some(h)
}

/// The key of an encoded record (whose header is known to be well formed).
pub fn record_key(rec: &[u8]) -> &[u8] {
    let n = u16::from_le_bytes([rec[16], rec[17]]) as usize;
    &rec[RECORD_HEADER..RECORD_HEADER + n]
}

/// Parse and verify a whole record at the start of `b`: returns the header, key and value.
pub fn decode_record(b: &[u8]) -> Result<(RecordHeader, &[u8], &[u8])> {
    let h = peek_record(b).ok_or_else(|| Error::Corruption("record header malformed".into()))?;
    let total = h.total_len();
    if b.len() < total {
        return Err(Error::Corruption("record truncated".into()));
    }
    if crc32c::crc32c(&b[4..total]) != le32(b, 0) {
        return Err(Error::Corruption("record checksum mismatch".into()));
    }
    let k = RECORD_HEADER + h.key_len as usize;
    Ok((h, &b[RECORD_HEADER..k], &b[k..total]))
}

// ---------------------------------------------------------------------------
// Segment summary and footer

/// Bytes of the segment footer (at the very end of a segment).
pub const SEG_FOOTER: usize = 64;
/// Bytes of one summary entry (placed just before the footer, growing down).
pub const SUMMARY_ENTRY: usize = 32;

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
        if offset as u64 + len as u64 > f.data_len as u64 {
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
        })
    }
}

// ---------------------------------------------------------------------------
// Band header

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

// ---------------------------------------------------------------------------
// Write pad (fast tier)

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

// ---------------------------------------------------------------------------
// Checkpoint

/// Header of a checkpoint slot (first 4 KiB of the slot); the payload follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointHeader {
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
            p.u32(FORMAT_VERSION);
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
        if le32(b, 12) > FORMAT_VERSION {
            return None;
        }
        let mut g = Get::new(&b[16..128]);
        Some(CheckpointHeader {
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

// ---------------------------------------------------------------------------
// Locations (in DRAM only, never on disk except inside checkpoint images)

/// A record's address, packed in 64 bits for the index:
/// `slot:29 | offset/8:16 | len8:18 | tombstone:1`.
///
/// `slot` numbers segments globally across capacity devices; `offset` is the
/// byte offset within the segment (records are 8-byte aligned); `len8` is the
/// record length in 8-byte units, rounded up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc(pub u64);

/// Largest slot number a [`Loc`] can address.
pub const MAX_SLOTS: u64 = 1 << 29;

impl Loc {
    /// Pack a location.
    pub fn new(slot: u64, offset: u32, len: u32, tombstone: bool) -> Loc {
        debug_assert!(slot < MAX_SLOTS && offset % 8 == 0 && (offset >> 3) < (1 << 16));
        let len8 = (len as u64).div_ceil(8);
        debug_assert!(len8 < (1 << 18));
        Loc((slot << 35) | (((offset >> 3) as u64) << 19) | (len8 << 1) | tombstone as u64)
    }
    /// Global slot number.
    pub fn slot(self) -> u64 {
        self.0 >> 35
    }
    /// Byte offset within the segment.
    pub fn offset(self) -> u32 {
        (((self.0 >> 19) & 0xFFFF) as u32) << 3
    }
    /// Record length rounded up to 8 bytes.
    pub fn len8(self) -> u32 {
        (((self.0 >> 1) & 0x3FFFF) as u32) << 3
    }
    /// True for a tombstone.
    pub fn is_tombstone(self) -> bool {
        self.0 & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loc_roundtrip() {
        let l = Loc::new(MAX_SLOTS - 1, 8 * 65535, (1 << 21) - 8, true);
        assert_eq!(l.slot(), MAX_SLOTS - 1);
        assert_eq!(l.offset(), 8 * 65535);
        assert_eq!(l.len8(), (1 << 21) - 8);
        assert!(l.is_tombstone());
        let l = Loc::new(7, 4096, 123, false);
        assert_eq!(
            (l.slot(), l.offset(), l.len8(), l.is_tombstone()),
            (7, 4096, 128, false)
        );
    }

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

    #[test]
    fn headers_roundtrip() {
        let b = BandHeader {
            state: BAND_IN_USE,
            pool_tag: 1,
            band: 2,
            first_seq: 3,
        };
        assert_eq!(BandHeader::decode(&b.encode()), Some(b));
        let p = PadHeader {
            hdr_seq: 1,
            pool_tag: 2,
            tail: 3,
            tail_batch_seq: 4,
        };
        assert_eq!(PadHeader::decode(&p.encode()), Some(p));
        let c = CheckpointHeader {
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
