//! Index checkpoints and recovery at open (paper §2.7).
//!
//! A checkpoint is a fuzzy snapshot: the band table, then the index shard by
//! shard, written to the inactive one of two slots, header last. It records
//! `replay_from`: the oldest segment that was not yet durable when the snapshot
//! started. Recovery loads the newest valid checkpoint (or none), drops entries
//! that point into bands freed or reused since, replays every segment from
//! `replay_from` on in write order — newer position wins, so replay is
//! idempotent — and finally re-applies the write pad from its durable tail.
//! Without a usable checkpoint the same code replays every segment.

use crate::db::{BandState, Inner, Kind, OpenSeg, PRec, SegBuf};
use crate::device::{round_up, round_up64, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{digest, fingerprint, Digest};
use parking_lot::RwLock;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Instant;
use xxhash_rust::xxh3::Xxh3;

/// Parse the records of a segment without a (valid) footer: records are
/// self-checking and carry the segment's tag, so stale bytes from an earlier use
/// of the slot are never taken for records. Returns the entries and the end of
/// the last record.
/// Sequence numbers skipped at every open (see the group rule in the scan).
const SEQ_GAP_AT_OPEN: u64 = 1 << 20;

pub(crate) fn parse_partial(seg: &[u8], sh: &SegmentHeader) -> (Vec<SummaryEntry>, usize) {
    let mut out = Vec::new();
    let mut off = SEG_HEADER;
    let mut end = SEG_HEADER;
    let tag = seg_tag(sh.segment_seq);
    let try_at = |o: usize| -> Option<(RecordHeader, Digest, usize)> {
        let (h, k, _) = decode_record(seg.get(o..)?).ok()?;
        (h.seg_tag == tag).then(|| (h, digest(k), h.total_len()))
    };
    while off + RECORD_HEADER <= seg.len() {
        let found = try_at(off).map(|r| (off, r)).or_else(|| {
            // Placement skips to the next 4 KiB page only over a short gap (the
            // straddle rule); a longer gap is not the writer's and ends the parse.
            let a = round_up(off, 4096);
            if a != off && a - off <= crate::db::MAX_STRADDLE_PAD && a + RECORD_HEADER <= seg.len()
            {
                try_at(a).map(|r| (a, r))
            } else {
                None
            }
        });
        let Some((o, (h, d, len))) = found else { break };
        out.push(SummaryEntry {
            digest: d,
            seq: h.seq,
            offset: o as u32,
            len: len as u32,
            tombstone: h.flags & REC_TOMBSTONE != 0,
            more: h.flags & REC_MORE != 0,
        });
        end = o + round_up(len, 8);
        off = end;
    }
    (out, end)
}

/// The records of one whole segment: from its summary when the footer and summary
/// are valid, else by parsing the records themselves (a partly written segment,
/// or a damaged summary). Returns the entries, the end of the record area, and
/// whether the records had to be parsed.
pub(crate) fn segment_entries(
    seg: &[u8],
    sh: &SegmentHeader,
    pool_tag: u64,
) -> (Vec<SummaryEntry>, usize, bool) {
    let summary = decode_footer(seg)
        .filter(|f| f.segment_seq == sh.segment_seq && f.pool_tag == pool_tag)
        .and_then(|f| {
            decode_summary(seg, &f)
                .ok()
                .map(|e| (e, f.data_len as usize))
        });
    match summary {
        Some((e, used)) => (e, used, false),
        None => {
            let (e, used) = parse_partial(seg, sh);
            (e, used, true)
        }
    }
}

struct BandPlan {
    band: u32,
    first_seq: u64,
    start_slot: u64,
}

/// Rebuild the index, band table and write state. Returns the pad groups to re-apply.
pub(crate) fn recover(inner: &Inner, clean: bool) -> Result<Vec<Vec<PRec>>> {
    let t0 = Instant::now();
    let l = &inner.layout;
    let nb = l.bands as usize;

    // 1. Band headers say which bands are in use and which incarnation they hold.
    let mut hdr_first: Vec<Option<u64>> = vec![None; nb];
    for b in 0..l.bands {
        let (dev, off) = l.band_addr(b);
        let blk =
            crate::pool::read_block(&inner.pool.caps[dev], off, 4096, "reading band headers")?;
        if let Some(h) = BandHeader::decode(&blk) {
            if h.pool_tag == inner.tag && h.band == b && h.state == BAND_IN_USE {
                hdr_first[b as usize] = Some(h.first_seq);
            }
        }
    }

    // 2. Newest valid checkpoint, if any.
    let ck = load_checkpoint(inner)?;
    let (source, replay_from, ck_bands, ck_next_seq) = match &ck {
        Some((h, bands)) => (
            "checkpoint",
            h.replay_from_seq,
            Some(bands.clone()),
            h.next_record_seq,
        ),
        None => ("scan", 0, None, 1),
    };
    let matches = |b: usize| -> Option<BandRecord> {
        let cb = ck_bands.as_ref()?.get(b)?;
        (cb.in_use && Some(cb.first_seq) == hdr_first[b]).then_some(*cb)
    };
    if ck.is_some() {
        // Entries into bands freed or reused since the snapshot are stale; replay re-adds what moved.
        inner
            .index
            .retain(|loc| matches(l.band_of_slot(Loc(loc).slot()) as usize).is_some());
    }

    // 3. Plan: which slots of which bands to replay, in write order.
    let mut plans: Vec<BandPlan> = Vec::new();
    let mut written = vec![0u64; nb];
    let mut min_seq = vec![u64::MAX; nb];
    for b in 0..nb {
        let Some(first_seq) = hdr_first[b] else {
            continue;
        };
        let start_slot = match matches(b) {
            Some(cb) => {
                min_seq[b] = cb.min_seq;
                written[b] = cb.written_slots as u64;
                // Records placed in segments that are not replayed are not in the
                // checkpoint; see the live-bytes fixup after replay below.
                if first_seq >= replay_from {
                    0
                } else {
                    cb.written_slots as u64
                }
            }
            None => 0,
        };
        plans.push(BandPlan {
            band: b as u32,
            first_seq,
            start_slot,
        });
    }
    plans.sort_by_key(|p| p.first_seq);
    let band_first: Vec<u64> = hdr_first.iter().map(|f| f.unwrap_or(0)).collect();
    let pos = |loc: Loc| -> (u64, u64, u32) {
        let b = l.band_of_slot(loc.slot()) as usize;
        (band_first[b], l.slot_in_band(loc.slot()), loc.offset())
    };

    // 4. Replay segments.
    let mut max_seq = ck_next_seq.saturating_sub(1);
    let mut segments = 0u64;
    let mut group: Vec<(Digest, Loc)> = Vec::new();
    // The records of one atomic group carry consecutive sequence numbers.
    let mut group_last_seq = 0u64;
    let mut partial: Option<(u32, u64, SegmentHeader, Vec<u8>, Vec<SummaryEntry>, usize)> = None;
    let seg = l.seg as usize;
    let newest = plans.last().map(|p| p.band);
    for p in &plans {
        let (dev_i, band_off) = l.band_addr(p.band);
        let dev = &inner.pool.caps[dev_i];
        let hdr = l.geo.band_header_size as u64;
        let mut i = p.start_slot;
        let mut last_seq = 0u64;
        // Read ahead 4 MiB at a time: one large sequential read per chunk instead of
        // one per segment. (At 10^7 keys the scan is CPU-bound — summary decoding and
        // index inserts — so this saves syscalls rather than wall time.)
        let chunk_slots = ((4usize << 20) / seg).max(1) as u64;
        let mut chunk = AlignedBuf::new(0);
        let (mut chunk_start, mut chunk_len) = (0u64, 0u64);
        while i < l.slots_per_band {
            if i < chunk_start || i >= chunk_start + chunk_len {
                let n = chunk_slots.min(l.slots_per_band - i);
                chunk = AlignedBuf::new(n as usize * seg);
                dev.read_at(&mut chunk, band_off + hdr + i * seg as u64)
                    .map_err(|e| Error::io(&dev.info().path, "recovery reading segments", e))?;
                (chunk_start, chunk_len) = (i, n);
            }
            let rel = (i - chunk_start) as usize * seg;
            let first = &chunk[rel..rel + seg];
            let Some(sh) = SegmentHeader::decode(first) else {
                break;
            };
            if sh.pool_tag != inner.tag
                || sh.segment_seq < p.first_seq
                || sh.segment_seq <= last_seq
            {
                break;
            }
            let k = sh.nslots.max(1) as u64;
            if i + k > l.slots_per_band {
                break;
            }
            let data: Vec<u8> = if i + k <= chunk_start + chunk_len {
                chunk[rel..rel + k as usize * seg].to_vec()
            } else {
                let mut b = AlignedBuf::new(k as usize * seg);
                dev.read_at(&mut b, band_off + hdr + i * seg as u64)
                    .map_err(|e| Error::io(&dev.info().path, "recovery reading a segment", e))?;
                b.to_vec()
            };
            let (entries, used, is_partial) = segment_entries(&data, &sh, inner.tag);
            let slot = l.first_slot(p.band) + i;
            let placed: u64 = entries
                .iter()
                .map(|e| round_up(e.len as usize, 8) as u64)
                .sum();
            inner.slot_placed[slot as usize].store(placed as u32, Relaxed);
            for e in &entries {
                max_seq = max_seq.max(e.seq);
                min_seq[p.band as usize] = min_seq[p.band as usize].min(e.seq);
                // A pending group whose next record does not follow it is a group
                // a crash cut short (its last record never reached the device): it
                // is not applied, and must not be completed by later records.
                if !group.is_empty() && e.seq != group_last_seq + 1 {
                    group.clear();
                }
                group_last_seq = e.seq;
                group.push((e.digest, Loc::new(slot, e.offset, e.len, e.tombstone)));
                if !e.more {
                    for (d, loc) in group.drain(..) {
                        inner.index.update_with(d, |cur| match cur {
                            Some(c) if pos(Loc(c)) >= pos(loc) => (Some(c), ()),
                            _ => (Some(loc.0), ()),
                        });
                    }
                }
            }
            segments += 1;
            last_seq = sh.segment_seq;
            i += k;
            written[p.band as usize] = written[p.band as usize].max(i);
            if is_partial {
                // No valid summary: the write frontier, unless a later segment follows
                // (then the summary was damaged and its records were parsed instead).
                let next_follows = i < l.slots_per_band && {
                    let mut nb = AlignedBuf::new(4096);
                    dev.read_at(&mut nb, band_off + hdr + i * seg as u64)
                        .is_ok()
                        && SegmentHeader::decode(&nb).is_some_and(|n| {
                            n.pool_tag == inner.tag && n.segment_seq > sh.segment_seq
                        })
                };
                if next_follows {
                    inner.c.corruptions.fetch_add(1, Relaxed);
                    inner.recovery.lock().warnings.push(format!(
                        "band {} slot {}: segment summary damaged; {} records recovered by parsing the segment",
                        p.band,
                        i - k,
                        entries.len()
                    ));
                    continue;
                }
                if Some(p.band) == newest && k == 1 {
                    partial = Some((p.band, i - 1, sh, data, entries, used));
                }
                break;
            }
        }
    }
    // A group whose last record never reached the capacity tier is not applied here;
    // if it was acknowledged it is still on the pad and comes back below.
    drop(group);

    // 5. The pad: everything from its durable tail is re-applied below, in order.
    let groups = match &inner.pad {
        Some(_) => read_pad(inner)?,
        None => Vec::new(),
    };
    let on_pad: std::collections::HashSet<u64> = groups
        .iter()
        .flatten()
        .map(|r| fingerprint(r.digest))
        .collect();

    // 6. Entries pointing where nothing valid was found. A checkpoint may point into
    // segments that were still in DRAM (their records are on the pad, re-applied
    // below); dropped tombstones may dangle too. Anything else is a lost record.
    let mut lost = 0u64;
    inner.index.retain_entries(|fp, loc| {
        let loc = Loc(loc);
        let b = l.band_of_slot(loc.slot()) as usize;
        let ok = hdr_first[b].is_some() && l.slot_in_band(loc.slot()) < written[b];
        if !ok && !loc.is_tombstone() && !on_pad.contains(&fp) {
            lost += 1;
        }
        ok
    });
    if lost > 0 {
        inner.c.corruptions.fetch_add(lost, Relaxed);
        inner.recovery.lock().warnings.push(format!(
            "{lost} index entries pointed at segments that could not be read; those keys are lost"
        ));
    }

    // 7. Space accounting from the index.
    inner.index.for_each(|loc| inner.add_live(Loc(loc)));
    // Segments known only from the checkpoint: count their live records as placed,
    // so records that die from now on show up as death size.
    for (placed, live) in inner.slot_placed.iter().zip(inner.slot_live.iter()) {
        if placed.load(Relaxed) == 0 {
            placed.store(live.load(Relaxed), Relaxed);
        }
    }

    // 8. Band table and write state.
    let mode = l.geo.mode;
    let mut ws = inner.ws.lock();
    {
        let mut bt = inner.bands.lock();
        for b in 0..nb {
            let info = &mut bt.bands[b];
            match hdr_first[b] {
                Some(fs) => {
                    info.state = BandState::Sealed;
                    info.first_seq = fs;
                    info.written_slots = written[b];
                    inner.band_min_seq[b].store(min_seq[b], Relaxed);
                }
                None => {
                    info.state = BandState::Free;
                    bt.free.push_back(b as u32);
                }
            }
        }
        if let Some(b) = newest {
            if written[b as usize] < l.slots_per_band {
                bt.bands[b as usize].state = BandState::Open;
                ws.cur_band = Some(b);
                ws.next_sib = written[b as usize];
            }
        }
    }
    if let Some((band, sib, sh, data, entries, used)) = partial {
        if mode != Mode::Tiered && ws.cur_band == Some(band) {
            // Keep filling the partly written segment where the last run stopped.
            let mut buf = AlignedBuf::new(seg);
            buf.copy_from_slice(&data[..seg]);
            let slot = l.first_slot(band) + sib;
            // Past `used` lie the remains of the write the crash interrupted: a torn
            // record, and perhaps whole records behind it that carry this segment's
            // tag. Once new records fill the gap, a later recovery would parse on
            // into them and bring back writes that were never acknowledged. Erase
            // them, on the device too, before anything new is appended.
            buf[used..].fill(0);
            let from = used / 4096 * 4096;
            let (dev, base) = l.slot_addr(slot);
            let d = &inner.pool.caps[dev];
            d.write_at(&buf[from..], base + from as u64).map_err(|e| {
                Error::io(
                    &d.info().path,
                    "erasing the torn tail of the open segment",
                    e,
                )
            })?;
            crate::pool::sync(d, "erasing the torn tail of the open segment")?;
            let sb = Arc::new(SegBuf {
                size: seg,
                slot,
                nslots: 1,
                seq: sh.segment_seq,
                band,
                data: RwLock::new(buf),
            });
            inner.bufs.write().insert(slot, sb.clone());
            inner.bands.lock().bands[band as usize].inflight += 1;
            let (mn, mx) = entries
                .iter()
                .fold((u64::MAX, 0), |(a, b), e| (a.min(e.seq), b.max(e.seq)));
            ws.open = Some(OpenSeg {
                buf: sb,
                used,
                entries,
                min_seq: mn,
                max_seq: mx,
                flushed: used,
            });
        }
    }
    // Leave a gap, so no record of this run follows on from a group of the last run
    // that a crash cut short (recovery tells groups apart by consecutive seqs).
    ws.next_seq = max_seq + 1 + SEQ_GAP_AT_OPEN;
    inner.seq_hint.store(ws.next_seq, SeqCst);
    inner.next_seg_hint.store(ws.next_seg, SeqCst);
    drop(ws);

    let mut r = inner.recovery.lock();
    r.source = if clean {
        format!("{source} (clean shutdown)")
    } else {
        source.to_string()
    };
    r.segments = segments;
    r.us = t0.elapsed().as_micros() as u64;
    Ok(groups)
}

/// Parse the pad ring from its durable tail; set the ring state to continue after it.
fn read_pad(inner: &Inner) -> Result<Vec<Vec<PRec>>> {
    let Some(p) = &inner.pad else {
        return Ok(Vec::new());
    };
    let hb = crate::pool::read_block(&p.dev, p.hdr_off, 8192, "reading the pad header")?;
    let h = [
        PadHeader::decode(&hb[..4096]),
        PadHeader::decode(&hb[4096..]),
    ]
    .into_iter()
    .flatten()
    .filter(|h| h.pool_tag == inner.tag)
    .max_by_key(|h| h.hdr_seq)
    .ok_or_else(|| Error::Corruption("both write-pad headers are damaged".into()))?;
    let mut v = h.tail;
    let mut expect = h.tail_batch_seq;
    let mut groups = Vec::new();
    let mut batches = std::collections::VecDeque::new();
    let mut guard = 0u64;
    loop {
        guard += 1;
        if guard > p.size / 4096 + 2 {
            break;
        }
        let phys = v % p.size;
        let first = crate::pool::read_block(&p.dev, p.base + phys, 4096, "reading the pad")?;
        let Some(bh) = peek_batch(&first) else { break };
        if bh.pool_tag != inner.tag || bh.batch_seq != expect || bh.virt != v {
            break;
        }
        let total = round_up(BATCH_HEADER + bh.payload_len as usize, 4096);
        if phys + total as u64 > p.size {
            break;
        }
        let whole = if total > 4096 {
            crate::pool::read_block(&p.dev, p.base + phys, total, "reading the pad")?
        } else {
            first
        };
        if !verify_batch(&whole, &bh) {
            break;
        }
        batches.push_back((v, bh.batch_seq));
        expect += 1;
        if bh.flags & BATCH_WRAP != 0 {
            v = round_up64(v + 1, p.size);
            continue;
        }
        let payload = &whole[BATCH_HEADER..BATCH_HEADER + bh.payload_len as usize];
        let mut off = 0usize;
        let mut recs = Vec::new();
        while off < payload.len() {
            let (hd, k, _) = decode_record(&payload[off..])?;
            let len = hd.total_len();
            let mut bytes = payload[off..off + len].to_vec();
            bytes[18] &= !REC_MORE;
            recs.push(PRec {
                digest: digest(k),
                bytes,
                kind: Kind::Replay,
            });
            off += round_up(len, 8);
        }
        if !recs.is_empty() {
            groups.push(recs);
        }
        v += total as u64;
    }
    let mut s = p.st.lock();
    s.tail = h.tail;
    s.head = v;
    s.next_batch = expect;
    s.hdr_seq = h.hdr_seq;
    s.batches = batches;
    // Until the replayed records are durable again, the old region stays needed.
    s.hold = if v > h.tail { Some(h.tail) } else { None };
    Ok(groups)
}

type LoadedCheckpoint = (CheckpointHeader, Vec<BandRecord>);

fn load_checkpoint(inner: &Inner) -> Result<Option<LoadedCheckpoint>> {
    let g = &inner.layout.geo;
    if g.ckpt_slot_size < 8192 {
        return Ok(None);
    }
    let meta = inner.pool.meta().clone();
    let mut cands = Vec::new();
    for s in 0..2u64 {
        let off = g.ckpt_offset + s * g.ckpt_slot_size;
        let b = crate::pool::read_block(
            &meta,
            off,
            CKPT_HEADER as usize,
            "reading a checkpoint header",
        )?;
        if let Some(h) = CheckpointHeader::decode(&b) {
            if h.pool_tag == inner.tag && h.payload_len + CKPT_HEADER <= g.ckpt_slot_size {
                cands.push((off, h));
            }
        }
    }
    cands.sort_by_key(|c| std::cmp::Reverse(c.1.ckpt_seq));
    for (off, h) in cands {
        match try_load(inner, off, &h) {
            Ok(bands) => {
                *inner.ckpt_lock.lock() = h.ckpt_seq;
                return Ok(Some((h, bands)));
            }
            Err(e) => {
                inner.index.clear();
                inner.c.corruptions.fetch_add(1, Relaxed);
                inner.recovery.lock().warnings.push(format!(
                    "checkpoint {} unusable ({e}); used an older one or a full scan",
                    h.ckpt_seq
                ));
            }
        }
    }
    Ok(None)
}

fn try_load(inner: &Inner, off: u64, h: &CheckpointHeader) -> Result<Vec<BandRecord>> {
    if h.bands != inner.layout.bands || h.shards as usize != inner.index.shard_count() {
        return Err(Error::Corruption(
            "checkpoint does not match this pool's geometry".into(),
        ));
    }
    let meta = inner.pool.meta().clone();
    // Streamed, not read whole: at 10^8 keys the payload is as large as the index
    // (1.6 GiB), and holding both doubled the process's DRAM at open. Shards are
    // loaded before the payload hash is known; a mismatch at the end is an error
    // and the caller clears the index, as for any other damage.
    let mut r = ChunkReader::new(&meta, off + CKPT_HEADER, h.payload_len);
    let mut bands = Vec::with_capacity(h.bands as usize);
    let mut rec = [0u8; BAND_RECORD];
    for _ in 0..h.bands {
        r.read_exact(&mut rec)?;
        bands.push(BandRecord::decode(&rec)?);
    }
    let mut img = Vec::new();
    for s in 0..h.shards as usize {
        let mut lb = [0u8; 8];
        r.read_exact(&mut lb)?;
        let n = u64::from_le_bytes(lb);
        if n > r.remaining() {
            return Err(Error::Corruption("checkpoint truncated".into()));
        }
        img.clear();
        img.resize(n as usize, 0);
        r.read_exact(&mut img)?;
        inner
            .index
            .load_shard_image(s, &img)
            .map_err(|e| Error::Corruption(format!("checkpoint index shard {s}: {e}")))?;
    }
    if r.finish()? != h.payload_hash {
        return Err(Error::Corruption(
            "checkpoint payload checksum mismatch".into(),
        ));
    }
    Ok(bands)
}

/// Reads a checkpoint payload in aligned 8 MiB pieces, hashing as it goes (the
/// counterpart of [`ChunkWriter`]).
struct ChunkReader<'a> {
    dev: &'a Arc<dyn crate::device::Device>,
    base: u64,
    len: u64,
    buf: AlignedBuf,
    /// Payload offset of `buf[0]`, and how many of its bytes are valid / consumed.
    at: u64,
    valid: usize,
    used: usize,
    hash: Xxh3,
}

