//! Hostile clients (issue 13) cannot take the server from others:
//! - a client that never reads its replies slows only itself, and is dropped once
//!   its replies make no progress for `stall_timeout`;
//! - connection slots: at the limit a newcomer is told why it is refused while
//!   existing clients keep working; idle and silent (half-open) connections give
//!   their slot to newcomers; a handshake trickled byte by byte ends at
//!   `handshake_timeout`; a write whose payload stops arriving is dropped and
//!   gives back the memory it held; TCP connections carry keep-alive probes, so
//!   a peer that vanished (half-open) is found even while idle;
//! - memory: sixteen connections pushing 4 × 32 MiB writes each at a stalled
//!   backend keep the server within `max_buffer_bytes` (RSS measured), and the
//!   memory goes back once they are done.
//!
//! The tests run one at a time (a lock): the memory test reads this process's RSS.
mod common;
use common::*;
use masse::vblock::VolumeSpec;
use masse_nbd::backend::{BResult, Backend, Status};
use masse_nbd::proto::*;
use masse_nbd::{Export, Server, ServerConfig};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// A request header.
fn header(kind: u16, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut b = REQUEST_MAGIC.to_be_bytes().to_vec();
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// One round of a well-behaved client: 8 writes and 8 reads of 64 KiB pipelined,
/// all replies read. Returns how long it took.
fn round(c: &mut Client, seed: u64) -> Duration {
    let t = Instant::now();
    let data = pattern(seed, 64 << 10);
    for i in 0..8u64 {
        c.send(0, CMD_WRITE, i, i * (64 << 10), 64 << 10, &data);
        c.send(0, CMD_READ, 100 + i, i * (64 << 10), 64 << 10, &[]);
    }
    for _ in 0..16 {
        let r = c.reply(|h| if h >= 100 { 64 << 10 } else { 0 });
        assert_eq!(r.error, 0, "request {} failed", r.handle);
    }
    t.elapsed()
}

#[test]
fn a_stalled_reader_slows_only_itself() {
    let _g = serial();
    let cfg = ServerConfig {
        stall_timeout: Duration::from_secs(5),
        ..ServerConfig::default()
    };
    let r = start(VolumeSpec::new(64 << 20), cfg);
    // The stalled client: 256 reads of 1 MiB in flight, replies never read.
    let mut stalled = Client::connect(&r, "disk", false, false);
    for i in 0..256u64 {
        stalled.send(0, CMD_READ, i, (i % 64) << 20, 1 << 20, &[]);
    }
    // Everyone else goes on at full speed meanwhile.
    let mut good = Client::connect(&r, "disk", true, false);
    let t0 = Instant::now();
    let (mut rounds, mut worst) = (0, Duration::ZERO);
    while t0.elapsed() < Duration::from_millis(2500) {
        worst = worst.max(round(&mut good, rounds));
        rounds += 1;
    }
    eprintln!("{rounds} rounds of 16 requests beside a stalled reader; slowest {worst:?}");
    // (Before, the workers blocked on the stalled client's socket and everyone
    // waited for its stall timeout.)
    assert!(
        worst < Duration::from_secs(2),
        "a round took {worst:?} beside a client that does not read"
    );
    // The stalled client is dropped after its stall timeout.
    let t = Instant::now();
    while r.stats.stalled.load(Relaxed) == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never dropped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut sink = vec![0u8; 1 << 20];
    let mut got = 0;
    loop {
        match stalled.s.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(got < 257 << 20, "the dropped client got every reply");
    round(&mut good, 999);
    good.disconnect();
    r.shutdown();
}

/// GO on a fresh connection: Ok(client) or Err((reply type, message)).
fn try_go(sock: &std::path::Path) -> Result<Client, (u32, String)> {
    let mut s = raw_connect_path(sock);
    let mut g = [0u8; 18];
    if s.read_exact(&mut g).is_err() {
        return Err((0, "closed before the greeting".into()));
    }
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("flags");
    send_opt(&mut s, OPT_GO, &go_data("disk", &[]));
    let mut h = [0u8; 20];
    if s.read_exact(&mut h).is_err() {
        return Err((0, "closed without a reply".into()));
    }
    let (kind, len) = (be32(&h[12..]), be32(&h[16..]) as usize);
    let mut d = vec![0u8; len];
    s.read_exact(&mut d).expect("reply data");
    if kind & (1 << 31) != 0 {
        return Err((kind, String::from_utf8_lossy(&d).into_owned()));
    }
    drop(s);
    Ok(Client::connect_path(sock, "disk", false, false))
}

#[test]
fn idle_and_silent_connections_give_up_their_slots() {
    let _g = serial();
    let cfg = ServerConfig {
        max_connections: 8,
        idle_timeout: Duration::from_millis(1500),
        handshake_timeout: Duration::from_secs(3),
        ..ServerConfig::default()
    };
    let r = start(VolumeSpec::new(8 << 20), cfg);
    // Eight clients connect and then idle.
    let mut idle: Vec<Client> = (0..8)
        .map(|_| Client::connect(&r, "disk", false, false))
        .collect();
    // A newcomer is refused, and told why.
    let (kind, msg) = try_go(&r.sock)
        .err()
        .expect("a ninth connection is refused");
    assert_eq!(kind, REP_ERR_POLICY, "{msg}");
    assert!(msg.contains("connection slots"), "{msg}");
    // Those connected are still served.
    assert_eq!(idle[0].write(1, 0, &pattern(1, 4096)), 0);
    // Once idle long enough, the one silent longest makes room.
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(idle[0].write(2, 0, &pattern(2, 4096)), 0);
    let mut newcomer = try_go(&r.sock).expect("admitted in place of an idle client");
    assert_eq!(newcomer.write(3, 4096, &pattern(3, 4096)), 0);
    assert_eq!(idle[0].read(4, 0, 4096), (0, pattern(2, 4096)));
    assert!(r.stats.evicted.load(Relaxed) >= 1);
    drop(idle);
    drop(newcomer);

    // Connections that say nothing at all (a flood, or peers that vanished) hold
    // their slot for a second, not for the handshake timeout.
    std::thread::sleep(Duration::from_millis(200));
    let silent: Vec<UnixStream> = (0..8).map(|_| raw_connect(&r)).collect();
    std::thread::sleep(Duration::from_millis(1200));
    let t = Instant::now();
    let mut c = try_go(&r.sock).expect("admitted in place of a silent connection");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(c.write(5, 0, &pattern(5, 4096)), 0);
    drop(silent);

    // A handshake trickled a byte at a time ends at the handshake timeout.
    let mut slow = raw_connect(&r);
    let t = Instant::now();
    let mut g = [0u8; 18];
    slow.read_exact(&mut g).expect("greeting");
    let mut bytes = (FLAG_C_FIXED_NEWSTYLE as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&IHAVEOPT.to_be_bytes());
    let closed_after = bytes.iter().find_map(|b| {
        std::thread::sleep(Duration::from_millis(400));
        slow.write_all(&[*b]).err().map(|_| t.elapsed())
    });
    let closed_after = closed_after.unwrap_or_else(|| {
        assert!(closed(&mut slow), "still open after {:?}", t.elapsed());
        t.elapsed()
    });
    assert!(
        closed_after < Duration::from_secs(5),
        "a trickled handshake lasted {closed_after:?}"
    );
    c.disconnect();
    r.shutdown();
}

/// Writes wait at a gate (a stalled device), then are discarded.
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    writes: AtomicU64,
}

impl Gate {
    fn wait(&self) {
        let mut o = self.open.lock().unwrap();
        while !*o {
            o = self.cv.wait(o).unwrap();
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

struct GatedSink(Arc<Gate>);

impl Backend for GatedSink {
    fn size(&self) -> u64 {
        4 << 30
    }
    fn min_block_size(&self) -> u32 {
        4096
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn read(&self, _offset: u64, buf: &mut [u8]) -> BResult<()> {
        buf.fill(0);
        Ok(())
    }
    fn write(&self, _offset: u64, _data: &[u8], _fua: bool) -> BResult<()> {
        self.0.wait();
        self.0.writes.fetch_add(1, Relaxed);
        Ok(())
    }
    fn flush(&self) -> BResult<()> {
        Ok(())
    }
    fn trim(&self, _o: u64, _l: u64, _f: bool) -> BResult<()> {
        Ok(())
    }
    fn write_zeroes(&self, _o: u64, _l: u64, _f: bool, _fast: bool) -> BResult<()> {
        Ok(())
    }
    fn has_block_status(&self) -> bool {
        false
    }
    fn block_status(&self, _o: u64, len: u64) -> BResult<Vec<Status>> {
        Ok(vec![Status { len, flags: 0 }])
    }
    fn description(&self) -> String {
        "gated sink".into()
    }
}

fn new_gate() -> Arc<Gate> {
    Arc::new(Gate {
        open: Mutex::new(false),
        cv: Condvar::new(),
        writes: AtomicU64::new(0),
    })
}

/// A server exporting a gated sink as "disk".
fn gated(cfg: ServerConfig) -> (tempfile::TempDir, std::path::PathBuf, Arc<Gate>, Running2) {
    let gate = new_gate();
    let exports = vec![Export {
        name: "disk".into(),
        backend: Arc::new(GatedSink(gate.clone())),
        read_only: false,
    }];
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("nbd.sock");
    let mut srv = Server::new(exports, cfg).expect("server");
    srv.listen_unix(&sock).expect("listen");
    let run = Running2 {
        stop: srv.stop_handle(),
        stats: srv.stats(),
        thread: Some(std::thread::spawn(move || srv.run().expect("run"))),
    };
    (dir, sock, gate, run)
}

struct Running2 {
    stop: masse_nbd::StopHandle,
    stats: Arc<masse_nbd::ServerStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running2 {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn buffer_memory_is_capped_across_connections() {
    let _g = serial();
    let cfg = ServerConfig::default();
    let cap = cfg.max_buffer_bytes as u64;
    let (_dir, sock, gate, run) = gated(cfg);
    let base = rss();
    let chunk = Arc::new(vec![7u8; 1 << 20]);
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..16u64)
        .map(|t| {
            let (chunk, sent, failed, sock) =
                (chunk.clone(), sent.clone(), failed.clone(), sock.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect_path(&sock, "disk", false, false);
                c.s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let mut w = c.s.try_clone().unwrap();
                for i in 0..4u64 {
                    w.write_all(&header(CMD_WRITE, i, (t * 4 + i) << 25, 32 << 20))
                        .unwrap();
                    for _ in 0..32 {
                        w.write_all(&chunk).unwrap();
                        sent.fetch_add(1 << 20, Relaxed);
                    }
                }
                for _ in 0..4 {
                    if c.reply(|_| 0).error != 0 {
                        failed.store(true, Relaxed);
                    }
                }
                c.disconnect();
            })
        })
        .collect();
    // Let the clients push until the server stops reading them.
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(700));
        let now = sent.load(Relaxed);
        if now == last {
            break;
        }
        last = now;
    }
    let held = rss().saturating_sub(base);
    let peak = run.stats.buffer_peak.load(Relaxed);
    eprintln!(
        "16 connections x 4 x 32 MiB writes at a stalled device: {:.0} MiB sent, \
         server buffer peak {:.0} MiB (cap {:.0}), RSS +{:.0} MiB",
        mib(last),
        mib(peak),
        mib(cap),
        mib(held)
    );
    assert!(peak <= cap, "buffer peak {peak} over the cap {cap}");
    assert!(
        held < cap + (64 << 20),
        "RSS grew {:.0} MiB with a {:.0} MiB cap",
        mib(held),
        mib(cap)
    );
    gate.open();
    for c in clients {
        c.join().expect("client");
    }
    assert!(!failed.load(Relaxed), "a write failed");
    assert_eq!(gate.writes.load(Relaxed), 64);
    let after = rss().saturating_sub(base);
    eprintln!("RSS +{:.0} MiB once every write was answered", mib(after));
    assert!(after < 64 << 20, "RSS still +{:.0} MiB after", mib(after));
    drop(run);
}

#[test]
fn a_write_whose_payload_stops_is_dropped_and_frees_its_memory() {
    let _g = serial();
    let cfg = ServerConfig {
        max_buffer_bytes: 32 << 20,
        stall_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    let (_dir, sock, gate, run) = gated(cfg);
    gate.open();
    // Announces 32 MiB (the whole buffer budget), sends 1 MiB, then goes quiet.
    let mut half = Client::connect_path(&sock, "disk", false, false);
    half.s
        .write_all(&header(CMD_WRITE, 1, 0, 32 << 20))
        .expect("header");
    half.s.write_all(&vec![1u8; 1 << 20]).expect("some payload");
    std::thread::sleep(Duration::from_millis(200));
    // Another client's 32 MiB write waits for that memory, and gets it once the
    // stalled one is dropped.
    let mut c = Client::connect_path(&sock, "disk", false, false);
    let t = Instant::now();
    assert_eq!(c.write(2, 32 << 20, &vec![2u8; 32 << 20]), 0);
    eprintln!("a 32 MiB write waited {:?} for a stalled one", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(closed(&mut half.s), "the stalled writer is still connected");
    assert_eq!(run.stats.stalled.load(Relaxed), 1);
    c.disconnect();
}

/// The kernel's timer on the TCP socket from local port `local` to remote port
/// `remote` (`/proc/net/tcp`, IPv4): (timer kind, centiseconds until it fires).
/// Kind 2 is the keep-alive timer; 0 means no timer is armed.
fn tcp_timer(local: u16, remote: u16) -> Option<(u32, u64)> {
    let t = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |a: &str| {
        a.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    t.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || port(f[1]) != Some(local) || port(f[2]) != Some(remote) {
            return None;
        }
        let (kind, when) = f[5].split_once(':')?;
        Some((
            u32::from_str_radix(kind, 16).ok()?,
            u64::from_str_radix(when, 16).ok()?,
        ))
    })
}

#[test]
fn tcp_connections_probe_peers_that_vanished() {
    let _g = serial();
    let exports = vec![Export {
        name: "disk".into(),
        backend: Arc::new(GatedSink(new_gate())),
        read_only: false,
    }];
    let mut srv = Server::new(exports, ServerConfig::default()).expect("server");
    let addr = srv.listen_tcp("127.0.0.1:0").expect("listen on TCP");
    let run = Running2 {
        stop: srv.stop_handle(),
        stats: srv.stats(),
        thread: Some(std::thread::spawn(move || srv.run().expect("run"))),
    };
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    c.read_exact(&mut g)
        .expect("greeting: the server has accepted");
    let me = c.local_addr().unwrap().port();
    // An idle connection whose peer may have vanished (a half-open connection) is
    // probed: the server's end has its keep-alive timer armed, due within a minute.
    let timer = tcp_timer(addr.port(), me);
    eprintln!("server end of an idle TCP connection: timer {timer:?} (kind 2 = keep-alive)");
    let (kind, when) = timer.expect("the server's end of the connection in /proc/net/tcp");
    assert_eq!(
        kind, 2,
        "no keep-alive timer on the server's end of a TCP connection"
    );
    assert!(when <= 60 * 100, "the first probe is {when} cs away");
    drop(c);
    drop(run);
}
