//! The `transfer` template: a file tree copied from host `a` to host `b`
//! of an emulated link by Braid's file transfer (`braid send` to
//! `braid serve`, the Marlin engine of seed 002) or by a peer tool
//! (rsync, rclone, and iperf3 for the network's own ceiling), with what
//! it cost. `braid bench transfer` runs its scenarios as small studies of
//! this template, and `studies/transfer-optimum.toml` sweeps its fixed
//! concurrencies to find each scenario's static optimum.
//!
//! One experiment:
//! 1. makes the source tree from the seed ([`tree`]: `files` files of
//!    `file_size_min..=file_size_max` bytes) on tmpfs (`storage = tmpfs`,
//!    so the machine's disk is not what is measured unless asked for);
//! 2. builds a two-host testbed over `link`, with the hosts' TCP buffer
//!    limit `stream_buffer` (a stream then carries at most about
//!    buffer / RTT: the per-stream network limit of the paper's wide-area
//!    runs; 0 lifts it);
//! 3. starts `transfers` receivers on `b` and then their senders on `a`
//!    together (one bottleneck, several transfers: fairness), each copying
//!    the tree into its own destination;
//! 4. checks every copy byte for byte against the source;
//! 5. with `compare_iperf3`, runs iperf3 right after with as many streams
//!    as Braid's last network count: the ceiling of the same testbed.
//!
//! Braid's storage can be emulated (`emulate_read`, `emulate_write`:
//! per-worker and total rates, sleeping token buckets), which makes a
//! stage's optimal concurrency known by construction; the peers have no
//! such option, so scenarios that emulate storage compare Braid's tuners
//! and fixed settings only.
//!
//! Costs are read from the kernel, the same way for every tool: CPU
//! seconds and peak resident memory of each end from `wait4(2)`
//! ([`process`]).
//!
//! Records: `throughput_mbps`, `seconds`, `bytes`, `files`,
//! `cpu_seconds_per_gb`, `peak_memory_mb`, `jain` and
//! `throughput_mbps.<i>` (several transfers); Braid: series
//! `threads.read`, `threads.net`, `threads.write`, `threads.total` and
//! `interval_mbps` per probe interval (first transfer), scalars
//! `final_read`, `final_net`, `final_write` (last interval, summed over
//! transfers), `iperf3_mbps` and `over_iperf3` with `compare_iperf3`;
//! artifact `report` ([`report::TransferRun`]).

pub mod bench;
pub mod process;
pub mod report;
pub mod scenario;
pub mod tools;
pub mod tree;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use braid::emu::Testbed;
use braid::LinkSpec;

use self::process::{Exit, Running};
use self::report::{jain, OneTransfer, ThreadSample, TransferRun};
use self::tools::{BraidOptions, Endpoints, Prepared};
use self::tree::TreeShape;
use super::data::buffers;
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};

/// The template (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Transfer;

/// The tools it runs.
pub const TOOLS: [&str; 4] = ["braid", "rsync", "rclone", "iperf3"];

/// The first receiver's port (transfer `i` uses this plus `i`).
const BASE_PORT: u16 = 5201;

/// The longest iperf3 comparison run.
const IPERF3_MAX: Duration = Duration::from_secs(30);

impl Template for Transfer {
    fn name(&self) -> &str {
        "transfer"
    }

