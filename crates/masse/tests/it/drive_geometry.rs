//! A drive that states its indirection and reclaim units gets segments that are
//! a multiple of the former and bands that are a whole number of the latter,
//! starting on a reclaim-unit boundary, so a freed band is whole erase blocks.

use masse::device::{Device, Media, MemDevice};
use masse::{Db, DeviceSpec, Mode, PoolConfig};
use std::sync::Arc;

fn create(cap: MemDevice, fast: MemDevice) -> Db {
    let cfg = PoolConfig {
        fast: Some(DeviceSpec::Device(Arc::new(fast) as Arc<dyn Device>)),
        capacity: vec![DeviceSpec::Device(Arc::new(cap) as Arc<dyn Device>)],
        mode: Some(Mode::Tiered),
        ..Default::default()
    };
    Db::create(&cfg, Default::default()).expect("create")
}

#[test]
fn bands_are_whole_reclaim_units() {
    // 48 MiB reclaim unit (not a power of two, as on many QLC drives), 64 KiB IU.
    let ru = 48u64 << 20;
    let cap = MemDevice::new(8 << 30).with_drive(Media::Qlc, 65536, ru);
    let db = create(cap, MemDevice::new(256 << 20));
    let g = db.geometry();
    assert_eq!(
        g.segment_size % 65536,
        0,
        "segment {} not an IU multiple",
        g.segment_size
    );
    assert_eq!(
        g.band_size % ru,
        0,
        "band {} not a multiple of the reclaim unit",
        g.band_size
    );
    assert_eq!(
        g.data_start % ru,
        0,
        "bands start at {} off a reclaim-unit boundary",
        g.data_start
    );
    db.put(b"k", b"v").expect("put");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    db.close().expect("close");
}

#[test]
fn unknown_reclaim_unit_keeps_the_default() {
    let cap = MemDevice::new(8 << 30);
    let db = create(cap, MemDevice::new(256 << 20));
    assert_eq!(db.geometry().band_size, 64 << 20);
    db.close().expect("close");
}
