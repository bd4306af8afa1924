//! Box plots, MACI's main view: one box per category (x, in the given
//! order) and group (side by side, one colour each, with a legend). A box
//! spans the quartiles with a line at the median, whiskers reach the last
//! values within 1.5 IQR, and values beyond are drawn as circles
//! ([`super::stats`] computes all of it).

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::axis::CategoryAxis;
use super::error::{DrawResult, PlotError};
use super::output::{svg_document, Plot};
use super::stats::{box_stats, BoxStats};
use super::style::{
    axis_range, build_chart, colour, legend, quiet_corner, y_label_area, Chart, TickFormat, DESC_SIZE, FONT,
    LIGHT_LINES, MARGIN, TICK_SIZE, Y_TICKS,
};

const PLOT: &str = "box plot";

/// Share of a category's width the boxes of all groups take together.
const BOXES_SHARE: f64 = 0.8;
/// Categories narrower than this (pixels) get no separating lines.
const MIN_SEPARATED_PX: f64 = 12.0;
/// Share of its group slot one box takes.
const BOX_SHARE: f64 = 0.7;

/// One group of a box plot: one colour and legend entry, one box per
/// category.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BoxGroup {
    /// Legend entry (e.g. `scheduler=redundant`); may be empty for a plot
    /// with one group and no legend.
    pub name: String,
    /// The values of each category, in the order of [`BoxPlot::categories`];
    /// NaN and infinite values are skipped, an empty list draws no box.
    pub values_per_category: Vec<Vec<f64>>,
}

/// Box plots per category and group.
///
/// ```
/// use braid_lab::plot::{BoxGroup, BoxPlot, Plot};
/// let plot = BoxPlot {
///     title: "goodput by loss".into(),
///     x_label: "loss".into(),
///     y_label: "goodput (Mbit/s)".into(),
///     categories: vec!["0%".into(), "1%".into()],
///     groups: vec![BoxGroup { name: "braid".into(), values_per_category: vec![vec![90.0, 93.0, 95.0], vec![70.0, 74.0]] }],
/// };
/// let svg = plot.to_svg((800, 480)).unwrap();
/// assert!(svg.contains("goodput by loss") && svg.contains("braid"));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BoxPlot {
    /// Title above the plot.
    pub title: String,
    /// Description of the categories (the x axis).
    pub x_label: String,
    /// Description of the values (the y axis).
    pub y_label: String,
    /// The x values, left to right.
    pub categories: Vec<String>,
    /// The groups, drawn side by side within each category.
    pub groups: Vec<BoxGroup>,
}

impl BoxPlot {
    /// The figures each box shows, `[group][category]`; `None` for a
    /// category in which a group has no finite value. Errors when there is
    /// nothing to draw or a group's lists do not match the categories.
    pub fn stats(&self) -> Result<Vec<Vec<Option<BoxStats>>>, PlotError> {
        if self.categories.is_empty() {
            return Err(PlotError::Empty { plot: PLOT, what: "no categories".into() });
        }
        if self.groups.is_empty() {
            return Err(PlotError::Empty { plot: PLOT, what: "no groups".into() });
        }
        let mut all = Vec::with_capacity(self.groups.len());
        for (k, group) in self.groups.iter().enumerate() {
            if group.values_per_category.len() != self.categories.len() {
                return Err(PlotError::InvalidData {
                    plot: PLOT,
                    field: format!("groups[{k}] ({:?}).values_per_category", group.name),
                    problem: format!(
                        "has {} value lists for {} categories; give one list per category, in the categories' order",
                        group.values_per_category.len(),
                        self.categories.len()
                    ),
                });
            }
            all.push(group.values_per_category.iter().map(|v| box_stats(v)).collect::<Vec<_>>());
        }
        if all.iter().flatten().all(Option::is_none) {
            return Err(PlotError::Empty { plot: PLOT, what: "no finite value in any category".into() });
        }
        Ok(all)
    }
}

/// Centre of group `k`'s box (of `groups`) in category `i`, and half its width.
fn box_x(i: usize, k: usize, groups: usize) -> (f64, f64) {
    let slot = BOXES_SHARE / groups as f64;
    let centre = i as f64 + (1.0 - BOXES_SHARE) / 2.0 + slot * (k as f64 + 0.5);
    (centre, slot * BOX_SHARE / 2.0)
}