    fn description(&self) -> &str {
        "a file tree copied over an emulated link by braid send (Marlin), rsync, rclone, or iperf3 for the network's ceiling: \
         throughput, per-stage workers over time, CPU per GB and peak memory"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::env("link", ParamType::Link, Value::Link("rtt=10ms,rate=1gbit".into()))
                .doc("the path from sender to receiver, as a link spec"),
            ParamDecl::env("stream_buffer", ParamType::Size, Value::Size(0)).doc(
                "largest TCP socket buffer on both hosts (tcp_rmem/tcp_wmem max): each stream carries at most about \
                 buffer/RTT; 0: 4 BDP, at least 16 MiB (no per-stream limit)",
            ),
            ParamDecl::env("emulate_read", ParamType::String, Value::String(String::new()))
                .doc("braid only: source storage PER_WORKER_RATE[,TOTAL_RATE] (e.g. 10MiB/s,40MiB/s); empty: none"),
            ParamDecl::env("emulate_write", ParamType::String, Value::String(String::new()))
                .doc("braid only: destination storage PER_WORKER_RATE[,TOTAL_RATE]; empty: none"),
            ParamDecl::env("storage", ParamType::one_of(&["tmpfs", "disk"]), Value::Enum("tmpfs".into()))
                .doc("where the source and destination trees live: tmpfs (/dev/shm) or disk (the work directory)"),
            ParamDecl::env("files", ParamType::int_range(1, 1_000_000), Value::Int(1)).doc("files in the tree"),
            ParamDecl::env("file_size_min", ParamType::Size, Value::Size(256 << 20)).doc("smallest file size"),
            ParamDecl::env("file_size_max", ParamType::Size, Value::Size(256 << 20))
                .doc("largest file size (sizes are uniform in between)"),
            ParamDecl::config("tool", ParamType::one_of(&TOOLS), Value::Enum("braid".into()))
                .doc("what copies the tree: braid, rsync (daemon), rclone (SFTP) or iperf3 (memory to memory)"),
            ParamDecl::config("tuner", ParamType::one_of(&["marlin", "falcon"]), Value::Enum("marlin".into()))
                .doc("braid's tuner: marlin (each stage on its own) or falcon (one shared count)"),
            ParamDecl::config("read", ParamType::int_range(0, 256), Value::Int(0)).doc("braid: readers pinned (0: tuned)"),
            ParamDecl::config("net", ParamType::int_range(0, 256), Value::Int(0)).doc("braid: streams pinned (0: tuned)"),
            ParamDecl::config("write", ParamType::int_range(0, 256), Value::Int(0)).doc("braid: writers pinned (0: tuned)"),
            ParamDecl::config("probe_interval", ParamType::Duration, Value::Duration(Duration::from_secs(3)))
                .doc("braid: seconds between the tuner's measurements (10ms to 60s)"),
            ParamDecl::config("chunk_size", ParamType::Size, Value::Size(4 << 20)).doc("braid: bytes per chunk"),
            ParamDecl::config("staging_memory", ParamType::Size, Value::Size(0))
                .doc("braid: staging cap on each side; 0: braid's default"),
            ParamDecl::config("fsync", ParamType::Bool, Value::Bool(true))
                .doc("braid: the receiver makes each file durable before its rename (rsync and rclone do not)"),
            ParamDecl::config("tcp_congestion", ParamType::String, Value::String(String::new())).doc(
                "braid: congestion control of its TCP streams (braid send --tcp-congestion; iperf3's comparison follows); \
                 empty: the host's. The peers keep the host's (a namespace cannot change its default here)",
            ),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true))
                .doc("braid: TLS 1.3 with keys pinned on both sides; false: --insecure-no-auth"),
            ParamDecl::config("rclone_transfers", ParamType::int_range(1, 256), Value::Int(4))
                .doc("rclone: --transfers (its default is 4)"),
            ParamDecl::config("streams", ParamType::int_range(1, 128), Value::Int(4)).doc("iperf3: -P streams"),
            ParamDecl::config("iperf3_secs", ParamType::Duration, Value::Duration(Duration::from_secs(10)))
                .doc("iperf3: seconds of one run (1s to 120s)"),
            ParamDecl::config("compare_iperf3", ParamType::Bool, Value::Bool(false))
                .doc("braid: run iperf3 after it with braid's last stream count over the same testbed"),
            ParamDecl::config("transfers", ParamType::int_range(1, 8), Value::Int(1))
                .doc("transfers at once over the one bottleneck, each its own receiver and destination"),
            ParamDecl::config("transfer_timeout", ParamType::Duration, Value::Duration(Duration::from_secs(600)))
                .doc("give a transfer up after this long"),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: true, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(s) = Settings::from_params(params) else { return Duration::from_secs(60) };
        let bps = s.link.rate().map(|r| r.bits_per_sec()).unwrap_or(1_000_000_000).max(1) as f64;
        let bytes = s.shape.files as f64 * (s.shape.size_min + s.shape.size_max) as f64 / 2.0 * f64::from(s.transfers);
        // Files cost time of their own (about 20k/s here), storage
        // emulation slows the start: a rough guess, for ETAs only.
        let secs = bytes * 8.0 / bps + s.shape.files as f64 / 20_000.0 + 5.0;
        Duration::from_secs_f64(secs * 1.5 + if s.compare_iperf3 { 15.0 } else { 0.0 })
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = Settings::from_params(ctx.params)?;
        braid::emu::check_capabilities()
            .map_err(|e| TemplateError::Unavailable(format!("the transfer template runs over the emulator: {e}")))?;
        let braid = s.check_tools()?;
        let scratch = Scratch::new(&s, ctx)?;
        let source = scratch.root.join("src");
        tree::generate(&source.join("tree"), s.shape, ctx.seed)?;
        let original = tree::digest(&source.join("tree"))?;
        ctx.progress(0.1);
        let tb = ctx.testbed().link(s.link.clone()).build().context("building the testbed (needs root, /dev/net/tun and iproute2)")?;
        buffers::tune_tcp(&tb, s.tcp_buffer())?;
        let cc = tcp_congestion_control(&tb);
        let b_addr = tb.layout().paths[0].b_addr;
        let braid_options = match &braid {
            Some(program) => Some(s.braid_options(program, &scratch.root)?),
            None => None,
        };
        let mut ends = Vec::new();
        for i in 0..s.transfers as usize {
            let dest = scratch.root.join(format!("dst{i}"));
            std::fs::create_dir_all(&dest).map_err(|e| TemplateError::io(format!("creating {}", dest.display()), e))?;
            let e = Endpoints {
                b_addr,
                port: BASE_PORT + i as u16,
                source_parent: source.clone(),
                dest,
                scratch: scratch.root.join(format!("conf{i}")),
            };
            std::fs::create_dir_all(&e.scratch).map_err(|err| TemplateError::io("creating a scratch directory", err))?;
            let prepared = match s.tool {
                Tool::Braid => tools::braid(&tb, braid.as_deref().unwrap_or(Path::new("braid")), &e, braid_options.as_ref().unwrap_or(&BraidOptions::default()), i)?,
                Tool::Rsync => tools::rsync(&tb, &e)?,
                Tool::Rclone => tools::rclone(&tb, &e, s.rclone_transfers)?,
                Tool::Iperf3 => tools::iperf3(&tb, &e, s.streams, s.iperf3_secs.as_secs() as u32)?,
            };
            ends.push((e, prepared));
        }
        let limit = s.transfer_timeout.min(ctx.remaining());
        let started = Instant::now();
        let mut running = Vec::new();
        for (i, (e, Prepared { receiver, sender })) in ends.into_iter().enumerate() {
            let sender = Running::start(&format!("the {} sender (transfer {i})", s.tool.name()), sender)?;
            running.push((e, receiver, sender));
        }
        let mut transfers = Vec::new();
        for (e, mut receiver, mut sender) in running {
            let (sent, completed) = match sender.wait(limit.saturating_sub(started.elapsed())) {
                Ok(exit) => (exit, true),
                // A peer slower than the time allowed (rclone over SFTP pays
                // round trips per file) is measured on what it copied by
                // then: failing would lose the whole comparison.
                Err(TemplateError::Timeout(why)) if s.tool != Tool::Braid => match sender.ended() {
                    Some(exit) => (exit.clone(), false),
                    None => return Err(TemplateError::Timeout(why)),
                },
                Err(e) => return Err(e),
            };
            if completed && !sent.success() {
                return Err(sender.failure(&sent));
            }
            let received = match s.tool {
                // `braid serve --count 1` ends once its transfer is done.
                Tool::Braid => receiver.wait(Duration::from_secs(30))?,
                _ => receiver.stop()?,
            };
            if s.tool == Tool::Braid && !received.success() {
                return Err(receiver.failure(&received));
            }
            transfers.push(s.measure(&e, &sender, (&sent, completed), &received, started, &original)?);
        }
        let ended = transfers.iter().map(|t| t.seconds).fold(0.0, f64::max);
        ctx.progress(0.9);
        let mut run = s.summarize(transfers, ended, cc);
        if s.compare_iperf3 && s.tool == Tool::Braid {
            let streams = run.transfers[0].threads.last().map(|t| t.net).unwrap_or(1).max(1);
            let secs = Duration::from_secs_f64(ended).clamp(Duration::from_secs(3), IPERF3_MAX);
            // The same congestion control as Braid's streams: the ceiling of those streams.
            let congestion = &run.tcp_congestion_control;
            run.iperf3_mbps = Some(iperf3_ceiling(&tb, b_addr, &scratch.root, (streams, congestion), secs)?);
            run.iperf3_streams = Some(streams);
        }
        record(ctx, &run);
        ctx.artifact("report", serde_json::to_value(&run).context("the report")?);
        tb.down().context("tearing the testbed down")?;
        Ok(())
    }
}

