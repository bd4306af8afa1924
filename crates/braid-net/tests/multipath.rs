//! Multipath on loopback: 127.0.0.1 and 127.0.0.2 give two paths between
//! a client and a server bound to wildcard addresses. Each test bounded in
//! time.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use braid_net::{ConnectionError, Endpoint, EndpointConfig, PathError, Program, Register};
use braid_proto::progmp::builtin;
use common::{bounded, random_bytes};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A server on 0.0.0.0 (reachable on 127.0.0.1 and 127.0.0.2) and a
/// client on 0.0.0.0; the two (local, remote) pairs of the paths.
fn setup() -> (Endpoint, Endpoint, Vec<(IpAddr, SocketAddr)>) {
    let server = Endpoint::bind("0.0.0.0:0".parse().unwrap()).unwrap();
    let client =
        Endpoint::bind_with("0.0.0.0:0".parse().unwrap(), EndpointConfig { accept_incoming: false, ..Default::default() })
            .unwrap();
    let port = server.local_addr().port();
    let paths = vec![
        (ip("127.0.0.1"), SocketAddr::new(ip("127.0.0.1"), port)),
        (ip("127.0.0.2"), SocketAddr::new(ip("127.0.0.2"), port)),
    ];
    (server, client, paths)
}

fn program(name: &str) -> Arc<Program> {
    Arc::new(Program::compile(builtin(name).unwrap().source).unwrap())
}

