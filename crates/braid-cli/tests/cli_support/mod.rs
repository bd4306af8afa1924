//! Helpers for the CLI tests: run the `braid` binary with a hard time
//! limit, killing it on failure, and read a server's output line by line.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a finished command left.
#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// This test process's Braid home: its own identity and known hosts, never
/// the user's. The identity is created here once, so concurrent commands
/// do not race to create it.
pub fn braid_home() -> &'static PathBuf {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        braid_identity::Identity::load_or_create(&home.join(braid_identity::IDENTITY_FILE)).unwrap();
        home
    })
}

pub fn braid() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_braid"));
    c.env_remove("RUST_LOG");
    c.env(braid_identity::BRAID_HOME_VAR, braid_home());
    c
}

/// `args` as these tests run them: `braid serve` and `braid send` trust on
/// first use (`--tofu`, under [`braid_home`]) unless a test chooses its
/// trust itself (`--insecure-no-auth`, `--tofu`, `--known-hosts`), as a
/// user trying Braid out would.
fn with_trust(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let talks = matches!(args.first(), Some(&"send") | Some(&"serve"));
    let chosen = ["--insecure-no-auth", "--tofu", "--known-hosts"];
    if talks && !args.iter().any(|a| chosen.contains(a)) {
        v.push("--tofu".into());
    }
    v
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Run `braid args…` to completion; killed (and the test failed) if it
/// takes longer than `limit`.
pub fn run(args: &[&str], limit: Duration) -> Output {
    let mut child = braid()
        .args(with_trust(args))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn braid");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let code = wait(&mut child, limit);
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    match code {
        Some(status) => Output { code: status, stdout, stderr },
        None => panic!("braid {args:?} did not finish within {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"),
    }
}

/// Wait up to `limit`; `None` (after killing the child) on timeout.
fn wait(child: &mut Child, limit: Duration) -> Option<Option<i32>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for braid") {
            return Some(status.code());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `braid serve`, killed when dropped.
pub struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// The address it listens on.
    pub addr: String,
}

impl Server {
    /// Start `braid serve --listen 127.0.0.1:0 --json extra…` and read the
    /// address it picked.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_on("127.0.0.1:0", extra)
    }

    /// Start `braid serve --listen LISTEN --json extra…` and read the
    /// address it picked.
    pub fn start_on(listen: &str, extra: &[&str]) -> Server {
        let mut args = vec!["serve", "--listen", listen, "--json"];
        args.extend_from_slice(extra);
        let mut child = braid()
            .args(with_trust(&args))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn braid serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = Some(drain(child.stderr.take().unwrap()));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server { child, lines, stderr, addr: String::new() };
        let first = server.next_json(Duration::from_secs(20));
        server.addr = first["listening"].as_str().expect("listening line").to_string();
        server
    }

    /// The next line of output, parsed as JSON.
    pub fn next_json(&mut self, limit: Duration) -> serde_json::Value {
        match self.lines.recv_timeout(limit) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")),
            Err(_) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = self.stderr.take().map(|h| h.join().unwrap()).unwrap_or_default();
                panic!("braid serve printed nothing within {limit:?}; stderr:\n{err}");
            }
        }
    }

    /// Wait for the server to exit by itself (it was given `--count`).
    pub fn wait_exit(mut self, limit: Duration) -> Option<i32> {
        match wait(&mut self.child, limit) {
            Some(code) => code,
            None => panic!("braid serve did not exit within {limit:?}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh, empty temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("braid-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Parse the last stdout line as JSON.
pub fn last_json(out: &Output) -> serde_json::Value {
    let line = out.stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr:\n{}", out.stderr));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nstderr:\n{}", out.stderr))
}
