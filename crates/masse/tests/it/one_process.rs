//! One pool, one process (issue 12 item 3), devices known by identity (issue
//! 13 item 8) and volatile fast tiers (issue 12 item 9).
//!
//! Every device of an open pool is claimed: a second open (or a create) of
//! any of them, in this process or another, is refused with `Error::Busy`
//! naming the device and the holder, until the first pool is closed or
//! dropped. The same storage given twice under two names is refused at create
//! and at open. A fast tier on tmpfs is reported as volatile.
use crate::common;
use common::*;
use masse::device::{Device, MemDevice, SimDevice};
use masse::{Db, DeviceSpec, Error, PoolConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Temporary pool files: the fast tier on /dev/shm (tmpfs) when there is one,
/// the capacity tier on /var/tmp.
struct Files {
    _fdir: tempfile::TempDir,
    _cdir: tempfile::TempDir,
    fast: PathBuf,
    cap: PathBuf,
}

fn files() -> Files {
    let shm = Path::new("/dev/shm");
    let fdir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("tempdir");
    let cdir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    Files {
        fast: fdir.path().join("fast"),
        cap: cdir.path().join("cap"),
        _fdir: fdir,
        _cdir: cdir,
    }
}

fn file_cfg(fast: &Path, cap: &Path) -> PoolConfig {
    PoolConfig::tiered(
        DeviceSpec::file(fast, 48 << 20),
        DeviceSpec::file(cap, 64 << 20),
    )
}

fn busy_holder(r: masse::Result<Db>, path: &Path) -> Option<String> {
    match r {
        Err(Error::Busy { path: p, holder }) => {
            assert_eq!(p, path.display().to_string(), "the busy device is named");
            holder
        }
        Err(e) => panic!("expected Busy, got {e}"),
        Ok(_) => panic!("a second open of a pool in use succeeded"),
    }
}

#[test]
fn a_file_pool_opens_once_at_a_time() {
    let f = files();
    let cfg = file_cfg(&f.fast, &f.cap);
    let db = Db::create(&cfg, opts()).expect("create");
    db.put(b"k", b"v1").expect("put");

    let holder = busy_holder(Db::open(&cfg, opts()), &f.fast).expect("holder known");
    assert!(
        holder.contains(&format!("pid {}", std::process::id())),
        "{holder}"
    );
    let e = Db::open(&cfg, opts()).err().expect("busy").to_string();
    assert!(
        e.contains("in use") && e.contains(&f.fast.display().to_string()),
        "{e}"
    );
    // Create --force must not format a device another pool has open.
    busy_holder(Db::create_force(&cfg, opts()), &f.fast);
    // A capacity device alone is claimed too.
    let cap_only = PoolConfig::capacity_only(DeviceSpec::path(&f.cap));
    busy_holder(Db::create_force(&cap_only, opts()), &f.cap);
    // The refused opens wrote nothing: the pool goes on.
    db.put(b"k", b"v2").expect("put after refused opens");

    drop(db); // a crash releases the claims too
    let db = Db::open(&cfg, opts()).expect("reopen after drop");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v2"[..]));
    busy_holder(Db::open(&cfg, opts()), &f.fast);
    db.close().expect("close");
    Db::open(&cfg, opts())
        .expect("reopen after close")
        .close()
        .expect("close");
}

#[test]
fn in_process_devices_open_once_at_a_time() {
    let p = MemPool::tiered(48 << 20, 32 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"k", b"v").expect("put");
    match Db::open(&p.config(), opts()) {
        Err(Error::Busy { holder, .. }) => {
            let h = holder.expect("holder");
            assert!(h.contains("this process"), "{h}");
        }
        other => panic!("expected Busy, got {:?}", other.err()),
    }
    // Capacity device alone (another clone of it).
    let cap = PoolConfig::capacity_only(DeviceSpec::Device(Arc::new(p.caps[0].clone())));
    assert!(matches!(
        Db::create_force(&cap, opts()),
        Err(Error::Busy { .. })
    ));
    drop(db);
    let db = Db::open(&p.config(), opts()).expect("reopen after drop");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    db.close().expect("close");

    // Emulated drives likewise.
    let sim = SimDevice::open("sim:optane:64MiB").expect("sim");
    let cfg = || PoolConfig::scm_only(DeviceSpec::Device(Arc::new(sim.clone())));
    let db = Db::create(&cfg(), opts()).expect("create on sim");
    assert!(matches!(Db::open(&cfg(), opts()), Err(Error::Busy { .. })));
    drop(db);
    Db::open(&cfg(), opts())
        .expect("reopen sim")
        .close()
        .expect("close");
}

fn same_device(r: masse::Result<Db>) -> String {
    match r {
        Err(Error::InvalidConfig(m)) => {
            assert!(
                m.contains("same device") || m.contains("given twice"),
                "{m}"
            );
            m
        }
        Err(e) => panic!("expected a same-device error, got {e}"),
        Ok(_) => panic!("one device given twice was accepted"),
    }
}

#[test]
fn one_file_under_two_names_is_refused() {
    let f = files();
    std::fs::write(&f.cap, vec![0u8; 64 << 20]).expect("make the file");
    let link = f.cap.with_file_name("cap-link");
    std::os::unix::fs::symlink(&f.cap, &link).expect("symlink");
    let hard = f.cap.with_file_name("cap-hard");
    std::fs::hard_link(&f.cap, &hard).expect("hard link");
    // create: fast and capacity tier on one file, through a symlink, a hard link
    // or the same path.
    for other in [&link, &hard, &f.cap] {
        let cfg = PoolConfig::tiered(DeviceSpec::path(&f.cap), DeviceSpec::path(other));
        let m = same_device(Db::create(&cfg, opts()));
        assert!(m.contains(&f.cap.display().to_string()), "{m}");
        let mut two_caps = PoolConfig::capacity_only(DeviceSpec::path(&f.cap));
        two_caps.capacity.push(DeviceSpec::path(other));
        same_device(Db::create(&two_caps, opts()));
    }
    // Nothing was formatted: the file is still all zeros at its start.
    let head = std::fs::read(&f.cap).expect("read");
    assert!(head[..8192].iter().all(|&b| b == 0));

    // open: a real pool, opened with its capacity tier named by a symlink to the fast file.
    let cfg = file_cfg(&f.fast, &f.cap);
    Db::create(&cfg, opts())
        .expect("create")
        .close()
        .expect("close");
    let flink = f.fast.with_file_name("fast-link");
    std::os::unix::fs::symlink(&f.fast, &flink).expect("symlink");
    let cfg = PoolConfig::tiered(DeviceSpec::path(&f.fast), DeviceSpec::path(&flink));
    same_device(Db::open(&cfg, opts()));
    // The symlink alone in its right role is fine.
    let cfg = PoolConfig::tiered(DeviceSpec::path(&flink), DeviceSpec::path(&link));
    Db::open(&cfg, opts())
        .expect("open through symlinks")
        .close()
        .expect("close");

    // In-process devices: a clone is the same device, another device is not.
    let m = MemDevice::new(64 << 20);
    let spec = |d: &MemDevice| DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>);
    let cfg = PoolConfig::tiered(spec(&m), spec(&m));
    same_device(Db::create(&cfg, opts()));
}

