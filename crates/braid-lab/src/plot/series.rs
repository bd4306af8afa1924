//! One experiment over time (the drill-down from a box to the run behind
//! it): one or more named series of `(t, value)` points as lines on a
//! shared time axis.

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::{DrawResult, PlotError};
use super::output::{svg_document, Plot};
use super::style::{
    along, axis_range, build_chart, colour, legend, numeric_mesh, quiet_corner, x_label_area, y_label_area, TickFormat,
    Y_TICKS,
};

const PLOT: &str = "series plot";

/// Up to this many points a series also gets a marker per point: sparse
/// samples should look sampled, dense ones like a line.
const MARKERS_UP_TO: usize = 60;

/// One named series of an experiment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Legend entry, e.g. `cwnd`.
    pub name: String,
    /// `(t, value)` points, in any order (drawn by ascending t); a point
    /// with a NaN or infinite coordinate is skipped.
    pub points: Vec<(f64, f64)>,
}

/// Series of one experiment over time.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SeriesPlot {
    /// Title above the plot.
    pub title: String,
    /// Description of the time axis, e.g. `time (s)`.
    pub x_label: String,
    /// Description of the values.
    pub y_label: String,
    /// The series, each in its own colour.
    pub series: Vec<TimeSeries>,
}

impl SeriesPlot {
    /// Each series' finite points by ascending t; errors when no point is
    /// left.
    fn drawable(&self) -> Result<Vec<Vec<(f64, f64)>>, PlotError> {
        if self.series.is_empty() {
            return Err(PlotError::Empty { plot: PLOT, what: "no series".into() });
        }
        let series: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                let mut points: Vec<(f64, f64)> =
                    s.points.iter().copied().filter(|(t, v)| t.is_finite() && v.is_finite()).collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                points
            })
            .collect();
        if series.iter().all(Vec::is_empty) {
            return Err(PlotError::Empty { plot: PLOT, what: "no point with a finite time and value".into() });
        }
        Ok(series)
    }
}

impl Plot for SeriesPlot {
    fn to_svg(&self, size: (u32, u32)) -> Result<String, PlotError> {
        let series = self.drawable()?;
        let all = || series.iter().flatten();
        let x = axis_range(
            PLOT,
            "x axis",
            all().map(|p| p.0).fold(f64::INFINITY, f64::min),
            all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
        )?;
        let y = axis_range(
            PLOT,
            "y axis",
            all().map(|p| p.1).fold(f64::INFINITY, f64::min),
            all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
        )?;
        let y_area = y_label_area(&TickFormat::for_range(&y, Y_TICKS), &y);
        svg_document(PLOT, size, |root| {
            let mut chart = build_chart(root, PLOT, &self.title, (x_label_area(), y_area), x, y)?;
            numeric_mesh(&mut chart, PLOT, &self.x_label, &self.y_label)?;
            for (k, points) in series.iter().enumerate() {
                let c = colour(k);
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
                    .drawing(PLOT)?
                    .label(self.series[k].name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                if points.len() <= MARKERS_UP_TO {
                    chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, c.filled()))).drawing(PLOT)?;
                }
            }
            let marks: Vec<(f64, f64)> = series.iter().flat_map(|points| along(points)).collect();
            let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
            let corner = quiet_corner(&chart, &marks, &names);
            legend(&mut chart, PLOT, corner)
        })
    }
}
