//! A simulated host for Exon: an [`ExonNode`] with its durable clock (a
//! [`MemClockStore`] with an fsync latency) and, when
//! `cfg.machine.journal` is on, its durable journal (a [`MemJournal`] with
//! the same latency, one group commit at a time), an application that
//! sends and records messages, one or two addresses, and crash/restart.
//!
//! The application is the durable part of the host: it survives crashes,
//! and checks every delivery against everything ever sent, so a duplicate
//! delivery fails the run at once. It follows the contract of a real
//! driver: a send counts as accepted, and a received message as handed
//! over, only once the journal position it produced is durable; a crash
//! before that gives the send back to the application (it was never
//! accepted) and leaves the message in the restarted node's inbox.

#![allow(dead_code)]

pub mod pair;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_exon::clock::{ClockStore, MemClockStore};
use braid_exon::journal::{JournalStore, MemJournal, Record};
use braid_exon::{
    Event, ExonNode, Identity, MessageId, NodeConfig, NodeId, PublicKey, Security, SendError,
};
use braid_sim::{Datagram, Node};
use bytes::Bytes;
use std::sync::Arc;

/// A message's identity in the test: (sender node, sequence number),
/// written in the first 16 bytes of its payload.
pub type Tag = (u64, u64);

pub fn payload(tag: Tag, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&tag.0.to_be_bytes());
    v.extend_from_slice(&tag.1.to_be_bytes());
    // A pattern derived from the tag, so corruption would be caught.
    let mut x = tag.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tag.1;
    while v.len() < len.max(16) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    Bytes::from(v)
}

pub fn read_tag(data: &[u8]) -> Option<Tag> {
    if data.len() < 16 {
        return None;
    }
    let tag = (
        u64::from_be_bytes(data[..8].try_into().ok()?),
        u64::from_be_bytes(data[8..16].try_into().ok()?),
    );
    (payload(tag, data.len()) == data).then_some(tag)
}

/// What a host's application knows; survives crashes.
#[derive(Debug, Default)]
pub struct App {
    /// Messages still to hand to `send`: (tag, length).
    pub to_send: VecDeque<(Tag, usize)>,
    /// Accepted by `send` in the current life and not yet resolved.
    pub outstanding: HashMap<MessageId, Tag>,
    /// Accepted in total.
    pub accepted: u64,
    /// Delivery notifications received, by tag.
    pub notified: Vec<Tag>,
    /// Messages whose sender crashed before their notification, or that
    /// came back InDoubt: delivered at most once, perhaps never.
    pub in_doubt: Vec<Tag>,
    /// How many of `in_doubt` came from InDoubt events (the receiver
    /// restarted), the rest from this host's own crashes.
    pub in_doubt_events: u64,
    /// Received messages, by tag, with counts.
    pub received: HashMap<Tag, u32>,
    /// First duplicate or corrupt delivery seen (the run fails on it).
    pub violation: Option<String>,
    /// When to try sending next.
    pub next_send: Option<Instant>,
    /// Messages per burst and pause between bursts.
    pub burst: usize,
    pub pause: Duration,
    /// Sends waiting for their journal position: (position, id, tag, length).
    pub unconfirmed_sends: Vec<(u64, MessageId, Tag, usize)>,
    /// Received messages waiting for their `Taken` to be durable.
    pub unconfirmed_received: Vec<(u64, NodeId, Bytes)>,
}

/// The identity of simulated host `n`: fixed, so runs are reproducible.
pub fn identity(n: u8) -> Identity {
    Identity::from_seed(&[n; 32])
}

/// Authenticated security trusting exactly `peer` (a known-hosts file of
/// one entry).
pub fn trusting(identity: Identity, peer: PublicKey) -> Security {
    Security::authenticated(
        identity,
        Arc::new(move |_: SocketAddr, k: &PublicKey| {
            if *k == peer {
                Ok(())
            } else {
                Err("not the known peer".to_string())
            }
        }),
    )
}

