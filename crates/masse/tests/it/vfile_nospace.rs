//! vFile on a full pool (issue 13): new data is admitted against the free space
//! before it is buffered; a write-out that fails anyway (another writer of the
//! pool took the space meanwhile) drops the data and reports ENOSPC to the file's
//! next write, flush or fsync — never to nobody; `fallocate` reserves or refuses
//! at once; `st_blocks` counts stored chunks and survives a reopen; the inode
//! cache stays within its bound.

use crate::common;

use common::{opts, MemPool};
use masse::vfile::{SetAttr, Vfs, VfsError, VfsOptions, ROOT_INO};
use masse::{Db, Error};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn vopts() -> VfsOptions {
    VfsOptions {
        chunk_size: 4096,
        writeback_interval: None,
        ..Default::default()
    }
}

fn small_pool() -> MemPool {
    MemPool::tiered(64 << 20, 24 << 20).with_geometry(64 << 10, 1 << 20)
}

fn is_nospace<T: std::fmt::Debug>(r: Result<T, VfsError>) -> bool {
    matches!(r, Err(VfsError::NoSpace(_)))
}

/// Key-value puts of 8 KiB until the pool refuses one.
fn fill_with_keys(db: &Db, tag: &str) -> usize {
    let v = vec![7u8; 8 << 10];
    for i in 0.. {
        match db.put(format!("{tag}{i}").as_bytes(), &v) {
            Ok(()) => {}
            Err(Error::NoSpace(_)) => return i,
            Err(e) => panic!("put: {e}"),
        }
    }
    unreachable!()
}

#[test]
fn a_failed_writeback_reaches_the_writer() {
    let pool = small_pool();
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(
        db.clone(),
        VfsOptions {
            writeback_interval: Some(Duration::from_millis(1500)),
            ..vopts()
        },
    )
    .unwrap();
    let a = v.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    let b = v.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
    v.open_file(a.ino).unwrap();
    v.open_file(b.ino).unwrap();
    v.write(a.ino, 0, b"durable").unwrap();
    v.fsync(a.ino).unwrap();
    // Admitted and buffered while there was room...
    v.write(a.ino, 4096, &[1u8; 64 << 10]).unwrap();
    v.write(b.ino, 0, &[2u8; 64 << 10]).unwrap();
    // ...then another user of the pool takes all of it.
    let keys = fill_with_keys(&db, "k");
    assert!(keys > 100);
    // The write-back thread fails on both files; nothing is left buffered.
    let t = Instant::now();
    while v.stats().dirty_bytes > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "write-back never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(v.stats().writeout_errors >= 2);
    // a: the next write hears of it; b: the flush at close does. Each only once.
    assert!(is_nospace(v.write(a.ino, 0, b"x")));
    v.flush(a.ino).unwrap();
    assert!(is_nospace(v.flush(b.ino)));
    v.flush(b.ino).unwrap();
    // The files are as they were durably: the lost data is gone, not half there.
    assert_eq!(v.getattr(a.ino).unwrap().size, 7);
    assert_eq!(v.read(a.ino, 0, 100).unwrap(), b"durable");
    assert_eq!(v.getattr(b.ino).unwrap().size, 0);
    v.release(a.ino).unwrap();
    v.release(b.ino).unwrap();
    // Space comes back once the keys are deleted, and writing works again.
    for i in 0..keys {
        db.delete(format!("k{i}").as_bytes()).unwrap();
    }
    v.open_file(b.ino).unwrap();
    v.write(b.ino, 0, &[3u8; 64 << 10]).unwrap();
    v.fsync(b.ino).unwrap();
    v.release(b.ino).unwrap();
    v.close().unwrap();
    drop(v);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
    let db = Arc::new(Db::open(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db, vopts()).unwrap();
    assert_eq!(v.read(a.ino, 0, 100).unwrap(), b"durable");
    assert_eq!(v.read(b.ino, 0, 64 << 10).unwrap(), vec![3u8; 64 << 10]);
}

#[test]
fn fsync_and_limit_writeouts_report_nospace() {
    let pool = small_pool();
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(
        db.clone(),
        VfsOptions {
            max_dirty_per_file: 256 << 10,
            ..vopts()
        },
    )
    .unwrap();
    let a = v.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    v.write(a.ino, 0, &[1u8; 128 << 10]).unwrap();
    fill_with_keys(&db, "k");
    assert!(is_nospace(v.fsync(a.ino)), "fsync into a full pool");
    assert_eq!(v.getattr(a.ino).unwrap().size, 0);
    // Over the per-file limit the write itself writes out, and fails.
    v.write(a.ino, 0, &[1u8; 128 << 10]).unwrap_err();
    assert_eq!(v.stats().dirty_bytes, 0);
}

#[test]
fn writes_are_refused_before_buffering_when_the_pool_is_full() {
    let pool = small_pool();
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db.clone(), vopts()).unwrap();
    let mut kept = Vec::new();
    let data = vec![9u8; 256 << 10];
    'fill: for i in 0.. {
        let f = v
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        for k in 0..4u64 {
            match v.write(f.ino, k * data.len() as u64, &data) {
                Ok(_) => {}
                Err(VfsError::NoSpace(_)) => break 'fill,
                Err(e) => panic!("write: {e}"),
            }
        }
        match v.fsync(f.ino) {
            Ok(()) => kept.push(f.ino),
            Err(VfsError::NoSpace(_)) => break,
            Err(e) => panic!("fsync: {e}"),
        }
    }
    assert!(kept.len() >= 8, "only {} MiB fit in 24 MiB", kept.len());
    assert!(
        v.stats().writes_refused > 0,
        "the write was not refused up front"
    );
    assert_eq!(v.stats().writeout_errors, 0, "a write-out failed instead");
    let s = v.statfs();
    assert!(
        s.avail_bytes < 1 << 20,
        "statfs says {} bytes are available on a pool that refused a write",
        s.avail_bytes
    );
    for &ino in &kept {
        assert_eq!(v.read(ino, 0, 1 << 20).unwrap().len(), 1 << 20);
    }
}

