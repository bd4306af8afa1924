//! Command-line interface of the `braid` binary: argument definitions,
//! value parsers whose errors name the allowed form, and dispatch.

mod bench;
mod bench_data;
mod bench_exon;
mod bench_flood;
mod bench_handshake;
mod bench_messages;
mod bench_multipath;
mod bench_priority;
mod bench_transfer;
mod dash;
mod demo;
mod emu;
mod keygen;
mod lab;
mod progmp;
mod progress;
mod rules;
mod send;
mod serve;
mod signals;
mod sim;
mod sim_priority;
mod table;
mod tarl;
mod transfer_args;
mod transfer_braid;
mod transfer_net;
mod transfer_send;
mod transfer_serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use braid::size::ByteSize;
use braid::{CcAlgorithm, EndpointConfig, LinkSpec};
use clap::{Args, Parser, Subcommand};

/// Exit status when a transfer completed but failed verification, or a
/// simulated transfer did not finish correctly (1 is any other error, 2 a
/// usage error).
pub const EXIT_FAILED_CHECK: u8 = 3;

/// Braid: adaptive transport middleware.
#[derive(Debug, Parser)]
#[command(name = "braid", version)]
#[command(after_help = "Logging: set RUST_LOG (e.g. RUST_LOG=braid_net=debug). Progress bars go to stderr \
                        and are hidden when it is not a terminal or with --json.")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Receive files, directory trees (with --dir) and generated test data from `braid send`, verifying each end to end.
    Serve(serve::ServeArgs),
    /// Send files and directories (resumable, concurrency tuned per stage), or generated data, to a `braid serve`.
    Send(send::SendArgs),
    /// Run experiments in the deterministic simulator.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Compare Braid with kernel TCP and QUIC (quinn) on loopback.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Transfer 1 GiB over Braid and over kernel TCP on loopback and compare.
    Demo(demo::DemoArgs),
    /// Real-network emulator: hosts in network namespaces joined by emulated links (needs root).
    #[command(subcommand)]
    Emu(emu::EmuCommand),
    /// ProgMP multipath scheduler programs: check one, list the shipped ones.
    #[command(subcommand)]
    Progmp(progmp::ProgmpCommand),
    /// Experiment studies: templates × configurations × environments, stored in SQLite, analysed and plotted.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Create this node's identity key file (Ed25519, mode 0600), or --show its public key.
    Keygen(keygen::KeygenArgs),
    /// TARL topology adaptation rules: check, show, list the shipped ones, run one in the simulator.
    #[command(subcommand)]
    Tarl(tarl::TarlCommand),
    /// Fossa ECA adaptation rules: show, check, run on a live Node (eval), learn by genetic programming.
    #[command(subcommand)]
    Rules(rules::RulesCommand),
    /// Adaptive video streaming (DASH): make the test video, serve it, play it with Braid's ABR client.
    #[command(subcommand)]
    Dash(dash::DashCommand),
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Bulk transfer over a simulated link, in virtual time.
    Transfer(sim::SimTransferArgs),
    /// DTL priority scenarios (polite, latecomer, multcp, switch, five): LEDBAT/MulTCP flows against TCP.
    Priority(sim_priority::SimPriorityArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Bulk throughput (or, with --messages, message rate), Braid vs TCP vs quinn.
    Stream(bench::StreamArgs),
    /// Exon exactly-once messaging vs kernel TCP over the emulator (one-way or RPC), with end-to-end checking.
    Exon(bench_exon::BenchExonArgs),
    /// Legitimate Braid and Exon throughput under a flood of spoofed handshakes at the receiver (emulator).
    Flood(bench_flood::BenchFloodArgs),
    /// Small-message rate and request/response latency per transport on loopback (Exon, Braid, Node, TCP, quinn).
    Messages(bench_messages::BenchMessagesArgs),
    /// Connections established per second (connect, 1 byte each way, close): Braid vs quinn, TLS over TCP, TCP.
    Handshake(bench_handshake::BenchHandshakeArgs),
    /// DTL priority scenarios over the emulator: Braid LEDBAT/MulTCP flows against kernel TCP, with a plot.
    Priority(bench_priority::BenchPriorityArgs),
    /// DATA (learned TCP/Braid mix) vs TCP only and Braid only over the emulator, and control-message latency.
    Data(bench_data::BenchDataArgs),
    /// Braid multipath (ProgMP schedulers) vs kernel MPTCP over two emulated paths.
    Multipath(bench_multipath::BenchMultipathArgs),
    /// File transfer (Marlin) over the emulator: tuners against the static optimum, and rsync and rclone.
    Transfer(bench_transfer::BenchTransferArgs),
}

