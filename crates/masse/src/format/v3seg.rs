//! Format version 3, segment by segment: where the writer puts each record of
//! an open segment (mark, record, trailer, summary entry: [`V3Cursor`]), and
//! how a reader without a valid summary finds them again
//! ([`parse_v3_records`]). Both follow the rules of `v3.rs` (plan §2.1–2.5),
//! so placement, sealing, recovery and `check` agree on every byte.

use super::segment::SEG_HEADER;
use super::v3::*;

/// Most bytes a summary entry takes: 10 digest bytes, the length and flags
/// (the length is below 2^26, so at most 4 LEB128 bytes) and a seq delta (at
/// most 9).
pub const V3_MAX_ENTRY: usize = 24;
/// Longest sequence trailer.
pub const V3_MAX_TRAILER: usize = 10;

/// The writer's state in one open segment: where its records end, the block
/// the last one started in, the record and summary seq chains, and the
/// summary's length so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Cursor {
    /// End of the last record (the segment header's end before the first).
    pub end: usize,
    /// Block where the last record started.
    pub open_block: Option<usize>,
    /// The records' seq chain.
    pub chain: SeqChain,
    /// Bytes of the summary so far.
    pub sum_len: usize,
    /// The summary's seq chain (the next entry's expected seq).
    pub sum_expect: u64,
    /// Records placed.
    pub nrec: usize,
}

impl V3Cursor {
    /// The cursor of an empty segment whose seq chains follow `rule`.
    pub fn new(rule: SeqRule) -> Self {
        V3Cursor {
            end: SEG_HEADER,
            open_block: None,
            chain: SeqChain::new(rule),
            sum_len: 0,
            sum_expect: 0,
            nrec: 0,
        }
    }

    /// How this segment's seq chains move.
    pub fn rule(&self) -> SeqRule {
        self.chain.rule()
    }
}

/// Where one record goes: its spot (mark, offset, skip), the trailer it
/// carries and its exact length, the bytes its summary entry takes, and the
/// record chain after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Slot {
    /// Mark and record position.
    pub spot: Spot,
    /// The record's sequence trailer.
    pub trailer: Option<Trailer>,
    /// Exact record length, trailer included.
    pub len: usize,
    /// Bytes of its summary entry.
    pub entry_len: usize,
    /// End of the record before it (the cursor's `end` when it was placed).
    pub prev_end: usize,
    chain: SeqChain,
}

impl V3Slot {
    /// The mark's `back` field (`v3::encode_mark`), if a mark goes first.
    pub fn mark_back(&self) -> Option<(usize, u16)> {
        self.spot.mark.map(|m| (m, (m - self.prev_end) as u16))
    }

    /// The summary entry of this record.
    pub fn entry(&self, digest: u128, seq: u64, tombstone: bool) -> V3Entry {
        V3Entry {
            digest,
            seq,
            offset: self.spot.record as u32,
            len: self.len as u32,
            skip: self.spot.skip,
            tombstone,
            more: self.trailer.is_some_and(|t| t.more),
        }
    }
}

impl V3Cursor {
    /// Where a record of `base` bytes without a trailer (header, key, value),
    /// with `seq` and the group flag `more`, goes next. The trailer depends on
    /// whether a mark precedes the record and the spot on the record's
    /// length, so place until both agree; near the straddle limit the two can
    /// flip-flop, and then the record skips, with a mark (any choice decodes:
    /// the summary records it).
    pub fn slot(&self, base: usize, seq: u64, more: bool, tombstone: bool) -> V3Slot {
        let (end, open) = (self.end, self.open_block);
        let mut marked = spot(end, open, false).mark.is_some();
        for _ in 0..2 {
            let mut c = self.chain;
            if marked {
                c.mark();
            }
            let t = c.trailer_for(seq, more);
            let len = base + t.map_or(0, |t| t.encoded_len());
            let s = place_v3(end, open, len);
            if s.mark.is_some() == marked {
                return self.finish(s, t, len, c, seq, tombstone);
            }
            marked = s.mark.is_some();
        }
        let mut c = self.chain;
        c.mark();
        let t = c.trailer_for(seq, more);
        let len = base + t.map_or(0, |t| t.encoded_len());
        self.finish(spot(end, open, true), t, len, c, seq, tombstone)
    }

    fn finish(
        &self,
        spot: Spot,
        trailer: Option<Trailer>,
        len: usize,
        chain: SeqChain,
        seq: u64,
        tombstone: bool,
    ) -> V3Slot {
        let mut s = V3Slot {
            spot,
            trailer,
            len,
            entry_len: 0,
            prev_end: self.end,
            chain,
        };
        s.entry_len = v3_entry_len(&s.entry(0, seq, tombstone), self.sum_expect);
        s
    }

