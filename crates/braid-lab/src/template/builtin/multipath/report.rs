//! What a `multipath` experiment reports ([`MultipathRun`], its `report`
//! artifact) and what `braid bench multipath` prints from its experiments
//! ([`MultipathReport`]: the same JSON keys and tables as before the lab).

use serde::{Deserialize, Serialize};

use crate::analysis::table::Table;

/// One goodput variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputRow {
    /// `braid:<scheduler>`, `mptcp` or `tcp`.
    pub variant: String,
    /// Goodput over the measurement window, Mbit/s.
    pub mbps: f64,
    /// Application bytes delivered during the whole run (warm-up included).
    pub bytes_delivered: u64,
    /// IP bytes offered to the emulated links, both directions.
    pub wire_bytes: u64,
    /// `wire_bytes` over `bytes_delivered`.
    pub wire_per_delivered: f64,
    /// Only for Braid: stream bytes each path carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_bytes_by_path: Option<Vec<u64>>,
    /// Only for MPTCP: whether the connection really ran MPTCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp_active: Option<bool>,
    /// The run delivered data.
    pub ok: bool,
}

/// One scheduler's flow-completion times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FctRow {
    /// The scheduler's name.
    pub scheduler: String,
    /// Flows completed.
    pub flows: usize,
    /// Completion-time quantiles, mean and maximum, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p90_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub mean_ms: f64,
    /// See `p50_ms`.
    pub max_ms: f64,
    /// Application bytes delivered both ways.
    pub bytes_delivered: u64,
    /// IP bytes offered to the emulated links, both directions.
    pub wire_bytes: u64,
    /// `wire_bytes` over `bytes_delivered`.
    pub wire_per_delivered: f64,
    /// Every flow completed with a response of the right size.
    pub ok: bool,
}

/// Which half of the benchmark an experiment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// Bulk goodput of Braid multipath, kernel MPTCP and one-path TCP.
    Goodput,
    /// Request/response flow completion times of one scheduler.
    Fct,
}

impl Part {
    /// `goodput` or `fct`: the parameter's value.
    pub fn name(self) -> &'static str {
        match self {
            Part::Goodput => "goodput",
            Part::Fct => "fct",
        }
    }
}

/// One `multipath` experiment. The `report` artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultipathRun {
    /// The half it ran.
    pub part: Part,
    /// The testbed's paths (link specs).
    pub paths: Vec<String>,
    /// The scheduler's name.
    pub scheduler: String,
    /// Braid's largest UDP payload.
    pub max_datagram_size: u16,
    /// Goodput part: Braid, MPTCP, TCP.
    pub goodput: Vec<GoodputRow>,
    /// FCT part: the response size.
    pub fct_bytes: u64,
    /// FCT part: the scheduler's flow-completion times.
    pub fct: Option<FctRow>,
}

impl MultipathRun {
    /// Braid's goodput over kernel MPTCP's, if both ran.
    pub fn braid_over_mptcp(&self) -> Option<f64> {
        braid_over_mptcp(&self.goodput)
    }

    /// Every run delivered what it should.
    pub fn ok(&self) -> bool {
        self.goodput.iter().all(|r| r.ok) && self.fct.iter().all(|r| r.ok)
    }
}

fn braid_over_mptcp(goodput: &[GoodputRow]) -> Option<f64> {
    let braid = goodput.iter().find(|r| r.variant.starts_with("braid")).map(|r| r.mbps);
    let mptcp = goodput.iter().find(|r| r.variant == "mptcp").map(|r| r.mbps);
    braid.zip(mptcp).filter(|(_, m)| *m > 0.0).map(|(b, m)| b / m)
}

