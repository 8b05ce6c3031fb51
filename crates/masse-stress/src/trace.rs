//! Recording devices and crash states: the machinery of crash-point
//! enumeration ([`crate::enumerate`]), in the manner of CrashMonkey and ALICE.
//!
//! Every device of a pool is wrapped in a [`RecordingDevice`] that appends each
//! write, discard and sync to one shared [`Trace`], in the order the devices
//! applied them (one lock orders them all), together with the scenario's own
//! events: an operation started, an operation was acknowledged. A crash state is
//! then any prefix of the trace, replayed onto fresh [`MemDevice`]s, followed by
//! a power cut that keeps some subset of the blocks written since each device's
//! last sync ([`Replayer`]). Traces are saved to and loaded from files, so a
//! crash state found on one run is rebuilt exactly by a replay
//! ([`TraceFile`]).

use masse::device::{AlignedBuf, Device, DeviceInfo, IoCounters, MemDevice, IO_ALIGN};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::Arc;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Block size of the crash model: an aligned 4 KiB write is atomic, and any
/// subset of unsynced blocks may survive a power cut (design.md §10.6).
pub const BLOCK: u64 = IO_ALIGN as u64;

/// One entry of a trace.
#[derive(Clone, Debug)]
pub enum Event {
    /// `data` was written at `off` of device `dev` (not yet durable).
    Write {
        /// Device index in pool order (fast device first, then capacity devices).
        dev: u8,
        /// Byte offset.
        off: u64,
        /// The bytes (a multiple of 4 KiB).
        data: Arc<[u8]>,
    },
    /// A range was discarded (TRIM): its contents read as zeros from now on.
    Discard {
        /// Device index.
        dev: u8,
        /// Byte offset.
        off: u64,
        /// Length in bytes.
        len: u64,
    },
    /// Every earlier write and discard of device `dev` is durable.
    Sync {
        /// Device index.
        dev: u8,
    },
    /// The scenario started operation `op`.
    Begin {
        /// Index into the scenario's operation list.
        op: u32,
    },
    /// Operation `op` was acknowledged; `result` is its return value (a
    /// delete's "existed" as 0/1, otherwise 0).
    End {
        /// Index into the scenario's operation list.
        op: u32,
        /// Return value.
        result: u32,
    },
}

impl Event {
    /// Whether a crash can land right after this event (a device event).
    pub fn is_device_event(&self) -> bool {
        matches!(
            self,
            Event::Write { .. } | Event::Discard { .. } | Event::Sync { .. }
        )
    }

    /// One line for reports.
    pub fn describe(&self, dev_names: &[String]) -> String {
        let name = |d: &u8| {
            dev_names
                .get(*d as usize)
                .cloned()
                .unwrap_or_else(|| format!("dev{d}"))
        };
        match self {
            Event::Write { dev, off, data } => {
                format!("write {} @{off:#x} +{}", name(dev), data.len())
            }
            Event::Discard { dev, off, len } => format!("discard {} @{off:#x} +{len}", name(dev)),
            Event::Sync { dev } => format!("sync {}", name(dev)),
            Event::Begin { op } => format!("op {op} begins"),
            Event::End { op, result } => format!("op {op} acknowledged ({result})"),
        }
    }
}

/// The globally ordered event log of a run.
#[derive(Default)]
pub struct Trace {
    events: Mutex<Vec<Event>>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Arc<Trace> {
        Arc::new(Trace::default())
    }
    /// Appends a scenario event.
    pub fn push(&self, e: Event) {
        self.events.lock().push(e);
    }
    /// Events so far.
    pub fn len(&self) -> usize {
        self.events.lock().len()
    }
    /// True before the first event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A copy of the events (write data is shared, not copied).
    pub fn snapshot(&self) -> Vec<Event> {
        self.events.lock().clone()
    }
}

/// A [`Device`] that applies every call to a [`MemDevice`] and logs each
/// write, discard and sync into a shared [`Trace`]. The trace lock is held
/// across the call, so the log's order is the order the device saw.
pub struct RecordingDevice {
    dev: u8,
    inner: MemDevice,
    trace: Arc<Trace>,
}

impl RecordingDevice {
    /// Wraps `inner` as device number `dev` of the pool.
    pub fn new(dev: u8, inner: MemDevice, trace: Arc<Trace>) -> RecordingDevice {
        RecordingDevice { dev, inner, trace }
    }
}