/// One simulated host.
pub struct Host {
    pub id: NodeId,
    pub peer: NodeId,
    /// How the node authenticates (kept across lives: the identity).
    pub security: Security,
    /// The peer's key (authenticated hosts).
    pub peer_key: Option<PublicKey>,
    pub cfg: NodeConfig,
    pub node: Option<ExonNode>,
    pub store: MemClockStore,
    pub fsync: Duration,
    persisting: Option<(Instant, u64)>,
    /// The durable journal (used when `cfg.machine.journal` is on).
    pub journal: MemJournal,
    /// A group commit in progress: (done at, records, position).
    committing: Option<(Instant, Vec<Record>, u64)>,
    /// Journal position known durable in this life.
    durable_seq: u64,
    /// Compact the journal once it holds this many bytes.
    pub compact_at: u64,
    /// Checkpoints written, and restarts whose rebuilt state was compared
    /// with the state before the crash.
    pub checkpoints: u64,
    pub restores_compared: u64,
    /// Local addresses; `addr` indexes the one in use.
    pub addrs: Vec<SocketAddr>,
    pub addr: usize,
    pub peer_addr: SocketAddr,
    pub app: App,
    pub lives: u32,
    buf: Vec<u8>,
}

impl Host {
    /// An authenticated host with `identity`, talking to the node with
    /// key `peer`.
    pub fn new(
        identity: Identity,
        peer: PublicKey,
        cfg: NodeConfig,
        addrs: Vec<SocketAddr>,
        peer_addr: SocketAddr,
    ) -> Host {
        let security = trusting(identity, peer);
        Host::with_security(
            security,
            Some(peer),
            NodeId::of(&peer),
            cfg,
            addrs,
            peer_addr,
        )
    }

    /// An INSECURE host claiming `id`, talking to `peer`.
    pub fn insecure(
        id: NodeId,
        peer: NodeId,
        cfg: NodeConfig,
        addrs: Vec<SocketAddr>,
        peer_addr: SocketAddr,
    ) -> Host {
        Host::with_security(
            Security::InsecureNoAuth { id },
            None,
            peer,
            cfg,
            addrs,
            peer_addr,
        )
    }

    fn with_security(
        security: Security,
        peer_key: Option<PublicKey>,
        peer: NodeId,
        cfg: NodeConfig,
        addrs: Vec<SocketAddr>,
        peer_addr: SocketAddr,
    ) -> Host {
        let mut h = Host {
            id: security.node_id(),
            peer,
            security,
            peer_key,
            cfg,
            node: None,
            store: MemClockStore::default(),
            fsync: Duration::from_millis(2),
            persisting: None,
            journal: MemJournal::default(),
            committing: None,
            durable_seq: 0,
            compact_at: 256 << 10,
            checkpoints: 0,
            restores_compared: 0,
            addrs,
            addr: 0,
            peer_addr,
            app: App::default(),
            lives: 0,
            buf: Vec::new(),
        };
        h.boot(Instant::ZERO);
        h
    }

    fn durable(&self) -> bool {
        self.cfg.machine.journal
    }

    /// This host's node rebuilt from its durable clock and journal.
    fn rebuild_from_journal(&self, now: Instant) -> ExonNode {
        self.rebuild(self.journal.clone().load().expect("memory journal"), now)
    }

    /// This host's node rebuilt from its durable clock and `records`.
    fn rebuild(&self, records: Vec<Record>, now: Instant) -> ExonNode {
        let clock = self.store.clone().load().expect("memory store");
        ExonNode::restore(
            self.cfg.clone(),
            self.security.clone(),
            self.seed(),
            clock,
            records,
            now,
        )
        .unwrap_or_else(|e| panic!("restore failed: {e}"))
    }

