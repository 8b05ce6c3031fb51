//! The single capacity-tier writer (paper §2.1 rule 2).
//!
//! Every write to a capacity device goes through this one thread, in order:
//! band headers, whole segments, and (capacity-only mode) the dirty tail of the
//! open segment. After each burst it syncs the devices it wrote, then lets go of
//! what those writes made redundant: DRAM segment buffers and write-pad space.

use super::segment::SegmentBuf;
use super::state::Engine;
use super::writer_jobs::{Waiter, WriterJob};
use crate::error::{Error, Result};
use crossbeam_channel::Receiver;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Most jobs taken into one burst (one sync per device per burst).
const BURST: usize = 256;

/// The writer thread: drain the queue in bursts until it is closed.
pub(crate) fn run(engine: Arc<Engine>, rx: Receiver<WriterJob>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < BURST {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        // Taken before the burst: a burst that fails midway has already drained
        // (and dropped) some jobs, and every waiter must still hear of it.
        let waiters: Vec<Arc<Waiter>> = jobs.iter().filter_map(|j| j.waiter().cloned()).collect();
        if let Err(e) = Burst::new(&engine).run(&mut jobs) {
            let m = e.to_string();
            engine.fail(format!("capacity-tier writer failed: {m}"));
            for w in waiters {
                w.complete(Err(m.clone()));
            }
        }
    }
}

/// One burst of jobs: written, synced, then their effects released.
struct Burst<'e> {
    e: &'e Engine,
    /// Devices written (to sync).
    touched: Vec<bool>,
    /// Segments written whole (durable after the sync).
    done: Vec<Arc<SegmentBuf>>,
    /// Bands GC freed, to TRIM and return to the free list after the sync.
    frees: Vec<(u32, Arc<Waiter>)>,
    waiters: Vec<Arc<Waiter>>,
    /// Consecutive segment writes, submitted together: (device, offset, buffer, from, to).
    pending: Vec<(usize, u64, Arc<SegmentBuf>, usize, usize)>,
}

