//! Scratch directories for test pools: a fast tier in RAM (`/dev/shm` when
//! there is one, as SCM stands in on this machine) and a capacity tier on disk.
//! Both are removed when dropped.

use std::path::Path;

pub struct Dirs {
    pub shm: tempfile::TempDir,
    pub tmp: tempfile::TempDir,
}

/// A fresh pair of directories named `prefix…`.
pub fn dirs(prefix: &str) -> Dirs {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    Dirs {
        shm: tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(base)
            .unwrap(),
        tmp: tempfile::Builder::new().prefix(prefix).tempdir().unwrap(),
    }
}
