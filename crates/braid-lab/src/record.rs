//! The one record format: JSON lines that an experiment appends to the
//! file named by `BRAID_LAB_RECORDS`.
//!
//! ```text
//! {"metric":"goodput_mbps","value":93.1}
//! {"series":"cwnd","t":1.25,"value":40}
//! {"warn":"queue never filled"}
//! {"artifact":"report","json":{"phases":[]}}
//! ```
//!
//! Built-in templates write it through a [`Recorder`], command templates
//! (any language) by appending lines, Slurm result bundles carry the same
//! file: ingest is one function, [`parse_records`]. A line that is not a
//! record is not dropped silently: it becomes a warning naming the line.
//!
//! ```
//! use braid_lab::record::{parse_records, Record, Recorder};
//! let dir = std::env::temp_dir().join(format!("rec-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("records.jsonl");
//! let mut rec = Recorder::create(&path).unwrap();
//! rec.record("goodput_mbps", 93.1);
//! rec.series("cwnd", 1.25, 40.0);
//! rec.warn("queue never filled");
//! rec.flush().unwrap();
//! let text = std::fs::read_to_string(&path).unwrap();
//! let records = parse_records(&text);
//! assert_eq!(records[0], Record::Metric { name: "goodput_mbps".into(), value: 93.1 });
//! assert_eq!(records.len(), 3);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The environment variable naming the file an experiment appends its
/// records to.
pub const RECORDS_ENV: &str = "BRAID_LAB_RECORDS";

/// One thing an experiment reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Record {
    /// A scalar result: `{"metric": NAME, "value": X}`.
    Metric {
        /// Metric name.
        #[serde(rename = "metric")]
        name: String,
        /// Its value.
        value: f64,
    },
    /// A point of a time series: `{"series": NAME, "t": SECONDS, "value": X}`.
    Series {
        /// Series name.
        #[serde(rename = "series")]
        name: String,
        /// Seconds since the experiment's start.
        t: f64,
        /// Its value.
        value: f64,
    },
    /// Something the reader of the results should know.
    Warn {
        /// The message.
        warn: String,
    },
    /// A structured document the experiment produced (a bench's full
    /// report): `{"artifact": NAME, "json": {...}}`. Stored as is; analysis
    /// works on metrics and series, commands that print a template's own
    /// report read the artifact back.
    Artifact {
        /// Artifact name (`report`).
        artifact: String,
        /// Its content.
        json: serde_json::Value,
    },
}

/// Writes records as JSON lines, buffered. Values that JSON cannot carry
/// (NaN, infinities) become warnings instead of lost lines.
#[derive(Debug)]
pub struct Recorder {
    out: Sink,
}

#[derive(Debug)]
enum Sink {
    File(BufWriter<File>),
    Memory(Vec<Record>),
}

