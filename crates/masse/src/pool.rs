//! Formatting a pool and recognising its devices again.
//!
//! `create` refuses devices that already hold a pool; `open` refuses foreign,
//! mismatched, missing or newer-format devices. Neither formats anything the
//! caller did not ask for.
//!
//! Both claim every device before reading or writing it (one pool, one
//! process: see `device::claim`) and recognise a device given twice by its
//! identity, not its path.

use crate::config::{DeviceSpec, PoolConfig};
use crate::device::{
    missing_device_note, round_down64, round_up64, AlignedBuf, ClaimError, Device, DeviceClaim,
    Media,
};
use crate::error::{Error, Result};
use crate::format::*;
use std::sync::Arc;

/// The opened devices of a pool and its identity.
pub(crate) struct Pool {
    pub pool_id: u128,
    pub geo: Geometry,
    /// How keys are digested (format version 2: keyed with a per-pool secret).
    pub key_digest: crate::index::KeyDigest,
    /// Format version of the pool (its superblocks): which record codec it
    /// writes ([`Codec::of_version`]).
    pub version: u32,
    pub fast: Option<Arc<dyn Device>>,
    pub caps: Vec<Arc<dyn Device>>,
    /// What the user should know about the devices (a volatile one).
    pub warnings: Vec<String>,
    /// Each device's media class as its superblock records it (what `create`
    /// probed or was told), by device path: what reports show, not a second
    /// probe at open, which may classify the same disk otherwise.
    pub media: Vec<(String, Media)>,
    /// The exclusive claims on every device; dropping the pool (a clean close
    /// or a crash-like drop of the `Db`) releases them.
    _claims: Vec<DeviceClaim>,
}

impl Pool {
    pub fn pool_tag(&self) -> u64 {
        self.pool_id as u64
    }

    /// Device holding the epoch blocks and (without a fast tier) the checkpoints.
    pub fn meta(&self) -> &Arc<dyn Device> {
        match &self.fast {
            Some(f) => f,
            None => &self.caps[0],
        }
    }
}

fn dev_name(d: &Arc<dyn Device>) -> String {
    d.info().path.clone()
}

/// A pool's devices, opened, told apart and claimed.
struct Devices {
    fast: Option<Arc<dyn Device>>,
    caps: Vec<Arc<dyn Device>>,
    claims: Vec<DeviceClaim>,
}

/// Open one device. At `open` a missing one is a [`Error::MissingDevice`]
/// that says when it was on a memory filesystem (gone after a reboot).
fn open_spec(
    cfg: &PoolConfig,
    spec: &DeviceSpec,
    role: &str,
    at_open: bool,
) -> Result<Arc<dyn Device>> {
    // Opening never creates a file, whatever size the spec gives for creating
    // one: a mistyped or never-created pool must fail with a clear error and
    // leave nothing behind (it used to leave the files it made).
    let without_size;
    let spec = match spec {
        DeviceSpec::Path { path, .. } if at_open => {
            without_size = DeviceSpec::path(path.clone());
            &without_size
        }
        _ => spec,
    };
    match (spec.open(&cfg.io), spec) {
        (Err(Error::Io { source, .. }), DeviceSpec::Path { path, .. })
            if at_open && source.kind() == std::io::ErrorKind::NotFound =>
        {
            let note = missing_device_note(path).map_or(String::new(), |n| format!("; {n}"));
            Err(Error::MissingDevice(format!(
                "{role} device {} does not exist: if this pool was never made, create it \
                 first (`masse create`, `Db::create`){note}",
                path.display()
            )))
        }
        (r, _) => r,
    }
}

