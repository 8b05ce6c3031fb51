//! Scenario: the basic commands on a tiered pool made of temporary files —
//! create, put/get/del, stats --json, check — and the refusals: re-create
//! without --force, a foreign file, an oversized key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// A temporary directory for the fast tier: in /dev/shm when it exists.
fn fast_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let b = tempfile::Builder::new()
        .prefix("masse-cli-test-")
        .tempdir_in(if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        });
    b.expect("temporary directory for the fast tier")
}

struct Pool {
    fast: PathBuf,
    cap: PathBuf,
}

impl Pool {
    fn args(&self) -> Vec<String> {
        vec![
            "--fast".into(),
            self.fast.display().to_string(),
            "--capacity".into(),
            self.cap.display().to_string(),
        ]
    }
}

fn masse(args: &[&str], pool: Option<&Pool>) -> Output {
    masse_stdin(args, pool, None)
}

fn masse_stdin(args: &[&str], pool: Option<&Pool>, stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new(MASSE);
    c.args(args);
    if let Some(p) = pool {
        c.args(p.args());
    }
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn masse");
    if let Some(data) = stdin {
        use std::io::Write;
        let mut s = child.stdin.take().expect("stdin pipe");
        s.write_all(data).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait for masse");
    eprintln!(
        "$ masse {}\n  exit {:?}\n  stdout: {}\n  stderr: {}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim_end(),
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    out
}

fn ok(o: &Output) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "command failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn roundtrip_and_refusals() {
    let fdir = fast_dir();
    let cdir = tempfile::tempdir().expect("temporary directory");
    let pool = Pool {
        fast: fdir.path().join("fast"),
        cap: cdir.path().join("cap"),
    };

    // create (files do not exist yet: sizes are required)
    let o = masse(
        &["create", "--fast-size", "64M", "--capacity-size", "256M"],
        Some(&pool),
    );
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    for want in [
        "tiered",
        "format version     5",
        "segment size",
        "band size",
        "write pad",
        "checkpoint",
        "indirection unit",
        "O_DIRECT",
    ] {
        assert!(text.contains(want), "create output lacks {want:?}:\n{text}");
    }
    assert!(
        text.contains(&pool.fast.display().to_string())
            && text.contains(&pool.cap.display().to_string())
    );

    // put / get
    ok(&masse(&["put", "alpha", "one"], Some(&pool)));
    ok(&masse(&["put", "beta", "two"], Some(&pool)));
    let o = masse(&["get", "alpha"], Some(&pool));
    ok(&o);
    assert_eq!(o.stdout, b"one");

    // overwrite, binary value from stdin, hex key, value file, --output
    ok(&masse(&["put", "alpha", "uno"], Some(&pool)));
    let bin: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    ok(&masse_stdin(
        &["put", "--hex", "00ff7f", "--stdin"],
        Some(&pool),
        Some(&bin),
    ));
    let o = masse(&["get", "--hex", "0x00FF7F"], Some(&pool));
    ok(&o);
    assert_eq!(o.stdout, bin);
    let vf = cdir.path().join("value.bin");
    std::fs::write(&vf, b"from a file").expect("write value file");
    ok(&masse(
        &[
            "put",
            "gamma",
            "--value-file",
            vf.to_str().expect("utf-8 path"),
        ],
        Some(&pool),
    ));
    let outf = cdir.path().join("out.bin");
    ok(&masse(
        &[
            "get",
            "gamma",
            "--output",
            outf.to_str().expect("utf-8 path"),
        ],
        Some(&pool),
    ));
    assert_eq!(
        std::fs::read(&outf).expect("read --output file"),
        b"from a file"
    );
    let o = masse(&["get", "alpha"], Some(&pool));
    assert_eq!(o.stdout, b"uno");

    // del: existed, then not
    let o = masse(&["del", "beta"], Some(&pool));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("existed"));
    let o = masse(&["del", "beta"], Some(&pool));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("not found"));

    // get of a missing key: exit 1, "not found" on stderr, nothing on stdout
    let o = masse(&["get", "beta"], Some(&pool));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not found"));
    assert!(o.stdout.is_empty());
    let o = masse(&["get", "never-written"], Some(&pool));
    assert_eq!(o.status.code(), Some(1));

    // stats --json: valid JSON. The engine's counters are per open (not persisted), so a
    // `masse stats` process, which only opens and closes, has made exactly 0 puts.
    let o = masse(&["stats", "--json"], Some(&pool));
    ok(&o);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stats --json is JSON");
    assert_eq!(j["mode"], "tiered");
    let current = masse::format::FORMAT_VERSION;
    assert_eq!(
        j["format_version"], current,
        "create makes current-format pools"
    );
    assert_eq!(j["puts"], 0, "a fresh open has made no puts");
    assert!(j["recovery_source"].is_string());
    assert!(j["devices"].as_array().is_some_and(|d| d.len() == 2));
    let o = masse(&["stats"], Some(&pool));
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("host write amplification"));
    assert!(
        text.contains(&format!("format version       {current}")),
        "{text}"
    );

    // check: consistent; --json carries the live key count (alpha, 00ff7f, gamma)
    ok(&masse(&["check"], Some(&pool)));
    let o = masse(&["check", "--json"], Some(&pool));
    ok(&o);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json is JSON");
    assert_eq!(j["live_keys"], 3, "check report: {j}");
    assert_eq!(j["errors"].as_array().map(|e| e.len()), Some(0));

    // create again without --force: refused, the data survives; with --force: a new empty pool
    let o = masse(&["create"], Some(&pool));
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("--force"),
        "refusal should mention --force: {}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "one-line error");
    assert_eq!(masse(&["get", "alpha"], Some(&pool)).stdout, b"uno");

    // an oversized key is refused, and so is an empty one
    let long = "k".repeat(masse::MAX_KEY_LEN + 1);
    let o = masse(&["put", &long, "v"], Some(&pool));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("key"), "{}", stderr(&o));
    let o = masse(&["put", "", "v"], Some(&pool));
    assert_eq!(o.status.code(), Some(2));
    let max = "k".repeat(masse::MAX_KEY_LEN);
    ok(&masse(&["put", &max, "v"], Some(&pool)));
    assert_eq!(masse(&["get", &max], Some(&pool)).stdout, b"v");

    // a foreign file (random bytes) is not taken for a pool
    let foreign = cdir.path().join("random.bin");
    let junk: Vec<u8> = (0..1u64 << 20)
        .map(|i| (masse_cli::rng::mix64(i) >> 7) as u8)
        .collect();
    std::fs::write(&foreign, &junk).expect("write random file");
    let o = masse(
        &[
            "get",
            "alpha",
            "--capacity",
            foreign.to_str().expect("utf-8 path"),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a masse device"), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "one-line error");
    assert_eq!(
        std::fs::read(&foreign).expect("reread"),
        junk,
        "the foreign file must be left untouched"
    );

    // devices given in the wrong roles, a missing fast device, a missing file
    let swapped = Pool {
        fast: pool.cap.clone(),
        cap: pool.fast.clone(),
    };
    let o = masse(&["get", "alpha"], Some(&swapped));
    assert_eq!(o.status.code(), Some(2));
    let o = masse(
        &[
            "get",
            "alpha",
            "--capacity",
            pool.cap.to_str().expect("utf-8 path"),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--fast"), "{}", stderr(&o));
    let o = masse(
        &["get", "alpha", "--capacity", "/nonexistent/masse/cap"],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/masse/cap"));

    // --force re-creates: the old keys are gone
    ok(&masse(&["create", "--force"], Some(&pool)));
    assert_eq!(masse(&["get", "alpha"], Some(&pool)).status.code(), Some(1));
    ok(&masse(&["check"], Some(&pool)));
}

#[test]
fn create_needs_sizes_for_missing_files_and_removes_them_on_failure() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cap = dir.path().join("cap");
    let c = cap.to_str().expect("utf-8 path");
    let o = masse(&["create", "--capacity", c], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--capacity-size"), "{}", stderr(&o));
    // too small to hold a pool: refused by the library, and the new file is removed again
    let o = masse(&["create", "--capacity", c, "--capacity-size", "1M"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        !cap.exists(),
        "a failed create must not leave a new file behind"
    );
    // bad size syntax is a usage error
    let o = masse(&["create", "--capacity", c, "--capacity-size", "12Q"], None);
    assert_eq!(o.status.code(), Some(2));
    // a capacity-only pool
    ok(&masse(
        &["create", "--capacity", c, "--capacity-size", "128MiB"],
        None,
    ));
    ok(&masse(&["put", "--capacity", c, "k", "v"], None));
    assert_eq!(masse(&["get", "--capacity", c, "k"], None).stdout, b"v");
    let o = masse(&["stats", "--json", "--capacity", c], None);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stats --json is JSON");
    assert_eq!(j["mode"], "capacity-only");
    ok(&masse(&["check", "--capacity", c], None));
}

/// `masse completions` and `masse man` come from the clap definition: the scripts
/// parse in their shells and name the commands; one man page per visible command.
#[test]
fn completions_parse_and_man_pages_cover_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let o = masse(&["completions", shell], None);
        ok(&o);
        let script = String::from_utf8(o.stdout).expect("utf-8 script");
        for cmd in ["dump", "load", "scan", "volume", "serve"] {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
        let have = Command::new(shell).arg("-c").arg("true").status().is_ok();
        if !have {
            eprintln!("NOTICE: {shell} not installed: not parsing its completion script");
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("masse.completion");
        std::fs::write(&f, &script).expect("write script");
        let check = if shell == "fish" {
            "--no-execute"
        } else {
            "-n"
        };
        let st = Command::new(shell)
            .arg(check)
            .arg(&f)
            .status()
            .expect(shell);
        assert!(st.success(), "{shell} rejects its completion script");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let o = masse(&["man", "--dir", &dir.path().display().to_string()], None);
    ok(&o);
    for page in [
        "masse.1",
        "masse-dump.1",
        "masse-serve-nbd.1",
        "masse-volume-list.1",
    ] {
        let t = std::fs::read_to_string(dir.path().join(page)).expect(page);
        assert!(t.contains(".TH"), "{page} is not a man page");
    }
    assert!(
        !dir.path().join("masse-ack-writer.1").exists(),
        "hidden commands get no page"
    );
    let o = masse(&["man"], None);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("masse"));
}
