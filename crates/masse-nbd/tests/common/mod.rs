//! Shared helpers for the NBD server tests: an in-process server over a volume on
//! in-memory devices, and a small raw-protocol client (so tests control every byte).
#![allow(dead_code)]

use masse::device::{Device, MemDevice};
use masse::vblock::{self, VolumeSpec};
use masse::{Db, DeviceSpec, Mode, Options, PoolConfig};
use masse_nbd::proto::*;
use masse_nbd::{Export, Server, ServerConfig, ServerStats, StopHandle, VolumeBackend};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Running {
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub stop: StopHandle,
    pub thread: Option<JoinHandle<()>>,
    pub stats: Arc<ServerStats>,
    pub db: Arc<Db>,
    pub fast: MemDevice,
    pub cap: MemDevice,
}

impl Running {
    pub fn shutdown(mut self) -> (MemDevice, MemDevice, Arc<Db>) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
        (self.fast.clone(), self.cap.clone(), self.db.clone())
    }
}

pub fn pool_config(fast: &MemDevice, cap: &MemDevice) -> PoolConfig {
    PoolConfig {
        fast: Some(DeviceSpec::Device(Arc::new(fast.clone()) as Arc<dyn Device>)),
        capacity: vec![DeviceSpec::Device(Arc::new(cap.clone()) as Arc<dyn Device>)],
        mode: Some(Mode::Tiered),
        segment_size: Some(256 << 10),
        band_size: Some(4 << 20),
        ..Default::default()
    }
}

pub fn opts() -> Options {
    Options {
        histograms: false,
        ..Options::default()
    }
}

/// A server with two exports on one pool: "disk" (writable, `spec`) and "ro"
/// (read-only view of a second volume of the same geometry).
pub fn start(spec: VolumeSpec, cfg: ServerConfig) -> Running {
    let fast = MemDevice::new(64 << 20);
    let cap = MemDevice::new(256 << 20);
    let db = Arc::new(Db::create(&pool_config(&fast, &cap), opts()).expect("create pool"));
    vblock::create_volume(&db, "disk", spec).expect("create volume");
    vblock::create_volume(&db, "ro", spec).expect("create volume");
    serve(db, fast, cap, cfg)
}

pub fn serve(db: Arc<Db>, fast: MemDevice, cap: MemDevice, cfg: ServerConfig) -> Running {
    let exports = vec![
        Export {
            name: "disk".into(),
            backend: Arc::new(VolumeBackend::new(
                vblock::open_volume(db.clone(), "disk").expect("open"),
            )),
            read_only: false,
        },
        Export {
            name: "ro".into(),
            backend: Arc::new(VolumeBackend::new(
                vblock::open_volume(db.clone(), "ro").expect("open"),
            )),
            read_only: true,
        },
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("nbd.sock");
    let mut srv = Server::new(exports, cfg).expect("server");
    srv.listen_unix(&sock).expect("listen");
    let stop = srv.stop_handle();
    let stats = srv.stats();
    let thread = std::thread::spawn(move || srv.run().expect("run"));
    Running {
        dir,
        sock,
        stop,
        thread: Some(thread),
        stats,
        db,
        fast,
        cap,
    }
}

pub struct Client {
    pub s: UnixStream,
    pub structured: bool,
    pub size: u64,
    pub flags: u16,
}

pub struct Reply {
    pub handle: u64,
    pub error: u32,
    pub data: Vec<u8>,
    /// Block status descriptors (length, flags).
    pub extents: Vec<(u32, u32)>,
}

pub fn raw_connect(r: &Running) -> UnixStream {
    raw_connect_path(&r.sock)
}

pub fn raw_connect_path(sock: &Path) -> UnixStream {
    let s = UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

pub fn rd<const N: usize>(s: &mut UnixStream) -> [u8; N] {
    let mut b = [0u8; N];
    s.read_exact(&mut b).expect("read from server");
    b
}

pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}
pub fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Read the server greeting and send client flags.
pub fn greet(s: &mut UnixStream, cflags: u32) -> u16 {
    let g: [u8; 18] = rd(s);
    assert_eq!(be64(&g), NBDMAGIC);
    assert_eq!(be64(&g[8..]), IHAVEOPT);
    s.write_all(&cflags.to_be_bytes()).expect("send flags");
    u16::from_be_bytes([g[16], g[17]])
}

pub fn send_opt(s: &mut UnixStream, opt: u32, data: &[u8]) {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).expect("send option");
}

/// One option reply: (option, reply type, data).
pub fn opt_reply(s: &mut UnixStream) -> (u32, u32, Vec<u8>) {
    let h: [u8; 20] = rd(s);
    assert_eq!(be64(&h), REPLY_MAGIC, "option reply magic");
    let len = be32(&h[16..]) as usize;
    let mut d = vec![0u8; len];
    s.read_exact(&mut d).expect("reply data");
    (be32(&h[8..]), be32(&h[12..]), d)
}

pub fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

impl Client {
    /// Connect with NBD_OPT_GO, optionally negotiating structured replies and base:allocation.
    pub fn connect(r: &Running, export: &str, structured: bool, meta: bool) -> Client {
        Client::connect_path(&r.sock, export, structured, meta)
    }

