//! The write pad (paper §2.3): a ring of 4 KiB-aligned group-commit batches
//! on the fast tier, written by the group-commit leader, released by the
//! writer, replayed at open and verified by `check`.
//!
//! Writing: the leader reserves room for a group ([`PadRing::reserve`]),
//! places the group's records in segments, then writes the batch and syncs
//! it ([`PadRing::write`]) before acknowledging. Each segment the group
//! touched is *marked* with the first batch that has records in it: the pad
//! space from that batch on stays needed until the segment is durable on the
//! capacity tier. The writer then advances the tail ([`PadRing::release`]),
//! recording it durably in the pad header before the space is reused.
//!
//! Reading: the ring is a log of batches, each with a checksum over its
//! header and payload, a consecutive batch number and the virtual
//! (ever-growing) offset it was written at. Replay starts at the tail
//! recorded in the newer valid pad header and follows the chain. A batch that
//! fails its checks ends the log only if no valid batch of the current lap
//! follows it. Group commits are sequential and each batch is synced before
//! the next is written, so only the last batch can be torn; a failing batch
//! followed by a valid later one (virt equal to its position, higher number)
//! was durable and then damaged. Replay reports it and goes on, instead of
//! silently dropping every acknowledged batch after it. The successor of a
//! damaged batch starts within one maximum batch length after it (or at the
//! start of the next lap, after a wrap marker), so that is how far the scan
//! looks. Stale batches of earlier laps are never taken: their recorded
//! offset is one lap behind the position they are found at.

use crate::device::{round_up, round_up64, AlignedBuf, Device};
use crate::error::{Error, Result};
use crate::format::*;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The fast-tier write pad: a ring of 4 KiB-aligned group-commit batches.
pub(crate) struct PadRing {
    pub dev: Arc<dyn Device>,
    pub base: u64,
    pub size: u64,
    pub hdr_off: u64,
    st: Mutex<PadState>,
    /// Signalled when the tail advances (room was freed) or the database fails.
    cv: Condvar,
}

struct PadState {
    /// Virtual (ever-growing) offsets; physical = base + virt % size.
    head: u64,
    tail: u64,
    next_batch: u64,
    /// (segment seq, virt of the oldest batch with records in it) for
    /// segments not yet durable. Not in any order: with separate GC writes
    /// segments become durable out of seq order, and a group replayed at open
    /// lowers the marks of the segments it adds to to the replayed region.
    marks: VecDeque<(u64, u64)>,
    /// A batch reserved but not yet attached to segments.
    pending: Option<u64>,
    /// Start of the pad region being replayed at open; held until replay is re-persisted.
    hold: Option<u64>,
    /// (virt, batch seq) of batches written, for the header's tail_batch_seq.
    batches: VecDeque<(u64, u64)>,
    hdr_seq: u64,
}

impl PadState {
    /// Oldest pad position still needed.
    fn needed_from(&self) -> u64 {
        let mut t = self.head;
        if let Some(v) = self.marks.iter().map(|m| m.1).min() {
            t = t.min(v);
        }
        if let Some(v) = self.pending {
            t = t.min(v);
        }
        if let Some(v) = self.hold {
            t = t.min(v);
        }
        t
    }
}

/// What [`PadRing::reserve`] found.
pub(crate) enum Reserved {
    /// Room at this virtual offset.
    At(u64),
    /// The ring is full and only the open segments (`open`) hold it: nothing
    /// else is on its way to the capacity tier to free space, so the caller must
    /// seal them early rather than wait forever.
    HeldByOpenSegment,
}

impl PadRing {
    /// The pad of a pool: `size` bytes at `base` on `dev`, its header at `hdr_off`.
    pub fn new(dev: Arc<dyn Device>, base: u64, size: u64, hdr_off: u64) -> PadRing {
        PadRing {
            dev,
            base,
            size,
            hdr_off,
            st: Mutex::new(PadState {
                head: 0,
                tail: 0,
                next_batch: 1,
                marks: VecDeque::new(),
                pending: None,
                hold: None,
                batches: VecDeque::new(),
                hdr_seq: 0,
            }),
            cv: Condvar::new(),
        }
    }

    /// Reserve `len` bytes (rounded to 4 KiB); waits while the pad is full,
    /// unless only the open segments `open` (those holding records) hold it.
    pub fn reserve(
        &self,
        len: usize,
        tag: u64,
        open: &[u64],
        failed: &dyn Fn() -> Result<()>,
    ) -> Result<Reserved> {
        let need = round_up(len, 4096) as u64;
        let mut s = self.st.lock();
        loop {
            failed()?;
            let phys = s.head % self.size;
            let wrap = if phys + need > self.size {
                self.size - phys
            } else {
                0
            };
            if s.head + wrap + need - s.tail <= self.size {
                if wrap > 0 {
                    self.write_wrap(&mut s, wrap, tag)?;
                }
                let v = s.head;
                s.head += need;
                s.pending = Some(v);
                return Ok(Reserved::At(v));
            }
            let only_open = s.marks.iter().all(|m| open.contains(&m.0));
            if only_open && !open.is_empty() {
                return Ok(Reserved::HeldByOpenSegment);
            }
            self.cv.wait_for(&mut s, Duration::from_millis(50));
        }
    }

