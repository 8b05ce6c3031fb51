//! Record locations: in DRAM only, never on disk except inside checkpoint
//! images.

/// A record's address, packed in 61 bits for the index:
/// `slot:29 | offset:19 | lenc:12 | tombstone:1` (bits 61–63 are zero).
///
/// `slot` numbers segments globally across capacity devices; `offset` is the
/// record's byte offset within its segment; `lenc` codes its length: exact
/// below 2048 bytes, above that rounded up to a 4-bit exponent and a
/// mantissa of 7 stored bits, so [`Loc::len8`] never undercounts and overcounts by less than
/// 1/128. Byte offsets and the length code leave room for records that are
/// not 8-byte aligned (format version 3), and make a location 3 bits
/// narrower than the old `offset/8:16 | len8:18` packing, which the index
/// stores in every slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc(pub u64);

/// Largest slot number a [`Loc`] can address.
pub const MAX_SLOTS: u64 = 1 << 29;

/// Largest byte offset within a segment a [`Loc`] can hold, plus one.
pub const MAX_LOC_OFFSET: u32 = 1 << 19;

/// Bits below a [`Loc`]'s slot field.
const SLOT_SHIFT: u32 = 32;
/// Bits below the offset field.
const OFF_SHIFT: u32 = 13;
/// Lengths below this are stored exactly.
const EXACT_LEN: u32 = 2048;
/// Length codes at or above this hold an exponent and a mantissa.
const CODED: u64 = 0x800;

/// The 12-bit code of a length below 2^21 (a longer one, which only a
/// damaged summary can claim, codes as 2^21: the record's own header then
/// disagrees and a read reports the damage).
fn len_code(len: u32) -> u64 {
    let len = len.min((1 << 21) - 1);
    if len < EXACT_LEN {
        return len as u64;
    }
    // len in [2^(e+7), 2^(e+8)): the mantissa len / 2^e, rounded up, is in
    // [128, 256]; 256 moves to the next exponent.
    let mut e = 31 - len.leading_zeros() - 7;
    let mut m = len.div_ceil(1 << e);
    if m == 256 {
        e += 1;
        m = 128;
    }
    CODED | ((e - 4) as u64) << 7 | (m - 128) as u64
}

/// The length a code stands for: exact, or the smallest coded value ≥ it.
fn len_of_code(c: u64) -> u32 {
    if c & CODED == 0 {
        return c as u32;
    }
    // Exponents above 14 (e − 4 > 10) code no length below 2^21; such a code
    // (only a damaged checkpoint holds one) reads as 2^21.
    let e = ((c >> 7) & 0xF) as u32 + 4;
    (((c & 0x7F) as u32 + 128) << e).min(1 << 21)
}

