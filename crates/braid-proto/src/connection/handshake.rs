//! The handshake: the client's Initial (resent on its RTO, given up after
//! the handshake timeout), the server's stateless RETRY cookie echoed in the
//! next Initial, and the Accept that establishes the connection.
//!
//! Address validation as with QUIC's Retry token (RFC 9000 §8.1.2): the
//! endpoint answers an Initial without a valid cookie with a RETRY and
//! creates a server connection only for one that echoes a cookie (see
//! [`crate::endpoint`]). Every leg echoes the other side's timestamp, so
//! the first RTT sample exists before any data is sent. Kept apart because
//! it runs only before the connection is established (the server's part
//! ends once the client proves it knows the server's CID).
//!
//! With authentication on, the Noise IK handshake rides in the same
//! packets (see [`crate::crypto`]): the RETRY carries the server's key,
//! which the client judges before it answers; the Initial carries the
//! first Noise message, the Accept the second.

use std::time::Duration;

use braid_core::Instant;
use bytes::Bytes;

use super::{Connection, Outgoing, State, CLOSE_REFUSED, CLOSE_UNAUTHORIZED};
use crate::crypto::noise::ClientHandshake;
use crate::crypto::protection::Protection;
use crate::crypto::PublicKey;
use crate::endpoint::{CloseReason, Event};
use crate::wire::{self, Frame, Header, Packet, PacketType, PublicHeader};

impl Connection {
    pub(crate) fn on_retry(&mut self, now: Instant, retry: &PublicHeader) {
        if self.state != State::Handshaking {
            return;
        }
        let (cookie, echo_timestamp_us) = (retry.cookie.clone(), retry.echo_timestamp_us);
        // RFC 9000 §17.2.5.2: one RETRY per connection attempt. A later one
        // is believed only if it answers an Initial that already carried
        // the cookie (it echoes a timestamp from after the first RETRY): the
        // server found that cookie expired. One answering an earlier
        // Initial (a copy the path duplicated, or a resend the first RETRY
        // overtook) would restart the Noise handshake with a new ephemeral
        // key while the server completes the one it already has, and every
        // Accept would then fail to open until the handshake timed out.
        if let Some(taken) = self.retry_taken_us {
            if echo_timestamp_us < taken {
                return;
            }
        }
        self.retry_taken_us = Some(self.timestamp_us(now));
        if let Some(credentials) = self.credentials.clone() {
            // Judge the server's key before sending anything that
            // identifies us.
            let key = <&[u8; 32]>::try_from(&retry.server_key[..]).ok().and_then(|k| PublicKey::from_bytes(k).ok());
            let Some(key) = key else {
                let why = "the server runs without authentication (--insecure-no-auth); \
                           connect with --insecure-no-auth to talk to it anyway";
                self.finish(CloseReason::Unauthorized(why.into()));
                return;
            };
            if let Err(why) = credentials.verifier.verify(self.paths[0].remote, &key) {
                self.finish(CloseReason::Unauthorized(why));
                return;
            }
            let seed = self.handshake_seed;
            match ClientHandshake::start(&credentials.identity, &credentials.suites, key, self.local_cid, &cookie, seed) {
                Ok(hs) => self.client_handshake = Some(hs),
                Err(e) => {
                    self.finish(CloseReason::Unauthorized(e.to_string()));
                    return;
                }
            }
            // A later RETRY (an expired cookie) needs a new ephemeral key.
            let next = ring::digest::digest(&ring::digest::SHA256, &seed);
            self.handshake_seed.copy_from_slice(next.as_ref());
        }
        // The RETRY echoes our Initial's timestamp: an RTT sample, which
        // also ends the back-off so the cookie is used well within its
        // lifetime (a lost Initial is resent after one RTO, not after the
        // backed-off one that the RETRY's own delay built up).
        if echo_timestamp_us > 0 {
            let sample = self.timestamp_us(now).saturating_sub(echo_timestamp_us);
            self.paths[0].rtt.update(Duration::from_micros(sample));
        }
        self.cookie = cookie;
        self.initial_due = true;
        self.last_received = now;
    }

    /// Server: a client retransmitted its Initial; our Accept was lost.
    /// The next one echoes the new Initial's timestamp.
    pub(crate) fn on_repeated_initial(&mut self, timestamp_us: u64) {
        if self.state == State::Established && !self.peer_confirmed {
            let path = &mut self.paths[0];
            path.ping_pending = true;
            path.echo_timestamp_us = path.echo_timestamp_us.max(timestamp_us);
        }
    }

