//! The session table of an authenticated node: peers by node ID, sessions
//! by local index, handshakes in progress, address discovery, and the
//! queue of handshake packets to send. Sans-IO: time comes in as
//! [`Instant`]s, randomness from the seeded [`Rng`] the node was given.
//!
//! A peer holds at most four sessions: `previous` (still accepted until
//! [`SessionConfig::reject_after`], for packets in flight across a
//! re-key), `current` (the one packets are sealed with) and up to two
//! `unconfirmed` responder sessions (a responder seals nothing with a
//! session until the initiator has used it once: that proves the
//! initiator completed the handshake and it is no replay of an old
//! initiation, WireGuard §5.4.6).
//!
//! Under load (see [`SessionConfig::handshake_rate`]) a handshake packet
//! must carry a valid mac2, or it is answered with a cookie reply alone
//! (WireGuard §5.4.7, [`super::cookie`]); a node that receives a cookie
//! keeps it per peer and puts its mac2 on every handshake packet to that
//! peer while it is fresh. An initiation whose mac2 passed under load
//! meets the per-source limit next ([`super::ratelimit`]), before any
//! Diffie-Hellman.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use braid_core::{Instant, Rng, RngCore, SeedableRng};
use braid_identity::{Identity, PublicKey, KEY_LEN};

use super::cookie::{self, Cookie, CookieSecret, HandshakeBudget, COOKIE_LIFETIME};
use super::endorse::{self, Endorsement};
use super::handshake::{self, Initiation, Secrets};
use super::keys::{Cipher, ReplayWindow, TransportKey, TAG_LEN};
use super::ratelimit::{SourceLimiter, Verdict};
use super::{
    mac1, mac1_key, mac_eq, DiscoveryError, PeerVerifier, SecurityStats, SessionConfig,
    DATA_HEADER_LEN, INIT_LEN, KEYREPLY_LEN, KEYREQ_LEN, MAC_LEN, RESP_LEN, T_COOKIE, T_DATA,
    T_IDREPLY, T_INIT, T_KEYREPLY, T_KEYREQ, T_RESP,
};
use crate::NodeId;

/// Unconfirmed responder sessions kept per peer.
const MAX_UNCONFIRMED: usize = 2;

struct Session {
    peer: NodeId,
    /// The index the peer knows this session by (put in our packets).
    remote: u32,
    send: TransportKey,
    recv: TransportKey,
    counter: u64,
    replay: ReplayWindow,
    created: Instant,
    initiator: bool,
}

struct Pending {
    index: u32,
    init: Initiation,
    /// The initiation packet, resent as is (to the peer's address of the
    /// moment: it may have moved since the first try) but for its mac2,
    /// stamped afresh at each send (zero here).
    packet: Vec<u8>,
    retry_at: Instant,
    tries: u32,
    /// Resent at once on a cookie reply already: a later cookie waits for
    /// the retry timer, so two nodes cannot ping-pong cookies and
    /// initiations at wire speed.
    cookie_resent: bool,
}

struct PeerCrypto {
    key: PublicKey,
    mac_key: [u8; 32],
    addr: Option<SocketAddr>,
    current: Option<u32>,
    previous: Option<u32>,
    unconfirmed: Vec<u32>,
    pending: Option<Pending>,
    /// The last initiation answered: a hash of its Noise message and our
    /// response, resent to an exact repeat of it (with a fresh mac2).
    answered: Option<([u8; 32], Vec<u8>)>,
    /// The answer was resent at once on a cookie reply already (once per
    /// answer, as for `Pending::cookie_resent`).
    answer_cookie_resent: bool,
    /// The last cookie this peer sent us, and when: the mac2 of our
    /// handshake packets to it while younger than [`COOKIE_LIFETIME`].
    cookie: Option<(Cookie, Instant)>,
    /// Last authenticated packet from the peer.
    heard: Instant,
}

/// An authenticated datagram, opened: who sent it and where its frames
/// lie in the buffer.
#[derive(Debug)]
pub(crate) struct Opened {
    pub peer: NodeId,
    pub frames: Range<usize>,
}

/// What the load check says of a handshake packet (mac1 already checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Not under load: go on.
    Open,
    /// Under load, with a valid mac2: the source receives at its address.
    Proved,
    /// Under load without a valid mac2: a cookie reply was sent; stop.
    Cookie,
}

/// What a handshake or discovery packet did.
#[derive(Debug)]
pub(crate) enum Handled {
    /// Nothing for the node to do.
    Nothing,
    /// A peer completed a handshake (or answered one) from `addr`.
    Peer { peer: NodeId, addr: SocketAddr },
}

