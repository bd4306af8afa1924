//! What one `stream` experiment reports ([`StreamRun`], its `report`
//! artifact) and the comparison `braid bench stream` prints from several
//! of them ([`StreamSummary`]): the median time per peer over the rounds,
//! the rates, and Braid's ratios against the other peers. The performance
//! goals are stated as those ratios.
//!
//! ```
//! use braid_lab::template::builtin::stream::summary::{StreamRun, StreamSummary};
//! use braid_lab::template::builtin::stream::{Mode, Peer};
//! let run = |peer, secs| StreamRun {
//!     peer, mode: Mode::Bulk, bytes: 1_000_000_000, chunk: Some(131072), messages: None, size: None,
//!     cc: "cubic".into(), mtu: 1452, link: None, elapsed_secs: secs, gbps: 8.0 / secs, msgs_per_s: None, braid: None,
//!     encrypted: true, quinn_mtu: None,
//! };
//! let s = StreamSummary::new(&[run(Peer::Braid, 1.0), run(Peer::Tcp, 2.0), run(Peer::Quinn, 4.0)], 1).unwrap();
//! assert_eq!(s.json()["braid_over_quinn"], 4.0);
//! assert_eq!(s.json()["tcp_gbps"], 4.0);
//! ```

use braid::size::ByteSize;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Mode, Peer};

/// Braid's sender-side counters of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BraidCounters {
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Stream bytes sent again after a loss.
    pub retransmitted_bytes: u64,
    /// Smoothed RTT at the end, milliseconds.
    pub smoothed_rtt_ms: f64,
    /// Minimum RTT seen, milliseconds.
    pub min_rtt_ms: f64,
}

/// One experiment: one transfer over one peer (the `report` artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRun {
    /// The peer measured.
    pub peer: Peer,
    /// Bulk data or a message rate.
    pub mode: Mode,
    /// Application payload bytes the receiver got.
    pub bytes: u64,
    /// Bulk: bytes per application chunk.
    pub chunk: Option<u64>,
    /// Message mode: messages sent.
    pub messages: Option<u64>,
    /// Message mode: bytes per message.
    pub size: Option<u64>,
    /// Congestion control of Braid and quinn.
    pub cc: String,
    /// Largest UDP payload of Braid and quinn.
    pub mtu: u16,
    /// The emulated link, `None` on loopback.
    pub link: Option<String>,
    /// From just before connecting to the receiver holding every byte.
    pub elapsed_secs: f64,
    /// Payload bits per second over that interval, in Gbit/s.
    pub gbps: f64,
    /// Message mode: messages per second.
    pub msgs_per_s: Option<f64>,
    /// Braid's counters (the braid peer only).
    pub braid: Option<BraidCounters>,
    /// Braid ran authenticated and encrypted (reports from before
    /// encryption existed say false, which is what they measured).
    #[serde(default)]
    pub encrypted: bool,
    /// quinn's path MTU at the end of the run (the quinn peer only; older
    /// reports have none).
    #[serde(default)]
    pub quinn_mtu: Option<u16>,
}

/// Braid against TCP and quinn over several rounds: medians and ratios.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamSummary {
    /// Bulk or messages.
    pub mode: Mode,
    /// Payload bytes per run.
    pub bytes: u64,
    /// Bulk: chunk size.
    pub chunk: Option<u64>,
    /// Message mode: count and size.
    pub messages: Option<u64>,
    /// Message mode: bytes per message.
    pub size: Option<u64>,
    /// Rounds (runs per peer).
    pub repeat: u32,
    /// Congestion control of Braid and quinn.
    pub cc: String,
    /// Largest UDP payload of Braid and quinn.
    pub mtu: u16,
    /// quinn's largest path MTU across its runs, where it differs from
    /// `mtu` (quinn holds to 1472 bytes, its peer's default
    /// `max_udp_payload_size`, whatever `mtu` asks).
    pub quinn_mtu: Option<u16>,
    /// The emulated link, `None` on loopback.
    pub link: Option<String>,
    /// Median seconds of braid, tcp, quinn ([`Peer::ALL`] order).
    pub secs: [f64; 3],
    /// Rate from the median time: Gbit/s (bulk) or messages/s.
    pub rate: [f64; 3],
    /// Braid's packets lost over all its runs.
    pub braid_packets_lost: u64,
    /// Braid's bytes retransmitted over all its runs.
    pub braid_retransmitted_bytes: u64,
    /// The braid row is authenticated and encrypted.
    pub encrypted: bool,
    /// Median seconds and rate of Braid without authentication, when both
    /// kinds of Braid runs were made (the cost of encryption).
    pub insecure: Option<(f64, f64)>,
}

