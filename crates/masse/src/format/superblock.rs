//! The superblock (two copies at the start of every device: pool identity,
//! this device's role, the pool geometry) and the epoch block beside it.

use super::bytes::{le32, le64, Get, Put};
use super::loc::MAX_SLOTS;
use super::pad::PAD_HEADER_SIZE;
use super::version::FORMAT_VERSION;
use crate::error::{Error, Result};

/// Offset in the superblock of the key-digest kind (u32) and secret (16 bytes),
/// format version 2: past the largest capacity-device table (120 + 4 · 64).
pub const SB_KEY_DIGEST_AT: usize = 512;

/// Size of one superblock copy; two copies sit at offsets 0 and 4096.
pub const SUPERBLOCK_SIZE: usize = 4096;
/// Bytes reserved at the start of every device for the two superblock copies.
pub const SUPERBLOCK_AREA: u64 = 8192;

const SB_MAGIC: &[u8; 8] = b"MASSE\0SB";

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
    /// Damage found and not yet cleared by an operator (zero: none).
    pub damage: DamageRecord,
}

/// Damage to the pool that recovery (or a run that closed cleanly) found,
/// kept in the epoch block, carried from each open to the next, until an
/// operator clears it (`masse check --clear-damage`, `Db::clear_damage`):
/// a read of a key whose newest copy was lost returns an older value or
/// nothing, and this record is what says so (issue 44). Format version 5
/// fills bytes that were reserved (zero: no damage) before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DamageRecord {
    /// Damage events counted (corruptions, or 1 for a warning without a count).
    pub corruptions: u64,
    /// Epoch of the run that first found damage since the last clear.
    pub first_epoch: u64,
    /// Epoch of the run that found damage last.
    pub last_epoch: u64,
}

impl DamageRecord {
    /// Whether anything is recorded.
    pub fn is_set(&self) -> bool {
        self.corruptions > 0
    }

    /// Add `n` damage events found by the run of `epoch`.
    pub fn add(&mut self, n: u64, epoch: u64) {
        if n == 0 {
            return;
        }
        if !self.is_set() {
            self.first_epoch = epoch;
        }
        self.corruptions += n;
        self.last_epoch = epoch;
    }
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
            p.u64(self.damage.corruptions);
            p.u64(self.damage.first_epoch);
            p.u64(self.damage.last_epoch);
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
            damage: DamageRecord {
                corruptions: le64(b, 32),
                first_epoch: le64(b, 40),
                last_epoch: le64(b, 48),
            },
        })
    }
}
