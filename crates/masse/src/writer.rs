//! The single capacity-tier writer (paper §2.1 rule 2).
//!
//! Every write to a capacity device goes through this one thread, in order:
//! band headers, whole segments, and (capacity-only mode) the dirty tail of the
//! open segment. After each burst it syncs the devices it wrote, then lets go of
//! what those writes made redundant: DRAM segment buffers and write-pad space.

use crate::db::{BandState, Inner, SegBuf};
use crate::device::AlignedBuf;
use crate::error::{Error, Result};
use crate::format::{BandHeader, PadHeader};
use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Work for the writer.
pub(crate) enum WMsg {
    /// Write a band header; with `free`, the band is being released by GC:
    /// after the header is durable, TRIM the band and put it on the free list.
    BandHeader {
        band: u32,
        hdr: BandHeader,
        free: Option<Arc<Waiter>>,
    },
    /// Write a sealed segment from byte `from` (earlier bytes are already durable).
    Segment { buf: Arc<SegBuf>, from: usize },
    /// Write bytes `[from, to)` of the open segment (capacity-only group commit).
    Flush {
        buf: Arc<SegBuf>,
        from: usize,
        to: usize,
    },
    /// Overwrite whole 4 KiB pages of a capacity device in place (scm-only
    /// updates): `(device, offset, page image)`.
    InPlace(Vec<(usize, u64, AlignedBuf)>),
    /// Completes once everything sent before it is durable.
    Barrier(Arc<Waiter>),
}

/// A one-shot completion.
pub(crate) struct Waiter {
    res: Mutex<Option<Result<(), String>>>,
    cv: Condvar,
}

impl Waiter {
    pub fn new() -> Arc<Waiter> {
        Arc::new(Waiter {
            res: Mutex::new(None),
            cv: Condvar::new(),
        })
    }
    pub fn complete(&self, r: Result<(), String>) {
        *self.res.lock() = Some(r);
        self.cv.notify_all();
    }
    pub fn wait(&self) -> Result<()> {
        let mut g = self.res.lock();
        loop {
            if let Some(r) = g.take() {
                return r.map_err(Error::Closed);
            }
            self.cv.wait(&mut g);
        }
    }
}

pub(crate) fn run(inner: Arc<Inner>, rx: Receiver<WMsg>) {
    while let Ok(first) = rx.recv() {
        let mut msgs = vec![first];
        while msgs.len() < 256 {
            match rx.try_recv() {
                Ok(m) => msgs.push(m),
                Err(_) => break,
            }
        }
        // Taken before the burst: `burst` drains `msgs`, and an error part-way
        // drops the rest, so their waiters must be reached from here.
        let waiters: Vec<Arc<Waiter>> = msgs
            .iter()
            .filter_map(|m| match m {
                WMsg::Barrier(w) | WMsg::BandHeader { free: Some(w), .. } => Some(w.clone()),
                _ => None,
            })
            .collect();
        if let Err(e) = burst(&inner, &mut msgs) {
            let m = e.to_string();
            inner.fail(format!("capacity-tier writer failed: {m}"));
            for w in waiters {
                w.complete(Err(m.clone()));
            }
        }
    }
}