/// Why runs cannot be summarised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    /// A peer has no run.
    #[error("no {0} run to compare with")]
    Missing(&'static str),
    /// The runs measured different things.
    #[error("the runs differ in {0}: they cannot be compared")]
    Mismatch(&'static str),
}

/// The median of a non-empty list (the lower middle for even lengths: a
/// value that was actually measured).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[(v.len() - 1) / 2])
}

impl StreamSummary {
    /// Summarise `runs` (each peer at least once, all of one workload).
    pub fn new(runs: &[StreamRun], repeat: u32) -> Result<StreamSummary, SummaryError> {
        let first = runs.first().ok_or(SummaryError::Missing("braid"))?;
        for r in runs {
            let same = [
                ("mode", r.mode == first.mode),
                ("bytes", r.bytes == first.bytes && r.chunk == first.chunk),
                ("messages", r.messages == first.messages && r.size == first.size),
                ("cc", r.cc == first.cc),
                ("mtu", r.mtu == first.mtu),
                ("link", r.link == first.link),
            ];
            if let Some((what, _)) = same.iter().find(|(_, ok)| !ok) {
                return Err(SummaryError::Mismatch(what));
            }
        }
        // The braid row is the encrypted runs when there are any; the
        // insecure ones then measure what encryption costs.
        let encrypted = runs.iter().any(|r| r.peer == Peer::Braid && r.encrypted);
        let braid_row = |r: &&StreamRun| r.peer != Peer::Braid || r.encrypted == encrypted;
        let mut secs = [0.0; 3];
        for (i, peer) in Peer::ALL.into_iter().enumerate() {
            let times = runs.iter().filter(braid_row).filter(|r| r.peer == peer).map(|r| r.elapsed_secs).collect();
            secs[i] = median(times).ok_or(SummaryError::Missing(peer.name()))?.max(1e-9);
        }
        let to_rate = |s: f64| match (first.mode, first.messages) {
            (Mode::Messages, Some(count)) => count as f64 / s,
            _ => first.bytes as f64 * 8.0 / s / 1e9,
        };
        let rate = secs.map(to_rate);
        let insecure_times: Vec<f64> =
            runs.iter().filter(|r| r.peer == Peer::Braid && !r.encrypted).map(|r| r.elapsed_secs).collect();
        let insecure = match encrypted {
            true => median(insecure_times).map(|s| s.max(1e-9)).map(|s| (s, to_rate(s))),
            false => None,
        };
        let braid = runs.iter().filter_map(|r| r.braid);
        let (lost, retx) = braid.fold((0, 0), |(l, x), c| (l + c.packets_lost, x + c.retransmitted_bytes));
        Ok(StreamSummary {
            mode: first.mode,
            bytes: first.bytes,
            chunk: first.chunk,
            messages: first.messages,
            size: first.size,
            repeat,
            cc: first.cc.clone(),
            mtu: first.mtu,
            quinn_mtu: runs.iter().filter_map(|r| r.quinn_mtu).max().filter(|&m| m != first.mtu),
            link: first.link.clone(),
            secs,
            rate,
            braid_packets_lost: lost,
            braid_retransmitted_bytes: retx,
            encrypted,
            insecure,
        })
    }

    /// Encrypted Braid's rate over its rate without authentication.
    pub fn encryption_cost(&self) -> Option<f64> {
        self.insecure.map(|(_, rate)| self.rate[0] / rate)
    }

    /// Braid's rate over `peer`'s.
    pub fn braid_over(&self, peer: Peer) -> f64 {
        self.rate[0] / self.rate[peer as usize]
    }

