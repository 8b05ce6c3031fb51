//! Capacity-only and scm-only: a power cut in which the block holding a
//! segment's footer (and summary) reached the device but the block holding its
//! newest records did not. The summary then vouched for records that were never
//! written; recovery indexed them, so the key's acknowledged value was gone
//! (`get` returned `Corruption`) and an unacknowledged batch was half applied
//! (issue 12, defect 2). A footer may only vouch for records already durable.
use crate::common;
use common::*;
use masse::device::{Device, DeviceInfo, IoCounters, MemDevice};
use masse::{Db, DeviceSpec, Mode, PoolConfig, WriteBatch};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SEG: u32 = 16 << 10;
const BAND: u64 = 4096 + 8 * SEG as u64;

/// A MemDevice whose `sync` fails while `fail` is set: the power goes out
/// between a write and the sync that would have made it durable.
struct SyncFails {
    mem: MemDevice,
    fail: Arc<AtomicBool>,
}

impl Device for SyncFails {
    fn info(&self) -> &DeviceInfo {
        self.mem.info()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.mem.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.mem.write_at(buf, offset)
    }
    fn write_batch(&self, ops: &[(u64, &[u8])]) -> io::Result<()> {
        self.mem.write_batch(ops)
    }
    fn sync(&self) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("power failed before the sync"));
        }
        self.mem.sync()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.mem.discard(offset, len)
    }
    fn counters(&self) -> &IoCounters {
        self.mem.counters()
    }
}

fn config(dev: Arc<dyn Device>, mode: Mode) -> PoolConfig {
    PoolConfig {
        capacity: vec![DeviceSpec::Device(dev)],
        mode: Some(mode),
        segment_size: Some(SEG),
        band_size: Some(BAND),
        ..Default::default()
    }
}

fn footer_lands_records_do_not(mode: Mode, checkpoint: bool) {
    let mem = MemDevice::new(16 << 20);
    let fail = Arc::new(AtomicBool::new(false));
    let dev: Arc<dyn Device> = Arc::new(SyncFails {
        mem: mem.clone(),
        fail: fail.clone(),
    });
    let opts = masse::Options {
        background_gc: false,
        checkpoint_interval: 0,
        ..common::opts()
    };
    let db = Db::create(&config(dev.clone(), mode), opts.clone()).expect("create");
    // Segment 0 of band 0: a 10 000-byte record, then K's acknowledged value,
    // which ends in the segment's third 4 KiB block.
    db.put(b"A", &value(1, 0, 10_000)).expect("put A");
    db.put(b"K", b"acknowledged").expect("put K");
    if checkpoint {
        // Segment 0 is then replayed after the checkpoint rather than scanned.
        db.checkpoint().expect("checkpoint");
    }
    let slot0 = db.geometry().data_start + db.geometry().band_header_size as u64;
    fail.store(true, Ordering::SeqCst);
    // K's new value joins segment 0's third block; J does not fit, so the
    // commit seals segment 0 (its last block holds summary and footer) and
    // opens segment 1 for J. The sync never completes.
    let mut b = WriteBatch::new();
    b.put(b"K", b"never acknowledged").expect("batch");
    b.put(b"J", &value(2, 0, 8_000)).expect("batch");
    assert!(
        db.write(b).is_err(),
        "the batch was acknowledged without a sync"
    );
    drop(db);
    // Power cut: of the unsynced blocks, segment 0's footer block and segment
    // 1 (J, the batch's end) survive; segment 0's third block (K's new value)
    // does not. The batch then looks complete to a recovery that trusts the
    // footer.
    let footer_block = slot0 + SEG as u64 - 4096;
    mem.power_cut_with(|off| off == footer_block || off >= slot0 + SEG as u64);
    fail.store(false, Ordering::SeqCst);

    let db = Db::open(&config(dev, mode), opts).expect("recover");
    assert_eq!(
        db.get(b"K").expect("K must be readable").as_deref(),
        Some(&b"acknowledged"[..]),
        "{mode:?}: K lost its acknowledged value"
    );
    assert_eq!(db.get(b"J").expect("get J"), None, "half a batch applied");
    assert_eq!(
        db.get(b"A").expect("get A").as_deref(),
        Some(&value(1, 0, 10_000)[..])
    );
    let c = db.check().expect("check");
    assert!(c.is_clean(), "{:?}", c.errors);
    db.close().expect("close");
}

#[test]
fn capacity_only_footer_vouches_only_for_durable_records() {
    footer_lands_records_do_not(Mode::CapacityOnly, false);
}

#[test]
fn scm_only_footer_vouches_only_for_durable_records() {
    footer_lands_records_do_not(Mode::ScmOnly, false);
}

#[test]
fn capacity_only_replay_after_a_checkpoint_verifies_records() {
    footer_lands_records_do_not(Mode::CapacityOnly, true);
}

#[test]
fn scm_only_replay_after_a_checkpoint_verifies_records() {
    footer_lands_records_do_not(Mode::ScmOnly, true);
}
