//! `masse serve resp --metrics`: the RESP face's counters and the engine's next to
//! them, scraped with curl and valid for `promtool check metrics`; the counts match
//! the commands sent.
#[path = "nbd_support/mod.rs"]
mod nbd_support;
mod resp_support;
use resp_support::*;
use std::collections::HashMap;
use std::process::{Command, Stdio};

fn scrape_checked(url: &str) -> HashMap<String, f64> {
    let o = run_ok(Command::new("curl").args(["-sf", "--max-time", "10", url]));
    let body = String::from_utf8(o.stdout).expect("utf-8 exposition");
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    use std::io::Write;
    p.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed promtool");
    let out = p.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

#[test]
fn resp_metrics_count_commands_and_pass_promtool() {
    if !have_tool("curl") || !have_tool("promtool") {
        return;
    }
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &["--metrics", "127.0.0.1:0"]);
    let url = srv
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("metrics on "))
        .unwrap_or_else(|| panic!("no metrics address in {:?}", srv.stdout))
        .to_string();
    let mut c = Raw::connect(port);
    assert_eq!(c.cmd(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.cmd(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.cmd(&["GET", "absent"]), "$-1\r\n");
    let m = scrape_checked(&url);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no sample {k}"));
    assert_eq!(get("masse_resp_events_total{kind=\"commands\"}"), 3.0);
    assert_eq!(get("masse_resp_events_total{kind=\"hits\"}"), 1.0);
    assert_eq!(get("masse_resp_events_total{kind=\"misses\"}"), 1.0);
    assert_eq!(get("masse_resp_connected"), 1.0);
    assert!(get("masse_resp_network_bytes_total{direction=\"in\"}") > 0.0);
    // The engine's own families are served next to the face's.
    assert!(
        m.keys().any(|k| k.starts_with("masse_ops_total")),
        "no engine counters in {:?}",
        m.keys().collect::<Vec<_>>()
    );
}
