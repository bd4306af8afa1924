//! `braid serve`: accept transfers from any number of concurrent senders,
//! verify each end to end, save files under `--out`, print one summary line
//! per transfer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use braid::transfer::{self, MessageIo, ReceiveReport};
use braid::{Connection, Endpoint};
use clap::Args;
use indicatif::MultiProgress;
use serde::Serialize;
use tokio::sync::mpsc;

use super::{emit, gbps, progress, Outcome, Protection, SecurityArgs, TransportArgs};

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
    /// Save received files in this existing directory (without it, data is verified and discarded).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
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
    super::check_out_dir(&args.out)?;
    let scheduler = args.scheduler.as_deref().map(super::send::load_scheduler).transpose()?.map(|(_, p)| p);
    let mut config = args.transport.endpoint_config(true);
    config.security = args.security.load()?;
    let key = match &config.security {
        braid_net::Security::Authenticated(c) => Some(c.identity.public_key().to_string()),
        braid_net::Security::Insecure => None,
    };
    let policy = args.security.policy();
    let endpoint = Endpoint::bind_with(args.listen, config).with_context(|| format!("--listen {}", args.listen))?;
    let local = endpoint.local_addr();
    if args.json {
        let line = serde_json::json!({ "listening": local.to_string(), "key": key, "trust": policy.as_str() });
        emit(&line.to_string());
    } else {
        emit(&format!("listening on {local} (udp){}", match &args.out {
            Some(d) => format!(", saving files to {}", d.display()),
            None => ", verifying and discarding data (no --out)".into(),
        }));
        match &key {
            Some(k) => emit(&format!("this node's key: {k} (trust: {policy}); a client trusts it with the line `{local} {k}` in its known hosts, or --tofu")),
            None => emit("WARNING: --insecure-no-auth: connections are neither authenticated nor encrypted"),
        }
    }
    let bars = progress::multi(args.json);
    let out = Arc::new(args.out);
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
                tokio::spawn(async move {
                    let _ = tx.send(handle(conn, out.as_ref().as_deref(), bars, policy).await);
                });
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
    out: Option<&std::path::Path>,
    bars: MultiProgress,
    policy: braid_identity::TrustPolicy,
) -> Summary {
    let peer = conn.remote_addr();
    let protection = Protection::of(&conn, policy);
    let start = Instant::now();
    let mut data_done = None;
    let bar = bars.add(progress::bytes_bar(0, peer.to_string(), false));
    let result = transfer::receive(&mut conn, out, &mut |offer, got| {
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
