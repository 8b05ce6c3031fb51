//! Whole-pool verification (`masse check`).
//!
//! Reads every segment of every band in use and verifies segment headers,
//! summaries and every record checksum, then every index entry against the
//! record it points at (key digest, checksum), and the space accounting.

use super::band::BandState;
use super::pad::PadReader;
use super::scanner::{parse_segment, BandScanner, Found, Source};
use super::state::Engine;
use crate::error::Result;
use crate::format::*;
use crate::format::{v3, v3seg};
use crate::index::canonical;

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

pub(crate) fn check(e: &Engine) -> Result<CheckReport> {
    e.check_failed()?;
    e.writer_barrier()?;
    let _gc = e.gc_lock.lock();
    let mut rep = CheckReport::default();
    let bands: Vec<(u32, u64, u64)> = {
        let bt = e.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state != BandState::Free)
            .map(|(i, b)| (i as u32, b.written_slots, b.first_seq))
            .collect()
    };
    for (band, written, first_seq) in bands {
        rep.bands_scanned += 1;
        check_band(e, band, written, first_seq, &mut rep)?;
    }
    check_pad(e, &mut rep)?;
    check_index(e, &mut rep);
    Ok(rep)
}

/// Every segment of one band: headers, summaries, and each record's checksum,
/// digest and seq against its summary entry.
fn check_band(
    e: &Engine,
    band: u32,
    written: u64,
    first_seq: u64,
    rep: &mut CheckReport,
) -> Result<()> {
    let l = &e.layout;
    let dig = |k: &[u8]| e.digest(k);
    let mut sc = BandScanner::new(
        l,
        &e.pool.caps,
        e.tag,
        (band, first_seq),
        e.seq_limit(),
        &dig,
    );
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
        if e.segments.contains(slot) {
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
        let agree = seqs_agree(e.layout.codec, s.data, s.seq, &s.entries);
        for (se, ok) in s.entries.iter().zip(agree) {
            check_record(e, (band, slot, s.slot), s.data, se, ok, rep);
        }
        Ok(())
    })?;
    Ok(())
}

/// Whether each record of segment `seq` carries the sequence number and group
/// flag its summary entry gives: version 2 in its header; version 3 in its
/// trailer, which must be the one the writer's seq chain gives the entry
/// (after the block mark the entry's position calls for).
pub(crate) fn seqs_agree(
    codec: Codec,
    data: &[u8],
    seq: u64,
    entries: &[SummaryEntry],
) -> Vec<bool> {
    if codec == Codec::V2 {
        let seq_of = |se: &SummaryEntry| {
            let b = data.get(se.offset as usize..)?;
            decode_record(b).ok().map(|(h, _, _)| h.seq == se.seq)
        };
        return entries
            .iter()
            .map(|se| seq_of(se).unwrap_or(true))
            .collect();
    }
    let (tag, mut c) = (seg_tag(seq), v3seg::V3Cursor::new(codec.seq_rule()));
    let mut out = Vec::with_capacity(entries.len());
    for se in entries {
        let here = v3::spot(c.end, c.open_block, false);
        let skip = here.record != se.offset as usize;
        let s = v3::spot(c.end, c.open_block, skip);
        let marked = s
            .mark
            .map(|m| v3::is_mark(data.get(m..).unwrap_or(&[]), tag, m - c.end));
        if s.mark.is_some() {
            c.chain.mark();
        }
        let want = c.chain.trailer_for(se.seq, se.more);
        let got = data
            .get(se.offset as usize..)
            .and_then(|b| v3::decode_v3_record(b).ok());
        // A record that does not decode is reported as such by `check_record`.
        out.push(marked != Some(false) && got.is_none_or(|r| r.trailer == want));
        c.end = se.offset as usize + se.len as usize;
        c.open_block = Some(se.offset as usize / v3::BLOCK);
    }
    out
}

const CHECKSUM_MISMATCH: &str = "record checksum mismatch";
const SUMMARY_DISAGREES: &str = "summary disagrees with record";

/// The record summary entry `se` names in segment `data`, if it decodes
/// (checksum) and agrees with the entry (key digest, length, tombstone). The
/// seq check is [`seqs_agree`]'s, per segment. Shared with pad replay's
/// "already held" test (engine/replay.rs), which must accept exactly what
/// `check` accepts.
pub(crate) fn entry_record<'a>(
    e: &Engine,
    data: &'a [u8],
    se: &SummaryEntry,
) -> std::result::Result<Rec<'a>, &'static str> {
    let o = se.offset as usize;
    let Some(Ok(r)) = data
        .get(o..o + se.len as usize)
        .map(|b| e.layout.codec.decode(b))
    else {
        return Err(CHECKSUM_MISMATCH);
    };
    let same = canonical(e.digest(r.key)) == canonical(se.digest)
        && r.len == se.len as usize
        && r.tombstone == se.tombstone;
    if same {
        Ok(r)
    } else {
        Err(SUMMARY_DISAGREES)
    }
}

fn check_record(
    e: &Engine,
    (band, slot, i): (u32, u64, u64),
    data: &[u8],
    se: &SummaryEntry,
    seq_agrees: bool,
    rep: &mut CheckReport,
) {
    let o = se.offset as usize;
    let here = Loc::new(slot, se.offset, se.len, se.tombstone);
    // A record that does not match its summary entry matters only if the index
    // points at it. Dead ones are expected after a crash in tiered mode: a
    // segment torn under a valid footer, whose records the pad re-applied at
    // newer positions (design.md §10.6).
    let live = || e.index.get(se.digest) == Some(here.0);
    let problem = match entry_record(e, data, se) {
        Ok(_) if seq_agrees => None,
        Ok(_) => Some(SUMMARY_DISAGREES),
        Err(what) => Some(what),
    };
    if problem != Some(CHECKSUM_MISMATCH) {
        rep.records += 1;
    }
    if let Some(what) = problem {
        if live() {
            rep.errors.push(format!(
                "band {band} slot {i} offset {o}: {what} (live record)"
            ));
        } else {
            rep.dead_records_damaged += 1;
        }
    }
}

