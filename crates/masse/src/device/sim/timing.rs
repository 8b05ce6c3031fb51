//! The drive's time model: every die, channel and the host link is a resource
//! that is busy until some instant; an operation starts when its resource is
//! free and keeps it busy for its duration. A read queued on a die that is
//! programming or erasing waits for it: that is where NAND read tails come from.
//!
//! Times are nanoseconds on the device's clock (virtual, or time since the
//! device was created in real-time mode).

/// Busy-until instants of the drive's resources.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    die_busy: Vec<u64>,
    /// Scheduled (start, end) of each die's queued operations, oldest first
    /// (pruned as time passes): a read needs to know which one is in progress.
    die_ops: Vec<std::collections::VecDeque<(u64, u64)>>,
    /// Bytes written to each die's page buffer but not yet programmed: a die
    /// programs a whole program unit at once.
    die_pending: Vec<u64>,
    chan_busy: Vec<u64>,
    link_busy: u64,
    channels: u32,
    chan_bw: u64,
    link_bw: u64,
    /// Nanoseconds dies spent on GC work (reads, programs, erases).
    pub gc_ns: u64,
}

/// Nanoseconds to move `bytes` at `bw` bytes/s (at least 1 ns for non-empty).
fn xfer_ns(bytes: u64, bw: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    ((bytes as u128 * 1_000_000_000u128) / bw.max(1) as u128).max(1) as u64
}

impl Timing {
    pub fn new(dies: u32, channels: u32, chan_bw: u64, link_bw: u64) -> Timing {
        Timing {
            die_busy: vec![0; dies as usize],
            die_ops: vec![std::collections::VecDeque::new(); dies as usize],
            die_pending: vec![0; dies as usize],
            chan_busy: vec![0; channels.max(1) as usize],
            link_busy: 0,
            channels: channels.max(1),
            chan_bw,
            link_bw,
            gc_ns: 0,
        }
    }

    /// Occupy die `die` for `dur` from `at` at the earliest; returns the end.
    pub fn die_op(&mut self, die: u32, at: u64, dur: u64, gc: bool) -> u64 {
        let d = die as usize;
        let start = at.max(self.die_busy[d]);
        self.die_busy[d] = start + dur;
        let q = &mut self.die_ops[d];
        while q.front().is_some_and(|&(_, e)| e <= at) {
            q.pop_front();
        }
        q.push_back((start, start + dur));
        if gc {
            self.gc_ns += dur;
        }
        start + dur
    }

    /// A host read on `die` arriving at `at`: the controller puts it ahead of
    /// queued programs, erases and GC copies, but it must wait for the
    /// operation in progress (no program/erase suspend). Everything queued
    /// behind it slips by `dur`. Returns when the sense is done.
    pub fn die_read(&mut self, die: u32, at: u64, dur: u64) -> u64 {
        let d = die as usize;
        let q = &mut self.die_ops[d];
        while q.front().is_some_and(|&(_, e)| e <= at) {
            q.pop_front();
        }
        let start = match q.front() {
            Some(&(s, e)) if s <= at => e,
            _ => at,
        };
        let end = start + dur;
        // Ops starting at or after the read's start move back by `dur`.
        for op in q.iter_mut() {
            if op.0 >= start {
                op.0 += dur;
                op.1 += dur;
            }
        }
        if self.die_busy[d] >= start {
            self.die_busy[d] += dur;
        } else {
            self.die_busy[d] = end;
        }
        // Insert the read where it runs (after the in-progress op).
        let pos = q.iter().position(|&(s, _)| s >= end).unwrap_or(q.len());
        q.insert(pos, (start, end));
        end
    }

    /// The die that will be free first (ties: the lowest index at or after `from`).
    pub fn least_busy(&self, from: u32) -> u32 {
        let n = self.die_busy.len() as u32;
        let mut best = from % n;
        for i in 0..n {
            let d = (from + i) % n;
            if self.die_busy[d as usize] < self.die_busy[best as usize] {
                best = d;
            }
        }
        best
    }

    /// Add `bytes` to a die's page buffer; when a program unit is full, the
    /// die programs it (busy `t_prog`). Returns when the die will be done with
    /// everything scheduled so far.
    pub fn program(
        &mut self,
        die: u32,
        at: u64,
        bytes: u64,
        unit: u64,
        t_prog: u64,
        gc: bool,
    ) -> u64 {
        let d = die as usize;
        self.die_pending[d] += bytes;
        let mut end = self.die_busy[d].max(at);
        while self.die_pending[d] >= unit.max(1) {
            self.die_pending[d] -= unit.max(1);
            end = self.die_op(die, at, t_prog, gc);
        }
        end
    }

    /// Transfer `bytes` over the channel of `die`, starting at `at` at the earliest.
    pub fn chan_xfer(&mut self, die: u32, at: u64, bytes: u64) -> u64 {
        let c = &mut self.chan_busy[(die % self.channels) as usize];
        let start = at.max(*c);
        *c = start + xfer_ns(bytes, self.chan_bw);
        *c
    }

    /// Transfer `bytes` over the host link, starting at `at` at the earliest.
    pub fn link_xfer(&mut self, at: u64, bytes: u64) -> u64 {
        let start = at.max(self.link_busy);
        self.link_busy = start + xfer_ns(bytes, self.link_bw);
        self.link_busy
    }

    /// When every resource is idle.
    pub fn idle_at(&self) -> u64 {
        self.die_busy
            .iter()
            .chain(self.chan_busy.iter())
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.link_busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wait_behind_programs_on_the_same_die() {
        let mut t = Timing::new(2, 1, 1_000_000_000, 1_000_000_000);
        // A full program unit on die 0 at t=0 keeps it busy 1000 ns.
        assert_eq!(t.program(0, 0, 64, 64, 1000, false), 1000);
        // A queued op on die 0 at t=10 starts at 1000; on die 1 at once.
        assert_eq!(t.die_op(0, 10, 50, false), 1050);
        assert_eq!(t.die_op(1, 10, 50, false), 60);
        // A host read at t=20 waits for the program in progress only, then
        // runs before the queued op, which slips.
        assert_eq!(t.die_read(0, 20, 30), 1030);
        assert_eq!(t.die_op(0, 20, 10, false), 1090);
        // Half a unit does not program yet.
        assert_eq!(t.program(1, 100, 32, 64, 1000, false), 100);
        assert_eq!(t.program(1, 100, 32, 64, 1000, false), 1100);
    }
}