impl Plot for BoxPlot {
    fn to_svg(&self, size: (u32, u32)) -> Result<String, PlotError> {
        let stats = self.stats()?;
        let boxes = || stats.iter().flatten().flatten();
        let lo = boxes().map(|s| s.min).fold(f64::INFINITY, f64::min);
        let hi = boxes().map(|s| s.max).fold(f64::NEG_INFINITY, f64::max);
        let y = axis_range(PLOT, "y axis", lo, hi)?;
        let y_fmt = TickFormat::for_range(&y, Y_TICKS);
        let y_area = y_label_area(&y_fmt, &y);
        let (width, height) = size;
        let plot_width = f64::from(width) - f64::from(2 * MARGIN + y_area);
        let axis = CategoryAxis::layout(&self.categories, plot_width, f64::from(height) * 0.3);
        let n = self.categories.len();
        svg_document(PLOT, size, |root| {
            let mut chart = build_chart(root, PLOT, &self.title, (axis.area, y_area), 0.0..n as f64, y.clone())?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .y_labels(Y_TICKS)
                .max_light_lines(LIGHT_LINES)
                .y_label_formatter(&|v| y_fmt.format(*v))
                .label_style((FONT, TICK_SIZE))
                .axis_desc_style((FONT, DESC_SIZE))
                .x_desc(self.x_label.as_str())
                .y_desc(self.y_label.as_str())
                .draw()
                .drawing(PLOT)?;
            // Faint lines between categories keep each one's boxes together
            // (unless categories are so narrow that the lines would be a haze).
            let n_separators = if plot_width / n as f64 >= MIN_SEPARATED_PX { n } else { 1 };
            let separators = (1..n_separators)
                .map(|i| PathElement::new(vec![(i as f64, y.start), (i as f64, y.end)], BLACK.mix(0.12)));
            chart.draw_series(separators).drawing(PLOT)?;
            let mut marks = Vec::new();
            for (k, group) in self.groups.iter().enumerate() {
                let group_boxes: Vec<(f64, f64, &BoxStats)> = stats[k]
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.as_ref().map(|s| (box_x(i, k, self.groups.len()), s)))
                    .map(|((centre, half), s)| (centre, half, s))
                    .collect();
                marks.extend(group_boxes.iter().flat_map(|(c, h, s)| box_marks(*c, *h, s)));
                draw_group(&mut chart, k, &group.name, &group_boxes)?;
            }
            if self.groups.len() > 1 || !self.groups[0].name.is_empty() {
                let names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
                let corner = quiet_corner(&chart, &marks, &names);
                legend(&mut chart, PLOT, corner)?;
            }
            axis.draw(root, &chart, PLOT)
        })
    }
}

/// Points covering what one box draws (for placing the legend): a grid
/// over the box and whiskers, and the outliers.
fn box_marks(centre: f64, half: f64, s: &BoxStats) -> Vec<(f64, f64)> {
    let steps = 8;
    let span = s.upper_whisker - s.lower_whisker;
    let grid = (0..=steps).flat_map(move |i| {
        let y = s.lower_whisker + span * i as f64 / steps as f64;
        [(centre - half, y), (centre, y), (centre + half, y)]
    });
    grid.chain(s.outliers.iter().map(|v| (centre, *v))).collect()
}

/// The boxes, whiskers and outliers of group `k`, each box given as its
/// centre, half width and figures.
fn draw_group<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    k: usize,
    name: &str,
    boxes: &[(f64, f64, &BoxStats)],
) -> Result<(), PlotError> {
    let c = colour(k);
    let fills = boxes.iter().map(|(x, h, s)| Rectangle::new([(x - h, s.q1), (x + h, s.q3)], c.mix(0.25).filled()));
    chart
        .draw_series(fills)
        .drawing(PLOT)?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.mix(0.6).filled()));
    let borders = boxes.iter().map(|(x, h, s)| Rectangle::new([(x - h, s.q1), (x + h, s.q3)], c.stroke_width(2)));
    chart.draw_series(borders).drawing(PLOT)?;
    let whiskers = boxes.iter().flat_map(|(x, h, s)| {
        let cap = h * 0.5;
        [
            PathElement::new(vec![(*x, s.q1), (*x, s.lower_whisker)], c.stroke_width(1)),
            PathElement::new(vec![(*x, s.q3), (*x, s.upper_whisker)], c.stroke_width(1)),
            PathElement::new(vec![(x - cap, s.lower_whisker), (x + cap, s.lower_whisker)], c.stroke_width(2)),
            PathElement::new(vec![(x - cap, s.upper_whisker), (x + cap, s.upper_whisker)], c.stroke_width(2)),
        ]
    });
    chart.draw_series(whiskers).drawing(PLOT)?;
    let medians = boxes
        .iter()
        .map(|(x, h, s)| PathElement::new(vec![(x - h, s.median), (x + h, s.median)], BLACK.stroke_width(2)));
    chart.draw_series(medians).drawing(PLOT)?;
    let outliers =
        boxes.iter().flat_map(|(x, _, s)| s.outliers.iter().map(move |v| Circle::new((*x, *v), 3, c.stroke_width(1))));
    chart.draw_series(outliers).drawing(PLOT)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_of_a_category_sit_side_by_side_inside_it() {
        for groups in 1..6 {
            let mut last_right = 2.0;
            for k in 0..groups {
                let (centre, half) = box_x(2, k, groups);
                assert!(centre - half > last_right - 1e-12 && centre + half < 3.0);
                last_right = centre + half;
            }
        }
    }
}