impl Device for RecordingDevice {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, ops: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        self.inner.read_batch(ops)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut t = self.trace.events.lock();
        self.inner.write_at(buf, offset)?;
        t.push(Event::Write {
            dev: self.dev,
            off: offset,
            data: Arc::from(buf),
        });
        Ok(())
    }
    fn write_batch(&self, ops: &[(u64, &[u8])]) -> io::Result<()> {
        // One event per write: a crash may land between the writes of a batch.
        let mut t = self.trace.events.lock();
        for (off, buf) in ops {
            self.inner.write_at(buf, *off)?;
            t.push(Event::Write {
                dev: self.dev,
                off: *off,
                data: Arc::from(*buf),
            });
        }
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        let mut t = self.trace.events.lock();
        self.inner.sync()?;
        t.push(Event::Sync { dev: self.dev });
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut t = self.trace.events.lock();
        self.inner.discard(offset, len)?;
        t.push(Event::Discard {
            dev: self.dev,
            off: offset,
            len,
        });
        Ok(())
    }
    fn counters(&self) -> &IoCounters {
        self.inner.counters()
    }
}

/// A block of a pool: (device index, byte offset).
pub type BlockId = (u8, u64);

/// Contents of a pool's devices: the 4 KiB blocks that are not all zeros.
#[derive(Clone, Debug, Default)]
pub struct Image {
    /// Size of each device in bytes.
    pub sizes: Vec<u64>,
    /// Per device: block offset → contents (4 KiB).
    pub blocks: Vec<BTreeMap<u64, Arc<[u8]>>>,
}

impl Image {
    /// Devices of these sizes, all zeros.
    pub fn blank(sizes: &[u64]) -> Image {
        Image {
            sizes: sizes.to_vec(),
            blocks: vec![BTreeMap::new(); sizes.len()],
        }
    }

    /// What `devs` hold now (unsynced writes included).
    pub fn read(devs: &[MemDevice]) -> io::Result<Image> {
        let mut img = Image::blank(&devs.iter().map(|d| d.info().capacity).collect::<Vec<_>>());
        let mut buf = AlignedBuf::new(1 << 20);
        for (i, d) in devs.iter().enumerate() {
            let cap = d.info().capacity;
            let mut off = 0;
            while off < cap {
                let n = (cap - off).min(buf.len() as u64) as usize;
                d.read_at(&mut buf[..n], off)?;
                for (j, b) in buf[..n].chunks(BLOCK as usize).enumerate() {
                    if b.iter().any(|&x| x != 0) {
                        img.blocks[i].insert(off + (j as u64) * BLOCK, Arc::from(b));
                    }
                }
                off += n as u64;
            }
        }
        Ok(img)
    }

    /// Fresh, synced devices holding this image.
    pub fn to_devices(&self) -> Vec<MemDevice> {
        self.sizes
            .iter()
            .zip(&self.blocks)
            .map(|(&size, blocks)| {
                let d = MemDevice::new(size);
                write_runs(&d, blocks.iter().map(|(o, b)| (*o, Some(b))));
                let _ = d.sync();
                d
            })
            .collect()
    }

    /// Total non-zero blocks.
    pub fn block_count(&self) -> usize {
        self.blocks.iter().map(|b| b.len()).sum()
    }
}

/// Writes blocks (in increasing offset order; `None` = zeros) with one write
/// per run of adjacent blocks.
fn write_runs<'a>(d: &MemDevice, blocks: impl Iterator<Item = (u64, Option<&'a Arc<[u8]>>)>) {
    let mut run: Vec<u8> = Vec::new();
    let mut start = 0u64;
    let flush = |run: &mut Vec<u8>, start: u64| {
        if !run.is_empty() {
            let mut b = AlignedBuf::new(run.len());
            b.copy_from_slice(run);
            // In-memory writes of aligned, in-range blocks cannot fail.
            let _ = d.write_at(&b, start);
            run.clear();
        }
    };
    for (off, data) in blocks {
        if run.is_empty() || start + run.len() as u64 != off || run.len() >= 1 << 20 {
            flush(&mut run, start);
            start = off;
        }
        match data {
            Some(b) => run.extend_from_slice(b),
            None => run.resize(run.len() + BLOCK as usize, 0),
        }
    }
    flush(&mut run, start);
}

fn block_hash(dev: u8, off: u64, data: Option<&[u8]>) -> u64 {
    let content = data.map_or(0, xxh3_64);
    xxh3_64_with_seed(&off.to_le_bytes(), content ^ ((dev as u64) << 56))
}

