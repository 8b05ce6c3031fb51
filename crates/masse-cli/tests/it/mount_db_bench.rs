//! Scenario: RocksDB's db_bench with its database on a mount — fillrandom (then
//! overwrite and a full compaction), and after a remount readrandom with
//! --use_existing_db. db_bench checks no values, so the test pins the key
//! sequences with --seed and requires the same "N of M found" as the identical
//! run on a plain directory of the host file system.

use crate::mountkit;

use mountkit::{ready, sh, Pool};
use std::path::Path;

const NUM: u64 = 100_000;

fn base(db: &Path) -> String {
    format!(
        "db_bench --db={} --num={NUM} --key_size=20 --value_size=100 --compression_type=none \
         --threads=1 --seed=1234",
        db.display()
    )
}

fn found(out: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with("readrandom"))
        .unwrap_or_else(|| panic!("no readrandom line:\n{out}"));
    let i = line
        .rfind('(')
        .unwrap_or_else(|| panic!("no found count: {line}"));
    line[i..].to_string()
}

#[test]
fn db_bench_on_a_mount() {
    if !ready(&["db_bench"]) {
        return;
    }
    let pool = Pool::new("2G");
    let fill = "--benchmarks=fillrandom,overwrite,compact --sync=0";
    let read = "--benchmarks=readrandom --use_existing_db=1 --reads=20000 --cache_size=1";

    let reference = pool.dir.path().join("reference");
    sh(&format!("{} {fill}", base(&reference)));
    let expect = found(&sh(&format!("{} {read}", base(&reference))));
    assert_eq!(expect, "(20000 of 20000 found)");

    let m = pool.mount(&[]);
    let db = m.path("rocks");
    let out = sh(&format!("{} {fill}", base(&db)));
    assert!(
        out.contains("fillrandom") && out.contains("overwrite"),
        "{out}"
    );
    m.unmount();

    let m = pool.mount(&["--direct-io"]);
    assert_eq!(found(&sh(&format!("{} {read}", base(&db)))), expect);
    m.unmount();
}
