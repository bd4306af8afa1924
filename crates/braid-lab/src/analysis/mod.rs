//! Analysis of stored results, over the store's read API only.
//!
//! Each command is a function that returns a serde-serializable report with
//! a `table()` to print ([`Table`]); the CLI parses flags and prints, the
//! web UI lays out the same reports.
//!
//! - [`status()`]: studies and their progress;
//! - [`show()`]: n, mean, median, p5, p95, standard deviation and 95%
//!   confidence interval per group and metric;
//! - [`best()`]: per environment, the configuration with the best mean, its
//!   margin over the runner-up and whether that margin is significant;
//! - [`pareto()`]: the configurations no other dominates on several
//!   metrics;
//! - [`export()`]: one row per experiment, CSV or JSON lines;
//! - [`series()`]: one experiment's series over time (drill-down).
//!
//! Only experiments stored as ok take part in statistics. Parameters are
//! compared by their canonical text ([`Value::to_text`](crate::param::Value::to_text));
//! filter values are canonicalized with the parameter's declared type
//! first, so `bytes=1048576` finds the experiments stored as `1MiB`.
//! Statistics are defined in [`stats`].

mod best;
pub(crate) mod common;
mod export;
mod pareto;
mod series;
mod show;
pub mod stats;
mod status;
pub mod table;

pub use best::{best, BestQuery, BestReport, BestRow, ConfigStats};
pub use common::{parse_filter, AnalysisError, Goal};
pub use export::{export, ExportFormat, ExportSummary};
pub use pareto::{dominates, pareto, pareto_front, Objective, ParetoFront, ParetoPoint, ParetoQuery, ParetoReport};
pub use series::{series, SeriesReport};
pub use show::{show, ShowQuery, ShowReport, ShowRow};
pub use status::{status, StatusReport, StatusRow};
pub use table::Table;

pub(crate) use best::best_in;
pub(crate) use export::{write_export, ExportData};
pub(crate) use pareto::pareto_in;
pub(crate) use show::show_in;

#[cfg(test)]
mod tests;
