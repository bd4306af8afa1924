//! The programs a `transfer` experiment compares, each as its two ends on
//! the emulated hosts: the receiver on host `b`, started first and ready
//! once it listens, then the sender on host `a`, whose run is the
//! transfer.
//!
//! - **braid**: `braid serve --dir` and `braid send` on the file-transfer
//!   engine (kernel TCP streams; TLS 1.3 with a key pair made for the
//!   experiment and pinned on both sides, or `--insecure-no-auth`);
//! - **rsync**: an rsync daemon (`rsync --daemon`, a module writing into
//!   the destination) and `rsync -a` to it: rsync's own protocol over one
//!   TCP connection, **unencrypted** (rsync over ssh would add ssh's
//!   cipher; the daemon is rsync at its fastest);
//! - **rclone**: `rclone serve sftp` and `rclone copy` to it with
//!   `--transfers N` (SSH: encrypted, as Braid is);
//! - **iperf3**: memory to memory with `-P N` streams, no storage at all:
//!   what the network carries (the ceiling a file transfer over the same
//!   streams can reach).
//!
//! Every tool copies the source directory `tree` into the destination
//! directory, so each leaves `DEST/tree/…`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use braid::emu::Testbed;

use super::process::Running;
use crate::template::{ResultExt, TemplateError};

/// The environment variable naming the `braid` program the experiment
/// runs (default: this program if it is `braid`, else a `braid` beside it
/// or one directory up, as in a cargo target directory).
pub const BRAID_PROGRAM_ENV: &str = "BRAID_LAB_BRAID";

/// The `braid` program to run.
pub fn braid_program() -> Result<PathBuf, TemplateError> {
    if let Some(p) = std::env::var_os(BRAID_PROGRAM_ENV) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| TemplateError::io("finding this program", e))?;
    if exe.file_stem().is_some_and(|n| n == "braid") {
        return Ok(exe);
    }
    let beside = exe.parent().map(|d| d.join("braid"));
    let up = exe.parent().and_then(Path::parent).map(|d| d.join("braid"));
    [beside, up].into_iter().flatten().find(|p| p.is_file()).ok_or_else(|| {
        TemplateError::Unavailable(format!(
            "the transfer template runs the `braid` program: run it from `braid`, or set {BRAID_PROGRAM_ENV}"
        ))
    })
}

/// Fail with `Unavailable` unless `program` is on the PATH.
pub fn require_program(program: &str, package: &str) -> Result<(), TemplateError> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(TemplateError::Unavailable(format!("`{program}` is not installed (Debian package {package})")))
    }
}

/// Where one transfer goes.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// The receiver's address (host `b`).
    pub b_addr: Ipv4Addr,
    /// Its port.
    pub port: u16,
    /// The directory holding the source directory `tree`.
    pub source_parent: PathBuf,
    /// The destination directory (exists, empty).
    pub dest: PathBuf,
    /// A scratch directory for configuration files.
    pub scratch: PathBuf,
}

impl Endpoints {
    fn source_tree(&self) -> PathBuf {
        self.source_parent.join("tree")
    }
}

/// Braid's options for one transfer.
#[derive(Debug, Clone, Default)]
pub struct BraidOptions {
    /// Flags for `braid send` beyond the source and `--to`.
    pub send: Vec<String>,
    /// Flags for `braid serve` beyond `--listen` and `--dir`.
    pub serve: Vec<String>,
}

/// A started receiver and the command of its sender.
pub struct Prepared {
    /// The receiver, listening.
    pub receiver: Running,
    /// The sender's command (start it to begin the transfer).
    pub sender: Command,
}

/// Start braid's receiver and prepare its sender.
pub fn braid(tb: &Testbed, braid: &Path, e: &Endpoints, o: &BraidOptions, index: usize) -> Result<Prepared, TemplateError> {
    let mut serve = tb.command("b", braid).context("host b")?;
    serve
        .args(["serve", "--listen", &format!("{}:{}", e.b_addr, e.port), "--dir"])
        .arg(&e.dest)
        .args(["--json", "--count", "1"])
        .args(&o.serve);
    let mut receiver = Running::start(&format!("braid serve (transfer {index})"), serve)?;
    match receiver.next_line(Duration::from_secs(20)) {
        Some(line) if line.contains("\"listening\"") => {}
        _ => {
            let exit = receiver.stop()?;
            return Err(receiver.failure(&exit));
        }
    }
    let mut send = tb.command("a", braid).context("host a")?;
    send.arg("send")
        .arg(e.source_tree())
        .args(["--to", &format!("{}:{}", e.b_addr, e.port), "--json", "--transport", "tcp"])
        .args(&o.send);
    Ok(Prepared { receiver, sender: send })
}

