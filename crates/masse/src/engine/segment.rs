//! Segments in DRAM: the open segment records are merged into, and sealed
//! segments waiting for the writer (paper §2.4).
//!
//! A segment is one slot (or, for a record larger than a slot, several) of a
//! band: a header naming it, records, then a summary of their entries and a
//! footer. Its final capacity-tier address is known when it is created, so a
//! record's location is final the moment it is placed. Until the writer has
//! made a segment durable, reads find its records here.

use crate::device::AlignedBuf;
use crate::format::v3::{encode_v3_tail, V3Entry, V3Footer, V3_FOOTER};
use crate::format::v3seg::{encode_v3_summary, with_skips, V3Cursor};
use crate::format::{
    encode_segment_tail, Codec, SegmentFooter, SegmentHeader, SummaryEntry, SEG_FOOTER, SEG_HEADER,
    SUMMARY_ENTRY,
};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;

/// A segment held in DRAM: the open one and those queued for the writer.
pub(crate) struct SegmentBuf {
    pub size: usize,
    pub slot: u64,
    pub nslots: u32,
    pub seq: u64,
    pub band: u32,
    pub data: RwLock<AlignedBuf>,
}

impl SegmentBuf {
    /// A new segment of `nslots` slots of `seg` bytes at global `slot`, its header
    /// written. `prev` is where the records of the segment before it ended,
    /// and in which band (`WriteState::prev_end`).
    pub fn new(
        slot: u64,
        nslots: u32,
        seg: usize,
        seq: u64,
        band: u32,
        pool_tag: u64,
        prev: (u32, Option<u32>),
    ) -> SegmentBuf {
        let mut data = AlignedBuf::new(nslots as usize * seg);
        SegmentHeader {
            segment_seq: seq,
            pool_tag,
            nslots,
            prev_end: prev.0,
            prev_band: prev.1,
        }
        .encode_into(&mut data);
        SegmentBuf {
            size: data.len(),
            slot,
            nslots,
            seq,
            band,
            data: RwLock::new(data),
        }
    }
}

/// A segment still taking records (or sealed but not yet handed to the writer).
pub(crate) struct OpenSegment {
    pub buf: Arc<SegmentBuf>,
    pub used: usize,
    pub entries: Vec<SummaryEntry>,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Bytes from the start already durable on the device (capacity-only partial flushes).
    pub flushed: usize,
    pub codec: Codec,
    /// Version 3: where the next record goes (its `end` is `used`).
    pub v3: V3Cursor,
    /// Closed by the `User` stream (set by [`WriteState::close_segment`]).
    pub user: bool,
}

impl OpenSegment {
    pub fn new(buf: Arc<SegmentBuf>, codec: Codec) -> OpenSegment {
        OpenSegment {
            buf,
            used: SEG_HEADER,
            entries: Vec::new(),
            min_seq: u64::MAX,
            max_seq: 0,
            flushed: 0,
            codec,
            v3: V3Cursor::new(codec.seq_rule()),
            user: false,
        }
    }

    /// Bytes of the summary and footer sealing writes.
    fn tail_len(&self) -> usize {
        match self.codec {
            Codec::V2 => self.entries.len() * SUMMARY_ENTRY + SEG_FOOTER,
            Codec::V3 | Codec::V4 => self.v3.sum_len + V3_FOOTER,
        }
    }

    /// Add a record's summary entry.
    pub fn push(&mut self, e: SummaryEntry) {
        self.min_seq = self.min_seq.min(e.seq);
        self.max_seq = self.max_seq.max(e.seq);
        self.entries.push(e);
    }

    /// Room left unused if this one-slot segment is sealed now.
    pub fn seal_waste(&self, seg: usize) -> u64 {
        seg.saturating_sub(self.used + self.tail_len()) as u64
    }

    /// Write summary and footer: the segment takes no more records.
    pub fn seal(&mut self, pool_tag: u64) {
        let (min_seq, max_seq) = match self.entries.is_empty() {
            true => (0, self.max_seq),
            false => (self.min_seq, self.max_seq),
        };
        let mut d = self.buf.data.write();
        if self.codec.v3_records() {
            let mut es: Vec<V3Entry> = self.entries.iter().map(SummaryEntry::to_v3).collect();
            with_skips(&mut es);
            let sum = encode_v3_summary(&es, self.codec.seq_rule());
            debug_assert_eq!(sum.len(), self.v3.sum_len, "the cursor counted the summary");
            let f = V3Footer {
                rule: self.codec.seq_rule(),
                segment_seq: self.buf.seq,
                pool_tag,
                nrec: es.len() as u32,
                nslots: self.buf.nslots,
                data_len: self.used as u32,
                sum_len: sum.len() as u32,
                min_seq,
                max_seq,
            };
            encode_v3_tail(&mut d, &sum, &f);
            return;
        }
        let f = SegmentFooter {
            segment_seq: self.buf.seq,
            pool_tag,
            nrec: self.entries.len() as u32,
            nslots: self.buf.nslots,
            data_len: self.used as u32,
            min_seq,
            max_seq,
        };
        encode_segment_tail(&mut d, &self.entries, &f);
    }

