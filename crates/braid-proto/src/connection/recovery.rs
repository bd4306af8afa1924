//! Loss recovery at the connection: processing ACK frames, declaring
//! packets lost (RFC 9002 §6.1's packet and time thresholds), tail loss
//! probes, and retransmission timeouts (RFC 6298 with RFC 5681 §3.1's loss
//! window), and handing what was acknowledged or lost back to its owner.
//!
//! Each path keeps its own sent-packet record, RTT estimate, RTO and
//! congestion controller ([`crate::path`]); this file decides what a
//! path's acknowledgement or loss means for the connection: stream bytes
//! acknowledged or to be resent, segments the scheduler must reinject,
//! path-management frames to send again, and a path that stopped answering
//! while another works (MPTCP's potentially-failed subflow, ProgMP thesis
//! §3.3.1), which is abandoned (and, by the client, opened again after a
//! backoff: see [`super::paths`]).
//!
//! A packet declared lost is often only late: a cellular link that stops
//! delivering for seconds keeps what its queue holds and delivers it when
//! it resumes, and a rate that drops raises the RTT past the time
//! threshold. The loss answer (resend, shrink the window) stands, but such
//! a packet is remembered ([`PresumedLost`]) until the packet threshold
//! proves it lost, so that its acknowledgement still counts, as TCP's
//! cumulative ACK and SACK scoreboard count an original transmission that
//! arrives after its retransmission timeout (RFC 6675 §5, RFC 5682's
//! premise): its bytes are not sent again, the timeout's backoff ends (RFC
//! 9002 §6.2.1: any acknowledgement resets it), and a timeout it proves
//! spurious is undone (Eifel, RFC 3522 / RFC 4015).
//!
//! It gives no RTT sample: Karn's rule (RFC 6298 §3) in spirit. What it
//! measures is how long the network held a packet given up on, typically
//! an outage rather than the path's round trip; learnt as RTT, it raised
//! SRTT and RTTVAR so far that the next tail probe and timeout came only
//! after the link's next outage had begun, and a response whose last
//! packets were lost right after the link came back waited a whole
//! further outage (8 s outages in the outage grid of
//! `crates/braid-sim/tests/outage_recovery.rs`).
//!
//! Forgetting such packets (as before issue 21) left a sender that timed
//! out during an outage deaf to the queue draining after it: every byte in
//! that queue was delivered and then sent again, the window stayed
//! collapsed, and the link's return was noticed only when the next
//! backed-off timeout fired, up to `max_rto` later. On the T-Mobile trace a
//! 443 KB response took 40 s where the trace's delivery opportunities
//! carried it in 17.5 s (`crates/braid-sim/tests/outage_recovery.rs`).

use braid_core::Instant;

use super::Connection;
use crate::cc::Handover;
use crate::path::{SentPacket, PACKET_THRESHOLD};
use crate::wire::AckFrame;

/// Consecutive unanswered retransmission timeouts after which a path is
/// abandoned while another path works: its data is rescheduled.
const PATH_FAILURE_RTOS: u32 = 4;

/// Packets declared lost by the time threshold or a retransmission
/// timeout, kept (with the path they were sent on) until acknowledged or
/// proved lost by the packet threshold. Only their bookkeeping is kept:
/// they are out of the path's bytes in flight and their data is queued
/// to be sent again.
#[derive(Debug, Default)]
pub(crate) struct PresumedLost {
    /// (path id, packet number, the packet, declared lost by a timeout).
    packets: Vec<(u32, u64, SentPacket, bool)>,
    /// Per path in a series of timeouts: its controller's operating point
    /// before the first, to return to if the series proves spurious.
    before_timeout: Vec<(u32, Handover)>,
}

impl PresumedLost {
    fn remember(&mut self, path_id: u32, lost: &mut Vec<(u64, SentPacket)>, by_timeout: bool) {
        self.packets.extend(lost.drain(..).map(|(pn, p)| (path_id, pn, p, by_timeout)));
    }