    /// Mark the unused end of the ring so replay knows to continue at its start.
    fn write_wrap(&self, s: &mut PadState, wrap: u64, tag: u64) -> Result<()> {
        let v = s.head;
        let bs = s.next_batch;
        s.next_batch += 1;
        s.batches.push_back((v, bs));
        s.head += wrap;
        let mut blk = AlignedBuf::new(4096);
        encode_batch(
            &mut blk,
            &BatchHeader {
                batch_seq: bs,
                virt: v,
                payload_len: 0,
                nrec: 0,
                flags: BATCH_WRAP,
                pool_tag: tag,
            },
        );
        self.dev
            .write_at(&blk, self.base + v % self.size)
            .map_err(|e| Error::io(&self.dev.info().path, "writing the pad", e))
    }

    /// A group was placed: segments `segs` (every segment it put records in)
    /// need the pad from the group's batch at `v` on (or, for a group
    /// replayed from the pad, from the region held for replay, which is older
    /// than any batch written since: it lowers a segment's mark).
    pub fn mark_segments(&self, v: Option<u64>, segs: &[u64]) {
        let mut s = self.st.lock();
        let v = v.or(s.hold).unwrap_or(s.tail);
        for &seq in segs {
            match s.marks.iter_mut().find(|m| m.0 == seq) {
                Some(m) => m.1 = m.1.min(v),
                None => s.marks.push_back((seq, v)),
            }
        }
        s.pending = None;
    }

    /// Write one group to the pad at `v` and make it durable. Returns the bytes written.
    pub fn write(&self, v: u64, payload: &[u8], nrec: usize, tag: u64) -> Result<u64> {
        let total = round_up(BATCH_HEADER + payload.len(), 4096);
        let mut buf = AlignedBuf::new(total);
        buf[BATCH_HEADER..BATCH_HEADER + payload.len()].copy_from_slice(payload);
        let bs = {
            let mut s = self.st.lock();
            let bs = s.next_batch;
            s.next_batch += 1;
            s.batches.push_back((v, bs));
            bs
        };
        encode_batch(
            &mut buf,
            &BatchHeader {
                batch_seq: bs,
                virt: v,
                payload_len: payload.len() as u32,
                nrec: nrec as u32,
                flags: 0,
                pool_tag: tag,
            },
        );
        let name = &self.dev.info().path;
        self.dev
            .write_at(&buf, self.base + v % self.size)
            .map_err(|e| Error::io(name, "writing the pad", e))?;
        self.dev
            .sync()
            .map_err(|e| Error::io(name, "syncing the pad", e))?;
        Ok(total as u64)
    }

    /// Segments `durable` are durable: advance the tail past the groups that
    /// only they needed, recording the new tail durably before the space is
    /// reused. (Not "every segment up to the newest of them": with separate GC
    /// writes an older segment of the other stream may still be open.)
    pub fn release(&self, durable: &[u64], tag: u64) -> Result<()> {
        let (hdr, new_tail) = {
            let mut s = self.st.lock();
            s.marks.retain(|m| !durable.contains(&m.0));
            let new_tail = s.needed_from();
            if new_tail <= s.tail {
                return Ok(());
            }
            while s.batches.front().is_some_and(|b| b.0 < new_tail) {
                s.batches.pop_front();
            }
            let tail_batch_seq = s.batches.front().map(|b| b.1).unwrap_or(s.next_batch);
            s.hdr_seq += 1;
            let hdr = PadHeader {
                hdr_seq: s.hdr_seq,
                pool_tag: tag,
                tail: new_tail,
                tail_batch_seq,
            };
            (hdr, new_tail)
        };
        let off = self.hdr_off + (hdr.hdr_seq % 2) * 4096;
        crate::pool::write_block(&self.dev, off, &hdr.encode(), "writing the pad header")?;
        crate::pool::sync(&self.dev, "syncing the pad header")?;
        let mut s = self.st.lock();
        if new_tail > s.tail {
            s.tail = new_tail;
        }
        drop(s);
        self.cv.notify_all();
        Ok(())
    }

    /// Replay at open found the log from `tail` to `head`: continue after it,
    /// holding the replayed region until its records are durable again.
    pub fn resume(
        &self,
        tail: u64,
        head: u64,
        next_batch: u64,
        hdr_seq: u64,
        batches: VecDeque<(u64, u64)>,
    ) {
        let mut s = self.st.lock();
        s.tail = tail;
        s.head = head;
        s.next_batch = next_batch;
        s.hdr_seq = hdr_seq;
        s.batches = batches;
        s.hold = if head > tail { Some(tail) } else { None };
    }

    /// The records replayed at open are durable again (re-committed).
    pub fn end_hold(&self) {
        self.st.lock().hold = None;
    }

