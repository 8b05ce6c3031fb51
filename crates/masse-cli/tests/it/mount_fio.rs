//! Scenario: fio file jobs on a mount with verify=crc32c — random writes by two
//! jobs, sequential writes with odd block sizes, and a mixed read/write job —
//! every block read back must verify, and again after a remount.

use crate::mountkit;

use mountkit::{ready, sh, Pool};

#[test]
fn fio_verify_on_a_mount() {
    if !ready(&["fio"]) {
        return;
    }
    let pool = Pool::new("2G");
    let m = pool.mount(&[]);
    let d = m.mnt.display().to_string();
    let common = format!(
        "--directory={d} --ioengine=psync --verify=crc32c --verify_fatal=1 --group_reporting \
         --verify_state_save=0"
    );
    // Random writes, then read back and verify (each job its own file).
    sh(&format!(
        "fio --name=rand {common} --rw=randwrite --bs=4k --size=24M --numjobs=2 --fsync=64"
    ));
    // Sequential with a block size that straddles chunk boundaries.
    sh(&format!(
        "fio --name=seq {common} --rw=write --bs=5k --size=16000k"
    ));
    // Mixed random I/O with verification of what was written.
    sh(&format!("fio --name=mixed {common} --rw=randrw --rwmixread=50 --bs=8k --size=16M --verify_backlog=64"));
    m.unmount();

    // After a remount, fio verifies what the earlier jobs wrote without rewriting.
    let m = pool.mount(&["--direct-io"]);
    sh(&format!(
        "fio --name=rand {common} --rw=randwrite --bs=4k --size=24M --numjobs=2 --verify_only"
    ));
    sh(&format!(
        "fio --name=seq {common} --rw=write --bs=5k --size=16000k --verify_only"
    ));
    m.unmount();
}
