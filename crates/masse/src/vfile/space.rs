//! Space admission: new data is admitted against the pool's free space before it
//! is buffered, so a full pool refuses the `write` (or `fallocate`) itself with
//! ENOSPC instead of failing a write-out later, and `statfs` reports the same
//! figure programs are refused by.
//!
//! The free space is the engine's `Space::user_available_bytes` (reserve bands
//! left out), read at most every [`SPACE_TTL`] (and again before a refusal),
//! with what write-outs store counted off in between; buffered new chunks not
//! yet written hold their room in `Shared::pending_new`. Overwrites of stored
//! chunks are not counted: they replace records, and the space they leave dead
//! is GC's to win back.

use super::error::{VfsError, VfsResult};
use super::{Shared, Vfs};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// How long a reading of the engine's free space is trusted.
const SPACE_TTL: Duration = Duration::from_millis(100);

/// Space and inode figures for `statfs`.
#[derive(Clone, Debug)]
pub struct StatFs {
    /// Bytes of records the capacity tier holds (every band's payload).
    pub total_bytes: u64,
    /// Bytes not holding live records (the reserve bands included).
    pub free_bytes: u64,
    /// Bytes file data can still take: the engine's user-available space (reserve
    /// bands left out) less buffered data not yet written. Writes of new data are
    /// refused with ENOSPC beyond it.
    pub avail_bytes: u64,
    /// Chunk size.
    pub block_size: u32,
    /// Inode numbers handed out so far.
    pub inodes_used: u64,
}

impl Vfs {
    /// Space figures.
    pub fn statfs(&self) -> StatFs {
        self.sh.space_stale();
        let s = self.sh.db.space();
        let total = s.band_payload * s.bands_total as u64;
        StatFs {
            total_bytes: total,
            free_bytes: total.saturating_sub(s.live_bytes),
            avail_bytes: self.sh.avail_data_bytes(),
            block_size: self.sh.cs as u32,
            inodes_used: self.sh.ino.lock().0,
        }
    }
}

impl Shared {
    /// The engine's user-available bytes, read again when stale or `fresh`.
    fn available(&self, fresh: bool) -> u64 {
        let mut c = self.space.lock();
        match *c {
            Some((t, v)) if !fresh && t.elapsed() < SPACE_TTL => v,
            _ => {
                let v = self.db.space().user_available_bytes;
                *c = Some((Instant::now(), v));
                v
            }
        }
    }

    /// Forget the free-space reading (after a failure, or for `statfs`).
    pub(super) fn space_stale(&self) {
        *self.space.lock() = None;
    }

    /// `n` new chunks were written: take their room off the reading, which errs
    /// high only until the next one (deletes make it err low, and a refusal reads
    /// the space again before it refuses).
    pub(super) fn space_taken(&self, n: u64) {
        if let Some((_, v)) = self.space.lock().as_mut() {
            *v = v.saturating_sub(n * self.chunk_room);
        }
    }

    /// Hold room for `n` new chunks, or refuse with NoSpace.
    pub(super) fn admit(&self, n: u64) -> VfsResult<()> {
        if n == 0 {
            return Ok(());
        }
        let need = n * self.chunk_room;
        for fresh in [false, true] {
            let avail = self.available(fresh);
            let before = self.pending_new.fetch_add(need, Relaxed);
            if before + need <= avail {
                return Ok(());
            }
            self.pending_new.fetch_sub(need, Relaxed);
        }
        Err(self.refuse(n))
    }

    /// Refuse with NoSpace unless `n` new chunks would fit now (nothing is held).
    pub(super) fn admit_check(&self, n: u64) -> VfsResult<()> {
        let need = n.saturating_mul(self.chunk_room);
        if need
            <= self
                .available(true)
                .saturating_sub(self.pending_new.load(Relaxed))
        {
            Ok(())
        } else {
            Err(self.refuse(n))
        }
    }

    fn refuse(&self, n: u64) -> VfsError {
        self.c.writes_refused.fetch_add(1, Relaxed);
        VfsError::NoSpace(format!(
            "{} bytes of new data do not fit: the pool has room for {} more",
            n.saturating_mul(self.cs),
            self.avail_data_bytes()
        ))
    }

    /// Give back the room of `n` new chunks (written, or dropped).
    pub(super) fn release_new(&self, n: u64) {
        if n > 0 {
            let r = n * self.chunk_room;
            let _ = self
                .pending_new
                .fetch_update(Relaxed, Relaxed, |p| Some(p.saturating_sub(r)));
        }
    }

    /// Bytes of file data that can still be written (whole chunks' worth).
    pub(super) fn avail_data_bytes(&self) -> u64 {
        let room = self
            .available(false)
            .saturating_sub(self.pending_new.load(Relaxed));
        room / self.chunk_room * self.cs
    }
}
