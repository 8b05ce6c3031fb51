//! Scale-out on an existing proxy: twemproxy (Debian nutcracker; ketama consistent
//! hashing) in front of three `masse serve resp` instances, each on its own pool.
//! 100k keys are set and read back through the proxy, and each shard must hold a
//! share of them (docs/scale.md).
use crate::resp_support;
use resp_support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: usize = 100_000;
const PIPE: usize = 1000;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

struct Proxy(std::process::Child);
impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_proxy(dir: &std::path::Path, shards: &[u16]) -> (Proxy, u16) {
    let port = free_port();
    let servers: String = shards
        .iter()
        .enumerate()
        .map(|(i, p)| format!("   - 127.0.0.1:{p}:1 shard{i}\n"))
        .collect();
    let conf = dir.join("nutcracker.yml");
    std::fs::write(
        &conf,
        format!(
            "masse:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n  auto_eject_hosts: false\n  timeout: 30000\n  servers:\n{servers}"
        ),
    )
    .expect("config");
    let c = conf.to_str().expect("utf-8");
    run_ok(Command::new("nutcracker").args(["-t", "-c", c]));
    let child = Command::new("nutcracker")
        .args(["-c", c, "-s", &free_port().to_string(), "-a", "127.0.0.1"])
        .args(["-o", dir.join("nutcracker.log").to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nutcracker");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nutcracker did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Proxy(child), port)
}

/// SETs `keys` through `port`, `PIPE` requests in flight at a time.
fn set_all(port: u16, keys: &[String]) -> Duration {
    let t = Instant::now();
    let mut c = Raw::connect(port);
    for chunk in keys.chunks(PIPE) {
        let mut b = Vec::new();
        for k in chunk {
            b.extend(encode(&[
                b"SET",
                k.as_bytes(),
                format!("value-of-{k}").as_bytes(),
            ]));
        }
        c.send(&b).expect("send");
        for k in chunk {
            assert_eq!(c.reply(), "+OK\r\n", "SET {k}");
        }
    }
    t.elapsed()
}

#[test]
fn twemproxy_shards_over_three_masse_servers() {
    if !have_tool("nutcracker") || !have_tool("redis-cli") {
        return;
    }
    let pools: Vec<Pool> = (0..3).map(|_| Pool::create("64M", "1G")).collect();
    let servers: Vec<(Server, u16)> = pools.iter().map(|p| serve(p, &[])).collect();
    let ports: Vec<u16> = servers.iter().map(|s| s.1).collect();
    let (_proxy, pport) = start_proxy(pools[0].dir.path(), &ports);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let set_time = set_all(pport, &keys);
    // Read everything back through the proxy (MGET is split across shards by it).
    let t = Instant::now();
    let mut c = Raw::connect(pport);
    for group in keys.chunks(20 * 100) {
        for chunk in group.chunks(100) {
            let mut args: Vec<&[u8]> = vec![b"MGET"];
            args.extend(chunk.iter().map(|k| k.as_bytes()));
            c.send(&encode(&args)).expect("send");
        }
        for chunk in group.chunks(100) {
            let r = c.reply();
            for k in chunk {
                assert!(
                    r.contains(&format!("\r\nvalue-of-{k}\r\n")),
                    "{k} not read back through the proxy"
                );
            }
        }
    }
    let get_time = t.elapsed();
    let counts: Vec<usize> = ports
        .iter()
        .map(|p| cli(*p, &["dbsize"]).trim().parse().expect("dbsize"))
        .collect();
    assert_eq!(
        counts.iter().sum::<usize>(),
        KEYS,
        "every key on exactly one shard: {counts:?}"
    );
    for (i, n) in counts.iter().enumerate() {
        assert!(
            *n > KEYS / 5,
            "shard {i} holds only {n} of {KEYS} keys: {counts:?}"
        );
    }
    // The same load straight to one instance, for the comparison in docs/scale.md.
    let direct = set_all(ports[0], &keys[..KEYS / 3]);
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "twemproxy + 3 masse: {KEYS} SETs in {set_time:.2?} ({:.0}/s), {KEYS} keys read back by pipelined MGETs of 100 in {get_time:.2?} ({:.0}/s); shards hold {counts:?}; one instance direct: {} SETs in {direct:.2?} ({:.0}/s)",
        rate(KEYS, set_time),
        rate(KEYS, get_time),
        KEYS / 3,
        rate(KEYS / 3, direct)
    );
    for (s, _) in servers {
        let (st, err) = s.stop();
        assert!(st.success(), "{err}");
    }
}
