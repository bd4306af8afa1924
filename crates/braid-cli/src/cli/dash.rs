//! `braid dash`: the DASH study's pieces from the command line (issue 21): make the test video
//! (`content`), serve it over HTTP on TCP and/or Braid (`serve`), and play it with Braid's ABR
//! client over TCP, Braid or multipath Braid (`play`), printing the QoE metrics. The lab's `dash`
//! template runs `serve` in the server namespace and `play` in the client namespace.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use braid_dash::abr::AbrKind;
use braid_dash::client::{self, PlayConfig, PlayReport, Transport};
use braid_dash::content::{self, ContentSpec, MANIFEST};
use braid_dash::server;
use clap::{Args, Subcommand, ValueEnum};

use super::{emit, table, Outcome, SecurityArgs, TransportArgs};

#[derive(Debug, Subcommand)]
pub enum DashCommand {
    /// Make the study's test video with ffmpeg (9 rungs, 0.25..10 Mbit/s), cached; prints the manifest path.
    Content(ContentArgs),
    /// Serve a directory (content, player page) over HTTP on TCP and/or Braid, logging each request.
    Serve(ServeArgs),
    /// Play a manifest with Braid's ABR client over TCP, Braid or multipath Braid; prints QoE metrics.
    Play(PlayArgs),
}

#[derive(Debug, Args)]
pub struct ContentArgs {
    /// Cache directory; the video goes into a subdirectory named by a hash of its spec.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Segment length in seconds (the study uses 1, 2, 6, 10, 15).
    #[arg(long, value_name = "SECS", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=60))]
    segment: u32,
    /// Video length in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..=3600))]
    duration: u32,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory to serve (a content directory, or one holding several and a player page).
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Serve HTTP on this TCP address (port 0 picks one).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Serve HTTP over Braid connections on this UDP address (port 0 picks one; a wildcard address
    /// accepts multipath paths to any of this host's addresses).
    #[arg(long, value_name = "ADDR:PORT")]
    braid: Option<SocketAddr>,
    /// Append one JSON line per request (t_s, path, status, bytes, duration_s) to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// ProgMP scheduler of the segments sent on multipath Braid connections (`braid progmp list`).
    #[arg(long, value_name = "NAME_OR_FILE")]
    scheduler: Option<String>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    security: SecurityArgs,
}

/// How `play` reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TransportKind {
    /// HTTP over kernel TCP.
    Tcp,
    /// HTTP over one Braid connection (UDP).
    Braid,
    /// HTTP over a multipath Braid connection (give --path once per path).
    Multipath,
}

#[derive(Debug, Args)]
pub struct PlayArgs {
    /// The manifest URL, http://HOST:PORT/PATH (for Braid: the server's --braid address).
    #[arg(value_name = "URL")]
    url: String,
    /// Transport: tcp, braid or multipath.
    #[arg(long, value_enum, default_value = "tcp")]
    transport: TransportKind,
    /// A multipath path from local address LOCAL to the server: `LOCAL` (to the URL's address) or
    /// `LOCAL=REMOTE_IP:PORT`. Repeat per path; the first carries the handshake.
    #[arg(long = "path", value_name = "LOCAL[=REMOTE]")]
    paths: Vec<String>,
    /// ProgMP scheduler of what this client sends (requests) on a multipath connection.
    #[arg(long, value_name = "NAME_OR_FILE")]
    scheduler: Option<String>,
    /// Adaptation algorithm: throughput, bola or mpc.
    #[arg(long, value_name = "ALGO", default_value = "throughput", value_parser = parse_abr)]
    abr: AbrKind,
    /// Buffer target (media seconds), e.g. 30s.
    #[arg(long, value_name = "SECS", default_value = "30s", value_parser = parse_seconds)]
    buffer: f64,
    /// Stop the session after this wall-clock time, e.g. 20s (default: play to the end).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Bound on each HTTP request, e.g. 30s.
    #[arg(long, value_name = "SECS", default_value = "30s", value_parser = parse_seconds)]
    request_timeout: f64,
    /// Fetch only the video segments (browsers fetch audio too).
    #[arg(long)]
    no_audio: bool,
    /// One JSON object {"trace", "summary", "segments", ...} instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    transport_args: TransportArgs,
    #[command(flatten)]
    security: SecurityArgs,
}

/// `--abr` names.
fn parse_abr(s: &str) -> Result<AbrKind, String> {
    s.parse::<AbrKind>()
}

/// Seconds: `30`, `30s`, `2.5s`, `500ms`, `2m`.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale < 1e7 => Ok(v * scale),
        _ => Err(format!("invalid duration `{s}`: expected seconds like 30, 30s, 2.5s, 500ms or 2m")),
    }
}