impl<'a> ChunkReader<'a> {
    fn new(dev: &'a Arc<dyn crate::device::Device>, base: u64, len: u64) -> Self {
        ChunkReader {
            dev,
            base,
            len,
            buf: AlignedBuf::new(8 << 20),
            at: 0,
            valid: 0,
            used: 0,
            hash: Xxh3::new(),
        }
    }

    fn remaining(&self) -> u64 {
        self.len - (self.at + self.used as u64)
    }

    fn read_exact(&mut self, mut out: &mut [u8]) -> Result<()> {
        if out.len() as u64 > self.remaining() {
            return Err(Error::Corruption("checkpoint truncated".into()));
        }
        while !out.is_empty() {
            if self.used == self.valid {
                self.at += self.valid as u64;
                let want = (self.len - self.at).min(self.buf.len() as u64) as usize;
                let n = round_up(want, 4096);
                self.dev
                    .read_at(&mut self.buf[..n], self.base + self.at)
                    .map_err(|e| Error::io(&self.dev.info().path, "reading a checkpoint", e))?;
                self.valid = want;
                self.used = 0;
            }
            let k = (self.valid - self.used).min(out.len());
            let src = &self.buf[self.used..self.used + k];
            self.hash.update(src);
            out[..k].copy_from_slice(src);
            self.used += k;
            out = &mut out[k..];
        }
        Ok(())
    }

