//! Connect, accept, send, receive and close on 127.0.0.1, each test bounded
//! in time.

mod common;

use std::time::Duration;

use braid_net::{Bytes, CloseReason, ConnectionError, Endpoint, EndpointConfig, NetError, TransportConfig};
use common::{bounded, loopback, pair, random_bytes, spawn_echo_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_send_recv_close() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    assert_eq!(server_addr.ip(), loopback().ip());
    assert_ne!(server_addr.port(), 0);
    bounded(20, "echo round trip", async {
        let accept = tokio::spawn({
            let server = server.clone();
            async move { server.accept().await.expect("a connection") }
        });
        let conn = client.connect(server_addr).await.unwrap();
        assert_eq!(conn.remote_addr(), server_addr);
        let served = accept.await.unwrap();
        assert_eq!(served.remote_addr(), client.local_addr());

        conn.send_message(&b"hello"[..]).await.unwrap();
        let got = served.recv_message().await.unwrap();
        assert_eq!(&got[..], b"hello");
        served.send_message(Bytes::from_static(b"world")).await.unwrap();
        assert_eq!(&conn.recv_message().await.unwrap()[..], b"world");

        conn.close().await.unwrap();
        // Closing twice is harmless.
        conn.close().await.unwrap();
        match served.recv_message().await {
            Err(ConnectionError::Closed(CloseReason::Remote { .. })) => {}
            other => panic!("expected a remote close, got {other:?}"),
        }
        assert!(matches!(conn.send_message(&b"late"[..]).await, Err(ConnectionError::Closed(_))));
        assert!(matches!(conn.recv_message().await, Err(ConnectionError::Closed(CloseReason::Local))));
        assert!(matches!(served.closed().await, CloseReason::Remote { .. }));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_close_delivers_everything() {
    // A small send buffer, so the sender really waits for acknowledgements.
    let mut config = EndpointConfig::default();
    config.transport.send_buffer = 256 << 10;
    let (server, client) = pair(config);
    let server_addr = server.local_addr();
    const COUNT: u64 = 300;
    bounded(60, "graceful close", async {
        let reader = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            let mut n = 0;
            loop {
                match conn.recv_message().await {
                    Ok(msg) => {
                        assert_eq!(msg, random_bytes(n, 10_000 + n as usize), "message {n}");
                        n += 1;
                    }
                    Err(ConnectionError::Closed(CloseReason::Remote { .. })) => return n,
                    Err(e) => panic!("unexpected error after {n} messages: {e}"),
                }
            }
        });
        let conn = client.connect(server_addr).await.unwrap();
        for i in 0..COUNT {
            conn.send_message(random_bytes(i, 10_000 + i as usize)).await.unwrap();
        }
        // Resolves only once everything is acknowledged.
        conn.close().await.unwrap();
        let stats = conn.stats();
        let payload: u64 = (0..COUNT).map(|i| 10_000 + i).sum();
        assert_eq!(stats.messages_sent, COUNT);
        // Stream bytes include the messages' framing.
        assert!(stats.stream_bytes_acked >= payload, "{stats:?}");
        assert_eq!(stats.bytes_in_flight, 0, "{stats:?}");
        assert_eq!(reader.await.unwrap(), COUNT);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_message() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    spawn_echo_server(server);
    bounded(60, "16 MiB echo", async {
        let conn = client.connect(server_addr).await.unwrap();
        let msg = random_bytes(16, 16 << 20);
        conn.send_message(msg.clone()).await.unwrap();
        conn.send_message(&b"after"[..]).await.unwrap();
        let back = conn.recv_message().await.unwrap();
        assert_eq!(back.len(), msg.len());
        assert!(back == msg, "16 MiB message corrupted");
        assert_eq!(&conn.recv_message().await.unwrap()[..], b"after");
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_after_peer_closed_returns_queued_messages_then_closed() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    bounded(30, "drain after close", async {
        let accept = tokio::spawn(async move { server.accept().await.unwrap() });
        let conn = client.connect(server_addr).await.unwrap();
        for i in 0..50u64 {
            conn.send_message(random_bytes(i, 1000 * i as usize + 1)).await.unwrap();
        }
        // Everything is acknowledged, hence held by the server's endpoint,
        // before the server application reads anything.
        conn.close().await.unwrap();
        let served = accept.await.unwrap();
        assert!(matches!(served.closed().await, CloseReason::Remote { .. }));
        for i in 0..50u64 {
            let msg = served.recv_message().await.unwrap();
            assert_eq!(msg, random_bytes(i, 1000 * i as usize + 1), "message {i}");
        }
        match served.recv_message().await {
            Err(ConnectionError::Closed(CloseReason::Remote { .. })) => {}
            other => panic!("expected Closed after the queued messages, got {other:?}"),
        }
        // And it stays closed; the counters survive the endpoint forgetting
        // the connection.
        assert!(matches!(served.recv_message().await, Err(ConnectionError::Closed(_))));
        assert_eq!(served.stats().messages_received, 50);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_are_counted() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    spawn_echo_server(server.clone());
    bounded(30, "stats", async {
        let conn = client.connect(server_addr).await.unwrap();
        for i in 0..20u64 {
            conn.send_message(random_bytes(i, 5000)).await.unwrap();
        }
        for _ in 0..20 {
            assert_eq!(conn.recv_message().await.unwrap().len(), 5000);
        }
        let stats = conn.stats();
        assert_eq!(stats.messages_sent, 20);
        assert_eq!(stats.messages_received, 20);
        // Stream bytes include the messages' framing.
        assert!(stats.stream_bytes_received >= 20 * 5000, "{stats:?}");
        assert!(stats.packets_sent >= 20 * 5000 / 1452, "{stats:?}");
        assert!(stats.packets_received > 0 && stats.bytes_received >= 20 * 5000, "{stats:?}");
        assert!(stats.smoothed_rtt > Duration::ZERO && stats.cwnd > 0, "{stats:?}");

        let c = client.stats();
        assert_eq!(c.connections_initiated, 1);
        assert_eq!(c.connections_open, 1);
        assert!(c.datagrams_sent >= stats.packets_sent && c.bytes_sent >= stats.bytes_sent, "{c:?}");
        assert!(c.datagrams_received > 0 && c.bytes_received >= 20 * 5000, "{c:?}");
        let s = server.stats();
        assert_eq!(s.connections_accepted, 1);
        assert!(s.bytes_received >= 20 * 5000, "{s:?}");
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_silent_port_times_out() {
    // Take a free port and release it: nobody listens there.
    let port = std::net::UdpSocket::bind(loopback()).unwrap().local_addr().unwrap();
    let mut config = EndpointConfig { accept_incoming: false, ..Default::default() };
    config.transport.handshake_timeout = Duration::from_millis(300);
    config.transport.initial_rtt = Duration::from_millis(50);
    let client = Endpoint::bind_with(loopback(), config).unwrap();
    let started = std::time::Instant::now();
    let err = bounded(10, "handshake timeout", client.connect(port)).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(matches!(err, ConnectionError::Closed(CloseReason::HandshakeTimeout)), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(250), "gave up too early: {:?}", started.elapsed());
    // The failed attempt left nothing behind.
    bounded(5, "cleanup", async {
        while client.stats().connections_open != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_close_stops_accepting_and_connecting() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    bounded(30, "endpoint close", async {
        let accept = tokio::spawn({
            let server = server.clone();
            async move { server.accept().await }
        });
        let conn = client.connect(server_addr).await.unwrap();
        let served = accept.await.unwrap().expect("accepted");
        conn.send_message(&b"before close"[..]).await.unwrap();
        assert_eq!(&served.recv_message().await.unwrap()[..], b"before close");

        let waiting = tokio::spawn({
            let server = server.clone();
            async move { server.accept().await }
        });
        server.close();
        assert!(waiting.await.unwrap().is_none());
        assert!(server.accept().await.is_none());
        assert!(matches!(server.connect(client.local_addr()).await, Err(ConnectionError::EndpointClosed)));
        // The server's connections were closed gracefully.
        assert_eq!(served.closed().await, CloseReason::Local);
        assert!(matches!(conn.recv_message().await, Err(ConnectionError::Closed(CloseReason::Remote { .. }))));
        drop(served);
        server.wait_idle().await;
        // A client endpoint never accepts.
        assert!(client.accept().await.is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_message_is_refused() {
    let mut config = EndpointConfig::default();
    config.transport.max_message_size = 1000;
    let (server, client) = pair(config);
    let server_addr = server.local_addr();
    spawn_echo_server(server);
    bounded(20, "too large", async {
        let conn = client.connect(server_addr).await.unwrap();
        match conn.send_message(vec![0u8; 1001]).await {
            Err(ConnectionError::TooLarge { size: 1001, max: 1000 }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
        // The connection is still usable.
        conn.send_message(vec![7u8; 1000]).await.unwrap();
        assert_eq!(conn.recv_message().await.unwrap(), vec![7u8; 1000]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_with_a_slow_reader() {
    let mut config = EndpointConfig::default();
    config.transport.send_buffer = 64 << 10;
    config.transport.receive_window = 128 << 10;
    let (server, client) = pair(config);
    let server_addr = server.local_addr();
    const COUNT: u64 = 200;
    bounded(60, "backpressure", async {
        let reader = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            for i in 0..COUNT {
                if i % 20 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                assert_eq!(conn.recv_message().await.unwrap(), random_bytes(i, 20_000), "message {i}");
            }
            // Kept open, so that the client is the one closing.
            conn
        });
        let conn = client.connect(server_addr).await.unwrap();
        for i in 0..COUNT {
            conn.send_message(random_bytes(i, 20_000)).await.unwrap();
        }
        let served = reader.await.unwrap();
        conn.close().await.unwrap();
        assert!(matches!(served.closed().await, CloseReason::Remote { .. }));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_parameters_can_be_read_and_set() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    spawn_echo_server(server);
    let conn = bounded(20, "connect", client.connect(server_addr)).await.unwrap();
    let params = conn.congestion_parameters().unwrap();
    assert_eq!(params.algorithm, "cubic");
    let (param, value) = params.values[0];
    conn.set_congestion_parameter(param, value).unwrap();
    match conn.set_congestion_parameter("no-such-parameter", 1.0) {
        Err(ConnectionError::Congestion(e)) => assert!(e.to_string().contains("no-such-parameter"), "{e}"),
        other => panic!("expected a congestion-control error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_stops_the_driver_after_a_graceful_close() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    bounded(30, "drop", async {
        let accept = tokio::spawn({
            let server = server.clone();
            async move { server.accept().await.unwrap() }
        });
        let conn = client.connect(server_addr).await.unwrap();
        let served = accept.await.unwrap();
        for i in 0..10u64 {
            conn.send_message(random_bytes(i, 30_000)).await.unwrap();
        }
        // Dropping the client closes it gracefully in the background: the
        // messages still arrive.
        drop(conn);
        drop(client);
        for i in 0..10u64 {
            assert_eq!(served.recv_message().await.unwrap(), random_bytes(i, 30_000));
        }
        assert!(matches!(served.recv_message().await, Err(ConnectionError::Closed(CloseReason::Remote { .. }))));
    })
    .await;
}

#[test]
fn bind_outside_a_runtime_is_an_error() {
    match Endpoint::bind(loopback()) {
        Err(NetError::NoRuntime) => {}
        other => panic!("expected NoRuntime, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_config_names_the_field() {
    let transport = TransportConfig { max_datagram_size: 100, ..TransportConfig::default() };
    let config = EndpointConfig { transport, ..EndpointConfig::default() };
    let err = Endpoint::bind_with(loopback(), config).unwrap_err();
    assert!(err.to_string().contains("max_datagram_size"), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn works_on_a_current_thread_runtime() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    spawn_echo_server(server);
    bounded(30, "current-thread echo", async {
        let conn = client.connect(server_addr).await.unwrap();
        let msg = random_bytes(99, 3 << 20);
        conn.send_message(msg.clone()).await.unwrap();
        assert!(conn.recv_message().await.unwrap() == msg);
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_over_ipv6_loopback() {
    let v6 = "[::1]:0".parse().unwrap();
    let server = Endpoint::bind(v6).unwrap();
    let client = Endpoint::bind_with(v6, EndpointConfig { accept_incoming: false, ..Default::default() }).unwrap();
    let server_addr = server.local_addr();
    assert!(server_addr.is_ipv6());
    spawn_echo_server(server);
    bounded(20, "IPv6 echo", async {
        let conn = client.connect(server_addr).await.unwrap();
        let msg = random_bytes(6, 200_000);
        conn.send_message(msg.clone()).await.unwrap();
        assert_eq!(conn.recv_message().await.unwrap(), msg);
        conn.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_datagrams_are_counted_and_ignored() {
    let (server, client) = pair(EndpointConfig::default());
    let server_addr = server.local_addr();
    spawn_echo_server(server.clone());
    let junk = std::net::UdpSocket::bind(loopback()).unwrap();
    for i in 0..50u64 {
        junk.send_to(&random_bytes(i, 1 + (i as usize * 37) % 1400), server_addr).unwrap();
    }
    junk.send_to(&[], server_addr).unwrap();
    bounded(20, "garbage", async {
        while server.stats().datagrams_received < 51 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let s = server.stats();
        assert_eq!(s.malformed_datagrams + s.unknown_connection_datagrams + s.invalid_cookies, 51, "{s:?}");
        assert_eq!(s.connections_accepted, 0);
        // The endpoint still serves real peers.
        let conn = client.connect(server_addr).await.unwrap();
        conn.send_message(&b"still fine"[..]).await.unwrap();
        assert_eq!(&conn.recv_message().await.unwrap()[..], b"still fine");
    })
    .await;
}

/// Copied batches of mixed sizes (packed small messages and large ones of
/// their own) through a small send buffer, taken in batches and singly:
/// every message once, in order, whole; the sizes checked first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copied_batches_arrive_whole_and_in_order() {
    let mut config = EndpointConfig::default();
    config.transport.send_buffer = 64 << 10;
    config.transport.max_message_size = 1 << 20;
    let (server, client) = pair(config);
    let server_addr = server.local_addr();
    // Message i: (i % 7) * 300 bytes (0 to 1,800: both sides of the
    // packing threshold), each byte derived from i.
    let message = |i: usize| vec![(i % 251) as u8; (i % 7) * 300];
    const COUNT: usize = 5_000;
    bounded(60, "copied batches", async {
        let reader = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            let mut batch = braid_net::RecvBatch::new();
            let mut got = 0;
            while got < COUNT {
                if got % 3 == 0 {
                    let m = conn.recv_message().await.unwrap();
                    assert_eq!(m[..], message(got)[..], "message {got}");
                    got += 1;
                    continue;
                }
                batch.clear();
                let n = conn.recv_batch(&mut batch, 1 + got % 97).await.unwrap();
                assert!(n >= 1 && n == batch.len());
                for m in batch.iter() {
                    assert_eq!(m, &message(got)[..], "message {got}");
                    got += 1;
                }
            }
            assert_eq!(conn.recv_batch(&mut batch, 0).await.unwrap(), 0);
            conn
        });
        let conn = client.connect(server_addr).await.unwrap();
        let all: Vec<Vec<u8>> = (0..COUNT).map(message).collect();
        for run in all.chunks(333) {
            conn.send_copies(run).await.unwrap();
        }
        // A batch with one oversized message is refused whole.
        let bad = [vec![1u8; 10], vec![0u8; (1 << 20) + 1]];
        assert!(matches!(conn.send_copies(&bad).await, Err(ConnectionError::TooLarge { .. })));
        let served = reader.await.unwrap();
        conn.close().await.unwrap();
        // Nothing of the refused batch arrived.
        let mut batch = braid_net::RecvBatch::new();
        assert!(matches!(served.recv_batch(&mut batch, 10).await, Err(ConnectionError::Closed(_))));
        assert!(batch.is_empty());
    })
    .await;
}
