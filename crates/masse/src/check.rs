//! Whole-pool verification (`masse check`).
//!
//! Reads every segment of every band in use and verifies segment headers,
//! summaries and every record checksum, then every index entry against the
//! record it points at (key digest, checksum), and the space accounting.

use crate::db::{BandState, Db};
use crate::device::AlignedBuf;
use crate::error::{Error, Result};
use crate::format::*;
use crate::index::digest;
use std::sync::atomic::Ordering::Relaxed;

/// What [`Db::check`] found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CheckReport {
    /// Bands in use that were scanned.
    pub bands_scanned: u64,
    /// Segments scanned.
    pub segments: u64,
    /// Records (live or dead) whose checksum was verified.
    pub records: u64,
    /// Live keys.
    pub live_keys: u64,
    /// Tombstones still held.
    pub tombstones: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Records no key uses any more whose checksum fails: the remains of a write a
    /// crash interrupted (torn), or damage to dead data. They hold nothing a
    /// reader can get, so they are reported here, not as errors; GC drops them.
    pub dead_records_damaged: u64,
    /// Problems found; empty means the pool is consistent.
    pub errors: Vec<String>,
}

impl CheckReport {
    /// True if nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

pub(crate) fn check(db: &Db) -> Result<CheckReport> {
    let inner = &db.inner;
    db.flush()?;
    let _gc = inner.gc_lock.lock();
    let l = &inner.layout;
    let mut rep = CheckReport::default();
    let seg = l.seg as usize;
    let bands: Vec<(u32, u64)> = {
        let bt = inner.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state != BandState::Free)
            .map(|(i, b)| (i as u32, b.written_slots))
            .collect()
    };
    for (band, written) in bands {
        rep.bands_scanned += 1;
        let (dev_i, off) = l.band_addr(band);
        let dev = &inner.pool.caps[dev_i];
        let hdr = l.geo.band_header_size as u64;
        let mut i = 0;
        while i < written {
            let slot = l.first_slot(band) + i;
            if inner.bufs.read().contains_key(&slot) {
                i += 1;
                continue;
            }
            let mut b = AlignedBuf::new(seg);
            dev.read_at(&mut b, off + hdr + i * seg as u64)
                .map_err(|e| Error::io(&dev.info().path, "check reading a segment", e))?;
            let Some(sh) = SegmentHeader::decode(&b) else {
                rep.errors.push(format!(
                    "band {band} slot {i}: segment header missing or damaged"
                ));
                i += 1;
                continue;
            };
            let k = sh.nslots.max(1) as u64;
            let data = if k > 1 {
                let mut bb = AlignedBuf::new(k as usize * seg);
                dev.read_at(&mut bb, off + hdr + i * seg as u64)
                    .map_err(|e| Error::io(&dev.info().path, "check reading a segment", e))?;
                bb
            } else {
                b
            };
            rep.segments += 1;
            let entries = match decode_footer(&data).filter(|f| f.segment_seq == sh.segment_seq) {
                Some(f) => match decode_summary(&data, &f) {
                    Ok(e) => e,
                    Err(e) => {
                        rep.errors.push(format!("band {band} slot {i}: {e}"));
                        Vec::new()
                    }
                },
                None => crate::recovery::parse_partial(&data, &sh).0,
            };
            for e in entries {
                let o = e.offset as usize;
                match data.get(o..o + e.len as usize).map(decode_record) {
                    Some(Ok((h, key, _))) => {
                        rep.records += 1;
                        if digest(key) != e.digest || h.seq != e.seq {
                            rep.errors.push(format!(
                                "band {band} slot {i} offset {o}: summary disagrees with record"
                            ));
                        }
                    }
                    _ => {
                        let here = Loc::new(l.first_slot(band) + i, e.offset, e.len, e.tombstone);
                        if inner.index.get(e.digest) == Some(here.0) {
                            rep.errors.push(format!(
                                "band {band} slot {i} offset {o}: record checksum mismatch (live record)"
                            ));
                        } else {
                            rep.dead_records_damaged += 1;
                        }
                    }
                }
            }
            i += k;
        }
    }
    // Every index entry must point at a record of a key with its digest.
    let mut locs = Vec::with_capacity(inner.index.len());
    inner.index.for_each(|l| locs.push(l));
    let mut live = vec![0u64; l.bands as usize];
    for raw in locs {
        let loc = Loc(raw);
        live[l.band_of_slot(loc.slot()) as usize] += loc.len8() as u64;
        match inner
            .read_record(loc)
            .and_then(|b| decode_record(&b).map(|(h, k, _)| (h, digest(k))))
        {
            Ok((h, d)) => {
                if inner.index.get(d) != Some(raw) {
                    rep.errors.push(format!(
                        "index entry {raw:#x} points at a record of another key"
                    ));
                }
                if (h.flags & REC_TOMBSTONE != 0) != loc.is_tombstone() {
                    rep.errors.push(format!(
                        "index entry {raw:#x}: tombstone flag disagrees with record"
                    ));
                }
                if loc.is_tombstone() {
                    rep.tombstones += 1;
                } else {
                    rep.live_keys += 1;
                    rep.live_bytes += loc.len8() as u64;
                }
            }
            Err(e) => rep.errors.push(format!("index entry {raw:#x}: {e}")),
        }
    }
    for (b, want) in live.iter().enumerate() {
        let have = inner.band_live[b].load(Relaxed);
        if have != *want {
            rep.errors.push(format!(
                "band {b}: accounted live bytes {have} but index says {want}"
            ));
        }
    }
    Ok(rep)
}

