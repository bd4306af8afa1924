//! `braid lab export`: one row per experiment (every status), for tools
//! outside the lab.
//!
//! CSV (RFC 4180): columns `id, status, repetition, seed`, then every
//! parameter (declaration order) as canonical text, then every metric (by
//! name) as its shortest round-trip decimal; an empty cell where an
//! experiment has no value. A metric named like a parameter gets the column
//! `metric:NAME`. JSON lines: one object per experiment,
//! `{"id", "status", "repetition", "seed", "params": {KEY: TEXT}, "metrics": {NAME: VALUE}}`.

use std::io::Write;
use std::str::FromStr;

use serde::Serialize;

use super::common::{AnalysisError, StudyView};
use crate::store::Store;

/// The export's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ExportFormat {
    /// Comma-separated values with a header line.
    #[serde(rename = "csv")]
    Csv,
    /// One JSON object per line.
    #[serde(rename = "jsonl")]
    Jsonl,
}

impl FromStr for ExportFormat {
    type Err = String;

    /// `csv` or `jsonl`.
    fn from_str(s: &str) -> Result<ExportFormat, String> {
        match s {
            "csv" => Ok(ExportFormat::Csv),
            "jsonl" => Ok(ExportFormat::Jsonl),
            _ => Err(format!("`{s}`: expected csv or jsonl")),
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportSummary {
    /// Rows (experiments) written.
    pub experiments: u64,
    /// The CSV header's columns (JSON lines: the same fields, nested).
    pub columns: Vec<String>,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    id: &'a str,
    status: &'a str,
    repetition: u32,
    seed: u64,
    params: serde_json::Map<String, serde_json::Value>,
    metrics: &'a std::collections::BTreeMap<String, f64>,
}

/// Write every experiment of `study` to `out`.
pub fn export(
    store: &Store,
    study: &str,
    format: ExportFormat,
    out: &mut dyn Write,
) -> Result<ExportSummary, AnalysisError> {
    let view = StudyView::load(store, study)?;
    let keys = view.keys();
    let metrics = store.metric_names(view.info.id)?;
    let rows = store.experiments(view.info.id)?;
    let mut columns: Vec<String> = ["id", "status", "repetition", "seed"].map(String::from).to_vec();
    columns.extend(keys.iter().cloned());
    for m in &metrics {
        columns.push(if columns.contains(m) { format!("metric:{m}") } else { m.clone() });
    }
    let mut out = std::io::BufWriter::new(out);
    match format {
        ExportFormat::Csv => {
            write_csv_line(&mut out, columns.iter().map(String::as_str))?;
            for r in &rows {
                let mut cells: Vec<String> =
                    vec![r.id.clone(), r.status.as_str().into(), r.repetition.to_string(), r.seed.to_string()];
                cells.extend(keys.iter().map(|k| r.params.get(k).map(|v| v.to_text()).unwrap_or_default()));
                cells.extend(metrics.iter().map(|m| r.scalars.get(m).map(|v| v.to_string()).unwrap_or_default()));
                write_csv_line(&mut out, cells.iter().map(String::as_str))?;
            }
        }
        ExportFormat::Jsonl => {
            for r in &rows {
                let params = keys
                    .iter()
                    .filter_map(|k| r.params.get(k).ok().map(|v| (k.clone(), serde_json::Value::String(v.to_text()))))
                    .collect();
                let row = JsonRow {
                    id: &r.id,
                    status: r.status.as_str(),
                    repetition: r.repetition,
                    seed: r.seed,
                    params,
                    metrics: &r.scalars,
                };
                serde_json::to_writer(&mut out, &row).map_err(std::io::Error::from)?;
                out.write_all(b"\n")?;
            }
        }
    }
    out.flush()?;
    Ok(ExportSummary { experiments: rows.len() as u64, columns })
}

/// One CSV line: a cell with a comma, quote or line break is quoted, its
/// quotes doubled.
fn write_csv_line<'a>(out: &mut impl Write, cells: impl Iterator<Item = &'a str>) -> std::io::Result<()> {
    for (i, cell) in cells.enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        if cell.contains([',', '"', '\n', '\r']) {
            write!(out, "\"{}\"", cell.replace('"', "\"\""))?;
        } else {
            out.write_all(cell.as_bytes())?;
        }
    }
    out.write_all(b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_are_quoted_when_needed() {
        let mut out = Vec::new();
        write_csv_line(&mut out, ["a", "b,c", "say \"hi\"", "x\ny"].into_iter()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a,\"b,c\",\"say \"\"hi\"\"\",\"x\ny\"\r\n");
    }
}
