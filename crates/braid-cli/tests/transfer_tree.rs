//! `braid send SRC... --to ADDR` / `braid serve --dir DEST` on the file-transfer engine, running
//! the real binary: a tree with every kind of entry arrives identical (TLS 1.3, trust on first
//! use), the JSON summary and the `--progress jsonl` lines carry their keys, bad flags are
//! named, and `kill -9` of the sender or of the receiver, five times in one transfer, is
//! followed by a run of the same command that completes the tree byte for byte and sends again
//! at most one chunk per network stream per kill.

mod cli_support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cli_support::{braid, last_json, run, TempDir};
use sha2::{Digest, Sha256};

const LIMIT: Duration = Duration::from_secs(120);

/// A small deterministic generator (xorshift64*), seeded per test.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// A seed from the clock, printed so a failing run can be repeated (`TRANSFER_SEED=...`).
fn seed() -> u64 {
    let seed = std::env::var("TRANSFER_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("TRANSFER_SEED={seed}");
    seed
}

/// A tree with subdirectories, an empty directory, a symlink, a sparse file, an empty file and
/// distinct permissions and modification times.
fn build_tree(root: &Path, rng: &mut Rng) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join("a/b/c/big.bin"), rng.bytes(2_000_000 + 77)).unwrap();
    fs::write(root.join("a/zero"), b"").unwrap();
    fs::write(root.join("a/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    for i in 0..40 {
        let len = rng.range(1, 9000) as usize;
        fs::write(root.join(format!("a/small{i:02}")), rng.bytes(len)).unwrap();
    }
    fs::set_permissions(root.join("a/run.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::set_permissions(root.join("a/zero"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("b/c/big.bin", root.join("a/link")).unwrap();
    // Sparse: 12 MiB with data at 1 MiB and at 9 MiB.
    let mut sparse = fs::File::create(root.join("sparse.img")).unwrap();
    sparse.set_len(12 << 20).unwrap();
    sparse.seek(SeekFrom::Start(1 << 20)).unwrap();
    sparse.write_all(&rng.bytes(150_000)).unwrap();
    sparse.seek(SeekFrom::Start(9 << 20)).unwrap();
    sparse.write_all(&rng.bytes(60_000)).unwrap();
    drop(sparse);
    fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o750)).unwrap();
    let stamp = |p: &Path, sec: u64| {
        let f = fs::File::options().write(true).open(p).or_else(|_| fs::File::open(p)).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::new(sec, 123_456_789)).unwrap();
    };
    stamp(&root.join("a/b/c/big.bin"), 1_600_000_000);
    stamp(&root.join("sparse.img"), 1_500_000_000);
    stamp(&root.join("empty"), 1_400_000_000);
    stamp(&root.join("a/b/c"), 1_300_000_000);
}

/// Large files for the kill tests.
fn build_big_tree(root: &Path, rng: &mut Rng, files: usize, len: usize) {
    fs::create_dir_all(root.join("d")).unwrap();
    for i in 0..files {
        fs::write(root.join(format!("d/f{i}.bin")), rng.bytes(len)).unwrap();
    }
    fs::write(root.join("note.txt"), b"resumable\n").unwrap();
}

#[derive(Debug, PartialEq)]
enum Node {
    File { sha256: Vec<u8>, mode: u32, mtime: (i64, i64) },
    Dir { mode: u32, mtime: (i64, i64) },
    Link { target: PathBuf },
}

/// Every entry under `root` (names relative to its parent), with content hash and metadata.
fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for child in fs::read_dir(dir).unwrap() {
            let path = child.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let m = fs::symlink_metadata(&path).unwrap();
            let mtime = (m.mtime(), m.mtime_nsec());
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.insert(rel, Node::Link { target: fs::read_link(&path).unwrap() });
            } else if m.is_dir() {
                out.insert(rel, Node::Dir { mode, mtime });
                walk(base, &path, out);
            } else {
                let sha256 = Sha256::digest(fs::read(&path).unwrap()).to_vec();
                out.insert(rel, Node::File { sha256, mode, mtime });
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root.parent().unwrap(), root, &mut out);
    out
}

