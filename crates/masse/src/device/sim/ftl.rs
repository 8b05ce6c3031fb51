//! A page-mapped flash translation layer with greedy garbage collection.
//!
//! The logical space is mapped in indirection units (IUs). Physical space is
//! erase blocks of `ius_per_block` IU slots; block `b` lives on die
//! `b % dies`. Host writes are striped round-robin over the dies, one open
//! block per die; GC relocations go to a separate open block on the victim's
//! die (so host and GC data do not mix, as in drives with a GC stream). When a
//! die runs low on free blocks, GC erases the full block with the fewest valid
//! IUs on that die (greedy), first copying its valid IUs.
//!
//! A write that covers an IU only partly is a read-modify-write: the drive
//! reads the old IU (if mapped) and programs a whole new one. That is why 4 KiB
//! random writes to a 64 KiB-IU QLC drive cost 64 KiB of NAND writes each.
//!
//! The FTL only tracks placement and time; the data itself is kept by the
//! device's sparse store, by logical address.

use super::profile::Profile;
use super::timing::Timing;

const NONE: u32 = u32::MAX;
/// GC runs on a die when its free blocks drop below this; host and GC each
/// need an open block, plus one to allocate.
const GC_LOW: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Free,
    Open,
    Full,
}

#[derive(Clone, Copy, Debug)]
struct Open {
    block: u32,
    next: u32,
}

/// Counters kept by the FTL (bytes unless stated).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FtlCounters {
    /// Bytes the host wrote.
    pub host_write_bytes: u64,
    /// Bytes the host read.
    pub host_read_bytes: u64,
    /// Bytes the host trimmed.
    pub host_trim_bytes: u64,
    /// Bytes programmed into NAND (host data, read-modify-write padding and GC).
    pub nand_write_bytes: u64,
    /// Bytes read from NAND (host reads, read-modify-write and GC).
    pub nand_read_bytes: u64,
    /// IUs read-modify-written because a write covered them only partly.
    pub rmw_ius: u64,
    /// IU writes merged into an IU still in the write buffer (no NAND work).
    pub buffer_merged_ius: u64,
    /// Bytes programmed by GC relocation.
    pub gc_write_bytes: u64,
    /// Blocks erased.
    pub erases: u64,
    /// GC victims processed.
    pub gc_victims: u64,
    /// Victims that were already entirely invalid (erase only, no copy).
    pub gc_empty_victims: u64,
    /// Nanoseconds of die time spent on GC (reads, programs, erases).
    pub gc_ns: u64,
}

impl FtlCounters {
    /// Device write amplification: NAND bytes programmed per host byte written.
    pub fn waf(&self) -> f64 {
        if self.host_write_bytes == 0 {
            return 0.0;
        }
        self.nand_write_bytes as f64 / self.host_write_bytes as f64
    }
}

/// The FTL state and the drive's timeline.
pub(crate) struct Ftl {
    p: Profile,
    iu: u64,
    ius_per_block: u32,
    dies: u32,
    nblocks: u32,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    valid: Vec<u32>,
    erase_count: Vec<u32>,
    state: Vec<State>,
    free: Vec<std::collections::VecDeque<u32>>,
    host_open: Vec<Option<Open>>,
    gc_open: Vec<Option<Open>>,
    next_die: u32,
    /// IUs written recently enough to still sit in the drive's write buffer:
    /// further writes to them merge there (so sequential 4 KiB writes to a
    /// 64 KiB-IU drive cost one IU program, not sixteen).
    /// IU → (in the buffer until, insertion number).
    buffered: std::collections::HashMap<u64, (u64, u64)>,
    /// (IU, insertion number), oldest first; entries whose number no longer
    /// matches `buffered` are stale and skipped (no O(n) removal).
    buffer_order: std::collections::VecDeque<(u64, u64)>,
    buffer_seq: u64,
    buffer_ius: usize,
    /// Buffered host writes not yet programmed: (program done, bytes).
    buf_heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
    buf_bytes: u64,
    /// Resources' busy times.
    pub time: Timing,
    /// Counters.
    pub c: FtlCounters,
    /// Set when a die could not reclaim a block (no space anywhere).
    pub stuck: bool,
}

/// Error: the drive has no reclaimable block left (cannot happen while the
/// logical capacity fits the over-provisioned physical space).
#[derive(Debug)]
pub(crate) struct NoFreeBlock;

