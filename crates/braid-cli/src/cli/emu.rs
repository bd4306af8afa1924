//! `braid emu`: real-network testbeds of hosts in network namespaces joined
//! by paths that apply the link model (crate `braid-emu`).
//!
//! `up` starts a daemon (this binary, `braid emu daemon`, detached) that
//! owns the testbed and serves `set`/`down` on a unix socket; `run` builds
//! a testbed in this process for one pair of commands.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use braid::LinkSpec;
use braid_emu::sys::{self, SignalPipe};
use braid_emu::{bench, control, state, Testbed, Topology};
use clap::{Args, Subcommand};
use serde_json::json;

use super::{emit, parse_link, parse_secs, table, Outcome};

const SPEC_HELP: &str = "keys: delay, rtt, jitter, rate, queue, loss, ge, reorder, reorder_delay, dup, mtu, trace; \
                         a2b:/b2a: prefixes for one direction; ;at=10s:SPEC for changes over time";

#[derive(Debug, Subcommand)]
pub enum EmuCommand {
    /// Create a testbed (hosts a and b, one path per --link) and leave it running.
    Up(UpArgs),
    /// Run a command on a host of a running testbed.
    Exec(ExecArgs),
    /// Change a path of a running testbed (packets arriving afterwards see the new spec).
    Set(SetArgs),
    /// Tear a testbed down (also reclaims one whose forwarder was killed).
    Down(DownArgs),
    /// One shot: create a testbed, run CMD_B on host b and CMD_A on host a, tear down.
    Run(RunArgs),
    /// Measure the emulator: kernel-TCP throughput at rtt=0ms and 20ms, added delay.
    Bench(BenchArgs),
    /// The process that owns a testbed started by `up` (internal).
    #[command(hide = true)]
    Daemon(BuildArgs),
}

/// What a testbed consists of.
#[derive(Debug, Clone, Args)]
pub struct BuildArgs {
    /// Testbed name (1-8 characters of a-z, 0-9, '-').
    #[arg(long, value_name = "N", default_value = "emu")]
    name: String,
    /// A path between hosts a and b, e.g. rtt=20ms,rate=100mbit,loss=1%; repeat for several paths.
    #[arg(long, value_name = "SPEC", value_parser = parse_link, required_unless_present = "topology", long_help = SPEC_HELP)]
    link: Vec<LinkSpec>,
    /// TOML topology: more hosts, named paths (see the README).
    #[arg(long, value_name = "FILE", conflicts_with = "link")]
    topology: Option<PathBuf>,
    /// Seed of the links' random choices.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
}

impl BuildArgs {
    fn builder(&self) -> anyhow::Result<braid_emu::TestbedBuilder> {
        let mut b = Testbed::builder().name(&self.name).seed(self.seed);
        match &self.topology {
            Some(path) => b = b.topology(Topology::load(path)?),
            None => {
                for l in &self.link {
                    b = b.link(l.clone());
                }
            }
        }
        Ok(b)
    }

    fn to_args(&self) -> Vec<String> {
        let mut v = vec!["--name".to_string(), self.name.clone(), "--seed".into(), self.seed.to_string()];
        for l in &self.link {
            v.push("--link".into());
            v.push(l.to_string());
        }
        if let Some(t) = &self.topology {
            v.push("--topology".into());
            v.push(t.display().to_string());
        }
        v
    }
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    build: BuildArgs,
    /// Print hosts, addresses and paths as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Testbed name.
    #[arg(long, value_name = "N", default_value = "emu")]
    name: String,
    /// Host to run on (a, b, or a topology host).
    host: String,
    /// The command and its arguments (after --).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// Testbed name.
    #[arg(long, value_name = "N", default_value = "emu")]
    name: String,
    /// Path id (0, 1, ...) or topology name.
    path: String,
    /// The new spec.
    #[arg(value_parser = parse_link, long_help = SPEC_HELP)]
    spec: LinkSpec,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Testbed name.
    #[arg(long, value_name = "N", default_value = "emu")]
    name: String,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Testbed name (default: one unique to this process).
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// A path between hosts a and b; repeat for several paths.
    #[arg(long, value_name = "SPEC", value_parser = parse_link, required_unless_present = "topology", long_help = SPEC_HELP)]
    link: Vec<LinkSpec>,
    /// TOML topology (CMD_A runs on its first host, CMD_B on its second, unless hosts a and b exist).
    #[arg(long, value_name = "FILE", conflicts_with = "link")]
    topology: Option<PathBuf>,
    /// Seed of the links' random choices.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Seconds between starting CMD_B and CMD_A (lets a server in CMD_B bind).
    #[arg(long, value_name = "SECS", default_value = "0.5", value_parser = parse_secs)]
    start_delay: Duration,
    /// CMD_A [::: CMD_B], after --.
    #[arg(last = true, required = true, value_name = "CMD_A ::: CMD_B")]
    commands: Vec<String>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Seconds of measurement per throughput run (after 1 s of warm-up).
    #[arg(long, value_name = "SECS", default_value = "4", value_parser = parse_secs)]
    secs: Duration,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: EmuCommand) -> anyhow::Result<Outcome> {
    // Everything here blocks on processes and the testbed: keep it off the
    // async workers.
    tokio::task::spawn_blocking(move || match cmd {
        EmuCommand::Up(a) => up(a),
        EmuCommand::Exec(a) => exec(a),
        EmuCommand::Set(a) => set(a),
        EmuCommand::Down(a) => down(a),
        EmuCommand::Run(a) => run_once(a),
        EmuCommand::Bench(a) => bench_cmd(a),
        EmuCommand::Daemon(a) => daemon(a),
    })
    .await
    .context("emulator task")?
}

