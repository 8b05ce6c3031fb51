//! An in-process server on an in-memory pool, and a raw RESP client that returns
//! each reply's exact bytes.
#![allow(dead_code)]

use masse::device::{Device, MemDevice};
use masse::{Db, DeviceSpec, Options, PoolConfig};
use masse_resp::{Config, Server, StopHandle};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Running {
    pub db: Arc<Db>,
    pub addr: SocketAddr,
    pub stop: StopHandle,
    pub thread: Option<JoinHandle<()>>,
}

impl Running {
    pub fn start(cfg: Config) -> Running {
        Self::start_on(cfg, "127.0.0.1:0")
    }

    /// As `start`, listening on `listen` (e.g. `[::]:0`).
    pub fn start_on(cfg: Config, listen: &str) -> Running {
        let dev = |n| DeviceSpec::Device(Arc::new(MemDevice::new(n)) as Arc<dyn Device>);
        let pc = PoolConfig {
            fast: Some(dev(64 << 20)),
            capacity: vec![dev(256 << 20)],
            segment_size: Some(64 << 10),
            band_size: Some(4 << 20),
            ..Default::default()
        };
        let db = Arc::new(Db::create(&pc, Options::default()).expect("create pool"));
        Self::serve_on(db, cfg, listen)
    }

    pub fn serve(db: Arc<Db>, cfg: Config) -> Running {
        Self::serve_on(db, cfg, "127.0.0.1:0")
    }

    pub fn serve_on(db: Arc<Db>, cfg: Config, listen: &str) -> Running {
        let mut srv = Server::new(db.clone(), cfg).expect("server");
        let addr = srv.listen_tcp(listen).expect("listen");
        let stop = srv.stop_handle();
        let thread = std::thread::spawn(move || srv.run().expect("run"));
        Running {
            db,
            addr,
            stop,
            thread: Some(thread),
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn shutdown(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub struct Client {
    pub r: BufReader<TcpStream>,
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

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Client {
            r: BufReader::new(s),
        }
    }

    pub fn send_raw(&mut self, b: &[u8]) {
        self.r.get_mut().write_all(b).expect("send");
    }

    /// One request, its reply's bytes.
    pub fn cmd(&mut self, args: &[&str]) -> String {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send_raw(&encode(&a));
        self.reply()
    }

    pub fn cmd_bytes(&mut self, args: &[&[u8]]) -> String {
        self.send_raw(&encode(args));
        self.reply()
    }

    fn line(&mut self) -> String {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).expect("read reply");
        assert!(
            l.ends_with(b"\r\n"),
            "reply line {:?}",
            String::from_utf8_lossy(&l)
        );
        String::from_utf8_lossy(&l).into_owned()
    }

    /// The next reply, verbatim (nested aggregates included).
    pub fn reply(&mut self) -> String {
        let l = self.line();
        let n: i64 = l[1..l.len() - 2].parse().unwrap_or(-1);
        let mut s = l.clone();
        match l.as_bytes()[0] {
            b'$' | b'=' if n >= 0 => {
                let mut b = vec![0u8; n as usize + 2];
                self.r.read_exact(&mut b).expect("bulk");
                s.push_str(&String::from_utf8_lossy(&b));
            }
            b'*' | b'~' if n > 0 => (0..n).for_each(|_| s.push_str(&self.reply())),
            b'%' if n > 0 => (0..2 * n).for_each(|_| s.push_str(&self.reply())),
            _ => {}
        }
        s
    }

    /// Reads until the server closes; returns everything received.
    pub fn until_closed(&mut self) -> String {
        let mut b = Vec::new();
        let _ = self.r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }
}