impl Ftl {
    /// An FTL for `capacity` logical bytes with erase blocks of `erase_block`
    /// bytes (per die), or an in-place media model when the profile says so.
    pub fn new(p: &Profile, capacity: u64, erase_block: u64) -> Ftl {
        let iu = p.iu as u64;
        let dies = p.dies().max(1);
        let logical_ius = capacity.div_ceil(iu);
        let (ius_per_block, nblocks) = if p.in_place {
            (1, 0)
        } else {
            let ipb = (erase_block / iu).max(1);
            let raw = (logical_ius as f64 * (1.0 + p.op)).ceil() as u64;
            let blocks = raw.div_ceil(ipb).div_ceil(dies as u64) * dies as u64;
            // Spare blocks per die for the open blocks and GC headroom.
            let blocks = blocks + GC_LOW as u64 * dies as u64 + dies as u64;
            (ipb as u32, blocks as u32)
        };
        let phys = nblocks as usize * ius_per_block as usize;
        let mut free = vec![std::collections::VecDeque::new(); dies as usize];
        for b in 0..nblocks {
            free[(b % dies) as usize].push_back(b);
        }
        Ftl {
            p: p.clone(),
            iu,
            ius_per_block,
            dies,
            nblocks,
            l2p: if p.in_place {
                Vec::new()
            } else {
                vec![NONE; logical_ius as usize]
            },
            p2l: vec![NONE; phys],
            valid: vec![0; nblocks as usize],
            erase_count: vec![0; nblocks as usize],
            state: vec![State::Free; nblocks as usize],
            free,
            host_open: vec![None; dies as usize],
            gc_open: vec![None; dies as usize],
            next_die: 0,
            buffered: std::collections::HashMap::new(),
            buffer_order: std::collections::VecDeque::new(),
            buffer_seq: 0,
            buffer_ius: if p.in_place {
                0
            } else {
                (p.write_buffer / iu) as usize
            },
            buf_heap: std::collections::BinaryHeap::new(),
            buf_bytes: 0,
            time: Timing::new(dies, p.channels, p.channel_bw, p.link_bw),
            c: FtlCounters::default(),
            stuck: false,
        }
    }

    /// Erase blocks in the drive (0 for in-place media).
    pub fn blocks(&self) -> u32 {
        self.nblocks
    }

    /// Physical bytes of NAND (0 for in-place media).
    pub fn physical_bytes(&self) -> u64 {
        self.nblocks as u64 * self.ius_per_block as u64 * self.iu
    }

    /// Most and least erased block counts (wear).
    pub fn erase_spread(&self) -> (u32, u32) {
        let max = self.erase_count.iter().copied().max().unwrap_or(0);
        let min = self.erase_count.iter().copied().min().unwrap_or(0);
        (min, max)
    }

    /// Number of mapped (valid) logical IUs.
    pub fn mapped_ius(&self) -> u64 {
        self.valid.iter().map(|&v| v as u64).sum()
    }

    /// Check the FTL's internal invariants; returns a description of the first
    /// violation. Used by the tests.
    pub fn check(&self) -> Result<(), String> {
        if self.p.in_place {
            return Ok(());
        }
        let mut valid = vec![0u32; self.nblocks as usize];
        for (l, &ph) in self.l2p.iter().enumerate() {
            if ph == NONE {
                continue;
            }
            if self.p2l[ph as usize] != l as u32 {
                return Err(format!(
                    "l2p[{l}] = {ph} but p2l[{ph}] = {}",
                    self.p2l[ph as usize]
                ));
            }
            valid[(ph / self.ius_per_block) as usize] += 1;
        }
        for (b, (&v, &w)) in valid.iter().zip(self.valid.iter()).enumerate() {
            if v != w {
                return Err(format!("block {b}: {w} valid counted, {v} mapped"));
            }
            if self.state[b] == State::Free && v != 0 {
                return Err(format!("free block {b} holds {v} valid IUs"));
            }
        }
        for (ph, &l) in self.p2l.iter().enumerate() {
            if l != NONE && self.l2p[l as usize] != ph as u32 {
                return Err(format!(
                    "p2l[{ph}] = {l} but l2p[{l}] = {}",
                    self.l2p[l as usize]
                ));
            }
        }
        Ok(())
    }

    fn die_of_block(&self, b: u32) -> u32 {
        b % self.dies
    }

    fn invalidate(&mut self, liu: u64) {
        let ph = self.l2p[liu as usize];
        if ph != NONE {
            self.p2l[ph as usize] = NONE;
            self.valid[(ph / self.ius_per_block) as usize] -= 1;
            self.l2p[liu as usize] = NONE;
        }
    }

    fn take_free(&mut self, die: u32) -> Result<u32, NoFreeBlock> {
        let b = self.free[die as usize].pop_front().ok_or(NoFreeBlock)?;
        self.state[b as usize] = State::Open;
        Ok(b)
    }

