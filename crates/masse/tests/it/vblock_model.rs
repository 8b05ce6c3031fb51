//! A volume behaves like a byte array: random writes (single and batched), write-zeroes and trims at
//! block granularity (many of them sub-chunk) match an in-memory model, before and
//! after a reopen, for 512-byte blocks in 4 KiB chunks and 4 KiB blocks in 16 KiB
//! chunks; unwritten space reads as zeros and is reported as a hole.
use crate::common;
use common::*;
use masse::vblock::{self, VolumeError, VolumeSpec};
use masse::Db;
use std::sync::Arc;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn run(p: &MemPool, name: &str, spec: VolumeSpec, seed: u64) {
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let info = vblock::create_volume(&db, name, spec).expect("create volume");
    assert_eq!(info.size, spec.size);
    let vol = vblock::open_volume(db.clone(), name).expect("open volume");
    let bs = spec.block_size as u64;
    let nblocks = spec.size / bs;
    let mut model = vec![0u8; spec.size as usize];
    let mut rng = Rng(seed);

    // A fresh volume is all zeros and all hole.
    let mut buf = vec![1u8; spec.size as usize];
    vol.read(0, &mut buf).expect("read");
    assert!(buf.iter().all(|&b| b == 0));
    let st = vol.block_status(0, spec.size).expect("status");
    assert_eq!(st.len(), 1);
    assert!(st[0].hole && st[0].len == spec.size);

    for i in 0..600u64 {
        let start = rng.next() % nblocks;
        let n = 1 + rng.next() % (nblocks - start).min(3 * spec.chunk_size as u64 / bs);
        let (off, len) = (start * bs, n * bs);
        match rng.next() % 10 {
            0 => {
                vol.write_zeroes(off, len).expect("write_zeroes");
                model[off as usize..(off + len) as usize].fill(0);
            }
            1 => {
                vol.trim(off, len).expect("trim");
                model[off as usize..(off + len) as usize].fill(0);
            }
            2 => {
                // A batch of (possibly overlapping) writes: applied in order.
                let mut ws = Vec::new();
                for k in 0..3u64 {
                    let st = rng.next() % nblocks;
                    let n = 1 + rng.next() % (nblocks - st).min(2 * spec.chunk_size as u64 / bs);
                    let d: Vec<u8> = (0..n * bs)
                        .map(|j| (i * 17 + k * 5 + j * 3 + seed) as u8 | 1)
                        .collect();
                    ws.push((st * bs, d));
                }
                let refs: Vec<(u64, &[u8])> = ws.iter().map(|(o, d)| (*o, d.as_slice())).collect();
                vol.write_many(&refs).expect("write_many");
                for (o, d) in &ws {
                    model[*o as usize..*o as usize + d.len()].copy_from_slice(d);
                }
            }
            _ => {
                let data: Vec<u8> = (0..len)
                    .map(|j| (i * 31 + j * 7 + seed) as u8 | 1)
                    .collect();
                vol.write(off, &data).expect("write");
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
        }
        if i % 50 == 0 {
            let mut got = vec![0u8; len as usize];
            vol.read(off, &mut got).expect("read");
            assert_eq!(got, &model[off as usize..(off + len) as usize], "step {i}");
        }
    }
    let check = |vol: &vblock::Volume| {
        let mut all = vec![0u8; spec.size as usize];
        vol.read(0, &mut all).expect("read all");
        assert!(all == model, "volume differs from the model");
        // Holes read as zeros; block status covers the volume exactly.
        let st = vol.block_status(0, spec.size).expect("status");
        assert_eq!(st.iter().map(|e| e.len).sum::<u64>(), spec.size);
        let mut pos = 0usize;
        for e in &st {
            if e.hole {
                assert!(model[pos..pos + e.len as usize].iter().all(|&b| b == 0));
            }
            pos += e.len as usize;
        }
    };
    check(&vol);
    drop(vol);
    Arc::try_unwrap(db)
        .ok()
        .expect("sole owner")
        .close()
        .expect("close");

    let db = Arc::new(Db::open(&p.config(), opts()).expect("reopen"));
    let vol = vblock::open_volume(db.clone(), name).expect("open again");
    check(&vol);
    drop(vol);
    Arc::try_unwrap(db)
        .ok()
        .expect("sole owner")
        .close()
        .expect("close");
}

#[test]
fn volume_matches_model() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(64 << 10, 1 << 20);
    run(
        &p,
        "small-blocks",
        VolumeSpec {
            size: 1 << 20,
            block_size: 512,
            chunk_size: 4096,
        },
        0x9E3779B97F4A7C15,
    );
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(64 << 10, 1 << 20);
    run(
        &p,
        "big-chunks",
        VolumeSpec {
            // Not a multiple of the chunk size: the last chunk is short.
            size: (2 << 20) + 4096 * 3,
            block_size: 4096,
            chunk_size: 16384,
        },
        12345,
    );
}

