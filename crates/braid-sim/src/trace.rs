//! The trace hash: a fingerprint of every link event of a run, so two runs
//! can be compared for identical behaviour with one number.
//!
//! Fields are fed as explicit little-endian bytes into SipHash-1-3 with
//! fixed keys (not through `std::hash::Hash`, whose byte layout is not a
//! stable contract), so the hash is the same on every platform and Rust
//! version.

use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use braid_core::Instant;
use braid_link::{DropReason, Outcome, PacketId};
use siphasher::sip::SipHasher13;

/// What happened to a datagram handed to the network, as recorded in the
/// trace.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fate {
    /// Queued by a link under this id; its outcome is recorded when
    /// decided ([`TraceHasher::record_outcome`]).
    Queued(PacketId),
    /// Refused by the link at once.
    Refused(DropReason),
    /// No path from the source to the destination address.
    NoRoute,
}

fn reason_code(reason: DropReason) -> u8 {
    match reason {
        DropReason::Mtu => 0,
        DropReason::QueueFull => 1,
        DropReason::Loss => 2,
        DropReason::BurstLoss => 3,
        DropReason::Aqm => 4,
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TraceHasher(SipHasher13);

impl Default for TraceHasher {
    fn default() -> Self {
        TraceHasher(SipHasher13::new_with_keys(
            0x6272_6169_6400_0001,
            0x7472_6163_6500_0002,
        ))
    }
}

impl TraceHasher {
    fn addr(&mut self, a: SocketAddr) {
        match a.ip() {
            IpAddr::V4(ip) => {
                self.0.write_u8(4);
                self.0.write(&ip.octets());
            }
            IpAddr::V6(ip) => {
                self.0.write_u8(6);
                self.0.write(&ip.octets());
            }
        }
        self.0.write(&a.port().to_le_bytes());
    }

    fn time(&mut self, t: Instant) {
        self.0.write(&t.as_nanos().to_le_bytes());
    }

    /// Record one datagram handed to the network at `now`.
    pub(crate) fn record(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        fate: Fate,
    ) {
        self.time(now);
        self.addr(src);
        self.addr(dst);
        self.0.write(&(payload.len() as u64).to_le_bytes());
        match fate {
            Fate::NoRoute => self.0.write_u8(0),
            Fate::Refused(reason) => {
                self.0.write_u8(1);
                self.0.write_u8(reason_code(reason));
            }
            Fate::Queued(id) => {
                self.0.write_u8(2);
                self.0.write(&id.0.to_le_bytes());
            }
        }
        // The payload itself, absorbed in full: cheaper than hashing it
        // separately and just as discriminating.
        self.0.write(payload);
    }

    /// Record the decided fate of a queued datagram, learnt at `now` from
    /// link number `link`.
    pub(crate) fn record_outcome(&mut self, now: Instant, link: usize, outcome: Outcome) {
        self.time(now);
        self.0.write(&(link as u64).to_le_bytes());
        self.0.write(&outcome.id().0.to_le_bytes());
        match outcome {
            Outcome::Dropped { reason, .. } => {
                self.0.write_u8(1);
                self.0.write_u8(reason_code(reason));
            }
            Outcome::Delivered {
                at, duplicate_at, ..
            } => {
                self.0.write_u8(2);
                self.time(at);
                self.0.write_u8(u8::from(duplicate_at.is_some()));
                if let Some(d) = duplicate_at {
                    self.time(d);
                }
            }
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0.finish()
    }
}
