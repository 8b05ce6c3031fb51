//! Whole-pool verification (`masse check`).
//!
//! Reads every segment of every band in use and verifies segment headers,
//! summaries and every record checksum, then every index entry against the
//! record it points at (key digest, checksum), and the space accounting.

use crate::db::{BandState, Db, Inner};
use crate::error::Result;
use crate::format::*;
use crate::pad::PadReader;
use crate::scan::{BandScanner, Found, Source};
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
    /// Live write-pad batches verified.
    pub pad_batches: u64,
    /// Problems found; empty means the pool is consistent.
    pub errors: Vec<String>,
    /// What is unusual but harmless: slots a crash left unwritten, summaries
    /// unreadable whose records were checked one by one.
    pub notes: Vec<String>,
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
    let mut rep = CheckReport::default();
    let bands: Vec<(u32, u64, u64)> = {
        let bt = inner.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state != BandState::Free)
            .map(|(i, b)| (i as u32, b.written_slots, b.first_seq))
            .collect()
    };
    for (band, written, first_seq) in bands {
        rep.bands_scanned += 1;
        check_band(inner, band, written, first_seq, &mut rep)?;
    }
    check_pad(inner, &mut rep)?;
    check_index(inner, &mut rep);
    Ok(rep)
}

/// Every segment of one band: headers, summaries, and each record's checksum,
/// digest and seq against its summary entry.
fn check_band(
    inner: &Inner,
    band: u32,
    written: u64,
    first_seq: u64,
    rep: &mut CheckReport,
) -> Result<()> {
    let l = &inner.layout;
    let dig = |k: &[u8]| inner.digest(k);
    let mut sc = BandScanner::new(l, &inner.pool.caps, inner.tag, band, first_seq, &dig);
    sc.scan(0, written, false, &mut |f| {
        let s = match f {
            Found::Segment(s) => s,
            Found::Gap { slot, n, blank } => {
                let msg = format!("band {band} slots {slot}..{}: no readable segment", slot + n);
                if blank {
                    rep.notes.push(format!("{msg} (never written: a write torn at a crash)"));
                } else {
                    rep.errors.push(format!("{msg} (damaged)"));
                }
                return Ok(());
            }
        };
        let slot = l.first_slot(band) + s.slot;
        if inner.bufs.read().contains_key(&slot) {
            return Ok(());
        }
        rep.segments += 1;
        match s.source {
            Source::Summary => {}
            Source::Parsed => rep.notes.push(format!(
                "band {band} slot {}: segment summary unreadable; its records were checked one by one",
                s.slot
            )),
            Source::HeaderDamaged => rep.errors.push(format!(
                "band {band} slot {}: segment header damaged (its records are readable)",
                s.slot
            )),
        }
        for e in &s.entries {
            check_record(inner, band, slot, s.slot, s.data, e, rep);
        }
        Ok(())
    })?;
    Ok(())
}

fn check_record(
    inner: &Inner,
    band: u32,
    slot: u64,
    i: u64,
    data: &[u8],
    e: &SummaryEntry,
    rep: &mut CheckReport,
) {
    let o = e.offset as usize;
    match data.get(o..o + e.len as usize).map(decode_record) {
        Some(Ok((h, key, _))) => {
            rep.records += 1;
            if inner.digest(key) != e.digest || h.seq != e.seq {
                rep.errors.push(format!(
                    "band {band} slot {i} offset {o}: summary disagrees with record"
                ));
            }
        }
        _ => {
            let here = Loc::new(slot, e.offset, e.len, e.tombstone);
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

/// The live part of the write pad: every batch still needed must be intact.
fn check_pad(inner: &Inner, rep: &mut CheckReport) -> Result<()> {
    let Some(p) = &inner.pad else { return Ok(()) };
    // Under the write state no group commit is writing the pad.
    let _ws = inner.ws.lock();
    let batches: Vec<(u64, u64)> = p.st.lock().batches.iter().copied().collect();
    let r = PadReader::new(p, inner.tag);
    for (virt, seq) in batches {
        rep.pad_batches += 1;
        if r.batch_at(virt, Some(seq))?.is_none() {
            rep.errors.push(format!(
                "write pad: batch {seq} at offset {virt} is damaged (its writes would be lost at the next crash)"
            ));
        }
    }
    Ok(())
}

/// Every index entry must point at a record of a key with its digest, and the
/// space accounting must match the index.
fn check_index(inner: &Inner, rep: &mut CheckReport) {
    let l = &inner.layout;
    let mut locs = Vec::with_capacity(inner.index.len());
    inner.index.for_each(|l| locs.push(l));
    let mut live = vec![0u64; l.bands as usize];
    for raw in locs {
        let loc = Loc(raw);
        live[l.band_of_slot(loc.slot()) as usize] += loc.len8() as u64;
        match inner
            .read_record(loc)
            .and_then(|b| decode_record(&b).map(|(h, k, _)| (h, inner.digest(k))))
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
}

/// Every record of `key` still on the capacity tier, oldest band first — for
/// diagnosing a crash test failure (which version recovery chose, and why).
pub(crate) fn trace_key(db: &Db, key: &[u8]) -> Result<Vec<String>> {
    let inner = &db.inner;
    let l = &inner.layout;
    let d = inner.digest(key);
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
    // DRAM segments first: one that reaches the device while we look is then
    // seen here even if the band table read below predates it.
    let dram: Vec<_> = inner.bufs.read().values().cloned().collect();
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
    let dig = |k: &[u8]| inner.digest(k);
    let mut show = |band: u32,
                    state: BandState,
                    first_seq: u64,
                    slot: u64,
                    seq: u64,
                    how: &str,
                    e: &SummaryEntry| {
        let here = Loc::new(slot, e.offset, e.len, e.tombstone);
        out.push(format!(
            "band {band} ({state:?}, first_seq {first_seq}) slot {slot} (seg seq {seq}{how}) offset {} len {} seq {} tombstone {} more {}{}",
            e.offset,
            e.len,
            e.seq,
            e.tombstone,
            e.more,
            if cur == Some(here.0) { "  <- index" } else { "" }
        ));
    };
    for (band, written, first_seq, state) in bands {
        let mut sc = BandScanner::new(l, &inner.pool.caps, inner.tag, band, first_seq, &dig);
        sc.scan(0, written, false, &mut |f| {
            if let Found::Segment(s) = f {
                let how = match s.source {
                    Source::Summary => "",
                    Source::Parsed => ", no summary",
                    Source::HeaderDamaged => ", header damaged",
                };
                let slot = l.first_slot(band) + s.slot;
                if dram.iter().any(|b| b.slot == slot) {
                    return Ok(()); // shown from DRAM below
                }
                for e in s.entries.iter().filter(|e| e.digest == d) {
                    show(band, state, first_seq, slot, s.seq, how, e);
                }
            }
            Ok(())
        })?;
    }
    // Segments still in DRAM (open, or on their way to the device).
    for b in dram {
        let data = b.data.read();
        let (entries, _) = crate::scan::parse_records(&data, b.seq, &dig);
        for e in entries.iter().filter(|e| e.digest == d) {
            show(b.band, BandState::Open, 0, b.slot, b.seq, ", in DRAM", e);
        }
    }
    Ok(out)
}