/// Every record of `key` still on the capacity tier, oldest band first — for
/// diagnosing a crash test failure (which version recovery chose, and why).
pub(crate) fn trace_key(db: &Db, key: &[u8]) -> Result<Vec<String>> {
    let inner = &db.inner;
    let l = &inner.layout;
    let seg = l.seg as usize;
    let d = digest(key);
    let cur = inner.index.get(d);
    let mut out = vec![format!(
        "index: {}",
        match cur {
            Some(c) => {
                let c = Loc(c);
                format!(
                    "slot {} offset {} tombstone {}",
                    c.slot(),
                    c.offset(),
                    c.is_tombstone()
                )
            }
            None => "absent".into(),
        }
    )];
    let bands: Vec<(u32, u64, u64, BandState)> = {
        let bt = inner.bands.lock();
        let mut v: Vec<_> = bt
            .bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state != BandState::Free)
            .map(|(i, b)| (i as u32, b.written_slots, b.first_seq, b.state))
            .collect();
        v.sort_by_key(|b| b.2);
        v
    };
    for (band, written, first_seq, state) in bands {
        let (dev_i, off) = l.band_addr(band);
        let dev = &inner.pool.caps[dev_i];
        let hdr = l.geo.band_header_size as u64;
        let mut i = 0;
        while i < written {
            let slot = l.first_slot(band) + i;
            let dram = inner.bufs.read().get(&slot).cloned();
            let data: Vec<u8> = match &dram {
                Some(b) => b.data.read().to_vec(),
                None => {
                    let mut b = AlignedBuf::new(seg);
                    dev.read_at(&mut b, off + hdr + i * seg as u64)
                        .map_err(|e| Error::io(&dev.info().path, "tracing a key", e))?;
                    let k = SegmentHeader::decode(&b)
                        .map(|h| h.nslots.max(1) as u64)
                        .unwrap_or(1);
                    if k > 1 {
                        let mut bb = AlignedBuf::new(k as usize * seg);
                        dev.read_at(&mut bb, off + hdr + i * seg as u64)
                            .map_err(|e| Error::io(&dev.info().path, "tracing a key", e))?;
                        bb.to_vec()
                    } else {
                        b.to_vec()
                    }
                }
            };
            let Some(sh) = SegmentHeader::decode(&data) else {
                i += 1;
                continue;
            };
            let k = sh.nslots.max(1) as u64;
            let (entries, _, parsed) = crate::recovery::segment_entries(&data, &sh, inner.tag);
            for e in entries.iter().filter(|e| e.digest == d) {
                let here = Loc::new(slot, e.offset, e.len, e.tombstone);
                out.push(format!(
                    "band {band} ({state:?}, first_seq {first_seq}) slot {slot} (seg seq {}{}{}) offset {} len {} seq {} tombstone {} more {}{}",
                    sh.segment_seq,
                    if parsed { ", no summary" } else { "" },
                    if dram.is_some() { ", in DRAM" } else { "" },
                    e.offset,
                    e.len,
                    e.seq,
                    e.tombstone,
                    e.more,
                    if cur == Some(here.0) { "  <- index" } else { "" }
                ));
            }
            i += k;
        }
    }
    Ok(out)
}
