//! The durable part of a [`Machine`]: journaling its changes, rebuilding it
//! from them after a crash, and checkpoints. The
//! [`journal`](crate::journal) module says why this gives exactly-once
//! across crashes; here is the bookkeeping.
//!
//! Every change to a sender or receiver record is described by a
//! [`Record`] at the place it happens (see `machine.rs`, calls to
//! `journal.log`); frames, tokens and events carry the journal position
//! (`seq`) they depend on and stay inside until it is durable. Replaying
//! the records ([`Machine::restore`]) rebuilds exactly the state they
//! describe ([`Machine::durable_state`]); the simulation campaign and a
//! property test compare the two after every commit.

use std::collections::BTreeMap;
use std::ops::Range;

use braid_core::Instant;
use bytes::Bytes;

use super::{
    Event, Frags, Machine, MachineConfig, Partial, Queued, RecvRec, SendRec, SlotSet, Token,
};
use crate::journal::Record;
use crate::{MessageId, NodeId};

/// Journal bookkeeping of a machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct Journal {
    /// Whether changes are journaled at all ([`MachineConfig::journal`]).
    pub(super) on: bool,
    /// Records not yet taken by the driver.
    pub(super) pending: Vec<Record>,
    /// Records produced so far: the position of the latest.
    pub(super) seq: u64,
    /// Position known durable.
    pub(super) durable: u64,
    /// Every life of this node kept the journal (it started with it, or
    /// restored from a non-empty one): a receiver record missing now was
    /// durably forgotten, never lost in a crash.
    pub(super) covers_history: bool,
}

impl Journal {
    /// Journals the record `make` builds (built only when the journal is on).
    #[inline]
    pub(super) fn log(&mut self, make: impl FnOnce() -> Record) {
        if self.on {
            self.pending.push(make());
            self.seq += 1;
        }
    }
}

/// A journal could not be replayed: record `index` does not fit the state
/// the records before it built (a journal of another node, or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal record {index} ({record}) cannot be replayed: {why}")]
pub struct RestoreError {
    /// Position of the record in the journal.
    pub index: usize,
    /// The record, abbreviated.
    pub record: String,
    /// What does not fit.
    pub why: &'static str,
}

/// What a restart would bring back: the durable part of a machine's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableState {
    /// Sender records, by receiver.
    pub senders: BTreeMap<NodeId, DurableSender>,
    /// Receiver records, by sender.
    pub receivers: BTreeMap<NodeId, DurableReceiver>,
    /// Delivered messages the application has not taken yet, in order.
    pub inbox: Vec<(NodeId, Bytes)>,
}

/// The durable part of a sender record (l. 4-10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableSender {
    /// `sck`.
    pub sck: u64,
    /// `rck`, once known.
    pub rck: Option<u64>,
    /// Envelopes held.
    pub envelopes: Range<u64>,
    /// Their incarnation.
    pub envelope_rck: u64,
    /// Messages waiting for an envelope, in order.
    pub queued: Vec<(MessageId, Bytes)>,
    /// Tokens: `(slot, incarnation, message id, message)`.
    pub tokens: Vec<(u64, u64, MessageId, Bytes)>,
}

/// The durable part of a receiver record (l. 11-15).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableReceiver {
    /// `sck`.
    pub sck: u64,
    /// `rck`.
    pub rck: u64,
    /// Garbage-collection frontier.
    pub frontier: u64,
    /// Unconsumed slots.
    pub slots: Vec<u64>,
    /// Consumed slots at or above the frontier.
    pub consumed: Vec<u64>,
    /// Partly received messages.
    pub partial: Vec<DurablePartial>,
}

/// A partly received message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurablePartial {
    /// Its slot.
    pub slot: u64,
    /// Ranges held, sorted and disjoint.
    pub held: Vec<(u64, u64)>,
    /// The message buffer (zeros where nothing is held).
    pub data: Bytes,
}

impl Machine {
    /// Whether this machine journals its changes.
    pub fn journal_enabled(&self) -> bool {
        self.journal.on
    }

    /// The journal position of the latest change.
    pub fn journal_seq(&self) -> u64 {
        self.journal.seq
    }

    /// Are there journal records to store?
    pub fn journal_pending(&self) -> bool {
        !self.journal.pending.is_empty()
    }

