//! The crowd timeline as a hand-written SVG: four stacked panels (queue
//! length, active sessions, admission rate, origin concurrency) sharing one
//! time axis. A few polylines need no plotting crate.

use std::fmt::Write;

use crate::report::Sample;

/// Reads one plotted value from a sample.
type Series = fn(&Sample) -> Option<f64>;

const WIDTH: f64 = 900.0;
const PANEL: f64 = 150.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const GAP: f64 = 40.0;

/// Renders `samples` as an SVG document. `max_active`, when known, is drawn
/// as a dashed limit on the active and origin panels.
pub fn svg(samples: &[Sample], max_active: Option<u64>) -> String {
    let panels: [(&str, &str, Series, bool); 4] = [
        (
            "queue length (waiting visitors)",
            "#1f77b4",
            |s| Some(s.waiting as f64),
            false,
        ),
        (
            "active sessions",
            "#2ca02c",
            |s| Some(s.active as f64),
            true,
        ),
        (
            "admission rate (per second)",
            "#ff7f0e",
            |s| Some(s.admission_rate),
            false,
        ),
        (
            "origin concurrency",
            "#d62728",
            |s| s.origin_concurrency.map(|c| c as f64),
            true,
        ),
    ];
    let height = TOP + 4.0 * (PANEL + GAP);
    let t_max = samples.last().map_or(1.0, |s| s.t_s).max(1e-3);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="18" font-size="14">anteroom-sim crowd timeline ({t_max:.1} s)</text>"#
    );
    for (i, (title, colour, value, limited)) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL + GAP) + 15.0;
        let limit = max_active.filter(|_| *limited).map(|m| m as f64);
        let points: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| Some((s.t_s, value(s)?)))
            .collect();
        let y_max = points
            .iter()
            .map(|p| p.1)
            .chain(limit)
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.05;
        panel(&mut out, top, title, t_max, y_max);
        let x = |t: f64| LEFT + (t / t_max) * (WIDTH - LEFT - RIGHT);
        let y = |v: f64| top + PANEL - (v / y_max) * PANEL;
        if let Some(m) = limit {
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#888" stroke-dasharray="6 4"/><text x="{2:.1}" y="{3:.1}" fill="#888" text-anchor="end">max_active {m}</text>"##,
                y(m),
                WIDTH - RIGHT,
                WIDTH - RIGHT,
                y(m) - 4.0,
            );
        }
        let mut line = String::new();
        for (t, v) in &points {
            let _ = write!(line, "{:.1},{:.1} ", x(*t), y(*v));
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            line.trim_end()
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Frame, title and axis labels of one panel.
fn panel(out: &mut String, top: f64, title: &str, t_max: f64, y_max: f64) {
    let (w, bottom) = (WIDTH - LEFT - RIGHT, top + PANEL);
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top:.1}" width="{w:.1}" height="{PANEL}" fill="none" stroke="#ccc"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}">{title}</text>"#,
        top - 5.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"#,
        LEFT - 5.0,
        top + 10.0,
        y_max
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{bottom:.1}" text-anchor="end">0</text>"#,
        LEFT - 5.0
    );
    for k in 0..=4 {
        let t = t_max * f64::from(k) / 4.0;
        let xk = LEFT + w * f64::from(k) / 4.0;
        let _ = writeln!(
            out,
            r#"<text x="{xk:.1}" y="{:.1}" text-anchor="middle">{t:.1}s</text>"#,
            bottom + 14.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_four_polylines_and_the_limit() {
        let samples: Vec<Sample> = (0..5)
            .map(|i| Sample {
                t_s: f64::from(i) * 0.25,
                waiting: 100 - u64::from(i as u8) * 20,
                active: 3,
                admission_rate: 80.0,
                origin_concurrency: Some(2),
            })
            .collect();
        let svg = svg(&samples, Some(5));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("max_active 5").count(), 2);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }
}