fn burst(inner: &Inner, msgs: &mut Vec<WMsg>) -> Result<()> {
    if let Some(m) = inner.failed.lock().clone() {
        return Err(Error::Closed(m));
    }
    let ndev = inner.pool.caps.len();
    let mut touched = vec![false; ndev];
    let mut done: Vec<Arc<SegBuf>> = Vec::new();
    let mut frees: Vec<(u32, Arc<Waiter>)> = Vec::new();
    let mut waiters: Vec<Arc<Waiter>> = Vec::new();
    let seg = inner.layout.seg;
    // Consecutive segment writes are submitted together.
    let mut pending: Vec<(usize, u64, Arc<SegBuf>, usize, usize)> = Vec::new();
    let flush_pending = |pending: &mut Vec<(usize, u64, Arc<SegBuf>, usize, usize)>| -> Result<()> {
        for dev in 0..ndev {
            let mine: Vec<_> = pending.iter().filter(|p| p.0 == dev).collect();
            if mine.is_empty() {
                continue;
            }
            let guards: Vec<_> = mine.iter().map(|p| p.2.data.read()).collect();
            let ops: Vec<(u64, &[u8])> = mine
                .iter()
                .zip(guards.iter())
                .map(|(p, g)| (p.1, &g[p.3..p.4]))
                .collect();
            let d = &inner.pool.caps[dev];
            d.write_batch(&ops)
                .map_err(|e| Error::io(&d.info().path, "writing segments", e))?;
        }
        pending.clear();
        Ok(())
    };
    for m in msgs.drain(..) {
        match m {
            WMsg::BandHeader { band, hdr, free } => {
                flush_pending(&mut pending)?;
                let (dev, off) = inner.layout.band_addr(band);
                crate::pool::write_block(
                    &inner.pool.caps[dev],
                    off,
                    &hdr.encode(),
                    "writing a band header",
                )?;
                touched[dev] = true;
                if let Some(w) = free {
                    frees.push((band, w));
                }
            }
            WMsg::Segment { buf, from } => {
                let (dev, off) = inner.layout.slot_addr(buf.slot);
                let end = buf.size;
                touched[dev] = true;
                inner.c.segments_written.fetch_add(1, Relaxed);
                inner
                    .c
                    .segment_bytes
                    .fetch_add((end - from) as u64, Relaxed);
                pending.push((dev, off + from as u64, buf.clone(), from, end));
                done.push(buf);
            }
            WMsg::Flush { buf, from, to } => {
                flush_pending(&mut pending)?;
                let (dev, off) = inner.layout.slot_addr(buf.slot);
                let to = to.min(buf.size);
                let g = buf.data.read();
                let d = &inner.pool.caps[dev];
                d.write_at(&g[from..to], off + from as u64)
                    .map_err(|e| Error::io(&d.info().path, "flushing the open segment", e))?;
                touched[dev] = true;
            }
            WMsg::InPlace(pages) => {
                flush_pending(&mut pending)?;
                for (dev, off, page) in &pages {
                    let d = &inner.pool.caps[*dev];
                    d.write_at(page, *off)
                        .map_err(|e| Error::io(&d.info().path, "updating a record in place", e))?;
                    touched[*dev] = true;
                }
            }
            WMsg::Barrier(w) => waiters.push(w),
        }
    }
    flush_pending(&mut pending)?;
    for (dev, t) in touched.iter().enumerate() {
        if *t {
            crate::pool::sync(&inner.pool.caps[dev], "syncing the capacity tier")?;
        }
    }
    // Durable now. Release DRAM buffers and record progress.
    if !done.is_empty() {
        let mut written = 0u64;
        {
            let mut bt = inner.bands.lock();
            for b in &done {
                let info = &mut bt.bands[b.band as usize];
                info.inflight = info.inflight.saturating_sub(1);
                let end = inner.layout.slot_in_band(b.slot) + b.nslots as u64;
                info.written_slots = info.written_slots.max(end);
                written += b.nslots as u64 * seg;
            }
        }
        {
            let mut bufs = inner.bufs.write();
            for b in &done {
                bufs.remove(&b.slot);
            }
        }
        inner.bytes_since_ckpt.fetch_add(written, Relaxed);
        if let Some(max_seq) = done.iter().map(|b| b.seq).max() {
            release_pad(inner, max_seq)?;
        }
    }
    for (band, w) in frees {
        let (dev, off) = inner.layout.band_addr(band);
        let h = inner.layout.geo.band_header_size as u64;
        let d = &inner.pool.caps[dev];
        // TRIM failure is not data loss; the band is free either way.
        let _ = d.discard(off + h, inner.layout.geo.band_size - h);
        {
            let mut bt = inner.bands.lock();
            let info = &mut bt.bands[band as usize];
            info.state = BandState::Free;
            info.written_slots = 0;
            info.inflight = 0;
            bt.free.push_back(band);
        }
        inner.space_cv.notify_all();
        w.complete(Ok(()));
    }
    for w in waiters {
        w.complete(Ok(()));
    }
    Ok(())
}

/// Segments up to `max_seq` are durable: advance the pad tail past the groups
/// that only they needed, recording the new tail durably before reusing space.
fn release_pad(inner: &Inner, max_seq: u64) -> Result<()> {
    let Some(p) = &inner.pad else { return Ok(()) };
    let (hdr, new_tail) = {
        let mut s = p.st.lock();
        while s.marks.front().is_some_and(|m| m.0 <= max_seq) {
            s.marks.pop_front();
        }
        let new_tail = s.needed_from();
        if new_tail <= s.tail {
            return Ok(());
        }
        while s.batches.front().is_some_and(|b| b.0 < new_tail) {
            s.batches.pop_front();
        }
        let tail_batch_seq = s.batches.front().map(|b| b.1).unwrap_or(s.next_batch);
        s.hdr_seq += 1;
        (
            PadHeader {
                hdr_seq: s.hdr_seq,
                pool_tag: inner.tag,
                tail: new_tail,
                tail_batch_seq,
            },
            new_tail,
        )
    };
    let off = p.hdr_off + (hdr.hdr_seq % 2) * 4096;
    crate::pool::write_block(&p.dev, off, &hdr.encode(), "writing the pad header")?;
    crate::pool::sync(&p.dev, "syncing the pad header")?;
    let mut s = p.st.lock();
    if new_tail > s.tail {
        s.tail = new_tail;
    }
    drop(s);
    p.cv.notify_all();
    Ok(())
}