/// What copies the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Braid,
    Rsync,
    Rclone,
    Iperf3,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Braid => "braid",
            Tool::Rsync => "rsync",
            Tool::Rclone => "rclone",
            Tool::Iperf3 => "iperf3",
        }
    }
}

/// The parameters, checked.
#[derive(Debug, Clone)]
struct Settings {
    link: LinkSpec,
    link_text: String,
    stream_buffer: u64,
    emulate_read: String,
    emulate_write: String,
    on_disk: bool,
    shape: TreeShape,
    tool: Tool,
    tuner: String,
    pinned: [u32; 3],
    probe_interval: Duration,
    chunk_size: u64,
    staging_memory: u64,
    fsync: bool,
    tcp_congestion: String,
    encrypted: bool,
    rclone_transfers: u32,
    streams: u32,
    iperf3_secs: Duration,
    compare_iperf3: bool,
    transfers: u32,
    transfer_timeout: Duration,
}

fn invalid(why: String) -> TemplateError {
    TemplateError::Invalid(why)
}

impl Settings {
    fn from_params(p: &Params) -> Result<Settings, TemplateError> {
        let int = |name: &str| -> Result<u32, TemplateError> {
            u32::try_from(p.int(name)?).map_err(|_| invalid(format!("{name}: expected a whole number ≥ 0")))
        };
        let tool = match p.str("tool")? {
            "braid" => Tool::Braid,
            "rsync" => Tool::Rsync,
            "rclone" => Tool::Rclone,
            "iperf3" => Tool::Iperf3,
            other => return Err(invalid(format!("tool: `{other}` is not one of {}", TOOLS.join(", ")))),
        };
        let shape = TreeShape {
            files: int("files")?.into(),
            size_min: p.size("file_size_min")?,
            size_max: p.size("file_size_max")?,
        };
        if shape.size_min > shape.size_max {
            return Err(invalid("file_size_min: must not exceed file_size_max".into()));
        }
        let probe_interval = p.duration("probe_interval")?;
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&probe_interval) {
            return Err(invalid("probe_interval: expected 10ms to 60s".into()));
        }
        let iperf3_secs = p.duration("iperf3_secs")?;
        if !(Duration::from_secs(1)..=Duration::from_secs(120)).contains(&iperf3_secs) {
            return Err(invalid("iperf3_secs: expected 1s to 120s".into()));
        }
        let chunk_size = p.size("chunk_size")?;
        if !(1..=32 << 20).contains(&chunk_size) {
            return Err(invalid("chunk_size: expected 1 byte to 32MiB".into()));
        }
        let emulated = |name: &str| -> Result<String, TemplateError> {
            let text = p.str(name)?.trim().to_string();
            if !text.is_empty() && tool != Tool::Braid {
                return Err(invalid(format!("{name}: only braid emulates storage (tool is {})", tool.name())));
            }
            Ok(text)
        };
        Ok(Settings {
            link: p.link("link")?,
            link_text: p.str("link")?.to_string(),
            stream_buffer: p.size("stream_buffer")?,
            emulate_read: emulated("emulate_read")?,
            emulate_write: emulated("emulate_write")?,
            on_disk: p.str("storage")? == "disk",
            shape,
            tool,
            tuner: p.str("tuner")?.to_string(),
            pinned: [int("read")?, int("net")?, int("write")?],
            probe_interval,
            chunk_size,
            staging_memory: p.size("staging_memory")?,
            fsync: p.bool("fsync")?,
            tcp_congestion: tcp_congestion_param(p)?,
            encrypted: p.bool("encrypted")?,
            rclone_transfers: int("rclone_transfers")?,
            streams: int("streams")?,
            iperf3_secs,
            compare_iperf3: p.bool("compare_iperf3")?,
            transfers: int("transfers")?,
            transfer_timeout: p.duration("transfer_timeout")?,
        })
    }

    /// The programs this experiment needs, there or `Unavailable`; the
    /// `braid` program when the tool is braid.
    fn check_tools(&self) -> Result<Option<PathBuf>, TemplateError> {
        match self.tool {
            Tool::Braid => {
                if self.compare_iperf3 {
                    tools::require_program("iperf3", "iperf3")?;
                }
                tools::braid_program().map(Some)
            }
            Tool::Rsync => tools::require_program("rsync", "rsync").map(|_| None),
            Tool::Rclone => tools::require_program("rclone", "rclone").map(|_| None),
            Tool::Iperf3 => tools::require_program("iperf3", "iperf3").map(|_| None),
        }
    }

    /// The TCP buffer limit inside the hosts.
    fn tcp_buffer(&self) -> u64 {
        if self.stream_buffer > 0 {
            return self.stream_buffer.max(4096);
        }
        let bps = self.link.rate().map(|r| r.bits_per_sec()).unwrap_or(0);
        buffers::tcp_buffer_max((bps as f64 / 8.0 * self.link.rtt().as_secs_f64()) as u64)
    }

    /// `braid send` and `braid serve` flags (keys made under `dir`).
    fn braid_options(&self, braid: &Path, dir: &Path) -> Result<BraidOptions, TemplateError> {
        let mut o = BraidOptions::default();
        if self.encrypted {
            let keys = dir.join("keys");
            std::fs::create_dir_all(&keys).map_err(|e| TemplateError::io("creating the key directory", e))?;
            let sender = keygen(braid, &keys.join("a"))?;
            let receiver = keygen(braid, &keys.join("b"))?;
            for (side, own, peer, flags) in [("a", "a", &receiver, &mut o.send), ("b", "b", &sender, &mut o.serve)] {
                let known = keys.join(format!("known_hosts.{side}"));
                std::fs::write(&known, format!("* {peer}\n")).map_err(|e| TemplateError::io("writing known_hosts", e))?;
                flags.extend(["--identity".into(), keys.join(own).display().to_string()]);
                flags.extend(["--known-hosts".into(), known.display().to_string()]);
            }
        } else {
            o.send.push("--insecure-no-auth".into());
            o.serve.push("--insecure-no-auth".into());
        }
        o.send.extend(["--tuner".into(), self.tuner.clone()]);
        o.send.extend(["--probe-interval".into(), format!("{}", self.probe_interval.as_secs_f64())]);
        o.send.extend(["--chunk-size".into(), self.chunk_size.to_string()]);
        for (flag, n) in ["--read", "--net", "--write"].into_iter().zip(self.pinned) {
            if n > 0 {
                o.send.extend([flag.to_string(), n.to_string()]);
            }
        }
        if self.staging_memory > 0 {
            o.send.extend(["--staging-memory".into(), self.staging_memory.to_string()]);
            o.serve.extend(["--staging-memory".into(), self.staging_memory.to_string()]);
        }
        if !self.emulate_read.is_empty() {
            o.send.extend(["--emulate-read".into(), self.emulate_read.clone()]);
        }
        if !self.emulate_write.is_empty() {
            o.serve.extend(["--emulate-write".into(), self.emulate_write.clone()]);
        }
        if !self.fsync {
            o.serve.push("--no-fsync".into());
        }
        if !self.tcp_congestion.is_empty() {
            o.send.extend(["--tcp-congestion".into(), self.tcp_congestion.clone()]);
        }
        Ok(o)
    }

    /// One finished transfer: verified, and what it cost.
    fn measure(
        &self,
        e: &Endpoints,
        sender: &Running,
        (sent, completed): (&Exit, bool),
        received: &Exit,
        started: Instant,
        original: &std::collections::BTreeMap<PathBuf, (u64, blake3::Hash)>,
    ) -> Result<OneTransfer, TemplateError> {
        let seconds = sent.at.duration_since(started).as_secs_f64();
        let (bytes, files, (threads, tcp_congestion)) = match self.tool {
            Tool::Iperf3 => {
                let json = sender.lines().join("\n");
                let bps = tools::iperf3_received_bps(&json)?;
                ((bps / 8.0 * self.iperf3_secs.as_secs_f64()) as u64, 0, (Vec::new(), None))
            }
            _ if !completed => {
                let (bytes, files) = tree::copied(original, &e.dest.join("tree"))?;
                (bytes, files, (Vec::new(), None))
            }
            tool => {
                tree::verify(original, &e.dest.join("tree"))
                    .map_err(|why| TemplateError::Failed(format!("{}'s copy is not the source: {why}", tool.name())))?;
                let bytes = original.values().map(|v| v.0).sum();
                let threads = if tool == Tool::Braid { braid_threads(&sender.lines())? } else { (Vec::new(), None) };
                (bytes, original.len() as u64, threads)
            }
        };
        let seconds = if self.tool == Tool::Iperf3 { self.iperf3_secs.as_secs_f64() } else { seconds };
        Ok(OneTransfer {
            seconds,
            bytes,
            files,
            throughput_mbps: bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6,
            sender_cpu_secs: sent.cpu_secs,
            receiver_cpu_secs: received.cpu_secs,
            sender_peak_mb: sent.max_rss as f64 / 1e6,
            receiver_peak_mb: received.max_rss as f64 / 1e6,
            threads,
            completed,
            tcp_congestion,
        })
    }

    fn summarize(&self, transfers: Vec<OneTransfer>, ended: f64, cc: String) -> TransferRun {
        let bytes: u64 = transfers.iter().map(|t| t.bytes).sum();
        let cpu: f64 = transfers.iter().map(|t| t.sender_cpu_secs + t.receiver_cpu_secs).sum();
        let rates: Vec<f64> = transfers.iter().map(|t| t.throughput_mbps).collect();
        TransferRun {
            tool: self.tool.name().into(),
            link: self.link_text.clone(),
            tcp_congestion_control: transfers.iter().find_map(|t| t.tcp_congestion.clone()).unwrap_or(cc),
            encrypted: (self.tool == Tool::Braid && self.encrypted) || self.tool == Tool::Rclone,
            throughput_mbps: bytes as f64 * 8.0 / ended.max(1e-9) / 1e6,
            jain: jain(&rates),
            cpu_seconds_per_gb: if bytes == 0 { 0.0 } else { cpu / (bytes as f64 / 1e9) },
            peak_memory_mb: transfers.iter().map(|t| t.sender_peak_mb.max(t.receiver_peak_mb)).fold(0.0, f64::max),
            transfers,
            iperf3_mbps: None,
            iperf3_streams: None,
        }
    }
}

