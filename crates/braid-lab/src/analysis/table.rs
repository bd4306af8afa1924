//! The table every report renders to: column names and rows of text, so
//! the CLI only prints and the web UI only lays out.
//!
//! ```
//! use braid_lab::analysis::table::{format_number, Table};
//! let mut t = Table::new(["metric", "mean"]);
//! t.push(vec!["fct_s".into(), format_number(1.23456)]);
//! assert_eq!(t.render(), "metric  mean\n------  -----\nfct_s   1.235\n");
//! ```

use std::fmt;

use serde::Serialize;

/// Named columns and rows of text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Table {
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, each as long as `columns`.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = S>) -> Table {
        Table { columns: columns.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    /// Add a row (padded or cut to the number of columns).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
    }

    /// Aligned plain text: a header, a rule, the rows; columns two spaces
    /// apart, trailing spaces trimmed.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &mut dyn Iterator<Item = String>| {
            let text: Vec<String> = cells.zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(text.join("  ").trim_end());
            out.push('\n');
        };
        line(&mut self.columns.iter().cloned());
        line(&mut widths.iter().map(|w| "-".repeat(*w)));
        for row in &self.rows {
            line(&mut row.iter().cloned());
        }
        out
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// A number for a table: four significant digits, scientific notation
/// outside `1e-3..1e7`, integers without decimals.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor();
    if !(-3.0..7.0).contains(&mag) {
        return format!("{v:.3e}");
    }
    if v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    let decimals = (3.0 - mag).max(0.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// [`format_number`] of an optional value; `-` when absent.
pub fn format_opt(v: Option<f64>) -> String {
    v.map(format_number).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(format_number(93.14159), "93.14");
        assert_eq!(format_number(0.012346), "0.01235");
        assert_eq!(format_number(1500.0), "1500");
        assert_eq!(format_number(-2.5), "-2.5");
        assert_eq!(format_number(1.5e9), "1.500e9");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_opt(None), "-");
    }

    #[test]
    fn rows_are_padded_and_aligned() {
        let mut t = Table::new(["a", "bb"]);
        t.push(vec!["xyz".into()]);
        assert_eq!(t.rows[0], vec!["xyz".to_string(), String::new()]);
        assert_eq!(t.render(), "a    bb\n---  --\nxyz\n");
    }
}
