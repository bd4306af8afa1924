//! The processes of a `dash` experiment besides the browser: the served
//! directory (the content plus the player page), `braid dash serve` on the
//! server host and `braid dash play` (Braid's own ABR client) on the
//! client host. Both are [`Running`] processes: killed on drop, so a failed
//! experiment never leaves one behind.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use braid::emu::Testbed;

use super::super::transfer::process::Running;
use crate::template::{ResultExt, TemplateError};

/// The environment variable naming the players directory (holding
/// `player.html`, `player.js` and `vendor/`); default: `players/` of the
/// source tree this crate was built from.
pub const PLAYERS_ENV: &str = "BRAID_LAB_PLAYERS";

/// The environment variable naming the content cache directory; default:
/// `braid-dash-content` in the system's temporary directory.
pub const CACHE_ENV: &str = "BRAID_DASH_CACHE";

/// How long the server may take to listen.
const SERVER_START: Duration = Duration::from_secs(10);

/// Where the content sits inside the served directory.
pub const CONTENT_DIR: &str = "content";

/// The files of the player page, relative to the players directory.
const PLAYER_FILES: &[&str] = &["player.html", "player.js", "vendor/dash.all.min.js", "vendor/shaka-player.dash.js"];

/// The players directory, checked to hold the page and the vendored
/// players.
pub fn players_dir() -> Result<PathBuf, TemplateError> {
    let dir = std::env::var_os(PLAYERS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../players")));
    for f in PLAYER_FILES {
        if !dir.join(f).is_file() {
            return Err(TemplateError::Unavailable(format!(
                "{} is missing: the browser players are vendored by `npm ci --prefix players` (or set {PLAYERS_ENV})",
                dir.join(f).display()
            )));
        }
    }
    Ok(dir)
}

/// The content cache directory.
pub fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_ENV).map(PathBuf::from).unwrap_or_else(|| std::env::temp_dir().join("braid-dash-content"))
}

/// Make `www` hold the content (as `content/`) and, if `players` is given,
/// the player page. Files are hard-linked when they can be (same file
/// system), else copied: the server refuses symlinks out of its root.
pub fn assemble(www: &Path, content: &Path, players: Option<&Path>) -> Result<(), TemplateError> {
    link_tree(content, &www.join(CONTENT_DIR))?;
    if let Some(players) = players {
        for f in PLAYER_FILES {
            link_file(&players.join(f), &www.join(f))?;
        }
    }
    Ok(())
}

/// Fault injection: remove segment `number` of every representation from
/// the served copy (ffmpeg's names end in `-NNNNN.m4s`), so it is answered
/// 404. Fails if no file matched.
pub fn remove_segment(www: &Path, number: u32) -> Result<(), TemplateError> {
    let dir = www.join(CONTENT_DIR);
    let suffix = format!("-{number:05}.m4s");
    let entries = std::fs::read_dir(&dir).map_err(|e| TemplateError::io(format!("reading {}", dir.display()), e))?;
    let mut removed = 0;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(&suffix) {
            std::fs::remove_file(entry.path()).map_err(|e| TemplateError::io(format!("removing {}", entry.path().display()), e))?;
            removed += 1;
        }
    }
    if removed == 0 {
        return Err(TemplateError::Invalid(format!("missing_segment: the content has no segment number {number}")));
    }
    Ok(())
}

fn link_tree(from: &Path, to: &Path) -> Result<(), TemplateError> {
    std::fs::create_dir_all(to).map_err(|e| TemplateError::io(format!("creating {}", to.display()), e))?;
    let entries = std::fs::read_dir(from).map_err(|e| TemplateError::io(format!("reading {}", from.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| TemplateError::io(format!("reading {}", from.display()), e))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            link_tree(&path, &target)?;
        } else {
            link_file(&path, &target)?;
        }
    }
    Ok(())
}

fn link_file(from: &Path, to: &Path) -> Result<(), TemplateError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| TemplateError::io(format!("creating {}", parent.display()), e))?;
    }
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map(drop).map_err(|e| TemplateError::io(format!("copying {} to {}", from.display(), to.display()), e))
}