/// The received tree equals the source, entry by entry (hash, mode, mtime, link target);
/// nothing else (no temporary files) is left in it.
fn assert_same_tree(source: &Path, received: &Path) {
    let (a, b) = (snapshot(source), snapshot(received));
    let missing: Vec<_> = a.keys().filter(|k| !b.contains_key(*k)).take(5).collect();
    let extra: Vec<_> = b.keys().filter(|k| !a.contains_key(*k)).take(5).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, extra {extra:?}");
    for (k, v) in &a {
        assert_eq!(Some(v), b.get(k), "{k}");
    }
}

/// A `braid` process whose stdout is read line by line.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = braid()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn braid");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        });
        Proc { child, lines, stderr }
    }

    /// The next stdout line as JSON; `None` at the end of the output.
    fn next_json(&mut self, limit: Duration) -> Option<serde_json::Value> {
        match self.lines.recv_timeout(limit) {
            Ok(line) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!("braid printed nothing within {limit:?}");
            }
        }
    }

    /// SIGKILL (std's `Child::kill` is `kill -9` on Unix), then reap.
    fn kill9(mut self) -> String {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.stderr.join().unwrap()
    }

    /// Waits for the exit; the remaining stdout lines and the status code.
    fn finish(mut self, limit: Duration) -> (Vec<serde_json::Value>, Option<i32>, String) {
        let mut lines = Vec::new();
        let deadline = Instant::now() + limit;
        while let Some(line) = self.next_json(deadline.saturating_duration_since(Instant::now())) {
            lines.push(line);
        }
        let status = self.child.wait().unwrap();
        (lines, status.code(), self.stderr.join().unwrap())
    }
}

