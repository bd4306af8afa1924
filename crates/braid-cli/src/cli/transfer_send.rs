//! `braid send SRC... --to ADDR` for files and directories: runs the file-transfer engine
//! (`braid_transfer::send`, the Marlin issue: three stages, each tuned online) over kernel TCP
//! (TLS 1.3 as the security flags choose, `transfer_net`) or Braid connections
//! (`transfer_braid`), reports progress (a bar, or one JSON line per second with
//! `--progress jsonl`) and prints a summary (text, or JSON with `--json`).
//!
//! The engine reports its own counters once per probe interval (3 s by default); the per-second
//! lines read the bytes handed to the data streams from a counting connector, so a script sees
//! movement every second, and carry the engine's latest file count and worker counts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use braid_transfer::{Progress, SendSummary};
use serde::Serialize;

use super::transfer_args::{EngineSendArgs, ProgressKind};
use anyhow::Context;
use braid_transfer::transport::Connector;

use super::transfer_braid::{BraidConnector, Multipath};
use super::transfer_net::{self, CountingConnector, ProtectionHandle};
use super::{emit, progress, unspecified_for, Outcome, Protection, SecurityArgs};

/// How often `--progress jsonl` prints and the bar is refreshed.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What carries the engine's streams.
pub enum TreeTransport {
    /// Kernel TCP (TLS 1.3 unless --insecure-no-auth).
    Tcp,
    /// One Braid connection per stream, from an endpoint with `config`, each set to `priority`.
    Braid {
        /// The endpoint's configuration (security, congestion control, MTU).
        config: Box<braid::EndpointConfig>,
        /// The priority controller's parameter, if given.
        priority: Option<f64>,
        /// Several paths per connection (`--path`), if given.
        multipath: Option<Multipath>,
    },
}

/// What a tree send needs from the command line.
pub struct TreeSend<'a> {
    /// What carries the streams.
    pub transport: TreeTransport,
    /// The receiver.
    pub to: SocketAddr,
    /// Files and directories to send.
    pub sources: &'a [PathBuf],
    /// Engine flags.
    pub engine: &'a EngineSendArgs,
    /// Security flags (they choose TLS or plain TCP).
    pub security: &'a SecurityArgs,
    /// Print the summary as JSON.
    pub json: bool,
    /// Give up after this long.
    pub timeout: Option<Duration>,
}

/// One line of `--progress jsonl`.
#[derive(Debug, Serialize)]
struct ProgressLine {
    /// Seconds since the command started sending.
    elapsed: f64,
    /// Bytes handed to the data streams so far in this run (payload and chunk framing).
    bytes_sent: u64,
    /// Payload bytes this run has to send (resumed chunks excluded); null until the engine's
    /// first report.
    bytes_total: Option<u64>,
    /// Files the receiver finished (engine's last report).
    files_done: u64,
    /// Files in the transfer; null until the engine's first report.
    files_total: Option<u64>,
    /// Rate over the last line's interval, Mbit/s.
    rate_mbps: f64,
    /// Worker counts of the last report (null before it).
    read: Option<usize>,
    net: Option<usize>,
    write: Option<usize>,
    /// The last line of the run (printed also when the run fails).
    #[serde(rename = "final")]
    last: bool,
}

/// One probe interval in the summary.
#[derive(Debug, Serialize)]
struct ThreadSample {
    /// Seconds since the start, at the end of the interval.
    t: f64,
    read: usize,
    net: usize,
    write: usize,
    /// Payload throughput during the interval, Mbit/s.
    throughput_mbps: f64,
    /// Network loss ratio (retransmitted / sent segments).
    loss: f64,
}

/// The summary of a tree send.
#[derive(Debug, Serialize)]
struct Summary {
    to: SocketAddr,
    transport: &'static str,
    ok: bool,
    /// Payload bytes sent in this run (chunks sent again after a failed hash included).
    bytes: u64,
    /// Payload bytes of the whole transfer (holes of sparse files excluded).
    total_bytes: u64,
    /// Payload bytes the receiver already had from an earlier, interrupted run.
    resumed_bytes: u64,
    /// Bytes on the data streams including framing.
    wire_bytes: u64,
    files: u64,
    entries: u64,
    seconds: f64,
    throughput_mbps: f64,
    refetched_chunks: u64,
    cpu_seconds: f64,
    /// CPU seconds of this process per GB (10⁹ bytes) sent; null when nothing was sent.
    cpu_seconds_per_gb: Option<f64>,
    /// Peak resident memory of this process (VmHWM), MB (10⁶ bytes); null where unknown.
    peak_memory_mb: Option<f64>,
    /// Most bytes held in the staging area at once, MB.
    peak_staged_mb: f64,
    tuner: &'static str,
    chunk_size: u64,
    /// The kernel congestion control the TCP streams ran (null over Braid streams).
    tcp_congestion: Option<String>,
    /// Worker counts and throughput per probe interval.
    threads: Vec<ThreadSample>,
    #[serde(flatten)]
    protection: Protection,
}