/// The live part of the write pad: every batch still needed must be intact.
fn check_pad(e: &Engine, rep: &mut CheckReport) -> Result<()> {
    let Some(p) = &e.pad else { return Ok(()) };
    // Under the write state no group commit is writing the pad.
    let _ws = e.write_state.lock();
    let batches = p.batches();
    let r = PadReader::new(p, e.tag);
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
fn check_index(e: &Engine, rep: &mut CheckReport) {
    let l = &e.layout;
    let mut locs = Vec::with_capacity(e.index.len());
    e.index.for_each(|l| locs.push(l));
    let mut live = vec![0u64; l.bands as usize];
    for raw in locs {
        let loc = Loc(raw);
        live[l.band_of_slot(loc.slot()) as usize] += loc.len8() as u64;
        let codec = e.layout.codec;
        match e.with_record(loc, |b| {
            let r = codec.decode(b)?;
            Ok((r.tombstone, e.digest(r.key)))
        }) {
            Ok((tomb, d)) => {
                if e.index.get(d) != Some(raw) {
                    rep.errors.push(format!(
                        "index entry {raw:#x} points at a record of another key"
                    ));
                }
                if tomb != loc.is_tombstone() {
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
            Err(err) => rep.errors.push(format!("index entry {raw:#x}: {err}")),
        }
    }
    for (b, want) in live.iter().enumerate() {
        let have = e.status.band_live(b);
        if have != *want {
            rep.errors.push(format!(
                "band {b}: accounted live bytes {have} but index says {want}"
            ));
        }
    }
}

/// Every record of `key` still on the capacity tier, oldest band first — for
/// diagnosing a crash test failure (which version recovery chose, and why).
pub(crate) fn trace_key(e: &Engine, key: &[u8]) -> Result<Vec<String>> {
    let d = e.digest(key);
    let cur = e.index.get(d);
    let mut out = vec![format!(
        "index: {}",
        match cur.map(Loc) {
            Some(c) => format!(
                "slot {} offset {} tombstone {}",
                c.slot(),
                c.offset(),
                c.is_tombstone()
            ),
            None => "absent".into(),
        }
    )];
    // DRAM segments first: one that reaches the device while we look is then
    // seen here even if the band table read below predates it.
    let dram = e.segments.all();
    let bands = bands_by_age(e);
    let dig = |k: &[u8]| e.digest(k);
    let mut show = |band: u32,
                    state: BandState,
                    first_seq: u64,
                    slot: u64,
                    seq: u64,
                    how: &str,
                    se: &SummaryEntry| {
        let here = Loc::new(slot, se.offset, se.len, se.tombstone);
        out.push(format!(
            "band {band} ({state:?}, first_seq {first_seq}) slot {slot} (seg seq {seq}{how}) offset {} len {} seq {} tombstone {} more {}{}",
            se.offset,
            se.len,
            se.seq,
            se.tombstone,
            se.more,
            if cur == Some(here.0) { "  <- index" } else { "" }
        ));
    };
    let (l, caps, lim) = (&e.layout, &e.pool.caps, e.seq_limit());
    for (band, written, first_seq, state) in bands {
        let mut sc = BandScanner::new(l, caps, e.tag, (band, first_seq), lim, &dig);
        sc.scan(0, written, false, &mut |f| {
            if let Found::Segment(s) = f {
                let slot = l.first_slot(band) + s.slot;
                if dram.iter().any(|b| b.slot == slot) {
                    return Ok(()); // shown from DRAM below
                }
                for se in s
                    .entries
                    .iter()
                    .filter(|se| canonical(se.digest) == canonical(d))
                {
                    show(
                        band,
                        state,
                        first_seq,
                        slot,
                        s.seq,
                        source_note(s.source),
                        se,
                    );
                }
            }
            Ok(())
        })?;
    }
    // Segments still in DRAM (open, or on their way to the device).
    for b in dram {
        let data = b.data.read();
        let (entries, _) = parse_segment(e.layout.codec, &data, b.seq, &dig);
        for se in entries
            .iter()
            .filter(|se| canonical(se.digest) == canonical(d))
        {
            show(b.band, BandState::Open, 0, b.slot, b.seq, ", in DRAM", se);
        }
    }
    Ok(out)
}

/// Bands in use as `(band, written slots, first seq, state)`, oldest first.
fn bands_by_age(e: &Engine) -> Vec<(u32, u64, u64, BandState)> {
    let bt = e.bands.lock();
    let mut v: Vec<_> = bt
        .bands
        .iter()
        .enumerate()
        .filter(|(_, b)| b.state != BandState::Free)
        .map(|(i, b)| (i as u32, b.written_slots, b.first_seq, b.state))
        .collect();
    v.sort_by_key(|b| b.2);
    v
}

/// How a segment's entries were read, as `trace_key` says it.
fn source_note(s: Source) -> &'static str {
    match s {
        Source::Summary => "",
        Source::Parsed => ", no summary",
        Source::HeaderDamaged => ", header damaged",
    }
}
