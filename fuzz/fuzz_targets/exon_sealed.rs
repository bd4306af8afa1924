//! Exon's sealed datagram decoder: an authenticated node fed a real sealed
//! datagram altered by the input (bytes XORed in, truncated, or replaced by
//! the input outright), and the input itself split into datagrams, never
//! panics, delivers nothing from an altered datagram, and counts every
//! datagram it drops. The intact datagram still delivers afterwards.
#![no_main]

use std::sync::Arc;

use braid_core::Instant;
use braid_exon::secure::T_DATA;
use braid_exon::{AcceptAnyKey, Event, ExonNode, Identity, NodeConfig, Security};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fn drain(n: &mut ExonNode, now: Instant) -> Vec<Bytes> {
    if let Some(l) = n.clock_request() {
        n.clock_persisted(l);
    }
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = n.poll_transmit(now, &mut buf) {
        out.push(Bytes::copy_from_slice(&buf[..t.size]));
    }
    out
}

fn received(n: &mut ExonNode) -> usize {
    let mut k = 0;
    while let Some(e) = n.poll_event() {
        k += usize::from(matches!(e, Event::Received { .. }));
    }
    k
}

fuzz_target!(|data: &[u8]| {
    let (ka, kb) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
    let b_key = kb.public_key();
    let any = || Arc::new(AcceptAnyKey);
    let mut a = ExonNode::new(NodeConfig::default(), Security::authenticated(ka, any()), [3; 32], 0);
    let mut b = ExonNode::new(NodeConfig::default(), Security::authenticated(kb, any()), [4; 32], 0);
    let (sa, sb) = ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:1".parse().unwrap());
    let peer = a.add_peer(&b_key, sb);
    let now = Instant::from_nanos(1_000_000);
    // Handshake and slots.
    a.send(now, peer, Bytes::from_static(b"first")).unwrap();
    for _ in 0..4 {
        for d in drain(&mut a, now) {
            b.handle_datagram(now, sa, d);
        }
        for d in drain(&mut b, now) {
            a.handle_datagram(now, sb, d);
        }
    }
    received(&mut b);
    for k in 0..8u8 {
        a.send(now, peer, Bytes::from(vec![k; 32])).unwrap();
    }
    let Some(sealed) = drain(&mut a, now).into_iter().find(|d| d[0] == T_DATA) else {
        return;
    };
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bad = sealed.to_vec();
    match mode % 3 {
        0 => {
            for (i, x) in rest.iter().enumerate() {
                let at = i % bad.len();
                bad[at] ^= x;
            }
        }
        1 => bad.truncate(rest.len() % (bad.len() + 1)),
        _ => bad = rest.to_vec(),
    }
    let before = *b.stats();
    b.handle_datagram(now, sa, Bytes::from(bad.clone()));
    let after = *b.stats();
    let dropped = (after.security.auth_failed - before.security.auth_failed)
        + (after.security.unauthenticated - before.security.unauthenticated)
        + (after.security.replayed - before.security.replayed)
        + (after.malformed - before.malformed);
    if bad[..] != sealed[..] {
        assert_eq!(received(&mut b), 0, "an altered datagram delivered");
        // A datagram that still opened would be the sealed one itself.
        assert!(dropped >= 1 || bad.first().is_some_and(|&t| t != T_DATA));
    }
    b.handle_datagram(now, sa, sealed);
    for d in rest.split(|&x| x == 0xff) {
        b.handle_datagram(now, sa, Bytes::copy_from_slice(d));
    }
    let _ = drain(&mut b, now);
});