impl Loc {
    /// Pack a location. Fields are masked to their widths, so even values no
    /// valid pool produces never spill into a neighbouring field.
    pub fn new(slot: u64, offset: u32, len: u32, tombstone: bool) -> Loc {
        debug_assert!(slot < MAX_SLOTS && offset < MAX_LOC_OFFSET);
        Loc((slot & (MAX_SLOTS - 1)) << SLOT_SHIFT
            | ((offset & (MAX_LOC_OFFSET - 1)) as u64) << OFF_SHIFT
            | len_code(len) << 1
            | tombstone as u64)
    }
    /// The 12-bit length code of a record of `len` bytes (below 4096).
    pub fn len_code_of(len: usize) -> u32 {
        len_code(len.min(u32::MAX as usize) as u32) as u32
    }
    /// The length bound of a record of `len` bytes, rounded up to 8: what
    /// [`Loc::len8`] gives for it.
    pub fn len8_of(len: usize) -> u32 {
        len_of_code(len_code(len.min(u32::MAX as usize) as u32)).next_multiple_of(8)
    }
    /// Bits needed by every [`Loc`] of a pool of `total_slots` segments (the
    /// slot is the top field): the index stores no more than this per entry.
    pub fn bits_for(total_slots: u64) -> u32 {
        let slot_bits = 64 - total_slots.saturating_sub(1).leading_zeros();
        (SLOT_SHIFT + slot_bits).min(64)
    }
    /// Global slot number.
    pub fn slot(self) -> u64 {
        self.0 >> SLOT_SHIFT
    }
    /// Byte offset within the segment.
    pub fn offset(self) -> u32 {
        ((self.0 >> OFF_SHIFT) as u32) & (MAX_LOC_OFFSET - 1)
    }
    /// The record's length rounded up to 8 bytes (its space in a version-2
    /// segment), or, from 2048 bytes on, an upper bound less than 1/128
    /// above it: reads fetch this many bytes and the record's own header
    /// says where it ends; live-byte accounting adds and subtracts this.
    pub fn len8(self) -> u32 {
        len_of_code((self.0 >> 1) & 0xFFF).next_multiple_of(8)
    }
    /// The record's exact length, when the location holds it (below 2048
    /// bytes).
    pub fn exact_len(self) -> Option<u32> {
        let c = (self.0 >> 1) & 0xFFF;
        (c & CODED == 0).then_some(c as u32)
    }
    /// A length the record is known to reach: exact below 2048 bytes, above
    /// that the smallest length with this code (the record may be up to
    /// 1/128 longer).
    pub fn len_min(self) -> u32 {
        let c = (self.0 >> 1) & 0xFFF;
        if c & CODED == 0 {
            return c as u32;
        }
        let e = ((c >> 7) & 0xF) as u32 + 4;
        // The code's mantissa m is ⌈len / 2^e⌉ (or 128 at e + 1 for a length
        // just below 256 · 2^e), so len > (m − 1) · 2^e.
        ((((c & 0x7F) as u32 + 127) << e) + 1).min(1 << 21)
    }
    /// True for a tombstone.
    pub fn is_tombstone(self) -> bool {
        self.0 & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_for_covers_every_slot() {
        for slots in [1u64, 2, 3, 1000, 1 << 17, (1 << 17) + 1, MAX_SLOTS] {
            let bits = Loc::bits_for(slots);
            let top = Loc::new(slots - 1, MAX_LOC_OFFSET - 1, (1 << 21) - 1, true).0;
            assert!(bits == 64 || top >> bits == 0, "{slots} slots: {bits} bits");
            assert!(bits == 32 || top >> (bits - 1) != 0, "{slots} slots: tight");
        }
        assert_eq!(Loc::bits_for(1 << 17), 49);
    }

    #[test]
    fn loc_roundtrip() {
        let l = Loc::new(MAX_SLOTS - 1, MAX_LOC_OFFSET - 1, (1 << 21) - 8, true);
        assert_eq!(l.slot(), MAX_SLOTS - 1);
        assert_eq!(l.offset(), MAX_LOC_OFFSET - 1);
        assert_eq!(l.len8(), 1 << 21);
        assert!(l.is_tombstone());
        assert_eq!(l.0 >> 61, 0);
        // The example in docs/format.md §10.
        assert_eq!(Loc::new(1, 8, 9, true).0, 0x0000_0001_0001_0013);
        let l = Loc::new(7, 4099, 123, false);
        assert_eq!(
            (l.slot(), l.offset(), l.len8(), l.is_tombstone()),
            (7, 4099, 128, false)
        );
    }

    /// Every length a record can have: the bound never undercounts, is exact
    /// (after rounding to 8) below 2048 and within 1/128 above, and agrees
    /// with `len8_of`.
    #[test]
    fn every_length_codes_within_bounds() {
        for len in 1..(1u32 << 21) {
            let l = Loc::new(3, 64, len, false);
            let hint = l.len8();
            assert!(hint >= len, "{len}: {hint}");
            if len < EXACT_LEN {
                assert_eq!(hint, len.next_multiple_of(8), "{len}");
            } else {
                assert!(hint - len < len / 128, "{len}: {hint}");
            }
            assert_eq!(hint, Loc::len8_of(len as usize));
            assert!(l.len_min() <= len && (len < EXACT_LEN) <= (l.len_min() == len));
            assert_eq!(l.exact_len(), (len < EXACT_LEN).then_some(len));
            assert_eq!((l.slot(), l.offset()), (3, 64));
        }
    }
}