/// Make an identity file with `braid keygen`; its public key.
fn keygen(braid: &Path, path: &Path) -> Result<String, TemplateError> {
    let out = std::process::Command::new(braid)
        .args(["keygen", "--json", "--identity"])
        .arg(path)
        .output()
        .map_err(|e| TemplateError::io("running braid keygen", e))?;
    crate::ensure!(out.status.success(), "braid keygen: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("braid keygen's JSON")?;
    v["public_key"].as_str().map(str::to_string).ok_or_else(|| TemplateError::Failed("braid keygen printed no public_key".into()))
}

/// The `threads` of `braid send --json`'s summary (its last JSON line) and the congestion
/// control its TCP streams ran (`tcp_congestion`: the host's, or what `--tcp-congestion` chose).
fn braid_threads(lines: &[String]) -> Result<(Vec<ThreadSample>, Option<String>), TemplateError> {
    let summary = lines
        .iter()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok().filter(|v| v.get("threads").is_some()))
        .ok_or_else(|| TemplateError::Failed("braid send printed no JSON summary".into()))?;
    let threads = serde_json::from_value(summary["threads"].clone()).context("braid send's threads")?;
    Ok((threads, summary["tcp_congestion"].as_str().map(str::to_string)))
}

/// The `tcp_congestion` parameter: empty (the host's) or an algorithm's
/// name as the kernel spells it (braid's streams; the other tools keep
/// the host's, as with the other braid-only parameters).
fn tcp_congestion_param(p: &Params) -> Result<String, TemplateError> {
    let name = p.str("tcp_congestion")?.trim().to_string();
    if !name.is_empty() && (name.len() > 15 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')) {
        return Err(invalid(format!("tcp_congestion: `{name}` is not an algorithm name (letters, digits, _; at most 15, e.g. cubic, bbr, reno)")));
    }
    Ok(name)
}

