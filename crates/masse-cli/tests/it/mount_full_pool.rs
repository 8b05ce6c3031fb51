//! Scenario: a mount on a full pool keeps its promises (issue 13). Real programs
//! (cp, dd, truncate, du, and glibc's posix_fallocate and statvfs called from
//! here) on a real FUSE mount:
//! - every file whose `cp` returned 0 is intact after a remount, and every `cp`
//!   that lost data saw ENOSPC (at write or at close, never only at unmount);
//! - data left to the write-back thread, or made durable by fsync, reports
//!   ENOSPC to the writer;
//! - `posix_fallocate` beyond the free space fails at once, and space it did
//!   reserve stays writable after the pool filled up;
//! - `df` and `du` report what is really available and allocated.

use crate::mountkit;

use mountkit::{ready, sh, sha256, Pool};
use std::io::Write;
use std::os::unix::io::IntoRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A file of `len` pseudo-random bytes, different for every `seed`.
fn make_file(path: &Path, seed: u64, len: usize) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut buf = vec![0u8; len];
    for w in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    std::fs::write(path, buf).expect("write a source file");
}

/// `statvfs` of the mount: (total, available) bytes.
fn df(path: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a zeroed statvfs is a valid out-parameter; the path is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    assert_eq!(r, 0, "statvfs: {}", std::io::Error::last_os_error());
    (
        s.f_blocks as u64 * s.f_frsize as u64,
        s.f_bavail as u64 * s.f_frsize as u64,
    )
}

fn blocks(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat").blocks()
}

/// Fill the mount with 4 MiB files until a write or close fails; the error must be
/// ENOSPC. Returns how many files were written whole.
fn fill(dir: &Path, prefix: &str) -> usize {
    let chunk = vec![0x5au8; 1 << 20];
    for i in 0..10_000 {
        let p = dir.join(format!("{prefix}{i}"));
        let mut f = std::fs::File::create(&p).expect("create a fill file");
        for _ in 0..4 {
            if let Err(e) = f.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "fill write: {e}");
                return i;
            }
        }
        let fd = f.into_raw_fd();
        // SAFETY: we own fd; close(2) directly so its error is seen (File's drop hides it).
        if unsafe { libc::close(fd) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "fill close: {e}");
            return i;
        }
    }
    panic!("the pool never filled up");
}

#[test]
fn cp_onto_a_full_pool_keeps_every_acknowledged_file() {
    if !ready(&["cp", "sha256sum"]) {
        return;
    }
    let pool = Pool::new("256M");
    let src = pool.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let n = 40;
    let mut hashes = Vec::new();
    for i in 0..n {
        let p = src.join(format!("f{i}"));
        make_file(&p, i as u64 + 1, 8 << 20);
        hashes.push(sha256(&p));
    }
    let m = pool.mount(&[]);
    let mut ok = Vec::new();
    let mut nospace = 0;
    for i in 0..n {
        let out = Command::new("cp")
            .arg(src.join(format!("f{i}")))
            .arg(m.path(&format!("f{i}")))
            .output()
            .expect("run cp");
        if out.status.success() {
            ok.push(i);
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("No space left on device"),
                "cp f{i} failed with something else than ENOSPC: {err}"
            );
            nospace += 1;
        }
    }
    eprintln!(
        "{} of {n} cp runs succeeded, {nospace} saw ENOSPC",
        ok.len()
    );
    assert!(nospace > 0, "forty 8 MiB files cannot all fit in 256 MiB");
    assert!(
        ok.len() >= 15,
        "only {} files fit in a 256 MiB pool",
        ok.len()
    );
    // Unmounting finds nothing left to report: the errors went to the writers.
    m.unmount();
    let m = pool.mount(&[]);
    for &i in &ok {
        assert_eq!(
            sha256(&m.path(&format!("f{i}"))),
            hashes[i],
            "f{i}: cp returned 0 but the file is not intact after a remount"
        );
    }
    m.unmount();
}

#[test]
fn writeback_and_fsync_report_enospc_to_the_writer() {
    if !ready(&[]) {
        return;
    }
    let pool = Pool::new("256M");
    let m = pool.mount(&["--writeback-secs", "1"]);
    fill(&m.mnt, "fill");
    // 1) A little data left to the write-back thread (below the per-file limit that
    //    would write it out at once) on a full pool: the writer hears of it by
    //    close at the latest.
    let mut saw = None;
    let mut f = std::fs::File::create(m.path("wb")).unwrap();
    let chunk = vec![0xa5u8; 256 << 10];
    for k in 0..4 {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            saw = Some(format!("write {k}: {e}"));
            break;
        }
    }
    // Give the write-back thread time to try what was written.
    std::thread::sleep(Duration::from_millis(2500));
    let fd = f.into_raw_fd();
    // SAFETY: we own fd.
    if unsafe { libc::close(fd) } != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "close: {e}");
        saw.get_or_insert(format!("close: {e}"));
    }
    assert!(
        saw.is_some(),
        "1 MiB written into a full pool, and neither write nor close failed"
    );
    // 2) fsync: ENOSPC at a write or at the fsync, never a silent success.
    let mut f = std::fs::File::create(m.path("fs")).unwrap();
    let mut failed = false;
    for _ in 0..64 {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            failed = true;
            break;
        }
    }
    if !failed {
        let e = f.sync_all().expect_err("fsync of 16 MiB into a full pool");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "fsync: {e}");
    }
    drop(f);
    m.unmount();
}

