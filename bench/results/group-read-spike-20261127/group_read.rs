//! SPIKE (issue 18 item 1, docs/plans/issue18-batched-reads.md §6 B): single
//! reads of many threads joined into one io_uring submission. Not for merging.
//! Lives at crates/masse/src/device/group_read.rs with spike.patch applied.

use super::file::{ring_wait_pub, RawOpPub};
use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use std::cell::{RefCell, UnsafeCell};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::Thread;

pub(super) struct Slot {
    op: UnsafeCell<RawOpPub>,
    done: AtomicBool,
    owner: Thread,
}

#[derive(Clone, Copy)]
struct SlotRef(*const Slot);
// SAFETY: a slot lives until its owner sees `done`.
unsafe impl Send for SlotRef {}

pub(super) struct Group {
    depth: u32,
    in_flight: AtomicU32,
    q: Mutex<(Vec<SlotRef>, bool)>,
    pub joined: AtomicU64,
    pub submits: AtomicU64,
}

thread_local! {
    static RING: RefCell<Option<IoUring>> = RefCell::new(IoUring::new(64).ok());
}

impl Group {
    pub(super) fn from_env() -> Option<Group> {
        let depth: u32 = std::env::var("MASSE_JOIN_DEPTH").ok()?.parse().ok()?;
        Some(Group {
            depth,
            in_flight: AtomicU32::new(0),
            q: Mutex::new((Vec::new(), false)),
            joined: AtomicU64::new(0),
            submits: AtomicU64::new(0),
        })
    }

    /// Read `op` directly or joined; returns the finished op.
    pub(super) fn read(
        &self,
        fd: i32,
        op: RawOpPub,
        direct: impl FnOnce(RawOpPub) -> RawOpPub,
    ) -> RawOpPub {
        let n = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let collecting = self.q.lock().1;
        let r = if n < self.depth && !collecting {
            direct(op)
        } else {
            self.join(fd, op)
        };
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        r
    }

    fn join(&self, fd: i32, op: RawOpPub) -> RawOpPub {
        let slot = Slot {
            op: UnsafeCell::new(op),
            done: AtomicBool::new(false),
            owner: std::thread::current(),
        };
        self.joined.fetch_add(1, Ordering::Relaxed);
        let lead = {
            let mut q = self.q.lock();
            q.0.push(SlotRef(&slot));
            !std::mem::replace(&mut q.1, true)
        };
        if lead {
            RING.with(|r| {
                let mut r = r.borrow_mut();
                let ring = r.as_mut().expect("spike: ring");
                self.lead(fd, ring, &slot);
            });
        } else {
            while !slot.done.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
        slot.op.into_inner()
    }

    fn lead(&self, fd: i32, ring: &mut IoUring, mine: &Slot) {
        let mut waiting: Vec<SlotRef> = Vec::new();
        let mut in_ring = 0usize;
        let mut handed = false;
        loop {
            if !handed {
                let mut q = self.q.lock();
                waiting.append(&mut q.0);
                if mine.done.load(Ordering::Acquire) {
                    q.1 = false;
                    handed = true;
                }
            }
            {
                let mut sq = ring.submission();
                while let Some(s) = waiting.pop() {
                    // SAFETY: the slot is alive until done.
                    let op = unsafe { &*(*s.0).op.get() };
                    let (ptr, len, off) = op.remainder();
                    let e = opcode::Read::new(types::Fd(fd), ptr, len as u32)
                        .offset(off)
                        .build()
                        .user_data(s.0 as u64);
                    // SAFETY: buffer valid until reaped.
                    if unsafe { sq.push(&e) }.is_err() {
                        waiting.push(s);
                        break;
                    }
                    in_ring += 1;
                }
            }
            if in_ring == 0 && waiting.is_empty() {
                if handed {
                    return;
                }
                continue;
            }
            ring_wait_pub(ring, 1);
            self.submits.fetch_add(1, Ordering::Relaxed);
            let cqes: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (ud, res) in cqes {
                in_ring -= 1;
                let s = SlotRef(ud as *const Slot);
                // SAFETY: alive until done.
                let op = unsafe { &mut *(*s.0).op.get() };
                if res < 0 {
                    if (res == -libc::EINTR || res == -libc::EAGAIN) && op.retries < 10_000 {
                        op.retries += 1;
                        waiting.push(s);
                        continue;
                    }
                    op.err = Some(io::Error::from_raw_os_error(-res));
                } else if res == 0 {
                    op.err = Some(io::Error::from(io::ErrorKind::UnexpectedEof));
                } else {
                    op.done += res as usize;
                    if op.done < op.len {
                        waiting.push(s);
                        continue;
                    }
                }
                // SAFETY: alive until the store below.
                let slot = unsafe { &*s.0 };
                if std::ptr::eq(slot, mine) {
                    slot.done.store(true, Ordering::Release);
                } else {
                    let t = slot.owner.clone();
                    slot.done.store(true, Ordering::Release);
                    t.unpark();
                }
            }
        }
    }
}