/// The TCP congestion control host `a` runs (per namespace on Linux).
fn tcp_congestion_control(tb: &Testbed) -> String {
    tb.command("a", "sysctl")
        .ok()
        .and_then(|mut c| c.args(["-n", "net.ipv4.tcp_congestion_control"]).output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// iperf3 memory to memory with `streams` streams for `secs`, Mbit/s.
fn iperf3_ceiling(
    tb: &Testbed,
    b_addr: std::net::Ipv4Addr,
    dir: &Path,
    (streams, congestion): (u32, &str),
    secs: Duration,
) -> Result<f64, TemplateError> {
    let e = Endpoints {
        b_addr,
        port: BASE_PORT - 1,
        source_parent: dir.to_path_buf(),
        dest: dir.to_path_buf(),
        scratch: dir.to_path_buf(),
    };
    let Prepared { mut receiver, mut sender } = tools::iperf3(tb, &e, streams, secs.as_secs().max(1) as u32)?;
    sender.args(["-C", congestion]);
    let mut client = Running::start("the iperf3 client", sender)?;
    let exit = client.wait(secs + Duration::from_secs(20))?;
    if !exit.success() {
        return Err(client.failure(&exit));
    }
    let _ = receiver.stop();
    Ok(tools::iperf3_received_bps(&client.lines().join("\n"))? / 1e6)
}

fn record(ctx: &mut Context<'_>, run: &TransferRun) {
    ctx.record("throughput_mbps", run.throughput_mbps);
    ctx.record("seconds", run.transfers.iter().map(|t| t.seconds).fold(0.0, f64::max));
    ctx.record("bytes", run.transfers.iter().map(|t| t.bytes as f64).sum());
    ctx.record("files", run.transfers.iter().map(|t| t.files as f64).sum());
    ctx.record("cpu_seconds_per_gb", run.cpu_seconds_per_gb);
    ctx.record("peak_memory_mb", run.peak_memory_mb);
    if run.transfers.len() > 1 {
        ctx.record("jain", run.jain);
        for (i, t) in run.transfers.iter().enumerate() {
            ctx.record(&format!("throughput_mbps.{i}"), t.throughput_mbps);
        }
    }
    if let Some(first) = run.transfers.first() {
        for s in &first.threads {
            ctx.series("threads.read", s.t, f64::from(s.read));
            ctx.series("threads.net", s.t, f64::from(s.net));
            ctx.series("threads.write", s.t, f64::from(s.write));
            ctx.series("threads.total", s.t, f64::from(s.total()));
            ctx.series("interval_mbps", s.t, s.throughput_mbps);
        }
    }
    let last: Vec<&ThreadSample> = run.transfers.iter().filter_map(|t| t.threads.last()).collect();
    if !last.is_empty() {
        ctx.record("final_read", last.iter().map(|s| f64::from(s.read)).sum());
        ctx.record("final_net", last.iter().map(|s| f64::from(s.net)).sum());
        ctx.record("final_write", last.iter().map(|s| f64::from(s.write)).sum());
    }
    if let Some(i) = run.iperf3_mbps {
        ctx.record("iperf3_mbps", i);
        ctx.record("over_iperf3", run.throughput_mbps / i.max(1e-9));
    }
}

/// The experiment's trees, removed when it ends.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(s: &Settings, ctx: &mut Context<'_>) -> Result<Scratch, TemplateError> {
        let root = if s.on_disk {
            ctx.work_dir().join("trees")
        } else {
            PathBuf::from("/dev/shm").join(format!("braid-lab-transfer-{}-{}", std::process::id(), ctx.testbed_name()))
        };
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).map_err(|e| TemplateError::io(format!("creating {}", root.display()), e))?;
        Ok(Scratch { root })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::warn!("could not remove {}: {e}", self.root.display());
        }
    }
}

#[cfg(test)]
mod tests;
