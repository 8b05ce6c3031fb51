//! One shard of the index: a packed quotient table plus an overflow map for
//! the rare entry the table cannot record.
//!
//! A table slot records displacements up to 126 and locations up to the
//! table's width. An entry that would need more (about 2 in 10^6 keys at load
//! 0.95, or a location wider than the index was configured for) lives in
//! `overflow`, keyed by its full fingerprint, so nothing is ever truncated or
//! refused. Lookups consult the map only after a miss in the table, and only
//! when it is non-empty. Growing the shard re-places every overflow entry.

use std::collections::BTreeMap;

use super::table::{max_len_for, Probe, Table};

/// DRAM charged per overflow entry: key and value (16 B) plus a B-tree's
/// node overhead, rounded up.
pub(super) const OVERFLOW_ENTRY_BYTES: usize = 48;

/// Where a fingerprint is, or would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spot {
    /// In the table, at this slot.
    Table(usize),
    /// In the overflow map.
    Overflow,
    /// Absent; the table slot and displacement where it belongs.
    Vacant(usize, u32),
}

/// One shard. `repr(C)` with the table first: what a lookup reads (the table
/// header and whether there is an overflow map) sits next to the shard's lock.
#[repr(C)]
pub(super) struct Shard {
    pub(super) table: Table,
    /// Entries the table cannot record (see the module documentation).
    pub(super) overflow: BTreeMap<u64, u64>,
    /// Entries in the table and the overflow map.
    pub(super) len: usize,
    /// Grow before `len` would exceed this.
    pub(super) max_len: usize,
}

impl Shard {
    pub(super) fn with_capacity(cap: usize, lbits: u32, max_load: f64) -> Shard {
        Shard::from_table(Table::new(cap, lbits), BTreeMap::new(), max_load)
    }

    /// A shard of `table` and `overflow` (no fingerprint in both).
    pub(super) fn from_table(table: Table, overflow: BTreeMap<u64, u64>, max_load: f64) -> Shard {
        let len = table.positions().count() + overflow.len();
        Shard::with_len(table, overflow, len, max_load)
    }

    /// A shard of `table` and `overflow` holding `len` entries in all.
    pub(super) fn with_len(
        table: Table,
        overflow: BTreeMap<u64, u64>,
        len: usize,
        max_load: f64,
    ) -> Shard {
        Shard {
            max_len: max_len_for(table.cap(), max_load),
            table,
            overflow,
            len,
        }
    }

    /// Where `fp` is, or would go.
    #[inline]
    pub(super) fn find(&self, fp: u64) -> Spot {
        match self.table.probe(fp) {
            Probe::Found(p) => Spot::Table(p),
            Probe::Vacant(p, k) => {
                if !self.overflow.is_empty() && self.overflow.contains_key(&fp) {
                    Spot::Overflow
                } else {
                    Spot::Vacant(p, k)
                }
            }
        }
    }

    /// The location of `fp`, if present.
    #[inline]
    pub(super) fn get(&self, fp: u64) -> Option<u64> {
        match self.table.probe(fp) {
            Probe::Found(p) => Some(self.table.slot(p).loc),
            Probe::Vacant(..) if self.overflow.is_empty() => None,
            Probe::Vacant(..) => self.overflow.get(&fp).copied(),
        }
    }

    /// The location at a `Table` or `Overflow` spot of `fp`.
    pub(super) fn loc(&self, spot: Spot, fp: u64) -> Option<u64> {
        match spot {
            Spot::Table(p) => Some(self.table.slot(p).loc),
            Spot::Overflow => self.overflow.get(&fp).copied(),
            Spot::Vacant(..) => None,
        }
    }

    /// Replaces the location of `fp`, present at `spot`.
    pub(super) fn set(&mut self, spot: Spot, fp: u64, loc: u64) {
        match spot {
            Spot::Table(p) if loc <= self.table.lmask() => self.table.set_loc(p, loc),
            Spot::Table(p) => {
                self.table.remove_at(p);
                self.overflow.insert(fp, loc);
            }
            Spot::Overflow => {
                self.overflow.insert(fp, loc);
            }
            Spot::Vacant(..) => {}
        }
    }

    /// Removes `fp`, present at `spot`; returns its location.
    pub(super) fn remove(&mut self, spot: Spot, fp: u64) -> Option<u64> {
        let loc = match spot {
            Spot::Table(p) => Some(self.table.remove_at(p)),
            Spot::Overflow => self.overflow.remove(&fp),
            Spot::Vacant(..) => None,
        };
        if loc.is_some() {
            self.len -= 1;
        }
        loc
    }

    /// Adds absent `fp` at its `Vacant` spot (the caller has grown the shard
    /// if needed, so the table keeps an empty slot).
    pub(super) fn add(&mut self, spot: Spot, fp: u64, loc: u64) {
        let placed = match spot {
            Spot::Vacant(p, k) => self.table.try_insert(p, k, fp, loc),
            _ => false,
        };
        if !placed {
            self.overflow.insert(fp, loc);
        }
        self.len += 1;
    }

    /// Re-places every entry in a table of `cap` slots.
    pub(super) fn regrow(&mut self, cap: usize, max_load: f64) {
        let mut spill = Vec::new();
        let mut table = self.table.rebuild(cap, &mut spill);
        let mut overflow = BTreeMap::new();
        for (fp, loc) in std::mem::take(&mut self.overflow) {
            if !table.insert(fp, loc) {
                overflow.insert(fp, loc);
            }
        }
        overflow.extend(spill);
        *self = Shard::with_len(table, overflow, self.len, max_load);
    }

    /// Removes the entries whose location fails `keep`, calling `removed(fp,
    /// loc)` for each; returns how many.
    pub(super) fn retain(
        &mut self,
        keep: &mut impl FnMut(u64) -> bool,
        removed: &mut impl FnMut(u64, u64),
    ) -> usize {
        let mut n = 0;
        self.overflow.retain(|&fp, &mut loc| {
            let k = keep(loc);
            if !k {
                removed(fp, loc);
                n += 1;
            }
            k
        });
        n += self.table.retain(keep, removed);
        self.len -= n;
        n
    }

    /// Calls `f(loc)` for every entry (table in slot order, then overflow).
    pub(super) fn for_each(&self, mut f: impl FnMut(u64)) {
        for pos in 0..self.table.cap() {
            let s = self.table.slot(pos);
            if s.f != 0 {
                f(s.loc);
            }
        }
        self.overflow.values().for_each(|&l| f(l));
    }

    /// Calls `f(fp, loc)` for the entries with fingerprint ≥ `from`, in
    /// increasing fingerprint order, until `f` returns `false`.
    pub(super) fn scan(&self, from: u64, mut f: impl FnMut(u64, u64) -> bool) {
        let t = &self.table;
        let mut more = self.overflow.range(from..).peekable();
        for pos in t.positions_from(from) {
            let fp = t.fp_at(pos);
            if fp < from {
                continue;
            }
            while let Some((&o, &l)) = more.next_if(|(&o, _)| o < fp) {
                if !f(o, l) {
                    return;
                }
            }
            if !f(fp, t.slot(pos).loc) {
                return;
            }
        }
        for (&o, &l) in more {
            if !f(o, l) {
                return;
            }
        }
    }

    /// DRAM of the shard's table and overflow map.
    pub(super) fn heap_bytes(&self) -> usize {
        self.table.heap_bytes() + self.overflow.len() * OVERFLOW_ENTRY_BYTES
    }
}
