//! The flags of tree transfers on the file-transfer engine (`braid_transfer`, the Marlin issue):
//! concurrency per stage, tuner, chunk and staging sizes, rate limits and storage emulation, and
//! their value parsers. Every parser's error names the allowed form; clap adds the flag's name.

use std::time::Duration;

use braid::size::ByteSize;
use braid_transfer::tuner::TunerConfig;
use braid_transfer::{EmulatedStorage, Pinned, SendOptions, TunerKind};
use clap::{Args, ValueEnum};

/// Largest worker count a flag accepts (the tuner's own ceiling is 64 by default; pins may go
/// further for experiments, within what a host can open).
const MAX_PINNED_WORKERS: usize = 1024;

/// The engine's largest chunk (`braid_transfer::protocol::MAX_CHUNK_SIZE`).
const MAX_CHUNK: u64 = braid_transfer::protocol::MAX_CHUNK_SIZE;

/// What carries a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportKind {
    /// Kernel TCP streams, one per network worker (TLS 1.3 unless --insecure-no-auth).
    Tcp,
    /// Braid (UDP, Noise-encrypted) connections.
    Braid,
}

/// How `--progress` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ProgressKind {
    /// A bar on stderr (drawn only on a terminal).
    #[default]
    Bar,
    /// One JSON object per second on stdout, for scripts.
    Jsonl,
    /// Nothing.
    None,
}

/// `--tuner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TunerName {
    /// Marlin: each stage tuned on its own.
    Marlin,
    /// Falcon-style: one shared count for all stages (the ablation).
    Falcon,
}

/// `--concurrency auto|N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConcurrencyChoice {
    /// Tuned online.
    Auto,
    /// Every stage pinned to this many workers.
    Fixed(usize),
}

/// Flags of `braid send` that only tree transfers (the engine) use.
#[derive(Debug, Clone, Args)]
pub struct EngineSendArgs {
    /// Transport of the transfer: `tcp` (kernel TCP streams, one per network worker; the default
    /// for directories, several sources and any engine flag) or `braid` (one Braid connection per
    /// stream; a single FILE without engine flags goes over one). Without it a single FILE,
    /// --bytes, and the Braid-only flags (--path, --scheduler, --priority, --priority-schedule,
    /// --name, --cc, --mtu) use Braid.
    #[arg(long, value_enum, value_name = "tcp|braid")]
    pub transport: Option<TransportKind>,
    /// Worker counts: `auto` (tuned online per stage, the default) or N (every stage pinned to N).
    #[arg(long, value_name = "auto|N", value_parser = parse_concurrency)]
    pub concurrency: Option<ConcurrencyChoice>,
    /// Pin the read stage to N reader workers (the other stages stay tuned).
    #[arg(long = "read", value_name = "N", value_parser = parse_workers, conflicts_with = "concurrency")]
    pub read_workers: Option<usize>,
    /// Pin the network stage to N streams.
    #[arg(long = "net", value_name = "N", value_parser = parse_workers, conflicts_with = "concurrency")]
    pub net_workers: Option<usize>,
    /// Pin the receiver's write stage to N writers.
    #[arg(long = "write", value_name = "N", value_parser = parse_workers, conflicts_with = "concurrency")]
    pub write_workers: Option<usize>,
    /// Tuner: `marlin` (each stage on its own, the default) or `falcon` (one shared count).
    #[arg(long, value_enum, value_name = "marlin|falcon")]
    pub tuner: Option<TunerName>,
    /// Concurrency penalty base K of the utility (throughput / K^workers); default 1.02.
    #[arg(long = "k", value_name = "K", value_parser = parse_k)]
    pub k: Option<f64>,
    /// Loss penalty B of the network utility (minus B·loss·throughput); default 10.
    #[arg(long = "b", value_name = "B", value_parser = parse_b)]
    pub b: Option<f64>,
    /// Bytes per chunk, 1 byte to 32MiB (default 4MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_chunk_size)]
    pub chunk_size: Option<ByteSize>,
    /// Cap of the in-memory staging area (default: the smaller of 30% of MemAvailable and 2GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_staging)]
    pub staging_memory: Option<ByteSize>,
    /// Limit the total send rate, e.g. 50MiB/s, 100MB/s or 800mbit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub bwlimit: Option<f64>,
    /// Seconds between the tuner's measurements (default 3, the paper's).
    #[arg(long, value_name = "SECS", value_parser = parse_probe_interval)]
    pub probe_interval: Option<Duration>,
    /// Emulate source storage for benchmarks: each reader limited to PER_WORKER_RATE, all readers
    /// together to TOTAL_RATE, e.g. 20MiB/s,100MiB/s.
    #[arg(long, value_name = "PER_WORKER_RATE[,TOTAL_RATE]", value_parser = parse_emulated)]
    pub emulate_read: Option<EmulatedStorage>,
    /// Progress: `bar` (stderr, on a terminal), `jsonl` (one JSON line per second on stdout) or `none`.
    #[arg(long, value_enum, value_name = "bar|jsonl|none")]
    pub progress: Option<ProgressKind>,
    /// Kernel congestion control of the TCP streams (`--transport tcp`): an algorithm's name
    /// (cubic, bbr, reno, ...; the stream fails if the kernel cannot run it) or `kernel` (the
    /// host's default, the default). cubic fills a clean path better than BBR v1 but makes
    /// transfers sharing a bottleneck open more streams: ask for it on a path you own.
    #[arg(long, value_name = "NAME|kernel", value_parser = braid_transfer::congestion::TcpCongestion::parse)]
    pub tcp_congestion: Option<braid_transfer::congestion::TcpCongestion>,
}

