//! `braid demo`: the same verified transfer (generated data, SHA-256 checked
//! end to end) over Braid and over kernel TCP on loopback, side by side. No
//! root, no setup.

use std::time::{Duration, Instant};

use anyhow::Context;
use braid::size::ByteSize;
use braid::transfer::{self, FramedStream, MessageIo, Source};
use braid::Endpoint;
use clap::Args;
use indicatif::ProgressBar;
use serde::Serialize;

use super::{emit, gbps, parse_secs, parse_size, progress, table, Outcome, TransportArgs};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Bytes to transfer over each transport (e.g. 100MB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    bytes: ByteSize,
    /// Give up on a transport after this many seconds (default: 60 s plus 1 s per 10 MB).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    timeout: Option<Duration>,
    /// Print the results as JSON (no progress bars).
    #[arg(long)]
    json: bool,
    /// INSECURE: run Braid without authentication and encryption (by default both ends get a fresh
    /// identity and trust exactly each other's key).
    #[arg(long)]
    insecure_no_auth: bool,
    #[command(flatten)]
    transport: TransportArgs,
}

/// One transport's result.
#[derive(Debug, Serialize)]
struct Row {
    transport: &'static str,
    bytes: u64,
    secs: f64,
    gbps: f64,
    sha256_ok: bool,
    /// Braid only: stream bytes sent again after losses.
    retransmitted_bytes: Option<u64>,
    /// Braid only: packets declared lost.
    packets_lost: Option<u64>,
    /// Braid only: smoothed RTT at the end, microseconds.
    rtt_us: Option<u64>,
    /// Braid only: packets were authenticated and encrypted.
    encrypted: Option<bool>,
    /// Braid only: the cipher suite.
    cipher: Option<&'static str>,
}

/// Seed of the demo's data.
const SEED: u64 = 2024;

pub async fn run(args: DemoArgs) -> anyhow::Result<Outcome> {
    let size = args.bytes.0;
    let limit = args.timeout.unwrap_or(Duration::from_secs(60) + Duration::from_secs_f64(size as f64 / 10e6));
    if !args.json {
        eprintln!("transferring {} over Braid and over kernel TCP on 127.0.0.1, SHA-256 checked end to end", args.bytes);
    }
    let bars = progress::multi(args.json);
    let bar = bars.add(progress::bytes_bar(size, "braid", args.json));
    let braid = bounded(limit, "braid", braid_run(size, &args.transport, !args.insecure_no_auth, &bar)).await?;
    bar.finish();
    let bar = bars.add(progress::bytes_bar(size, "tcp", args.json));
    let tcp = bounded(limit, "tcp", tcp_run(size, &bar)).await?;
    bar.finish();
    bars.clear().ok();
    let ok = braid.sha256_ok && tcp.sha256_ok;
    let rows = [braid, tcp];
    if args.json {
        let encrypted = !args.insecure_no_auth;
        emit(&serde_json::json!({ "bytes": size, "ok": ok, "encrypted": encrypted, "results": rows }).to_string());
    } else {
        let dash = || "-".to_string();
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.transport.to_string(),
                    ByteSize(r.bytes).to_string(),
                    format!("{:.3}", r.secs),
                    format!("{:.3}", r.gbps),
                    if r.sha256_ok { "ok".into() } else { "MISMATCH".into() },
                    r.retransmitted_bytes.map_or_else(dash, |b| b.to_string()),
                    r.packets_lost.map_or_else(dash, |b| b.to_string()),
                    r.rtt_us.map_or_else(dash, |us| format!("{us} us")),
                ]
            })
            .collect();
        emit(&table::render(
            &["transport", "bytes", "seconds", "Gbit/s", "sha256", "retx bytes", "lost pkts", "rtt"],
            &body,
        ));
        emit(&match rows[0].cipher {
            Some(c) => format!("braid: authenticated and encrypted ({c}); kernel TCP: plaintext"),
            None => "braid: NOT encrypted (--insecure-no-auth); kernel TCP: plaintext".to_string(),
        });
    }
    Ok(Outcome::from_ok(ok))
}

