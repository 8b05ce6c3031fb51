//! Scenario: fio's `nbd` engine writes random 4 KiB blocks with crc32c verify headers
//! from four concurrent connections (plus a 512-byte-block export written with 16 KiB
//! chunks, i.e. read-modify-write), the server is stopped with SIGTERM and restarted,
//! and fio verifies every block; then a rewrite with another seed must make the old
//! verify state fail (the check is real).
use crate::nbd_support;
use nbd_support::*;
use std::process::Command;

fn fio(dir: &std::path::Path, uri: &str, extra: &[&str]) -> std::process::Output {
    Command::new("fio")
        .current_dir(dir)
        .args([
            "--name=v",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=4",
            "--size=8M",
            "--offset_increment=8M",
            "--verify=crc32c",
            "--group_reporting",
        ])
        .args(extra)
        .output()
        .expect("run fio")
}

#[test]
fn fio_verify_across_restart() {
    if !have_tool("fio") {
        return;
    }
    let p = Pool::create("128M", "1G");
    let dir = p.dir.path().to_path_buf();
    let s = p.serve(&["--export", "d", "--size", "64M"]);
    let uri = p.uri("d");
    let o = fio(
        &dir,
        &uri,
        &["--do_verify=0", "--verify_state_save=1", "--randseed=11"],
    );
    assert!(
        o.status.success(),
        "fio write: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    assert!(err.contains("pool closed cleanly"), "{err}");

    let s = p.serve(&["--export", "d"]);
    let o = fio(
        &dir,
        &uri,
        &["--verify_only=1", "--verify_state_load=1", "--randseed=11"],
    );
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "fio verify failed after restart: {text}"
    );
    assert!(
        text.contains("read: IOPS"),
        "verify pass read nothing: {text}"
    );

    // Overwrite with another seed (different data, same offsets), then verify against
    // the old state: fio must report mismatches.
    let o = fio(
        &dir,
        &uri,
        &[
            "--do_verify=0",
            "--randseed=99",
            "--verify_pattern=0x5a5a5a5a",
            "--verify=pattern",
        ],
    );
    assert!(
        o.status.success(),
        "fio rewrite: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = fio(
        &dir,
        &uri,
        &["--verify_only=1", "--verify_state_load=1", "--randseed=11"],
    );
    assert!(!o.status.success(), "fio verify passed on overwritten data");
    s.stop();

    // Sub-chunk writes: 512-byte blocks in 16 KiB chunks, verified in the same run.
    let s = p.serve(&[
        "--export",
        "rmw",
        "--size",
        "16M",
        "--block-size",
        "512",
        "--chunk-size",
        "16K",
    ]);
    let o = Command::new("fio")
        .current_dir(&dir)
        .args([
            "--name=rmw",
            "--ioengine=nbd",
            &format!("--uri={}", p.uri("rmw")),
            "--rw=randwrite",
            "--bs=512",
            "--iodepth=32",
            "--numjobs=2",
            "--size=2M",
            "--offset_increment=4M",
            "--verify=crc32c",
            "--group_reporting",
        ])
        .output()
        .expect("fio");
    assert!(
        o.status.success(),
        "fio 512-byte verify: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}
