//! The ratio chart, written by hand: four panels (keys, hash, list, proc),
//! Ratio in percent against concurrency, one line per measured target and a
//! dashed line at 100% for the single server. Plain SVG 1.1 with inline
//! styles, so any browser or image viewer shows it without other files.
//!
//! Each target's lines and points sit in one
//! `<g class="series" data-target="NAME">`, so a script (or a test) finds one
//! series per target.

use std::fmt::Write as _;

use crate::results::{Report, SetName};

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 700.0;
const PANEL_LEFT: f64 = 70.0;
const PANEL_TOP: f64 = 105.0;
const PANEL_DX: f64 = 470.0;
const PANEL_DY: f64 = 290.0;
const PLOT_W: f64 = 380.0;
const PLOT_H: f64 = 210.0;
/// Colour-blind-friendly (Okabe-Ito) line colours, cycled.
const COLOURS: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// The SVG document for `report`.
pub fn ratio_chart(report: &Report) -> String {
    let levels: Vec<usize> = report.levels.iter().map(|l| l.concurrency).collect();
    let measured: Vec<&str> = report
        .targets
        .iter()
        .filter(|t| !t.baseline)
        .map(|t| t.name.as_str())
        .collect();
    let ratios = |target: &str, set: SetName| -> Vec<Option<f64>> {
        report
            .levels
            .iter()
            .map(|l| {
                let r = l.target(target)?;
                r.ratio_percent.as_ref().map(|p| *p.get(set))
            })
            .collect()
    };
    let highest = measured
        .iter()
        .flat_map(|t| SetName::ALL.iter().flat_map(move |&s| ratios(t, s)))
        .flatten()
        .fold(0.0f64, f64::max);
    let scale = Scale::new(highest, levels.len());

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="{}" y="30" text-anchor="middle" font-size="18" font-weight="bold">Ratio = single avg / target avg (higher is better; 100% = as fast as one redis-server)</text>
<text x="{}" y="52" text-anchor="middle" fill="#444444">{}</text>
<text x="{}" y="68" text-anchor="middle" fill="#444444">{}</text>"##,
        WIDTH / 2.0,
        WIDTH / 2.0,
        escape(&format!(
            "{} on {}",
            report.started,
            report.machine.summary()
        )),
        WIDTH / 2.0,
        escape(&format!(
            "redis-server {}, orthrus {} (git {}); {} commands per set per process, request/response",
            report.machine.redis_version,
            report.machine.orthrus_version,
            report.machine.git_commit,
            report.settings.ops
        ))
    );
    for (i, set) in SetName::ALL.into_iter().enumerate() {
        panel(&mut svg, &scale, set, panel_origin(i), &levels);
    }
    for (n, target) in measured.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let _ = writeln!(
            svg,
            r#"<g class="series" data-target="{}">"#,
            escape(target)
        );
        for (i, set) in SetName::ALL.into_iter().enumerate() {
            series(
                &mut svg,
                &scale,
                panel_origin(i),
                target,
                set,
                colour,
                &ratios(target, set),
            );
        }
        svg.push_str("</g>\n");
    }
    legend(&mut svg, &measured);
    svg.push_str("</svg>\n");
    svg
}

/// Maps levels (evenly spaced, as the original's columns) and percents to
/// panel coordinates.
struct Scale {
    y_max: f64,
    y_step: f64,
    columns: usize,
}

impl Scale {
    fn new(highest: f64, columns: usize) -> Scale {
        let y_step = if highest <= 160.0 {
            20.0
        } else if highest <= 400.0 {
            50.0
        } else {
            100.0
        };
        let y_max = ((highest.max(120.0) / y_step).ceil() * y_step).min(10_000.0);
        Scale {
            y_max,
            y_step,
            columns: columns.max(1),
        }
    }

    fn x(&self, origin: (f64, f64), column: usize) -> f64 {
        origin.0 + (column as f64 + 0.5) * PLOT_W / self.columns as f64
    }

    fn y(&self, origin: (f64, f64), percent: f64) -> f64 {
        origin.1 + PLOT_H - percent.clamp(0.0, self.y_max) / self.y_max * PLOT_H
    }
}

fn panel_origin(i: usize) -> (f64, f64) {
    (
        PANEL_LEFT + (i % 2) as f64 * PANEL_DX,
        PANEL_TOP + (i / 2) as f64 * PANEL_DY,
    )
}