/// A block's contents and its [`block_hash`].
type HashedBlock = (Arc<[u8]>, u64);

/// Replays a trace event by event, tracking per device what is durable and
/// which blocks were changed since the device's last sync; builds the crash
/// state at the current point for any choice of surviving blocks.
pub struct Replayer {
    /// Durable contents with each block's hash.
    durable: Vec<BTreeMap<u64, HashedBlock>>,
    /// Sum of the durable blocks' hashes (order-free image digest).
    durable_sum: u64,
    /// Per device: unsynced blocks, latest contents (`None` = zeros).
    pending: Vec<BTreeMap<u64, Option<Arc<[u8]>>>>,
    sizes: Vec<u64>,
    /// Events applied so far.
    pub applied: usize,
}

impl Replayer {
    /// Starts from `base` (all of it durable).
    pub fn new(base: &Image) -> Replayer {
        let mut sum = 0u64;
        let durable = base
            .blocks
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.iter()
                    .map(|(&o, b)| {
                        let h = block_hash(i as u8, o, Some(b));
                        sum = sum.wrapping_add(h);
                        (o, (b.clone(), h))
                    })
                    .collect()
            })
            .collect();
        Replayer {
            durable,
            durable_sum: sum,
            pending: vec![BTreeMap::new(); base.sizes.len()],
            sizes: base.sizes.clone(),
            applied: 0,
        }
    }

    fn current(&self, dev: usize, off: u64) -> bool {
        match self.pending[dev].get(&off) {
            Some(p) => p.is_some(),
            None => self.durable[dev].contains_key(&off),
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, e: &Event) {
        self.applied += 1;
        match e {
            Event::Write { dev, off, data } => {
                let d = *dev as usize;
                for (j, b) in data.chunks(BLOCK as usize).enumerate() {
                    let o = off + j as u64 * BLOCK;
                    let v = b.iter().any(|&x| x != 0).then(|| Arc::from(b));
                    if v.is_some() || self.current(d, o) {
                        self.pending[d].insert(o, v);
                    }
                }
            }
            Event::Discard { dev, off, len } => {
                let d = *dev as usize;
                let mut o = *off;
                while o < off + len {
                    if self.current(d, o) {
                        self.pending[d].insert(o, None);
                    }
                    o += BLOCK;
                }
            }
            Event::Sync { dev } => {
                let d = *dev as usize;
                for (o, v) in std::mem::take(&mut self.pending[d]) {
                    if let Some((_, h)) = self.durable[d].remove(&o) {
                        self.durable_sum = self.durable_sum.wrapping_sub(h);
                    }
                    if let Some(b) = v {
                        let h = block_hash(*dev, o, Some(&b));
                        self.durable_sum = self.durable_sum.wrapping_add(h);
                        self.durable[d].insert(o, (b, h));
                    }
                }
            }
            Event::Begin { .. } | Event::End { .. } => {}
        }
    }

    /// Blocks written or discarded since their device's last sync, in order.
    pub fn unsynced(&self) -> Vec<BlockId> {
        self.pending
            .iter()
            .enumerate()
            .flat_map(|(d, m)| m.keys().map(move |&o| (d as u8, o)))
            .collect()
    }

    /// A digest of the crash state in which the blocks in `lost` revert to
    /// their durable contents (equal states have equal digests).
    pub fn state_digest(&self, lost: &BTreeSet<BlockId>) -> u64 {
        let mut sum = self.durable_sum;
        for (d, m) in self.pending.iter().enumerate() {
            for (&o, v) in m {
                if lost.contains(&(d as u8, o)) {
                    continue;
                }
                if let Some((_, h)) = self.durable[d].get(&o) {
                    sum = sum.wrapping_sub(*h);
                }
                if let Some(b) = v {
                    sum = sum.wrapping_add(block_hash(d as u8, o, Some(b)));
                }
            }
        }
        sum
    }

    /// The crash state: fresh devices holding the durable contents, then every
    /// unsynced write, then a power cut in which exactly the blocks in `lost`
    /// revert ([`MemDevice::power_cut_with`]).
    pub fn crash_state(&self, lost: &BTreeSet<BlockId>) -> Vec<MemDevice> {
        (0..self.sizes.len())
            .map(|d| {
                let dev = MemDevice::new(self.sizes[d]);
                write_runs(
                    &dev,
                    self.durable[d].iter().map(|(o, (b, _))| (*o, Some(b))),
                );
                let _ = dev.sync();
                write_runs(&dev, self.pending[d].iter().map(|(o, v)| (*o, v.as_ref())));
                dev.power_cut_with(|off| !lost.contains(&(d as u8, off)));
                dev
            })
            .collect()
    }
}