impl EngineSendArgs {
    /// Flags that only the engine understands, by name, as given.
    pub fn given(&self) -> Vec<&'static str> {
        let flags = [
            ("--concurrency", self.concurrency.is_some()),
            ("--read", self.read_workers.is_some()),
            ("--net", self.net_workers.is_some()),
            ("--write", self.write_workers.is_some()),
            ("--tuner", self.tuner.is_some()),
            ("--k", self.k.is_some()),
            ("--b", self.b.is_some()),
            ("--chunk-size", self.chunk_size.is_some()),
            ("--staging-memory", self.staging_memory.is_some()),
            ("--bwlimit", self.bwlimit.is_some()),
            ("--probe-interval", self.probe_interval.is_some()),
            ("--emulate-read", self.emulate_read.is_some()),
            ("--progress", self.progress.is_some()),
            ("--tcp-congestion", self.tcp_congestion.is_some()),
        ];
        flags.into_iter().filter(|(_, given)| *given).map(|(name, _)| name).collect()
    }

    /// Checks the flags against each other (each alone was checked by its parser).
    pub fn validate(&self) -> Result<(), String> {
        let chunk = self.chunk_size.map_or(braid_transfer::staging::DEFAULT_CHUNK_SIZE, |c| c.0);
        if let Some(cap) = self.staging_memory {
            if cap.0 < chunk {
                return Err(format!(
                    "--staging-memory {} is below one chunk (--chunk-size {}): give at least the chunk size",
                    cap,
                    ByteSize(chunk)
                ));
            }
        }
        Ok(())
    }

    /// The engine's send options these flags choose (progress callback not set).
    pub fn send_options(&self) -> SendOptions {
        let mut options = SendOptions::default();
        if let Some(size) = self.chunk_size {
            options.chunk_size = size.0;
        }
        options.staging_memory = self.staging_memory.map(|s| s.0);
        options.tuner = match self.tuner {
            Some(TunerName::Falcon) => TunerKind::Falcon,
            Some(TunerName::Marlin) | None => TunerKind::Marlin,
        };
        options.tuner_config = TunerConfig {
            k: self.k.unwrap_or(TunerConfig::default().k),
            b: self.b.unwrap_or(TunerConfig::default().b),
            ..TunerConfig::default()
        };
        options.pinned = match self.concurrency {
            Some(ConcurrencyChoice::Fixed(n)) => Pinned { read: Some(n), network: Some(n), write: Some(n) },
            Some(ConcurrencyChoice::Auto) | None => {
                Pinned { read: self.read_workers, network: self.net_workers, write: self.write_workers }
            }
        };
        if let Some(interval) = self.probe_interval {
            options.probe_interval = interval;
        }
        options.bwlimit = self.bwlimit;
        options.emulate_read = self.emulate_read;
        options
    }

    /// The tuner's name for summaries.
    pub fn tuner_name(&self) -> &'static str {
        match self.tuner {
            Some(TunerName::Falcon) => "falcon",
            Some(TunerName::Marlin) | None => "marlin",
        }
    }
}