/// `braid dash serve` on `host`, listening on `addr:port` (HTTP over TCP)
/// and, with `braid_port`, also on `addr:braid_port` (HTTP over Braid),
/// logging its requests to `log`, its multipath connections scheduled by
/// `scheduler` (a shipped ProgMP scheduler's name; `None`: the default),
/// its Braid connections' congestion controlled by `cc`.
/// Returns once it accepts connections.
#[allow(clippy::too_many_arguments)]
pub fn start_server(
    tb: &Testbed,
    host: &str,
    braid: &Path,
    root: &Path,
    listen: SocketAddr,
    braid_listen: Option<SocketAddr>,
    scheduler: Option<&str>,
    cc: &str,
    log: &Path,
) -> Result<Running, TemplateError> {
    let mut command = tb.command(host, braid).context("the server host")?;
    command.args(["dash", "serve", "--root"]).arg(root).arg("--listen").arg(listen.to_string()).arg("--log").arg(log);
    if let Some(name) = scheduler {
        command.arg("--scheduler").arg(name);
    }
    if let Some(b) = braid_listen {
        command.arg("--braid").arg(b.to_string()).arg("--cc").arg(cc);
        trust_on_first_use(&mut command, log.parent().unwrap_or(Path::new(".")), "server");
    }
    let server = Running::start("braid dash serve", command)?;
    // Ready once a connection from its own host succeeds (the link is not
    // crossed, so a slow link does not delay this).
    let end = Instant::now() + SERVER_START;
    loop {
        let probe = tb.in_host(host, move || TcpStream::connect_timeout(&listen, Duration::from_millis(300)).is_ok());
        if probe.context("probing the server")?.join().unwrap_or(false) {
            return Ok(server);
        }
        if Instant::now() >= end {
            return Err(TemplateError::Failed(format!(
                "braid dash serve did not accept connections on {listen} within {SERVER_START:?}: {}",
                server.stderr_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Requests for the content the server logged, and those answered with an
/// error status (the browser's own requests, such as /favicon.ico, are not
/// the player's and are left out).
pub fn request_counts(log: &Path) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(log) else { return (0, 0) };
    let mut requests = 0;
    let mut errors = 0;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let content = v.get("path").and_then(serde_json::Value::as_str).is_some_and(|p| p.starts_with(&format!("/{CONTENT_DIR}/")));
        if !content {
            continue;
        }
        requests += 1;
        if v.get("status").and_then(serde_json::Value::as_u64).is_some_and(|s| s >= 400) {
            errors += 1;
        }
    }
    (requests, errors)
}

/// [`request_counts`] over the server's TCP log and, next to it, the log
/// of its Braid side (`braid dash serve` writes the Braid requests to
/// `LOG.braid.jsonl` when it serves both).
pub fn request_counts_all(log: &Path) -> (u64, u64) {
    let (tcp, tcp_errors) = request_counts(log);
    let (braid, braid_errors) = request_counts(&log.with_extension("braid.jsonl"));
    (tcp + braid, tcp_errors + braid_errors)
}

/// What `braid dash play --json` prints.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ClientReport {
    /// What happened.
    pub trace: braid_dash::qoe::PlaybackTrace,
    /// Each segment fetched.
    #[serde(default)]
    pub segments: Vec<ClientSegment>,
    /// The Braid connection's paths (none over TCP).
    #[serde(default)]
    pub paths: Vec<ClientPath>,
    /// Segment downloads abandoned for a lower representation.
    #[serde(default)]
    pub abandons: usize,
}

/// A path of the client's Braid connection as `braid dash play` reports it.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub struct ClientPath {
    /// The server address it reaches.
    pub remote: SocketAddr,
    /// UDP payload bytes received on it.
    pub bytes_received: u64,
    /// Smoothed round-trip time at the end, ms.
    pub srtt_ms: f64,
}

/// A segment as `braid dash play` reports it.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub struct ClientSegment {
    /// When it was requested, seconds since the session began.
    pub requested_s: f64,
    /// The virtual player's buffer then, seconds.
    pub buffer_s: f64,
}

/// What Braid's ABR client plays, and how.
#[derive(Debug, Clone, Copy)]
pub struct Play<'a> {
    /// The manifest's URL.
    pub url: &'a str,
    /// tcp, braid or multipath.
    pub transport: &'a str,
    /// The adaptation algorithm's name.
    pub abr: &'a str,
    /// The buffer target.
    pub buffer: Duration,
    /// The session's wall-clock limit.
    pub duration: Duration,
    /// Multipath: each path's local address and the server's address on
    /// it (`--path LOCAL=REMOTE`), the first carrying the handshake.
    pub paths: &'a [(Ipv4Addr, SocketAddr)],
    /// Multipath: the ProgMP scheduler of what the client sends (requests).
    pub scheduler: Option<&'a str>,
    /// Braid and multipath: the congestion controller.
    pub cc: &'a str,
}

