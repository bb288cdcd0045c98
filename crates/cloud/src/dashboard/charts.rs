//! Server-rendered SVG bar charts (no script, no inline style: the page's CSP allows neither):
//! one bar per week, a zero drawn as a flat mark on the axis and a missing value as nothing,
//! with the values in a text alternative. Each part has a class that the stylesheet colours
//! for the light or dark theme; the attributes' colours serve an SVG seen without it.

use std::fmt::Write;

/// Width and height of the drawing (the CSS scales it).
const W: f64 = 360.0;
const H: f64 = 120.0;
const AXIS: f64 = 18.0;
/// Room above the bars for the scale's one label (the highest week's value).
const TOP: f64 = 14.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A bar chart of `values` (one per label), titled `title`, each value shown by `show`.
pub fn bars(
    title: &str,
    labels: &[String],
    values: &[Option<f64>],
    show: impl Fn(f64) -> String,
) -> String {
    let max = values.iter().flatten().copied().fold(0.0_f64, f64::max);
    let n = values.len().max(1) as f64;
    let slot = W / n;
    let described: Vec<String> = labels
        .iter()
        .zip(values)
        .map(|(l, v)| format!("{l}: {}", v.map_or_else(|| "none".to_string(), &show)))
        .collect();
    let mut svg = format!(
        r#"<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{}"><title>{}</title>"#,
        escape(&format!("{title}, by week: {}", described.join("; "))),
        escape(title)
    );
    let _ = write!(
        svg,
        r##"<line x1="0" y1="{y}" x2="{W}" y2="{y}" stroke="#8a93a6" stroke-width="1" class="axis"/>"##,
        y = H - AXIS
    );
    if max > 0.0 {
        let _ = write!(
            svg,
            r##"<text x="0" y="11" font-size="11" fill="#4b5563">highest: {}</text>"##,
            escape(&show(max))
        );
    }
    if values.iter().all(Option::is_none) {
        // Nothing to draw: say so, rather than leave an empty frame that reads as broken.
        let _ = write!(
            svg,
            r##"<text x="{x}" y="{y}" font-size="12" fill="#4b5563" text-anchor="middle">No figure in these {n} weeks</text>"##,
            x = W / 2.0,
            y = (H - AXIS) / 2.0,
            n = values.len()
        );
    }
    for (i, v) in values.iter().enumerate() {
        let x = i as f64 * slot + slot * 0.15;
        if let Some(v) = *v {
            // A zero (no failed deployment that week) is a thin grey mark on the axis, unlike
            // a week with no figure; any other value at least 3 units, in blue.
            let (h, fill, class) = if v > 0.0 && max > 0.0 {
                (((H - AXIS - TOP) * v / max).max(3.0), "#1d4ed8", "bar")
            } else {
                (1.5, "#8a93a6", "zero")
            };
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{fill}" class="{class}"><title>{}</title></rect>"##,
                H - AXIS - h,
                slot * 0.7,
                escape(&described[i])
            );
        }
    }
    if let (Some(first), Some(last)) = (labels.first(), labels.last()) {
        let _ = write!(
            svg,
            r##"<text x="0" y="{y}" font-size="11" fill="#4b5563">{}</text><text x="{W}" y="{y}" font-size="11" fill="#4b5563" text-anchor="end">{}</text>"##,
            escape(first),
            escape(last),
            // The baseline above the bottom edge, which would cut the digits' lowest pixels.
            y = H - 4.0
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    #[test]
    fn bars_scale_to_the_largest_and_describe_every_value() {
        let labels: Vec<String> = ["w1", "w2", "w3", "w4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let svg = super::bars(
            "Deploys <all>",
            &labels,
            &[Some(2.0), None, Some(4.0), Some(0.0)],
            |v| format!("{v}"),
        );
        assert_eq!(
            svg.matches("<rect").count(),
            3,
            "no bar for the missing week"
        );
        assert!(svg.contains(r#"height="88.0""#), "{svg}");
        assert!(
            svg.contains(r##"height="1.5" fill="#8a93a6""##),
            "a zero is a flat mark: {svg}"
        );
        assert!(svg.contains(">highest: 4<"), "the scale: {svg}");
        assert!(
            svg.contains(r#"y="116""#),
            "labels above the bottom edge: {svg}"
        );
        assert!(svg.contains("w2: none") && svg.contains("Deploys &lt;all&gt;"));
        assert!(!svg.contains("No figure"), "{svg}");
    }

    #[test]
    fn a_chart_without_any_figure_says_so() {
        let labels: Vec<String> = ["w1", "w2"].iter().map(|s| s.to_string()).collect();
        let svg = super::bars("Recovery", &labels, &[None, None], |v| format!("{v}"));
        assert_eq!(svg.matches("<rect").count(), 0, "{svg}");
        assert!(svg.contains(">No figure in these 2 weeks<"), "{svg}");
        assert!(!svg.contains("highest"), "{svg}");
    }
}
