//! `masse top --metrics URL`: a live console over a running command's `/metrics`
//! (serve nbd, mount, bench, stress). Every interval it scrapes, subtracts the
//! previous scrape and draws: ops/s and MB/s per kind, p50/p99/p99.9 of the interval
//! from the latency histograms' bucket deltas, IOPS consistency so far (PM863
//! definition, over the intervals seen), host WAF and per-device figures with the
//! lifetime bytes written against a rated endurance, GC, pad and band occupancy.

use crate::error::{CliError, CliResult};
use clap::Args;
use masse_cli::qos::iops_consistency;
use masse_cli::units::fmt_bytes;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct TopArgs {
    /// The metrics endpoint of a running masse command, as it printed it ("metrics on
    /// http://127.0.0.1:9100/metrics"); ADDR:PORT alone is accepted too.
    #[arg(long, value_name = "URL")]
    pub metrics: String,
    /// Seconds between refreshes. Default: 1.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Rated endurance of each capacity device in terabytes written (from its data
    /// sheet, e.g. 1400 for a 7.68 TB QLC drive at 0.1 DWPD over 5 years), to show the
    /// share used. Default: not shown.
    #[arg(long, value_name = "TB")]
    pub rated_tbw: Option<f64>,
    /// Draw this many frames and exit. Default: until q, Esc or Ctrl-C.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Send the bearer token on the first line of FILE (for a command started with
    /// --metrics-token-file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
}

/// One scrape: metric name → (labels, value) samples.
#[derive(Default, Clone)]
pub struct Scrape(BTreeMap<String, Vec<(String, f64)>>);

impl Scrape {
    /// Parse the Prometheus text format (comments skipped; labels kept as written).
    pub fn parse(text: &str) -> Scrape {
        let mut m: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((key, v)) = l.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = v.parse::<f64>() else { continue };
            let (name, labels) = match key.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (key, ""),
            };
            m.entry(name.to_string())
                .or_default()
                .push((labels.to_string(), v));
        }
        Scrape(m)
    }
    fn all(&self, name: &str) -> &[(String, f64)] {
        self.0.get(name).map_or(&[], |v| v.as_slice())
    }
    /// The value of `name` with a label set containing `want` (or unlabelled).
    fn get(&self, name: &str, want: &str) -> f64 {
        self.all(name)
            .iter()
            .find(|(l, _)| l.contains(want))
            .map_or(0.0, |x| x.1)
    }
}

/// The value of label `k` in a label string `a="x",k="y"`.
fn label<'a>(labels: &'a str, k: &str) -> &'a str {
    let pat = format!("{k}=\"");
    labels
        .find(&pat)
        .map(|i| &labels[i + pat.len()..])
        .and_then(|s| s.split('"').next())
        .unwrap_or("")
}