    /// Moves the records produced since the last call to `out` and returns
    /// the position they reach. Store them durably (one append, one fsync:
    /// the group commit), then call
    /// [`journal_persisted`](Self::journal_persisted) with it.
    pub fn take_journal(&mut self, out: &mut Vec<Record>) -> Option<u64> {
        if self.journal.pending.is_empty() {
            return None;
        }
        out.append(&mut self.journal.pending);
        Some(self.journal.seq)
    }

    /// The journal is durable up to `seq`: frames, tokens and events that
    /// waited for it may leave.
    pub fn journal_persisted(&mut self, seq: u64) {
        self.journal.durable = self.journal.durable.max(seq.min(self.journal.seq));
    }

    /// Records that rebuild the current state, to replace the whole journal
    /// (compaction); `None` unless everything journaled so far is durable
    /// (call it right after [`journal_persisted`](Self::journal_persisted)
    /// and before anything else changes the machine).
    pub fn checkpoint(&self) -> Option<Vec<Record>> {
        if !self.journal.pending.is_empty() || self.journal.durable < self.journal.seq {
            return None;
        }
        let mut out = vec![Record::Checkpoint {
            next_message: self.next_message,
        }];
        for (&peer, c) in &self.senders {
            out.push(c.header(peer));
            for (s, t) in c.tok.iter() {
                out.push(Record::Token {
                    peer,
                    s,
                    rck: t.rck,
                    id: t.id,
                    data: t.data.clone(),
                });
            }
            for m in &c.msg {
                out.push(Record::Enqueue {
                    peer,
                    id: m.id,
                    data: m.data.clone(),
                });
            }
        }
        for (&peer, c) in &self.receivers {
            out.push(Record::Receiver {
                peer,
                sck: c.sck,
                rck: c.rck,
                frontier: c.frontier,
            });
            for run in c.slt.runs() {
                out.push(Record::Slots {
                    peer,
                    from: run.start,
                    end: run.end,
                });
            }
            for s in c.consumed.iter() {
                out.push(Record::Consumed { peer, s });
            }
            for (&s, p) in &c.partial {
                for &(a, b) in &p.have {
                    out.push(Record::Fragment {
                        peer,
                        s,
                        len: p.data.len() as u64,
                        offset: a,
                        data: Bytes::copy_from_slice(&p.data[a as usize..b as usize]),
                    });
                }
            }
        }
        for (_, ev) in &self.events {
            if let Event::Received { from, data } = ev {
                out.push(Record::Inbox {
                    from: *from,
                    data: data.clone(),
                });
            }
        }
        Some(out)
    }

    /// The durable part of the state: what [`restore`](Self::restore) from
    /// everything journaled so far would rebuild.
    pub fn durable_state(&self) -> DurableState {
        DurableState {
            senders: self
                .senders
                .iter()
                .map(|(&p, c)| {
                    let s = DurableSender {
                        sck: c.sck,
                        rck: c.rck,
                        envelopes: c.env.clone(),
                        envelope_rck: c.env_rck,
                        queued: c.msg.iter().map(|m| (m.id, m.data.clone())).collect(),
                        tokens: c
                            .tok
                            .iter()
                            .map(|(s, t)| (s, t.rck, t.id, t.data.clone()))
                            .collect(),
                    };
                    (p, s)
                })
                .collect(),
            receivers: self
                .receivers
                .iter()
                .map(|(&p, c)| {
                    let r = DurableReceiver {
                        sck: c.sck,
                        rck: c.rck,
                        frontier: c.frontier,
                        slots: c.slt.iter().collect(),
                        consumed: c.consumed.iter().collect(),
                        partial: c
                            .partial
                            .iter()
                            .map(|(&slot, p)| DurablePartial {
                                slot,
                                held: p.have.clone(),
                                data: Bytes::copy_from_slice(&p.data),
                            })
                            .collect(),
                    };
                    (p, r)
                })
                .collect(),
            inbox: self
                .events
                .iter()
                .filter_map(|(_, ev)| match ev {
                    Event::Received { from, data } => Some((*from, data.clone())),
                    _ => None,
                })
                .collect(),
        }
    }

