//! `braid bench handshake`: connections established per second, encrypted,
//! Braid against quinn (issue 17, "Performance"), with TLS over kernel TCP
//! (the Node's TCP transport), Braid without authentication and plain TCP
//! as references. A small study of the lab's `handshake` template: each
//! round runs every peer once, the order rotating by one each round so slow
//! drift of the machine hits all peers alike, and the median of `--repeat`
//! rounds is reported ([`HandshakeSummary`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::handshake::summary::{HandshakeRun, HandshakeSummary};
use braid_lab::template::builtin::handshake::{Handshake, Peer, REPORT_ARTIFACT};
use clap::Args;

use super::{emit, parse_secs, table, Outcome};

#[derive(Debug, Args)]
pub struct BenchHandshakeArgs {
    /// Seconds each peer starts new connections for.
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_secs)]
    secs: Duration,
    /// Connections in flight at once (1..=4096).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,
    /// Report the median of this many rounds (1..=99).
    #[arg(long, value_name = "R", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    repeat: u32,
    /// Print JSON instead of a table (no progress bar).
    #[arg(long)]
    json: bool,
    /// INSECURE: measure Braid only without authentication and encryption (by default Braid runs
    /// encrypted, and once per round without, to report what encryption costs; quinn and TLS are
    /// always encrypted, plain TCP never).
    #[arg(long)]
    insecure_no_auth: bool,
}

/// The peers of one round.
fn round_peers(args: &BenchHandshakeArgs) -> Vec<Peer> {
    Peer::ALL.into_iter().filter(|&p| p != Peer::Braid || !args.insecure_no_auth).collect()
}

/// For each round every peer once, the order rotating by one each round.
fn experiments(args: &BenchHandshakeArgs) -> Vec<Vec<(String, Value)>> {
    let peers = round_peers(args);
    let mut all = Vec::new();
    for round in 0..args.repeat as usize {
        for k in 0..peers.len() {
            let peer = peers[(round + k) % peers.len()];
            all.push(vec![
                ("peer".to_string(), Value::Enum(peer.name().into())),
                ("secs".to_string(), Value::Float(args.secs.as_secs_f64())),
                ("concurrency".to_string(), Value::Int(i64::from(args.concurrency))),
            ]);
        }
    }
    all
}

pub async fn run(args: BenchHandshakeArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(args.secs >= Duration::from_millis(10), "--secs: expected at least 0.01 seconds");
    let experiments = experiments(&args);
    // The measurement, then at most a round's limit and the drain check,
    // with room for set-up.
    let timeout = args.secs + Duration::from_secs(40);
    let options = OneOffOptions { timeout: Some(timeout), ..OneOffOptions::default() };
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || {
            run_experiments_with_progress(Arc::new(Handshake), experiments, &options, show_progress)
        })
    }
    .await
    .context("benchmark task")??;
    let runs: Vec<HandshakeRun> = super::bench::peer_reports(&results, REPORT_ARTIFACT)?;
    let summary = HandshakeSummary::new(&runs, args.repeat)?;
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

    fn parse(argv: &[&str]) -> BenchHandshakeArgs {
        crate::cli::parse_flags(argv)
    }

    fn peers(e: &[Vec<(String, Value)>]) -> Vec<String> {
        e.iter().map(|x| x.iter().find(|(k, _)| k == "peer").unwrap().1.to_text()).collect()
    }

    #[test]
    fn rounds_rotate_the_peers() {
        let e = experiments(&parse(&["--repeat", "2", "--secs", "0.5", "--concurrency", "8"]));
        assert_eq!(
            peers(&e),
            [
                "braid", "braid-insecure", "quinn", "tls", "tcp", "braid-insecure", "quinn", "tls", "tcp", "braid"
            ]
        );
        assert!(e.iter().all(|x| x.contains(&("secs".to_string(), Value::Float(0.5)))));
        assert!(e.iter().all(|x| x.contains(&("concurrency".to_string(), Value::Int(8)))));
        // Every value is one the template accepts.
        let decls = braid_lab::template::Template::params(&Handshake);
        for (k, v) in &e[0] {
            let d = decls.iter().find(|d| &d.name == k).unwrap();
            d.ty.parse_text(&v.to_text()).unwrap();
        }
        let insecure = experiments(&parse(&["--insecure-no-auth"]));
        assert_eq!(peers(&insecure), ["braid-insecure", "quinn", "tls", "tcp"]);
    }
}
