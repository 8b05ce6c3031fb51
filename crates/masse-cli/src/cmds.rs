//! The small commands: create, put, get, del, stats, check.

use crate::error::{io_err, CliError, CliResult, EXIT_CHECK_FAILED, EXIT_NOT_FOUND};
use crate::pool::{create_pool, open_pool, pool_flags, GeometryArgs, PoolArgs, PoolLayout};
use clap::Args;
use masse::{Db, Options, MAX_KEY_LEN, MAX_VALUE_LEN};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

/// A key as given on the command line.
#[derive(Args, Debug, Clone)]
pub struct KeyArg {
    /// The key: a UTF-8 string (1 to 1024 bytes), or hex bytes with --hex.
    #[arg(value_name = "KEY")]
    pub key: String,

    /// Read KEY as hexadecimal bytes (e.g. 00ff10 or 0x00ff10) instead of a UTF-8 string.
    /// Default: off.
    #[arg(long)]
    pub hex: bool,
}

impl KeyArg {
    pub fn bytes(&self) -> CliResult<Vec<u8>> {
        let k = if self.hex {
            decode_hex(&self.key)?
        } else {
            self.key.as_bytes().to_vec()
        };
        if k.is_empty() || k.len() > MAX_KEY_LEN {
            return Err(CliError::new(format!(
                "invalid key length {} (keys must be 1..={MAX_KEY_LEN} bytes)",
                k.len()
            )));
        }
        Ok(k)
    }
}

pub fn decode_hex(s: &str) -> CliResult<Vec<u8>> {
    let t = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if t.len() % 2 == 1 {
        return Err(CliError::new(format!(
            "hex key {s:?} has an odd number of digits"
        )));
    }
    let digit = |c: u8| -> CliResult<u8> {
        (c as char).to_digit(16).map(|d| d as u8).ok_or_else(|| {
            CliError::new(format!(
                "hex key {s:?} contains {:?}, which is not a hex digit",
                c as char
            ))
        })
    };
    t.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Open, run `f`, close — closing even when `f` failed, reporting `f`'s error first.
pub fn with_db<T>(pool: &PoolArgs, f: impl FnOnce(&Db) -> CliResult<T>) -> CliResult<T> {
    let db = open_pool(pool, Options::default())?;
    let r = f(&db);
    let c = db.close();
    let v = r?;
    c.map_err(|e| CliError::new(format!("closing the pool: {e}")))?;
    Ok(v)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub geo: GeometryArgs,
    /// Overwrite a masse pool that already exists on the devices (its data is lost).
    /// Default: refuse.
    #[arg(long)]
    pub force: bool,
    /// Do not probe devices whose media the system does not state (a ~2 s measurement
    /// on a temporary file next to each; see `masse probe`). Default: probe.
    #[arg(long)]
    pub no_probe: bool,
}

pub fn create(a: &CreateArgs) -> CliResult<i32> {
    let (mut cfg, new_files) = a.pool.create_config(&a.geo, None, None)?;
    if !a.no_probe {
        crate::probe_create::apply(&a.pool, &a.geo, &mut cfg);
    }
    let db = create_pool(&cfg, &new_files, a.force, Options::default())?;
    let layout = PoolLayout::of(&db);
    let warnings = crate::pool::pool_warnings(&db, "warning: ");
    db.close()
        .map_err(|e| CliError::new(format!("closing the new pool: {e}")))?;
    println!("created a {} pool", layout.geometry.mode.name());
    print!("{}", layout.to_text("  "));
    print!("{warnings}");
    if !crate::pool::sim_report().is_empty() {
        println!(
            "note: the pool is on emulated drives, which live in this process only; \
             `masse demo` with the same --fast/--capacity runs a workload on them"
        );
        return Ok(0);
    }
    println!(
        "use it with: masse put{} KEY VALUE",
        pool_flags(a.pool.fast.as_deref(), &a.pool.capacity)
    );
    Ok(0)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["value", "value_file", "stdin"]))]
pub struct PutArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub key: KeyArg,
    /// The value, as a UTF-8 string (use --value-file or --stdin for binary data).
    #[arg(value_name = "VALUE")]
    pub value: Option<String>,
    /// Read the value from this file (raw bytes, up to 2 MiB - 4 KiB).
    #[arg(long, value_name = "FILE")]
    pub value_file: Option<PathBuf>,
    /// Read the value from standard input until end of file (raw bytes).
    #[arg(long)]
    pub stdin: bool,
}

