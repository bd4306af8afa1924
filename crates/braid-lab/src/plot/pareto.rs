//! Pareto plots of two metrics: every point (configuration or experiment)
//! as a muted circle, the Pareto-optimal ones highlighted, labelled and
//! joined in order of the x metric; each axis says which direction is
//! better. Which points are optimal is the analysis' finding, passed in.

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::{DrawResult, PlotError};
use super::output::{svg_document, Plot};
use super::style::{
    along, axis_range, build_chart, colour, legend, numeric_mesh, quiet_corner, x_label_area, y_label_area, TickFormat,
    FONT, LEGEND_SIZE, MUTED, Y_TICKS,
};

const PLOT: &str = "Pareto plot";

/// Up to this many front points are labelled; more labels would cover
/// each other and the front.
const LABELS_UP_TO: usize = 12;

/// Whether a metric is better high or low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Higher is better (e.g. goodput).
    Max,
    /// Lower is better (e.g. completion time, bytes on the wire).
    Min,
}

impl Direction {
    /// The words an axis description ends with.
    fn describe(self) -> &'static str {
        match self {
            Direction::Max => "max: higher is better",
            Direction::Min => "min: lower is better",
        }
    }
}

/// One axis of a Pareto plot: a metric and its better direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Objective {
    /// The metric's description, e.g. `flow completion time (s)`.
    pub label: String,
    /// Which direction is better.
    pub better: Direction,
}

/// One point: the two metrics of a configuration (or experiment).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ParetoPoint {
    /// The x metric.
    pub x: f64,
    /// The y metric.
    pub y: f64,
    /// Whether the point is Pareto-optimal.
    pub on_front: bool,
    /// A short name (e.g. `scheduler=redundant`), written next to front
    /// points; may be empty.
    pub label: String,
}

/// All points of two metrics with the Pareto front highlighted.
///
/// ```
/// use braid_lab::plot::{Direction, Objective, ParetoPlot, ParetoPoint, Plot};
/// let point = |x, y, on_front: bool| ParetoPoint { x, y, on_front, label: format!("{x}/{y}") };
/// let plot = ParetoPlot {
///     title: "completion time against overhead".into(),
///     x: Objective { label: "flow completion time (s)".into(), better: Direction::Min },
///     y: Objective { label: "bytes on the wire".into(), better: Direction::Min },
///     points: vec![point(1.0, 9.0, true), point(2.0, 4.0, true), point(3.0, 8.0, false)],
/// };
/// assert!(plot.to_svg((800, 480)).unwrap().contains("min: lower is better"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParetoPlot {
    /// Title above the plot.
    pub title: String,
    /// The x metric.
    pub x: Objective,
    /// The y metric.
    pub y: Objective,
    /// The points; those with a NaN or infinite metric are skipped.
    pub points: Vec<ParetoPoint>,
}

impl Plot for ParetoPlot {
    fn to_svg(&self, size: (u32, u32)) -> Result<String, PlotError> {
        let points: Vec<&ParetoPoint> = self.points.iter().filter(|p| p.x.is_finite() && p.y.is_finite()).collect();
        if points.is_empty() {
            return Err(PlotError::Empty { plot: PLOT, what: "no point with finite values of both metrics".into() });
        }
        let mut front: Vec<&ParetoPoint> = points.iter().copied().filter(|p| p.on_front).collect();
        front.sort_by(|a, b| a.x.total_cmp(&b.x).then(a.y.total_cmp(&b.y)));
        let x = axis_range(
            PLOT,
            "x axis",
            points.iter().map(|p| p.x).fold(f64::INFINITY, f64::min),
            points.iter().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max),
        )?;
        let y = axis_range(
            PLOT,
            "y axis",
            points.iter().map(|p| p.y).fold(f64::INFINITY, f64::min),
            points.iter().map(|p| p.y).fold(f64::NEG_INFINITY, f64::max),
        )?;
        let y_area = y_label_area(&TickFormat::for_range(&y, Y_TICKS), &y);
        let x_desc = format!("{} ({})", self.x.label, self.x.better.describe());
        let y_desc = format!("{} ({})", self.y.label, self.y.better.describe());
        svg_document(PLOT, size, |root| {
            let mut chart = build_chart(root, PLOT, &self.title, (x_label_area(), y_area), x, y)?;
            numeric_mesh(&mut chart, PLOT, &x_desc, &y_desc)?;
            let others =
                points.iter().filter(|p| !p.on_front).map(|p| Circle::new((p.x, p.y), 4, MUTED.stroke_width(1)));
            chart
                .draw_series(others)
                .drawing(PLOT)?
                .label("dominated")
                .legend(|(x, y)| Circle::new((x + 10, y), 4, MUTED.stroke_width(1)));
            let c = colour(0);
            chart
                .draw_series(LineSeries::new(front.iter().map(|p| (p.x, p.y)), c.stroke_width(2)))
                .drawing(PLOT)?
                .label("Pareto front")
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (20, 0)], c.stroke_width(2))
                        + Circle::new((10, 0), 5, c.filled())
                });
            chart.draw_series(front.iter().map(|p| Circle::new((p.x, p.y), 5, c.filled()))).drawing(PLOT)?;
            if front.len() <= LABELS_UP_TO {
                let labels = front
                    .iter()
                    .filter(|p| !p.label.is_empty())
                    .map(|p| EmptyElement::at((p.x, p.y)) + Text::new(p.label.clone(), (8, -16), (FONT, LEGEND_SIZE)));
                chart.draw_series(labels).drawing(PLOT)?;
            }
            let front_line: Vec<(f64, f64)> = front.iter().map(|p| (p.x, p.y)).collect();
            let marks: Vec<(f64, f64)> = points.iter().map(|p| (p.x, p.y)).chain(along(&front_line)).collect();
            let corner = quiet_corner(&chart, &marks, &["dominated", "Pareto front"]);
            legend(&mut chart, PLOT, corner)
        })
    }
}
