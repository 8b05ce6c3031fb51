//! Command dispatch: authentication, arity, and the connection commands. The data
//! commands are in `data.rs`, the introspection ones (INFO, CONFIG, COMMAND) in
//! `admin.rs`.

use crate::keys::Stripes;
use crate::proto::{Args, Out};
use crate::server::{Config, ServerStats, StopHandle};
use crate::table::{self, Spec};
use masse::Db;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// What every command can reach.
pub(crate) struct Ctx {
    pub db: Arc<Db>,
    pub cfg: Config,
    pub stats: Arc<ServerStats>,
    pub stripes: Stripes,
    pub stop: StopHandle,
    /// Set once the server is stopping: a batch in progress stops at its next
    /// command (the client is closed), so a stop never waits on a long pipeline.
    pub stopping: Arc<AtomicBool>,
    /// When the last failed AUTH's reply is released (server-wide pacing).
    pub auth_gate: parking_lot::Mutex<Option<Instant>>,
    pub started: Instant,
    /// Addresses listened on, for INFO and CONFIG GET.
    pub listening: Vec<String>,
    /// TCP port of the first TCP listener (0: none).
    pub port: u16,
}

/// One client's connection state.
#[derive(Debug)]
pub(crate) struct Client {
    pub id: u64,
    pub name: Vec<u8>,
    pub authed: bool,
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
    pub created: Instant,
    pub last_cmd: String,
    pub lib_name: Vec<u8>,
    pub lib_ver: Vec<u8>,
    /// Failed AUTHs on this connection.
    pub auth_failures: u32,
    /// An AUTH failed in the batch just run: the server holds the reply.
    pub auth_failed: bool,
}

/// What the connection does after a batch of commands.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum After {
    Continue,
    /// Send the replies, then close (QUIT).
    Close,
    /// The server is stopping (SHUTDOWN): no reply, close.
    Shutdown,
}

/// `ERR wrong number of arguments for 'name' command`.
pub(crate) fn arity_error(out: &mut Out, name: &str) {
    out.err(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ));
}

fn quoted_args(args: &[Vec<u8>]) -> String {
    args.iter()
        .take(32)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(&a[..a.len().min(128)])))
        .collect()
}

fn unknown_command(out: &mut Out, args: &[Vec<u8>]) {
    let name = String::from_utf8_lossy(&args[0][..args[0].len().min(128)]).into_owned();
    out.err(&format!(
        "ERR unknown command '{name}', with args beginning with: {}",
        quoted_args(&args[1..])
    ));
}

/// `ERR unknown subcommand 'x'. Try CLIENT HELP.`
pub(crate) fn unknown_sub(out: &mut Out, cmd: &str, sub: &[u8]) {
    let s = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
    out.err(&format!(
        "ERR unknown subcommand '{s}'. Try {} HELP.",
        cmd.to_ascii_uppercase()
    ));
}

/// Runs a batch of requests in order, appending every reply to `out`. Runs of plain
/// `SET key value` and `MSET` commit as one engine batch (one durable group write);
/// each reply is appended only once its write is durable. Runs of plain `GET key`
/// are read with one `get_many`.
///
/// Stops early once `out` holds more than `out_limit` bytes (a client pipelining
/// large reads), returning how many commands ran: the rest wait until the client
/// has taken its replies; and before any command once the server is stopping.
pub(crate) fn run_batch(
    ctx: &Ctx,
    cl: &mut Client,
    out: &mut Out,
    cmds: &[Args],
    out_limit: usize,
) -> (After, usize) {
    let mut i = 0;
    while i < cmds.len() && (i == 0 || out.buf.len() <= out_limit) {
        if ctx.stopping.load(Relaxed) {
            break;
        }
        if cl.authed {
            // A run of GETs may go past the output limit by one value at most, as
            // a single command may.
            let room = (out_limit + masse::MAX_VALUE_LEN).saturating_sub(out.buf.len());
            let (n, name) = match crate::data::set_run(ctx, out, &cmds[i..]) {
                0 => (crate::data::get_run(ctx, out, &cmds[i..], room), "get"),
                n => (n, "set"),
            };
            if n > 0 {
                ctx.stats.commands.fetch_add(n as u64, Relaxed);
                cl.last_cmd = name.into();
                i += n;
                continue;
            }
        }
        ctx.stats.commands.fetch_add(1, Relaxed);
        let a = run_one(ctx, cl, out, &cmds[i]);
        i += 1;
        if a != After::Continue {
            return (a, i);
        }
    }
    (After::Continue, i)
}