    /// A timeout on `path_id`: keeps `point` unless an earlier timeout of
    /// the same series already did (the point before the first counts).
    fn on_timeout(&mut self, path_id: u32, point: impl FnOnce() -> Handover) {
        if !self.before_timeout.iter().any(|(id, _)| *id == path_id) {
            self.before_timeout.push((path_id, point()));
        }
    }

    /// The operating point `path_id` had before its timeouts, taken (the
    /// series is over).
    fn take_point(&mut self, path_id: u32) -> Option<Handover> {
        let i = self.before_timeout.iter().position(|(id, _)| *id == path_id)?;
        Some(self.before_timeout.swap_remove(i).1)
    }

    /// Moves the packets of `path_id` that `ack` acknowledges into `out`,
    /// and forgets those the packet threshold now proves lost.
    fn take_acked(&mut self, path_id: u32, ack: &AckFrame, out: &mut Vec<(u64, SentPacket)>) -> LateAcks {
        let mut late = LateAcks::default();
        let mut i = 0;
        while i < self.packets.len() {
            let (id, pn, _, _) = &self.packets[i];
            let (id, pn) = (*id, *pn);
            if id != path_id {
                i += 1;
                continue;
            }
            if ack.ranges().any(|(lo, hi)| (lo..=hi).contains(&pn)) {
                let (_, pn, p, by_timeout) = self.packets.swap_remove(i);
                if by_timeout {
                    late.timed_out = Some(late.timed_out.map_or(p.time, |t: Instant| t.max(p.time)));
                    late.timed_out_bytes += p.size;
                }
                out.push((pn, p));
            } else if pn + PACKET_THRESHOLD <= ack.largest {
                self.packets.swap_remove(i);
            } else {
                i += 1;
            }
        }
        late
    }

    /// Forgets the packets of `path_id` (the path is gone).
    pub(super) fn forget_path(&mut self, path_id: u32) {
        self.packets.retain(|(id, _, _, _)| *id != path_id);
        self.before_timeout.retain(|(id, _)| *id != path_id);
    }

    /// Forgets everything (the connection closed).
    pub(super) fn clear(&mut self) {
        self.packets.clear();
        self.before_timeout.clear();
    }
}

/// What one ACK frame acknowledged among the presumed-lost packets.
#[derive(Debug, Default)]
struct LateAcks {
    /// Send time of the newest packet a timeout had declared lost, if any.
    timed_out: Option<Instant>,
    /// Their bytes.
    timed_out_bytes: u64,
}

