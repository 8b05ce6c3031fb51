//! The expected state, kept outside the pool in a shared memory map so that it
//! survives a SIGKILL of the process that writes it (the kernel keeps the
//! pages): for every key, the last acknowledged version and the version of a
//! write that was in flight when the process died.
//!
//! Layout (little-endian, all fields atomics in place):
//! a 4 KiB header (magic, key count, seed, phase, activity, counters), then one
//! 16-byte slot per key: `acked`, `pending`, `max_ver`, `batch` (u32 each).
//! Version 0 means "absent"; `pending == NONE` means nothing in flight.

use memmap2::MmapMut;
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// `pending` value when no write is in flight for the key.
pub const NONE: u32 = u32::MAX;
const MAGIC: u64 = u64::from_le_bytes(*b"MSTRESS1");
const HEADER: usize = 4096;
const SLOT: usize = 16;

/// What the process that owns the oracle is doing (header field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    /// Not started.
    Idle = 0,
    /// Opening the pool: recovery runs here.
    Opening = 1,
    /// Checking the pool against the oracle.
    Verifying = 2,
    /// Random operations.
    Running = 3,
    /// Closing cleanly.
    Closing = 4,
}

impl Phase {
    fn from_u32(v: u32) -> Phase {
        match v {
            1 => Phase::Opening,
            2 => Phase::Verifying,
            3 => Phase::Running,
            4 => Phase::Closing,
            _ => Phase::Idle,
        }
    }
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Opening => "opening/recovery",
            Phase::Verifying => "verifying",
            Phase::Running => "running",
            Phase::Closing => "closing",
        }
    }
}

/// Activity bits in the header, mirrored from `Db::activity`.
pub const ACT_GC: u32 = 1;
/// A checkpoint was being written.
pub const ACT_CKPT: u32 = 2;

/// The expected-state oracle.
pub struct Oracle {
    map: MmapMut,
    nkeys: u64,
}

// Header word offsets (in u64 units after the magic).
const H_NKEYS: usize = 8;
const H_SEED: usize = 16;
const H_PHASE: usize = 24; // u32
const H_ACT: usize = 28; // u32
const H_ACKED_OPS: usize = 32;
const H_RUNS: usize = 40;
const H_VERIFIED: usize = 48;
const H_ABSORBED: usize = 56;

impl Oracle {
    /// A new oracle for `nkeys` keys in the file at `path` (created or truncated).
    pub fn create(path: &Path, nkeys: u64, seed: u64) -> io::Result<Oracle> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.set_len((HEADER + SLOT * nkeys as usize) as u64)?;
        // SAFETY: the file is ours for the harness's lifetime; nothing else maps it
        // while this process runs (the parent reads it only after the child died).
        let map = unsafe { MmapMut::map_mut(&f)? };
        let o = Oracle { map, nkeys };
        o.init(nkeys, seed);
        Ok(o)
    }

    /// An oracle in anonymous memory (in-process fault runs).
    pub fn in_memory(nkeys: u64, seed: u64) -> io::Result<Oracle> {
        let map = MmapMut::map_anon(HEADER + SLOT * nkeys as usize)?;
        let o = Oracle { map, nkeys };
        o.init(nkeys, seed);
        Ok(o)
    }

    /// Opens an existing oracle file.
    pub fn open(path: &Path) -> io::Result<Oracle> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        // SAFETY: as in `create`.
        let map = unsafe { MmapMut::map_mut(&f)? };
        if map.len() < HEADER || map[..8] != MAGIC.to_le_bytes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a stress oracle file",
            ));
        }
        let nkeys = u64::from_le_bytes(map[H_NKEYS..H_NKEYS + 8].try_into().unwrap_or([0; 8]));
        if map.len() != HEADER + SLOT * nkeys as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "oracle file has the wrong size",
            ));
        }
        Ok(Oracle { map, nkeys })
    }

    fn init(&self, nkeys: u64, seed: u64) {
        self.u64_at(H_NKEYS).store(nkeys, SeqCst);
        self.u64_at(H_SEED).store(seed, SeqCst);
        for i in 0..nkeys {
            self.pending(i).store(NONE, SeqCst);
        }
        self.u64_at(0).store(MAGIC, SeqCst);
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.map.len());
        // SAFETY: in bounds, 4-aligned (the map is page-aligned), and only ever
        // accessed atomically for the life of the map.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.map.len());
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    /// Number of keys.
    pub fn nkeys(&self) -> u64 {
        self.nkeys
    }
    /// Seed the oracle was created with.
    pub fn seed(&self) -> u64 {
        self.u64_at(H_SEED).load(SeqCst)
    }
    /// Last acknowledged version of key `i` (0: absent).
    pub fn acked(&self, i: u64) -> &AtomicU32 {
        self.u32_at(HEADER + SLOT * i as usize)
    }
    /// Version of the write in flight for key `i` (`NONE`: none; 0: a delete).
    pub fn pending(&self, i: u64) -> &AtomicU32 {
        self.u32_at(HEADER + SLOT * i as usize + 4)
    }
    /// Highest version ever used for key `i`.
    pub fn max_ver(&self, i: u64) -> &AtomicU32 {
        self.u32_at(HEADER + SLOT * i as usize + 8)
    }
    /// Batch the in-flight write of key `i` belongs to (0: none).
    pub fn batch(&self, i: u64) -> &AtomicU32 {
        self.u32_at(HEADER + SLOT * i as usize + 12)
    }
    /// Current phase of the owning process.
    pub fn phase(&self) -> Phase {
        Phase::from_u32(self.u32_at(H_PHASE).load(SeqCst))
    }
    /// Sets the phase.
    pub fn set_phase(&self, p: Phase) {
        self.u32_at(H_PHASE).store(p as u32, SeqCst)
    }
    /// Activity bits ([`ACT_GC`], [`ACT_CKPT`]).
    pub fn activity(&self) -> u32 {
        self.u32_at(H_ACT).load(SeqCst)
    }
    /// Sets the activity bits.
    pub fn set_activity(&self, a: u32) {
        self.u32_at(H_ACT).store(a, SeqCst)
    }
    /// Operations acknowledged over all runs.
    pub fn acked_ops(&self) -> &AtomicU64 {
        self.u64_at(H_ACKED_OPS)
    }
    /// Runs started on this oracle.
    pub fn runs(&self) -> &AtomicU64 {
        self.u64_at(H_RUNS)
    }
    /// Key checks done by verifications over all runs.
    pub fn verified(&self) -> &AtomicU64 {
        self.u64_at(H_VERIFIED)
    }
    /// Overwrites the engine absorbed in DRAM over all runs (`Stats::absorbed_writes`,
    /// mirrored while a run works): shows that the kill loop exercised them.
    pub fn absorbed(&self) -> &AtomicU64 {
        self.u64_at(H_ABSORBED)
    }
    /// Flushes the map to its file (not needed to survive a kill; for tidiness).
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }
}
