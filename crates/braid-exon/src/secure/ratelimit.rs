//! The per-source limit on handshake work under load: WireGuard's
//! rate limiter (Linux `drivers/net/wireguard/ratelimiter.c`, which backs
//! the cookie defence of Donenfeld, *WireGuard*, NDSS 2017, §5.3 and
//! §5.4.7) for initiations that *proved* their source address with a
//! valid mac2.
//!
//! mac2 (§5.4.7, [`super::cookie`]) stops spoofed floods, but a sender
//! that really receives at its address (a host it controls, or many) can
//! still send initiations with a valid mac2 as fast as it likes, and each
//! costs the responder its Diffie-Hellmans (≈ 240 µs). So under load, each
//! source gets a token bucket: [`SessionConfig::per_source_burst`]
//! initiations at once, [`SessionConfig::per_source_rate`] a second
//! sustained; beyond that, its initiations are dropped before any work.
//!
//! A source is an IPv4 address, or an IPv6 address's /64 (one host is
//! usually given a whole /64, so finer keys would give it 2^64 buckets);
//! an IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4
//! peer) counts as its IPv4 address, else every IPv4 peer of such a socket
//! would share the bucket of `::/64`.
//!
//! Memory: at most [`SessionConfig::max_rate_sources`] entries in a map
//! with a keyed hash (SipHash-1-3, its key derived from the node's seed, so
//! a sender cannot pick sources whose hashes collide). An entry whose
//! bucket has refilled is *expired*: it says nothing a fresh entry would
//! not say, so dropping it changes no decision. Expired entries are
//! swept only when a new source finds the table full, and then at most
//! once every quarter of a refill time, so the cost is one pass over the
//! table per sweep gap, never a pass per packet. A new source that finds
//! the table full of unexpired entries is refused. That is safe because
//! only initiations that passed mac2 under load reach the table: every
//! entry is a source that proved it receives at its address within the
//! last refill time, so filling the table takes that many real addresses
//! (IPv4 hosts or IPv6 /64s) sending at once, not spoofing; and a refused
//! initiation costs its sender only a retry (the handshake's retransmission
//! timer), while the node is under load.
//!
//! [`SessionConfig::per_source_rate`]: super::SessionConfig::per_source_rate
//! [`SessionConfig::per_source_burst`]: super::SessionConfig::per_source_burst
//! [`SessionConfig::max_rate_sources`]: super::SessionConfig::max_rate_sources

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::Duration;

use braid_core::Instant;
use siphasher::sip::SipHasher13;

use super::SessionConfig;

const NANOS: u64 = 1_000_000_000;

/// Whom a bucket belongs to: an IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    V4(u32),
    V6Prefix(u64),
}

impl Source {
    pub(crate) fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// A token bucket in nanoseconds of credit, as in WireGuard's: a packet
/// costs `NANOS / rate`, credit accrues one per nanosecond up to `burst`
/// packets' worth.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: u64,
    last: Instant,
}

/// Bytes one entry of the table takes: key and bucket, one control byte,
/// and the 1/8 of slots the map keeps empty, rounded up.
const ENTRY_BYTES: usize =
    (std::mem::size_of::<(Source, Bucket)>() + 1) * 8 / 7 + 1;

/// SipHash-1-3 under a fixed secret key: the table's hasher.
#[derive(Clone)]
struct KeyedSip(u64, u64);

impl BuildHasher for KeyedSip {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.0, self.1)
    }
}

/// What the limiter says of one initiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within its source's budget: go on to the Diffie-Hellman.
    Allowed,
    /// Its source spent its burst and the refill since.
    OverRate,
    /// A new source, and the table is full of unexpired ones.
    TableFull,
}

/// The per-source token buckets (see the module doc). Sans-IO: every call
/// takes the time.
pub(crate) struct SourceLimiter {
    /// Nanoseconds of credit one initiation costs; 0: no limit.
    cost: u64,
    /// Most credit a bucket holds (`burst` initiations' worth): also how
    /// long an idle bucket takes to refill, i.e. to expire.
    max_tokens: u64,
    max_sources: usize,
    table: HashMap<Source, Bucket, KeyedSip>,
    /// No sweep before this (see the module doc).
    next_sweep: Instant,
}

