//! Scenario (issue 44, found by a POSIX test suite): on a `masse mount
//! --direct-io`, a write by another user clears the file's setuid and setgid
//! bits, as on any local file system; and shared mmap works, read-only and
//! writable, on kernels that let FUSE serve it beside direct I/O (6.6 on).
//!
//! Needs root (it mounts with allow_other and writes as `nobody` through
//! `setpriv`); as another user it skips with a message.

use crate::mountkit;

use mountkit::{ready, run_ok, unavailable, Pool};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn as_nobody(cmd: &str) -> String {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        "/bin/sh",
        "-c",
        cmd,
    ]);
    run_ok(c, &format!("{cmd} (as nobody)"))
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn a_direct_io_write_by_another_user_clears_setuid_and_setgid() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: not root, cannot write as another user");
        return;
    }
    if !ready(&["setpriv", "fusermount3"]) {
        return;
    }
    let pool = Pool::new("1G");
    // The test's temporary directory is the owner's alone; nobody must reach the mount.
    std::fs::set_permissions(pool.dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let m = pool.mount(&["--direct-io", "--allow-other"]);
    let f = m.path("prog");
    std::fs::write(&f, b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6777)).expect("chmod");
    assert_eq!(mode(&f), 0o6777);
    as_nobody(&format!("echo x >> '{}'", f.display()));
    assert_eq!(
        mode(&f),
        0o0777,
        "a write by another user left the setuid/setgid bits"
    );
    // Set-group-ID without group execute marks mandatory locking, not privilege: kept.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o2666)).expect("chmod");
    as_nobody(&format!("echo y >> '{}'", f.display()));
    assert_eq!(mode(&f), 0o2666);
    drop(m);
}

#[test]
fn shared_mmap_works_with_direct_io() {
    if !ready(&["python3", "fusermount3"]) {
        return;
    }
    let pool = Pool::new("1G");
    let m = pool.mount(&["--direct-io"]);
    let f = m.path("mapped");
    std::fs::write(&f, vec![b'a'; 8192]).expect("write");
    let script = format!(
        "import mmap\n\
         f = open('{p}', 'r+b')\n\
         r = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n\
         assert r[:4] == b'aaaa', r[:4]\n\
         w = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)\n\
         w[:5] = b'hello'\n\
         w.flush()\n\
         print('ok')\n",
        p = f.display()
    );
    let mut c = Command::new("python3");
    c.args(["-c", &script]);
    let out = c.output().expect("python3");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let v = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let num = |i: usize| {
            let part = v.trim().split(['.', '-']).nth(i).unwrap_or("0");
            part.parse::<u32>().unwrap_or(0)
        };
        assert!(
            (num(0), num(1)) < (6, 6),
            "shared mmap refused on kernel {v} with direct I/O: {err}"
        );
        unavailable(&format!("kernel {v} has no FUSE_DIRECT_IO_ALLOW_MMAP"));
        return;
    }
    drop(m);
    let m = pool.mount(&[]);
    let back = std::fs::read(m.path("mapped")).expect("read back");
    assert_eq!(
        &back[..5],
        b"hello",
        "the mapped write did not reach the file"
    );
    drop(m);
}
