//! Hostile clients against an in-process server, over raw loopback sockets: each
//! attack must cost bounded CPU, and never keep the server from stopping.
mod common;
use common::*;
use masse_resp::Config;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// CPU seconds this process (server and test) has used.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn server(workers: usize) -> Running {
    Running::start(Config {
        workers,
        ..Config::default()
    })
}

/// Stops the server and returns how long it took, or None past `limit`.
fn stop_within(mut s: Running, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.stop.stop();
    let th = s.thread.take().expect("thread");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = th.join();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).ok().map(|_| t.elapsed())
}

/// CVE-2022-36021: `SCAN 0 MATCH *a*a…*b` (40 bytes) against a 1000-byte key
/// used to backtrack exponentially, pinning a worker for good.
#[test]
fn hostile_scan_pattern_costs_bounded_cpu() {
    let s = server(2);
    let mut c = s.client();
    let key = "a".repeat(1000);
    assert_eq!(c.cmd(&["SET", &key, "v"]), "+OK\r\n");
    let pat = "*a".repeat(19) + "*b";
    let (t, cpu) = (Instant::now(), cpu_secs());
    let r = c.cmd(&["SCAN", "0", "MATCH", &pat, "COUNT", "10000"]);
    let (took, used) = (t.elapsed(), cpu_secs() - cpu);
    println!("SCAN MATCH {pat}: reply in {took:?}, {used:.3} s CPU");
    assert!(r.starts_with("*2\r\n"), "{r}");
    assert!(r.ends_with("*0\r\n"), "nothing matches: {r}");
    assert!(used < 1.0, "{used} s of CPU for one SCAN");
    // A match that should succeed still does.
    let ok = "*a".repeat(19) + "*";
    let r = c.cmd(&["SCAN", "0", "MATCH", &ok, "COUNT", "10000"]);
    assert!(r.contains(&key), "{r}");
    assert!(stop_within(s, Duration::from_secs(10)).is_some());
}

/// A client pipelines 1000 expensive SCANs (a 1 KiB pattern against 2000 keys of
/// 1000 bytes): the server must still stop within seconds.
#[test]
fn a_pipeline_of_expensive_scans_does_not_block_stopping() {
    let s = server(2);
    let mut c = s.client();
    for b in 0..20 {
        let keys: Vec<String> = (0..100)
            .map(|i| format!("{}{:06}", "a".repeat(994), b * 100 + i))
            .collect();
        let mut a: Vec<&[u8]> = vec![b"MSET"];
        keys.iter().for_each(|k| a.extend([k.as_bytes(), b"v"]));
        assert_eq!(c.cmd_bytes(&a), "+OK\r\n");
    }
    let pat = "*".to_string() + &"a".repeat(1022) + "b";
    let one = encode(&[b"SCAN", b"0", b"MATCH", pat.as_bytes(), b"COUNT", b"10000"]);
    let (t, cpu) = (Instant::now(), cpu_secs());
    let r = c.cmd_bytes(&[b"SCAN", b"0", b"MATCH", pat.as_bytes(), b"COUNT", b"10000"]);
    let (took, used) = (t.elapsed(), cpu_secs() - cpu);
    println!("one SCAN with a 1 KiB pattern: {took:?}, {used:.3} s CPU");
    assert!(r.starts_with("*2\r\n"), "{r}");
    let mut hostile = s.client();
    hostile.send_raw(&one.repeat(1000));
    std::thread::sleep(Duration::from_millis(500));
    let stopped = stop_within(s, Duration::from_secs(10));
    println!("stop with 1000 such SCANs pipelined: {stopped:?}");
    assert!(stopped.is_some_and(|d| d < Duration::from_secs(5)), "{stopped:?}");
}
