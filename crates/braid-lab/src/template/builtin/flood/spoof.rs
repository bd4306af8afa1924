//! What the attacker sends: datagrams forged to reach the receiver's most
//! expensive unauthenticated code paths, never one it could accept.
//!
//! Braid (issue 17, build item 2): Initials padded to the legal 1,200
//! bytes, each with a fresh random client connection ID, half without a
//! cookie (each answered with a stateless RETRY: the cookie's MAC and one
//! small datagram) and half with a forged 24-byte cookie and a Noise
//! message of IK's first-message length in random bytes (checked against
//! the cookie key and dropped before any Diffie-Hellman).
//!
//! Exon (issue 17, build item 3; WireGuard §5.4.4, §5.4.7): handshake
//! initiations of the right length with a wrong mac1; initiations with a
//! *valid* mac1 (the receiver's public key is public: the attacker asks
//! for it with a key request, [`read_key_reply`]) and a random Noise
//! message, which pass the cheap check and cost the receiver its
//! Diffie-Hellmans (then fail) until its handshake budget is spent, and a
//! cookie reply each once it is under load (no mac2: the attacker never
//! reads its replies); key requests (each answered with the node's public
//! key, no larger than the request); and sealed-looking datagrams,
//! slot-request-sized and message-sized, with random receiver indices and
//! counters (no session has them).
//!
//! The forging is sans-IO: a [`Forger`] writes one datagram into a buffer;
//! the tests below feed forged datagrams to the protocol state machines and
//! check that each reaches the path it was made for and leaves no state.

use braid::exon::secure::{
    mac1_for, PublicKey, DATA_HEADER_LEN, INIT_LEN, KEYREPLY_LEN, KEYREQ_LEN, KEY_LEN, MAC_LEN, TAG_LEN, T_DATA,
    T_INIT, T_KEYREPLY, T_KEYREQ,
};
use braid_proto::wire::{self, Frame, Header, PacketType};
use braid_proto::TransportConfig;
use bytes::Bytes;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Target;

/// Bytes of a Braid cookie (issue time and a 128-bit MAC).
const COOKIE_LEN: usize = 24;

/// Bytes of the first message of Noise IK as Braid carries it: ephemeral
/// key, encrypted static key, encrypted payload (version, suites, the
/// server key it addresses) with its tag.
const NOISE_MSG1_LEN: usize = 32 + 48 + 40 + 16;

/// Bytes of a sealed slot request: the header, one small frame, the tag.
const SEALED_SLOT_REQUEST_LEN: usize = DATA_HEADER_LEN + 12 + TAG_LEN;

/// Bytes of a sealed message fragment of a 1 KiB message.
const SEALED_DATA_LEN: usize = DATA_HEADER_LEN + 1_040 + TAG_LEN;

/// The kinds of forged datagram, in the order a [`Forger`] cycles through
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Braid Initial without a cookie.
    BraidInitial,
    /// Braid Initial with a forged cookie and a garbage Noise message.
    BraidForgedCookie,
    /// Exon initiation with a wrong mac1.
    ExonInit,
    /// Exon initiation with a valid mac1 and a random Noise message.
    ExonInitMac1,
    /// Exon key request.
    ExonKeyRequest,
    /// Exon sealed slot request for no session.
    ExonSlotRequest,
    /// Exon sealed data for no session.
    ExonData,
}

impl Kind {
    /// The kinds sent against `target`.
    pub fn of(target: Target) -> &'static [Kind] {
        match target {
            Target::Braid => &[Kind::BraidInitial, Kind::BraidForgedCookie],
            Target::Exon => {
                &[Kind::ExonInit, Kind::ExonInitMac1, Kind::ExonKeyRequest, Kind::ExonSlotRequest, Kind::ExonData]
            }
        }
    }
}

/// Writes forged datagrams for one target, cycling through its kinds,
/// from a seeded generator (runs repeat).
pub struct Forger {
    kinds: Vec<Kind>,
    /// The Exon receiver's public key, for valid mac1s.
    receiver: Option<PublicKey>,
    next: usize,
    rng: ChaCha8Rng,
    scratch: Vec<u8>,
}

