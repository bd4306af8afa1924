//! `braid serve`: accept transfers from any number of concurrent senders,
//! verify each end to end, save files under `--dir` (alias `--out`), print one
//! summary line per transfer.
//!
//! One port, two transfers: Braid single-file transfers on the UDP port of
//! `--listen`, and, with `--dir`, trees from the file-transfer engine on the
//! TCP port of the same number (`transfer_serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use braid::transfer::{self, IoError, MessageIo, ReceiveReport};
use braid::{Connection, Endpoint};
use clap::Args;
use indicatif::MultiProgress;
use serde::Serialize;
use tokio::sync::mpsc;

use super::transfer_args::EngineServeArgs;
use super::transfer_braid::{self, Accepted, MergedAcceptor, Peeked};
use super::{emit, gbps, progress, transfer_net, transfer_serve, Outcome, Protection, SecurityArgs, TransportArgs};

/// How long a receiver waits for the sender to close after the verdict.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// UDP address to listen on, e.g. 127.0.0.1:4433 or [::1]:4433 (port 0 picks one).
    /// A wildcard address (0.0.0.0:4433, [::]:4433) accepts multipath
    /// connections whose paths reach any of this host's addresses.
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// ProgMP scheduler of the data this side sends on multipath
    /// connections: a shipped one's name (`braid progmp list`) or a .progmp file.
    #[arg(long, value_name = "NAME_OR_FILE")]
    scheduler: Option<String>,
    /// Save received files and trees in this existing directory (without it, single files are
    /// verified and discarded, and trees are not accepted). Trees arrive on the TCP port of the
    /// same number as --listen's UDP port, resumable after an interruption.
    #[arg(long = "dir", visible_alias = "out", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Exit after this many transfers (status 3 if any failed); default: serve until interrupted.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// One JSON object per line instead of text (no progress bars).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    security: SecurityArgs,
    #[command(flatten)]
    engine: EngineServeArgs,
}

/// Attempts at finding a port free on both UDP and TCP when `--listen` asks for port 0.
const PORT_ATTEMPTS: usize = 32;