/// Short names of a pool's devices for reports: `fast`, `cap0`, `cap1`, …
pub fn device_names(has_fast: bool, ndev: usize) -> Vec<String> {
    (0..ndev)
        .map(|i| match (has_fast, i) {
            (true, 0) => "fast".to_string(),
            (true, i) => format!("cap{}", i - 1),
            (false, i) => format!("cap{i}"),
        })
        .collect()
}

/// Counts of device events by kind, for reports.
pub fn count_device_events(events: &[Event]) -> HashMap<&'static str, u64> {
    let mut m = HashMap::new();
    for e in events {
        let k = match e {
            Event::Write { .. } => "writes",
            Event::Discard { .. } => "discards",
            Event::Sync { .. } => "syncs",
            _ => continue,
        };
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// A saved run: a JSON header (what the scenario was, which crash state
/// failed), the image the run started from, and its events. Binary,
/// little-endian: `"MASSETR1"`, header, base image, events.
pub struct TraceFile {
    /// JSON describing the run (see `enumerate::SavedRun`).
    pub header: String,
    /// Device contents before the first event.
    pub base: Image,
    /// The events.
    pub events: Vec<Event>,
}

const TRACE_MAGIC: &[u8; 8] = b"MASSETR1";

impl TraceFile {
    /// Writes the file.
    pub fn save(&self, path: &std::path::Path) -> io::Result<()> {
        let mut out: Vec<u8> = Vec::new();
        out.extend_from_slice(TRACE_MAGIC);
        put_u64(&mut out, self.header.len() as u64);
        out.extend_from_slice(self.header.as_bytes());
        put_u64(&mut out, self.base.sizes.len() as u64);
        for (size, blocks) in self.base.sizes.iter().zip(&self.base.blocks) {
            put_u64(&mut out, *size);
            put_u64(&mut out, blocks.len() as u64);
            for (off, b) in blocks {
                put_u64(&mut out, *off);
                out.extend_from_slice(b);
            }
        }
        put_u64(&mut out, self.events.len() as u64);
        for e in &self.events {
            match e {
                Event::Write { dev, off, data } => {
                    out.push(1);
                    out.push(*dev);
                    put_u64(&mut out, *off);
                    put_u64(&mut out, data.len() as u64);
                    out.extend_from_slice(data);
                }
                Event::Discard { dev, off, len } => {
                    out.push(2);
                    out.push(*dev);
                    put_u64(&mut out, *off);
                    put_u64(&mut out, *len);
                }
                Event::Sync { dev } => {
                    out.push(3);
                    out.push(*dev);
                }
                Event::Begin { op } => {
                    out.push(4);
                    put_u64(&mut out, *op as u64);
                }
                Event::End { op, result } => {
                    out.push(5);
                    put_u64(&mut out, *op as u64);
                    put_u64(&mut out, *result as u64);
                }
            }
        }
        std::fs::write(path, out)
    }

    /// Reads a file written by [`TraceFile::save`].
    pub fn load(path: &std::path::Path) -> io::Result<TraceFile> {
        let bytes = std::fs::read(path)?;
        let bad =
            |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("trace file: {what}"));
        let mut r = Reader { b: &bytes, at: 0 };
        if r.take(8)? != TRACE_MAGIC {
            return Err(bad("not a masse trace file"));
        }
        let hlen = r.u64()? as usize;
        let header = String::from_utf8(r.take(hlen)?.to_vec()).map_err(|_| bad("header"))?;
        let ndev = r.u64()? as usize;
        if ndev > 64 {
            return Err(bad("device count"));
        }
        let mut base = Image::default();
        for _ in 0..ndev {
            base.sizes.push(r.u64()?);
            let n = r.u64()?;
            let mut m = BTreeMap::new();
            for _ in 0..n {
                let off = r.u64()?;
                m.insert(off, Arc::from(r.take(BLOCK as usize)?));
            }
            base.blocks.push(m);
        }
        let n = r.u64()?;
        let mut events = Vec::new();
        for _ in 0..n {
            let e = match r.take(1)?[0] {
                1 => {
                    let dev = r.take(1)?[0];
                    let off = r.u64()?;
                    let len = r.u64()? as usize;
                    Event::Write {
                        dev,
                        off,
                        data: Arc::from(r.take(len)?),
                    }
                }
                2 => Event::Discard {
                    dev: r.take(1)?[0],
                    off: r.u64()?,
                    len: r.u64()?,
                },
                3 => Event::Sync { dev: r.take(1)?[0] },
                4 => Event::Begin {
                    op: r.u64()? as u32,
                },
                5 => Event::End {
                    op: r.u64()? as u32,
                    result: r.u64()? as u32,
                },
                _ => return Err(bad("unknown event")),
            };
            if let Event::Write { dev, .. } | Event::Discard { dev, .. } | Event::Sync { dev } = &e
            {
                if *dev as usize >= ndev {
                    return Err(bad("event on an unknown device"));
                }
            }
            events.push(e);
        }
        Ok(TraceFile {
            header,
            base,
            events,
        })
    }
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "trace file is truncated")
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(fill: u8) -> AlignedBuf {
        let mut b = AlignedBuf::new(BLOCK as usize);
        b.fill(fill);
        b
    }

    fn read_block(d: &MemDevice, off: u64) -> u8 {
        let mut b = AlignedBuf::new(BLOCK as usize);
        d.read_at(&mut b, off).expect("read");
        b[0]
    }

    /// The replayer's crash states equal what the recorded devices would hold
    /// after the same power cut, and equal states get equal digests.
    #[test]
    fn crash_states_follow_the_power_cut_model() {
        let trace = Trace::new();
        let mem = MemDevice::new(1 << 20);
        let rec = RecordingDevice::new(0, mem.clone(), trace.clone());
        rec.write_at(&blk(1), 0).expect("w");
        rec.write_at(&blk(2), 4096).expect("w");
        rec.sync().expect("s");
        rec.write_at(&blk(3), 0).expect("w");
        rec.discard(4096, 4096).expect("d");
        rec.write_at(&blk(4), 8192).expect("w");
        let events = trace.snapshot();
        assert_eq!(events.len(), 6);
        let mut r = Replayer::new(&Image::blank(&[1 << 20]));
        for e in &events {
            r.apply(e);
        }
        assert_eq!(r.unsynced(), vec![(0, 0), (0, 4096), (0, 8192)]);
        let lost: BTreeSet<BlockId> = [(0, 4096)].into_iter().collect();
        let devs = r.crash_state(&lost);
        assert_eq!(
            [0, 4096, 8192].map(|o| read_block(&devs[0], o)),
            [3, 2, 4],
            "block 4096's discard was lost, the others survived"
        );
        // The same cut on the recorded device itself.
        mem.power_cut_with(|o| o != 4096);
        assert_eq!([0, 4096, 8192].map(|o| read_block(&mem, o)), [3, 2, 4]);
        // Digest: equal for equal states, different otherwise.
        let none: BTreeSet<BlockId> = r.unsynced().into_iter().collect();
        assert_ne!(r.state_digest(&lost), r.state_digest(&none));
        let mut again = Replayer::new(&Image::blank(&[1 << 20]));
        for e in &events[..3] {
            again.apply(e);
        }
        assert_eq!(again.state_digest(&BTreeSet::new()), r.state_digest(&none));
    }

    #[test]
    fn trace_files_round_trip() {
        let mut base = Image::blank(&[1 << 20, 2 << 20]);
        base.blocks[1].insert(8192, Arc::from(&blk(9)[..]));
        let events = vec![
            Event::Begin { op: 0 },
            Event::Write {
                dev: 1,
                off: 4096,
                data: Arc::from(&blk(5)[..]),
            },
            Event::Discard {
                dev: 0,
                off: 0,
                len: 8192,
            },
            Event::Sync { dev: 1 },
            Event::End { op: 0, result: 1 },
        ];
        let f = TraceFile {
            header: "{\"x\":1}".into(),
            base,
            events,
        };
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("t.trace");
        f.save(&p).expect("save");
        let g = TraceFile::load(&p).expect("load");
        assert_eq!(g.header, f.header);
        assert_eq!(g.base.sizes, f.base.sizes);
        assert_eq!(g.base.blocks[1].get(&8192).map(|b| b[0]), Some(9));
        assert_eq!(format!("{:?}", g.events), format!("{:?}", f.events));
        std::fs::write(&p, b"MASSETR1\x05").expect("write");
        assert!(TraceFile::load(&p).is_err(), "a truncated file is an error");
    }
}
