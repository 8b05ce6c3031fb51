//! Format version 3 codecs: the leaner record, block mark, summary entry and
//! footer of `docs/plans/issue18-format-v3-and-index.md` §2, as pure
//! functions. Pools created by this build write them (`codec.rs` chooses per
//! pool; `v3seg.rs` places records in a segment and parses them back);
//! pools of versions 1 and 2 keep `record.rs` and `segment.rs`.
//!
//! What changes against version 2, per record of Table 4 (23-byte keys,
//! 100-byte values): a 24-byte header and padding to 8 bytes become an 8-byte
//! header and, for most records, nothing else (the sequence number follows
//! from a chain, §2.1); a 32-byte summary entry becomes about 12 bytes
//! (offsets follow from lengths, the digest keeps the 80 bits the index uses,
//! the sequence number is a chain too). The per-record CRC32C is unchanged;
//! the segment tag moves from every record to an 8-byte mark in front of the
//! first record that starts in each 4 KiB block.

use super::bytes::{le32, le64, Put};
use super::version::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};

/// Bytes of a version-3 record's fixed header: crc32c, then the word.
pub const V3_HEADER: usize = 8;
/// Bytes of a block mark.
pub const MARK_LEN: usize = 8;
/// Magic of a block mark, "MB".
pub const MARK_MAGIC: u16 = 0x424D;
/// The block every mark and straddle rule is about.
pub const BLOCK: usize = 4096;
/// Every record seq is below this (a trailer keeps two flag bits beside it).
pub const SEQ_LIMIT: u64 = 1 << 62;
/// Longest LEB128 of a u64.
const LEB_MAX: usize = 10;
/// Word bits 0–20: 0 invalid, 1 tombstone, v + 2 a put of v bytes.
const VCODE_MASK: u32 = (1 << 21) - 1;
/// Word bits 21–30: key length − 1.
const KEY_SHIFT: u32 = 21;
/// Word bit 31: a sequence trailer follows the value.
const TRAILER: u32 = 1 << 31;
const _: () = assert!(MAX_VALUE_LEN + 2 <= VCODE_MASK as usize);
const _: () = assert!(MAX_KEY_LEN <= 1 << 10);

fn corrupt(what: &str) -> Error {
    Error::Corruption(format!("format v3: {what}"))
}

/// Append the LEB128 of `v` to `out`.
pub fn leb_put(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Bytes of the LEB128 of `v`.
pub fn leb_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The LEB128 at the start of `b` and its length; `None` if cut short or
/// longer than a u64 (overlong encodings are refused, so bytes and value
/// correspond one to one).
pub fn leb_get(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &x) in b.iter().take(LEB_MAX).enumerate() {
        let part = (x & 0x7f) as u64;
        if i == LEB_MAX - 1 && part > 1 {
            return None;
        }
        v |= part << (7 * i);
        if x & 0x80 == 0 {
            return (i == 0 || x != 0).then_some((v, i + 1));
        }
    }
    None
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// How a seq chain's expectation moves past a record of seq `s`, in the
/// record chain and in the summary chain alike (format.md §7.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqRule {
    /// Format version 3: `E = max(E, s + 1)`. A record with an older seq
    /// (a GC move) among user writes costs only itself a delta; but after
    /// one newer seq, every older one after it pays one, and in a segment
    /// of GC moves with a cold user write among them that is nearly all.
    Max,
    /// Format version 4: `E = s + 1`. Records in ascending seq order (user
    /// writes, and GC moves from one victim) pay at most a small delta for
    /// the gap; a jump costs the record after it one delta back.
    Follow,
}

impl SeqRule {
    /// The format version a segment written with this rule carries.
    pub fn version(self) -> u32 {
        match self {
            SeqRule::Max => 3,
            SeqRule::Follow => 4,
        }
    }

    /// The expectation after a record of `seq`, given `expect` before it.
    pub fn next(self, expect: u64, seq: u64) -> u64 {
        let after = seq.wrapping_add(1);
        match self {
            SeqRule::Max => expect.max(after),
            SeqRule::Follow => after,
        }
    }
}

/// The sequence chain of one segment's records (plan §2.1). Writer and reader
/// keep the same state: `expect` is the seq a record without a trailer has.
/// A mark resets it: the first record after a mark carries its absolute seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqChain {
    expect: u64,
    need_abs: bool,
    rule: SeqRule,
}

/// A record's sequence trailer, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// The seq is absolute (else a zigzag delta from the chain's expectation).
    pub abs: bool,
    /// More records of the same atomic group follow.
    pub more: bool,
    /// The seq or the zigzag delta.
    pub s: u64,
}

impl Trailer {
    fn code(&self) -> u64 {
        self.s << 2 | (self.abs as u64) << 1 | self.more as u64
    }

