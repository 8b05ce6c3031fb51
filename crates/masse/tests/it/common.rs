//! Shared helpers for the integration tests (each test file is one scenario).
#![allow(dead_code)]

use masse::device::{Device, MemDevice};
use masse::{DeviceSpec, Mode, Options, PoolConfig};
use std::sync::Arc;

/// In-memory devices of one pool, kept so a test can reopen after a crash.
#[derive(Clone)]
pub struct MemPool {
    pub fast: Option<MemDevice>,
    pub caps: Vec<MemDevice>,
    pub mode: Mode,
    pub segment: Option<u32>,
    pub band: Option<u64>,
    /// Format version to create (`None`: the newest).
    pub format: Option<u32>,
}

impl MemPool {
    pub fn tiered(fast: u64, cap: u64) -> MemPool {
        MemPool {
            fast: Some(MemDevice::new(fast)),
            caps: vec![MemDevice::new(cap)],
            mode: Mode::Tiered,
            segment: None,
            band: None,
            format: None,
        }
    }
    pub fn capacity_only(cap: u64) -> MemPool {
        MemPool {
            fast: None,
            caps: vec![MemDevice::new(cap)],
            mode: Mode::CapacityOnly,
            segment: None,
            band: None,
            format: None,
        }
    }
    pub fn scm_only(cap: u64) -> MemPool {
        MemPool {
            fast: None,
            caps: vec![MemDevice::new(cap)],
            mode: Mode::ScmOnly,
            segment: None,
            band: None,
            format: None,
        }
    }
    pub fn with_geometry(mut self, segment: u32, band: u64) -> MemPool {
        self.segment = Some(segment);
        self.band = Some(band);
        self
    }
    /// Create the pool in format version `v` (2: the older record format).
    pub fn with_format(mut self, v: u32) -> MemPool {
        self.format = Some(v);
        self
    }
    pub fn config(&self) -> PoolConfig {
        PoolConfig {
            fast: self
                .fast
                .as_ref()
                .map(|d| DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>)),
            capacity: self
                .caps
                .iter()
                .map(|d| DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>))
                .collect(),
            mode: Some(self.mode),
            segment_size: self.segment,
            band_size: self.band,
            format_version: self.format,
            ..Default::default()
        }
    }
    /// Lose every write not followed by a sync, on every device.
    pub fn power_cut(&self) {
        if let Some(f) = &self.fast {
            f.power_cut();
        }
        for c in &self.caps {
            c.power_cut();
        }
    }
}

pub fn opts() -> Options {
    Options {
        histograms: false,
        ..Options::default()
    }
}

pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:016}").into_bytes()
}

pub fn value(i: u64, ver: u64, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}-{ver}-").into_bytes();
    while v.len() < len {
        v.push(b'a' + ((i + ver + v.len() as u64) % 26) as u8);
    }
    v.truncate(len);
    v
}

/// Device offset of the first occurrence of `needle` (searched 1 MiB at a time).
pub fn find_bytes(dev: &masse::device::MemDevice, needle: &[u8]) -> Option<u64> {
    use masse::device::AlignedBuf;
    let cap = dev.info().capacity;
    let mut buf = AlignedBuf::new(1 << 20);
    let mut off = 0;
    while off < cap {
        dev.read_at(&mut buf, off).expect("read");
        if let Some(p) = buf.windows(needle.len()).position(|w| w == needle) {
            return Some(off + p as u64);
        }
        off += 1 << 20;
    }
    None
}

/// Device offsets of every occurrence of `needle` (not across 1 MiB
/// boundaries): dead copies of a record stay on the device until GC frees
/// their band, so the first occurrence need not be the live one.
pub fn find_all_bytes(dev: &masse::device::MemDevice, needle: &[u8]) -> Vec<u64> {
    use masse::device::AlignedBuf;
    let cap = dev.info().capacity;
    let mut buf = AlignedBuf::new(1 << 20);
    let (mut off, mut out) = (0, Vec::new());
    while off < cap {
        dev.read_at(&mut buf, off).expect("read");
        let hits = buf.windows(needle.len()).enumerate();
        out.extend(
            hits.filter(|(_, w)| *w == needle)
                .map(|(p, _)| off + p as u64),
        );
        off += 1 << 20;
    }
    out
}

/// A tiered pool on a memory fast tier of `fast` bytes and a [`Scripted`]
/// capacity device of `cap` bytes, with the given segment and band sizes.
pub fn scripted_tiered(
    fast: &MemDevice,
    cap: u64,
    segment: u32,
    band: u64,
) -> (PoolConfig, Arc<Scripted>) {
    let dev = Scripted::new(MemDevice::new(cap));
    let cfg = PoolConfig {
        fast: Some(DeviceSpec::Device(Arc::new(fast.clone()) as Arc<dyn Device>)),
        capacity: vec![DeviceSpec::Device(dev.clone() as Arc<dyn Device>)],
        mode: Some(Mode::Tiered),
        segment_size: Some(segment),
        band_size: Some(band),
        ..Default::default()
    };
    (cfg, dev)
}

/// A MemDevice with a script for crash tests: `block_writes` makes the next
/// write wait until it is cleared (so messages pile up behind a writer stuck in
/// a burst), and `syncs_left` (when ≥ 0) lets that many more syncs succeed and
/// fails every one after, as a power failure before the sync would.
pub struct Scripted {
    pub mem: MemDevice,
    pub block_writes: std::sync::atomic::AtomicBool,
    pub blocked: std::sync::atomic::AtomicBool,
    pub syncs_left: std::sync::atomic::AtomicI64,
    /// The most bytes one `write_batch` call has carried.
    pub max_batch: std::sync::atomic::AtomicUsize,
}

impl Scripted {
    pub fn new(mem: MemDevice) -> Arc<Scripted> {
        Arc::new(Scripted {
            mem,
            block_writes: false.into(),
            blocked: false.into(),
            syncs_left: (-1).into(),
            max_batch: 0.into(),
        })
    }
    fn gate(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        while self.block_writes.load(SeqCst) {
            self.blocked.store(true, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    /// Wait until a write is held at the gate; panics after 30 s, so a
    /// test whose writes never come fails instead of hanging.
    pub fn wait_blocked(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.blocked.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "no write reached the gate in 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Device for Scripted {
    fn info(&self) -> &masse::device::DeviceInfo {
        self.mem.info()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.mem.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.gate();
        self.mem.write_at(buf, offset)
    }
    fn write_batch(&self, ops: &[(u64, &[u8])]) -> std::io::Result<()> {
        self.gate();
        let bytes = ops.iter().map(|o| o.1.len()).sum();
        self.max_batch
            .fetch_max(bytes, std::sync::atomic::Ordering::SeqCst);
        self.mem.write_batch(ops)
    }
    fn sync(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let left = self.syncs_left.load(SeqCst);
        if left == 0 {
            return Err(std::io::Error::other("power failed before the sync"));
        }
        if left > 0 {
            self.syncs_left.fetch_sub(1, SeqCst);
        }
        self.mem.sync()
    }
    fn discard(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.mem.discard(offset, len)
    }
    fn counters(&self) -> &masse::device::IoCounters {
        self.mem.counters()
    }
}
