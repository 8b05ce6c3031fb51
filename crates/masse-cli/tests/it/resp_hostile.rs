//! Hostile clients against `masse serve resp`, over raw sockets: malformed RESP,
//! huge lengths, unterminated frames, a client that never reads its replies, 1000
//! idle connections, too many clients. Each costs only its own connection: the
//! server answers Redis's protocol error and closes it, or keeps it parked, while a
//! well-behaved client keeps being served.
use crate::resp_support;
use resp_support::*;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Lets this process hold `n` more sockets (the server raises its own limit).
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

/// A good client's round trip must keep working, and quickly.
fn healthy(port: u16) -> Duration {
    let t = Instant::now();
    let mut c = Raw::connect(port);
    assert_eq!(c.cmd(&["SET", "health", "ok"]), "+OK\r\n");
    assert_eq!(c.cmd(&["GET", "health"]), "$2\r\nok\r\n");
    t.elapsed()
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn hostile_clients_cost_only_their_connection() {
    // INFO is read with redis-cli.
    if !have_tool("redis-cli") {
        return;
    }
    raise_fd_limit(4096);
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &[]);
    let pid = srv.child.as_ref().expect("child").id();
    let long_digits = [b"*".as_slice(), &[b'1'; 70_000]].concat();
    let long_inline = vec![b'a'; 70_000];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad count",
            b"*abc\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            "2^31 args",
            b"*2147483648\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            "bad length",
            b"*1\r\n$x\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            "4 GiB bulk",
            b"*1\r\n$4294967296\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            "bulk over masse's value limit",
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2097152\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            "not a bulk",
            b"*1\r\n:12\r\n".to_vec(),
            "-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            "bulk without CRLF",
            b"*1\r\n$3\r\nabcXY".to_vec(),
            "-ERR Protocol error: bulk string not followed by CRLF\r\n",
        ),
        (
            "endless count",
            long_digits,
            "-ERR Protocol error: too big mbulk count string\r\n",
        ),
        (
            "endless inline",
            long_inline,
            "-ERR Protocol error: too big inline request\r\n",
        ),
        (
            "unbalanced quotes",
            b"SET \"k v\r\n".to_vec(),
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ];
    for (what, input, want) in &cases {
        let mut c = Raw::connect(port);
        let _ = c.send(input); // the server may close before taking it all
        assert_eq!(&c.until_closed(), want, "{what}");
    }
    let mut g = Raw::connect(port);
    g.send(b"\x00\xff\xfe garbage\r\n").expect("send");
    assert!(
        g.reply().starts_with("-ERR unknown command"),
        "binary junk is an unknown inline command"
    );
    println!("malformed: {} cases answered with Redis's protocol error and closed; {:?} for a good round trip after them", cases.len(), healthy(port));

    // Unterminated frames: 50 clients stop in the middle of a 1 MB value.
    let parked: Vec<Raw> = (0..50)
        .map(|_| {
            let mut c = Raw::connect(port);
            c.send(b"*3\r\n$3\r\nSET\r\n$6\r\nparked\r\n$1000000\r\npartial")
                .expect("send");
            c
        })
        .collect();
    let t = healthy(port);
    assert_eq!(
        Raw::connect(port).cmd(&["EXISTS", "parked"]),
        ":0\r\n",
        "an unfinished SET is not applied"
    );
    println!("unterminated: 50 clients parked mid-value; good round trip {t:?}");
    drop(parked);

    // A client that pipelines reads of a 1 MB value and never reads the replies.
    let mut w = Raw::connect(port);
    let big = "x".repeat(1 << 20);
    assert_eq!(w.cmd(&["SET", "big", &big]), "+OK\r\n");
    let rss0 = rss_kib(pid);
    let mut lazy = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    lazy.set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let get = encode(&[b"GET", b"big"]);
    let mut sent = 0;
    use std::io::Write;
    for _ in 0..2000 {
        if lazy.write_all(&get).is_err() {
            break; // the server stopped reading: backpressure
        }
        sent += 1;
    }
    std::thread::sleep(Duration::from_millis(300));
    let t = healthy(port);
    let grew = rss_kib(pid).saturating_sub(rss0);
    println!("non-reader: {sent} GETs of 1 MiB sent, unread; server RSS grew {grew} KiB; good round trip {t:?}");
    assert!(
        grew < 256 << 10,
        "a client that never reads made the server grow by {grew} KiB"
    );
    drop(lazy);

    // 1000 idle connections.
    std::thread::sleep(Duration::from_millis(300));
    let rss1 = rss_kib(pid);
    let t0 = Instant::now();
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    let opened = t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let connected = info_field(port, "connected_clients");
    let t = healthy(port);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);
    let grew = rss_kib(pid).saturating_sub(rss1);
    println!("idle: 1000 connections opened in {opened:?}; server has {connected} clients, {threads} threads, RSS +{grew} KiB; good round trip {t:?}");
    assert!(grew < 64 << 10, "1000 idle connections cost {grew} KiB");
    assert!(connected >= 1000.0, "{connected} clients connected");
    drop(idle);
    let (st, err) = srv.stop();
    assert!(st.success() && err.contains("pool closed cleanly"), "{err}");
}

#[test]
fn too_many_clients_are_told_so() {
    let pool = Pool::create("64M", "512M");
    let (_srv, port) = serve(&pool, &["--max-clients", "3"]);
    let held: Vec<Raw> = (0..3).map(|_| Raw::connect(port)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut extra = Raw::connect(port);
    assert_eq!(
        extra.until_closed(),
        "-ERR max number of clients reached\r\n"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(Raw::connect(port).cmd(&["PING"]), "+PONG\r\n");
}

/// 20 clients pipeline GETs of a largest value and never read a reply: each may
/// cost its output limit (4 MiB) and one bounded run of reads past it, not 32
/// values read at once (~130 MiB per client before).
#[test]
fn non_reading_pipeliners_cost_bounded_memory() {
    use std::io::Write;
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &[]);
    let pid = srv.child.as_ref().expect("child").id();
    let big = "x".repeat((2 << 20) - (4 << 10));
    assert_eq!(Raw::connect(port).cmd(&["SET", "big", &big]), "+OK\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let rss0 = rss_kib(pid);
    let get = encode(&[b"GET", b"big"]);
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let get = get.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_write_timeout(Some(Duration::from_secs(2)))
                    .expect("timeout");
                let mut sent = 0;
                while sent < 500 && s.write_all(&get).is_ok() {
                    sent += 1;
                }
                (s, sent)
            })
        })
        .collect();
    let held: Vec<(TcpStream, usize)> = clients
        .into_iter()
        .map(|h| h.join().expect("client"))
        .collect();
    // The peak over 3 s: the server may still be answering what it read.
    let grew = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            rss_kib(pid)
        })
        .max()
        .unwrap_or(0)
        .saturating_sub(rss0);
    let t = healthy(port);
    let sent: usize = held.iter().map(|h| h.1).sum();
    println!("20 non-reading pipeliners: {sent} GETs of 2 MiB sent; server RSS +{} MiB; good round trip {t:?}", grew >> 10);
    assert!(
        grew < 512 << 10,
        "20 non-reading clients grew the server by {} MiB",
        grew >> 10
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "after they left: RSS +{} MiB",
        rss_kib(pid).saturating_sub(rss0) >> 10
    );
}
