//! What a newcomer meets first (issue 46): commands piped into `head` end
//! quietly instead of panicking on the closed pipe.
use std::io::Read;
use std::process::{Command, Stdio};

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// Run `masse args` with its stdout a pipe whose reader goes away: after
/// `keep` bytes, or (`keep` 0) at once, so that even an output smaller than the
/// pipe's buffer meets the closed pipe. The exit code and stderr.
fn piped_into_head(args: &[&str], keep: usize) -> (Option<i32>, String) {
    let mut child = Command::new(MASSE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run masse");
    let mut head = vec![0u8; keep];
    let mut stdout = child.stdout.take().expect("stdout");
    stdout.read_exact(&mut head).expect("the first bytes");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_and_man_into_a_closed_pipe_exit_cleanly() {
    for args in [
        &["completions", "zsh"][..],
        &["completions", "bash"],
        &["man"],
    ] {
        for keep in [0, 16] {
            let (code, err) = piped_into_head(args, keep);
            assert_eq!(code, Some(0), "masse {args:?} | head -c {keep}: {err}");
            assert!(!err.contains("panicked"), "masse {args:?}: {err}");
        }
    }
}

/// `stats` labels each device with the media class its superblock records
/// (what `create` probed or was told), not with a new probe at every open:
/// a capacity file `create` recorded as qlc was shown as `hdd`.
#[test]
fn stats_shows_the_media_create_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = dir.path().join("cap").display().to_string();
    let run = |args: &[&str]| {
        let o = Command::new(MASSE).args(args).output().expect("run masse");
        assert!(
            o.status.success(),
            "masse {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    };
    run(&[
        "create",
        "--capacity",
        &cap,
        "--capacity-size",
        "256M",
        "--capacity-media",
        "qlc",
    ]);
    let j: serde_json::Value =
        serde_json::from_slice(&run(&["stats", "--json", "--capacity", &cap])).expect("JSON");
    let devices = j["devices"].as_array().expect("devices");
    assert_eq!(devices[0]["role"], "capacity");
    assert_eq!(devices[0]["media"], "qlc", "{j}");
}
