//! `braid bench exon`: Exon exactly-once messaging against kernel TCP over
//! the emulator, in the settings of the Exon paper's evaluation (§V): a
//! small study of the lab's `exon` template (one run, `--grid` the paper's
//! settings, `--fairness` one Exon and one TCP CUBIC flow at once,
//! `--loopback` message rates on 127.0.0.1 without the emulator;
//! `--journal DIR` Exon with durable records, also measured without them
//! in the same run: group commits, messages per fsync, durable over
//! volatile). The template measures; this command maps its flags to
//! experiments and prints the template's reports.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use braid::size::ByteSize;
use braid::LinkSpec;
use braid_exon::ExonCc;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::template::builtin::exon::report::{grid_json, loopback_json, ExonRun, FairnessRun};
use braid_lab::template::builtin::exon::{Exon, MAX_SIZE, MIN_SIZE, REPORT_ARTIFACT};
use clap::{Args, ValueEnum};
use serde::de::DeserializeOwned;

use super::{emit, parse_link, parse_secs, parse_size, table, Outcome};

/// The fairness experiment's link.
const FAIRNESS_LINK: &str = "rate=100mbit,rtt=20ms";
/// The paper's grid (§V-D, V-E): bandwidth at 10 ms, RTT at 10 Mbit/s,
/// loss at 100 Mbit/s and 10 ms (duplicates of one setting run once).
const GRID: [&str; 7] = [
    "rtt=10ms,rate=1mbit",
    "rtt=10ms,rate=10mbit",
    "rtt=10ms,rate=100mbit",
    "rtt=6ms,rate=10mbit",
    "rtt=100ms,rate=10mbit",
    "rtt=10ms,rate=100mbit,loss=1%",
    "rtt=10ms,rate=100mbit,loss=5%",
];
/// `--loopback`'s message sizes.
const LOOPBACK_SIZES: [u64; 2] = [64, 1024];

/// Messaging pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// No-wait unidirectional messages: msgs/s.
    Oneway,
    /// Request/reply loops (--actors of them): requests/s and latency.
    Rpc,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Oneway => "oneway",
            Pattern::Rpc => "rpc",
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchExonArgs {
    /// oneway (msgs/s) or rpc (requests/s, latency). Default oneway; --grid without it runs both.
    #[arg(long, value_enum)]
    pattern: Option<Pattern>,
    /// Concurrent request/reply loops (rpc).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    actors: u64,
    /// The emulated link [default: rtt=10ms,rate=100mbit; with --fairness rate=100mbit,rtt=20ms].
    #[arg(long, value_name = "SPEC", value_parser = parse_link, conflicts_with_all = ["grid", "loopback"])]
    link: Option<LinkSpec>,
    /// Message (request, reply) size; 1KB = 1000 bytes as in the paper (8 B to 16 MiB).
    #[arg(long, value_name = "B", value_parser = parse_size, default_value = "1000")]
    size: ByteSize,
    /// Messages (one-way) or requests (rpc, over all actors) per run, at most.
    #[arg(long, value_name = "M", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// Seconds each run measures at most (it ends earlier once M arrived); fairness: seconds measured after 3 s of warm-up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    timeout: Duration,
    /// The paper's grid: 1/10/100 Mbit/s at 10 ms, 6/10/100 ms at 10 Mbit/s, loss 0/1/5% at 100 Mbit/s.
    #[arg(long, conflicts_with_all = ["fairness", "loopback"])]
    grid: bool,
    /// One Exon flow and one kernel TCP CUBIC flow at once: each one's share of the link.
    #[arg(long, conflicts_with = "loopback")]
    fairness: bool,
    /// No emulator: one-way msgs/s at 64 B and 1 KiB on 127.0.0.1, Exon vs TCP.
    #[arg(long)]
    loopback: bool,
    /// Exon's congestion control: bbr, newreno or cubic.
    #[arg(long, value_name = "ALGO", default_value = "bbr", value_parser = parse_exon_cc)]
    cc: ExonCc,
    /// Run Exon's BBR-style controller without its queue-loss guard (for comparison: unfair to TCP).
    #[arg(long)]
    no_guard: bool,
    /// Congestion control of the kernel TCP peer (the paper's Linux default was cubic).
    #[arg(long, value_name = "ALGO", default_value = "cubic", value_parser = parse_tcp_cc)]
    tcp_cc: String,
    /// Seed of the emulated links' random choices (loss); the i-th run of a grid uses S + i.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Keep Exon's sender and receiver records durable in DIR (clock and journal files per node, removed before each run; one fsync per group commit): exactly-once across crashes, at the cost measured here (Exon also runs without them: durable over volatile, fsyncs, messages per fsync).
    #[arg(long, value_name = "DIR")]
    journal: Option<std::path::PathBuf>,
    /// INSECURE: run Exon's bare protocol, no encryption or authentication (to measure their cost); the JSON says "encrypted": false.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn cc_name(cc: ExonCc) -> String {
    match cc {
        ExonCc::Bbr => "bbr".into(),
        ExonCc::Loss(a) => a.to_string(),
    }
}

