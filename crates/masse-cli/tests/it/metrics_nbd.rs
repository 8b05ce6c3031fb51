//! Scenario: `masse serve nbd --metrics` under fio load. Every scrape (curl, a real
//! HTTP client) passes `promtool check metrics`; scrapes taken while fio writes show
//! the counters moving; after fio, the NBD write requests and the engine's puts have
//! grown by exactly the writes fio says it issued, and reads likewise.
use crate::nbd_support;
use nbd_support::*;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(m: &HashMap<String, f64>, k: &str) -> f64 {
    *m.get(k)
        .unwrap_or_else(|| panic!("no sample {k} in the scrape"))
}

fn fio_ios(out: &str, dir: &str) -> u64 {
    // fio may print notes (e.g. about the nbd engine) before its JSON object.
    let start = match out.starts_with('{') {
        true => 0,
        false => out.find("\n{").map_or(0, |i| i + 1),
    };
    let json = &out[start..];
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("fio JSON: {e}\n{out}"));
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j[dir]["total_ios"].as_u64().expect("total_ios"))
        .sum()
}

#[test]
fn scrape_under_fio_load_passes_promtool_and_counts_the_load() {
    if !have_tool("fio") || !have_tool("curl") || !have_tool("promtool") {
        return;
    }
    let p = Pool::create("128M", "1G");
    let s = p.serve(&["--export", "d", "--size", "64M", "--metrics", "127.0.0.1:0"]);
    let url = s
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("metrics on "))
        .expect("the server prints its metrics URL")
        .to_string();
    let before = samples(&scrape(&url));
    assert_eq!(get(&before, "masse_pool_open"), 1.0);
    let w = "masse_nbd_requests_total{type=\"write\"}";
    let r = "masse_nbd_requests_total{type=\"read\"}";
    let puts = "masse_ops_total{op=\"put\"}";
    assert_eq!(get(&before, w), 0.0);

    let fio = Command::new("fio")
        .current_dir(p.dir.path())
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", p.uri("d")),
            "--rw=randrw",
            "--rwmixread=30",
            "--bs=4k",
            "--iodepth=8",
            "--numjobs=2",
            "--size=16M",
            "--offset_increment=16M",
            "--time_based",
            "--runtime=4",
            "--verify_state_save=0",
            "--output-format=json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fio");
    // While fio runs: the write counter keeps moving between scrapes.
    let t0 = Instant::now();
    let mut seen = vec![get(&before, w)];
    while t0.elapsed() < Duration::from_millis(3000) {
        std::thread::sleep(Duration::from_millis(700));
        seen.push(get(&samples(&scrape(&url)), w));
    }
    let out = fio.wait_with_output().expect("fio");
    let fio_json = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "fio: {fio_json}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        seen.windows(2).filter(|x| x[1] > x[0]).count() >= 2,
        "NBD write counter did not move during the load: {seen:?}"
    );

    let after = samples(&scrape(&url));
    let writes = fio_ios(&fio_json, "write");
    let reads = fio_ios(&fio_json, "read");
    assert!(
        writes > 100 && reads > 50,
        "fio did too little: {writes} writes, {reads} reads"
    );
    assert_eq!(
        get(&after, w) - get(&before, w),
        writes as f64,
        "NBD writes vs fio"
    );
    assert_eq!(
        get(&after, r) - get(&before, r),
        reads as f64,
        "NBD reads vs fio"
    );
    // One 4 KiB chunk per 4 KiB write: one engine put each.
    assert_eq!(
        get(&after, puts) - get(&before, puts),
        writes as f64,
        "engine puts vs fio"
    );
    let wb = "masse_nbd_payload_bytes_total{direction=\"write\"}";
    assert_eq!(get(&after, wb), (writes * 4096) as f64);
    assert!(get(&after, "masse_user_written_bytes_total") >= (writes * 4096) as f64);
    // Latency histograms counted every batch the volume layer wrote.
    let batches = "masse_ops_total{op=\"batch\"}";
    assert_eq!(
        get(&after, "masse_op_latency_seconds_count{op=\"batch\"}"),
        get(&after, batches)
    );
    assert_eq!(
        get(
            &after,
            "masse_op_latency_seconds_bucket{op=\"batch\",le=\"+Inf\"}"
        ),
        get(&after, batches)
    );
    let dev_written: f64 = after
        .iter()
        .filter(|(k, _)| k.starts_with("masse_device_written_bytes_total{"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        dev_written > (writes * 4096) as f64,
        "devices wrote {dev_written}"
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}
