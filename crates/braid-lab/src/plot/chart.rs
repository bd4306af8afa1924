//! Charts of benchmark results as SVG files (plotters): lines over time
//! (throughput of each flow, phases marked) and grouped bars (one group
//! per setting, one bar per peer). SVG needs no system fonts, so the
//! charts render the same on any machine.

use std::path::Path;

use plotters::prelude::*;

// The lab plots' colours and drawing types, so that bench charts and lab
// plots look alike.
use super::style::{colour, Chart, Root, FONT, MARGIN, TITLE_SIZE};

/// A chart that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("writing the plot {path}: {reason}")]
pub struct ChartError {
    /// The file.
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

/// One named line: `(x, y)` points in drawing order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: several series over a shared x axis, and labelled
/// vertical markers (e.g. where a priority changes).
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub markers: Vec<(f64, String)>,
}

/// A grouped bar chart: for each group (e.g. an RTT), one bar per name
/// (e.g. tcp, braid, data).
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<(String, Vec<(String, f64)>)>,
}

const SIZE: (u32, u32) = (1000, 560);

/// A range that contains `lo..hi` with a little headroom, never empty.
fn padded(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    if hi - lo < 1e-9 {
        return lo..lo + 1.0;
    }
    lo..hi + (hi - lo) * 0.08
}

/// The frame every chart shares: title, margins, axis label areas.
fn frame<'a, 'b>(root: &'a Root<'b>, title: &str) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, (FONT, TITLE_SIZE)).margin(MARGIN).x_label_area_size(44).y_label_area_size(64);
    b
}

/// Draw the legend and write the file.
fn finish<'a>(root: &Root<'a>, chart: &mut Chart<'a, 'a>) -> Result<(), Box<dyn std::error::Error>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Write `chart` to `path` as SVG.
pub fn write_line_chart(path: &Path, chart: &LineChart) -> Result<(), ChartError> {
    draw_lines(path, chart).map_err(|e| ChartError { path: path.display().to_string(), reason: e.to_string() })
}

fn draw_lines(path: &Path, c: &LineChart) -> Result<(), Box<dyn std::error::Error>> {
    let points = || c.series.iter().flat_map(|s| s.points.iter());
    let x_max = points().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let x_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min).min(0.0);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = frame(&root, &c.title).build_cartesian_2d(padded(x_min, x_max), padded(0.0, y_max))?;
    chart.configure_mesh().x_desc(c.x_label.as_str()).y_desc(c.y_label.as_str()).draw()?;
    let y_top = padded(0.0, y_max).end;
    for (i, (x, label)) in c.markers.iter().enumerate() {
        chart.draw_series(LineSeries::new([(*x, 0.0), (*x, y_top)], BLACK.mix(0.35).stroke_width(1)))?;
        // Labels of markers at (nearly) the same x (several flows
        // switching at once) are stacked downwards instead of printed over each other.
        let near = (x_max - x_min).abs() * 0.02;
        let same_x_before = c.markers[..i].iter().filter(|(x0, _)| (x0 - x).abs() <= near).count();
        let y = y_top * (0.97 - 0.045 * same_x_before as f64);
        chart.draw_series([Text::new(label.clone(), (*x, y), (FONT, 14))])?;
    }
    for (i, s) in c.series.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour(i).stroke_width(2)));
    }
    finish(&root, &mut chart)
}

/// Write `chart` to `path` as SVG.
pub fn write_bar_chart(path: &Path, chart: &BarChart) -> Result<(), ChartError> {
    draw_bars(path, chart).map_err(|e| ChartError { path: path.display().to_string(), reason: e.to_string() })
}

fn draw_bars(path: &Path, c: &BarChart) -> Result<(), Box<dyn std::error::Error>> {
    // Bar names in order of first appearance: each gets one colour.
    let mut names: Vec<&str> = Vec::new();
    for (_, bars) in &c.groups {
        for (n, _) in bars {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    let y_max = c.groups.iter().flat_map(|g| g.1.iter().map(|b| b.1)).fold(0.0, f64::max);
    let groups = c.groups.len().max(1) as f64;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = frame(&root, &c.title).build_cartesian_2d(0.0..groups, padded(0.0, y_max))?;
    let labels: Vec<String> = c.groups.iter().map(|g| g.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            // Label only the group centres (x = i + 0.5).
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(c.y_label.as_str())
        .draw()?;
    let width = 0.8 / names.len().max(1) as f64;
    for (k, name) in names.iter().enumerate() {
        let bars: Vec<_> = c
            .groups
            .iter()
            .enumerate()
            .filter_map(|(g, (_, bars))| bars.iter().find(|b| b.0 == *name).map(|b| (g, b.1)))
            .map(|(g, v)| {
                let x0 = g as f64 + 0.1 + k as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.92, v)], colour(k).filled())
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour(k).filled()));
    }
    finish(&root, &mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_bar_charts_are_svg_with_their_labels() {
        let dir = std::env::temp_dir().join(format!("braid-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lines = LineChart {
            title: "throughput".into(),
            x_label: "time (s)".into(),
            y_label: "Mbit/s".into(),
            series: vec![
                Series { name: "ledbat".into(), points: vec![(0.0, 1.0), (1.0, 4.0), (2.0, 2.0)] },
                Series { name: "tcp-1".into(), points: vec![(0.0, 3.0), (2.0, 8.0)] },
            ],
            markers: vec![(1.0, "p=1".into())],
        };
        let p = dir.join("lines.svg");
        write_line_chart(&p, &lines).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("ledbat") && svg.contains("tcp-1") && svg.contains("p=1"));
        let bars = BarChart {
            title: "goodput".into(),
            y_label: "Mbit/s".into(),
            groups: vec![("0 ms".into(), vec![("tcp".into(), 900.0), ("data".into(), 950.0)]), ("150 ms".into(), vec![("tcp".into(), 300.0)])],
        };
        let p = dir.join("bars.svg");
        write_bar_chart(&p, &bars).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.contains("150 ms") && svg.contains("data") && svg.matches("<rect").count() >= 3);
        // Empty input still gives a valid, empty chart rather than an error.
        write_line_chart(&dir.join("empty.svg"), &LineChart::default()).unwrap();
        if std::env::var_os("BRAID_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
