//! What the dump/load and migrate tests share: scratch directories for test
//! pools (a fast tier in RAM, `/dev/shm` when there is one, as SCM stands in
//! on this machine, and a capacity tier on disk; both removed when dropped) and
//! what they fill pools with: numbered key-value records, a file tree and a
//! volume.

use masse::vfile::{Vfs, VfsOptions, ROOT_INO};
use masse::{vblock, Db, Options, PoolConfig};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

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

/// The value of numbered key `i`: 8 to 64 bytes that depend on `i`.
pub fn value(i: u64) -> Vec<u8> {
    let n = 8 + (i * 7919 % 57) as usize;
    (0..n).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// Put keys `k00000000` … for `0..keys`, with [`value`], in batches of 1000.
pub fn put_numbered(db: &Db, keys: u64) {
    let mut b = masse::WriteBatch::new();
    for i in 0..keys {
        b.put(format!("k{i:08}").as_bytes(), &value(i)).unwrap();
        if b.len() == 1000 {
            db.write(std::mem::take(&mut b)).unwrap();
        }
    }
    db.write(b).unwrap();
}

/// A file layer (a directory, a 300,000-byte file, an empty file, a symlink)
/// and a block volume with 12 KiB written at 0 and at 5 MiB; returns the
/// file's and the block's bytes.
pub fn add_file_and_volume(db: &Arc<Db>) -> (Vec<u8>, Vec<u8>) {
    let file: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let vfs = Vfs::open(db.clone(), VfsOptions::default()).unwrap();
    let d = vfs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).unwrap();
    let f = vfs.create(d.ino, b"file", 0o644, 0, 0).unwrap();
    vfs.open_file(f.ino).unwrap();
    vfs.write(f.ino, 0, &file).unwrap();
    vfs.release(f.ino).unwrap();
    vfs.create(ROOT_INO, b"empty-file", 0o600, 0, 0).unwrap();
    vfs.symlink(ROOT_INO, b"link", b"dir/file", 0, 0).unwrap();
    vfs.close().unwrap();
    drop(vfs);

    vblock::create_volume(db, "vol", vblock::VolumeSpec::new(8 << 20)).unwrap();
    let vol = vblock::open_volume(db.clone(), "vol").unwrap();
    let block: Vec<u8> = (0..12288u32).map(|i| (i * 13 % 256) as u8).collect();
    vol.write(0, &block).unwrap();
    vol.write(5 << 20, &block).unwrap();
    vol.flush().unwrap();
    (file, block)
}

/// Every record of the pool, by a full scan.
pub fn records(cfg: &PoolConfig) -> HashMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(cfg, Options::default()).unwrap();
    let m = db.iter().map(|r| r.unwrap()).collect();
    db.close().unwrap();
    m
}

/// What [`add_file_and_volume`] wrote, read back through the file and block
/// layers (a copied pool's).
pub fn check_file_and_volume(cfg: &PoolConfig, file: &[u8], block: &[u8]) {
    let db = Arc::new(Db::open(cfg, Options::default()).unwrap());
    let vfs = Vfs::open(db.clone(), VfsOptions::default()).unwrap();
    let d = vfs.lookup(ROOT_INO, b"dir").unwrap();
    let f = vfs.lookup(d.ino, b"file").unwrap();
    assert_eq!(f.size, file.len() as u64);
    assert_eq!(vfs.read(f.ino, 0, file.len()).unwrap(), file);
    let l = vfs.lookup(ROOT_INO, b"link").unwrap();
    assert_eq!(vfs.readlink(l.ino).unwrap(), b"dir/file");
    assert_eq!(vfs.lookup(ROOT_INO, b"empty-file").unwrap().size, 0);
    vfs.close().unwrap();
    drop(vfs);
    let vol = vblock::open_volume(db.clone(), "vol").unwrap();
    let mut buf = vec![0u8; block.len()];
    vol.read(5 << 20, &mut buf).unwrap();
    assert_eq!(buf, block);
    vol.read(1 << 20, &mut buf).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0),
        "unwritten blocks read as zeroes"
    );
    drop(vol);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
}
