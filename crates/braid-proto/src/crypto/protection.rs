//! A connection's packet protection: sealing and opening whole packets
//! (header protection included) in both directions, and key update.
//!
//! Key update follows RFC 9001 §6: the side that updates flips the key
//! phase bit of what it sends and seals with the next key; the peer, on
//! the first packet of the new phase that opens with *its* next receive
//! key, moves its receive key forward and updates its send key too. The
//! previous receive key is kept for packets still in flight, and a new
//! update is started only once the peer has answered in the current phase
//! (§6.1). An endpoint updates after [`CipherSuite::packets_per_key`]
//! packets or the configured interval, whichever comes first.

use std::time::Duration;

use braid_core::Instant;
use bytes::{Buf, Bytes, BytesMut};

use super::packet_key::{CipherSuite, HeaderKey, PacketKey, KEY_PHASE_BIT, SAMPLE_LEN, TAG_LEN};
use crate::wire::{self, PN_LEN};

/// Both directions' keys of one connection.
pub(crate) struct Protection {
    suite: CipherSuite,
    send: PacketKey,
    send_phase: bool,
    send_hp: HeaderKey,
    recv: PacketKey,
    recv_phase: bool,
    recv_hp: HeaderKey,
    /// The receive key of the previous phase (late packets).
    recv_prev: Option<PacketKey>,
    /// The receive key of the next phase, derived once when first needed.
    recv_next: Option<PacketKey>,
    sealed_with_key: u64,
    key_since: Instant,
    /// The peer has sent a packet in our current send phase: it has our
    /// keys, so we may update again.
    peer_in_phase: bool,
    /// Key updates so far (either side's).
    pub(crate) key_updates: u64,
}

/// A packet opened: its full packet number and its frames.
pub(crate) struct Opened {
    pub pn: u64,
    pub payload: Bytes,
}

impl Protection {
    pub(crate) fn new(suite: CipherSuite, send_secret: [u8; 32], recv_secret: [u8; 32], now: Instant) -> Self {
        Protection {
            suite,
            send_hp: HeaderKey::new(suite, &send_secret),
            send: PacketKey::new(suite, send_secret),
            send_phase: false,
            recv_hp: HeaderKey::new(suite, &recv_secret),
            recv: PacketKey::new(suite, recv_secret),
            recv_phase: false,
            recv_prev: None,
            recv_next: None,
            sealed_with_key: 0,
            key_since: now,
            peer_in_phase: false,
            key_updates: 0,
        }
    }

    pub(crate) fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Starts a key update if the current send key has sealed enough
    /// packets or is older than `interval`, and the peer has caught up
    /// with the last one.
    pub(crate) fn maybe_update(&mut self, now: Instant, interval: Duration) {
        let due = self.sealed_with_key >= self.suite.packets_per_key()
            || now.saturating_duration_since(self.key_since) >= interval;
        if due && self.peer_in_phase {
            self.update_send(now);
        }
    }

    fn update_send(&mut self, now: Instant) {
        self.send = self.send.next();
        self.send_phase = !self.send_phase;
        self.sealed_with_key = 0;
        self.key_since = now;
        self.peer_in_phase = false;
        self.key_updates += 1;
    }

    /// Seals the packet at `buf[start..]` whose header ends at `header_end`
    /// (the last [`PN_LEN`] header bytes are the packet number): encrypts
    /// the payload in place, appends the tag, then masks the packet number
    /// and key-phase bit.
    pub(crate) fn seal(&mut self, buf: &mut Vec<u8>, start: usize, header_end: usize, path_id: u32, pn: u64) {
        if self.send_phase {
            buf[start + 1] |= KEY_PHASE_BIT;
        }
        let (head, payload) = buf.split_at_mut(header_end);
        let tag = self.send.seal(path_id, pn, &head[start..], payload);
        buf.extend_from_slice(&tag);
        // The tag alone is a full sample, so the mask always exists.
        if let Some(mask) = self.send_hp.mask(&buf[header_end..header_end + SAMPLE_LEN]) {
            buf[start + 1] ^= mask[0] & KEY_PHASE_BIT;
            for (b, m) in buf[header_end - PN_LEN..header_end].iter_mut().zip(&mask[1..]) {
                *b ^= m;
            }
        }
        self.sealed_with_key += 1;
    }

