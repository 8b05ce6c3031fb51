//! [`MemDevice`]: a RAM device for tests, with a simulated power cut.
//!
//! Storage is split into 1 MiB chunks, each behind its own lock and allocated on
//! first write (unwritten space reads as zeros), so a huge device costs nothing
//! until used and I/O on different regions does not contend.
//!
//! Power-cut model: the device behaves like a drive with a volatile write cache.
//! Writes (and discards) become durable only at the next [`Device::sync`]. Before
//! the first modification of a 4 KiB block after a sync, its durable contents are
//! saved; `sync` drops the saved copies; [`MemDevice::power_cut`] puts them back,
//! losing every write since the last sync. Clones share the storage, so a test can
//! keep a handle, drop (or leak) the engine and reopen it on the same memory.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{
    check_aligned, check_range, Backend, ClaimError, Device, DeviceClaim, DeviceId, DeviceInfo,
    InUse, IoCounters, Media, IO_ALIGN,
};

/// Bytes per chunk (one lock, one lazy allocation).
const CHUNK: usize = 1 << 20;
/// 4 KiB blocks per chunk.
const BLOCKS_PER_CHUNK: usize = CHUNK / IO_ALIGN;

/// Durable contents of the blocks of one chunk modified since the last sync.
#[derive(Default)]
struct Saved {
    /// Bit per block: already saved.
    mask: [u64; BLOCKS_PER_CHUNK / 64],
    /// (block index in chunk, durable contents; `None` = zeros).
    blocks: Vec<(usize, Option<Box<[u8]>>)>,
}

impl Saved {
    fn has(&self, b: usize) -> bool {
        self.mask[b / 64] & (1 << (b % 64)) != 0
    }
    fn set(&mut self, b: usize) {
        self.mask[b / 64] |= 1 << (b % 64);
    }
}

#[derive(Default)]
struct Chunk {
    /// Current contents; `None` = all zeros (never written or discarded).
    data: Option<Box<[u8]>>,
    /// `Some` when the chunk was modified since the last sync.
    saved: Option<Box<Saved>>,
}

struct Inner {
    info: DeviceInfo,
    counters: IoCounters,
    chunks: Vec<RwLock<Chunk>>,
    /// Indices of chunks with `saved` set.
    dirty: Mutex<Vec<usize>>,
    /// I/O and `sync` hold it shared; a power cut holds it exclusively.
    epoch: RwLock<()>,
    fail_writes: AtomicBool,
    fail_reads: AtomicBool,
    /// Set while an open pool uses the device (shared by clones).
    in_use: InUse,
}

/// In-memory [`Device`] with lazily allocated storage, a simulated power cut and
/// error injection. Cloning yields another handle on the same storage.
#[derive(Clone)]
pub struct MemDevice {
    inner: Arc<Inner>,
}

impl fmt::Debug for MemDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemDevice")
            .field("capacity", &self.inner.info.capacity)
            .finish()
    }
}

fn injected() -> io::Error {
    io::Error::other("injected I/O error")
}

fn zeroed(len: usize) -> Box<[u8]> {
    vec![0u8; len].into_boxed_slice()
}

impl MemDevice {
    /// A zero-filled device of `capacity` bytes (rounded up to 4 KiB). Memory is
    /// only allocated for regions that get written.
    pub fn new(capacity: u64) -> MemDevice {
        let capacity = capacity.div_ceil(IO_ALIGN as u64) * IO_ALIGN as u64;
        let n = capacity.div_ceil(CHUNK as u64) as usize;
        let chunks = (0..n).map(|_| RwLock::new(Chunk::default())).collect();
        MemDevice {
            inner: Arc::new(Inner {
                info: DeviceInfo {
                    path: format!("mem:{capacity}"),
                    identity: DeviceId::unique(),
                    volatile: false,
                    capacity,
                    logical_block_size: IO_ALIGN as u32,
                    physical_block_size: IO_ALIGN as u32,
                    optimal_io_size: 0,
                    discard_granularity: IO_ALIGN as u32,
                    media: Media::Memory,
                    backend: Backend::Memory,
                    direct_io: true,
                    block_device: false,
                    hole_punch_discard: false,
                    rotational: false,
                    indirection_unit: 0,
                    reclaim_unit: 0,
                },
                counters: IoCounters::default(),
                chunks,
                dirty: Mutex::new(Vec::new()),
                epoch: RwLock::new(()),
                fail_writes: AtomicBool::new(false),
                fail_reads: AtomicBool::new(false),
                in_use: InUse::default(),
            }),
        }
    }