/// Wait until every path of `conn` is validated.
async fn validated(conn: &braid_net::Connection, n: usize) {
    loop {
        let paths = conn.paths();
        if paths.len() == n && paths.iter().all(|p| p.validated) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundant_sends_everything_on_both_paths() {
    let (server, client, paths) = setup();
    bounded(30, "redundant transfer", async {
        let reader = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            let mut got = Vec::new();
            while let Ok(m) = conn.recv_message().await {
                got.push(m);
            }
            (got, conn.paths())
        });
        let conn = client.connect_multipath(&paths).await.unwrap();
        validated(&conn, 2).await;
        conn.set_scheduler(program("redundant")).unwrap();
        let msgs: Vec<_> = (0..20).map(|i| random_bytes(i, 50_000)).collect();
        for m in &msgs {
            conn.send_message(m.clone()).await.unwrap();
        }
        conn.close().await.unwrap();
        let infos = conn.paths();
        let (got, server_paths) = reader.await.unwrap();
        assert_eq!(got, msgs, "delivered byte-exact and in order");
        let total = 20 * 50_000;
        assert_eq!(infos.len(), 2);
        assert_eq!(infos[0].local.unwrap().ip(), ip("127.0.0.1"));
        assert_eq!(infos[1].local.unwrap().ip(), ip("127.0.0.2"));
        // Redundant (thesis §5.2.4) gives each path every packet not yet
        // acknowledged when the path has room: both paths carry a large
        // share, and together much more than the data.
        let carried: Vec<u64> = infos.iter().map(|p| p.stream_bytes_sent).collect();
        assert!(carried.iter().all(|&c| c >= total / 4), "{carried:?} of {total} bytes");
        assert!(carried.iter().sum::<u64>() >= total * 5 / 4, "{carried:?} of {total} bytes");
        // The server saw the second path arrive on its 127.0.0.2 address.
        assert_eq!(server_paths.len(), 2, "{server_paths:?}");
        assert!(server_paths.iter().any(|p| p.local.map(|l| l.ip()) == Some(ip("127.0.0.2"))), "{server_paths:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_are_added_marked_and_removed_at_runtime() {
    let (server, client, paths) = setup();
    bounded(30, "path management", async {
        let echo = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            // Only the connecting side opens paths.
            assert!(matches!(
                conn.add_path(ip("127.0.0.1"), "127.0.0.1:9".parse().unwrap(), false),
                Err(ConnectionError::Path(PathError::NotClient))
            ));
            common::echo(conn).await;
        });
        let conn = client.connect_multipath(&paths[..1]).await.unwrap();
        assert_eq!(conn.paths().len(), 1);
        // The last path stays.
        let first = conn.paths()[0].id;
        assert!(matches!(conn.remove_path(first), Err(ConnectionError::Path(PathError::LastPath(_)))));
        let id = conn.add_path(paths[1].0, paths[1].1, true).unwrap();
        validated(&conn, 2).await;
        assert!(conn.paths()[1].backup);
        // With min-RTT-with-backup, the backup path carries no data.
        conn.set_scheduler(program("min_rtt_backup")).unwrap();
        let before = conn.paths()[1].stream_bytes_sent;
        for i in 0..10 {
            let m = random_bytes(i, 20_000);
            conn.send_message(m.clone()).await.unwrap();
            assert_eq!(conn.recv_message().await.unwrap(), m);
        }
        assert_eq!(conn.paths()[1].stream_bytes_sent, before, "the backup path carried data");
        // Not a backup any more; then removed: the connection goes on on path 0.
        conn.set_path_backup(id, false).unwrap();
        assert!(!conn.paths()[1].backup);
        conn.remove_path(id).unwrap();
        assert!(matches!(conn.remove_path(id), Err(ConnectionError::Path(PathError::UnknownPath(_)))));
        assert_eq!(conn.paths().len(), 1);
        let m = random_bytes(99, 100_000);
        conn.send_message(m.clone()).await.unwrap();
        assert_eq!(conn.recv_message().await.unwrap(), m);
        // Registers and user tags are kept per connection.
        conn.set_register(Register::R2, 7).unwrap();
        assert_eq!(conn.register(Register::R2).unwrap(), 7);
        conn.set_user_tag(3).unwrap();
        conn.close().await.unwrap();
        echo.await.unwrap();
        // A closed connection refuses multipath requests with its reason.
        conn.closed().await;
        assert!(matches!(conn.set_register(Register::R1, 1), Err(ConnectionError::Closed(_))));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_prints_are_captured() {
    let (server, client, paths) = setup();
    bounded(30, "prints", async {
        let echo = tokio::spawn(async move { common::echo(server.accept().await.unwrap()).await });
        let conn = client.connect_multipath(&paths).await.unwrap();
        validated(&conn, 2).await;
        let source = "SCHEDULER talk; VAR s = SUBFLOWS.MIN(sbf => sbf.RTT); \
                      IF (s != NULL AND !Q.EMPTY) { VAR p = Q.POP(); PRINT(\"push %d\", p.SEQ); s.PUSH(p); }";
        let talk = Arc::new(Program::compile(source).unwrap());
        conn.capture_scheduler_prints(true).unwrap();
        conn.set_scheduler(talk).unwrap();
        conn.send_message(&b"0123456789"[..]).await.unwrap();
        assert_eq!(&conn.recv_message().await.unwrap()[..], b"0123456789");
        let prints = conn.take_scheduler_prints();
        assert!(prints.iter().any(|l| l.starts_with("push ")), "{prints:?}");
        conn.close().await.unwrap();
        echo.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_local_addresses_are_refused_up_front() {
    let server = Endpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let client = Endpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = server.local_addr();
    bounded(10, "refusals", async {
        let e = client.connect_multipath(&[(ip("127.0.0.2"), to)]).await.unwrap_err();
        assert!(matches!(e, ConnectionError::LocalAddress { .. }), "{e}");
        assert!(matches!(client.connect_multipath(&[]).await, Err(ConnectionError::NoPaths)));
        // One address, the socket's own: fine.
        let conn = client.connect_multipath(&[(ip("127.0.0.1"), to)]).await.unwrap();
        let e = conn.add_path(ip("127.0.0.2"), to, false).unwrap_err();
        assert!(e.to_string().contains("wildcard"), "{e}");
    })
    .await;
}