    fn from_code(c: u64) -> Trailer {
        Trailer {
            abs: c & 2 != 0,
            more: c & 1 != 0,
            s: c >> 2,
        }
    }

    /// Encoded bytes.
    pub fn encoded_len(&self) -> usize {
        leb_len(self.code())
    }
}

impl SeqChain {
    /// A chain at the start of a segment written with `rule`.
    pub fn new(rule: SeqRule) -> SeqChain {
        SeqChain {
            expect: 0,
            need_abs: false,
            rule,
        }
    }

    /// How this chain moves past a record.
    pub fn rule(&self) -> SeqRule {
        self.rule
    }

    /// A mark was written or read: the next record carries its absolute seq.
    pub fn mark(&mut self) {
        self.need_abs = true;
    }

    /// The trailer the writer gives a record of `seq` (`None`: no trailer),
    /// and the chain moved past it. Seqs stay below 2^62 (a trailer keeps two
    /// flag bits beside them; at 10^9 writes a second that is 146 years).
    pub fn trailer_for(&mut self, seq: u64, more: bool) -> Option<Trailer> {
        assert!(seq < SEQ_LIMIT, "record seq {seq} out of range");
        let abs = Trailer {
            abs: true,
            more,
            s: seq,
        };
        let t = if self.need_abs {
            Some(abs)
        } else if !more && seq == self.expect {
            None
        } else {
            let d = zigzag(seq.wrapping_sub(self.expect) as i64);
            Some(if d < SEQ_LIMIT {
                Trailer {
                    abs: false,
                    more,
                    s: d,
                }
            } else {
                abs
            })
        };
        self.advance(seq, t.map(|t| t.abs).unwrap_or(false));
        t
    }

    /// The seq and MORE flag of a record read with trailer `t`, and the chain
    /// moved past it. The first record after a mark must carry an absolute seq.
    pub fn resolve(&mut self, t: Option<Trailer>) -> Result<(u64, bool)> {
        let (seq, more, abs) = match t {
            None if self.need_abs => {
                return Err(corrupt("first record after a mark without its seq"))
            }
            None => (self.expect, false, false),
            Some(t) if t.abs => (t.s, t.more, true),
            Some(_) if self.need_abs => {
                return Err(corrupt("first record after a mark without its seq"))
            }
            Some(t) => (
                self.expect.wrapping_add(unzigzag(t.s) as u64),
                t.more,
                false,
            ),
        };
        if seq >= SEQ_LIMIT {
            return Err(corrupt("record seq out of range"));
        }
        self.advance(seq, abs);
        Ok((seq, more))
    }

    fn advance(&mut self, seq: u64, abs: bool) {
        self.expect = if abs {
            seq.wrapping_add(1)
        } else {
            self.rule.next(self.expect, seq)
        };
        self.need_abs = false;
    }
}

/// Encoded length of a record with this key, value and trailer.
pub fn v3_record_len(key_len: usize, val_len: usize, t: Option<Trailer>) -> usize {
    V3_HEADER + key_len + val_len + t.map(|t| t.encoded_len()).unwrap_or(0)
}

/// Append a version-3 record to `out`. A tombstone's value must be empty.
pub fn encode_v3_record(
    out: &mut Vec<u8>,
    tombstone: bool,
    key: &[u8],
    value: &[u8],
    t: Option<Trailer>,
) {
    // Out-of-range fields would spill into their neighbours in the word.
    assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN && value.len() <= MAX_VALUE_LEN);
    assert!(!tombstone || value.is_empty());
    assert!(
        t.is_none_or(|t| t.s < SEQ_LIMIT),
        "trailer value out of range"
    );
    let start = out.len();
    let vcode = if tombstone { 1 } else { value.len() as u32 + 2 };
    let word =
        vcode | ((key.len() as u32 - 1) << KEY_SHIFT) | if t.is_some() { TRAILER } else { 0 };
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    if let Some(t) = t {
        leb_put(out, t.code());
    }
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A decoded version-3 record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Record<'a> {
    /// A delete.
    pub tombstone: bool,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a tombstone).
    pub value: &'a [u8],
    /// The sequence trailer, if the record has one.
    pub trailer: Option<Trailer>,
    /// Encoded length, trailer included.
    pub len: usize,
}

