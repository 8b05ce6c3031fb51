//! The data commands. Every command that writes takes the striped locks of its
//! keys (`keys::Stripes`) around its read and its durable write — shared for blind
//! writes (SET, MSET), exclusive for the others — so a read-modify-write (APPEND,
//! INCR, SET NX/XX/GET, GETDEL, MSETNX, DEL's count) is atomic with respect to every
//! other RESP command of this server. Replies to writes are built
//! only after the engine has returned, i.e. once the write is durable.

use crate::cmd::{arity_error, Ctx};
use crate::keys::{engine_error, key_error, reserved};
use crate::proto::{parse_i64, Args, Out};
use masse::{WriteBatch, MAX_VALUE_LEN};
use std::sync::atomic::Ordering::Relaxed;

/// Most commands merged into one engine batch.
const RUN_MAX: usize = 512;
/// Keys read per engine call in MGET, EXISTS, DEL.
const MANY: usize = 256;
/// Most GETs read together: bounds the replies one run can add (32 × 2 MiB).
const GET_RUN: usize = 32;
/// Largest COUNT honoured by SCAN (a page holds GC off while it is read).
pub const SCAN_MAX_COUNT: usize = 10_000;
/// Most glob steps one `SCAN ... MATCH` may need (a few tenths of a second of
/// CPU at most): with a pattern, COUNT (a hint, in Redis too) is lowered so that COUNT
/// times the pattern's worst case on a longest key stays under it, so no request
/// holds a worker long, whatever the pattern.
pub const SCAN_MATCH_STEPS: u64 = 1 << 27;

/// Whether `a` is a `SET key value` or `MSET k v ...` that may join a batch, and
/// its encoded size.
fn batchable(a: &Args) -> Option<usize> {
    let name = a[0].to_ascii_lowercase();
    let set = name == b"set" && a.len() == 3;
    let mset = name == b"mset" && a.len() >= 3 && a.len() % 2 == 1;
    if !set && !mset {
        return None;
    }
    let mut bytes = 0;
    for kv in a[1..].chunks(2) {
        if key_error(&kv[0]).is_some() || kv[1].len() > MAX_VALUE_LEN {
            return None;
        }
        bytes += kv[0].len() + kv[1].len() + 32;
    }
    Some(bytes)
}

/// Executes the leading run of batchable commands of `cmds` as one atomic engine
/// write and answers each; returns how many it took (0: the first is not one).
pub(crate) fn set_run(ctx: &Ctx, out: &mut Out, cmds: &[Args]) -> usize {
    let budget = ctx.db.max_batch_bytes() / 2;
    let mut bytes = 0;
    let mut n = 0;
    while n < cmds.len().min(RUN_MAX) {
        match batchable(&cmds[n]) {
            Some(b) if n == 0 || bytes + b <= budget => bytes += b,
            _ => break,
        }
        n += 1;
    }
    if n == 0 || bytes > budget {
        return 0; // a lone MSET too large for one batch: answered with the engine's error
    }
    let pairs = || cmds[..n].iter().flat_map(|a| a[1..].chunks(2));
    let _locks = ctx.stripes.lock_shared(pairs().map(|kv| &kv[0]));
    let mut b = WriteBatch::new();
    let mut res = Ok(());
    for kv in pairs() {
        if let Err(e) = b.put(&kv[0], &kv[1]) {
            res = Err(e);
            break;
        }
    }
    let res = res.and_then(|_| ctx.db.write(b));
    for _ in 0..n {
        match &res {
            Ok(()) => out.ok(),
            Err(e) => out.err(&engine_error(e)),
        }
    }
    n
}

