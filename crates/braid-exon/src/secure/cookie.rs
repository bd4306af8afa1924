//! Cookie replies and mac2: WireGuard's defence of the responder's
//! Diffie-Hellman work under load (Donenfeld, *WireGuard*, NDSS 2017,
//! §5.4.4 for mac2, §5.4.7 for the cookie reply).
//!
//! mac1 only proves that a sender knows the receiver's public key, which
//! is public. Under load, a handshake packet must also carry a valid
//! `mac2 = MAC(cookie, packet up to mac2)`, where the cookie is
//! `MAC(secret, source address)` under a secret the receiver draws afresh
//! every [`SECRET_LIFETIME`]. A packet without one is answered only with a
//! cookie reply: the cookie encrypted with XChaCha20-Poly1305 under a key
//! derived from the receiver's public key, with the packet's mac1 as
//! associated data, so only the sender of that very packet (or someone who
//! saw it on the path) can read it. The reply costs a keyed hash and a
//! small AEAD, no Diffie-Hellman and no state; a retry with mac2 proves
//! the sender receives at its source address, so spoofed floods never
//! reach the Diffie-Hellman.
//!
//! [`HandshakeBudget`] says when a node is under load (see its doc).

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::{Instant, RngCore};
use braid_identity::PublicKey;
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305, XNonce};

use super::{mac1, mac_eq, MAC_LEN, T_COOKIE};

/// Bytes of a cookie (WireGuard's 16).
pub(crate) const COOKIE_LEN: usize = 16;
/// Bytes of XChaCha20's nonce, drawn at random per reply.
pub(crate) const NONCE_LEN: usize = 24;
/// Bytes of the Poly1305 tag around the encrypted cookie.
pub(crate) const AEAD_TAG_LEN: usize = 16;
/// How long a responder keeps one cookie secret (WireGuard: 2 minutes),
/// and so how long any cookie can be valid.
pub(crate) const SECRET_LIFETIME: Duration = Duration::from_secs(120);
/// How long a sender uses a cookie it received. The receiver may rotate
/// its secret earlier; then it answers with a fresh cookie.
pub(crate) const COOKIE_LIFETIME: Duration = SECRET_LIFETIME;

pub(crate) type Cookie = [u8; COOKIE_LEN];

/// The key that encrypts cookie replies sent by the node with `public`
/// (WireGuard's `HASH(LABEL-COOKIE ‖ S_pub)`): anyone can derive it, the
/// associated mac1 is what binds a reply to one packet.
pub(crate) fn reply_key(public: &PublicKey) -> [u8; 32] {
    blake3::derive_key("braid-exon v1 cookie", &public.to_bytes())
}

/// `mac2` over `body` (the packet up to mac2), keyed by `cookie`. BLAKE3
/// wants a 32-byte key: the 16-byte cookie is expanded by key derivation.
pub(crate) fn mac2(cookie: &Cookie, body: &[u8]) -> [u8; MAC_LEN] {
    mac1(&blake3::derive_key("braid-exon v1 mac2", cookie), body)
}

/// The cookie of `addr` under `secret`: address family, IP and port, so
/// it proves reception at exactly that source.
fn cookie_of(secret: &[u8; 32], addr: SocketAddr) -> Cookie {
    let mut a = [0u8; 1 + 16 + 2];
    let len = match addr {
        SocketAddr::V4(v4) => {
            a[0] = 4;
            a[1..5].copy_from_slice(&v4.ip().octets());
            a[5..7].copy_from_slice(&v4.port().to_be_bytes());
            7
        }
        SocketAddr::V6(v6) => {
            a[0] = 6;
            a[1..17].copy_from_slice(&v6.ip().octets());
            a[17..19].copy_from_slice(&v6.port().to_be_bytes());
            19
        }
    };
    mac1(secret, &a[..len])
}

/// The receiver's side: the rotating secret that cookies are made from.
/// Nothing is kept per sender.
#[derive(Default)]
pub(crate) struct CookieSecret {
    secret: [u8; 32],
    /// When `secret` was drawn; none yet before the first cookie.
    drawn: Option<Instant>,
}

impl CookieSecret {
    fn fresh(&self, now: Instant) -> bool {
        self.drawn
            .is_some_and(|t| now.saturating_duration_since(t) < SECRET_LIFETIME)
    }

