//! A read of part of a file chunk fetches only the pieces holding it (file layer
//! format 2), not the whole chunk: what makes a database's 4 KiB block read, through
//! `masse mount` or the C API, cost about 4 KiB of engine reads with 16 KiB chunks.

use crate::common;

use common::{opts, MemPool};
use masse::vfile::{Vfs, VfsOptions, ROOT_INO};
use masse::Db;
use std::sync::Arc;

#[test]
fn block_read_fetches_only_its_pieces() {
    let pool = MemPool::tiered(64 << 20, 256 << 20);
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let vo = VfsOptions {
        chunk_size: 16384,
        writeback_interval: None,
        ..Default::default()
    };
    let v = Vfs::open(db.clone(), vo).unwrap();
    let f = v.create(ROOT_INO, b"sst", 0o644, 0, 0).unwrap();
    let blob: Vec<u8> = (0..65536u32).map(|i| (i * 31 % 253) as u8).collect();
    v.write(f.ino, 0, &blob).unwrap();
    v.fsync(f.ino).unwrap(); // out of the write-back buffer, into the engine

    for (off, len) in [(5000u64, 4096usize), (16384, 4096), (30000, 5000), (1, 1)] {
        let before = db.stats().user_bytes_read;
        let got = v.read(f.ino, off, len).unwrap();
        let fetched = db.stats().user_bytes_read - before;
        assert_eq!(
            got,
            &blob[off as usize..off as usize + len],
            "bytes at {off}"
        );
        // Whole 1 KiB pieces (+4 bytes of crc each) around the range, at most.
        let pieces = (off as usize + len).div_ceil(1024) - off as usize / 1024;
        assert!(
            fetched as usize <= pieces * 1028,
            "read of {len} at {off} fetched {fetched} bytes (a whole chunk is 16384)"
        );
        assert!(
            fetched as usize >= len,
            "{fetched} < {len}: not read from the engine?"
        );
    }
}

/// A file layer made before piece checksums (superblock version 1: bare chunk
/// bytes, whole-chunk reads) keeps working: written, read in parts, reopened.
#[test]
fn format_1_file_layer_still_reads_and_writes() {
    let pool = MemPool::tiered(64 << 20, 256 << 20);
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let vo = || VfsOptions {
        chunk_size: 4096,
        writeback_interval: None,
        ..Default::default()
    };
    Vfs::open(db.clone(), vo()).unwrap().close().unwrap();
    // Rewrite the superblock as version 1: magic(8) version(4) chunk(4) ino limit(8).
    let skey = b"\0vfS".to_vec();
    let mut sup = db.get(&skey).unwrap().expect("superblock");
    assert_eq!(u32::from_le_bytes(sup[8..12].try_into().unwrap()), 2);
    sup.truncate(24);
    sup[8..12].copy_from_slice(&1u32.to_le_bytes());
    db.put(&skey, &sup).unwrap();

    let blob: Vec<u8> = (0..20_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let v = Vfs::open(db.clone(), vo()).unwrap();
    let f = v.create(ROOT_INO, b"old", 0o644, 0, 0).unwrap();
    v.write(f.ino, 0, &blob).unwrap();
    v.fsync(f.ino).unwrap();
    let before = db.stats().user_bytes_read;
    assert_eq!(v.read(f.ino, 5000, 100).unwrap(), &blob[5000..5100]);
    // Version 1 reads the whole 4 KiB chunk: the layout is unchanged.
    assert_eq!(db.stats().user_bytes_read - before, 4096);
    v.close().unwrap();
    drop(v);
    let v = Vfs::open(db.clone(), vo()).unwrap();
    let f = v.lookup(ROOT_INO, b"old").unwrap();
    assert_eq!(v.read(f.ino, 0, blob.len()).unwrap(), blob);
    assert_eq!(db.get(&skey).unwrap().unwrap()[8..12], 1u32.to_le_bytes());
}
