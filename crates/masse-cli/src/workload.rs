//! What the workload commands (`masse demo`, `masse bench`) share: the count
//! argument, latency histograms, report output, and the driver that runs one
//! phase on several threads while a progress bar follows the operations done.
//! The bar is drawn on stderr when it is a terminal, hidden otherwise so logs
//! stay clean.

use crate::error::{io_err, CliError, CliResult};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A count argument (1000000, 1e6, 1e7, 200k...).
pub fn count_arg(s: &str) -> Result<u64, String> {
    masse_cli::units::parse_count(s)
}

/// A latency histogram in nanoseconds (1 ns to 60 s) with `sigfig`
/// significant digits.
pub fn new_hist(sigfig: u8) -> CliResult<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, sigfig)
        .map_err(|e| CliError::new(format!("histogram: {e}")))
}

/// Print `s` on stdout, ending the line unless it ends one already, and flush
/// (reports interleave with the progress bar and with a parent reading them).
pub fn out(s: impl AsRef<str>) {
    let mut o = std::io::stdout().lock();
    let _ = write!(o, "{}", s.as_ref());
    if !s.as_ref().ends_with('\n') {
        let _ = writeln!(o);
    }
    let _ = o.flush();
}

/// Write the JSON report `r` to `path`.
pub fn write_json(path: &Path, r: &impl serde::Serialize) -> CliResult<()> {
    let s = serde_json::to_string_pretty(r)
        .map_err(|e| CliError::new(format!("cannot encode the JSON report: {e}")))?;
    std::fs::write(path, s + "\n").map_err(|e| io_err("cannot write the JSON report to", path, e))
}

/// A bar named `prefix`: over milliseconds of a timed phase (the message shows the
/// operations done), or over `total` operations.
fn bar(prefix: &str, timed_secs: Option<f64>, total: u64) -> ProgressBar {
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10))
    } else {
        ProgressBar::hidden()
    };
    let style = if timed_secs.is_some() {
        ProgressStyle::with_template("{prefix:>12} [{elapsed_precise}] [{wide_bar}] {msg}")
    } else {
        ProgressStyle::with_template(
            "{prefix:>12} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} {per_sec} eta {eta}",
        )
    };
    pb.set_style(
        style
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb.set_length(match timed_secs {
        Some(d) => (d * 1000.0) as u64,
        None => total,
    });
    pb
}

/// One running phase: its clock, the operations its threads have published
/// and the bar that shows them.
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    timed: bool,
    done: AtomicU64,
}

impl Progress {
    /// Start the clock of a phase named `name` that runs `timed_secs` seconds
    /// or, untimed, `total` operations.
    pub fn start(name: &str, timed_secs: Option<f64>, total: u64) -> Progress {
        let bar = bar(name, timed_secs, total);
        Progress {
            bar,
            start: Instant::now(),
            timed: timed_secs.is_some(),
            done: AtomicU64::new(0),
        }
    }

    /// When the phase started.
    pub fn started(&self) -> Instant {
        self.start
    }

    fn show(&self) {
        let n = self.done.load(Relaxed);
        if self.timed {
            self.bar
                .set_position(self.start.elapsed().as_millis() as u64);
            self.bar.set_message(format!("{n} ops"));
        } else {
            self.bar.set_position(n);
        }
    }

    /// Seconds since the start; the bar is cleared.
    pub fn finish(&self) -> f64 {
        let secs = self.start.elapsed().as_secs_f64();
        self.bar.finish_and_clear();
        secs
    }
}

/// One thread's operations not yet published to its [`Progress`]: they are
/// published 64 at a time, so threads do not contend on the counter.
pub struct Ticker<'a> {
    progress: &'a Progress,
    pending: u64,
}

impl<'a> Ticker<'a> {
    /// A ticker publishing to `progress`.
    pub fn new(progress: &'a Progress) -> Ticker<'a> {
        Ticker {
            progress,
            pending: 0,
        }
    }

    /// Count `n` operations done.
    pub fn tick(&mut self, n: u64) {
        self.pending += n;
        if self.pending >= 64 {
            self.progress.done.fetch_add(self.pending, Relaxed);
            self.pending = 0;
        }
    }

    /// Publish what is still pending (at the end of the thread's work).
    pub fn flush(&mut self) {
        self.progress.done.fetch_add(self.pending, Relaxed);
        self.pending = 0;
    }
}

/// Run `work(t)` for `t` in `0..threads`, each on its own thread, updating the
/// bar of `progress` every 50 ms until all have finished. Returns their results
/// in thread order; a thread that panicked gives the error `panicked`.
pub fn run_threads<T: Send>(
    threads: usize,
    progress: &Progress,
    panicked: &str,
    work: impl Fn(usize) -> CliResult<T> + Sync,
) -> Vec<CliResult<T>> {
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || work(t))).collect();
        while !handles.iter().all(|h| h.is_finished()) {
            progress.show();
            std::thread::sleep(Duration::from_millis(50));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(CliError::new(panicked))))
            .collect()
    })
}
