//! `--metrics ADDR:PORT`: the engine's and the faces' figures in the Prometheus text
//! format (0.0.4, what `promtool check metrics` validates), served at `/metrics` by a
//! small HTTP server on its own thread.
//!
//! Nothing is copied or polled in the background: every scrape reads the live
//! counters (`Db::stats`, `Db::latency_buckets`, a face's atomics) and encodes them
//! with the `prometheus` crate's text encoder. The engine knows nothing of this module.
//!
//! A command builds a [`Metrics`], hands it the pool through an [`EngineSlot`] (which
//! it empties before closing the pool, so a scrape never keeps the pool open), adds
//! its face's figures with one call per family ([`Metrics::counters`],
//! [`Metrics::gauges`]), and starts the server with [`start`].

use crate::metrics_http::{HttpServer, Reply, Request};
use masse::Db;
use parking_lot::RwLock;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};
use std::path::PathBuf;
use std::sync::Arc;

/// Upper bounds of the latency histograms, seconds: 1-1.5-2-3-5-7 per decade from
/// 1 µs to 50 s, fine enough that `masse top` can interpolate interval percentiles.
pub fn latency_bounds() -> Vec<f64> {
    let steps = [1.0, 1.5, 2.0, 3.0, 5.0, 7.0];
    let mut v = Vec::new();
    for exp in -6..=1 {
        for s in steps {
            // Rounded to 9 decimals so the `le` labels read 0.0000015, not 0.0000015000000000000002.
            let b = (s * 10f64.powi(exp) * 1e9).round() / 1e9;
            if b <= 50.0 {
                v.push(b);
            }
        }
    }
    v
}

/// The pool a scrape reports on. Empty before the pool is open and after it is
/// closed; scrapes then carry only the faces' figures.
#[derive(Default)]
pub struct EngineSlot {
    db: RwLock<Option<Arc<Db>>>,
}

impl EngineSlot {
    pub fn new() -> Arc<EngineSlot> {
        Arc::new(EngineSlot::default())
    }
    /// Report on `db` from now on.
    pub fn set(&self, db: Arc<Db>) {
        *self.db.write() = Some(db);
    }
    /// Stop reporting on the pool; waits for a scrape in progress, so the caller
    /// holds the last reference afterwards (and can `close` it).
    pub fn clear(&self) {
        self.db.write().take();
    }
    /// The pool, for the length of one scrape.
    pub fn db_read(&self) -> parking_lot::RwLockReadGuard<'_, Option<Arc<Db>>> {
        self.db.read()
    }
}

