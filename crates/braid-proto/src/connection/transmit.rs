//! Building packets: which path sends next, what goes into the datagram
//! (header, ACK, path-management frames, PING, stream data, padding), and
//! recording what was sent (packet number, bytes in flight, the congestion
//! controller, the pacer, the RTO).
//!
//! Single-path sending writes the stream straight into packets; scheduled
//! sending lets the paths take turns sending what the scheduler queued for
//! them (see [`super::scheduling`]). Either way a path sends data only when
//! its congestion window has room for a full datagram and its pacer allows
//! (a token bucket at the controller's pacing rate with a burst of about
//! 1 ms of data plus 16 datagrams), and an ACK goes along with every packet
//! when one is owed. A data packet a few bytes short of full is padded to
//! full, so GSO batches of equal-sized datagrams are not cut short.
//! Sending is what arms the RTO (RFC 6298 (5.1)). The Initial and the
//! CLOSE packet are built by [`super::handshake`] and [`super::close`]
//! with the helpers here.

use braid_core::Instant;
use bytes::Bytes;

use super::paths::{Control, ControlFrame};
use super::{Connection, Outgoing, State};
use crate::multipath::MAX_PATHS;
use crate::path::{SentPacket, StreamRanges};
use crate::wire::{self, Frame, Header, PacketType};

/// A data packet at most this many bytes short of full is padded to full.
const MAX_PAD_TO_FULL: usize = 32;

