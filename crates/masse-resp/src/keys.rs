//! Key checks shared by every command, and the striped per-key locks that make
//! read-modify-write commands (APPEND, INCR, SET NX/GET, GETDEL, MSETNX...) atomic.

use masse::{Error, MAX_KEY_LEN};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Key prefixes of masse's own layers on the same pool: volumes (`vblock`,
/// docs/format.md §14) and the file layer (`vfile`). RESP never reads, writes,
/// deletes or lists keys with them.
pub const RESERVED: [&[u8]; 2] = [b"\xffMVB", b"\0vf"];

/// Whether `key` belongs to another layer of masse.
pub fn reserved(key: &[u8]) -> bool {
    RESERVED.iter().any(|p| key.starts_with(p))
}

/// The error for a key RESP cannot use, if any.
pub fn key_error(key: &[u8]) -> Option<String> {
    if key.is_empty() {
        return Some("ERR empty keys are not supported by masse".into());
    }
    if key.len() > MAX_KEY_LEN {
        return Some(format!(
            "ERR key of {} bytes is too long (masse keys are at most {MAX_KEY_LEN} bytes)",
            key.len()
        ));
    }
    if reserved(key) {
        return Some(
            "ERR keys starting with \"\\xffMVB\" or \"\\x00vf\" are reserved for masse's block and file layers"
                .into(),
        );
    }
    None
}

/// The reply for an engine error.
pub fn engine_error(e: &Error) -> String {
    match e {
        Error::NoSpace(m) => format!("OOM no space left in the masse pool (deletes still work): {m}"),
        Error::ValueTooLarge { len, max } => format!(
            "ERR string exceeds maximum allowed size ({len} bytes; masse's value limit is {max} bytes)"
        ),
        Error::TooLarge { what, len, max } => format!(
            "ERR {what} of {len} bytes is larger than this pool stores atomically ({max} bytes): split the command"
        ),
        other => format!("ERR masse: {other}"),
    }
}

/// Lock stripes (a power of two): enough that concurrent commands on different
/// keys rarely share one.
const STRIPES: usize = 4096;

/// Per-key mutual exclusion for the commands of one server. Blind writes (plain
/// SET, MSET) take their stripes shared: they need no order among themselves (the
/// engine's commit order decides, and each is a whole-value write), so pipelined
/// batches of many clients still commit together. Commands that read before they
/// write take their stripes exclusively, which keeps every blind write and every
/// other such command on those keys out between their read and their write.
pub struct Stripes(Box<[RwLock<()>]>);

/// Guards of [`Stripes`]; the locks are held until it drops.
pub enum Guards<'a> {
    /// Blind writers.
    Shared(Vec<RwLockReadGuard<'a, ()>>),
    /// Read-modify-write.
    Exclusive(Vec<RwLockWriteGuard<'a, ()>>),
}

impl Default for Stripes {
    fn default() -> Self {
        Stripes((0..STRIPES).map(|_| RwLock::new(())).collect())
    }
}

fn stripes_of<K: AsRef<[u8]>>(keys: impl Iterator<Item = K>) -> Vec<usize> {
    let mut s: Vec<usize> = keys
        .map(|k| (masse::index::digest(k.as_ref()) as usize) & (STRIPES - 1))
        .collect();
    s.sort_unstable();
    s.dedup();
    s
}

impl Stripes {
    /// Locks the stripes of `keys` exclusively, in stripe order (no deadlock between
    /// two commands), each once. Held across the durable write.
    pub fn lock<'a, K: AsRef<[u8]>>(&'a self, keys: impl Iterator<Item = K>) -> Guards<'a> {
        Guards::Exclusive(
            stripes_of(keys)
                .into_iter()
                .map(|i| self.0[i].write())
                .collect(),
        )
    }

    /// Locks the stripes of `keys` shared (blind writes), in stripe order.
    pub fn lock_shared<'a, K: AsRef<[u8]>>(&'a self, keys: impl Iterator<Item = K>) -> Guards<'a> {
        Guards::Shared(
            stripes_of(keys)
                .into_iter()
                .map(|i| self.0[i].read())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_prefixes_are_refused() {
        assert!(key_error(b"\xffMVBdir").is_some());
        assert!(key_error(b"\0vf\x01").is_some());
        assert!(key_error(b"").is_some());
        assert!(key_error(&[b'k'; MAX_KEY_LEN + 1]).is_some());
        assert!(key_error(b"\xffMV").is_none());
        assert!(key_error(b"vf").is_none());
        assert!(key_error(&[b'k'; MAX_KEY_LEN]).is_none());
    }
}