    /// Client, handshaking: the Noise message of an Accept. True if it
    /// completed the handshake (the packet is then opened with the new
    /// keys); false if it is to be dropped.
    pub(super) fn on_accept_noise(&mut self, now: Instant, noise: &[u8]) -> bool {
        let Some(hs) = self.client_handshake.take() else {
            // Insecure, or a second Accept before the first opened.
            return self.protection.is_some();
        };
        let server_key = hs.server_key();
        match hs.finish(noise) {
            Ok(secrets) => {
                self.protection = Some(Protection::new(secrets.suite, secrets.send, secrets.recv, now));
                self.peer_key = Some(server_key);
                true
            }
            Err(_) => {
                self.stats.auth_failures += 1;
                false
            }
        }
    }

    /// Client, handshaking, authenticated: a plaintext Accept can only be
    /// the server's stateless refusal (it has no keys to seal one with).
    /// Believed because it echoes our random connection ID, as QUIC
    /// believes a Retry; anything else in one is dropped.
    pub(super) fn on_stateless_close(&mut self, datagram: &[u8], header: &PublicHeader) {
        let payload = Bytes::copy_from_slice(&datagram[header.payload_offset..]);
        let Ok(packet) = Packet::from_parts(header.header(u64::from(header.pn_truncated)), payload) else {
            self.stats.malformed_packets += 1;
            return;
        };
        for frame in packet.frames() {
            if let Frame::Close { code, reason } = frame {
                let reason = String::from_utf8_lossy(&reason).into_owned();
                match code {
                    CLOSE_REFUSED => self.finish(CloseReason::Refused),
                    CLOSE_UNAUTHORIZED => self.finish(CloseReason::Unauthorized(reason)),
                    _ => continue,
                }
                return;
            }
        }
        self.stats.auth_failures += 1;
    }

    /// Client: the server's Accept (the first, or a repeat once
    /// established, which changes nothing).
    pub(super) fn on_accept(&mut self, now: Instant, header: &Header) {
        if self.state == State::Handshaking {
            self.remote_cid = header.src_cid;
            self.state = State::Established;
            // The Accept echoes our Initial's timestamp: a first RTT sample.
            if header.echo_timestamp_us > 0 {
                let now_us = self.timestamp_us(now);
                let sample = now_us.saturating_sub(header.echo_timestamp_us);
                self.paths[0].rtt.update(Duration::from_micros(sample));
                self.paths[0].on_handshake_echo(now_us, header.timestamp_us, header.echo_timestamp_us);
            }
            self.events.push(Event::Connected(self.handle));
        }
    }

    /// Client, handshaking: the next timer, the Initial's retransmission
    /// or the handshake timeout, whichever is first.
    pub(super) fn handshake_deadline(&self) -> Option<Instant> {
        let give_up = self.created + self.config.handshake_timeout;
        Some(match self.initial_sent_at {
            Some(sent) => give_up.min(sent + self.rto()),
            None => give_up,
        })
    }

    /// Client, handshaking: give up after the handshake timeout, else
    /// resend the Initial once its (backed-off) RTO has passed.
    pub(super) fn on_handshake_timer(&mut self, now: Instant) {
        if now >= self.created + self.config.handshake_timeout {
            self.finish(CloseReason::HandshakeTimeout);
        } else if self.initial_sent_at.is_some_and(|s| now >= s + self.rto()) {
            self.paths[0].rtt.back_off();
            self.initial_due = true;
        }
    }

    /// Client: the Initial, when one is due.
    pub(super) fn poll_initial(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing> {
        if !self.initial_due {
            return None;
        }
        self.initial_due = false;
        self.initial_attempts += 1;
        self.initial_sent_at = Some(now);
        let start = buf.len();
        self.write_header(now, 0, buf, PacketType::Initial);
        // Pad so the server's answers are never larger than what it got
        // (no amplification toward a spoofed address).
        let min = usize::from(crate::config::TransportConfig::MIN_DATAGRAM_SIZE);
        let have = buf.len() - start;
        if have < min {
            wire::encode_padding(buf, min - have);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += (buf.len() - start) as u64;
        Some(Outgoing { size: buf.len() - start, path: 0, redirect: None })
    }
}