    /// The same device, describing itself as a drive of `media` with the given
    /// indirection and reclaim units (0 = unknown), as an emulated or probed
    /// drive would. Must be called before the device is shared.
    pub fn with_drive(
        mut self,
        media: Media,
        indirection_unit: u32,
        reclaim_unit: u64,
    ) -> MemDevice {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.info.media = media;
            inner.info.indirection_unit = indirection_unit;
            inner.info.reclaim_unit = reclaim_unit;
        }
        self
    }

    /// Simulate a power loss: every write and discard since the last successful
    /// [`Device::sync`] is undone. Handles stay usable (the "machine" restarts).
    pub fn power_cut(&self) {
        self.power_cut_with(|_| false);
    }

    /// Power loss where some unsynced 4 KiB blocks made it to the medium:
    /// `survives(offset)` is asked once per block modified since the last sync
    /// (in increasing offset order) and decides whether its new contents stay
    /// (`true`) or revert to the last synced contents (`false`). Useful to model
    /// torn, reordered writes.
    pub fn power_cut_with(&self, mut survives: impl FnMut(u64) -> bool) {
        let inner = &*self.inner;
        let _epoch = inner.epoch.write();
        let mut dirty = std::mem::take(&mut *inner.dirty.lock());
        dirty.sort_unstable();
        dirty.dedup();
        for idx in dirty {
            let mut chunk = inner.chunks[idx].write();
            let Some(mut saved) = chunk.saved.take() else {
                continue;
            };
            saved.blocks.sort_unstable_by_key(|(b, _)| *b);
            for (b, copy) in saved.blocks {
                let offset = (idx * CHUNK + b * IO_ALIGN) as u64;
                if survives(offset) {
                    continue;
                }
                let range = b * IO_ALIGN..(b + 1) * IO_ALIGN;
                match (copy, chunk.data.as_mut()) {
                    (Some(copy), Some(data)) => data[range].copy_from_slice(&copy),
                    (Some(copy), None) => {
                        let mut data = zeroed(self.chunk_len(idx));
                        data[range].copy_from_slice(&copy);
                        chunk.data = Some(data);
                    }
                    (None, Some(data)) => data[range].fill(0),
                    (None, None) => {}
                }
            }
        }
    }

    /// Make subsequent writes, discards and syncs fail with an `Other` error
    /// ("injected I/O error") while `on`.
    pub fn set_fail_writes(&self, on: bool) {
        self.inner.fail_writes.store(on, Ordering::SeqCst);
    }

    /// Make subsequent reads fail with an `Other` error ("injected I/O error")
    /// while `on`.
    pub fn set_fail_reads(&self, on: bool) {
        self.inner.fail_reads.store(on, Ordering::SeqCst);
    }

    /// Bytes of RAM currently holding device contents (excluding saved copies).
    pub fn resident_bytes(&self) -> u64 {
        self.inner
            .chunks
            .iter()
            .map(|c| c.read().data.as_ref().map_or(0, |d| d.len() as u64))
            .sum()
    }

    fn chunk_len(&self, idx: usize) -> usize {
        let start = (idx * CHUNK) as u64;
        (self.inner.info.capacity - start).min(CHUNK as u64) as usize
    }

    fn check(&self, ptr: *const u8, len: usize, offset: u64) -> io::Result<()> {
        let ptr = if len == 0 { std::ptr::null() } else { ptr };
        check_aligned(ptr, len, offset)?;
        check_range(len, offset, self.inner.info.capacity)
    }

    /// Call `f(chunk index, offset in chunk, range in the caller's buffer)` for
    /// each chunk piece of `[offset, offset + len)`.
    fn spans(offset: u64, len: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let idx = (pos / CHUNK as u64) as usize;
            let in_chunk = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - in_chunk).min(len - done);
            f(idx, in_chunk, done..done + n);
            done += n;
        }
    }

    /// Save the durable contents of blocks `[first, last]` of a chunk before
    /// they are modified for the first time since the last sync.
    fn save_blocks(&self, idx: usize, chunk: &mut Chunk, first: usize, last: usize) {
        if chunk.saved.is_none() {
            chunk.saved = Some(Box::default());
            self.inner.dirty.lock().push(idx);
        }
        let Chunk { data, saved } = chunk;
        let Some(saved) = saved.as_mut() else { return };
        for b in first..=last {
            if saved.has(b) {
                continue;
            }
            saved.set(b);
            let copy = data
                .as_ref()
                .map(|d| Box::<[u8]>::from(&d[b * IO_ALIGN..(b + 1) * IO_ALIGN]));
            saved.blocks.push((b, copy));
        }
    }

    fn read_one(&self, buf: &mut [u8], offset: u64) {
        Self::spans(offset, buf.len(), |idx, at, r| {
            let chunk = self.inner.chunks[idx].read();
            let dst = &mut buf[r];
            match &chunk.data {
                Some(d) => dst.copy_from_slice(&d[at..at + dst.len()]),
                None => dst.fill(0),
            }
        });
        self.inner.counters.read(buf.len());
    }

    fn write_one(&self, buf: &[u8], offset: u64) {
        Self::spans(offset, buf.len(), |idx, at, r| {
            let len = self.chunk_len(idx);
            let mut chunk = self.inner.chunks[idx].write();
            let n = r.len();
            self.save_blocks(idx, &mut chunk, at / IO_ALIGN, (at + n - 1) / IO_ALIGN);
            let data = chunk.data.get_or_insert_with(|| zeroed(len));
            data[at..at + n].copy_from_slice(&buf[r]);
        });
        self.inner.counters.write(buf.len());
    }
}

