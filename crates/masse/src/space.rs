//! How much room the pool has, for `statfs`-style reports and for write
//! admission in faces that buffer data (the file layer).

use crate::db::Db;
use crate::engine::band::BandState;
use crate::engine::gc::min_gain;
use crate::engine::request::WriteClass;
use crate::stats::Space;

impl Db {
    /// Space figures for `statfs`-style reports and for write admission in faces
    /// that buffer data (the file layer), without the cost of [`crate::Db::stats`]
    /// (one pass over the per-band counters).
    pub fn space(&self) -> Space {
        let e = &self.engine;
        let payload = e.layout.band_payload();
        let min_gain = min_gain(e);
        let bt = e.bands.lock();
        let (total, free) = (bt.bands.len() as u32, bt.free_count());
        let mut room = 0u64;
        for (i, b) in bt.bands.iter().enumerate() {
            room += match b.state {
                BandState::Free => payload,
                // What GC could win back here, if it would bother.
                BandState::Open | BandState::Sealed | BandState::Victim => {
                    let gain = payload.saturating_sub(e.status.band_cost(i));
                    if gain >= min_gain {
                        gain
                    } else {
                        0
                    }
                }
                BandState::Pinned => 0,
            };
        }
        drop(bt);
        let reserve = WriteClass::User.reserve_bands();
        // Kept back besides the reserve: a band's worth for the open band's
        // tail and for GC to move into, and with separate GC writes one more,
        // the GC stream's open band, which GC opens (cold user writes fill
        // it too, but never open one: counting it out is conservative).
        let kept = 1 + e.streams_on() as u64;
        let live = e.status.live_total();
        Space {
            bands_total: total,
            bands_free: free,
            user_reserve_bands: reserve,
            band_payload: payload,
            live_bytes: live,
            user_available_bytes: room.saturating_sub((reserve as u64 + kept) * payload),
        }
    }

    /// Band payload a record of `key_len` + `value_len` bytes takes once stored
    /// among records like it (header, summary entry and its share of the segment
    /// room records of that size leave unused): the unit of
    /// [`Space::user_available_bytes`].
    pub fn record_room(&self, key_len: usize, value_len: usize) -> u64 {
        let len = self.engine.layout.codec.base_len(key_len, value_len);
        self.engine
            .layout
            .room_cost(crate::format::Loc::len8_of(len))
    }
}
