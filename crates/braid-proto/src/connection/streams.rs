//! The reliable message stream and its flow control, at the connection:
//! accepting messages from the application (bounded by the send buffer),
//! handing received ones back, taking in DATA frames, following the peer's
//! `max_data`, and probing for a window update when flow control blocks
//! the sender with nothing in flight.
//!
//! The byte-level work is in [`crate::send_stream`] and
//! [`crate::recv_stream`]; this file is where the connection's state
//! (closed or not, the peer's window, scheduled sending) meets them. Flow
//! control is credit-based as in RFC 9000 §4.1: the receiver announces the
//! highest offset it accepts in every ACK frame, and the sender never sends
//! past it.

use braid_core::Instant;
use bytes::Bytes;

use super::close::CLOSE_PROTOCOL_VIOLATION;
use super::{Connection, State};
use crate::endpoint::{CloseReason, Event};

impl Connection {
    pub(crate) fn send_message(&mut self, message: Bytes) -> Result<(), crate::SendError> {
        self.check_sendable(message.len())?;
        if !self.has_send_room() {
            return Err(crate::SendError::Blocked(message));
        }
        self.send.push_tagged(message, self.user_tag);
        self.queued_messages(1);
        Ok(())
    }

    /// Queues copies of the messages of `msgs` from the first, as long as
    /// the send buffer has room; how many. Nothing is queued if the
    /// connection cannot send or any message is too large (checked first,
    /// so that an error never leaves half a batch queued).
    pub(crate) fn send_copies<M: AsRef<[u8]>>(&mut self, msgs: &[M]) -> Result<usize, crate::SendError> {
        for m in msgs {
            self.check_sendable(m.as_ref().len())?;
        }
        let mut n = 0;
        for m in msgs {
            if !self.has_send_room() {
                break;
            }
            self.send.push_copy(m.as_ref(), self.user_tag);
            n += 1;
        }
        self.queued_messages(n);
        Ok(n)
    }

    /// The connection takes messages and one of `size` bytes is allowed.
    fn check_sendable(&self, size: usize) -> Result<(), crate::SendError> {
        match &self.state {
            State::Handshaking | State::Established if !self.close_requested => {}
            _ => {
                let reason = self.close_reason.clone().unwrap_or(CloseReason::Local);
                return Err(crate::SendError::Closed(reason));
            }
        }
        let size = size as u64;
        if size > self.config.max_message_size {
            return Err(crate::SendError::TooLarge { size, max: self.config.max_message_size });
        }
        Ok(())
    }

    /// Accept while any room is left, so a message larger than the buffer
    /// still flows without draining the pipe first; memory stays below
    /// send_buffer + max_message_size. When full, the application hears
    /// [`Event::Writable`] once there is room again.
    fn has_send_room(&mut self) -> bool {
        let room = self.send.buffered() < self.config.send_buffer;
        if !room {
            self.want_writable = true;
        }
        room
    }

    /// `n` messages were queued.
    fn queued_messages(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.stats.messages_sent += n as u64;
        if let Some(mp) = &mut self.mp {
            mp.segments.carve(&mut self.send);
            mp.due = true;
        }
    }

    pub(crate) fn recv_message(&mut self) -> Result<Option<Bytes>, crate::RecvError> {
        if let Some(msg) = self.recv.pop() {
            self.stats.messages_received += 1;
            return Ok(Some(msg));
        }
        match (&self.state, &self.close_reason) {
            (State::Closed | State::Draining { .. } | State::Closing { .. }, Some(reason)) => {
                self.app_saw_close = true;
                Err(crate::RecvError::Closed(reason.clone()))
            }
            _ => Ok(None),
        }
    }

    /// Moves up to `max` complete messages into `batch`; how many. After
    /// the connection closed and every message was taken, the close
    /// reason (as [`Connection::recv_message`]).
    pub(crate) fn recv_batch(&mut self, batch: &mut crate::RecvBatch, max: usize) -> Result<usize, crate::RecvError> {
        let n = self.recv.pop_batch(batch, max);
        self.stats.messages_received += n as u64;
        if n > 0 || max == 0 {
            return Ok(n);
        }
        self.recv_message().map(|none| {
            debug_assert!(none.is_none());
            0
        })
    }

    /// A DATA frame's bytes go into the receive stream. Returns whether new
    /// bytes became readable, or `None` when the frame broke the stream's
    /// rules (past the window, an oversized message, out-of-order data
    /// beyond the receive buffer) and the connection was aborted.
    pub(super) fn on_data_frame(&mut self, now: Instant, offset: u64, data: Bytes) -> Option<bool> {
        match self.recv.on_data(offset, data) {
            Ok(n) => Some(n > 0),
            Err(e) => {
                self.stats.malformed_packets += 1;
                let reason = CloseReason::ProtocolViolation(e.to_string());
                self.abort(now, CLOSE_PROTOCOL_VIOLATION, reason);
                None
            }
        }
    }

    /// The peer's window, announced in an ACK frame: it only grows.
    pub(super) fn on_peer_max_data(&mut self, max_data: u64) {
        if max_data > self.peer_max_data {
            self.peer_max_data = max_data;
            if let Some(mp) = &mut self.mp {
                mp.due = true;
            }
        }
    }

    /// Acknowledgements freed `freed` bytes of the send buffer: tell an
    /// application that was refused for lack of room that there is some.
    pub(super) fn on_send_buffer_freed(&mut self, freed: u64) {
        if freed > 0 && self.want_writable && self.send.buffered() < self.config.send_buffer {
            self.want_writable = false;
            self.events.push(Event::Writable(self.handle));
        }
    }

    /// Arms the window probe when the peer's window blocks data with
    /// nothing in flight (no ACK would come to announce a larger one), and
    /// disarms it otherwise.
    pub(super) fn update_flow_probe(&mut self, now: Instant) {
        let max_data = self.peer_max_data;
        let blocked = match &self.mp {
            None => self.send.is_flow_blocked(max_data),
            Some(mp) => {
                let beyond = |s: &crate::multipath::Segment| s.seq + u64::from(s.len) > max_data;
                mp.segments.q_front().is_some_and(beyond)
                    || self
                        .paths
                        .iter()
                        .any(|p| p.sched.queued.front().and_then(|&id| mp.segments.get(id)).is_some_and(beyond))
            }
        };
        if blocked && self.paths.iter().all(|p| p.bytes_in_flight == 0) {
            if self.flow_probe_at.is_none() {
                self.flow_probe_at = Some(now + self.rto());
            }
        } else {
            self.flow_probe_at = None;
        }
    }
}
