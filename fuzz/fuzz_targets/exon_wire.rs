//! Exon's datagram decoder (a batch of many envelopes, acknowledgements and
//! control frames) is total: any byte string decodes or is refused with a
//! typed error, never a panic; whatever decodes re-encodes to a datagram
//! that decodes to the same frames; and a node fed the input as datagrams
//! (split at 0xFF 0xFF markers) counts the malformed ones and never panics.
#![no_main]

use braid_core::Instant;
use braid_exon::wire::{self, Datagram};
use braid_exon::{ExonNode, NodeConfig, NodeId, Security};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Datagram::decode(Bytes::copy_from_slice(data)) {
        let mut again = Vec::new();
        wire::encode_header(&mut again, d.src, d.dst);
        for f in &d.frames {
            let before = again.len();
            f.encode(&mut again);
            assert_eq!(again.len() - before, f.encoded_len());
        }
        let d2 = Datagram::decode(Bytes::from(again)).expect("a re-encoded datagram decodes");
        assert_eq!(d2.frames, d.frames);
    }
    // The bare protocol (insecure), so that the frames themselves are
    // reached; the sealed form has its own target (exon_sealed).
    let mut node = ExonNode::new(
        NodeConfig::default(),
        Security::InsecureNoAuth { id: NodeId(2) },
        [0; 32],
        0,
    );
    let from = "192.0.2.1:4000".parse().unwrap();
    let mut now = Instant::from_nanos(1_000_000_000);
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let mut fed = 0;
    for datagram in data.split(|&b| b == 0xff) {
        // The input's bytes after a header aimed at this node, so frames
        // are reached, not only the header checks.
        let mut d = Vec::with_capacity(wire::HEADER_LEN + datagram.len());
        wire::encode_header(&mut d, NodeId(1), NodeId(2));
        d.extend_from_slice(datagram);
        node.handle_datagram(now, from, Bytes::from(d));
        fed += 1;
        if let Some(limit) = node.clock_request() {
            node.clock_persisted(limit);
        }
        while node.poll_transmit_batch(now, &mut buf, 8).is_some() {}
        node.poll_events(&mut events);
        now = now + std::time::Duration::from_millis(7);
        node.handle_timeout(now);
    }
    assert!(node.stats().malformed <= fed);
});
