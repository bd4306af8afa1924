//! Exact scenarios, found by the random-link property test under other
//! seeds, where the transport (not the simulator) fails a transfer. They
//! were fixed in the transport and now guard against regressions.

use std::time::Duration;

use braid_lab::harness::sim_transfer::{run, SimTransferConfig, SimTransferReport};
use braid_proto::CcAlgorithm;

fn transfer(
    link: &str,
    bytes: u64,
    message_size: usize,
    seed: u64,
    limit_secs: u64,
) -> SimTransferReport {
    run(&SimTransferConfig {
        link: link.parse().unwrap(),
        bytes,
        message_size,
        cc: CcAlgorithm::NewReno,
        seed,
        time_limit: Duration::from_secs(limit_secs),
        ..SimTransferConfig::default()
    })
    .unwrap()
}

/// The server's RETRY reaches the client at 30.97 s, after the client's
/// Initial timer has backed off to 32 s; the Initial carrying the cookie is
/// lost, and the next one, at 62.9 s, carries a cookie older than the 10 s
/// `cookie_lifetime`. The server drops it silently (`invalid_cookies` = 1),
/// and every later retransmission too: the handshake never completes.
/// Either a RETRY should reset the client's backed-off timer, or a stale
/// but authentic cookie should get a fresh RETRY (or the client should
/// fall back to a cookie-less Initial).
#[test]

fn handshake_survives_a_lost_initial_after_a_late_retry() {
    let r = transfer(
        "rtt=1ms,loss=12.6%,reorder=0.25%,jitter=5us",
        0,
        16,
        671_936_789_025_778_044,
        600,
    );
    assert!(r.ok, "{:?}", r.flows[0].error);
}

/// From 2.74 s the client's retransmissions back off; of nine sent over
/// 28 s the server receives three and acknowledges each, and all three ACKs
/// are lost. Once the backed-off RTO had grown past the idle timeout's
/// reach the client gave up; now the RTO is capped at a quarter of the idle
/// timeout and, with data outstanding, silence ends the connection only
/// after six unanswered RTOs *and* the idle timeout (TCP's retry-limit
/// rule), and a simulated run's idle timeout is its deadline.
#[test]

fn idle_timeout_outlasts_rto_backoff() {
    let r = transfer(
        "rtt=124ms,loss=17.4%,dup=0.25%,reorder=2.75%,jitter=3720us",
        65_370,
        16,
        9_314_416_018_721_444_665,
        3600,
    );
    assert!(r.ok, "{:?}", r.flows[0].error);
}