/// One sample of a labelled family: its labels and value.
pub type Row = (Vec<(&'static str, String)>, f64);

pub fn row(labels: &[(&'static str, &str)], v: f64) -> Row {
    (labels.iter().map(|(k, x)| (*k, x.to_string())).collect(), v)
}

/// The metric families of one scrape, named `masse_…` (counters `…_total`).
#[derive(Default)]
pub struct Fams(pub Vec<MetricFamily>);

fn labels(l: &[(&'static str, String)]) -> Vec<LabelPair> {
    l.iter()
        .map(|(k, v)| {
            let mut p = LabelPair::default();
            p.set_name(k.to_string());
            p.set_value(v.clone());
            p
        })
        .collect()
}

impl Fams {
    fn push(&mut self, name: &str, help: &str, ty: MetricType, metrics: Vec<Metric>) {
        if metrics.is_empty() {
            return; // the text format has no empty families
        }
        let suffix = if ty == MetricType::COUNTER {
            "_total"
        } else {
            ""
        };
        let mut f = MetricFamily::default();
        f.set_name(format!("masse_{name}{suffix}"));
        f.set_help(help.to_string());
        f.set_field_type(ty);
        f.set_metric(metrics);
        self.0.push(f);
    }
    pub fn counter(&mut self, name: &str, help: &str, v: f64) {
        self.family(name, help, true, &[(Vec::new(), v)]);
    }
    pub fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.family(name, help, false, &[(Vec::new(), v)]);
    }
    /// A counter or gauge family with one sample per row.
    pub fn family(&mut self, name: &str, help: &str, counter: bool, rows: &[Row]) {
        let ms = rows
            .iter()
            .map(|(l, v)| {
                let mut m = Metric::default();
                m.set_label(labels(l));
                if counter {
                    let mut c = Counter::default();
                    c.set_value(v.max(0.0));
                    m.set_counter(c);
                } else {
                    let mut g = Gauge::default();
                    g.set_value(*v);
                    m.set_gauge(g);
                }
                m
            })
            .collect();
        let ty = if counter {
            MetricType::COUNTER
        } else {
            MetricType::GAUGE
        };
        self.push(name, help, ty, ms);
    }
    /// A histogram family: per row its labels, sample count, sum and cumulative
    /// counts at `bounds`.
    pub fn histograms(&mut self, name: &str, help: &str, bounds: &[f64], rows: Vec<HistRow>) {
        let ms = rows
            .into_iter()
            .map(|r| {
                let mut h = Histogram::default();
                h.set_sample_count(r.count);
                h.set_sample_sum(r.sum);
                h.set_bucket(
                    bounds
                        .iter()
                        .zip(r.cumulative)
                        .map(|(&b, c)| {
                            let mut k = Bucket::default();
                            k.set_upper_bound(b);
                            k.set_cumulative_count(c.min(r.count));
                            k
                        })
                        .collect(),
                );
                let mut m = Metric::default();
                m.set_label(labels(&r.labels));
                m.set_histogram(h);
                m
            })
            .collect();
        self.push(name, help, MetricType::HISTOGRAM, ms);
    }
}

/// One histogram of a family.
pub struct HistRow {
    pub labels: Vec<(&'static str, String)>,
    pub count: u64,
    pub sum: f64,
    pub cumulative: Vec<u64>,
}

type Read = Box<dyn Fn() -> Vec<(String, f64)> + Send + Sync>;

/// One family of figures a face registered: a name, its help, one label and a
/// function reading the current values per label value.
struct Family {
    name: String,
    help: String,
    counter: bool,
    label: &'static str,
    read: Read,
}

/// The figures a command exports.
#[derive(Default)]
pub struct Metrics {
    engine: Option<Arc<EngineSlot>>,
    faces: Vec<Family>,
    /// Label devices with their paths (`--metrics-paths`), not dev0, dev1, ...
    pub paths: bool,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Export the engine figures of whatever pool `slot` holds at scrape time.
    pub fn engine(&mut self, slot: Arc<EngineSlot>) {
        self.engine = Some(slot);
    }

    /// A family of counters `masse_<name>_total{<label>="…"}`: `read` returns the
    /// current value per label value (with an empty `label`, one value and no label).
    /// The one call a face needs per family, e.g.
    /// `m.counters("nbd_requests", "NBD requests by type", "type", move || …)`.
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        label: &'static str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) {
        self.add(name, help, true, label, Box::new(read));
    }

    /// A family of gauges `masse_<name>{<label>="…"}`, as [`Metrics::counters`].
    pub fn gauges(
        &mut self,
        name: &str,
        help: &str,
        label: &'static str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) {
        self.add(name, help, false, label, Box::new(read));
    }

    fn add(&mut self, name: &str, help: &str, counter: bool, label: &'static str, read: Read) {
        self.faces.push(Family {
            name: name.to_string(),
            help: help.to_string(),
            counter,
            label,
            read,
        });
    }

    /// The current exposition in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut f = Fams::default();
        if let Some(slot) = &self.engine {
            crate::metrics_engine::collect(&mut f, slot, self.paths);
        }
        for fam in &self.faces {
            let rows: Vec<Row> = (fam.read)()
                .into_iter()
                .map(|(lv, v)| {
                    let l = if fam.label.is_empty() {
                        Vec::new()
                    } else {
                        vec![(fam.label, lv)]
                    };
                    (l, v)
                })
                .collect();
            f.family(&fam.name, &fam.help, fam.counter, &rows);
        }
        let mut out = Vec::with_capacity(32 << 10);
        if let Err(e) = TextEncoder::new().encode(&f.0, &mut out) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Serve `/metrics` on `addr` (port 0 picks one) until the returned server is
    /// dropped; with a `token`, only to requests that carry it.
    pub fn serve(self, addr: &str, token: Option<String>) -> std::io::Result<MetricsServer> {
        let h = move |r: &Request| handle(&self, token.as_deref(), r);
        let http = HttpServer::start(addr, Arc::new(h))?;
        Ok(MetricsServer { http })
    }
}

/// Constant-time comparison: the time taken says nothing about a wrong token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn handle(m: &Metrics, token: Option<&str>, r: &Request) -> Reply {
    if let Some(t) = token {
        let given = r
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.trim().as_bytes(), t.as_bytes())) {
            let mut rep = Reply::text(401, "unauthorized: send Authorization: Bearer <token>\n");
            rep.headers = "WWW-Authenticate: Bearer realm=\"masse\"\r\n".into();
            return rep;
        }
    }
    match (r.method.as_str(), r.path.as_str()) {
        ("GET", "/metrics") => Reply {
            status: 200,
            content_type: prometheus::TEXT_FORMAT,
            body: m.render(),
            headers: String::new(),
        },
        ("GET", "/") => Reply::text(200, "masse: GET /metrics for the Prometheus text format\n"),
        ("GET", _) => Reply::text(404, "not found\n"),
        _ => Reply::text(405, "method not allowed\n"),
    }
}

/// A running `/metrics` server; stops when dropped.
pub struct MetricsServer {
    http: HttpServer,
}

impl MetricsServer {
    /// The address actually listened on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.http.addr()
    }
}

/// The `--metrics` option of every long-running command.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serve live figures at http://ADDR:PORT/metrics in the Prometheus text format
    /// (every engine counter, latency histograms per operation, per-device I/O, and
    /// this command's own figures), e.g. 127.0.0.1:9187, or just a PORT for
    /// 127.0.0.1 (loopback: other machines need an explicit address); port 0 picks a
    /// free port, printed at start. Watch them with `masse top --metrics URL` or
    /// Prometheus. Requests are limited to 8 KiB and 5 s, answered by 4 threads
    /// with 16 more connections queued (more get 503). Default: off.
    #[arg(
        long = "metrics",
        value_name = "[ADDR:]PORT",
        help_heading = "Monitoring"
    )]
    pub addr: Option<String>,

    /// Serve /metrics only to requests with `Authorization: Bearer TOKEN`, TOKEN
    /// being the first line of FILE (others get 401).
    #[arg(
        long = "metrics-token-file",
        value_name = "FILE",
        help_heading = "Monitoring"
    )]
    pub token_file: Option<PathBuf>,

    /// Label per-device figures with the devices' paths. Default: dev0, dev1, ...
    /// (in the pool's order), so a scrape does not tell the machine's disk layout.
    #[arg(long = "metrics-paths", help_heading = "Monitoring")]
    pub paths: bool,
}