impl Device for MemDevice {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(buf.as_ptr(), buf.len(), offset)?;
        if self.inner.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        if buf.is_empty() {
            return Ok(());
        }
        let _epoch = self.inner.epoch.read();
        self.read_one(buf, offset);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(buf.as_ptr(), buf.len(), offset)?;
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected());
        }
        if buf.is_empty() {
            return Ok(());
        }
        let _epoch = self.inner.epoch.read();
        self.write_one(buf, offset);
        Ok(())
    }

    fn write_batch(&self, ops: &[(u64, &[u8])]) -> io::Result<()> {
        for (off, buf) in ops {
            self.check(buf.as_ptr(), buf.len(), *off)?;
        }
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected());
        }
        let _epoch = self.inner.epoch.read();
        for (off, buf) in ops {
            if !buf.is_empty() {
                self.write_one(buf, *off);
            }
        }
        Ok(())
    }

    fn read_batch(&self, ops: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (off, buf) in ops.iter() {
            self.check(buf.as_ptr(), buf.len(), *off)?;
        }
        if self.inner.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        let _epoch = self.inner.epoch.read();
        for (off, buf) in ops.iter_mut() {
            if !buf.is_empty() {
                self.read_one(buf, *off);
            }
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected());
        }
        let _epoch = self.inner.epoch.read();
        let dirty = std::mem::take(&mut *self.inner.dirty.lock());
        for idx in dirty {
            self.inner.chunks[idx].write().saved = None;
        }
        self.inner.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let ulen = usize::try_from(len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("discard length {len} too large"),
            )
        })?;
        check_aligned(std::ptr::null(), ulen, offset)?;
        check_range(ulen, offset, self.inner.info.capacity)?;
        if self.inner.fail_writes.load(Ordering::SeqCst) {
            return Err(injected());
        }
        if len == 0 {
            return Ok(());
        }
        let _epoch = self.inner.epoch.read();
        Self::spans(offset, ulen, |idx, at, r| {
            let n = r.len();
            let mut chunk = self.inner.chunks[idx].write();
            if chunk.data.is_none() {
                return; // already zeros
            }
            self.save_blocks(idx, &mut chunk, at / IO_ALIGN, (at + n - 1) / IO_ALIGN);
            if at == 0 && n == self.chunk_len(idx) {
                chunk.data = None;
            } else if let Some(d) = chunk.data.as_mut() {
                d[at..at + n].fill(0);
            }
        });
        self.inner
            .counters
            .bytes_discarded
            .fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    fn counters(&self) -> &IoCounters {
        &self.inner.counters
    }

    /// One open pool at a time, across all clones of the device.
    fn claim(&self) -> Result<DeviceClaim, ClaimError> {
        self.inner.in_use.claim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::AlignedBuf;
    use proptest::prelude::*;

    const CAP: u64 = 3 * CHUNK as u64 + 8 * 4096; // last chunk is partial
    const BLOCKS: u64 = CAP / 4096;

    #[derive(Debug, Clone)]
    enum Op {
        Write { block: u64, blocks: u64, seed: u8 },
        Discard { block: u64, blocks: u64 },
        Sync,
        PowerCut,
        PartialCut { keep_mod: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..BLOCKS, 1..300u64, any::<u8>())
                .prop_map(|(block, blocks, seed)| Op::Write { block, blocks: blocks.min(BLOCKS - block), seed }),
            2 => (0..BLOCKS, 1..600u64)
                .prop_map(|(block, blocks)| Op::Discard { block, blocks: blocks.min(BLOCKS - block) }),
            2 => Just(Op::Sync),
            1 => Just(Op::PowerCut),
            1 => (1..5u64).prop_map(|keep_mod| Op::PartialCut { keep_mod }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The device matches a model of "current" and "durable" contents.
        #[test]
        fn matches_model(ops in proptest::collection::vec(op(), 1..40)) {
            let dev = MemDevice::new(CAP);
            let mut current = vec![0u8; CAP as usize];
            let mut durable = vec![0u8; CAP as usize];
            for op in ops {
                match op {
                    Op::Write { block, blocks, seed } => {
                        let mut b = AlignedBuf::new((blocks * 4096) as usize);
                        for (i, x) in b.iter_mut().enumerate() {
                            *x = seed.wrapping_add((i / 4096) as u8).wrapping_add(1);
                        }
                        dev.write_at(&b, block * 4096).expect("write");
                        current[(block * 4096) as usize..][..b.len()].copy_from_slice(&b);
                    }
                    Op::Discard { block, blocks } => {
                        dev.discard(block * 4096, blocks * 4096).expect("discard");
                        current[(block * 4096) as usize..][..(blocks * 4096) as usize].fill(0);
                    }
                    Op::Sync => {
                        dev.sync().expect("sync");
                        durable.copy_from_slice(&current);
                    }
                    Op::PowerCut => {
                        dev.power_cut();
                        current.copy_from_slice(&durable);
                    }
                    Op::PartialCut { keep_mod } => {
                        // Blocks whose index is a multiple of keep_mod survive.
                        let kept = |blk: u64| blk / keep_mod * keep_mod == blk;
                        dev.power_cut_with(|off| kept(off / 4096));
                        for blk in 0..BLOCKS as usize {
                            if !kept(blk as u64) {
                                let r = blk * 4096..(blk + 1) * 4096;
                                current[r.clone()].copy_from_slice(&durable[r]);
                            }
                        }
                        // Surviving blocks are now what the medium holds.
                        durable.copy_from_slice(&current);
                    }
                }
                let mut all = AlignedBuf::new(CAP as usize);
                dev.read_at(&mut all, 0).expect("read");
                prop_assert!(all[..] == current[..]);
            }
        }
    }

    #[test]
    fn concurrent_writers_on_different_chunks() {
        let dev = MemDevice::new(8 * CHUNK as u64);
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let dev = dev.clone();
                s.spawn(move || {
                    let mut b = AlignedBuf::new(4096);
                    b.fill(t + 1);
                    for i in 0..256u64 {
                        dev.write_at(&b, t as u64 * CHUNK as u64 + i * 4096)
                            .expect("write");
                        if i % 64 == 0 {
                            dev.sync().expect("sync");
                        }
                    }
                });
            }
        });
        dev.sync().expect("sync");
        dev.power_cut();
        let mut all = AlignedBuf::new(8 * CHUNK);
        dev.read_at(&mut all, 0).expect("read");
        for (i, &x) in all.iter().enumerate() {
            assert_eq!(x, (i / CHUNK) as u8 + 1, "byte {i}");
        }
    }
}
