//! `braid send --path ... --path ... --scheduler` to a `braid serve`
//! listening on 0.0.0.0: two loopback paths (127.0.0.1 and 127.0.0.2).

mod cli_support;

use std::time::Duration;

use cli_support::{last_json, run, Server, TempDir};

const LIMIT: Duration = Duration::from_secs(60);

/// `braid serve` on the wildcard address, so that both loopback addresses
/// reach it, killed when dropped.
fn wild_server(extra: &[&str]) -> Server {
    Server::start_on("0.0.0.0:0", extra)
}

/// `LOCAL=REMOTE` for a path from `ip` to the server on the same `ip`.
fn path(server: &Server, ip: &str) -> String {
    let port = server.addr.parse::<std::net::SocketAddr>().expect("listening address").port();
    format!("{ip}={ip}:{port}")
}

#[test]
fn a_transfer_over_two_paths_with_a_shipped_scheduler() {
    let mut server = wild_server(&["--count", "1", "--scheduler", "redundant"]);
    let (p1, p2) = (path(&server, "127.0.0.1"), path(&server, "127.0.0.2"));
    let sent = run(
        &["send", "--path", &p1, "--path", &p2, "--scheduler", "redundant", "--bytes", "4MB", "--json"],
        LIMIT,
    );
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_eq!(s["ok"], true, "{s}");
    assert_eq!(s["bytes"], 4_000_000);
    assert_eq!(s["scheduler"], "redundant");
    let paths = s["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), 2, "{s}");
    assert_eq!(paths[1]["local"], format!("127.0.0.2:{}", paths[0]["local"].as_str().unwrap().rsplit(':').next().unwrap()));
    // Redundant: both paths carried a large share of the data.
    for p in paths {
        assert!(p["stream_bytes_sent"].as_u64().unwrap() >= 1_000_000, "{s}");
    }
    let r = server.next_json(LIMIT);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["sha256"], s["sha256"]);
    assert_eq!(r["paths"], 2, "{r}");
}

#[test]
fn a_scheduler_file_is_compiled_and_a_bad_one_is_explained() {
    let dir = TempDir::new("mp-sched");
    let good = dir.0.join("first.progmp");
    std::fs::write(&good, "SCHEDULER first;\n/* everything on the first subflow */\nSUBFLOWS.GET(0).PUSH(Q.POP());\n").unwrap();
    let mut server = wild_server(&["--count", "1"]);
    let (p1, p2) = (path(&server, "127.0.0.1"), path(&server, "127.0.0.2"));
    let sent = run(
        &["send", "--path", &p1, "--path", &p2, "--scheduler", good.to_str().unwrap(), "--bytes", "1MB", "--json"],
        LIMIT,
    );
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_eq!(s["ok"], true, "{s}");
    assert_eq!(s["scheduler"], "first");
    let paths = s["paths"].as_array().expect("paths");
    assert!(paths[0]["stream_bytes_sent"].as_u64().unwrap() >= 1_000_000, "{s}");
    assert_eq!(paths[1]["stream_bytes_sent"], 0, "{s}");
    assert_eq!(server.next_json(LIMIT)["ok"], true);

    // Errors name the field and the allowed form, before anything is sent.
    let bad = dir.0.join("bad.progmp");
    std::fs::write(&bad, "SUBFLOWS.GET(0).PUSH(Q.POP()\n").unwrap();
    let out = run(&["send", "--path", &p1, "--scheduler", bad.to_str().unwrap(), "--bytes", "1"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("--scheduler") && out.stderr.contains("bad.progmp:2:1"), "{}", out.stderr);
    let out = run(&["send", "--path", &p1, "--scheduler", "fastest", "--bytes", "1"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("min_rtt") && out.stderr.contains("redundant"), "{}", out.stderr);
    let out = run(&["send", "--path", "127.0.0.1", "--bytes", "1"], LIMIT);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("LOCAL=REMOTE"), "{}", out.stderr);
    let out = run(&["send", "--path", &p1, "--to", "127.0.0.1:1", "--bytes", "1"], LIMIT);
    assert_eq!(out.code, Some(2), "{out:?}");
}
