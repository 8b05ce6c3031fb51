//! `masse serve resp --metrics`: the RESP face's counters and the engine's next to
//! them, scraped with curl and valid for `promtool check metrics`; the counts match
//! the commands sent.
#[path = "nbd_support/mod.rs"]
mod nbd_support;
mod resp_support;
use nbd_support::{samples, scrape};
use resp_support::*;

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
    let m = samples(&scrape(&url));
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
