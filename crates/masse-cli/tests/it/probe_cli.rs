//! `masse probe` on a directory (measures on a temporary file it removes
//! afterwards) and on an emulated drive, as text and JSON; `masse create`
//! on emulated drives takes media, IU and reclaim unit from them.

use std::process::Command;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

fn run(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(MASSE).args(args).output().expect("run masse");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn probe_a_directory() {
    let d = tempfile::tempdir().expect("tmp");
    let p = d.path().to_str().expect("utf8");
    let (ok, out, err) = run(&["probe", p, "--seconds", "1", "--region", "16MiB", "--json"]);
    assert!(ok, "probe failed: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let m = &v["measured"];
    assert!(m["read_p50_us"].as_f64().unwrap_or(0.0) > 0.0, "{out}");
    assert!(
        m["seq256k_write_mbps"].as_f64().unwrap_or(0.0) > 0.0,
        "{out}"
    );
    let class = v["verdict"]["class"].as_str().unwrap_or("");
    assert!(
        ["scm", "tlc", "qlc", "hdd", "unknown"].contains(&class),
        "{class}"
    );
    assert!(v["advice"]["role"].is_string());
    let left: Vec<_> = std::fs::read_dir(d.path()).expect("ls").collect();
    assert!(left.is_empty(), "probe left files behind: {left:?}");
}

#[test]
fn probe_an_emulated_drive() {
    let (ok, out, err) = run(&[
        "probe",
        "sim:qlc:1GiB",
        "--seconds",
        "1",
        "--region",
        "16MiB",
    ]);
    assert!(ok, "probe failed: {err}");
    assert!(out.contains("class          qlc"), "{out}");
    assert!(out.contains("IU alignment   64 KiB"), "{out}");
    assert!(out.contains("role           capacity"), "{out}");
    let (ok, out, _) = run(&["probe", "sim:optane:256MiB", "--no-measure", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["verdict"]["class"], "scm");
    assert_eq!(v["advice"]["role"], "fast");
    let (ok, _, err) = run(&["probe", "sim:nope:1GiB", "--no-measure"]);
    assert!(!ok && err.contains("unknown profile"), "{err}");
}

#[test]
fn create_on_emulated_drives() {
    let (ok, out, err) = run(&[
        "create",
        "--fast",
        "sim:optane:256MiB",
        "--capacity",
        "sim:qlc:2GiB",
    ]);
    assert!(ok, "create failed: {err}");
    assert!(out.contains("indirection unit   64 KiB"), "{out}");
    assert!(out.contains("media qlc"), "{out}");
    let (ok, _, err) = run(&[
        "stats",
        "--fast",
        "sim:optane:256MiB",
        "--capacity",
        "sim:qlc:2GiB",
    ]);
    assert!(!ok && err.contains("memory of one process"), "{err}");
}