impl Recorder {
    /// Append to `path` (created if missing).
    pub fn create(path: &Path) -> io::Result<Recorder> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder { out: Sink::File(BufWriter::new(f)) })
    }

    /// Append to the file `BRAID_LAB_RECORDS` names, if it is set.
    pub fn from_env() -> Option<io::Result<Recorder>> {
        std::env::var_os(RECORDS_ENV).map(|p| Recorder::create(Path::new(&p)))
    }

    /// Keep records in memory ([`take`](Self::take) returns them).
    pub fn in_memory() -> Recorder {
        Recorder { out: Sink::Memory(Vec::new()) }
    }

    /// A scalar result.
    pub fn record(&mut self, metric: &str, value: f64) {
        if value.is_finite() {
            self.push(Record::Metric { name: metric.to_string(), value });
        } else {
            self.warn(&format!("metric {metric} is {value}, not recorded"));
        }
    }

    /// A time-series point, `t` seconds into the experiment.
    pub fn series(&mut self, series: &str, t: f64, value: f64) {
        if value.is_finite() && t.is_finite() {
            self.push(Record::Series { name: series.to_string(), t, value });
        } else {
            self.warn(&format!("series {series} at t={t} is {value}, not recorded"));
        }
    }

    /// A warning.
    pub fn warn(&mut self, message: &str) {
        self.push(Record::Warn { warn: message.to_string() });
    }

    /// A structured document (see [`Record::Artifact`]).
    pub fn artifact(&mut self, name: &str, json: serde_json::Value) {
        self.push(Record::Artifact { artifact: name.to_string(), json });
    }

    /// Any record.
    pub fn push(&mut self, record: Record) {
        match &mut self.out {
            Sink::Memory(v) => v.push(record),
            Sink::File(w) => {
                // serde_json cannot fail on these types; an I/O error shows
                // at flush.
                if let Ok(line) = serde_json::to_string(&record) {
                    let _ = writeln!(w, "{line}");
                }
            }
        }
    }

    /// Write out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Sink::File(w) => w.flush(),
            Sink::Memory(_) => Ok(()),
        }
    }

    /// The records kept in memory (empty for a file recorder).
    pub fn take(&mut self) -> Vec<Record> {
        match &mut self.out {
            Sink::Memory(v) => std::mem::take(v),
            Sink::File(_) => Vec::new(),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Parse a records file. Blank lines are skipped; a line that is not a
/// record becomes a [`Record::Warn`] quoting it, so nothing an experiment
/// wrote is lost without a trace.
pub fn parse_records(text: &str) -> Vec<Record> {
    text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).map(|(i, l)| parse_line(i + 1, l)).collect()
}

fn parse_line(number: usize, line: &str) -> Record {
    match serde_json::from_str::<Record>(line) {
        Ok(Record::Metric { value, .. } | Record::Series { value, .. }) if !value.is_finite() => {
            Record::Warn { warn: format!("records line {number}: value not finite: {}", clip(line)) }
        }
        Ok(r) => r,
        Err(_) => Record::Warn {
            warn: format!(
                "records line {number} is not a record (expected {{\"metric\":..,\"value\":..}}, \
                 {{\"series\":..,\"t\":..,\"value\":..}}, {{\"warn\":..}} or {{\"artifact\":..,\"json\":..}}): {}",
                clip(line)
            ),
        },
    }
}

fn clip(line: &str) -> String {
    let mut s: String = line.chars().take(200).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_three_forms_parse() {
        let text = "{\"metric\":\"goodput_mbps\",\"value\":93.1}\n\n{\"series\":\"cwnd\",\"t\":1.25,\"value\":40}\n{\"warn\":\"x\"}\nnot json\n";
        let r = parse_records(text);
        assert_eq!(r[0], Record::Metric { name: "goodput_mbps".into(), value: 93.1 });
        assert_eq!(r[1], Record::Series { name: "cwnd".into(), t: 1.25, value: 40.0 });
        assert_eq!(r[2], Record::Warn { warn: "x".into() });
        match &r[3] {
            Record::Warn { warn } => assert!(warn.contains("line 5") && warn.contains("not json"), "{warn}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_finite_values_become_warnings() {
        let mut rec = Recorder::in_memory();
        rec.record("x", f64::NAN);
        assert!(matches!(&rec.take()[0], Record::Warn { .. }));
    }

    proptest! {
        #[test]
        fn recorder_output_parses_back(name in "[a-z_]{1,12}", v in -1e12f64..1e12, t in 0f64..1e6) {
            let dir = std::env::temp_dir().join(format!("rec-prop-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{name}.jsonl"));
            let _ = std::fs::remove_file(&path);
            {
                let mut rec = Recorder::create(&path).unwrap();
                rec.record(&name, v);
                rec.series(&name, t, v);
            }
            let back = parse_records(&std::fs::read_to_string(&path).unwrap());
            prop_assert_eq!(back, vec![
                Record::Metric { name: name.clone(), value: v },
                Record::Series { name, t, value: v },
            ]);
        }

        #[test]
        fn any_text_parses_without_panic(s in "\\PC{0,200}") {
            let _ = parse_records(&s);
        }
    }
}