    /// `(virt, batch seq)` of every batch still needed (for `check`).
    pub fn batches(&self) -> Vec<(u64, u64)> {
        self.st.lock().batches.iter().copied().collect()
    }

    /// Whether segment `seq` holds the oldest batch still needed (perhaps
    /// with others that hold the same one).
    pub fn holds_oldest(&self, seq: u64) -> bool {
        let s = self.st.lock();
        let oldest = s.marks.iter().map(|m| m.1).min();
        s.marks.iter().any(|m| m.0 == seq && Some(m.1) == oldest)
    }

    /// Bytes of the ring in use.
    pub fn used(&self) -> u64 {
        let s = self.st.lock();
        s.head - s.tail
    }

    /// Wake a leader waiting for room (the database failed).
    pub fn wake(&self) {
        self.cv.notify_all();
    }

    /// One line for `Db::debug_state`.
    pub fn debug_state(&self) -> String {
        let s = self.st.lock();
        format!(
            "pad head {} tail {} marks {} pending {:?} hold {:?}; ",
            s.head,
            s.tail,
            s.marks.len(),
            s.pending,
            s.hold
        )
    }
}
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

    /// Whether the block at `v` starts the header of batch `seq` of this pool
    /// (whatever its checksum says): at the end of the log, a batch whose
    /// write began but which fails its checks.
    pub fn begun_at(&self, v: u64, seq: u64) -> Result<bool> {
        let p = self.p;
        let first = crate::pool::read_block(&p.dev, p.base + v % p.size, 4096, "reading the pad")?;
        Ok(peek_batch(&first)
            .is_some_and(|h| h.pool_tag == self.tag && h.virt == v && h.batch_seq == seq))
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
/// Damage found on the way is reported through `warn`.
pub(crate) fn replay_start(
    p: &PadRing,
    tag: u64,
    warn: &mut dyn FnMut(String),
) -> Result<(u64, u64, u64)> {
    let hb = crate::pool::read_block(&p.dev, p.hdr_off, 8192, "reading the pad header")?;
    let halves = [&hb[..4096], &hb[4096..]];
    let copies: Vec<PadHeader> = halves
        .into_iter()
        .filter_map(PadHeader::decode)
        .filter(|h| h.pool_tag == tag)
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
    let run = newest_run(&PadReader::new(p, tag).scan_ring()?, p.size);
    let blank = blank_copies == 2;
    let what = if copies.is_empty() {
        "both copies"
    } else {
        "one copy"
    };
    match run {
        Some((tail, seq, n)) => {
            warn(format!(
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
            warn(format!(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn ring() -> PadRing {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8 << 20));
        PadRing::new(dev, 1 << 20, 4 << 20, 0)
    }

    fn tail(p: &PadRing) -> u64 {
        p.st.lock().needed_from()
    }

    /// The tail is the oldest of all marks, not the first one pushed: a
    /// group replayed at open marks (or lowers the mark of) a segment with
    /// the replayed region, older than marks set before it. And a segment's
    /// mark goes only when that segment is durable, whatever its seq: with
    /// separate GC writes an older segment of the other stream may still be
    /// open while newer ones are written.
    /// A ring with a replayed region [0, 3 MiB) held, and a batch reserved
    /// after it at the returned offset.
    fn replaying() -> (PadRing, u64) {
        let p = ring();
        p.resume(0, 3 << 20, 1, 0, VecDeque::new());
        match p.reserve(4096, 7, &[], &|| Ok(())).expect("reserve") {
            Reserved::At(v) => (p, v),
            Reserved::HeldByOpenSegment => unreachable!("the ring has room"),
        }
    }

    /// The tail is the oldest of all marks, not the first one pushed: a group
    /// replayed at open marks a segment with the replayed region, older than
    /// marks set before it. And a segment's mark goes only when that segment
    /// is durable, whatever its seq: with separate GC writes an older segment
    /// of the other stream may still be open while newer ones are written.
    #[test]
    fn the_tail_is_the_oldest_mark_and_marks_go_per_segment() {
        let (p, v) = replaying();
        p.mark_segments(Some(v), &[10]); // a GC group opens segment 10
        p.mark_segments(None, &[11]); // a replayed group opens segment 11
        p.end_hold();
        assert_eq!(tail(&p), 0, "segment 11 needs the replayed region");
        p.release(&[11], 7).expect("release");
        assert_eq!(tail(&p), v, "segment 10 (an older seq) is not durable yet");
        assert!(p.holds_oldest(10));
        p.release(&[10], 7).expect("release");
        assert_eq!(tail(&p), p.st.lock().head, "nothing needed any more");
    }

    /// A replayed group that adds records to a segment a newer batch marked
    /// first lowers that segment's mark to the replayed region.
    #[test]
    fn a_replayed_group_lowers_a_segments_mark() {
        let (p, v) = replaying();
        p.mark_segments(Some(v), &[10]);
        p.mark_segments(None, &[10]);
        p.end_hold();
        assert_eq!(tail(&p), 0, "segment 10 holds replayed records");
    }
}
