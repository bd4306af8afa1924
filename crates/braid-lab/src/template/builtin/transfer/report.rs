//! What one `transfer` experiment measured, as the artifact `report`
//! (`braid bench transfer` reads it back).

use serde::{Deserialize, Serialize};

/// One probe interval of a Braid sender: the worker counts that ran and
/// the throughput (the `threads` entries of `braid send --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSample {
    /// Seconds since the transfer started, at the interval's end.
    pub t: f64,
    /// Readers.
    pub read: u32,
    /// Network streams.
    pub net: u32,
    /// Writers (the receiver's).
    pub write: u32,
    /// Payload throughput over the interval, Mbit/s.
    pub throughput_mbps: f64,
    /// Network loss ratio over the interval.
    #[serde(default)]
    pub loss: f64,
}

impl ThreadSample {
    /// Workers of all three stages.
    pub fn total(&self) -> u32 {
        self.read + self.net + self.write
    }
}

/// One transfer (one sender and its receiver).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneTransfer {
    /// From the sender's start to its exit, seconds.
    pub seconds: f64,
    /// Payload bytes of the tree.
    pub bytes: u64,
    /// Files of the tree.
    pub files: u64,
    /// `bytes` over `seconds`, Mbit/s.
    pub throughput_mbps: f64,
    /// The sender's CPU seconds (user + system).
    pub sender_cpu_secs: f64,
    /// The receiver's CPU seconds (with the processes it forked).
    pub receiver_cpu_secs: f64,
    /// The sender's peak resident memory, MB (10⁶ bytes).
    pub sender_peak_mb: f64,
    /// The receiver's peak resident memory, MB.
    pub receiver_peak_mb: f64,
    /// Braid only: worker counts and throughput per probe interval.
    #[serde(default)]
    pub threads: Vec<ThreadSample>,
    /// `false`: a peer stopped at the time limit; `bytes` and `files` are
    /// what it had copied intact by then, over `seconds` up to the stop.
    #[serde(default = "yes")]
    pub completed: bool,
    /// Braid only: the congestion control its TCP streams ran.
    #[serde(default)]
    pub tcp_congestion: Option<String>,
}

fn yes() -> bool {
    true
}

/// The whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRun {
    /// `braid`, `rsync`, `rclone` or `iperf3`.
    pub tool: String,
    /// The link spec.
    pub link: String,
    /// The TCP congestion control the tool's streams ran: Braid's own
    /// choice (it sets it per stream), the hosts' default for the others.
    pub tcp_congestion_control: String,
    /// Whether the tool's traffic was encrypted (Braid's TLS, rclone's
    /// SSH; rsync's daemon protocol and iperf3 are not).
    pub encrypted: bool,
    /// Every transfer, in start order (several with `transfers` > 1).
    pub transfers: Vec<OneTransfer>,
    /// All transfers' bytes over the time from the first start to the last
    /// end, Mbit/s.
    pub throughput_mbps: f64,
    /// Jain's fairness index of the transfers' throughputs (1 with one).
    pub jain: f64,
    /// CPU seconds of both ends of every transfer per GB (10⁹ bytes) moved.
    pub cpu_seconds_per_gb: f64,
    /// The largest peak resident memory of any one process, MB.
    pub peak_memory_mb: f64,
    /// iperf3 with as many streams as Braid's last network count, over the
    /// same testbed, right after (`compare_iperf3`), Mbit/s.
    #[serde(default)]
    pub iperf3_mbps: Option<f64>,
    /// The streams iperf3 ran with.
    #[serde(default)]
    pub iperf3_streams: Option<u32>,
}

/// Jain's fairness index of `xs`: (Σx)² / (n·Σx²); 1 when all are equal,
/// 1/n when one takes everything. 1 for an empty or all-zero list.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares == 0.0 {
        1.0
    } else {
        sum * sum / (xs.len() as f64 * squares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jains_index_runs_from_one_over_n_to_one() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!((jain(&[2.0, 1.0]) - 0.9).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }

    #[test]
    fn braid_send_json_threads_read_back() {
        let line = r#"{"t":3.0,"read":2,"net":3,"write":1,"throughput_mbps":800.0,"loss":0.0}"#;
        let s: ThreadSample = serde_json::from_str(line).unwrap();
        assert_eq!(s.total(), 6);
    }
}