    /// Opens a sealed packet whose payload starts at `payload_offset`;
    /// `largest` is the largest packet number received on its path, for
    /// the packet number's reconstruction. `None` if it does not verify
    /// (nothing about the connection has changed then).
    pub(crate) fn open(
        &mut self,
        now: Instant,
        mut buf: BytesMut,
        payload_offset: usize,
        path_id: u32,
        largest: Option<u64>,
    ) -> Option<Opened> {
        if buf.len() < payload_offset + TAG_LEN || payload_offset < PN_LEN + 2 {
            return None;
        }
        let mask = self.recv_hp.mask(&buf[payload_offset..])?;
        buf[1] ^= mask[0] & KEY_PHASE_BIT;
        let phase = buf[1] & KEY_PHASE_BIT != 0;
        let pn_offset = payload_offset - PN_LEN;
        for (b, m) in buf[pn_offset..payload_offset].iter_mut().zip(&mask[1..]) {
            *b ^= m;
        }
        let mut truncated = [0u8; PN_LEN];
        truncated.copy_from_slice(&buf[pn_offset..payload_offset]);
        let pn = wire::expand_pn(largest, u32::from_be_bytes(truncated));
        let (head, body) = buf.split_at_mut(payload_offset);
        let len = if phase == self.recv_phase {
            let len = self.recv.open(path_id, pn, head, body)?;
            if self.recv_phase == self.send_phase {
                self.peer_in_phase = true;
            }
            len
        } else {
            self.open_other_phase(now, phase, path_id, pn, head, body)?
        };
        // Cut the buffer down to the plaintext before freezing it: slicing
        // the frozen buffer would cost two atomic reference-count changes
        // per packet on the receive path.
        buf.truncate(payload_offset + len);
        buf.advance(payload_offset);
        Some(Opened { pn, payload: buf.freeze() })
    }