    /// The cookie for `addr`, drawing a new secret from `rng` (the node's
    /// seeded randomness) when the old one is [`SECRET_LIFETIME`] old.
    pub(crate) fn cookie(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        addr: SocketAddr,
    ) -> Cookie {
        if !self.fresh(now) {
            rng.fill_bytes(&mut self.secret);
            self.drawn = Some(now);
        }
        cookie_of(&self.secret, addr)
    }

    /// Is `mac` the mac2 of `body` for a cookie of `addr` under the current
    /// secret? A cookie of another address, or of a secret since rotated,
    /// is not.
    pub(crate) fn check(&self, now: Instant, addr: SocketAddr, body: &[u8], mac: &[u8]) -> bool {
        self.fresh(now) && mac_eq(&mac2(&cookie_of(&self.secret, addr), body), mac)
    }
}

/// A cookie reply (WireGuard §5.4.7): type, the receiver index (the index
/// the packet answered was sent under), nonce, encrypted cookie and tag.
pub(crate) fn seal_reply(
    key: &[u8; 32],
    receiver: u32,
    nonce: [u8; NONCE_LEN],
    cookie: &Cookie,
    answered_mac1: &[u8],
) -> Vec<u8> {
    let mut buf = *cookie;
    let tag = XChaCha20Poly1305::new(key.into())
        .encrypt_in_place_detached(XNonce::from_slice(&nonce), answered_mac1, &mut buf)
        .expect("a 16-byte message is far below XChaCha20's limit");
    let mut out = Vec::with_capacity(super::COOKIE_REPLY_LEN);
    out.push(T_COOKIE);
    out.extend_from_slice(&receiver.to_be_bytes());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&buf);
    out.extend_from_slice(&tag);
    out
}

/// The receiver index of a cookie reply of the right length.
pub(crate) fn reply_receiver(packet: &[u8]) -> Option<u32> {
    (packet.len() == super::COOKIE_REPLY_LEN)
        .then(|| u32::from_be_bytes([packet[1], packet[2], packet[3], packet[4]]))
}

/// The cookie in a reply from the holder of `key`'s public key to the
/// packet whose mac1 was `answered_mac1`; none if it does not open.
pub(crate) fn open_reply(key: &[u8; 32], packet: &[u8], answered_mac1: &[u8]) -> Option<Cookie> {
    reply_receiver(packet)?;
    let nonce = &packet[5..5 + NONCE_LEN];
    let mut cookie: Cookie = packet[5 + NONCE_LEN..5 + NONCE_LEN + COOKIE_LEN]
        .try_into()
        .ok()?;
    let tag = Tag::from_slice(&packet[5 + NONCE_LEN + COOKIE_LEN..]);
    XChaCha20Poly1305::new(key.into())
        .decrypt_in_place_detached(XNonce::from_slice(nonce), answered_mac1, &mut cookie, tag)
        .ok()?;
    Some(cookie)
}

/// When a node is under load: it did more than `rate` handshake
/// Diffie-Hellmans in about the last second. A token bucket of `rate`
/// tokens, refilled at `rate` per second from the `now`s the caller
/// passes (no clock): each initiation that reaches the Diffie-Hellman takes
/// a token (whether it then verifies or not: the work is done either way),
/// and the node is under load while the bucket is empty. So it serves
/// bursts of up to `rate` at once, and `rate` a second sustained; beyond
/// that, every initiation must prove its source address first. A `rate`
/// of 0 demands a cookie always.
pub(crate) struct HandshakeBudget {
    rate: u64,
    /// Tokens in billionths, so that refills by the nanosecond are exact.
    nano_tokens: u64,
    last: Instant,
}

const NANOS: u64 = 1_000_000_000;

impl HandshakeBudget {
    pub(crate) fn new(rate: u32) -> HandshakeBudget {
        let rate = u64::from(rate);
        HandshakeBudget {
            rate,
            nano_tokens: rate * NANOS,
            last: Instant::ZERO,
        }
    }

    fn refill(&mut self, now: Instant) {
        // At most a second's worth: the bucket holds no more (and the
        // product stays far inside u64 for any u32 rate).
        let elapsed = now
            .saturating_duration_since(self.last)
            .as_nanos()
            .min(u128::from(NANOS)) as u64;
        self.nano_tokens = (self.nano_tokens + elapsed * self.rate).min(self.rate * NANOS);
        if now > self.last {
            self.last = now;
        }
    }

    /// True while the bucket is empty.
    pub(crate) fn exhausted(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.nano_tokens < NANOS
    }

