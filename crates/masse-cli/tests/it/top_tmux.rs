//! Scenario: `masse top` in a terminal (tmux) over `masse serve nbd --metrics` while
//! fio writes: the screen shows a non-zero put rate with latency percentiles, the
//! IOPS consistency, the devices with their lifetime share of --rated-tbw, and q quits.
use crate::nbd_support;
use nbd_support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tmux(sock: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", sock])
        .args(args)
        .output()
        .expect("run tmux")
}

#[test]
fn top_in_tmux_shows_the_live_load_and_quits_on_q() {
    if !have_tool("fio") || !have_tool("tmux") {
        return;
    }
    let p = Pool::create("128M", "1G");
    let s = p.serve(&["--export", "d", "--size", "64M", "--metrics", "127.0.0.1:0"]);
    let url = s
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("metrics on "))
        .expect("the server prints its metrics URL")
        .to_string();
    let mut fio = Command::new("fio")
        .current_dir(p.dir.path())
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", p.uri("d")),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=8",
            "--size=32M",
            "--time_based",
            "--runtime=8",
            "--verify_state_save=0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run fio");
    let sock = format!("masse-top-test-{}", std::process::id());
    let cmd = format!("{MASSE} top --metrics {url} --rated-tbw 1000");
    let o = tmux(
        &sock,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "120",
            "-y",
            "40",
            &cmd,
        ],
    );
    assert!(
        o.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::thread::sleep(Duration::from_millis(3500));
    let screen = String::from_utf8_lossy(&tmux(&sock, &["capture-pane", "-p", "-t", "top"]).stdout)
        .to_string();
    tmux(&sock, &["send-keys", "-t", "top", "q"]);
    let t0 = Instant::now();
    while tmux(&sock, &["has-session", "-t", "top"]).status.success() {
        if t0.elapsed() > Duration::from_secs(5) {
            tmux(&sock, &["kill-server"]);
            panic!("masse top did not quit on q; screen:\n{screen}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = fio.kill();
    let _ = fio.wait();
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");

    assert!(
        screen.contains("IOPS consistency so far"),
        "screen:\n{screen}"
    );
    let put = screen
        .lines()
        .find(|l| l.starts_with("put "))
        .unwrap_or_else(|| panic!("no put row:\n{screen}"));
    let f: Vec<&str> = put.split_whitespace().collect();
    let rate: f64 = f[1].parse().expect("put ops/s");
    assert!(rate > 0.0, "no puts counted while fio wrote:\n{screen}");
    // NBD writes reach the engine as batches: their latency is the batch row's.
    let batch = screen
        .lines()
        .find(|l| l.starts_with("batch "))
        .expect("batch row");
    let b: Vec<&str> = batch.split_whitespace().collect();
    assert!(
        b[2..5].iter().all(|x| *x != "-"),
        "no batch latency percentiles:\n{screen}"
    );
    let cap = screen
        .lines()
        .find(|l| l.starts_with("capacity "))
        .unwrap_or_else(|| panic!("no capacity device row:\n{screen}"));
    assert!(cap.contains('%'), "no lifetime share of --rated-tbw: {cap}");
    println!("{screen}");
}