fn run_one(ctx: &Ctx, cl: &mut Client, out: &mut Out, args: &Args) -> After {
    let Some(spec) = table::find(&args[0]) else {
        if !cl.authed {
            out.err("NOAUTH Authentication required.");
        } else {
            unknown_command(out, args);
        }
        return After::Continue;
    };
    if !cl.authed && !spec.flags.contains(&"no_auth") {
        out.err("NOAUTH Authentication required.");
        return After::Continue;
    }
    if !table::arity_ok(spec.arity, args.len()) {
        arity_error(out, spec.name);
        return After::Continue;
    }
    cl.last_cmd = spec.name.into();
    if let Some(sub) = args.get(1).filter(|_| !spec.subs.is_empty()) {
        let Some(s) = table::find_sub(spec, sub) else {
            unknown_sub(out, spec.name, sub);
            return After::Continue;
        };
        cl.last_cmd = format!("{}|{}", spec.name, s.name);
        if !table::arity_ok(s.arity, args.len()) {
            arity_error(out, &cl.last_cmd.clone());
            return After::Continue;
        }
    }
    dispatch(ctx, cl, out, spec, args)
}

fn dispatch(ctx: &Ctx, cl: &mut Client, out: &mut Out, spec: &Spec, a: &Args) -> After {
    use crate::{admin, data};
    match spec.name {
        "ping" => ping(out, a),
        "echo" => out.bulk(&a[1]),
        "quit" => {
            out.ok();
            return After::Close;
        }
        "select" => select(out, &a[1]),
        "hello" => hello(ctx, cl, out, a),
        "auth" => auth(ctx, cl, out, a),
        "client" => client(ctx, cl, out, a),
        "command" => admin::command(out, a),
        "config" => admin::config_get(ctx, out, &a[2..]),
        "info" => admin::info(ctx, out, &a[1..]),
        "dbsize" => out.int(ctx.db.key_count() as i64),
        "shutdown" => return shutdown(ctx, out, a),
        _ => data::run(ctx, out, spec.name, a),
    }
    After::Continue
}

fn ping(out: &mut Out, a: &Args) {
    match a.len() {
        1 => out.simple("PONG"),
        2 => out.bulk(&a[1]),
        _ => arity_error(out, "ping"),
    }
}

fn select(out: &mut Out, db: &[u8]) {
    match crate::proto::parse_i64(db) {
        Some(0) => out.ok(),
        Some(_) => out.err("ERR DB index is out of range"),
        None => out.err("ERR value is not an integer or out of range"),
    }
}

/// Compares without an early exit, so the time taken says nothing about where a
/// guess went wrong.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Checks a username and password; on success the client is authenticated.
fn check_auth(ctx: &Ctx, cl: &mut Client, user: &[u8], pass: &[u8]) -> Result<(), &'static str> {
    let Some(want) = &ctx.cfg.password else {
        return Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    };
    if user != b"default" || !same(pass, want) {
        ctx.stats.auth_failures.fetch_add(1, Relaxed);
        cl.auth_failures += 1;
        cl.auth_failed = true;
        return Err("WRONGPASS invalid username-password pair or user is disabled.");
    }
    cl.authed = true;
    Ok(())
}