    /// The hash of the whole payload (bytes not consumed are read and hashed too).
    fn finish(mut self) -> Result<u64> {
        let mut rest = [0u8; 4096];
        while self.remaining() > 0 {
            let k = (self.remaining() as usize).min(rest.len());
            self.read_exact(&mut rest[..k])?;
        }
        Ok(self.hash.digest())
    }
}

/// Write a checkpoint of the index to the inactive slot. Returns false if skipped
/// because the index does not fit.
pub(crate) fn checkpoint(inner: &Inner) -> Result<bool> {
    let mut last = inner.ckpt_lock.lock();
    let _active = crate::db::ActiveFlag::set(&inner.ckpt_active);
    let g = &inner.layout.geo;
    inner.bytes_since_ckpt.store(0, Relaxed);
    if g.ckpt_slot_size < 8192 {
        inner.c.checkpoint_skipped.fetch_add(1, Relaxed);
        return Ok(false);
    }
    let t0 = Instant::now();
    // Band table first, then replay_from: a slot that became durable in between is
    // then replayed once more, which is harmless; the other order could skip one.
    // Under the write state: in capacity-only mode a segment is durable (and out of
    // DRAM) before its group is applied to the index; no group may be half-applied here.
    let ws = inner.ws.lock();
    let bands: Vec<BandRecord> = {
        let bt = inner.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .map(|(i, b)| BandRecord {
                in_use: b.state != BandState::Free,
                first_seq: b.first_seq,
                written_slots: b.written_slots as u32,
                min_seq: inner.band_min_seq[i].load(Relaxed),
            })
            .collect()
    };
    let next_record_seq = inner.seq_hint.load(SeqCst);
    let hint = inner.next_seg_hint.load(SeqCst);
    let in_dram = inner.bufs.read().values().map(|b| b.seq).min();
    let replay_from = in_dram.map_or(hint, |m| m.min(hint));
    drop(ws);

    let seq = *last + 1;
    let slot_off = g.ckpt_offset + (seq % 2) * g.ckpt_slot_size;
    let limit = g.ckpt_slot_size - CKPT_HEADER;
    let meta = inner.pool.meta().clone();
    let mut w = ChunkWriter::new(&meta, slot_off + CKPT_HEADER, limit);
    let mut tb = Vec::with_capacity(bands.len() * BAND_RECORD);
    for b in &bands {
        b.encode_into(&mut tb);
    }
    let mut fits = w.put(&tb)?;
    let shards = inner.index.shard_count();
    for s in 0..shards {
        if !fits {
            break;
        }
        let img = inner.index.shard_image(s);
        fits = w.put(&(img.len() as u64).to_le_bytes())? && w.put(&img)?;
    }
    if !fits {
        tracing::warn!(
            "checkpoint skipped: the index does not fit the checkpoint slot (recovery will scan)"
        );
        inner.c.checkpoint_skipped.fetch_add(1, Relaxed);
        return Ok(false);
    }
    let (len, hash) = w.finish()?;
    crate::pool::sync(&meta, "syncing a checkpoint")?;
    let took_us = t0.elapsed().as_micros() as u64;
    let h = CheckpointHeader {
        ckpt_seq: seq,
        pool_tag: inner.tag,
        replay_from_seq: replay_from,
        next_record_seq,
        shards: shards as u32,
        bands: bands.len() as u32,
        payload_len: len,
        payload_hash: hash,
        took_us,
    };
    crate::pool::write_block(&meta, slot_off, &h.encode(), "writing a checkpoint header")?;
    crate::pool::sync(&meta, "syncing a checkpoint")?;
    *last = seq;
    tracing::info!(
        seq,
        bytes = len + CKPT_HEADER,
        took_us,
        "checkpoint written"
    );
    inner.c.checkpoints.fetch_add(1, Relaxed);
    inner
        .c
        .checkpoint_bytes
        .fetch_add(len + CKPT_HEADER, Relaxed);
    inner
        .c
        .last_checkpoint_us
        .store(t0.elapsed().as_micros() as u64, Relaxed);
    Ok(true)
}

