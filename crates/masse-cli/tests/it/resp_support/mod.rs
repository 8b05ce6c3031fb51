//! Shared by the `resp_*` tests: `masse serve resp` children on temporary pools
//! (the pool and process helpers of `nbd_support`), redis-cli, and a raw client.
#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses a different subset
pub use crate::nbd_support::{have_tool, run_ok, Pool, Server, MASSE};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// `masse serve resp` on a free loopback port with extra arguments; its port.
pub fn serve(pool: &Pool, extra: &[&str]) -> (Server, u16) {
    let mut args = vec!["serve".to_string(), "resp".to_string()];
    args.extend(pool.args());
    args.extend(["--listen".to_string(), "127.0.0.1:0".to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let srv = Server::start(&args);
    let port = srv
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("listening on redis://127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {:?}", srv.stdout));
    (srv, port)
}

/// `redis-cli -p PORT ARGS...`: its standard output (raw mode, as in a pipe).
pub fn cli(port: u16, args: &[&str]) -> String {
    let o = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether the server at `port` answers PING.
pub fn answers(port: u16) -> bool {
    cli(port, &["ping"]).trim() == "PONG"
}

/// A request in RESP multibulk form.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

/// A plain TCP client that reads replies verbatim.
pub struct Raw {
    pub r: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Raw {
            r: BufReader::new(s),
        }
    }
    pub fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.r.get_mut().write_all(b)
    }
    /// The next reply, verbatim (nested arrays included).
    pub fn reply(&mut self) -> String {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).expect("read reply");
        let s = String::from_utf8_lossy(&l).into_owned();
        let n: i64 = s
            .get(1..s.len().saturating_sub(2))
            .and_then(|x| x.parse().ok())
            .unwrap_or(-1);
        let mut out = s.clone();
        match l.first() {
            Some(b'$') if n >= 0 => {
                let mut b = vec![0u8; n as usize + 2];
                self.r.read_exact(&mut b).expect("bulk");
                out.push_str(&String::from_utf8_lossy(&b));
            }
            Some(b'*') if n > 0 => (0..n).for_each(|_| out.push_str(&self.reply())),
            _ => {}
        }
        out
    }
    pub fn cmd(&mut self, args: &[&str]) -> String {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&encode(&a)).expect("send");
        self.reply()
    }
    /// Everything until the server closes the connection.
    pub fn until_closed(&mut self) -> String {
        let mut b = Vec::new();
        let _ = self.r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }
}

/// The integer after `field:` in an INFO reply.
pub fn info_field(port: u16, field: &str) -> f64 {
    let info = cli(port, &["info", "everything"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO has no {field}: {info}"))
}
