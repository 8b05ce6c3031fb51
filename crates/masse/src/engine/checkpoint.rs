//! Index checkpoints (paper §2.7): writing them, and loading the newest at open.
//!
//! A checkpoint is a fuzzy snapshot: the band table, then the index shard by
//! shard, written to the inactive one of two slots on the fast tier, header
//! last. It records `replay_from`: the oldest segment that was not yet durable
//! when the snapshot started; recovery replays from there (recovery.rs).

use super::band::BandState;
use super::state::{ActiveFlag, Engine};
use crate::device::{round_up, AlignedBuf, Device};
use crate::error::{Error, Result};
use crate::format::*;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Instant;
use xxhash_rust::xxh3::Xxh3;

pub(super) type LoadedCheckpoint = (CheckpointHeader, Vec<BandRecord>);

pub(super) fn load_checkpoint(e: &Engine) -> Result<Option<LoadedCheckpoint>> {
    let g = &e.layout.geo;
    if g.ckpt_slot_size < 8192 {
        return Ok(None);
    }
    let meta = e.pool.meta().clone();
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
            if h.pool_tag == e.tag && h.payload_len + CKPT_HEADER <= g.ckpt_slot_size {
                cands.push((off, h));
            }
        }
    }
    // Checkpoints of earlier builds (version ≤ 3) hold locations whose
    // lengths are rounded to 8 bytes, which this build's exact locations
    // would not match (GC and check compare them): scan the log instead, once.
    let found = cands.len();
    cands.retain(|(_, h)| h.version == CHECKPOINT_VERSION);
    if cands.is_empty() && found > 0 {
        tracing::info!("checkpoint written by an earlier build: scanning the log instead");
    }
    cands.sort_by_key(|c| std::cmp::Reverse(c.1.ckpt_seq));
    for (off, h) in cands {
        match try_load(e, off, &h) {
            Ok(bands) => {
                *e.ckpt_lock.lock() = h.ckpt_seq;
                return Ok(Some((h, bands)));
            }
            Err(err) => {
                e.index.clear();
                e.counters.corruptions.fetch_add(1, Relaxed);
                e.warn(format!(
                    "checkpoint {} unusable ({err}); used an older one or a full scan",
                    h.ckpt_seq
                ));
            }
        }
    }
    Ok(None)
}

fn try_load(e: &Engine, off: u64, h: &CheckpointHeader) -> Result<Vec<BandRecord>> {
    if h.bands != e.layout.bands || h.shards as usize != e.index.shard_count() {
        return Err(Error::Corruption(
            "checkpoint does not match this pool's geometry".into(),
        ));
    }
    let meta = e.pool.meta().clone();
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
        e.index
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
    dev: &'a Arc<dyn Device>,
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
    fn new(dev: &'a Arc<dyn Device>, base: u64, len: u64) -> Self {
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
pub(crate) fn checkpoint(e: &Engine) -> Result<bool> {
    let mut last = e.ckpt_lock.lock();
    let _active = ActiveFlag::set(&e.ckpt_active);
    let g = &e.layout.geo;
    e.bytes_since_ckpt.store(0, Relaxed);
    if g.ckpt_slot_size < 8192 {
        e.counters.checkpoint_skipped.fetch_add(1, Relaxed);
        return Ok(false);
    }
    let t0 = Instant::now();
    let snap = snapshot(e);
    let seq = *last + 1;
    let slot_off = g.ckpt_offset + (seq % 2) * g.ckpt_slot_size;
    let meta = e.pool.meta().clone();
    let Some((len, hash)) = write_payload(e, &meta, slot_off, &snap.bands)? else {
        tracing::warn!(
            "checkpoint skipped: the index does not fit the checkpoint slot (recovery will scan)"
        );
        e.counters.checkpoint_skipped.fetch_add(1, Relaxed);
        return Ok(false);
    };
    crate::pool::sync(&meta, "syncing a checkpoint")?;
    let took_us = t0.elapsed().as_micros() as u64;
    let h = CheckpointHeader {
        version: CHECKPOINT_VERSION,
        ckpt_seq: seq,
        pool_tag: e.tag,
        replay_from_seq: snap.replay_from,
        next_record_seq: snap.next_record_seq,
        shards: e.index.shard_count() as u32,
        bands: snap.bands.len() as u32,
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
    let c = &e.counters;
    c.checkpoints.fetch_add(1, Relaxed);
    c.checkpoint_bytes.fetch_add(len + CKPT_HEADER, Relaxed);
    c.last_checkpoint_us
        .store(t0.elapsed().as_micros() as u64, Relaxed);
    Ok(true)
}

/// What a checkpoint records besides the index.
struct Snapshot {
    bands: Vec<BandRecord>,
    next_record_seq: u64,
    replay_from: u64,
}

/// Band table first, then replay_from: a slot that became durable in between is
/// then replayed once more, which is harmless; the other order could skip one.
/// Under the write state: in capacity-only mode a segment is durable (and out of
/// DRAM) before its group is applied to the index; no group may be half-applied here.
fn snapshot(e: &Engine) -> Snapshot {
    let _ws = e.write_state.lock();
    let bands: Vec<BandRecord> = {
        let bt = e.bands.lock();
        bt.bands
            .iter()
            .enumerate()
            .map(|(i, b)| BandRecord {
                in_use: b.state != BandState::Free,
                first_seq: b.first_seq,
                written_slots: b.written_slots as u32,
                min_seq: e.status.min_seq(i),
            })
            .collect()
    };
    let next_record_seq = e.seq_hint.load(SeqCst);
    let hint = e.next_seg_hint.load(SeqCst);
    let replay_from = e.segments.min_seq().map_or(hint, |m| m.min(hint));
    Snapshot {
        bands,
        next_record_seq,
        replay_from,
    }
}

/// Stream the band records and every index shard image after the header at
/// `slot_off`. Returns (payload length, hash), or `None` if it does not fit.
fn write_payload(
    e: &Engine,
    meta: &Arc<dyn Device>,
    slot_off: u64,
    bands: &[BandRecord],
) -> Result<Option<(u64, u64)>> {
    let limit = e.layout.geo.ckpt_slot_size - CKPT_HEADER;
    let mut w = ChunkWriter::new(meta, slot_off + CKPT_HEADER, limit);
    let mut tb = Vec::with_capacity(bands.len() * BAND_RECORD);
    for b in bands {
        b.encode_into(&mut tb);
    }
    let mut fits = w.put(&tb)?;
    for s in 0..e.index.shard_count() {
        if !fits {
            return Ok(None);
        }
        let img = e.index.shard_image(s);
        fits = w.put(&(img.len() as u64).to_le_bytes())? && w.put(&img)?;
    }
    if !fits {
        return Ok(None);
    }
    w.finish().map(Some)
}

/// Streams bytes to a device region in aligned 8 MiB writes, hashing as it goes.
struct ChunkWriter<'a> {
    dev: &'a Arc<dyn Device>,
    base: u64,
    limit: u64,
    buf: AlignedBuf,
    fill: usize,
    written: u64,
    hash: Xxh3,
}

impl<'a> ChunkWriter<'a> {
    fn new(dev: &'a Arc<dyn Device>, base: u64, limit: u64) -> Self {
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
