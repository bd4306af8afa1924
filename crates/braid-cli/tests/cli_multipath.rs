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

/// A directory sent with `--path` twice: the file-transfer engine opens one
/// Braid connection per stream, each over both paths with the scheduler
/// asked for, and the tree arrives intact.
#[test]
fn a_tree_over_two_paths_per_stream() {
    let dir = TempDir::new("mp-tree");
    let (src, dest) = (dir.0.join("tree"), dir.0.join("dest"));
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(&dest).unwrap();
    let mut files = Vec::new();
    for i in 0..6u32 {
        // Distinct, incompressible-enough contents (an LCG), 100-600 KB.
        let mut x = u64::from(i) * 0x9E37_79B9 + 1;
        let bytes: Vec<u8> = (0..(i as usize + 1) * 100_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        let rel = if i % 2 == 0 { format!("f{i}") } else { format!("sub/f{i}") };
        std::fs::write(src.join(&rel), &bytes).unwrap();
        files.push((rel, bytes));
    }
    let mut server = wild_server(&["--count", "1", "--dir", dest.to_str().unwrap()]);
    let (p1, p2) = (path(&server, "127.0.0.1"), path(&server, "127.0.0.2"));
    let sent = run(
        &["send", src.to_str().unwrap(), "--path", &p1, "--path", &p2, "--scheduler", "redundant", "--net", "2", "--json"],
        LIMIT,
    );
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_eq!((s["ok"].clone(), s["transport"].clone()), (true.into(), "braid".into()), "{s}");
    assert_eq!(s["files"], 6, "{s}");
    assert_eq!(server.next_json(LIMIT)["ok"], true);
    for (rel, bytes) in &files {
        assert_eq!(&std::fs::read(dest.join("tree").join(rel)).unwrap(), bytes, "{rel}");
    }
    // The same tree with --transport tcp and --path: refused, naming both.
    let out = run(&["send", src.to_str().unwrap(), "--path", &p1, "--transport", "tcp"], LIMIT);
    assert!(!out.success());
    assert!(out.stderr.contains("--path") && out.stderr.contains("--transport tcp"), "{}", out.stderr);
}
