//! The log: the engine's `tracing` events (open and recovery, checkpoints, GC
//! passes, write stalls, corruption, device errors, the reason a pool failed) and
//! the commands' own, written to stderr as text or JSON lines.

use crate::error::{CliError, CliResult};
use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line per event for people: time, level, target, message, fields.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields) for log shippers.
    Json,
}

/// The default: warnings and errors only, so short commands stay quiet; a
/// failed pool is an error and always shows.
pub const DEFAULT_LEVEL: &str = "warn";

/// Install the subscriber. `level` (from --log-level) wins over `RUST_LOG`; both
/// take a level (error, warn, info, debug, trace) or `tracing` directives such as
/// `masse=debug,masse_cli=info`.
pub fn init(level: Option<&str>, format: LogFormat) -> CliResult<()> {
    let filter =
        match level {
            Some(l) => EnvFilter::try_new(l)
                .map_err(|e| CliError::new(format!("--log-level {l:?}: {e}")))?,
            None => match std::env::var("RUST_LOG") {
                Ok(v) if !v.is_empty() => EnvFilter::try_new(&v)
                    .map_err(|e| CliError::new(format!("RUST_LOG={v:?}: {e}")))?,
                _ => EnvFilter::new(DEFAULT_LEVEL),
            },
        };
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    let r = match format {
        LogFormat::Text => b.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => b.json().with_ansi(false).try_init(),
    };
    r.map_err(|e| CliError::new(format!("cannot start logging: {e}")))
}
