//! The look every lab plot shares, matching the bench charts
//! ([`super::chart`]): Okabe–Ito colours, one frame (title, margins, axis
//! label areas), one legend style, and tick labels that stay short.

use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::error::{DrawResult, PlotError};

/// The drawing area of a whole plot.
pub(crate) type Root<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A chart with numeric axes (categorical axes are numeric too: category
/// `i` is centred at `i + 0.5`).
pub(crate) type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Colours distinguishable in print and by most colour-blind readers
/// (Okabe–Ito), in the bench charts' order.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// The colour of group or series `i`.
pub(crate) fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Grey for context: points that are not the point of the plot.
pub(crate) const MUTED: RGBColor = RGBColor(120, 120, 120);

/// The one font family: generic, so SVG viewers and the PNG renderer pick
/// whatever sans-serif font the machine has.
pub(crate) const FONT: &str = "sans-serif";
/// Title size (plotters units; SVG font-size is this / 1.24).
pub(crate) const TITLE_SIZE: f64 = 22.0;
/// Tick label size.
pub(crate) const TICK_SIZE: f64 = 15.0;
/// Axis description size.
pub(crate) const DESC_SIZE: f64 = 16.0;
/// Legend and point label size.
pub(crate) const LEGEND_SIZE: f64 = 15.0;
/// Margin around the chart, pixels.
pub(crate) const MARGIN: u32 = 12;
/// Room below the x tick labels (or left of the y tick labels) for the axis
/// description, pixels.
pub(crate) const DESC_ROOM: u32 = 26;

/// plotters draws text of size `s` with SVG font-size `s / 1.24`.
pub(crate) fn font_px(size: f64) -> f64 {
    size / 1.24
}

/// Estimated width in pixels of `text` at plotters size `size`: SVG has no
/// text metrics, so layout uses the average advance of sans-serif fonts
/// (DejaVu Sans digits are 0.64 em, lower-case letters about 0.56 em).
pub(crate) fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * 0.62 * font_px(size)
}

/// A range that holds `lo..=hi` with 5% headroom on each side, never
/// empty; `lo..hi` must be finite (callers only pass finite data).
pub(crate) fn padded(lo: f64, hi: f64) -> Range<f64> {
    let span = hi - lo;
    if span <= 1e-12 * lo.abs().max(hi.abs()).max(1e-300) {
        let half = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return lo - half..lo + half;
    }
    lo - span * 0.05..hi + span * 0.05
}

/// The padded range of an axis over finite data `lo..=hi`, or an error
/// when the span is too large for f64 (ticks could not be computed).
pub(crate) fn axis_range(plot: &'static str, axis: &str, lo: f64, hi: f64) -> Result<Range<f64>, PlotError> {
    let range = padded(lo, hi);
    if range.start.is_finite() && range.end.is_finite() && (range.end - range.start).is_finite() {
        Ok(range)
    } else {
        Err(PlotError::InvalidData {
            plot,
            field: axis.to_string(),
            problem: format!("values from {lo:e} to {hi:e} span more than a plot axis can hold"),
        })
    }
}

/// Tick labels with as many decimals as the tick spacing needs, and
/// k/M/G/T for large values, so they stay short and aligned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickFormat {
    scale: f64,
    suffix: &'static str,
    decimals: usize,
}

impl TickFormat {
    /// The format for an axis over `range` with about `ticks` ticks.
    pub(crate) fn for_range(range: &Range<f64>, ticks: usize) -> TickFormat {
        let magnitude = range.start.abs().max(range.end.abs());
        let (scale, suffix) =
            [(1e12, "T"), (1e9, "G"), (1e6, "M")].into_iter().find(|(s, _)| magnitude >= *s).unwrap_or((1.0, ""));
        let step = (range.end - range.start) / scale / ticks.max(1) as f64;
        let decimals =
            if step > 0.0 && step.is_finite() { (-step.log10().floor()).clamp(0.0, 6.0) as usize } else { 0 };
        TickFormat { scale, suffix, decimals }
    }

