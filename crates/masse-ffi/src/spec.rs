//! The text form of pool options (`masse_pool_open_spec`, and the RocksDB
//! plugin's `masse://SPEC` URIs).

use crate::error::*;
use crate::pool::{Plan, MASSE_CREATE_NEW, MASSE_OPEN_EXISTING, MASSE_OPEN_OR_CREATE};

/// `4096`, `16K`, `2G`, `1T` (binary units, case-insensitive, an optional `B`/`iB`).
pub(crate) fn size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last()?.to_ascii_uppercase() {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

fn bad(msg: String) -> Fail {
    fail(MASSE_INVALID, msg)
}

/// Parse `key=value,key=value,...` (see `masse_pool_open_spec`).
pub(crate) fn parse(spec: &str) -> R<Plan> {
    let mut fast = None;
    let mut caps = Vec::new();
    let (mut fast_size, mut cap_size, mut chunk, mut wb) = (0, 0, 0u32, 5000u32);
    let (mut create, mut keys) = (MASSE_OPEN_EXISTING, 0usize);
    for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("`{part}` in the pool spec is not key=value")))?;
        let num = |v: &str| size(v).ok_or_else(|| bad(format!("{k}={v}: not a size")));
        match k.trim() {
            "fast" => fast = Some(v),
            "capacity" => caps.push(v),
            "fast_size" => fast_size = num(v)?,
            "capacity_size" => cap_size = num(v)?,
            "chunk_size" => {
                chunk = u32::try_from(num(v)?)
                    .map_err(|_| bad(format!("chunk_size={v} is too large")))?
            }
            "writeback_ms" => {
                wb = v
                    .parse()
                    .map_err(|_| bad(format!("writeback_ms={v}: not a number")))?
            }
            "expected_keys" => keys = num(v)? as usize,
            "create" => {
                create = match v {
                    "no" | "0" | "false" => MASSE_OPEN_EXISTING,
                    "yes" | "1" | "true" => MASSE_CREATE_NEW,
                    "if_missing" => MASSE_OPEN_OR_CREATE,
                    _ => return Err(bad(format!("create={v}: use no, yes or if_missing"))),
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown pool spec key `{other}` (known: fast, capacity, fast_size, \
                     capacity_size, create, chunk_size, writeback_ms, expected_keys)"
                )))
            }
        }
    }
    let mut p = Plan::new(fast, &caps, (fast_size, cap_size), chunk, wb)?;
    p.create = create;
    p.opts.expected_keys = keys;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("4096"), Some(4096));
        assert_eq!(size("16K"), Some(16 << 10));
        assert_eq!(size("2g"), Some(2 << 30));
        assert_eq!(size("1TiB"), Some(1 << 40));
        assert_eq!(size("x"), None);
        assert_eq!(size(""), None);
        assert_eq!(size("99999999999T"), None);
    }

    #[test]
    fn spec_fields() {
        let p = parse("fast=/dev/shm/f,capacity=/a,capacity=/b,fast_size=1G,capacity_size=2G,create=if_missing,chunk_size=64K,writeback_ms=0")
            .map_err(|e| e.msg)
            .unwrap();
        assert_eq!(p.paths, vec!["/a", "/b", "/dev/shm/f"]);
        assert_eq!(p.create, MASSE_OPEN_OR_CREATE);
        assert_eq!(p.vfs.chunk_size, 64 << 10);
        assert!(p.vfs.writeback_interval.is_none());
        assert_eq!(p.cfg.capacity.len(), 2);
        assert!(p.cfg.fast.is_some());
        let create_new = parse("capacity=/a,create=yes").map_err(|e| e.msg).unwrap();
        assert_eq!(create_new.create, MASSE_CREATE_NEW);
    }

    #[test]
    fn spec_errors() {
        for s in [
            "",
            "fast=/f",
            "capacity=/a,size=3",
            "capacity=/a,create=maybe",
            "capacity",
        ] {
            let e = parse(s).err().map(|e| e.status);
            assert_eq!(e, Some(MASSE_INVALID), "{s}");
        }
    }
}