/// `--path LOCAL[=REMOTE]`, the remote defaulting to `default_remote`.
fn parse_path(s: &str, default_remote: SocketAddr) -> anyhow::Result<(IpAddr, SocketAddr)> {
    let form = "expected LOCAL_IP or LOCAL_IP=REMOTE_IP:PORT";
    let (l, r) = match s.split_once('=') {
        Some((l, r)) => (l, Some(r)),
        None => (s, None),
    };
    let local: IpAddr = l.trim().parse().map_err(|_| anyhow::anyhow!("--path `{s}`: `{l}` is not an IP address; {form}"))?;
    let remote = match r {
        Some(r) => r.trim().parse::<SocketAddr>().map_err(|_| anyhow::anyhow!("--path `{s}`: `{r}` is not IP:PORT; {form}"))?,
        None => default_remote,
    };
    anyhow::ensure!(local.is_ipv4() == remote.is_ipv4(), "--path `{s}`: LOCAL and REMOTE must be of the same address family");
    Ok((local, remote))
}

pub async fn run(cmd: DashCommand) -> anyhow::Result<Outcome> {
    match cmd {
        DashCommand::Content(a) => run_content(a).await,
        DashCommand::Serve(a) => run_serve(a).await,
        DashCommand::Play(a) => run_play(a).await,
    }
}

async fn run_content(a: ContentArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(a.duration >= a.segment, "--duration {} must be at least one --segment ({})", a.duration, a.segment);
    let spec = ContentSpec { duration_secs: a.duration, ..ContentSpec::thesis(a.segment) };
    let out = a.out.clone();
    // ffmpeg blocks for seconds to a minute: off the async workers.
    let dir = tokio::task::spawn_blocking(move || content::ensure(&out, &spec)).await.context("content builder panicked")??;
    let manifest = dir.join(MANIFEST);
    if a.json {
        emit(&serde_json::json!({ "manifest": manifest, "dir": dir, "segment_s": a.segment, "duration_s": a.duration }).to_string());
    } else {
        emit(&manifest.display().to_string());
    }
    Ok(Outcome::Success)
}

async fn run_serve(a: ServeArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(a.listen.is_some() || a.braid.is_some(), "give --listen ADDR:PORT (TCP) and/or --braid ADDR:PORT (Braid)");
    anyhow::ensure!(a.root.is_dir(), "--root {}: not an existing directory", a.root.display());
    let scheduler = a.scheduler.as_deref().map(super::send::load_scheduler).transpose()?.map(|(_, p)| p);
    let mut tasks = tokio::task::JoinSet::new();
    let mut tcp_addr = None;
    if let Some(addr) = a.listen {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--listen {addr}"))?;
        tcp_addr = Some(listener.local_addr()?);
        tasks.spawn(server::serve_tcp(listener, a.root.clone(), a.log.clone()));
    }
    let (mut braid_addr, mut key) = (None, None);
    if let Some(addr) = a.braid {
        let mut config = a.transport.endpoint_config(true);
        config.security = a.security.load()?;
        if let braid_net::Security::Authenticated(c) = &config.security {
            key = Some(c.identity.public_key().to_string());
        }
        let endpoint = braid::Endpoint::bind_with(addr, config).with_context(|| format!("--braid {addr}"))?;
        braid_addr = Some(endpoint.local_addr());
        // Both servers may append to one log: give the Braid one its own file next to it.
        let log = match (&a.log, tcp_addr) {
            (Some(l), Some(_)) => Some(l.with_extension("braid.jsonl")),
            (l, _) => l.clone(),
        };
        tasks.spawn(server::serve_braid_scheduled(endpoint, a.root.clone(), log, scheduler));
    }
    let policy = a.security.policy();
    if a.json {
        emit(
            &serde_json::json!({
                "tcp": tcp_addr.map(|x| x.to_string()),
                "braid": braid_addr.map(|x| x.to_string()),
                "root": a.root,
                "key": key,
                "trust": policy.as_str(),
            })
            .to_string(),
        );
    } else {
        if let Some(t) = tcp_addr {
            emit(&format!("serving {} over HTTP on {t} (tcp)", a.root.display()));
        }
        if let Some(b) = braid_addr {
            emit(&format!("serving {} over HTTP on Braid {b} (udp)", a.root.display()));
            match &key {
                Some(k) => emit(&format!("this node's key: {k} (trust: {policy}); clients trust it with `{b} {k}` in known hosts, or --tofu")),
                None => emit("WARNING: --insecure-no-auth: Braid connections are neither authenticated nor encrypted"),
            }
        }
    }
    tokio::select! {
        done = tasks.join_next() => match done {
            Some(Ok(Err(e))) => Err(e.into()),
            Some(Err(e)) => Err(anyhow::anyhow!("server task failed: {e}")),
            _ => Ok(Outcome::Success),
        },
        _ = tokio::signal::ctrl_c() => Ok(Outcome::Success),
    }
}