fn parse_tcp_cc(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() < 16 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("invalid TCP congestion control `{s}`: expected a kernel algorithm name such as cubic, reno or bbr"))
    }
}

fn parse_exon_cc(s: &str) -> Result<ExonCc, String> {
    s.parse::<ExonCc>()
}

/// What the flags ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One run (or the grid) over emulated links.
    Links,
    Fairness,
    Loopback,
}

impl BenchExonArgs {
    fn kind(&self) -> Kind {
        if self.loopback {
            Kind::Loopback
        } else if self.fairness {
            Kind::Fairness
        } else {
            Kind::Links
        }
    }

    /// The parameter values every experiment shares.
    fn common(&self) -> anyhow::Result<Vec<(String, Value)>> {
        let timeout = self.timeout;
        let mut v = vec![
            ("actors".to_string(), Value::Int(i64::try_from(self.actors).context("--actors")?)),
            ("messages".to_string(), Value::Int(i64::try_from(self.messages).context("--messages: too large")?)),
            ("time_limit".to_string(), Value::Duration(timeout)),
            ("cc".to_string(), Value::Enum(cc_name(self.cc))),
            ("queue_loss_guard".to_string(), Value::Bool(!self.no_guard)),
            ("tcp_cc".to_string(), Value::String(self.tcp_cc.clone())),
            ("encrypted".to_string(), Value::Bool(!self.insecure_no_auth)),
        ];
        if let Some(dir) = &self.journal {
            v.push(("journal".into(), Value::Bool(true)));
            v.push(("journal_dir".into(), Value::String(dir.to_string_lossy().into_owned())));
        }
        Ok(v)
    }
}

/// The experiments the flags describe, in the order their rows print.
fn experiments(args: &BenchExonArgs) -> anyhow::Result<Vec<Vec<(String, Value)>>> {
    let common = args.common()?;
    let one = |mode: &str, pattern: Pattern, size: u64, link: Option<String>| {
        let mut v = vec![
            ("mode".to_string(), Value::Enum(mode.into())),
            ("pattern".to_string(), Value::Enum(pattern.name().into())),
            ("size".to_string(), Value::Size(size)),
        ];
        v.extend(link.map(|l| ("link".to_string(), Value::Link(l))));
        v.extend(common.iter().cloned());
        v
    };
    Ok(match args.kind() {
        Kind::Loopback => LOOPBACK_SIZES.iter().map(|&size| one("loopback", Pattern::Oneway, size, None)).collect(),
        Kind::Fairness => {
            let link = args.link.as_ref().map_or_else(|| canonical(FAIRNESS_LINK), ToString::to_string);
            vec![one("fairness", Pattern::Oneway, args.size.0, Some(link))]
        }
        Kind::Links => {
            let patterns = match (args.pattern, args.grid) {
                (Some(p), _) => vec![p],
                (None, true) => vec![Pattern::Oneway, Pattern::Rpc],
                (None, false) => vec![Pattern::Oneway],
            };
            let links: Vec<Option<String>> = if args.grid {
                GRID.iter().map(|l| Some(canonical(l))).collect()
            } else {
                vec![args.link.as_ref().map(ToString::to_string)]
            };
            let mut all = Vec::new();
            for link in &links {
                for &p in &patterns {
                    all.push(one("separate", p, args.size.0, link.clone()));
                }
            }
            all
        }
    })
}