/// Decode and verify the record at the start of `b` (which may run past it).
pub fn decode_v3_record(b: &[u8]) -> Result<V3Record<'_>> {
    if b.len() < V3_HEADER {
        return Err(corrupt("record cut short"));
    }
    let word = le32(b, 4);
    let vcode = word & VCODE_MASK;
    if vcode == 0 {
        return Err(corrupt("no record here (zero value code)"));
    }
    let key_len = ((word & !TRAILER) >> KEY_SHIFT) as usize + 1;
    let val_len = vcode.saturating_sub(2) as usize;
    if val_len > MAX_VALUE_LEN {
        return Err(corrupt("value length out of range"));
    }
    let body = V3_HEADER + key_len + val_len;
    if b.len() < body {
        return Err(corrupt("record runs past its buffer"));
    }
    let (trailer, tlen) = if word & TRAILER != 0 {
        let (c, n) = leb_get(&b[body..]).ok_or_else(|| corrupt("bad sequence trailer"))?;
        (Some(Trailer::from_code(c)), n)
    } else {
        (None, 0)
    };
    let len = body + tlen;
    if crc32c::crc32c(&b[4..len]) != le32(b, 0) {
        return Err(corrupt("record checksum mismatch"));
    }
    Ok(V3Record {
        tombstone: vcode == 1,
        key: &b[V3_HEADER..V3_HEADER + key_len],
        value: &b[V3_HEADER + key_len..body],
        trailer,
        len,
    })
}

/// Append a block mark for the segment tagged `tag` to `out`. `back`: the
/// zero bytes between the end of the segment's previous record and the mark
/// (a skip gap, or the few bytes a mark moved past to share its record's
/// block; 0 otherwise). A reader that jumps a gap checks it, so a gap that
/// hides a record lost to a torn write is not jumped.
pub fn encode_mark(out: &mut Vec<u8>, tag: u32, back: u16) {
    out.extend_from_slice(&MARK_MAGIC.to_le_bytes());
    out.extend_from_slice(&back.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
}

/// Is there a mark of the segment tagged `tag`, `back` bytes after the end of
/// the previous record, at the start of `b`?
pub fn is_mark(b: &[u8], tag: u32, back: usize) -> bool {
    b.len() >= MARK_LEN
        && u16::from_le_bytes([b[0], b[1]]) == MARK_MAGIC
        && u16::from_le_bytes([b[2], b[3]]) as usize == back
        && le32(b, 4) == tag
}

/// Where the next record of a segment goes (plan §2.2, §2.3). `end` is the
/// end of the previous record, `open_block` the block the last record started
/// in (`None` before the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spot {
    /// Where a mark goes first, if one does.
    pub mark: Option<usize>,
    /// Where the record starts.
    pub record: usize,
    /// The record skipped to the next block (the summary's SKIP flag).
    pub skip: bool,
}

/// The spot for the next record with the SKIP decision given (the reader's
/// side: the summary says whether the writer skipped).
pub fn spot(end: usize, open_block: Option<usize>, skip: bool) -> Spot {
    let at = if skip {
        end.next_multiple_of(BLOCK)
    } else {
        end
    };
    if !skip && open_block == Some(end / BLOCK) {
        return Spot {
            mark: None,
            record: at,
            skip,
        };
    }
    // A mark shares its block with its record (so a block that survived a
    // torn write vouches for both): if the record could not start in this
    // block after it, mark and record go to the next one.
    let mark = if at % BLOCK + MARK_LEN >= BLOCK {
        at.next_multiple_of(BLOCK)
    } else {
        at
    };
    Spot {
        mark: Some(mark),
        record: mark + MARK_LEN,
        skip,
    }
}

/// Largest gap the writer leaves to keep a record inside one block.
pub const MAX_SKIP_GAP: usize = 512;

/// The writer's spot for a record of `len` bytes: skip to the next block if
/// the record (at most a block less a mark and a header) would cross a block
/// boundary and the gap it leaves is at most `MAX_SKIP_GAP` (v2's rule).
pub fn place_v3(end: usize, open_block: Option<usize>, len: usize) -> Spot {
    let here = spot(end, open_block, false);
    let crosses = here.record / BLOCK != (here.record + len - 1) / BLOCK;
    let gap = end.next_multiple_of(BLOCK) - end;
    if crosses && len <= BLOCK - 2 * MARK_LEN && gap > 0 && gap <= MAX_SKIP_GAP {
        spot(end, open_block, true)
    } else {
        here
    }
}

/// One entry of a version-3 summary, as the engine uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Entry {
    /// The 80 digest bits the index uses: bits 0–63 and 112–127.
    pub digest: u128,
    /// Record sequence number.
    pub seq: u64,
    /// Byte offset of the record (derived when decoding).
    pub offset: u32,
    /// Exact record length, trailer included.
    pub len: u32,
    /// The record went to the next block (straddle avoidance).
    pub skip: bool,
    /// A delete.
    pub tombstone: bool,
    /// More records of its atomic group follow.
    pub more: bool,
}

/// The 80 bits of a 128-bit digest a version-3 summary keeps (bits 0–63, the
/// index fingerprint, and 112–127, the shard bits).
pub use crate::index::canonical as canonical_digest;

