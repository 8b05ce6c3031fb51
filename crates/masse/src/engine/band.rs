//! The band table: the state of every LBand and the free list (paper §2.3).
//!
//! Bands are the unit of allocation, GC and TRIM. Exactly one band at a time is
//! open for the writer; GC turns a sealed band into a victim and, once its live
//! records have moved, the writer frees it. The table is guarded by one mutex,
//! and writers short of space wait on [`Bands::wait_for_space`] until a band is
//! freed.

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::time::Duration;

/// State of one LBand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BandState {
    Free,
    /// Receiving segments (exactly one band at a time).
    Open,
    /// Full or closed; may still have segments in flight to the writer.
    Sealed,
    /// Being emptied by GC.
    Victim,
    /// GC found an unreadable live record here; kept out of GC so nothing is lost silently.
    Pinned,
}

impl BandState {
    /// The name `Db::band_status` reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BandState::Free => "free",
            BandState::Open => "open",
            BandState::Sealed => "sealed",
            BandState::Victim => "gc",
            BandState::Pinned => "pinned",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct BandInfo {
    pub state: BandState,
    /// Segment sequence number of the band's first segment (incarnation id).
    pub first_seq: u64,
    /// Slots durably written.
    pub written_slots: u64,
    /// Segments created in this band not yet durable.
    pub inflight: u32,
    /// [`BandTable::clock`] when the band was sealed: its age for GC's
    /// cost-benefit victim choice.
    pub sealed_at: u64,
}

/// Every band's state and the free list (under [`Bands`]' lock).
pub(crate) struct BandTable {
    pub bands: Vec<BandInfo>,
    pub free: VecDeque<u32>,
    /// Bands opened so far: the log's clock, in bands written. Not persisted;
    /// recovery dates the bands it finds by their order ([`Self::date_by_order`]).
    pub clock: u64,
}

impl BandTable {
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    /// Take the next free band and mark it open for segments from `first_seq` on.
    pub fn open_next(&mut self, first_seq: u64) -> Option<u32> {
        let b = self.free.pop_front()?;
        self.clock += 1;
        let info = &mut self.bands[b as usize];
        info.state = BandState::Open;
        info.first_seq = first_seq;
        info.written_slots = 0;
        info.inflight = 0;
        Some(b)
    }

    /// The open band takes no more segments.
    pub fn seal(&mut self, b: u32) {
        let info = &mut self.bands[b as usize];
        if info.state == BandState::Open {
            info.state = BandState::Sealed;
            info.sealed_at = self.clock;
        }
    }

    /// How old band `b`'s records are, in bands opened (by either write
    /// stream) since the last of them could have been written: 0 while the
    /// band is open, else since it was sealed. For cold user writes
    /// (`engine::stream`); measured from the band's opening, an open band
    /// left half full for long made the keys just written into it look old.
    pub fn records_age(&self, b: usize) -> u64 {
        match self.bands[b].state {
            BandState::Open => 0,
            _ => self.clock.saturating_sub(self.bands[b].sealed_at),
        }
    }

    /// Bands written since band `b` was sealed (at least 1).
    pub fn age(&self, b: usize) -> u64 {
        self.clock.saturating_sub(self.bands[b].sealed_at).max(1)
    }

    /// After recovery: date the bands in use as if they had been written one
    /// after another in log order (their `first_seq`), the newest sealed now.
    pub fn date_by_order(&mut self) {
        let mut used: Vec<usize> = (0..self.bands.len())
            .filter(|&b| self.bands[b].state != BandState::Free)
            .collect();
        used.sort_by_key(|&b| self.bands[b].first_seq);
        for (rank, &b) in used.iter().enumerate() {
            self.bands[b].sealed_at = rank as u64 + 1;
        }
        self.clock = used.len() as u64;
    }

    /// A band GC emptied: free again (its header already says so).
    pub fn release(&mut self, b: u32) {
        let info = &mut self.bands[b as usize];
        info.state = BandState::Free;
        info.written_slots = 0;
        info.inflight = 0;
        self.free.push_back(b);
    }

    /// Segments of band `b` up to slot `end` (exclusive) are durable.
    pub fn segment_written(&mut self, b: u32, end: u64) {
        let info = &mut self.bands[b as usize];
        info.inflight = info.inflight.saturating_sub(1);
        info.written_slots = info.written_slots.max(end);
    }

    /// How many bands are being emptied by GC.
    pub fn victims(&self) -> usize {
        self.bands
            .iter()
            .filter(|b| b.state == BandState::Victim)
            .count()
    }
}

/// The band table behind its lock, with the condition writers short of space wait on.
pub(crate) struct Bands {
    table: Mutex<BandTable>,
    space_cv: Condvar,
}

impl Bands {
    /// `n` bands, all free and not yet on the free list (recovery fills it).
    pub fn new(n: usize) -> Bands {
        let info = BandInfo {
            state: BandState::Free,
            first_seq: 0,
            written_slots: 0,
            inflight: 0,
            sealed_at: 0,
        };
        Bands {
            table: Mutex::new(BandTable {
                bands: vec![info; n],
                free: VecDeque::new(),
                clock: 0,
            }),
            space_cv: Condvar::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, BandTable> {
        self.table.lock()
    }

    /// Sleep until a band is freed (or the database fails), at most `d`.
    pub fn wait_for_space(&self, g: &mut MutexGuard<'_, BandTable>, d: Duration) {
        self.space_cv.wait_for(g, d);
    }

    /// Wake writers waiting for space: a band was freed, or the database failed.
    pub fn notify_space(&self) {
        self.space_cv.notify_all();
    }
}