/// Answers the leading run of plain `GET key` commands of `cmds` with one
/// `Db::get_many` (their device reads go out together); returns how many it took.
pub(crate) fn get_run(ctx: &Ctx, out: &mut Out, cmds: &[Args], room: usize) -> usize {
    // Checked before the values are read, not after: the run holds its values and
    // their replies at once, so it reads only as many as fit `room` at the largest
    // value size (32 GETs of 2 MiB used to add 128 MiB to a client that never read).
    let fit = room / (MAX_VALUE_LEN + 32);
    let n = cmds
        .iter()
        .take(GET_RUN.min(fit))
        .take_while(|a| {
            a.len() == 2 && a[0].eq_ignore_ascii_case(b"get") && key_error(&a[1]).is_none()
        })
        .count();
    if n < 2 {
        return 0; // a lone GET takes the ordinary path
    }
    let keys: Vec<&[u8]> = cmds[..n].iter().map(|a| &a[1][..]).collect();
    match ctx.db.get_many(&keys) {
        Ok(vals) => vals.iter().for_each(|v| hits(ctx, out, v.as_deref())),
        Err(e) => (0..n).for_each(|_| out.err(&engine_error(&e))),
    }
    n
}

/// Runs data command `name` (arity already checked).
pub(crate) fn run(ctx: &Ctx, out: &mut Out, name: &str, a: &Args) {
    let keys: &[Vec<u8>] = match name {
        "mset" | "msetnx" => {
            if a.len().is_multiple_of(2) {
                return arity_error(out, name);
            }
            &[]
        }
        "scan" => &[],
        "mget" | "del" | "unlink" | "exists" => &a[1..],
        _ => &a[1..2],
    };
    if let Some(e) = keys.iter().find_map(|k| key_error(k)) {
        return out.err(&e);
    }
    let r = match name {
        "get" => ctx.db.get(&a[1]).map(|v| hits(ctx, out, v.as_deref())),
        "set" => set(ctx, out, a),
        "setnx" => set_if_absent(ctx, &a[1], &a[2]).map(|done| out.int(done as i64)),
        "getdel" => getdel(ctx, out, &a[1]),
        "mget" => mget(ctx, out, &a[1..]),
        "mset" => mset(ctx, out, &a[1..], false),
        "msetnx" => mset(ctx, out, &a[1..], true),
        "del" | "unlink" => del(ctx, out, &a[1..]),
        "exists" => exists(ctx, out, &a[1..]),
        "strlen" => ctx
            .db
            .get(&a[1])
            .map(|v| out.int(v.map_or(0, |v| v.len()) as i64)),
        "append" => append(ctx, out, &a[1], &a[2]),
        "incr" => incr_by(ctx, out, &a[1], Some(1)),
        "decr" => incr_by(ctx, out, &a[1], Some(-1)),
        "incrby" => incr_by(ctx, out, &a[1], parse_i64(&a[2])),
        "decrby" => incr_by(ctx, out, &a[1], parse_i64(&a[2]).and_then(i64::checked_neg)),
        "scan" => scan(ctx, out, a),
        _ => {
            out.err("ERR unknown command");
            Ok(())
        }
    };
    if let Err(e) = r {
        out.err(&engine_error(&e));
    }
}

fn hits(ctx: &Ctx, out: &mut Out, v: Option<&[u8]>) {
    let c = if v.is_some() {
        &ctx.stats.hits
    } else {
        &ctx.stats.misses
    };
    c.fetch_add(1, Relaxed);
    out.opt_bulk(v);
}

/// `SET key value [NX|XX] [GET] [KEEPTTL]`; expiry options are refused.
fn set(ctx: &Ctx, out: &mut Out, a: &Args) -> masse::Result<()> {
    let (mut nx, mut xx, mut get) = (false, false, false);
    for o in &a[3..] {
        match o.to_ascii_lowercase().as_slice() {
            b"nx" if !xx => nx = true,
            b"xx" if !nx => xx = true,
            b"get" => get = true,
            b"keepttl" => {} // no key has a TTL, so keeping it holds trivially
            b"ex" | b"px" | b"exat" | b"pxat" => {
                out.err("ERR masse does not support key expiry yet: SET with EX, PX, EXAT or PXAT is refused");
                return Ok(());
            }
            _ => {
                out.err("ERR syntax error");
                return Ok(());
            }
        }
    }
    let (k, v) = (&a[1], &a[2]);
    if v.len() > MAX_VALUE_LEN {
        out.err(&engine_error(&masse::Error::ValueTooLarge {
            len: v.len(),
            max: MAX_VALUE_LEN,
        }));
        return Ok(());
    }
    let rmw = nx || xx || get;
    let _l = if rmw {
        ctx.stripes.lock([k].into_iter())
    } else {
        ctx.stripes.lock_shared([k].into_iter())
    };
    let old = if rmw { ctx.db.get(k)? } else { None };
    let write = (!nx || old.is_none()) && (!xx || old.is_some());
    if write {
        ctx.db.put(k, v)?;
    }
    match (get, write) {
        (true, _) => out.opt_bulk(old.as_deref()),
        (false, true) => out.ok(),
        (false, false) => out.null(),
    }
    Ok(())
}