    /// A packet of the other key phase: a late one of the previous phase,
    /// or the first of the next (the peer updated its keys).
    fn open_other_phase(
        &mut self,
        now: Instant,
        phase: bool,
        path_id: u32,
        pn: u64,
        head: &[u8],
        body: &mut [u8],
    ) -> Option<usize> {
        // A failed open leaves the buffer unspecified: try on copies.
        if let Some(prev) = &self.recv_prev {
            let mut copy = body.to_vec();
            if let Some(len) = prev.open(path_id, pn, head, &mut copy) {
                body[..len].copy_from_slice(&copy[..len]);
                return Some(len);
            }
        }
        let next = self.recv_next.get_or_insert_with(|| self.recv.next());
        let len = next.open(path_id, pn, head, body)?;
        // The peer moved to the next phase: follow it.
        let next = self.recv_next.take()?;
        self.recv_prev = Some(std::mem::replace(&mut self.recv, next));
        self.recv_phase = phase;
        if self.send_phase != phase {
            self.update_send(now);
        }
        self.peer_in_phase = true;
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_A: [u8; 32] = [1; 32];
    const SECRET_B: [u8; 32] = [2; 32];

    fn pair(suite: CipherSuite) -> (Protection, Protection) {
        let now = Instant::ZERO;
        (Protection::new(suite, SECRET_A, SECRET_B, now), Protection::new(suite, SECRET_B, SECRET_A, now))
    }

    /// A Data packet of path `path` and number `pn`, sealed by `p`.
    fn packet(p: &mut Protection, path: u32, pn: u64, body: &[u8]) -> (Vec<u8>, usize) {
        let mut buf = vec![0xaa; 3]; // an earlier datagram of a batch
        let start = buf.len();
        wire::encode_data_header(&mut buf, 7, path, pn, 1000, 900);
        let header_end = buf.len();
        buf.extend_from_slice(body);
        p.seal(&mut buf, start, header_end, path, pn);
        (buf[start..].to_vec(), header_end - start)
    }

    #[test]
    fn packets_open_on_the_other_side_only_intact() {
        for suite in CipherSuite::preferred() {
            let (mut a, mut b) = pair(suite);
            let (sealed, payload_offset) = packet(&mut a, 2, 70_000, b"frames");
            // The packet number is not visible on the wire.
            assert_ne!(&sealed[payload_offset - 4..payload_offset], &70_000u32.to_be_bytes());
            let opened = b.open(Instant::ZERO, BytesMut::from(&sealed[..]), payload_offset, 2, Some(69_990)).unwrap();
            assert_eq!(opened.pn, 70_000);
            assert_eq!(&opened.payload[..], b"frames");
            for i in 0..sealed.len() {
                let mut bad = sealed.clone();
                bad[i] ^= 0x04;
                assert!(b.open(Instant::ZERO, BytesMut::from(&bad[..]), payload_offset, 2, Some(69_990)).is_none(), "byte {i}");
            }
            // Our own packets do not open with our receive key.
            assert!(a.open(Instant::ZERO, BytesMut::from(&sealed[..]), payload_offset, 2, Some(69_990)).is_none());
        }
    }

    #[test]
    fn key_update_is_followed_and_late_packets_still_open() {
        let (mut a, mut b) = pair(CipherSuite::Aes256Gcm);
        let t = Instant::ZERO;
        let interval = Duration::from_secs(60);
        // No update before the peer has spoken in the current phase.
        a.maybe_update(t + Duration::from_secs(61), interval);
        assert_eq!(a.key_updates, 0);
        let (p, off) = packet(&mut b, 0, 0, b"hello");
        assert!(a.open(t, BytesMut::from(&p[..]), off, 0, None).is_some());
        let (late, late_off) = packet(&mut a, 0, 1, b"old phase");
        a.maybe_update(t + Duration::from_secs(61), interval);
        assert_eq!(a.key_updates, 1);
        let (new, new_off) = packet(&mut a, 0, 2, b"new phase");
        // b follows on the first packet of the new phase, then opens a late one.
        let opened = b.open(t, BytesMut::from(&new[..]), new_off, 0, Some(0)).unwrap();
        assert_eq!(&opened.payload[..], b"new phase");
        assert_eq!(b.key_updates, 1);
        let opened = b.open(t, BytesMut::from(&late[..]), late_off, 0, Some(2)).unwrap();
        assert_eq!(&opened.payload[..], b"old phase");
        // b now seals in the new phase; a opens it and may update again later.
        let (reply, reply_off) = packet(&mut b, 0, 1, b"reply");
        assert_eq!(&a.open(t, BytesMut::from(&reply[..]), reply_off, 0, Some(0)).unwrap().payload[..], b"reply");
        a.maybe_update(t + Duration::from_secs(122), interval);
        assert_eq!(a.key_updates, 2);
        let (third, third_off) = packet(&mut a, 0, 3, b"third phase");
        assert_eq!(&b.open(t, BytesMut::from(&third[..]), third_off, 0, Some(2)).unwrap().payload[..], b"third phase");
    }

    #[test]
    fn a_forged_phase_flip_changes_nothing() {
        let (mut a, mut b) = pair(CipherSuite::ChaCha20Poly1305);
        let (mut p, off) = packet(&mut a, 0, 5, b"x");
        p[1] ^= KEY_PHASE_BIT;
        assert!(b.open(Instant::ZERO, BytesMut::from(&p[..]), off, 0, Some(4)).is_none());
        assert_eq!(b.key_updates, 0);
        let (p, off) = packet(&mut a, 0, 6, b"y");
        assert!(b.open(Instant::ZERO, BytesMut::from(&p[..]), off, 0, Some(4)).is_some());
    }
}