pub fn put(a: &PutArgs) -> CliResult<i32> {
    let key = a.key.bytes()?;
    let value = if let Some(v) = &a.value {
        v.as_bytes().to_vec()
    } else if let Some(f) = &a.value_file {
        std::fs::read(f).map_err(|e| io_err("cannot read the value file", f, e))?
    } else {
        let mut v = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_VALUE_LEN as u64 + 1)
            .read_to_end(&mut v)
            .map_err(|e| CliError::new(format!("cannot read the value from stdin: {e}")))?;
        v
    };
    if value.len() > MAX_VALUE_LEN {
        return Err(CliError::new(format!(
            "value too large: {}{} bytes (maximum {MAX_VALUE_LEN})",
            value.len(),
            if a.stdin { "+" } else { "" }
        )));
    }
    with_db(&a.pool, |db| {
        db.put(&key, &value)
            .map_err(|e| CliError::new(format!("put failed: {e}")))
    })?;
    println!("stored {} bytes", value.len());
    Ok(0)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub key: KeyArg,
    /// Write the value to this file instead of standard output. Default: stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn get(a: &GetArgs) -> CliResult<i32> {
    let key = a.key.bytes()?;
    let v = with_db(&a.pool, |db| {
        db.get(&key)
            .map_err(|e| CliError::new(format!("get failed: {e}")))
    })?;
    let Some(v) = v else {
        eprintln!("not found");
        return Ok(EXIT_NOT_FOUND);
    };
    match &a.output {
        Some(path) => {
            std::fs::write(path, &v).map_err(|e| io_err("cannot write the value to", path, e))?
        }
        None => {
            // The value's bytes exactly, for pipes and files; on a terminal a
            // newline after it, so the shell prompt does not follow the value.
            let tty = std::io::stdout().is_terminal() && !v.ends_with(b"\n");
            let mut out = std::io::stdout().lock();
            out.write_all(&v)
                .and_then(|_| if tty { out.write_all(b"\n") } else { Ok(()) })
                .and_then(|_| out.flush())
                .map_err(|e| CliError::new(format!("cannot write the value to stdout: {e}")))?;
        }
    }
    Ok(0)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct DelArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub key: KeyArg,
}

pub fn del(a: &DelArgs) -> CliResult<i32> {
    let key = a.key.bytes()?;
    let existed = with_db(&a.pool, |db| {
        db.delete(&key)
            .map_err(|e| CliError::new(format!("delete failed: {e}")))
    })?;
    if existed {
        println!("deleted (the key existed)");
    } else {
        println!("not found (nothing to delete)");
    }
    Ok(0)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Print the statistics as pretty-printed JSON instead of text. Default: text.
    #[arg(long)]
    pub json: bool,
}

pub fn stats(a: &StatsArgs) -> CliResult<i32> {
    let s = with_db(&a.pool, |db| Ok(db.stats()))?;
    if a.json {
        let j = serde_json::to_string_pretty(&s)
            .map_err(|e| CliError::new(format!("cannot encode JSON: {e}")))?;
        println!("{j}");
    } else {
        print!("{}", s.to_text());
    }
    Ok(0)
}

// ---------------------------------------------------------------------------

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Print the report as pretty-printed JSON instead of text. Default: text.
    #[arg(long)]
    pub json: bool,
    /// Clear the pool's damage record after the check: you have dealt with the
    /// damage it reports (restored the lost keys, or accept their older values).
    /// Until then every `check` exits 3 and `stats` shows the record.
    #[arg(long)]
    pub clear_damage: bool,
}

pub fn check(a: &CheckArgs) -> CliResult<i32> {
    let (r, damage) = with_db(&a.pool, |db| {
        let r = db
            .check()
            .map_err(|e| CliError::new(format!("check failed: {e}")))?;
        let damage = db.damage();
        if a.clear_damage && damage.is_some() {
            db.clear_damage()
                .map_err(|e| CliError::new(format!("cannot clear the damage record: {e}")))?;
        }
        Ok((r, damage))
    })?;
    let damaged = damage.is_some() && !a.clear_damage;
    if a.json {
        // The report's fields stay at the top level, as before format 5, so
        // scripts reading `live_keys` or `errors` keep working.
        let mut j = serde_json::to_value(&r)
            .map_err(|e| CliError::new(format!("cannot encode JSON: {e}")))?;
        j["damage_record"] = serde_json::json!(damage);
        j["damage_cleared"] = (a.clear_damage && damage.is_some()).into();
        let j = serde_json::to_string_pretty(&j)
            .map_err(|e| CliError::new(format!("cannot encode JSON: {e}")))?;
        println!("{j}");
        return Ok(if r.is_clean() && !damaged {
            0
        } else {
            EXIT_CHECK_FAILED
        });
    }
    print_check(&r, damage.as_ref(), a.clear_damage);
    Ok(if r.is_clean() && !damaged {
        0
    } else {
        EXIT_CHECK_FAILED
    })
}

/// The text report of `check`: what it scanned, problems, the damage record.
fn print_check(
    r: &masse::CheckReport,
    damage: Option<&masse::format::DamageRecord>,
    cleared: bool,
) {
    println!(
        "scanned {} bands, {} segments, {} records; {} live keys ({}), {} tombstones",
        r.bands_scanned,
        r.segments,
        r.records,
        r.live_keys,
        masse_cli::units::fmt_bytes(r.live_bytes),
        r.tombstones
    );
    if r.dead_records_damaged > 0 {
        println!(
                "note: {} dead record(s) fail their checksum (remains of writes a crash interrupted, or damage to data no key uses); no data is affected and GC will drop them",
                r.dead_records_damaged
            );
    }
    for e in &r.errors {
        println!("error: {e}");
    }
    if let Some(d) = damage {
        println!(
            "damage recorded: {} damage event(s) found since epoch {} (last in epoch {}): \
                 acknowledged writes were lost; a key whose newest copy was lost reads as an \
                 older value or as absent (the warnings of the open that found it are in the \
                 log and in `masse stats` of that run)",
            d.corruptions, d.first_epoch, d.last_epoch
        );
        if cleared {
            println!("damage record cleared");
        }
    }
    match (r.is_clean(), damage.is_some() && !cleared) {
        (true, false) => println!("pool is consistent"),
        (true, true) => println!("the pool's structures are consistent, but it lost data (above)"),
        (false, _) => println!("{} problem(s) found", r.errors.len()),
    }
}