fn set_if_absent(ctx: &Ctx, k: &[u8], v: &[u8]) -> masse::Result<bool> {
    let _l = ctx.stripes.lock([k].into_iter());
    if ctx.db.get(k)?.is_some() {
        return Ok(false);
    }
    ctx.db.put(k, v)?;
    Ok(true)
}

fn getdel(ctx: &Ctx, out: &mut Out, k: &[u8]) -> masse::Result<()> {
    let _l = ctx.stripes.lock([k].into_iter());
    let v = ctx.db.get(k)?;
    if v.is_some() {
        ctx.db.delete(k)?;
    }
    hits(ctx, out, v.as_deref());
    Ok(())
}

fn mget(ctx: &Ctx, out: &mut Out, keys: &[Vec<u8>]) -> masse::Result<()> {
    let mut body = Out {
        resp3: out.resp3,
        ..Out::default()
    };
    for chunk in keys.chunks(MANY) {
        let refs: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
        for v in ctx.db.get_many(&refs)? {
            hits(ctx, &mut body, v.as_deref());
        }
        if body.buf.len() > ctx.cfg.max_reply {
            out.err(&format!(
                "ERR MGET reply exceeds {} bytes: ask for fewer keys",
                ctx.cfg.max_reply
            ));
            return Ok(());
        }
    }
    out.array(keys.len());
    out.buf.extend_from_slice(&body.buf);
    Ok(())
}

/// How many of `keys` exist (each occurrence counts, as in Redis).
fn count_present(ctx: &Ctx, keys: &[Vec<u8>]) -> masse::Result<Vec<bool>> {
    let mut v = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(MANY) {
        let refs: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
        v.extend(ctx.db.get_many(&refs)?.into_iter().map(|x| x.is_some()));
    }
    Ok(v)
}

fn mset(ctx: &Ctx, out: &mut Out, kv: &[Vec<u8>], nx: bool) -> masse::Result<()> {
    if let Some(e) = kv.chunks(2).find_map(|p| key_error(&p[0])) {
        out.err(&e);
        return Ok(());
    }
    let _l = if nx {
        ctx.stripes.lock(kv.chunks(2).map(|p| &p[0]))
    } else {
        ctx.stripes.lock_shared(kv.chunks(2).map(|p| &p[0]))
    };
    if nx {
        let keys: Vec<Vec<u8>> = kv.chunks(2).map(|p| p[0].clone()).collect();
        if count_present(ctx, &keys)?.into_iter().any(|p| p) {
            out.int(0);
            return Ok(());
        }
    }
    let mut b = WriteBatch::new();
    for p in kv.chunks(2) {
        b.put(&p[0], &p[1])?;
    }
    ctx.db.write(b)?;
    if nx {
        out.int(1)
    } else {
        out.ok()
    }
    Ok(())
}

