//! Round trips, batching, contract checks and discard on every device backend.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use masse::device::{AlignedBuf, Backend, Device, FileDevice, Media, MemDevice, OpenOptions};

const MIB: u64 = 1 << 20;

/// Deterministic, position- and seed-dependent contents.
fn pattern(len: usize, seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    b
}

fn read(dev: &dyn Device, offset: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    dev.read_at(&mut b, offset).expect("read");
    b
}

fn assert_zeros(buf: &[u8], what: &str) {
    if let Some(i) = buf.iter().position(|&x| x != 0) {
        panic!("{what}: byte {i} is {:#x}, expected zero", buf[i]);
    }
}

/// Aligned writes of several sizes at several offsets (including the very end
/// of the device and across 1 MiB boundaries) read back identically; untouched
/// neighbours stay zero.
fn roundtrip(dev: &dyn Device) {
    let cap = dev.info().capacity;
    assert!(cap >= 8 * MIB, "test devices have at least 8 MiB");
    let cases: [(u64, usize); 6] = [
        (0, 4096),
        (8192, 8192),
        (MIB - 4096, 3 * 4096), // crosses a 1 MiB boundary
        (2 * MIB, MIB as usize + 4096),
        (5 * MIB + 12288, 65536),
        (cap - 8192, 8192), // last two blocks
    ];
    let before = dev.counters().snapshot();
    for (i, &(off, len)) in cases.iter().enumerate() {
        let data = pattern(len, i as u64 + 1);
        dev.write_at(&data, off).expect("write");
        let back = read(dev, off, len);
        assert!(back[..] == data[..], "round trip at {off}+{len}");
    }
    // Re-read everything after all writes: nothing clobbered anything else.
    for (i, &(off, len)) in cases.iter().enumerate() {
        let back = read(dev, off, len);
        assert!(
            back[..] == pattern(len, i as u64 + 1)[..],
            "re-read at {off}+{len}"
        );
    }
    // Never-written gaps read as zeros.
    assert_zeros(&read(dev, 4096, 4096), "gap at 4096");
    assert_zeros(&read(dev, 4 * MIB, 4096), "gap at 4 MiB");
    let after = dev.counters().snapshot();
    let written: u64 = cases.iter().map(|c| c.1 as u64).sum();
    assert_eq!(after.writes - before.writes, cases.len() as u64);
    assert_eq!(after.bytes_written - before.bytes_written, written);
    assert_eq!(after.reads - before.reads, 2 * cases.len() as u64 + 2);
    assert_eq!(after.bytes_read - before.bytes_read, 2 * written + 8192);

    // Overwrite in place.
    let data = pattern(8192, 99);
    dev.write_at(&data, 8192).expect("overwrite");
    assert!(read(dev, 8192, 8192)[..] == data[..]);
    dev.sync().expect("sync");
    assert!(dev.counters().snapshot().syncs > before.syncs);
}

/// 100 operations of mixed sizes in one write_batch / read_batch.
fn batch100(dev: &dyn Device) {
    let bufs: Vec<AlignedBuf> = (0..100)
        .map(|i| pattern(4096 * (1 + i % 5), 1000 + i as u64))
        .collect();
    // Spread out, non-overlapping, in a scrambled order.
    let offsets: Vec<u64> = (0..100u64)
        .map(|i| ((i * 37) % 100) * 5 * 4096 + MIB)
        .collect();
    let ops: Vec<(u64, &[u8])> = offsets
        .iter()
        .zip(&bufs)
        .map(|(o, b)| (*o, &b[..]))
        .collect();
    let before = dev.counters().snapshot();
    dev.write_batch(&ops).expect("write_batch");
    let mut outs: Vec<AlignedBuf> = bufs.iter().map(|b| AlignedBuf::new(b.len())).collect();
    {
        let mut rops: Vec<(u64, &mut [u8])> = offsets
            .iter()
            .zip(outs.iter_mut())
            .map(|(o, b)| (*o, &mut b[..]))
            .collect();
        dev.read_batch(&mut rops).expect("read_batch");
    }
    for (i, (a, b)) in bufs.iter().zip(&outs).enumerate() {
        assert!(a[..] == b[..], "batch op {i} differs");
    }
    // And each one individually.
    for (i, (o, b)) in offsets.iter().zip(&bufs).enumerate() {
        assert!(
            read(dev, *o, b.len())[..] == b[..],
            "single read of batch op {i}"
        );
    }
    let after = dev.counters().snapshot();
    assert_eq!(after.writes - before.writes, 100);
    let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    assert_eq!(after.bytes_written - before.bytes_written, total);
}