impl Forger {
    /// A forger of `target`'s kinds. `exon_receiver` is the Exon
    /// receiver's public key, as the attacker learned it; without it,
    /// [`Kind::ExonInitMac1`] is left out.
    pub fn new(target: Target, seed: u64, exon_receiver: Option<PublicKey>) -> Forger {
        let kinds = Kind::of(target)
            .iter()
            .copied()
            .filter(|k| *k != Kind::ExonInitMac1 || exon_receiver.is_some())
            .collect();
        Forger { kinds, receiver: exon_receiver, next: 0, rng: ChaCha8Rng::seed_from_u64(seed), scratch: Vec::new() }
    }

    /// The kinds this forger cycles through.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// Longest datagram this forger writes.
    pub fn max_len(&self) -> usize {
        usize::from(TransportConfig::MIN_DATAGRAM_SIZE).max(SEALED_DATA_LEN).max(INIT_LEN)
    }

    /// Writes the next datagram into `out` (cleared first); its kind.
    pub fn forge(&mut self, out: &mut Vec<u8>) -> Kind {
        let kind = self.kinds[self.next % self.kinds.len()];
        self.next += 1;
        out.clear();
        match kind {
            Kind::BraidInitial => self.braid_initial(out, false),
            Kind::BraidForgedCookie => self.braid_initial(out, true),
            Kind::ExonInit => {
                // Type, random sender index and Noise message, random mac1:
                // the receiver's keyed hash (one BLAKE3 over 5 + 116 bytes)
                // rejects it.
                self.random(out, INIT_LEN);
                out[0] = T_INIT;
            }
            Kind::ExonInitMac1 => {
                // Random sender index and Noise message (any 32 bytes are
                // an X25519 public key: the receiver's Diffie-Hellmans run
                // before its decryption of the static key fails), the mac1
                // the receiver expects, mac2 zero (no cookie).
                self.random(out, INIT_LEN);
                out[0] = T_INIT;
                let body = INIT_LEN - 2 * MAC_LEN;
                if let Some(key) = &self.receiver {
                    let mac = mac1_for(key, &out[..body]);
                    out[body..body + MAC_LEN].copy_from_slice(&mac);
                }
                out[body + MAC_LEN..].fill(0);
            }
            Kind::ExonKeyRequest => out.extend_from_slice(&key_request()),
            Kind::ExonSlotRequest => {
                self.random(out, SEALED_SLOT_REQUEST_LEN);
                out[0] = T_DATA;
            }
            Kind::ExonData => {
                self.random(out, SEALED_DATA_LEN);
                out[0] = T_DATA;
            }
        }
        kind
    }

    fn random(&mut self, out: &mut Vec<u8>, len: usize) {
        out.resize(len, 0);
        self.rng.fill_bytes(out);
    }

    fn braid_initial(&mut self, out: &mut Vec<u8>, forged: bool) {
        let (cookie, noise) = if forged {
            let mut c = vec![0u8; COOKIE_LEN];
            self.rng.fill_bytes(&mut c);
            self.scratch.resize(NOISE_MSG1_LEN, 0);
            self.rng.fill_bytes(&mut self.scratch);
            (Bytes::from(c), Bytes::copy_from_slice(&self.scratch))
        } else {
            (Bytes::new(), Bytes::new())
        };
        let header = Header {
            ty: PacketType::Initial,
            dst_cid: 0,
            // Never 0 (a zero client ID is malformed, cheaper to drop).
            src_cid: self.rng.next_u64() | 1,
            cookie,
            noise,
            server_key: Bytes::new(),
            path_id: 0,
            pn: 0,
            timestamp_us: u64::from(self.rng.next_u32() >> 8),
            echo_timestamp_us: 0,
        };
        wire::encode_header(out, &header);
        wire::encode_frame(out, &Frame::Ping);
        let min = usize::from(TransportConfig::MIN_DATAGRAM_SIZE);
        if out.len() < min {
            let pad = min - out.len();
            wire::encode_padding(out, pad);
        }
    }
}

