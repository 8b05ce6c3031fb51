//! vFile: POSIX semantics of the file layer, and that everything survives a clean reopen.

use crate::common;

use common::{opts, MemPool};
use masse::vfile::{Kind, SetAttr, Vfs, VfsError, VfsOptions, ROOT_INO};
use masse::Db;
use std::sync::Arc;

fn vopts() -> VfsOptions {
    VfsOptions {
        chunk_size: 4096,
        writeback_interval: None,
        ..Default::default()
    }
}

fn errno(r: Result<impl std::fmt::Debug, VfsError>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[test]
fn file_layer_semantics_and_reopen() {
    let pool = MemPool::tiered(64 << 20, 256 << 20);
    let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db.clone(), vopts()).unwrap();

    // Files: pwrite at odd offsets across chunk boundaries, read back.
    let f = v.create(ROOT_INO, b"data", 0o644, 1000, 1000).unwrap();
    assert_eq!(f.kind, Kind::File);
    let blob: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    v.write(f.ino, 1000, &blob).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().size, 21_000);
    assert_eq!(v.read(f.ino, 1000, 20_000).unwrap(), blob);
    assert_eq!(v.read(f.ino, 0, 1000).unwrap(), vec![0u8; 1000]);
    assert_eq!(
        v.read(f.ino, 20_990, 100).unwrap().len(),
        10,
        "short read at EOF"
    );
    assert!(v.read(f.ino, 50_000, 10).unwrap().is_empty());

    // Append.
    assert_eq!(v.append(f.ino, b"tail").unwrap(), 21_000);
    assert_eq!(v.read(f.ino, 21_000, 10).unwrap(), b"tail");

    // Sparse: a write far away leaves a hole that reads as zeros.
    let s = v.create(ROOT_INO, b"sparse", 0o600, 0, 0).unwrap();
    v.write(s.ino, 10 << 20, b"end").unwrap();
    assert_eq!(v.getattr(s.ino).unwrap().size, (10 << 20) + 3);
    assert_eq!(v.read(s.ino, 5 << 20, 8192).unwrap(), vec![0u8; 8192]);

    // Truncate down zeroes the tail when grown again; no stale data reappears.
    v.fsync(f.ino).unwrap();
    v.setattr(
        f.ino,
        &SetAttr {
            size: Some(1500),
            ..Default::default()
        },
    )
    .unwrap();
    v.setattr(
        f.ino,
        &SetAttr {
            size: Some(21_004),
            ..Default::default()
        },
    )
    .unwrap();
    let r = v.read(f.ino, 0, 21_004).unwrap();
    assert_eq!(&r[1000..1500], &blob[..500]);
    assert!(
        r[1500..].iter().all(|&b| b == 0),
        "bytes past a truncate must be zeros"
    );

    // Directories: mkdir, ENOTEMPTY, ENOTDIR, EISDIR, EEXIST, ENAMETOOLONG.
    let d = v.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).unwrap();
    assert_eq!(v.getattr(ROOT_INO).unwrap().nlink, 3);
    let inner = v.create(d.ino, b"inner", 0o644, 0, 0).unwrap();
    assert_eq!(errno(v.rmdir(ROOT_INO, b"dir")), libc::ENOTEMPTY);
    assert_eq!(errno(v.rmdir(ROOT_INO, b"data")), libc::ENOTDIR);
    assert_eq!(errno(v.unlink(ROOT_INO, b"dir")), libc::EISDIR);
    assert_eq!(
        errno(v.create(ROOT_INO, b"data", 0o644, 0, 0)),
        libc::EEXIST
    );
    assert_eq!(
        errno(v.create(ROOT_INO, &[b'x'; 256], 0o644, 0, 0)),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(v.lookup(ROOT_INO, b"missing")), libc::ENOENT);
    assert_eq!(errno(v.lookup(f.ino, b"x")), libc::ENOTDIR);
    assert_eq!(errno(v.read(d.ino, 0, 1)), libc::EISDIR);
    assert_eq!(v.lookup(d.ino, b"..").unwrap().ino, ROOT_INO);

    // Rename over an existing file replaces it atomically; the old inode is freed.
    let t = v.create(ROOT_INO, b"target", 0o644, 0, 0).unwrap();
    v.write(t.ino, 0, b"old contents").unwrap();
    v.fsync(t.ino).unwrap();
    let n = v.create(ROOT_INO, b"new.tmp", 0o644, 0, 0).unwrap();
    v.write(n.ino, 0, b"new contents").unwrap();
    v.rename(ROOT_INO, b"new.tmp", ROOT_INO, b"target", false)
        .unwrap();
    assert_eq!(v.lookup(ROOT_INO, b"target").unwrap().ino, n.ino);
    assert_eq!(errno(v.lookup(ROOT_INO, b"new.tmp")), libc::ENOENT);
    assert_eq!(
        errno(v.getattr(t.ino)),
        libc::ENOENT,
        "replaced inode is purged"
    );
    assert_eq!(
        errno(v.rename(ROOT_INO, b"data", ROOT_INO, b"target", true)),
        libc::EEXIST
    );
    // Directory renames: into itself is refused; across directories fixes nlink.
    assert_eq!(
        errno(v.rename(ROOT_INO, b"dir", d.ino, b"sub", false)),
        libc::EINVAL
    );
    let d2 = v.mkdir(ROOT_INO, b"dir2", 0o755, 0, 0).unwrap();
    v.rename(ROOT_INO, b"dir2", d.ino, b"moved", false).unwrap();
    assert_eq!(v.getattr(d.ino).unwrap().nlink, 3);
    assert_eq!(v.lookup(d2.ino, b"..").unwrap().ino, d.ino);
    assert_eq!(
        errno(v.rename(ROOT_INO, b"data", d.ino, b"moved", false)),
        libc::EISDIR
    );

    // Unlink while open: data stays readable until the last release.
    let u = v.create(ROOT_INO, b"open-unlinked", 0o644, 0, 0).unwrap();
    v.open_file(u.ino).unwrap();
    v.write(u.ino, 0, b"still here").unwrap();
    v.unlink(ROOT_INO, b"open-unlinked").unwrap();
    assert_eq!(v.read(u.ino, 0, 100).unwrap(), b"still here");
    assert_eq!(v.getattr(u.ino).unwrap().nlink, 0);
    v.release(u.ino).unwrap();
    assert_eq!(errno(v.getattr(u.ino)), libc::ENOENT);

    // Hard links and symlinks.
    v.link(inner.ino, ROOT_INO, b"hard").unwrap();
    assert_eq!(v.getattr(inner.ino).unwrap().nlink, 2);
    let l = v.symlink(ROOT_INO, b"sym", b"dir/inner", 0, 0).unwrap();
    assert_eq!(v.readlink(l.ino).unwrap(), b"dir/inner");

    // chmod/chown/utimes.
    v.setattr(
        inner.ino,
        &SetAttr {
            perm: Some(0o600),
            uid: Some(7),
            ..Default::default()
        },
    )
    .unwrap();

    // Many entries: the directory splits into several pages and lists completely.
    for i in 0..2000 {
        v.create(d.ino, format!("entry-{i:05}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    for i in (0..2000).step_by(3) {
        v.unlink(d.ino, format!("entry-{i:05}").as_bytes()).unwrap();
    }
    let listing = v.readdir(d.ino).unwrap();
    assert_eq!(listing.len(), 2 + 2000 - 667);

    let root_list: Vec<Vec<u8>> = {
        let mut l: Vec<_> = v
            .readdir(ROOT_INO)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        l.sort();
        l
    };
    v.close().unwrap();
    drop(v);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();

    // Reopen: namespace, data, attributes all back.
    let db = Arc::new(Db::open(&pool.config(), opts()).unwrap());
    let v = Vfs::open(db.clone(), vopts()).unwrap();
    let mut l: Vec<_> = v
        .readdir(ROOT_INO)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    l.sort();
    assert_eq!(l, root_list);
    let f2 = v.lookup(ROOT_INO, b"data").unwrap();
    assert_eq!(f2.size, 21_004);
    let r2 = v.read(f2.ino, 0, 21_004).unwrap();
    assert_eq!(r2, r);
    let tg = v.lookup(ROOT_INO, b"target").unwrap();
    assert_eq!(v.read(tg.ino, 0, 100).unwrap(), b"new contents");
    let s2 = v.lookup(ROOT_INO, b"sparse").unwrap();
    assert_eq!(v.read(s2.ino, 10 << 20, 10).unwrap(), b"end");
    let i2 = v.lookup(ROOT_INO, b"hard").unwrap();
    assert_eq!((i2.perm, i2.uid, i2.nlink), (0o600, 7, 2));
    let dd = v.lookup(ROOT_INO, b"dir").unwrap();
    assert_eq!(v.readdir(dd.ino).unwrap().len(), 2 + 2000 - 667);
    assert_eq!(v.lookup(dd.ino, b"entry-00001").unwrap().kind, Kind::File);
    // A new inode number is never one handed out before.
    let fresh = v.create(ROOT_INO, b"fresh", 0o644, 0, 0).unwrap();
    assert!(fresh.ino > listing.iter().map(|e| e.ino).max().unwrap());
    v.close().unwrap();
}
