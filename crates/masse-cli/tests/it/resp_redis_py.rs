//! The Python `redis` client (PyPI redis-py) against `masse serve resp`: four
//! threads write (SET, pipelines, MSET, INCR, DEL), the server is SIGKILLed mid-run,
//! restarted on the same pool, and every write the client saw acknowledged is
//! verified. The interpreter is $MASSE_PYTHON (what .ci/run sets up) or python3.
use crate::resp_support;
use resp_support::*;
use std::process::Command;
use std::time::Duration;

/// A Python with redis-py, or None (a failure when tools are required).
fn python() -> Option<String> {
    let py = std::env::var("MASSE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    let required = ["CI", "MASSE_REQUIRE_TOOLS"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| !x.is_empty() && x != "0"));
    assert!(!required, "{py} with the redis package is required (CI / MASSE_REQUIRE_TOOLS is set); .ci/run installs it");
    eprintln!("NOTICE: {py} cannot import redis: skipping this test");
    None
}

#[test]
fn redis_py_acknowledged_writes_survive_sigkill() {
    let Some(py) = python() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/resp_redis_py.py");
    let pool = Pool::create("64M", "512M");
    let acks = pool.dir.path().join("acks.txt");
    let (mut srv, port) = serve(&pool, &[]);
    let mut w = Command::new(&py)
        .args([
            script,
            "write",
            &port.to_string(),
            acks.to_str().expect("utf-8"),
        ])
        .spawn()
        .expect("start the writer");
    // Kill once the writers are well under way (Python's start-up time varies).
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&acks).map_or(0, |a| a.lines().count()) < 2000 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the writer acknowledged too little in 60 s"
        );
        assert!(
            w.try_wait().expect("writer").is_none(),
            "the writer ended early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut child = srv.child.take().expect("server");
    child.kill().expect("SIGKILL the server");
    child.wait().expect("reap");
    let st = w.wait().expect("writer");
    assert!(
        st.success(),
        "the writer should end on the broken connection: {st}"
    );
    let lines = std::fs::read_to_string(&acks)
        .expect("acks")
        .lines()
        .count();
    assert!(
        lines > 100,
        "only {lines} acknowledged writes before the kill"
    );
    let (_srv, port) = serve(&pool, &[]);
    let o = run_ok(Command::new(&py).args([
        script,
        "verify",
        &port.to_string(),
        acks.to_str().expect("utf-8"),
    ]));
    println!(
        "{lines} acknowledged writes; {}",
        String::from_utf8_lossy(&o.stdout).trim()
    );
}
