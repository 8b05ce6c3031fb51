//! One shard's open-addressing table of packed quotient slots: ordered linear
//! probing with backward-shift deletion (see the module documentation of
//! `index`).
//!
//! A table of capacity `cap` has `q = ⌊log2 cap⌋` and `Q = 2^q ≤ cap`. A
//! fingerprint splits into its *quotient* (top `q` bits) and *remainder* (the
//! other `64 − q`); its home slot is `(quot · cap) >> q`, which is monotone in
//! the quotient and injective (because `cap ≥ Q`). A slot stores only
//! `f | r | loc`, packed little-endian into `b` bytes:
//!
//! ```text
//! bits 0..7            f: 0 = empty, d + 1 = entry displaced d slots from its home (d ≤ 126)
//! bits 7..7+(64−q)     r: the remainder
//! next `lbits` bits    loc
//! ```
//!
//! so the quotient is never stored: it is recovered from the slot position and
//! `d` (home = pos − d, quot = the one quotient whose home that is). That is
//! what lets a table both shrink a slot from 16 bytes and still grow and
//! delete by backward shift, which must know every entry's home. An entry
//! that would need `d > 126` does not go into the table: the shard keeps it in
//! a small overflow map instead (`shard.rs`).

/// Largest displacement a slot can record (a 7-bit field; 0 means empty).
pub(super) const MAX_DISP: u32 = 126;

/// Bytes of zeroed slack after the last slot, so that every slot can be read
/// as one unaligned 16-byte word.
const SLACK: usize = 16;

/// Bits in a slot's displacement field.
const F_BITS: u32 = 7;

/// The smallest table capacity whose slots fit in 16 bytes with `lbits`-bit
/// locations: `7 + (64 − q) + lbits ≤ 128` needs `q ≥ lbits − 57`.
pub(super) fn min_cap_for(lbits: u32) -> usize {
    16usize.max(1usize << lbits.saturating_sub(57))
}

/// Bytes per slot of a table of `cap > 0` slots with `lbits`-bit locations.
pub(super) fn slot_bytes(cap: usize, lbits: u32) -> usize {
    (F_BITS + 64 - log2(cap) + lbits).div_ceil(8) as usize
}

/// `⌊log2 cap⌋` (0 for 0).
pub(super) fn log2(cap: usize) -> u32 {
    (usize::BITS - 1).saturating_sub(cap.leading_zeros())
}

/// Result of probing a table for a fingerprint.
pub(super) enum Probe {
    /// The fingerprint is at this slot.
    Found(usize),
    /// Absent; this is where it would be inserted, at this displacement.
    Vacant(usize, u32),
}

/// One decoded slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    /// 0: empty; else the displacement + 1.
    pub(super) f: u32,
    /// The remainder of the fingerprint.
    pub(super) r: u64,
    /// The location.
    pub(super) loc: u64,
}

/// A table: its geometry and its packed slots. Kept to 40 bytes, so that a
/// shard's lock, table header and overflow pointer share one cache line.
#[repr(C)]
pub(super) struct Table {
    /// `cap · b` bytes of slots, then [`SLACK`] zero bytes.
    bytes: Box<[u8]>,
    cap: usize,
    /// `⌊2^64 · Q / cap⌋` when `cap > Q` (0 otherwise): turns a home back into
    /// its quotient without a division.
    recip: u64,
    q: u32,
    lbits: u16,
    /// Bytes per slot.
    b: u16,
}

impl Table {
    /// An empty table of `cap` slots (0, or at least [`min_cap_for`]`(lbits)`).
    /// The allocation is zeroed, so untouched pages cost no DRAM.
    pub(super) fn new(cap: usize, lbits: u32) -> Table {
        let lbits = lbits.clamp(1, 64);
        let (q, b) = if cap == 0 {
            (0, 0)
        } else {
            (log2(cap), slot_bytes(cap, lbits))
        };
        debug_assert!(cap == 0 || (b <= 16 && cap >= 2), "cap {cap} lbits {lbits}");
        let big_q = if cap == 0 { 0 } else { 1u128 << q };
        let recip = if cap as u128 > big_q {
            ((big_q << 64) / cap as u128) as u64
        } else {
            0
        };
        let len = if cap == 0 { 0 } else { cap * b + SLACK };
        Table {
            bytes: vec![0u8; len].into_boxed_slice(),
            cap,
            recip,
            q,
            lbits: lbits as u16,
            b: b as u16,
        }
    }

