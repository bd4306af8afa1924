//! The lab's one plotting module: box plots per category and group
//! ([`BoxPlot`], MACI's main view), means with confidence bands over a
//! numeric x ([`BandPlot`]), one experiment over time ([`SeriesPlot`]) and
//! Pareto fronts of two metrics ([`ParetoPlot`]), plus the bench charts
//! ([`chart`]).
//!
//! Plots take plain data (analysis computes it; nothing here reads the
//! store) and are written through the [`Plot`] trait as SVG or PNG by the
//! file's extension. Everything is drawn once as SVG (plotters); PNG is that
//! SVG rasterised by resvg with the system's fonts, so both look the same.
//! Empty input is a [`PlotError`], NaN values are skipped.
//!
//! ```
//! use braid_lab::plot::{BoxGroup, BoxPlot, Plot};
//! let plot = BoxPlot {
//!     title: "goodput".into(),
//!     x_label: "loss".into(),
//!     y_label: "Mbit/s".into(),
//!     categories: vec!["0%".into(), "2%".into()],
//!     groups: vec![
//!         BoxGroup { name: "tcp".into(), values_per_category: vec![vec![93.0, 94.0, 95.0], vec![40.0, 45.0, 61.0]] },
//!         BoxGroup { name: "braid".into(), values_per_category: vec![vec![92.0, 94.0], vec![80.0, 84.0, f64::NAN]] },
//!     ],
//! };
//! let path = std::env::temp_dir().join(format!("plot-doc-{}.svg", std::process::id()));
//! plot.write(&path).unwrap();
//! assert!(std::fs::read_to_string(&path).unwrap().contains("braid"));
//! # std::fs::remove_file(&path).unwrap();
//! ```

mod axis;
mod band;
mod boxplot;
pub mod chart;
mod error;
mod output;
mod pareto;
mod png;
mod series;
mod stats;
mod style;

pub use band::{BandGroup, BandPlot, BandPoint};
pub use boxplot::{BoxGroup, BoxPlot};
pub use error::PlotError;
pub use output::{Format, Plot, DEFAULT_SIZE, MAX_SIDE, MIN_SIDE};
pub use pareto::{Direction, Objective, ParetoPlot, ParetoPoint};
pub use series::{SeriesPlot, TimeSeries};
pub use stats::{box_stats, quantile_sorted, BoxStats, WHISKER_IQR};