/// `braid serve --listen LISTEN --json --tofu --dir DEST extra…`, and the address it printed.
fn serve(listen: &str, dest: &Path, extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["serve", "--listen", listen, "--json", "--tofu", "--dir", dest.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut p = Proc::start(&args);
    let Some(first) = p.next_json(Duration::from_secs(20)) else {
        let (_, code, stderr) = p.finish(LIMIT);
        panic!("braid serve exited ({code:?}) without a listening line: {stderr}");
    };
    let addr = first["listening"].as_str().expect("listening").to_string();
    assert_eq!(first["trees"].as_str(), Some(addr.as_str()), "{first}");
    (p, addr)
}

#[test]
fn a_tree_arrives_identical_with_links_holes_and_permissions() {
    let dir = TempDir::new("tree");
    let (src, dest) = (dir.0.join("tree"), dir.0.join("dest"));
    build_tree(&src, &mut Rng::new(18));
    fs::create_dir(&dest).unwrap();
    let (mut server, addr) = serve("127.0.0.1:0", &dest, &["--count", "1"]);

    let sent = run(&["send", src.to_str().unwrap(), "--to", &addr, "--json", "--probe-interval", "0.2"], LIMIT);
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_same_tree(&src, &dest.join("tree"));
    let sparse = fs::metadata(dest.join("tree/sparse.img")).unwrap();
    assert_eq!(sparse.len(), 12 << 20);
    assert!(sparse.blocks() * 512 < 2 << 20, "holes filled: {} bytes allocated", sparse.blocks() * 512);

    // The summary: what moved, how fast, at what cost, and how it was protected.
    assert_eq!(s["ok"], true, "{s}");
    assert_eq!(s["transport"], "tcp");
    // The sparse file's data extents are whole file-system blocks.
    let total = s["total_bytes"].as_u64().unwrap();
    let data = 2_000_077 + 18 + 150_000 + 60_000 + sum_small(&src);
    assert!((data..data + 16384).contains(&total), "{total} vs {data}: {s}");
    assert_eq!(s["bytes"], total, "{s}");
    assert_eq!(s["resumed_bytes"], 0);
    assert_eq!(s["refetched_chunks"], 0);
    assert_eq!(s["files"], 44, "{s}");
    assert!(s["seconds"].as_f64().unwrap() > 0.0);
    assert!(s["throughput_mbps"].as_f64().unwrap() > 0.0);
    assert!(s["cpu_seconds_per_gb"].as_f64().unwrap() > 0.0);
    let peak = s["peak_memory_mb"].as_f64().unwrap();
    assert!(peak > 1.0 && peak < 4096.0, "{s}");
    assert!(s["threads"].as_array().is_some(), "{s}");
    for t in s["threads"].as_array().unwrap() {
        for stage in ["read", "net", "write"] {
            assert!(t[stage].as_u64().is_some_and(|n| n >= 1), "{t}");
        }
    }
    assert_eq!(s["encrypted"], true, "{s}");
    assert!(s["cipher"].as_str().is_some_and(|c| c.starts_with("TLS")), "{s}");
    assert!(s["peer_key"].as_str().is_some_and(|k| k.starts_with("braid")), "{s}");
    assert_eq!(s["trust"], "tofu");

    let r = server.next_json(LIMIT).expect("a transfer line");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["files"], 44);
    assert_eq!(r["bytes"], total);
    assert_eq!(r["encrypted"], true);
    let (_, code, stderr) = server.finish(LIMIT);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn trees_over_braid_connections_share_the_port_with_single_files() {
    let dir = TempDir::new("over-braid");
    let (src, dest) = (dir.0.join("tree"), dir.0.join("dest"));
    build_tree(&src, &mut Rng::new(5));
    let bulk = dir.0.join("bulk");
    build_big_tree(&bulk, &mut Rng::new(6), 2, 1_500_000);
    fs::create_dir(&dest).unwrap();
    let (mut server, addr) = serve("127.0.0.1:0", &dest, &["--count", "3"]);

    // --transport braid: each engine stream is a Braid connection (Noise-encrypted).
    let sent = run(
        &["send", src.to_str().unwrap(), "--to", &addr, "--transport", "braid", "--net", "3", "--json", "--tofu"],
        LIMIT,
    );
    assert!(sent.success(), "{sent:?}");
    let s = last_json(&sent);
    assert_eq!((s["ok"].clone(), s["transport"].clone()), (true.into(), "braid".into()), "{s}");
    assert_eq!(s["encrypted"], true, "{s}");
    assert!(s["peer_key"].as_str().is_some_and(|k| k.starts_with("braid")), "{s}");
    assert!(s["threads"].as_array().unwrap().iter().all(|t| t["net"] == 3), "{s}");
    assert_same_tree(&src, &dest.join("tree"));
    assert_eq!(server.next_json(LIMIT).unwrap()["ok"], true);

    // --priority 0 implies Braid connections (a background copy).
    let sent = run(&["send", bulk.to_str().unwrap(), "--to", &addr, "--priority", "0", "--json", "--tofu"], LIMIT);
    assert!(sent.success(), "{sent:?}");
    assert_eq!(last_json(&sent)["transport"], "braid");
    assert_same_tree(&bulk, &dest.join("bulk"));
    assert_eq!(server.next_json(LIMIT).unwrap()["ok"], true);

    // A single file on the same UDP port still takes the single-file transfer.
    let one = dir.0.join("one.txt");
    fs::write(&one, b"single").unwrap();
    let sent = run(&["send", one.to_str().unwrap(), "--to", &addr, "--json", "--tofu"], LIMIT);
    assert!(sent.success(), "{sent:?}");
    assert!(!last_json(&sent)["sha256"].is_null());
    let r = server.next_json(LIMIT).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(fs::read(dest.join("one.txt")).unwrap(), b"single");
    let (_, code, stderr) = server.finish(LIMIT);
    assert_eq!(code, Some(0), "{stderr}");
}

fn sum_small(src: &Path) -> u64 {
    (0..40).map(|i| fs::metadata(src.join(format!("a/small{i:02}"))).unwrap().len()).sum()
}

#[test]
fn progress_lines_a_single_file_over_tcp_and_plain_tcp() {
    let dir = TempDir::new("jsonl");
    let dest = dir.0.join("dest");
    fs::create_dir(&dest).unwrap();
    let file = dir.0.join("one.bin");
    fs::write(&file, Rng::new(7).bytes(3_000_000)).unwrap();
    let (server, addr) = {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--json", "--insecure-no-auth", "--count", "1"];
        args.extend(["--dir", dest.to_str().unwrap()]);
        let mut p = Proc::start(&args);
        let first = p.next_json(Duration::from_secs(20)).unwrap();
        (p, first["listening"].as_str().unwrap().to_string())
    };
    // One file, --transport tcp: the engine (not the Braid single-file transfer), throttled so
    // that it lasts a few seconds.
    let out = run(
        &[
            "send",
            file.to_str().unwrap(),
            "--to",
            &addr,
            "--transport",
            "tcp",
            "--insecure-no-auth",
            "--bwlimit",
            "1MB/s",
            "--progress",
            "jsonl",
            "--json",
        ],
        LIMIT,
    );
    assert!(out.success(), "{out:?}");
    let lines: Vec<serde_json::Value> = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (summary, progress) = lines.split_last().unwrap();
    assert!(progress.len() >= 3, "{}", out.stdout);
    let mut previous = 0;
    for (i, p) in progress.iter().enumerate() {
        for key in ["elapsed", "bytes_sent", "files_done", "rate_mbps", "final"] {
            assert!(!p[key].is_null(), "{key} missing: {p}");
        }
        let sent = p["bytes_sent"].as_u64().unwrap();
        assert!(sent >= previous, "{p}");
        previous = sent;
        assert_eq!(p["final"], i + 1 == progress.len(), "{p}");
    }
    let last = progress.last().unwrap();
    assert!(last["bytes_sent"].as_u64().unwrap() >= 3_000_000, "{last}");
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["encrypted"], false);
    assert_eq!(summary["trust"], "insecure-no-auth");
    // 1 MB/s (the limit, within the token bucket's burst) for 3 MB.
    let secs = summary["seconds"].as_f64().unwrap();
    assert!(secs > 2.0, "bwlimit not applied: {summary}");
    assert_eq!(fs::read(dest.join("one.bin")).unwrap(), fs::read(&file).unwrap());
    let (lines, code, stderr) = server.finish(LIMIT);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(lines[0]["ok"], true);
    assert_eq!(lines[0]["encrypted"], false);
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let out = run(args, Duration::from_secs(30));
    assert!(!out.success(), "braid {args:?} should fail: {out:?}");
    for n in needles {
        assert!(out.stderr.contains(n), "braid {args:?}: stderr lacks `{n}`:\n{}", out.stderr);
    }
}