    /// Greedy GC on one die: erase the full block with the fewest valid IUs,
    /// relocating them first. Returns false when nothing can be reclaimed.
    fn gc_one(&mut self, die: u32, now: u64) -> Result<bool, NoFreeBlock> {
        let mut best: Option<(u32, u32)> = None;
        let mut b = die;
        while b < self.nblocks {
            if self.state[b as usize] == State::Full {
                let v = self.valid[b as usize];
                if best.is_none_or(|(_, bv)| v < bv) {
                    best = Some((b, v));
                    if v == 0 {
                        break;
                    }
                }
            }
            b += self.dies;
        }
        let Some((victim, v)) = best else {
            return Ok(false);
        };
        if v >= self.ius_per_block {
            return Ok(false);
        }
        self.c.gc_victims += 1;
        if v == 0 {
            self.c.gc_empty_victims += 1;
        }
        let base = victim as u64 * self.ius_per_block as u64;
        // One sense reads a whole page (program unit) of IUs.
        let per_page = (self.p.program_unit as u64 / self.iu).max(1);
        let mut sensed_page = u64::MAX;
        for slot in 0..self.ius_per_block as u64 {
            let l = self.p2l[(base + slot) as usize];
            if l == NONE {
                continue;
            }
            // Copy-back on the same die: sense, then program into the GC block.
            if slot / per_page != sensed_page {
                sensed_page = slot / per_page;
                self.time.die_op(die, now, self.p.t_read, true);
            }
            self.c.nand_read_bytes += self.iu;
            self.place(l as u64, die, true, now)?;
            self.c.gc_write_bytes += self.iu;
        }
        self.time.die_op(die, now, self.p.t_erase, true);
        self.erase_count[victim as usize] += 1;
        self.c.erases += 1;
        self.state[victim as usize] = State::Free;
        self.free[die as usize].push_back(victim);
        Ok(true)
    }

    /// Make sure `die` has free blocks, collecting garbage if needed.
    fn ensure_free(&mut self, die: u32, now: u64) -> Result<(), NoFreeBlock> {
        let mut rounds = 0;
        while self.free[die as usize].len() < GC_LOW && rounds < self.nblocks {
            if !self.gc_one(die, now)? {
                break;
            }
            rounds += 1;
        }
        if self.free[die as usize].is_empty() {
            self.stuck = true;
            return Err(NoFreeBlock);
        }
        Ok(())
    }

    /// Program logical IU `liu` into the open block of `die` (GC or host
    /// stream). Returns when the die will have programmed it.
    fn place(&mut self, liu: u64, die: u32, gc: bool, now: u64) -> Result<u64, NoFreeBlock> {
        let open = if gc {
            self.gc_open[die as usize]
        } else {
            self.host_open[die as usize]
        };
        let mut o = match open {
            Some(o) if o.next < self.ius_per_block => o,
            _ => {
                if let Some(o) = open {
                    self.state[o.block as usize] = State::Full;
                }
                if !gc {
                    self.ensure_free(die, now)?;
                }
                let b = self.take_free(die)?;
                Open { block: b, next: 0 }
            }
        };
        self.invalidate(liu);
        let ph = o.block * self.ius_per_block + o.next;
        o.next += 1;
        self.p2l[ph as usize] = liu as u32;
        self.l2p[liu as usize] = ph;
        self.valid[o.block as usize] += 1;
        if gc {
            self.gc_open[die as usize] = Some(o);
        } else {
            self.host_open[die as usize] = Some(o);
        }
        self.c.nand_write_bytes += self.iu;
        if !gc {
            self.time.chan_xfer(die, now, self.iu);
        }
        let end = self.time.program(
            die,
            now,
            self.iu,
            self.p.program_unit as u64,
            self.p.t_prog,
            gc,
        );
        Ok(end)
    }

