//! Authenticated, encrypted endpoints on real sockets: keys pinned in one
//! program, known hosts and trust on first use from files, and endpoints
//! that disagree on authentication.

mod common;

use std::sync::Arc;

use braid_identity::{Identity, TrustPolicy};
use braid_net::{pinned_pair, CloseReason, ConnectionError, Endpoint, EndpointConfig, NodeSecurity, PinnedKey, Security};
use common::*;

fn endpoints(server: Security, client: Security) -> (Endpoint, Endpoint) {
    let s = Endpoint::bind_with(loopback(), EndpointConfig { security: server, ..Default::default() }).unwrap();
    let config = EndpointConfig { accept_incoming: false, security: client, ..Default::default() };
    let c = Endpoint::bind_with(loopback(), config).unwrap();
    (s, c)
}

fn unauthorized(result: Result<braid_net::Connection, ConnectionError>) -> String {
    match result {
        Err(ConnectionError::Closed(CloseReason::Unauthorized(why))) => why,
        Err(e) => panic!("expected an authentication failure, got {e}"),
        Ok(_) => panic!("expected an authentication failure, got a connection"),
    }
}

#[tokio::test]
async fn pinned_keys_carry_an_encrypted_echo() {
    let (server_sec, client_sec) = pinned_pair().unwrap();
    let (server, client) = endpoints(server_sec, client_sec);
    let addr = server.local_addr();
    spawn_echo_server(server);
    let conn = bounded(10, "connect", client.connect(addr)).await.unwrap();
    assert!(conn.peer_key().is_some());
    assert!(conn.cipher_suite().is_some());
    for i in 0..20 {
        let msg = random_bytes(i, 100_000);
        conn.send_message(msg.clone()).await.unwrap();
        assert_eq!(bounded(10, "echo", conn.recv_message()).await.unwrap(), msg);
    }
    let stats = conn.stats();
    assert_eq!(stats.auth_failures, 0);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn a_wrong_pinned_key_is_refused() {
    let (server_sec, _) = pinned_pair().unwrap();
    let stranger = Identity::generate_os().unwrap();
    let client_sec = Security::authenticated(Identity::generate_os().unwrap(), Arc::new(PinnedKey(stranger.public_key())));
    let (server, client) = endpoints(server_sec, client_sec);
    let why = unauthorized(bounded(10, "connect", client.connect(server.local_addr())).await);
    assert!(why.contains("expected"), "{why}");
}

#[tokio::test]
async fn known_hosts_refuse_an_unknown_server_until_its_key_is_listed_and_tofu_learns_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = |name: &str, policy| NodeSecurity {
        identity: Some(dir.path().join(format!("{name}.key"))),
        known_hosts: Some(dir.path().join(format!("{name}.hosts"))),
        policy,
    };
    // The server lets any client in (TOFU records them); the client knows no
    // server yet.
    let server_sec = files("server", TrustPolicy::Tofu).load().unwrap();
    let (server, client) = endpoints(server_sec, files("client", TrustPolicy::KnownHosts).load().unwrap());
    let addr = server.local_addr();
    spawn_echo_server(server);
    let why = unauthorized(bounded(10, "connect", client.connect(addr)).await);
    assert!(why.contains("not in") && why.contains("--tofu"), "{why}");

    // Trust on first use: the key is recorded and the next connection, with
    // the plain known-hosts policy, is accepted.
    let tofu = Endpoint::bind_with(
        loopback(),
        EndpointConfig { accept_incoming: false, security: files("client", TrustPolicy::Tofu).load().unwrap(), ..Default::default() },
    )
    .unwrap();
    let conn = bounded(10, "connect", tofu.connect(addr)).await.unwrap();
    conn.send_message(random_bytes(1, 1000)).await.unwrap();
    assert_eq!(bounded(10, "echo", conn.recv_message()).await.unwrap(), random_bytes(1, 1000));
    let hosts = std::fs::read_to_string(dir.path().join("client.hosts")).unwrap();
    assert!(hosts.contains(&conn.peer_key().unwrap().to_string()), "{hosts}");
    let known = Endpoint::bind_with(
        loopback(),
        EndpointConfig { accept_incoming: false, security: files("client", TrustPolicy::KnownHosts).load().unwrap(), ..Default::default() },
    )
    .unwrap();
    assert!(bounded(10, "connect", known.connect(addr)).await.is_ok());
    // The server learned the client once, by its IP: two connections from
    // two ports of one client are one line (a line per port would grow
    // without bound with every connection).
    let learned = std::fs::read_to_string(dir.path().join("server.hosts")).unwrap();
    let lines: Vec<&str> = learned.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{learned}");
    assert!(lines[0].starts_with("127.0.0.1 "), "{learned}");
}

#[tokio::test]
async fn insecure_and_authenticated_endpoints_do_not_talk() {
    let (server_sec, _) = pinned_pair().unwrap();
    let (server, client) = endpoints(server_sec, Security::Insecure);
    let why = unauthorized(bounded(10, "connect", client.connect(server.local_addr())).await);
    assert!(why.contains("requires authentication"), "{why}");
    let (_, client_sec) = pinned_pair().unwrap();
    let (server, client) = endpoints(Security::Insecure, client_sec);
    let why = unauthorized(bounded(10, "connect", client.connect(server.local_addr())).await);
    assert!(why.contains("without authentication"), "{why}");
}