    /// `v` as a tick label.
    pub(crate) fn format(&self, v: f64) -> String {
        let text = format!("{:.*}{}", self.decimals, v / self.scale, self.suffix);
        // "-0" and "-0.0" would read as a number different from 0.
        match text.strip_prefix('-') {
            Some(rest) if rest.trim_end_matches(self.suffix).parse::<f64>() == Ok(0.0) => rest.to_string(),
            _ => text,
        }
    }

    /// Width in pixels of the widest label of an axis over `range`.
    pub(crate) fn widest(&self, range: &Range<f64>) -> f64 {
        let mid = (range.start + range.end) / 2.0;
        [range.start, mid, range.end].iter().map(|v| text_width(&self.format(*v), TICK_SIZE)).fold(0.0, f64::max)
    }
}

/// Number of ticks on numeric axes (plotters picks round values near it).
pub(crate) const X_TICKS: usize = 10;
/// Number of ticks on the y axis.
pub(crate) const Y_TICKS: usize = 8;
/// Faint grid lines between two ticks (plotters' default of 10 is busy).
pub(crate) const LIGHT_LINES: usize = 4;

/// Width of the y label area for `y` ticks formatted by `fmt`.
pub(crate) fn y_label_area(fmt: &TickFormat, y: &Range<f64>) -> u32 {
    fmt.widest(y).ceil() as u32 + 14 + DESC_ROOM
}

/// Height of the x label area of a numeric axis.
pub(crate) fn x_label_area() -> u32 {
    (font_px(TICK_SIZE) * 1.3).ceil() as u32 + 10 + DESC_ROOM
}

/// The chart every plot draws on: title, margins and label areas.
pub(crate) fn build_chart<'a, 'b>(
    root: &'a Root<'b>,
    plot: &'static str,
    title: &str,
    label_areas: (u32, u32),
    x: Range<f64>,
    y: Range<f64>,
) -> Result<Chart<'a, 'b>, PlotError> {
    let (x_area, y_area) = label_areas;
    ChartBuilder::on(root)
        .caption(title, (FONT, TITLE_SIZE))
        .margin(MARGIN)
        .x_label_area_size(x_area)
        .y_label_area_size(y_area)
        .build_cartesian_2d(x, y)
        .drawing(plot)
}

/// The grid, axes and their labels of a chart with two numeric axes.
pub(crate) fn numeric_mesh<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    plot: &'static str,
    x_desc: &str,
    y_desc: &str,
) -> Result<(), PlotError> {
    let x_fmt = TickFormat::for_range(&chart.x_range(), X_TICKS);
    let y_fmt = TickFormat::for_range(&chart.y_range(), Y_TICKS);
    chart
        .configure_mesh()
        .x_labels(X_TICKS)
        .y_labels(Y_TICKS)
        .max_light_lines(LIGHT_LINES)
        .x_label_formatter(&|v| x_fmt.format(*v))
        .y_label_formatter(&|v| y_fmt.format(*v))
        .label_style((FONT, TICK_SIZE))
        .axis_desc_style((FONT, DESC_SIZE))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .drawing(plot)
}

/// The corner of `chart`'s plotting area where a legend of the entries
/// `names` covers the fewest of `points` (data coordinates, the marks the
/// plot draws), preferring the upper right like the bench charts.
pub(crate) fn quiet_corner(chart: &Chart<'_, '_>, points: &[(f64, f64)], names: &[&str]) -> SeriesLabelPosition {
    let pixels: Vec<(i32, i32)> = points.iter().map(|p| chart.backend_coord(p)).collect();
    let widest = names.iter().map(|n| text_width(n, LEGEND_SIZE)).fold(0.0, f64::max);
    // plotters' legend: a 30 px sample, 10 px margins, one line per entry.
    let legend =
        ((widest + 60.0).ceil() as i32, (names.len() as f64 * font_px(LEGEND_SIZE) * 1.6 + 20.0).ceil() as i32);
    fewest_covered(&pixels, chart.plotting_area().get_pixel_range(), legend)
}

