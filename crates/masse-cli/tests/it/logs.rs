//! Scenario: the log (`--log-level info --log-format json` on stderr) shows a
//! recovery after a crash (what was replayed, how long), GC passes, and a background
//! failure (an injected write error on an emulated capacity drive) with its cause.
use std::path::Path;
use std::process::Command;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// Run masse with JSON logs at info; (success, log events).
fn run(args: &[&str]) -> (bool, Vec<serde_json::Value>) {
    let o = Command::new(MASSE)
        .args(["--log-level", "info", "--log-format", "json"])
        .args(args)
        .output()
        .expect("run masse");
    let err = String::from_utf8_lossy(&o.stderr);
    let events = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line {l:?}: {e}")))
        .collect();
    (o.status.success(), events)
}

fn find<'a>(ev: &'a [serde_json::Value], msg: &str) -> Vec<&'a serde_json::Value> {
    ev.iter()
        .filter(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(msg))
        })
        .collect()
}

#[test]
fn the_log_shows_recovery_after_a_crash() {
    let shm = Path::new("/dev/shm");
    let fd = tempfile::tempdir_in(if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    })
    .expect("tempdir");
    let cd = tempfile::tempdir().expect("tempdir");
    let (fast, cap) = (fd.path().join("f"), cd.path().join("c"));
    let (f, c) = (fast.to_str().unwrap(), cap.to_str().unwrap());
    // --no-close: the process exits without closing, as after a crash.
    let (ok, _) = run(&[
        "demo",
        "--fast",
        f,
        "--capacity",
        c,
        "--fast-size",
        "64M",
        "--capacity-size",
        "256M",
        "--num",
        "20000",
        "--phases",
        "fill",
        "--no-close",
    ]);
    assert!(ok, "demo failed");
    let (ok, ev) = run(&["stats", "--fast", f, "--capacity", c]);
    assert!(ok);
    let open = find(&ev, "pool opened");
    assert_eq!(open.len(), 1, "{ev:?}");
    let o = &open[0]["fields"];
    assert_eq!(
        o["recovery"], "scan",
        "an unclean stop is recovered by a scan: {o}"
    );
    assert!(
        o["pad_records"].as_u64().unwrap() + o["segments_replayed"].as_u64().unwrap() > 0,
        "{o}"
    );
    assert!(o["took_ms"].is_u64(), "{o}");
    assert!(!find(&ev, "checkpoint written").is_empty(), "{ev:?}");
}

#[test]
fn the_log_shows_gc_passes_and_a_background_failure_with_its_cause() {
    let (ok, ev) = run(&[
        "demo",
        "--fast",
        "sim:optane:256MiB",
        "--capacity",
        "sim:qlc:256MiB",
        "--num",
        "100000",
        "--value-size",
        "1000",
        "--phases",
        "fill,overwrite,overwrite",
    ]);
    assert!(ok, "demo failed: {ev:?}");
    let gc = find(&ev, "GC pass freed a band");
    assert!(!gc.is_empty(), "no GC pass in the log");
    assert!(gc
        .iter()
        .all(|e| e["fields"]["moved_bytes"].is_u64() && e["threadName"] == "masse-maint"));

    let (ok, ev) = run(&[
        "demo",
        "--fast",
        "sim:optane:256MiB",
        "--capacity",
        "sim:qlc:1GiB:write_err=0.2:seed=3",
        "--num",
        "50000",
        "--phases",
        "fill",
    ]);
    assert!(!ok, "the demo survived a failing drive");
    let failed = find(&ev, "database failed");
    assert_eq!(failed.len(), 1, "{ev:?}");
    assert_eq!(failed[0]["level"], "ERROR");
    let reason = failed[0]["fields"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("capacity-tier writer failed") && reason.contains("injected write error"),
        "cause missing: {reason}"
    );
}
