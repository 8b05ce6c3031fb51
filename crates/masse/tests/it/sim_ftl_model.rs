//! The emulated drive's FTL under random writes, trims and reads: every read
//! returns what was last written (zeros after a trim), the FTL's mapping
//! invariants hold after every step, and NAND writes account for every host
//! byte (no write is cheaper than its IUs unless the write buffer merged it).

use masse::device::sim::{ProfileKind, SimConfig, SimDevice};
use masse::device::{AlignedBuf, Device};
use proptest::prelude::*;

const CAP: u64 = 8 << 20;
const BLOCKS: u64 = CAP / 4096;

#[derive(Debug, Clone)]
enum Op {
    Write { block: u64, blocks: u64, seed: u8 },
    Trim { block: u64, blocks: u64 },
    Read { block: u64, blocks: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..BLOCKS, 1..48u64, any::<u8>())
            .prop_map(|(block, blocks, seed)| Op::Write { block, blocks: blocks.min(BLOCKS - block), seed }),
        1 => (0..BLOCKS, 1..64u64)
            .prop_map(|(block, blocks)| Op::Trim { block, blocks: blocks.min(BLOCKS - block) }),
        2 => (0..BLOCKS, 1..32u64)
            .prop_map(|(block, blocks)| Op::Read { block, blocks: blocks.min(BLOCKS - block) }),
    ]
}

fn run(kind: ProfileKind, ops: &[Op]) -> Result<(), TestCaseError> {
    // Small erase blocks and little over-provisioning so GC runs often.
    let mut cfg = SimConfig::new(kind, CAP).virtual_time();
    cfg.op = Some(0.25);
    cfg.erase_block = Some(if kind == ProfileKind::Qlc {
        256 << 10
    } else {
        64 << 10
    });
    let dev = SimDevice::new(cfg).expect("sim");
    let iu = dev.profile().iu as u64;
    let mut model = vec![0u8; CAP as usize];
    for (n, op) in ops.iter().enumerate() {
        match *op {
            Op::Write {
                block,
                blocks,
                seed,
            } => {
                let mut b = AlignedBuf::new((blocks * 4096) as usize);
                for (i, x) in b.iter_mut().enumerate() {
                    *x = seed.wrapping_add((i / 4096) as u8).wrapping_add(n as u8) | 1;
                }
                dev.write_at(&b, block * 4096).expect("write");
                model[(block * 4096) as usize..][..b.len()].copy_from_slice(&b);
            }
            Op::Trim { block, blocks } => {
                dev.discard(block * 4096, blocks * 4096).expect("trim");
                model[(block * 4096) as usize..][..(blocks * 4096) as usize].fill(0);
            }
            Op::Read { block, blocks } => {
                let mut b = AlignedBuf::new((blocks * 4096) as usize);
                dev.read_at(&mut b, block * 4096).expect("read");
                let want = &model[(block * 4096) as usize..][..b.len()];
                prop_assert!(&b[..] == want, "read at block {} after op {}", block, n);
            }
        }
        if let Err(e) = dev.check_ftl() {
            return Err(TestCaseError::fail(format!("after op {n} {op:?}: {e}")));
        }
    }
    let mut all = AlignedBuf::new(CAP as usize);
    dev.read_at(&mut all, 0).expect("read all");
    prop_assert!(all[..] == model[..]);
    let s = dev.stats();
    let c = s.ftl;
    prop_assert!(
        c.nand_write_bytes + c.buffer_merged_ius * iu >= c.host_write_bytes,
        "NAND {} + merged {} IUs < host {}",
        c.nand_write_bytes,
        c.buffer_merged_ius,
        c.host_write_bytes
    );
    prop_assert!(c.nand_write_bytes.is_multiple_of(iu));
    prop_assert!(dev.mapped_bytes() <= CAP.div_ceil(iu) * iu);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn tlc_reads_back_what_was_written(ops in proptest::collection::vec(op(), 1..400)) {
        run(ProfileKind::Tlc, &ops)?;
    }

    #[test]
    fn qlc_reads_back_what_was_written(ops in proptest::collection::vec(op(), 1..400)) {
        run(ProfileKind::Qlc, &ops)?;
    }

    #[test]
    fn optane_reads_back_what_was_written(ops in proptest::collection::vec(op(), 1..200)) {
        run(ProfileKind::Optane, &ops)?;
    }
}

/// Writing the drive over and over (enough to run GC many times) keeps the
/// FTL consistent and the WAF at least 1.
#[test]
fn sustained_random_writes_keep_the_ftl_consistent() {
    let mut cfg = SimConfig::new(ProfileKind::Tlc, CAP).virtual_time();
    cfg.op = Some(0.2);
    cfg.erase_block = Some(64 << 10);
    let dev = SimDevice::new(cfg).expect("sim");
    let b = AlignedBuf::new(4096);
    let mut x = 0x1234_5678_9abc_def1u64;
    for _ in 0..BLOCKS * 6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        dev.write_at(&b, (x % BLOCKS) * 4096).expect("write");
    }
    dev.check_ftl().expect("ftl invariants");
    let s = dev.stats();
    assert!(s.ftl.erases > 0, "GC never ran");
    assert!(s.waf >= 1.0, "WAF {} < 1", s.waf);
}