/// `braid bench multipath`'s report: the JSON it prints and its tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultipathReport {
    /// The goodput part's paths.
    pub paths: Vec<String>,
    /// The goodput part's scheduler.
    pub scheduler: String,
    /// Braid's largest UDP payload in these runs.
    pub max_datagram_size: u16,
    /// Braid ran authenticated and encrypted (false: `--insecure-no-auth`).
    pub encrypted: bool,
    /// Braid, MPTCP, TCP (empty without the goodput part).
    pub goodput: Vec<GoodputRow>,
    /// The FCT part's paths.
    pub fct_paths: Vec<String>,
    /// The FCT part's response size.
    pub fct_bytes: u64,
    /// Per scheduler, in the order given.
    pub fct: Vec<FctRow>,
    /// Braid aggregate over kernel MPTCP (goodput part).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub braid_over_mptcp: Option<f64>,
    /// 1 - p90(second scheduler) / p90(first scheduler) (FCT part, with at
    /// least two schedulers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_reduction: Option<f64>,
    /// Every run delivered what it should.
    pub ok: bool,
}

/// What the command asked for, printed with the results.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSettings {
    /// The goodput part's paths.
    pub paths: Vec<String>,
    /// The goodput part's scheduler's name.
    pub scheduler: String,
    /// Braid's largest UDP payload.
    pub max_datagram_size: u16,
    /// The FCT part's paths.
    pub fct_paths: Vec<String>,
    /// The FCT part's response size.
    pub fct_bytes: u64,
    /// Braid ran authenticated and encrypted.
    pub encrypted: bool,
}

impl MultipathReport {
    /// The report of the goodput experiment (if it ran) and the FCT
    /// experiments (one per scheduler, in order).
    pub fn new(settings: &BenchSettings, goodput: Option<&MultipathRun>, fct: &[MultipathRun]) -> MultipathReport {
        let goodput: Vec<GoodputRow> = goodput.map(|g| g.goodput.clone()).unwrap_or_default();
        let fct: Vec<FctRow> = fct.iter().filter_map(|r| r.fct.clone()).collect();
        let p90_reduction = (fct.len() >= 2 && fct[0].p90_ms > 0.0).then(|| 1.0 - fct[1].p90_ms / fct[0].p90_ms);
        let ok = goodput.iter().all(|r| r.ok) && fct.iter().all(|r| r.ok);
        MultipathReport {
            paths: settings.paths.clone(),
            scheduler: settings.scheduler.clone(),
            max_datagram_size: settings.max_datagram_size,
            encrypted: settings.encrypted,
            braid_over_mptcp: braid_over_mptcp(&goodput),
            goodput,
            fct_paths: settings.fct_paths.clone(),
            fct_bytes: settings.fct_bytes,
            fct,
            p90_reduction,
            ok,
        }
    }

    /// Goodput per variant, wire bytes per delivered byte, and what each
    /// path carried (Braid) or whether MPTCP held (MPTCP).
    pub fn goodput_table(&self) -> Table {
        let mut t = Table::new(["variant", "Mbit/s", "wire/delivered", "MB per path"]);
        for g in &self.goodput {
            t.push(vec![
                g.variant.clone(),
                format!("{:.1}", g.mbps),
                format!("{:.3}", g.wire_per_delivered),
                g.stream_bytes_by_path
                    .as_ref()
                    .map(|v| v.iter().map(|b| format!("{:.1}", *b as f64 / 1e6)).collect::<Vec<_>>().join(" / "))
                    .or_else(|| g.mptcp_active.map(|m| if m { "mptcp".into() } else { "fell back to tcp".into() }))
                    .unwrap_or_default(),
            ]);
        }
        t
    }

