//! Scenario: `masse serve nbd` seen by libnbd's `nbdinfo` over a Unix socket and TCP:
//! the export list, sizes, block sizes and flags of volumes created by the command, a
//! read-only export, and the refusals (unknown volume without --size, a size that
//! contradicts the volume).
use crate::nbd_support;
use nbd_support::*;
use std::process::Command;

fn info(uri: &str, list: bool) -> serde_json::Value {
    let mut c = Command::new("nbdinfo");
    c.arg("--json");
    if list {
        c.arg("--list");
    }
    let o = run_ok(c.arg(uri));
    serde_json::from_slice(&o.stdout).expect("nbdinfo --json output")
}

fn export<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .find(|e| e["export-name"] == name)
        .unwrap_or_else(|| panic!("export {name} not listed in {v}"))
}

#[test]
fn nbdinfo_sees_volumes() {
    if !have_tool("nbdinfo") {
        return;
    }
    let p = Pool::create("128M", "1G");
    // First run creates "big" (4 KiB blocks); the second adds "small" (512-byte blocks).
    let s = p.serve(&["--export", "big", "--size", "48M"]);
    assert!(
        s.stdout.iter().any(|l| l.contains("nbd+unix:///big")),
        "{:?}",
        s.stdout
    );
    let (st, err) = s.stop();
    assert!(st.success(), "serve failed: {err}");
    assert!(err.contains("pool closed cleanly"), "{err}");
    let s = p.serve(&[
        "--export",
        "small",
        "--export",
        "big",
        "--size",
        "16M",
        "--block-size",
        "512",
        "--listen",
        "127.0.0.1:0",
    ]);
    // The TCP listener (port chosen by the kernel, printed at start) serves the same.
    let tcp = s
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("listening on nbd://"))
        .expect("a TCP listener line")
        .to_string();
    let t = info(&format!("nbd://{tcp}"), false);
    assert_eq!(export(&t, "small")["export-size"], 16 << 20);
    let v = info(&p.uri(""), true);
    let small = export(&v, "small");
    let big = export(&v, "big");
    assert_eq!(small["export-size"], 16 << 20);
    assert_eq!(small["block_size_minimum"], 512);
    assert_eq!(
        big["export-size"],
        48 << 20,
        "an existing volume keeps its size"
    );
    assert_eq!(big["block_size_minimum"], 4096);
    assert_eq!(big["block_size_maximum"], 32 << 20);
    assert_eq!(big["is_read_only"], false);
    assert_eq!(big["can_multi_conn"], true);
    assert_eq!(big["can_flush"], true);
    assert_eq!(big["can_fua"], true);
    assert_eq!(big["can_trim"], true);
    assert_eq!(big["can_zero"], true);
    assert!(
        big["contexts"]
            .as_array()
            .is_some_and(|c| c.iter().any(|x| x == "base:allocation")),
        "base:allocation not offered: {big}"
    );
    // The default export is the first one given (reported under its canonical name).
    let d = info(&p.uri(""), false);
    assert_eq!(export(&d, "small")["export-size"], 16 << 20);
    // A fresh volume is one hole.
    let o = run_ok(Command::new("nbdinfo").args(["--map", &p.uri("big")]));
    let map = String::from_utf8_lossy(&o.stdout);
    assert!(map.contains("hole,zero") && !map.contains("data"), "{map}");
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");

    // Read-only.
    let s = p.serve(&["--export", "big", "--read-only"]);
    assert_eq!(
        export(&info(&p.uri("big"), false), "big")["is_read_only"],
        true
    );
    s.stop();

    // Refusals: no such volume and no --size; a contradicting size.
    let o = Command::new(MASSE)
        .args(["serve", "nbd"])
        .args(p.args())
        .args(["--export", "nope", "--socket"])
        .arg(p.sock())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--size"));
    let o = Command::new(MASSE)
        .args(["serve", "nbd"])
        .args(p.args())
        .args(["--export", "big", "--size", "1G", "--socket"])
        .arg(p.sock())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("exists with size"));
}
