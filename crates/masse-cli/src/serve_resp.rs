//! `masse serve resp`: the pool over the Redis protocol.

use crate::error::{CliError, CliResult};
use crate::pool::{open_pool, size_arg, PoolArgs};
use clap::Args;
use masse::Options;
use masse_resp::{Config, Server};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct RespArgs {
    #[command(flatten)]
    pub pool: PoolArgs,

    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,

    /// TCP address to listen on, e.g. 127.0.0.1:6379, [::1]:6379 or 0.0.0.0:6379 (port
    /// 0 picks a free port, printed at start). Repeatable. Default: 127.0.0.1:6379
    /// unless --socket is given. Without a password only clients on this machine are
    /// served (protected mode), whatever the address.
    #[arg(long, value_name = "ADDR:PORT", help_heading = "Listening")]
    pub listen: Vec<String>,

    /// Unix socket to listen on (redis-cli -s PATH). A stale socket file is replaced;
    /// the file is removed at exit. Repeatable.
    #[arg(long, value_name = "PATH", help_heading = "Listening")]
    pub socket: Vec<PathBuf>,

    /// Password clients must give with AUTH (or HELLO ... AUTH default PASSWORD).
    /// Visible to other users in the process list: prefer --password-file. A wrong
    /// password's reply is held 200 ms or more (100 failures/s server-wide) and the
    /// 5th failure closes the connection.
    #[arg(
        long,
        value_name = "PASSWORD",
        help_heading = "Security",
        conflicts_with = "password_file"
    )]
    pub requirepass: Option<String>,

    /// Read the password from the first line of FILE.
    #[arg(long, value_name = "FILE", help_heading = "Security")]
    pub password_file: Option<PathBuf>,

    /// Serve clients from other machines even without a password.
    #[arg(long, help_heading = "Security")]
    pub no_protected_mode: bool,

    /// Most clients connected at once; more get "ERR max number of clients reached".
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10_000,
        help_heading = "Limits"
    )]
    pub max_clients: usize,

    /// Longest argument (bulk string). Default and maximum: masse's value limit
    /// (2 MiB − 4 KiB), below Redis's 512 MB.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, help_heading = "Limits")]
    pub max_bulk: Option<u64>,

    /// Most arguments of one command.
    #[arg(long, value_name = "N", default_value_t = 1 << 20, help_heading = "Limits")]
    pub max_args: usize,

    /// Most bytes one command may take, its arguments together (Redis's
    /// client-query-buffer-limit).
    #[arg(long, value_name = "SIZE", value_parser = size_arg, default_value = "32M", help_heading = "Limits")]
    pub query_buffer_limit: u64,

    /// Close clients idle for this many seconds (0: never). Activity is a whole
    /// command received or a whole reply taken, not a byte: a client dripping bytes
    /// of a command it never finishes is idle.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 0,
        help_heading = "Limits"
    )]
    pub timeout: u64,

    /// Threads running commands: the most commands in the engine at once, hence the
    /// widest group commit of concurrent writes.
    #[arg(long, value_name = "N", default_value_t = 128, help_heading = "Server")]
    pub threads: usize,

    /// Log connections and protocol errors on stderr.
    #[arg(long, short, help_heading = "Server")]
    pub verbose: bool,
}

fn password(a: &RespArgs) -> CliResult<Option<Vec<u8>>> {
    if let Some(p) = &a.requirepass {
        return Ok(Some(p.as_bytes().to_vec()));
    }
    let Some(f) = &a.password_file else {
        return Ok(None);
    };
    let t =
        std::fs::read(f).map_err(|e| CliError::new(format!("cannot read {}: {e}", f.display())))?;
    let line = t.split(|&c| c == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(CliError::new(format!(
            "{}: the first line (the password) is empty",
            f.display()
        )));
    }
    Ok(Some(line.to_vec()))
}

fn config(a: &RespArgs) -> CliResult<Config> {
    let mut cfg = Config {
        password: password(a)?,
        ..Config::default()
    };
    if let Some(b) = a.max_bulk {
        if b == 0 || b > cfg.limits.max_bulk as u64 {
            return Err(CliError::new(format!(
                "--max-bulk must be 1..={} bytes (masse's value limit)",
                cfg.limits.max_bulk
            )));
        }
        cfg.limits.max_bulk = b as usize;
    }
    cfg.limits.max_args = a.max_args.max(1);
    cfg.limits.max_query = a.query_buffer_limit as usize;
    cfg.max_clients = a.max_clients.max(1);
    cfg.workers = a.threads.max(1);
    cfg.idle_timeout = (a.timeout > 0).then(|| std::time::Duration::from_secs(a.timeout));
    cfg.protected_mode = !a.no_protected_mode;
    cfg.verbose = a.verbose;
    Ok(cfg)
}