    /// Flow-completion times per scheduler.
    pub fn fct_table(&self) -> Table {
        let mut t = Table::new(["scheduler", "flows", "p50 ms", "p90 ms", "p99 ms", "mean ms", "wire/delivered"]);
        for f in &self.fct {
            t.push(vec![
                f.scheduler.clone(),
                f.flows.to_string(),
                format!("{:.1}", f.p50_ms),
                format!("{:.1}", f.p90_ms),
                format!("{:.1}", f.p99_ms),
                format!("{:.1}", f.mean_ms),
                format!("{:.3}", f.wire_per_delivered),
            ]);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goodput_row(variant: &str, mbps: f64) -> GoodputRow {
        GoodputRow {
            variant: variant.into(),
            mbps,
            bytes_delivered: 1000,
            wire_bytes: 1100,
            wire_per_delivered: 1.1,
            stream_bytes_by_path: variant.starts_with("braid").then(|| vec![600, 500]),
            mptcp_active: (variant == "mptcp").then_some(true),
            ok: true,
        }
    }

    fn fct_run(scheduler: &str, p90: f64) -> MultipathRun {
        MultipathRun {
            part: Part::Fct,
            paths: vec!["rtt=20ms,rate=50mbit,loss=2%".into()],
            scheduler: scheduler.into(),
            max_datagram_size: 1472,
            goodput: vec![],
            fct_bytes: 10_000,
            fct: Some(FctRow {
                scheduler: scheduler.into(),
                flows: 20,
                p50_ms: p90 / 2.0,
                p90_ms: p90,
                p99_ms: p90 * 2.0,
                mean_ms: p90 / 2.0,
                max_ms: p90 * 3.0,
                bytes_delivered: 20 * 10_064,
                wire_bytes: 300_000,
                wire_per_delivered: 1.5,
                ok: true,
            }),
        }
    }

    fn settings() -> BenchSettings {
        BenchSettings {
            paths: vec!["a".into(), "b".into()],
            scheduler: "min_rtt".into(),
            max_datagram_size: 1472,
            fct_paths: vec!["a,loss=2%".into(), "b,loss=2%".into()],
            fct_bytes: 10_000,
            encrypted: true,
        }
    }

    #[test]
    fn the_report_combines_the_parts_with_todays_keys() {
        let goodput = MultipathRun {
            part: Part::Goodput,
            paths: vec!["a".into(), "b".into()],
            scheduler: "min_rtt".into(),
            max_datagram_size: 1472,
            goodput: vec![goodput_row("braid:min_rtt", 90.0), goodput_row("mptcp", 60.0), goodput_row("tcp", 45.0)],
            fct_bytes: 10_000,
            fct: None,
        };
        assert_eq!(goodput.braid_over_mptcp(), Some(1.5));
        let fct = [fct_run("min_rtt", 100.0), fct_run("redundant", 40.0)];
        let r = MultipathReport::new(&settings(), Some(&goodput), &fct);
        assert_eq!(r.braid_over_mptcp, Some(1.5));
        assert!((r.p90_reduction.unwrap() - 0.6).abs() < 1e-12);
        assert!(r.ok);
        let v = serde_json::to_value(&r).unwrap();
        for key in ["paths", "scheduler", "max_datagram_size", "goodput", "fct_paths", "fct_bytes", "fct", "braid_over_mptcp", "p90_reduction", "ok"] {
            assert!(v.get(key).is_some(), "{key} missing in {v}");
        }
        assert!(v["goodput"][1].get("stream_bytes_by_path").is_none());
        assert_eq!(v["goodput"][1]["mptcp_active"], true);
        assert_eq!(r.goodput_table().rows[0][3], "0.0 / 0.0");
        assert_eq!(r.goodput_table().rows[1][3], "mptcp");
        assert_eq!(r.fct_table().rows[1][0], "redundant");
    }

    #[test]
    fn a_missing_part_leaves_its_ratio_out() {
        let r = MultipathReport::new(&settings(), None, &[fct_run("min_rtt", 100.0)]);
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("braid_over_mptcp").is_none());
        assert!(v.get("p90_reduction").is_none());
        assert_eq!(v["goodput"].as_array().unwrap().len(), 0);
        let mut failed = fct_run("redundant", 50.0);
        failed.fct.as_mut().unwrap().ok = false;
        assert!(!failed.ok());
        assert!(!MultipathReport::new(&settings(), None, &[failed]).ok);
    }

    #[test]
    fn artifacts_read_back() {
        let run = fct_run("min_rtt", 100.0);
        let back: MultipathRun = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
        assert_eq!(back, run);
    }
}
