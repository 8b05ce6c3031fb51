//! Reading part of a value: [`Db::get_parts`].
//!
//! A record is a header, the key and the value, with one crc32c over all of it
//! (format.md §6.1), so the engine can only vouch for bytes it read whole. A
//! layer that stores large values and reads small parts of them (the file
//! layer's chunks, read block by block by a database) keeps its own checksums
//! over pieces of the value; `get_parts` reads only the device blocks holding
//! the part and lets the caller's check accept it. A part the check refuses is
//! read again as a whole, checksummed record, so nothing unverified gets out.

use crate::device::{round_down64, round_up64, AlignedBuf};
use crate::error::{Error, Result};
use crate::format::{Codec, Loc, MAX_KEY_LEN};
use crate::stats::Op;
use crate::Db;
use std::ops::Range;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

/// A part read from a DRAM segment or waiting for its device read.
struct Cand {
    /// Index in the caller's list.
    i: usize,
    /// Index entry it was read through (checked again after the read).
    loc: u64,
    /// The part's bytes (once read).
    buf: Vec<u8>,
    /// A device read still to do.
    dev: Option<DevRead>,
    /// The record's header left nothing of the range, or disagreed with the
    /// index: answered by a whole, checksummed read instead.
    cut: bool,
}

/// An aligned device read holding a part.
struct DevRead {
    dev: usize,
    /// Aligned device offset.
    at: u64,
    buf: AlignedBuf,
    /// The part's place in `buf`.
    skip: usize,
    len: usize,
    /// A read of the record's header (aligned offset, buffer, header's place
    /// in it), when the part may run past the value's end.
    hdr: Option<(u64, AlignedBuf, usize)>,
    /// The part's first byte in the value.
    first: usize,
    /// The key's length, which the header must repeat.
    key_len: usize,
}

/// The value's length from a record header nobody has checksummed yet, if it
/// agrees with the index: the key's length, and a total length within the
/// location's bounds. A header that disagrees (damage, or stale bytes) is not
/// believed: the part is then read whole, through the record's checksum, so
/// bad header bytes can neither cut a part short nor lengthen it.
fn value_len(codec: Codec, hdr: &[u8], key_len: usize, loc: Loc) -> Option<usize> {
    let (k, v, trailer) = codec.peek(hdr)?;
    // Version 3: a seq trailer of 1 to 10 bytes follows the value iff the
    // header says so.
    let base = codec.base_len(k, v);
    let (least, most) = match trailer {
        true => (base + 1, base + codec.trailer_max()),
        false => (base, base),
    };
    let fits = match loc.exact_len() {
        Some(n) => (least..=most).contains(&(n as usize)),
        None => most >= loc.len_min() as usize && least <= loc.len8() as usize,
    };
    (k == key_len && fits).then_some(v)
}

impl Db {
    /// Bytes `range` of the values stored under several keys, reading from the
    /// devices only the 4 KiB blocks that hold each part (not the whole record),
    /// all parts' reads issued together as in [`Db::get_many`].
    ///
    /// The record's checksum covers the whole record, so each part read this way
    /// is passed to `check(i, bytes)` (`i` its index in `parts`); a part it
    /// refuses, or one that raced a GC move, is read again as a whole record,
    /// verified by the record's checksum, and cut to `range`. Every part returned
    /// was thus accepted by `check` or checksummed by the engine; a record whose
    /// checksum fails is [`Error::Corruption`].
    ///
    /// `None` for a key with no value. A part is shorter than its range where the
    /// value ends first, and never holds bytes from past the value's end: when
    /// the index cannot tell where the value ends (values of 2 KiB or more),
    /// the record's header is read too, in the same batch.
    pub fn get_parts(
        &self,
        parts: &[(&[u8], Range<usize>)],
        check: impl Fn(usize, &[u8]) -> bool,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let t = Instant::now();
        for (k, r) in parts {
            if k.is_empty() || k.len() > MAX_KEY_LEN {
                return Err(Error::InvalidKey {
                    len: k.len(),
                    max: MAX_KEY_LEN,
                });
            }
            if r.start > r.end {
                return Err(Error::InvalidConfig(format!(
                    "part range {r:?} is reversed"
                )));
            }
        }
        let e = &self.engine;
        let gen = e.inplace_gen.load(SeqCst);
        let mut out: Vec<Option<Vec<u8>>> = vec![None; parts.len()];
        let mut slow = Vec::new();
        let mut cands = Vec::new();
        for (i, (key, range)) in parts.iter().enumerate() {
            match self.locate_part(i, key, range) {
                Located::Absent => {}
                Located::Slow => slow.push(i),
                Located::Cand(c) => cands.push(c),
            }
        }
        self.read_cands(&mut cands)?;
        for c in cands {
            let (key, _) = &parts[c.i];
            let same = e.index.get(e.digest(key)) == Some(c.loc) && !e.inplace_raced(gen);
            if same && !c.cut && check(c.i, &c.buf) {
                out[c.i] = Some(c.buf);
            } else {
                slow.push(c.i);
            }
        }
        for i in slow {
            let (key, r) = &parts[i];
            out[i] = self.get(key)?.map(|v| {
                let end = r.end.min(v.len());
                v[r.start.min(end)..end].to_vec()
            });
        }
        e.counters.gets.fetch_add(parts.len() as u64, Relaxed);
        for v in out.iter().flatten() {
            e.counters.get_hits.fetch_add(1, Relaxed);
            e.counters.read_bytes.fetch_add(v.len() as u64, Relaxed);
        }
        e.record(Op::Get, t);
        Ok(out)
    }

