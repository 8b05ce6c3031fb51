//! Concurrent sub-chunk writers: many threads write disjoint 512-byte blocks that
//! share 64 KiB chunks (each such write is a read-modify-write of its chunk); no
//! write may be lost, and readers only ever see each block old or new, never torn.
use crate::common;
use common::*;
use masse::vblock::{self, VolumeSpec};
use masse::Db;
use std::sync::Arc;

#[test]
fn disjoint_blocks_in_shared_chunks() {
    let p = MemPool::tiered(64 << 20, 128 << 20).with_geometry(256 << 10, 4 << 20);
    let db = Arc::new(Db::create(&p.config(), opts()).expect("create"));
    let spec = VolumeSpec {
        size: 1 << 20,
        block_size: 512,
        chunk_size: 64 << 10,
    };
    vblock::create_volume(&db, "v", spec).expect("create volume");
    let vol = Arc::new(vblock::open_volume(db.clone(), "v").expect("open"));
    let threads = 8u64;
    let blocks = spec.size / 512;
    let fill = |b: u64, round: u64| -> Vec<u8> { vec![(b * 13 + round * 101) as u8 | 1; 512] };
    let mut hs = Vec::new();
    for t in 0..threads {
        let vol = vol.clone();
        hs.push(std::thread::spawn(move || {
            // Thread t owns blocks t, t+threads, ...: neighbours in every chunk.
            for round in 0..3u64 {
                let mut b = t;
                while b < blocks {
                    vol.write(b * 512, &fill(b, round)).expect("write");
                    b += threads;
                }
            }
        }));
    }
    {
        let vol = vol.clone();
        hs.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 512];
            for i in 0..5000u64 {
                let b = (i * 7919) % blocks;
                vol.read(b * 512, &mut buf).expect("read");
                let ok = buf.iter().all(|&x| x == 0) || (0..3).any(|r| buf == fill(b, r));
                assert!(ok, "block {b} read torn or never-written data");
            }
        }));
    }
    for h in hs {
        h.join().expect("thread");
    }
    let mut buf = vec![0u8; 512];
    for b in 0..blocks {
        vol.read(b * 512, &mut buf).expect("read");
        assert!(buf == fill(b, 2), "block {b} lost its last write");
    }
}