impl Connection {
    pub(super) fn on_ack_frame(&mut self, now: Instant, ack: &AckFrame, peer_ts_us: u64, echo_us: u64) {
        self.on_peer_max_data(ack.max_data);
        let Some(pi) = self.path_index(ack.path_id) else { return };
        let mut acked = std::mem::take(&mut self.acked_scratch);
        acked.clear();
        let path = &mut self.paths[pi];
        let Some(sample) = path.take_acked(ack, &mut acked) else {
            self.acked_scratch = acked;
            return; // acknowledges a packet never sent: ignore the frame
        };
        let from_flight = acked.len();
        let late = self.presumed_lost.take_acked(path.id, ack, &mut acked);
        if acked.is_empty() {
            self.acked_scratch = acked;
            return;
        }
        if acked.len() > from_flight {
            // Late packets join in packet-number order, highest first.
            acked.sort_unstable_by_key(|p| std::cmp::Reverse(p.0));
            path.largest_acked = Some(path.largest_acked.map_or(ack.largest, |l| l.max(ack.largest)));
        }
        let mut one_way_delay_us = None;
        if let Some(sent_time) = sample {
            let raw = now.saturating_duration_since(sent_time);
            one_way_delay_us =
                path.on_rtt_sample(raw, ack.ack_delay_us, self.config.max_ack_delay, peer_ts_us, echo_us);
        } else {
            // RFC 9002 §6.2.1: an acknowledgement resets the backoff, with
            // or without a sample (its largest packet may be one presumed
            // lost, one acked before, or carry no ack-eliciting frame):
            // the peer hears us.
            path.rtt.reset_backoff();
        }
        if let Some(newest) = late.timed_out {
            // A packet the timeout gave up on was only late: the timeout
            // was spurious (Eifel detection, RFC 3522, by packet number
            // instead of timestamp). The response (RFC 4015 §3, F-RTO's of
            // RFC 5682 §3.1) returns to the window held before the series
            // of timeouts, and the losses among the packets are answered
            // as fast recovery would have, had the ACKs come in time: one
            // multiplicative decrease (the recovery period then ignores
            // the rest of that flight's losses).
            if let Some(mut point) = self.presumed_lost.take_point(path.id) {
                point.bytes_in_flight = path.bytes_in_flight;
                point.rtt = Some(path.rtt.estimate());
                path.cc.resume(now, &point);
                path.cc.on_congestion_event(now, newest, late.timed_out_bytes, false);
            }
        } else {
            // Something sent after the timeouts arrived first: they were
            // not spurious, and their collapse of the window stands.
            self.presumed_lost.take_point(path.id);
        }
        path.report_acked(now, &acked, one_way_delay_us);
        path.sched.lossy = false;
        // An acknowledgement validates a path we opened to the peer's known
        // address; one the peer opened waits for its challenge's echo.
        let newly_validated = path.challenge.is_none() && !path.validated;
        if newly_validated {
            path.validated = true;
        }
        let path_id = path.id;
        if newly_validated && path.reopened {
            self.on_path_validated(now, path_id);
        }

        let mut freed = 0;
        for (pn, p) in acked.iter().rev() {
            for r in p.ranges.iter() {
                freed += self.send.on_ack(r);
            }
            if let (Some(mp), true) = (&mut self.mp, p.segment) {
                if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                    mp.segments.on_acked(id);
                }
            }
            if p.control {
                self.on_control_acked(path_id, *pn);
            }
        }
        acked.clear();
        self.acked_scratch = acked;
        self.on_send_buffer_freed(freed);
        self.detect_lost(now, pi);
        // RFC 6298 (5.3): restart the timer when new data is acknowledged.
        let path = &mut self.paths[pi];
        if path.ack_eliciting_in_flight > 0 {
            path.restart_rto(now);
        } else {
            path.rto_armed_at = None;
        }
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        self.maybe_send_close(now);
    }

    /// RFC 9002 §6.1 on path `pi`. Packets the time threshold declared
    /// lost may be late instead (the RTT grew): they are remembered; those
    /// the packet threshold declared lost are not.
    fn detect_lost(&mut self, now: Instant, pi: usize) {
        let mut lost = std::mem::take(&mut self.lost_scratch);
        self.paths[pi].detect_lost(now, &mut lost);
        if !lost.is_empty() {
            self.declare_lost(now, pi, &lost, false);
            let path = &self.paths[pi];
            let largest = path.largest_acked.unwrap_or(0);
            lost.retain(|(pn, _)| pn + PACKET_THRESHOLD > largest);
            self.presumed_lost.remember(path.id, &mut lost, false);
        }
        lost.clear();
        self.lost_scratch = lost;
    }

    fn declare_lost(&mut self, now: Instant, pi: usize, lost: &[(u64, SentPacket)], by_timeout: bool) {
        self.stats.packets_lost += lost.len() as u64;
        let path = &mut self.paths[pi];
        if path.on_lost(now, lost, by_timeout) {
            self.stats.congestion_events += 1;
        }
        let path_id = path.id;
        for (pn, p) in lost {
            match (&mut self.mp, p.segment) {
                (Some(mp), true) => {
                    // Like an MPTCP subflow, the path resends its own loss;
                    // the segment also joins RQ for the scheduler to
                    // reinject.
                    if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                        if mp.segments.on_lost(id) {
                            self.paths[pi].sched.retransmit.push_back(id);
                        }
                    }
                    mp.due = true;
                }
                _ => {
                    for r in p.ranges.iter() {
                        self.send.on_lost(r);
                    }
                }
            }
            if p.control {
                self.on_control_lost(path_id, *pn);
            }
        }
    }

    /// Path `pi`'s loss timers, at most one of them per call: the time
    /// threshold's loss timer, else (single-path) the tail loss probe, else
    /// the retransmission timeout. Returns whether the path has failed and
    /// should be abandoned.
    pub(super) fn on_loss_timers(&mut self, now: Instant, pi: usize) -> bool {
        let path = &mut self.paths[pi];
        if path.loss_time.is_some_and(|t| now >= t) {
            self.detect_lost(now, pi);
            false
        } else if self.mp.is_none() && path.tail_probe_at().is_some_and(|t| now >= t) {
            // The probe: one ack-eliciting packet, past the congestion
            // window. Its ACK lets the time threshold declare the
            // lost tail (RFC 9002 §6.1.2), answered by fast recovery
            // instead of the RTO's collapse of the window.
            path.tail_probes += 1;
            path.ping_pending = true;
            self.stats.tail_probes += 1;
            false
        } else {
            path.rto_armed_at.is_some_and(|a| now >= a + path.rtt.rto()) && self.on_rto(now, pi)
        }
    }

    /// RFC 6298 (5.4)–(5.6) with RFC 5681 §3.1's loss window: everything in
    /// flight on the path is presumed lost and goes back to be resent; the
    /// window collapses, so only the earliest data leaves first. Returns
    /// whether the path has failed and should be abandoned.
    fn on_rto(&mut self, now: Instant, pi: usize) -> bool {
        self.stats.rto_count += 1;
        let mut lost = std::mem::take(&mut self.lost_scratch);
        let path = &mut self.paths[pi];
        path.rtt.back_off();
        path.take_all(&mut lost);
        self.declare_lost(now, pi, &lost, true);
        // Presumed lost, perhaps only waiting in a stalled queue.
        self.presumed_lost.remember(self.paths[pi].id, &mut lost, true);
        self.lost_scratch = lost;
        let has_legacy = self.send.has_retransmissions();
        let path = &mut self.paths[pi];
        let rtt = path.rtt.has_sample().then(|| path.rtt.estimate());
        self.presumed_lost.on_timeout(path.id, || Handover::of(path.cc.as_ref(), path.bytes_in_flight, rtt));
        path.cc.on_retransmission_timeout(now);
        self.stats.congestion_events += 1;
        path.rto_armed_at = None;
        path.pacing_until = None;
        let Some(mp) = &mut self.mp else {
            if !has_legacy {
                path.ping_pending = true;
            }
            return false;
        };
        // MPTCP (thesis §3.3.1): a subflow's retransmission timeout
        // reinjects everything it holds, and marks it potentially failed
        // (`IS_LOSSY`) until something it sends is acknowledged. A PING
        // goes with the probe so the path is heard from even when other
        // paths delivered its data meanwhile.
        path.sched.lossy = true;
        path.ping_pending = true;
        for &id in &path.sched.queued {
            mp.segments.reinject(id);
        }
        mp.due = true;
        // A re-opened path that has not answered is a probe of a path that
        // failed before: one unanswered timeout tells enough (see
        // `paths::Retry`); a path that worked gets several.
        let give_up_after = if path.reopened && !path.validated { 1 } else { PATH_FAILURE_RTOS };
        let backoff = path.rtt.backoff();
        let healthy_other = self
            .paths
            .iter()
            .enumerate()
            .any(|(j, p)| j != pi && p.validated && !p.sched.lossy && p.rtt.backoff() == 0);
        backoff >= give_up_after && healthy_other
    }
}