    /// Where part `i` is: absent, in a DRAM segment (copied now), on a device
    /// (a read to issue), or only readable whole (an empty range).
    fn locate_part(&self, i: usize, key: &[u8], range: &Range<usize>) -> Located {
        let e = &self.engine;
        let Some(l) = e.index.get(e.digest(key)) else {
            return Located::Absent;
        };
        let loc = Loc(l);
        if loc.is_tombstone() {
            return Located::Absent;
        }
        let codec = e.layout.codec;
        let vstart = codec.header() + key.len();
        // Value bytes the location vouches for: `sure` (its exact length below
        // 2 KiB, a lower bound above) and at most `bound`. A part that may run
        // past `sure` is cut at the value's end read from the record's header,
        // so neither padding nor a neighbouring record's bytes are handed out.
        // Version 3: the record's last bytes may be its seq trailer, not value.
        let sure = (loc.len_min() as usize).saturating_sub(vstart + codec.trailer_max());
        let bound = match loc.exact_len() {
            Some(n) => n as usize,
            None => loc.len8() as usize,
        };
        let (a, b) = (range.start, range.end.min(bound.saturating_sub(vstart)));
        if a >= b {
            return Located::Slow;
        }
        let need_hdr = b > sure;
        let rec = loc.offset() as usize;
        if let Some(seg) = e.segments.get(loc.slot()) {
            let d = seg.data.read();
            let vend = match need_hdr {
                true => d
                    .get(rec..)
                    .and_then(|h| value_len(codec, h, key.len(), loc)),
                false => Some(b),
            };
            let b = b.min(vend.unwrap_or(0));
            if a >= b || rec + vstart + b > d.len() {
                return Located::Slow;
            }
            e.counters.reads_from_dram.fetch_add(1, Relaxed);
            return Located::Cand(Cand {
                i,
                loc: l,
                buf: d[rec + vstart + a..rec + vstart + b].to_vec(),
                dev: None,
                cut: false,
            });
        }
        let (dev, base) = e.layout.slot_addr(loc.slot());
        let off = rec + vstart;
        let (lo, hi) = (base + (off + a) as u64, base + (off + b) as u64);
        let start = round_down64(lo, 4096);
        let hdr = need_hdr.then(|| {
            let at = round_down64(base + rec as u64, 4096);
            let end = round_up64(base + (rec + codec.header()) as u64, 4096);
            (
                at,
                AlignedBuf::new((end - at) as usize),
                (base + rec as u64 - at) as usize,
            )
        });
        Located::Cand(Cand {
            i,
            loc: l,
            buf: Vec::new(),
            dev: Some(DevRead {
                dev,
                at: start,
                buf: AlignedBuf::new((round_up64(hi, 4096) - start) as usize),
                skip: (lo - start) as usize,
                len: b - a,
                hdr,
                first: a,
                key_len: key.len(),
            }),
            cut: false,
        })
    }

    /// Issue the device reads of `cands` (one batch per device) and cut each
    /// part out of its aligned buffer.
    fn read_cands(&self, cands: &mut [Cand]) -> Result<()> {
        let e = &self.engine;
        for dev in 0..e.pool.caps.len() {
            let mut ops: Vec<(u64, &mut [u8])> = Vec::new();
            for d in cands.iter_mut().filter_map(|c| c.dev.as_mut()) {
                if d.dev == dev {
                    ops.push((d.at, &mut d.buf[..]));
                    if let Some((at, h, _)) = d.hdr.as_mut() {
                        ops.push((*at, &mut h[..]));
                    }
                }
            }
            if ops.is_empty() {
                continue;
            }
            let d = &e.pool.caps[dev];
            d.read_batch(&mut ops)
                .map_err(|e| Error::io(&d.info().path, "reading parts of records", e))?;
            e.counters
                .reads_from_device
                .fetch_add(ops.len() as u64, Relaxed);
        }
        for c in cands.iter_mut() {
            if let Some(d) = c.dev.take() {
                let len = match &d.hdr {
                    Some((_, h, skip)) => {
                        value_len(e.layout.codec, &h[*skip..], d.key_len, Loc(c.loc))
                            .map_or(0, |v| v.saturating_sub(d.first))
                            .min(d.len)
                    }
                    None => d.len,
                };
                c.cut = len == 0;
                c.buf = d.buf[d.skip..d.skip + len].to_vec();
            }
        }
        Ok(())
    }
}

enum Located {
    Absent,
    Slow,
    Cand(Cand),
}