pub(crate) struct Sessions {
    identity: Identity,
    /// Shown to peers: the node key that vouches for `identity`.
    endorsement: Option<Endorsement>,
    public: PublicKey,
    own_mac_key: [u8; 32],
    /// Encrypts the cookie replies this node sends.
    own_cookie_key: [u8; 32],
    /// What this node's cookies are made from (rotated every 2 minutes).
    cookie_secret: CookieSecret,
    /// Handshake Diffie-Hellmans allowed before the node is under load.
    budget: HandshakeBudget,
    /// Under load, initiations answered per source address.
    limiter: SourceLimiter,
    verifier: Arc<dyn PeerVerifier>,
    cfg: SessionConfig,
    rng: Rng,
    cipher: Cipher,
    sessions: HashMap<u32, Session>,
    /// Initiations in progress by their index.
    pending: HashMap<u32, NodeId>,
    /// Peers by the digest of the initiation last answered for them.
    answered: HashMap<[u8; 32], NodeId>,
    peers: HashMap<NodeId, PeerCrypto>,
    /// Key requests in progress: address, tries, next retry.
    discovering: HashMap<SocketAddr, (u32, Instant)>,
    discovered: VecDeque<(SocketAddr, Result<NodeId, DiscoveryError>)>,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    next_sweep: Instant,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("public", &self.public)
            .field("peers", &self.peers.len())
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    pub(crate) fn new(
        identity: Identity,
        endorsement: Option<Endorsement>,
        verifier: Arc<dyn PeerVerifier>,
        cfg: SessionConfig,
        seed: [u8; 32],
    ) -> Sessions {
        let public = identity.public_key();
        Sessions {
            own_mac_key: mac1_key(&public),
            own_cookie_key: cookie::reply_key(&public),
            cookie_secret: CookieSecret::default(),
            budget: HandshakeBudget::new(cfg.handshake_rate),
            limiter: SourceLimiter::new(&cfg, &seed),
            public,
            identity,
            endorsement,
            verifier,
            cfg,
            rng: Rng::from_seed(seed),
            cipher: Cipher::fastest(),
            sessions: HashMap::new(),
            pending: HashMap::new(),
            answered: HashMap::new(),
            peers: HashMap::new(),
            discovering: HashMap::new(),
            discovered: VecDeque::new(),
            out: VecDeque::new(),
            next_sweep: Instant::ZERO,
        }
    }

    pub(crate) fn public_key(&self) -> PublicKey {
        self.public
    }

    /// Uses `cipher` for handshakes this node starts (tests, benchmarks).
    pub(crate) fn set_cipher(&mut self, cipher: Cipher) {
        self.cipher = cipher;
    }

    pub(crate) fn stats(&self, mut s: SecurityStats) -> SecurityStats {
        s.sessions = self.sessions.len() as u64;
        s.peers = self.peers.len() as u64;
        s
    }

    /// Bytes of per-peer state held, an upper estimate: what a flood test
    /// holds against its bound.
    pub(crate) fn state_bytes(&self) -> usize {
        // A session is two ring keys (≈ 600 bytes each for AES with its
        // key schedule), a replay window (272) and its map entry.
        const SESSION: usize = 1_600;
        // A peer: keys, indices, the cached response, its cookie, its map
        // entry.
        const PEER: usize = 440;
        // A Noise handshake state in progress and its packet.
        const PENDING: usize = 1_200;
        self.sessions.len() * SESSION
            + self.peers.len() * PEER
            + self.pending.len() * PENDING
            + self.out.iter().map(|(_, p)| p.len() + 64).sum::<usize>()
            + self.limiter.state_bytes()
    }

    fn fresh_index(&mut self) -> u32 {
        loop {
            let i = self.rng.next_u32();
            if !self.sessions.contains_key(&i) && !self.pending.contains_key(&i) {
                return i;
            }
        }
    }

    fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.rng.fill_bytes(&mut s);
        s
    }

    /// Queues `packet` for `addr`, unless the queue is full: false then
    /// (and counted).
    fn queue(&mut self, stats: &mut SecurityStats, addr: SocketAddr, packet: Vec<u8>) -> bool {
        if self.out.len() >= self.cfg.max_queued {
            stats.queue_dropped += 1;
            return false;
        }
        self.out.push_back((addr, packet));
        true
    }

    /// The next handshake or discovery packet to send.
    pub(crate) fn poll_out(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    /// A peer whose key the application knows.
    pub(crate) fn add_peer(&mut self, now: Instant, key: &PublicKey, addr: SocketAddr) -> NodeId {
        let peer = NodeId::of(key);
        let p = self.peers.entry(peer).or_insert_with(|| PeerCrypto {
            key: *key,
            mac_key: mac1_key(key),
            addr: None,
            current: None,
            previous: None,
            unconfirmed: Vec::new(),
            pending: None,
            answered: None,
            answer_cookie_resent: false,
            cookie: None,
            heard: now,
        });
        if p.addr != Some(addr) {
            p.addr = Some(addr);
            // A handshake in progress goes to the new address at once.
            if let Some(pend) = p.pending.as_mut() {
                pend.retry_at = Instant::ZERO;
                pend.tries = pend.tries.saturating_sub(1);
            }
        }
        peer
    }

    /// The peer's key, if known.
    pub(crate) fn peer_key(&self, peer: NodeId) -> Option<PublicKey> {
        self.peers.get(&peer).map(|p| p.key)
    }

    /// Can `peer` be sent to now? Starts (or re-starts) a handshake when
    /// there is no usable session, or the current one is due for a re-key.
    pub(crate) fn ready(&mut self, now: Instant, peer: NodeId, stats: &mut SecurityStats) -> bool {
        let Some(p) = self.peers.get(&peer) else {
            return false;
        };
        let usable = p.current.and_then(|i| self.sessions.get(&i)).filter(|s| {
            now.saturating_duration_since(s.created) < self.cfg.reject_after
                && s.counter < self.cfg.reject_after_packets
        });
        let rekey = match usable {
            None => true,
            Some(s) => {
                let age = now.saturating_duration_since(s.created);
                // The initiator re-keys; the responder only if the
                // initiator has not, well after it should have.
                let due = if s.initiator {
                    self.cfg.rekey_after
                } else {
                    self.cfg.rekey_after + 4 * self.cfg.handshake_timeout
                };
                age >= due || s.counter >= self.cfg.rekey_after_packets
            }
        };
        let ok = usable.is_some();
        if rekey && p.pending.is_none() {
            self.initiate(now, peer, stats);
        }
        ok
    }

    /// Starts a handshake with `peer` at its known address.
    fn initiate(&mut self, now: Instant, peer: NodeId, stats: &mut SecurityStats) {
        let index = self.fresh_index();
        let seed = self.seed();
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let Some(addr) = p.addr else { return };
        let Ok(init) = Initiation::start(&self.identity, self.endorsement.as_ref(), &p.key, self.cipher, seed) else {
            return;
        };
        let mut packet = Vec::with_capacity(INIT_LEN);
        packet.push(T_INIT);
        packet.extend_from_slice(&index.to_be_bytes());
        packet.extend_from_slice(&init.message);
        let mac = mac1(&p.mac_key, &packet);
        packet.extend_from_slice(&mac);
        packet.extend_from_slice(&[0; MAC_LEN]);
        if let Some(old) = p.pending.take() {
            self.pending.remove(&old.index);
        }
        let stamped = stamp_mac2(p.cookie.as_ref(), now, packet.clone());
        p.pending = Some(Pending {
            index,
            init,
            packet,
            retry_at: now + self.cfg.handshake_timeout,
            tries: 1,
            cookie_resent: false,
        });
        self.pending.insert(index, peer);
        self.queue(stats, addr, stamped);
    }

    /// Seals the datagram at `buf[start..]`: `DATA_HEADER_LEN` bytes
    /// reserved for the header, then the frames; appends the tag. False
    /// (and `buf` unchanged) without a usable session.
    pub(crate) fn seal(&mut self, peer: NodeId, buf: &mut Vec<u8>, start: usize) -> bool {
        let Some(p) = self.peers.get_mut(&peer) else {
            return false;
        };
        let Some(s) = p.current.and_then(|i| self.sessions.get_mut(&i)) else {
            return false;
        };
        let counter = s.counter;
        s.counter += 1;
        let mut header = [0u8; DATA_HEADER_LEN];
        header[0] = T_DATA;
        header[1..5].copy_from_slice(&s.remote.to_be_bytes());
        header[5..].copy_from_slice(&counter.to_be_bytes());
        buf[start..start + DATA_HEADER_LEN].copy_from_slice(&header);
        let tag = s
            .send
            .seal(counter, &header, &mut buf[start + DATA_HEADER_LEN..]);
        buf.extend_from_slice(&tag);
        true
    }

    /// Opens a sealed datagram in place. Nothing changes unless the tag
    /// verifies: not the replay window, not the peer's address.
    pub(crate) fn open(
        &mut self,
        now: Instant,
        src: SocketAddr,
        buf: &mut [u8],
        stats: &mut SecurityStats,
    ) -> Option<Opened> {
        if buf.len() < DATA_HEADER_LEN + TAG_LEN {
            stats.unauthenticated += 1;
            return None;
        }
        let index = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        let mut c = [0u8; 8];
        c.copy_from_slice(&buf[5..DATA_HEADER_LEN]);
        let counter = u64::from_be_bytes(c);
        let Some(s) = self.sessions.get_mut(&index) else {
            stats.unauthenticated += 1;
            return None;
        };
        if !s.replay.check(counter) {
            stats.replayed += 1;
            return None;
        }
        let (header, body) = buf.split_at_mut(DATA_HEADER_LEN);
        let Some(len) = s.recv.open(counter, header, body) else {
            stats.auth_failed += 1;
            return None;
        };
        s.replay.accept(counter);
        let peer = s.peer;
        if let Some(p) = self.peers.get_mut(&peer) {
            p.heard = now;
            p.addr = Some(src);
            // The initiator used an unconfirmed session: it becomes current.
            if let Some(k) = p.unconfirmed.iter().position(|&i| i == index) {
                p.unconfirmed.remove(k);
                if let Some(old) = p.previous.take() {
                    self.sessions.remove(&old);
                }
                p.previous = p.current.replace(index);
            }
        }
        Some(Opened {
            peer,
            frames: DATA_HEADER_LEN..DATA_HEADER_LEN + len,
        })
    }

    /// A handshake or discovery packet (first byte `T_INIT` ..
    /// `T_COOKIE`) from `src`.
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        src: SocketAddr,
        packet: &[u8],
        stats: &mut SecurityStats,
    ) -> Handled {
        match packet.first() {
            Some(&T_INIT) => self.on_init(now, src, packet, stats),
            Some(&T_RESP) => self.on_resp(now, src, packet, stats),
            Some(&T_COOKIE) => {
                self.on_cookie(now, src, packet, stats);
                Handled::Nothing
            }
            Some(&T_KEYREQ) => {
                if packet.len() == KEYREQ_LEN {
                    let mut reply = Vec::with_capacity(KEYREPLY_LEN);
                    reply.push(T_KEYREPLY);
                    reply.extend_from_slice(&self.public.to_bytes());
                    reply.extend_from_slice(&endorse::write_field(self.endorsement.as_ref()));
                    self.queue(stats, src, reply);
                } else {
                    stats.unauthenticated += 1;
                }
                Handled::Nothing
            }
            Some(&T_KEYREPLY) => {
                self.on_key_reply(now, src, packet, stats);
                Handled::Nothing
            }
            Some(&T_IDREPLY) => {
                if self.discovering.remove(&src).is_some() {
                    self.discovered
                        .push_back((src, Err(DiscoveryError::ModeMismatch(src))));
                } else {
                    stats.unauthenticated += 1;
                }
                Handled::Nothing
            }
            _ => {
                stats.unauthenticated += 1;
                Handled::Nothing
            }
        }
    }

    fn on_init(
        &mut self,
        now: Instant,
        src: SocketAddr,
        packet: &[u8],
        stats: &mut SecurityStats,
    ) -> Handled {
        if packet.len() != INIT_LEN || !self.mac1_ok(packet) {
            stats.auth_failed += 1;
            return Handled::Nothing;
        }
        let sender = u32::from_be_bytes([packet[1], packet[2], packet[3], packet[4]]);
        // Under load, first prove the source address (WireGuard §5.4.7):
        // before the answer cache too, so that no spoofed repeat is
        // reflected either. Then the proved source's own limit: before
        // the cache as well, as WireGuard limits every handshake packet
        // under load (a legitimate retransmission comes every
        // `handshake_timeout` at most, far within the burst).
        match self.gate(now, src, packet, sender, stats) {
            Gate::Cookie => return Handled::Nothing,
            Gate::Proved => {
                if self.limiter.check(now, src.ip()) != Verdict::Allowed {
                    stats.rate_limited += 1;
                    return Handled::Nothing;
                }
            }
            Gate::Open => {}
        }
        let msg1 = &packet[5..INIT_LEN - 2 * MAC_LEN];
        let digest = *blake3::hash(msg1).as_bytes();
        // An exact repeat of an initiation answered last (a retransmission,
        // or a replay): the same answer, and no new session. Harmless to
        // a replaying attacker: only the initiator's ephemeral secret
        // opens it.
        if let Some(resp) = self
            .answered
            .get(&digest)
            .and_then(|peer| self.peers.get(peer))
            .and_then(|p| Some(stamp_mac2(p.cookie.as_ref(), now, p.answered.as_ref()?.1.clone())))
        {
            self.queue(stats, src, resp);
            return Handled::Nothing;
        }
        // The Diffie-Hellman work is done from here on, whatever comes of
        // it: it counts against the budget.
        self.budget.spend(now);
        stats.diffie_hellmans += 1;
        let seed = self.seed();
        let full = self.peers.len() >= self.cfg.max_peers;
        let verifier = self.verifier.clone();
        let peers = &self.peers;
        let result = handshake::respond(&self.identity, msg1, seed, |key, endorsement| {
            verifier.verify_initiator(src, &endorse::judged_key(key, endorsement))?;
            if full && !peers.contains_key(&NodeId::of(key)) {
                return Err("peer table full".to_string());
            }
            Ok(())
        });
        let response = match result {
            Err(_) => {
                stats.auth_failed += 1;
                return Handled::Nothing;
            }
            Ok(Err(_refused)) => {
                stats.refused += 1;
                return Handled::Nothing;
            }
            Ok(Ok(r)) => r,
        };
        let peer = NodeId::of(&response.initiator);
        if full && !self.peers.contains_key(&peer) && !self.evict_silent_peer(now) {
            stats.refused += 1;
            return Handled::Nothing;
        }
        let index = self.fresh_index();
        let mut resp = Vec::with_capacity(RESP_LEN);
        resp.push(T_RESP);
        resp.extend_from_slice(&index.to_be_bytes());
        resp.extend_from_slice(&sender.to_be_bytes());
        resp.extend_from_slice(&response.message);
        let key = response.initiator;
        // An initiation moves nothing: an old one replayed from elsewhere
        // would verify too (IK has no freshness before the peer's first
        // sealed datagram). The answer goes to `src`; the peer's address
        // follows its authenticated, replay-protected datagrams. Only a
        // peer seen for the first time is given one.
        let new_peer = !self.peers.contains_key(&peer);
        if new_peer {
            self.add_peer(now, &key, src);
        }
        let Some(p) = self.peers.get_mut(&peer) else {
            return Handled::Nothing;
        };
        let mac = mac1(&p.mac_key, &resp);
        resp.extend_from_slice(&mac);
        resp.extend_from_slice(&[0; MAC_LEN]);
        if let Some((old, _)) = p.answered.replace((digest, resp.clone())) {
            self.answered.remove(&old);
        }
        p.answer_cookie_resent = false;
        let resp = stamp_mac2(p.cookie.as_ref(), now, resp);
        self.answered.insert(digest, peer);
        if p.unconfirmed.len() >= MAX_UNCONFIRMED {
            let old = p.unconfirmed.remove(0);
            self.sessions.remove(&old);
        }
        p.unconfirmed.push(index);
        self.sessions
            .insert(index, session(peer, sender, &response.secrets, now, false));
        stats.responses += 1;
        stats.handshakes += 1;
        self.queue(stats, src, resp);
        if new_peer {
            Handled::Peer { peer, addr: src }
        } else {
            Handled::Nothing
        }
    }

    /// Is the mac1 of this initiation or response (its last two macs are
    /// mac1, mac2) ours?
    fn mac1_ok(&self, packet: &[u8]) -> bool {
        let n = packet.len();
        n >= 2 * MAC_LEN
            && mac_eq(
                &mac1(&self.own_mac_key, &packet[..n - 2 * MAC_LEN]),
                &packet[n - 2 * MAC_LEN..n - MAC_LEN],
            )
    }

    /// Under load: more Diffie-Hellmans than the budget allows in about
    /// the last second, or the handshake queue more than half full (its
    /// answers would soon be dropped).
    fn under_load(&mut self, now: Instant) -> bool {
        self.out.len() * 2 > self.cfg.max_queued || self.budget.exhausted(now)
    }

    /// WireGuard §5.4.7: under load, a handshake packet (its mac1 checked)
    /// without a valid mac2 for its source address is answered with a
    /// cookie reply, addressed to `sender` (the index it was sent under),
    /// and goes no further: [`Gate::Cookie`] then. No Diffie-Hellman, no
    /// state: the cookie is recomputed from the rotating secret when the
    /// retry comes.
    fn gate(
        &mut self,
        now: Instant,
        src: SocketAddr,
        packet: &[u8],
        sender: u32,
        stats: &mut SecurityStats,
    ) -> Gate {
        if !self.under_load(now) {
            return Gate::Open;
        }
        let n = packet.len();
        if self.cookie_secret.check(now, src, &packet[..n - MAC_LEN], &packet[n - MAC_LEN..]) {
            return Gate::Proved;
        }
        let cookie = self.cookie_secret.cookie(now, &mut self.rng, src);
        let mut nonce = [0u8; cookie::NONCE_LEN];
        self.rng.fill_bytes(&mut nonce);
        let mac1 = &packet[n - 2 * MAC_LEN..n - MAC_LEN];
        let reply = cookie::seal_reply(&self.own_cookie_key, sender, nonce, &cookie, mac1);
        if self.queue(stats, src, reply) {
            stats.cookies_sent += 1;
        }
        Gate::Cookie
    }

    /// A cookie reply (WireGuard §5.4.7), to an initiation in progress or
    /// to the answer to a peer's initiation, as its receiver index says. It
    /// opens only with the mac1 of that very packet. The cookie is kept
    /// for the peer, and the packet resent at once with its mac2 (once per
    /// packet; later cookies wait for the retry timer).
    fn on_cookie(&mut self, now: Instant, src: SocketAddr, packet: &[u8], stats: &mut SecurityStats) {
        let Some(receiver) = cookie::reply_receiver(packet) else {
            stats.auth_failed += 1;
            return;
        };
        let peer = match self.pending.get(&receiver) {
            Some(&peer) => Some(peer),
            // Else the index of a responder session: the answer's sender.
            None => self.sessions.get(&receiver).filter(|s| !s.initiator).map(|s| s.peer),
        };
        let Some(p) = peer.and_then(|peer| self.peers.get_mut(&peer)) else {
            stats.unauthenticated += 1;
            return;
        };
        let (sent, resent, dst) = if let Some(pend) = p.pending.as_mut().filter(|x| x.index == receiver) {
            (&pend.packet, &mut pend.cookie_resent, p.addr)
        } else if let Some((_, resp)) = p.answered.as_ref().filter(|(_, r)| r[1..5] == receiver.to_be_bytes()) {
            // The answer went where the initiation came from, which the
            // reply to it comes from too.
            (resp, &mut p.answer_cookie_resent, Some(src))
        } else {
            stats.unauthenticated += 1;
            return;
        };
        let n = sent.len();
        let key = cookie::reply_key(&p.key);
        let Some(cookie) = cookie::open_reply(&key, packet, &sent[n - 2 * MAC_LEN..n - MAC_LEN]) else {
            stats.auth_failed += 1;
            return;
        };
        stats.cookies_received += 1;
        p.cookie = Some((cookie, now));
        let again = (!*resent).then(|| stamp_mac2(p.cookie.as_ref(), now, sent.clone()));
        *resent = true;
        if let Some(pend) = p.pending.as_mut().filter(|x| x.index == receiver && again.is_some()) {
            pend.retry_at = now + self.cfg.handshake_timeout;
        }
        if let (Some(packet), Some(dst)) = (again, dst) {
            self.queue(stats, dst, packet);
        }
    }

    fn on_resp(
        &mut self,
        now: Instant,
        src: SocketAddr,
        packet: &[u8],
        stats: &mut SecurityStats,
    ) -> Handled {
        if packet.len() != RESP_LEN || !self.mac1_ok(packet) {
            stats.auth_failed += 1;
            return Handled::Nothing;
        }
        let sender = u32::from_be_bytes([packet[1], packet[2], packet[3], packet[4]]);
        let receiver = u32::from_be_bytes([packet[5], packet[6], packet[7], packet[8]]);
        let Some(&peer) = self.pending.get(&receiver) else {
            stats.unauthenticated += 1;
            return Handled::Nothing;
        };
        // Only a response to an initiation in progress reaches here (a
        // spoofer must guess a 32-bit index), so no spoofed response is
        // answered with a cookie; one that did guess still costs no
        // Diffie-Hellman under load without a mac2. No per-source limit
        // is needed after a valid mac2: the pending initiation is taken
        // below, so each initiation this node sent costs at most one
        // Diffie-Hellman here, however many responses come.
        if matches!(self.gate(now, src, packet, sender, stats), Gate::Cookie) {
            return Handled::Nothing;
        }
        let Some(p) = self.peers.get_mut(&peer) else {
            return Handled::Nothing;
        };
        let Some(mut pending) = p.pending.take() else {
            return Handled::Nothing;
        };
        self.pending.remove(&receiver);
        let secrets = match pending.init.finish(&packet[9..RESP_LEN - 2 * MAC_LEN]) {
            Ok(s) => s,
            Err(_) => {
                // The state is spent: the next retry starts afresh.
                // A fresh initiation goes at the next nudge.
                stats.auth_failed += 1;
                return Handled::Nothing;
            }
        };
        if let Some(old) = p.previous.take() {
            self.sessions.remove(&old);
        }
        p.previous = p.current.take();
        p.current = Some(receiver);
        p.addr = Some(src);
        p.heard = now;
        self.sessions
            .insert(receiver, session(peer, sender, &secrets, now, true));
        stats.handshakes += 1;
        // Confirm at once with an empty sealed datagram: the responder
        // uses the session only after the initiator has.
        let mut buf = vec![0u8; DATA_HEADER_LEN];
        if self.seal(peer, &mut buf, 0) {
            self.queue(stats, src, buf);
        }
        Handled::Peer { peer, addr: src }
    }

    /// Forgets a peer silent for `reject_after` (its sessions are dead
    /// anyway) to make room; false if there is none.
    fn evict_silent_peer(&mut self, now: Instant) -> bool {
        let victim = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.heard) >= self.cfg.reject_after)
            .min_by_key(|(id, p)| (p.heard, **id))
            .map(|(id, _)| *id);
        match victim {
            Some(v) => {
                self.forget_peer(v);
                true
            }
            None => false,
        }
    }

    fn forget_peer(&mut self, peer: NodeId) {
        if let Some(p) = self.peers.remove(&peer) {
            if let Some((digest, _)) = &p.answered {
                self.answered.remove(digest);
            }
            for i in p.current.into_iter().chain(p.previous).chain(p.unconfirmed) {
                self.sessions.remove(&i);
            }
            if let Some(pend) = p.pending {
                self.pending.remove(&pend.index);
            }
        }
    }

    /// Asks the node at `addr` for its key.
    pub(crate) fn discover(&mut self, now: Instant, addr: SocketAddr, stats: &mut SecurityStats) {
        self.discovering
            .insert(addr, (1, now + self.cfg.handshake_timeout));
        self.queue(stats, addr, key_request());
    }

    fn on_key_reply(
        &mut self,
        now: Instant,
        src: SocketAddr,
        packet: &[u8],
        stats: &mut SecurityStats,
    ) {
        if self.discovering.remove(&src).is_none() {
            stats.unauthenticated += 1;
            return; // unasked: ignored
        }
        let reply = (packet.len() == KEYREPLY_LEN)
            .then(|| <&[u8; KEY_LEN]>::try_from(&packet[1..1 + KEY_LEN]).ok())
            .flatten()
            .and_then(|k| PublicKey::from_bytes(k).ok())
            .and_then(|key| Some((key, endorse::read_field(&packet[1 + KEY_LEN..], &key).ok()?)));
        let Some((key, endorsement)) = reply else {
            stats.auth_failed += 1;
            self.discovering.insert(src, (1, now)); // ask again
            return;
        };
        // The key is not proved yet: the handshake that follows proves it
        // (a forged key makes the handshake fail, never a session with an
        // impostor), and the endorsement's signature binds the node key to
        // it. The verifier judges the node key first.
        let result = match self.verifier.verify(src, &endorse::judged_key(&key, endorsement.as_ref())) {
            Ok(()) => Ok(self.add_peer(now, &key, src)),
            Err(reason) => {
                stats.refused += 1;
                Err(DiscoveryError::Refused { addr: src, reason })
            }
        };
        self.discovered.push_back((src, result));
    }

    pub(crate) fn poll_discovered(
        &mut self,
    ) -> Option<(SocketAddr, Result<NodeId, DiscoveryError>)> {
        self.discovered.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let pend = self
            .peers
            .values()
            .filter_map(|p| p.pending.as_ref().map(|x| x.retry_at));
        let disc = self.discovering.values().map(|(_, t)| *t);
        pend.chain(disc).min()
    }

    /// The node waits for an answer from `peer` (a retransmission timer
    /// fired). The peer may have restarted and lost its sessions (then it
    /// can authenticate nothing we send, and says nothing we could
    /// believe), so a new handshake starts, unless one is in progress,
    /// when nothing authenticated came from it since the oldest datagram
    /// the timer gave up on (`unanswered`, a retransmission timeout), or
    /// for [`SessionConfig::silence`]. A needless handshake costs one
    /// round trip and blocks nothing: the current session stays in use
    /// until the new one is ready.
    pub(crate) fn nudge(
        &mut self,
        now: Instant,
        peer: NodeId,
        unanswered: Option<Instant>,
        stats: &mut SecurityStats,
    ) {
        let silent = self.peers.get(&peer).is_some_and(|p| {
            p.pending.is_none()
                && (unanswered.is_some_and(|t| p.heard < t)
                    || now.saturating_duration_since(p.heard) >= self.cfg.silence)
        });
        if silent {
            self.initiate(now, peer, stats);
        }
    }

    /// Retries unanswered initiations and key requests, restarts
    /// handshakes that ran out of tries, and drops expired sessions.
    pub(crate) fn handle_timeout(&mut self, now: Instant, stats: &mut SecurityStats) {
        let mut restart = Vec::new();
        let mut resend = Vec::new();
        for (&peer, p) in self.peers.iter_mut() {
            if let Some(pend) = p.pending.as_mut() {
                if pend.retry_at <= now {
                    if pend.tries >= self.cfg.handshake_tries {
                        restart.push(peer);
                    } else {
                        pend.tries += 1;
                        let backoff = self.cfg.handshake_timeout * (1u32 << pend.tries.min(6));
                        pend.retry_at = now + backoff;
                        if let Some(addr) = p.addr {
                            resend.push((addr, stamp_mac2(p.cookie.as_ref(), now, pend.packet.clone())));
                        }
                    }
                }
            }
        }
        for (addr, packet) in resend {
            self.queue(stats, addr, packet);
        }
        for peer in restart {
            self.initiate(now, peer, stats);
        }
        let mut retry = Vec::new();
        let mut failed = Vec::new();
        for (&addr, (tries, at)) in self.discovering.iter_mut() {
            if *at <= now {
                if *tries >= self.cfg.discovery_tries {
                    failed.push(addr);
                } else {
                    *tries += 1;
                    *at = now + self.cfg.handshake_timeout * (1u32 << (*tries).min(6));
                    retry.push(addr);
                }
            }
        }
        for addr in failed {
            self.discovering.remove(&addr);
            self.discovered
                .push_back((addr, Err(DiscoveryError::Timeout(addr))));
        }
        for addr in retry {
            self.queue(stats, addr, key_request());
        }
        if self.next_sweep <= now {
            self.next_sweep = now + Duration::from_secs(1);
            let reject = self.cfg.reject_after;
            let dead: Vec<u32> = self
                .sessions
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.created) >= reject)
                .map(|(&i, _)| i)
                .collect();
            for i in dead {
                if let Some(s) = self.sessions.remove(&i) {
                    if let Some(p) = self.peers.get_mut(&s.peer) {
                        p.unconfirmed.retain(|&x| x != i);
                        if p.previous == Some(i) {
                            p.previous = None;
                        }
                        if p.current == Some(i) {
                            p.current = None;
                        }
                    }
                }
            }
        }
    }
}