/// Append the summary entry `e` (its `offset` is not stored) to `out`;
/// `expect` is the summary's seq chain (starts at 0), which moves by `rule`.
pub fn encode_v3_entry(out: &mut Vec<u8>, e: &V3Entry, expect: &mut u64, rule: SeqRule) {
    let d = canonical_digest(e.digest);
    out.extend_from_slice(&(d as u64).to_le_bytes());
    out.extend_from_slice(&((d >> 112) as u16).to_le_bytes());
    let has_seq = e.seq != *expect;
    let flags =
        (has_seq as u64) << 3 | (e.skip as u64) << 2 | (e.more as u64) << 1 | e.tombstone as u64;
    leb_put(out, (e.len as u64) << 4 | flags);
    if has_seq {
        leb_put(out, zigzag(e.seq.wrapping_sub(*expect) as i64));
    }
    *expect = rule.next(*expect, e.seq);
}

/// Bytes `encode_v3_entry` will append for `e` with chain state `expect`.
pub fn v3_entry_len(e: &V3Entry, expect: u64) -> usize {
    let seq = if e.seq != expect {
        leb_len(zigzag(e.seq.wrapping_sub(expect) as i64))
    } else {
        0
    };
    // The four flag bits share the length's LEB128.
    10 + leb_len((e.len as u64) << 4) + seq
}

/// Decode `nrec` entries from `sum`, deriving each record's offset from the
/// previous one's end and the marks rules; the last record must end exactly at
/// `data_len`, and the entries must use every byte of `sum`; its seq chain
/// moves by `rule`.
pub fn decode_v3_summary(
    sum: &[u8],
    nrec: u32,
    data_len: u32,
    rule: SeqRule,
) -> Result<Vec<V3Entry>> {
    let mut out = Vec::with_capacity((nrec as usize).min(sum.len() / 11 + 1));
    let (mut at, mut expect) = (0usize, 0u64);
    let (mut end, mut open_block) = (super::segment::SEG_HEADER, None);
    for _ in 0..nrec {
        let mut e = decode_v3_entry(sum, &mut at, &mut expect, rule)?;
        let s = spot(end, open_block, e.skip);
        let rec_end = s.record as u64 + e.len as u64;
        if e.len < V3_HEADER as u32 + 1 || rec_end > data_len as u64 {
            return Err(corrupt("summary entry outside segment data"));
        }
        e.offset = s.record as u32;
        open_block = Some(s.record / BLOCK);
        end = rec_end as usize;
        out.push(e);
    }
    if at != sum.len() || (nrec > 0 && end != data_len as usize) {
        return Err(corrupt("summary does not match the segment's data"));
    }
    Ok(out)
}

fn decode_v3_entry(sum: &[u8], at: &mut usize, expect: &mut u64, rule: SeqRule) -> Result<V3Entry> {
    let bad = || corrupt("summary entry cut short");
    let fixed = sum.get(*at..*at + 10).ok_or_else(bad)?;
    let digest = le64(fixed, 0) as u128 | (u16::from_le_bytes([fixed[8], fixed[9]]) as u128) << 112;
    *at += 10;
    let (lf, n) = leb_get(&sum[*at..]).ok_or_else(bad)?;
    *at += n;
    let len = u32::try_from(lf >> 4).map_err(|_| corrupt("summary length out of range"))?;
    let seq = if lf & 8 != 0 {
        let (z, n) = leb_get(&sum[*at..]).ok_or_else(bad)?;
        *at += n;
        // A writer stores a seq only when it is not the expected one.
        if z == 0 {
            return Err(corrupt("summary seq stored although expected"));
        }
        expect.wrapping_add(unzigzag(z) as u64)
    } else {
        *expect
    };
    if seq >= SEQ_LIMIT {
        return Err(corrupt("summary seq out of range"));
    }
    *expect = rule.next(*expect, seq);
    Ok(V3Entry {
        digest,
        seq,
        offset: 0,
        len,
        skip: lf & 4 != 0,
        more: lf & 2 != 0,
        tombstone: lf & 1 != 0,
    })
}

/// Bytes of the version-3 footer.
pub const V3_FOOTER: usize = 64;
const FOOT_MAGIC: u32 = 0x4647_4553; // "SEGF", as in version 2