/// Options shared by the commands that open Braid connections.
#[derive(Debug, Clone, Args)]
pub struct TransportArgs {
    /// Congestion control: newreno, cubic, bbr, ledbat, ledbat++, multcp, priority or tq.
    #[arg(long, value_name = "ALGO", default_value = "cubic", value_parser = parse_cc)]
    pub cc: CcAlgorithm,
    /// Largest UDP payload Braid sends, in bytes (1200..=65527).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(1200..=65527))]
    pub mtu: Option<u16>,
}

/// Who this node is and whom it trusts: the options of every command that
/// talks to another node. Encryption and authentication are on unless
/// `--insecure-no-auth` is given.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// This node's identity key file (default: $BRAID_HOME/identity, i.e. ~/.braid/identity; created on
    /// first use with mode 0600; `braid keygen --show` prints its public key).
    #[arg(long, value_name = "PATH")]
    pub identity: Option<PathBuf>,
    /// The peers' keys this node trusts, one `PATTERN KEY` line each (default: $BRAID_HOME/known_hosts).
    #[arg(long, value_name = "PATH")]
    pub known_hosts: Option<PathBuf>,
    /// Trust on first use: accept a peer that is not in known hosts and record its key there (a changed key
    /// is still refused).
    #[arg(long)]
    pub tofu: bool,
    /// INSECURE: no authentication and no encryption, for benchmarks of the bare protocol only; the peer
    /// must use it too.
    #[arg(long, conflicts_with_all = ["tofu", "identity", "known_hosts"])]
    pub insecure_no_auth: bool,
}

impl SecurityArgs {
    /// The trust policy these flags choose.
    pub fn policy(&self) -> braid_identity::TrustPolicy {
        use braid_identity::TrustPolicy;
        match (self.insecure_no_auth, self.tofu) {
            (true, _) => TrustPolicy::InsecureNoAuth,
            (false, true) => TrustPolicy::Tofu,
            (false, false) => TrustPolicy::KnownHosts,
        }
    }

    /// The endpoint security: the identity loaded (created on first use)
    /// and known hosts opened, or none with `--insecure-no-auth`.
    pub fn load(&self) -> anyhow::Result<braid_net::Security> {
        let node = braid_net::NodeSecurity {
            identity: self.identity.clone(),
            known_hosts: self.known_hosts.clone(),
            policy: self.policy(),
        };
        node.load().map_err(|e| anyhow::anyhow!("{e} (see --identity, --known-hosts, or --insecure-no-auth)"))
    }
}

/// What a summary says about a connection's protection.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Protection {
    /// Packets were authenticated and encrypted.
    pub encrypted: bool,
    /// The cipher suite, when encrypted.
    pub cipher: Option<&'static str>,
    /// The peer's public key, proved by the handshake.
    pub peer_key: Option<String>,
    /// The trust policy (`known-hosts`, `tofu` or `insecure-no-auth`).
    pub trust: &'static str,
}

impl Protection {
    /// The protection of `conn` under `policy`.
    pub fn of(conn: &braid_net::Connection, policy: braid_identity::TrustPolicy) -> Protection {
        let cipher = conn.cipher_suite();
        Protection {
            encrypted: cipher.is_some(),
            cipher: cipher.map(|c| c.name()),
            peer_key: conn.peer_key().map(|k| k.to_string()),
            trust: policy.as_str(),
        }
    }

    /// A short text form for summary lines.
    pub fn text(&self) -> String {
        match (&self.cipher, &self.peer_key) {
            (Some(c), Some(k)) => format!("encrypted ({c}), peer {k}"),
            (Some(c), None) => format!("encrypted ({c})"),
            _ if self.encrypted => "encrypted and authenticated".into(),
            _ => "NOT encrypted (--insecure-no-auth)".into(),
        }
    }
}

impl TransportArgs {
    /// An endpoint configuration with these options applied.
    pub fn endpoint_config(&self, accept_incoming: bool) -> EndpointConfig {
        let mut cfg = EndpointConfig { accept_incoming, ..Default::default() };
        cfg.transport.congestion_control = self.cc;
        if let Some(mtu) = self.mtu {
            cfg.transport.max_datagram_size = mtu;
        }
        cfg
    }
}

/// `--bytes`-style sizes.
pub fn parse_size(s: &str) -> Result<ByteSize, String> {
    s.parse::<ByteSize>().map_err(|e| e.to_string())
}

/// `--link` specs; the error names the offending field.
pub fn parse_link(s: &str) -> Result<LinkSpec, String> {
    s.parse::<LinkSpec>().map_err(|e| e.to_string())
}