    /// Connect to the server listening on `sock`.
    pub fn connect_path(sock: &Path, export: &str, structured: bool, meta: bool) -> Client {
        let mut s = raw_connect_path(sock);
        greet(&mut s, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        if structured {
            send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]);
            let (_, t, _) = opt_reply(&mut s);
            assert_eq!(t, REP_ACK);
        }
        if meta {
            send_opt(
                &mut s,
                OPT_SET_META_CONTEXT,
                &meta_data(export, &[META_BASE_ALLOCATION]),
            );
            let (_, t, d) = opt_reply(&mut s);
            assert_eq!(t, REP_META_CONTEXT);
            assert_eq!(&d[4..], META_BASE_ALLOCATION.as_bytes());
            let (_, t, _) = opt_reply(&mut s);
            assert_eq!(t, REP_ACK);
        }
        send_opt(&mut s, OPT_GO, &go_data(export, &[INFO_BLOCK_SIZE]));
        let (mut size, mut flags) = (0, 0);
        loop {
            let (_, t, d) = opt_reply(&mut s);
            match t {
                REP_INFO if u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT => {
                    size = be64(&d[2..]);
                    flags = u16::from_be_bytes([d[10], d[11]]);
                }
                REP_INFO => {}
                REP_ACK => break,
                t => panic!(
                    "GO failed with reply type {t:#x}: {}",
                    String::from_utf8_lossy(&d)
                ),
            }
        }
        Client {
            s,
            structured,
            size,
            flags,
        }
    }

    pub fn send(&mut self, flags: u16, kind: u16, handle: u64, offset: u64, len: u32, data: &[u8]) {
        let mut b = Vec::with_capacity(28 + data.len());
        b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&handle.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).expect("send request");
    }

    /// Read one complete reply. In simple mode, `read_len` says how much data follows a
    /// successful reply (the caller knows which handles are reads).
    pub fn reply(&mut self, read_len: impl Fn(u64) -> usize) -> Reply {
        let mut r = Reply {
            handle: 0,
            error: 0,
            data: Vec::new(),
            extents: Vec::new(),
        };
        loop {
            let m: [u8; 4] = rd(&mut self.s);
            match be32(&m) {
                SIMPLE_REPLY_MAGIC => {
                    let h: [u8; 12] = rd(&mut self.s);
                    r.error = be32(&h);
                    r.handle = be64(&h[4..]);
                    if r.error == 0 {
                        r.data = vec![0u8; read_len(r.handle)];
                        self.s.read_exact(&mut r.data).expect("read data");
                    }
                    return r;
                }
                STRUCTURED_REPLY_MAGIC => {
                    assert!(self.structured, "structured reply without negotiation");
                    let h: [u8; 16] = rd(&mut self.s);
                    let flags = u16::from_be_bytes([h[0], h[1]]);
                    let kind = u16::from_be_bytes([h[2], h[3]]);
                    r.handle = be64(&h[4..]);
                    let len = be32(&h[12..]) as usize;
                    let mut p = vec![0u8; len];
                    self.s.read_exact(&mut p).expect("chunk payload");
                    match kind {
                        REPLY_TYPE_NONE => assert_eq!(len, 0),
                        REPLY_TYPE_OFFSET_DATA => r.data.extend_from_slice(&p[8..]),
                        REPLY_TYPE_OFFSET_HOLE => {
                            r.data.resize(r.data.len() + be32(&p[8..]) as usize, 0)
                        }
                        REPLY_TYPE_BLOCK_STATUS => {
                            assert_eq!(be32(&p), META_ID_BASE_ALLOCATION);
                            for d in p[4..].chunks(8) {
                                r.extents.push((be32(d), be32(&d[4..])));
                            }
                        }
                        k if k & 0x8000 != 0 => {
                            r.error = be32(&p);
                            let ml = u16::from_be_bytes([p[4], p[5]]) as usize;
                            assert!(6 + ml <= len, "error message overflows the chunk");
                            assert!(r.error != 0);
                        }
                        k => panic!("unexpected chunk type {k}"),
                    }
                    if flags & REPLY_FLAG_DONE != 0 {
                        return r;
                    }
                }
                m => panic!("bad reply magic {m:#x}"),
            }
        }
    }

    pub fn write(&mut self, handle: u64, offset: u64, data: &[u8]) -> u32 {
        self.send(0, CMD_WRITE, handle, offset, data.len() as u32, data);
        let r = self.reply(|_| 0);
        assert_eq!(r.handle, handle);
        r.error
    }

    pub fn read(&mut self, handle: u64, offset: u64, len: u32) -> (u32, Vec<u8>) {
        self.send(0, CMD_READ, handle, offset, len, &[]);
        let r = self.reply(|_| len as usize);
        assert_eq!(r.handle, handle);
        (r.error, r.data)
    }

    /// A command without payload or data in its reply.
    pub fn cmd(&mut self, flags: u16, kind: u16, offset: u64, len: u32) -> Reply {
        self.send(flags, kind, 77, offset, len, &[]);
        let r = self.reply(|_| 0);
        assert_eq!(r.handle, 77);
        r
    }

    pub fn disconnect(mut self) {
        self.send(0, CMD_DISC, 0, 0, 0, &[]);
        let mut b = [0u8; 1];
        // The server closes the connection; nothing may follow.
        assert_eq!(
            self.s.read(&mut b).unwrap_or(0),
            0,
            "data after NBD_CMD_DISC"
        );
    }
}

/// The connection was closed by the server (EOF or reset on the next read).
pub fn closed(s: &mut UnixStream) -> bool {
    let mut b = [0u8; 1];
    // A timeout is not a close: only end of stream or a reset count.
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i * 7) >> 1) as u8 | 1)
        .collect()
}
