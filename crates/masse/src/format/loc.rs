//! Record locations: in DRAM only, never on disk except inside checkpoint
//! images.

/// A record's address, packed in 64 bits for the index:
/// `slot:29 | offset/8:16 | len8:18 | tombstone:1`.
///
/// `slot` numbers segments globally across capacity devices; `offset` is the
/// byte offset within the segment (records are 8-byte aligned); `len8` is the
/// record length in 8-byte units, rounded up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc(pub u64);

/// Largest slot number a [`Loc`] can address.
pub const MAX_SLOTS: u64 = 1 << 29;

/// Bits below a [`Loc`]'s slot field.
const SLOT_SHIFT: u32 = 35;

impl Loc {
    /// Pack a location.
    pub fn new(slot: u64, offset: u32, len: u32, tombstone: bool) -> Loc {
        debug_assert!(slot < MAX_SLOTS && offset % 8 == 0 && (offset >> 3) < (1 << 16));
        let len8 = (len as u64).div_ceil(8);
        debug_assert!(len8 < (1 << 18));
        Loc((slot << SLOT_SHIFT) | (((offset >> 3) as u64) << 19) | (len8 << 1) | tombstone as u64)
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
        (((self.0 >> 19) & 0xFFFF) as u32) << 3
    }
    /// Record length rounded up to 8 bytes.
    pub fn len8(self) -> u32 {
        (((self.0 >> 1) & 0x3FFFF) as u32) << 3
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
            let top = Loc::new(slots - 1, 8 * 65535, (1 << 21) - 8, true).0;
            assert!(bits == 64 || top >> bits == 0, "{slots} slots: {bits} bits");
            assert!(bits == 35 || top >> (bits - 1) != 0, "{slots} slots: tight");
        }
    }

    #[test]
    fn loc_roundtrip() {
        let l = Loc::new(MAX_SLOTS - 1, 8 * 65535, (1 << 21) - 8, true);
        assert_eq!(l.slot(), MAX_SLOTS - 1);
        assert_eq!(l.offset(), 8 * 65535);
        assert_eq!(l.len8(), (1 << 21) - 8);
        assert!(l.is_tombstone());
        let l = Loc::new(7, 4096, 123, false);
        assert_eq!(
            (l.slot(), l.offset(), l.len8(), l.is_tombstone()),
            (7, 4096, 128, false)
        );
    }
}