/// Open every device of `cfg` (the fast one first), refuse one storage given
/// twice under two names, then claim each device for this pool.
fn open_devices(cfg: &PoolConfig, at_open: bool) -> Result<Devices> {
    let fast = match &cfg.fast {
        Some(s) => Some(open_spec(cfg, s, "fast-tier", at_open)?),
        None => None,
    };
    let caps = cfg
        .capacity
        .iter()
        .map(|s| open_spec(cfg, s, "capacity", at_open))
        .collect::<Result<Vec<_>>>()?;
    let all: Vec<&Arc<dyn Device>> = fast.iter().chain(caps.iter()).collect();
    for (i, a) in all.iter().enumerate() {
        if let Some(b) = all[..i]
            .iter()
            .find(|b| b.info().identity == a.info().identity)
        {
            let (pa, pb) = (&b.info().path, &a.info().path);
            let same = if pa == pb {
                format!("{pa} was given twice")
            } else {
                format!("{pa} and {pb} are the same device ({})", a.info().identity)
            };
            return Err(Error::InvalidConfig(format!(
                "{same}; every device of a pool must be a different one"
            )));
        }
    }
    // Claimed before anything is read: a device in use is neither formatted
    // nor recovered from, its holder may be writing it.
    let claims = all
        .iter()
        .map(|d| {
            d.claim().map_err(|e| match e {
                ClaimError::Busy { holder } => Error::Busy {
                    path: dev_name(d),
                    holder,
                },
                ClaimError::Io(e) => Error::io(&dev_name(d), "claiming the device", e),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Devices { fast, caps, claims })
}

/// Warnings about devices whose contents do not survive a reboot.
fn volatile_warnings(fast: Option<&Arc<dyn Device>>, caps: &[Arc<dyn Device>]) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(f) = fast.filter(|f| f.info().volatile) {
        w.push(format!(
            "the fast tier {} is on tmpfs/ramfs (memory): it holds the newest acknowledged \
             writes (the write pad) and the index checkpoints, and does not survive a reboot \
             or power loss, after which the pool cannot be opened. Fine for trying masse out \
             and for tests; for data that must last use persistent SCM-class storage",
            f.info().path
        ));
    }
    for c in caps.iter().filter(|c| c.info().volatile) {
        w.push(format!(
            "the capacity device {} is on tmpfs/ramfs (memory): its contents are lost at a \
             reboot or power loss",
            c.info().path
        ));
    }
    w
}

pub(crate) fn read_block(
    dev: &Arc<dyn Device>,
    off: u64,
    len: usize,
    during: &'static str,
) -> Result<AlignedBuf> {
    let mut b = AlignedBuf::new(len);
    dev.read_at(&mut b, off)
        .map_err(|e| Error::io(&dev_name(dev), during, e))?;
    Ok(b)
}

pub(crate) fn write_block(
    dev: &Arc<dyn Device>,
    off: u64,
    data: &[u8],
    during: &'static str,
) -> Result<()> {
    let mut b = AlignedBuf::new(round_up64(data.len() as u64, 4096) as usize);
    b[..data.len()].copy_from_slice(data);
    dev.write_at(&b, off)
        .map_err(|e| Error::io(&dev_name(dev), during, e))
}

pub(crate) fn sync(dev: &Arc<dyn Device>, during: &'static str) -> Result<()> {
    dev.sync().map_err(|e| Error::io(&dev_name(dev), during, e))
}

/// Read both superblock copies; a valid one wins.
fn probe(dev: &Arc<dyn Device>) -> Result<SuperblockProbe> {
    if dev.info().capacity < SUPERBLOCK_AREA {
        return Ok(SuperblockProbe::NotMasse(
            "device smaller than a superblock".into(),
        ));
    }
    let b = read_block(dev, 0, SUPERBLOCK_AREA as usize, "reading the superblock")?;
    let first = Superblock::decode(&b[..SUPERBLOCK_SIZE]);
    if let SuperblockProbe::Found(_) = first {
        return Ok(first);
    }
    match Superblock::decode(&b[SUPERBLOCK_SIZE..]) {
        SuperblockProbe::NotMasse(_) if matches!(first, SuperblockProbe::TooNew(_)) => Ok(first),
        second => Ok(second),
    }
}

fn random_id() -> u128 {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most len bytes into the buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 16, 0) };
    if n != 16 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        return xxhash_rust::xxh3::xxh3_128(&t.to_le_bytes()) ^ (std::process::id() as u128);
    }
    u128::from_le_bytes(b)
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Choose geometry for a new pool and format every device.
pub(crate) fn create(cfg: &PoolConfig, force: bool) -> Result<Pool> {
    if cfg.capacity.is_empty() {
        return Err(Error::InvalidConfig(
            "at least one capacity device is required".into(),
        ));
    }
    if cfg.capacity.len() > 16 {
        return Err(Error::InvalidConfig(
            "at most 16 capacity devices are supported".into(),
        ));
    }
    let Devices { fast, caps, claims } = open_devices(cfg, false)?;
    if !force {
        refuse_formatted(fast.iter().chain(caps.iter()))?;
    }
    let cap_media = cfg.capacity_media.unwrap_or(caps[0].info().media);
    let geo = choose_geometry(cfg, fast.as_ref(), &caps, cap_media)?;
    let pool_id = random_id();
    let version = cfg.format_version.unwrap_or(FORMAT_VERSION);
    if !(2..=FORMAT_VERSION).contains(&version) {
        return Err(Error::InvalidConfig(format!(
            "format version {version} cannot be created (this build creates 2 to {FORMAT_VERSION})"
        )));
    }
    let pool = Pool {
        pool_id,
        geo,
        key_digest: crate::index::KeyDigest::Keyed(random_id().to_le_bytes()),
        version,
        warnings: volatile_warnings(fast.as_ref(), &caps),
        media: fast
            .iter()
            .map(|f| (f.info().path.clone(), f.info().media))
            .chain(caps.iter().enumerate().map(|(i, c)| {
                let m = if i == 0 { cap_media } else { c.info().media };
                (c.info().path.clone(), m)
            }))
            .collect(),
        fast,
        caps,
        _claims: claims,
    };
    format(&pool)?;
    Ok(pool)
}

