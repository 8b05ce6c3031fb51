//! The CLI's error type: a one-line message and the process exit code.

/// Exit code of `masse get` when the key is absent.
pub const EXIT_NOT_FOUND: i32 = 1;
/// Exit code for errors (bad arguments, I/O, a refused pool...).
pub const EXIT_ERROR: i32 = 2;
/// Exit code of `masse check` when the pool has problems.
pub const EXIT_CHECK_FAILED: i32 = 3;
/// Exit code of `masse demo` when a read or the verify phase saw a wrong value.
pub const EXIT_VERIFY_FAILED: i32 = 4;

/// A failure to report on stderr as one line, and the exit code to leave with.
#[derive(Debug)]
pub struct CliError {
    pub msg: String,
    pub code: i32,
}

pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// A plain error (exit code 2).
    pub fn new(msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            code: EXIT_ERROR,
        }
    }
    /// An error with a specific exit code.
    pub fn with_code(msg: impl Into<String>, code: i32) -> CliError {
        CliError {
            msg: msg.into(),
            code,
        }
    }
    /// The message on one line.
    pub fn one_line(&self) -> String {
        self.msg.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

impl From<masse::Error> for CliError {
    fn from(e: masse::Error) -> CliError {
        CliError::new(e.to_string())
    }
}

/// An I/O error on a path, with what was being done.
pub fn io_err(what: &str, path: &std::path::Path, e: std::io::Error) -> CliError {
    CliError::new(format!("{what} {}: {e}", path.display()))
}
