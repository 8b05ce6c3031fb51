//! Reads (paper §2.4 "read directly from QLC; no read cache"): one index
//! lookup and at most one device read per key.
//!
//! A record is read from its DRAM segment while the writer has not made it
//! durable, otherwise with one aligned direct read of the blocks that hold
//! it. A record GC moved, or an scm-only page updated in place, while the
//! read was in flight fails its checks or its key compare; the read then
//! looks the key up again.

use super::state::Engine;
use crate::device::{round_down64, round_up64, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::*;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// How often a get looks a key up again after its record moved under it.
const READ_TRIES: usize = 16;

impl Engine {
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let d = self.digest(key);
        let mut last = None;
        for _ in 0..READ_TRIES {
            let Some(l) = self.index.get(d) else {
                return Ok(None);
            };
            let loc = Loc(l);
            if loc.is_tombstone() {
                return Ok(None);
            }
            let gen = self.inplace_gen.load(SeqCst);
            let codec = self.layout.codec;
            let res = self.with_record(loc, |b| {
                let r = codec.decode(b)?;
                Ok((r.key == key).then(|| r.value.to_vec()))
            });
            match res {
                Ok(Some(v)) => return Ok(Some(v)),
                Ok(None) | Err(_) if self.index.get(d) != Some(l) || self.inplace_raced(gen) => {
                    // GC moved the record (or the key changed) while we read: look again.
                    self.counters.read_retries.fetch_add(1, Relaxed);
                    last = Some(l);
                    continue;
                }
                // The entry is another key's (digest fingerprints collide): not found.
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.read_failed(e, key, loc)),
            }
        }
        Err(Error::Corruption(format!(
            "record kept moving during read (last location {last:?})"
        )))
    }

    /// A get's read failed for good: log it and say where.
    fn read_failed(&self, e: Error, key: &[u8], loc: Loc) -> Error {
        if let Error::Io { .. } = e {
            tracing::warn!(error = %e, slot = loc.slot(), "device read failed");
            return e;
        }
        tracing::warn!(error = %e, slot = loc.slot(), offset = loc.offset(), "corrupt record found by a get");
        self.counters.corruptions.fetch_add(1, Relaxed);
        Error::Corruption(format!(
            "record for key {:?} at segment {} offset {}: {e}",
            String::from_utf8_lossy(&key[..key.len().min(64)]),
            loc.slot(),
            loc.offset()
        ))
    }

    /// `Db::get_many`: index lookups, DRAM-buffered records copied, the rest read
    /// in one batch per capacity device. Anything unexpected in a batched read (a
    /// record that moved, another key's entry, a checksum failure) is settled by
    /// the single-key path, which retries moves and reports corruption.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        let mut reads = BatchedReads::default();
        let mut recheck: Vec<usize> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(l) = self.index.get(self.digest(key)) else {
                continue;
            };
            let loc = Loc(l);
            if loc.is_tombstone() {
                continue;
            }
            if self.segments.contains(loc.slot()) {
                recheck.push(i);
                continue;
            }
            reads.add(self, i, loc);
        }
        reads.submit(self)?;
        for ((i, _, _, _, s, len), b) in reads.pending.iter().zip(reads.bufs.iter()) {
            match self.layout.codec.decode(&b[*s..*s + len]) {
                Ok(r) if r.key == keys[*i] => out[*i] = Some(r.value.to_vec()),
                _ => recheck.push(*i),
            }
        }
        for i in recheck {
            out[i] = self.get(keys[i])?;
        }
        Ok(out)
    }

    /// `f` applied to the bytes of the record at `loc`, read from its DRAM
    /// segment or with one device read into this thread's read buffer. A get
    /// thus copies only the value: no allocation, zeroing or copy of the block
    /// (they were a few percent of a get's CPU).
    pub fn with_record<R>(&self, loc: Loc, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        let off = loc.offset() as usize;
        // An upper bound on the record's length: `f` decodes the exact one.
        let len = loc.len8() as usize;
        if let Some(b) = self.segments.get(loc.slot()) {
            // Copied out first: the leader appending to this segment waits
            // for the read lock, so `f` (a crc check at least) runs after it.
            // The buffer is taken before the lock, so the leader never waits
            // on an allocation; a segment buffer's size never changes.
            let size = b.size;
            if off >= size {
                return Err(Error::Corruption("location outside its segment".into()));
            }
            let len = len.min(size - off);
            return with_read_buf(len, |a| {
                a.copy_from_slice(&b.data.read()[off..off + len]);
                self.counters.reads_from_dram.fetch_add(1, Relaxed);
                f(a)
            });
        }
        let (dev, abs, len) = self.record_span(loc);
        let start = round_down64(abs, 4096);
        let end = round_up64(abs + len as u64, 4096);
        let d = &self.pool.caps[dev];
        with_read_buf((end - start) as usize, |a| {
            d.read_at(a, start)
                .map_err(|e| Error::io(&d.info().path, "reading a record", e))?;
            self.counters.reads_from_device.fetch_add(1, Relaxed);
            let s = (abs - start) as usize;
            f(&a[s..s + len])
        })
    }

    /// Where the record at `loc` lies on its device: the device, its byte
    /// offset and how many bytes to read (the location's length bound, cut at
    /// the end of the band so a bound above the exact length never reads past
    /// the device).
    pub(crate) fn record_span(&self, loc: Loc) -> (usize, u64, usize) {
        let (dev, base, limit) = self.layout.slot_span(loc.slot());
        let abs = base + loc.offset() as u64;
        let len = (loc.len8() as u64).min(limit.saturating_sub(abs));
        (dev, abs, len as usize)
    }
}