#[test]
fn bad_flags_and_mixtures_are_named() {
    let dir = TempDir::new("bad-flags");
    let d = dir.0.to_str().unwrap();
    let to = "127.0.0.1:9";
    fails_with(&["send", d, "--to", to, "--net", "0"], &["--net", "1 to 1024"]);
    fails_with(&["send", d, "--to", to, "--concurrency", "many"], &["--concurrency", "`auto`"]);
    fails_with(&["send", d, "--to", to, "--tuner", "slow"], &["--tuner", "marlin", "falcon"]);
    fails_with(&["send", d, "--to", to, "--transport", "udp"], &["--transport", "tcp", "braid"]);
    fails_with(&["send", d, "--to", to, "--bwlimit", "fast"], &["--bwlimit", "50MiB/s", "800mbit"]);
    fails_with(&["send", d, "--to", to, "--emulate-read", "1MB/s,x"], &["--emulate-read", "TOTAL_RATE"]);
    fails_with(&["send", d, "--to", to, "--chunk-size", "64MiB"], &["--chunk-size", "32MiB"]);
    fails_with(&["send", d, "--to", to, "--k", "0.02"], &["--k", "above 1"]);
    fails_with(&["send", d, "--to", to, "--probe-interval", "0"], &["--probe-interval", "0.01"]);
    fails_with(&["send", d, "--to", to, "--progress", "loud"], &["--progress", "jsonl"]);
    fails_with(&["send", d, "--to", to, "--net", "2", "--concurrency", "3"], &["--net", "--concurrency"]);
    fails_with(&["serve", "--listen", "127.0.0.1:0", "--dir", d, "--emulate-write", "0MB/s"], &["--emulate-write"]);
    // Flags of the single-file transfer with a tree; Braid connection flags with TCP.
    fails_with(&["send", d, "--to", to, "--transport", "tcp", "--scheduler", "min_rtt"], &["--scheduler", "--transport tcp"]);
    fails_with(&["send", d, d, "--to", to, "--name", "x"], &["--name", "directories"]);
    fails_with(&["send", d, "--to", to, "--transport", "tcp", "--priority", "0"], &["--priority", "--transport tcp"]);
    fails_with(&["send", "/nonexistent/braid/src", "--to", to, "--net", "2"], &["/nonexistent/braid/src"]);
    // A staging cap below one chunk, before anything is sent.
    fails_with(
        &["send", d, "--to", to, "--tofu", "--staging-memory", "1MiB", "--chunk-size", "4MiB"],
        &["--staging-memory", "--chunk-size", "below one chunk"],
    );
}