/// An Exon key request: what an attacker sends to learn the receiver's
/// public key (anyone may ask).
pub fn key_request() -> Vec<u8> {
    let mut d = vec![0u8; KEYREQ_LEN];
    d[0] = T_KEYREQ;
    d
}

/// The public key in an Exon key reply; none if `datagram` is not one.
pub fn read_key_reply(datagram: &[u8]) -> Option<PublicKey> {
    if datagram.len() != KEYREPLY_LEN || datagram[0] != T_KEYREPLY {
        return None;
    }
    let bytes: &[u8; KEY_LEN] = datagram[1..1 + KEY_LEN].try_into().ok()?;
    PublicKey::from_bytes(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use braid::exon::secure::{COOKIE_REPLY_LEN, T_COOKIE};
    use braid::exon::{
        AcceptAnyKey as ExonAcceptAny, ExonNode, Identity as ExonIdentity, NodeConfig, Security as ExonSecurity,
        SessionConfig,
    };
    use braid_core::Instant;
    use braid_proto::{AcceptAnyKey, Endpoint, EndpointConfig, Security};

    fn from(i: u32) -> SocketAddr {
        SocketAddr::from(([203, 0, 113, (i % 250) as u8 + 1], 1024 + (i % 60_000) as u16))
    }

    /// Every forged Initial is legal in size and form, half are answered
    /// with a RETRY, half dropped for their cookie, and the server keeps
    /// no connection for any.
    #[test]
    fn forged_initials_cost_a_retry_or_a_mac_and_leave_no_state() {
        let identity = braid_proto::crypto::Identity::from_seed(&[3; 32]);
        let mut server = Endpoint::new(
            EndpointConfig { security: Security::authenticated(identity, Arc::new(AcceptAnyKey)), ..Default::default() },
            1,
        );
        let mut forger = Forger::new(Target::Braid, 7, None);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let now = Instant::from_nanos(1_000_000_000);
        let mut cids = std::collections::HashSet::new();
        for i in 0..2_000u32 {
            let kind = forger.forge(&mut buf);
            assert!(matches!(kind, Kind::BraidInitial | Kind::BraidForgedCookie));
            assert!(buf.len() >= 1200 && buf.len() <= forger.max_len(), "{}", buf.len());
            let h = wire::PublicHeader::decode_slice(&buf).expect("a well-formed header");
            assert_eq!(h.ty, PacketType::Initial);
            assert!(cids.insert(h.src_cid), "connection IDs differ");
            server.handle_datagram(now, from(i), Bytes::copy_from_slice(&buf));
            while server.poll_transmit(now, 1, &mut out).is_some() {}
        }
        let s = server.stats();
        assert_eq!(s.retries_sent, 1_000, "{s:?}");
        assert_eq!(s.invalid_cookies, 1_000, "{s:?}");
        assert_eq!((s.malformed_datagrams, s.connections_accepted, s.handshake_failures), (0, 0, 0), "{s:?}");
        assert!(server.connections().is_empty());
    }

    /// An Exon node with `handshake_rate` (0: always under load).
    fn exon_node(handshake_rate: u32) -> ExonNode {
        let security = ExonSecurity::authenticated(ExonIdentity::from_seed(&[4; 32]), Arc::new(ExonAcceptAny));
        let cfg = NodeConfig { session: SessionConfig { handshake_rate, ..SessionConfig::default() }, ..NodeConfig::default() };
        ExonNode::new(cfg, security, [5; 32], 0)
    }

    /// What `node` sends now, as (destination, first byte, length).
    fn drained(node: &mut ExonNode, now: Instant) -> Vec<(SocketAddr, u8, usize)> {
        let (mut out, mut sent) = (Vec::new(), Vec::new());
        while let Some(t) = node.poll_transmit(now, &mut out) {
            sent.push((t.dst, out[0], t.size));
            out.clear();
        }
        sent
    }

    /// The attacker's way to the receiver's key: a key request, and the
    /// key read from the reply.
    fn learned_key(node: &mut ExonNode, now: Instant) -> PublicKey {
        let from = SocketAddr::from(([203, 0, 113, 9], 999));
        node.handle_datagram(now, from, Bytes::from(key_request()));
        let mut out = Vec::new();
        let t = node.poll_transmit(now, &mut out).expect("a key reply");
        assert_eq!(t.dst, from);
        let key = read_key_reply(&out[..t.size]).expect("a key reply");
        assert_eq!(read_key_reply(&key_request()), None);
        key
    }

    /// Forged Exon datagrams, the receiver not under load: the initiations
    /// with a wrong mac1 fail it; those with a valid one pass it and cost
    /// the receiver its Diffie-Hellmans (within its budget), then fail
    /// their Noise message; the sealed ones find no session; the key
    /// requests are answered. No peer, no session, nothing reserved.
    #[test]
    fn forged_exon_datagrams_reach_the_paths_they_target_and_keep_nothing() {
        let mut node = exon_node(SessionConfig::default().handshake_rate);
        let now = Instant::from_nanos(1_000_000_000);
        let key = learned_key(&mut node, now);
        let mut forger = Forger::new(Target::Exon, 9, Some(key));
        assert_eq!(forger.kinds().len(), 5);
        assert_eq!(Forger::new(Target::Exon, 9, None).kinds().len(), 4);
        let mut buf = Vec::new();
        let mut kinds = std::collections::HashMap::new();
        for i in 0..5_000u32 {
            let kind = forger.forge(&mut buf);
            if matches!(kind, Kind::ExonInit | Kind::ExonInitMac1) {
                assert_eq!(buf.len(), INIT_LEN);
            }
            *kinds.entry(kind).or_insert(0) += 1;
            node.handle_datagram(now, from(i), Bytes::copy_from_slice(&buf));
            drained(&mut node, now);
        }
        assert_eq!(kinds.len(), 5);
        let s = node.stats().security;
        // 1,000 valid-mac1 initiations: within the default budget of
        // 2,000 at once, each a Diffie-Hellman that then failed.
        assert_eq!(s.diffie_hellmans, 1_000, "{s:?}");
        assert_eq!(s.auth_failed, 2_000, "{s:?}");
        assert_eq!(s.cookies_sent, 0, "{s:?}");
        assert_eq!(s.unauthenticated, 2_000, "{s:?}");
        assert_eq!((s.sessions, s.peers, s.handshakes, s.responses), (0, 0, 0, 0), "{s:?}");
        assert_eq!(node.machine().reserved_bytes(), 0);
    }

    /// Under load, every forged initiation with a valid mac1 gets a cookie
    /// reply, to its own source, and no Diffie-Hellman; those with a
    /// wrong mac1 get nothing.
    #[test]
    fn under_load_valid_mac1_initiations_get_only_cookie_replies() {
        let mut node = exon_node(0);
        let now = Instant::from_nanos(1_000_000_000);
        let key = learned_key(&mut node, now);
        let mut forger = Forger::new(Target::Exon, 11, Some(key));
        let mut buf = Vec::new();
        let mut valid = 0u64;
        for i in 0..2_000u32 {
            let kind = forger.forge(&mut buf);
            node.handle_datagram(now, from(i), Bytes::copy_from_slice(&buf));
            let sent = drained(&mut node, now);
            match kind {
                Kind::ExonInitMac1 => {
                    valid += 1;
                    assert_eq!(sent, vec![(from(i), T_COOKIE, COOKIE_REPLY_LEN)]);
                }
                Kind::ExonInit | Kind::ExonSlotRequest | Kind::ExonData => assert!(sent.is_empty(), "{kind:?}"),
                _ => {}
            }
        }
        let s = node.stats().security;
        assert_eq!(valid, 400);
        assert_eq!((s.cookies_sent, s.diffie_hellmans, s.responses, s.rate_limited), (valid, 0, 0, 0), "{s:?}");
        assert_eq!((s.sessions, s.peers), (0, 0));
    }
}