#[test]
fn a_fast_tier_on_tmpfs_is_reported_volatile() {
    let f = files();
    if !masse::device::on_volatile_fs(&f.fast) {
        eprintln!("no tmpfs at /dev/shm here; skipped");
        return;
    }
    let cfg = file_cfg(&f.fast, &f.cap);
    let db = Db::create(&cfg, opts()).expect("create");
    let w = db.pool_warnings().to_vec();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(&f.fast.display().to_string()) && w[0].contains("reboot"),
        "{w:?}"
    );
    let st = db.stats();
    assert_eq!(st.devices.len(), 2);
    db.close().expect("close");
    // Reopened, it says so again.
    let db = Db::open(&cfg, opts()).expect("open");
    assert_eq!(db.pool_warnings().len(), 1);
    db.close().expect("close");

    // A capacity-only pool on /var/tmp: nothing to warn about (unless /var/tmp is tmpfs).
    let cap = PoolConfig::capacity_only(DeviceSpec::file(f.cap.with_file_name("c2"), 64 << 20));
    let db = Db::create(&cap, opts()).expect("create");
    assert_eq!(
        db.pool_warnings().is_empty(),
        !masse::device::on_volatile_fs(&f.cap)
    );
    db.close().expect("close");

    // After a "reboot" the fast tier is gone: the error says why.
    std::fs::remove_file(&f.fast).expect("rm");
    match Db::open(
        &PoolConfig::tiered(DeviceSpec::path(&f.fast), DeviceSpec::path(&f.cap)),
        opts(),
    ) {
        Err(Error::MissingDevice(m)) => {
            assert!(m.contains("tmpfs") && m.contains("reboot"), "{m}")
        }
        other => panic!("expected MissingDevice, got {:?}", other.err()),
    }
    // Or recreated empty: not a masse device, and why it may be empty.
    std::fs::write(&f.fast, vec![0u8; 48 << 20]).expect("recreate");
    match Db::open(
        &PoolConfig::tiered(DeviceSpec::path(&f.fast), DeviceSpec::path(&f.cap)),
        opts(),
    ) {
        Err(e @ Error::NotMasse { .. }) => assert!(e.to_string().contains("reboot"), "{e}"),
        other => panic!("expected NotMasse, got {:?}", other.err()),
    }
}
