//! Hostile clients against an in-process server, over raw loopback sockets: each
//! attack must cost bounded CPU, and never keep the server from stopping.
use crate::common;
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
    assert!(
        stopped.is_some_and(|d| d < Duration::from_secs(5)),
        "{stopped:?}"
    );
}

/// `--timeout 2`: a client dripping one byte every 300 ms into an endless bulk
/// string has sent no whole command, so it is idle and closed (it used to count
/// every byte as activity and stay forever).
#[test]
fn a_byte_dripping_client_is_closed_by_the_idle_timeout() {
    let s = Running::start(Config {
        idle_timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    });
    let mut c = s.client();
    c.r.get_mut()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000\r\n");
    let t = Instant::now();
    let mut closed = None;
    let mut b = [0u8; 64];
    while t.elapsed() < Duration::from_secs(10) {
        use std::io::{Read, Write};
        if c.r.get_mut().write_all(b"x").is_err() {
            closed = Some(t.elapsed());
            break;
        }
        match c.r.get_mut().read(&mut b) {
            Ok(0) => {
                closed = Some(t.elapsed());
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = Some(t.elapsed());
                break;
            }
        }
    }
    println!("byte-per-300-ms client with --timeout 2: closed after {closed:?}");
    assert!(
        closed.is_some_and(|d| d < Duration::from_secs(5)),
        "{closed:?}"
    );
    // A client sending whole commands more often than the timeout stays.
    let mut good = s.client();
    for _ in 0..4 {
        assert_eq!(good.cmd(&["PING"]), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(800));
    }
    assert_eq!(good.cmd(&["PING"]), "+PONG\r\n");
}

fn with_password() -> Running {
    Running::start(Config {
        password: Some(b"sesame".to_vec()),
        ..Config::default()
    })
}

/// Wrong passwords: each reply is held back, a connection is closed after 5, and
/// the failures are counted; many connections together are paced server-wide.
#[test]
fn password_guessing_is_slowed_and_cut_off() {
    let s = with_password();
    let mut c = s.client();
    let wrong = encode(&[b"AUTH", b"guess"]);
    let t = Instant::now();
    c.send_raw(&wrong.repeat(1000));
    let all = c.until_closed();
    let took = t.elapsed();
    let n = all.matches("-WRONGPASS").count();
    println!(
        "1000 pipelined wrong AUTHs on one connection: {n} answered, then closed, in {took:?}"
    );
    assert_eq!(n, 5, "{all}");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // 16 connections guessing in parallel, reconnecting when cut off, for 2 s.
    let addr = s.addr;
    let t = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let wrong = wrong.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while t.elapsed() < Duration::from_secs(2) {
                    let mut c = Client::connect(addr);
                    c.send_raw(&wrong.repeat(5));
                    n += c.until_closed().matches("-WRONGPASS").count();
                }
                n
            })
        })
        .collect();
    let total: usize = threads
        .into_iter()
        .map(|h| h.join().expect("guesser"))
        .sum();
    let rate = total as f64 / t.elapsed().as_secs_f64();
    println!(
        "16 connections guessing: {total} answers in {:?}, {rate:.0} guesses/s",
        t.elapsed()
    );
    assert!(rate < 150.0, "{rate} guesses/s");
    let mut ok = s.client();
    assert_eq!(ok.cmd(&["AUTH", "sesame"]), "+OK\r\n");
    let info = ok.cmd(&["INFO", "stats"]);
    assert!(
        info.contains(&format!("auth_failures:{}", total + 5)),
        "{info}"
    );
    assert!(info.contains("auth_disconnects:"), "{info}");
}

/// Protected mode on a dual-stack `[::]` listener: 127.0.0.1 arrives as
/// ::ffff:127.0.0.1 and is still this machine. CONFIG GET says the setting.
#[test]
fn protected_mode_knows_v4_mapped_loopback_and_says_so() {
    let Ok(probe) = std::net::TcpListener::bind("[::]:0") else {
        eprintln!("NOTICE: no IPv6 here; skipping");
        return;
    };
    drop(probe);
    let s = Running::start_on(Config::default(), "[::]:0");
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], s.addr.port()));
    let mut c = Client::connect(v4);
    assert_eq!(c.cmd(&["PING"]), "+PONG\r\n");
    let r = c.cmd(&["CONFIG", "GET", "protected-mode"]);
    assert!(r.ends_with("$3\r\nyes\r\n"), "{r}");
    let p = with_password();
    let mut c = p.client();
    assert_eq!(c.cmd(&["AUTH", "sesame"]), "+OK\r\n");
    let r = c.cmd(&["CONFIG", "GET", "protected-mode"]);
    assert!(
        r.ends_with("$3\r\nyes\r\n"),
        "protected mode is still set with a password: {r}"
    );
}

/// A client name is kept for the connection's life: names over 1 KiB are refused
/// (a 2 MiB name used to be kept per connection).
#[test]
fn client_names_are_bounded() {
    let s = Running::start(Config::default());
    let mut c = s.client();
    let ok = "n".repeat(1024);
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", &ok]), "+OK\r\n");
    let long = "n".repeat(1025);
    let e = "-ERR Client names, lib-name and lib-ver are limited to 1024 bytes by masse.\r\n";
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", &long]), e);
    assert_eq!(c.cmd(&["CLIENT", "SETINFO", "LIB-NAME", &long]), e);
    assert_eq!(c.cmd(&["CLIENT", "SETINFO", "LIB-VER", &long]), e);
    assert!(c
        .cmd(&["HELLO", "2", "SETNAME", &long])
        .starts_with("-ERR Client names, lib-name"));
    assert_eq!(
        c.cmd(&["CLIENT", "GETNAME"]),
        format!("${}\r\n{ok}\r\n", ok.len())
    );
    let big = "n".repeat(1 << 20);
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", &big]), e);
}
