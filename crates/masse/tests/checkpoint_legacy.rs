//! A checkpoint written by a build before packed index slots (checkpoint
//! version 2, shard images of 16-byte `[fp, loc]` slots) still loads: the
//! engine converts its images, and every key is found without a scan.
//!
//! The legacy checkpoint is made from a current one using only the documented
//! layouts (docs/format.md §9.2): each shard's entries are read back through a
//! scratch index and laid out again as the old ordered-linear-probing table.
mod common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::format::{CheckpointHeader, BAND_RECORD, CHECKPOINT_VERSION, CKPT_HEADER};
use masse::index::Index;
use masse::Db;

const KEYS: u64 = 200_000;

/// A legacy image of `entries` (`(fp, loc)`, increasing fp): capacity, count,
/// then 16-byte slots, home `(fp · cap) >> 64`, ordered linear probing. The
/// capacity is raised until no cluster wraps, which the layout allows.
fn legacy_image(entries: &[(u64, u64)], min_cap: usize) -> Vec<u8> {
    let mut cap = min_cap.max(entries.len() + 1);
    let slots = loop {
        let mut slots = vec![(0u64, 0u64); cap];
        let mut w = 0usize;
        let fits = entries.iter().all(|&(fp, loc)| {
            let p = (((fp as u128 * cap as u128) >> 64) as usize).max(w);
            if p < cap {
                slots[p] = (fp, loc);
                w = p + 1;
            }
            p < cap
        });
        if fits {
            break slots;
        }
        cap += 64;
    };
    let mut v = Vec::with_capacity(16 + 16 * cap);
    v.extend_from_slice(&(cap as u64).to_le_bytes());
    v.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (fp, loc) in slots {
        v.extend_from_slice(&fp.to_le_bytes());
        v.extend_from_slice(&loc.to_le_bytes());
    }
    v
}

fn read(dev: &dyn Device, off: u64, len: u64) -> Vec<u8> {
    let mut b = AlignedBuf::new(len.next_multiple_of(4096) as usize);
    dev.read_at(&mut b, off).expect("read");
    b[..len as usize].to_vec()
}

fn write(dev: &dyn Device, off: u64, bytes: &[u8]) {
    let mut b = AlignedBuf::new(bytes.len().next_multiple_of(4096));
    b[..bytes.len()].copy_from_slice(bytes);
    dev.write_at(&b, off).expect("write");
}

/// Rewrites the checkpoint at `slot` as checkpoint version 2 with legacy images.
fn make_legacy(dev: &dyn Device, slot: u64) {
    let h = CheckpointHeader::decode(&read(dev, slot, CKPT_HEADER)).expect("a checkpoint");
    assert_eq!(h.version, CHECKPOINT_VERSION);
    let payload = read(dev, slot + CKPT_HEADER, h.payload_len);
    let bands_len = h.bands as usize * BAND_RECORD;
    let mut out = payload[..bands_len].to_vec();
    let scratch = Index::with_shards(h.shards as usize, 0);
    let mut at = bands_len;
    for s in 0..h.shards as usize {
        let n = u64::from_le_bytes(payload[at..at + 8].try_into().expect("8")) as usize;
        let img = &payload[at + 8..at + 8 + n];
        at += 8 + n;
        scratch.load_shard_image(s, img).expect("a valid image");
        let mut entries = Vec::new();
        scratch.scan_shard(s, 0, |fp, loc| {
            entries.push((fp, loc));
            true
        });
        let cap = u64::from_le_bytes(img[..8].try_into().expect("8")) as usize;
        let legacy = legacy_image(&entries, cap);
        out.extend_from_slice(&(legacy.len() as u64).to_le_bytes());
        out.extend_from_slice(&legacy);
    }
    assert_eq!(at, payload.len());
    let old = CheckpointHeader {
        version: 2,
        payload_len: out.len() as u64,
        payload_hash: xxhash_rust::xxh3::xxh3_64(&out),
        ..h
    };
    write(dev, slot + CKPT_HEADER, &out);
    write(dev, slot, &old.encode());
}

#[test]
fn legacy_checkpoint_loads_without_a_scan() {
    let p = MemPool::tiered(256 << 20, 512 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    for i in 0..KEYS {
        db.put(&key(i), &i.to_le_bytes()).expect("put");
    }
    for i in (0..KEYS).step_by(7) {
        db.delete(&key(i)).expect("delete");
    }
    let g = db.geometry().clone();
    db.close().expect("close (writes a checkpoint)");

    let fast = p.fast.as_ref().expect("fast tier");
    for s in 0..2 {
        let slot = g.ckpt_offset + s * g.ckpt_slot_size;
        if CheckpointHeader::decode(&read(fast, slot, CKPT_HEADER)).is_some() {
            make_legacy(fast, slot);
        }
    }
    let db = Db::open(&p.config(), opts()).expect("open a legacy checkpoint");
    let st = db.stats();
    assert!(
        st.recovery_source.starts_with("checkpoint"),
        "the legacy checkpoint must be used, not a scan: {}",
        st.recovery_source
    );
    assert_eq!(st.corruptions, 0);
    for i in 0..KEYS {
        let want = (i % 7 != 0).then(|| i.to_le_bytes().to_vec());
        assert_eq!(db.get(&key(i)).expect("get"), want, "key {i}");
    }
    // The next checkpoint is written in the current layout and loads too.
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    assert!(db.stats().recovery_source.starts_with("checkpoint"));
    assert_eq!(
        db.get(&key(1)).expect("get"),
        Some(1u64.to_le_bytes().to_vec())
    );
    db.close().expect("close");
}
