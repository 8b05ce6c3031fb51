//! Sparse logical data of an emulated drive, 4 KiB blocks in hash shards: only
//! written blocks take memory, so a 64 GiB drive costs what was written.
//!
//! Power-cut model (as [`crate::device::MemDevice`]): the first modification
//! of a block after a flush saves its durable contents; a flush forgets the
//! saved copies; a power cut puts them back.

use parking_lot::Mutex;
use std::collections::HashMap;

pub(crate) const BLOCK: usize = 4096;
const SHARDS: usize = 64;

type Block = Box<[u8]>;

#[derive(Default)]
struct Shard {
    data: HashMap<u64, Block>,
    /// Durable contents of blocks modified since the last flush (`None` = unwritten).
    saved: HashMap<u64, Option<Block>>,
}

pub(crate) struct Store {
    shards: Vec<Mutex<Shard>>,
    /// Keep no data at all (timing/FTL studies): reads return zeros.
    nodata: bool,
}

fn shard_of(b: u64) -> usize {
    // Neighbouring blocks share a shard (one lock per 64 KiB run).
    ((b >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS
}

impl Store {
    pub fn new(nodata: bool) -> Store {
        Store {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            nodata,
        }
    }

    /// Bytes of data held.
    pub fn resident_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().data.len() as u64 * BLOCK as u64)
            .sum()
    }

    pub fn write(&self, block: u64, src: &[u8]) {
        if self.nodata {
            return;
        }
        let mut s = self.shards[shard_of(block)].lock();
        let Shard { data, saved } = &mut *s;
        saved
            .entry(block)
            .or_insert_with(|| data.get(&block).cloned());
        match data.get_mut(&block) {
            Some(d) => d.copy_from_slice(src),
            None => {
                data.insert(block, Box::from(src));
            }
        }
    }

    pub fn read(&self, block: u64, dst: &mut [u8]) {
        let s = self.shards[shard_of(block)].lock();
        match s.data.get(&block) {
            Some(d) => dst.copy_from_slice(d),
            None => dst.fill(0),
        }
    }

    pub fn discard(&self, block: u64) {
        let mut s = self.shards[shard_of(block)].lock();
        let Shard { data, saved } = &mut *s;
        if let Some(old) = data.remove(&block) {
            saved.entry(block).or_insert(Some(old));
        }
    }

    /// Invert bit `bit` (0..32768) of a stored block; false if it holds no data.
    pub fn flip(&self, block: u64, bit: u32) -> bool {
        let mut s = self.shards[shard_of(block)].lock();
        match s.data.get_mut(&block) {
            Some(d) => {
                d[(bit / 8) as usize % BLOCK] ^= 1 << (bit % 8);
                true
            }
            None => false,
        }
    }

    pub fn flush(&self) {
        for s in &self.shards {
            s.lock().saved.clear();
        }
    }

    /// Undo unflushed modifications; `survives(block)` decides per block (in
    /// increasing block order) whether its new contents stay. Returns
    /// (blocks lost, blocks kept) and the blocks that became unwritten.
    pub fn power_cut(&self, mut survives: impl FnMut(u64) -> bool) -> (u64, u64, Vec<u64>) {
        let mut guards: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();
        let mut all: Vec<(u64, usize)> = Vec::new();
        for (i, g) in guards.iter().enumerate() {
            all.extend(g.saved.keys().map(|&b| (b, i)));
        }
        all.sort_unstable();
        let (mut lost, mut kept) = (0, 0);
        let mut unwritten = Vec::new();
        for (b, i) in all {
            let g = &mut guards[i];
            let Some(old) = g.saved.remove(&b) else {
                continue;
            };
            if survives(b) {
                kept += 1;
                continue;
            }
            lost += 1;
            match old {
                Some(d) => {
                    g.data.insert(b, d);
                }
                None => {
                    g.data.remove(&b);
                    unwritten.push(b);
                }
            }
        }
        (lost, kept, unwritten)
    }
}
