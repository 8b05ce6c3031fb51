//! Shared by the `nbd_*` tests: a pool on temporary files, a `masse serve nbd`
//! child process, and the rule for external tools (nbdinfo, qemu-img, fio): under CI
//! (`CI=1` or `MASSE_REQUIRE_TOOLS=1`) a missing tool fails the test; otherwise the
//! test is skipped with a notice.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// Whether `tool` can run. Panics when it cannot and tools are required.
pub fn have_tool(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if ok {
        return true;
    }
    let required = ["CI", "MASSE_REQUIRE_TOOLS"].iter().any(|v| {
        std::env::var(v)
            .map(|x| !x.is_empty() && x != "0")
            .unwrap_or(false)
    });
    if required {
        panic!("{tool} is required (CI / MASSE_REQUIRE_TOOLS is set) but cannot be run; install it (.ci/run does)");
    }
    eprintln!("NOTICE: {tool} not found: skipping this test (set MASSE_REQUIRE_TOOLS=1 to make this a failure)");
    false
}

pub struct Pool {
    pub fast_dir: tempfile::TempDir,
    pub dir: tempfile::TempDir,
    pub fast: PathBuf,
    pub cap: PathBuf,
}

impl Pool {
    /// A tiered pool: fast tier on /dev/shm when it exists.
    pub fn create(fast_size: &str, cap_size: &str) -> Pool {
        let shm = Path::new("/dev/shm");
        let fast_dir = tempfile::Builder::new()
            .prefix("masse-nbd-test-")
            .tempdir_in(if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            })
            .expect("tempdir");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = Pool {
            fast: fast_dir.path().join("fast"),
            cap: dir.path().join("cap"),
            fast_dir,
            dir,
        };
        let o = Command::new(MASSE)
            .arg("create")
            .args(p.args())
            .args(["--fast-size", fast_size, "--capacity-size", cap_size])
            .output()
            .expect("run masse create");
        assert!(
            o.status.success(),
            "masse create failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        p
    }

    pub fn args(&self) -> Vec<String> {
        vec![
            "--fast".into(),
            self.fast.display().to_string(),
            "--capacity".into(),
            self.cap.display().to_string(),
        ]
    }

    pub fn sock(&self) -> PathBuf {
        self.dir.path().join("nbd.sock")
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock().display())
    }

    /// `masse serve nbd` on this pool's Unix socket with extra arguments.
    pub fn serve(&self, extra: &[&str]) -> Server {
        let mut args = vec!["serve".to_string(), "nbd".to_string()];
        args.extend(self.args());
        args.extend(["--socket".to_string(), self.sock().display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::start(&args)
    }
}

pub struct Server {
    pub child: Option<Child>,
    pub stdout: Vec<String>,
}

impl Server {
    /// Start `masse ARGS` and wait for its "ready" line.
    pub fn start(args: &[String]) -> Server {
        let mut child = Command::new(MASSE)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn masse serve");
        let out = child.stdout.take().expect("stdout");
        let mut lines = Vec::new();
        let mut r = BufReader::new(out);
        loop {
            let mut l = String::new();
            match r.read_line(&mut l) {
                Ok(0) | Err(_) => {
                    let o = child.wait_with_output().expect("wait");
                    panic!(
                        "the masse server exited before it was ready ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
                Ok(_) => {
                    let ready = l.starts_with("ready");
                    lines.push(l.trim_end().to_string());
                    if ready {
                        break;
                    }
                }
            }
        }
        Server {
            child: Some(child),
            stdout: lines,
        }
    }

    /// SIGTERM, then wait (at most 30 s) for a clean exit. Returns status and stderr.
    pub fn stop(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let t = Instant::now();
        loop {
            if let Some(st) = child.try_wait().expect("wait") {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return (st, err);
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("the masse server did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run a tool; panic with its output when it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `curl` the endpoint; the body, checked by `promtool check metrics`.
pub fn scrape(url: &str) -> String {
    let o = run_ok(Command::new("curl").args(["-sf", "--max-time", "10", url]));
    let body = String::from_utf8(o.stdout).expect("utf-8 exposition");
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    use std::io::Write;
    p.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed promtool");
    let out = p.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    body
}

/// Sample name with labels → value.
pub fn samples(body: &str) -> std::collections::HashMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}