/// The version-3 segment footer: v2's fields plus the summary's length, and a
/// 64-bit xxh3 over summary and footer instead of a crc32c. Version-4 pools
/// write the same footer with version 4: their seq chains follow
/// [`SeqRule::Follow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Footer {
    /// How the summary's and the records' seq chains move (the footer's
    /// version field: 3 or 4).
    pub rule: SeqRule,
    /// Global segment sequence number.
    pub segment_seq: u64,
    /// Low 64 bits of the pool id.
    pub pool_tag: u64,
    /// Records (and summary entries).
    pub nrec: u32,
    /// Slots the segment spans.
    pub nslots: u32,
    /// End of the record area.
    pub data_len: u32,
    /// Bytes of the summary, which ends where the footer starts.
    pub sum_len: u32,
    /// Smallest record seq.
    pub min_seq: u64,
    /// Largest record seq.
    pub max_seq: u64,
}

/// Write `sum` and the footer at the end of the segment buffer `seg`.
pub fn encode_v3_tail(seg: &mut [u8], sum: &[u8], f: &V3Footer) {
    assert_eq!(
        f.sum_len as usize,
        sum.len(),
        "footer names the summary's length"
    );
    let foot = seg.len() - V3_FOOTER;
    let sum_start = foot - sum.len();
    seg[sum_start..foot].copy_from_slice(sum);
    {
        let mut p = Put::new(&mut seg[foot..]);
        p.u32(FOOT_MAGIC);
        p.u32(f.rule.version());
        p.u64(0); // the checksum, below
        p.u64(f.segment_seq);
        p.u64(f.pool_tag);
        p.u32(f.nrec);
        p.u32(f.nslots);
        p.u32(f.data_len);
        p.u32(f.sum_len);
        p.u64(f.min_seq);
        p.u64(f.max_seq);
    }
    let h = tail_hash(seg, sum_start, foot);
    seg[foot + 8..foot + 16].copy_from_slice(&h.to_le_bytes());
}

fn tail_hash(seg: &[u8], sum_start: usize, foot: usize) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&seg[sum_start..foot]);
    h.update(&seg[foot + 16..]);
    h.digest()
}