    /// Bytes the segment needs up to its end (records, summary, footer) once
    /// the record of `s` is placed.
    pub fn need(&self, s: &V3Slot) -> usize {
        s.spot.record + s.len + self.sum_len + s.entry_len + V3_FOOTER
    }

    /// The record of `s` (seq `seq`) was placed.
    pub fn advance(&mut self, s: &V3Slot, seq: u64) {
        self.end = s.spot.record + s.len;
        self.open_block = Some(s.spot.record / BLOCK);
        self.chain = s.chain;
        self.sum_len += s.entry_len;
        self.sum_expect = self.rule().next(self.sum_expect, seq);
        self.nrec += 1;
    }

    /// The writer's state after the records of `entries` (in placement order,
    /// with their offsets), as placing them would have left it: for a
    /// segment reopened after a restart.
    pub fn after(entries: &[V3Entry], rule: SeqRule) -> V3Cursor {
        let mut c = V3Cursor::new(rule);
        for e in entries {
            let here = spot(c.end, c.open_block, false);
            if here.mark.is_some() || here.record != e.offset as usize {
                c.chain.mark();
            }
            c.chain.trailer_for(e.seq, e.more);
            c.sum_len += v3_entry_len(e, c.sum_expect);
            c.sum_expect = rule.next(c.sum_expect, e.seq);
            c.end = e.offset as usize + e.len as usize;
            c.open_block = Some(e.offset as usize / BLOCK);
            c.nrec += 1;
        }
        c
    }
}

/// The SKIP flag of each entry, from the offsets: a record skipped when it
/// does not start where the writer would have put it without skipping.
pub fn with_skips(entries: &mut [V3Entry]) {
    let (mut end, mut open) = (SEG_HEADER, None);
    for e in entries {
        e.skip = spot(end, open, false).record != e.offset as usize;
        end = e.offset as usize + e.len as usize;
        open = Some(e.offset as usize / BLOCK);
    }
}

/// Encode the summary of `entries` (with their SKIP flags set), its seq
/// chain moving by `rule`.
pub fn encode_v3_summary(entries: &[V3Entry], rule: SeqRule) -> Vec<u8> {
    let (mut out, mut expect) = (Vec::with_capacity(entries.len() * 12), 0u64);
    for e in entries {
        encode_v3_entry(&mut out, e, &mut expect, rule);
    }
    out
}

/// Parse the records of a version-3 segment tagged `tag` without its summary
/// (a segment still being written, a torn seal, or damage), the way they
/// were placed: at the end of the previous record, else (a skip over at most
/// [`MAX_SKIP_GAP`] bytes) at the next block. A record that starts a block
/// must follow a mark of this segment and carry its absolute seq, so stale
/// bytes of an earlier use of the slot are never taken for records (plan
/// §2.5). Records at or past `limit` are not taken (no writer puts one
/// there). The records' seq chain follows `rule`. Returns the entries
/// (digests from `digest` of each key) and the end of the last record.
pub fn parse_v3_records(
    seg: &[u8],
    tag: u32,
    limit: usize,
    digest: &dyn Fn(&[u8]) -> u128,
    rule: SeqRule,
) -> (Vec<V3Entry>, usize) {
    let (mut out, mut c) = (Vec::new(), V3Cursor::new(rule));
    while let Some((s, r, chain, seq, more)) = next_record(seg, tag, &c) {
        if s.record >= limit {
            break;
        }
        out.push(V3Entry {
            digest: digest(r.key),
            seq,
            offset: s.record as u32,
            len: r.len as u32,
            skip: s.skip,
            tombstone: r.tombstone,
            more,
        });
        c.end = s.record + r.len;
        c.open_block = Some(s.record / BLOCK);
        c.chain = chain;
    }
    (out, c.end)
}

