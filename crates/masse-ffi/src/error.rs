//! Status codes, the per-thread error message, and the guard every entry point
//! runs its body in (no panic crosses into C).

use masse::vfile::VfsError;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every call. `MASSE_OK` is 0; anything else comes with a message
/// from `masse_last_error` on the same thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum masse_status {
    /// Success.
    MASSE_OK = 0,
    /// No such key, file or directory (ENOENT). Also the end of an iteration.
    MASSE_NOT_FOUND = 1,
    /// The name already exists (EEXIST).
    MASSE_EXISTS = 2,
    /// A directory to remove or replace still has entries (ENOTEMPTY).
    MASSE_NOT_EMPTY = 3,
    /// A directory was expected (ENOTDIR).
    MASSE_NOT_DIR = 4,
    /// The call does not apply to a directory (EISDIR).
    MASSE_IS_DIR = 5,
    /// A bad argument: a NULL pointer, a malformed path or option, an oversized
    /// key or value, a name over 255 bytes (EINVAL, ENAMETOOLONG).
    MASSE_INVALID = 6,
    /// A file would grow past 1 TiB (EFBIG).
    MASSE_FILE_TOO_LARGE = 7,
    /// The pool is full (ENOSPC). Deletes still work.
    MASSE_NO_SPACE = 8,
    /// A checksum or structure check failed; no data was returned (EIO).
    MASSE_CORRUPT = 9,
    /// A device I/O error (EIO).
    MASSE_IO = 10,
    /// Held by someone else: a lock taken, a device in use, files still open at
    /// pool close (EBUSY).
    MASSE_BUSY = 11,
    /// The devices are not a masse pool, not one pool, or already formatted.
    MASSE_NOT_A_POOL = 12,
    /// The pool is closed or failed; reopen it.
    MASSE_CLOSED = 13,
    /// A bug inside masse (a caught panic). The pool may be unusable.
    MASSE_INTERNAL = 14,
}

pub use masse_status::*;

/// An error on its way to C: a status and a message.
pub(crate) struct Fail {
    pub status: masse_status,
    pub msg: String,
}

pub(crate) type R<T> = Result<T, Fail>;

pub(crate) fn fail(status: masse_status, msg: impl Into<String>) -> Fail {
    Fail {
        status,
        msg: msg.into(),
    }
}

/// The status of an engine error.
fn engine_status(e: &masse::Error) -> masse_status {
    use masse::Error as E;
    match e {
        E::Io { .. } => MASSE_IO,
        E::Corruption(_) => MASSE_CORRUPT,
        E::NoSpace(_) => MASSE_NO_SPACE,
        E::InvalidKey { .. } | E::ValueTooLarge { .. } | E::TooLarge { .. } => MASSE_INVALID,
        E::InvalidConfig(_) => MASSE_INVALID,
        E::NotMasse { .. } | E::FormatTooNew { .. } | E::Mismatch(_) => MASSE_NOT_A_POOL,
        E::MissingDevice(_) | E::AlreadyFormatted { .. } => MASSE_NOT_A_POOL,
        E::Closed(_) => MASSE_CLOSED,
        // Variants added to the (non-exhaustive) engine error later: an I/O
        // failure as far as C can tell, with the engine's own message.
        _ => MASSE_IO,
    }
}

impl From<masse::Error> for Fail {
    fn from(e: masse::Error) -> Fail {
        fail(engine_status(&e), e.to_string())
    }
}

impl From<VfsError> for Fail {
    fn from(e: VfsError) -> Fail {
        let status = match &e {
            VfsError::NotFound => MASSE_NOT_FOUND,
            VfsError::Exists => MASSE_EXISTS,
            VfsError::NotEmpty => MASSE_NOT_EMPTY,
            VfsError::NotDir => MASSE_NOT_DIR,
            VfsError::IsDir => MASSE_IS_DIR,
            VfsError::NameTooLong(_) | VfsError::Invalid(_) => MASSE_INVALID,
            VfsError::FileTooLarge => MASSE_FILE_TOO_LARGE,
            VfsError::NoSpace(_) => MASSE_NO_SPACE,
            VfsError::Corrupt(_) => MASSE_CORRUPT,
            VfsError::Engine(inner) => engine_status(inner),
            _ => MASSE_IO,
        };
        fail(status, e.to_string())
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: &str) {
    // A message with a NUL in it (from a key or a path) is cut there.
    let cut = msg.split('\0').next().unwrap_or_default();
    let c = CString::new(cut).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Run an entry point's body: its error becomes a status plus the thread's
/// message, and a panic becomes `MASSE_INTERNAL` instead of unwinding into C.
pub(crate) fn guard(f: impl FnOnce() -> R<()>) -> masse_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MASSE_OK,
        Ok(Err(e)) => {
            set_last(&e.msg);
            e.status
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last(&format!(
                "internal error in masse (a bug, please report): {what}"
            ));
            MASSE_INTERNAL
        }
    }
}

