//! Every fault class of the emulator does what it says, reproducibly from its
//! seed, and is counted: read errors, write errors (nothing lands), torn
//! writes (a prefix lands), bit flips in stored data, power cuts (unflushed
//! writes lost, or partly kept), a drive that dies after N writes, and the
//! same faults configured from a device path string.

use masse::device::sim::{FaultConfig, ProfileKind, SimConfig, SimDevice};
use masse::device::{AlignedBuf, Device};

fn dev(f: FaultConfig) -> SimDevice {
    SimDevice::new(
        SimConfig::new(ProfileKind::Tlc, 16 << 20)
            .virtual_time()
            .with_faults(f),
    )
    .expect("sim")
}

fn filled(len: usize, v: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    b.fill(v);
    b
}

fn read(d: &SimDevice, off: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    d.read_at(&mut b, off).expect("read");
    b
}

#[test]
fn read_errors() {
    let d = dev(FaultConfig {
        seed: 1,
        read_error: 0.5,
        ..Default::default()
    });
    d.write_at(&filled(4096, 1), 0).expect("write");
    let mut b = AlignedBuf::new(4096);
    let fails = (0..1000).filter(|_| d.read_at(&mut b, 0).is_err()).count() as u64;
    assert!(
        (400..600).contains(&fails),
        "{fails} of 1000 reads failed at p=0.5"
    );
    assert_eq!(d.stats().faults.read_errors, fails);
}

#[test]
fn write_errors_write_nothing() {
    let d = dev(FaultConfig {
        seed: 2,
        write_error: 1.0,
        ..Default::default()
    });
    assert!(d.write_at(&filled(8192, 9), 0).is_err());
    d.set_faults(FaultConfig::default());
    assert!(
        read(&d, 0, 8192).iter().all(|&x| x == 0),
        "a failed write landed"
    );
    assert_eq!(d.stats().faults.write_errors, 1);
}

#[test]
fn torn_writes_land_a_prefix() {
    let d = dev(FaultConfig {
        seed: 3,
        torn_write: 1.0,
        ..Default::default()
    });
    let mut landed_total = 0;
    for i in 0..20u64 {
        let off = i * (64 << 10);
        assert!(
            d.write_at(&filled(64 << 10, 0xAB), off).is_err(),
            "torn write reported success"
        );
        let got = read(&d, off, 64 << 10);
        let landed = got
            .chunks(4096)
            .take_while(|c| c.iter().all(|&x| x == 0xAB))
            .count();
        assert!(
            got.chunks(4096)
                .skip(landed)
                .all(|c| c.iter().all(|&x| x == 0)),
            "not a prefix"
        );
        assert!(landed < 16, "a torn write landed entirely");
        landed_total += landed as u64;
    }
    let f = d.stats().faults;
    assert_eq!(f.torn_writes, 20);
    assert_eq!(f.torn_blocks_landed, landed_total);
    assert!(landed_total > 0, "no torn write landed anything");
}

#[test]
fn bit_flips_persist_in_stored_data() {
    // 1e-5 per bit: a 4 KiB block is hit with probability 1-(1-1e-5)^32768 = 28%.
    let d = dev(FaultConfig {
        seed: 4,
        bitflip: 1e-5,
        ..Default::default()
    });
    let blocks = 1000u64;
    d.write_at(&filled((blocks * 4096) as usize, 0x55), 0)
        .expect("write");
    let a = read(&d, 0, (blocks * 4096) as usize);
    let b = read(&d, 0, (blocks * 4096) as usize);
    assert!(
        a[..] == b[..],
        "flips must be in the stored data, not per read"
    );
    let bad = a
        .chunks(4096)
        .filter(|c| c.iter().any(|&x| x != 0x55))
        .count() as u64;
    let bits: u32 = a.iter().map(|&x| (x ^ 0x55).count_ones()).sum();
    assert!(
        (200..360).contains(&bad),
        "{bad} of {blocks} blocks flipped"
    );
    assert_eq!(d.stats().faults.bit_flips, bits as u64);
    // Targeted flip.
    assert!(d.flip_bit(5 * 4096 + 17, 3));
    assert_eq!(read(&d, 5 * 4096, 4096)[17] ^ a[5 * 4096 + 17], 1 << 3);
}

#[test]
fn power_cut_loses_unflushed_writes() {
    let d = dev(FaultConfig::default());
    d.write_at(&filled(4096, 1), 0).expect("write");
    d.sync().expect("sync");
    d.write_at(&filled(4096, 2), 0).expect("write");
    d.write_at(&filled(4096, 3), 4096).expect("write");
    d.power_cut();
    assert!(read(&d, 0, 4096).iter().all(|&x| x == 1));
    assert!(read(&d, 4096, 4096).iter().all(|&x| x == 0));
    let f = d.stats().faults;
    assert_eq!((f.power_cuts, f.blocks_lost), (1, 2));
    d.check_ftl().expect("ftl");
}

#[test]
fn torn_power_cut_keeps_some_blocks() {
    let d = dev(FaultConfig {
        seed: 5,
        ..Default::default()
    });
    d.write_at(&filled(1000 * 4096, 7), 0).expect("write");
    d.power_cut_torn(0.5);
    let got = read(&d, 0, 1000 * 4096);
    let kept = got
        .chunks(4096)
        .filter(|c| c.iter().all(|&x| x == 7))
        .count() as u64;
    let f = d.stats().faults;
    assert_eq!(f.blocks_survived, kept);
    assert_eq!(f.blocks_lost, 1000 - kept);
    assert!(
        (400..600).contains(&kept),
        "{kept} of 1000 blocks survived at p=0.5"
    );
}

#[test]
fn drive_dies_after_n_writes() {
    let d = dev(FaultConfig::default());
    d.fail_writes_after(3);
    let b = filled(4096, 1);
    for i in 0..3 {
        d.write_at(&b, i * 4096).expect("allowed write");
    }
    assert!(d.write_at(&b, 0).is_err());
    d.fail_writes_after(u64::MAX);
    d.write_at(&b, 0).expect("write after the limit is lifted");
}

#[test]
fn faults_from_the_device_path() {
    let d = SimDevice::open("sim:qlc:8GiB:time=virtual:seed=7:bitflip=1e-6:read_err=0.25")
        .expect("open");
    let c = d.config();
    assert_eq!(c.faults.seed, 7);
    assert_eq!(c.faults.bitflip, 1e-6);
    assert_eq!(c.faults.read_error, 0.25);
    assert_eq!(c.capacity, 8 << 30);
    assert_eq!(
        SimConfig::parse(&c.spec()).expect("round trip").faults,
        c.faults
    );
    for bad in [
        "sim:qlc",
        "sim:foo:1GiB",
        "sim:qlc:1GiB:bitflip=2",
        "sim:qlc:1GiB:nope=1",
        "sim:qlc:12Q",
    ] {
        assert!(SimConfig::parse(bad).is_err(), "{bad} accepted");
    }
}
