//! Scenario: QEMU's `qemu-img` through NBD exports: create a qcow2 image inside a
//! masse volume and copy a raw image into and out of it, compare everything, see the
//! unwritten part stay a hole; the same copy through the raw passthrough export of a
//! plain file, whose bytes must then equal the source.
use crate::nbd_support;
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

/// Negotiate NBD_OPT_GO for `export` on a raw connection and keep it open.
fn hold_a_connection(sock: &std::path::Path, export: &str) -> std::os::unix::net::UnixStream {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock).expect("connect");
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).expect("greeting");
    s.write_all(&3u32.to_be_bytes()).expect("client flags");
    let mut data = (export.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(export.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    let mut opt = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
    opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
    opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
    opt.extend_from_slice(&data);
    s.write_all(&opt).expect("GO");
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).expect("option reply");
        let kind = u32::from_be_bytes(h[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(h[16..20].try_into().expect("4 bytes")) as usize;
        let mut d = vec![0u8; len];
        s.read_exact(&mut d).expect("reply data");
        assert_eq!(kind & (1 << 31), 0, "GO refused");
        if kind == 1 {
            return s; // NBD_REP_ACK: in the transmission phase now
        }
    }
}

#[test]
fn qemu_img_is_told_when_the_server_is_full() {
    if !have_tool("qemu-img") {
        return;
    }
    let p = Pool::create("128M", "1G");
    let s = p.serve(&["--export", "vm", "--size", "64M", "--max-connections", "1"]);
    let held = hold_a_connection(&p.sock(), "vm");
    let out = Command::new("qemu-img")
        .args(["info", &p.uri("vm")])
        .output()
        .expect("run qemu-img");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "admitted past the connection limit");
    assert!(
        err.contains("server busy") && err.contains("connection slots"),
        "qemu-img was not told why: {err}"
    );
    // The slot comes back when the held connection goes.
    drop(held);
    let t = std::time::Instant::now();
    while !Command::new("qemu-img")
        .args(["info", &p.uri("vm")])
        .output()
        .expect("run qemu-img")
        .status
        .success()
    {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "slot never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("(refused ") && !err.contains("(refused 0,"),
        "the refusal is not counted: {err}"
    );
}