    /// Number of slots.
    #[inline]
    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    /// Bits of a location.
    #[inline]
    pub(super) fn lbits(&self) -> u32 {
        self.lbits as u32
    }

    /// Bytes per slot, as a `usize`.
    #[inline]
    fn sb(&self) -> usize {
        self.b as usize
    }

    /// Bytes per slot.
    pub(super) fn slot_bytes(&self) -> usize {
        self.b as usize
    }

    /// Heap bytes of the table.
    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The packed slots, without the slack (a checkpoint image's table).
    pub(super) fn raw(&self) -> &[u8] {
        &self.bytes[..self.cap * self.sb()]
    }

    /// Bits of a remainder.
    #[inline]
    fn rbits(&self) -> u32 {
        64 - self.q
    }

    #[inline]
    fn rmask(&self) -> u64 {
        u64::MAX >> self.q
    }

    /// Largest location a slot can hold.
    #[inline]
    pub(super) fn lmask(&self) -> u64 {
        u64::MAX >> (64 - self.lbits())
    }

    /// The 16 bytes at slot `pos`, as a little-endian word.
    #[inline]
    fn word(&self, pos: usize) -> u128 {
        let o = pos * self.sb();
        let mut w = [0u8; 16];
        w.copy_from_slice(&self.bytes[o..o + 16]);
        u128::from_le_bytes(w)
    }

    /// The displacement field of slot `pos` (the low 7 bits of its first byte).
    #[inline]
    pub(super) fn f(&self, pos: usize) -> u32 {
        (self.bytes[pos * self.sb()] & 0x7f) as u32
    }

    /// Slot `pos`, decoded.
    #[inline]
    pub(super) fn slot(&self, pos: usize) -> Slot {
        let w = self.word(pos);
        Slot {
            f: (w as u32) & 0x7f,
            r: (w >> F_BITS) as u64 & self.rmask(),
            loc: (w >> (F_BITS + self.rbits())) as u64 & self.lmask(),
        }
    }

    /// Whether slot `pos` has bits set above its fields (never, in a table
    /// this code built; an image check).
    pub(super) fn has_stray_bits(&self, pos: usize) -> bool {
        let used = F_BITS + self.rbits() + self.lbits();
        let mask = if used >= 128 { 0 } else { u128::MAX << used };
        let width = if self.sb() >= 16 {
            0
        } else {
            u128::MAX << (8 * self.sb())
        };
        self.word(pos) & mask & !width != 0
    }

    /// Writes slot `pos` (only its own `b` bytes).
    #[inline]
    fn put(&mut self, pos: usize, f: u32, r: u64, loc: u64) {
        let w = f as u128 | (r as u128) << F_BITS | (loc as u128) << (F_BITS + self.rbits());
        let o = pos * self.sb();
        let b = self.sb();
        self.bytes[o..o + b].copy_from_slice(&w.to_le_bytes()[..b]);
    }

    /// Replaces the location of the entry at `pos` (`loc ≤ lmask`).
    pub(super) fn set_loc(&mut self, pos: usize, loc: u64) {
        let s = self.slot(pos);
        self.put(pos, s.f, s.r, loc);
    }

    #[inline]
    fn next(&self, pos: usize) -> usize {
        if pos + 1 == self.cap {
            0
        } else {
            pos + 1
        }
    }

    /// Home slot of quotient `quot`.
    #[inline]
    fn home_of_quot(&self, quot: u64) -> usize {
        ((quot as u128 * self.cap as u128) >> self.q) as usize
    }

    /// Home slot of a fingerprint.
    #[inline]
    pub(super) fn home(&self, fp: u64) -> usize {
        self.home_of_quot(fp.checked_shr(self.rbits()).unwrap_or(0))
    }

    /// The quotient whose home is `h`, if `h` is a home at all (with `cap > Q`
    /// some slots are nobody's home).
    pub(super) fn quot_of_home(&self, h: usize) -> Option<u64> {
        let big_q = 1u64.checked_shl(self.q).unwrap_or(0);
        let mut quot = if self.recip == 0 {
            h as u64
        } else {
            ((h as u128 * self.recip as u128) >> 64) as u64
        };
        // The estimate is at most 2 below the answer (rounding of `recip`).
        while quot < big_q && self.home_of_quot(quot) < h {
            quot += 1;
        }
        (quot < big_q && self.home_of_quot(quot) == h).then_some(quot)
    }

    /// The fingerprint of the (non-empty) entry at `pos`.
    pub(super) fn fp_at(&self, pos: usize) -> u64 {
        let s = self.slot(pos);
        let d = s.f.saturating_sub(1) as usize;
        let h = home_at(pos, d % self.cap, self.cap);
        let quot = self.quot_of_home(h).unwrap_or(0);
        quot.checked_shl(self.rbits()).unwrap_or(0) | s.r
    }

    /// Finds `fp`, or the slot (and displacement) where it belongs.
    #[inline]
    pub(super) fn probe(&self, fp: u64) -> Probe {
        if self.cap == 0 {
            return Probe::Vacant(0, 0);
        }
        let r = fp & self.rmask();
        let mut pos = self.home(fp);
        let mut k = 0u32;
        loop {
            let w = self.word(pos);
            let f = (w as u32) & 0x7f;
            // An entry displaced less than we are has a later home: `fp` would sort before it.
            if f == 0 || f - 1 < k {
                return Probe::Vacant(pos, k);
            }
            if f - 1 == k {
                let er = (w >> F_BITS) as u64 & self.rmask();
                if er == r {
                    return Probe::Found(pos);
                }
                if er > r {
                    return Probe::Vacant(pos, k);
                }
            }
            // Bounded: every entry has d ≤ 126, so k = 127 stops at the test above.
            k += 1;
            pos = self.next(pos);
        }
    }

    /// Puts `fp → loc` at `pos`, displacement `k` (a `Probe::Vacant` answer),
    /// shifting the rest of the run up by one slot. Returns `false`, leaving
    /// the table unchanged, if that would displace any entry by more than
    /// [`MAX_DISP`] or `loc` does not fit. The table must have an empty slot.
    pub(super) fn try_insert(&mut self, pos: usize, k: u32, fp: u64, loc: u64) -> bool {
        if k > MAX_DISP || loc > self.lmask() || self.cap == 0 {
            return false;
        }
        // The run to shift: pos up to the next empty slot.
        let mut end = pos;
        let mut n = 0;
        loop {
            let f = self.f(end);
            if f == 0 {
                break;
            }
            // f − 1 = MAX_DISP: this entry cannot move up.
            if f > MAX_DISP || n + 1 >= self.cap {
                return false;
            }
            end = self.next(end);
            n += 1;
        }
        self.shift_up(pos, end);
        let (b, wrap) = (self.sb(), self.cap * self.sb());
        let mut o = pos * b;
        for _ in 0..n {
            o += b;
            if o == wrap {
                o = 0;
            }
            // d + 1 ≤ 126 + 1 fits in the 7-bit field: no carry into bit 7.
            self.bytes[o] += 1;
        }
        self.put(pos, k + 1, fp & self.rmask(), loc);
        true
    }

    /// Moves slots `pos..end` (cyclically; `end` is empty) up by one slot.
    fn shift_up(&mut self, pos: usize, end: usize) {
        let b = self.sb();
        if end >= pos {
            self.bytes.copy_within(pos * b..end * b, (pos + 1) * b);
        } else {
            self.bytes.copy_within(0..end * b, b);
            let last = (self.cap - 1) * b;
            self.bytes.copy_within(last..last + b, 0);
            self.bytes.copy_within(pos * b..last, (pos + 1) * b);
        }
    }

    /// Removes the entry at `pos` by backward shift; returns its location.
    pub(super) fn remove_at(&mut self, pos: usize) -> u64 {
        let loc = self.slot(pos).loc;
        let b = self.sb();
        let mut j = pos;
        loop {
            let nx = self.next(j);
            if self.f(nx) <= 1 || nx == pos {
                break;
            }
            self.bytes.copy_within(nx * b..nx * b + b, j * b);
            self.bytes[j * b] -= 1;
            j = nx;
        }
        self.bytes[j * b..j * b + b].fill(0);
        loc
    }

    /// How many slots at the start of the table hold the end of a cluster
    /// that wraps past the last slot: those entries' homes are near the end,
    /// so in fingerprint order they come last.
    pub(super) fn wrapped(&self) -> usize {
        (0..self.cap)
            .take_while(|&pos| self.f(pos) > pos as u32 + 1)
            .count()
    }

    /// Slot positions of the non-empty entries, in fingerprint order.
    pub(super) fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        let w = self.wrapped();
        (w..self.cap)
            .chain(0..w)
            .filter(move |&pos| self.f(pos) != 0)
    }

