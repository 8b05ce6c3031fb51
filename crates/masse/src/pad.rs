//! Reading the write pad's batch log: at open (replay) and in `check`.
//!
//! The pad is a ring of 4 KiB-aligned batches, one per group commit, each with
//! a checksum over its header and payload, a consecutive batch number and the
//! virtual (ever-growing) offset it was written at. Replay starts at the tail
//! recorded in the newer valid pad header and follows the chain.
//!
//! A batch that fails its checks ends the log only if no valid batch of the
//! current lap follows it. Group commits are sequential and each batch is
//! synced before the next is written, so only the last batch can be torn; a
//! failing batch followed by a valid later one (virt equal to its position,
//! higher number) was durable and then damaged. Replay reports it and goes on,
//! instead of silently dropping every acknowledged batch after it. The
//! successor of a damaged batch starts within one maximum batch length after
//! it (or at the start of the next lap, after a wrap marker), so that is how
//! far the scan looks. Stale batches of earlier laps are never taken: their
//! recorded offset is one lap behind the position they are found at.

use crate::db::{Inner, PadRing};
use crate::device::{round_up, round_up64, AlignedBuf};
use crate::error::Result;
use crate::format::*;

/// One valid batch found on the pad.
pub(crate) struct Batch {
    pub virt: u64,
    pub header: BatchHeader,
    /// The whole batch (header, payload, padding).
    pub bytes: AlignedBuf,
}

impl Batch {
    /// Virtual offset of the batch that follows it.
    pub fn next_virt(&self, ring: u64) -> u64 {
        if self.header.flags & BATCH_WRAP != 0 {
            round_up64(self.virt + 1, ring)
        } else {
            self.virt + round_up(BATCH_HEADER + self.header.payload_len as usize, 4096) as u64
        }
    }

    /// The batch's payload: its records, each padded to 8 bytes.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[BATCH_HEADER..BATCH_HEADER + self.header.payload_len as usize]
    }
}

/// Reads batches of one pad ring.
pub(crate) struct PadReader<'a> {
    p: &'a PadRing,
    tag: u64,
}

