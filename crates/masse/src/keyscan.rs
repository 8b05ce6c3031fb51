//! Resumable scans over the keys: the engine side of a cursor such as RESP's `SCAN`.
//!
//! [`Db::iter`] holds GC off for as long as it lives, which suits a process walking
//! its own pool but not a network client that may take a cursor and never come back.
//! A scan instead returns a page of keys and a cursor (`u64`) from which the next
//! call resumes, holding nothing in between.
//!
//! The cursor is a position in the index's (shard, fingerprint) order. Both parts
//! are functions of the key's digest alone, so a key keeps its place whatever is
//! written, deleted, relocated by GC or rehashed meanwhile: every key present for
//! the whole scan is returned (once, unless a page boundary splits keys sharing a
//! cursor value, see below); keys written or deleted during the scan may or may not
//! be. To fit in 64 bits the cursor keeps the shard number in its top bits and the
//! fingerprint's top bits below it, dropping the fingerprint's lowest `log2(shards)`
//! bits; a page therefore never ends between two keys that agree on the kept bits
//! (they are returned together, so a page may exceed `count` by that tie: with
//! 64-bit fingerprints, practically never).

use crate::db::Db;
use crate::error::Result;
use crate::format::Loc;
use std::sync::atomic::Ordering::SeqCst;

/// One step of [`Db::scan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// Keys live when this step found them, in no meaningful order.
    pub keys: Vec<Vec<u8>>,
    /// Where the next step starts; 0 when the scan is complete.
    pub next: u64,
}

/// (shard, lowest fingerprint) of a cursor, with `bits = log2(shards)`.
fn split(cursor: u64, bits: u32) -> (usize, u64) {
    if bits == 0 {
        return (0, cursor);
    }
    let low = 64 - bits;
    (
        (cursor >> low) as usize,
        (cursor & ((1u64 << low) - 1)) << bits,
    )
}

/// The cursor of (shard, fingerprint prefix `fp >> bits`).
fn join(shard: usize, prefix: u64, bits: u32) -> u64 {
    if bits == 0 {
        return prefix;
    }
    ((shard as u64) << (64 - bits)) | prefix
}

impl Db {
    /// Up to about `count` (at least 1) live keys from `cursor` on (0 starts a
    /// scan), and the cursor of the next step (0 when done). Costs one index pass
    /// over the visited positions plus one record read per key returned; GC is held
    /// off only during the call. See the module docs for the guarantees.
    pub fn scan(&self, cursor: u64, count: usize) -> Result<ScanPage> {
        let e = &self.engine;
        let shards = e.index.shard_count();
        let bits = shards.trailing_zeros();
        let count = count.max(1);
        let (mut shard, mut from) = split(cursor, bits);
        let mut locs: Vec<Loc> = Vec::new();
        let mut next = 0;
        e.iterators.fetch_add(1, SeqCst);
        let gc = e.gc_lock.lock();
        while shard < shards {
            let mut last = None;
            let mut stop = None;
            e.index.scan_shard(shard, from, |fp, l| {
                let prefix = fp >> bits;
                if locs.len() >= count && last != Some(prefix) {
                    stop = Some(prefix);
                    return false;
                }
                last = Some(prefix);
                if !Loc(l).is_tombstone() {
                    locs.push(Loc(l));
                }
                true
            });
            if let Some(p) = stop {
                next = join(shard, p, bits);
                break;
            }
            shard += 1;
            from = 0;
        }
        let keys: Result<Vec<Vec<u8>>> = locs.into_iter().map(|l| self.read_key(l)).collect();
        drop(gc);
        e.iterators.fetch_sub(1, SeqCst);
        Ok(ScanPage { keys: keys?, next })
    }

    /// The key of the record at `l` (GC is held off by the caller), retrying a
    /// read that raced an in-place update as [`Db::iter`] does.
    fn read_key(&self, l: Loc) -> Result<Vec<u8>> {
        let e = &self.engine;
        let mut tries = 0;
        loop {
            let gen = e.inplace_gen.load(SeqCst);
            let r = e.with_record(l, |b| Ok(e.layout.codec.decode(b)?.key.to_vec()));
            tries += 1;
            if r.is_err() && tries < 16 && e.inplace_raced(gen) {
                continue;
            }
            return r;
        }
    }

    /// Number of live keys (index entries that are not tombstones). Walks the DRAM
    /// index, no device read: O(keys), tens of milliseconds per 10^7 keys.
    pub fn key_count(&self) -> u64 {
        let mut n = 0;
        self.engine.index.for_each(|l| {
            if !Loc(l).is_tombstone() {
                n += 1;
            }
        });
        n
    }
}
