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
use braid_link::{DropReason, Verdict};
use siphasher::sip::SipHasher13;

/// The fate of a datagram as recorded in the trace.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fate {
    /// Offered to a link, which decided.
    Link(Verdict),
    /// No path from the source to the destination address.
    NoRoute,
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
            Fate::Link(Verdict::Dropped(reason)) => {
                self.0.write_u8(1);
                self.0.write_u8(match reason {
                    DropReason::Mtu => 0,
                    DropReason::QueueFull => 1,
                    DropReason::Loss => 2,
                    DropReason::BurstLoss => 3,
                });
            }
            Fate::Link(Verdict::Deliver { at, duplicate_at }) => {
                self.0.write_u8(2);
                self.time(at);
                self.0.write_u8(u8::from(duplicate_at.is_some()));
                if let Some(d) = duplicate_at {
                    self.time(d);
                }
            }
        }
        // The payload itself, absorbed in full: cheaper than hashing it
        // separately and just as discriminating.
        self.0.write(payload);
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0.finish()
    }
}
