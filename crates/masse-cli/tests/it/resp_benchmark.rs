//! redis-benchmark (Debian redis-tools) against `masse serve resp`, pipelined and
//! not: a smoke run of the tool users measure with (figures: bench/resp.sh), and the
//! group commit it should produce: pipelined writes share engine commits.
use crate::resp_support;
use resp_support::*;
use std::process::Command;

#[test]
fn redis_benchmark_smoke() {
    if !have_tool("redis-benchmark") || !have_tool("redis-cli") {
        return;
    }
    let pool = Pool::create("128M", "1G");
    let (srv, port) = serve(&pool, &[]);
    for p in ["1", "16"] {
        let o = run_ok(Command::new("redis-benchmark").args([
            "-p",
            &port.to_string(),
            "-t",
            "set,get,mset",
            "-n",
            "3000",
            "-c",
            "8",
            "-P",
            p,
            "-r",
            "100000",
            "-d",
            "100",
            "-q",
        ]));
        let text = String::from_utf8_lossy(&o.stdout).replace('\r', "\n");
        for t in ["SET:", "GET:", "MSET (10 keys):"] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(t) && l.contains("requests per second")),
                "-P {p}: no {t} result in {text}"
            );
        }
    }
    let per_commit = info_field(port, "masse_records_per_commit");
    assert!(
        per_commit >= 2.0,
        "pipelined writes should share commits: {per_commit} records per commit"
    );
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
}
