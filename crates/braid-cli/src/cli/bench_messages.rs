//! `braid bench messages`: small-message rate and request/response latency
//! of every transport on loopback (issue 23): Exon, Braid's reliable
//! transport, the Node over TCP, Braid and Exon, kernel TCP and quinn, all
//! in the same run, with each rate as a ratio of kernel TCP's at the same
//! size. A small study of the lab's `messages` template: the template
//! measures and checks every message; this command maps flags to
//! experiments and summarizes their reports.
//!
//! ZeroMQ is not a peer: no Rust binding is in the workspace, and the
//! Debian/PyPI binding would measure a Python loop, not ZeroMQ.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::size::ByteSize;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::messages::{Messages, MessagesRun, Pattern, Transport, MAX_SIZE, MIN_SIZE, REPORT_ARTIFACT};
use clap::Args;
use serde_json::{json, Map};

use super::{emit, parse_secs, parse_size, table, Outcome};

/// Why ZeroMQ is not measured (in the JSON and under the table).
const ZEROMQ: &str = "not measured: no ZeroMQ binding in the workspace (a Python one would measure Python)";

#[derive(Debug, Args)]
pub struct BenchMessagesArgs {
    /// Message sizes, comma-separated, each 8 B to 1 MiB.
    #[arg(long, value_name = "SIZES", default_value = "64,1024", value_delimiter = ',', value_parser = parse_message_size)]
    size: Vec<ByteSize>,
    /// Transports, comma-separated: exon, braid, node (= node-tcp, node-braid, node-exon), node-tcp,
    /// node-braid, node-exon, tcp, quinn. Kernel TCP always runs: rates are stated against it.
    #[arg(long, value_name = "LIST", default_value = "exon,braid,node,tcp,quinn", value_delimiter = ',', value_parser = parse_transport)]
    transport: Vec<Transports>,
    /// Seconds each measurement sends (then it waits for the rest to arrive, bounded).
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_secs)]
    secs: Duration,
    /// Requests in flight of the latency runs, comma-separated (1 to 4096 each).
    #[arg(long, value_name = "LIST", default_value = "1,64", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    outstanding: Vec<u32>,
    /// Messages (requests) per measurement at most.
    #[arg(long, value_name = "M", default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// INSECURE: Exon, Braid and the Node without authentication and encryption (quinn is always
    /// encrypted, kernel TCP never).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Node runs: ask for a delivery notification per batch and wait for them (bounded), as an
    /// application that needs confirmations does; the other transports are measured as without it.
    #[arg(long)]
    notify: bool,
    /// Print JSON instead of a table (no progress bar).
    #[arg(long)]
    json: bool,
}

/// One `--transport` item: a transport, or `node` for the Node over each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transports(Vec<Transport>);

fn parse_transport(s: &str) -> Result<Transports, String> {
    match s.trim() {
        "node" => Ok(Transports(vec![Transport::NodeTcp, Transport::NodeBraid, Transport::NodeExon])),
        t => t.parse::<Transport>().map(|t| Transports(vec![t])).map_err(|_| {
            format!("unknown transport `{t}`: expected exon, braid, node, node-tcp, node-braid, node-exon, tcp or quinn")
        }),
    }
}

fn parse_message_size(s: &str) -> Result<ByteSize, String> {
    let v = parse_size(s.trim())?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&v.0) {
        return Err(format!("size {}: expected 8 B to 1 MiB (e.g. 64, 1KiB)", v.0));
    }
    Ok(v)
}

impl BenchMessagesArgs {
    /// The transports asked for, each once, in the bench's order, with
    /// kernel TCP.
    fn transports(&self) -> Vec<Transport> {
        let asked: Vec<Transport> = self.transport.iter().flat_map(|t| t.0.iter().copied()).collect();
        Transport::ALL.into_iter().filter(|t| *t == Transport::Tcp || asked.contains(t)).collect()
    }

