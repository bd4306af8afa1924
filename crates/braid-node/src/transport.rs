//! The transports a message can ask for (seed 000 §III-A: UDP, TCP, UDT
//! and the DATA pseudo-protocol; here Braid's reliable transport takes
//! UDT's place, and Exon, seed 003, adds exactly-once delivery).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a message travels. Chosen per message, in its header.
///
/// | transport | order | delivery | channel | `Delivered` notification |
/// |---|---|---|---|---|
/// | `Udp` | none | at most once; a message must fit one datagram | none (one socket) | never (ends at `Sent`) |
/// | `Tcp` | FIFO per destination | at most once across a connection failure | kernel TCP, created on first use | when the peer's kernel acknowledged every byte (Linux `TCP_INFO`'s `tcpi_bytes_acked`); not that the application read it |
/// | `Braid` | FIFO per destination | at most once across a connection failure | Braid's reliable transport over UDP | when Braid's peer acknowledged every byte |
/// | `Exon` | none | exactly once (at most once if the receiver restarts without its durable clock: reported as failed, in doubt) | none: Exon's soft half-connections over one UDP socket at base port + 2 | when Exon's outcome for the message is `Delivered` |
/// | `Data` | FIFO among the stream's messages per chosen transport; none with the application's other messages | at most once | a pseudo-transport: the DATA interceptor replaces it by `Tcp` or `Braid` per message, sent on a TCP or Braid channel of its own (the bulk lane), so the application's messages to the same destination never wait behind the stream | as the chosen transport |
///
/// Exon node ids are derived from the Exon socket address (FNV-1a 64 of
/// the IP octets and the port), so a sender knows the destination's id
/// from its address, and the receiver finds the sender's address in the
/// Node header of the frame.
///
/// ```
/// use braid_node::Transport;
/// assert_eq!("braid".parse::<Transport>().unwrap(), Transport::Braid);
/// assert_eq!(Transport::Tcp.to_string(), "tcp");
/// assert!("udt".parse::<Transport>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Transport {
    /// One UDP datagram per message.
    Udp,
    /// Kernel TCP, length-prefixed frames.
    Tcp,
    /// Braid's reliable, congestion-controlled message transport over UDP.
    Braid,
    /// Exactly-once, unordered delivery without connections (Exon).
    Exon,
    /// The DATA pseudo-transport (seed 000 §IV-A): resolved to `Tcp` or
    /// `Braid` by [`crate::data::DataInterceptor`] before the node sees it.
    Data,
}

impl Transport {
    /// Every transport, in wire order.
    pub const ALL: [Transport; 5] = [Transport::Udp, Transport::Tcp, Transport::Braid, Transport::Exon, Transport::Data];

    /// Lower-case name, as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Braid => "braid",
            Transport::Exon => "exon",
            Transport::Data => "data",
        }
    }

    /// Offset of this transport's port from a node's base port. UDP and
    /// TCP share the base port number (different protocols); Braid and
    /// Exon also run over UDP and so need ports of their own. Every node
    /// of a deployment uses the same offsets, which is what lets one
    /// address (IP and base port) name all of a node's transports, as in
    /// the paper's `Address` (Listing 4).
    pub fn port_offset(self) -> u16 {
        match self {
            Transport::Udp | Transport::Tcp | Transport::Data => 0,
            Transport::Braid => 1,
            Transport::Exon => 2,
        }
    }

    /// Whether the transport keeps FIFO order per destination.
    pub fn is_ordered(self) -> bool {
        matches!(self, Transport::Tcp | Transport::Braid)
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport name that is not one of `udp`, `tcp`, `braid`, `exon`, `data`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport `{0}`: expected one of udp, tcp, braid, exon, data")]
pub struct UnknownTransport(pub String);

impl FromStr for Transport {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Transport::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownTransport(s.to_string()))
    }
}