    /// A node restarted after a crash: `records` are what its
    /// [`JournalStore`](crate::journal::JournalStore) holds,
    /// `persisted_clock` what its clock store holds. The machine is in the
    /// state of its last commit; tokens are sent again (the receiver
    /// acknowledges duplicates), slots are requested for queued messages,
    /// and undelivered inbox messages are pending events again.
    ///
    /// ```
    /// use braid_exon::{Machine, MachineConfig, NodeId};
    /// use braid_core::Instant;
    /// use bytes::Bytes;
    ///
    /// let cfg = MachineConfig { journal: true, ..MachineConfig::default() };
    /// let mut m = Machine::new(NodeId(1), cfg.clone(), 0);
    /// let id = m.send(Instant::ZERO, NodeId(2), Bytes::from_static(b"kept")).unwrap();
    /// let mut stored = Vec::new();
    /// let seq = m.take_journal(&mut stored).unwrap(); // append + fsync here
    /// m.journal_persisted(seq);
    /// // Crash. The new life has the message still to send:
    /// let back = Machine::restore(NodeId(1), cfg, 0, stored, Instant::ZERO).unwrap();
    /// assert_eq!(back.durable_state(), m.durable_state());
    /// assert_eq!(back.outstanding(NodeId(2)), 1);
    /// # let _ = id;
    /// ```
    pub fn restore(
        id: NodeId,
        cfg: MachineConfig,
        persisted_clock: u64,
        records: impl IntoIterator<Item = Record>,
        now: Instant,
    ) -> Result<Machine, RestoreError> {
        let mut m = Machine::new(id, cfg, persisted_clock);
        m.journal.on = true;
        m.journal.covers_history = persisted_clock == 0;
        for (index, r) in records.into_iter().enumerate() {
            m.journal.covers_history = true;
            if let Err(why) = m.apply(&r, now) {
                let mut record = format!("{r:?}");
                record.truncate(120);
                return Err(RestoreError { index, record, why });
            }
        }
        let frag = m.cfg.max_fragment.max(1);
        let mut reassembly = 0;
        for c in m.receivers.values_mut() {
            c.last_activity = now;
            reassembly += c.partial_bytes();
        }
        m.reassembly_bytes = reassembly;
        m.reserved_slots = m.receivers.values().map(super::slot_count).sum();
        let peers: Vec<NodeId> = m.senders.keys().copied().collect();
        for c in m.senders.values_mut() {
            c.last_activity = now;
            c.bytes = c.msg.iter().map(|q| q.data.len() as u64).sum::<u64>()
                + c.tok.values().map(|t| t.data.len() as u64).sum::<u64>();
            c.ready.clear();
            for (s, t) in c.tok.iter() {
                let n = t.data.len().div_ceil(frag).max(1);
                for i in 0..n {
                    c.ready.push_back((s, i as u32));
                }
            }
        }
        for peer in peers {
            m.maybe_request(now, peer);
        }
        Ok(m)
    }

