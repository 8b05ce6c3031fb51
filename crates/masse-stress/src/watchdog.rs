//! Hang watchdog for stress runs: every operation a worker starts is
//! registered with its start time; an operation that has not finished after
//! the timeout is a failure, reported with the engine's write-path state
//! (`Db::debug_state`: group-commit queue and leader, pad ring, bands,
//! writer queue) and a dump of the process's threads.
//!
//! A stuck thread cannot be stopped. With a [`HangHook`] the hook is called
//! (a test can unblock what it blocked) and the run fails once the operation
//! returns; without one, the report is printed and the process exits with
//! [`EXIT_HANG`] — a run that waits forever finds nothing.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Exit code of a process whose stress run hung (the stress failure code).
pub const EXIT_HANG: i32 = 5;

/// What the watchdog found.
#[derive(Clone, Debug)]
pub struct HangReport {
    /// The operation that did not finish.
    pub op: String,
    /// Worker slot it ran in.
    pub slot: usize,
    /// How long it had been running.
    pub seconds: f64,
    /// Other operations in progress.
    pub others: Vec<String>,
    /// `Db::debug_state()` at that moment.
    pub debug_state: String,
    /// The process's threads ([`thread_dump`]).
    pub threads: String,
}

impl fmt::Display for HangReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "hang: {} (worker {}) has not finished after {:.3} s",
            self.op, self.slot, self.seconds
        )?;
        for o in &self.others {
            writeln!(f, "  also in progress: {o}")?;
        }
        writeln!(f, "  engine state: {}", self.debug_state)?;
        write!(f, "  threads:\n{}", self.threads)
    }
}

/// Called once when a hang is found.
#[derive(Clone)]
pub struct HangHook(pub Arc<dyn Fn(&HangReport) + Send + Sync>);

impl fmt::Debug for HangHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HangHook")
    }
}

struct Slot {
    /// Start of the operation in µs since the watch began, plus one (0: idle).
    started: AtomicU64,
    what: Mutex<String>,
}

/// The operations in progress, one slot per worker.
pub struct Watch {
    t0: Instant,
    slots: Vec<Slot>,
}

impl Watch {
    /// A watch over `n` workers.
    pub fn new(n: usize) -> Watch {
        Watch {
            t0: Instant::now(),
            slots: (0..n)
                .map(|_| Slot {
                    started: AtomicU64::new(0),
                    what: Mutex::new(String::new()),
                })
                .collect(),
        }
    }

    /// Worker `i` starts `what`.
    pub fn begin(&self, i: usize, what: impl FnOnce() -> String) {
        if let Some(s) = self.slots.get(i) {
            *s.what.lock().unwrap_or_else(|p| p.into_inner()) = what();
            s.started
                .store(self.t0.elapsed().as_micros() as u64 + 1, SeqCst);
        }
    }

    /// Worker `i` finished its operation.
    pub fn end(&self, i: usize) {
        if let Some(s) = self.slots.get(i) {
            s.started.store(0, SeqCst);
        }
    }

    /// Operations in progress: (slot, running for, what), longest first.
    pub fn in_progress(&self) -> Vec<(usize, Duration, String)> {
        let now = self.t0.elapsed().as_micros() as u64 + 1;
        let mut v: Vec<_> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let st = s.started.load(SeqCst);
                (st != 0).then(|| {
                    let what = s.what.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    (i, Duration::from_micros(now.saturating_sub(st)), what)
                })
            })
            .collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.1));
        v
    }

    /// The longest-running operation, if it has run longer than `timeout`.
    pub fn stalled(&self, timeout: Duration) -> Option<(usize, Duration, String)> {
        self.in_progress()
            .into_iter()
            .next()
            .filter(|(_, d, _)| *d > timeout)
    }
}

/// Builds the report for a stalled operation.
pub fn report(watch: &Watch, stalled: (usize, Duration, String), db: &masse::Db) -> HangReport {
    let others = watch
        .in_progress()
        .into_iter()
        .filter(|(i, _, _)| *i != stalled.0)
        .map(|(i, d, w)| format!("{w} (worker {i}, {:.3} s)", d.as_secs_f64()))
        .collect();
    HangReport {
        op: stalled.2,
        slot: stalled.0,
        seconds: stalled.1.as_secs_f64(),
        others,
        debug_state: db.debug_state(),
        threads: thread_dump(),
    }
}

/// One line per thread of this process: id, name, state, the kernel function
/// it waits in, and its kernel stack when readable (`/proc/self/task/*`).
pub fn thread_dump() -> String {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return "    (no /proc/self/task)\n".into();
    };
    let mut out = String::new();
    let mut tasks: Vec<_> = dir.flatten().map(|e| e.path()).collect();
    tasks.sort();
    for t in tasks {
        let read = |f: &str| std::fs::read_to_string(t.join(f)).unwrap_or_default();
        let tid = t
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let stat = read("stat");
        // The state follows the parenthesised name: "pid (comm) S ...".
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("?");
        let stack: Vec<String> = read("stack")
            .lines()
            .take(2)
            .map(|l| l.split_whitespace().nth(1).unwrap_or(l).to_string())
            .collect();
        out.push_str(&format!(
            "    {tid:>7} {:16} {state} wchan {:24} {}\n",
            read("comm").trim(),
            read("wchan").trim(),
            stack.join(" < ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_finds_the_oldest_operation() {
        let w = Watch::new(3);
        w.begin(1, || "put key 7".into());
        std::thread::sleep(Duration::from_millis(20));
        w.begin(2, || "get key 8".into());
        assert!(w.stalled(Duration::from_secs(5)).is_none());
        let (slot, d, what) = w.stalled(Duration::from_millis(10)).expect("stalled");
        assert_eq!((slot, what.as_str()), (1, "put key 7"));
        assert!(d >= Duration::from_millis(20));
        w.end(1);
        assert_eq!(w.in_progress().len(), 1);
        assert!(
            thread_dump().contains(&format!("{}", std::process::id())) || !thread_dump().is_empty()
        );
    }
}