/// The message of the last failed call on this thread ("" if none). Valid until
/// the next masse call on the same thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn masse_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The status with code `code`, if there is one (C may pass any int).
fn status_of(code: i32) -> Option<masse_status> {
    const ALL: [masse_status; 15] = [
        MASSE_OK,
        MASSE_NOT_FOUND,
        MASSE_EXISTS,
        MASSE_NOT_EMPTY,
        MASSE_NOT_DIR,
        MASSE_IS_DIR,
        MASSE_INVALID,
        MASSE_FILE_TOO_LARGE,
        MASSE_NO_SPACE,
        MASSE_CORRUPT,
        MASSE_IO,
        MASSE_BUSY,
        MASSE_NOT_A_POOL,
        MASSE_CLOSED,
        MASSE_INTERNAL,
    ];
    ALL.into_iter().find(|s| *s as i32 == code)
}

/// A static, human-readable name of a status code ("MASSE_NOT_FOUND", ...;
/// "unknown" for a code that is none).
#[no_mangle]
pub extern "C" fn masse_status_name(code: i32) -> *const c_char {
    let Some(s) = status_of(code) else {
        return b"unknown\0".as_ptr().cast();
    };
    let n: &'static [u8] = match s {
        MASSE_OK => b"MASSE_OK\0",
        MASSE_NOT_FOUND => b"MASSE_NOT_FOUND\0",
        MASSE_EXISTS => b"MASSE_EXISTS\0",
        MASSE_NOT_EMPTY => b"MASSE_NOT_EMPTY\0",
        MASSE_NOT_DIR => b"MASSE_NOT_DIR\0",
        MASSE_IS_DIR => b"MASSE_IS_DIR\0",
        MASSE_INVALID => b"MASSE_INVALID\0",
        MASSE_FILE_TOO_LARGE => b"MASSE_FILE_TOO_LARGE\0",
        MASSE_NO_SPACE => b"MASSE_NO_SPACE\0",
        MASSE_CORRUPT => b"MASSE_CORRUPT\0",
        MASSE_IO => b"MASSE_IO\0",
        MASSE_BUSY => b"MASSE_BUSY\0",
        MASSE_NOT_A_POOL => b"MASSE_NOT_A_POOL\0",
        MASSE_CLOSED => b"MASSE_CLOSED\0",
        MASSE_INTERNAL => b"MASSE_INTERNAL\0",
    };
    n.as_ptr().cast()
}

/// The errno closest to a status code (0 for `MASSE_OK`, EINVAL for a code
/// that is none), for POSIX-style callers.
#[no_mangle]
pub extern "C" fn masse_status_errno(code: i32) -> i32 {
    let Some(s) = status_of(code) else {
        return libc::EINVAL;
    };
    match s {
        MASSE_OK => 0,
        MASSE_NOT_FOUND => libc::ENOENT,
        MASSE_EXISTS => libc::EEXIST,
        MASSE_NOT_EMPTY => libc::ENOTEMPTY,
        MASSE_NOT_DIR => libc::ENOTDIR,
        MASSE_IS_DIR => libc::EISDIR,
        MASSE_INVALID => libc::EINVAL,
        MASSE_FILE_TOO_LARGE => libc::EFBIG,
        MASSE_NO_SPACE => libc::ENOSPC,
        MASSE_CORRUPT | MASSE_IO | MASSE_INTERNAL => libc::EIO,
        MASSE_BUSY => libc::EBUSY,
        MASSE_NOT_A_POOL => libc::EINVAL,
        MASSE_CLOSED => libc::EBADF,
    }
}
