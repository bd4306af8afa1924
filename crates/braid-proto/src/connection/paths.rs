//! A connection's set of paths: opening them (the client by
//! [`Connection::add_path`], the server when a packet names a new path id),
//! marking them backup, abandoning them (by the application, the peer, or
//! after repeated unanswered timeouts), and the path-management frames
//! that keep both sides' sets in step.
//!
//! The model is MPTCP's subflows (RFC 8684 §2) with QUIC multipath's
//! per-path packet-number spaces (draft-ietf-quic-multipath §2): a path is
//! a pair of addresses, used for data once its first packet is
//! acknowledged (validation). PATH_ABANDON is RFC 8684 §3.4.2's
//! REMOVE_ADDR, PATH_STATUS its MP_PRIO (§3.3.8), with a sequence number so
//! the latest wins however they are reordered. These frames are delivered
//! reliably: each is remembered until the packet carrying it is
//! acknowledged, and goes out again (on a validated path) when that packet
//! is lost or its path is abandoned. What an abandoned path still carried
//! is rescheduled.

use std::net::SocketAddr;

use super::{Connection, Side, State};
use crate::endpoint::PathError;
use crate::multipath::MAX_PATHS;
use crate::path::Path;
use crate::stats::PathInfo;

/// A path-management frame to deliver reliably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ControlFrame {
    Abandon(u32),
    Status { path_id: u32, seq: u64, backup: bool },
}

#[derive(Debug)]
pub(super) struct Control {
    pub(super) frame: ControlFrame,
    /// The path id and packet number of the packet carrying it, until that
    /// packet is acknowledged (then the entry goes) or lost (then `None`).
    pub(super) sent_in: Option<(u32, u64)>,
}

impl Connection {
    fn alloc_slot(&mut self) -> Option<u8> {
        if self.free_slots == 0 {
            return None;
        }
        let slot = self.free_slots.trailing_zeros() as u8;
        self.free_slots &= !(1 << slot);
        Some(slot)
    }