/// Flags of `braid serve` for the engine's receiving side.
#[derive(Debug, Clone, Args)]
pub struct EngineServeArgs {
    /// Cap of the receiver's in-memory staging area (default: the smaller of 30% of MemAvailable
    /// and 2GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_staging)]
    pub staging_memory: Option<ByteSize>,
    /// Pin the write stage to N writers (the sender's write tuner is then ignored).
    #[arg(long = "write", value_name = "N", value_parser = parse_workers)]
    pub write_workers: Option<usize>,
    /// Emulate destination storage for benchmarks: each writer limited to PER_WORKER_RATE, all
    /// writers together to TOTAL_RATE, e.g. 20MiB/s,100MiB/s.
    #[arg(long, value_name = "PER_WORKER_RATE[,TOTAL_RATE]", value_parser = parse_emulated)]
    pub emulate_write: Option<EmulatedStorage>,
    /// Do not fsync received data and journal records: for benchmarks of the pipeline only (after
    /// a crash of this host, the journal may claim chunks the disk lost).
    #[arg(long)]
    pub no_fsync: bool,
}

impl EngineServeArgs {
    /// The engine's receive options for `dest`.
    pub fn receive_options(&self, dest: &std::path::Path) -> braid_transfer::ReceiveOptions {
        let mut options = braid_transfer::ReceiveOptions::new(dest);
        options.staging_memory = self.staging_memory.map(|s| s.0);
        options.write_workers = self.write_workers;
        options.emulate_write = self.emulate_write;
        options.fsync = !self.no_fsync;
        options
    }
}

/// `--concurrency auto|N`.
pub fn parse_concurrency(s: &str) -> Result<ConcurrencyChoice, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(ConcurrencyChoice::Auto);
    }
    parse_workers(s).map(ConcurrencyChoice::Fixed).map_err(|_| {
        format!("invalid concurrency `{s}`: expected `auto` or a worker count from 1 to {MAX_PINNED_WORKERS}")
    })
}

/// A worker count, 1..=1024.
pub fn parse_workers(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PINNED_WORKERS).contains(&n) => Ok(n),
        _ => Err(format!("invalid worker count `{s}`: expected a whole number from 1 to {MAX_PINNED_WORKERS}")),
    }
}

fn parse_k(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(k) if k.is_finite() && k > 1.0 && k <= 10.0 => Ok(k),
        _ => Err(format!("invalid K `{s}`: expected a number above 1 and at most 10, e.g. 1.02")),
    }
}

fn parse_b(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(b) if b.is_finite() && (0.0..=1e6).contains(&b) => Ok(b),
        _ => Err(format!("invalid B `{s}`: expected a number from 0 to 1000000, e.g. 10")),
    }
}

fn parse_chunk_size(s: &str) -> Result<ByteSize, String> {
    let size = s.parse::<ByteSize>().map_err(|e| e.to_string())?;
    if !(1..=MAX_CHUNK).contains(&size.0) {
        return Err(format!("invalid chunk size `{s}`: expected 1 byte to 32MiB, e.g. 4MiB"));
    }
    Ok(size)
}

fn parse_staging(s: &str) -> Result<ByteSize, String> {
    let size = s.parse::<ByteSize>().map_err(|e| e.to_string())?;
    if size.0 == 0 {
        return Err(format!("invalid staging size `{s}`: expected at least one chunk, e.g. 64MiB"));
    }
    Ok(size)
}

fn parse_probe_interval(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=3600.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("invalid probe interval `{s}`: expected seconds from 0.01 to 3600, e.g. 3 or 0.5")),
    }
}

/// A rate in bytes per second: `SIZE/s` (bytes, e.g. `50MiB/s`, `100MB/s`) or a bit rate
/// (`800mbit`, `1.5gbit`, `500kbit`, `100mbps`).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let form = "expected bytes per second such as 50MiB/s or 100MB/s, or bits per second such as 800mbit or 1.5gbit";
    let t = s.trim();
    let bytes_per_sec = if let Some(size) = t.strip_suffix("/s") {
        size.parse::<ByteSize>().map_err(|_| format!("invalid rate `{s}`: {form}"))?.0 as f64
    } else {
        let lower = t.to_ascii_lowercase();
        let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
        let (number, unit) = lower.split_at(split);
        let scale = match unit.trim() {
            "bit" | "bps" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            _ => return Err(format!("invalid rate `{s}`: {form}")),
        };
        let n = number.parse::<f64>().map_err(|_| format!("invalid rate `{s}`: {form}"))?;
        n * scale / 8.0
    };
    if !(bytes_per_sec.is_finite() && bytes_per_sec >= 1.0) {
        return Err(format!("invalid rate `{s}`: must be at least 1 byte/s; {form}"));
    }
    Ok(bytes_per_sec)
}