    /// Slot positions of the non-empty entries from where `fp` is or would
    /// be, in fingerprint order: the entries not below `fp`.
    pub(super) fn positions_from(&self, fp: u64) -> impl Iterator<Item = usize> + '_ {
        let (cap, w) = (self.cap, self.wrapped());
        let start = match self.probe(fp) {
            Probe::Found(p) | Probe::Vacant(p, _) => p,
        };
        // `start` as a rank in fingerprint order: slots w.. then ..w.
        let first = if start >= w {
            start - w
        } else {
            cap - w + start
        };
        (first..cap)
            .map(move |rank| wrap(rank + w, cap))
            .filter(move |&pos| self.f(pos) != 0)
    }

    /// Inserts `fp → loc` if absent (`false`: it does not fit, see [`Table::try_insert`]).
    pub(super) fn insert(&mut self, fp: u64, loc: u64) -> bool {
        match self.probe(fp) {
            Probe::Found(p) if loc <= self.lmask() => {
                self.set_loc(p, loc);
                true
            }
            Probe::Found(_) => false,
            Probe::Vacant(p, k) => self.try_insert(p, k, fp, loc),
        }
    }

    /// A table of `cap` slots holding `entries` (`(fp, loc)` in increasing
    /// fingerprint order, fewer than `cap`); the entries that do not fit go
    /// to `spill`.
    ///
    /// One sequential pass: each entry goes at `max(home, previous + 1)`, so
    /// there is no probing or shifting; the few that would run past the end
    /// are inserted normally afterwards (an ordered table does not depend on
    /// insertion order).
    pub(super) fn from_sorted(
        cap: usize,
        lbits: u32,
        entries: impl Iterator<Item = (u64, u64)>,
        spill: &mut Vec<(u64, u64)>,
    ) -> Table {
        let mut t = Table::new(cap, lbits);
        let mut w = 0usize;
        let mut late = Vec::new();
        for (fp, loc) in entries {
            let h = t.home(fp);
            let p = h.max(w);
            if p >= cap {
                late.push((fp, loc));
            } else if p - h > MAX_DISP as usize || loc > t.lmask() {
                spill.push((fp, loc));
            } else {
                t.put(p, (p - h) as u32 + 1, fp & t.rmask(), loc);
                w = p + 1;
            }
        }
        for (fp, loc) in late {
            if !t.insert(fp, loc) {
                spill.push((fp, loc));
            }
        }
        t
    }

    /// This table's entries in a new table of `cap` slots (`cap` > entries);
    /// those that do not fit go to `spill`.
    pub(super) fn rebuild(&self, cap: usize, spill: &mut Vec<(u64, u64)>) -> Table {
        Table::from_sorted(cap, self.lbits(), self.entries(), spill)
    }

    /// Every entry as `(fp, loc)`, in fingerprint order. One sequential pass:
    /// homes do not decrease in this order, so the quotient is found by
    /// stepping forward, not recomputed per entry.
    pub(super) fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (cap, w) = (self.cap, self.wrapped());
        let mut quot = 0u64;
        (w..cap).chain(0..w).filter_map(move |pos| {
            let s = self.slot(pos);
            if s.f == 0 {
                return None;
            }
            let h = home_at(pos, (s.f - 1) as usize % cap, cap);
            while self.home_of_quot(quot) < h {
                quot += 1;
            }
            Some((quot.checked_shl(self.rbits()).unwrap_or(0) | s.r, s.loc))
        })
    }

    /// Removes the entries whose location fails `keep`, in one pass, keeping
    /// the probe order, and calls `removed(fp, loc)` for each one removed;
    /// returns how many. (Fingerprints are recovered only for those: a pass
    /// over a large table that keeps everything does no quotient arithmetic.)
    pub(super) fn retain(
        &mut self,
        keep: &mut impl FnMut(u64) -> bool,
        removed: &mut impl FnMut(u64, u64),
    ) -> usize {
        let cap = self.cap;
        // Start right after an empty slot, so no cluster straddles the start.
        let Some(empty) = (0..cap).find(|&p| self.f(p) == 0) else {
            return 0;
        };
        let start = empty + 1;
        let mut n = 0;
        // `w`: first free position (unwrapped coordinates, start..start+cap).
        let mut w = start;
        for lin in start..start + cap {
            let pos = wrap(lin, cap);
            let s = self.slot(pos);
            if s.f == 0 {
                continue;
            }
            if !keep(s.loc) {
                removed(self.fp_at(pos), s.loc);
                self.put(pos, 0, 0, 0);
                n += 1;
                continue;
            }
            // Moving back only shrinks a displacement.
            let home_lin = lin - (s.f - 1) as usize;
            let dst = home_lin.max(w);
            if dst != lin {
                self.put(pos, 0, 0, 0);
                self.put(wrap(dst, cap), (dst - home_lin) as u32 + 1, s.r, s.loc);
            }
            w = dst + 1;
        }
        n
    }

    /// Loads `raw` (a table's packed slots, as [`Table::raw`] gives them).
    pub(super) fn from_raw(cap: usize, lbits: u32, raw: &[u8]) -> Option<Table> {
        let mut t = Table::new(cap, lbits);
        if raw.len() != cap * t.sb() {
            return None;
        }
        t.bytes[..raw.len()].copy_from_slice(raw);
        Some(t)
    }
}

