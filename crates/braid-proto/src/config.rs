//! Endpoint and per-connection configuration.

use std::time::Duration;

use crate::cc::CcAlgorithm;
use crate::crypto::Security;

/// Per-connection transport parameters.
///
/// ```
/// use braid_proto::{TransportConfig, CcAlgorithm};
/// let mut cfg = TransportConfig::default();
/// cfg.congestion_control = CcAlgorithm::NewReno;
/// cfg.receive_window = 4 << 20;
/// assert!(cfg.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransportConfig {
    /// Largest UDP payload the connection sends, in bytes. Default 1452
    /// (a 1500-byte Ethernet MTU less IPv6 and UDP headers).
    pub max_datagram_size: u16,
    /// Congestion controller for new connections.
    pub congestion_control: CcAlgorithm,
    /// Initial congestion window, in packets (RFC 6928: 10).
    pub initial_window_packets: u32,
    /// Receive window in bytes: how far beyond what the application has
    /// consumed the peer may send.
    pub receive_window: u64,
    /// Send buffer in bytes: queued plus unacknowledged data above which
    /// `send_message` reports [`crate::SendError::Blocked`]. One message is
    /// always accepted into an empty buffer, whatever its size.
    pub send_buffer: u64,
    /// Largest message accepted, in either direction.
    pub max_message_size: u64,
    /// A connection that hears nothing from its peer for this long closes.
    pub idle_timeout: Duration,
    /// If set, a PING is sent after this long without sending, which keeps
    /// an idle connection alive.
    pub keep_alive_interval: Option<Duration>,
    /// Longest the receiver delays an acknowledgement.
    pub max_ack_delay: Duration,
    /// Acknowledge at once after this many ack-eliciting packets.
    pub ack_frequency: u32,
    /// Lower bound of the retransmission timeout (RFC 6298 (2.4) says 1 s;
    /// like Linux we default to 200 ms).
    pub min_rto: Duration,
    /// Upper bound of the backed-off retransmission timeout (RFC 6298 (2.5)).
    /// The effective bound is also at most a quarter of `idle_timeout`, so a
    /// sender in back-off probes often enough that its peer never mistakes
    /// the connection for idle.
    pub max_rto: Duration,
    /// RTT assumed before the first sample (gives the RFC 6298 initial RTO).
    pub initial_rtt: Duration,
    /// Pace packets at the controller's pacing rate.
    pub pacing: bool,
    /// Give up a handshake after this long.
    pub handshake_timeout: Duration,
    /// An authenticated connection updates its packet keys at least this
    /// often (and after 2^22 packets with one key, whichever is first).
    pub key_update_interval: Duration,
    /// Multipath, client side: a path abandoned because it failed (its
    /// retransmission timeouts went unanswered while another path worked,
    /// or the server abandoned it) is opened again on the same
    /// addresses, under a new path id, after a wait that starts at about
    /// the failed path's retransmission timeout and doubles after every
    /// attempt that goes unanswered, up to this cap; for as long as the
    /// connection lives. Each attempt costs one probe packet (and a
    /// PATH_ABANDON frame on a working path when it goes unanswered), so a
    /// path that never comes back costs about one packet per cap.
    /// `None` never re-opens a path. Default 30 s. Paths the application
    /// removes (and, once it has failed, a path id given to
    /// `remove_path`) are not re-opened; a server refuses to open again a
    /// path its application removed.
    #[serde(default = "default_path_retry_max_backoff")]
    pub path_retry_max_backoff: Option<Duration>,
}

fn default_path_retry_max_backoff() -> Option<Duration> {
    Some(Duration::from_secs(30))
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_datagram_size: 1452,
            congestion_control: CcAlgorithm::Cubic,
            initial_window_packets: 10,
            receive_window: 16 << 20,
            send_buffer: 16 << 20,
            max_message_size: 64 << 20,
            idle_timeout: Duration::from_secs(30),
            keep_alive_interval: None,
            max_ack_delay: Duration::from_millis(5),
            ack_frequency: 2,
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            initial_rtt: Duration::from_millis(333),
            pacing: true,
            handshake_timeout: Duration::from_secs(30),
            key_update_interval: Duration::from_secs(120),
            path_retry_max_backoff: default_path_retry_max_backoff(),
        }
    }
}

/// A configuration value outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid transport config `{field}`: expected {expected}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// The allowed form.
    pub expected: &'static str,
}

impl TransportConfig {
    /// Smallest datagram size accepted: the handshake pads to it.
    pub const MIN_DATAGRAM_SIZE: u16 = 1200;

    /// Check every field against its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |ok: bool, field, expected| if ok { Ok(()) } else { Err(ConfigError { field, expected }) };
        check(
            (Self::MIN_DATAGRAM_SIZE..=65_527).contains(&self.max_datagram_size),
            "max_datagram_size",
            "1200..=65527 bytes",
        )?;
        check(self.initial_window_packets >= 1, "initial_window_packets", "at least 1")?;
        check(
            self.receive_window >= u64::from(self.max_datagram_size),
            "receive_window",
            "at least max_datagram_size bytes",
        )?;
        check(self.send_buffer >= 1, "send_buffer", "at least 1 byte")?;
        check(
            (1..=(1u64 << 40)).contains(&self.max_message_size),
            "max_message_size",
            "1 byte to 1 TiB",
        )?;
        check(!self.idle_timeout.is_zero(), "idle_timeout", "a positive duration")?;
        check(self.ack_frequency >= 1, "ack_frequency", "at least 1")?;
        check(!self.min_rto.is_zero() && self.min_rto <= self.max_rto, "min_rto", "positive and at most max_rto")?;
        check(!self.initial_rtt.is_zero(), "initial_rtt", "a positive duration")?;
        check(!self.handshake_timeout.is_zero(), "handshake_timeout", "a positive duration")?;
        check(
            self.path_retry_max_backoff.is_none_or(|cap| !cap.is_zero()),
            "path_retry_max_backoff",
            "a positive duration, or none to disable",
        )?;
        Ok(())
    }
}

/// Endpoint-wide configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EndpointConfig {
    /// Accept connections initiated by peers (server role).
    pub accept_incoming: bool,
    /// Most connections held at once; handshakes beyond it are refused.
    pub max_connections: usize,
    /// How long a handshake cookie stays valid.
    pub cookie_lifetime: Duration,
    /// Transport parameters of accepted connections, and the default for
    /// [`crate::Endpoint::connect`].
    pub transport: TransportConfig,
    /// Authentication and encryption (see [`crate::crypto::Security`]: the
    /// protocol core's default is insecure; drivers default to
    /// authenticated). Not serialized: it holds key material.
    #[serde(skip)]
    pub security: Security,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            accept_incoming: true,
            max_connections: 10_000,
            cookie_lifetime: Duration::from_secs(10),
            transport: TransportConfig::default(),
            security: Security::default(),
        }
    }
}