impl<'e> Burst<'e> {
    fn new(e: &'e Engine) -> Burst<'e> {
        Burst {
            e,
            touched: vec![false; e.pool.caps.len()],
            done: Vec::new(),
            frees: Vec::new(),
            waiters: Vec::new(),
            pending: Vec::new(),
        }
    }

    fn run(mut self, jobs: &mut Vec<WriterJob>) -> Result<()> {
        if let Some(m) = self.e.failed.lock().clone() {
            return Err(Error::Closed(m));
        }
        for j in jobs.drain(..) {
            self.job(j)?;
        }
        self.submit_segments()?;
        for (dev, t) in self.touched.iter().enumerate() {
            if *t {
                crate::pool::sync(&self.e.pool.caps[dev], "syncing the capacity tier")?;
            }
        }
        // Durable now.
        self.release_segments()?;
        self.free_bands();
        for w in self.waiters {
            w.complete(Ok(()));
        }
        Ok(())
    }

    /// Before a FREE band header: sync what this burst wrote so far, and
    /// return the newest segment seq now durable, for `freed_after`. Without
    /// the sync the header could survive a power cut that tore the segments
    /// written before it in the same burst, and recovery would take the
    /// header as proof that they were durable (design.md §10.4, "A torn
    /// burst"). Bands are freed rarely; the extra sync costs nothing that
    /// shows.
    fn sync_before_free(&mut self) -> Result<u64> {
        let written = self.e.seg_written.load(Relaxed);
        for (dev, t) in self.touched.iter().enumerate() {
            if *t {
                crate::pool::sync(&self.e.pool.caps[dev], "syncing before a band is freed")?;
            }
        }
        Ok(written)
    }

    fn job(&mut self, j: WriterJob) -> Result<()> {
        let e = self.e;
        match j {
            WriterJob::BandHeader {
                band,
                mut hdr,
                free,
            } => {
                self.submit_segments()?;
                if free.is_some() {
                    hdr.freed_after = self.sync_before_free()?;
                }
                let (dev, off) = e.layout.band_addr(band);
                // The whole header area (one IU): a 4 KiB write into a larger
                // IU would cost the drive a read-modify-write.
                let mut h = hdr.encode();
                h.resize((e.layout.geo.band_header_size as usize).max(h.len()), 0);
                crate::pool::write_block(&e.pool.caps[dev], off, &h, "writing a band header")?;
                self.touched[dev] = true;
                if let Some(w) = free {
                    self.frees.push((band, w));
                }
            }
            WriterJob::Segment { buf, from } => {
                e.seg_written.fetch_max(buf.seq, Relaxed);
                let (dev, off) = e.layout.slot_addr(buf.slot);
                let end = buf.size;
                self.touched[dev] = true;
                e.counters.segments_written.fetch_add(1, Relaxed);
                e.counters
                    .segment_bytes
                    .fetch_add((end - from) as u64, Relaxed);
                self.pending
                    .push((dev, off + from as u64, buf.clone(), from, end));
                self.done.push(buf);
            }
            WriterJob::Flush { buf, from, to } => {
                self.submit_segments()?;
                e.seg_written.fetch_max(buf.seq, Relaxed);
                let (dev, off) = e.layout.slot_addr(buf.slot);
                let to = to.min(buf.size);
                let g = buf.data.read();
                let d = &e.pool.caps[dev];
                d.write_at(&g[from..to], off + from as u64)
                    .map_err(|err| Error::io(&d.info().path, "flushing the open segment", err))?;
                self.touched[dev] = true;
            }
            WriterJob::InPlace(pages) => {
                self.submit_segments()?;
                for (dev, off, page) in &pages {
                    let d = &e.pool.caps[*dev];
                    d.write_at(page, *off).map_err(|err| {
                        Error::io(&d.info().path, "updating a record in place", err)
                    })?;
                    self.touched[*dev] = true;
                }
            }
            WriterJob::Barrier(w) => self.waiters.push(w),
        }
        Ok(())
    }

    /// Submit the segment writes collected so far, per device, in batches of
    /// at most `writer_inflight_bytes` (Options): a get queued behind the
    /// batch waits for all of it.
    fn submit_segments(&mut self) -> Result<()> {
        let cap = self.e.opts.writer_inflight_bytes;
        for dev in 0..self.touched.len() {
            let mine: Vec<_> = self.pending.iter().filter(|p| p.0 == dev).collect();
            if mine.is_empty() {
                continue;
            }
            let guards: Vec<_> = mine.iter().map(|p| p.2.data.read()).collect();
            let ops: Vec<(u64, &[u8])> = mine
                .iter()
                .zip(guards.iter())
                .map(|(p, g)| (p.1, &g[p.3..p.4]))
                .collect();
            let d = &self.e.pool.caps[dev];
            for batch in byte_batches(&ops, cap) {
                d.write_batch(batch)
                    .map_err(|e| Error::io(&d.info().path, "writing segments", e))?;
            }
        }
        self.pending.clear();
        Ok(())
    }

    /// Segments written are durable: record progress, release their DRAM
    /// buffers and the pad space only they needed.
    fn release_segments(&self) -> Result<()> {
        let e = self.e;
        if self.done.is_empty() {
            return Ok(());
        }
        let mut written = 0u64;
        {
            let mut bt = e.bands.lock();
            for b in &self.done {
                let end = e.layout.slot_in_band(b.slot) + b.nslots as u64;
                bt.segment_written(b.band, end);
                written += b.nslots as u64 * e.layout.seg;
            }
        }
        e.segments.remove_all(&self.done);
        e.bytes_since_ckpt.fetch_add(written, Relaxed);
        match &e.pad {
            Some(p) => {
                let seqs: Vec<u64> = self.done.iter().map(|b| b.seq).collect();
                p.release(&seqs, e.tag)
            }
            None => Ok(()),
        }
    }

    /// Bands whose free header is durable: TRIM them and put them on the free list.
    fn free_bands(&mut self) {
        let e = self.e;
        for (band, w) in self.frees.drain(..) {
            let (dev, off) = e.layout.band_addr(band);
            let h = e.layout.geo.band_header_size as u64;
            // TRIM failure is not data loss; the band is free either way.
            if e.opts.trim_freed_bands.trims(e.pool.caps[dev].info()) {
                let _ = e.pool.caps[dev].discard(off + h, e.layout.geo.band_size - h);
            }
            e.bands.lock().release(band);
            e.bands.notify_space();
            w.complete(Ok(()));
        }
    }
}

/// `ops` split, in order, into runs of at most `cap` bytes each (0 = one run);
/// a single write larger than `cap` is a run of its own.
fn byte_batches<'a, 'b>(
    ops: &'a [(u64, &'b [u8])],
    cap: usize,
) -> impl Iterator<Item = &'a [(u64, &'b [u8])]> {
    let mut rest = ops;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut bytes) = (1, rest[0].1.len());
        while n < rest.len() && (cap == 0 || bytes + rest[n].1.len() <= cap) {
            bytes += rest[n].1.len();
            n += 1;
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::byte_batches;

    fn runs(lens: &[usize], cap: usize) -> Vec<Vec<usize>> {
        let bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
        let ops: Vec<(u64, &[u8])> = bufs.iter().map(|b| (0, b.as_slice())).collect();
        byte_batches(&ops, cap)
            .map(|r| r.iter().map(|o| o.1.len()).collect())
            .collect()
    }

    #[test]
    fn batches_stay_under_the_cap_in_order() {
        let k = 1 << 10;
        assert_eq!(
            runs(&[256 * k; 5], 512 * k),
            vec![vec![256 * k; 2], vec![256 * k; 2], vec![256 * k]]
        );
        assert_eq!(runs(&[256 * k; 3], 256 * k), vec![vec![256 * k]; 3]);
        // Larger than the cap: alone, never split or dropped.
        assert_eq!(
            runs(&[4 * k, 1024 * k, 4 * k, 4 * k], 256 * k),
            vec![vec![4 * k], vec![1024 * k], vec![4 * k, 4 * k]]
        );
    }

    #[test]
    fn zero_cap_is_one_batch_and_empty_is_none() {
        assert_eq!(runs(&[1, 2, 3], 0), vec![vec![1, 2, 3]]);
        assert!(runs(&[], 4096).is_empty());
    }
}