impl Connection {
    /// Writes one datagram into `buf` (appending), if anything is due.
    /// `max_size` bounds its size (GSO batches need equal segments; only
    /// the last may be shorter). With `only_path`, only that path may send
    /// (the rest of a GSO batch).
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_size: usize,
        only_path: Option<usize>,
    ) -> Option<Outgoing> {
        // The rest of a GSO batch must be datagrams of the first one's
        // size (the receiver splits the batch there). This connection's
        // full datagram is `max_datagram_size`; after a shorter first
        // datagram (an ACK, a probe) the batch ends. Letting it go on
        // would shrink the window check and the room below to that size:
        // packets longer than the segment, and empty ones.
        if max_size < usize::from(self.config.max_datagram_size) {
            return None;
        }
        match self.state {
            State::Closed | State::Draining { .. } => return None,
            State::Handshaking => return self.poll_initial(now, buf),
            State::Closing { .. } => return self.poll_close(now, buf, only_path),
            State::Established => {}
        }
        if only_path.is_none() {
            if let Some(out) = self.poll_validation(now, buf) {
                return Some(out);
            }
        }
        if self.mp.is_some() {
            return self.poll_scheduled(now, buf, max_size, only_path);
        }
        self.poll_single(now, buf, max_size)
    }

    /// Single-path sending: the stream goes straight into packets.
    fn poll_single(&mut self, now: Instant, buf: &mut Vec<u8>, max_size: usize) -> Option<Outgoing> {
        let start = buf.len();
        // Room for frames: the datagram less the tag sealing adds.
        let mtu = max_size.min(usize::from(self.config.max_datagram_size)) - self.seal_overhead();
        let path = &mut self.paths[0];
        let ack_due = path.ack_due(now) || (path.largest_received.is_some() && self.recv.window_update_due());
        let window_ok = path.bytes_in_flight + mtu as u64 <= path.cc.window();
        let data_ready = self.send.has_data(self.peer_max_data);
        let mut can_send_data = data_ready && window_ok;
        if can_send_data && self.config.pacing && path.pacing_until.is_none() {
            let rate = path.cc.pacing_rate(path.rtt.smoothed());
            path.pacer.set_burst((rate * 0.001) as u64 + 16 * mtu as u64);
            if let Some(t) = path.pacer.delay(now, rate, mtu as u64) {
                path.pacing_until = Some(t);
            }
        }
        if path.pacing_until.is_some() {
            can_send_data = false;
        }
        if !(ack_due || can_send_data || path.ping_pending) {
            self.update_flow_probe(now);
            return None;
        }

        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        self.write_header(now, 0, buf, packet_type);
        let header_end = buf.len();
        // Always piggyback an ACK when we owe one.
        if self.paths[0].ack_eliciting_unacked > 0 || ack_due {
            self.write_ack(now, 0, buf, mtu - (buf.len() - start));
        }
        let mut ack_eliciting = false;
        if self.paths[0].ping_pending {
            wire::encode_frame(buf, &Frame::Ping);
            self.paths[0].ping_pending = false;
            ack_eliciting = true;
        }
        let mut ranges = StreamRanges::default();
        if can_send_data {
            loop {
                let room = mtu.saturating_sub(buf.len() - start);
                let overhead = wire::data_frame_overhead(self.send.next_unsent().max(1 << 30), room as u64);
                if room <= overhead {
                    break;
                }
                let Some(chunk) = self.send.next_chunk((room - overhead) as u64, self.peer_max_data) else {
                    break;
                };
                wire::encode_data_frame_header(buf, chunk.offset, chunk.len, chunk.message_end);
                self.send.write_chunk(buf, &chunk);
                if chunk.retransmission {
                    self.stats.retransmitted_bytes += chunk.len;
                }
                ranges.push(chunk.offset..chunk.offset + chunk.len);
                ack_eliciting = true;
            }
        }
        // A data packet the frame-overhead estimate left a few bytes short
        // of full is padded to full size: GSO batches need equal segments,
        // and one short datagram ends a batch.
        let len = buf.len() - start;
        if ranges.first.is_some() && len < mtu && mtu - len <= MAX_PAD_TO_FULL {
            wire::encode_padding(buf, mtu - len);
        }
        if buf.len() == header_end {
            // Nothing fitted after all (data ready, but not sendable in
            // this room): no empty packet, its number stays unused.
            buf.truncate(start);
            return None;
        }
        let app_limited = !self.send.has_data(self.peer_max_data);
        self.finish_packet(now, 0, buf, start, header_end, ack_eliciting, ranges, false, false, app_limited)
    }

    /// Scheduled sending: run the scheduler if something happened, then
    /// let the paths take turns sending what they hold.
    fn poll_scheduled(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_size: usize,
        only_path: Option<usize>,
    ) -> Option<Outgoing> {
        // Twice at most: looking at the paths may itself be a trigger (a
        // queue shrank as acknowledged entries were dropped).
        for _ in 0..2 {
            self.run_scheduler(now);
            let n = self.paths.len();
            if let Some(i) = only_path {
                if i >= n {
                    return None;
                }
                if let Some(out) = self.poll_path(now, i, buf, max_size) {
                    return Some(out);
                }
            } else {
                let first = self.next_poll % n;
                for k in 0..n {
                    let i = (first + k) % n;
                    if let Some(out) = self.poll_path(now, i, buf, max_size) {
                        self.next_poll = (i + 1) % n;
                        return Some(out);
                    }
                }
            }
            if !self.mp.as_ref().is_some_and(|mp| mp.due) {
                break;
            }
        }
        self.update_flow_probe(now);
        None
    }

    /// One datagram on path `i` in scheduled sending, if it has anything
    /// to send.
    fn poll_path(&mut self, now: Instant, i: usize, buf: &mut Vec<u8>, max_size: usize) -> Option<Outgoing> {
        let start = buf.len();
        let mtu = max_size.min(usize::from(self.config.max_datagram_size)) - self.seal_overhead();
        self.purge_path_queues(i);
        let data_ready = self.path_has_data(i);
        let path_id = self.paths[i].id;
        let validated = self.paths[i].validated;
        // Path frames go on validated paths. A path's status goes on the
        // path itself, or on another once the path is validated (the peer
        // knows it then: a status for a path it does not know yet would be
        // lost on it).
        let mut validated_ids = [u32::MAX; MAX_PATHS];
        for (slot, p) in validated_ids.iter_mut().zip(self.paths.iter().filter(|p| p.validated)) {
            *slot = p.id;
        }
        let carries = |c: &Control| {
            c.sent_in.is_none()
                && match c.frame {
                    ControlFrame::Abandon(_) => validated,
                    ControlFrame::Status { path_id: p, .. } => {
                        p == path_id || (validated && validated_ids.contains(&p))
                    }
                }
        };
        let control_due = self.control.iter().any(carries);
        let path = &mut self.paths[i];
        let ack_due = path.ack_due(now) || (path.largest_received.is_some() && self.recv.window_update_due());
        let window_ok = path.bytes_in_flight + mtu as u64 <= path.cc.window();
        let mut can_send_data = data_ready && window_ok;
        if can_send_data && self.config.pacing && path.pacing_until.is_none() {
            let rate = path.cc.pacing_rate(path.rtt.smoothed());
            path.pacer.set_burst((rate * 0.001) as u64 + 16 * mtu as u64);
            if let Some(t) = path.pacer.delay(now, rate, mtu as u64) {
                path.pacing_until = Some(t);
            }
        }
        if path.pacing_until.is_some() {
            can_send_data = false;
        }
        if !(ack_due || can_send_data || path.ping_pending || control_due) {
            return None;
        }
        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        if packet_type == PacketType::Accept && path_id != 0 {
            return None;
        }
        self.write_header(now, i, buf, packet_type);
        let header_end = buf.len();
        if self.paths[i].ack_eliciting_unacked > 0 || ack_due {
            self.write_ack(now, i, buf, mtu - (buf.len() - start));
        }
        let mut ack_eliciting = false;
        let mut control_sent = false;
        if control_due {
            let pn = self.paths[i].next_pn;
            for c in &mut self.control {
                if !carries(c) || mtu - (buf.len() - start) < 32 {
                    continue;
                }
                let frame = match c.frame {
                    ControlFrame::Abandon(id) => Frame::PathAbandon { path_id: id },
                    ControlFrame::Status { path_id, seq, backup } => Frame::PathStatus { path_id, seq, backup },
                };
                wire::encode_frame(buf, &frame);
                c.sent_in = Some((path_id, pn));
                control_sent = true;
                ack_eliciting = true;
            }
        }
        if self.paths[i].ping_pending {
            wire::encode_frame(buf, &Frame::Ping);
            self.paths[i].ping_pending = false;
            ack_eliciting = true;
        }
        let mut ranges = StreamRanges::default();
        let mut segment = false;
        if can_send_data {
            let room = mtu.saturating_sub(buf.len() - start);
            if let Some(id) = self.take_segment(i, room) {
                if let Some(r) = self.write_segment(i, id, buf) {
                    ranges.push(r);
                    segment = true;
                    ack_eliciting = true;
                }
            } else if self.send.has_retransmissions() {
                // Data sent before scheduling began, lost since.
                let overhead = wire::data_frame_overhead(self.send.next_unsent().max(1 << 30), room as u64);
                if room > overhead {
                    if let Some(chunk) = self.send.next_chunk((room - overhead) as u64, 0) {
                        wire::encode_data_frame_header(buf, chunk.offset, chunk.len, chunk.message_end);
                        self.send.write_chunk(buf, &chunk);
                        self.stats.retransmitted_bytes += chunk.len;
                        self.paths[i].counters.stream_bytes_sent += chunk.len;
                        ranges.push(chunk.offset..chunk.offset + chunk.len);
                        ack_eliciting = true;
                    }
                }
            }
        }
        if buf.len() == header_end {
            // Nothing to say after all.
            buf.truncate(start);
            return None;
        }
        let len = buf.len() - start;
        let has_data = ranges.first.is_some();
        if has_data && len < mtu && mtu - len <= MAX_PAD_TO_FULL {
            wire::encode_padding(buf, mtu - len);
        }
        // Application-limited (RFC 7661): the path has nothing more to send
        // and the scheduler nothing more to give.
        let app_limited = self.mp.as_ref().is_none_or(|mp| {
            let s = &self.paths[i].sched;
            s.queued.is_empty() && s.retransmit.is_empty() && mp.segments.q_len() == 0 && mp.segments.rq_len() == 0
        });
        self.finish_packet(now, i, buf, start, header_end, ack_eliciting, ranges, segment, control_sent, app_limited)
    }

    pub(super) fn write_header(&mut self, now: Instant, pi: usize, buf: &mut Vec<u8>, ty: PacketType) {
        let path = &self.paths[pi];
        let timestamp_us = self.timestamp_us(now).max(1);
        if ty == PacketType::Data {
            // The hot path, without building a `Header`.
            let (id, pn, echo) = (path.id, path.next_pn, path.echo_timestamp_us);
            wire::encode_data_header(buf, self.remote_cid, id, pn, timestamp_us, echo);
            return;
        }
        let noise = match ty {
            PacketType::Initial => self.client_handshake.as_ref().map(|h| Bytes::copy_from_slice(&h.message)),
            PacketType::Accept => Some(self.accept_noise.clone()),
            _ => None,
        };
        let header = Header {
            ty,
            dst_cid: self.remote_cid,
            src_cid: self.local_cid,
            cookie: if ty == PacketType::Initial { self.cookie.clone() } else { Bytes::new() },
            noise: noise.unwrap_or_default(),
            server_key: Bytes::new(),
            path_id: path.id,
            pn: path.next_pn,
            timestamp_us,
            echo_timestamp_us: path.echo_timestamp_us,
        };
        wire::encode_header(buf, &header);
    }

    fn write_ack(&mut self, now: Instant, pi: usize, buf: &mut Vec<u8>, room: usize) {
        if self.paths[pi].largest_received.is_none() {
            return;
        }
        let max_data = self.recv.announce();
        let path = &mut self.paths[pi];
        if let Some(ack) = path.ack_frame(now, room, max_data) {
            wire::encode_frame(buf, &Frame::Ack(ack));
        }
        path.on_ack_sent();
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn finish_packet(
        &mut self,
        now: Instant,
        pi: usize,
        buf: &mut Vec<u8>,
        start: usize,
        header_end: usize,
        ack_eliciting: bool,
        ranges: StreamRanges,
        segment: bool,
        control: bool,
        app_limited: bool,
    ) -> Option<Outgoing> {
        if let Some(capture) = &mut self.sent_capture {
            if ranges.first.is_some() {
                let path = &self.paths[pi];
                capture.push(crate::SentPacketInfo { path_id: path.id, pn: path.next_pn, data: ranges.iter().collect() });
            }
        }
        if let Some(protection) = &mut self.protection {
            protection.maybe_update(now, self.config.key_update_interval);
            let path = &self.paths[pi];
            protection.seal(buf, start, header_end, path.id, path.next_pn);
        }
        let size = (buf.len() - start) as u64;
        let established = self.state == State::Established;
        let pacing = self.config.pacing;
        let path = &mut self.paths[pi];
        let pn = path.next_pn;
        path.next_pn += 1;
        debug_assert_eq!(path.sent_base + path.sent.len() as u64, pn);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size;
        if self.mp.is_some() {
            path.counters.packets_sent += 1;
            path.counters.bytes_sent += size;
        }
        if ack_eliciting && established {
            path.bytes_in_flight += size;
            path.ack_eliciting_in_flight += 1;
            self.last_ack_eliciting_sent = now;
            path.cc.on_sent(now, size, path.bytes_in_flight);
            if pacing {
                path.pacer.on_sent(size);
            }
            // RFC 6298 (5.1): start the timer if it is not running.
            if path.rto_armed_at.is_none() {
                path.restart_rto(now);
            }
            path.sent.push_back(Some(SentPacket { time: now, size, ack_eliciting, app_limited, segment, control, ranges }));
        } else if path.sent.is_empty() {
            path.sent_base = path.next_pn;
        } else {
            path.sent.push_back(None);
        }
        Some(Outgoing { size: size as usize, path: pi, redirect: None })
    }
}
