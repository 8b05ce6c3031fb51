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
}

impl MemPool {
    pub fn tiered(fast: u64, cap: u64) -> MemPool {
        MemPool {
            fast: Some(MemDevice::new(fast)),
            caps: vec![MemDevice::new(cap)],
            mode: Mode::Tiered,
            segment: None,
            band: None,
        }
    }
    pub fn capacity_only(cap: u64) -> MemPool {
        MemPool {
            fast: None,
            caps: vec![MemDevice::new(cap)],
            mode: Mode::CapacityOnly,
            segment: None,
            band: None,
        }
    }
    pub fn scm_only(cap: u64) -> MemPool {
        MemPool {
            fast: None,
            caps: vec![MemDevice::new(cap)],
            mode: Mode::ScmOnly,
            segment: None,
            band: None,
        }
    }
    pub fn with_geometry(mut self, segment: u32, band: u64) -> MemPool {
        self.segment = Some(segment);
        self.band = Some(band);
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
