//! What one `handshake` experiment reports ([`HandshakeRun`], its `report`
//! artifact) and the comparison `braid bench handshake` prints from several
//! rounds of them ([`HandshakeSummary`]): per peer the median over the
//! rounds of the rate and the latencies, and Braid's rate as a ratio of
//! quinn's and of TLS over TCP's (issue 17 states the goal as a ratio
//! against quinn).
//!
//! ```
//! use braid_lab::template::builtin::handshake::summary::{HandshakeRun, HandshakeSummary};
//! use braid_lab::template::builtin::handshake::Peer;
//! let run = |peer, per_sec| HandshakeRun {
//!     peer, secs: 2.0, concurrency: 1, connections: (per_sec * 2.0) as u64, elapsed_secs: 2.0, per_sec,
//!     p50_us: 1e6 / per_sec, p99_us: 2e6 / per_sec, encrypted: true, cipher: Some("aes-256-gcm".into()),
//!     auth: "pinned keys".into(), drain_ms: 1.0,
//! };
//! let s = HandshakeSummary::new(&[run(Peer::Braid, 3000.0), run(Peer::Quinn, 2000.0), run(Peer::Tls, 1500.0)], 1).unwrap();
//! assert_eq!(s.json()["braid_over_quinn"], 1.5);
//! assert_eq!(s.json()["braid_over_tls"], 2.0);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Peer;
use crate::template::builtin::stream::summary::median;

/// One experiment: one peer's connections for a while (the `report`
/// artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandshakeRun {
    /// The peer measured.
    pub peer: Peer,
    /// Seconds during which connections were started (the parameter).
    pub secs: f64,
    /// Connections in flight at once.
    pub concurrency: u32,
    /// Connections completed (handshake, one byte each way, close).
    pub connections: u64,
    /// From the first connect to the end of the last connection.
    pub elapsed_secs: f64,
    /// Connections per second over that time.
    pub per_sec: f64,
    /// Median time from connect to the answer, microseconds.
    pub p50_us: f64,
    /// 99th percentile of it.
    pub p99_us: f64,
    /// The connections were authenticated and encrypted.
    pub encrypted: bool,
    /// The cipher sealing them (`None`: plaintext).
    pub cipher: Option<String>,
    /// Who was authenticated, and how.
    pub auth: String,
    /// How long after the last connection both ends had forgotten every
    /// connection, milliseconds (closing periods).
    pub drain_ms: f64,
}

/// One peer over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerSummary {
    /// The peer.
    pub peer: Peer,
    /// Median connections per second.
    pub per_sec: f64,
    /// Median of the runs' median latencies, microseconds.
    pub p50_us: f64,
    /// Median of the runs' 99th percentiles, microseconds.
    pub p99_us: f64,
    /// Median connections per run.
    pub connections: u64,
    /// The cipher (`None`: plaintext).
    pub cipher: Option<String>,
    /// Who was authenticated, and how.
    pub auth: String,
}

/// Every peer over several rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandshakeSummary {
    /// Seconds per run.
    pub secs: f64,
    /// Connections in flight at once.
    pub concurrency: u32,
    /// Rounds (runs per peer).
    pub repeat: u32,
    /// The peers, in [`Peer::ALL`] order.
    pub peers: Vec<PeerSummary>,
}

/// Why runs cannot be summarised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    /// No run at all.
    #[error("no handshake run to summarise")]
    Empty,
    /// The runs measured different things.
    #[error("the runs differ in {0}: they cannot be compared")]
    Mismatch(&'static str),
}