impl SourceLimiter {
    /// A limiter per `cfg`, its hash keyed from `seed` (the node's seed;
    /// derived apart, so the node's random stream is not consumed).
    pub(crate) fn new(cfg: &SessionConfig, seed: &[u8; 32]) -> SourceLimiter {
        let key = blake3::derive_key("braid-exon v1 rate limiter", seed);
        let half = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().expect("8 bytes"));
        let rate = u64::from(cfg.per_source_rate);
        let cost = if rate == 0 { 0 } else { NANOS / rate.min(NANOS) };
        SourceLimiter {
            cost,
            max_tokens: cost.saturating_mul(u64::from(cfg.per_source_burst.max(1))),
            max_sources: cfg.max_rate_sources,
            table: HashMap::with_hasher(KeyedSip(half(0), half(8))),
            next_sweep: Instant::ZERO,
        }
    }

    /// Takes a token from `ip`'s bucket if it has one.
    pub(crate) fn check(&mut self, now: Instant, ip: IpAddr) -> Verdict {
        if self.cost == 0 {
            return Verdict::Allowed;
        }
        let source = Source::of(ip);
        if let Some(b) = self.table.get_mut(&source) {
            let elapsed = now.saturating_duration_since(b.last).as_nanos();
            let tokens = u128::from(b.tokens)
                .saturating_add(elapsed)
                .min(u128::from(self.max_tokens)) as u64;
            if now > b.last {
                b.last = now;
            }
            return if tokens >= self.cost {
                b.tokens = tokens - self.cost;
                Verdict::Allowed
            } else {
                b.tokens = tokens;
                Verdict::OverRate
            };
        }
        if self.table.len() >= self.max_sources {
            self.sweep(now);
            if self.table.len() >= self.max_sources {
                return Verdict::TableFull;
            }
        }
        // A new source starts with a full bucket, less this initiation.
        self.table.insert(source, Bucket { tokens: self.max_tokens - self.cost, last: now });
        Verdict::Allowed
    }

    /// Drops expired entries, unless a sweep ran within the last quarter
    /// refill time: one pass over the table per gap at most, whatever the
    /// packet rate. (An entry that expired since the last sweep may so
    /// keep a new source out for up to that gap.)
    fn sweep(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        let full = self.max_tokens;
        self.table.retain(|_, b| {
            u128::from(b.tokens) + now.saturating_duration_since(b.last).as_nanos() < u128::from(full)
        });
        self.next_sweep = now + Duration::from_nanos(full / 4);
    }

    /// Sources in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Bytes the table holds, an upper estimate from its capacity (which
    /// stays below twice `max_rate_sources`: with the default 4,096, at
    /// most 8,192 slots of 33 bytes, about 270 KB).
    pub(crate) fn state_bytes(&self) -> usize {
        self.table.capacity() * ENTRY_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn cfg(rate: u32, burst: u32, max: usize) -> SessionConfig {
        SessionConfig {
            per_source_rate: rate,
            per_source_burst: burst,
            max_rate_sources: max,
            ..SessionConfig::default()
        }
    }

    fn v4(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(i))
    }

    fn at_ms(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// A reference with no table limit and no sweeping: the limiter must
    /// decide exactly as it does while its table has room.
    struct Model {
        cost: u128,
        max: u128,
        buckets: HashMap<Source, (u128, u128)>,
    }

    impl Model {
        fn check(&mut self, now: u128, ip: IpAddr) -> bool {
            let (max, cost) = (self.max, self.cost);
            let (tokens, last) = self.buckets.entry(Source::of(ip)).or_insert((max, now));
            let t = (*tokens + now.saturating_sub(*last)).min(max);
            *last = (*last).max(now);
            let ok = t >= cost;
            *tokens = if ok { t - cost } else { t };
            ok
        }
    }

    proptest! {
        /// Any sequence of initiations from six sources, at arbitrary
        /// times, with a table of `max`: every initiation not refused for
        /// want of room is decided as the unbounded model decides it (so
        /// dropping expired entries changes no decision); no source ever
        /// gets more than burst + rate × elapsed.
        #[test]
        fn decisions_match_the_token_bucket_model(
            rate in 1u32..200,
            burst in 1u32..10,
            max in 1usize..7,
            steps in proptest::collection::vec((0u64..200_000_000, 0u32..6), 1..500),
        ) {
            let c = cfg(rate, burst, max);
            let mut l = SourceLimiter::new(&c, &[7; 32]);
            let cost = u128::from(NANOS / u64::from(rate));
            let mut m = Model { cost, max: cost * u128::from(burst), buckets: HashMap::new() };
            let mut now = 0u64;
            let mut allowed = [0u64; 6];
            let mut first = [None; 6];
            for (gap, src) in steps {
                now += gap;
                let ip = v4(0x0a00_0000 + src);
                let got = l.check(Instant::from_nanos(now), ip);
                // Refused for want of room: dropped untouched, as the
                // model's bucket is left untouched.
                if got == Verdict::TableFull {
                    prop_assert!(max < 6);
                    continue;
                }
                prop_assert_eq!(got == Verdict::Allowed, m.check(u128::from(now), ip));
                let s = src as usize;
                let t0 = *first[s].get_or_insert(now);
                if got == Verdict::Allowed {
                    allowed[s] += 1;
                }
                let bound = u64::from(burst) + u64::from(rate) * (now - t0) / NANOS;
                prop_assert!(allowed[s] <= bound + 1, "{} > {}", allowed[s], bound);
            }
        }

        /// Whatever the sources and times, the table never holds more than
        /// its bound.
        #[test]
        fn the_table_never_exceeds_its_bound(
            max in 0usize..50,
            steps in proptest::collection::vec((0u64..100_000_000, any::<u32>()), 1..400),
        ) {
            let mut l = SourceLimiter::new(&cfg(20, 5, max), &[1; 32]);
            let mut now = Instant::ZERO;
            for (gap, ip) in steps {
                now += Duration::from_nanos(gap);
                l.check(now, v4(ip % 64));
                prop_assert!(l.len() <= max);
            }
        }
    }

    #[test]
    fn a_burst_then_the_rate() {
        // 20 a second, burst 5: five at once, then one per 50 ms.
        let mut l = SourceLimiter::new(&cfg(20, 5, 16), &[0; 32]);
        let ip = v4(1);
        let t0 = at_ms(1_000);
        for _ in 0..5 {
            assert_eq!(l.check(t0, ip), Verdict::Allowed);
        }
        assert_eq!(l.check(t0, ip), Verdict::OverRate);
        assert_eq!(l.check(at_ms(1_049), ip), Verdict::OverRate);
        assert_eq!(l.check(at_ms(1_050), ip), Verdict::Allowed);
        assert_eq!(l.check(at_ms(1_050), ip), Verdict::OverRate);
        // A long pause refills at most the burst.
        let later = at_ms(60_000);
        let n = (0..100).take_while(|_| l.check(later, ip) == Verdict::Allowed).count();
        assert_eq!(n, 5);
        // Over 10 s of constant pressure: 5 + 20 × 10, give or take one.
        let mut allowed = 0;
        let mut t = at_ms(120_000);
        for _ in 0..10_000 {
            t += Duration::from_millis(1);
            allowed += usize::from(l.check(t, ip) == Verdict::Allowed);
        }
        assert!((204..=205).contains(&allowed), "{allowed}");
    }

    #[test]
    fn sources_are_independent() {
        let mut l = SourceLimiter::new(&cfg(20, 5, 16), &[0; 32]);
        let t = at_ms(5);
        for _ in 0..5 {
            assert_eq!(l.check(t, v4(1)), Verdict::Allowed);
        }
        assert_eq!(l.check(t, v4(1)), Verdict::OverRate);
        for _ in 0..5 {
            assert_eq!(l.check(t, v4(2)), Verdict::Allowed);
        }
        assert_eq!(l.check(t, v4(2)), Verdict::OverRate);
    }

    #[test]
    fn ipv6_is_grouped_by_its_64_and_mapped_ipv4_by_its_address() {
        let mut l = SourceLimiter::new(&cfg(20, 5, 16), &[0; 32]);
        let t = at_ms(5);
        let host = |low: u64| IpAddr::V6(Ipv6Addr::from((0x2001_0db8_0000_0001u128 << 64) | u128::from(low)));
        // Five addresses of one /64 spend one bucket.
        for i in 0..5 {
            assert_eq!(l.check(t, host(i * 7_919 + 1)), Verdict::Allowed);
        }
        assert_eq!(l.check(t, host(u64::MAX)), Verdict::OverRate);
        // The next /64 is another source.
        let next = IpAddr::V6(Ipv6Addr::from(0x2001_0db8_0000_0002u128 << 64));
        assert_eq!(l.check(t, next), Verdict::Allowed);
        // ::ffff:10.0.0.1 is 10.0.0.1, and not ::ffff:10.0.0.2.
        let mapped = |a: [u8; 4]| IpAddr::V6(Ipv4Addr::from(a).to_ipv6_mapped());
        for _ in 0..5 {
            assert_eq!(l.check(t, mapped([10, 0, 0, 1])), Verdict::Allowed);
        }
        assert_eq!(l.check(t, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))), Verdict::OverRate);
        assert_eq!(l.check(t, mapped([10, 0, 0, 2])), Verdict::Allowed);
    }

    #[test]
    fn a_hundred_thousand_sources_stay_within_the_bound() {
        let c = cfg(20, 5, 4_096);
        let mut l = SourceLimiter::new(&c, &[3; 32]);
        let (mut t, mut bytes_max, mut full) = (at_ms(1), 0, 0);
        for i in 0..100_000u32 {
            // 100,000 a second: the table fills within 41 ms, and most new
            // sources find it full of live entries.
            t += Duration::from_micros(10);
            if l.check(t, v4(0x0b00_0000 + i)) == Verdict::TableFull {
                full += 1;
            }
            assert!(l.len() <= c.max_rate_sources);
            bytes_max = bytes_max.max(l.state_bytes());
        }
        assert!(full > 50_000, "{full}");
        // Under 8,192 slots of ENTRY_BYTES.
        assert!(bytes_max <= 8_192 * ENTRY_BYTES, "{bytes_max}");
        const { assert!(ENTRY_BYTES <= 40) };
        eprintln!("{} entries, {bytes_max} bytes at most", l.len());
    }

    #[test]
    fn expired_entries_make_room_for_new_sources() {
        let mut l = SourceLimiter::new(&cfg(20, 5, 100), &[0; 32]);
        let t0 = at_ms(10);
        for i in 0..100 {
            assert_eq!(l.check(t0, v4(i)), Verdict::Allowed);
        }
        assert_eq!(l.check(t0, v4(1_000)), Verdict::TableFull);
        // Source 0 keeps sending: its entry stays alive. The others have
        // refilled after the refill time (5 × 50 ms): a sweep drops them.
        for ms in (60..=250).step_by(60) {
            assert_eq!(l.check(at_ms(10 + ms), v4(0)), Verdict::Allowed);
        }
        let t1 = at_ms(10 + 251);
        assert_eq!(l.check(t1, v4(1_000)), Verdict::Allowed);
        assert_eq!(l.len(), 2, "source 0 and the newcomer");
        // A dropped entry had refilled: its source comes back with a full
        // bucket, as it would have had.
        for _ in 0..5 {
            assert_eq!(l.check(t1, v4(1)), Verdict::Allowed);
        }
        assert_eq!(l.check(t1, v4(1)), Verdict::OverRate);
        for i in 2_000..2_097 {
            assert_eq!(l.check(t1, v4(i)), Verdict::Allowed);
        }
        assert_eq!(l.len(), 100);
        // Full of fresh entries: a new source is refused while they are
        // fresh. A source seen once has spent one token: 50 ms later its
        // bucket is full again, and the next sweep (62.5 ms after the
        // last) drops it.
        assert_eq!(l.check(t1, v4(9_999)), Verdict::TableFull);
        assert_eq!(l.check(t1 + Duration::from_millis(40), v4(9_999)), Verdict::TableFull);
        assert_eq!(l.check(t1 + Duration::from_millis(63), v4(9_999)), Verdict::Allowed);
        assert_eq!(l.len(), 2, "source 1 (emptied: still fresh) and the newcomer");
    }

    #[test]
    fn a_zero_rate_limits_nothing_and_keeps_nothing() {
        let mut l = SourceLimiter::new(&cfg(0, 5, 16), &[0; 32]);
        for _ in 0..1_000 {
            assert_eq!(l.check(at_ms(1), v4(1)), Verdict::Allowed);
        }
        assert_eq!((l.len(), l.state_bytes()), (0, 0));
    }
}