#[test]
fn volume_errors_and_directory() {
    let p = MemPool::tiered(64 << 20, 64 << 20).with_geometry(64 << 10, 1 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let spec = VolumeSpec::new(1 << 20);
    vblock::create_volume(&db, "a", spec).expect("a");
    vblock::create_volume(
        &db,
        "b",
        VolumeSpec {
            block_size: 512,
            ..spec
        },
    )
    .expect("b");
    assert!(matches!(
        vblock::create_volume(&db, "a", spec),
        Err(VolumeError::Exists(_))
    ));
    assert!(matches!(
        vblock::create_volume(&db, "", spec),
        Err(VolumeError::InvalidName(_))
    ));
    for bad in [
        VolumeSpec {
            block_size: 1024,
            ..spec
        },
        VolumeSpec {
            chunk_size: 2048,
            ..spec
        },
        VolumeSpec {
            chunk_size: 2 << 20,
            ..spec
        },
        VolumeSpec { size: 1000, ..spec },
        VolumeSpec { size: 0, ..spec },
    ] {
        assert!(
            matches!(
                vblock::create_volume(&db, "c", bad),
                Err(VolumeError::InvalidSpec(_))
            ),
            "{bad:?} accepted"
        );
    }
    assert!(matches!(
        vblock::open_volume(db.clone(), "zz"),
        Err(VolumeError::NotFound(_))
    ));
    let names: Vec<String> = vblock::list_volumes(&db)
        .expect("list")
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["a", "b"]);

    let a = vblock::open_volume(db.clone(), "a").expect("open a");
    let b = vblock::open_volume(db.clone(), "b").expect("open b");
    let mut buf = vec![0u8; 4096];
    assert!(matches!(
        a.read(512, &mut buf),
        Err(VolumeError::Unaligned { .. })
    ));
    assert!(matches!(
        a.read(1 << 20, &mut buf),
        Err(VolumeError::OutOfRange { .. })
    ));
    assert!(matches!(
        a.write(u64::MAX - 4095, &buf),
        Err(VolumeError::OutOfRange { .. })
    ));
    assert!(matches!(
        a.write_zeroes((1 << 20) - 4096, 8192),
        Err(VolumeError::OutOfRange { .. })
    ));

    // Volumes do not share data.
    a.write(0, &[0xAA; 4096]).expect("write a");
    b.read(0, &mut buf).expect("read b");
    assert!(buf.iter().all(|&x| x == 0));

    // Delete frees the volume's chunks and its name; ids are not reused.
    let a_id = a.info().id;
    drop(a);
    vblock::delete_volume(&db, "a").expect("delete");
    assert!(matches!(
        vblock::open_volume(db.clone(), "a"),
        Err(VolumeError::NotFound(_))
    ));
    let a2 = vblock::create_volume(&db, "a", spec).expect("recreate");
    assert_ne!(a2.id, a_id);
    let a2 = vblock::open_volume(db.clone(), "a").expect("open a2");
    a2.read(0, &mut buf).expect("read a2");
    assert!(
        buf.iter().all(|&x| x == 0),
        "a new volume must not see old data"
    );
}