/// The Braid endpoint on `listen` and, when trees are accepted, the TCP acceptor on the same
/// address and port number. With port 0, ports are drawn until one is free for both.
async fn bind(
    args: &ServeArgs,
    config: &braid::EndpointConfig,
    want_trees: bool,
) -> anyhow::Result<(Endpoint, Option<(Box<dyn braid_transfer::transport::Acceptor>, Protection)>)> {
    let attempts = if args.listen.port() == 0 { PORT_ATTEMPTS } else { 1 };
    for attempt in 1..=attempts {
        let endpoint =
            Endpoint::bind_with(args.listen, config.clone()).with_context(|| format!("--listen {}", args.listen))?;
        if !want_trees {
            return Ok((endpoint, None));
        }
        let local = endpoint.local_addr();
        match transfer_net::acceptor(&args.security, local).await {
            Ok(Ok(acceptor)) => return Ok((endpoint, Some(acceptor))),
            Ok(Err(e)) => {
                endpoint.close();
                return Err(e);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < attempts => endpoint.close(),
            Err(e) => {
                endpoint.close();
                return Err(anyhow::Error::new(e).context(format!("--listen {}: cannot listen on TCP port {}", args.listen, local.port())));
            }
        }
    }
    anyhow::bail!("--listen {}: no port free on both UDP and TCP after {PORT_ATTEMPTS} attempts", args.listen)
}

/// One transfer's summary line.
#[derive(Debug, Serialize)]
struct Summary {
    peer: SocketAddr,
    name: Option<String>,
    bytes: u64,
    secs: f64,
    gbps: f64,
    ok: bool,
    sha256: Option<String>,
    saved: Option<PathBuf>,
    error: Option<String>,
    /// Paths the connection had at the end (1 unless the sender used --path).
    paths: usize,
    #[serde(flatten)]
    protection: Protection,
}

impl Summary {
    fn text(&self) -> String {
        let what = self.name.as_deref().map(|n| format!("`{n}`")).unwrap_or_else(|| "generated data".into());
        let mut s = format!(
            "received {what} from {}: {} bytes in {:.3} s, {:.3} Gbit/s, sha256 {}",
            self.peer,
            self.bytes,
            self.secs,
            self.gbps,
            if self.ok { "ok" } else { "FAILED" }
        );
        if self.paths > 1 {
            s.push_str(&format!(" over {} paths", self.paths));
        }
        if let Some(p) = &self.saved {
            s.push_str(&format!(", saved to {}", p.display()));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!(" ({e})"));
        }
        s.push_str(&format!("; {}", self.protection.text()));
        s
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<Outcome> {
    super::check_out_dir(&args.dir)?;
    let scheduler = args.scheduler.as_deref().map(super::send::load_scheduler).transpose()?.map(|(_, p)| p);
    let mut config = args.transport.endpoint_config(true);
    config.security = args.security.load()?;
    let key = match &config.security {
        braid_net::Security::Authenticated(c) => Some(c.identity.public_key().to_string()),
        braid_net::Security::Insecure => None,
    };
    let policy = args.security.policy();
    let (endpoint, trees) = bind(&args, &config, args.dir.is_some()).await?;
    let local = endpoint.local_addr();
    let (tree_tx, mut tree_rx) = mpsc::unbounded_channel();
    // Engine streams arriving as Braid connections join the TCP ones in one receiver.
    let (streams_tx, streams_rx) = mpsc::unbounded_channel();
    let tree_port = match (trees, &args.dir) {
        (Some((acceptor, protection)), Some(dir)) => {
            let merged = Box::new(MergedAcceptor::new(acceptor, streams_rx));
            transfer_serve::spawn(merged, args.engine.receive_options(dir), protection, tree_tx);
            Some(local)
        }
        _ => None,
    };
    let braid_streams = tree_port.map(|_| streams_tx);
    if args.json {
        let line = serde_json::json!({
            "listening": local.to_string(),
            "key": key,
            "trust": policy.as_str(),
            "trees": tree_port.map(|a| a.to_string()),
        });
        emit(&line.to_string());
    } else {
        emit(&format!("listening on {local} (udp){}{}", match &args.dir {
            Some(d) => format!(", saving files to {}", d.display()),
            None => ", verifying and discarding data (no --dir)".into(),
        }, match tree_port {
            Some(a) => format!("; trees on {a} (tcp)"),
            None => String::new(),
        }));
        match &key {
            Some(k) => emit(&format!("this node's key: {k} (trust: {policy}); a client trusts it with the line `{local} {k}` in its known hosts, or --tofu")),
            None => emit("WARNING: --insecure-no-auth: connections are neither authenticated nor encrypted"),
        }
    }
    let bars = progress::multi(args.json);
    let out = Arc::new(args.dir.clone());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Summary>();
    let mut finished = 0u64;
    let mut all_ok = true;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        if args.count.is_some_and(|n| finished >= n) {
            break;
        }
        tokio::select! {
            conn = endpoint.accept() => {
                let Some(conn) = conn else { anyhow::bail!("endpoint closed") };
                let (tx, out, bars) = (done_tx.clone(), Arc::clone(&out), bars.clone());
                if let Some(program) = &scheduler {
                    if let Err(e) = conn.set_scheduler(program.clone()) {
                        tracing::warn!(error = %e, "cannot set the scheduler of an accepted connection");
                    }
                }
                let streams = braid_streams.clone();
                tokio::spawn(async move {
                    match transfer_braid::classify(conn).await {
                        Accepted::Single(conn, first) => {
                            let _ = tx.send(handle(conn, first, out.as_ref().as_deref(), bars, policy).await);
                        }
                        Accepted::Stream(conn) => match streams {
                            Some(streams) => {
                                let _ = streams.send(conn);
                            }
                            None => {
                                tracing::warn!(peer = %conn.remote_addr(), "refused a tree transfer stream: this server has no --dir");
                                let _ = tokio::time::timeout(CLOSE_WAIT, conn.close()).await;
                            }
                        },
                    }
                });
            }
            Some(report) = tree_rx.recv() => {
                finished += 1;
                all_ok &= report.ok;
                let line = if args.json { report.json } else { report.text };
                bars.suspend(|| emit(&line));
            }
            Some(summary) = done_rx.recv() => {
                finished += 1;
                all_ok &= summary.ok;
                let line = if args.json { serde_json::to_string(&summary)? } else { summary.text() };
                bars.suspend(|| emit(&line));
            }
            _ = &mut ctrl_c => break,
        }
    }
    endpoint.close();
    Ok(Outcome::from_ok(all_ok))
}

/// Receive one transfer on `conn`; failures become a summary too, so one
/// bad sender never stops the server.
async fn handle(
    mut conn: Connection,
    first: Result<Option<bytes::Bytes>, IoError>,
    out: Option<&std::path::Path>,
    bars: MultiProgress,
    policy: braid_identity::TrustPolicy,
) -> Summary {
    let peer = conn.remote_addr();
    let protection = Protection::of(&conn, policy);
    let start = Instant::now();
    let mut data_done = None;
    let bar = bars.add(progress::bytes_bar(0, peer.to_string(), false));
    let mut io = Peeked { first: Some(first), conn: &mut conn };
    let result = transfer::receive(&mut io, out, &mut |offer, got| {
        if got == 0 {
            bar.set_length(offer.size);
            bar.set_message(offer.name.clone().unwrap_or_default());
        }
        bar.set_position(got);
        if got == offer.size {
            data_done = Some(Instant::now());
        }
    })
    .await;
    bar.finish_and_clear();
    bars.remove(&bar);
    let secs = data_done.unwrap_or_else(Instant::now).duration_since(start);
    let paths = conn.paths().len().max(1);
    let summary = match result {
        Ok(ReceiveReport { offer, bytes, sha256, ok, saved, error }) => Summary {
            peer,
            name: offer.name,
            bytes,
            secs: secs.as_secs_f64(),
            gbps: gbps(bytes, secs),
            ok,
            sha256: Some(sha256),
            saved,
            error,
            paths,
            protection,
        },
        Err(e) => Summary {
            peer,
            name: None,
            bytes: 0,
            secs: secs.as_secs_f64(),
            gbps: 0.0,
            ok: false,
            sha256: None,
            saved: None,
            error: Some(e.to_string()),
            paths,
            protection,
        },
    };
    // The verdict is queued; let the sender read it and close first.
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Ok(Some(_)) = conn.recv().await {}
    })
    .await;
    summary
}