impl HandshakeSummary {
    /// Summarise `runs` (all with the same `secs` and `concurrency`).
    pub fn new(runs: &[HandshakeRun], repeat: u32) -> Result<HandshakeSummary, SummaryError> {
        let first = runs.first().ok_or(SummaryError::Empty)?;
        if runs.iter().any(|r| r.secs != first.secs) {
            return Err(SummaryError::Mismatch("secs"));
        }
        if runs.iter().any(|r| r.concurrency != first.concurrency) {
            return Err(SummaryError::Mismatch("concurrency"));
        }
        let mut peers = Vec::new();
        for peer in Peer::ALL {
            let of: Vec<&HandshakeRun> = runs.iter().filter(|r| r.peer == peer).collect();
            let Some(last) = of.last() else { continue };
            let med = |f: fn(&HandshakeRun) -> f64| median(of.iter().map(|r| f(r)).collect()).unwrap_or(0.0);
            peers.push(PeerSummary {
                peer,
                per_sec: med(|r| r.per_sec),
                p50_us: med(|r| r.p50_us),
                p99_us: med(|r| r.p99_us),
                connections: med(|r| r.connections as f64) as u64,
                cipher: last.cipher.clone(),
                auth: last.auth.clone(),
            });
        }
        Ok(HandshakeSummary { secs: first.secs, concurrency: first.concurrency, repeat, peers })
    }

    /// The summary of `peer`, if it ran.
    pub fn peer(&self, peer: Peer) -> Option<&PeerSummary> {
        self.peers.iter().find(|p| p.peer == peer)
    }

    /// The Braid row the ratios use: encrypted Braid when it ran, else
    /// Braid without authentication.
    pub fn braid(&self) -> Option<&PeerSummary> {
        self.peer(Peer::Braid).or_else(|| self.peer(Peer::BraidInsecure))
    }

    /// Whether the Braid row is encrypted.
    pub fn encrypted(&self) -> bool {
        self.peer(Peer::Braid).is_some()
    }

    /// The Braid row's rate over `peer`'s.
    pub fn braid_over(&self, peer: Peer) -> Option<f64> {
        let (b, p) = (self.braid()?, self.peer(peer)?);
        Some(b.per_sec / p.per_sec.max(1e-9))
    }

    /// The JSON of `braid bench handshake --json`.
    pub fn json(&self) -> serde_json::Value {
        let peers: Vec<_> = self
            .peers
            .iter()
            .map(|p| {
                json!({"peer": p.peer.name(), "per_sec": p.per_sec, "p50_us": p.p50_us, "p99_us": p.p99_us,
                       "connections": p.connections, "cipher": p.cipher, "auth": p.auth})
            })
            .collect();
        let encryption_cost = match (self.peer(Peer::Braid), self.peer(Peer::BraidInsecure)) {
            (Some(e), Some(i)) => Some(e.per_sec / i.per_sec.max(1e-9)),
            _ => None,
        };
        json!({
            "encrypted": self.encrypted(),
            "secs": self.secs,
            "concurrency": self.concurrency,
            "repeat": self.repeat,
            "peers": peers,
            "braid_over_quinn": self.braid_over(Peer::Quinn),
            "braid_over_tls": self.braid_over(Peer::Tls),
            "braid_over_tcp": self.braid_over(Peer::Tcp),
            "encryption_cost": encryption_cost,
        })
    }

    /// The first line of the table.
    pub fn title(&self) -> String {
        let rounds = if self.repeat == 1 { "1 run".to_string() } else { format!("median of {} runs", self.repeat) };
        format!(
            "connections on 127.0.0.1: connect, 1 byte each way, close; {} s per peer, {} in flight; {rounds}",
            self.secs, self.concurrency
        )
    }

    /// The table's columns.
    pub fn header(&self) -> [&'static str; 6] {
        ["peer", "conn/s", "x quinn", "p50 (us)", "p99 (us)", "cipher"]
    }

