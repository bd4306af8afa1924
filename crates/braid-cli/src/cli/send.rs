//! `braid send`: send files and directories, a file, or generated data to `braid serve` and
//! report whether the receiver got exactly those bytes.
//!
//! Two transfers live behind the command. Trees (directories, several sources, or any flag of
//! the file-transfer engine) go to `transfer_send`, the Marlin engine over TCP (or over Braid
//! connections, `transfer_braid`). A single FILE and `--bytes` keep the Braid single-stream
//! transfer (`braid::transfer`) with its flags and JSON keys. [`route`] decides (see
//! `ROUTING_HELP`), and refuses mixtures with a message naming the flags.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use braid::size::ByteSize;
use braid::transfer::{self, Source};
use braid::progmp::{LoadError, Program};
use braid::Endpoint;
use braid_net::PathInfo;
use clap::Args;
use serde::Serialize;

use super::transfer_args::{EngineSendArgs, TransportKind};
use super::transfer_send::TreeTransport;
use super::{
    emit, gbps, parse_secs, parse_size, progress, transfer_send, unspecified_for, Outcome, Protection, SecurityArgs,
    TransportArgs,
};

/// Seed of `--bytes` data: fixed, so a run can be repeated byte for byte.
const GENERATED_SEED: u64 = u64::from_be_bytes(*b"\0\0\0braid");

#[derive(Debug, Args)]
#[command(after_help = ROUTING_HELP)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["file", "bytes"])))]
#[command(group(clap::ArgGroup::new("dest").required(true).args(["to", "paths"])))]
pub struct SendArgs {
    /// Address of the `braid serve` to send to, e.g. 127.0.0.1:4433.
    #[arg(long, value_name = "ADDR")]
    to: Option<SocketAddr>,
    /// Multipath: a path from the local address LOCAL to the server's
    /// address REMOTE, e.g. 127.0.0.1=127.0.0.1:4433; repeat for more paths
    /// (the first carries the handshake). The server must listen on a
    /// wildcard address (braid serve --listen 0.0.0.0:4433) to be reachable
    /// on several of its addresses.
    #[arg(long = "path", value_name = "LOCAL=REMOTE", value_parser = parse_path_pair, conflicts_with = "to")]
    paths: Vec<(IpAddr, SocketAddr)>,
    /// ProgMP scheduler: the name of a shipped one (see `braid progmp list`;
    /// default min_rtt) or a .progmp file.
    #[arg(long, value_name = "NAME_OR_FILE")]
    scheduler: Option<String>,
    /// Files and directories to send (directories recursively, keeping relative paths,
    /// permissions, modification times, symlinks, empty directories and holes).
    #[arg(id = "file", value_name = "FILE")]
    sources: Vec<PathBuf>,
    /// Send this many bytes of generated data instead of a file (e.g. 4096, 100MB, 1GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    bytes: Option<ByteSize>,
    /// Name the receiver should save the file under (default: the file's name).
    #[arg(long, value_name = "NAME", requires = "file")]
    name: Option<String>,
    /// Give up after this many seconds (default: no limit beyond the transport's idle timeout).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    timeout: Option<Duration>,
    /// Priority of this transfer (DTL): 0 yields to all other traffic
    /// (LEDBAT), N > 0 competes like N TCP flows (MulTCP). Implies `--cc priority`.
    #[arg(long, value_name = "P", value_parser = parse_priority, conflicts_with = "priority_schedule")]
    priority: Option<f64>,
    /// Change the priority during the transfer, e.g. `0@0s,1@60s,2@120s`
    /// (times from the start of the connection). Implies `--cc priority`.
    #[arg(long, value_name = "P@T,...", value_parser = parse_schedule)]
    priority_schedule: Option<PrioritySchedule>,
    /// Print the summary as JSON (no progress bar).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    security: SecurityArgs,
    #[command(flatten)]
    engine: EngineSendArgs,
}

/// How `braid send` picks the transfer, for `--help`.
const ROUTING_HELP: &str = "\
Which transfer runs:
  Directories, several sources, or any engine flag (--concurrency, --read, --net, --write, --tuner,
  --k, --b, --chunk-size, --staging-memory, --bwlimit, --probe-interval, --emulate-read, --progress)
  use the file-transfer engine: read, network and write concurrency tuned online (Marlin),
  resumable after an interruption (run the same command again). Its network streams are kernel TCP
  by default (TLS 1.3, both ends authenticated by their node keys and known hosts as Braid
  connections are; plain TCP only with --insecure-no-auth on both sides), or one Braid connection
  each with --transport braid, which --priority, --cc, --mtu, --path and --scheduler imply
  (--priority 0: a background copy that yields to other traffic; --path: every stream's
  connection runs over all the paths, scheduled by --scheduler).
  A single FILE without engine flags, and --bytes, use the single-file transfer over one Braid
  connection (UDP, Noise-encrypted), as do --priority-schedule and --name, which trees refuse.
  --transport tcp sends a single FILE with the engine.";

