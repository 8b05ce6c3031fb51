//! Scenario: QEMU's `qemu-img` through NBD exports: create a qcow2 image inside a
//! masse volume and copy a raw image into and out of it, compare everything, see the
//! unwritten part stay a hole; the same copy through the raw passthrough export of a
//! plain file, whose bytes must then equal the source.
mod nbd_support;
use nbd_support::*;
use std::process::Command;

fn source_image(path: &std::path::Path) {
    // 24 MiB of data with a 8 MiB zero gap in the middle.
    let mut v = vec![0u8; 24 << 20];
    let mut x: u64 = 0x243F_6A88_85A3_08D3;
    for (i, b) in v.iter_mut().enumerate() {
        if (8 << 20..16 << 20).contains(&i) {
            continue;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(path, &v).expect("write source image");
}

#[test]
fn qemu_img_through_exports() {
    if !have_tool("qemu-img") || !have_tool("nbdinfo") {
        return;
    }
    let p = Pool::create("128M", "1G");
    let src = p.dir.path().join("src.raw");
    source_image(&src);
    let s = p.serve(&["--export", "vm", "--size", "64M"]);
    let vm = p.uri("vm");

    // A qcow2 image created inside the volume, filled from the raw source.
    run_ok(Command::new("qemu-img").args(["create", "-f", "qcow2", &vm, "24M"]));
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "qcow2"])
            .arg(&src)
            .arg(&vm),
    );
    run_ok(Command::new("qemu-img").args(["check", "-f", "qcow2", &vm]));
    run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "qcow2"])
            .arg(&src)
            .arg(&vm),
    );
    // And back out to a local file.
    let out = p.dir.path().join("out.raw");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-f", "qcow2", "-O", "raw", &vm])
            .arg(&out),
    );
    assert!(std::fs::read(&out).expect("out") == std::fs::read(&src).expect("src"));
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");

    // Raw copy into a second volume (created by size now), after a restart.
    let s = p.serve(&["--export", "copy", "--size", "32M"]);
    let copy = p.uri("copy");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&copy),
    );
    // -s: the export is larger than the source; compare the common part strictly.
    let o = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&copy)
        .output()
        .expect("compare");
    assert!(
        o.status.success(),
        "compare: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    // The zero gap and the tail were never written: holes.
    let o = run_ok(Command::new("nbdinfo").args(["--map", &copy]));
    let map = String::from_utf8_lossy(&o.stdout);
    assert!(map.lines().any(|l| l.contains("hole")), "no hole in {map}");
    // A wrong byte makes compare fail: the comparison is real.
    let mut bad = std::fs::read(&src).expect("src");
    bad[12345] ^= 0xFF;
    let bad_path = p.dir.path().join("bad.raw");
    std::fs::write(&bad_path, &bad).expect("bad");
    let o = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&bad_path)
        .arg(&copy)
        .output()
        .expect("compare");
    assert!(!o.status.success(), "compare missed a changed byte");
    s.stop();

    // Passthrough export of a plain file: the file holds exactly what was written.
    let raw = p.dir.path().join("raw.img");
    std::fs::write(&raw, vec![0u8; 32 << 20]).expect("raw file");
    let rs = Server::start(&[
        "serve".into(),
        "nbd".into(),
        "--raw".into(),
        raw.display().to_string(),
        "--socket".into(),
        p.sock().display().to_string(),
    ]);
    let ru = p.uri("raw");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&ru),
    );
    run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(&ru),
    );
    let (st, err) = rs.stop();
    assert!(st.success(), "{err}");
    let got = std::fs::read(&raw).expect("raw");
    let want = std::fs::read(&src).expect("src");
    assert!(
        got[..want.len()] == want[..],
        "raw file differs from the source"
    );
    assert!(got[want.len()..].iter().all(|&b| b == 0));
}
