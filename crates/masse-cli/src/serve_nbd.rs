//! `masse serve nbd`: serve volumes of a pool (or a raw device) over NBD.

use crate::error::{CliError, CliResult};
use crate::metrics::{EngineSlot, Metrics, MetricsArgs};
use crate::pool::{open_pool, size_arg, PoolArgs};
use clap::{Args, Subcommand};
use masse::vblock::{self, VolumeError, VolumeSpec};
use masse::Options;
use masse_cli::units::fmt_bytes;
use masse_nbd::{Export, RawBackend, Server, ServerConfig, ServerStats, VolumeBackend};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub what: ServeWhat,
}

#[derive(Subcommand, Debug)]
pub enum ServeWhat {
    /// Serve volumes of the pool as block devices over NBD (Network Block Device)
    ///
    /// Each volume is a virtual block device stored in the pool: every chunk (4 KiB by
    /// default) is a record, unwritten chunks read as zeros and take no space, trimmed or
    /// zeroed chunks are deleted. Clients: Linux `nbd-client`, QEMU (`nbd://HOST:PORT/NAME`),
    /// libnbd tools (`nbdinfo`, `nbdcopy`), fio's `nbd` engine.
    ///
    /// Every acknowledged write is durable (on the fast-tier pad, or in the capacity log of
    /// a pool without one), so FUA and FLUSH add nothing. Stop with SIGTERM or Ctrl-C: the server stops taking requests, answers
    /// those already received, and closes the pool cleanly.
    ///
    /// With --raw DEVICE the server exports that device or file directly (O_DIRECT, no
    /// engine, no pool devices): the baseline to compare masse volumes against.
    #[command(after_help = "\
Examples:
  masse create --fast /dev/shm/f --fast-size 1G --capacity /var/tmp/c --capacity-size 16G
  masse serve nbd --fast /dev/shm/f --capacity /var/tmp/c --export disk0 --size 8G
  nbdinfo nbd://127.0.0.1/disk0
  qemu-img convert -O raw image.qcow2 nbd://127.0.0.1/disk0
  masse serve nbd --raw /dev/nvme0n1 --socket /run/raw.sock --export raw")]
    Nbd(NbdArgs),

    /// Serve the pool over the Redis protocol (RESP2, RESP3 via HELLO 3)
    ///
    /// Strings only: GET SET (NX XX GET) SETNX GETDEL MGET MSET MSETNX DEL UNLINK EXISTS
    /// STRLEN APPEND INCR INCRBY DECR DECRBY DBSIZE SCAN INFO, plus the connection commands
    /// (PING ECHO QUIT SELECT 0 HELLO AUTH CLIENT COMMAND CONFIG GET SHUTDOWN). Every reply
    /// to a write is sent once the write is durable; concurrent writes of all clients (and
    /// pipelined SET/MSET runs of one client) are committed together. Keys are masse keys
    /// (1..=1024 bytes); values up to 2 MiB − 4 KiB; no expiry. Stop with SIGTERM, Ctrl-C or
    /// SHUTDOWN: running commands finish and are answered, then the pool is closed cleanly.
    /// See docs/resp.md; docs/scale.md for several machines behind twemproxy.
    #[command(after_help = "\
Examples:
  masse create --fast /dev/shm/f --fast-size 1G --capacity /var/tmp/c --capacity-size 16G
  masse serve resp --fast /dev/shm/f --capacity /var/tmp/c
  redis-cli set hello world
  masse serve resp --fast /dev/shm/f --capacity /var/tmp/c --listen 0.0.0.0:6379 --password-file /etc/masse/pass")]
    Resp(crate::serve_resp::RespArgs),
}

#[derive(Args, Debug)]
pub struct NbdArgs {
    #[command(flatten)]
    pub pool: PoolArgs,

    /// TCP address to listen on, e.g. 127.0.0.1:10809 or [::]:10809 (port 0 picks a free
    /// port, printed at start). Repeatable. Default: 127.0.0.1:10809 unless --socket is given.
    #[arg(long, value_name = "ADDR:PORT", help_heading = "Listening")]
    pub listen: Vec<String>,

    /// Unix socket to listen on (nbd+unix:///NAME?socket=PATH). A stale socket file is
    /// replaced; the file is removed at exit. Repeatable.
    #[arg(long, value_name = "PATH", help_heading = "Listening")]
    pub socket: Vec<PathBuf>,