/// DEL/UNLINK: the keys that exist are deleted in one atomic engine batch.
fn del(ctx: &Ctx, out: &mut Out, keys: &[Vec<u8>]) -> masse::Result<()> {
    let _l = ctx.stripes.lock(keys.iter());
    let present = count_present(ctx, keys)?;
    let mut doomed: Vec<&[u8]> = keys
        .iter()
        .zip(&present)
        .filter(|(_, p)| **p)
        .map(|(k, _)| &k[..])
        .collect();
    doomed.sort_unstable();
    doomed.dedup();
    let mut b = WriteBatch::new();
    for k in &doomed {
        b.delete(k)?;
    }
    ctx.db.write(b)?;
    out.int(doomed.len() as i64);
    Ok(())
}

fn exists(ctx: &Ctx, out: &mut Out, keys: &[Vec<u8>]) -> masse::Result<()> {
    let n = count_present(ctx, keys)?.into_iter().filter(|p| *p).count();
    out.int(n as i64);
    Ok(())
}

fn append(ctx: &Ctx, out: &mut Out, k: &[u8], tail: &[u8]) -> masse::Result<()> {
    let _l = ctx.stripes.lock([k].into_iter());
    let mut v = ctx.db.get(k)?.unwrap_or_default();
    if v.len() + tail.len() > MAX_VALUE_LEN {
        out.err(&engine_error(&masse::Error::ValueTooLarge {
            len: v.len() + tail.len(),
            max: MAX_VALUE_LEN,
        }));
        return Ok(());
    }
    v.extend_from_slice(tail);
    ctx.db.put(k, &v)?;
    out.int(v.len() as i64);
    Ok(())
}

/// INCR/DECR/INCRBY/DECRBY; `by` is None when the increment is not an integer.
fn incr_by(ctx: &Ctx, out: &mut Out, k: &[u8], by: Option<i64>) -> masse::Result<()> {
    let Some(by) = by else {
        out.err("ERR value is not an integer or out of range");
        return Ok(());
    };
    let _l = ctx.stripes.lock([k].into_iter());
    let cur = match ctx.db.get(k)? {
        None => 0,
        Some(v) => match parse_i64(&v) {
            Some(n) => n,
            None => {
                out.err("ERR value is not an integer or out of range");
                return Ok(());
            }
        },
    };
    let Some(n) = cur.checked_add(by) else {
        out.err("ERR increment or decrement would overflow");
        return Ok(());
    };
    ctx.db.put(k, n.to_string().as_bytes())?;
    out.int(n);
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`.
fn scan(ctx: &Ctx, out: &mut Out, a: &Args) -> masse::Result<()> {
    let cursor = std::str::from_utf8(&a[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let Some(cursor) = cursor else {
        out.err("ERR invalid cursor");
        return Ok(());
    };
    let (mut pat, mut count, mut strings) = (None, 10usize, true);
    let mut i = 2;
    while i < a.len() {
        let (opt, val) = (a[i].to_ascii_lowercase(), a.get(i + 1));
        match (opt.as_slice(), val) {
            (b"match", Some(p)) => pat = Some(p),
            (b"count", Some(c)) => match parse_i64(c) {
                Some(c) if c >= 1 => count = (c as usize).min(SCAN_MAX_COUNT),
                Some(_) => {
                    out.err("ERR syntax error");
                    return Ok(());
                }
                None => {
                    out.err("ERR value is not an integer or out of range");
                    return Ok(());
                }
            },
            (b"type", Some(t)) => strings = t.eq_ignore_ascii_case(b"string"),
            _ => {
                out.err("ERR syntax error");
                return Ok(());
            }
        }
        i += 2;
    }
    let glob = pat.map(|p| crate::glob::Glob::new(p, false));
    if let Some(g) = &glob {
        let per_key = g.max_steps(masse::MAX_KEY_LEN).max(1);
        count = count.min((SCAN_MATCH_STEPS / per_key).max(1) as usize);
    }
    let page = ctx.db.scan(cursor, count)?;
    let keys: Vec<&Vec<u8>> = page
        .keys
        .iter()
        .filter(|k| strings && !reserved(k))
        .filter(|k| glob.as_ref().is_none_or(|g| g.matches(k)))
        .collect();
    out.array(2);
    out.bulk(page.next.to_string().as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(k);
    }
    Ok(())
}
