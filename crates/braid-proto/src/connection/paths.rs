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
//!
//! A path the client abandons because it failed (its own timeouts, or the
//! server's PATH_ABANDON: see [`Connection::on_path_abandon_frame`]) is
//! opened again later on the same addresses (issue 21: cellular links go
//! out for seconds to tens of seconds and come back), under a new path id
//! as QUIC multipath requires (draft-ietf-quic-multipath: a path id is
//! never reused). See [`Retry`] for the schedule and its cost.

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;

use super::{Connection, Side, State};
use crate::endpoint::PathError;
use crate::multipath::MAX_PATHS;
use crate::path::Path;
use crate::stats::PathInfo;

/// The wait before the first re-open when the failed path has no RTT
/// sample (RFC 6298 (2.1)'s initial RTO).
const RETRY_WITHOUT_SAMPLE: Duration = Duration::from_secs(1);

/// The addresses of a path abandoned because it failed, opened again after
/// a backoff (client side; [`crate::TransportConfig::path_retry_max_backoff`]).
///
/// The first wait is the failed path's retransmission timeout without its
/// backoff ([`RETRY_WITHOUT_SAMPLE`] without a sample); every attempt
/// that fails doubles it, up to the cap, as RFC 6298 (5.5) backs off a
/// timer, for as long as the connection lives. An attempt is one probe
/// packet (the new path's first, a PING); unanswered within its RTO
/// (three RTTs of the failed path, at least `min_rto`) the path is given
/// up at once while another works, which tells the peer with one
/// PATH_ABANDON frame on a working path. A path that never comes back
/// thus costs one probe and one small frame per cap (30 s by default).
/// An answered probe validates the path, which then carries data as any
/// new path; if it fails again the wait keeps growing, unless it served
/// for a whole cap first (then the outage is a new one and the wait starts
/// over).
#[derive(Debug, Clone)]
pub(super) struct Retry {
    local: Option<SocketAddr>,
    remote: SocketAddr,
    backup: bool,
    /// The path id the application opened on these addresses: giving it
    /// to `remove_path` stops the retries.
    origin: u32,
    /// The latest path on these addresses: open (an attempt, or re-added)
    /// or the one that failed last.
    path_id: u32,
    open: bool,
    /// When the open path was validated.
    validated_at: Option<Instant>,
    /// The current wait.
    backoff: Duration,
    /// When to open the next attempt (while none is open).
    due: Instant,
    /// The RTT last measured on these addresses: the next attempt's
    /// estimate until it has its own.
    srtt: Option<Duration>,
}