    /// A Diffie-Hellman was done.
    pub(crate) fn spend(&mut self, now: Instant) {
        self.refill(now);
        self.nano_tokens = self.nano_tokens.saturating_sub(NANOS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::{Rng, SeedableRng};
    use braid_identity::Identity;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_cookie_passes_only_for_its_address_and_its_secret(
            seed in any::<u64>(),
            body in proptest::collection::vec(any::<u8>(), 0..200),
            port_a in 1u16.., port_b in 1u16..,
            ip_b in any::<[u8; 4]>(),
        ) {
            let mut rng = Rng::seed_from_u64(seed);
            let mut s = CookieSecret::default();
            let t0 = Instant::from_nanos(5);
            let a = SocketAddr::from(([10, 0, 0, 1], port_a));
            let b = SocketAddr::from((ip_b, port_b));
            let c = s.cookie(t0, &mut rng, a);
            let m = mac2(&c, &body);
            prop_assert!(s.check(t0, a, &body, &m));
            prop_assert_eq!(s.check(t0, b, &body, &m), a == b);
            let mut other = body.clone();
            other.push(0);
            prop_assert!(!s.check(t0, a, &other, &m));
            // Once the secret is SECRET_LIFETIME old, the cookie is dead,
            // and a fresh secret makes a different one.
            let later = t0 + SECRET_LIFETIME;
            prop_assert!(!s.check(later, a, &body, &m));
            let c2 = s.cookie(later, &mut rng, a);
            prop_assert_ne!(c, c2);
            prop_assert!(!s.check(later, a, &body, &m));
            prop_assert!(s.check(later, a, &body, &mac2(&c2, &body)));
        }

        #[test]
        fn a_reply_opens_only_with_its_key_and_mac1_and_unaltered(
            cookie in any::<[u8; 16]>(),
            nonce in any::<[u8; 24]>(),
            mac in any::<[u8; 16]>(),
            flip in 0usize..super::super::COOKIE_REPLY_LEN,
            bit in 0u8..8,
        ) {
            let key = reply_key(&Identity::from_seed(&[1; 32]).public_key());
            let reply = seal_reply(&key, 7, nonce, &cookie, &mac);
            prop_assert_eq!(reply.len(), super::super::COOKIE_REPLY_LEN);
            prop_assert_eq!(reply_receiver(&reply), Some(7));
            prop_assert_eq!(open_reply(&key, &reply, &mac), Some(cookie));
            let other = reply_key(&Identity::from_seed(&[2; 32]).public_key());
            prop_assert_eq!(open_reply(&other, &reply, &mac), None);
            let mut wrong_mac = mac;
            wrong_mac[0] ^= 1;
            prop_assert_eq!(open_reply(&key, &reply, &wrong_mac), None);
            let mut bad = reply.clone();
            bad[flip] ^= 1 << bit;
            // The type and index are not authenticated: the index only
            // finds the handshake, whose mac1 then must match.
            if flip >= 5 {
                prop_assert_eq!(open_reply(&key, &bad, &mac), None);
            }
            prop_assert_eq!(open_reply(&key, &reply[..reply.len() - 1], &mac), None);
        }

        #[test]
        fn the_budget_allows_rate_per_second_and_no_more(
            rate in 0u32..5_000,
            gaps in proptest::collection::vec(0u64..50_000_000, 1..400),
        ) {
            // Spend whenever allowed, at arbitrary times: over any stretch
            // from the start, the spending is at most `rate` (the initial
            // burst) plus `rate` per second elapsed.
            let mut b = HandshakeBudget::new(rate);
            let mut now = Instant::ZERO;
            let mut spent = 0u64;
            for g in gaps {
                now += Duration::from_nanos(g);
                while !b.exhausted(now) {
                    b.spend(now);
                    spent += 1;
                }
                let allowed = u64::from(rate)
                    + (u128::from(rate) * now.as_nanos() as u128 / u128::from(NANOS)) as u64;
                prop_assert!(spent <= allowed, "{} > {}", spent, allowed);
            }
            // And it is not stingy: a full bucket after a quiet second.
            let quiet = now + Duration::from_secs(1);
            let mut burst = 0u32;
            while !b.exhausted(quiet) {
                b.spend(quiet);
                burst += 1;
            }
            prop_assert_eq!(burst, rate);
        }
    }

    #[test]
    fn a_zero_rate_is_always_under_load() {
        let mut b = HandshakeBudget::new(0);
        assert!(b.exhausted(Instant::ZERO));
        assert!(b.exhausted(Instant::from_nanos(10 * NANOS)));
    }
}
