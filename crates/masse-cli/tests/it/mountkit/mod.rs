//! Shared by the tests that run real programs on a `masse mount`: pool set-up,
//! mounting and unmounting, and the rule for missing tools — a printed skip on a
//! developer's machine, a failure under CI (`CI` or `MASSE_REQUIRE_TOOLS` set).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const MASSE: &str = env!("CARGO_BIN_EXE_masse");

fn required() -> bool {
    let set = |v: &str| {
        std::env::var(v)
            .map(|s| !s.is_empty() && s != "0" && s != "false")
            .unwrap_or(false)
    };
    set("CI") || set("MASSE_REQUIRE_TOOLS")
}

/// Skip (return false, with a message) or fail under CI when `why` holds.
pub fn unavailable(why: &str) -> bool {
    if required() {
        panic!("required for this test under CI: {why} (apt-get install -y fuse3 sqlite3 git fio rocksdb-tools)");
    }
    eprintln!("SKIPPED: {why}");
    false
}

/// True when `tool` runs (`tool --version` or similar exits at all).
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Check FUSE and the tools a test needs; false means skip.
pub fn ready(tools: &[&str]) -> bool {
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        return unavailable("/dev/fuse cannot be opened, so nothing can be mounted here");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !have("fusermount3") {
        return unavailable("mounting as a non-root user needs fusermount3 (package fuse3)");
    }
    for t in tools {
        if !have(t) {
            return unavailable(&format!("`{t}` is not installed"));
        }
    }
    true
}

/// A pool on temporary files (fast tier in /dev/shm when it exists) and a mount point.
pub struct Pool {
    pub dir: tempfile::TempDir,
    pub fast_dir: tempfile::TempDir,
    pub fast: PathBuf,
    pub cap: PathBuf,
    pub mnt: PathBuf,
}

impl Pool {
    pub fn new(cap_size: &str) -> Pool {
        let shm = Path::new("/dev/shm");
        let fast_dir = tempfile::Builder::new()
            .prefix("masse-mount-test-")
            .tempdir_in(if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            })
            .expect("temporary directory for the fast tier");
        let dir = tempfile::Builder::new()
            .prefix("masse-mount-test-")
            .tempdir()
            .expect("temporary directory");
        let fast = fast_dir.path().join("fast");
        let cap = dir.path().join("cap");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        let out = Command::new(MASSE)
            .args(["create", "--fast-size", "256M", "--capacity-size", cap_size])
            .args(Self::flags(&fast, &cap))
            .output()
            .expect("run masse create");
        assert!(
            out.status.success(),
            "masse create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Pool {
            dir,
            fast_dir,
            fast,
            cap,
            mnt,
        }
    }

    fn flags(fast: &Path, cap: &Path) -> Vec<String> {
        vec![
            "--fast".into(),
            fast.display().to_string(),
            "--capacity".into(),
            cap.display().to_string(),
        ]
    }

    /// Mount with extra `masse mount` options; waits until the mount is live.
    pub fn mount(&self, extra: &[&str]) -> Mounted {
        let mut cmd = Command::new(MASSE);
        cmd.arg("mount")
            .args(Self::flags(&self.fast, &self.cap))
            .args(extra)
            .arg(&self.mnt);
        spawn_mount(cmd, &self.mnt)
    }
}

/// Start `cmd` (a `masse mount` of `mnt`, however launched) and wait until it
/// says the mount is live.
pub fn spawn_mount(mut cmd: Command, mnt: &Path) -> Mounted {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn masse mount");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let t0 = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if l.contains("mounted on") => break,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let st = child.wait();
                panic!("masse mount exited before mounting: {st:?}");
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("masse mount exited before mounting: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "mount did not come up in 30 s"
        );
    }
    Mounted {
        child: Some(child),
        reader: Some(reader),
        mnt: mnt.to_path_buf(),
    }
}

/// A running `masse mount`; unmounted (SIGTERM) on drop if the test did not.
pub struct Mounted {
    child: Option<Child>,
    reader: Option<std::thread::JoinHandle<String>>,
    pub mnt: PathBuf,
}

impl Mounted {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Process id of the `masse mount` serving this mount.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("mounted").id()
    }

    /// Resident memory of the mount process, bytes (VmRSS).
    pub fn rss(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/PID/status of the mount");
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS line")
            * 1024
    }

    /// Unmount the way a user would (`how`: "signal" sends SIGTERM, "fusermount"
    /// runs `fusermount3 -u`, "umount" runs umount), wait for the process, and
    /// assert it flushed and closed the pool cleanly. Returns its stdout.
    pub fn unmount_with(self, how: &str) -> String {
        match how {
            "signal" => {
                let pid = self.child.as_ref().expect("mounted").id();
                // SAFETY: kill on our own child's pid.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
            "fusermount" => {
                let st = Command::new("fusermount3")
                    .arg("-u")
                    .arg(&self.mnt)
                    .status();
                assert!(
                    st.map(|s| s.success()).unwrap_or(false),
                    "fusermount3 -u failed"
                );
            }
            _ => {
                let st = Command::new("umount").arg(&self.mnt).status();
                assert!(st.map(|s| s.success()).unwrap_or(false), "umount failed");
            }
        }
        self.wait_clean()
    }

    /// After an unmount done some other way: wait for the process, and assert it
    /// flushed and closed the pool cleanly. Returns its stdout.
    pub fn wait_clean(mut self) -> String {
        let mut child = self.child.take().expect("mounted");
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "masse mount did not exit after unmount"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = self
            .reader
            .take()
            .map(|r| r.join().unwrap_or_default())
            .unwrap_or_default();
        assert!(
            status.success(),
            "masse mount exited with {status}; stdout:\n{out}"
        );
        assert!(
            out.contains("pool closed cleanly"),
            "no clean close; stdout:\n{out}"
        );
        out
    }

    pub fn unmount(self) -> String {
        self.unmount_with("signal")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// Run a shell command; panic with its output on failure; return stdout.
pub fn sh(cmd: &str) -> String {
    let mut c = Command::new("sh");
    c.arg("-c").arg(cmd);
    run_ok(c, cmd)
}

/// Run `cmd` (described as `what`); panic with its output on failure; return stdout.
pub fn run_ok(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().expect("run a command");
    assert!(
        out.status.success(),
        "`{what}` failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The hex digest sha256sum prints for `path`.
pub fn sha256(path: &Path) -> String {
    sh(&format!("sha256sum '{}'", path.display()))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}
