//! `masse serve resp --metrics`: the RESP face's counters and the engine's next to
//! them, scraped with curl and valid for `promtool check metrics`; the counts match
//! the commands sent.
use crate::nbd_support;
use crate::resp_support;
use nbd_support::{samples, scrape};
use resp_support::*;

#[test]
fn resp_metrics_count_commands_and_pass_promtool() {
    if !have_tool("curl") || !have_tool("promtool") {
        return;
    }
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &["--metrics", "127.0.0.1:0"]);
    let url = srv
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("metrics on "))
        .unwrap_or_else(|| panic!("no metrics address in {:?}", srv.stdout))
        .to_string();
    let mut c = Raw::connect(port);
    assert_eq!(c.cmd(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.cmd(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.cmd(&["GET", "absent"]), "$-1\r\n");
    let m = samples(&scrape(&url));
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no sample {k}"));
    assert_eq!(get("masse_resp_events_total{kind=\"commands\"}"), 3.0);
    assert_eq!(get("masse_resp_events_total{kind=\"hits\"}"), 1.0);
    assert_eq!(get("masse_resp_events_total{kind=\"misses\"}"), 1.0);
    assert_eq!(get("masse_resp_connected"), 1.0);
    assert!(get("masse_resp_network_bytes_total{direction=\"in\"}") > 0.0);
    // The engine's own families are served next to the face's.
    assert!(
        m.keys().any(|k| k.starts_with("masse_ops_total")),
        "no engine counters in {:?}",
        m.keys().collect::<Vec<_>>()
    );
}

/// A field of /proc/PID/status (VmRSS in KiB, Threads).
fn status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn metrics_port(srv: &Server) -> u16 {
    srv.stdout
        .iter()
        .find_map(|l| l.strip_prefix("metrics on http://127.0.0.1:"))
        .and_then(|r| r.strip_suffix("/metrics"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no loopback metrics address in {:?}", srv.stdout))
}

/// One raw HTTP exchange: everything the server sends before closing.
fn http(port: u16, req: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(req);
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
    String::from_utf8_lossy(&b).into_owned()
}

fn raise_fd_limit(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max.min(r.rlim_cur.max(n));
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// Four clients each send a header line of up to 64 MiB: the server reads at most
/// 8 KiB of a request, answers 431 and closes (it used to store the line whole).
fn huge_headers(port: u16, pid: u32) {
    use std::io::{Read, Write};
    let rss0 = status(pid, "VmRSS:");
    let chunk = vec![b'a'; 1 << 20];
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_write_timeout(Some(std::time::Duration::from_secs(2)))
                    .expect("timeout");
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .expect("timeout");
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nX-Junk: ");
                let mut sent = 0;
                while sent < 64 && s.write_all(&chunk).is_ok() {
                    sent += 1;
                }
                let mut b = [0u8; 64];
                let n = s.read(&mut b).unwrap_or(0);
                (sent, String::from_utf8_lossy(&b[..n]).into_owned())
            })
        })
        .collect();
    let mut peak = 0;
    let replies: Vec<(usize, String)> = clients
        .into_iter()
        .map(|h| {
            peak = peak.max(status(pid, "VmRSS:"));
            h.join().expect("client")
        })
        .collect();
    let grew = peak.max(status(pid, "VmRSS:")).saturating_sub(rss0);
    println!(
        "huge headers: 4 clients sent {:?} MiB; server RSS +{grew} KiB; replies {:?}",
        replies.iter().map(|r| r.0).collect::<Vec<_>>(),
        replies
            .iter()
            .map(|r| r.1.lines().next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        grew < 8 << 10,
        "huge header lines grew the server by {grew} KiB"
    );
    assert!(
        replies.iter().any(|r| r.1.starts_with("HTTP/1.1 431")),
        "{replies:?}"
    );
}

/// 1,500 connections each send half a request and wait: a fixed pool answers,
/// the excess is refused, no thread per connection (it used to be 1,611 threads).
fn partial_requests(port: u16, pid: u32) {
    use std::io::Write;
    // The server starts its threads (128 RESP workers, the engine's) in the
    // background: take the baseline once their number has settled.
    let mut before = status(pid, "Threads:");
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = status(pid, "Threads:");
        if now == before {
            break;
        }
        before = now;
    }
    let t = std::time::Instant::now();
    let held: Vec<std::net::TcpStream> = (0..1500)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
            Some(s)
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = status(pid, "Threads:");
    println!(
        "partial requests: {} connections opened in {:?}; server threads {before} -> {during}",
        held.len(),
        t.elapsed()
    );
    // The engine may start a background thread meanwhile; a thread per
    // connection would be +1,500.
    assert!(during < before + 20, "{before} -> {during} threads");
    drop(held);
    // Once the partial clients are gone, scrapes are answered again.
    let t = std::time::Instant::now();
    loop {
        let r = http(port, b"GET /metrics HTTP/1.1\r\n\r\n");
        if r.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            t.elapsed().as_secs() < 15,
            "no scrape answered after the attack: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    println!(
        "first good scrape {:?} after the partial clients left",
        t.elapsed()
    );
}

#[test]
fn metrics_endpoint_bounds_hostile_clients() {
    raise_fd_limit(4096);
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &["--metrics", "127.0.0.1:0"]);
    let pid = srv.child.as_ref().expect("child").id();
    let mport = metrics_port(&srv);
    let ok = http(mport, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    huge_headers(mport, pid);
    partial_requests(mport, pid);
    // A request that never ends is cut off after 5 s (408).
    let t = std::time::Instant::now();
    let slow = http(mport, b"GET /metrics HTTP/1.1\r\n");
    println!(
        "slow request: {:?} after {:?}",
        slow.lines().next(),
        t.elapsed()
    );
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
    assert!(t.elapsed().as_secs() < 8);
    assert_eq!(Raw::connect(port).cmd(&["PING"]), "+PONG\r\n");
}

/// A bare port listens on loopback; a token file makes /metrics answer 401 without
/// the token; device paths appear only with --metrics-paths.
#[test]
fn metrics_token_loopback_and_paths() {
    let pool = Pool::create("64M", "512M");
    let dir = tempfile::tempdir().expect("tempdir");
    let tf = dir.path().join("token");
    std::fs::write(&tf, "s3cret\n").expect("token");
    let tfs = tf.display().to_string();
    let (srv, _) = serve(&pool, &["--metrics", "0", "--metrics-token-file", &tfs]);
    let mport = metrics_port(&srv);
    let get = |auth: &str| {
        http(
            mport,
            format!("GET /metrics HTTP/1.1\r\n{auth}\r\n").as_bytes(),
        )
    };
    assert!(get("").starts_with("HTTP/1.1 401"), "{}", get(""));
    assert!(get("Authorization: Bearer nope\r\n").starts_with("HTTP/1.1 401"));
    let ok = get("Authorization: Bearer s3cret\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let cap = pool.cap.display().to_string();
    assert!(!ok.contains(&cap), "a device path is shown by default");
    assert!(ok.contains("device=\"dev0\""), "{ok}");
    let pool2 = Pool::create("64M", "512M");
    let (srv2, _) = serve(&pool2, &["--metrics", "127.0.0.1:0", "--metrics-paths"]);
    let shown = http(metrics_port(&srv2), b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        shown.contains("device=\"/"),
        "--metrics-paths shows the paths: {shown}"
    );
}