/// The wait after a failure: `base` for the first (or after a path that
/// served for at least `cap`), else double the previous one; never more
/// than `cap`.
pub(super) fn retry_backoff(
    previous: Option<Duration>,
    served: Option<Duration>,
    base: Duration,
    cap: Duration,
) -> Duration {
    match previous {
        Some(prev) if served.is_none_or(|s| s < cap) => prev.saturating_mul(2),
        _ => base,
    }
    .min(cap)
}

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
    /// the server acknowledges its first packet. A failed path waiting to
    /// be re-opened on the same addresses is the application's again.
    pub(crate) fn add_path(
        &mut self,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<u32, PathError> {
        let id = self.open_path(local, remote, backup)?;
        self.retries.retain(|r| !(r.local == local && r.remote == remote));
        Ok(id)
    }

    fn open_path(&mut self, local: Option<SocketAddr>, remote: SocketAddr, backup: bool) -> Result<u32, PathError> {
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
        // A path our application removed stays removed, even when the
        // client opens it again after taking our PATH_ABANDON for a failure.
        if self.refused_paths.iter().any(|&(l, r)| r == remote && (l.is_none() || l == local)) {
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

    /// Stop using path `id`; the peer is told (and a server refuses the
    /// path's addresses from then on). Given the id of a path that
    /// failed and is being re-opened (the id the application opened it
    /// with, or a later attempt's), the re-opening stops.
    pub(crate) fn remove_path(&mut self, id: u32) -> Result<(), PathError> {
        let Some(i) = self.path_index(id) else {
            // The application's id of a path that failed: no more attempts,
            // and the one under way (if any) is given up.
            let k = self
                .retries
                .iter()
                .position(|r| r.origin == id || r.path_id == id)
                .ok_or(PathError::UnknownPath(id))?;
            let r = self.retries.remove(k);
            if let Some(i) = self.path_index(r.path_id).filter(|_| r.open && self.paths.len() > 1) {
                self.abandon_path(i, true);
            }
            return Ok(());
        };
        if self.paths.len() == 1 {
            return Err(PathError::LastPath(id));
        }
        self.forget_retry(id);
        if self.side == Side::Server {
            // The client takes our PATH_ABANDON for a failure and opens the
            // path again: refused (see `open_remote_path`).
            if self.refused_paths.len() >= MAX_PATHS {
                self.refused_paths.remove(0);
            }
            self.refused_paths.push((self.paths[i].local, self.paths[i].remote));
        }
        self.abandon_path(i, true);
        Ok(())
    }

    /// Path `i` failed: it is abandoned (the peer told when `notify`) and,
    /// on the client, its addresses are opened again later (see [`Retry`]).
    pub(super) fn on_path_failed(&mut self, now: Instant, i: usize, notify: bool) {
        if let (Side::Client, Some(cap)) = (self.side, self.config.path_retry_max_backoff) {
            self.remember_failed(now, i, cap);
        }
        self.abandon_path(i, notify);
    }

    fn remember_failed(&mut self, now: Instant, i: usize, cap: Duration) {
        let p = &self.paths[i];
        let srtt = p.rtt.has_sample().then(|| p.rtt.smoothed());
        let base = if p.rtt.has_sample() {
            let mut unbacked = p.rtt.clone();
            unbacked.reset_backoff();
            unbacked.rto()
        } else {
            RETRY_WITHOUT_SAMPLE
        };
        if let Some(r) = self.retries.iter_mut().find(|r| r.open && r.path_id == p.id) {
            let served = r.validated_at.map(|t| now.saturating_duration_since(t));
            r.backoff = retry_backoff(Some(r.backoff), served, base, cap);
            r.open = false;
            r.validated_at = None;
            r.due = now + r.backoff;
            r.srtt = srtt.or(r.srtt);
        } else if self.retries.len() < MAX_PATHS {
            let backoff = retry_backoff(None, None, base, cap);
            self.retries.push(Retry {
                local: p.local,
                remote: p.remote,
                backup: p.sched.backup_local,
                origin: p.id,
                path_id: p.id,
                open: false,
                validated_at: None,
                backoff,
                due: now + backoff,
                srtt,
            });
        }
    }

    /// A path the application removed is not re-opened.
    fn forget_retry(&mut self, path_id: u32) {
        self.retries.retain(|r| !(r.open && r.path_id == path_id));
    }

    /// Re-opening failed paths runs while the connection is up and not
    /// closing.
    fn retrying(&self) -> bool {
        self.state == State::Established && !self.close_requested
    }

    /// When the next failed path is due to be opened again.
    pub(super) fn retry_deadline(&self) -> Option<Instant> {
        if !self.retrying() {
            return None;
        }
        self.retries.iter().filter(|r| !r.open).map(|r| r.due).min()
    }

    /// Opens again the failed paths whose wait is over: each a new path on
    /// the old addresses, a probe until the peer answers.
    pub(super) fn reopen_due_paths(&mut self, now: Instant) {
        if !self.retrying() {
            return;
        }
        let mut k = 0;
        while k < self.retries.len() {
            let r = self.retries[k].clone();
            if r.open || now < r.due {
                k += 1;
                continue;
            }
            match self.open_path(r.local, r.remote, r.backup) {
                Ok(id) => {
                    self.stats.path_retries += 1;
                    if let Some(p) = self.paths.iter_mut().find(|p| p.id == id) {
                        p.reopened = true;
                        if let Some(srtt) = r.srtt {
                            p.seed_rtt(srtt, &self.config);
                        }
                    }
                    let r = &mut self.retries[k];
                    r.path_id = id;
                    r.open = true;
                    k += 1;
                }
                // No slot free now: the next try after another wait.
                Err(PathError::TooMany { .. }) if self.next_path_id < u32::MAX => {
                    self.retries[k].due = now + r.backoff;
                    k += 1;
                }
                // The addresses are in use again, or path ids ran out.
                Err(_) => {
                    self.retries.remove(k);
                }
            }
        }
    }

    /// Path `path_id` was validated: a re-opened one carries data again.
    pub(super) fn on_path_validated(&mut self, now: Instant, path_id: u32) {
        if let Some(r) = self.retries.iter_mut().find(|r| r.open && r.path_id == path_id) {
            r.validated_at = Some(now);
            self.stats.paths_readded += 1;
        }
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
    ///
    /// On the client it counts as a failure, whose addresses are opened
    /// again later: a server abandons a path when its timeouts there go
    /// unanswered (in a download the server, which sends the data, notices
    /// an outage, or a dead uplink, first; the client, sending only
    /// acknowledgements there, never would), or when its application
    /// removes it, and then it refuses to open that path again (see
    /// [`Connection::remove_path`]), so the attempts cost one probe per
    /// backoff and change nothing. Braid's PATH_ABANDON carries no reason
    /// that would tell the two apart (draft-ietf-quic-multipath's frame
    /// has an error code, APPLICATION_ABANDON_PATH or
    /// PATH_UNSTABLE_OR_POOR).
    pub(super) fn on_path_abandon_frame(&mut self, now: Instant, gone: u32, via: u32) {
        // Never our last path, nor the one this very packet came on.
        if let Some(i) = self.path_index(gone) {
            if self.paths.len() > 1 && gone != via {
                if self.side == Side::Client {
                    self.on_path_failed(now, i, false);
                } else {
                    self.abandon_path(i, false);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn waits_double_from_the_failed_paths_rto_to_the_cap() {
        let (base, cap) = (S(1), S(30));
        let mut waits = vec![retry_backoff(None, None, base, cap)];
        for _ in 0..7 {
            waits.push(retry_backoff(waits.last().copied(), None, base, cap));
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30].map(S));
    }

    #[test]
    fn a_path_that_served_for_a_cap_starts_over_and_a_shorter_one_does_not() {
        let (base, cap) = (Duration::from_millis(300), S(30));
        assert_eq!(retry_backoff(Some(S(16)), Some(S(30)), base, cap), base);
        assert_eq!(retry_backoff(Some(S(16)), Some(S(29)), base, cap), S(30));
        assert_eq!(retry_backoff(Some(S(4)), Some(S(5)), base, cap), S(8));
    }

    proptest! {
        /// Whatever the RTO and cap: never above the cap, never shrinking
        /// while failures follow each other, and at the cap after at most
        /// log2(cap / base) + 1 failures (a path that never comes back
        /// is tried about once per cap).
        #[test]
        fn waits_grow_to_the_cap_and_stay(base_ms in 1u64..120_000, cap_ms in 1u64..600_000, n in 1usize..64) {
            let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
            let mut prev = None;
            let mut reached = None;
            for k in 0..n {
                let w = retry_backoff(prev, None, base, cap);
                prop_assert!(w <= cap);
                prop_assert!(w >= base.min(cap));
                if let Some(p) = prev {
                    prop_assert_eq!(w, (p * 2).min(cap));
                }
                if w == cap && reached.is_none() {
                    reached = Some(k);
                }
                prev = Some(w);
            }
            let bound = (cap_ms as f64 / base_ms as f64).log2().max(0.0).ceil() as usize;
            if n > bound {
                prop_assert!(reached.is_some_and(|k| k <= bound), "cap reached at {:?}, bound {}", reached, bound);
            }
        }
    }
}