    /// Volume to export, created with --size if the pool has no volume of that name.
    /// Repeatable; the first is also the default export (empty name). Default: every
    /// volume of the pool; with --raw, one export named "raw".
    #[arg(long, value_name = "NAME", help_heading = "Exports")]
    pub export: Vec<String>,

    /// Size of a volume to create (a multiple of --block-size): 64M, 8G, 1.5T... Only used when an
    /// --export does not exist yet; an existing volume keeps its size (with a single
    /// --export, giving a different size is an error).
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Exports")]
    pub size: Option<u64>,

    /// Logical block size of a new volume (512 or 4096), or the smallest request a --raw
    /// export accepts (O_DIRECT needs at least the device's logical block size).
    /// Default: 4096.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 4096,
        help_heading = "Exports"
    )]
    pub block_size: u32,

    /// Bytes per record of a new volume: a power of two from the block size to 1 MiB.
    /// Writes smaller than a chunk read and rewrite it; larger chunks mean fewer index
    /// entries. Default: 4 KiB.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Exports")]
    pub chunk_size: Option<u64>,

    /// Export read-only: writes, trims and write-zeroes fail with EPERM.
    #[arg(long, help_heading = "Exports")]
    pub read_only: bool,

    /// Export this block device or file directly with O_DIRECT, without the engine (the
    /// passthrough baseline). No pool devices are used.
    #[arg(long, value_name = "DEVICE", help_heading = "Exports", conflicts_with_all = ["fast", "capacity", "size", "chunk_size"])]
    pub raw: Option<PathBuf>,

    /// Worker threads executing requests, shared by all connections. Default: 32.
    #[arg(long, value_name = "N", default_value_t = 32, help_heading = "Server")]
    pub threads: usize,

    /// Log connections and disconnections on stderr.
    #[arg(long, short, help_heading = "Server")]
    pub verbose: bool,

    /// Connections served at once, handshakes included. When all are in use, a new
    /// client takes the place of one idle for --idle-timeout (or silent for a second
    /// in its handshake); otherwise it is refused with a message saying the server
    /// is busy, and existing clients are unaffected.
    #[arg(long, value_name = "N", default_value_t = 256, help_heading = "Limits")]
    pub max_connections: usize,

    /// Seconds a connection with nothing in flight may stay silent before its slot
    /// can go to a new client. Only applies when the server is full: idle clients
    /// (a quiet /dev/nbd0) are never closed while there is room. 0: never.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 60,
        help_heading = "Limits"
    )]
    pub idle_timeout: u64,

    /// Seconds a client has for the whole handshake (option negotiation).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 10,
        help_heading = "Limits"
    )]
    pub handshake_timeout: u64,

    /// Seconds after which a connection is closed if it does not read its replies,
    /// or a request's data stops arriving (a stalled or vanished client).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30,
        help_heading = "Limits"
    )]
    pub stall_timeout: u64,

    /// Requests read and not yet answered, per connection; beyond it the server
    /// stops reading that connection until replies go out.
    #[arg(long, value_name = "N", default_value_t = 128, help_heading = "Limits")]
    pub max_inflight: usize,

    /// Request and reply data buffered per connection (one request always runs).
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = size_arg, help_heading = "Limits")]
    pub connection_memory: u64,

    /// Request and reply data buffered by the whole server (at least 32M): when it
    /// is spent, connections stop being read, in turn, until replies free some.
    /// The server's memory beyond its fixed few MiB.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = size_arg, help_heading = "Limits")]
    pub buffer_memory: u64,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

fn spec_of(a: &NbdArgs, size: u64) -> CliResult<VolumeSpec> {
    let chunk = a.chunk_size.unwrap_or(vblock::DEFAULT_CHUNK_SIZE as u64);
    let chunk = u32::try_from(chunk)
        .map_err(|_| CliError::new(format!("--chunk-size {chunk} is too large")))?;
    Ok(VolumeSpec {
        size,
        block_size: a.block_size,
        chunk_size: chunk.max(a.block_size),
    })
}

pub fn run(a: &ServeArgs) -> CliResult<i32> {
    match &a.what {
        ServeWhat::Nbd(n) => nbd(n),
        ServeWhat::Resp(r) => crate::serve_resp::run(r),
    }
}