    /// Room left for one more record's bytes: its summary entry and the footer
    /// must fit too (an exactly full segment has none left). Version 3
    /// counts the entry at its longest.
    pub fn room_left(&self) -> u32 {
        let entry = match self.codec {
            Codec::V2 => SUMMARY_ENTRY,
            Codec::V3 | Codec::V4 => crate::format::v3seg::V3_MAX_ENTRY,
        };
        self.buf
            .size
            .saturating_sub(self.used + self.tail_len() + entry) as u32
    }

    /// Where the summary starts (the first byte sealing writes).
    pub fn summary_start(&self) -> usize {
        self.buf.size - self.tail_len()
    }
}

/// Segments in DRAM by first slot: what reads look at before the device.
#[derive(Default)]
pub(crate) struct SegmentCache {
    map: RwLock<HashMap<u64, Arc<SegmentBuf>>>,
}

impl SegmentCache {
    pub fn insert(&self, b: Arc<SegmentBuf>) {
        self.map.write().insert(b.slot, b);
    }

    /// The writer made these durable: reads go to the device from now on.
    pub fn remove_all(&self, done: &[Arc<SegmentBuf>]) {
        let mut m = self.map.write();
        for b in done {
            m.remove(&b.slot);
        }
    }

    /// Every segment in DRAM.
    pub fn all(&self) -> Vec<Arc<SegmentBuf>> {
        self.map.read().values().cloned().collect()
    }

    pub fn get(&self, slot: u64) -> Option<Arc<SegmentBuf>> {
        self.map.read().get(&slot).cloned()
    }

    pub fn contains(&self, slot: u64) -> bool {
        self.map.read().contains_key(&slot)
    }

    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// Oldest segment sequence number still in DRAM.
    pub fn min_seq(&self) -> Option<u64> {
        self.map.read().values().map(|b| b.seq).min()
    }
}

/// The two write streams of a tiered pool with separated GC writes
/// (`Options::gc_separate`, design.md §9.5): user writes and GC moves fill
/// open bands of their own, so records that survived GC (cold) do not share
/// bands with fresh ones (hot). Other pools, and tiered ones without the
/// option, write everything to `User`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Stream {
    User,
    Gc,
}

/// One stream's write position: its open segment and band.
#[derive(Default)]
pub(crate) struct StreamPos {
    pub open: Option<OpenSegment>,
    pub cur_band: Option<u32>,
    /// Next free slot in the open band, counted from the band's first.
    pub next_sib: u64,
    /// `first_seq` of the band this stream opened last (open or not; 0 if
    /// none yet this run): the placement rule's notion of "newest".
    pub band_first: u64,
}

/// Where the log is written next: the open segment, segments closed but not
/// yet sealed, the next record and segment sequence numbers, and the open
/// band with its next free slot. Held by the group-commit leader.
///
/// The fields `open`, `cur_band`, `next_sib` and `band_first` are the
/// `User` stream's; the `Gc` stream's wait in `parked` and are swapped in
/// for as long as a record is placed in that stream ([`WriteState::in_stream`]),
/// so placement itself knows nothing of streams.
pub(crate) struct WriteState {
    pub open: Option<OpenSegment>,
    pub to_seal: Vec<OpenSegment>,
    pub next_seq: u64,
    pub next_seg: u64,
    pub cur_band: Option<u32>,
    /// Next free slot in the open band, counted from the band's first.
    pub next_sib: u64,
    /// `first_seq` of the band the `User` stream opened last (see [`StreamPos`]).
    pub band_first: u64,
    /// The `Gc` stream's position while the `User` stream's is in use.
    pub parked: StreamPos,
    /// The segment closed last: its sequence number, the end of its records
    /// and its band (written into the next segment's header as `prev_end`
    /// and `prev_band`).
    pub last_closed: Option<(u64, u32, u32)>,
    /// Tiered, with `Options::absorb_overwrites`: the `User` stream's segment
    /// closed last, kept in DRAM, unsealed, until the next one closes, so
    /// overwrites can still be absorbed into it (design.md §4.10).
    pub held: Option<OpenSegment>,
    /// The `Gc` stream's position is swapped in ([`WriteState::in_stream`]).
    in_gc: bool,
}