/// Refuse devices that already hold a pool, or a pool of a newer format
/// (`create` without `force`).
fn refuse_formatted<'a>(devs: impl Iterator<Item = &'a Arc<dyn Device>>) -> Result<()> {
    for d in devs {
        match probe(d)? {
            SuperblockProbe::Found(sb) => {
                return Err(Error::AlreadyFormatted {
                    path: d.info().path.clone().into(),
                    pool_id: sb.pool_id,
                });
            }
            SuperblockProbe::TooNew(v) => {
                return Err(Error::FormatTooNew {
                    path: d.info().path.clone(),
                    found: v,
                    supported: FORMAT_VERSION,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The geometry of a new pool on these devices, from the configuration's
/// choices and what the devices say about themselves.
fn choose_geometry(
    cfg: &PoolConfig,
    fast: Option<&Arc<dyn Device>>,
    caps: &[Arc<dyn Device>],
    cap_media: Media,
) -> Result<Geometry> {
    let mode = choose_mode(fast.is_some(), cfg.mode, cap_media)?;
    let iu = choose_iu(cfg, caps, cap_media)?;
    let seg = choose_segment_size(cfg, mode, iu)?;
    let band_header_size = iu.max(4096);
    let meta = meta_regions(cfg, fast, caps, seg, iu)?;
    let min_cap = caps.iter().map(|d| d.info().capacity).min().unwrap_or(0);
    // Bands start on a reclaim-unit boundary too, when the unit is known and small
    // enough to leave room for data.
    let known_ru = caps
        .iter()
        .map(|d| d.info().reclaim_unit)
        .max()
        .unwrap_or(0);
    let data_start = if known_ru > 0 && known_ru <= min_cap / 64 {
        meta.data_start.div_ceil(known_ru) * known_ru // reclaim units need not be powers of two
    } else {
        meta.data_start
    };
    let usable = min_cap.saturating_sub(data_start);
    let band_size = choose_band_size(cfg, usable, seg, iu, known_ru)?;
    let bands_per_device = count_bands(caps, data_start, band_size, seg, band_header_size)?;
    Ok(Geometry {
        mode,
        segment_size: seg,
        band_size,
        band_header_size,
        iu,
        bands_per_device,
        pad_offset: meta.pad_offset,
        pad_size: meta.pad_size,
        ckpt_offset: meta.ckpt_offset,
        ckpt_slot_size: meta.ckpt_slot,
        data_start,
        has_fast: fast.is_some(),
    })
}

/// The pool's mode: the configured one if the devices allow it, else tiered
/// with a fast device, scm-only on SCM, capacity-only otherwise.
fn choose_mode(has_fast: bool, wanted: Option<Mode>, cap_media: Media) -> Result<Mode> {
    Ok(match (has_fast, wanted) {
        (true, None | Some(Mode::Tiered)) => Mode::Tiered,
        (true, Some(m)) => {
            return Err(Error::InvalidConfig(format!(
                "mode {} cannot have a fast-tier device",
                m.name()
            )))
        }
        (false, Some(Mode::Tiered)) => {
            return Err(Error::InvalidConfig(
                "tiered mode needs a fast-tier device (--fast)".into(),
            ))
        }
        (false, Some(m)) => m,
        (false, None) if cap_media == Media::Scm => Mode::ScmOnly,
        (false, None) => Mode::CapacityOnly,
    })
}

/// The indirection unit: configured, else the drives' own when known, else
/// 64 KiB on QLC, else the optimal I/O size when it is a sensible one.
fn choose_iu(cfg: &PoolConfig, caps: &[Arc<dyn Device>], cap_media: Media) -> Result<u32> {
    let known_iu = caps
        .iter()
        .map(|d| d.info().indirection_unit)
        .max()
        .unwrap_or(0);
    let iu = cfg.iu.unwrap_or(match cap_media {
        _ if known_iu.is_power_of_two() && (4096..=1 << 20).contains(&known_iu) => known_iu,
        Media::Qlc => 65536,
        _ => {
            let o = caps[0].info().optimal_io_size;
            if o.is_power_of_two() && (4096..=1 << 20).contains(&o) {
                o
            } else {
                4096
            }
        }
    });
    if !iu.is_power_of_two() || iu < 4096 {
        return Err(Error::InvalidConfig(format!(
            "indirection unit {iu} must be a power of two ≥ 4096"
        )));
    }
    Ok(iu)
}

/// The segment size: configured, else 8 KiB for scm-only and 256 KiB
/// otherwise, never below the indirection unit.
fn choose_segment_size(cfg: &PoolConfig, mode: Mode, iu: u32) -> Result<u32> {
    let default_seg = if mode == Mode::ScmOnly {
        8192u32
    } else {
        256 << 10
    };
    let seg = cfg.segment_size.unwrap_or(default_seg.max(iu));
    if seg % iu != 0 || !(8192..=512 << 10).contains(&seg) {
        return Err(Error::InvalidConfig(format!(
            "segment size {seg} must be a multiple of the indirection unit ({iu}) between 8 KiB and 512 KiB"
        )));
    }
    Ok(seg)
}

/// Where the metadata regions of a new pool go, and where data may start
/// (before any reclaim-unit alignment).
struct MetaRegions {
    pad_offset: u64,
    pad_size: u64,
    ckpt_offset: u64,
    ckpt_slot: u64,
    data_start: u64,
}

/// With a fast device: the write pad and two checkpoint slots on it, data
/// from the first IU (or MiB) boundary of the capacity devices. Without: the
/// checkpoint slots on the first capacity device, data after them.
fn meta_regions(
    cfg: &PoolConfig,
    fast: Option<&Arc<dyn Device>>,
    caps: &[Arc<dyn Device>],
    seg: u32,
    iu: u32,
) -> Result<MetaRegions> {
    let after_epoch = EPOCH_OFFSET + EPOCH_AREA;
    let Some(f) = fast else {
        let meta_cap = caps[0].info().capacity;
        let ckpt_offset = after_epoch;
        let ckpt_slot = round_down64(cfg.checkpoint_size.unwrap_or(meta_cap / 32), 4096);
        return Ok(MetaRegions {
            pad_offset: 0,
            pad_size: 0,
            ckpt_offset,
            ckpt_slot,
            data_start: round_up64(ckpt_offset + 2 * ckpt_slot, (iu as u64).max(1 << 20)),
        });
    };
    let fcap = f.info().capacity;
    let pad_offset = after_epoch + 2 * PAD_HEADER_SIZE;
    let min_pad = (32u64 << 20).max(8 * seg as u64 + 2 * (MAX_VALUE_LEN as u64 + 8192));
    let pad_size = round_down64(
        cfg.pad_size.unwrap_or((fcap / 4).clamp(min_pad, 1 << 30)),
        4096,
    );
    if pad_size < min_pad {
        return Err(Error::InvalidConfig(format!(
            "write pad of {pad_size} bytes is too small (minimum {min_pad})"
        )));
    }
    let ckpt_offset = pad_offset + pad_size;
    let rest = fcap.saturating_sub(ckpt_offset);
    let ckpt_slot = round_down64(cfg.checkpoint_size.unwrap_or(rest / 2), 4096);
    if ckpt_offset + 2 * ckpt_slot > fcap || pad_offset + pad_size > fcap {
        return Err(Error::InvalidConfig(format!(
            "fast device of {fcap} bytes cannot hold a {pad_size}-byte pad and two {ckpt_slot}-byte checkpoint slots"
        )));
    }
    Ok(MetaRegions {
        pad_offset,
        pad_size,
        ckpt_offset,
        ckpt_slot,
        data_start: round_up64(after_epoch, (iu as u64).max(1 << 20)),
    })
}

/// The band size: configured, else 64 MiB (less on small devices), a whole
/// number of reclaim units when the drive's is known; IU-aligned and large
/// enough for 8 segments after the band header.
fn choose_band_size(
    cfg: &PoolConfig,
    usable: u64,
    seg: u32,
    iu: u32,
    known_ru: u64,
) -> Result<u64> {
    let band_header_size = iu.max(4096);
    let band_size = match cfg.band_size {
        Some(b) => b,
        None => {
            let want = 64u64 << 20;
            let cap_limited = round_down64(usable / 16, seg as u64);
            let b = want
                .min(cap_limited)
                .max(band_header_size as u64 + 8 * seg as u64);
            // A band that is a whole number of the drive's reclaim units lets the
            // drive erase a freed band without relocating anything (device WAF ≈ 1).
            match known_ru {
                0 => b,
                ru => {
                    let ru = ru.div_ceil(iu as u64) * iu as u64;
                    let n = (b / ru).max(1);
                    if n * ru <= usable / 4 {
                        n * ru
                    } else {
                        b
                    }
                }
            }
        }
    };
    let band_size = round_down64(band_size, iu as u64);
    if band_size < band_header_size as u64 + 8 * seg as u64 {
        return Err(Error::InvalidConfig(format!(
            "band size {band_size} must hold at least 8 segments of {seg} bytes plus a {band_header_size}-byte header"
        )));
    }
    if (band_size - band_header_size as u64) / (seg as u64) < 8 {
        return Err(Error::InvalidConfig(format!(
            "band size {band_size} must hold at least 8 segments of {seg} bytes (plus a {band_header_size}-byte header)"
        )));
    }
    Ok(band_size)
}

/// Bands on each capacity device; refuses a tier of fewer than 4 bands or
/// more segments than a location can address.
fn count_bands(
    caps: &[Arc<dyn Device>],
    data_start: u64,
    band_size: u64,
    seg: u32,
    band_header_size: u32,
) -> Result<Vec<u32>> {
    let bands_per_device: Vec<u32> = caps
        .iter()
        .map(|d| (d.info().capacity.saturating_sub(data_start) / band_size) as u32)
        .collect();
    let total: u64 = bands_per_device.iter().map(|&n| n as u64).sum();
    if total < 4 {
        return Err(Error::InvalidConfig(format!(
            "capacity tier too small: {total} bands of {band_size} bytes (need at least 4); use a bigger device or --band-size"
        )));
    }
    let slots = total * ((band_size - band_header_size as u64) / seg as u64);
    if slots >= MAX_SLOTS {
        return Err(Error::InvalidConfig(format!(
            "capacity tier has {slots} segments; at most {MAX_SLOTS} are addressable (use a larger --segment-size)"
        )));
    }
    Ok(bands_per_device)
}

/// Write a new pool's metadata, then its superblocks.
fn format(pool: &Pool) -> Result<()> {
    blank_metadata(pool)?;
    write_superblocks(pool)
}

/// Blank every metadata block we will later trust, so nothing from an earlier
/// pool on the same device can be mistaken for ours (the pool tag also
/// guards), and write the first epoch and pad headers.
fn blank_metadata(pool: &Pool) -> Result<()> {
    let tag = pool.pool_tag();
    let meta = pool.meta().clone();
    let g = &pool.geo;
    let zero = vec![0u8; 4096];
    write_block(&meta, EPOCH_OFFSET + 4096, &zero, "formatting")?;
    write_block(
        &meta,
        EPOCH_OFFSET,
        &EpochBlock {
            epoch: 0,
            pool_tag: tag,
            clean: 1,
            damage: DamageRecord::default(),
        }
        .encode(),
        "formatting",
    )?;
    if let Some(f) = &pool.fast {
        let h = PadHeader {
            hdr_seq: 1,
            pool_tag: tag,
            tail: 0,
            tail_batch_seq: 1,
        };
        // Copy `hdr_seq % 2` holds header `hdr_seq`, so the first update (seq 2)
        // goes to the other copy and never overwrites the only valid one.
        write_block(f, EPOCH_OFFSET + EPOCH_AREA, &zero, "formatting the pad")?;
        write_block(
            f,
            EPOCH_OFFSET + EPOCH_AREA + PAD_HEADER_SIZE,
            &h.encode(),
            "formatting the pad",
        )?;
        write_block(f, g.pad_offset, &zero, "formatting the pad")?;
    }
    if g.ckpt_slot_size >= 4096 {
        write_block(&meta, g.ckpt_offset, &zero, "formatting checkpoints")?;
        write_block(
            &meta,
            g.ckpt_offset + g.ckpt_slot_size,
            &zero,
            "formatting checkpoints",
        )?;
    }
    Ok(())
}

/// Sync every device, then write both superblock copies of each: a device is
/// a pool member only once everything else is in place.
fn write_superblocks(pool: &Pool) -> Result<()> {
    let created = now_unix();
    let mut sbs = Vec::new();
    if let Some(f) = &pool.fast {
        sbs.push((f.clone(), Role::Fast, 0u32));
    }
    for (i, c) in pool.caps.iter().enumerate() {
        sbs.push((c.clone(), Role::Capacity, i as u32));
    }
    // `pool.media` lists the devices in this order, with create's choices.
    let sbs: Vec<_> = sbs
        .into_iter()
        .zip(&pool.media)
        .map(|((d, r, i), (_, m))| (d, r, i, *m))
        .collect();
    for (dev, _, _, _) in &sbs {
        sync(dev, "formatting")?;
    }
    for (dev, role, idx, media) in &sbs {
        let sb = Superblock {
            version: pool.version,
            pool_id: pool.pool_id,
            role: *role,
            device_index: *idx,
            device_capacity: dev.info().capacity,
            media: media.code(),
            created_unix: created,
            geometry: pool.geo.clone(),
            key_digest: pool.key_digest,
        };
        let b = sb.encode();
        write_block(dev, 0, &b, "writing the superblock")?;
        write_block(dev, SUPERBLOCK_SIZE as u64, &b, "writing the superblock")?;
        sync(dev, "writing the superblock")?;
    }
    Ok(())
}

/// The superblock of a device given to `open` as the fast tier (`is_fast`) or
/// a capacity device: it must be a masse device of a format we read, in that
/// role, at least as large as when the pool was created.
fn member_superblock(dev: &Arc<dyn Device>, is_fast: bool) -> Result<Superblock> {
    let path = dev.info().path.clone();
    let sb = match probe(dev)? {
        SuperblockProbe::Found(sb) => sb,
        SuperblockProbe::NotMasse(why) if dev.info().volatile => {
            let why = format!(
                "{why}; it is on tmpfs/ramfs, whose contents do not survive a reboot: \
                 if the machine restarted, the pool's data on it is gone"
            );
            return Err(Error::NotMasse { path, why });
        }
        SuperblockProbe::NotMasse(why) => return Err(Error::NotMasse { path, why }),
        SuperblockProbe::TooNew(v) => {
            return Err(Error::FormatTooNew {
                path,
                found: v,
                supported: FORMAT_VERSION,
            })
        }
    };
    let role_ok = matches!(
        (is_fast, sb.role),
        (true, Role::Fast) | (false, Role::Capacity)
    );
    if !role_ok {
        return Err(Error::Mismatch(format!(
            "{path} is a {:?}-tier device of its pool but was given as {}",
            sb.role,
            if is_fast { "--fast" } else { "--capacity" }
        )));
    }
    if dev.info().capacity < sb.device_capacity {
        return Err(Error::Mismatch(format!(
            "{path} is {} bytes but the pool was created on {} bytes",
            dev.info().capacity,
            sb.device_capacity
        )));
    }
    Ok(sb)
}

/// Open the devices named in `cfg` and check that they form one complete pool.
/// Every device of `found` must belong to the first one's pool, with its
/// geometry, digest and format version.
fn same_pool(found: &[(Arc<dyn Device>, Superblock)]) -> Result<()> {
    let Some((_, first)) = found.first() else {
        return Ok(());
    };
    let (pool_id, geo) = (first.pool_id, &first.geometry);
    for (d, sb) in found {
        if sb.pool_id != pool_id {
            return Err(Error::Mismatch(format!(
                "{} belongs to pool {:032x}, not {:032x}",
                d.info().path,
                sb.pool_id,
                pool_id
            )));
        }
        if sb.geometry != *geo || sb.key_digest != first.key_digest || sb.version != first.version {
            return Err(Error::Mismatch(format!(
                "{} disagrees about the pool geometry or format",
                d.info().path
            )));
        }
        check_fits(d, sb)?;
    }
    Ok(())
}

pub(crate) fn open(cfg: &PoolConfig) -> Result<Pool> {
    let Devices { fast, caps, claims } = open_devices(cfg, true)?;
    let warnings = volatile_warnings(fast.as_ref(), &caps);
    let want_fast = fast.is_some();
    let mut found: Vec<(Arc<dyn Device>, Superblock)> = Vec::new();
    let given = fast.into_iter().map(|d| (true, d));
    for (is_fast, dev) in given.chain(caps.into_iter().map(|d| (false, d))) {
        let sb = member_superblock(&dev, is_fast)?;
        found.push((dev, sb));
    }
    let Some((_, first)) = found.first() else {
        return Err(Error::InvalidConfig("no devices given".into()));
    };
    let (pool_id, geo) = (first.pool_id, first.geometry.clone());
    same_pool(&found)?;
    let (key_digest, version) = (first.key_digest, first.version);
    if geo.has_fast && !want_fast {
        return Err(Error::MissingDevice(
            "this pool has a fast-tier device; give it with --fast".into(),
        ));
    }
    let media = recorded_media(&found);
    let ncap = geo.bands_per_device.len();
    let mut caps: Vec<Option<Arc<dyn Device>>> = vec![None; ncap];
    let mut fast = None;
    for (d, sb) in found {
        match sb.role {
            Role::Fast => fast = Some(d),
            Role::Capacity => {
                let i = sb.device_index as usize;
                if i >= ncap {
                    return Err(Error::Mismatch(format!(
                        "{}: capacity device index {i} out of range",
                        d.info().path
                    )));
                }
                if caps[i].is_some() {
                    return Err(Error::Mismatch(format!(
                        "capacity device {i} was given twice"
                    )));
                }
                caps[i] = Some(d);
            }
        }
    }
    let caps = caps
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            d.ok_or_else(|| {
                Error::MissingDevice(format!("capacity device #{i} of {ncap} was not given"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Pool {
        pool_id,
        geo,
        key_digest,
        version,
        fast,
        caps,
        warnings,
        media,
        _claims: claims,
    })
}

/// The media class each superblock records, by device path (the probe at
/// open where a superblock predates the field).
fn recorded_media(found: &[(Arc<dyn Device>, Superblock)]) -> Vec<(String, Media)> {
    found
        .iter()
        .map(|(d, sb)| {
            let m = match Media::from_code(sb.media) {
                Media::Unknown => d.info().media,
                m => m,
            };
            (d.info().path.clone(), m)
        })
        .collect()
}

/// The regions the superblock places on device `d` must lie on it.
fn check_fits(d: &Arc<dyn Device>, sb: &Superblock) -> Result<()> {
    let g = &sb.geometry;
    let need = match sb.role {
        Role::Fast => g
            .ckpt_offset
            .checked_add(g.ckpt_slot_size.saturating_mul(2)),
        Role::Capacity => g.capacity_used(sb.device_index as usize),
    };
    match need {
        Some(n) if n <= d.info().capacity => Ok(()),
        _ => Err(Error::NotMasse {
            path: d.info().path.clone(),
            why: "malformed superblock: its geometry does not fit the device".into(),
        }),
    }
}

/// The newest valid epoch block.
pub(crate) struct EpochRead {
    pub block: EpochBlock,
    /// False when the other copy is damaged (not merely blank): it may have held
    /// a newer epoch.
    pub both_copies: bool,
}

/// Read the newest valid epoch block.
pub(crate) fn read_epoch(pool: &Pool) -> Result<EpochRead> {
    let b = read_block(
        pool.meta(),
        EPOCH_OFFSET,
        EPOCH_AREA as usize,
        "reading the epoch",
    )?;
    let halves = [&b[..4096], &b[4096..]];
    let [a, c] = halves.map(|h| EpochBlock::decode(h).filter(|e| e.pool_tag == pool.pool_tag()));
    let blank = |h: &[u8]| h.iter().all(|&x| x == 0);
    let (block, other_ok) = match (a, c) {
        (Some(x), Some(y)) => (if x.epoch >= y.epoch { x } else { y }, true),
        (Some(x), None) => (x, blank(halves[1])),
        (None, Some(x)) => (x, blank(halves[0])),
        (None, None) => return Err(Error::Corruption("both epoch blocks are damaged".into())),
    };
    Ok(EpochRead {
        block,
        both_copies: other_ok,
    })
}

/// Durably record `e`, in the copy the previous epoch did not use.
pub(crate) fn write_epoch(pool: &Pool, e: &EpochBlock) -> Result<()> {
    let off = EPOCH_OFFSET + (e.epoch % 2) * 4096;
    write_block(pool.meta(), off, &e.encode(), "writing the epoch")?;
    sync(pool.meta(), "writing the epoch")
}
