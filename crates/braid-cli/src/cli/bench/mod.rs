//! `braid bench stream`: Braid against kernel TCP and quinn on loopback, in
//! the same process and run, with the same sizes. Runs are interleaved
//! (the order rotates every round) so slow drift of the machine hits all
//! peers alike, and the median of `--repeat` runs is reported, with ratios
//! against the peers: the performance goals are stated as those ratios.

mod peers;
mod quic;

use std::time::Duration;

use anyhow::Context;
use braid::size::ByteSize;
use bytes::Bytes;
use clap::Args;
use rand::RngCore;
use rand::SeedableRng;
use serde_json::json;

use super::{emit, parse_secs, parse_size, progress, table, Outcome, TransportArgs};
use peers::{RunResult, Workload};

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
    #[command(flatten)]
    transport: TransportArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    Braid,
    Tcp,
    Quinn,
}

impl Peer {
    const ALL: [Peer; 3] = [Peer::Braid, Peer::Tcp, Peer::Quinn];

    fn name(self) -> &'static str {
        match self {
            Peer::Braid => "braid",
            Peer::Tcp => "tcp",
            Peer::Quinn => "quinn",
        }
    }
}

/// The median of a non-empty list (the lower middle for even lengths: a
/// value that was actually measured).
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() - 1) / 2]
}

pub async fn run(args: StreamArgs) -> anyhow::Result<Outcome> {
    let endpoint_cfg = args.transport.endpoint_config(true);
    endpoint_cfg.transport.validate().context("--mtu")?;
    let quic = quic::configs(&endpoint_cfg.transport)?;
    let workload = match args.messages {
        Some(count) => {
            anyhow::ensure!(count >= 1, "--messages: expected at least 1");
            let size = usize::try_from(args.size.0).ok().filter(|s| (1..=(16 << 20)).contains(s));
            let size = size.context("--size: expected 1 byte to 16 MiB")?;
            Workload::Messages { count, payload: random_payload(size) }
        }
        None => {
            let chunk = usize::try_from(args.chunk.0).ok().filter(|s| (1..=(16 << 20)).contains(s));
            let chunk = chunk.context("--chunk: expected 1 byte to 16 MiB")?;
            Workload::Bulk { bytes: args.bytes.0, chunk, payload: random_payload(chunk) }
        }
    };
    let total = workload.total_bytes();
    let limit = args.timeout.unwrap_or(Duration::from_secs(60) + Duration::from_secs_f64(total as f64 / 10e6));

    let bar = progress::bytes_bar(total, "", args.json);
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); Peer::ALL.len()];
    let mut braid_stats = Vec::new();
    for round in 0..args.repeat as usize {
        for k in 0..Peer::ALL.len() {
            let peer = Peer::ALL[(round + k) % Peer::ALL.len()];
            bar.set_prefix(peer.name());
            bar.set_message(format!("run {}/{}", round + 1, args.repeat));
            bar.set_position(0);
            let run = async {
                match peer {
                    Peer::Braid => peers::braid(&workload, &endpoint_cfg, &bar).await,
                    Peer::Tcp => peers::tcp(&workload, &bar).await,
                    Peer::Quinn => peers::quinn(&workload, &quic, &bar).await,
                }
            };
            let RunResult { elapsed, braid_stats: stats } = tokio::time::timeout(limit, run)
                .await
                .map_err(|_| anyhow::anyhow!("{} run not finished after {:.0} s (see --timeout)", peer.name(), limit.as_secs_f64()))?
                .with_context(|| format!("{} run failed", peer.name()))?;
            times[peer as usize].push(elapsed);
            braid_stats.extend(stats);
        }
    }
    bar.finish_and_clear();

    let secs: Vec<f64> = times.into_iter().map(|t| median(t).as_secs_f64().max(1e-9)).collect();
    let [braid_s, tcp_s, quinn_s] = [secs[0], secs[1], secs[2]];
    let lost: u64 = braid_stats.iter().map(|s| s.packets_lost).sum();
    let retx: u64 = braid_stats.iter().map(|s| s.retransmitted_bytes).sum();
    let common = json!({
        "repeat": args.repeat,
        "cc": args.transport.cc.as_str(),
        "mtu": endpoint_cfg.transport.max_datagram_size,
        "braid_secs": braid_s, "tcp_secs": tcp_s, "quinn_secs": quinn_s,
        "braid_packets_lost": lost, "braid_retransmitted_bytes": retx,
    });
    let (mut out, unit, rate): (serde_json::Value, &str, [f64; 3]) = match &workload {
        Workload::Bulk { bytes, chunk, .. } => {
            let g = |s: f64| *bytes as f64 * 8.0 / s / 1e9;
            let r = [g(braid_s), g(tcp_s), g(quinn_s)];
            let v = json!({
                "mode": "stream", "bytes": bytes, "chunk": chunk,
                "braid_gbps": r[0], "tcp_gbps": r[1], "quinn_gbps": r[2],
                "braid_over_quinn": r[0] / r[2], "braid_over_tcp": r[0] / r[1],
            });
            (v, "Gbit/s", r)
        }
        Workload::Messages { count, payload } => {
            let m = |s: f64| *count as f64 / s;
            let r = [m(braid_s), m(tcp_s), m(quinn_s)];
            let v = json!({
                "mode": "messages", "messages": count, "size": payload.len(),
                "braid_msgs_per_s": r[0], "tcp_msgs_per_s": r[1], "quinn_msgs_per_s": r[2],
                "braid_over_quinn": r[0] / r[2], "braid_over_tcp": r[0] / r[1],
            });
            (v, "msgs/s", r)
        }
    };
    if let (Some(o), Some(c)) = (out.as_object_mut(), common.as_object()) {
        o.extend(c.clone());
    }
    if args.json {
        emit(&out.to_string());
    } else {
        let what = match &workload {
            Workload::Bulk { bytes, chunk, .. } => format!("{} in {} chunks", ByteSize(*bytes), ByteSize(*chunk as u64)),
            Workload::Messages { count, payload } => format!("{count} messages of {}", ByteSize(payload.len() as u64)),
        };
        emit(&format!(
            "loopback, {what}, median of {} run(s); braid and quinn: {} byte datagrams, {}; tcp: kernel defaults",
            args.repeat,
            endpoint_cfg.transport.max_datagram_size,
            args.transport.cc
        ));
        let rows: Vec<Vec<String>> = Peer::ALL
            .iter()
            .map(|p| {
                let i = *p as usize;
                vec![p.name().to_string(), format!("{:.4}", secs[i]), fmt_rate(rate[i], unit), format!("{:.2}", rate[0] / rate[i])]
            })
            .collect();
        emit(&table::render(&["peer", "seconds", unit, "braid/peer"], &rows));
        emit(&format!("braid: {lost} packets lost, {retx} bytes retransmitted (all runs)"));
    }
    Ok(Outcome::Success)
}

fn fmt_rate(v: f64, unit: &str) -> String {
    if unit == "Gbit/s" {
        format!("{v:.3}")
    } else {
        format!("{v:.0}")
    }
}

/// Incompressible payload, the same for every peer.
fn random_payload(len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(7).fill_bytes(&mut v);
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_a_measured_value() {
        let d = Duration::from_millis;
        assert_eq!(median(vec![d(3)]), d(3));
        assert_eq!(median(vec![d(5), d(1), d(3)]), d(3));
        assert_eq!(median(vec![d(4), d(1), d(3), d(2)]), d(2));
    }
}