/// `braid send` of `src` with the kill tests' flags: 2 streams pinned, 256 KiB chunks, 2 MB/s
/// (a progress line every 2 MB: several before each random kill point).
fn kill_test_send(src: &Path, addr: &str) -> Proc {
    Proc::start(&[
        "send",
        src.to_str().unwrap(),
        "--to",
        addr,
        "--tofu",
        "--json",
        "--progress",
        "jsonl",
        "--read",
        "2",
        "--net",
        "2",
        "--write",
        "2",
        "--chunk-size",
        "256KiB",
        "--bwlimit",
        "2MB/s",
        "--probe-interval",
        "0.5",
    ])
}

const KILL_CHUNK: u64 = 256 << 10;
const KILL_STREAMS: u64 = 2;
/// Kills in one transfer (the acceptance: five, each at a random point).
const KILLS: usize = 5;
/// Files of 8 MB in the kill tests' tree: each kill lands in the first fifth of what its run
/// has left, a progress line (2 MB apart) after that point, so five kills leave about a fifth of
/// the 32 MB, several lines' worth, for the last one.
const KILL_FILES: usize = 4;

/// Reads progress lines until `bytes_sent` passes `threshold`; that line's count, or `None` if
/// the run ended first.
fn sent_past(sender: &mut Proc, threshold: u64) -> Option<u64> {
    while let Some(line) = sender.next_json(LIMIT) {
        if line["final"] == true || !line["ok"].is_null() {
            return None;
        }
        let sent = line["bytes_sent"].as_u64().unwrap();
        if sent >= threshold {
            return Some(sent);
        }
    }
    None
}

/// Runs the same send to the end; its summary.
fn final_run(src: &Path, addr: &str) -> serde_json::Value {
    let (lines, code, stderr) = kill_test_send(src, addr).finish(LIMIT);
    assert_eq!(code, Some(0), "final run failed: {stderr}");
    let summary = lines.last().unwrap().clone();
    assert_eq!(summary["ok"], true, "{summary}");
    summary
}