/// Start an rsync daemon serving module `dest` and prepare `rsync -a`.
pub fn rsync(tb: &Testbed, e: &Endpoints) -> Result<Prepared, TemplateError> {
    let conf = e.scratch.join("rsyncd.conf");
    let text = format!(
        "pid file = {}\nuse chroot = no\nmax connections = 0\n[dest]\n  path = {}\n  read only = no\n  uid = root\n  gid = root\n",
        e.scratch.join("rsyncd.pid").display(),
        e.dest.display()
    );
    std::fs::write(&conf, text).map_err(|e| TemplateError::io("writing rsyncd.conf", e))?;
    let mut daemon = tb.command("b", "rsync").context("host b")?;
    daemon
        .args(["--daemon", "--no-detach"])
        .arg(format!("--config={}", conf.display()))
        .arg(format!("--address={}", e.b_addr))
        .arg(format!("--port={}", e.port));
    let receiver = Running::start("the rsync daemon", daemon)?;
    wait_listening(tb, e, "the rsync daemon")?;
    let mut send = tb.command("a", "rsync").context("host a")?;
    send.arg("-a").arg(e.source_tree()).arg(format!("rsync://{}:{}/dest/", e.b_addr, e.port));
    Ok(Prepared { receiver, sender: send })
}

/// Start `rclone serve sftp` on the destination and prepare `rclone copy`
/// to it with `transfers` parallel transfers. SFTP, rclone's usual way to
/// reach another machine without an object store (its WebDAV server
/// managed 30 small files per second here, whatever `--transfers`),
/// encrypted by SSH as Braid is by TLS.
pub fn rclone(tb: &Testbed, e: &Endpoints, transfers: u32) -> Result<Prepared, TemplateError> {
    let config = e.scratch.join("rclone.conf");
    std::fs::write(&config, "").map_err(|e| TemplateError::io("writing rclone.conf", e))?;
    let password = "braid-lab";
    let mut server = tb.command("b", "rclone").context("host b")?;
    server
        .args(["serve", "sftp"])
        .arg(&e.dest)
        .args(["--addr", &format!("{}:{}", e.b_addr, e.port), "--user", "lab", "--pass", password, "--config"])
        .arg(&config)
        .env("XDG_CACHE_HOME", &e.scratch);
    let receiver = Running::start("rclone serve sftp", server)?;
    wait_listening(tb, e, "rclone serve sftp")?;
    let obscured = std::process::Command::new("rclone")
        .args(["obscure", password])
        .output()
        .map_err(|e| TemplateError::io("running rclone obscure", e))?;
    crate::ensure!(obscured.status.success(), "rclone obscure: {}", String::from_utf8_lossy(&obscured.stderr));
    let mut send = tb.command("a", "rclone").context("host a")?;
    send.arg("copy")
        .arg(e.source_tree())
        .arg(":sftp:tree")
        .args(["--transfers", &transfers.to_string(), "--config"])
        .arg(&config)
        .env("RCLONE_SFTP_HOST", e.b_addr.to_string())
        .env("RCLONE_SFTP_PORT", e.port.to_string())
        .env("RCLONE_SFTP_USER", "lab")
        .env("RCLONE_SFTP_PASS", String::from_utf8_lossy(&obscured.stdout).trim())
        .env("XDG_CACHE_HOME", &e.scratch);
    Ok(Prepared { receiver, sender: send })
}

/// Start an iperf3 server and prepare a client of `streams` streams for
/// `secs` seconds (JSON output).
pub fn iperf3(tb: &Testbed, e: &Endpoints, streams: u32, secs: u32) -> Result<Prepared, TemplateError> {
    let mut server = tb.command("b", "iperf3").context("host b")?;
    server.args(["-s", "-1", "--forceflush", "-B", &e.b_addr.to_string(), "-p", &e.port.to_string()]);
    let mut receiver = Running::start("the iperf3 server", server)?;
    // Not a connection probe: a one-off server (-1) would take the probe
    // for its client. It says when it listens.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match receiver.next_line(until.saturating_duration_since(Instant::now())) {
            Some(line) if line.contains("Server listening") => break,
            Some(_) => continue,
            None => {
                let exit = receiver.stop()?;
                return Err(receiver.failure(&exit));
            }
        }
    }
    let mut send = tb.command("a", "iperf3").context("host a")?;
    send.args(["-c", &e.b_addr.to_string(), "-p", &e.port.to_string(), "-J"])
        .args(["-P", &streams.to_string(), "-t", &secs.to_string()]);
    Ok(Prepared { receiver, sender: send })
}

/// Bits per second an iperf3 client's JSON reports as received.
pub fn iperf3_received_bps(json: &str) -> Result<f64, TemplateError> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3's JSON")?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| TemplateError::Failed(format!("iperf3's JSON has no end.sum_received.bits_per_second: {}", v["error"])))
}

/// Wait (up to 10 s) until something accepts TCP connections at the
/// endpoint, connecting from host `a`.
fn wait_listening(tb: &Testbed, e: &Endpoints, what: &str) -> Result<(), TemplateError> {
    let addr = std::net::SocketAddr::from((e.b_addr, e.port));
    let probe = tb
        .in_host("a", move || {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        })
        .context("probing from host a")?;
    match probe.join() {
        Ok(true) => Ok(()),
        _ => Err(TemplateError::Failed(format!("{what} did not listen on {addr} within 10 s"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_json_gives_the_received_rate_or_its_error() {
        let ok = r#"{"end":{"sum_received":{"bits_per_second":9.5e8}}}"#;
        assert_eq!(iperf3_received_bps(ok).unwrap(), 9.5e8);
        let bad = r#"{"error":"unable to connect to server"}"#;
        assert!(iperf3_received_bps(bad).unwrap_err().to_string().contains("unable to connect"));
        assert!(iperf3_received_bps("not json").is_err());
    }
}
