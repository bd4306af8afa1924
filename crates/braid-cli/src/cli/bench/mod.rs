//! `braid bench stream`: Braid against kernel TCP and quinn on loopback, with
//! the same sizes: a small study of the lab's `stream` template. Runs are
//! interleaved (the order rotates every round) so slow drift of the machine
//! hits all peers alike, and the median of `--repeat` runs is reported, with
//! ratios against the peers: the performance goals are stated as those
//! ratios.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::size::ByteSize;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::template::builtin::stream::summary::{StreamRun, StreamSummary};
use braid_lab::template::builtin::stream::{quic, Peer, Stream, REPORT_ARTIFACT};
use clap::Args;

use super::{emit, parse_secs, parse_size, table, Outcome, TransportArgs};

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Bulk mode: bytes each peer transfers (e.g. 64MiB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    bytes: ByteSize,
    /// Message-rate mode: send this many messages instead of bulk data.
    #[arg(long, value_name = "M")]
    messages: Option<u64>,
    /// Message size in message-rate mode.
    #[arg(long, value_name = "SIZE", default_value = "1024", value_parser = parse_size, requires = "messages")]
    size: ByteSize,
    /// Application chunk size in bulk mode (Braid message size, TCP/quinn write size).
    #[arg(long, value_name = "SIZE", default_value = "128KiB", value_parser = parse_size)]
    chunk: ByteSize,
    /// Report the median of this many runs per peer (1..=99).
    #[arg(long, value_name = "R", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    repeat: u32,
    /// Give up on a run after this many seconds (default: 60 s plus 1 s per 10 MB).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    timeout: Option<Duration>,
    /// Print JSON instead of a table (no progress bars).
    #[arg(long)]
    json: bool,
    /// INSECURE: measure Braid only without authentication and encryption (by default Braid runs
    /// encrypted, and once per round without, to report what encryption costs).
    #[arg(long)]
    insecure_no_auth: bool,
    #[command(flatten)]
    transport: TransportArgs,
}

impl StreamArgs {
    /// Payload bytes of one run.
    fn total_bytes(&self) -> u64 {
        match self.messages {
            Some(count) => count.saturating_mul(self.size.0),
            None => self.bytes.0,
        }
    }

    /// The parameter values every run shares.
    fn workload(&self) -> anyhow::Result<Vec<(String, Value)>> {
        let piece = |flag: &str, v: ByteSize| -> anyhow::Result<Value> {
            anyhow::ensure!((1..=(16 << 20)).contains(&v.0), "{flag}: expected 1 byte to 16 MiB");
            Ok(Value::Size(v.0))
        };
        let mtu = self.transport.endpoint_config(true).transport.max_datagram_size;
        let mut values = vec![
            ("cc".to_string(), Value::Enum(self.transport.cc.as_str().to_string())),
            ("mtu".to_string(), Value::Int(i64::from(mtu))),
        ];
        match self.messages {
            Some(count) => {
                let count = i64::try_from(count).ok().filter(|&c| c >= 1);
                let count = count.context("--messages: expected at least 1")?;
                values.push(("mode".into(), Value::Enum("messages".into())));
                values.push(("messages".into(), Value::Int(count)));
                values.push(("size".into(), piece("--size", self.size)?));
            }
            None => {
                values.push(("mode".into(), Value::Enum("bulk".into())));
                values.push(("bytes".into(), Value::Size(self.bytes.0)));
                values.push(("chunk".into(), piece("--chunk", self.chunk)?));
            }
        }
        Ok(values)
    }
}

/// The experiments of `args`: for each round every peer once, the order
/// rotating by one each round.
/// The runs of one round: Braid (encrypted unless `--insecure-no-auth`),
/// TCP, quinn, and Braid without authentication to measure its cost.
/// Each one-off run's report artifact, parsed; the first failed run (or
/// one without a report) ends the benchmark with an error naming its peer
/// (the experiment's `peer` parameter).
pub(crate) fn peer_reports<T: serde::de::DeserializeOwned>(
    results: &[OneOffResult],
    artifact: &str,
) -> anyhow::Result<Vec<T>> {
    let mut runs = Vec::with_capacity(results.len());
    for r in results {
        let peer = r.params.get("peer").map(Value::to_text).unwrap_or_default();
        if let Some(e) = &r.error {
            let hint = if e.starts_with("deadline passed") { " (see --timeout)" } else { "" };
            anyhow::bail!("{peer} run failed: {e}{hint}");
        }
        let json = r.artifact(artifact).with_context(|| format!("{peer} run left no report"))?;
        runs.push(serde_json::from_value::<T>(json.clone()).with_context(|| format!("{peer} run's report"))?);
    }
    Ok(runs)
}

fn round_runs(args: &StreamArgs) -> Vec<(Peer, bool)> {
    let mut runs = vec![(Peer::Braid, !args.insecure_no_auth), (Peer::Tcp, false), (Peer::Quinn, false)];
    if !args.insecure_no_auth {
        runs.push((Peer::Braid, false));
    }
    runs
}