fn assert_invalid(r: io::Result<()>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}: {e}"),
        Ok(()) => panic!("{what}: accepted"),
    }
}

/// Alignment and range violations are rejected before anything happens.
fn contract(dev: &dyn Device) {
    let cap = dev.info().capacity;
    let mut big = AlignedBuf::new(3 * 4096);
    let data = pattern(4096, 7);
    big[..4096].copy_from_slice(&data);
    // Unaligned buffer address.
    assert_invalid(
        dev.write_at(&big[512..512 + 4096], 0),
        "unaligned buffer write",
    );
    assert_invalid(
        dev.read_at(&mut big[1..1 + 4096], 0),
        "unaligned buffer read",
    );
    // Unaligned offset.
    assert_invalid(dev.write_at(&big[..4096], 512), "unaligned offset write");
    assert_invalid(dev.read_at(&mut big[..4096], 4097), "unaligned offset read");
    // Unaligned length.
    assert_invalid(
        dev.write_at(&big[..4096 + 512], 0),
        "unaligned length write",
    );
    assert_invalid(dev.read_at(&mut big[..100], 0), "unaligned length read");
    // Out of range.
    assert_invalid(dev.write_at(&big[..4096], cap), "write at capacity");
    assert_invalid(
        dev.write_at(&big[..8192], cap - 4096),
        "write straddling the end",
    );
    assert_invalid(dev.read_at(&mut big[..4096], cap), "read at capacity");
    assert_invalid(
        dev.read_at(&mut big[..4096], u64::MAX - 4095),
        "offset overflow",
    );
    assert_invalid(dev.discard(cap, 4096), "discard past the end");
    assert_invalid(dev.discard(512, 4096), "unaligned discard");
    // A batch with one bad op does nothing at all.
    let target = 6 * MIB;
    let ops: Vec<(u64, &[u8])> = vec![(target, &data[..]), (cap, &data[..])];
    assert_invalid(dev.write_batch(&ops), "batch with an out-of-range op");
    assert_zeros(&read(dev, target, 4096), "first op of a rejected batch");
    let ops: Vec<(u64, &[u8])> = vec![(target, &data[..]), (target + 4096, &big[1..4097])];
    assert_invalid(dev.write_batch(&ops), "batch with an unaligned op");
    assert_zeros(&read(dev, target, 4096), "first op of a rejected batch");
    // Empty I/O is a no-op.
    dev.write_at(&[], 0).expect("empty write");
    dev.read_at(&mut [], 0).expect("empty read");
}

/// Discarded ranges read back as zeros; neighbours are untouched.
fn discard_zeroes(dev: &dyn Device) {
    let off = 3 * MIB;
    let data = pattern(MIB as usize + 3 * 4096, 55);
    dev.write_at(&data, off - 4096).expect("write");
    let before = dev.counters().snapshot().bytes_discarded;
    dev.discard(off, MIB + 4096).expect("discard");
    assert_zeros(&read(dev, off, MIB as usize + 4096), "discarded range");
    let back = read(dev, off - 4096, 4096);
    assert!(back[..] == data[..4096], "block before the discard");
    let back = read(dev, off + MIB + 4096, 4096);
    assert!(
        back[..] == data[data.len() - 4096..],
        "block after the discard"
    );
    assert_eq!(
        dev.counters().snapshot().bytes_discarded - before,
        MIB + 4096
    );
    dev.discard(0, 0).expect("empty discard");
}