/// Streams bytes to a device region in aligned 8 MiB writes, hashing as it goes.
struct ChunkWriter<'a> {
    dev: &'a Arc<dyn crate::device::Device>,
    base: u64,
    limit: u64,
    buf: AlignedBuf,
    fill: usize,
    written: u64,
    hash: Xxh3,
}

impl<'a> ChunkWriter<'a> {
    fn new(dev: &'a Arc<dyn crate::device::Device>, base: u64, limit: u64) -> Self {
        ChunkWriter {
            dev,
            base,
            limit,
            buf: AlignedBuf::new(8 << 20),
            fill: 0,
            written: 0,
            hash: Xxh3::new(),
        }
    }

    /// Append; false if the region is full.
    fn put(&mut self, mut b: &[u8]) -> Result<bool> {
        if self.written + self.fill as u64 + b.len() as u64 > self.limit {
            return Ok(false);
        }
        self.hash.update(b);
        while !b.is_empty() {
            let n = (self.buf.len() - self.fill).min(b.len());
            self.buf[self.fill..self.fill + n].copy_from_slice(&b[..n]);
            self.fill += n;
            b = &b[n..];
            if self.fill == self.buf.len() {
                self.spill(self.buf.len())?;
            }
        }
        Ok(true)
    }

    fn spill(&mut self, n: usize) -> Result<()> {
        let n = round_up(n, 4096);
        if self.fill < n {
            self.buf[self.fill..n].fill(0);
        }
        self.dev
            .write_at(&self.buf[..n], self.base + self.written)
            .map_err(|e| Error::io(&self.dev.info().path, "writing a checkpoint", e))?;
        self.written += self.fill as u64;
        self.fill = 0;
        Ok(())
    }

    fn finish(mut self) -> Result<(u64, u64)> {
        if self.fill > 0 {
            let n = self.fill;
            self.spill(n)?;
        }
        Ok((self.written, self.hash.digest()))
    }
}