/// Largest read buffer a thread keeps between gets; a larger record gets a
/// buffer of its own.
const KEPT_READ_BUF: usize = 64 << 10;

thread_local! {
    static READ_BUF: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// `f` on an aligned buffer of `len` bytes: this thread's kept buffer when
/// it is free and big enough (its old contents are overwritten by the read:
/// a `Device::read_at` fills the buffer or fails), a new one otherwise (`f`
/// may itself read a record, e.g. through `Db::get` in a callback; the inner
/// call then gets its own buffer). A new buffer up to `KEPT_READ_BUF` is kept
/// for the next read.
fn with_read_buf<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let take = |c: &std::cell::RefCell<Option<AlignedBuf>>| {
        let mut slot = c.try_borrow_mut().ok()?;
        match slot.as_ref() {
            Some(b) if b.capacity() >= len => slot.take(),
            _ => None,
        }
    };
    // `try_with`: during thread-local teardown there is no kept buffer.
    let mut buf = READ_BUF
        .try_with(take)
        .ok()
        .flatten()
        .unwrap_or_else(|| AlignedBuf::new(len.max(4096)));
    buf.set_len(len);
    let r = f(&mut buf);
    if buf.capacity() <= KEPT_READ_BUF {
        let _ = READ_BUF.try_with(|c| {
            if let Ok(mut slot) = c.try_borrow_mut() {
                // A nested read's buffer does not replace a bigger kept one.
                if slot.as_ref().is_none_or(|k| k.capacity() < buf.capacity()) {
                    *slot = Some(buf);
                }
            }
        });
    }
    r
}

/// Device reads of a `get_many`, issued together.
#[derive(Default)]
struct BatchedReads {
    /// (key index, location, device, aligned start, offset of the record in
    /// the buffer, bytes to read)
    pending: Vec<(usize, Loc, usize, u64, usize, usize)>,
    bufs: Vec<AlignedBuf>,
}

impl BatchedReads {
    fn add(&mut self, e: &Engine, i: usize, loc: Loc) {
        let (dev, abs, len) = e.record_span(loc);
        let start = round_down64(abs, 4096);
        let end = round_up64(abs + len as u64, 4096);
        self.pending
            .push((i, loc, dev, start, (abs - start) as usize, len));
        self.bufs.push(AlignedBuf::new((end - start) as usize));
    }

    /// One batch (one io_uring submission) per capacity device.
    fn submit(&mut self, e: &Engine) -> Result<()> {
        for dev in 0..e.pool.caps.len() {
            let mut ops: Vec<(u64, &mut [u8])> = self
                .pending
                .iter()
                .zip(self.bufs.iter_mut())
                .filter(|(p, _)| p.2 == dev)
                .map(|(p, b)| (p.3, &mut b[..]))
                .collect();
            if ops.is_empty() {
                continue;
            }
            let d = &e.pool.caps[dev];
            d.read_batch(&mut ops)
                .map_err(|err| Error::io(&d.info().path, "reading records", err))?;
            e.counters
                .reads_from_device
                .fetch_add(ops.len() as u64, Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reuses_its_read_buffer() {
        let first = with_read_buf(4096, |a| a.as_ptr() as usize);
        let again = with_read_buf(100, |a| {
            assert_eq!(a.len(), 100);
            a.as_ptr() as usize
        });
        assert_eq!(first, again, "the kept buffer is used again");
    }

    #[test]
    fn a_nested_read_gets_its_own_buffer() {
        with_read_buf(4096, |outer| {
            outer.fill(7);
            let inner = with_read_buf(4096, |inner| {
                inner.fill(9);
                inner.as_ptr() as usize
            });
            assert_ne!(inner, outer.as_ptr() as usize);
            assert!(
                outer.iter().all(|&b| b == 7),
                "the inner read left the outer buffer alone"
            );
        });
    }

    #[test]
    fn a_large_buffer_is_not_kept() {
        let big = KEPT_READ_BUF + 4096;
        let small = with_read_buf(4096, |a| a.as_ptr() as usize);
        with_read_buf(big, |a| assert_eq!(a.len(), big));
        // The big read got a buffer of its own, not kept; the small one stays.
        let kept = READ_BUF.with(|c| {
            c.borrow()
                .as_ref()
                .map(|b| (b.as_ptr() as usize, b.capacity()))
        });
        assert_eq!(kept, Some((small, 4096)));
    }
}