fn all_checks(dev: &dyn Device) {
    roundtrip(dev);
    batch100(dev);
    contract(dev);
    discard_zeroes(dev);
}

fn open_file(dir: &Path, opts: OpenOptions) -> (PathBuf, FileDevice) {
    let path = dir.join("dev.img");
    let opts = OpenOptions {
        create_size: Some(16 * MIB),
        ..opts
    };
    let dev = FileDevice::open(&path, &opts).expect("open");
    (path, dev)
}

#[test]
fn file_default_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, dev) = open_file(dir.path(), OpenOptions::default());
    let info = dev.info().clone();
    eprintln!("default file device: {info:?}");
    assert_eq!(info.capacity, 16 * MIB);
    assert_eq!(info.logical_block_size, 4096);
    assert!(!info.block_device);
    assert!(info.hole_punch_discard, "a file's discard is a hole punch");
    // The crate is meant for hosts with io_uring; report rather than fail if not.
    if info.backend != Backend::IoUring {
        eprintln!("warning: io_uring unavailable here, testing pread");
    }
    all_checks(&dev);
}

#[test]
fn file_forced_pread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, dev) = open_file(
        dir.path(),
        OpenOptions {
            force_pread: true,
            ..Default::default()
        },
    );
    assert_eq!(dev.info().backend, Backend::Pread);
    all_checks(&dev);
}

#[test]
fn file_forced_buffered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, dev) = open_file(
        dir.path(),
        OpenOptions {
            force_buffered: true,
            ..Default::default()
        },
    );
    assert!(!dev.info().direct_io);
    all_checks(&dev);
}

#[test]
fn file_on_dev_shm() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let (_, dev) = open_file(dir.path(), OpenOptions::default());
    eprintln!("/dev/shm file device: {:?}", dev.info());
    assert_eq!(dev.info().media, Media::Scm);
    all_checks(&dev);
    let dir2 = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let (_, dev) = open_file(
        dir2.path(),
        OpenOptions {
            force_pread: true,
            ..Default::default()
        },
    );
    all_checks(&dev);
}

#[test]
fn mem_device() {
    let dev = MemDevice::new(16 * MIB);
    let info = dev.info();
    assert_eq!(info.backend, Backend::Memory);
    assert_eq!(info.media, Media::Memory);
    assert_eq!(info.path, format!("mem:{}", 16 * MIB));
    assert!(info.direct_io);
    all_checks(&dev);
}

#[test]
fn missing_file_without_size_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nope.img");
    let err = FileDevice::open(&path, &OpenOptions::default()).expect_err("must fail");
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    assert!(
        err.to_string().contains("nope.img"),
        "message names the path: {err}"
    );
    assert!(!path.exists(), "nothing created");
}

#[test]
fn directory_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = FileDevice::open(dir.path(), &OpenOptions::default()).expect_err("must fail");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
}

#[test]
fn reopen_grows_but_never_truncates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let data = pattern(8192, 3);
    {
        let dev = FileDevice::open(
            &path,
            &OpenOptions {
                create_size: Some(MIB),
                ..Default::default()
            },
        )
        .expect("create");
        assert_eq!(dev.info().capacity, MIB);
        dev.write_at(&data, MIB - 8192).expect("write");
        dev.sync().expect("sync");
    }
    // Smaller create_size: no truncation.
    let dev = FileDevice::open(
        &path,
        &OpenOptions {
            create_size: Some(4096),
            ..Default::default()
        },
    )
    .expect("reopen");
    assert_eq!(dev.info().capacity, MIB);
    assert!(read(&dev, MIB - 8192, 8192)[..] == data[..]);
    drop(dev);
    // No create_size on an existing file: just opens it.
    let dev = FileDevice::open(&path, &OpenOptions::default()).expect("reopen");
    assert_eq!(dev.info().capacity, MIB);
    drop(dev);
    // Larger: grows, data intact, new space zero.
    let dev = FileDevice::open(
        &path,
        &OpenOptions {
            create_size: Some(4 * MIB),
            ..Default::default()
        },
    )
    .expect("grow");
    assert_eq!(dev.info().capacity, 4 * MIB);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 4 * MIB);
    assert!(read(&dev, MIB - 8192, 8192)[..] == data[..]);
    assert_zeros(&read(&dev, 3 * MIB, MIB as usize), "grown space");
}

