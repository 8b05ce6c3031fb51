//! Errors of the file layer, each with the errno a POSIX face returns for it.

/// Everything a file-layer call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfsError {
    /// No such file, directory or inode (ENOENT).
    #[error("no such file or directory")]
    NotFound,
    /// The name already exists (EEXIST).
    #[error("file exists")]
    Exists,
    /// A directory to remove or replace still has entries (ENOTEMPTY).
    #[error("directory not empty")]
    NotEmpty,
    /// A directory was expected (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// The operation does not apply to a directory (EISDIR).
    #[error("is a directory")]
    IsDir,
    /// A name longer than [`super::MAX_NAME_LEN`] bytes (ENAMETOOLONG).
    #[error("file name too long ({0} bytes, at most 255)")]
    NameTooLong(usize),
    /// An argument is not acceptable: an empty name, `.`/`..`, a `/` or NUL in a
    /// name, a rename of a directory into itself, an unsupported flag (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A file would grow past [`super::MAX_FILE_SIZE`] (EFBIG).
    #[error("file too large")]
    FileTooLarge,
    /// The pool is full (ENOSPC). Deletes still work.
    #[error("no space left on the pool: {0}")]
    NoSpace(String),
    /// A checksum or structure check failed; the data is not returned (EIO).
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// Any other failure of the engine (EIO): a device error, a closed pool.
    #[error("storage engine error: {0}")]
    Engine(crate::Error),
}

impl VfsError {
    /// The errno a POSIX face (FUSE) should return.
    pub fn errno(&self) -> i32 {
        match self {
            VfsError::NotFound => libc::ENOENT,
            VfsError::Exists => libc::EEXIST,
            VfsError::NotEmpty => libc::ENOTEMPTY,
            VfsError::NotDir => libc::ENOTDIR,
            VfsError::IsDir => libc::EISDIR,
            VfsError::NameTooLong(_) => libc::ENAMETOOLONG,
            VfsError::Invalid(_) => libc::EINVAL,
            VfsError::FileTooLarge => libc::EFBIG,
            VfsError::NoSpace(_) => libc::ENOSPC,
            VfsError::Corrupt(_) | VfsError::Engine(_) => libc::EIO,
        }
    }
}

impl VfsError {
    /// The same error, to report again later (a write-back failure reported by the
    /// file's next fsync); engine errors keep their message and errno.
    pub(crate) fn again(&self) -> VfsError {
        match self {
            VfsError::NotFound => VfsError::NotFound,
            VfsError::Exists => VfsError::Exists,
            VfsError::NotEmpty => VfsError::NotEmpty,
            VfsError::NotDir => VfsError::NotDir,
            VfsError::IsDir => VfsError::IsDir,
            VfsError::NameTooLong(n) => VfsError::NameTooLong(*n),
            VfsError::Invalid(m) => VfsError::Invalid(m),
            VfsError::FileTooLarge => VfsError::FileTooLarge,
            VfsError::NoSpace(m) => VfsError::NoSpace(m.clone()),
            VfsError::Corrupt(m) => VfsError::Corrupt(m.clone()),
            VfsError::Engine(e) => VfsError::Engine(crate::Error::io(
                "the file layer",
                "writing buffered data",
                std::io::Error::other(e.to_string()),
            )),
        }
    }
}

impl From<crate::Error> for VfsError {
    fn from(e: crate::Error) -> VfsError {
        match e {
            crate::Error::NoSpace(m) => VfsError::NoSpace(m),
            crate::Error::Corruption(m) => VfsError::Corrupt(m),
            other => VfsError::Engine(other),
        }
    }
}

/// Result alias of the file layer.
pub type VfsResult<T> = std::result::Result<T, VfsError>;