async fn run_play(a: PlayArgs) -> anyhow::Result<Outcome> {
    let url = braid_dash::http::HttpUrl::parse(&a.url)?;
    let endpoint_config = || -> anyhow::Result<braid::EndpointConfig> {
        let mut c = a.transport_args.endpoint_config(false);
        c.security = a.security.load()?;
        Ok(c)
    };
    anyhow::ensure!(a.paths.is_empty() || a.transport == TransportKind::Multipath, "--path needs --transport multipath");
    let transport = match a.transport {
        TransportKind::Tcp => Transport::Tcp,
        TransportKind::Braid => Transport::Braid { config: endpoint_config()? },
        TransportKind::Multipath => {
            anyhow::ensure!(!a.paths.is_empty(), "--transport multipath needs --path LOCAL[=REMOTE] once per path");
            let default_remote = tokio::net::lookup_host(url.authority())
                .await
                .with_context(|| format!("{}: cannot resolve", url.authority()))?
                .next()
                .with_context(|| format!("{}: no address", url.authority()))?;
            let paths = a.paths.iter().map(|p| parse_path(p, default_remote)).collect::<anyhow::Result<Vec<_>>>()?;
            let scheduler = a.scheduler.as_deref().map(super::send::load_scheduler).transpose()?.map(|(_, p)| p);
            Transport::Multipath { config: endpoint_config()?, paths, scheduler }
        }
    };
    let mut config = PlayConfig::new(a.url.clone(), transport);
    config.abr = a.abr;
    config.buffer_target_s = a.buffer;
    config.max_duration_s = a.duration;
    config.request_timeout = Duration::from_secs_f64(a.request_timeout.max(0.001));
    config.audio = !a.no_audio;
    let report = client::play(config).await?;
    if a.json {
        emit(&serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(Outcome::Success)
}

fn print_report(r: &PlayReport) {
    let rows: Vec<Vec<String>> = r
        .segments
        .iter()
        .map(|s| {
            vec![
                s.index.to_string(),
                s.representation.clone(),
                format!("{:.0}", s.kbps),
                format!("{:.2}", s.requested_s),
                format!("{:.1}", s.buffer_s),
                format!("{:.3}", s.download_s),
                format!("{:.0}", s.throughput_kbps),
            ]
        })
        .collect();
    emit(&table::render(&["segment", "rep", "kbit/s", "at s", "buffer s", "download s", "tput kbit/s"], &rows));
    let s = &r.summary;
    let summary = vec![vec![
        format!("{} {}", r.transport, r.abr),
        format!("{:.2}", s.startup_s),
        s.stall_count.to_string(),
        format!("{:.2}", s.stall_total_s),
        format!("{:.0}", s.mean_kbps),
        s.switches.to_string(),
        format!("{:.2}", s.qoe_hossfeld),
        format!("{:.2}", s.qoe_linear),
    ]];
    emit("");
    emit(&table::render(&["session", "startup s", "stalls", "stall s", "mean kbit/s", "switches", "MOS (Hossfeld)", "QoE lin"], &summary));
    emit(&format!("stopped: {} after {:.1} s", r.stopped, r.wall_s));
    if r.abandons > 0 {
        emit(&format!("segment downloads abandoned for a lower representation: {}", r.abandons));
    }
    for p in &r.paths {
        emit(&format!("  path {:?} -> {}: {} bytes received, srtt {:.1} ms", p.local, p.remote, p.bytes_received, p.srtt_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_paths_parse_with_named_forms() {
        assert_eq!(parse_seconds("30s"), Ok(30.0));
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        assert_eq!(parse_seconds("500ms"), Ok(0.5));
        assert_eq!(parse_seconds("2m"), Ok(120.0));
        assert!(parse_seconds("soon").unwrap_err().contains("expected seconds"));
        let remote: SocketAddr = "10.0.0.1:443".parse().unwrap();
        assert_eq!(parse_path("10.1.0.2", remote).unwrap(), ("10.1.0.2".parse().unwrap(), remote));
        assert_eq!(parse_path("10.2.0.2=10.2.0.1:443", remote).unwrap().1, "10.2.0.1:443".parse().unwrap());
        assert!(parse_path("eth0", remote).unwrap_err().to_string().contains("not an IP address"));
        assert!(parse_path("::1", remote).unwrap_err().to_string().contains("family"));
    }

    #[test]
    fn play_flags_parse() {
        let a: PlayArgs = crate::cli::parse_flags(&[
            "http://10.0.0.1:8080/manifest.mpd",
            "--transport",
            "multipath",
            "--path",
            "10.1.0.2",
            "--path",
            "10.2.0.2=10.2.0.1:8080",
            "--abr",
            "mpc",
            "--buffer",
            "20s",
            "--duration",
            "20s",
            "--insecure-no-auth",
            "--json",
        ]);
        assert_eq!((a.transport, a.abr, a.buffer, a.duration, a.paths.len()), (TransportKind::Multipath, AbrKind::Mpc, 20.0, Some(20.0), 2));
    }
}
