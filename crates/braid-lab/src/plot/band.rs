//! Line plots with a confidence band, for a numeric x: per group, the mean
//! at each x joined by a line, and the band between the given lower and
//! upper bounds (e.g. a 95% confidence interval) shaded in the group's
//! colour. Where the bounds are missing (NaN, e.g. a single repetition)
//! the mean is still drawn and the band has a gap.

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::{DrawResult, PlotError};
use super::output::{svg_document, Plot};
use super::style::{
    along, axis_range, build_chart, colour, legend, numeric_mesh, quiet_corner, x_label_area, y_label_area, Chart,
    TickFormat, Y_TICKS,
};

const PLOT: &str = "band plot";

/// The figures at one x.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BandPoint {
    /// The x value.
    pub x: f64,
    /// The line's value (e.g. the mean).
    pub mean: f64,
    /// Lower edge of the band.
    pub lower: f64,
    /// Upper edge of the band.
    pub upper: f64,
}

/// One group: a line with its band, one colour, one legend entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BandGroup {
    /// Legend entry; may be empty for a plot with one group and no legend.
    pub name: String,
    /// The points, in any order (drawn by ascending x). A point whose x or
    /// mean is not finite is skipped.
    pub points: Vec<BandPoint>,
}

/// Means with confidence bands over a numeric x, one line per group.
///
/// ```
/// use braid_lab::plot::{BandGroup, BandPlot, BandPoint, Plot};
/// let p = |x, mean| BandPoint { x, mean, lower: mean - 1.0, upper: mean + 1.0 };
/// let plot = BandPlot {
///     title: "completion time".into(),
///     x_label: "RTT ratio".into(),
///     y_label: "seconds".into(),
///     groups: vec![BandGroup { name: "redundant".into(), points: vec![p(1.0, 2.0), p(2.0, 2.5), p(4.0, 3.1)] }],
/// };
/// assert!(plot.to_svg((800, 480)).unwrap().contains("redundant"));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BandPlot {
    /// Title above the plot.
    pub title: String,
    /// Description of the x axis.
    pub x_label: String,
    /// Description of the y axis.
    pub y_label: String,
    /// The groups.
    pub groups: Vec<BandGroup>,
}

/// A group's points to draw: finite x and mean, ascending x; and whether
/// each has a band (both bounds finite).
fn drawable(group: &BandGroup) -> Vec<(BandPoint, bool)> {
    let mut points: Vec<(BandPoint, bool)> = group
        .points
        .iter()
        .filter(|p| p.x.is_finite() && p.mean.is_finite())
        .map(|p| (*p, p.lower.is_finite() && p.upper.is_finite()))
        .collect();
    points.sort_by(|a, b| a.0.x.total_cmp(&b.0.x));
    points
}

impl BandPlot {
    /// The drawable points of every group; errors when none is left or a
    /// band is upside down.
    fn checked(&self) -> Result<Vec<Vec<(BandPoint, bool)>>, PlotError> {
        if self.groups.is_empty() {
            return Err(PlotError::Empty { plot: PLOT, what: "no groups".into() });
        }
        let groups: Vec<_> = self.groups.iter().map(drawable).collect();
        for (k, points) in groups.iter().enumerate() {
            if let Some((p, _)) = points.iter().find(|(p, banded)| *banded && p.lower > p.upper) {
                return Err(PlotError::InvalidData {
                    plot: PLOT,
                    field: format!("groups[{k}] ({:?}) at x = {}", self.groups[k].name, p.x),
                    problem: format!("lower bound {} is above upper bound {}; give lower <= upper", p.lower, p.upper),
                });
            }
        }
        if groups.iter().all(Vec::is_empty) {
            return Err(PlotError::Empty { plot: PLOT, what: "no point with a finite x and mean".into() });
        }
        Ok(groups)
    }
}

impl Plot for BandPlot {
    fn to_svg(&self, size: (u32, u32)) -> Result<String, PlotError> {
        let groups = self.checked()?;
        let all = || groups.iter().flatten();
        let (mut x_lo, mut x_hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut y_lo, mut y_hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (p, banded) in all() {
            x_lo = x_lo.min(p.x);
            x_hi = x_hi.max(p.x);
            let (lo, hi) = if *banded { (p.lower.min(p.mean), p.upper.max(p.mean)) } else { (p.mean, p.mean) };
            y_lo = y_lo.min(lo);
            y_hi = y_hi.max(hi);
        }
        let x = axis_range(PLOT, "x axis", x_lo, x_hi)?;
        let y = axis_range(PLOT, "y axis", y_lo, y_hi)?;
        let y_area = y_label_area(&TickFormat::for_range(&y, Y_TICKS), &y);
        svg_document(PLOT, size, |root| {
            let mut chart = build_chart(root, PLOT, &self.title, (x_label_area(), y_area), x, y)?;
            numeric_mesh(&mut chart, PLOT, &self.x_label, &self.y_label)?;
            for (k, points) in groups.iter().enumerate() {
                draw_group(&mut chart, k, &self.groups[k].name, points)?;
            }
            if self.groups.len() > 1 || !self.groups[0].name.is_empty() {
                let marks: Vec<(f64, f64)> = groups.iter().flat_map(|points| band_marks(points)).collect();
                let names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
                let corner = quiet_corner(&chart, &marks, &names);
                legend(&mut chart, PLOT, corner)?;
            }
            Ok(())
        })
    }
}

/// Points covering what a group draws (for placing the legend): along its
/// line, and the band's edges.
fn band_marks(points: &[(BandPoint, bool)]) -> Vec<(f64, f64)> {
    let line: Vec<(f64, f64)> = points.iter().map(|(p, _)| (p.x, p.mean)).collect();
    let edges = points.iter().filter(|(_, banded)| *banded).flat_map(|(p, _)| [(p.x, p.lower), (p.x, p.upper)]);
    along(&line).into_iter().chain(edges).collect()
}

/// Group `k`'s bands (one polygon per run of points with bounds; a lone
/// point with bounds becomes an error bar), then its line and markers.
fn draw_group<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    k: usize,
    name: &str,
    points: &[(BandPoint, bool)],
) -> Result<(), PlotError> {
    let c = colour(k);
    for run in points.split(|(_, banded)| !banded).filter(|run| !run.is_empty()) {
        if let [(p, _)] = run {
            chart
                .draw_series([PathElement::new(vec![(p.x, p.lower), (p.x, p.upper)], c.mix(0.5).stroke_width(3))])
                .drawing(PLOT)?;
            continue;
        }
        let outline: Vec<(f64, f64)> =
            run.iter().map(|(p, _)| (p.x, p.upper)).chain(run.iter().rev().map(|(p, _)| (p.x, p.lower))).collect();
        chart.draw_series([Polygon::new(outline, c.mix(0.2).filled())]).drawing(PLOT)?;
    }
    let line: Vec<(f64, f64)> = points.iter().map(|(p, _)| (p.x, p.mean)).collect();
    chart.draw_series(LineSeries::new(line.iter().copied(), c.stroke_width(2))).drawing(PLOT)?.label(name).legend(
        move |(x, y)| {
            EmptyElement::at((x, y))
                + Rectangle::new([(0, -6), (20, 6)], c.mix(0.2).filled())
                + PathElement::new(vec![(0, 0), (20, 0)], c.stroke_width(2))
        },
    );
    chart.draw_series(line.iter().map(|p| Circle::new(*p, 3, c.filled()))).drawing(PLOT)?;
    Ok(())
}
