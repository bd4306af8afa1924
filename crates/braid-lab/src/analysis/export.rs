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
use crate::store::{ExperimentKey, Store};

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
    metrics: Metrics<'a>,
}

/// An experiment's scalars as a JSON object, by name (what a
/// `BTreeMap<String, f64>` of them writes).
struct Metrics<'a> {
    names: &'a [String],
    values: &'a [(u32, f64)],
}

impl Serialize for Metrics<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.values.iter().map(|&(m, v)| (self.names[m as usize].as_str(), v)))
    }
}

/// A study read for export: loaded in one snapshot, written without the
/// store (the web UI streams it from another thread).
pub(crate) struct ExportData {
    view: StudyView,
    /// Every experiment's id, repetition and seed, in the order stored.
    keys: Vec<ExperimentKey>,
}

impl ExportData {
    /// Load the study called `study`.
    pub(crate) fn load(store: &Store, study: &str) -> Result<ExportData, AnalysisError> {
        store.snapshot(|store| {
            let view = StudyView::load(store, study)?;
            let keys = store.experiment_keys(view.info.id)?;
            Ok(ExportData { view, keys })
        })
    }

    /// The study's name.
    pub(crate) fn study(&self) -> &str {
        &self.view.info.name
    }
}

/// Write every experiment of `study` to `out`.
pub fn export(
    store: &Store,
    study: &str,
    format: ExportFormat,
    out: &mut dyn Write,
) -> Result<ExportSummary, AnalysisError> {
    write_export(&ExportData::load(store, study)?, format, out)
}

/// Write a loaded study, one experiment at a time (the experiments come
/// from memory: nothing the size of the file is built).
pub(crate) fn write_export(
    data: &ExportData,
    format: ExportFormat,
    out: &mut dyn Write,
) -> Result<ExportSummary, AnalysisError> {
    let view = &data.view;
    let keys = view.keys();
    let metrics = view.frame.metric_names();
    let mut columns: Vec<String> = ["id", "status", "repetition", "seed"].map(String::from).to_vec();
    columns.extend(keys.iter().cloned());
    for m in metrics {
        columns.push(if columns.contains(m) { format!("metric:{m}") } else { m.clone() });
    }
    if data.keys.len() != view.frame.len() {
        return Err(AnalysisError::Write(std::io::Error::other(format!(
            "study {}: {} experiments listed, {} loaded (read outside one snapshot?)",
            view.info.name,
            data.keys.len(),
            view.frame.len()
        ))));
    }
    let mut out = std::io::BufWriter::with_capacity(64 << 10, out);
    if format == ExportFormat::Csv {
        write_csv_line(&mut out, columns.iter().map(String::as_str))?;
    }
    let mut cells: Vec<String> = Vec::new();
    for (k, r) in data.keys.iter().zip(view.frame.rows(&keys)) {
        if k.pk != r.pk {
            return Err(AnalysisError::Write(std::io::Error::other(format!(
                "study {}: experiment rows out of step ({} against {})",
                view.info.name, k.pk, r.pk
            ))));
        }
        match format {
            ExportFormat::Csv => {
                cells.clear();
                cells.extend([k.id.clone(), r.status.as_str().into(), k.repetition.to_string(), k.seed.to_string()]);
                cells.extend(r.params.iter().map(|p| p.unwrap_or_default().to_string()));
                // Both by metric id (name order): one merge.
                let mut values = r.scalars.iter().peekable();
                for m in 0..metrics.len() as u32 {
                    match values.next_if(|(id, _)| *id == m) {
                        Some((_, v)) => cells.push(v.to_string()),
                        None => cells.push(String::new()),
                    }
                }
                write_csv_line(&mut out, cells.iter().map(String::as_str))?;
            }
            ExportFormat::Jsonl => {
                let params = keys
                    .iter()
                    .zip(&r.params)
                    .filter_map(|(k, p)| p.map(|text| (k.clone(), serde_json::Value::String(text.to_string()))))
                    .collect();
                let row = JsonRow {
                    id: &k.id,
                    status: r.status.as_str(),
                    repetition: k.repetition,
                    seed: k.seed,
                    params,
                    metrics: Metrics { names: metrics, values: r.scalars },
                };
                serde_json::to_writer(&mut out, &row).map_err(std::io::Error::from)?;
                out.write_all(b"\n")?;
            }
        }
    }
    out.flush()?;
    Ok(ExportSummary { experiments: data.keys.len() as u64, columns })
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
