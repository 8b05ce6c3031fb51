//! Scenario: an ordinary user mounts a pool (through the setuid `fusermount3`, not
//! mount(2)), owns the new file system's root, writes and renames files, cannot be
//! read by other users (no allow_other, not even root), unmounts with
//! `fusermount3 -u`, remounts and finds everything, and unmounts with SIGTERM.
//!
//! Run as root (CI), the user is `nobody` (uid/gid 65534) through `setpriv`; run as
//! a user, that user.

mod mountkit;

use mountkit::{ready, sh, unavailable, MASSE};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let out = as_user(Path::new("/bin/sh"), &["-c", cmd])
        .output()
        .expect("run sh as the user");
    assert!(
        out.status.success(),
        "`{cmd}` as the user failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Start `masse mount` as the user; returns once the mount is live.
fn mount(bin: &Path, pool: &[&str], mnt: &Path) -> (Child, std::thread::JoinHandle<String>) {
    let mut args = vec!["mount"];
    args.extend_from_slice(pool);
    let mnt_s = mnt.display().to_string();
    args.push(&mnt_s);
    let mut child = as_user(bin, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn masse mount as the user");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("mounted on") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let t0 = Instant::now();
    while rx.recv_timeout(Duration::from_millis(200)).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("masse mount (as the user) exited before mounting: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "mount did not come up in 30 s"
        );
    }
    (child, reader)
}

/// Wait for the mount process after an unmount; assert a clean close.
fn wait_clean(mut child: Child, reader: std::thread::JoinHandle<String>) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("masse mount did not exit after unmount");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap_or_default();
    assert!(status.success(), "masse mount exited with {status}:\n{out}");
    assert!(
        out.contains("pool closed cleanly"),
        "no clean close:\n{out}"
    );
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
    let out = as_user(&bin, &create).output().expect("masse create");
    assert!(
        out.status.success(),
        "masse create as the user: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let m = mnt.display().to_string();
    let (child, reader) = mount(&bin, &pool, &mnt);
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
    wait_clean(child, reader);
    assert!(
        !sh("cat /proc/self/mounts").contains(&m),
        "still mounted after fusermount3 -u"
    );

    let (child, reader) = mount(&bin, &pool, &mnt);
    assert_eq!(
        user_sh(&format!("sha256sum '{m}/dir/moved'")),
        digest,
        "data after a remount"
    );
    assert_eq!(user_sh(&format!("cat '{m}/note'")), "note\n");
    // SIGTERM from the user's side (the test is its parent) unmounts cleanly too.
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_clean(child, reader);
}
