//! End to end on loopback: ffmpeg content (6 s, 2 s segments), the server, and Braid's ABR
//! client over TCP and over a Braid connection, with every metric recorded and consistent.

use std::path::PathBuf;
use std::time::Duration;

use braid_dash::abr::AbrKind;
use braid_dash::client::{play, PlayConfig, PlayError, PlayReport, Transport};
use braid_dash::content::{ensure, ContentSpec, Rung};
use braid_dash::server::{serve_braid, serve_tcp, RequestLog};

fn small_content(cache: &std::path::Path) -> PathBuf {
    let ladder = vec![
        Rung { kbps: 300, width: 160, height: 90 },
        Rung { kbps: 1000, width: 256, height: 144 },
        Rung { kbps: 3000, width: 320, height: 180 },
    ];
    ensure(cache, &ContentSpec { segment_secs: 2, duration_secs: 6, ladder, fps: 12 }).expect("ffmpeg content")
}

/// The invariants every finished report must satisfy.
fn check_consistent(r: &PlayReport) {
    let startup = r.trace.startup_s.expect("playback started");
    assert!(startup > 0.0 && startup < 5.0, "startup {startup}");
    assert_eq!(r.segments.len(), 3, "all segments fetched");
    assert!(r.trace.ended, "played to the end: {:?}", r.trace);
    let played: f64 = r.trace.played.iter().map(|p| p.duration_s).sum();
    assert!((played - 6.0).abs() < 1e-6, "played {played}");
    let stalled: f64 = r.trace.stalls.iter().map(|s| s.duration_s).sum();
    assert!((startup + played + stalled - r.wall_s).abs() < 1e-3, "{startup} + {played} + {stalled} vs {}", r.wall_s);
    let s = &r.summary;
    assert_eq!(s.stall_count as usize, r.trace.stalls.len());
    assert!(s.mean_kbps >= 300.0 && s.mean_kbps <= 3000.0);
    assert!(s.qoe_hossfeld >= 1.0 && s.qoe_hossfeld <= 5.0);
    assert!(s.qoe_linear.is_finite());
    assert!((s.startup_s - startup).abs() < 1e-12);
    for seg in &r.segments {
        assert!(seg.bytes > 0 && seg.throughput_kbps > 0.0 && seg.download_s > 0.0);
        assert!(r.ladder_kbps.contains(&seg.kbps));
    }
    // JSON has every metric.
    let json = serde_json::to_value(r).unwrap();
    for key in ["stall_count", "stall_total_s", "startup_s", "mean_kbps", "switches", "switch_magnitude_kbps", "qoe_hossfeld", "qoe_linear"] {
        assert!(json["summary"][key].is_number(), "{key} in {}", json["summary"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plays_over_tcp_and_braid_and_logs_every_request() {
    let cache = tempfile::tempdir().unwrap();
    let root = small_content(cache.path());
    let log = cache.path().join("requests.jsonl");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp_addr = listener.local_addr().unwrap();
    let tcp_server = tokio::spawn(serve_tcp(listener, root.clone(), Some(log.clone())));
    let server_ep = braid::Endpoint::bind_with("127.0.0.1:0".parse().unwrap(), braid::EndpointConfig::default()).unwrap();
    let braid_addr = server_ep.local_addr();
    let braid_server = tokio::spawn(serve_braid(server_ep, root.clone(), None));

    for abr in [AbrKind::Throughput, AbrKind::Bola, AbrKind::Mpc] {
        let mut cfg = PlayConfig::new(format!("http://{tcp_addr}/manifest.mpd"), Transport::Tcp);
        cfg.abr = abr;
        cfg.buffer_target_s = 4.0;
        let r = play(cfg).await.unwrap_or_else(|e| panic!("{abr:?} over TCP: {e}"));
        check_consistent(&r);
        assert_eq!(r.transport, "tcp");
    }
    let braid_cfg = braid::EndpointConfig { accept_incoming: false, ..Default::default() };
    let mut cfg = PlayConfig::new(format!("http://{braid_addr}/manifest.mpd"), Transport::Braid { config: braid_cfg });
    cfg.abr = AbrKind::Mpc;
    let r = play(cfg).await.expect("over Braid");
    check_consistent(&r);
    assert_eq!(r.transport, "braid");
    assert_eq!(r.paths.len(), 1);
    assert!(r.paths[0].bytes_received > r.segments.iter().map(|s| s.bytes).sum::<u64>());

    // The log has the manifest, init and media segments of the TCP sessions.
    let records = RequestLog::read(&log).unwrap();
    assert!(records.iter().any(|r| r.path == "/manifest.mpd" && r.status == 200));
    assert!(records.iter().filter(|r| r.path.contains("chunk-stream")).count() >= 9);
    assert!(records.iter().all(|r| r.complete && r.status == 200));

    // A time limit cuts the session; nothing hangs.
    let mut cfg = PlayConfig::new(format!("http://{tcp_addr}/manifest.mpd"), Transport::Tcp);
    cfg.max_duration_s = Some(3.0);
    cfg.buffer_target_s = 2.0;
    let r = play(cfg).await.unwrap();
    assert!(r.wall_s <= 3.0 + 1e-9 && r.trace.startup_s.is_some());

    tcp_server.abort();
    braid_server.abort();
}

/// Two paths over loopback (127.0.0.1 and 127.0.0.2 to a wildcard-bound server): the segments
/// arrive over both, the trace is as consistent as over one path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plays_over_a_two_path_braid_connection() {
    let cache = tempfile::tempdir().unwrap();
    let root = small_content(cache.path());
    let server_ep = braid::Endpoint::bind_with("0.0.0.0:0".parse().unwrap(), braid::EndpointConfig::default()).unwrap();
    let port = server_ep.local_addr().port();
    let server = tokio::spawn(serve_braid(server_ep, root, None));
    let paths = vec![
        ("127.0.0.1".parse().unwrap(), format!("127.0.0.1:{port}").parse().unwrap()),
        ("127.0.0.2".parse().unwrap(), format!("127.0.0.2:{port}").parse().unwrap()),
    ];
    let transport = Transport::Multipath { config: braid::EndpointConfig::default(), paths, scheduler: None };
    let mut cfg = PlayConfig::new(format!("http://127.0.0.1:{port}/manifest.mpd"), transport);
    cfg.abr = AbrKind::Bola;
    let r = play(cfg).await.expect("over two paths");
    check_consistent(&r);
    assert_eq!(r.transport, "multipath");
    assert_eq!(r.paths.len(), 2, "{:?}", r.paths);
    assert!(r.paths.iter().all(|p| p.bytes_received > 0), "{:?}", r.paths);
    server.abort();
}

/// A TCP proxy to `upstream` that forwards the server's bytes at full speed until `fast_bytes`
/// have passed (over all its connections), then at `slow_bps`: a link whose rate collapses.
async fn collapsing_proxy(upstream: std::net::SocketAddr, fast_bytes: u64, slow_bps: f64) -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let passed = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let passed = passed.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else { return };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let mut buf = [0u8; 1400];
                while let Ok(n) = sr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if passed.fetch_add(n as u64, Ordering::Relaxed) >= fast_bytes {
                        tokio::time::sleep(Duration::from_secs_f64(n as f64 * 8.0 / slow_bps)).await;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// The rate collapses while the client fetches a high representation: it abandons that download
/// (as dash.js's AbandonRequestsRule does), fetches the segment again at the lowest on a new
/// connection, and plays to the end instead of waiting out the big download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_the_collapsed_rate_cannot_carry_is_abandoned_for_a_lower_one() {
    let cache = tempfile::tempdir().unwrap();
    let root = small_content(cache.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_tcp(listener, root, None));
    // Manifest, inits and the first (lowest) segment pass fast; then 200 kbit/s.
    let proxy = collapsing_proxy(upstream, 120_000, 200_000.0).await;
    let mut cfg = PlayConfig::new(format!("http://{proxy}/manifest.mpd"), Transport::Tcp);
    cfg.buffer_target_s = 6.0;
    cfg.audio = false;
    let r = tokio::time::timeout(Duration::from_secs(60), play(cfg)).await.expect("no hang").expect("plays");
    assert!(r.abandons >= 1, "{:?}", r.segments);
    let abandoned: Vec<_> = r.segments.iter().filter(|s| !s.abandoned.is_empty()).collect();
    assert!(!abandoned.is_empty());
    for s in &abandoned {
        let given_up = &s.abandoned[0];
        assert!(s.kbps < given_up.kbps, "refetched lower: {} after {}", s.kbps, given_up.kbps);
        assert!(given_up.elapsed_s >= 0.5, "not before the grace time");
    }
    assert_eq!(r.segments.len(), 3);
    assert!(r.trace.ended);
    server.abort();
}

#[tokio::test]
async fn missing_and_malformed_content_fail_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_tcp(listener, root.clone(), None));
    let run = |path: &str| {
        let mut cfg = PlayConfig::new(format!("http://{addr}{path}"), Transport::Tcp);
        cfg.request_timeout = Duration::from_secs(5);
        play(cfg)
    };
    let e = run("/nothing.mpd").await.unwrap_err();
    assert!(matches!(e, PlayError::ManifestFetch(_)) && e.to_string().contains("404"), "{e}");
    std::fs::write(root.join("bad.mpd"), "<MPD><Period>").unwrap();
    let e = run("/bad.mpd").await.unwrap_err();
    assert!(e.to_string().contains("not well-formed"), "{e}");
    // A manifest whose segments are missing: a 404 naming the segment.
    let mpd = r#"<MPD type="static" mediaPresentationDuration="PT4S"><Period><AdaptationSet contentType="video">
      <Representation id="0" bandwidth="100000"><SegmentTemplate timescale="1" duration="2" media="s$Number$.m4s"/></Representation>
      </AdaptationSet></Period></MPD>"#;
    std::fs::write(root.join("m.mpd"), mpd).unwrap();
    let e = run("/m.mpd").await.unwrap_err();
    assert!(e.to_string().contains("/s1.m4s") && e.to_string().contains("404"), "{e}");
    // A segment that is not media.
    std::fs::write(root.join("s1.m4s"), "<html>oops</html>").unwrap();
    let e = run("/m.mpd").await.unwrap_err();
    assert!(matches!(e, PlayError::BadSegment { .. }), "{e}");
    // Nobody listening: a connect error, quickly.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e = play(PlayConfig::new(format!("http://{closed}/m.mpd"), Transport::Tcp)).await.unwrap_err();
    assert!(matches!(e, PlayError::Connect { .. }), "{e}");
    server.abort();
}
