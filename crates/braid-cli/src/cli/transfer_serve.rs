//! The tree-receiving side of `braid serve --dir DEST`: the file-transfer engine's receiver
//! (`braid_transfer::serve`) on the TCP port that matches the Braid UDP port (and on the engine
//! streams that arrive as Braid connections, `transfer_braid::MergedAcceptor`), one summary per
//! transfer (a transfer whose sender vanished ends with an error summary; what arrived stays in
//! DEST's journal for the sender's next run).

use std::path::{Path, PathBuf};

use braid_transfer::transport::Acceptor;
use braid_transfer::{ReceiveOptions, ReceiveSummary, TransferError};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Protection;

/// One finished (or failed) tree transfer, ready to print.
#[derive(Debug)]
pub struct TreeReport {
    /// Everything arrived and was verified.
    pub ok: bool,
    /// The `--json` line.
    pub json: String,
    /// The text line.
    pub text: String,
}

/// The summary line of one tree transfer.
#[derive(Debug, Serialize)]
struct Summary {
    transport: &'static str,
    /// The transfer's id (BLAKE3 of its manifest), hex.
    transfer: Option<String>,
    ok: bool,
    /// Payload bytes written in this session.
    bytes: u64,
    /// Payload bytes of the transfer.
    total_bytes: Option<u64>,
    /// Payload bytes an earlier, interrupted session had already written.
    resumed_bytes: Option<u64>,
    files: Option<u64>,
    secs: f64,
    throughput_mbps: f64,
    refetched_chunks: u64,
    peak_staged_mb: f64,
    cpu_seconds: f64,
    /// Writer count per probe interval: [seconds, writers].
    writers: Vec<(f64, usize)>,
    /// Seconds data streams sat unread because the writers had enough, summed over streams.
    stream_seconds_held: f64,
    dest: PathBuf,
    error: Option<String>,
    #[serde(flatten)]
    protection: Protection,
}

impl Summary {
    fn of(outcome: Result<ReceiveSummary, TransferError>, dest: &Path, protection: Protection) -> Summary {
        match outcome {
            Ok(s) => Summary {
                transport: "tcp",
                transfer: Some(s.transfer_id.iter().map(|b| format!("{b:02x}")).collect()),
                ok: true,
                bytes: s.bytes_written,
                total_bytes: Some(s.total_bytes),
                resumed_bytes: Some(s.resumed_bytes),
                files: Some(s.files),
                secs: s.seconds,
                throughput_mbps: s.throughput_bps * 8.0 / 1e6,
                refetched_chunks: s.refetched_chunks,
                peak_staged_mb: s.peak_staged_bytes as f64 / 1e6,
                cpu_seconds: s.cpu_seconds,
                writers: s.writer_samples,
                stream_seconds_held: s.stream_seconds_held,
                dest: dest.to_path_buf(),
                error: None,
                protection,
            },
            Err(e) => Summary {
                transport: "tcp",
                transfer: None,
                ok: false,
                bytes: 0,
                total_bytes: None,
                resumed_bytes: None,
                files: None,
                secs: 0.0,
                throughput_mbps: 0.0,
                refetched_chunks: 0,
                peak_staged_mb: 0.0,
                cpu_seconds: 0.0,
                writers: Vec::new(),
                stream_seconds_held: 0.0,
                dest: dest.to_path_buf(),
                error: Some(e.to_string()),
                protection,
            },
        }
    }

    fn text(&self) -> String {
        match &self.error {
            Some(e) => format!(
                "tree transfer into {} FAILED: {e} (what arrived is kept; the sender's next run resumes it); {}",
                self.dest.display(),
                self.protection.text()
            ),
            None => format!(
                "received {} files into {} over tcp: {} bytes in {:.3} s, {:.1} Mbit/s, {} bytes resumed, {} chunks \
                 fetched again, verified ok; {}",
                self.files.unwrap_or(0),
                self.dest.display(),
                self.bytes,
                self.secs,
                self.throughput_mbps,
                self.resumed_bytes.unwrap_or(0),
                self.refetched_chunks,
                self.protection.text()
            ),
        }
    }
}

/// Receives trees on `acceptor` until it fails; each transfer's report goes to `reports`.
pub fn spawn(
    acceptor: Box<dyn Acceptor>,
    options: ReceiveOptions,
    protection: Protection,
    reports: mpsc::UnboundedSender<TreeReport>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let dest = options.dest.clone();
        let sink = reports.clone();
        let (dest_each, protection_each) = (dest.clone(), protection.clone());
        let served = braid_transfer::serve(&*acceptor, &options, move |outcome| {
            let _ = sink.send(report(Summary::of(outcome, &dest_each, protection_each.clone())));
        })
        .await;
        if let Err(e) = served {
            let _ = reports.send(report(Summary::of(Err(e), &dest, protection)));
        }
    })
}

fn report(summary: Summary) -> TreeReport {
    TreeReport {
        ok: summary.ok,
        json: serde_json::to_string(&summary).unwrap_or_else(|e| format!("{{\"ok\":false,\"error\":\"{e}\"}}")),
        text: summary.text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Protection {
        Protection { encrypted: false, cipher: None, peer_key: None, trust: "insecure-no-auth" }
    }

    #[test]
    fn a_failed_transfer_says_what_is_kept() {
        let r = report(Summary::of(Err(TransferError::Disconnected), Path::new("/d"), plain()));
        assert!(!r.ok);
        assert!(r.text.contains("FAILED") && r.text.contains("kept"), "{}", r.text);
        let j: serde_json::Value = serde_json::from_str(&r.json).unwrap();
        assert_eq!(j["ok"], false);
        assert!(j["error"].as_str().unwrap().contains("closed"));
        assert_eq!(j["encrypted"], false);
    }

    #[test]
    fn a_finished_transfer_reports_its_counters() {
        let s = ReceiveSummary {
            transfer_id: [0xab; 32],
            bytes_written: 1000,
            resumed_bytes: 24,
            total_bytes: 1024,
            files: 2,
            seconds: 0.5,
            throughput_bps: 2000.0,
            refetched_chunks: 0,
            peak_staged_bytes: 0,
            cpu_seconds: 0.01,
            writer_samples: vec![(0.5, 2)],
            stream_seconds_held: 0.25,
        };
        let r = report(Summary::of(Ok(s), Path::new("/d"), plain()));
        let j: serde_json::Value = serde_json::from_str(&r.json).unwrap();
        assert_eq!(j["ok"], true);
        assert_eq!(j["transfer"].as_str().unwrap().len(), 64);
        assert_eq!(j["resumed_bytes"], 24);
        assert_eq!(j["writers"][0][1], 2);
        assert_eq!(j["stream_seconds_held"], 0.25);
        assert!(r.text.contains("received 2 files"), "{}", r.text);
    }
}