async fn bounded<T>(limit: Duration, what: &str, f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| anyhow::anyhow!("{what} transfer not finished after {:.0} s (see --timeout)", limit.as_secs_f64()))?
}

/// Receive one transfer and return when its data was complete.
async fn receive_timed<T: MessageIo>(io: &mut T, bar: &ProgressBar) -> anyhow::Result<(bool, Instant)> {
    let mut done = None;
    let report = transfer::receive(io, None, &mut |offer, got| {
        bar.set_position(got);
        if got == offer.size {
            done = Some(Instant::now());
        }
    })
    .await?;
    Ok((report.ok, done.unwrap_or_else(Instant::now)))
}

async fn braid_run(size: u64, transport: &TransportArgs, encrypted: bool, bar: &ProgressBar) -> anyhow::Result<Row> {
    let localhost = "127.0.0.1:0".parse().expect("valid address");
    let (mut server_cfg, mut client_cfg) = (transport.endpoint_config(true), transport.endpoint_config(false));
    if encrypted {
        (server_cfg.security, client_cfg.security) = braid_net::pinned_pair().context("creating identities")?;
    }
    let server = Endpoint::bind_with(localhost, server_cfg).context("braid server")?;
    let client = Endpoint::bind_with(localhost, client_cfg).context("braid client")?;
    let addr = server.local_addr();
    let bar_rx = bar.clone();
    let receiver = tokio::spawn(async move {
        let mut conn = server.accept().await.context("braid server closed")?;
        let result = receive_timed(&mut conn, &bar_rx).await;
        // Wait for the sender's close so its last acknowledgements arrive.
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while let Ok(Some(_)) = conn.recv().await {} }).await;
        result
    });
    let start = Instant::now();
    let mut conn = client.connect(addr).await.context("braid connect")?;
    let report = transfer::send(&mut conn, None, Source::generated(size, SEED), &mut |_| {}).await?;
    let stats = conn.stats();
    let cipher = conn.cipher_suite();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
    let (received_ok, done) = receiver.await.context("braid receiver task")??;
    let secs = done.duration_since(start);
    client.close();
    Ok(Row {
        transport: "braid",
        bytes: report.bytes,
        secs: secs.as_secs_f64(),
        gbps: gbps(report.bytes, secs),
        sha256_ok: report.ok() && received_ok,
        retransmitted_bytes: Some(stats.retransmitted_bytes),
        packets_lost: Some(stats.packets_lost),
        rtt_us: Some(stats.smoothed_rtt.as_micros() as u64),
        encrypted: Some(cipher.is_some()),
        cipher: cipher.map(|c| c.name()),
    })
}

async fn tcp_run(size: u64, bar: &ProgressBar) -> anyhow::Result<Row> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("tcp listen")?;
    let addr = listener.local_addr()?;
    let bar_rx = bar.clone();
    let receiver = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.context("tcp accept")?;
        let (r, w) = stream.into_split();
        let mut io = FramedStream::new(r, w);
        let result = receive_timed(&mut io, &bar_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while let Ok(Some(_)) = io.recv().await {} }).await;
        result
    });
    let start = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.context("tcp connect")?;
    let (r, w) = stream.into_split();
    let mut io = FramedStream::new(r, w);
    let report = transfer::send(&mut io, None, Source::generated(size, SEED), &mut |_| {}).await?;
    let _ = io.shutdown().await;
    let (received_ok, done) = receiver.await.context("tcp receiver task")??;
    let secs = done.duration_since(start);
    Ok(Row {
        transport: "tcp",
        bytes: report.bytes,
        secs: secs.as_secs_f64(),
        gbps: gbps(report.bytes, secs),
        sha256_ok: report.ok() && received_ok,
        retransmitted_bytes: None,
        packets_lost: None,
        rtt_us: None,
        encrypted: None,
        cipher: None,
    })
}
