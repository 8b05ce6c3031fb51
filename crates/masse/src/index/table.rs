//! One shard's open-addressing table: ordered linear probing with
//! backward-shift deletion (see the module documentation of `index`).

/// Size of one slot in bytes (fingerprint + location).
pub const SLOT_BYTES: usize = 16;

/// One slot: `[fp, loc]`; `fp == 0` is empty. An array (not a struct) so that
/// `vec![EMPTY; n]` is a zeroed allocation (untouched pages cost no DRAM).
pub(super) type Slot = [u64; 2];

const EMPTY: Slot = [0, 0];

/// Home slot of `fp` in a table of `cap` slots (fastrange).
#[inline]
pub(super) fn home(fp: u64, cap: usize) -> usize {
    ((fp as u128 * cap as u128) >> 64) as usize
}

/// Distance of slot `pos` from the home of `fp`, cyclically.
#[inline]
pub(super) fn displacement(fp: u64, pos: usize, cap: usize) -> usize {
    let h = home(fp, cap);
    if pos >= h {
        pos - h
    } else {
        pos + cap - h
    }
}

/// Result of probing a table for a fingerprint.
pub(super) enum Probe {
    /// The fingerprint is at this slot.
    Found(usize),
    /// Absent; this is where it would be inserted.
    Vacant(usize),
}

/// Finds `fp` in `t`, or the slot where it belongs. `t` must have an empty slot.
#[inline]
pub(super) fn probe(t: &[Slot], fp: u64) -> Probe {
    let cap = t.len();
    if cap == 0 {
        return Probe::Vacant(0);
    }
    let mut pos = home(fp, cap);
    let mut k = 0usize;
    while k < cap {
        let efp = t[pos][0];
        if efp == fp {
            return Probe::Found(pos);
        }
        if efp == 0 {
            return Probe::Vacant(pos);
        }
        let d = displacement(efp, pos, cap);
        if d < k || (d == k && efp > fp) {
            return Probe::Vacant(pos);
        }
        k += 1;
        pos += 1;
        if pos == cap {
            pos = 0;
        }
    }
    // Unreachable while the table has an empty slot (an invariant).
    Probe::Vacant(pos)
}

/// Puts `slot` at `pos` (a `Probe::Vacant` answer), shifting the rest of the
/// cluster up by one. `t` must have an empty slot.
pub(super) fn insert_at(t: &mut [Slot], pos: usize, slot: Slot) {
    let cap = t.len();
    // Next empty slot at or after pos.
    let mut r = pos;
    let mut n = 0;
    while t[r][0] != 0 {
        r += 1;
        if r == cap {
            r = 0;
        }
        n += 1;
        if n >= cap {
            return; // full table: cannot happen (invariant), never loop forever
        }
    }
    if r >= pos {
        t.copy_within(pos..r, pos + 1);
    } else {
        t.copy_within(0..r, 1);
        t[0] = t[cap - 1];
        t.copy_within(pos..cap - 1, pos + 1);
    }
    t[pos] = slot;
}

/// Removes the entry at `pos` by backward shift.
fn remove_at(t: &mut [Slot], pos: usize) {
    let cap = t.len();
    let mut j = pos;
    loop {
        let mut nx = j + 1;
        if nx == cap {
            nx = 0;
        }
        let e = t[nx];
        if e[0] == 0 || nx == pos || displacement(e[0], nx, cap) == 0 {
            break;
        }
        t[j] = e;
        j = nx;
    }
    t[j] = EMPTY;
}

/// A table of `cap` empty slots (a zeroed allocation).
pub(super) fn empty_table(cap: usize) -> Box<[Slot]> {
    vec![EMPTY; cap].into_boxed_slice()
}

/// The entries of `old` in a new table of `cap` slots (`cap` > entries).
///
/// One sequential pass: a table's entries, read in slot order, are sorted by
/// fingerprint — except those of a cluster that wraps past the end, which sit
/// at the start of the table and are the largest. Placing entries in
/// fingerprint order at `max(home, previous + 1)` builds the new table with no
/// probing or shifting; the few that would run past its end are inserted
/// normally afterwards (an ordered table does not depend on insertion order).
pub(super) fn rebuild(old: &[Slot], cap: usize) -> Box<[Slot]> {
    let old_cap = old.len();
    let mut t = empty_table(cap);
    let wrapped = |pos: usize, fp: u64| pos < home(fp, old_cap);
    // Entries of the wrapped cluster at the start of `old`.
    let n_wrapped = old
        .iter()
        .enumerate()
        .take_while(|(pos, e)| e[0] != 0 && wrapped(*pos, e[0]))
        .count();
    let in_order = old[n_wrapped..]
        .iter()
        .chain(old[..n_wrapped].iter())
        .filter(|e| e[0] != 0);
    let mut w = 0usize;
    let mut overflow: Vec<Slot> = Vec::new();
    for e in in_order {
        let p = home(e[0], cap).max(w);
        if p < cap {
            t[p] = *e;
            w = p + 1;
        } else {
            overflow.push(*e);
        }
    }
    for e in overflow {
        if let Probe::Vacant(p) = probe(&t, e[0]) {
            insert_at(&mut t, p, e);
        }
    }
    t
}

/// Largest entry count allowed in a table of `cap` slots.
pub(super) fn max_len_for(cap: usize, max_load: f64) -> usize {
    // One slot always stays empty (probes stop there); a 1-slot table (only a
    // loaded image can have one) holds nothing and grows on the first insert.
    if cap < 2 {
        return 0;
    }
    ((cap as f64 * max_load) as usize).clamp(1, cap - 1)
}

/// One shard: a linear-probing table.
pub(super) struct Shard {
    pub(super) table: Box<[Slot]>,
    pub(super) len: usize,
    /// Grow before `len` would exceed this.
    pub(super) max_len: usize,
}

impl Shard {
    pub(super) fn with_capacity(cap: usize, max_load: f64) -> Shard {
        Shard {
            table: empty_table(cap),
            len: 0,
            max_len: max_len_for(cap, max_load),
        }
    }

    #[inline]
    pub(super) fn get(&self, fp: u64) -> Option<u64> {
        match probe(&self.table, fp) {
            Probe::Found(p) => Some(self.table[p][1]),
            Probe::Vacant(_) => None,
        }
    }

    pub(super) fn remove_slot(&mut self, pos: usize) -> u64 {
        let loc = self.table[pos][1];
        remove_at(&mut self.table, pos);
        self.len -= 1;
        loc
    }
}

/// Removes the entries of `t` whose location fails `f`, in one pass, keeping
/// the probe order; returns how many were removed.
pub(super) fn retain_table(t: &mut [Slot], f: &mut impl FnMut(u64, u64) -> bool) -> usize {
    let cap = t.len();
    // Start right after an empty slot, so no cluster straddles the start.
    let Some(empty) = t.iter().position(|e| e[0] == 0) else {
        return 0;
    };
    let start = empty + 1;
    let mut removed = 0;
    // `w`: first free position (unwrapped coordinates, start..start+cap).
    let mut w = start;
    for lin in start..start + cap {
        let pos = lin % cap;
        let e = t[pos];
        if e[0] == 0 {
            continue;
        }
        t[pos] = EMPTY;
        if !f(e[0], e[1]) {
            removed += 1;
            continue;
        }
        let home_lin = lin - displacement(e[0], pos, cap);
        let dst = home_lin.max(w);
        t[dst % cap] = e;
        w = dst + 1;
    }
    removed
}
