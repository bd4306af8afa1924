//! An endpoint fed arbitrary datagrams (and its own timers) never panics.
#![no_main]

use braid_core::Instant;
use braid_proto::{Endpoint, EndpointConfig};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut server = Endpoint::new(EndpointConfig::default(), 1);
    let from = "192.0.2.1:4000".parse().unwrap();
    let mut now = Instant::from_nanos(1_000_000_000);
    let mut buf = Vec::new();
    // Split the input into datagrams at 0xFF 0xFF markers.
    for datagram in data.split(|&b| b == 0xff) {
        server.handle_datagram(now, from, Bytes::copy_from_slice(datagram));
        while server.poll_transmit(now, 4, &mut buf).is_some() {}
        now = now + std::time::Duration::from_millis(7);
        server.handle_timeout(now);
    }
});