#[test]
fn fallocate_reserves_or_refuses_at_once() {
    let pool = small_pool();
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db.clone(), vopts()).unwrap();
    let f = v.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    let t = Instant::now();
    assert!(is_nospace(v.fallocate(f.ino, 0, 10 << 30)));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(v.getattr(f.ino).unwrap().size, 0);
    let before = v.statfs().avail_bytes;
    v.fallocate(f.ino, 4096, 4 << 20).unwrap();
    let a = v.getattr(f.ino).unwrap();
    assert_eq!(a.size, 4096 + (4 << 20));
    assert_eq!(
        a.blocks,
        (4 << 20) / 512,
        "the hole before the range is not counted"
    );
    assert!(before - v.statfs().avail_bytes >= 4 << 20);
    assert_eq!(v.read(f.ino, 0, 8192).unwrap(), vec![0u8; 8192]);
    // Other data cannot take the reserved space; writing into it still works.
    let g = v.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
    let mut off = 0u64;
    while v.write(g.ino, off, &[5u8; 256 << 10]).is_ok() && v.fsync(g.ino).is_ok() {
        off += 256 << 10;
    }
    v.write(f.ino, 4096, &vec![6u8; 4 << 20]).unwrap();
    v.fsync(f.ino).unwrap();
    assert_eq!(v.read(f.ino, 4096, 4 << 20).unwrap(), vec![6u8; 4 << 20]);
}

#[test]
fn block_counts_are_what_is_stored_and_survive_a_reopen() {
    let pool = MemPool::tiered(64 << 20, 64 << 20);
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db.clone(), vopts()).unwrap();
    let f = v.create(ROOT_INO, b"sparse", 0o644, 0, 0).unwrap();
    let tib = 1u64 << 40;
    v.setattr(
        f.ino,
        &SetAttr {
            size: Some(tib),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().blocks, 0);
    v.write(f.ino, 1 << 30, &[1u8; 10_000]).unwrap();
    assert_eq!(
        v.getattr(f.ino).unwrap().blocks,
        3 * 8,
        "buffered: 3 chunks"
    );
    v.fsync(f.ino).unwrap();
    v.write(f.ino, 1 << 35, &[1u8; 100]).unwrap();
    v.fsync(f.ino).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().blocks, 4 * 8);
    // Zeros over a chunk make it a hole again.
    v.write(f.ino, 1 << 35, &[0u8; 100]).unwrap();
    v.fsync(f.ino).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().blocks, 3 * 8);
    // Truncating drops what is past the end.
    v.setattr(
        f.ino,
        &SetAttr {
            size: Some((1 << 30) + 4096),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().blocks, 8);
    v.close().unwrap();
    drop(v);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
    let db = Arc::new(Db::open(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db, vopts()).unwrap();
    let a = v.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), ((1 << 30) + 4096, 8));
}

#[test]
fn the_inode_cache_stays_within_its_bound() {
    let pool = MemPool::tiered(64 << 20, 64 << 20);
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(
        db,
        VfsOptions {
            max_cached_inodes: 64,
            ..vopts()
        },
    )
    .unwrap();
    let d = v.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let mut inos = Vec::new();
    for i in 0..1000u32 {
        let f = v
            .create(d.ino, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        v.open_file(f.ino).unwrap();
        v.write(f.ino, 0, &i.to_le_bytes()).unwrap();
        v.release(f.ino).unwrap();
        inos.push(f.ino);
        assert!(v.stats().cached_inodes <= 65, "{}", v.stats().cached_inodes);
    }
    assert!(v.stats().evictions > 900);
    for (i, &ino) in inos.iter().enumerate() {
        assert_eq!(v.read(ino, 0, 4).unwrap(), (i as u32).to_le_bytes());
        assert_eq!(
            v.lookup(d.ino, format!("f{i}").as_bytes()).unwrap().ino,
            ino
        );
    }
    assert!(v.stats().cached_inodes <= 65);
}