    /// The JSON `braid bench stream --json` prints: `braid_gbps`,
    /// `tcp_gbps`, `quinn_gbps` (or `*_msgs_per_s`), `braid_over_quinn`,
    /// `braid_over_tcp`, the median seconds and Braid's loss counters.
    pub fn json(&self) -> serde_json::Value {
        let r = self.rate;
        let mut out = match self.mode {
            Mode::Bulk => json!({
                "mode": "stream", "bytes": self.bytes, "chunk": self.chunk,
                "braid_gbps": r[0], "tcp_gbps": r[1], "quinn_gbps": r[2],
            }),
            Mode::Messages => json!({
                "mode": "messages", "messages": self.messages, "size": self.size,
                "braid_msgs_per_s": r[0], "tcp_msgs_per_s": r[1], "quinn_msgs_per_s": r[2],
            }),
        };
        let common = json!({
            "braid_over_quinn": self.braid_over(Peer::Quinn), "braid_over_tcp": self.braid_over(Peer::Tcp),
            "repeat": self.repeat,
            "cc": self.cc,
            "mtu": self.mtu,
            "quinn_mtu": self.quinn_mtu.unwrap_or(self.mtu),
            "braid_secs": self.secs[0], "tcp_secs": self.secs[1], "quinn_secs": self.secs[2],
            "braid_packets_lost": self.braid_packets_lost, "braid_retransmitted_bytes": self.braid_retransmitted_bytes,
        });
        if let (Some(o), Some(c)) = (out.as_object_mut(), common.as_object()) {
            o.extend(c.clone());
            o.insert("encrypted".into(), json!(self.encrypted));
            if let (Some((secs, rate)), Some(cost)) = (self.insecure, self.encryption_cost()) {
                let key = match self.mode {
                    Mode::Bulk => "braid_insecure_gbps",
                    Mode::Messages => "braid_insecure_msgs_per_s",
                };
                o.insert(key.into(), json!(rate));
                o.insert("braid_insecure_secs".into(), json!(secs));
                o.insert("encryption_cost".into(), json!(cost));
            }
            if let Some(link) = &self.link {
                o.insert("link".into(), json!(link));
            }
        }
        out
    }

