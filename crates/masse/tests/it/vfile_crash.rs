//! vFile across crashes: a writer replaces a file by write + fsync + rename, appends
//! to a log with fsyncs, and unlinks files it holds open, while a second thread
//! cuts the power (every later device write fails, unsynced writes are lost) at a
//! random moment — often in the middle of a multi-batch write-out. After each
//! reopen: the replaced file is exactly one whole version (never a mix, never
//! empty), every fsynced byte of the log is there and nothing past it is garbage,
//! and unlinked-but-open inodes are purged.

use crate::common;

use common::{opts, MemPool};
use masse::vfile::{Vfs, VfsOptions, ROOT_INO};
use masse::Db;
use std::sync::Arc;
use std::time::Duration;

fn vopts() -> VfsOptions {
    VfsOptions {
        chunk_size: 4096,
        writeback_interval: None,
        ..Default::default()
    }
}

fn version_bytes(v: u64) -> Vec<u8> {
    let len = 20_000 + (v as usize * 7919) % 150_000;
    let mut d = v.to_le_bytes().to_vec();
    d.extend((8..len).map(|i| (v as usize * 31 + i * 7 + i / 4096) as u8));
    d
}

fn log_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 1000) as u8).collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn set_fail(pool: &MemPool, on: bool) {
    for c in &pool.caps {
        c.set_fail_writes(on);
    }
    if let Some(f) = &pool.fast {
        f.set_fail_writes(on);
    }
}

#[test]
fn crashes_keep_fsynced_data_and_atomic_renames() {
    // Small bands make the largest atomic batch small (tens of KiB), so most
    // write-outs of the replacement file span several batches.
    let pool = MemPool::capacity_only(256 << 20).with_geometry(8192, 256 * 1024);
    let db = Db::create(&pool.config(), opts()).unwrap();
    drop(Vfs::open(Arc::new(db), vopts()).unwrap());

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut committed: u64 = 0; // version the target holds for sure (0 = no target yet)
    let mut version = 0u64;
    let mut synced = 0usize;
    let mut mid_op_cuts = 0;
    for round in 0..40 {
        let db = Arc::new(Db::open(&pool.config(), opts()).unwrap());
        let v = Vfs::open(db.clone(), vopts()).unwrap();

        // Check what the last crash left.
        match v.lookup(ROOT_INO, b"target") {
            Ok(a) => {
                let got = v.read(a.ino, 0, 1 << 20).unwrap();
                assert!(
                    got.len() >= 8,
                    "round {round}: target is {} bytes",
                    got.len()
                );
                let gv = u64::from_le_bytes(got[..8].try_into().unwrap());
                assert!(
                    gv == committed || gv == version,
                    "round {round}: target holds version {gv}, expected {committed} or {version}"
                );
                assert!(
                    got == version_bytes(gv),
                    "round {round}: target version {gv} is not whole"
                );
                committed = gv;
            }
            Err(e) => assert_eq!(committed, 0, "round {round}: target lost: {e}"),
        }
        let log = match v.lookup(ROOT_INO, b"log") {
            Ok(a) => a,
            Err(_) => v.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap(),
        };
        let got = v.read(log.ino, 0, 16 << 20).unwrap();
        assert!(
            got.len() >= synced,
            "round {round}: log has {} bytes, {synced} were fsynced",
            got.len()
        );
        assert!(
            got == log_bytes(got.len()),
            "round {round}: log content is not a prefix of what was appended"
        );
        let mut appended = got.len();
        for e in v.readdir(ROOT_INO).unwrap() {
            if e.name.starts_with(b"orphan-") {
                // Only names whose unlink did not return can be left.
                let _ = v.unlink(ROOT_INO, &e.name);
            }
        }
        let _ = v.unlink(ROOT_INO, b"tmp");

        // The power cut, from another thread after a random delay.
        let delay = Duration::from_micros(rng.next() % 6000);
        let cutter = {
            let p = pool.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                set_fail(&p, true);
            })
        };
        let mut open_unlinked = Vec::new();
        let mut failed = false;
        for step in 0..200u64 {
            version += 1;
            let data = version_bytes(version);
            let r = (|| -> Result<(), masse::vfile::VfsError> {
                let t = v.create(ROOT_INO, b"tmp", 0o644, 0, 0)?;
                let third = data.len() / 3;
                v.write(t.ino, 0, &data[..third])?;
                v.write(t.ino, third as u64, &data[third..])?;
                v.fsync(t.ino)?;
                v.rename(ROOT_INO, b"tmp", ROOT_INO, b"target", false)?;
                Ok(())
            })();
            match r {
                Ok(()) => committed = version,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
            // Log appends, fsynced every other step.
            // Sizes up to ~90 KB: larger ones are written out in several batches.
            let n = 1000 + (rng.next() % 90_000) as usize;
            let add = log_bytes(appended + n)[appended..].to_vec();
            if v.append(log.ino, &add).is_err() {
                failed = true;
                break;
            }
            appended += add.len();
            if step % 2 == 0 {
                if v.fsync(log.ino).is_err() {
                    failed = true;
                    break;
                }
                synced = appended;
            }
            // An open file that loses its last name: purged after the crash.
            let name = format!("orphan-{round}-{step}");
            let r = (|| -> Result<u64, masse::vfile::VfsError> {
                let o = v.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)?;
                v.open_file(o.ino)?;
                v.write(o.ino, 0, &vec![7u8; 30_000])?;
                v.fsync(o.ino)?;
                v.unlink(ROOT_INO, name.as_bytes())?;
                Ok(o.ino)
            })();
            match r {
                Ok(ino) => open_unlinked.push(ino),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        cutter.join().unwrap();
        if failed {
            mid_op_cuts += 1;
        }
        // Crash: drop without closing, lose unsynced device writes, restart.
        drop(v);
        drop(db);
        pool.power_cut();
        set_fail(&pool, false);

        let db = Arc::new(Db::open(&pool.config(), opts()).unwrap());
        let v = Vfs::open(db.clone(), vopts()).unwrap();
        for ino in &open_unlinked {
            assert!(
                v.getattr(*ino).is_err(),
                "round {round}: unlinked inode {ino} survived the crash"
            );
        }
        assert!(
            v.stats().purged >= open_unlinked.len() as u64,
            "round {round}: {} purged at open, {} were unlinked while open",
            v.stats().purged,
            open_unlinked.len()
        );
        v.close().unwrap();
        drop(v);
        Arc::try_unwrap(db).ok().unwrap().close().unwrap();
    }
    assert!(
        mid_op_cuts >= 20,
        "only {mid_op_cuts} of 40 cuts hit a running operation"
    );
    assert!(committed > 0);
}