impl<'a> PadReader<'a> {
    pub fn new(p: &'a PadRing, tag: u64) -> PadReader<'a> {
        PadReader { p, tag }
    }

    /// The valid batch at virtual offset `v`, if there is one; with `seq`, it
    /// must carry that number.
    pub fn batch_at(&self, v: u64, seq: Option<u64>) -> Result<Option<Batch>> {
        let p = self.p;
        let phys = v % p.size;
        let first = crate::pool::read_block(&p.dev, p.base + phys, 4096, "reading the pad")?;
        let Some(h) = peek_batch(&first) else {
            return Ok(None);
        };
        if h.pool_tag != self.tag || h.virt != v || seq.is_some_and(|s| s != h.batch_seq) {
            return Ok(None);
        }
        let total = round_up(BATCH_HEADER + h.payload_len as usize, 4096);
        if phys + total as u64 > p.size {
            return Ok(None);
        }
        let bytes = if total > 4096 {
            crate::pool::read_block(&p.dev, p.base + phys, total, "reading the pad")?
        } else {
            first
        };
        Ok(verify_batch(&bytes, &h).then_some(Batch {
            virt: v,
            header: h,
            bytes,
        }))
    }

    /// Longest a batch can be: a group is at most a quarter of the ring.
    fn max_batch(&self) -> u64 {
        round_up64(BATCH_HEADER as u64 + self.p.size / 4, 4096)
    }

    /// After a batch at `v` (expected number `seq`) failed: the first valid
    /// batch numbered above `seq` where its successor may start, if any.
    pub fn resync(&self, v: u64, seq: u64) -> Result<Option<Batch>> {
        let lap = round_up64(v + 1, self.p.size);
        let windows = [
            (v + 4096, (v + self.max_batch()).min(lap)),
            (lap, lap + self.max_batch()),
        ];
        for (from, to) in windows {
            let mut hit = None;
            self.headers(from, to, &mut |q, h| {
                if h.virt != q || h.batch_seq <= seq {
                    return Ok(false);
                }
                hit = self.batch_at(q, Some(h.batch_seq))?;
                Ok(hit.is_some())
            })?;
            if hit.is_some() {
                return Ok(hit);
            }
        }
        Ok(None)
    }

    /// Every valid batch in the ring, as `(virt, seq, next virt)`, by scanning
    /// it whole: used when no pad header can be trusted to say where the log
    /// starts.
    pub fn scan_ring(&self) -> Result<Vec<(u64, u64, u64)>> {
        let size = self.p.size;
        let mut found = Vec::new();
        self.headers(0, size, &mut |q, h| {
            if h.virt % size == q {
                if let Some(b) = self.batch_at(h.virt, Some(h.batch_seq))? {
                    found.push((b.virt, b.header.batch_seq, b.next_virt(size)));
                }
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// Call `f(virt, header)` for every 4 KiB block in `[from, to)` (virtual
    /// offsets) that starts with a batch header of this pool, reading the ring
    /// 1 MiB at a time; stop when `f` returns true.
    fn headers(
        &self,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, BatchHeader) -> Result<bool>,
    ) -> Result<()> {
        let p = self.p;
        let mut q = from;
        while q < to {
            let phys = q % p.size;
            let n = (to - q).min(1 << 20).min(p.size - phys);
            let chunk =
                crate::pool::read_block(&p.dev, p.base + phys, n as usize, "scanning the pad")?;
            for at in (0..n as usize).step_by(4096) {
                let Some(h) = peek_batch(&chunk[at..]).filter(|h| h.pool_tag == self.tag) else {
                    continue;
                };
                if f(q + at as u64, h)? {
                    return Ok(());
                }
            }
            q += n;
        }
        Ok(())
    }
}

/// Where replay of the pad starts: `(tail, batch seq at tail, header seq)`.
/// With both header copies valid, the newer one. With one or none, no header
/// can be trusted to be the newest (a damaged copy may have held a newer tail
/// whose older batches the ring has since overwritten), so the start is the
/// beginning of the newest contiguous run of batches on the ring.
pub(crate) fn replay_start(inner: &Inner, p: &PadRing) -> Result<(u64, u64, u64)> {
    let hb = crate::pool::read_block(&p.dev, p.hdr_off, 8192, "reading the pad header")?;
    let halves = [&hb[..4096], &hb[4096..]];
    let copies: Vec<PadHeader> = halves
        .into_iter()
        .filter_map(PadHeader::decode)
        .filter(|h| h.pool_tag == inner.tag)
        .collect();
    // A blank copy is one never written yet (create fills copy 1 only).
    let blank_copies = halves.iter().filter(|c| c.iter().all(|&x| x == 0)).count();
    if copies.len() == 2 || (copies.len() == 1 && blank_copies == 1) {
        let h = copies
            .iter()
            .max_by_key(|h| h.hdr_seq)
            .copied()
            .unwrap_or(copies[0]);
        return Ok((h.tail, h.tail_batch_seq, h.hdr_seq));
    }
    let hdr_seq = copies.first().map_or(0, |h| h.hdr_seq + 1);
    let run = newest_run(&PadReader::new(p, inner.tag).scan_ring()?, p.size);
    let blank = blank_copies == 2;
    let what = if copies.is_empty() {
        "both copies"
    } else {
        "one copy"
    };
    match run {
        Some((tail, seq, n)) => {
            inner.warn(format!(
                "write pad: {what} of the pad header damaged; the log was found by scanning \
                 the ring ({n} batches from offset {tail})"
            ));
            Ok((tail, seq, hdr_seq))
        }
        None if copies.len() == 1 => {
            let h = copies[0];
            Ok((h.tail, h.tail_batch_seq, h.hdr_seq))
        }
        None if blank => Ok((0, 1, 0)),
        None => {
            inner.warn(format!(
                "write pad: {what} of the pad header damaged; the ring holds no batch"
            ));
            Ok((0, 1, hdr_seq))
        }
    }
}

/// The newest run of contiguous, consecutively numbered batches among
/// `(virt, seq, next virt)`: `(start virt, start seq, batches)`.
fn newest_run(found: &[(u64, u64, u64)], _ring: u64) -> Option<(u64, u64, usize)> {
    let mut v: Vec<_> = found.to_vec();
    v.sort_by_key(|b| b.1);
    let mut i = v.len().checked_sub(1)?;
    while i > 0 && v[i - 1].1 + 1 == v[i].1 && v[i - 1].2 == v[i].0 {
        i -= 1;
    }
    Some((v[i].0, v[i].1, v.len() - i))
}
