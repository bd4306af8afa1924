//! The end of a connection: graceful close (flush, then CLOSE), immediate
//! close with a reason (abort), the peer's CLOSE, the closing and draining
//! periods, and the idle timeout.
//!
//! The states follow RFC 9000 §10.2: after sending CLOSE a connection is
//! *closing* and repeats its CLOSE if the peer keeps talking; after
//! receiving one it is *draining* and sends nothing; either lasts three
//! RTOs, long enough to absorb the peer's late packets, and then the
//! connection is *closed*. The application hears of the close exactly once
//! (an [`Event::Closed`]), and once it has read the close from
//! `recv_message` the endpoint may forget the connection.

use braid_core::Instant;
use bytes::Bytes;

use super::{Connection, Outgoing, State};
use crate::endpoint::{CloseReason, Event};
use crate::path::StreamRanges;
use crate::wire::{self, Frame, PacketType};

/// Close code sent when a server refuses a connection.
pub(crate) const CLOSE_REFUSED: u64 = 0x1_0000;
/// Close code for protocol violations.
pub(super) const CLOSE_PROTOCOL_VIOLATION: u64 = 0x1_0001;
/// Close code of a refused key (or a mismatch in whether to authenticate).
pub(crate) const CLOSE_UNAUTHORIZED: u64 = 0x1_0002;
/// Consecutive unanswered retransmission timeouts after which a silent
/// peer with data outstanding is given up (once the idle timeout passed).
const UNANSWERED_RTOS_BEFORE_IDLE: u32 = 6;

impl Connection {
    /// Graceful close: flush, then CLOSE.
    pub(crate) fn close(&mut self, now: Instant) {
        match self.state {
            // Queued messages still go out once the handshake completes;
            // with nothing queued there is nothing to flush.
            State::Handshaking if self.send.is_fully_acked() => self.finish(CloseReason::Local),
            State::Handshaking => self.close_requested = true,
            State::Established => {
                self.close_requested = true;
                self.maybe_send_close(now);
            }
            _ => {}
        }
    }

    /// Sends CLOSE once a requested graceful close has nothing left to
    /// flush.
    pub(super) fn maybe_send_close(&mut self, now: Instant) {
        if self.close_requested && self.state == State::Established && self.send.is_fully_acked() {
            self.events.push(Event::Flushed(self.handle));
            self.close_frame = Some((0, Bytes::new()));
            self.close_reason = Some(CloseReason::Local);
            self.state = State::Closing { until: now + self.rto() * 3 };
        }
    }

    /// Immediate close with a CLOSE frame telling the peer why.
    pub(super) fn abort(&mut self, now: Instant, code: u64, reason: CloseReason) {
        if matches!(self.state, State::Closed | State::Draining { .. }) {
            return;
        }
        let text = match &reason {
            CloseReason::ProtocolViolation(t) => Bytes::from(t.clone().into_bytes()),
            _ => Bytes::new(),
        };
        self.close_frame = Some((code, text));
        self.close_reason = Some(reason.clone());
        self.state = State::Closing { until: now + self.rto() * 3 };
        self.events.push(Event::Closed(self.handle, reason));
    }

    /// Enter `Closed` and tell the application (once).
    pub(super) fn finish(&mut self, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        let already_told = matches!(self.state, State::Draining { .. })
            || (matches!(self.state, State::Closing { .. }) && self.close_reason.as_ref() != Some(&CloseReason::Local));
        self.state = State::Closed;
        if self.close_reason.is_none() {
            self.close_reason = Some(reason.clone());
        }
        if !already_told {
            let reason = self.close_reason.clone().unwrap_or(reason);
            self.events.push(Event::Closed(self.handle, reason));
        }
        self.clear_in_flight();
    }

    fn clear_in_flight(&mut self) {
        for p in &mut self.paths {
            p.clear_in_flight();
        }
        self.presumed_lost.clear();
    }

    /// The peer's CLOSE: drain, or, if we were closing too, be done.
    pub(super) fn on_close_frame(&mut self, now: Instant, code: u64, reason: Bytes) {
        let reason = if code == CLOSE_REFUSED {
            CloseReason::Refused
        } else if code == CLOSE_UNAUTHORIZED {
            CloseReason::Unauthorized(String::from_utf8_lossy(&reason).into_owned())
        } else if code == CLOSE_PROTOCOL_VIOLATION {
            CloseReason::ProtocolViolation(format!("peer reported: {}", String::from_utf8_lossy(&reason)))
        } else {
            CloseReason::Remote { code, reason: String::from_utf8_lossy(&reason).into_owned() }
        };
        match self.state {
            State::Closing { .. } => self.finish(reason),
            State::Closed | State::Draining { .. } => {}
            _ => {
                self.close_reason = Some(reason.clone());
                self.events.push(Event::Closed(self.handle, reason));
                self.state = State::Draining { until: now + self.rto() * 3 };
                self.clear_in_flight();
            }
        }
    }

    /// Closing, and the peer keeps talking: repeat our CLOSE.
    pub(super) fn repeat_close(&mut self) {
        if self.close_frame.is_none() {
            self.close_frame = Some((0, Bytes::new()));
        }
    }

    /// Closing: the CLOSE packet, if one is due, on the primary path.
    pub(super) fn poll_close(&mut self, now: Instant, buf: &mut Vec<u8>, only_path: Option<usize>) -> Option<Outgoing> {
        let start = buf.len();
        if only_path.is_some_and(|p| p != 0) {
            return None;
        }
        let (code, reason) = self.close_frame.take()?;
        self.write_header(now, 0, buf, PacketType::Data);
        let header_end = buf.len();
        wire::encode_frame(buf, &Frame::Close { code, reason });
        let none = StreamRanges::default();
        self.finish_packet(now, 0, buf, start, header_end, false, none, false, false, false)
    }

    /// When silence from the peer ends the connection.
    ///
    /// With nothing outstanding, after the idle timeout. With data or a
    /// probe outstanding, silence may just be loss, so, like TCP's retry
    /// limit, only once `UNANSWERED_RTOS_BEFORE_IDLE` retransmission
    /// timeouts in a row went unanswered as well, on every path; and never
    /// sooner than three RTOs (RFC 9000 §10.1 uses three probe timeouts).
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let outstanding = !self.send.is_fully_acked()
            || self.paths.iter().any(|p| p.ack_eliciting_in_flight > 0 || p.ping_pending);
        let backoff = self.paths.iter().filter(|p| p.validated).map(|p| p.rtt.backoff()).min().unwrap_or(0);
        if outstanding && backoff < UNANSWERED_RTOS_BEFORE_IDLE {
            return None;
        }
        Some(self.last_received + self.config.idle_timeout.max(self.rto() * 3))
    }
}