/// `--cc` names.
pub fn parse_cc(s: &str) -> Result<CcAlgorithm, String> {
    s.parse::<CcAlgorithm>().map_err(|e| e.to_string())
}

/// Durations in seconds, possibly fractional (`--timeout 2.5`).
pub fn parse_secs(s: &str) -> Result<Duration, String> {
    let expected = "expected a positive number of seconds, e.g. 30 or 2.5";
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("invalid duration `{s}`: {expected}")),
    }
}

/// A wildcard address of the same family as `peer`, to bind a client to.
pub fn unspecified_for(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// Gigabits per second.
pub fn gbps(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-9) / 1e9
}

/// Print one line to stdout and flush it (scripts read it line by line).
pub fn emit(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Where received files go, checked up front so a typo fails fast.
pub fn check_out_dir(dir: &Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(d) = dir {
        anyhow::ensure!(d.is_dir(), "--dir (--out) {}: not an existing directory", d.display());
    }
    Ok(())
}

/// Parse arguments, run the command, map the outcome to an exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // The lab runs templates on its own threads and worker processes, and
    // templates build their own async runtimes: no runtime around it.
    if let Command::Lab(c) = cli.command {
        return exit_code(lab::run(c));
    }
    // `braid rules eval|learn` run lab templates too.
    if let Command::Rules(c) = cli.command {
        return exit_code(rules::run(c));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(a) => serve::run(a).await,
            Command::Send(a) => send::run(a).await,
            Command::Sim(SimCommand::Transfer(a)) => sim::run(a).await,
            Command::Sim(SimCommand::Priority(a)) => sim_priority::run(a).await,
            Command::Bench(BenchCommand::Stream(a)) => bench::run(a).await,
            Command::Bench(BenchCommand::Exon(a)) => bench_exon::run(a).await,
            Command::Bench(BenchCommand::Flood(a)) => bench_flood::run(a).await,
            Command::Bench(BenchCommand::Messages(a)) => bench_messages::run(a).await,
            Command::Bench(BenchCommand::Handshake(a)) => bench_handshake::run(a).await,
            Command::Bench(BenchCommand::Priority(a)) => bench_priority::run(a).await,
            Command::Bench(BenchCommand::Data(a)) => bench_data::run(a).await,
            Command::Bench(BenchCommand::Multipath(a)) => bench_multipath::run(a).await,
            Command::Bench(BenchCommand::Transfer(a)) => bench_transfer::run(a).await,
            Command::Demo(a) => demo::run(a).await,
            Command::Emu(c) => emu::run(c).await,
            Command::Progmp(c) => progmp::run(c),
            Command::Keygen(a) => keygen::run(a),
            Command::Tarl(c) => tarl::run(c),
            Command::Dash(c) => dash::run(c).await,
            Command::Lab(_) | Command::Rules(_) => unreachable!("handled before the runtime starts"),
        }
    });
    // Background tasks (drivers of endpoints still open) must not keep the
    // process alive once the command is done.
    runtime.shutdown_timeout(Duration::from_millis(200));
    exit_code(result)
}

fn exit_code(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(EXIT_FAILED_CHECK),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How a command that ran to the end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything verified.
    Success,
    /// It ran, but a verification failed (digest mismatch, sim not ok).
    CheckFailed,
}

impl Outcome {
    /// `Success` if `ok`.
    pub fn from_ok(ok: bool) -> Outcome {
        if ok {
            Outcome::Success
        } else {
            Outcome::CheckFailed
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,usvg=error"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// A command's flags parsed as `braid` parses them, for the commands'
/// tests: flags clap refuses fail the test.
#[cfg(test)]
pub(crate) fn parse_flags<A: Args + clap::FromArgMatches>(flags: &[&str]) -> A {
    let command = A::augment_args(clap::Command::new("braid"));
    let matches = command.try_get_matches_from(std::iter::once("braid").chain(flags.iter().copied()));
    let matches = matches.unwrap_or_else(|e| panic!("{flags:?}: {e}"));
    A::from_arg_matches(&matches).unwrap_or_else(|e| panic!("{flags:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parsers_name_the_allowed_form() {
        assert!(parse_size("12 parsecs").unwrap_err().contains("expected a whole number of bytes"));
        assert!(parse_cc("vegas").unwrap_err().contains("newreno"));
        assert!(parse_secs("-1").unwrap_err().contains("positive number of seconds"));
        assert_eq!(parse_secs("2.5"), Ok(Duration::from_millis(2500)));
    }
}
