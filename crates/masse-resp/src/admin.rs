//! Introspection: COMMAND (enough for redis-cli's hints and client libraries),
//! CONFIG GET (what redis-benchmark and clients ask) and INFO with masse's figures.

use crate::cmd::{help, unknown_sub, Ctx};
use crate::proto::{Args, Out};
use crate::table::{Spec, COMMANDS};
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// `COMMAND`, `COMMAND COUNT|INFO|DOCS|HELP`.
pub(crate) fn command(out: &mut Out, a: &Args) {
    let Some(sub) = a.get(1) else {
        out.array(COMMANDS.len());
        COMMANDS.iter().for_each(|s| info_entry(out, s, None));
        return;
    };
    let names = &a[2..];
    let pick = || -> Vec<Option<&'static Spec>> {
        if names.is_empty() {
            COMMANDS.iter().map(Some).collect()
        } else {
            names.iter().map(|n| crate::table::find(n)).collect()
        }
    };
    match sub.to_ascii_lowercase().as_slice() {
        b"count" => out.int(COMMANDS.len() as i64),
        b"info" => {
            let specs = pick();
            out.array(specs.len());
            for s in specs {
                match s {
                    Some(s) => info_entry(out, s, None),
                    None => out.null(),
                }
            }
        }
        b"docs" => {
            let specs: Vec<&Spec> = pick().into_iter().flatten().collect();
            out.map(specs.len());
            for s in specs {
                out.bulk(s.name.as_bytes());
                doc_entry(out, s);
            }
        }
        b"help" => help(
            out,
            "COMMAND",
            &[
                "COUNT",
                "DOCS [<command-name> ...]",
                "INFO [<command-name> ...]",
            ],
        ),
        _ => unknown_sub(out, "command", sub),
    }
}

/// One `COMMAND INFO` entry: name, arity, flags, first/last/step key, ACL
/// categories, tips, key specs, subcommands.
fn info_entry(out: &mut Out, s: &Spec, parent: Option<&str>) {
    out.array(10);
    match parent {
        Some(p) => out.bulk(format!("{p}|{}", s.name).as_bytes()),
        None => out.bulk(s.name.as_bytes()),
    }
    out.int(s.arity as i64);
    out.set(s.flags.len());
    s.flags.iter().for_each(|f| out.simple(f));
    out.int(s.keys.0 as i64);
    out.int(s.keys.1 as i64);
    out.int(s.keys.2 as i64);
    out.set(1);
    out.simple(&format!("@{}", s.group));
    out.array(0);
    out.array(0);
    out.array(s.subs.len());
    s.subs.iter().for_each(|c| info_entry(out, c, Some(s.name)));
}

/// One `COMMAND DOCS` entry: summary, since, group, complexity, subcommands.
fn doc_entry(out: &mut Out, s: &Spec) {
    out.map(if s.subs.is_empty() { 4 } else { 5 });
    for (k, v) in [
        ("summary", s.summary),
        ("since", s.since),
        ("group", s.group),
        ("complexity", "O(1) per key"),
    ] {
        out.bulk(k.as_bytes());
        out.bulk(v.as_bytes());
    }
    if !s.subs.is_empty() {
        out.bulk(b"subcommands");
        out.map(s.subs.len());
        for c in s.subs {
            out.bulk(format!("{}|{}", s.name, c.name).as_bytes());
            doc_entry(out, c);
        }
    }
}

