//! Counters an endpoint and each connection keep. Plain data, cheap to copy,
//! serializable for `--json` output.

use std::net::SocketAddr;
use std::time::Duration;

/// Endpoint-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EndpointStats {
    /// Datagrams handed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Bytes of UDP payload received.
    pub bytes_received: u64,
    /// Bytes of UDP payload sent.
    pub bytes_sent: u64,
    /// Datagrams dropped because they did not decode (bad header or frame).
    pub malformed_datagrams: u64,
    /// Datagrams dropped because no connection has their connection ID.
    pub unknown_connection_datagrams: u64,
    /// Handshakes dropped because their cookie was forged, stale or for
    /// another address.
    pub invalid_cookies: u64,
    /// Cookie challenges (RETRY packets) sent.
    pub retries_sent: u64,
    /// Connections accepted from peers.
    pub connections_accepted: u64,
    /// Connections initiated locally.
    pub connections_initiated: u64,
    /// Handshakes refused because the endpoint was full or not accepting.
    pub connections_refused: u64,
    /// Connections currently held.
    pub connections_open: u64,
    /// Handshakes whose Noise message failed (altered, or addressed to
    /// another key); nothing was kept for them.
    pub handshake_failures: u64,
    /// Handshakes refused because the peer's key is not trusted.
    pub peers_refused: u64,
    /// Stateless answers (RETRY, refusals) not sent because
    /// [`MAX_STATELESS_QUEUED`](crate::MAX_STATELESS_QUEUED)
    /// were waiting already: what a flood of spoofed Initials gets beyond
    /// that, so it cannot grow the queue.
    pub stateless_dropped: u64,
}

/// Per-connection counters and estimates.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ConnectionStats {
    /// Packets sent, retransmissions included.
    pub packets_sent: u64,
    /// Packets received and accepted.
    pub packets_received: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// Packets declared lost (by SACK threshold, time threshold or RTO).
    pub packets_lost: u64,
    /// Stream bytes sent again after a loss.
    pub retransmitted_bytes: u64,
    /// Packets received whose number had been seen before.
    pub duplicate_packets: u64,
    /// Retransmission timeouts that fired.
    pub rto_count: u64,
    /// Tail loss probes sent (a probe timeout fired before the RTO).
    pub tail_probes: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// Messages the application handed to the connection.
    pub messages_sent: u64,
    /// Messages delivered to the application.
    pub messages_received: u64,
    /// Application bytes acknowledged by the peer.
    pub stream_bytes_acked: u64,
    /// Application bytes received in order.
    pub stream_bytes_received: u64,
    /// Frames or packets dropped as malformed on this connection.
    pub malformed_packets: u64,
    /// Packets whose authentication tag did not verify: dropped unread.
    pub auth_failures: u64,
    /// Key updates (either side's).
    pub key_updates: u64,
    /// Smoothed RTT.
    #[serde(serialize_with = "ser_duration_us")]
    pub smoothed_rtt: Duration,
    /// Minimum RTT.
    #[serde(serialize_with = "ser_duration_us")]
    pub min_rtt: Duration,
    /// Current retransmission timeout.
    #[serde(serialize_with = "ser_duration_us")]
    pub rto: Duration,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Bytes in flight.
    pub bytes_in_flight: u64,
    /// Paths currently open (1 for a single-path connection).
    pub paths: u64,
    /// Paths abandoned, by either side or after failing (re-open attempts
    /// that went unanswered included).
    pub paths_abandoned: u64,
    /// Client: paths opened again on the addresses of a path abandoned
    /// because it failed (each attempt sends one probe packet; see
    /// [`crate::TransportConfig::path_retry_max_backoff`]).
    pub path_retries: u64,
    /// Client: of those, the ones the peer answered: the failed path's
    /// addresses carry data again.
    pub paths_readded: u64,
    /// Packets dropped because they named a path that does not exist (or
    /// no longer does).
    pub unknown_path_packets: u64,
    /// ProgMP scheduler runs (0 until the connection schedules).
    pub scheduler_runs: u64,
    /// Packets the scheduler pushed onto paths.
    pub scheduler_pushes: u64,
    /// Pushes refused because the path already held too many packets.
    pub scheduler_refused_pushes: u64,
}

/// One packet as it left, before sealing: what an observer of an
/// unencrypted wire would have read (see
/// [`crate::Endpoint::capture_sent_packets`]). Simulations and tests use it
/// to see which stream bytes each path carried, which the sealed packets no
/// longer show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentPacketInfo {
    /// The path's id on the wire.
    pub path_id: u32,
    /// Its packet number on that path.
    pub pn: u64,
    /// The stream bytes its DATA frames carried (adjacent ranges merged).
    pub data: Vec<std::ops::Range<u64>>,
}

/// One path of a connection (see [`crate::Endpoint::paths`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PathInfo {
    /// The path's identifier (ProgMP's subflow `ID`).
    pub id: u32,
    /// Local address its packets leave from (`None`: the socket's choice).
    pub local: Option<SocketAddr>,
    /// The peer's address on this path.
    pub remote: SocketAddr,
    /// The peer has acknowledged a packet sent on it: it carries data.
    pub validated: bool,
    /// A backup path, by our choice or the peer's request.
    pub backup: bool,
    /// A retransmission timeout fired and nothing sent since has been
    /// acknowledged.
    pub lossy: bool,
    /// Smoothed RTT.
    #[serde(serialize_with = "ser_duration_us")]
    pub smoothed_rtt: Duration,
    /// Minimum RTT.
    #[serde(serialize_with = "ser_duration_us")]
    pub min_rtt: Duration,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Bytes in flight.
    pub bytes_in_flight: u64,
    /// Packets sent on it.
    pub packets_sent: u64,
    /// UDP payload bytes sent on it.
    pub bytes_sent: u64,
    /// Stream bytes it carried (retransmissions and redundant copies
    /// included).
    pub stream_bytes_sent: u64,
    /// Packets received on it.
    pub packets_received: u64,
    /// UDP payload bytes received on it.
    pub bytes_received: u64,
    /// Packets it declared lost.
    pub packets_lost: u64,
    /// Packets the scheduler gave it that wait to be sent.
    pub queued: u64,
    /// The scheduler's per-subflow `USER` value.
    pub user: i64,
}

fn ser_duration_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}