/// `--path` arguments: `LOCAL=REMOTE_IP:PORT` per path.
pub fn path_args(paths: &[(Ipv4Addr, SocketAddr)]) -> Vec<String> {
    paths.iter().flat_map(|(local, remote)| ["--path".to_string(), format!("{local}={remote}")]).collect()
}

/// Braid's ABR client on `host`: `braid dash play URL --transport T --abr A
/// --buffer Bs --duration Ds [--path L=R ...] --json`, waited for up to
/// `limit`.
pub fn play_client(
    tb: &Testbed,
    host: &str,
    braid: &Path,
    play: &Play<'_>,
    limit: Duration,
    work: &Path,
) -> Result<ClientReport, TemplateError> {
    let mut command = tb.command(host, braid).context("the client host")?;
    command.args(["dash", "play", play.url, "--transport", play.transport, "--abr", play.abr]);
    command.arg("--buffer").arg(format!("{}s", play.buffer.as_secs_f64()));
    command.arg("--duration").arg(format!("{}s", play.duration.as_secs_f64()));
    command.args(path_args(play.paths));
    if let Some(name) = play.scheduler {
        command.arg("--scheduler").arg(name);
    }
    command.arg("--json");
    if play.transport != "tcp" {
        command.arg("--cc").arg(play.cc);
        trust_on_first_use(&mut command, work, "client");
    }
    let mut client = Running::start("braid dash play", command)?;
    let exit = client.wait(limit)?;
    if !exit.success() {
        return Err(client.failure(&exit));
    }
    let out = client.lines().join("\n");
    serde_json::from_str(&out).map_err(|e| {
        TemplateError::Failed(format!("braid dash play printed no report ({e}): {}", out.chars().take(300).collect::<String>()))
    })
}

/// Braid connections are authenticated and encrypted as in production: each
/// end gets a fresh identity in the experiment's work directory and trusts
/// the other's key on first use (the experiment has no other key to pin).
fn trust_on_first_use(command: &mut std::process::Command, work: &Path, who: &str) {
    command.arg("--identity").arg(work.join(format!("{who}.identity")));
    command.arg("--known-hosts").arg(work.join(format!("{who}.known_hosts")));
    command.arg("--tofu");
}

/// `http://addr:port/path`.
pub fn url(addr: Ipv4Addr, port: u16, path: &str) -> String {
    format!("http://{addr}:{port}/{}", path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_directory_holds_the_content_and_the_page() {
        let dir = tempfile::tempdir().unwrap();
        let content = dir.path().join("c");
        std::fs::create_dir_all(content.join("sub")).unwrap();
        std::fs::write(content.join("manifest.mpd"), "<MPD/>").unwrap();
        std::fs::write(content.join("sub/x.m4s"), "x").unwrap();
        let players = dir.path().join("p");
        for f in PLAYER_FILES {
            let p = players.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        let www = dir.path().join("www");
        assemble(&www, &content, Some(&players)).unwrap();
        assert_eq!(std::fs::read_to_string(www.join("content/manifest.mpd")).unwrap(), "<MPD/>");
        assert_eq!(std::fs::read_to_string(www.join("content/sub/x.m4s")).unwrap(), "x");
        assert_eq!(std::fs::read_to_string(www.join("vendor/dash.all.min.js")).unwrap(), "vendor/dash.all.min.js");
        assert!(!www.join("player.html").is_symlink());
    }

    #[test]
    fn the_request_log_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let lines = [
            r#"{"path":"/content/manifest.mpd","status":200}"#,
            r#"{"path":"/content/chunk-stream0-00003.m4s","status":404}"#,
            r#"{"path":"/favicon.ico","status":404}"#,
            "not json",
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        assert_eq!(request_counts(&log), (2, 1));
        assert_eq!(request_counts(&dir.path().join("none")), (0, 0));
        // The Braid side's log next to it counts too.
        std::fs::write(log.with_extension("braid.jsonl"), lines[0]).unwrap();
        assert_eq!(request_counts_all(&log), (3, 1));
    }

    #[test]
    fn each_path_is_a_path_argument_from_the_client_s_address_to_the_server_s() {
        let paths = [
            (Ipv4Addr::new(10, 0, 0, 2), SocketAddr::from(([10, 0, 0, 1], 8443))),
            (Ipv4Addr::new(10, 0, 1, 2), SocketAddr::from(([10, 0, 1, 1], 8443))),
        ];
        assert_eq!(path_args(&paths), ["--path", "10.0.0.2=10.0.0.1:8443", "--path", "10.0.1.2=10.0.1.1:8443"]);
        assert!(path_args(&[]).is_empty());
    }
}