#[test]
fn capacity_rounds_down_to_4k() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("odd.img");
    std::fs::write(&path, vec![7u8; 10_000]).expect("write file");
    let dev = FileDevice::open(&path, &OpenOptions::default()).expect("open");
    assert_eq!(dev.info().capacity, 8192);
    let b = read(&dev, 4096, 4096);
    assert!(b.iter().all(|&x| x == 7));
    let mut buf = AlignedBuf::new(4096);
    assert_invalid(
        dev.read_at(&mut buf, 8192),
        "read of the partial tail block",
    );
}

#[test]
fn file_data_survives_reopen() {
    for force_pread in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = OpenOptions {
            force_pread,
            ..Default::default()
        };
        let (path, dev) = open_file(dir.path(), opts.clone());
        let data = pattern(64 * 1024, 11);
        dev.write_at(&data, 7 * MIB).expect("write");
        dev.sync().expect("sync");
        drop(dev);
        let dev = FileDevice::open(&path, &opts).expect("reopen");
        assert!(read(&dev, 7 * MIB, data.len())[..] == data[..]);
        // Check through the plain filesystem too.
        let raw = std::fs::read(&path).expect("read file");
        assert!(raw[7 * MIB as usize..7 * MIB as usize + data.len()] == data[..]);
    }
}

#[test]
fn concurrent_io_on_one_file_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, dev) = open_file(dir.path(), OpenOptions::default());
    let dev = Arc::new(dev);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let dev = Arc::clone(&dev);
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let off = t * 2 * MIB + (i % 16) * 65536;
                    let data = pattern(65536, t * 1000 + i);
                    dev.write_at(&data, off).expect("write");
                    let mut back = AlignedBuf::new(65536);
                    dev.read_at(&mut back, off).expect("read");
                    assert!(back[..] == data[..], "thread {t} op {i}");
                    let ops: Vec<(u64, &[u8])> = (0..4)
                        .map(|k| (off + k * 16384, &data[k as usize * 16384..][..16384]))
                        .collect();
                    dev.write_batch(&ops).expect("batch");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    assert_eq!(dev.counters().snapshot().writes, 8 * 50 * 5);
}

#[test]
fn mem_power_cut_loses_unsynced_writes_only() {
    let dev = MemDevice::new(8 * MIB);
    let handle = dev.clone();
    let a = pattern(8192, 1);
    let b = pattern(8192, 2);
    let c = pattern(4096, 3);
    dev.write_at(&a, 0).expect("write a");
    dev.write_at(&c, 5 * MIB).expect("write c");
    dev.sync().expect("sync");
    dev.write_at(&b, 0).expect("overwrite a with b"); // unsynced overwrite
    dev.write_at(&b, 3 * MIB).expect("write b"); // unsynced new data
    dev.discard(5 * MIB, 4096).expect("discard c"); // unsynced discard
    assert!(
        read(&dev, 0, 8192)[..] == b[..],
        "before the cut the new data is visible"
    );
    drop(dev); // "crash" without closing anything
    handle.power_cut();
    assert!(read(&handle, 0, 8192)[..] == a[..], "overwrite lost");
    assert_zeros(&read(&handle, 3 * MIB, 8192), "new unsynced write lost");
    assert!(
        read(&handle, 5 * MIB, 4096)[..] == c[..],
        "unsynced discard undone"
    );
    // After a cut, a second cut changes nothing and synced writes stay.
    handle.write_at(&b, 0).expect("write");
    handle.sync().expect("sync");
    handle.power_cut();
    assert!(read(&handle, 0, 8192)[..] == b[..], "synced write survives");
}

