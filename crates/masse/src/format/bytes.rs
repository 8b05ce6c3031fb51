//! Little-endian cursors every on-disk structure is encoded and decoded with.

use crate::error::{Error, Result};

/// Sequential little-endian writer over a byte slice.
pub(super) struct Put<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Put<'a> {
    pub(super) fn new(buf: &'a mut [u8]) -> Self {
        Put { buf, pos: 0 }
    }
    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub(super) fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub(super) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Sequential little-endian reader; every read is bounds-checked.
pub(super) struct Get<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Get<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Get { buf, pos: 0 }
    }
    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(Error::Corruption("truncated structure".into())),
        }
    }
    pub(super) fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }
    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.arr::<1>()?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub(super) fn u128(&mut self) -> Result<u128> {
        Ok(u128::from_le_bytes(self.arr()?))
    }
}

/// The little-endian `u32` at `b[at..at + 4]`.
pub(super) fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// The little-endian `u64` at `b[at..at + 8]`.
pub(super) fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
