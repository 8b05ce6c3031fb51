//! Scenario: an ordinary user mounts a pool (through the setuid `fusermount3`, not
//! mount(2)), owns the new file system's root, writes and renames files, cannot be
//! read by other users (no allow_other, not even root), unmounts with
//! `fusermount3 -u`, remounts and finds everything, and unmounts with SIGTERM.
//!
//! Run as root (CI), the user is `nobody` (uid/gid 65534) through `setpriv`; run as
//! a user, that user.

use crate::mountkit;

use mountkit::{ready, run_ok, sh, spawn_mount, unavailable, MASSE};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOBODY: u32 = 65534;

/// uid/gid the scenario runs as, and whether we switch to it.
fn who() -> (u32, u32, bool) {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        (NOBODY, NOBODY, true)
    } else {
        (uid, gid, false)
    }
}

/// `prog args…` run as the scenario's user.
fn as_user(prog: &Path, args: &[&str]) -> Command {
    let (uid, gid, switch) = who();
    let mut c;
    if switch {
        c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(prog);
    } else {
        c = Command::new(prog);
    }
    c.args(args);
    c
}

/// A shell command as the user; panics with its output on failure.
fn user_sh(cmd: &str) -> String {
    run_ok(
        as_user(Path::new("/bin/sh"), &["-c", cmd]),
        &format!("{cmd} (as the user)"),
    )
}

#[test]
fn a_user_mounts_owns_and_unmounts() {
    if !ready(&["setpriv", "fusermount3", "sha256sum", "dd"]) {
        return;
    }
    let (uid, gid, switch) = who();
    if switch {
        // The user opens /dev/fuse itself (fusermount3 passes the descriptor back);
        // udev makes it 0666 on a normal system, some containers leave it root-only.
        let mode = std::fs::metadata("/dev/fuse")
            .map(|m| m.mode())
            .unwrap_or(0);
        if mode & 0o006 != 0o006 {
            unavailable(&format!(
                "/dev/fuse is mode {:o}: users cannot open it (chmod 0666 /dev/fuse, as udev does)",
                mode & 0o777
            ));
            return;
        }
    }

    // Everything the user touches lives in a directory the user owns: the pool,
    // the mount point, and a copy of the binary (the build tree may be private).
    let dir = tempfile::Builder::new()
        .prefix("masse-mount-user-")
        .tempdir()
        .expect("temporary directory");
    let d = dir.path();
    let bin: PathBuf = d.join("masse");
    std::fs::copy(MASSE, &bin).expect("copy the masse binary");
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    if switch {
        sh(&format!("chown -R {uid}:{gid} '{}'", d.display()));
    }
    let fast = d.join("fast").display().to_string();
    let cap = d.join("cap").display().to_string();
    let pool = ["--fast", fast.as_str(), "--capacity", cap.as_str()];

    let mut create = vec!["create", "--fast-size", "64M", "--capacity-size", "1G"];
    create.extend_from_slice(&pool);
    run_ok(as_user(&bin, &create), "masse create (as the user)");

    let m = mnt.display().to_string();
    let mut mount_args = vec!["mount"];
    mount_args.extend_from_slice(&pool);
    mount_args.push(&m);
    let mounted = spawn_mount(as_user(&bin, &mount_args), &mnt);
    // The first mount made the file layer: its root belongs to the user, so the
    // user can create at the top without any chown.
    let root_owner = user_sh(&format!("stat -c '%u:%g' '{m}'"));
    assert_eq!(
        root_owner.trim(),
        format!("{uid}:{gid}"),
        "root directory owner"
    );
    user_sh(&format!(
        "set -e; dd if=/dev/urandom of='{m}/data' bs=64k count=40 status=none; \
         mkdir '{m}/dir'; mv '{m}/data' '{m}/dir/moved'; echo note > '{m}/note'; sync '{m}/dir/moved'"
    ));
    let listing = user_sh(&format!("ls -ln '{m}/dir'"));
    assert!(
        listing.contains(&format!(" {uid} {gid} ")) && listing.contains("moved"),
        "files belong to the user who made them: {listing}"
    );
    let digest = user_sh(&format!("sha256sum '{m}/dir/moved'"));
    if switch {
        // Without allow_other the kernel keeps everyone else out, root included.
        let e = std::fs::metadata(mnt.join("note"))
            .expect_err("root must not see into a user's mount without allow_other");
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    }
    // Unmount the way a user does, with the setuid helper.
    user_sh(&format!("fusermount3 -u '{m}'"));
    mounted.wait_clean();
    assert!(
        !sh("cat /proc/self/mounts").contains(&m),
        "still mounted after fusermount3 -u"
    );

    let mounted = spawn_mount(as_user(&bin, &mount_args), &mnt);
    assert_eq!(
        user_sh(&format!("sha256sum '{m}/dir/moved'")),
        digest,
        "data after a remount"
    );
    assert_eq!(user_sh(&format!("cat '{m}/note'")), "note\n");
    // SIGTERM (the test is its parent) unmounts a user's mount cleanly too.
    mounted.unmount_with("signal");
}