impl WriteState {
    /// Segment sequence numbers of this run start at `epoch << 40`.
    pub fn new(epoch: u64) -> WriteState {
        WriteState {
            open: None,
            to_seal: Vec::new(),
            next_seq: 1,
            next_seg: epoch << 40,
            cur_band: None,
            next_sib: 0,
            band_first: 0,
            parked: StreamPos::default(),
            last_closed: None,
            held: None,
            in_gc: false,
        }
    }

    /// Run `f` with stream `s`'s position in the working fields.
    pub fn in_stream<T>(&mut self, s: Stream, f: impl FnOnce(&mut WriteState) -> T) -> T {
        if s == Stream::User {
            return f(self);
        }
        self.swap_parked();
        let out = f(self);
        self.swap_parked();
        out
    }

    fn swap_parked(&mut self) {
        let p = &mut self.parked;
        std::mem::swap(&mut self.open, &mut p.open);
        std::mem::swap(&mut self.cur_band, &mut p.cur_band);
        std::mem::swap(&mut self.next_sib, &mut p.next_sib);
        std::mem::swap(&mut self.band_first, &mut p.band_first);
        self.in_gc = !self.in_gc;
    }

    /// Stream `s`'s open segment.
    pub fn open_of(&self, s: Stream) -> Option<&OpenSegment> {
        match s {
            Stream::User => self.open.as_ref(),
            Stream::Gc => self.parked.open.as_ref(),
        }
    }

    /// Stream `s`'s open band and the `first_seq` of the band it opened last.
    pub fn band_of(&self, s: Stream) -> (Option<u32>, u64) {
        match s {
            Stream::User => (self.cur_band, self.band_first),
            Stream::Gc => (self.parked.cur_band, self.parked.band_first),
        }
    }

    /// The open segments of both streams.
    pub fn open_segments(&self) -> impl Iterator<Item = &OpenSegment> {
        [self.open.as_ref(), self.parked.open.as_ref()]
            .into_iter()
            .flatten()
    }

    /// Segments holding records that only a later group commit will hand to
    /// the writer: both streams' open ones and the held one.
    pub fn unsent_with_records(&self) -> impl Iterator<Item = &OpenSegment> {
        self.open_segments()
            .chain(self.held.as_ref())
            .filter(|o| !o.entries.is_empty())
    }

    /// Where an overwrite of a record in stream `s`'s segment at `slot` may
    /// be absorbed: the stream's open segment, or for `User` the held one.
    pub fn absorbing(&self, s: Stream, slot: u64) -> Option<&OpenSegment> {
        let held = self.held.as_ref().filter(|_| s == Stream::User);
        [self.open_of(s), held]
            .into_iter()
            .flatten()
            .find(|o| o.buf.slot == slot)
    }

    /// A segment takes no more records: queue it for sealing and remember
    /// where its records end, for the next segment's header.
    pub fn close_segment(&mut self, mut o: OpenSegment) {
        self.last_closed = Some((o.buf.seq, o.used as u32, o.buf.band));
        o.user = !self.in_gc;
        self.to_seal.push(o);
    }

    /// The closed segments to hand to the writer now, oldest first. With
    /// `hold`, the newest `User` segment among them stays in DRAM as the
    /// held one (the previously held one then goes first); without, the
    /// held one goes too.
    pub fn take_closed(&mut self, hold: bool) -> Vec<OpenSegment> {
        let mut closed: Vec<OpenSegment> = self.to_seal.drain(..).collect();
        let keep = match hold {
            true => closed
                .iter()
                .rposition(|o| o.user)
                .map(|i| closed.remove(i)),
            false => None,
        };
        if hold && keep.is_none() {
            return closed;
        }
        let mut out: Vec<OpenSegment> = self.held.take().into_iter().collect();
        out.extend(closed);
        self.held = keep;
        out
    }

    /// Close stream `s`'s open segment, if it holds records.
    pub fn close_stream(&mut self, s: Stream) -> bool {
        self.in_stream(s, |ws| match ws.open.take() {
            Some(o) if !o.entries.is_empty() => {
                ws.close_segment(o);
                true
            }
            o => {
                ws.open = o;
                false
            }
        })
    }

    /// `prev_end` and `prev_band` for the header of segment `seq`: where the
    /// segment before it ended and which band holds it, if that was the one
    /// closed last.
    pub fn prev_end(&self, seq: u64) -> (u32, Option<u32>) {
        match self.last_closed {
            Some((s, end, band)) if s + 1 == seq => (end, Some(band)),
            _ => (0, None),
        }
    }
}
