//! Stopping the server (what SIGTERM does) while clients keep writes in flight:
//! every write the server acknowledged is in the pool after it is closed and
//! reopened, and every client sees its connection end (no hang).
use crate::common;
use common::*;
use masse::vblock::{self, VolumeSpec};
use masse::Db;
use masse_nbd::proto::*;
use masse_nbd::ServerConfig;
use std::sync::Arc;

#[test]
fn stop_with_writes_in_flight() {
    let r = start(VolumeSpec::new(16 << 20), ServerConfig::default());
    let mut hs = Vec::new();
    for t in 0..4u64 {
        let mut c = Client::connect(&r, "disk", t % 2 == 0, false);
        hs.push(std::thread::spawn(move || {
            // Keep 8 writes in flight; record each acknowledged (block, seed).
            let mut acked = Vec::new();
            let mut s2 = c.s.try_clone().expect("clone");
            let sender = std::thread::spawn(move || {
                use std::io::Write;
                for i in 0..100_000u64 {
                    let block = t * 1024 + i % 1024;
                    let mut b = Vec::new();
                    b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
                    b.extend_from_slice(&0u16.to_be_bytes());
                    b.extend_from_slice(&CMD_WRITE.to_be_bytes());
                    b.extend_from_slice(&i.to_be_bytes());
                    b.extend_from_slice(&(block * 4096).to_be_bytes());
                    b.extend_from_slice(&4096u32.to_be_bytes());
                    b.extend_from_slice(&pattern(i * 4 + t, 4096));
                    if s2.write_all(&b).is_err() {
                        break;
                    }
                }
            });
            loop {
                use std::io::Read;
                let mut m = [0u8; 4];
                if c.s.read_exact(&mut m).is_err() {
                    break;
                }
                let rest: [u8; 12] = if be32(&m) == SIMPLE_REPLY_MAGIC {
                    rd(&mut c.s)
                } else {
                    let h: [u8; 16] = rd(&mut c.s);
                    assert_eq!(be32(&h[12..]), 0, "write replies carry no payload");
                    let mut x = [0u8; 12];
                    x[4..].copy_from_slice(&h[4..12]);
                    x
                };
                assert_eq!(be32(&rest), 0, "write failed");
                acked.push(be64(&rest[4..]));
            }
            let _ = sender.join();
            (t, acked)
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(700));
    let (fast, cap, db) = r.shutdown();
    let results: Vec<(u64, Vec<u64>)> = hs.into_iter().map(|h| h.join().expect("client")).collect();
    Arc::try_unwrap(db)
        .ok()
        .expect("server released the pool")
        .close()
        .expect("close");

    let db = Arc::new(Db::open(&pool_config(&fast, &cap), opts()).expect("reopen"));
    let vol = vblock::open_volume(db.clone(), "disk").expect("volume");
    let mut total = 0;
    for (t, acked) in results {
        assert!(!acked.is_empty(), "client {t} got no write acknowledged");
        total += acked.len();
        // The last acknowledged write of each block must be there.
        let mut last = std::collections::HashMap::new();
        for i in acked {
            last.insert(t * 1024 + i % 1024, i);
        }
        let mut buf = vec![0u8; 4096];
        for (block, i) in last {
            vol.read(block * 4096, &mut buf).expect("read");
            // A later, unacknowledged write may also have landed; accept only writes
            // to this block with an index >= the acknowledged one.
            let ok = (0..64u64).any(|k| buf == pattern((i + k * 1024) * 4 + t, 4096));
            assert!(ok, "block {block}: acknowledged write {i} lost");
        }
    }
    eprintln!("{total} writes acknowledged before the stop");
    assert!(
        total > 100,
        "too few writes acknowledged ({total}) to test anything"
    );
}