/// The canonical text of a link spec written in this file.
fn canonical(spec: &str) -> String {
    spec.parse::<LinkSpec>().map_or_else(|_| spec.to_string(), |l| l.to_string())
}

pub async fn run(args: BenchExonArgs) -> anyhow::Result<Outcome> {
    if args.size.0 < MIN_SIZE || args.size.0 > MAX_SIZE {
        bail!("--size {}: must be between 8 B and 16 MiB (e.g. 1000, 1KiB, 64)", args.size.0);
    }
    let experiments = experiments(&args)?;
    let options = OneOffOptions { seed: args.seed, ..OneOffOptions::default() };
    // The template blocks (testbeds, measurement threads, runtimes of its
    // own): keep it off the async workers.
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Exon), experiments, &options, show_progress))
    }
        .await
        .context("benchmark task")??;
    if !args.json {
        emit(if args.insecure_no_auth {
            "Exon: INSECURE, no authentication or encryption (--insecure-no-auth)"
        } else {
            "Exon: encrypted, authenticated sessions (Noise IK, AEAD per datagram)"
        });
    }
    match args.kind() {
        Kind::Fairness => {
            let f: FairnessRun = report(&results[0])?;
            if args.json {
                emit(&serde_json::to_string(&f)?);
            } else {
                emit(&table::render(&FairnessRun::HEADER, &f.rows()));
                emit(&f.note());
            }
            Ok(Outcome::from_ok(f.ok))
        }
        kind => {
            let runs = results.iter().map(report::<ExonRun>).collect::<anyhow::Result<Vec<_>>>()?;
            let ok = runs.iter().all(|r| r.ok);
            match (kind, args.json) {
                (Kind::Loopback, true) => emit(&loopback_json(&runs).to_string()),
                (Kind::Loopback, false) => {
                    let rows: Vec<Vec<String>> = runs.iter().map(ExonRun::loopback_row).collect();
                    emit(&table::render(&ExonRun::LOOPBACK_HEADER, &rows));
                    emit_durability(&runs);
                }
                (_, true) if args.grid => emit(&grid_json(&runs).to_string()),
                (_, true) => {
                    let run = runs.first().context("no run")?;
                    emit(&run.json().to_string());
                }
                (_, false) => {
                    let rows: Vec<Vec<String>> = runs.iter().map(ExonRun::row).collect();
                    emit(&table::render(&ExonRun::HEADER, &rows));
                    emit(ExonRun::NOTE);
                    emit_durability(&runs);
                }
            }
            Ok(Outcome::from_ok(ok))
        }
    }
}

/// With a journal: the durable and volatile rates and the group commits.
fn emit_durability(runs: &[ExonRun]) {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(ExonRun::durable_row).collect();
    if !rows.is_empty() {
        emit(&table::render(&ExonRun::DURABLE_HEADER, &rows));
        emit(ExonRun::DURABLE_NOTE);
    }
}

