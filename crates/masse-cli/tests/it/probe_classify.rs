//! Classification of recorded sysfs trees and of measured profiles: a known
//! model wins; tmpfs is SCM; a measurement overrides `rotational=1` (virtual
//! disks) and tells SCM, TLC-like, QLC-like and disk apart; without either,
//! rotational means HDD and anything else is unknown.

use masse_cli::media::{classify, sysfs_facts, Class, Measured, SysfsFacts};
use std::path::Path;

/// Record a sysfs tree: /sys/dev/block/MAJ:MIN -> devices/.../DISK[/PART].
fn record(
    root: &Path,
    disk: &str,
    part: Option<&str>,
    maj_min: &str,
    attrs: &[(&str, &str)],
    model: Option<&str>,
) {
    let disk_dir = root.join("devices/pci0000:00").join(disk);
    std::fs::create_dir_all(disk_dir.join("queue")).expect("mkdir");
    for (k, v) in attrs {
        std::fs::write(disk_dir.join("queue").join(k), format!("{v}\n")).expect("write");
    }
    if let Some(m) = model {
        std::fs::create_dir_all(disk_dir.join("device")).expect("mkdir");
        std::fs::write(disk_dir.join("device/model"), format!("{m}   \n")).expect("write");
    }
    let target = match part {
        Some(p) => {
            let d = disk_dir.join(p);
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("partition"), "1\n").expect("write");
            d
        }
        None => disk_dir,
    };
    std::fs::create_dir_all(root.join("dev/block")).expect("mkdir");
    std::os::unix::fs::symlink(&target, root.join("dev/block").join(maj_min)).expect("symlink");
}

fn measured(read_us: f64, rand: f64, seq: f64) -> Measured {
    Measured {
        read_p50_us: read_us,
        read_p99_us: read_us * 2.0,
        rand4k_write_mbps: rand,
        seq256k_write_mbps: seq,
        ..Default::default()
    }
}

#[test]
fn recorded_trees() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    let flash = [
        ("rotational", "0"),
        ("logical_block_size", "512"),
        ("physical_block_size", "4096"),
        ("optimal_io_size", "0"),
        ("discard_granularity", "4096"),
        ("zoned", "none"),
    ];
    record(
        root,
        "nvme0n1",
        Some("nvme0n1p1"),
        "259:1",
        &flash,
        Some("INTEL SSDPE21K375GA (Optane P4800X)"),
    );
    record(
        root,
        "nvme1n1",
        None,
        "259:2",
        &flash,
        Some("INTEL SSDPE2NV076T8 D5-P4320"),
    );
    record(
        root,
        "nvme2n1",
        None,
        "259:3",
        &flash,
        Some("SAMSUNG MZQLB3T8HALS PM983"),
    );
    record(
        root,
        "vda",
        None,
        "254:0",
        &[("rotational", "1"), ("logical_block_size", "512")],
        None,
    );
    record(
        root,
        "sdb",
        None,
        "8:16",
        &[("rotational", "0")],
        Some("Some Unknown SSD"),
    );

    let f = sysfs_facts(root, 259, 1);
    assert_eq!(f.disk.as_deref(), Some("nvme0n1"));
    assert!(f.partition);
    assert_eq!(f.physical_block_size, Some(4096));
    assert_eq!(f.zoned.as_deref(), Some("none"));
    let v = classify(&f, None);
    assert_eq!(v.class, Class::Scm);
    assert_eq!(v.source, "model table");
    // The table wins even over a measurement that says otherwise.
    assert_eq!(
        classify(&f, Some(&measured(80.0, 100.0, 2000.0))).class,
        Class::Scm
    );

    let v = classify(&sysfs_facts(root, 259, 2), None);
    assert_eq!((v.class, v.iu), (Class::Qlc, 64 << 10));
    assert_eq!(classify(&sysfs_facts(root, 259, 3), None).class, Class::Tlc);

    // A virtio disk that claims to rotate: HDD from sysfs alone ...
    let vda = sysfs_facts(root, 254, 0);
    assert_eq!(vda.rotational, Some(true));
    assert_eq!(classify(&vda, None).class, Class::Hdd);
    // ... but the measurement wins, and says so.
    let v = classify(&vda, Some(&measured(50.0, 120.0, 2600.0)));
    assert_eq!(v.class, Class::Qlc);
    assert_eq!(v.source, "measurement");
    assert!(
        v.reasons.iter().any(|r| r.contains("rotational=1")),
        "{:?}",
        v.reasons
    );

    let unknown = sysfs_facts(root, 8, 16);
    assert_eq!(classify(&unknown, None).class, Class::Unknown);
    // Missing device: no facts, unknown.
    let none = sysfs_facts(root, 1, 99);
    assert!(none.disk.is_none() && none.note.is_some());
    assert_eq!(classify(&none, None).class, Class::Unknown);
}

#[test]
fn measured_profiles() {
    let f = SysfsFacts::default();
    // Optane-like: 10 µs reads, symmetric writes.
    assert_eq!(
        classify(&f, Some(&measured(11.0, 2000.0, 2200.0))).class,
        Class::Scm
    );
    // TLC-like: 80 µs reads, random writes a good fraction of sequential.
    assert_eq!(
        classify(&f, Some(&measured(80.0, 400.0, 1200.0))).class,
        Class::Tlc
    );
    // QLC-like: small random writes far below sequential.
    assert_eq!(
        classify(&f, Some(&measured(140.0, 45.0, 1600.0))).class,
        Class::Qlc
    );
    // A disk: milliseconds per random read.
    assert_eq!(
        classify(&f, Some(&measured(6000.0, 1.0, 150.0))).class,
        Class::Hdd
    );
    // tmpfs is SCM whatever was measured.
    let shm = SysfsFacts {
        memory_fs: Some("tmpfs".into()),
        ..Default::default()
    };
    assert_eq!(
        classify(&shm, Some(&measured(300.0, 1.0, 100.0))).class,
        Class::Scm
    );
}
