//! Open refuses foreign, mismatched, missing and newer-format devices with a
//! clear error, and create never formats over an existing pool unless forced.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device, MemDevice};
use masse::{Db, DeviceSpec, Error, PoolConfig};
use std::sync::Arc;

fn spec(d: &MemDevice) -> DeviceSpec {
    DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>)
}

#[test]
fn refuses_what_is_not_its_own() {
    let a = MemPool::tiered(48 << 20, 32 << 20);
    let b = MemPool::tiered(48 << 20, 32 << 20);
    Db::create(&a.config(), opts())
        .expect("create a")
        .close()
        .expect("close");
    Db::create(&b.config(), opts())
        .expect("create b")
        .close()
        .expect("close");
    // Blank device.
    let blank = MemDevice::new(32 << 20);
    let cfg = PoolConfig {
        fast: Some(spec(a.fast.as_ref().expect("f"))),
        capacity: vec![spec(&blank)],
        ..Default::default()
    };
    assert!(matches!(
        Db::open(&cfg, opts()),
        Err(Error::NotMasse { .. })
    ));
    // Devices of two different pools.
    let cfg = PoolConfig {
        fast: Some(spec(a.fast.as_ref().expect("f"))),
        capacity: vec![spec(&b.caps[0])],
        ..Default::default()
    };
    assert!(matches!(Db::open(&cfg, opts()), Err(Error::Mismatch(_))));
    // Missing fast device.
    let cfg = PoolConfig {
        fast: None,
        capacity: vec![spec(&a.caps[0])],
        ..Default::default()
    };
    assert!(matches!(
        Db::open(&cfg, opts()),
        Err(Error::MissingDevice(_))
    ));
    // Roles swapped.
    let cfg = PoolConfig {
        fast: Some(spec(&a.caps[0])),
        capacity: vec![spec(a.fast.as_ref().expect("f"))],
        ..Default::default()
    };
    assert!(matches!(Db::open(&cfg, opts()), Err(Error::Mismatch(_))));
    // Create over an existing pool is refused; force overwrites.
    assert!(matches!(
        Db::create(&a.config(), opts()),
        Err(Error::AlreadyFormatted { .. })
    ));
    Db::create_force(&a.config(), opts())
        .expect("forced create")
        .close()
        .expect("close");
    // A newer format version (properly checksummed) is refused, not misread.
    let dev = &b.caps[0];
    let mut blk = AlignedBuf::new(8192);
    dev.read_at(&mut blk, 0).expect("read");
    let pristine = blk.to_vec();
    for copy in [0usize, 4096] {
        blk[copy + 8..copy + 12].copy_from_slice(&99u32.to_le_bytes());
        let crc = crc32c::crc32c(&blk[copy + 16..copy + 4096]);
        blk[copy + 12..copy + 16].copy_from_slice(&crc.to_le_bytes());
    }
    dev.write_at(&blk, 0).expect("write");
    match Db::open(&b.config(), opts()) {
        Err(Error::FormatTooNew { found: 99, .. }) => {}
        other => panic!("expected FormatTooNew, got {:?}", other.err()),
    }
    // ...and create does not format over it without force.
    let fresh_fast = MemDevice::new(48 << 20);
    let cfg = PoolConfig {
        fast: Some(spec(&fresh_fast)),
        capacity: vec![spec(&b.caps[0])],
        ..Default::default()
    };
    assert!(matches!(
        Db::create(&cfg, opts()),
        Err(Error::FormatTooNew { found: 99, .. })
    ));
    // A flipped bit in copy 0's version field is damage: copy 1 is used.
    blk.copy_from_slice(&pristine);
    blk[8] ^= 0x40;
    dev.write_at(&blk, 0).expect("write");
    Db::open(&b.config(), opts())
        .expect("falls back to the second copy")
        .close()
        .expect("close");
    // One damaged superblock copy is tolerated.
    let dev = &a.caps[0];
    let mut blk = AlignedBuf::new(4096);
    dev.read_at(&mut blk, 0).expect("read");
    blk[100] ^= 1;
    dev.write_at(&blk, 0).expect("write");
    Db::open(&a.config(), opts())
        .expect("second superblock copy")
        .close()
        .expect("close");
}

/// Opening a pool that was never created fails with a "create it first"
/// error and leaves no file behind, even with sizes for creating files in the
/// config (it used to make 1.25 GiB of files, fail on them, and keep them).
#[test]
fn open_of_a_missing_pool_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fast, cap) = (dir.path().join("fast"), dir.path().join("cap"));
    let cfg = PoolConfig::tiered(
        DeviceSpec::file(&fast, 256 << 20),
        DeviceSpec::file(&cap, 1 << 30),
    );
    match Db::open(&cfg, opts()) {
        Err(Error::MissingDevice(m)) => assert!(m.contains("create it first"), "{m}"),
        Err(e) => panic!("want MissingDevice, got {e}"),
        Ok(_) => panic!("opened a pool that was never created"),
    }
    assert!(!fast.exists() && !cap.exists(), "open left files behind");
}