/// The record after cursor `c`'s, if one parses there.
fn next_record<'s>(
    seg: &'s [u8],
    tag: u32,
    c: &V3Cursor,
) -> Option<(Spot, V3Record<'s>, SeqChain, u64, bool)> {
    let gap = c.end.next_multiple_of(BLOCK) - c.end;
    for skip in [false, true] {
        if skip && (gap == 0 || gap > MAX_SKIP_GAP) {
            break;
        }
        let s = spot(c.end, c.open_block, skip);
        let mut chain = c.chain;
        if let Some(m) = s.mark {
            if !is_mark(seg.get(m..).unwrap_or(&[]), tag, m - c.end) {
                continue;
            }
            chain.mark();
        }
        let Some(Ok(r)) = seg.get(s.record..).map(decode_v3_record) else {
            continue;
        };
        if let Ok((seq, more)) = chain.resolve(r.trailer) {
            return Some((s, r, chain, seq, more));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(
        c: &mut V3Cursor,
        data: &mut Vec<u8>,
        tag: u32,
        key: &[u8],
        v: usize,
        seq: u64,
        more: bool,
    ) {
        let s = c.slot(V3_HEADER + key.len() + v, seq, more, false);
        if let Some(m) = s.spot.mark {
            let back = (m - data.len()) as u16;
            data.resize(m, 0);
            encode_mark(data, tag, back);
        }
        data.resize(s.spot.record, 0);
        encode_v3_record(data, false, key, &vec![1; v], s.trailer);
        assert_eq!(data.len(), s.spot.record + s.len);
        c.advance(&s, seq);
    }

    /// Records of many sizes, moves and groups written by the cursor parse
    /// back exactly, and `after` rebuilds the cursor from the entries, with
    /// either seq rule.
    #[test]
    fn written_records_parse_back() {
        for rule in [SeqRule::Max, SeqRule::Follow] {
            written_records_parse_back_with(rule);
        }
    }

    fn written_records_parse_back_with(rule: SeqRule) {
        let (mut c, mut data) = (V3Cursor::new(rule), vec![0u8; SEG_HEADER]);
        let mut seq = 1000u64;
        for i in 0..400usize {
            let v = [3, 100, 500, 3000, 4070, 4090, 9000][i % 7];
            let s = if i % 11 == 0 { seq - 500 } else { seq };
            seq += 1;
            place(&mut c, &mut data, 7, &i.to_le_bytes(), v, s, i % 5 == 1);
        }
        let (e, end) = parse_v3_records(&data, 7, usize::MAX, &|k| k[0] as u128, rule);
        assert_eq!((e.len(), end), (400, data.len()));
        assert_eq!(V3Cursor::after(&e, rule), c);
        let mut e2 = e.clone();
        with_skips(&mut e2);
        assert_eq!(e2, e, "skip flags follow from offsets");
        let sum = encode_v3_summary(&e, rule);
        assert_eq!(sum.len(), c.sum_len);
        let back = decode_v3_summary(&sum, 400, end as u32, rule).expect("summary");
        assert_eq!(back, e, "the summary gives back every entry, seqs included");
        // Another segment's tag: nothing parses.
        assert!(parse_v3_records(&data, 8, usize::MAX, &|_| 0, rule)
            .0
            .is_empty());
    }

    /// A record lost to a torn write before a skip: the block holding it
    /// kept its earlier contents (zeros after the record before), the next
    /// block landed. The gap before the skip's mark is then longer than the
    /// mark says, so the parse does not jump it and stops before the record
    /// behind the mark (which may be the end of the lost record's group).
    #[test]
    fn a_torn_record_before_a_skip_is_not_jumped() {
        let (mut c, mut data) = (V3Cursor::new(SeqRule::Follow), vec![0u8; SEG_HEADER]);
        // Fill block 0 to within 320 bytes of its end, then a record of a
        // batch ending about 170 bytes before the boundary, then the batch's
        // last record, which skips (it would cross).
        while data.len() < BLOCK - 320 {
            let seq = 100 + c.nrec as u64;
            place(&mut c, &mut data, 7, b"a", 50, seq, false);
        }
        let before = data.len();
        let v = BLOCK - 180 - before;
        place(&mut c, &mut data, 7, b"b", v, 900, true);
        place(&mut c, &mut data, 7, b"c", 300, 901, false);
        let (all, _) = parse_v3_records(&data, 7, usize::MAX, &|k| k[0] as u128, SeqRule::Follow);
        assert!(
            all.last().is_some_and(|e| e.skip),
            "the last record skipped"
        );
        let mut torn = data.clone();
        torn[before..BLOCK].fill(0);
        let (es, end) = parse_v3_records(&torn, 7, usize::MAX, &|k| k[0] as u128, SeqRule::Follow);
        assert_eq!(end, before, "the parse stops where block 0 ends");
        assert!(es.iter().all(|e| e.digest == b'a' as u128));
    }

    /// A block of stale bytes (another segment's records) after a valid
    /// prefix ends the parse there.
    #[test]
    fn a_stale_block_ends_the_parse() {
        let (mut c, mut data) = (V3Cursor::new(SeqRule::Follow), vec![0u8; SEG_HEADER]);
        for i in 0..100u64 {
            place(&mut c, &mut data, 7, &i.to_le_bytes(), 100, 10 + i, false);
        }
        let (mut o, mut od) = (V3Cursor::new(SeqRule::Follow), vec![0u8; SEG_HEADER]);
        while od.len() < data.len() + 3 * BLOCK {
            place(&mut o, &mut od, 6, b"old", 100, 5, false);
        }
        // Keep the first two blocks of the new segment, then the old one's.
        let cut = 2 * BLOCK;
        let mut mixed = data[..cut].to_vec();
        mixed.extend_from_slice(&od[cut..]);
        let (e, end) = parse_v3_records(&mixed, 7, usize::MAX, &|_| 0, SeqRule::Follow);
        assert!(end <= cut, "parse ran into the stale block ({end})");
        assert!(e.iter().all(|x| x.seq >= 10));
    }
}
