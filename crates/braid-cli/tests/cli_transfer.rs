//! `braid serve` + `braid send` on 127.0.0.1 with an ephemeral port.

mod cli_support;

use std::time::Duration;

use cli_support::{last_json, run, Server, TempDir};

const LIMIT: Duration = Duration::from_secs(60);

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_file_arrives_byte_exact_and_is_never_overwritten() {
    let dir = TempDir::new("file");
    let out = dir.0.join("out");
    std::fs::create_dir(&out).unwrap();
    let content = pseudo_random(3 * 1024 * 1024 + 123, 42);
    let src = dir.0.join("payload.bin");
    std::fs::write(&src, &content).unwrap();
    // A file of that name is already there: it must survive.
    std::fs::write(out.join("payload.bin"), b"keep me").unwrap();

    let mut server = Server::start(&["--out", out.to_str().unwrap(), "--count", "2"]);
    let sent = run(&["send", "--to", &server.addr, "--json", src.to_str().unwrap()], LIMIT);
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_eq!(s["ok"], true);
    assert_eq!(s["bytes"], content.len() as u64);
    assert_eq!(s["encrypted"], true, "{s}");
    assert_eq!(s["trust"], "tofu");

    let r = server.next_json(LIMIT);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["encrypted"], true, "{r}");
    assert!(r["peer_key"].as_str().is_some_and(|k| k.starts_with("braid")), "{r}");
    assert_eq!(r["bytes"], content.len() as u64);
    assert_eq!(r["sha256"], s["sha256"]);
    let saved = std::path::PathBuf::from(r["saved"].as_str().unwrap());
    assert_eq!(saved, out.join("payload-1.bin"));
    assert_eq!(std::fs::read(&saved).unwrap(), content);
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), b"keep me");

    // A name trying to escape the output directory lands inside it.
    let small = dir.0.join("small.txt");
    std::fs::write(&small, b"hello").unwrap();
    let sent = run(
        &["send", "--to", &server.addr, "--name", "../../escape.txt", "--json", small.to_str().unwrap()],
        LIMIT,
    );
    assert!(sent.success(), "{sent:?}");
    let r = server.next_json(LIMIT);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["saved"].as_str().unwrap(), out.join("escape.txt").to_str().unwrap());
    assert_eq!(std::fs::read(out.join("escape.txt")).unwrap(), b"hello");
    assert!(!dir.0.join("escape.txt").exists());
    assert_eq!(server.wait_exit(LIMIT), Some(0));
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn generated_bytes_are_verified_from_concurrent_senders() {
    let dir = TempDir::new("bytes");
    let mut server = Server::start(&["--out", dir.0.to_str().unwrap(), "--count", "3"]);
    let senders: Vec<_> = ["4096", "1MiB", "3MB"]
        .into_iter()
        .map(|size| {
            let addr = server.addr.clone();
            std::thread::spawn(move || (size, run(&["send", "--to", &addr, "--bytes", size, "--json"], LIMIT)))
        })
        .collect();
    let mut sizes = Vec::new();
    for s in senders {
        let (size, out) = s.join().unwrap();
        assert!(out.success(), "{size}: {out:?}");
        let j = last_json(&out);
        assert_eq!(j["ok"], true);
        assert!(j["gbps"].as_f64().unwrap() > 0.0);
        sizes.push(j["bytes"].as_u64().unwrap());
    }
    sizes.sort();
    assert_eq!(sizes, [4096, 1 << 20, 3_000_000]);
    let mut got: Vec<u64> = (0..3)
        .map(|_| {
            let r = server.next_json(LIMIT);
            assert_eq!(r["ok"], true, "{r}");
            assert!(r["saved"].is_null(), "generated data must not be saved: {r}");
            r["bytes"].as_u64().unwrap()
        })
        .collect();
    got.sort();
    assert_eq!(got, sizes);
    assert_eq!(server.wait_exit(LIMIT), Some(0));
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
}

#[test]
fn text_output_reports_each_transfer() {
    let dir = TempDir::new("text");
    let src = dir.0.join("a.txt");
    std::fs::write(&src, b"abc").unwrap();
    let server = Server::start(&["--count", "1"]);
    let sent = run(&["send", "--to", &server.addr, src.to_str().unwrap()], LIMIT);
    assert!(sent.success(), "{sent:?}");
    assert!(sent.stdout.contains("sha256 ok"), "{}", sent.stdout);
    assert!(sent.stdout.contains("3 bytes"), "{}", sent.stdout);
    assert_eq!(server.wait_exit(LIMIT), Some(0));
}

#[test]
fn an_unknown_server_is_refused_and_insecure_needs_both_sides() {
    let server = Server::start(&[]);
    let dir = TempDir::new("known-hosts");
    let hosts = dir.0.join("known_hosts");
    let hosts = hosts.to_str().unwrap();
    // Known hosts only, and the server is not in them: refused, and told how to trust it.
    let out = run(&["send", "--to", &server.addr, "--bytes", "1000", "--known-hosts", hosts], LIMIT);
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("not in") && out.stderr.contains("--tofu"), "{}", out.stderr);
    // A client without authentication cannot talk to a server with it.
    let out = run(&["send", "--to", &server.addr, "--bytes", "1000", "--insecure-no-auth"], LIMIT);
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("requires authentication"), "{}", out.stderr);
    // Trusting on first use records the key; then known hosts alone suffice.
    let out = run(&["send", "--to", &server.addr, "--bytes", "1000", "--known-hosts", hosts, "--tofu", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let key = last_json(&out)["peer_key"].as_str().unwrap().to_string();
    assert!(std::fs::read_to_string(hosts).unwrap().contains(&key));
    let out = run(&["send", "--to", &server.addr, "--bytes", "1000", "--known-hosts", hosts, "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    assert!(last_json(&out)["cipher"].as_str().is_some(), "{out:?}");
}
