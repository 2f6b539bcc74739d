//! Two hand-written SVG chart kinds, enough for the paper-style figures: grouped bars and lines.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 64.0;
const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// One named sequence of values; `None` is a missing point.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// One value per category (bars) or per x (lines).
    pub values: Vec<Option<f64>>,
}

/// Bars grouped by category, one colour per series.
pub fn bar_chart(title: &str, y_label: &str, categories: &[String], series: &[Series]) -> String {
    let max = max_value(series);
    let (top, ticks) = axis(max);
    let mut svg = frame(title, y_label, top, &ticks);
    let plot_w = WIDTH - LEFT - RIGHT;
    let group_w = plot_w / categories.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (c, category) in categories.iter().enumerate() {
        let gx = LEFT + c as f64 * group_w;
        for (s, ser) in series.iter().enumerate() {
            let Some(v) = ser.values.get(c).copied().flatten() else {
                continue;
            };
            let h = v / top * (HEIGHT - TOP - BOTTOM);
            let x = gx + group_w * 0.1 + s as f64 * bar_w;
            let y = HEIGHT - BOTTOM - h;
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                bar_w * 0.92,
                COLORS[s % COLORS.len()],
                escape(&ser.name),
                short(v)
            );
            if bar_w >= 22.0 {
                let _ = write!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"#,
                    x + bar_w * 0.46,
                    y - 3.0,
                    short(v)
                );
            }
        }
        category_label(&mut svg, gx + group_w / 2.0, category);
    }
    legend(&mut svg, series);
    svg.push_str("</svg>\n");
    svg
}

/// One line per series over numeric x values.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[Series],
) -> String {
    let (top, ticks) = axis(max_value(series));
    let mut svg = frame(title, y_label, top, &ticks);
    let plot_w = WIDTH - LEFT - RIGHT;
    let (x_min, x_max) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let span = if x_max > x_min { x_max - x_min } else { 1.0 };
    let px = |x: f64| LEFT + 20.0 + (x - x_min) / span * (plot_w - 40.0);
    let py = |v: f64| HEIGHT - BOTTOM - v / top * (HEIGHT - TOP - BOTTOM);
    for &x in xs {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            px(x),
            HEIGHT - BOTTOM + 16.0,
            short(x)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 18.0,
        escape(x_label)
    );
    for (s, ser) in series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        let points: Vec<(f64, f64)> = xs
            .iter()
            .zip(&ser.values)
            .filter_map(|(&x, v)| v.map(|v| (px(x), py(v))))
            .collect();
        if points.len() > 1 {
            let path: Vec<String> = points
                .iter()
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.join(" ")
            );
        }
        for ((x, y), v) in points.iter().zip(ser.values.iter().flatten()) {
            let _ = write!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"><title>{}: {}</title></circle>"#,
                escape(&ser.name),
                short(*v)
            );
        }
    }
    legend(&mut svg, series);
    svg.push_str("</svg>\n");
    svg
}

/// A category name under its group; `name (detail)` goes on two lines so neighbours do not
/// overlap.
fn category_label(svg: &mut String, x: f64, category: &str) {
    let y = HEIGHT - BOTTOM + 16.0;
    let (first, second) = match category.split_once(" (") {
        Some((a, b)) => (a.to_string(), format!("({b}")),
        None => (category.to_string(), String::new()),
    };
    let _ = write!(
        svg,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="11" text-anchor="middle">{}<tspan x="{x:.1}" dy="14">{}</tspan></text>"#,
        escape(&first),
        escape(&second)
    );
}

/// The SVG header, title, y axis with grid lines.
fn frame(title: &str, y_label: &str, top: f64, ticks: &[f64]) -> String {
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="24" font-size="14" font-weight="bold" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let plot_h = HEIGHT - TOP - BOTTOM;
    for &t in ticks {
        let y = HEIGHT - BOTTOM - t / top * plot_h;
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            short(t)
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        HEIGHT - BOTTOM
    );
    let _ = write!(
        svg,
        r#"<text x="18" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    svg
}

fn legend(svg: &mut String, series: &[Series]) {
    for (s, ser) in series.iter().enumerate() {
        let y = TOP + 10.0 + s as f64 * 20.0;
        let x = WIDTH - RIGHT + 14.0;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{}" y="{y:.1}" font-size="11" dominant-baseline="middle">{}</text>"#,
            y - 6.0,
            COLORS[s % COLORS.len()],
            x + 18.0,
            escape(&ser.name)
        );
    }
}

fn max_value(series: &[Series]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

/// A round axis top at or above `max` and its tick values.
fn axis(max: f64) -> (f64, Vec<f64>) {
    let max = if max > 0.0 { max } else { 1.0 };
    let raw_step = max / 5.0;
    let magnitude = 10f64.powf(raw_step.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw_step)
        .unwrap_or(10.0 * magnitude);
    let n = (max / step).ceil().max(1.0) as usize;
    let ticks = (0..=n).map(|i| i as f64 * step).collect();
    (n as f64 * step, ticks)
}

/// 345000 -> "345K", 3.64 -> "3.64", 0.5 -> "0.5".
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}K", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_is_round_and_covers_max() {
        let (top, ticks) = axis(345_000.0);
        assert!((345_000.0..=500_000.0).contains(&top));
        assert_eq!(ticks.first(), Some(&0.0));
        assert_eq!(ticks.last(), Some(&top));
        assert_eq!(axis(0.0).0, 1.0);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(345_123.0), "345K");
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(3.64), "3.64");
        assert_eq!(short(22.0), "22");
        assert_eq!(short(0.5), "0.5");
    }

    #[test]
    fn charts_are_well_formed_and_escaped() {
        let series = vec![
            Series {
                name: "a<b".into(),
                values: vec![Some(1.0), None],
            },
            Series {
                name: "c".into(),
                values: vec![Some(2.0), Some(3.0)],
            },
        ];
        let bars = bar_chart("t", "y", &["x1".into(), "x2".into()], &series);
        assert!(bars.starts_with("<svg") && bars.trim_end().ends_with("</svg>"));
        assert!(bars.contains("a&lt;b") && !bars.contains("a<b"));
        assert_eq!(
            bars.matches("<rect x=").count(),
            3 + 2,
            "3 bars + 2 legend boxes"
        );
        let lines = line_chart("t", "x", "y", &[1.0, 2.0], &series);
        assert_eq!(
            lines.matches("<polyline").count(),
            1,
            "one series has one point"
        );
        assert_eq!(lines.matches("<circle").count(), 3);
    }
}