    /// Client: open a path from `local` to `remote`. It carries data once
    /// the server acknowledges its first packet.
    pub(crate) fn add_path(
        &mut self,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<u32, PathError> {
        if self.side != Side::Client {
            return Err(PathError::NotClient);
        }
        if matches!(self.state, State::Closing { .. } | State::Draining { .. } | State::Closed) || self.close_requested
        {
            return Err(PathError::Closed);
        }
        if self.paths.iter().any(|p| p.local == local && p.remote == remote) {
            return Err(PathError::Duplicate { local, remote });
        }
        if self.paths.len() >= MAX_PATHS || self.next_path_id == u32::MAX {
            return Err(PathError::TooMany { max: MAX_PATHS });
        }
        let slot = self.alloc_slot().ok_or(PathError::TooMany { max: MAX_PATHS })?;
        let id = self.next_path_id;
        self.next_path_id += 1;
        let mut path = Path::new(id, slot, local, remote, &self.config);
        // The first packet on the path asks for an acknowledgement, which
        // validates the path and gives its first RTT sample.
        path.ping_pending = true;
        path.sched.backup_local = backup;
        self.paths.push(path);
        if backup {
            self.queue_status(id, true);
        }
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Ok(id)
    }

    /// Server: a Data packet names a path we do not know. A new path id
    /// opens a path on the addresses it came from; a retired one is
    /// refused.
    pub(super) fn open_remote_path(&mut self, id: u32, local: Option<SocketAddr>, remote: SocketAddr) -> Option<usize> {
        if self.side != Side::Server || self.state != State::Established || id < self.next_path_id {
            return None;
        }
        if self.paths.len() >= MAX_PATHS {
            return None;
        }
        let slot = self.alloc_slot()?;
        self.next_path_id = id.saturating_add(1);
        let mut path = Path::new(id, slot, local, remote, &self.config);
        // An RTT sample before sending data; the path carries data once
        // the client echoes a challenge sent on it (see `validation`).
        path.ping_pending = true;
        self.paths.push(path);
        self.start_challenge(self.paths.len() - 1, remote);
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Some(self.paths.len() - 1)
    }

    /// Stop using path `id`; the peer is told.
    pub(crate) fn remove_path(&mut self, id: u32) -> Result<(), PathError> {
        let i = self.path_index(id).ok_or(PathError::UnknownPath(id))?;
        if self.paths.len() == 1 {
            return Err(PathError::LastPath(id));
        }
        self.abandon_path(i, true);
        Ok(())
    }

    /// Mark path `id` as a backup (or not), here and at the peer.
    pub(crate) fn set_path_backup(&mut self, id: u32, backup: bool) -> Result<(), PathError> {
        let i = self.path_index(id).ok_or(PathError::UnknownPath(id))?;
        self.paths[i].sched.backup_local = backup;
        self.queue_status(id, backup);
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Ok(())
    }

    fn queue_status(&mut self, path_id: u32, backup: bool) {
        self.status_seq_out += 1;
        let seq = self.status_seq_out;
        self.control.retain(|c| !matches!(c.frame, ControlFrame::Status { path_id: p, .. } if p == path_id));
        self.control.push(Control { frame: ControlFrame::Status { path_id, seq, backup }, sent_in: None });
    }

    pub(crate) fn path_infos(&self) -> Vec<PathInfo> {
        let single = self.single_path_counters();
        self.paths
            .iter()
            .map(|p| (p, if self.mp.is_some() { p.counters } else { single }))
            .map(|(p, counters)| PathInfo {
                id: p.id,
                local: p.local,
                remote: p.remote,
                validated: p.validated,
                backup: p.is_backup(),
                lossy: p.sched.lossy,
                smoothed_rtt: p.rtt.smoothed(),
                min_rtt: p.rtt.min(),
                cwnd: p.cc.window(),
                bytes_in_flight: p.bytes_in_flight,
                packets_sent: counters.packets_sent,
                bytes_sent: counters.bytes_sent,
                stream_bytes_sent: counters.stream_bytes_sent,
                packets_received: counters.packets_received,
                bytes_received: counters.bytes_received,
                packets_lost: counters.packets_lost,
                queued: p.sched.queued.len() as u64,
                user: p.sched.user,
            })
            .collect()
    }

    /// The path for a keep-alive or window probe: the first that works
    /// (validated, not failing), else the primary.
    pub(super) fn probe_path(&self) -> usize {
        self.paths.iter().position(|p| p.validated && !p.sched.lossy).unwrap_or(0)
    }

    /// Drops path `i`: what it still carried goes back for rescheduling
    /// (`RQ`, or the stream's retransmission queue for data sent before
    /// scheduling began).
    pub(super) fn abandon_path(&mut self, i: usize, notify: bool) {
        let mut path = self.paths.remove(i);
        self.presumed_lost.forget_path(path.id);
        let mut lost = std::mem::take(&mut self.lost_scratch);
        path.take_all(&mut lost);
        for (pn, p) in lost.drain(..) {
            match (&mut self.mp, p.segment) {
                (Some(mp), true) => {
                    if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                        mp.segments.reinject(id);
                    }
                }
                _ => {
                    for r in p.ranges.iter() {
                        self.send.on_lost(r);
                    }
                }
            }
            if p.control {
                self.on_control_lost(path.id, pn);
            }
        }
        self.lost_scratch = lost;
        if let Some(mp) = &mut self.mp {
            for &id in path.sched.queued.iter().chain(path.sched.retransmit.iter()) {
                mp.segments.reinject(id);
            }
            mp.segments.clear_slot(path.slot);
            mp.due = true;
        }
        self.free_slots |= 1 << path.slot;
        // Frames that went out on that path go out again on another.
        for c in &mut self.control {
            if c.sent_in.is_some_and(|(p, _)| p == path.id) {
                c.sent_in = None;
            }
        }
        self.control.retain(|c| !matches!(c.frame, ControlFrame::Status { path_id, .. } if path_id == path.id));
        if notify {
            self.control.push(Control { frame: ControlFrame::Abandon(path.id), sent_in: None });
        }
        self.stats.paths_abandoned += 1;
        self.next_poll = 0;
    }

    /// PATH_ABANDON from the peer, in a packet that came on path `via`:
    /// the peer stops using path `gone`.
    pub(super) fn on_path_abandon_frame(&mut self, gone: u32, via: u32) {
        // Never our last path, nor the one this very packet came on.
        if let Some(i) = self.path_index(gone) {
            if self.paths.len() > 1 && gone != via {
                self.abandon_path(i, false);
            }
        }
    }

    /// PATH_STATUS from the peer: the newest (highest `seq`) wins.
    pub(super) fn on_path_status_frame(&mut self, target: u32, seq: u64, backup: bool) {
        if let Some(i) = self.path_index(target) {
            let p = &mut self.paths[i];
            if seq > p.sched.status_seq_in {
                p.sched.status_seq_in = seq;
                p.sched.backup_remote = backup;
                if let Some(mp) = &mut self.mp {
                    mp.due = true;
                }
            }
        }
    }

    pub(super) fn on_control_lost(&mut self, path_id: u32, pn: u64) {
        for c in &mut self.control {
            if c.sent_in == Some((path_id, pn)) {
                c.sent_in = None;
            }
        }
    }

    pub(super) fn on_control_acked(&mut self, path_id: u32, pn: u64) {
        self.control.retain(|c| c.sent_in != Some((path_id, pn)));
    }
}