#[test]
fn mem_partial_power_cut() {
    let dev = MemDevice::new(4 * MIB);
    let data = pattern(4 * 4096, 9);
    dev.write_at(&data, MIB).expect("write");
    let mut asked = Vec::new();
    dev.power_cut_with(|off| {
        asked.push(off);
        off == MIB + 4096 // only the second block made it
    });
    assert_eq!(asked, vec![MIB, MIB + 4096, MIB + 8192, MIB + 12288]);
    let back = read(&dev, MIB, 4 * 4096);
    assert_zeros(&back[..4096], "block 0");
    assert!(back[4096..8192] == data[4096..8192], "block 1 survived");
    assert_zeros(&back[8192..], "blocks 2-3");
}

#[test]
fn mem_clone_shares_storage_and_is_lazy() {
    let dev = MemDevice::new(64 << 30);
    assert_eq!(dev.info().capacity, 64 << 30);
    assert_eq!(dev.resident_bytes(), 0);
    let other = dev.clone();
    let data = pattern(4096, 4);
    dev.write_at(&data, (64 << 30) - 4096)
        .expect("write at the end");
    assert!(read(&other, (64 << 30) - 4096, 4096)[..] == data[..]);
    assert_eq!(other.resident_bytes(), MIB);
    assert_zeros(&read(&other, 32 << 30, 4096), "untouched");
    assert_eq!(MemDevice::new(5000).info().capacity, 8192);
}

#[test]
fn mem_error_injection() {
    let dev = MemDevice::new(MIB);
    let data = pattern(4096, 5);
    dev.write_at(&data, 0).expect("write");
    dev.set_fail_writes(true);
    let e = dev.write_at(&data, 4096).expect_err("injected");
    assert_eq!(e.kind(), io::ErrorKind::Other);
    assert_eq!(e.to_string(), "injected I/O error");
    assert!(dev.write_batch(&[(4096, &data[..])]).is_err());
    assert!(dev.sync().is_err());
    assert!(dev.discard(0, 4096).is_err());
    assert!(read(&dev, 0, 4096)[..] == data[..], "reads still work");
    dev.set_fail_writes(false);
    dev.set_fail_reads(true);
    let mut b = AlignedBuf::new(4096);
    assert_eq!(
        dev.read_at(&mut b, 0).expect_err("injected").kind(),
        io::ErrorKind::Other
    );
    dev.write_at(&data, 4096).expect("writes work again");
    dev.set_fail_reads(false);
    assert!(read(&dev, 4096, 4096)[..] == data[..]);
}

/// A raw block device: a loop device over a sparse file. Needs root and
/// `losetup`; run with `cargo test -- --ignored`.
#[test]
#[ignore = "needs root and losetup (creates a loop device)"]
fn loop_block_device() {
    use std::process::Command;
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = dir.path().join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(32 * MIB))
        .expect("backing file");
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output()
        .expect("losetup");
    assert!(
        out.status.success(),
        "losetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup")
                .args(["-d", &self.0])
                .status();
        }
    }
    let _detach = Detach(loopdev.clone());
    // create_size is ignored for block devices.
    let dev = FileDevice::open(
        Path::new(&loopdev),
        &OpenOptions {
            create_size: Some(1 << 40),
            ..Default::default()
        },
    )
    .expect("open loop device");
    let info = dev.info().clone();
    eprintln!("{loopdev}: {info:?}");
    assert!(info.block_device);
    assert!(
        info.hole_punch_discard,
        "a loop device over a file punches holes"
    );
    assert_eq!(info.capacity, 32 * MIB);
    assert!(info.logical_block_size == 512 || info.logical_block_size == 4096);
    all_checks(&dev);
    drop(dev);
    let dev = FileDevice::open(
        Path::new(&loopdev),
        &OpenOptions {
            force_pread: true,
            ..Default::default()
        },
    )
    .expect("open loop device");
    roundtrip(&dev);
    batch100(&dev);
}