/// `packet` (an initiation or response) with its mac2 (its last bytes):
/// under `cookie` if that is fresh, else zero (WireGuard §5.4.4).
fn stamp_mac2(cookie: Option<&(Cookie, Instant)>, now: Instant, mut packet: Vec<u8>) -> Vec<u8> {
    let n = packet.len();
    let mac = match cookie {
        Some((c, at)) if now.saturating_duration_since(*at) < COOKIE_LIFETIME => {
            cookie::mac2(c, &packet[..n - MAC_LEN])
        }
        _ => [0; MAC_LEN],
    };
    packet[n - MAC_LEN..].copy_from_slice(&mac);
    packet
}

fn session(peer: NodeId, remote: u32, secrets: &Secrets, now: Instant, initiator: bool) -> Session {
    Session {
        peer,
        remote,
        send: TransportKey::new(secrets.cipher, &secrets.send),
        recv: TransportKey::new(secrets.cipher, &secrets.recv),
        counter: 0,
        replay: ReplayWindow::default(),
        created: now,
        initiator,
    }
}

/// A key request, padded to [`KEYREQ_LEN`].
pub(crate) fn key_request() -> Vec<u8> {
    let mut p = vec![0u8; KEYREQ_LEN];
    p[0] = T_KEYREQ;
    p
}
