//! Path validation (RFC 9000 §8.2 and §9): a path carries data only to an
//! address that has proved it receives there, by echoing 8 unpredictable
//! bytes sent to it.
//!
//! - The server challenges every path the client opens (the client's
//!   acknowledgement alone is no proof: packet numbers are predictable, so
//!   an authenticated but malicious client could acknowledge packets it
//!   never received and aim the server's data at a victim).
//! - When an authenticated packet that is the newest on its path arrives
//!   from a new address (a NAT rebinding, or a copy raced ahead by an
//!   attacker), the server keeps sending to the old address and challenges
//!   the new one; only its echo moves the path there. Replays never get
//!   this far (they are duplicates).
//! - Anti-amplification (§8.1): before the echo, the new address gets only
//!   the challenge, a packet smaller than the one that came from it.
//!
//! A challenge is repeated after each retransmission timeout and given up
//! after [`MAX_CHALLENGES`] tries: a new path then stays unvalidated (and is
//! abandoned like any path that never answers), a new address is ignored.

use std::net::SocketAddr;

use braid_core::Instant;

use super::{Connection, Outgoing, Side};
use crate::path::{Challenge, StreamRanges};
use crate::wire::{self, Frame, PacketType};

/// Tries before a challenge is given up.
pub(super) const MAX_CHALLENGES: u8 = 4;

impl Connection {
    /// 8 bytes nobody else can predict: SHA-256 of the connection's secret
    /// (from the endpoint's CSPRNG) and a counter.
    fn new_token(&mut self) -> [u8; 8] {
        self.challenges_issued += 1;
        let mut input = [0u8; 40];
        input[..32].copy_from_slice(&self.path_secret);
        input[32..].copy_from_slice(&self.challenges_issued.to_be_bytes());
        let digest = ring::digest::digest(&ring::digest::SHA256, &input);
        let mut token = [0u8; 8];
        token.copy_from_slice(&digest.as_ref()[..8]);
        token
    }

    /// Starts validating `remote` for path `pi` (unless already under way).
    pub(super) fn start_challenge(&mut self, pi: usize, remote: SocketAddr) {
        if self.paths[pi].challenge.is_some_and(|c| c.remote == remote) {
            return;
        }
        let token = self.new_token();
        self.paths[pi].challenge = Some(Challenge { token, remote, sent_at: None, tries: 0 });
    }

    /// A packet that is the newest on path `pi` came from `remote`: follow
    /// it once it has answered a challenge (server only: a client's peer
    /// does not move).
    pub(super) fn on_peer_address(&mut self, pi: usize, remote: SocketAddr) {
        if self.side == Side::Server && remote != self.paths[pi].remote {
            self.start_challenge(pi, remote);
        }
    }

    /// The peer echoed `token` from `remote` on path `pi`.
    pub(super) fn on_path_response(&mut self, pi: usize, remote: SocketAddr, token: [u8; 8]) {
        let path = &mut self.paths[pi];
        let Some(c) = path.challenge else { return };
        if c.token != token || c.remote != remote {
            return;
        }
        path.challenge = None;
        path.remote = remote;
        path.validated = true;
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
    }

    /// A challenge or a response due on some path, as its own small packet
    /// (a challenge to a new address must not carry data; a response goes
    /// out at once). Only as the first datagram of a batch: it may go to
    /// another address than the path's.
    pub(super) fn poll_validation(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing> {
        let rto = self.rto();
        let pi = self.paths.iter().position(|p| {
            p.response_due.is_some()
                || p.challenge.is_some_and(|c| c.tries < MAX_CHALLENGES && c.sent_at.is_none_or(|t| now >= t + rto))
        })?;
        let start = buf.len();
        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        if packet_type == PacketType::Accept && self.paths[pi].id != 0 {
            return None;
        }
        self.write_header(now, pi, buf, packet_type);
        let header_end = buf.len();
        let path = &mut self.paths[pi];
        let mut redirect = None;
        if let Some(token) = path.response_due.take() {
            wire::encode_frame(buf, &Frame::PathResponse(token));
        } else if let Some(c) = &mut path.challenge {
            wire::encode_frame(buf, &Frame::PathChallenge(c.token));
            c.sent_at = Some(now);
            c.tries += 1;
            redirect = (c.remote != path.remote).then_some(c.remote);
        }
        let none = StreamRanges::default();
        let mut out = self.finish_packet(now, pi, buf, start, header_end, false, none, false, false, false)?;
        out.redirect = redirect;
        Some(out)
    }

    /// When a challenge is next due.
    pub(super) fn validation_deadline(&self) -> Option<Instant> {
        let rto = self.rto();
        self.paths
            .iter()
            .filter_map(|p| p.challenge.filter(|c| c.tries < MAX_CHALLENGES).and_then(|c| c.sent_at).map(|t| t + rto))
            .min()
    }
}
