//! Node counters.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::Transport;

/// Counters per transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TransportStats {
    /// Messages handed to the transport.
    pub messages_sent: u64,
    /// Framed bytes handed to the transport.
    pub bytes_sent: u64,
    /// Messages received and decoded.
    pub messages_received: u64,
    /// Framed bytes received.
    pub bytes_received: u64,
}

/// A snapshot of a node's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeStats {
    /// UDP.
    pub udp: TransportStats,
    /// TCP.
    pub tcp: TransportStats,
    /// Braid.
    pub braid: TransportStats,
    /// Exon.
    pub exon: TransportStats,
    /// Messages delivered between virtual nodes of this host, never
    /// serialized.
    pub local_deliveries: u64,
    /// Received frames dropped as malformed.
    pub malformed_frames: u64,
    /// Received messages dropped: addressed to a virtual node not
    /// registered here.
    pub unknown_vnode: u64,
    /// Received UDP datagrams dropped because the receiver's queue was
    /// full.
    pub recv_queue_full: u64,
    /// Outgoing UDP datagrams dropped on purpose (`NodeConfig::udp_loss`).
    pub udp_injected_drops: u64,
    /// Channels (TCP, Braid) this node opened.
    pub channels_opened: u64,
    /// Channels closed after being idle.
    pub channels_idle_closed: u64,
    /// Channels closed on request ([`crate::Node::close_channels_to`]).
    pub channels_closed: u64,
    /// Channels that failed to open or broke.
    pub channel_failures: u64,
    /// Messages that failed (any reason, after being accepted by `send`).
    pub messages_failed: u64,
}

impl NodeStats {
    /// The counters of `t` (`Data` has none: zeros).
    pub fn transport(&self, t: Transport) -> TransportStats {
        match t {
            Transport::Udp => self.udp,
            Transport::Tcp => self.tcp,
            Transport::Braid => self.braid,
            Transport::Exon => self.exon,
            Transport::Data => TransportStats::default(),
        }
    }
}

#[derive(Default)]
pub(crate) struct TransportCounters {
    messages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_received: AtomicU64,
}

impl TransportCounters {
    pub(crate) fn on_sent(&self, bytes: usize) {
        self.messages_sent.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    /// Messages handed over inside a frame already counted (a batch's).
    pub(crate) fn add_messages_sent(&self, messages: usize) {
        self.messages_sent.fetch_add(messages as u64, Ordering::Relaxed);
    }
    /// `messages` received together, `bytes` in all.
    pub(crate) fn on_received_many(&self, messages: usize, bytes: usize) {
        self.messages_received.fetch_add(messages as u64, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_received(&self, bytes: usize) {
        self.messages_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    fn snapshot(&self) -> TransportStats {
        TransportStats {
            messages_sent: self.messages_sent.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            messages_received: self.messages_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) udp: TransportCounters,
    pub(crate) tcp: TransportCounters,
    pub(crate) braid: TransportCounters,
    pub(crate) exon: TransportCounters,
    pub(crate) local_deliveries: AtomicU64,
    pub(crate) malformed_frames: AtomicU64,
    pub(crate) unknown_vnode: AtomicU64,
    pub(crate) recv_queue_full: AtomicU64,
    pub(crate) udp_injected_drops: AtomicU64,
    pub(crate) channels_opened: AtomicU64,
    pub(crate) channels_idle_closed: AtomicU64,
    pub(crate) channels_closed: AtomicU64,
    pub(crate) channel_failures: AtomicU64,
    pub(crate) messages_failed: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn transport(&self, t: Transport) -> Option<&TransportCounters> {
        match t {
            Transport::Udp => Some(&self.udp),
            Transport::Tcp => Some(&self.tcp),
            Transport::Braid => Some(&self.braid),
            Transport::Exon => Some(&self.exon),
            Transport::Data => None,
        }
    }

    pub(crate) fn snapshot(&self) -> NodeStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NodeStats {
            udp: self.udp.snapshot(),
            tcp: self.tcp.snapshot(),
            braid: self.braid.snapshot(),
            exon: self.exon.snapshot(),
            local_deliveries: l(&self.local_deliveries),
            malformed_frames: l(&self.malformed_frames),
            unknown_vnode: l(&self.unknown_vnode),
            recv_queue_full: l(&self.recv_queue_full),
            udp_injected_drops: l(&self.udp_injected_drops),
            channels_opened: l(&self.channels_opened),
            channels_idle_closed: l(&self.channels_idle_closed),
            channels_closed: l(&self.channels_closed),
            channel_failures: l(&self.channel_failures),
            messages_failed: l(&self.messages_failed),
        }
    }
}
