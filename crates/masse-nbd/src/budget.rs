//! Memory the server buffers for clients, bounded server-wide.
//!
//! Every request holds its payload bytes (a write's data as it is read, a read's
//! reply until it is sent) from the moment its header is parsed until its reply
//! has left. A connection takes them from the [`Budget`] *before* reading the
//! payload or running the request; when the budget is spent it stops reading its
//! socket (TCP/Unix back-pressure) and waits its turn, first come first served.
//! So memory is capped by not reading, never by failing or by allocating first.
//!
//! Large buffers are anonymous mappings ([`Payload`]), returned to the system the
//! moment they are dropped: a burst of 32 MiB writes leaves no heap behind.
//!
//! Separate because it is the one resource all connections contend for; each
//! connection only asks it for bytes and gives them back.

use crate::stats::ServerStats;
use masse::device::AlignedBuf;
use std::collections::VecDeque;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// Wakes a connection's event loop from another thread (an eventfd).
pub(crate) struct Waker(OwnedFd);

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(Waker(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    pub(crate) fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd. A full counter
        // (EAGAIN) still leaves it readable, which is all a wake needs.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
    /// Reset after a wake-up (non-blocking).
    pub(crate) fn drain(&self) {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

struct Waiter {
    id: u64,
    need: usize,
    waker: Arc<Waker>,
}

#[derive(Default)]
struct BudgetState {
    used: usize,
    /// Connections waiting, in arrival order.
    waiters: VecDeque<Waiter>,
    /// Bytes set aside for a waiter that was woken and has not yet taken them.
    granted: Vec<(u64, usize)>,
}

/// The server-wide cap on buffered request and reply bytes.
pub(crate) struct Budget {
    cap: usize,
    st: Mutex<BudgetState>,
    /// `buffer_peak` and `buffer_waits` are kept here.
    stats: Arc<ServerStats>,
}

impl Budget {
    pub(crate) fn new(cap: usize, stats: Arc<ServerStats>) -> Budget {
        Budget {
            cap,
            st: Mutex::new(BudgetState::default()),
            stats,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take `need` bytes for connection `id`, or queue it to be woken through
    /// `waker` when they are set aside for it (then call again).
    pub(crate) fn acquire(&self, id: u64, need: usize, waker: &Arc<Waker>) -> bool {
        let mut s = self.lock();
        if let Some(i) = s.granted.iter().position(|g| g.0 == id) {
            let (_, g) = s.granted.swap_remove(i);
            if g >= need {
                s.used -= g - need;
                return true;
            }
            s.used -= g;
        }
        // A request bigger than the whole budget still runs, alone.
        let fits = s.used + need <= self.cap || s.used == 0;
        if fits && s.waiters.is_empty() {
            s.used += need;
            self.stats.buffer_peak.fetch_max(s.used as u64, Relaxed);
            return true;
        }
        if !s.waiters.iter().any(|w| w.id == id) {
            self.stats.buffer_waits.fetch_add(1, Relaxed);
            s.waiters.push_back(Waiter {
                id,
                need,
                waker: waker.clone(),
            });
        }
        false
    }

    /// Give back `n` bytes and set aside what the first waiters need.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut s = self.lock();
        s.used -= n.min(s.used);
        self.grant(&mut s);
    }

    /// Connection `id` is gone: drop its place in the queue and anything set aside.
    pub(crate) fn forget(&self, id: u64) {
        let mut s = self.lock();
        s.waiters.retain(|w| w.id != id);
        if let Some(i) = s.granted.iter().position(|g| g.0 == id) {
            let (_, g) = s.granted.swap_remove(i);
            s.used -= g;
        }
        self.grant(&mut s);
    }

    fn grant(&self, s: &mut BudgetState) {
        while let Some(w) = s.waiters.front() {
            if s.used + w.need > self.cap && s.used > 0 {
                break;
            }
            s.used += w.need;
            self.stats.buffer_peak.fetch_max(s.used as u64, Relaxed);
            let w = s.waiters.pop_front().expect("front exists");
            s.granted.push((w.id, w.need));
            w.waker.wake();
        }
    }

    /// Bytes in use now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.lock().used
    }
}

/// At least this many bytes: an anonymous mapping instead of the heap.
const MAP_MIN: usize = 256 << 10;

/// A zeroed, 4 KiB-aligned buffer for request payloads and read replies.
pub(crate) enum Payload {
    Heap(AlignedBuf),
    Map(Mapping),
}

impl Payload {
    pub(crate) fn new(len: usize) -> Payload {
        if len >= MAP_MIN {
            if let Some(m) = Mapping::new(len) {
                return Payload::Map(m);
            }
        }
        Payload::Heap(AlignedBuf::new(len))
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Heap(b) => b,
            Payload::Map(m) => m,
        }
    }
}

impl DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Payload::Heap(b) => b,
            Payload::Map(m) => m,
        }
    }
}

/// An anonymous private mapping of `len` bytes (unmapped on drop).
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: Mapping owns its pages exclusively, like a Vec<u8>.
unsafe impl Send for Mapping {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> Option<Mapping> {
        // SAFETY: a fresh anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast()).map(|ptr| Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is mapped readable for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Mapping {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, writable, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_grants_in_order_and_caps_use() {
        let b = Budget::new(100, Arc::new(ServerStats::default()));
        let w = Arc::new(Waker::new().unwrap());
        assert!(b.acquire(1, 60, &w));
        assert!(!b.acquire(2, 50, &w), "over the cap");
        assert!(!b.acquire(3, 10, &w), "fits, but 2 was first");
        b.release(60);
        // 2 and 3 both set aside now, in order.
        assert!(b.acquire(2, 50, &w));
        assert!(b.acquire(3, 10, &w));
        assert_eq!(b.used(), 60);
        b.forget(2);
        b.release(50);
        b.release(10);
        assert_eq!(b.used(), 0);
        // Bigger than the cap: runs alone.
        assert!(b.acquire(4, 500, &w));
        assert!(!b.acquire(5, 1, &w));
        b.forget(5);
        b.release(500);
        assert!(b.stats.buffer_peak.load(Relaxed) >= 500);
    }

    #[test]
    fn payloads_are_zeroed_and_aligned() {
        for len in [0, 4096, 300 << 10] {
            let mut p = Payload::new(len);
            assert_eq!(p.len(), len);
            assert!(p.iter().all(|&b| b == 0));
            if len > 0 {
                assert_eq!(p.as_ptr() as usize % 4096, 0);
                p[len - 1] = 7;
            }
        }
    }
}