fn up(args: UpArgs) -> anyhow::Result<Outcome> {
    braid_emu::check_capabilities()?;
    braid_emu::check_name(&args.build.name)?;
    if let Some(t) = &args.build.topology {
        Topology::load(t)?; // fail here, with the file's message, not in the daemon
    }
    let exe = std::env::current_exe().context("locating the braid binary")?;
    let mut child = Command::new(exe)
        .args(["emu", "daemon"])
        .args(args.build.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the testbed daemon")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).context("reading from the daemon")?;
    if line.trim().is_empty() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = child.wait();
        let err = err.trim().trim_start_matches("error: ");
        bail!("{}", if err.is_empty() { "the testbed daemon exited without a word" } else { err });
    }
    let layout: braid_emu::Layout = serde_json::from_str(line.trim()).context("parsing the daemon's layout")?;
    if args.json {
        emit(&serde_json::to_string(&layout)?);
    } else {
        emit(layout.to_text().trim_end());
        emit(&format!("  run commands with: braid emu exec --name {} a -- CMD; stop with: braid emu down --name {}", layout.name, layout.name));
    }
    Ok(Outcome::Success)
}

fn daemon(args: BuildArgs) -> anyhow::Result<Outcome> {
    sys::setsid();
    // Before building: a signal during the build must still clean up.
    let signals = SignalPipe::install(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let tb = args.builder()?.build()?;
    emit(&serde_json::to_string(tb.layout())?);
    let log = PathBuf::from(state::STATE_DIR).join(format!("{}.log", tb.name()));
    sys::redirect_stdio(&log).context("detaching from the terminal")?;
    let ended = control::serve(tb, &signals)?;
    eprintln!("testbed {}: ended ({ended:?})", args.name);
    Ok(Outcome::Success)
}

fn exec(args: ExecArgs) -> anyhow::Result<Outcome> {
    let layout = control::layout(&args.name)?;
    let host = layout.hosts.get(&args.host).with_context(|| {
        format!("no host `{}` in testbed `{}` (hosts: {})", args.host, args.name, layout.hosts.keys().cloned().collect::<Vec<_>>().join(", "))
    })?;
    let (program, rest) = args.command.split_first().context("no command given after --")?;
    let err = Command::new("ip").args(["netns", "exec", &host.netns, program]).args(rest).exec();
    bail!("cannot run `ip netns exec {} {program}`: {err}", host.netns)
}

fn set(args: SetArgs) -> anyhow::Result<Outcome> {
    control::set(&args.name, &args.path, &args.spec)?;
    if args.json {
        emit(&json!({"name": args.name, "path": args.path, "spec": args.spec.to_string(), "ok": true}).to_string());
    } else {
        emit(&format!("testbed {} path {}: {}", args.name, args.path, args.spec));
    }
    Ok(Outcome::Success)
}

fn down(args: DownArgs) -> anyhow::Result<Outcome> {
    control::down(&args.name)?;
    emit(&format!("testbed {} is down", args.name));
    Ok(Outcome::Success)
}

/// Exit status of a finished child, shell style (128 + signal).
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn run_once(args: RunArgs) -> anyhow::Result<Outcome> {
    let mut parts = args.commands.splitn(2, |s| s == ":::");
    let cmd_a: Vec<String> = parts.next().unwrap_or_default().to_vec();
    let cmd_b: Vec<String> = parts.next().unwrap_or_default().to_vec();
    if cmd_a.is_empty() {
        bail!("no CMD_A: expected `-- CMD_A [::: CMD_B]`");
    }
    let signals = SignalPipe::install(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let build = BuildArgs {
        name: args.name.clone().unwrap_or_default(),
        link: args.link.clone(),
        topology: args.topology.clone(),
        seed: args.seed,
    };
    let mut builder = build.builder()?;
    if args.name.is_none() {
        builder = Testbed::builder().seed(args.seed);
        builder = match &args.topology {
            Some(p) => builder.topology(Topology::load(p)?),
            None => args.link.iter().fold(builder, |b, l| b.link(l.clone())),
        };
    }
    let tb = builder.build()?;
    let hosts: Vec<String> = tb.layout().hosts.keys().cloned().collect();
    let (host_a, host_b) = if hosts.iter().any(|h| h == "a") && hosts.iter().any(|h| h == "b") {
        ("a".to_string(), "b".to_string())
    } else {
        let t = args.topology.as_ref().map(|p| Topology::load(p)).transpose()?;
        let order = t.map(|t| t.hosts).unwrap_or(hosts);
        (order[0].clone(), order[1].clone())
    };
    let code = (|| -> anyhow::Result<i32> {
        let mut b = if cmd_b.is_empty() { None } else { Some(tb.spawn(&host_b, &cmd_b)?) };
        // Wait before A, but stop at once on a signal.
        let mut fds = [sys::pollin(signals.raw())];
        sys::ppoll(&mut fds, Some(args.start_delay))?;
        if let Some(sig) = signals.take() {
            return Ok(128 + sig);
        }
        let mut a = tb.spawn(&host_a, &cmd_a)?;
        let a_fd = sys::pidfd_open(a.id())?;
        let code = loop {
            use std::os::fd::AsRawFd;
            let mut fds = [sys::pollin(a_fd.as_raw_fd()), sys::pollin(signals.raw())];
            sys::ppoll(&mut fds, None)?;
            if let Some(sig) = signals.take() {
                let _ = a.kill();
                let _ = a.wait();
                break 128 + sig;
            }
            if let Some(status) = a.try_wait()? {
                break exit_code(status);
            }
        };
        if let Some(b) = b.as_mut() {
            match b.try_wait()? {
                Some(status) if !status.success() => eprintln!("note: CMD_B exited with status {}", exit_code(status)),
                Some(_) => {}
                None => {
                    sys::kill(b.id(), libc::SIGTERM);
                    let deadline = std::time::Instant::now() + Duration::from_secs(2);
                    while b.try_wait()?.is_none() && std::time::Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = b.kill();
                    let _ = b.wait();
                }
            }
        }
        Ok(code)
    })();
    tb.down()?;
    let code = code?;
    if code == 0 {
        Ok(Outcome::Success)
    } else {
        // The command's own status, as a shell would report it.
        std::process::exit(code)
    }
}

fn bench_cmd(args: BenchArgs) -> anyhow::Result<Outcome> {
    let warmup = Duration::from_secs(1);
    let gbps = |spec: &str| -> anyhow::Result<f64> {
        let tb = Testbed::builder().link(spec.parse()?).build()?;
        let bps = bench::tcp_goodput(&tb, 0, warmup, args.secs)?;
        tb.down()?;
        Ok(bps / 1e9)
    };
    let gbps_rtt0 = gbps("rtt=0ms")?;
    let gbps_rtt20 = gbps("rtt=20ms")?;
    // Added delay: one-way delay of small datagrams at 1000 per second over
    // a 10 ms one-way path, minus those 10 ms.
    let tb = Testbed::builder().link("rtt=20ms".parse()?).build()?;
    let delays = bench::udp_one_way_delays(&tb, 0, 2000, Duration::from_millis(1))?;
    tb.down()?;
    let base = Duration::from_millis(10);
    let added: Vec<Duration> = delays.iter().map(|d| d.saturating_sub(base)).collect();
    let us = |q| bench::quantile(&added, q).as_secs_f64() * 1e6;
    let report = json!({
        "gbps_rtt0": gbps_rtt0,
        "gbps_rtt20": gbps_rtt20,
        "added_delay_us_p50": us(0.5),
        "added_delay_us_p99": us(0.99),
        "delay_samples": added.len(),
    });
    if args.json {
        emit(&report.to_string());
    } else {
        let rows = vec![
            vec!["TCP throughput, rtt=0ms (Gbit/s)".into(), format!("{gbps_rtt0:.3}")],
            vec!["TCP throughput, rtt=20ms (Gbit/s)".into(), format!("{gbps_rtt20:.3}")],
            vec!["added one-way delay p50 (us)".into(), format!("{:.1}", us(0.5))],
            vec!["added one-way delay p99 (us)".into(), format!("{:.1}", us(0.99))],
        ];
        emit(&table::render(&["metric", "value"], &rows));
    }
    Ok(Outcome::Success)
}