    /// The unit of [`rate`](Self::rate): `Gbit/s` or `msgs/s`.
    pub fn unit(&self) -> &'static str {
        match self.mode {
            Mode::Bulk => "Gbit/s",
            Mode::Messages => "msgs/s",
        }
    }

    /// The line above the table: what was measured, where, how.
    pub fn title(&self) -> String {
        let what = match (self.mode, self.messages, self.size) {
            (Mode::Messages, Some(count), Some(size)) => format!("{count} messages of {}", ByteSize(size)),
            _ => format!("{} in {} chunks", ByteSize(self.bytes), ByteSize(self.chunk.unwrap_or(self.bytes))),
        };
        let place = match &self.link {
            None => "loopback".to_string(),
            Some(link) => format!("emulated link {link}"),
        };
        let datagrams = match self.quinn_mtu {
            None => format!("braid and quinn: {} byte datagrams", self.mtu),
            Some(q) => format!("braid: {} byte datagrams, quinn: {q}", self.mtu),
        };
        format!("{place}, {what}, median of {} run(s); {datagrams}, {}; tcp: kernel defaults", self.repeat, self.cc)
    }

    /// The table's header.
    pub fn header(&self) -> [&'static str; 4] {
        ["peer", "seconds", self.unit(), "braid/peer"]
    }

    /// One row per peer: name, median seconds, rate, Braid's ratio over it
    /// (and a row for Braid without authentication when it was measured).
    pub fn rows(&self) -> Vec<Vec<String>> {
        let fmt_rate = |r: f64| match self.mode {
            Mode::Bulk => format!("{r:.3}"),
            Mode::Messages => format!("{r:.0}"),
        };
        let mut rows: Vec<Vec<String>> = Peer::ALL
            .iter()
            .map(|&p| {
                let i = p as usize;
                let name = match (p, self.encrypted) {
                    (Peer::Braid, true) => "braid (encrypted)".to_string(),
                    (Peer::Braid, false) => "braid (INSECURE)".to_string(),
                    _ => p.name().to_string(),
                };
                vec![name, format!("{:.4}", self.secs[i]), fmt_rate(self.rate[i]), format!("{:.2}", self.braid_over(p))]
            })
            .collect();
        if let (Some((secs, rate)), Some(cost)) = (self.insecure, self.encryption_cost()) {
            rows.insert(1, vec!["braid --insecure-no-auth".into(), format!("{secs:.4}"), fmt_rate(rate), format!("{cost:.2}")]);
        }
        rows
    }

    /// The line below the table: Braid's loss counters and protection.
    pub fn footer(&self) -> String {
        let protection = match (self.encrypted, self.encryption_cost()) {
            (true, Some(cost)) => format!("; encrypted / --insecure-no-auth = {cost:.2}"),
            (true, None) => "; braid authenticated and encrypted".into(),
            (false, _) => "; braid NOT encrypted (--insecure-no-auth)".into(),
        };
        format!(
            "braid: {} packets lost, {} bytes retransmitted (all runs){protection}",
            self.braid_packets_lost, self.braid_retransmitted_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(peer: Peer, secs: f64) -> StreamRun {
        StreamRun {
            peer,
            mode: Mode::Messages,
            bytes: 2000 * 1024,
            chunk: None,
            messages: Some(2000),
            size: Some(1024),
            cc: "cubic".into(),
            mtu: 1452,
            link: None,
            elapsed_secs: secs,
            gbps: 0.0,
            msgs_per_s: Some(2000.0 / secs),
            braid: (peer == Peer::Braid).then_some(BraidCounters {
                packets_lost: 2,
                retransmitted_bytes: 100,
                smoothed_rtt_ms: 0.1,
                min_rtt_ms: 0.05,
            }),
            encrypted: peer == Peer::Braid,
            quinn_mtu: None,
        }
    }

    #[test]
    fn median_is_a_measured_value() {
        assert_eq!(median(vec![3.0]), Some(3.0));
        assert_eq!(median(vec![5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn message_mode_keys_medians_and_sums() {
        let runs = [
            run(Peer::Braid, 1.0),
            run(Peer::Tcp, 2.0),
            run(Peer::Quinn, 4.0),
            run(Peer::Braid, 3.0),
            run(Peer::Tcp, 2.0),
            run(Peer::Quinn, 8.0),
        ];
        let s = StreamSummary::new(&runs, 2).unwrap();
        let j = s.json();
        assert_eq!(j["mode"], "messages");
        assert_eq!(j["braid_msgs_per_s"], 2000.0);
        assert_eq!(j["tcp_msgs_per_s"], 1000.0);
        assert_eq!(j["quinn_msgs_per_s"], 500.0);
        assert_eq!(j["braid_over_quinn"], 4.0);
        assert_eq!(j["braid_over_tcp"], 2.0);
        assert_eq!(j["repeat"], 2);
        assert_eq!(j["braid_packets_lost"], 4);
        assert_eq!(j["braid_retransmitted_bytes"], 200);
        assert!(j.get("link").is_none());
        assert_eq!(s.header(), ["peer", "seconds", "msgs/s", "braid/peer"]);
        assert_eq!(s.rows()[2], vec!["quinn", "4.0000", "500", "4.00"]);
        assert!(s.title().starts_with("loopback, 2000 messages of 1 KiB, median of 2 run(s)"), "{}", s.title());
    }

    #[test]
    fn missing_peers_and_mixed_runs_are_errors() {
        assert_eq!(StreamSummary::new(&[run(Peer::Braid, 1.0), run(Peer::Tcp, 1.0)], 1), Err(SummaryError::Missing("quinn")));
        let mut other = run(Peer::Quinn, 1.0);
        other.mtu = 1200;
        assert_eq!(
            StreamSummary::new(&[run(Peer::Braid, 1.0), run(Peer::Tcp, 1.0), other], 1),
            Err(SummaryError::Mismatch("mtu"))
        );
    }

    #[test]
    fn artifact_round_trips() {
        let r = run(Peer::Braid, 1.5);
        let back: StreamRun = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    proptest! {
        /// Bulk ratios are ratios of median times, whatever the times.
        #[test]
        fn bulk_ratios_follow_median_times(b in 0.001f64..100.0, t in 0.001f64..100.0, q in 0.001f64..100.0) {
            let bulk = |peer, secs| StreamRun { mode: Mode::Bulk, bytes: 1 << 20, chunk: Some(1 << 17), messages: None, size: None, ..run(peer, secs) };
            let s = StreamSummary::new(&[bulk(Peer::Quinn, q), bulk(Peer::Braid, b), bulk(Peer::Tcp, t)], 1).unwrap();
            let j = s.json();
            prop_assert!((j["braid_over_tcp"].as_f64().unwrap() - t / b).abs() <= 1e-9 * (t / b));
            prop_assert!((j["braid_over_quinn"].as_f64().unwrap() - q / b).abs() <= 1e-9 * (q / b));
            prop_assert!((j["braid_gbps"].as_f64().unwrap() - (1u64 << 23) as f64 / b / 1e9).abs() < 1e-9);
        }
    }
}