impl MetricsArgs {
    /// The address to listen on: a bare port means loopback.
    pub fn listen_addr(&self) -> Option<String> {
        let a = self.addr.as_deref()?;
        Some(if a.parse::<u16>().is_ok() {
            format!("127.0.0.1:{a}")
        } else {
            a.to_string()
        })
    }

    /// The bearer token, if a file was given.
    pub fn token(&self) -> crate::error::CliResult<Option<String>> {
        let Some(f) = &self.token_file else {
            return Ok(None);
        };
        let t = std::fs::read_to_string(f).map_err(|e| {
            crate::error::CliError::new(format!("--metrics-token-file {}: {e}", f.display()))
        })?;
        let line = t.lines().next().unwrap_or("").trim();
        if line.is_empty() {
            return Err(crate::error::CliError::new(format!(
                "--metrics-token-file {}: the first line (the token) is empty",
                f.display()
            )));
        }
        Ok(Some(line.to_string()))
    }
}

/// Start `/metrics` if an address was given, and say where on stdout.
pub fn start(a: &MetricsArgs, m: Metrics) -> crate::error::CliResult<Option<MetricsServer>> {
    start_on(a, m, true)
}

/// As [`start`]; the address goes to stderr unless `stdout` (whose output a parent
/// process may be parsing).
pub fn start_on(
    a: &MetricsArgs,
    mut m: Metrics,
    stdout: bool,
) -> crate::error::CliResult<Option<MetricsServer>> {
    let Some(addr) = a.listen_addr() else {
        return Ok(None);
    };
    let token = a.token()?;
    m.paths = a.paths;
    let s = m
        .serve(&addr, token.clone())
        .map_err(|e| crate::error::CliError::new(format!("--metrics {addr}: {e}")))?;
    if !s.addr().ip().is_loopback() && token.is_none() {
        eprintln!(
            "masse: note: metrics on {} are readable from other machines without a token (--metrics-token-file)",
            s.addr()
        );
    }
    if stdout {
        println!("metrics on http://{}/metrics", s.addr());
        let _ = std::io::Write::flush(&mut std::io::stdout());
    } else {
        eprintln!("metrics on http://{}/metrics", s.addr());
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_ascend_from_a_microsecond() {
        let b = latency_bounds();
        assert_eq!(b[0], 1e-6);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(*b.last().unwrap() <= 50.0);
        assert!(b.iter().all(|x| x.to_string().len() < 12), "{b:?}");
    }

    #[test]
    fn a_face_family_is_encoded_with_its_label() {
        let mut m = Metrics::new();
        m.counters("demo_requests", "Demo requests by type", "type", || {
            vec![("read".into(), 3.0), ("write".into(), 4.0)]
        });
        m.gauges("demo_level", "A level", "", || vec![(String::new(), 7.5)]);
        let s = m.render();
        assert!(
            s.contains("# TYPE masse_demo_requests_total counter"),
            "{s}"
        );
        assert!(
            s.contains("masse_demo_requests_total{type=\"read\"} 3"),
            "{s}"
        );
        assert!(
            s.contains("masse_demo_requests_total{type=\"write\"} 4"),
            "{s}"
        );
        assert!(s.contains("masse_demo_level 7.5"), "{s}");
    }
}