/// Interval latency quantile from two scrapes of `masse_op_latency_seconds` for
/// `op`: linear within the bucket that holds it. `None` without samples.
pub fn interval_quantile(prev: &Scrape, cur: &Scrape, op: &str, q: f64) -> Option<f64> {
    let want = format!("op=\"{op}\"");
    let mut rows: Vec<(f64, f64)> = cur
        .all("masse_op_latency_seconds_bucket")
        .iter()
        .filter(|(l, _)| l.contains(&want))
        .map(|(l, v)| {
            let le = label(l, "le");
            let b = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (b, v - prev.get("masse_op_latency_seconds_bucket", l))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = rows.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let target = q * total;
    let (mut lo_b, mut lo_c) = (0.0, 0.0);
    for (b, c) in rows {
        if c >= target {
            if b.is_infinite() {
                return Some(lo_b);
            }
            let f = if c > lo_c {
                (target - lo_c) / (c - lo_c)
            } else {
                1.0
            };
            return Some(lo_b + f * (b - lo_b));
        }
        (lo_b, lo_c) = (b, c);
    }
    None
}

fn fmt_lat(s: Option<f64>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s < 1e-3 => format!("{:.0}µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.2}ms", s * 1e3),
        Some(s) => format!("{s:.2}s"),
    }
}

/// What the console remembers between frames.
#[derive(Default)]
pub struct History {
    /// Total user operations per interval, for IOPS consistency.
    pub iops: Vec<u64>,
}

/// The lines of one frame: `cur` against `prev`, `dt` seconds apart.
pub fn frame(
    prev: &Scrape,
    cur: &Scrape,
    dt: f64,
    h: &mut History,
    tbw: Option<f64>,
) -> Vec<String> {
    let d = |n: &str, l: &str| (cur.get(n, l) - prev.get(n, l)).max(0.0);
    let mut out = Vec::new();
    let ops = ["put", "get", "delete", "batch"];
    // Puts and deletes count every record, those of batches too: a batch is not one more op.
    let total: f64 = ops[..3]
        .iter()
        .map(|o| d("masse_ops_total", &format!("op=\"{o}\"")))
        .sum();
    h.iops.push((total / dt).round() as u64);
    let cons = iops_consistency(&h.iops).map_or("-".into(), |c| format!("{c:.1}%"));
    out.push(format!(
        "interval {dt:.1}s   ops/s {:>10.0}   IOPS consistency so far {cons} ({} intervals)",
        total / dt,
        h.iops.len()
    ));
    out.push(format!(
        "user MB/s   write {:>8.1}   read {:>8.1}",
        d("masse_user_written_bytes_total", "") / dt / 1e6,
        d("masse_user_read_bytes_total", "") / dt / 1e6
    ));
    out.push(String::new());
    out.push(format!(
        "{:<8} {:>10} {:>10} {:>10} {:>10}",
        "OP", "ops/s", "p50", "p99", "p99.9"
    ));
    for o in ops {
        let q = |x| interval_quantile(prev, cur, o, x);
        out.push(format!(
            "{o:<8} {:>10.0} {:>10} {:>10} {:>10}",
            d("masse_ops_total", &format!("op=\"{o}\"")) / dt,
            fmt_lat(q(0.5)),
            fmt_lat(q(0.99)),
            fmt_lat(q(0.999))
        ));
    }
    out.push(String::new());
    out.extend(engine_lines(prev, cur, dt));
    out.push(String::new());
    out.extend(device_lines(prev, cur, dt, tbw));
    out
}

fn engine_lines(prev: &Scrape, cur: &Scrape, dt: f64) -> Vec<String> {
    let d = |n: &str| (cur.get(n, "") - prev.get(n, "")).max(0.0);
    let g = |n: &str, l: &str| cur.get(n, l);
    let pad = 100.0 * g("masse_pad_used_bytes", "") / g("masse_pad_size_bytes", "").max(1.0);
    let (free, used) = (
        g("masse_bands", "state=\"free\""),
        g("masse_bands", "state=\"used\""),
    );
    vec![
        format!(
            "WAF host {:.2}   GC passes {} (+{})  bands freed +{}  moved {:.1} MB/s   stalls +{} ({:.0} ms)",
            g("masse_host_write_amplification", ""),
            g("masse_gc_passes_total", ""),
            d("masse_gc_passes_total"),
            d("masse_gc_bands_freed_total"),
            d("masse_gc_moved_bytes_total") / dt / 1e6,
            d("masse_write_stalls_total"),
            d("masse_write_stall_seconds_total") * 1e3
        ),
        format!(
            "pad {pad:.1}% of {}   bands {used} used / {free} free ({:.1}% used)   live {}   index {} entries, {}",
            fmt_bytes(g("masse_pad_size_bytes", "") as u64),
            100.0 * used / (used + free).max(1.0),
            fmt_bytes(g("masse_live_bytes", "") as u64),
            g("masse_index_entries", ""),
            fmt_bytes(g("masse_index_bytes", "") as u64)
        ),
    ]
}

fn device_lines(prev: &Scrape, cur: &Scrape, dt: f64, tbw: Option<f64>) -> Vec<String> {
    let mut out = vec![format!(
        "{:<9} {:>9} {:>9} {:>12} {:>9}  {}",
        "DEVICE", "wr MB/s", "rd MB/s", "written", "of TBW", "path"
    )];
    for (l, w) in cur.all("masse_device_written_bytes_total") {
        let path = label(l, "device");
        let role = label(l, "role");
        let rd = cur.get("masse_device_read_bytes_total", l)
            - prev.get("masse_device_read_bytes_total", l);
        let life = match tbw {
            Some(t) if role == "capacity" => match 100.0 * w / (t * 1e12) {
                p if p >= 0.01 => format!("{p:.2}%"),
                p => format!("{p:.1e}%"),
            },
            _ => "-".into(),
        };
        out.push(format!(
            "{role:<9} {:>9.1} {:>9.1} {:>12} {life:>9}  {path}",
            (w - prev.get("masse_device_written_bytes_total", l)).max(0.0) / dt / 1e6,
            rd.max(0.0) / dt / 1e6,
            fmt_bytes(*w as u64),
        ));
    }
    for (l, nand) in cur.all("masse_emulated_nand_written_bytes_total") {
        let host = cur.get("masse_emulated_host_written_bytes_total", l);
        if host > 0.0 {
            out.push(format!(
                "  {}: device WAF {:.2} (NAND / host bytes)",
                label(l, "device"),
                nand / host
            ));
        }
    }
    out
}

fn url_of(s: &str) -> String {
    let u = if s.contains("://") {
        s.to_string()
    } else {
        format!("http://{s}")
    };
    match u.split_once("://").map(|(_, r)| r.contains('/')) {
        Some(true) => u,
        _ => format!("{u}/metrics"),
    }
}

fn fetch(agent: &ureq::Agent, url: &str, token: Option<&str>) -> CliResult<Scrape> {
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let body = req
        .call()
        .and_then(|mut r| r.body_mut().read_to_string())
        .map_err(|e| CliError::new(format!("scraping {url}: {e}")))?;
    Ok(Scrape::parse(&body))
}

pub fn run(a: &TopArgs) -> CliResult<i32> {
    let url = url_of(&a.metrics);
    let token = crate::metrics::MetricsArgs {
        token_file: a.token_file.clone(),
        ..Default::default()
    }
    .token()?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let interval = Duration::from_secs_f64(a.interval.max(0.1));
    let tty = std::io::stdout().is_terminal();
    let _screen = if tty { Some(Screen::enter()?) } else { None };
    let (mut prev, mut t_prev) = (fetch(&agent, &url, token.as_deref())?, Instant::now());
    let mut h = History::default();
    let mut frames = 0u64;
    loop {
        if wait_or_quit(interval, tty)? {
            return Ok(0);
        }
        let cur = fetch(&agent, &url, token.as_deref())?;
        let now = Instant::now();
        let mut lines = vec![format!("masse top — {url}   (q to quit)"), String::new()];
        lines.extend(frame(
            &prev,
            &cur,
            (now - t_prev).as_secs_f64(),
            &mut h,
            a.rated_tbw,
        ));
        draw(&lines, tty)?;
        (prev, t_prev) = (cur, now);
        frames += 1;
        if a.count.is_some_and(|c| frames >= c) {
            return Ok(0);
        }
    }
}

/// Raw mode on the alternate screen for the life of the console.
struct Screen;

impl Screen {
    fn enter() -> CliResult<Screen> {
        use crossterm::{cursor, terminal, ExecutableCommand};
        let e = |e: std::io::Error| CliError::new(format!("terminal: {e}"));
        terminal::enable_raw_mode().map_err(e)?;
        let mut o = std::io::stdout();
        o.execute(terminal::EnterAlternateScreen).map_err(e)?;
        o.execute(cursor::Hide).map_err(e)?;
        Ok(Screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        use crossterm::{cursor, terminal, ExecutableCommand};
        let mut o = std::io::stdout();
        let _ = o.execute(cursor::Show);
        let _ = o.execute(terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

/// Sleep for `d`, returning early with `true` on q, Esc or Ctrl-C (on a terminal).
fn wait_or_quit(d: Duration, tty: bool) -> CliResult<bool> {
    use crossterm::event::{self, Event, KeyCode, KeyModifiers};
    if !tty {
        std::thread::sleep(d);
        return Ok(false);
    }
    let end = Instant::now() + d;
    let e = |e: std::io::Error| CliError::new(format!("terminal: {e}"));
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if !event::poll(left).map_err(e)? {
            break;
        }
        if let Event::Key(k) = event::read().map_err(e)? {
            let ctrl_c =
                k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
            if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn draw(lines: &[String], tty: bool) -> CliResult<()> {
    use crossterm::{cursor, terminal, QueueableCommand};
    let mut o = std::io::stdout().lock();
    let r = (|| -> std::io::Result<()> {
        if tty {
            o.queue(cursor::MoveTo(0, 0))?;
            o.queue(terminal::Clear(terminal::ClearType::All))?;
            for l in lines {
                write!(o, "{l}\r\n")?;
            }
        } else {
            for l in lines {
                writeln!(o, "{l}")?;
            }
            writeln!(o)?;
        }
        o.flush()
    })();
    r.map_err(|e| CliError::new(format!("writing the console: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(counts: &[(&str, f64)]) -> Scrape {
        let mut t = String::new();
        for (le, c) in counts {
            t.push_str(&format!(
                "masse_op_latency_seconds_bucket{{op=\"get\",le=\"{le}\"}} {c}\n"
            ));
        }
        Scrape::parse(&t)
    }

    #[test]
    fn interval_quantiles_come_from_bucket_deltas() {
        let prev = hist(&[("0.001", 100.0), ("0.002", 100.0), ("+Inf", 100.0)]);
        // This interval: 50 in (0, 1 ms], 50 in (1 ms, 2 ms].
        let cur = hist(&[("0.001", 150.0), ("0.002", 200.0), ("+Inf", 200.0)]);
        let p50 = interval_quantile(&prev, &cur, "get", 0.5).unwrap();
        assert!((p50 - 0.001).abs() < 1e-12, "{p50}");
        let p99 = interval_quantile(&prev, &cur, "get", 0.99).unwrap();
        assert!((p99 - 0.00198).abs() < 1e-9, "{p99}");
        assert_eq!(interval_quantile(&cur, &cur, "get", 0.5), None);
    }

    #[test]
    fn a_frame_shows_rates_and_consistency() {
        let p =
            Scrape::parse("masse_ops_total{op=\"put\"} 100\nmasse_user_written_bytes_total 0\n");
        let c = Scrape::parse(
            "masse_ops_total{op=\"put\"} 2100\nmasse_user_written_bytes_total 4000000\n",
        );
        let mut h = History::default();
        let f = frame(&p, &c, 2.0, &mut h, None).join("\n");
        assert!(f.contains("ops/s       1000"), "{f}");
        assert!(f.contains("write      2.0"), "{f}");
        assert_eq!(h.iops, vec![1000]);
        assert!(f.contains("IOPS consistency so far 100.0%"), "{f}");
    }
}