impl Summary {
    fn new(
        to: SocketAddr,
        transport: &'static str,
        s: &SendSummary,
        engine: &EngineSendArgs,
        protection: Protection,
    ) -> Summary {
        let options = engine.send_options();
        Summary {
            to,
            transport,
            ok: true,
            bytes: s.bytes_sent,
            total_bytes: s.total_bytes,
            resumed_bytes: s.resumed_bytes,
            wire_bytes: s.wire_bytes,
            files: s.files,
            entries: s.entries,
            seconds: s.seconds,
            throughput_mbps: s.throughput_bps * 8.0 / 1e6,
            refetched_chunks: s.refetched_chunks,
            cpu_seconds: s.cpu_seconds,
            cpu_seconds_per_gb: (s.bytes_sent > 0).then(|| s.cpu_seconds / (s.bytes_sent as f64 / 1e9)),
            peak_memory_mb: peak_rss_bytes().map(|b| b as f64 / 1e6),
            peak_staged_mb: s.peak_staged_bytes as f64 / 1e6,
            tuner: engine.tuner_name(),
            chunk_size: options.chunk_size,
            tcp_congestion: None,
            threads: s
                .samples
                .iter()
                .map(|x| ThreadSample {
                    t: x.elapsed,
                    read: x.concurrency.read,
                    net: x.concurrency.network,
                    write: x.concurrency.write,
                    throughput_mbps: x.goodput_bps * 8.0 / 1e6,
                    loss: x.loss,
                })
                .collect(),
            protection,
        }
    }

    fn text(&self) -> String {
        let last = self
            .threads
            .last()
            .map(|t| format!("; workers read/net/write {}/{}/{} at the end", t.read, t.net, t.write));
        format!(
            "sent {} files ({} entries) to {} over {}: {} bytes in {:.3} s, {:.1} Mbit/s; {} bytes resumed, {} chunks \
             fetched again{}; cpu {} s/GB, peak memory {} MB",
            self.files,
            self.entries,
            self.to,
            self.transport,
            self.bytes,
            self.seconds,
            self.throughput_mbps,
            self.resumed_bytes,
            self.refetched_chunks,
            last.unwrap_or_default(),
            self.cpu_seconds_per_gb.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()),
            self.peak_memory_mb.map(|m| format!("{m:.1}")).unwrap_or_else(|| "-".into()),
        )
    }
}

/// Peak resident set size of this process (`VmHWM` of /proc/self/status).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

/// What the reporter shows: the bytes counter and the engine's last report.
struct Reporter {
    started: Instant,
    sent: Arc<AtomicU64>,
    latest: Arc<Mutex<Option<Progress>>>,
    kind: ProgressKind,
    bar: indicatif::ProgressBar,
    last: Mutex<(Instant, u64)>,
}

impl Reporter {
    fn line(&self, last: bool) -> ProgressLine {
        let now = Instant::now();
        let sent = self.sent.load(Ordering::Relaxed);
        let rate_mbps = {
            let mut previous = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            let dt = now.duration_since(previous.0).as_secs_f64();
            let rate = (sent - previous.1.min(sent)) as f64 * 8.0 / dt.max(1e-3) / 1e6;
            *previous = (now, sent);
            rate
        };
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner).clone();
        ProgressLine {
            elapsed: now.duration_since(self.started).as_secs_f64(),
            bytes_sent: sent,
            bytes_total: latest.as_ref().map(|p| p.bytes_total),
            files_done: latest.as_ref().map_or(0, |p| p.files_done),
            files_total: latest.as_ref().map(|p| p.files_total),
            rate_mbps,
            read: latest.as_ref().map(|p| p.concurrency.read),
            net: latest.as_ref().map(|p| p.concurrency.network),
            write: latest.as_ref().map(|p| p.concurrency.write),
            last,
        }
    }

    fn report(&self, last: bool) {
        match self.kind {
            ProgressKind::Jsonl => {
                if let Ok(text) = serde_json::to_string(&self.line(last)) {
                    emit(&text);
                }
            }
            ProgressKind::Bar => {
                let line = self.line(last);
                if let Some(total) = line.bytes_total {
                    self.bar.set_length(total);
                }
                self.bar.set_position(line.bytes_total.map_or(line.bytes_sent, |t| line.bytes_sent.min(t)));
                let workers = line.read.zip(line.net).zip(line.write).map(|((r, n), w)| (r, n, w));
                self.bar.set_message(progress::tree_message(line.files_done, line.files_total, workers));
            }
            ProgressKind::None => {}
        }
    }
}