/// Points along the polyline through `points` (the points and three
/// between each pair), so that a legend is not placed over a long segment.
pub(crate) fn along(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let between = points.windows(2).flat_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        [0.25, 0.5, 0.75].map(|f| (x0 + (x1 - x0) * f, y0 + (y1 - y0) * f))
    });
    points.iter().copied().chain(between).collect()
}

/// The corner in which a `legend` (width, height) box, 5 px from the edges
/// of `area` as plotters places it, covers the fewest `pixels`; the upper
/// right wins ties.
fn fewest_covered(pixels: &[(i32, i32)], area: (Range<i32>, Range<i32>), legend: (i32, i32)) -> SeriesLabelPosition {
    let (xs, ys) = area;
    let (w, h) = legend;
    let left = xs.start + 5..xs.start + 5 + w;
    let right = xs.end - 5 - w..xs.end - 5;
    let top = ys.start + 5..ys.start + 5 + h;
    let bottom = ys.end - 5 - h..ys.end - 5;
    let covered =
        |x: &Range<i32>, y: &Range<i32>| pixels.iter().filter(|(px, py)| x.contains(px) && y.contains(py)).count();
    [
        (SeriesLabelPosition::UpperRight, covered(&right, &top)),
        (SeriesLabelPosition::UpperLeft, covered(&left, &top)),
        (SeriesLabelPosition::LowerRight, covered(&right, &bottom)),
        (SeriesLabelPosition::LowerLeft, covered(&left, &bottom)),
    ]
    .into_iter()
    .min_by_key(|(_, n)| *n)
    .map_or(SeriesLabelPosition::UpperRight, |(corner, _)| corner)
}

/// The legend of every labelled series, in the bench charts' style.
pub(crate) fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    plot: &'static str,
    corner: SeriesLabelPosition,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .position(corner)
        .label_font((FONT, LEGEND_SIZE))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .drawing(plot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_have_the_decimals_the_spacing_needs() {
        let f = TickFormat::for_range(&(0.0..1.0), 10);
        assert_eq!(f.format(0.3), "0.3");
        let f = TickFormat::for_range(&(0.0..250.0), 8);
        assert_eq!(f.format(100.0), "100");
        let f = TickFormat::for_range(&(0.0..0.004), 8);
        assert_eq!(f.format(0.0025), "0.0025");
        let f = TickFormat::for_range(&(0.0..3.2e9), 8);
        assert_eq!(f.format(1.5e9), "1.5G");
        assert_eq!(f.format(-0.0), "0.0G");
        let f = TickFormat::for_range(&(-1.0..1.0), 8);
        assert_eq!(f.format(-1e-9), "0.0");
    }

    #[test]
    fn padding_never_gives_an_empty_range() {
        assert_eq!(padded(0.0, 10.0), -0.5..10.5);
        assert_eq!(padded(5.0, 5.0), 4.5..5.5);
        assert_eq!(padded(0.0, 0.0), -1.0..1.0);
        let r = padded(1e9, 1e9);
        assert!(r.start < 1e9 && r.end > 1e9);
    }

    #[test]
    fn the_legend_goes_where_the_data_is_not() {
        let area = (0..1000, 0..500);
        let legend = (100, 60);
        // Nothing under any corner: the bench charts' corner.
        assert_eq!(fewest_covered(&[(500, 250)], area.clone(), legend), SeriesLabelPosition::UpperRight);
        // A point under the upper right legend (screen y grows downwards).
        assert_eq!(fewest_covered(&[(950, 20)], area.clone(), legend), SeriesLabelPosition::UpperLeft);
        // Points in both upper corners and the lower left.
        let busy = [(950, 20), (20, 20), (40, 480), (60, 470)];
        assert_eq!(fewest_covered(&busy, area, legend), SeriesLabelPosition::LowerRight);
    }
}