/// An experiment's report, or its error.
fn report<T: DeserializeOwned>(r: &OneOffResult) -> anyhow::Result<T> {
    if let Some(e) = &r.error {
        bail!("{e}");
    }
    let json = r.artifact(REPORT_ARTIFACT).context("the run left no report")?;
    serde_json::from_value(json.clone()).context("the run's report")
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_lab::template::Template;

    fn parse(argv: &[&str]) -> BenchExonArgs {
        crate::cli::parse_flags(argv)
    }

    fn get<'a>(e: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
        e.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Every value is one the template declares and accepts.
    fn well_typed(all: &[Vec<(String, Value)>]) {
        let decls = Exon.params();
        for e in all {
            for (k, v) in e {
                let d = decls.iter().find(|d| &d.name == k).unwrap_or_else(|| panic!("undeclared {k}"));
                d.ty.parse_text(&v.to_text()).unwrap_or_else(|e| panic!("{k}: {e}"));
            }
        }
    }

    #[test]
    fn one_run_uses_the_template_defaults() {
        let e = experiments(&parse(&[])).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(get(&e[0], "mode"), Some(&Value::Enum("separate".into())));
        assert_eq!(get(&e[0], "pattern"), Some(&Value::Enum("oneway".into())));
        // No --link: the template's default, the paper's link.
        assert_eq!(get(&e[0], "link"), None);
        assert_eq!(get(&e[0], "time_limit"), Some(&Value::Duration(Duration::from_secs(10))));
        assert_eq!(get(&e[0], "journal"), None);
        well_typed(&e);
    }

    #[test]
    fn the_grid_is_links_times_patterns() {
        let e = experiments(&parse(&["--grid", "--messages", "500", "--no-guard", "--journal", "/tmp/j"])).unwrap();
        assert_eq!(e.len(), GRID.len() * 2);
        assert_eq!(get(&e[0], "pattern"), Some(&Value::Enum("oneway".into())));
        assert_eq!(get(&e[1], "pattern"), Some(&Value::Enum("rpc".into())));
        assert_eq!(get(&e[0], "link"), get(&e[1], "link"));
        assert_eq!(get(&e[13], "link"), Some(&Value::Link("rtt=10ms,rate=100mbit,loss=5%".into())));
        assert_eq!(get(&e[5], "messages"), Some(&Value::Int(500)));
        assert_eq!(get(&e[5], "queue_loss_guard"), Some(&Value::Bool(false)));
        assert_eq!(get(&e[5], "journal_dir"), Some(&Value::String("/tmp/j".into())));
        well_typed(&e);
        let rpc_only = experiments(&parse(&["--grid", "--pattern", "rpc"])).unwrap();
        assert_eq!(rpc_only.len(), GRID.len());
    }

    #[test]
    fn fairness_and_loopback_map_to_modes() {
        let f = experiments(&parse(&["--fairness", "--cc", "cubic", "--pattern", "rpc"])).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(get(&f[0], "mode"), Some(&Value::Enum("fairness".into())));
        assert_eq!(get(&f[0], "pattern"), Some(&Value::Enum("oneway".into())));
        assert_eq!(get(&f[0], "link"), Some(&Value::Link("rtt=20ms,rate=100mbit".into())));
        assert_eq!(get(&f[0], "cc"), Some(&Value::Enum("cubic".into())));
        let l = experiments(&parse(&["--loopback", "--tcp-cc", "reno"])).unwrap();
        let sizes: Vec<_> = l.iter().map(|e| get(e, "size").cloned()).collect();
        assert_eq!(sizes, [Some(Value::Size(64)), Some(Value::Size(1024))]);
        assert!(l.iter().all(|e| get(e, "link").is_none() && get(e, "mode") == Some(&Value::Enum("loopback".into()))));
        assert_eq!(get(&l[0], "tcp_cc"), Some(&Value::String("reno".into())));
        well_typed(&f);
        well_typed(&l);
    }

    #[test]
    fn encryption_is_on_unless_insecure_no_auth() {
        let e = experiments(&parse(&["--loopback"])).unwrap();
        assert!(e.iter().all(|x| get(x, "encrypted") == Some(&Value::Bool(true))));
        let e = experiments(&parse(&["--loopback", "--insecure-no-auth"])).unwrap();
        assert!(e.iter().all(|x| get(x, "encrypted") == Some(&Value::Bool(false))));
        well_typed(&e);
    }
}
