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
//! §3.3.1), which is abandoned.

use braid_core::Instant;

use super::Connection;
use crate::path::SentPacket;
use crate::wire::AckFrame;

/// Consecutive unanswered retransmission timeouts after which a path is
/// abandoned while another path works: its data is rescheduled.
const PATH_FAILURE_RTOS: u32 = 4;

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
        if acked.is_empty() {
            self.acked_scratch = acked;
            return;
        }
        let mut one_way_delay_us = None;
        if let Some(sent_time) = sample {
            let raw = now.saturating_duration_since(sent_time);
            one_way_delay_us =
                path.on_rtt_sample(raw, ack.ack_delay_us, self.config.max_ack_delay, peer_ts_us, echo_us);
        }
        path.report_acked(now, &acked, one_way_delay_us);
        path.sched.lossy = false;
        // An acknowledgement validates a path we opened to the peer's known
        // address; one the peer opened waits for its challenge's echo.
        if path.challenge.is_none() {
            path.validated = true;
        }
        let path_id = path.id;

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

    /// RFC 9002 §6.1 on path `pi`.
    fn detect_lost(&mut self, now: Instant, pi: usize) {
        let mut lost = std::mem::take(&mut self.lost_scratch);
        self.paths[pi].detect_lost(now, &mut lost);
        if !lost.is_empty() {
            self.declare_lost(now, pi, &lost, false);
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
        lost.clear();
        self.lost_scratch = lost;
        let has_legacy = self.send.has_retransmissions();
        let path = &mut self.paths[pi];
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
        let backoff = path.rtt.backoff();
        let healthy_other = self
            .paths
            .iter()
            .enumerate()
            .any(|(j, p)| j != pi && p.validated && !p.sched.lossy && p.rtt.backoff() == 0);
        backoff >= PATH_FAILURE_RTOS && healthy_other
    }
}