    /// Randomness of this life: distinct for every host and life (a real
    /// node draws it from the OS), fixed for a run's reproducibility.
    fn seed(&self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.id.0.to_be_bytes());
        seed[8..12].copy_from_slice(&self.lives.to_be_bytes());
        seed
    }

    fn add_peer(&self, node: &mut ExonNode, addr: SocketAddr) {
        match &self.peer_key {
            Some(k) => {
                node.add_peer(k, addr);
            }
            None => {
                node.add_insecure_peer(self.peer, addr);
            }
        }
    }

    /// Starts a new life from the durable clock (and journal).
    pub fn boot(&mut self, now: Instant) {
        let mut node = if self.durable() {
            self.rebuild_from_journal(now)
        } else {
            ExonNode::new(
                self.cfg.clone(),
                self.security.clone(),
                self.seed(),
                self.store.load().expect("memory store"),
            )
        };
        self.add_peer(&mut node, self.peer_addr);
        self.node = Some(node);
        self.durable_seq = 0;
        // Sends a crash gave back (never accepted) are tried again.
        if !self.app.to_send.is_empty() {
            self.app.next_send = Some(self.app.next_send.map_or(now, |t| t.max(now)));
        }
        self.lives += 1;
    }

    /// Crash: volatile state is gone and an fsync in progress never
    /// completes. Without a journal every unresolved message is in doubt;
    /// with one, sends not yet confirmed go back to the application (they
    /// were never accepted), the rest lives on in the journal.
    pub fn crash(&mut self) {
        let node = self.node.take();
        self.persisting = None;
        self.committing = None;
        if self.durable() {
            // Nothing uncommitted: the restarted node must be exactly this
            // one's durable state.
            if let Some(n) = node.as_ref().filter(|n| {
                !n.machine().journal_pending() && n.machine().journal_seq() <= self.durable_seq
            }) {
                let back = self.rebuild_from_journal(Instant::ZERO);
                if back.machine().durable_state() != n.machine().durable_state() {
                    self.app.violation.get_or_insert(
                        "the journal does not rebuild the state it describes".into(),
                    );
                }
                self.restores_compared += 1;
            }
            for (_, _, tag, len) in self.app.unconfirmed_sends.drain(..).rev() {
                self.app.to_send.push_front((tag, len));
            }
            self.app.unconfirmed_received.clear();
        } else {
            let lost: Vec<Tag> = self.app.outstanding.drain().map(|(_, t)| t).collect();
            self.app.in_doubt.extend(lost);
        }
    }

    pub fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// The peer moved (a directory update).
    pub fn set_peer_addr(&mut self, addr: SocketAddr) {
        self.peer_addr = addr;
        if let Some(mut n) = self.node.take() {
            self.add_peer(&mut n, addr);
            self.node = Some(n);
        }
    }

    /// Everything sent was resolved and nothing is left to send.
    pub fn settled(&self) -> bool {
        self.app.to_send.is_empty()
            && self.app.outstanding.is_empty()
            && self.app.unconfirmed_sends.is_empty()
            && self.app.unconfirmed_received.is_empty()
    }

    /// The application takes a received message (its `Taken` is durable).
    fn take_received(app: &mut App, from: NodeId, data: &[u8]) {
        let Some(tag) = read_tag(data) else {
            app.violation
                .get_or_insert(format!("corrupt message from {from}"));
            return;
        };
        let n = app.received.entry(tag).or_insert(0);
        *n += 1;
        if *n > 1 {
            app.violation
                .get_or_insert(format!("message {tag:?} delivered {n} times"));
        }
    }

    /// Sends and received messages whose journal position is now durable.
    fn confirm(&mut self) {
        let d = self.durable_seq;
        let app = &mut self.app;
        let mut i = 0;
        while i < app.unconfirmed_sends.len() {
            if app.unconfirmed_sends[i].0 <= d {
                let (_, id, tag, _) = app.unconfirmed_sends.remove(i);
                app.outstanding.insert(id, tag);
                app.accepted += 1;
            } else {
                i += 1;
            }
        }
        let ready: Vec<(NodeId, Bytes)> = app
            .unconfirmed_received
            .iter()
            .filter(|(seq, _, _)| *seq <= d)
            .map(|(_, f, b)| (*f, b.clone()))
            .collect();
        app.unconfirmed_received.retain(|(seq, _, _)| *seq > d);
        for (from, data) in ready {
            Self::take_received(app, from, &data);
        }
    }

    fn pump_app(&mut self, now: Instant) {
        let Some(node) = &mut self.node else { return };
        while let Some(ev) = node.poll_event() {
            match ev {
                Event::Received { from, data } => {
                    let seq = node.journal_seq();
                    if seq <= self.durable_seq {
                        Self::take_received(&mut self.app, from, &data);
                    } else {
                        self.app.unconfirmed_received.push((seq, from, data));
                    }
                }
                Event::Delivered { id, .. } => match self.app.outstanding.remove(&id) {
                    Some(tag) => self.app.notified.push(tag),
                    None => {
                        self.app
                            .violation
                            .get_or_insert(format!("notification for unknown {id:?}"));
                    }
                },
                Event::InDoubt { id, .. } => {
                    if let Some(tag) = self.app.outstanding.remove(&id) {
                        self.app.in_doubt.push(tag);
                        self.app.in_doubt_events += 1;
                    }
                }
            }
        }
        if self.app.next_send.is_some_and(|t| t <= now) {
            self.app.next_send = None;
            let mut sent = 0;
            while sent < self.app.burst.max(1) {
                let Some(&(tag, len)) = self.app.to_send.front() else {
                    break;
                };
                match node.send(now, self.peer, payload(tag, len)) {
                    Ok(id) => {
                        self.app.to_send.pop_front();
                        let seq = node.journal_seq();
                        if seq <= self.durable_seq {
                            self.app.outstanding.insert(id, tag);
                            self.app.accepted += 1;
                        } else {
                            self.app.unconfirmed_sends.push((seq, id, tag, len));
                        }
                        sent += 1;
                    }
                    Err(SendError::WindowFull(_)) => break, // backpressure
                    Err(e) => panic!("send failed: {e}"),
                }
            }
            if !self.app.to_send.is_empty() {
                // Never again at the same instant: virtual time must move.
                self.app.next_send = Some(now + self.app.pause.max(Duration::from_micros(100)));
            }
        }
        if self.persisting.is_none() {
            if let Some(limit) = node.clock_request() {
                self.persisting = Some((now + self.fsync, limit));
            }
        }
        if self.committing.is_none() {
            let mut records = Vec::new();
            if let Some(seq) = node.take_journal(&mut records) {
                self.committing = Some((now + self.fsync, records, seq));
            }
        }
    }

    fn complete_fsync(&mut self, now: Instant) {
        if let Some((due, limit)) = self.persisting {
            if due <= now {
                self.persisting = None;
                self.store.persist(limit).expect("memory store");
                if let Some(n) = &mut self.node {
                    n.clock_persisted(limit);
                }
            }
        }
        if self.committing.as_ref().is_some_and(|c| c.0 <= now) {
            let (_, records, seq) = self.committing.take().expect("checked");
            self.journal.append(&records).expect("memory journal");
            self.durable_seq = seq;
            if let Some(n) = &mut self.node {
                n.journal_persisted(seq);
            }
            self.confirm();
            self.maybe_compact();
        }
    }

    /// Rewrites a grown journal as a checkpoint of the current state, and
    /// checks that the checkpoint rebuilds that state.
    fn maybe_compact(&mut self) {
        let Some(n) = &self.node else { return };
        if self.journal.size() < self.compact_at {
            return;
        }
        let Some(records) = n.checkpoint() else {
            return;
        };
        let back = self.rebuild(records.clone(), Instant::ZERO);
        if back.machine().durable_state() != n.machine().durable_state() {
            self.app
                .violation
                .get_or_insert("a checkpoint does not rebuild the state it was taken from".into());
        }
        self.journal.rewrite(&records).expect("memory journal");
        self.checkpoints += 1;
        // Next time when the log has grown to twice the checkpoint: the
        // cost of compaction stays proportional to what was appended.
        self.compact_at = self.compact_at.max(2 * self.journal.size());
    }
}

impl Node for Host {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, _dst: SocketAddr, payload: Bytes) {
        if let Some(n) = &mut self.node {
            n.handle_datagram(now, src, payload);
        }
        self.pump_app(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        let src = self.addrs[self.addr];
        let node = self.node.as_mut()?;
        let t = node.poll_transmit(now, &mut self.buf)?;
        Some(Datagram {
            src,
            dst: t.dst,
            payload: Bytes::copy_from_slice(&self.buf[..t.size]),
        })
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        let node = self.node.as_mut()?;
        let mut t = node.poll_timeout();
        for x in [
            self.persisting.map(|p| p.0),
            self.committing.as_ref().map(|c| c.0),
            self.app.next_send,
        ]
        .into_iter()
        .flatten()
        {
            t = Some(t.map_or(x, |t| t.min(x)));
        }
        t
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.complete_fsync(now);
        if let Some(n) = &mut self.node {
            n.handle_timeout(now);
        }
        self.pump_app(now);
    }
}