/// Raises the open-file limit to fit `clients` connections (as Redis does for
/// maxclients); returns how many clients the limit allows.
fn fit_fd_limit(clients: usize) -> usize {
    const RESERVED: u64 = 64; // pool devices, listeners, the epoll and wake fds
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return clients;
    }
    let want = clients as u64 + RESERVED;
    if r.rlim_cur < want {
        let new = libc::rlimit {
            rlim_cur: want.min(r.rlim_max),
            rlim_max: r.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
            r.rlim_cur = new.rlim_cur;
        }
    }
    let fit = r.rlim_cur.saturating_sub(RESERVED) as usize;
    if fit < clients {
        eprintln!(
            "masse: note: the open-file limit ({}) allows {fit} clients, not {clients}; --max-clients lowered (raise `ulimit -n`)",
            r.rlim_cur
        );
    }
    fit.clamp(1, clients)
}

pub fn run(a: &RespArgs) -> CliResult<i32> {
    let mut cfg = config(a)?;
    cfg.max_clients = fit_fd_limit(cfg.max_clients);
    let has_pass = cfg.password.is_some();
    let db = Arc::new(open_pool(&a.pool, Options::default())?);
    if masse::vblock::list_volumes(&db).is_ok_and(|v| !v.is_empty()) {
        eprintln!("masse: note: the pool also holds volumes; RESP cannot reach their records, but DBSIZE and INFO count them");
    }
    let mut srv = Server::new(db.clone(), cfg).map_err(|e| CliError::new(e.to_string()))?;
    let mut listen = a.listen.clone();
    if listen.is_empty() && a.socket.is_empty() {
        listen.push("127.0.0.1:6379".into());
    }
    let mut where_ = Vec::new();
    for l in &listen {
        let addr = srv
            .listen_tcp(l)
            .map_err(|e| CliError::new(e.to_string()))?;
        if !addr.ip().is_loopback() && !has_pass {
            eprintln!(
                "masse: note: {addr} is reachable from other machines but no password is set: \
                 only local clients are served (protected mode) unless --no-protected-mode"
            );
        }
        where_.push(format!("redis://{addr}"));
    }
    for p in &a.socket {
        srv.listen_unix(p)
            .map_err(|e| CliError::new(e.to_string()))?;
        where_.push(format!("unix://{}", p.display()));
    }
    let stop = srv.stop_handle();
    crate::serve_nbd::stop_on_signals(|| stop.wake_socket())?;
    let stats = srv.stats();
    let slot = crate::metrics::EngineSlot::new();
    slot.set(db.clone());
    let mut m = crate::metrics::Metrics::new();
    m.engine(slot.clone());
    resp_metrics(&mut m, &stats);
    let metrics = crate::metrics::start(&a.metrics, m)?;
    for w in &where_ {
        println!("listening on {w}");
    }
    println!("ready; stop with Ctrl-C, SIGTERM or SHUTDOWN");
    let _ = std::io::stdout().flush();
    let r = srv.run();
    eprintln!("masse: RESP server stopped\n{}", stats.report());
    slot.clear();
    drop(metrics);
    r.map_err(|e| CliError::new(e.to_string()))?;
    crate::serve_nbd::close_pool(db)
}

/// The RESP face's figures for `--metrics`: connections, commands, traffic,
/// read hits and misses, error replies.
fn resp_metrics(m: &mut crate::metrics::Metrics, st: &Arc<masse_resp::ServerStats>) {
    use std::sync::atomic::Ordering::Relaxed;
    let s = st.clone();
    m.counters(
        "resp_events",
        "RESP server events by kind",
        "kind",
        move || {
            [
                ("connections", &s.connections),
                ("rejected", &s.rejected),
                ("commands", &s.commands),
                ("hits", &s.hits),
                ("misses", &s.misses),
                ("error_replies", &s.error_replies),
                ("protocol_errors", &s.protocol_errors),
                ("auth_failures", &s.auth_failures),
                ("auth_disconnects", &s.auth_disconnects),
            ]
            .iter()
            .map(|(k, c)| (k.to_string(), c.load(Relaxed) as f64))
            .collect()
        },
    );
    let s = st.clone();
    m.counters(
        "resp_network_bytes",
        "RESP bytes by direction",
        "direction",
        move || {
            vec![
                ("in".to_string(), s.net_in.load(Relaxed) as f64),
                ("out".to_string(), s.net_out.load(Relaxed) as f64),
            ]
        },
    );
    let s = st.clone();
    m.gauges(
        "resp_connected",
        "RESP clients connected now",
        "",
        move || vec![(String::new(), s.connected.load(Relaxed) as f64)],
    );
}