fn panel(svg: &mut String, scale: &Scale, set: SetName, o: (f64, f64), levels: &[usize]) {
    let title = match set {
        SetName::Proc => "proc (all three sets)",
        other => other.as_str(),
    };
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" font-size="14" font-weight="bold">{title}</text>
<rect x="{}" y="{}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#888888"/>"##,
        o.0 + PLOT_W / 2.0,
        o.1 - 10.0,
        o.0,
        o.1
    );
    let mut tick = 0.0;
    while tick <= scale.y_max + 1e-9 {
        let y = scale.y(o, tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{}" y="{:.1}" text-anchor="end" fill="#444444">{tick:.0}%</text>"##,
            o.0,
            o.0 + PLOT_W,
            o.0 - 6.0,
            y + 4.0
        );
        tick += scale.y_step;
    }
    let y100 = scale.y(o, 100.0);
    let _ = writeln!(
        svg,
        r##"<line x1="{}" y1="{y100:.1}" x2="{}" y2="{y100:.1}" stroke="#555555" stroke-dasharray="6,4"/><text x="{}" y="{:.1}" text-anchor="end" fill="#555555" font-size="10">single = 100%</text>"##,
        o.0,
        o.0 + PLOT_W,
        o.0 + PLOT_W - 4.0,
        y100 - 4.0
    );
    for (column, level) in levels.iter().enumerate() {
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#444444">{level}</text>"##,
            scale.x(o, column),
            o.1 + PLOT_H + 16.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#444444">concurrency (worker processes)</text>"##,
        o.0 + PLOT_W / 2.0,
        o.1 + PLOT_H + 34.0
    );
}

fn series(
    svg: &mut String,
    scale: &Scale,
    o: (f64, f64),
    target: &str,
    set: SetName,
    colour: &str,
    ratios: &[Option<f64>],
) {
    let points: Vec<(f64, f64, f64)> = ratios
        .iter()
        .enumerate()
        .filter_map(|(column, r)| r.map(|r| (scale.x(o, column), scale.y(o, r), r)))
        .collect();
    let path: Vec<String> = points
        .iter()
        .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = writeln!(
        svg,
        r#"<polyline data-set="{}" points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
        set.as_str(),
        path.join(" ")
    );
    for (x, y, r) in points {
        let _ = writeln!(
            svg,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"><title>{} {}: {r:.2}%</title></circle>"#,
            escape(target),
            set.as_str()
        );
    }
}

fn legend(svg: &mut String, measured: &[&str]) {
    let y = HEIGHT - 30.0;
    let mut x = PANEL_LEFT;
    for (n, target) in measured.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(target)
        );
        x += 40.0 + 8.0 * target.chars().count() as f64;
    }
}

/// Text made safe for XML character data and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::sample_report;

    #[test]
    fn chart_is_xml_with_one_series_per_measured_target() {
        let report = sample_report();
        let text = ratio_chart(&report);
        let doc = roxmltree::Document::parse(&text).unwrap();
        let series: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|n| n.attribute("data-target").unwrap())
            .collect();
        assert_eq!(series, ["cluster3", "a<b>&\"c"]);
        let polylines = doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .count();
        assert_eq!(polylines, 2 * 4);
        // Each line has a point per level.
        for line in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
            assert_eq!(line.attribute("points").unwrap().split(' ').count(), 2);
        }
        let tips: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text())
            .collect();
        assert!(tips.contains(&"cluster3 keys: 55.56%"), "{tips:?}");
    }

    #[test]
    fn escape_makes_markup_inert() {
        assert_eq!(escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(escape("x\u{1}y"), "x y");
    }

    #[test]
    fn scale_keeps_100_percent_in_view_and_grows_for_big_ratios() {
        let s = Scale::new(58.0, 5);
        assert_eq!((s.y_max, s.y_step), (120.0, 20.0));
        let s = Scale::new(333.0, 5);
        assert_eq!((s.y_max, s.y_step), (350.0, 50.0));
        let o = (0.0, 0.0);
        assert_eq!(s.y(o, 0.0), PLOT_H);
        assert_eq!(s.y(o, 1e9), 0.0);
        assert!(s.x(o, 0) < s.x(o, 4));
    }
}
