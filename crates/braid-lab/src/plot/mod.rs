//! (being written)

pub mod chart;