    /// A host write of `len` bytes at `off` arriving at `now`; returns when it
    /// is acknowledged.
    pub fn write(&mut self, off: u64, len: u64, now: u64) -> Result<u64, NoFreeBlock> {
        self.c.host_write_bytes += len;
        let arrived = self.time.link_xfer(now, len);
        if self.p.in_place {
            let end = self.in_place(off, len, arrived, true);
            self.c.nand_write_bytes += len;
            self.c.gc_ns = self.time.gc_ns;
            return Ok(end + self.p.t_overhead);
        }
        let first = off / self.iu;
        let last = (off + len - 1) / self.iu;
        let mut done = arrived;
        for liu in first..=last {
            if self
                .buffered
                .get(&liu)
                .is_some_and(|&(until, _)| until > arrived)
            {
                // Its previous version is still in the write buffer, not yet
                // programmed: the new data merges there.
                self.c.buffer_merged_ius += 1;
                continue;
            }
            let s = liu * self.iu;
            let covered = off <= s && off + len >= s + self.iu;
            if !covered {
                self.c.rmw_ius += 1;
                let ph = self.l2p[liu as usize];
                if ph != NONE {
                    let d = self.die_of_block(ph / self.ius_per_block);
                    self.time.die_op(d, arrived, self.p.t_read, false);
                    self.c.nand_read_bytes += self.iu;
                }
            }
            // The controller hands each IU to the die that frees up first.
            let die = self.time.least_busy(self.next_die);
            self.next_die = (die + 1) % self.dies;
            let end = self.place(liu, die, false, arrived)?;
            self.remember(liu, end.max(arrived + self.p.t_prog));
            done = done.max(end);
        }
        self.c.gc_ns = self.time.gc_ns;
        // The power-safe write buffer acknowledges a write as soon as it has
        // room for it; data leaves the buffer when its program completes.
        let mut room_at = arrived;
        while self
            .buf_heap
            .peek()
            .is_some_and(|&std::cmp::Reverse((t, _))| t <= arrived)
        {
            if let Some(std::cmp::Reverse((_, b))) = self.buf_heap.pop() {
                self.buf_bytes -= b;
            }
        }
        let cap = self.p.write_buffer.max(len);
        while self.buf_bytes + len > cap {
            match self.buf_heap.pop() {
                Some(std::cmp::Reverse((t, b))) => {
                    room_at = room_at.max(t);
                    self.buf_bytes -= b;
                }
                None => break,
            }
        }
        if done > room_at {
            self.buf_heap.push(std::cmp::Reverse((done, len)));
            self.buf_bytes += len;
        }
        let ack = (arrived + self.p.t_write_ack).max(room_at);
        Ok(ack + self.p.t_overhead)
    }

    /// A host read of `len` bytes at `off` arriving at `now`; returns when the
    /// data has reached the host.
    pub fn read(&mut self, off: u64, len: u64, now: u64) -> u64 {
        self.c.host_read_bytes += len;
        if self.p.in_place {
            let end = self.in_place(off, len, now, false);
            self.c.nand_read_bytes += len;
            return self.time.link_xfer(end, len) + self.p.t_overhead;
        }
        let first = off / self.iu;
        let last = (off + len - 1) / self.iu;
        let mut done = now;
        for liu in first..=last {
            let s = liu * self.iu;
            let bytes = (off + len).min(s + self.iu) - off.max(s);
            let ph = self.l2p[liu as usize];
            if ph == NONE {
                continue; // unmapped: the controller returns zeros
            }
            let d = self.die_of_block(ph / self.ius_per_block);
            let sensed = self.time.die_read(d, now, self.p.t_read);
            self.c.nand_read_bytes += bytes;
            done = done.max(self.time.chan_xfer(d, sensed, bytes));
        }
        self.time.link_xfer(done, len) + self.p.t_overhead
    }

    /// Trim: unmap every IU the range covers entirely (a partly covered IU
    /// stays mapped, as on drives that track validity per IU).
    pub fn trim(&mut self, off: u64, len: u64) {
        self.c.host_trim_bytes += len;
        if self.p.in_place || len == 0 {
            return;
        }
        let first = off.div_ceil(self.iu);
        let end = (off + len) / self.iu;
        for liu in first..end {
            self.invalidate(liu);
            self.buffered.remove(&liu);
        }
    }

    /// Note that `liu` sits in the write buffer until `until` (when its
    /// program completes); the oldest entry leaves when the buffer is full.
    fn remember(&mut self, liu: u64, until: u64) {
        if self.buffer_ius == 0 {
            return;
        }
        while self.buffered.len() >= self.buffer_ius {
            match self.buffer_order.pop_front() {
                Some((old, seq)) => {
                    if self.buffered.get(&old).is_some_and(|&(_, s)| s == seq) {
                        self.buffered.remove(&old);
                    }
                }
                None => break,
            }
        }
        self.buffer_seq += 1;
        self.buffered.insert(liu, (until, self.buffer_seq));
        self.buffer_order.push_back((liu, self.buffer_seq));
        // Stale entries are dropped as they reach the front; bound the rest.
        if self.buffer_order.len() > 4 * self.buffer_ius + 64 {
            let live = &self.buffered;
            self.buffer_order
                .retain(|&(l, s)| live.get(&l).is_some_and(|&(_, ls)| ls == s));
        }
    }

    /// In-place media: 4 KiB units interleaved over the media units.
    fn in_place(&mut self, off: u64, len: u64, at: u64, write: bool) -> u64 {
        let t = if write { self.p.t_prog } else { self.p.t_read };
        let mut end = at;
        let mut b = off / 4096;
        while b * 4096 < off + len {
            let unit = (b % self.dies as u64) as u32;
            end = end.max(self.time.die_op(unit, at, t, false));
            b += 1;
        }
        end
    }
}