/// Which transfer `braid send` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One file or generated data over one Braid connection.
    Braid,
    /// Files and directories on the file-transfer engine over TCP.
    Engine,
    /// The file-transfer engine, each stream a Braid connection.
    EngineOverBraid,
}

fn given(flags: &[(&'static str, bool)]) -> Vec<&'static str> {
    flags.iter().filter_map(|&(flag, given)| given.then_some(flag)).collect()
}

/// Picks the transfer from the flags and sources (see [`ROUTING_HELP`]); refuses mixtures.
pub fn route(args: &SendArgs) -> anyhow::Result<Route> {
    // Flags of the single-file transfer only.
    let single = given(&[
        ("--priority-schedule", args.priority_schedule.is_some()),
        ("--name", args.name.is_some()),
        ("--bytes", args.bytes.is_some()),
    ]);
    // Flags of Braid connections, whichever transfer runs over them.
    let braid = given(&[
        ("--path", !args.paths.is_empty()),
        ("--scheduler", args.scheduler.is_some()),
        ("--priority", args.priority.is_some()),
        ("--mtu", args.transport.mtu.is_some()),
        ("--cc", args.transport.cc != braid::CcAlgorithm::Cubic),
    ]);
    let engine_flags = args.engine.given();
    let tree = args.sources.len() > 1 || args.sources.iter().any(|p| p.is_dir());
    let wants_engine = tree || !engine_flags.is_empty();
    let why_engine = || {
        let mut why: Vec<String> = engine_flags.iter().map(|f| f.to_string()).collect();
        if tree {
            why.insert(0, "directories or several sources".into());
        }
        why.join(", ")
    };
    if wants_engine && !single.is_empty() {
        anyhow::bail!(
            "{} apply to the single-file Braid transfer, but {} use the file-transfer engine; drop one or the other",
            single.join(", "),
            why_engine()
        );
    }
    match args.engine.transport {
        Some(TransportKind::Tcp) if !single.is_empty() || !braid.is_empty() => anyhow::bail!(
            "{} apply to Braid transfers only, not to --transport tcp",
            [single, braid].concat().join(", ")
        ),
        Some(TransportKind::Tcp) => Ok(Route::Engine),
        Some(TransportKind::Braid) | None if wants_engine && (args.engine.transport.is_some() || !braid.is_empty()) => {
            if args.engine.tcp_congestion.is_some() {
                anyhow::bail!("--tcp-congestion applies to kernel TCP streams (--transport tcp); Braid connections choose theirs with --cc");
            }
            Ok(Route::EngineOverBraid)
        }
        _ if wants_engine => Ok(Route::Engine),
        _ => Ok(Route::Braid),
    }
}

/// `--path LOCAL=REMOTE`.
pub fn parse_path_pair(s: &str) -> Result<(IpAddr, SocketAddr), String> {
    let form = "expected LOCAL=REMOTE: a local IP address and the server's IP:PORT, e.g. 127.0.0.2=127.0.0.2:4433";
    let (l, r) = s.split_once('=').ok_or_else(|| format!("invalid path `{s}`: {form}"))?;
    let local = l.trim().parse::<IpAddr>().map_err(|_| format!("invalid path `{s}`: LOCAL `{l}` is not an IP address; {form}"))?;
    let remote = r
        .trim()
        .parse::<SocketAddr>()
        .map_err(|_| format!("invalid path `{s}`: REMOTE `{r}` is not an IP:PORT address; {form}"))?;
    if local.is_ipv4() != remote.is_ipv4() {
        return Err(format!("invalid path `{s}`: LOCAL and REMOTE must be of the same address family"));
    }
    Ok((local, remote))
}

/// A `--scheduler NAME_OR_FILE`: an existing file is compiled, else the
/// shipped scheduler of that name (underscores and dashes optional); see
/// [`braid::progmp::load_scheduler`].
pub fn load_scheduler(name_or_file: &str) -> anyhow::Result<(String, Arc<Program>)> {
    braid::progmp::load_scheduler(name_or_file).map_err(|e| match e {
        LoadError::Read { path, source } => anyhow::Error::new(source).context(format!("--scheduler {path}: cannot read")),
        LoadError::Invalid { .. } | LoadError::Unknown { .. } => anyhow::anyhow!("--scheduler {e}"),
        LoadError::Shipped { .. } => anyhow::anyhow!("{e}"),
    })
}

/// One path in a summary.
#[derive(Debug, Serialize)]
pub struct PathSummary {
    id: u32,
    local: Option<SocketAddr>,
    remote: SocketAddr,
    backup: bool,
    bytes_sent: u64,
    stream_bytes_sent: u64,
    packets_lost: u64,
    rtt_us: u64,
}

impl From<&PathInfo> for PathSummary {
    fn from(p: &PathInfo) -> Self {
        PathSummary {
            id: p.id,
            local: p.local,
            remote: p.remote,
            backup: p.backup,
            bytes_sent: p.bytes_sent,
            stream_bytes_sent: p.stream_bytes_sent,
            packets_lost: p.packets_lost,
            rtt_us: p.smoothed_rtt.as_micros() as u64,
        }
    }
}

fn parse_priority(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p.is_finite() && (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("invalid priority `{s}`: expected a number from 0 (yield to all traffic) to 100, e.g. 0, 1 or 2.5")),
    }
}

/// `--priority-schedule`, one value (a newtype: clap would read a bare
/// `Vec` as a repeated flag).
#[derive(Debug, Clone)]
struct PrioritySchedule(Vec<(Duration, f64)>);

fn parse_schedule(s: &str) -> Result<PrioritySchedule, String> {
    braid_lab::harness::priority_sim::parse_priority_schedule(s).map(PrioritySchedule).map_err(|e| e.to_string())
}

impl SendArgs {
    /// The priority changes to apply, from the connection's start.
    fn priority_plan(&self) -> Option<Vec<(Duration, f64)>> {
        match (&self.priority_schedule, self.priority) {
            (Some(schedule), _) => Some(schedule.0.clone()),
            (None, Some(p)) => Some(vec![(Duration::ZERO, p)]),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    to: SocketAddr,
    name: Option<String>,
    bytes: u64,
    secs: f64,
    gbps: f64,
    ok: bool,
    sha256: String,
    error: Option<String>,
    retransmitted_bytes: u64,
    packets_lost: u64,
    rtt_us: u64,
    scheduler: Option<String>,
    paths: Vec<PathSummary>,
    #[serde(flatten)]
    protection: Protection,
}

pub async fn run(args: SendArgs) -> anyhow::Result<Outcome> {
    let chosen = route(&args)?;
    if chosen != Route::Braid {
        let to = match (args.to, args.paths.first()) {
            (Some(to), _) => to,
            (None, Some(&(_, remote))) => remote,
            (None, None) => anyhow::bail!("give --to ADDR (the receiver's address) or --path LOCAL=REMOTE"),
        };
        let transport = match chosen {
            Route::EngineOverBraid => {
                let mut config = args.transport.endpoint_config(false);
                config.security = args.security.load()?;
                if args.priority.is_some() {
                    config.transport.congestion_control = braid::CcAlgorithm::Priority;
                }
                let scheduler = args.scheduler.as_deref().map(load_scheduler).transpose()?.map(|(_, p)| p);
                let multipath = (!args.paths.is_empty())
                    .then(|| super::transfer_braid::Multipath { paths: args.paths.clone(), scheduler });
                TreeTransport::Braid { config: Box::new(config), priority: args.priority, multipath }
            }
            _ => TreeTransport::Tcp,
        };
        return transfer_send::run(transfer_send::TreeSend {
            transport,
            to,
            sources: &args.sources,
            engine: &args.engine,
            security: &args.security,
            json: args.json,
            timeout: args.timeout,
        })
        .await;
    }
    let (source, name) = match (args.sources.first(), args.bytes) {
        (Some(path), _) => {
            let source = Source::file(path).await?;
            let name = args.name.clone().or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()));
            (source, name)
        }
        (None, Some(n)) => (Source::generated(n.0, GENERATED_SEED), None),
        (None, None) => anyhow::bail!("give a FILE or --bytes SIZE"),
    };
    let size = source.size();
    let plan = args.priority_plan();
    let mut config = args.transport.endpoint_config(false);
    config.security = args.security.load()?;
    let policy = args.security.policy();
    if plan.is_some() {
        config.transport.congestion_control = braid::CcAlgorithm::Priority;
    }
    let scheduler = args.scheduler.as_deref().map(load_scheduler).transpose()?;
    let to = match (args.to, args.paths.first()) {
        (Some(to), _) => to,
        (None, Some(&(_, remote))) => remote,
        (None, None) => anyhow::bail!("give --to ADDR or --path LOCAL=REMOTE"),
    };
    // Several local addresses need a socket bound to the wildcard address.
    let endpoint = Endpoint::bind_with(unspecified_for(to), config).context("cannot open a UDP socket")?;
    let bar = progress::bytes_bar(size, "sending", args.json);
    bar.set_message(name.clone().unwrap_or_else(|| "generated data".into()));
    let work = async {
        let start = Instant::now();
        let mut conn = if args.paths.is_empty() {
            endpoint.connect(to).await.with_context(|| format!("--to {to}: cannot connect"))?
        } else {
            endpoint.connect_multipath(&args.paths).await.with_context(|| format!("--path: cannot connect to {to}"))?
        };
        if let Some((_, program)) = &scheduler {
            conn.set_scheduler(program.clone())?;
        }
        let schedule = plan.map(|plan| tokio::spawn(apply_priorities(conn.clone(), plan)));
        let report = transfer::send(&mut conn, name.clone(), source, &mut |sent| bar.set_position(sent)).await?;
        let elapsed = start.elapsed();
        let stats = conn.stats();
        let paths: Vec<PathSummary> = conn.paths().iter().map(PathSummary::from).collect();
        let protection = Protection::of(&conn, policy);
        if let Some(task) = schedule {
            task.abort();
        }
        // The verdict is in; a failing close changes nothing about it.
        let _ = tokio::time::timeout(Duration::from_secs(10), conn.close()).await;
        anyhow::Ok((report, elapsed, stats, paths, protection))
    };
    let outcome = match args.timeout {
        Some(t) => tokio::time::timeout(t, work)
            .await
            .map_err(|_| anyhow::anyhow!("--timeout: transfer not finished after {:.1} s", t.as_secs_f64()))?,
        None => work.await,
    };
    bar.finish_and_clear();
    let (report, elapsed, stats, paths, protection) = outcome?;
    endpoint.close();
    let summary = Summary {
        to,
        name,
        bytes: report.bytes,
        secs: elapsed.as_secs_f64(),
        gbps: gbps(report.bytes, elapsed),
        ok: report.ok(),
        sha256: report.sha256.clone(),
        error: report.verdict.error.clone(),
        retransmitted_bytes: stats.retransmitted_bytes,
        packets_lost: stats.packets_lost,
        rtt_us: stats.smoothed_rtt.as_micros() as u64,
        scheduler: scheduler.map(|(name, _)| name),
        paths,
        protection,
    };
    if args.json {
        emit(&serde_json::to_string(&summary)?);
    } else {
        emit(&format!(
            "sent {} to {}: {} bytes in {:.3} s, {:.3} Gbit/s, sha256 {}{} (rtt {} us, {} packets lost)",
            summary.name.as_deref().map(|n| format!("`{n}`")).unwrap_or_else(|| "generated data".into()),
            summary.to,
            summary.bytes,
            summary.secs,
            summary.gbps,
            if summary.ok { "ok" } else { "FAILED" },
            summary.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default(),
            summary.rtt_us,
            summary.packets_lost,
        ));
        emit(&format!("  {}", summary.protection.text()));
        if summary.paths.len() > 1 || summary.scheduler.is_some() {
            for p in &summary.paths {
                emit(&format!(
                    "  path {} {} -> {}{}: {} stream bytes, {} UDP bytes, rtt {} us, {} packets lost",
                    p.id,
                    p.local.map(|l| l.ip().to_string()).unwrap_or_else(|| "*".into()),
                    p.remote,
                    if p.backup { " (backup)" } else { "" },
                    p.stream_bytes_sent,
                    p.bytes_sent,
                    p.rtt_us,
                    p.packets_lost,
                ));
            }
        }
    }
    Ok(Outcome::from_ok(summary.ok))
}

/// Set each priority of `plan` at its time, counted from now (the
/// connection's start). The controller keeps its window across a change.
async fn apply_priorities(conn: braid::Connection, plan: Vec<(Duration, f64)>) {
    let start = tokio::time::Instant::now();
    for (at, p) in plan {
        tokio::time::sleep_until(start + at).await;
        match conn.set_congestion_parameter("priority", p) {
            Ok(()) => tracing::info!(priority = p, at_secs = at.as_secs_f64(), "priority changed"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot change the priority");
                return;
            }
        }
    }
}

#[cfg(test)]
mod route_tests {
    use super::*;

    fn route_of(argv: &[&str]) -> anyhow::Result<Route> {
        route(&crate::cli::parse_flags::<SendArgs>(argv))
    }

    #[test]
    fn the_tcp_congestion_flag_takes_the_engine_over_tcp_and_only_that() {
        let here = env!("CARGO_MANIFEST_DIR");
        assert_eq!(route_of(&["--to", "127.0.0.1:1", "--tcp-congestion", "reno", here]).unwrap(), Route::Engine);
        let e = route_of(&["--to", "127.0.0.1:1", "--transport", "braid", "--tcp-congestion", "reno", here]).unwrap_err();
        assert!(e.to_string().contains("--tcp-congestion applies to kernel TCP streams"), "{e}");
    }
}