fn auth(ctx: &Ctx, cl: &mut Client, out: &mut Out, a: &Args) {
    let r = match a.len() {
        2 => check_auth(ctx, cl, b"default", &a[1]),
        3 => check_auth(ctx, cl, &a[1], &a[2]),
        _ => Err("ERR syntax error"),
    };
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.err(e),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`
fn hello(ctx: &Ctx, cl: &mut Client, out: &mut Out, a: &Args) {
    let mut resp3 = out.resp3;
    if let Some(v) = a.get(1) {
        match crate::proto::parse_i64(v) {
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return out.err("NOPROTO unsupported protocol version"),
            None => return out.err("ERR Protocol version is not an integer or out of range"),
        }
    }
    let mut i = 2;
    let mut name = None;
    while i < a.len() {
        let opt = a[i].to_ascii_lowercase();
        if opt == b"auth" && i + 2 < a.len() {
            if let Err(e) = check_auth(ctx, cl, &a[i + 1], &a[i + 2]) {
                return out.err(e);
            }
            i += 3;
        } else if opt == b"setname" && i + 1 < a.len() {
            name = Some(a[i + 1].clone());
            i += 2;
        } else {
            return out.err(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&a[i])
            ));
        }
    }
    if !cl.authed {
        return out.err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(n) = name {
        if let Err(e) = valid_name(&n) {
            return out.err(e);
        }
        cl.name = n;
    }
    out.resp3 = resp3;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(if resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(cl.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

/// Longest client name, lib-name or lib-ver. Redis has no limit; here each is
/// kept per connection for its lifetime, so 10,000 clients with 2 MiB names would
/// hold 20 GB: names are identifiers, 1 KiB is plenty.
pub const MAX_CLIENT_NAME: usize = 1024;

const NAME_TOO_LONG: &str =
    "ERR Client names, lib-name and lib-ver are limited to 1024 bytes by masse.";

fn valid_name(n: &[u8]) -> Result<(), &'static str> {
    if n.len() > MAX_CLIENT_NAME {
        return Err(NAME_TOO_LONG);
    }
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    Ok(())
}

fn client(ctx: &Ctx, cl: &mut Client, out: &mut Out, a: &Args) {
    match a[1].to_ascii_lowercase().as_slice() {
        b"setname" => match valid_name(&a[2]) {
            Ok(()) => {
                cl.name = a[2].clone();
                out.ok()
            }
            Err(e) => out.err(e),
        },
        b"getname" => out.opt_bulk(Some(&cl.name[..]).filter(|n| !n.is_empty())),
        b"id" => out.int(cl.id as i64),
        b"info" => out.verbatim(&client_info(ctx, cl, out.resp3)),
        b"setinfo" => match a[2].to_ascii_lowercase().as_slice() {
            b"lib-name" if valid_name(&a[3]).is_ok() => {
                cl.lib_name = a[3].clone();
                out.ok()
            }
            b"lib-ver" if valid_name(&a[3]).is_ok() => {
                cl.lib_ver = a[3].clone();
                out.ok()
            }
            b"lib-name" | b"lib-ver" if a[3].len() > MAX_CLIENT_NAME => out.err(NAME_TOO_LONG),
            b"lib-name" | b"lib-ver" => out.err(
                "ERR lib-name and lib-ver cannot contain spaces, newlines or special characters.",
            ),
            _ => out.err(&format!(
                "ERR Unrecognized option '{}'",
                String::from_utf8_lossy(&a[2])
            )),
        },
        _ => help(
            out,
            "CLIENT",
            &[
                "GETNAME",
                "ID",
                "INFO",
                "SETINFO <LIB-NAME|LIB-VER> <value>",
                "SETNAME <name>",
            ],
        ),
    }
}

/// Redis's CLIENT INFO line (fields masse does not have are given Redis's idle values).
fn client_info(ctx: &Ctx, cl: &Client, resp3: bool) -> String {
    let _ = ctx;
    format!(
        "id={} addr={} laddr={} fd={} name={} age={} idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}\n",
        cl.id,
        cl.addr,
        cl.laddr,
        cl.fd,
        String::from_utf8_lossy(&cl.name),
        cl.created.elapsed().as_secs(),
        cl.last_cmd,
        if resp3 { 3 } else { 2 },
        String::from_utf8_lossy(&cl.lib_name),
        String::from_utf8_lossy(&cl.lib_ver),
    )
}

/// The reply of `X HELP`.
pub(crate) fn help(out: &mut Out, cmd: &str, lines: &[&str]) {
    out.array(lines.len() + 2);
    out.simple(&format!(
        "{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for l in lines {
        out.simple(l);
    }
    out.simple("HELP");
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: masse has nothing to save (every
/// acknowledged write is durable); the server drains and closes the pool.
fn shutdown(ctx: &Ctx, out: &mut Out, a: &Args) -> After {
    for o in &a[1..] {
        match o.to_ascii_lowercase().as_slice() {
            b"nosave" | b"save" | b"now" | b"force" => {}
            b"abort" => {
                out.err("ERR No shutdown in progress.");
                return After::Continue;
            }
            _ => {
                out.err("ERR syntax error");
                return After::Continue;
            }
        }
    }
    ctx.stop.stop();
    After::Shutdown
}