    /// One row per peer.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let quinn = self.peer(Peer::Quinn).map(|q| q.per_sec);
        self.peers
            .iter()
            .map(|p| {
                vec![
                    p.peer.name().to_string(),
                    format!("{:.0}", p.per_sec),
                    quinn.map_or("-".into(), |q| format!("{:.2}", p.per_sec / q.max(1e-9))),
                    format!("{:.0}", p.p50_us),
                    format!("{:.0}", p.p99_us),
                    p.cipher.clone().unwrap_or_else(|| "none".into()),
                ]
            })
            .collect()
    }

    /// The ratios, and what each peer authenticates with.
    pub fn footer(&self) -> String {
        let mut lines = Vec::new();
        if self.braid().is_some() {
            let ratio = |peer: Peer| self.braid_over(peer).map_or("-".into(), |r| format!("{r:.2}"));
            lines.push(format!(
                "{} establishes {}x quinn's connections per second, {}x TLS over TCP's, {}x plain TCP's",
                if self.encrypted() { "Braid (encrypted)" } else { "Braid (NOT encrypted, --insecure-no-auth)" },
                ratio(Peer::Quinn),
                ratio(Peer::Tls),
                ratio(Peer::Tcp),
            ));
        }
        if let (Some(e), Some(i)) = (self.peer(Peer::Braid), self.peer(Peer::BraidInsecure)) {
            lines.push(format!("encrypted / insecure Braid: {:.2}", e.per_sec / i.per_sec.max(1e-9)));
        }
        for p in &self.peers {
            lines.push(format!("  {}: {}", p.peer.name(), p.auth));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peer: Peer, per_sec: f64, p50: f64) -> HandshakeRun {
        HandshakeRun {
            peer,
            secs: 1.0,
            concurrency: 2,
            connections: per_sec as u64,
            elapsed_secs: 1.0,
            per_sec,
            p50_us: p50,
            p99_us: p50 * 3.0,
            encrypted: peer.encrypted(),
            cipher: peer.encrypted().then(|| "aes-256-gcm".to_string()),
            auth: format!("{} auth", peer.name()),
            drain_ms: 1.0,
        }
    }

    #[test]
    fn medians_per_peer_and_ratios_of_the_braid_row() {
        let runs = [
            run(Peer::Braid, 1000.0, 10.0),
            run(Peer::Braid, 3000.0, 30.0),
            run(Peer::Braid, 2000.0, 20.0),
            run(Peer::BraidInsecure, 4000.0, 5.0),
            run(Peer::Quinn, 500.0, 40.0),
            run(Peer::Tls, 800.0, 25.0),
            run(Peer::Tcp, 10_000.0, 2.0),
        ];
        let s = HandshakeSummary::new(&runs, 3).unwrap();
        let braid = s.peer(Peer::Braid).unwrap();
        assert_eq!((braid.per_sec, braid.p50_us, braid.p99_us, braid.connections), (2000.0, 20.0, 60.0, 2000));
        let j = s.json();
        assert_eq!(j["encrypted"], true);
        assert_eq!(j["braid_over_quinn"], 4.0);
        assert_eq!(j["braid_over_tls"], 2.5);
        assert_eq!(j["encryption_cost"], 0.5);
        assert_eq!(j["peers"].as_array().unwrap().len(), 5);
        assert_eq!(j["peers"][1]["peer"], "braid-insecure");
        assert_eq!(j["peers"][4]["cipher"], serde_json::Value::Null);
        assert_eq!(s.rows()[0][2], "4.00");
        let footer = s.footer();
        assert!(footer.contains("4.00x quinn's") && footer.contains("2.50x TLS") && footer.contains("quinn: quinn auth"), "{footer}");
    }

    #[test]
    fn without_encrypted_braid_the_insecure_row_is_compared_and_says_so() {
        let runs = [run(Peer::BraidInsecure, 3000.0, 5.0), run(Peer::Quinn, 1000.0, 40.0)];
        let s = HandshakeSummary::new(&runs, 1).unwrap();
        assert_eq!(s.json()["encrypted"], false);
        assert_eq!(s.json()["braid_over_quinn"], 3.0);
        assert_eq!(s.json()["braid_over_tls"], serde_json::Value::Null);
        assert!(s.footer().contains("NOT encrypted"));
    }

    #[test]
    fn runs_of_different_settings_are_not_compared() {
        let mut other = run(Peer::Quinn, 1.0, 1.0);
        other.concurrency = 8;
        let err = HandshakeSummary::new(&[run(Peer::Braid, 1.0, 1.0), other], 1).unwrap_err();
        assert_eq!(err, SummaryError::Mismatch("concurrency"));
        assert_eq!(HandshakeSummary::new(&[], 1).unwrap_err(), SummaryError::Empty);
    }
}