/// The parameters CONFIG GET answers, with masse's values.
fn params(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let c = &ctx.cfg;
    vec![
        ("appendfsync", "always".into()),
        ("appendonly", "yes".into()),
        ("bind", ctx.listening.join(" ")),
        ("client-query-buffer-limit", c.limits.max_query.to_string()),
        ("databases", "1".into()),
        ("maxclients", c.max_clients.to_string()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        ("port", ctx.port.to_string()),
        ("proto-max-bulk-len", c.limits.max_bulk.to_string()),
        (
            "protected-mode",
            // The setting, as Redis reports it: with a password it is on but has
            // nothing to refuse (every client must AUTH anyway).
            if c.protected_mode { "yes" } else { "no" }.into(),
        ),
        ("save", "".into()),
        (
            "timeout",
            c.idle_timeout.map_or(0, |t| t.as_secs()).to_string(),
        ),
    ]
}

/// `CONFIG GET parameter [parameter ...]` (glob patterns, as in Redis).
pub(crate) fn config_get(ctx: &Ctx, out: &mut Out, pats: &[Vec<u8>]) {
    let all = params(ctx);
    let found: Vec<&(&str, String)> = all
        .iter()
        .filter(|(k, _)| {
            pats.iter()
                .any(|p| crate::glob::matches(p, k.as_bytes(), true))
        })
        .collect();
    out.map(found.len());
    for (k, v) in found {
        out.bulk(k.as_bytes());
        out.bulk(v.as_bytes());
    }
}

/// `INFO [section ...]`.
pub(crate) fn info(ctx: &Ctx, out: &mut Out, sections: &[Vec<u8>]) {
    let want: Vec<String> = sections
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let all = want.is_empty()
        || want
            .iter()
            .any(|w| ["all", "everything", "default"].contains(&w.as_str()));
    let mut text = String::new();
    let st = ctx.db.stats();
    for (name, f) in SECTIONS {
        if all || want.iter().any(|w| w == name) {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            f(ctx, &st, &mut text);
        }
    }
    out.verbatim(&text);
}

type Section = fn(&Ctx, &masse::Stats, &mut String);

const SECTIONS: [(&str, Section); 8] = [
    ("server", server),
    ("clients", clients),
    ("memory", memory),
    ("persistence", persistence),
    ("stats", stats),
    ("replication", replication),
    ("masse", masse_section),
    ("keyspace", keyspace),
];

macro_rules! line {
    ($s:expr, $($arg:tt)*) => {{ let _ = write!($s, $($arg)*); $s.push_str("\r\n"); }};
}

fn server(ctx: &Ctx, _: &masse::Stats, s: &mut String) {
    let up = ctx.started.elapsed().as_secs();
    line!(s, "# Server");
    line!(s, "redis_version:{}", crate::REDIS_VERSION);
    line!(s, "masse_version:{}", env!("CARGO_PKG_VERSION"));
    line!(s, "redis_mode:standalone");
    line!(s, "os:{} {}", std::env::consts::OS, std::env::consts::ARCH);
    line!(s, "arch_bits:{}", usize::BITS);
    line!(s, "multiplexing_api:epoll");
    line!(s, "process_id:{}", std::process::id());
    line!(s, "tcp_port:{}", ctx.port);
    line!(s, "listening:{}", ctx.listening.join(","));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    line!(s, "server_time_usec:{now}");
    line!(s, "uptime_in_seconds:{up}");
    line!(s, "uptime_in_days:{}", up / 86400);
    line!(s, "io_threads_active:0");
    line!(s, "worker_threads:{}", ctx.cfg.workers);
}

fn clients(ctx: &Ctx, _: &masse::Stats, s: &mut String) {
    line!(s, "# Clients");
    line!(s, "connected_clients:{}", ctx.stats.connected.load(Relaxed));
    line!(s, "maxclients:{}", ctx.cfg.max_clients);
    line!(s, "blocked_clients:0");
}

/// Resident set size of this process, from /proc.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| {
            t.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn memory(_: &Ctx, st: &masse::Stats, s: &mut String) {
    let rss = rss();
    line!(s, "# Memory");
    line!(s, "used_memory:{rss}");
    line!(s, "used_memory_rss:{rss}");
    line!(s, "maxmemory:0");
    line!(s, "maxmemory_policy:noeviction");
    line!(s, "masse_index_bytes:{}", st.index_bytes);
    line!(s, "masse_index_bytes_per_key:{:.2}", st.index_bytes_per_key);
    line!(s, "masse_live_data_bytes:{}", st.live_bytes);
    line!(
        s,
        "masse_capacity_bytes:{}",
        st.bands_total as u64 * st.band_size
    );
    line!(
        s,
        "masse_free_bytes:{}",
        st.bands_free as u64 * st.band_size
    );
}

fn persistence(_: &Ctx, st: &masse::Stats, s: &mut String) {
    line!(s, "# Persistence");
    line!(s, "loading:0");
    line!(s, "rdb_changes_since_last_save:0");
    line!(s, "aof_enabled:0");
    line!(s, "masse_durable_before_reply:1");
    line!(s, "masse_mode:{}", st.mode);
    line!(s, "masse_recovery_source:{}", st.recovery_source);
    line!(s, "masse_recovery_us:{}", st.recovery_us);
    line!(s, "masse_checkpoints:{}", st.checkpoints);
    line!(s, "masse_last_checkpoint_us:{}", st.last_checkpoint_us);
    line!(s, "masse_pad_used_bytes:{}", st.pad_used);
    line!(s, "masse_pad_size_bytes:{}", st.pad_size);
}

fn stats(ctx: &Ctx, st: &masse::Stats, s: &mut String) {
    let c = &ctx.stats;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    line!(s, "# Stats");
    line!(s, "total_connections_received:{}", l(&c.connections));
    line!(s, "total_commands_processed:{}", l(&c.commands));
    line!(s, "total_net_input_bytes:{}", l(&c.net_in));
    line!(s, "total_net_output_bytes:{}", l(&c.net_out));
    line!(s, "rejected_connections:{}", l(&c.rejected));
    line!(s, "keyspace_hits:{}", l(&c.hits));
    line!(s, "keyspace_misses:{}", l(&c.misses));
    line!(s, "total_error_replies:{}", l(&c.error_replies));
    line!(s, "protocol_errors:{}", l(&c.protocol_errors));
    line!(s, "auth_failures:{}", l(&c.auth_failures));
    line!(s, "auth_disconnects:{}", l(&c.auth_disconnects));
    line!(s, "expired_keys:0");
    line!(s, "evicted_keys:0");
    line!(s, "masse_commit_groups:{}", st.commit_groups);
    line!(s, "masse_commit_records:{}", st.commit_records);
    let per = st.commit_records as f64 / st.commit_groups.max(1) as f64;
    line!(s, "masse_records_per_commit:{per:.2}");
}

fn replication(_: &Ctx, _: &masse::Stats, s: &mut String) {
    line!(s, "# Replication");
    line!(s, "role:master");
    line!(s, "connected_slaves:0");
}

fn masse_section(_: &Ctx, st: &masse::Stats, s: &mut String) {
    line!(s, "# Masse");
    line!(s, "puts:{}", st.puts);
    line!(s, "gets:{}", st.gets);
    line!(s, "deletes:{}", st.deletes);
    line!(s, "batches:{}", st.batches);
    line!(s, "reads_from_dram:{}", st.reads_from_dram);
    line!(s, "reads_from_device:{}", st.reads_from_device);
    line!(
        s,
        "host_write_amplification:{:.3}",
        st.host_write_amplification
    );
    line!(s, "segments_written:{}", st.segments_written);
    line!(s, "gc_runs:{}", st.gc_runs);
    line!(s, "gc_bands_freed:{}", st.gc_bands_freed);
    line!(s, "gc_bytes_moved:{}", st.gc_bytes_moved);
    line!(s, "write_stalls:{}", st.write_stalls);
    line!(s, "bands_total:{}", st.bands_total);
    line!(s, "bands_free:{}", st.bands_free);
    line!(s, "corruptions:{}", st.corruptions);
    for (i, d) in st.devices.iter().enumerate() {
        line!(
            s,
            "device{i}:path={},role={},media={},backend={}",
            d.path,
            d.role,
            d.media,
            d.backend
        );
    }
}

fn keyspace(ctx: &Ctx, _: &masse::Stats, s: &mut String) {
    line!(s, "# Keyspace");
    let n = ctx.db.key_count();
    if n > 0 {
        line!(s, "db0:keys={n},expires=0,avg_ttl=0");
    }
}
