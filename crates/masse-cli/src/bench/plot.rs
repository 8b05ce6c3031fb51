//! SVG plots of a benchmark, written by hand (no plotting dependency, no network):
//! latency CDF on log axes, ops/s over time, and latency against throughput.

use super::report::BenchReport;
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy)]
pub enum Scale {
    Lin,
    Log,
    /// Percentiles on a "nines" scale: t(p) = -log10(1 - p).
    Nines,
}

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Markers instead of a line.
    pub dots: bool,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const W: f64 = 760.0;
const H: f64 = 460.0;
const L: f64 = 80.0;
const R: f64 = 170.0;
const T: f64 = 40.0;
const B: f64 = 60.0;

fn tf(s: Scale, v: f64) -> f64 {
    match s {
        Scale::Lin => v,
        Scale::Log => v.max(1e-12).log10(),
        Scale::Nines => -(1.0 - v.min(1.0 - 1e-7)).log10(),
    }
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}K", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Ticks (transformed position, label) over the transformed range [lo, hi].
fn ticks(s: Scale, lo: f64, hi: f64) -> Vec<(f64, String)> {
    match s {
        Scale::Log => {
            let (a, b) = (lo.floor() as i32, hi.ceil() as i32);
            (a..=b)
                .map(|e| (e as f64, fmt_num(10f64.powi(e))))
                .collect()
        }
        Scale::Nines => (0..=(hi.ceil() as i32).max(1))
            .map(|n| {
                let label = match n {
                    0 => "0%".to_string(),
                    1 => "90%".to_string(),
                    _ => format!("99.{}%", "9".repeat(n as usize - 2)).replace("99.%", "99%"),
                };
                (n as f64, label)
            })
            .collect(),
        Scale::Lin => {
            let span = (hi - lo).max(1e-12);
            let raw = span / 6.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|&st| st >= raw)
                .unwrap_or(10.0 * mag);
            let mut v = (lo / step).ceil() * step;
            let mut out = Vec::new();
            while v <= hi + step * 1e-9 {
                out.push((v, fmt_num(v)));
                v += step;
            }
            out
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG chart of `series`.
pub fn chart(title: &str, xl: &str, yl: &str, xs: Scale, ys: Scale, series: &[Series]) -> String {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tf(xs, x), tf(ys, y))))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = pts.iter().fold(
        (f64::MAX, f64::MIN, f64::MAX, f64::MIN),
        |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
    );
    if pts.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if matches!(ys, Scale::Lin) {
        y0 = y0.min(0.0);
    }
    if matches!(ys, Scale::Nines) {
        y0 = 0.0;
    }
    if matches!(xs, Scale::Lin) {
        x0 = x0.min(0.0);
    }
    if matches!(xs, Scale::Log) {
        (x0, x1) = (x0.floor(), x1.ceil());
    }
    if matches!(ys, Scale::Log) {
        (y0, y1) = (y0.floor(), y1.ceil());
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    if matches!(ys, Scale::Lin) {
        y1 *= 1.05;
    }
    let pw = W - L - R;
    let ph = H - T - B;
    let px = |x: f64| L + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| T + ph - (y - y0) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        L + pw / 2.0,
        esc(title)
    );
    for (v, label) in ticks(xs, x0, x1) {
        if v < x0 - 1e-9 || v > x1 + 1e-9 {
            continue;
        }
        let x = px(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            T + ph,
            T + ph + 16.0,
            esc(&label)
        );
    }
    for (v, label) in ticks(ys, y0, y1) {
        if v < y0 - 1e-9 || v > y1 + 1e-9 {
            continue;
        }
        let y = py(v);
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            L + pw,
            L - 6.0,
            y + 4.0,
            esc(&label)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        L + pw / 2.0,
        H - 14.0,
        esc(xl)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        T + ph / 2.0,
        T + ph / 2.0,
        esc(yl)
    );
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let p: Vec<(f64, f64)> = se
            .points
            .iter()
            .map(|&(x, y)| (tf(xs, x), tf(ys, y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| (px(x), py(y)))
            .collect();
        if se.dots {
            for (x, y) in &p {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{c}" fill-opacity="0.6"/>"#
                );
            }
        } else if !p.is_empty() {
            let d: Vec<String> = p.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{}"/>"#,
                d.join(" ")
            );
        }
        let ly = T + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            L + pw + 12.0,
            ly - 10.0,
            L + pw + 30.0,
            ly,
            esc(&se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Points of a latency CDF: (latency µs, cumulative fraction), dense in the tail.
pub fn cdf_points(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    if h.is_empty() {
        return out;
    }
    for i in 0..=300 {
        // Evenly spaced on the nines scale from 0 to 6 nines.
        let q = 1.0 - 10f64.powf(-6.0 * i as f64 / 300.0);
        let q = if i == 0 { 0.0 } else { q };
        out.push((h.value_at_quantile(q) as f64 / 1e3, q));
    }
    out.push((h.max() as f64 / 1e3, 1.0 - 1e-7));
    out
}

/// Write the three plots of a benchmark into `dir`, named `<stem>-*.svg`; returns the paths.
pub fn write_plots(r: &BenchReport, dir: &Path, stem: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut put = |name: &str, svg: String| -> std::io::Result<()> {
        let p = dir.join(format!("{stem}-{name}.svg"));
        std::fs::write(&p, svg)?;
        files.push(p);
        Ok(())
    };
    let cdf: Vec<Series> = r
        .hist
        .iter()
        .map(|(k, h)| Series {
            label: format!("{k} (n={})", h.len()),
            points: cdf_points(h),
            dots: false,
        })
        .collect();
    put(
        "latency-cdf",
        chart(
            &format!("{}: latency CDF", r.name),
            "latency (µs, log scale)",
            "operations completed within",
            Scale::Log,
            Scale::Nines,
            &cdf,
        ),
    )?;
    let mut ts = Vec::new();
    for (k, _) in r.ops_per_interval.iter() {
        if k == "all" && r.ops_per_interval.len() <= 2 {
            continue;
        }
        ts.push(Series {
            label: k.clone(),
            points: r
                .intervals
                .iter()
                .filter_map(|p| p.ops_per_sec.get(k).map(|&v| (p.t, v)))
                .collect(),
            dots: false,
        });
    }
    put(
        "ops-over-time",
        chart(
            &format!("{}: operations per second", r.name),
            &format!("time (s); {}-s intervals", r.interval_secs),
            "ops/s",
            Scale::Lin,
            Scale::Lin,
            &ts,
        ),
    )?;
    let mut lt = Vec::new();
    for (k, _) in r.latency_us.iter() {
        for (label, pick) in [("p99", true), ("p50", false)] {
            lt.push(Series {
                label: format!("{k} {label}"),
                points: r
                    .intervals
                    .iter()
                    .filter_map(|p| {
                        let lat = if pick {
                            p.p99_us.get(k)
                        } else {
                            p.p50_us.get(k)
                        };
                        Some((*p.ops_per_sec.get("all")?, *lat?))
                    })
                    .collect(),
                dots: true,
            });
        }
    }
    put(
        "latency-vs-throughput",
        chart(
            &format!("{}: latency vs throughput (one dot per interval)", r.name),
            "ops/s in the interval (all operations)",
            "latency (µs, log scale)",
            Scale::Lin,
            Scale::Log,
            &lt,
        ),
    )?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_ticks_and_transform() {
        assert!((tf(Scale::Nines, 0.99) - 2.0).abs() < 1e-9);
        let t = ticks(Scale::Nines, 0.0, 3.0);
        let labels: Vec<&str> = t.iter().map(|x| x.1.as_str()).collect();
        assert_eq!(labels, vec!["0%", "90%", "99%", "99.9%"]);
        let svg = chart(
            "t",
            "x",
            "y",
            Scale::Log,
            Scale::Lin,
            &[Series {
                label: "a".into(),
                points: vec![(1.0, 1.0), (1000.0, 2.0)],
                dots: false,
            }],
        );
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    }
}