    fn sizes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.size.iter().map(|s| s.0).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn outstanding(&self) -> Vec<u32> {
        let mut v = self.outstanding.clone();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Every experiment: at each size, each transport's one-way rate and its
/// latency at each `--outstanding`.
fn experiments(args: &BenchMessagesArgs) -> Vec<Vec<(String, Value)>> {
    let mut all = Vec::new();
    let messages = i64::try_from(args.messages).unwrap_or(i64::MAX);
    for size in args.sizes() {
        for t in args.transports() {
            let runs = std::iter::once(("oneway", 1)).chain(args.outstanding().into_iter().map(|k| ("rpc", k)));
            for (pattern, k) in runs {
                all.push(vec![
                    ("transport".to_string(), Value::Enum(t.name().into())),
                    ("pattern".to_string(), Value::Enum(pattern.into())),
                    ("size".to_string(), Value::Size(size)),
                    ("outstanding".to_string(), Value::Int(i64::from(k))),
                    ("time_limit".to_string(), Value::Duration(args.secs)),
                    ("messages".to_string(), Value::Int(messages)),
                    ("encrypted".to_string(), Value::Bool(!args.insecure_no_auth)),
                    ("notify".to_string(), Value::Bool(args.notify)),
                ]);
            }
        }
    }
    all
}

/// The runs' summary: rates, latencies and ratios.
struct Summary {
    runs: Vec<MessagesRun>,
    encrypted: bool,
    /// Node runs sent with a notification per batch (`--notify`).
    notify: bool,
}

impl Summary {
    fn rate(&self, t: Transport, size: u64) -> Option<f64> {
        self.runs
            .iter()
            .find(|r| r.transport == t && r.size == size && r.pattern == Pattern::Oneway)
            .map(|r| r.msgs_per_s)
    }

    fn latency(&self, t: Transport, size: u64, k: u64) -> Option<&MessagesRun> {
        self.runs.iter().find(|r| r.transport == t && r.size == size && r.outstanding == Some(k))
    }

    fn transports(&self) -> Vec<Transport> {
        let mut v: Vec<Transport> = self.runs.iter().map(|r| r.transport).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn sizes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.runs.iter().map(|r| r.size).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn outstanding(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.runs.iter().filter_map(|r| r.outstanding).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// `a`'s rate over `b`'s at each size where both ran.
    fn ratio(&self, a: Transport, b: Transport) -> Map<String, serde_json::Value> {
        let mut m = Map::new();
        for size in self.sizes() {
            if let (Some(x), Some(y)) = (self.rate(a, size), self.rate(b, size)) {
                m.insert(size.to_string(), json!(x / y.max(1e-9)));
            }
        }
        m
    }

    fn ok(&self) -> bool {
        self.runs.iter().all(|r| r.ok)
    }

    fn tcp_cc(&self) -> Option<&str> {
        self.runs.iter().find_map(|r| r.tcp_cc.as_deref())
    }

    fn json(&self) -> serde_json::Value {
        let rate: Vec<_> = self
            .runs
            .iter()
            .filter(|r| r.pattern == Pattern::Oneway)
            .map(|r| {
                let mut e = json!({"transport": r.transport.name(), "size": r.size, "msgs_per_s": r.msgs_per_s});
                // With --notify only: the batches confirmed, proof the notifications arrived.
                if let (Some(n), Some(m)) = (r.notified, e.as_object_mut()) {
                    m.insert("notified".into(), json!(n));
                }
                e
            })
            .collect();
        let latency: Vec<_> = self
            .runs
            .iter()
            .filter(|r| r.pattern == Pattern::Rpc)
            .map(|r| {
                json!({"transport": r.transport.name(), "size": r.size, "outstanding": r.outstanding,
                       "p50_us": r.p50_us, "p99_us": r.p99_us, "requests_per_s": r.msgs_per_s})
            })
            .collect();
        let mut out = Map::new();
        out.insert("encrypted".into(), json!(self.encrypted));
        out.insert("notify".into(), json!(self.notify));
        out.insert("tcp_cc".into(), json!(self.tcp_cc()));
        out.insert("rate".into(), json!(rate));
        out.insert("latency".into(), json!(latency));
        let transports = self.transports();
        for &t in transports.iter().filter(|&&t| t != Transport::Tcp) {
            out.insert(format!("{}_over_tcp", t.name()), json!(self.ratio(t, Transport::Tcp)));
        }
        if transports.contains(&Transport::Braid) && transports.contains(&Transport::Quinn) {
            out.insert("braid_over_quinn".into(), json!(self.ratio(Transport::Braid, Transport::Quinn)));
        }
        // The Node against the bare transport it sends over.
        let mut node = Map::new();
        for &t in transports.iter().filter(|t| t.node_transport().is_some() && transports.contains(&t.bare())) {
            node.insert(t.name().into(), json!(self.ratio(t, t.bare())));
        }
        out.insert("node_over_bare".into(), json!(node));
        // Median latency at one request in flight, against kernel TCP's.
        let mut p50 = Map::new();
        for &t in transports.iter().filter(|&&t| t != Transport::Tcp) {
            let mut m = Map::new();
            for size in self.sizes() {
                let p = |t| self.latency(t, size, 1).and_then(|r| r.p50_us);
                if let (Some(x), Some(y)) = (p(t), p(Transport::Tcp)) {
                    m.insert(size.to_string(), json!(x / y.max(1e-9)));
                }
            }
            if !m.is_empty() {
                p50.insert(t.name().into(), json!(m));
            }
        }
        out.insert("p50_at_1_over_tcp".into(), json!(p50));
        let failed: Vec<_> = self.runs.iter().filter(|r| !r.ok).collect();
        out.insert("checks_ok".into(), json!(self.ok()));
        out.insert("failed_checks".into(), json!(failed));
        out.insert("zeromq".into(), json!(ZEROMQ));
        serde_json::Value::Object(out)
    }

    fn table(&self) -> String {
        let ks = self.outstanding();
        let mut header = vec!["transport".to_string(), "size".into(), "msgs/s".into(), "x tcp".into()];
        for k in &ks {
            header.push(format!("p50 @{k} (us)"));
            header.push(format!("p99 @{k} (us)"));
        }
        header.push("checks".into());
        let mut rows = Vec::new();
        for size in self.sizes() {
            let tcp = self.rate(Transport::Tcp, size);
            for t in self.transports() {
                let rate = self.rate(t, size);
                let mut row = vec![
                    t.name().to_string(),
                    ByteSize(size).to_string(),
                    rate.map_or("-".into(), |r| format!("{r:.0}")),
                    match (rate, tcp) {
                        (Some(r), Some(b)) => format!("{:.3}", r / b.max(1e-9)),
                        _ => "-".into(),
                    },
                ];
                for &k in &ks {
                    let l = self.latency(t, size, k);
                    let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
                    row.push(us(l.and_then(|r| r.p50_us)));
                    row.push(us(l.and_then(|r| r.p99_us)));
                }
                let ok = self.runs.iter().filter(|r| r.transport == t && r.size == size).all(|r| r.ok);
                row.push(if ok { "ok" } else { "FAILED" }.into());
                rows.push(row);
            }
        }
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        table::render(&header, &rows)
    }
}

pub async fn run(args: BenchMessagesArgs) -> anyhow::Result<Outcome> {
    let experiments = experiments(&args);
    // Sending time, then at most the drain (the limit, at least 5 s), and
    // connection set-up and teardown.
    let timeout = args.secs * 2 + Duration::from_secs(5) + Duration::from_secs(20);
    let options = OneOffOptions { timeout: Some(timeout), ..OneOffOptions::default() };
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Messages), experiments, &options, show_progress))
    }
    .await
    .context("benchmark task")??;
    let mut runs = Vec::with_capacity(results.len());
    for r in &results {
        let what = ["transport", "pattern", "size", "outstanding"]
            .map(|k| r.params.get(k).map(Value::to_text).unwrap_or_default())
            .join(" ");
        if let Some(e) = &r.error {
            anyhow::bail!("{what}: {e}");
        }
        let artifact = r.artifact(REPORT_ARTIFACT).with_context(|| format!("{what}: no report"))?;
        runs.push(serde_json::from_value::<MessagesRun>(artifact.clone()).with_context(|| format!("{what}: report"))?);
    }
    let summary = Summary { runs, encrypted: !args.insecure_no_auth, notify: args.notify };
    if args.json {
        emit(&summary.json().to_string());
    } else {
        let security = if summary.encrypted {
            "exon, braid, node encrypted and authenticated"
        } else {
            "exon, braid, node NOT encrypted (--insecure-no-auth)"
        };
        let notify = if summary.notify { "; node: a delivery notification per batch, awaited" } else { "" };
        emit(&format!(
            "messages on loopback, {} s per measurement; {security}; quinn encrypted (TLS 1.3); kernel TCP plaintext, congestion control {}{notify}",
            args.secs.as_secs_f64(),
            summary.tcp_cc().unwrap_or("?")
        ));
        emit(&summary.table());
        emit(&format!("ZeroMQ {ZEROMQ}"));
    }
    Ok(Outcome::from_ok(summary.ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> BenchMessagesArgs {
        crate::cli::parse_flags(argv)
    }

    fn value<'a>(e: &'a [(String, Value)], key: &str) -> &'a Value {
        &e.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key} in {e:?}")).1
    }

    #[test]
    fn flags_map_to_experiments() {
        let e = experiments(&parse(&[]));
        // 2 sizes × 7 transports × (one-way + 2 latencies).
        assert_eq!(e.len(), 2 * 7 * 3);
        let e = experiments(&parse(&["--transport", "exon,node", "--size", "1KiB", "--outstanding", "8", "--secs", "0.5"]));
        let ts: Vec<String> = e.iter().map(|x| value(x, "transport").to_text()).collect();
        assert_eq!(ts, ["exon", "exon", "node-tcp", "node-tcp", "node-braid", "node-braid", "node-exon", "node-exon", "tcp", "tcp"]);
        assert!(e.iter().all(|x| value(x, "size") == &Value::Size(1024)));
        assert_eq!(value(&e[1], "pattern"), &Value::Enum("rpc".into()));
        assert_eq!(value(&e[1], "outstanding"), &Value::Int(8));
        assert_eq!(value(&e[0], "time_limit"), &Value::Duration(Duration::from_millis(500)));
        assert_eq!(value(&e[0], "encrypted"), &Value::Bool(true));
        let insecure = experiments(&parse(&["--insecure-no-auth"]));
        assert!(insecure.iter().all(|x| value(x, "encrypted") == &Value::Bool(false)));
        assert_eq!(value(&e[0], "notify"), &Value::Bool(false));
        let notify = experiments(&parse(&["--notify"]));
        assert!(notify.iter().all(|x| value(x, "notify") == &Value::Bool(true)));
        // Every value is one the template accepts.
        let decls = braid_lab::template::Template::params(&Messages);
        for (k, v) in &e[1] {
            let d = decls.iter().find(|d| &d.name == k).unwrap();
            d.ty.parse_text(&v.to_text()).unwrap();
        }
    }

    #[test]
    fn bad_values_name_the_allowed_form() {
        assert!(parse_message_size("0").unwrap_err().contains("8 B to 1 MiB"));
        assert!(parse_message_size("2MiB").unwrap_err().contains("8 B to 1 MiB"));
        assert!(parse_transport("zmq").unwrap_err().contains("exon, braid, node"));
        assert_eq!(parse_transport("node").unwrap().0.len(), 3);
    }

    fn run_of(t: Transport, size: u64, pattern: Pattern, k: Option<u64>, rate: f64, p50: Option<f64>) -> MessagesRun {
        let mut r: MessagesRun = serde_json::from_value(json!({
            "transport": t, "pattern": pattern, "size": size, "outstanding": k, "encrypted": true, "tcp_cc": null,
            "time_limit_s": 1.0, "sent": 10, "msgs_per_s": rate, "window_s": 1.0, "p50_us": p50, "p99_us": p50,
            "verdict": {"delivered": 10, "duplicated": 0, "lost": 0, "reordered": 0, "corrupt": 0},
            "replies": null, "exon_in_doubt": null, "exon_unsettled": null, "ok": true
        }))
        .unwrap();
        r.tcp_cc = (t == Transport::Tcp).then(|| "bbr".to_string());
        r
    }

    #[test]
    fn summary_states_ratios_against_tcp() {
        let runs = vec![
            run_of(Transport::Tcp, 64, Pattern::Oneway, None, 1000.0, None),
            run_of(Transport::Tcp, 64, Pattern::Rpc, Some(1), 50.0, Some(20.0)),
            run_of(Transport::Exon, 64, Pattern::Oneway, None, 250.0, None),
            run_of(Transport::Exon, 64, Pattern::Rpc, Some(1), 40.0, Some(30.0)),
            run_of(Transport::NodeExon, 64, Pattern::Oneway, None, 200.0, None),
        ];
        let s = Summary { runs, encrypted: true, notify: false };
        let j = s.json();
        assert_eq!(j["exon_over_tcp"]["64"], 0.25);
        assert_eq!(j["node-exon_over_tcp"]["64"], 0.2);
        assert_eq!(j["node_over_bare"]["node-exon"]["64"], 0.8);
        assert_eq!(j["p50_at_1_over_tcp"]["exon"]["64"], 1.5);
        assert_eq!(j["tcp_cc"], "bbr");
        assert_eq!(j["encrypted"], true);
        assert_eq!(j["rate"].as_array().unwrap().len(), 3);
        assert_eq!(j["latency"][0]["outstanding"], 1);
        assert_eq!(j["checks_ok"], true);
        assert_eq!(j["notify"], false);
        assert!(j["rate"].as_array().unwrap().iter().all(|r| r.get("notified").is_none()));
        assert!(s.table().contains("0.250"));
    }
}
