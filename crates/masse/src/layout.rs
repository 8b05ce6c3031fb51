//! Address arithmetic: bands, slots and where they live on the capacity devices.

use crate::format::Geometry;

/// Derived geometry, cheap to query on the hot path.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub geo: Geometry,
    /// Segment (slot) size.
    pub seg: u64,
    /// Slots in each band.
    pub slots_per_band: u64,
    /// Bands in the pool.
    pub bands: u32,
    /// First global band number of each capacity device.
    dev_band_start: Vec<u32>,
}

impl Layout {
    pub fn new(geo: Geometry) -> Layout {
        let seg = geo.segment_size as u64;
        let slots_per_band = (geo.band_size - geo.band_header_size as u64) / seg;
        let mut dev_band_start = Vec::with_capacity(geo.bands_per_device.len());
        let mut total = 0u32;
        for &n in &geo.bands_per_device {
            dev_band_start.push(total);
            total += n;
        }
        Layout {
            geo,
            seg,
            slots_per_band,
            bands: total,
            dev_band_start,
        }
    }

    /// Total slots in the pool.
    pub fn total_slots(&self) -> u64 {
        self.bands as u64 * self.slots_per_band
    }

    pub fn band_of_slot(&self, slot: u64) -> u32 {
        (slot / self.slots_per_band) as u32
    }

    pub fn slot_in_band(&self, slot: u64) -> u64 {
        slot % self.slots_per_band
    }

    pub fn first_slot(&self, band: u32) -> u64 {
        band as u64 * self.slots_per_band
    }

    /// (capacity device index, byte offset of the band header).
    pub fn band_addr(&self, band: u32) -> (usize, u64) {
        let dev = match self.dev_band_start.binary_search(&band) {
            Ok(i) => {
                // Devices with zero bands share a start; take the last one starting here.
                let mut j = i;
                while j + 1 < self.dev_band_start.len() && self.dev_band_start[j + 1] == band {
                    j += 1;
                }
                j
            }
            Err(i) => i - 1,
        };
        let local = (band - self.dev_band_start[dev]) as u64;
        (dev, self.geo.data_start + local * self.geo.band_size)
    }

    /// (capacity device index, byte offset of the slot).
    pub fn slot_addr(&self, slot: u64) -> (usize, u64) {
        let (dev, base) = self.band_addr(self.band_of_slot(slot));
        (
            dev,
            base + self.geo.band_header_size as u64 + self.slot_in_band(slot) * self.seg,
        )
    }

    /// Bytes of band payload (slots only).
    pub fn band_payload(&self) -> u64 {
        self.slots_per_band * self.seg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Mode;

    #[test]
    fn addresses() {
        let geo = Geometry {
            mode: Mode::Tiered,
            segment_size: 65536,
            band_size: 1 << 20,
            band_header_size: 4096,
            iu: 4096,
            bands_per_device: vec![3, 2],
            pad_offset: 0,
            pad_size: 0,
            ckpt_offset: 0,
            ckpt_slot_size: 0,
            data_start: 1 << 20,
            has_fast: true,
        };
        let l = Layout::new(geo);
        assert_eq!(l.slots_per_band, 15);
        assert_eq!(l.bands, 5);
        assert_eq!(l.band_addr(0), (0, 1 << 20));
        assert_eq!(l.band_addr(2), (0, 3 << 20));
        assert_eq!(l.band_addr(3), (1, 1 << 20));
        assert_eq!(l.slot_addr(16), (0, (2 << 20) + 4096 + 65536));
        assert_eq!(l.band_of_slot(16), 1);
    }
}