/// Verify and decode the footer and summary of a whole segment buffer of a
/// pool whose seq chains follow `rule`: a footer of the other version is no
/// footer of this pool's.
pub fn decode_v3_tail(seg: &[u8], rule: SeqRule) -> Result<(V3Footer, Vec<V3Entry>)> {
    let foot = seg
        .len()
        .checked_sub(V3_FOOTER)
        .ok_or_else(|| corrupt("segment smaller than its footer"))?;
    let b = &seg[foot..];
    if le32(b, 0) != FOOT_MAGIC || le32(b, 4) != rule.version() {
        return Err(corrupt("no segment footer of this pool's version"));
    }
    let f = V3Footer {
        rule,
        segment_seq: le64(b, 16),
        pool_tag: le64(b, 24),
        nrec: le32(b, 32),
        nslots: le32(b, 36),
        data_len: le32(b, 40),
        sum_len: le32(b, 44),
        min_seq: le64(b, 48),
        max_seq: le64(b, 56),
    };
    let sum_start = foot
        .checked_sub(f.sum_len as usize)
        .filter(|&s| s >= f.data_len as usize)
        .ok_or_else(|| corrupt("summary overlaps the segment's data"))?;
    if tail_hash(seg, sum_start, foot) != le64(b, 8) {
        return Err(corrupt("segment summary checksum mismatch"));
    }
    let entries = decode_v3_summary(&seg[sum_start..foot], f.nrec, f.data_len, rule)?;
    Ok((f, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::SEG_HEADER;
    use proptest::prelude::*;

    #[test]
    fn leb_lengths_and_limits() {
        for (v, n) in [(0u64, 1), (127, 1), (128, 2), (1 << 14, 3), (u64::MAX, 10)] {
            let mut b = Vec::new();
            leb_put(&mut b, v);
            assert_eq!((b.len(), leb_len(v)), (n, n), "{v}");
            assert_eq!(leb_get(&b), Some((v, n)));
        }
        assert_eq!(leb_get(&[0x80, 0x00]), None, "overlong");
        assert_eq!(leb_get(&[0x80]), None, "cut short");
        let too_big: Vec<u8> = [0xff; 9].iter().chain(&[2]).copied().collect();
        assert_eq!(leb_get(&too_big), None);
    }

    /// User writes take consecutive seqs and need no trailer, also after a
    /// GC move (an old seq) between them (version 3); a group member always
    /// has one.
    #[test]
    fn only_the_unexpected_seq_pays_a_trailer() {
        let mut c = SeqChain::new(SeqRule::Max);
        c.mark();
        let has = |c: &mut SeqChain, seq, more| {
            c.trailer_for(seq, more).map(|t| (t.abs, t.encoded_len()))
        };
        assert_eq!(
            has(&mut c, 100, false),
            Some((true, 2)),
            "first after a mark: absolute"
        );
        assert_eq!(has(&mut c, 101, false), None);
        assert_eq!(has(&mut c, 50, false), Some((false, 2)), "a move: a delta");
        assert_eq!(has(&mut c, 102, false), None, "the chain did not go back");
        assert_eq!(
            has(&mut c, 103, true),
            Some((false, 1)),
            "MORE needs a trailer"
        );
        // A delta too large for a trailer falls back to the absolute seq.
        assert_eq!(has(&mut c, (1 << 61) + 200, false).map(|t| t.0), Some(true));
    }

    /// Version 4: the chain follows each record, so moves in ascending seq
    /// order after a newer seq pay one small delta each (version 3: a delta
    /// back to below the newer seq, each); the record after a move pays one.
    #[test]
    fn the_follow_rule_keeps_moves_after_a_newer_seq_cheap() {
        let cost = |rule, seqs: &[u64]| {
            let mut c = SeqChain::new(rule);
            c.mark();
            let b: usize = seqs
                .iter()
                .map(|&s| c.trailer_for(s, false).map_or(0, |t| t.encoded_len()))
                .sum();
            let (mut e, mut sum) = (0u64, Vec::new());
            for &s in seqs {
                let entry = V3Entry {
                    digest: 1,
                    seq: s,
                    offset: 0,
                    len: 5, // one LEB byte with the flags
                    skip: false,
                    tombstone: false,
                    more: false,
                };
                encode_v3_entry(&mut sum, &entry, &mut e, rule);
            }
            (b, sum.len() - 11 * seqs.len())
        };
        // A cold user write (seq 5,000,000) among moves of one victim.
        // Version 4, trailers: 2 (absolute, after the mark), 1, 4, 4 (back),
        // 1, none, 1, none; summary: 2, 1, 4, 4, 1, none, 1, none.
        let gc = [1000, 1002, 5_000_000, 1003, 1005, 1006, 1009, 1010];
        assert_eq!(cost(SeqRule::Follow, &gc), (13, 13));
        assert_eq!(
            cost(SeqRule::Max, &gc),
            (2 + 1 + 4 + 4 * 5, 2 + 1 + 4 + 4 * 5)
        );
        // A move among user writes: the write after it pays under version 4.
        let user = [500, 501, 100, 502, 503];
        assert_eq!(cost(SeqRule::Follow, &user), (2 + 2 + 2, 2 + 2 + 2));
        assert_eq!(cost(SeqRule::Max, &user), (2 + 2, 2 + 2));
    }

    #[test]
    fn out_of_range_seqs_are_refused() {
        let mut c = SeqChain::new(SeqRule::Follow);
        let far = Trailer {
            abs: true,
            more: false,
            s: SEQ_LIMIT,
        };
        assert!(c.resolve(Some(far)).is_err());
        let mut c = SeqChain::new(SeqRule::Follow);
        let back = Trailer {
            abs: false,
            more: false,
            s: 1,
        }; // −1 from 0 wraps
        assert!(c.resolve(Some(back)).is_err());
    }

    #[test]
    fn zero_bytes_are_no_record() {
        assert!(decode_v3_record(&[0u8; 64]).is_err());
    }

    #[test]
    fn marks_share_their_block_with_their_record() {
        // Before the first record: a mark right after the segment header.
        let first = spot(64, None, false);
        assert_eq!(
            first,
            Spot {
                mark: Some(64),
                record: 72,
                skip: false
            }
        );
        // Inside a block where a record started: no mark.
        assert_eq!(spot(200, Some(0), false).mark, None);
        // A straddler ended 4 or exactly 8 bytes before the next boundary:
        // mark and record move on to the next block together.
        for before in [4, 8] {
            let s = spot(2 * BLOCK - before, Some(0), false);
            assert_eq!(
                (s.mark, s.record),
                (Some(2 * BLOCK), 2 * BLOCK + 8),
                "{before}"
            );
        }
        let s = spot(2 * BLOCK - 9, Some(0), false);
        assert_eq!(
            s.mark,
            Some(2 * BLOCK - 9),
            "room for mark and a record's start"
        );
        // A skip lands on the next block, mark first.
        let s = place_v3(BLOCK - 100, Some(0), 300);
        assert_eq!((s.mark, s.record, s.skip), (Some(BLOCK), BLOCK + 8, true));
        // A gap over MAX_SKIP_GAP is not worth skipping: the record straddles.
        assert!(!place_v3(BLOCK - 600, Some(0), 700).skip);
    }

    #[test]
    fn tail_roundtrip_and_damage() {
        let w = fill_segment(256 << 10, 23, 100, 1000);
        let mut seg = vec![0u8; 256 << 10];
        encode_v3_tail(&mut seg, &w.sum, &w.foot);
        let (f2, e) = decode_v3_tail(&seg, SeqRule::Follow).expect("tail");
        assert_eq!((f2, e), (w.foot, w.entries));
        assert!(
            decode_v3_tail(&seg, SeqRule::Max).is_err(),
            "a version-4 footer is no version-3 pool's"
        );
        for at in [seg.len() - V3_FOOTER - 1, seg.len() - 30] {
            let mut bad = seg.clone();
            bad[at] ^= 4;
            let found = decode_v3_tail(&bad, SeqRule::Follow).is_err();
            assert!(found, "damage at {at} found");
        }
    }

    /// Table 4's records (23-byte keys, 100-byte values, consecutive seqs)
    /// written the way a tiered segment is: bytes per record, summary included.
    /// Version 2 takes 152 + 32 (+ 5.5 of straddle waste).
    #[test]
    fn table_4_records_take_about_145_bytes() {
        let seg = 256 << 10;
        let w = fill_segment(seg, 23, 100, 1000);
        let (f, sum) = (w.foot, w.sum);
        let per = (seg as f64) / f.nrec as f64;
        let waste = seg - f.data_len as usize - sum.len() - V3_FOOTER;
        assert!(waste < 200, "{waste} bytes unused at the segment's end");
        assert!(per < 146.0, "{per:.1} bytes per record");
        assert!(
            sum.len() as f64 / (f.nrec as f64) < 12.1,
            "summary entries ~12 B"
        );
    }

    /// A record to write: seq, MORE, tombstone, value.
    type Rec = (u64, bool, bool, Vec<u8>);

    /// What `write_segment` produced.
    struct Written {
        sum: Vec<u8>,
        foot: V3Footer,
        data: Vec<u8>,
        entries: Vec<V3Entry>,
    }

    /// Fill one segment of `seg` bytes with records of `k`/`v` bytes and seqs
    /// from `seq0` on, as a writer would.
    fn fill_segment(seg: usize, k: usize, v: usize, seq0: u64) -> Written {
        let recs: Vec<Rec> = (0..(seg / 64) as u64)
            .map(|i| (seq0 + i, false, false, vec![(i % 251) as u8; v]))
            .collect();
        write_segment(seg, k, &recs, SeqRule::Follow)
    }

    /// The digest of record `i`: all 128 bits set somewhere.
    fn digest_of(i: usize) -> u128 {
        (i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834)
    }

    /// The writer's side: place, mark, trailer, summary entry, until the next
    /// record does not fit.
    fn write_segment(seg: usize, k: usize, recs: &[Rec], rule: SeqRule) -> Written {
        let mut w = Written {
            sum: Vec::new(),
            foot: V3Footer {
                rule,
                segment_seq: 9,
                pool_tag: 5,
                nrec: 0,
                nslots: 1,
                data_len: 0,
                sum_len: 0,
                min_seq: u64::MAX,
                max_seq: 0,
            },
            data: vec![0u8; SEG_HEADER],
            entries: Vec::new(),
        };
        let (mut cur, mut expect) = (crate::format::v3seg::V3Cursor::new(rule), 0u64);
        for (i, r) in recs.iter().enumerate() {
            let key: Vec<u8> = (0..k).map(|j| (i + j) as u8).collect();
            let s = cur.slot(V3_HEADER + k + r.3.len(), r.0, r.1, r.2);
            let e = s.entry(canonical_digest(digest_of(i)), r.0, r.2);
            if cur.need(&s) > seg {
                break;
            }
            if let Some(m) = s.spot.mark {
                let back = (m - w.data.len()) as u16;
                w.data.resize(m, 0);
                encode_mark(&mut w.data, 0xabcd, back);
            }
            w.data.resize(s.spot.record, 0);
            encode_v3_record(&mut w.data, r.2, &key, &r.3, s.trailer);
            assert_eq!(w.data.len(), s.spot.record + s.len);
            let (before, want) = (w.sum.len(), v3_entry_len(&e, expect));
            encode_v3_entry(&mut w.sum, &e, &mut expect, rule);
            assert_eq!(
                (w.sum.len() - before, want),
                (s.entry_len, s.entry_len),
                "v3_entry_len predicts the entry"
            );
            w.entries.push(e);
            cur.advance(&s, r.0);
            w.foot.min_seq = w.foot.min_seq.min(r.0);
            w.foot.max_seq = w.foot.max_seq.max(r.0);
        }
        w.foot.nrec = w.entries.len() as u32;
        w.foot.data_len = w.data.len() as u32;
        w.foot.sum_len = w.sum.len() as u32;
        w
    }

    /// The reader's side: walk the record area by the summary's offsets, check
    /// marks and resolve every seq from the records alone.
    fn read_segment(
        data: &[u8],
        entries: &[V3Entry],
        rule: SeqRule,
    ) -> Vec<(u64, bool, bool, usize)> {
        let (mut chain, mut open_block, mut out) = (SeqChain::new(rule), None, Vec::new());
        let mut end = SEG_HEADER;
        for e in entries {
            let s = spot(end, open_block, e.skip);
            assert_eq!(s.record as u32, e.offset);
            if let Some(m) = s.mark {
                assert!(is_mark(&data[m..], 0xabcd, m - end), "mark at {m}");
                assert_eq!(
                    m / BLOCK,
                    s.record / BLOCK,
                    "a mark shares its record's block"
                );
                chain.mark();
            }
            let r = decode_v3_record(&data[s.record..]).expect("record");
            assert_eq!(r.len as u32, e.len);
            let (seq, more) = chain.resolve(r.trailer).expect("seq");
            out.push((seq, more, r.tombstone, r.value.len()));
            open_block = Some(s.record / BLOCK);
            end = s.record + r.len;
        }
        out
    }

    proptest! {
        #[test]
        fn leb_roundtrips(v in any::<u64>()) {
            let mut b = Vec::new();
            leb_put(&mut b, v);
            prop_assert_eq!(leb_get(&b), Some((v, b.len())));
            prop_assert_eq!(b.len(), leb_len(v));
        }

        #[test]
        fn records_roundtrip_and_any_flip_is_caught(
            key in proptest::collection::vec(any::<u8>(), 1..=MAX_KEY_LEN),
            value in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300),
                proptest::collection::vec(any::<u8>(), 60_000..70_000),
            ],
            tomb in any::<bool>(),
            trailer in proptest::option::of((any::<bool>(), any::<bool>(), 0..SEQ_LIMIT)),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let value = if tomb { Vec::new() } else { value };
            let t = trailer.map(|(abs, more, s)| Trailer { abs, more, s });
            let mut b = Vec::new();
            encode_v3_record(&mut b, tomb, &key, &value, t);
            prop_assert_eq!(b.len(), v3_record_len(key.len(), value.len(), t));
            b.extend_from_slice(&[0u8; 16]);
            let r = decode_v3_record(&b).expect("decodes");
            prop_assert_eq!((r.tombstone, r.key, r.value, r.trailer), (tomb, &key[..], &value[..], t));
            let at = flip.index(r.len);
            b[at] ^= 1 << bit;
            let bad = decode_v3_record(&b);
            prop_assert!(bad.is_err(), "a flipped bit at {} decoded: {:?}", at, bad);
        }

        #[test]
        fn seq_chains_agree(
            steps in proptest::collection::vec((0u64..8, 0u8..10, any::<bool>(), any::<bool>()), 1..200),
            follow in any::<bool>(),
        ) {
            let rule = if follow { SeqRule::Follow } else { SeqRule::Max };
            let (mut w, mut r, mut seq) = (SeqChain::new(rule), SeqChain::new(rule), 1u64 << 40);
            for (jump, how, more, mark) in steps {
                // Mostly consecutive seqs; sometimes an old (moved) seq, a jump
                // forward, or one far enough to need an absolute trailer.
                seq = match how {
                    0 => seq.saturating_sub(jump * 1000),
                    1 => seq ^ (1 << 61),
                    _ => seq + 1 + jump * jump * jump,
                };
                if mark { w.mark(); r.mark(); }
                let t = w.trailer_for(seq, more);
                prop_assert_eq!(r.resolve(t).expect("resolves"), (seq, more));
                prop_assert_eq!(w, r);
            }
        }

        #[test]
        fn segments_roundtrip(
            k in 1usize..40,
            vals in proptest::collection::vec((0usize..5000, any::<bool>(), 0u8..8), 1..300),
            follow in any::<bool>(),
        ) {
            let rule = if follow { SeqRule::Follow } else { SeqRule::Max };
            let mut seq = 500u64;
            let recs: Vec<Rec> = vals.iter().map(|&(v, more, how)| {
                seq += 1;
                let tomb = how == 1;
                let value = if tomb { Vec::new() } else { vec![v as u8; v] };
                (if how == 0 { seq / 2 } else { seq }, more, tomb, value)
            }).collect();
            let seg = 256 << 10;
            let w = write_segment(seg, k, &recs, rule);
            let mut buf = vec![0u8; seg];
            buf[..w.data.len()].copy_from_slice(&w.data);
            encode_v3_tail(&mut buf, &w.sum, &w.foot);
            let (f2, entries) = decode_v3_tail(&buf, rule).expect("tail");
            prop_assert_eq!(f2, w.foot);
            prop_assert_eq!(&entries, &w.entries);
            let got = read_segment(&buf, &entries, rule);
            for (g, want) in got.iter().zip(recs.iter()) {
                prop_assert_eq!(*g, (want.0, want.1, want.2, want.3.len()));
            }
        }
    }
}
