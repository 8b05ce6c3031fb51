//! The progress bar of long workload phases (`masse demo`, `masse bench`): drawn on
//! stderr when it is a terminal, hidden otherwise so logs stay clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar named `prefix`: over milliseconds of a timed phase (the message shows the
/// operations done), or over `total` operations.
pub fn bar(prefix: &str, timed_secs: Option<f64>, total: u64) -> ProgressBar {
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