/// `PER_WORKER_RATE[,TOTAL_RATE]`.
pub fn parse_emulated(s: &str) -> Result<EmulatedStorage, String> {
    let (per_worker, total) = match s.split_once(',') {
        Some((p, t)) => (p, Some(t)),
        None => (s, None),
    };
    let per_worker = parse_rate(per_worker).map_err(|e| format!("PER_WORKER_RATE: {e}"))?;
    let total = total.map(parse_rate).transpose().map_err(|e| format!("TOTAL_RATE: {e}"))?;
    Ok(EmulatedStorage { per_worker, total })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_in_bytes_and_bits() {
        assert_eq!(parse_rate("50MiB/s"), Ok(50.0 * 1048576.0));
        assert_eq!(parse_rate("100MB/s"), Ok(100e6));
        assert_eq!(parse_rate("800mbit"), Ok(100e6));
        assert_eq!(parse_rate("1.5gbit"), Ok(1.5e9 / 8.0));
        for bad in ["fast", "10", "0mbit", "-5MB/s", "10 parsecs/s", "1.2.3gbit"] {
            assert!(parse_rate(bad).unwrap_err().contains("expected bytes per second"), "{bad}");
        }
    }

    #[test]
    fn emulated_storage_names_the_bad_part() {
        let e = parse_emulated("20MiB/s,100MiB/s").unwrap();
        assert_eq!((e.per_worker, e.total), (20.0 * 1048576.0, Some(100.0 * 1048576.0)));
        assert_eq!(parse_emulated("1mbit").unwrap().total, None);
        assert!(parse_emulated("x,1mbit").unwrap_err().starts_with("PER_WORKER_RATE"));
        assert!(parse_emulated("1mbit,y").unwrap_err().starts_with("TOTAL_RATE"));
    }

    #[test]
    fn counts_sizes_and_tuner_parameters() {
        assert_eq!(parse_concurrency("auto"), Ok(ConcurrencyChoice::Auto));
        assert_eq!(parse_concurrency("4"), Ok(ConcurrencyChoice::Fixed(4)));
        assert!(parse_concurrency("0").unwrap_err().contains("`auto` or a worker count"));
        assert!(parse_workers("1025").is_err());
        assert!(parse_chunk_size("64MiB").unwrap_err().contains("32MiB"));
        assert_eq!(parse_chunk_size("256KiB").unwrap().0, 256 << 10);
        assert!(parse_k("1").unwrap_err().contains("above 1"));
        assert!(parse_b("-1").is_err());
        assert!(parse_probe_interval("0").unwrap_err().contains("0.01"));
    }

    #[test]
    fn flags_become_engine_options() {
        let args: EngineSendArgs =
            crate::cli::parse_flags(&["--net", "3", "--tuner", "falcon", "--chunk-size", "1MiB", "--k", "1.05"]);
        assert_eq!(args.given(), ["--net", "--tuner", "--k", "--chunk-size"]);
        let o = args.send_options();
        assert_eq!(o.pinned, Pinned { read: None, network: Some(3), write: None });
        assert_eq!(o.tuner, TunerKind::Falcon);
        assert_eq!(o.chunk_size, 1 << 20);
        assert_eq!(o.tuner_config.k, 1.05);
        let all: EngineSendArgs = crate::cli::parse_flags(&["--concurrency", "2"]);
        assert_eq!(all.send_options().pinned, Pinned { read: Some(2), network: Some(2), write: Some(2) });
        let none: EngineSendArgs = crate::cli::parse_flags(&[]);
        assert!(none.given().is_empty());
        assert_eq!(none.send_options().pinned, Pinned::default());
    }

    #[test]
    fn serve_flags_become_receive_options() {
        let args: EngineServeArgs = crate::cli::parse_flags(&[
            "--write",
            "3",
            "--emulate-write",
            "10MB/s",
            "--no-fsync",
            "--staging-memory",
            "64MiB",
        ]);
        let o = args.receive_options(std::path::Path::new("/d"));
        assert_eq!((o.write_workers, o.fsync, o.staging_memory), (Some(3), false, Some(64 << 20)));
        assert_eq!(o.emulate_write.map(|e| e.per_worker), Some(10e6));
        let defaults: EngineServeArgs = crate::cli::parse_flags(&[]);
        assert!(defaults.receive_options(std::path::Path::new("/d")).fsync);
    }

    proptest! {
        #[test]
        fn byte_rates_round_trip(n in 1u64..1_000_000_000_000) {
            prop_assert_eq!(parse_rate(&format!("{n}/s")), Ok(n as f64));
            prop_assert_eq!(parse_rate(&format!("{n}B/s")), Ok(n as f64));
        }

        #[test]
        fn worker_counts_accept_exactly_the_range(n in 0usize..5000) {
            prop_assert_eq!(parse_workers(&n.to_string()).is_ok(), (1..=MAX_PINNED_WORKERS).contains(&n));
        }
    }
}