/// `posix_fallocate(3)` of `len` bytes on a new file `path`: 0 or the errno.
/// (Called here rather than through `fallocate --posix`: util-linux 2.38 ignores
/// its failure.)
fn posix_fallocate(path: &Path, len: u64) -> i32 {
    let f = std::fs::File::create(path).expect("create");
    use std::os::unix::io::AsRawFd;
    // SAFETY: a valid open descriptor.
    unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) }
}

#[test]
fn posix_fallocate_reserves_or_fails_at_once() {
    if !ready(&["dd"]) {
        return;
    }
    let pool = Pool::new("512M");
    let m = pool.mount(&[]);
    // Far more than the pool holds: ENOSPC at once, not a minute of zero writes
    // and a success that reserved nothing.
    let t = Instant::now();
    let r = posix_fallocate(&m.path("huge"), 10 << 30);
    assert_eq!(
        r,
        libc::ENOSPC,
        "posix_fallocate of 10 GiB on a 512 MiB pool returned {r}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "posix_fallocate took {:?} to fail",
        t.elapsed()
    );
    // What fits is really reserved: it shows as allocated and leaves the free space.
    let (_, avail0) = df(&m.mnt);
    assert_eq!(posix_fallocate(&m.path("pre"), 48 << 20), 0);
    assert_eq!(std::fs::metadata(m.path("pre")).unwrap().len(), 48 << 20);
    assert!(
        blocks(&m.path("pre")) * 512 >= 48 << 20,
        "st_blocks {} after reserving 48 MiB",
        blocks(&m.path("pre"))
    );
    let (_, avail1) = df(&m.mnt);
    assert!(
        avail0 - avail1 >= 48 << 20,
        "df: {avail0} bytes available before reserving 48 MiB, {avail1} after"
    );
    // Another file takes all the rest; writing the reserved range still works.
    fill(&m.mnt, "fill");
    sh(&format!(
        "dd if=/dev/urandom of={} bs=1M count=48 conv=notrunc,fsync status=none",
        m.path("pre").display()
    ));
    m.unmount();
}

#[test]
fn df_and_du_report_what_is_really_there() {
    if !ready(&["truncate", "du"]) {
        return;
    }
    let pool = Pool::new("512M");
    let m = pool.mount(&[]);
    let (total, avail) = df(&m.mnt);
    assert!(avail <= total && avail > total / 2, "df {avail} of {total}");
    // A 1 TiB sparse file allocates nothing; one 1 MiB extent in it, 1 MiB.
    let sparse = m.path("sparse");
    sh(&format!("truncate -s 1T {}", sparse.display()));
    assert_eq!(blocks(&sparse), 0, "st_blocks of an empty 1 TiB file");
    sh(&format!(
        "dd if=/dev/urandom of={} bs=1M count=1 seek=500000 conv=notrunc,fsync status=none",
        sparse.display()
    ));
    let b = blocks(&sparse);
    assert!(
        (2048..=2048 + 64).contains(&b),
        "st_blocks {b} for 1 MiB of data in a sparse file"
    );
    let du = sh(&format!("du -k {}", sparse.display()));
    let kib: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    assert!(kib <= 1100, "du says {kib} KiB for 1 MiB of data");
    // Once a write fails for space, df does not claim much is left.
    fill(&m.mnt, "fill");
    let (total, avail) = df(&m.mnt);
    assert!(
        avail < total / 25,
        "df reports {avail} of {total} bytes available after ENOSPC"
    );
    m.unmount();
}

/// The mount's RSS once it settles (memory it frees is handed back within a few
/// seconds): the lowest of a few readings over up to 5 s, stopping early below `goal`.
fn settled_rss(m: &mountkit::Mounted, goal: u64) -> u64 {
    let mut best = m.rss();
    let t = Instant::now();
    while best > goal && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(250));
        best = best.min(m.rss());
    }
    best
}

#[test]
fn mount_memory_is_bounded_and_released() {
    if !ready(&[]) {
        return;
    }
    let pool = Pool::new("2G");
    let m = pool.mount(&[]);
    let n = 12_000;
    let base = m.rss();
    // Index, directory entries and a bounded inode cache: ~100 B per file, not KBs.
    let bound = base + (10 << 20);
    std::fs::create_dir(m.path("d")).unwrap();
    for i in 0..n {
        std::fs::write(m.path(&format!("d/f{i}")), b"x".repeat(100)).unwrap();
    }
    let created = settled_rss(&m, bound);
    for i in 0..n {
        std::fs::remove_file(m.path(&format!("d/f{i}"))).unwrap();
    }
    let deleted = settled_rss(&m, bound);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "mount RSS: {:.1} MiB at start, {:.1} MiB after {n} files, {:.1} MiB after deleting them",
        mib(base),
        mib(created),
        mib(deleted)
    );
    assert!(
        created < bound,
        "RSS grew {:.1} MiB for {n} files",
        mib(created - base)
    );
    assert!(
        deleted < bound,
        "RSS still {:.1} MiB above the start after deleting every file",
        mib(deleted - base)
    );
    m.unmount();
}
