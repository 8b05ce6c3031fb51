//! Heap buffers aligned for `O_DIRECT`.
//!
//! Direct I/O requires the buffer address, the file offset and the length to be
//! multiples of the device's logical block size. Every buffer that reaches a
//! [`Device`](super::Device) on the data path is one of these.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment used for every I/O buffer: 4 KiB covers 512 B and 4 KiB sectors.
pub const IO_ALIGN: usize = 4096;

/// A zero-initialised, `IO_ALIGN`-aligned byte buffer of fixed length.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes; the allocation is rounded up to `IO_ALIGN`.
    pub fn new(len: usize) -> Self {
        let cap = round_up(len.max(1), IO_ALIGN);
        let layout = Layout::from_size_align(cap, IO_ALIGN).expect("IO_ALIGN is a power of two");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, cap }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity of the underlying allocation (a multiple of `IO_ALIGN`).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Change the visible length without reallocating; `len` must fit the capacity.
    /// Bytes that become visible keep whatever they held (zero when never written).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "AlignedBuf::set_len beyond capacity");
        self.len = len;
    }

    /// Zero the whole buffer.
    pub fn zero(&mut self) {
        // SAFETY: ptr is valid for cap bytes.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.cap) };
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.cap, IO_ALIGN).expect("valid layout");
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len bytes and initialised (zeroed at alloc).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// Round `v` up to a multiple of `a` (a power of two).
pub const fn round_up(v: usize, a: usize) -> usize {
    (v + a - 1) & !(a - 1)
}

/// Round `v` up to a multiple of `a` (a power of two), 64-bit.
pub const fn round_up64(v: u64, a: u64) -> u64 {
    (v + a - 1) & !(a - 1)
}

/// Round `v` down to a multiple of `a` (a power of two), 64-bit.
pub const fn round_down64(v: u64, a: u64) -> u64 {
    v & !(a - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let b = AlignedBuf::new(10_000);
        assert_eq!(b.as_ptr() as usize % IO_ALIGN, 0);
        assert_eq!(b.len(), 10_000);
        assert_eq!(b.capacity(), 12_288);
        assert!(b.iter().all(|&x| x == 0));
    }
}