fn experiments(args: &StreamArgs) -> anyhow::Result<Vec<Vec<(String, Value)>>> {
    let shared = args.workload()?;
    let runs = round_runs(args);
    let mut all = Vec::new();
    for round in 0..args.repeat as usize {
        for k in 0..runs.len() {
            let (peer, encrypted) = runs[(round + k) % runs.len()];
            let mut values = vec![("peer".to_string(), Value::Enum(peer.name().into()))];
            values.push(("encrypted".to_string(), Value::Bool(encrypted)));
            values.extend(shared.iter().cloned());
            all.push(values);
        }
    }
    Ok(all)
}

pub async fn run(args: StreamArgs) -> anyhow::Result<Outcome> {
    args.transport.endpoint_config(true).transport.validate().context("--mtu")?;
    // quinn runs with every --cc only if it has that controller: say so
    // before Braid and TCP spend their runs.
    if quic::check_cc(args.transport.cc).is_err() {
        anyhow::bail!("quinn has no `{}` congestion control: compare with --cc newreno or cubic", args.transport.cc);
    }
    let experiments = experiments(&args)?;
    let total = args.total_bytes();
    let timeout = args.timeout.unwrap_or(Duration::from_secs(60) + Duration::from_secs_f64(total as f64 / 10e6));
    let options = OneOffOptions { timeout: Some(timeout), ..OneOffOptions::default() };
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Stream), experiments, &options, show_progress))
    }
        .await
        .context("benchmark task")??;
    let runs: Vec<StreamRun> = peer_reports(&results, REPORT_ARTIFACT)?;
    let summary = StreamSummary::new(&runs, args.repeat)?;
    if args.json {
        emit(&summary.json().to_string());
    } else {
        emit(&summary.title());
        emit(&table::render(&summary.header(), &summary.rows()));
        emit(&summary.footer());
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> StreamArgs {
        crate::cli::parse_flags(argv)
    }

    fn value<'a>(e: &'a [(String, Value)], key: &str) -> &'a Value {
        &e.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key} in {e:?}")).1
    }

    #[test]
    fn rounds_rotate_the_peers() {
        let e = experiments(&parse(&["--repeat", "2", "--bytes", "4MiB"])).unwrap();
        let peers: Vec<String> = e.iter().map(|x| value(x, "peer").to_text()).collect();
        assert_eq!(peers, ["braid", "tcp", "quinn", "braid", "tcp", "quinn", "braid", "braid"]);
        let encrypted: Vec<String> = e.iter().map(|x| value(x, "encrypted").to_text()).collect();
        assert_eq!(encrypted, ["true", "false", "false", "false", "false", "false", "false", "true"]);
        let insecure = experiments(&parse(&["--insecure-no-auth"])).unwrap();
        let peers: Vec<String> = insecure.iter().map(|x| value(x, "peer").to_text()).collect();
        assert_eq!(peers, ["braid", "tcp", "quinn"]);
        assert!(insecure.iter().all(|x| value(x, "encrypted") == &Value::Bool(false)));
        for x in &e {
            assert_eq!(value(x, "mode"), &Value::Enum("bulk".into()));
            assert_eq!(value(x, "bytes"), &Value::Size(4 << 20));
            assert_eq!(value(x, "chunk"), &Value::Size(128 << 10));
            assert_eq!(value(x, "cc"), &Value::Enum("cubic".into()));
            assert_eq!(value(x, "mtu"), &Value::Int(1452));
        }
    }

    #[test]
    fn message_mode_and_transport_flags_map_to_parameters() {
        let e = experiments(&parse(&["--messages", "2000", "--size", "64", "--cc", "newreno", "--mtu", "1300"])).unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(value(&e[0], "mode"), &Value::Enum("messages".into()));
        assert_eq!(value(&e[0], "messages"), &Value::Int(2000));
        assert_eq!(value(&e[0], "size"), &Value::Size(64));
        assert_eq!(value(&e[0], "cc"), &Value::Enum("newreno".into()));
        assert_eq!(value(&e[0], "mtu"), &Value::Int(1300));
        assert!(e[0].iter().all(|(k, _)| k != "bytes"));
        // Every value is one the template accepts.
        let decls = braid_lab::template::Template::params(&Stream);
        for (k, v) in &e[0] {
            let d = decls.iter().find(|d| &d.name == k).unwrap();
            d.ty.parse_text(&v.to_text()).unwrap();
        }
    }

    #[test]
    fn out_of_range_pieces_are_refused() {
        assert!(experiments(&parse(&["--chunk", "0"])).unwrap_err().to_string().contains("--chunk"));
        assert!(experiments(&parse(&["--messages", "5", "--size", "17MiB"])).unwrap_err().to_string().contains("--size"));
        assert!(experiments(&parse(&["--messages", "0"])).unwrap_err().to_string().contains("--messages"));
    }
}