/// `x mod cap` for `x < 2 · cap`, without a division (hot loops run it per slot).
#[inline]
fn wrap(x: usize, cap: usize) -> usize {
    if x >= cap {
        x - cap
    } else {
        x
    }
}

/// The home of an entry at `pos` displaced by `d < cap`, cyclically.
#[inline]
pub(super) fn home_at(pos: usize, d: usize, cap: usize) -> usize {
    wrap(pos + cap - d, cap)
}

/// Largest entry count allowed in a table of `cap` slots.
pub(super) fn max_len_for(cap: usize, max_load: f64) -> usize {
    // One slot always stays empty (probes stop there).
    if cap < 2 {
        return 0;
    }
    ((cap as f64 * max_load) as usize).clamp(1, cap - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_are_injective_and_invertible() {
        for cap in [16usize, 17, 23, 31, 32, 33, 100, 1000, 1023, 1024, 1025] {
            let t = Table::new(cap, 40);
            let big_q = 1u64 << log2(cap);
            let mut last = None;
            for quot in 0..big_q {
                let h = t.home_of_quot(quot);
                assert!(h < cap);
                assert!(
                    last.is_none_or(|l| l < h),
                    "cap {cap}: homes strictly increase"
                );
                last = Some(h);
                assert_eq!(t.quot_of_home(h), Some(quot), "cap {cap} quot {quot}");
            }
        }
    }

    #[test]
    fn slot_sizes() {
        assert_eq!(min_cap_for(64), 128);
        assert_eq!(min_cap_for(52), 16);
        // 10^8 keys in 1024 shards: q = 16; Table 4 at 10^8 has 2^17 segments.
        assert_eq!(slot_bytes(100_000, 35 + 17), 14);
        assert_eq!(slot_bytes(100_000, 35 + 14), 13);
        assert_eq!(slot_bytes(128, 64), 16);
    }

    #[test]
    fn insert_shift_remove_round_trip() {
        let mut t = Table::new(64, 20);
        // Eight entries with one home (equal quotients), inserted out of order.
        let fps: Vec<u64> = (0..8u64).map(|i| (5u64 << 58) | (8 - i)).collect();
        for (i, &fp) in fps.iter().enumerate() {
            assert!(t.insert(fp, i as u64));
        }
        let order: Vec<u64> = t.positions().map(|p| t.fp_at(p)).collect();
        let mut sorted = fps.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "slot order is fingerprint order");
        for (i, &fp) in fps.iter().enumerate() {
            match t.probe(fp) {
                Probe::Found(p) => assert_eq!(t.slot(p).loc, i as u64),
                Probe::Vacant(..) => panic!("{fp:x} lost"),
            }
        }
        let Probe::Found(p) = t.probe(fps[3]) else {
            panic!("present")
        };
        assert_eq!(t.remove_at(p), 3);
        assert!(matches!(t.probe(fps[3]), Probe::Vacant(..)));
        assert_eq!(t.positions().count(), 7);
        assert!(
            !t.insert(fps[0], 1 << 20),
            "a location wider than 20 bits does not fit"
        );
    }
}
