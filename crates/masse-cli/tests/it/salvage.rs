//! Scenario (issue 44): one damaged record in the capacity tier used to make
//! `masse scan` and `masse dump` abort, so the intact rest of the pool could be
//! neither listed nor moved. With `--salvage` both skip and report it, exit 3,
//! and the dump loads into a new pool with every other record.
use masse::{Db, DeviceSpec, Options, PoolConfig};
use std::path::Path;
use std::process::Command;

const MASSE: &str = env!("CARGO_BIN_EXE_masse");

/// A tiered pool: after a clean close its checkpoint vouches for the capacity
/// segments, so recovery does not read them again and a damaged record there
/// is met only when it is read. (In a capacity-only pool recovery scans the
/// segments, meets the damage first, and records it: `masse check`.)
fn cfg(dir: &Path, name: &str) -> PoolConfig {
    let fast = DeviceSpec::file(dir.join(format!("{name}.fast")), 64 << 20);
    let mut c = PoolConfig::tiered(fast, DeviceSpec::file(dir.join(name), 64 << 20));
    c.io.force_buffered = true;
    c
}

fn masse(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(MASSE).args(args).output().expect("run masse");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Flip one byte inside the value `needle` in the file at `path`.
fn damage(path: &Path, needle: &[u8]) {
    let mut b = std::fs::read(path).expect("read pool file");
    let at = b
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("value in the pool file");
    let copies = b.windows(needle.len()).filter(|w| *w == needle).count();
    assert_eq!(copies, 1, "the value is in the pool file once");
    b[at + 3] ^= 0x40;
    std::fs::write(path, b).expect("write pool file");
}

#[test]
fn scan_and_dump_salvage_the_intact_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = cfg(dir.path(), "src");
    let db = Db::create(&src, Options::default()).expect("create");
    for i in 0..200u32 {
        db.put(
            format!("key{i:03}").as_bytes(),
            format!("value number {i:03} ....").as_bytes(),
        )
        .expect("put");
    }
    db.close().expect("close");
    damage(&dir.path().join("src"), b"value number 117");
    let cap = dir.path().join("src").display().to_string();
    let fast = dir.path().join("src.fast").display().to_string();

    let (code, out, err) = masse(&["scan", "--fast", &fast, "--capacity", &cap]);
    assert_ne!(
        code,
        0,
        "scan read a damaged record without an error ({} keys listed): {err}",
        out.lines().count()
    );
    assert!(
        err.contains("--salvage"),
        "the error should name --salvage: {err}"
    );

    let (code, out, err) = masse(&["scan", "--fast", &fast, "--capacity", &cap, "--salvage"]);
    assert_eq!(
        code, 3,
        "salvage must exit 3 when it skipped something: {err}"
    );
    assert_eq!(out.lines().count(), 199, "every intact key is listed");
    assert!(!out.contains("key117"));
    assert!(err.contains("1 damaged record(s) skipped"), "{err}");

    let dump = dir.path().join("dump");
    let d = dump.display().to_string();
    let (code, _, err) = masse(&[
        "dump",
        "--fast",
        &fast,
        "--capacity",
        &cap,
        "--salvage",
        "-o",
        &d,
    ]);
    assert_eq!(code, 3, "{err}");
    let dst = dir.path().join("dst").display().to_string();
    let (code, _, err) = masse(&["create", "--capacity", &dst, "--capacity-size", "64M"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = masse(&["load", "--capacity", &dst, "-i", &d]);
    assert_eq!(code, 0, "{err}");
    let mut dst = PoolConfig::capacity_only(DeviceSpec::file(dir.path().join("dst"), 64 << 20));
    dst.io.force_buffered = true;
    let db = Db::open(&dst, Options::default()).expect("open copy");
    let n = db.iter().count();
    assert_eq!(n, 199, "the salvaged dump holds every intact record");
    assert_eq!(
        db.get(b"key118").expect("get").as_deref(),
        Some(&b"value number 118 ...."[..])
    );
    db.close().expect("close");
}