/// Sends the tree and prints the summary.
pub async fn run(job: TreeSend<'_>) -> anyhow::Result<Outcome> {
    job.engine.validate().map_err(|e| anyhow::anyhow!(e))?;
    let policy = job.security.policy();
    let congestion = job.engine.tcp_congestion.clone().unwrap_or_default();
    let (connector, protection, transport): (Arc<dyn Connector>, ProtectionHandle, &'static str) = match job.transport {
        TreeTransport::Tcp => {
            let (connector, protection) = transfer_net::connector(job.security, job.to, congestion.clone())?;
            (connector, protection, "tcp")
        }
        TreeTransport::Braid { config, priority, multipath } => {
            let endpoint =
                braid::Endpoint::bind_with(unspecified_for(job.to), *config).context("cannot open a UDP socket")?;
            let fallback =
                Protection { encrypted: policy.authenticates(), cipher: None, peer_key: None, trust: policy.as_str() };
            let handle = ProtectionHandle::learned(fallback);
            let mut connector = BraidConnector::new(endpoint, job.to, priority, policy, handle.slot());
            if let Some(m) = multipath {
                connector = connector.over_paths(m);
            }
            (Arc::new(connector), handle, "braid")
        }
    };
    let sent = Arc::new(AtomicU64::new(0));
    let connector = Arc::new(CountingConnector::new(connector, Arc::clone(&sent)));
    let latest: Arc<Mutex<Option<Progress>>> = Arc::default();
    let mut options = job.engine.send_options();
    let sink = Arc::clone(&latest);
    options.progress = Some(Arc::new(move |p: &Progress| {
        *sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(p.clone());
    }));
    let kind = job.engine.progress.unwrap_or(if job.json { ProgressKind::None } else { ProgressKind::Bar });
    let started = Instant::now();
    let reporter = Arc::new(Reporter {
        started,
        sent,
        latest,
        kind,
        bar: progress::tree_bar("sending", kind != ProgressKind::Bar),
        last: Mutex::new((started, 0)),
    });
    let ticking = {
        let reporter = Arc::clone(&reporter);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + REPORT_EVERY, REPORT_EVERY);
            loop {
                ticker.tick().await;
                reporter.report(false);
            }
        })
    };
    let work = braid_transfer::send(job.sources, connector, options);
    let result = match job.timeout {
        Some(t) => tokio::time::timeout(t, work)
            .await
            .map_err(|_| anyhow::anyhow!("--timeout: transfer not finished after {:.1} s", t.as_secs_f64())),
        None => Ok(work.await),
    };
    ticking.abort();
    reporter.report(true);
    reporter.bar.finish_and_clear();
    let summary = result?.map_err(|e| anyhow::anyhow!("send to {}: {e}", job.to))?;
    let mut summary = Summary::new(job.to, transport, &summary, job.engine, protection.get());
    summary.tcp_congestion = congestion.used();
    if job.json {
        emit(&serde_json::to_string(&summary)?);
    } else {
        emit(&summary.text());
        emit(&format!("  {}", summary.protection.text()));
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_memory_is_read_from_proc() {
        let rss = peak_rss_bytes().expect("Linux has VmHWM");
        assert!(rss > 100_000, "{rss}");
    }

    #[test]
    fn summary_reports_per_gb_cost_and_threads() {
        let engine: EngineSendArgs = crate::cli::parse_flags(&["--chunk-size", "1MiB"]);
        let s = SendSummary {
            bytes_sent: 2_000_000_000,
            wire_bytes: 2_000_100_000,
            resumed_bytes: 5,
            total_bytes: 2_000_000_005,
            files: 3,
            entries: 5,
            seconds: 4.0,
            throughput_bps: 5e8,
            samples: vec![braid_transfer::IntervalSample {
                elapsed: 3.0,
                concurrency: braid_transfer::tuner::Concurrency { read: 2, network: 3, write: 1 },
                read_bps: 1.0,
                network_bps: 1.0,
                write_bps: 1.0,
                loss: 0.0,
                goodput_bps: 1.25e8,
            }],
            refetched_chunks: 1,
            peak_staged_bytes: 4_000_000,
            cpu_seconds: 3.0,
        };
        let protection = Protection { encrypted: false, cipher: None, peer_key: None, trust: "insecure-no-auth" };
        let summary = Summary::new("127.0.0.1:1".parse().unwrap(), "tcp", &s, &engine, protection);
        assert_eq!(summary.cpu_seconds_per_gb, Some(1.5));
        assert_eq!(summary.throughput_mbps, 4000.0);
        assert_eq!(summary.chunk_size, 1 << 20);
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["threads"][0]["net"], 3);
        assert_eq!(json["threads"][0]["throughput_mbps"], 1000.0);
        assert_eq!(json["trust"], "insecure-no-auth");
        assert!(summary.text().contains("read/net/write 2/3/1"), "{}", summary.text());
    }
}