/// Bytes sent again: everything the killed runs put on their data streams, minus what the
/// final run found already there. Each killed run's count is its last progress line (the
/// sender was killed right after reading it, when sending at 2 MB/s adds a few KB at most).
fn check_resent(sent_before_kills: &[u64], summary: &serde_json::Value) {
    let resumed = summary["resumed_bytes"].as_u64().unwrap();
    let sent: u64 = sent_before_kills.iter().sum();
    let resent = sent.saturating_sub(resumed);
    let bound = sent_before_kills.len() as u64 * KILL_STREAMS * KILL_CHUNK;
    eprintln!(
        "sent before the kills {sent_before_kills:?} = {sent}, resumed {resumed}, sent again {resent}, bound {bound}"
    );
    assert!(resumed > 0, "nothing was resumed: {summary}");
    assert!(resent <= bound, "sent again {resent} bytes > {bound} (one chunk per stream per kill): {summary}");
    assert_eq!(summary["bytes"].as_u64().unwrap() + resumed, summary["total_bytes"].as_u64().unwrap(), "{summary}");
}

#[test]
fn kill_9_of_the_sender_five_times_then_the_same_command_completes() {
    let mut rng = Rng::new(seed());
    let dir = TempDir::new("kill-sender");
    let (src, dest) = (dir.0.join("big"), dir.0.join("dest"));
    build_big_tree(&src, &mut rng, KILL_FILES, 8_000_000);
    fs::create_dir(&dest).unwrap();
    let total = KILL_FILES as u64 * 8_000_000 + 10;
    let (mut server, addr) = serve("127.0.0.1:0", &dest, &[]);
    let mut sent = Vec::new();
    let mut done = 0u64;
    for kill in 0..KILLS {
        // A random point in the first fifth of what this run has left (at least that much is
        // left: the receiver kept at most what was sent).
        let left = (total - done).max(1);
        let threshold = rng.range(left / 20, left / 5);
        let mut sender = kill_test_send(&src, &addr);
        let at = sent_past(&mut sender, threshold).unwrap_or_else(|| panic!("kill {kill}: the run ended first"));
        sender.kill9();
        sent.push(at);
        done += at;
        let line = server.next_json(LIMIT).expect("the receiver reports the interrupted transfer");
        assert_eq!(line["ok"], false, "{line}");
    }
    let summary = final_run(&src, &addr);
    assert_same_tree(&src, &dest.join("big"));
    check_resent(&sent, &summary);
    let line = server.next_json(LIMIT).unwrap();
    assert_eq!(line["ok"], true, "{line}");
    let _ = server.kill9();
}

#[test]
fn kill_9_of_the_receiver_five_times_then_the_same_command_completes() {
    let mut rng = Rng::new(seed());
    let dir = TempDir::new("kill-receiver");
    let (src, dest) = (dir.0.join("big"), dir.0.join("dest"));
    build_big_tree(&src, &mut rng, KILL_FILES, 8_000_000);
    fs::create_dir(&dest).unwrap();
    let total = KILL_FILES as u64 * 8_000_000 + 10;
    let (mut server, addr) = serve("127.0.0.1:0", &dest, &[]);
    let mut sent = Vec::new();
    let mut done = 0u64;
    for kill in 0..KILLS {
        let left = (total - done).max(1);
        let threshold = rng.range(left / 20, left / 5);
        let mut sender = kill_test_send(&src, &addr);
        sent_past(&mut sender, threshold).unwrap_or_else(|| panic!("kill {kill}: the run ended first"));
        // Anywhere in the chunk pipeline: the sender's final line counts exactly what it sent.
        std::thread::sleep(Duration::from_millis(rng.range(0, 700)));
        server.kill9();
        // The sender notices, fails, and its last progress line has the exact count.
        let (lines, code, stderr) = sender.finish(LIMIT);
        assert_eq!(code, Some(1), "{stderr}");
        let last = lines.iter().rev().find(|l| l["final"] == true).expect("a final progress line");
        let at = last["bytes_sent"].as_u64().unwrap();
        sent.push(at);
        done += at;
        // The same port, the same destination.
        server = serve(&addr, &dest, &[]).0;
    }
    let summary = final_run(&src, &addr);
    assert_same_tree(&src, &dest.join("big"));
    check_resent(&sent, &summary);
    let _ = server.kill9();
}