fn nbd(a: &NbdArgs) -> CliResult<i32> {
    let secs = |n: u64| std::time::Duration::from_secs(n);
    if a.handshake_timeout == 0 || a.stall_timeout == 0 {
        return Err(CliError::new(
            "--handshake-timeout and --stall-timeout must be at least 1 second",
        ));
    }
    let cfg = ServerConfig {
        workers: a.threads.max(1),
        verbose: a.verbose,
        max_connections: a.max_connections,
        max_inflight: a.max_inflight,
        max_inflight_bytes: usize::try_from(a.connection_memory).unwrap_or(usize::MAX),
        max_buffer_bytes: usize::try_from(a.buffer_memory).unwrap_or(usize::MAX),
        handshake_timeout: secs(a.handshake_timeout),
        idle_timeout: secs(a.idle_timeout),
        stall_timeout: secs(a.stall_timeout),
    };
    let mut db = None;
    let exports: Vec<Export> = if let Some(raw) = &a.raw {
        if a.block_size != 512 && a.block_size != 4096 {
            return Err(CliError::new("--block-size must be 512 or 4096"));
        }
        let b = RawBackend::open(raw, a.block_size, a.read_only)
            .map_err(|e| CliError::new(format!("cannot open {}: {e}", raw.display())))?;
        if !b.direct() {
            eprintln!(
                "masse: note: {} does not accept O_DIRECT; serving it through the page cache",
                raw.display()
            );
        }
        let name = match a.export.as_slice() {
            [] => "raw".to_string(),
            [n] => n.clone(),
            _ => {
                return Err(CliError::new(
                    "--raw serves one export: give at most one --export",
                ))
            }
        };
        vec![Export {
            name,
            backend: Arc::new(b),
            read_only: a.read_only,
        }]
    } else {
        let d = Arc::new(open_pool(&a.pool, Options::default())?);
        db = Some(d.clone());
        let mut names = a.export.clone();
        if names.is_empty() {
            names = vblock::list_volumes(&d)
                .map_err(|e| CliError::new(format!("cannot list the volumes: {e}")))?
                .into_iter()
                .filter(|v| !v.deleting)
                .map(|v| v.name)
                .collect();
            if names.is_empty() {
                return Err(CliError::new(
                    "the pool has no volume yet: give --export NAME --size SIZE to create one",
                ));
            }
        }
        let mut ex = Vec::new();
        for name in &names {
            let vol = match vblock::open_volume(d.clone(), name) {
                Ok(v) => {
                    // With several exports, --size is for the ones to create.
                    if let (Some(s), 1) = (a.size, names.len()) {
                        if s != v.size() {
                            return Err(CliError::new(format!(
                                "volume {name:?} exists with size {} ({} bytes), not {s}; omit --size to serve it",
                                fmt_bytes(v.size()),
                                v.size()
                            )));
                        }
                    }
                    v
                }
                Err(VolumeError::NotFound(_)) => {
                    let Some(size) = a.size else {
                        return Err(CliError::new(format!(
                            "the pool has no volume {name:?}: give --size SIZE to create it"
                        )));
                    };
                    let info = vblock::create_volume(&d, name, spec_of(a, size)?).map_err(|e| {
                        CliError::new(format!("cannot create volume {name:?}: {e}"))
                    })?;
                    eprintln!(
                        "masse: created volume {name:?}: {}, {}-byte blocks, {}-byte chunks",
                        fmt_bytes(info.size),
                        info.block_size,
                        info.chunk_size
                    );
                    vblock::open_volume(d.clone(), name)
                        .map_err(|e| CliError::new(format!("cannot open volume {name:?}: {e}")))?
                }
                Err(e) => return Err(CliError::new(format!("cannot open volume {name:?}: {e}"))),
            };
            ex.push(Export {
                name: name.clone(),
                backend: Arc::new(VolumeBackend::new(vol)),
                read_only: a.read_only,
            });
        }
        ex
    };
    let descr: Vec<String> = exports
        .iter()
        .map(|e| {
            format!(
                "{:?} ({}, {}{})",
                e.name,
                fmt_bytes(e.backend.size()),
                e.backend.description(),
                if e.read_only { ", read-only" } else { "" }
            )
        })
        .collect();
    let first = exports[0].name.clone();
    let mut srv = Server::new(exports, cfg).map_err(|e| CliError::new(e.to_string()))?;
    let mut listen = a.listen.clone();
    if listen.is_empty() && a.socket.is_empty() {
        listen.push("127.0.0.1:10809".into());
    }
    let mut urls = Vec::new();
    for l in &listen {
        let addr = srv
            .listen_tcp(l)
            .map_err(|e| CliError::new(e.to_string()))?;
        urls.push(format!("nbd://{addr}/{first}"));
    }
    for p in &a.socket {
        srv.listen_unix(p)
            .map_err(|e| CliError::new(e.to_string()))?;
        urls.push(format!("nbd+unix:///{first}?socket={}", p.display()));
    }
    let stop = srv.stop_handle();
    stop_on_signals(|| stop.wake_socket())?;
    let stats = srv.stats();
    let slot = EngineSlot::new();
    if let Some(d) = &db {
        slot.set(d.clone());
    }
    let mut m = Metrics::new();
    m.engine(slot.clone());
    nbd_metrics(&mut m, &stats);
    let metrics = crate::metrics::start(&a.metrics, m)?;
    for d in &descr {
        println!("export {d}");
    }
    for u in &urls {
        println!("listening on {u}");
    }
    println!("ready; stop with Ctrl-C or SIGTERM");
    let _ = std::io::stdout().flush();
    let r = srv.run();
    tracing::info!("NBD server stopped");
    eprintln!("masse: NBD server stopped\n{}", stats.report());
    slot.clear();
    drop(metrics);
    r.map_err(|e| CliError::new(e.to_string()))?;
    match db {
        Some(d) => close_pool(d),
        None => Ok(0),
    }
}