    /// Replays one record.
    fn apply(&mut self, r: &Record, now: Instant) -> Result<(), &'static str> {
        const NO_SENDER: &str = "no sender record for this peer";
        const NO_RECEIVER: &str = "no receiver record for this peer";
        let frag = self.cfg.max_fragment.max(1);
        match r {
            Record::Checkpoint { next_message } => {
                self.next_message = self.next_message.max(*next_message);
            }
            &Record::Sender {
                peer,
                sck,
                rck,
                env_start,
                env_end,
                env_rck,
            } => {
                if env_start > env_end {
                    return Err("envelope range runs backwards");
                }
                let window = self.cfg.min_window;
                let c = self
                    .senders
                    .entry(peer)
                    .or_insert_with(|| SendRec::new(sck, window, now));
                c.sck = sck;
                c.rck = rck;
                c.env = env_start..env_end;
                c.env_rck = env_rck;
            }
            Record::Enqueue { peer, id, data } => {
                let c = self.senders.get_mut(peer).ok_or(NO_SENDER)?;
                c.msg.push_back(Queued {
                    id: *id,
                    data: data.clone(),
                });
                self.next_message = self.next_message.max(id.0 + 1);
            }
            &Record::Tokenize { peer, s } => {
                let c = self.senders.get_mut(&peer).ok_or(NO_SENDER)?;
                if c.env.start != s || c.env.is_empty() {
                    return Err("not the lowest envelope");
                }
                let m = c.msg.pop_front().ok_or("no queued message")?;
                c.env.start += 1;
                c.tok
                    .insert(s, restored_token(c.env_rck, m.id, m.data, frag));
            }
            Record::Token {
                peer,
                s,
                rck,
                id,
                data,
            } => {
                let c = self.senders.get_mut(peer).ok_or(NO_SENDER)?;
                c.tok
                    .insert(*s, restored_token(*rck, *id, data.clone(), frag));
                self.next_message = self.next_message.max(id.0 + 1);
            }
            Record::Settle { peer, s } => {
                let c = self.senders.get_mut(peer).ok_or(NO_SENDER)?;
                c.tok.remove(*s).ok_or("no such token")?;
            }
            Record::Requeue { peer, s } => {
                let c = self.senders.get_mut(peer).ok_or(NO_SENDER)?;
                let t = c.tok.remove(*s).ok_or("no such token")?;
                c.msg.push_front(Queued {
                    id: t.id,
                    data: t.data,
                });
            }
            Record::SenderClose { peer } => {
                self.senders.remove(peer).ok_or(NO_SENDER)?;
            }
            &Record::Receiver {
                peer,
                sck,
                rck,
                frontier,
            } => match self.receivers.get_mut(&peer) {
                Some(c) => {
                    c.sck = sck;
                    c.rck = rck;
                    if frontier > c.frontier {
                        c.raise_frontier(frontier);
                    }
                }
                None => {
                    self.receivers.insert(
                        peer,
                        RecvRec {
                            sck,
                            rck,
                            slt: SlotSet::default(),
                            consumed: SlotSet::default(),
                            frontier,
                            partial: BTreeMap::new(),
                            last_activity: now,
                        },
                    );
                }
            },
            &Record::Slots { peer, from, end } => {
                let cap = 4 * self.cfg.max_window;
                let c = self.receivers.get_mut(&peer).ok_or(NO_RECEIVER)?;
                if end.saturating_sub(from) > cap {
                    return Err("more slots than a receiver grants");
                }
                c.slt.insert_range(from..end);
            }
            &Record::Consumed { peer, s } => {
                let c = self.receivers.get_mut(&peer).ok_or(NO_RECEIVER)?;
                c.consumed.insert(s);
            }
            Record::Fragment {
                peer,
                s,
                len,
                offset,
                data,
            } => {
                let c = self.receivers.get_mut(peer).ok_or(NO_RECEIVER)?;
                if offset.saturating_add(data.len() as u64) > *len
                    || *len > crate::wire::MAX_MESSAGE
                {
                    return Err("fragment outside its message");
                }
                let p = c.partial.entry(*s).or_insert_with(|| Partial {
                    data: vec![0; *len as usize],
                    have: Vec::new(),
                });
                if p.data.len() as u64 != *len {
                    return Err("fragment length differs from its message");
                }
                p.insert(*offset, data);
            }
            Record::Consume { peer, s, data } => {
                self.consume(*peer, *s, data.clone())?;
            }
            &Record::ConsumeFragments { peer, s } => {
                let c = self.receivers.get_mut(&peer).ok_or(NO_RECEIVER)?;
                let p = c.partial.remove(&s).ok_or("no fragments held")?;
                if !p.complete() {
                    return Err("message incomplete");
                }
                self.consume(peer, s, Bytes::from(p.data))?;
            }
            Record::Inbox { from, data } => {
                self.events.push_back((
                    0,
                    Event::Received {
                        from: *from,
                        data: data.clone(),
                    },
                ));
            }
            Record::Taken => {
                let at = self
                    .events
                    .iter()
                    .position(|(_, e)| matches!(e, Event::Received { .. }))
                    .ok_or("nothing in the inbox")?;
                self.events.remove(at);
            }
            Record::ReceiverDrop { peer } => {
                self.receivers.remove(peer).ok_or(NO_RECEIVER)?;
            }
        }
        Ok(())
    }

    /// l. 79-80 replayed: slot `s` consumed, the message in the inbox.
    fn consume(&mut self, peer: NodeId, s: u64, data: Bytes) -> Result<(), &'static str> {
        let c = self
            .receivers
            .get_mut(&peer)
            .ok_or("no receiver record for this peer")?;
        if !c.slt.remove(s) {
            return Err("slot not available");
        }
        if s >= c.frontier {
            c.consumed.insert(s);
        }
        self.events
            .push_back((0, Event::Received { from: peer, data }));
        Ok(())
    }
}

/// A token rebuilt from the journal: every fragment to be sent again, and
/// counted as sent already (it may have been, before the crash).
fn restored_token(rck: u64, id: MessageId, data: Bytes, frag: usize) -> Token {
    let n = data.len().div_ceil(frag).max(1);
    Token {
        rck,
        id,
        data,
        frags: Frags::pending(n, true),
        seq: 0,
    }
}
