//! A checkpoint written by an earlier build (checkpoint version ≤ 3: shard
//! images whose locations round lengths to 8 bytes) is not loaded: the open
//! scans the log instead, quietly (no corruption counted), finds every key,
//! and the next checkpoint, in the current layout, loads.
//!
//! The old checkpoint is made from a current one by rewriting its header's
//! version (docs/format.md §9.1): the header is all a build looks at to decide.
use crate::common;
use common::*;
use masse::device::{AlignedBuf, Device};
use masse::format::{CheckpointHeader, CHECKPOINT_VERSION, CKPT_HEADER};
use masse::Db;

const KEYS: u64 = 50_000;

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

fn old_checkpoint_is_scanned_past(version: u32) {
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
    let mut rewritten = 0;
    for s in 0..2 {
        let slot = g.ckpt_offset + s * g.ckpt_slot_size;
        if let Some(h) = CheckpointHeader::decode(&read(fast, slot, CKPT_HEADER)) {
            assert_eq!(h.version, CHECKPOINT_VERSION);
            write(fast, slot, &CheckpointHeader { version, ..h }.encode());
            rewritten += 1;
        }
    }
    assert!(rewritten > 0, "close wrote a checkpoint");
    let db = Db::open(&p.config(), opts()).expect("open past an old checkpoint");
    let st = db.stats();
    assert!(
        !st.recovery_source.starts_with("checkpoint"),
        "a version-{version} checkpoint must not be used: {}",
        st.recovery_source
    );
    assert_eq!(st.corruptions, 0, "an old checkpoint is not damage");
    for i in 0..KEYS {
        let want = (i % 7 != 0).then(|| i.to_le_bytes().to_vec());
        assert_eq!(db.get(&key(i)).expect("get"), want, "key {i}");
    }
    assert!(db.check().expect("check").errors.is_empty());
    // The next checkpoint is written in the current layout and loads.
    db.close().expect("close");
    let db = Db::open(&p.config(), opts()).expect("reopen");
    assert!(db.stats().recovery_source.starts_with("checkpoint"));
    assert_eq!(
        db.get(&key(1)).expect("get"),
        Some(1u64.to_le_bytes().to_vec())
    );
    db.close().expect("close");
}

#[test]
fn version_2_checkpoint_is_scanned_past() {
    old_checkpoint_is_scanned_past(2);
}

#[test]
fn version_3_checkpoint_is_scanned_past() {
    old_checkpoint_is_scanned_past(3);
}