/// SIGTERM and SIGINT write to a fresh socket from `wake` (a server's stop handle),
/// which makes the server stop.
pub fn stop_on_signals(
    wake: impl Fn() -> std::io::Result<std::os::unix::net::UnixStream>,
) -> CliResult<()> {
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let w = wake().map_err(|e| CliError::new(format!("cannot set up signal handling: {e}")))?;
        signal_hook::low_level::pipe::register(sig, w)
            .map_err(|e| CliError::new(format!("cannot set up signal handling: {e}")))?;
    }
    Ok(())
}

/// After a server stopped: print the engine's statistics and close the pool cleanly
/// (writer drained, checkpoint, clean epoch).
pub fn close_pool(d: Arc<masse::Db>) -> CliResult<i32> {
    eprint!("engine statistics:\n{}", d.stats().to_text());
    match Arc::try_unwrap(d) {
        Ok(db) => db
            .close()
            .map_err(|e| CliError::new(format!("closing the pool: {e}")))?,
        Err(d) => {
            // Should not happen (the server is gone); all writes are durable anyway.
            d.flush()
                .map_err(|e| CliError::new(format!("flushing the pool: {e}")))?;
        }
    }
    eprintln!("masse: pool closed cleanly");
    Ok(0)
}

/// The NBD server's own figures: requests by type, connections, payload, time.
fn nbd_metrics(m: &mut Metrics, st: &Arc<ServerStats>) {
    use std::sync::atomic::Ordering::Relaxed;
    const TYPES: [&str; 8] = [
        "read",
        "write",
        "disc",
        "flush",
        "trim",
        "cache",
        "write_zeroes",
        "block_status",
    ];
    let s = st.clone();
    m.counters("nbd_requests", "NBD requests by type", "type", move || {
        TYPES
            .iter()
            .zip(s.requests.iter())
            .map(|(t, c)| (t.to_string(), c.load(Relaxed) as f64))
            .collect()
    });
    let s = st.clone();
    m.counters(
        "nbd_request_errors",
        "NBD requests answered with an error",
        "",
        move || vec![(String::new(), s.errors.load(Relaxed) as f64)],
    );
    let s = st.clone();
    m.counters(
        "nbd_connections",
        "NBD connections by outcome",
        "outcome",
        move || {
            vec![
                ("accepted".into(), s.connections.load(Relaxed) as f64),
                ("refused".into(), s.refused.load(Relaxed) as f64),
                (
                    "protocol_error".into(),
                    s.protocol_errors.load(Relaxed) as f64,
                ),
            ]
        },
    );
    let s = st.clone();
    m.counters(
        "nbd_payload_bytes",
        "NBD payload bytes by direction",
        "direction",
        move || {
            vec![
                ("read".into(), s.bytes_read.load(Relaxed) as f64),
                ("write".into(), s.bytes_written.load(Relaxed) as f64),
            ]
        },
    );
    let s = st.clone();
    m.counters(
        "nbd_request_seconds",
        "Time NBD requests spent per stage: queued, in the backend, replying",
        "stage",
        move || {
            let sec = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed) as f64 / 1e9;
            vec![
                ("queue".into(), sec(&s.queue_ns)),
                ("backend".into(), sec(&s.backend_ns)),
                ("reply".into(), sec(&s.reply_ns)),
            ]
        },
    );
}
