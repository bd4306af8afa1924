//! `braid bench multipath`: Braid multipath with ProgMP schedulers against
//! kernel MPTCP over two (or more) emulated paths.
//!
//! The measurement is the lab's `multipath` template
//! (`braid_lab::template::builtin::multipath`); this command is a small
//! study over it. Part one, goodput (one experiment): one bulk Braid
//! connection over every `--path` with the chosen `--scheduler` (default
//! min-RTT), one kernel MPTCP connection, and single-path kernel TCP on
//! path 0 for reference, each counted at the receiver after a warm-up.
//! Part two, flow-completion time (one experiment per scheduler of
//! `--schedulers`, each on its own testbed): `--flows` request/response
//! flows (small request, `--fct` bytes of response) on one Braid
//! connection, over the `--fct-path` links (by default the `--path` links
//! with `loss=2%` each), with p50/p90/p99. For every run, bytes on the wire
//! (IP packets offered to the emulated links, both directions) over
//! application bytes delivered. The i-th experiment's seed (the links'
//! random choices) is `--seed` + i.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::LinkSpec;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::template::builtin::multipath::report::{BenchSettings, MultipathReport, MultipathRun};
use braid_lab::template::builtin::multipath::{default_datagram, scheduler, Multipath, DEFAULT_PATHS, PATH_SEPARATOR};
use clap::Args;

use super::{emit, parse_link, parse_secs, parse_size, Outcome};
use braid::size::ByteSize;

#[derive(Debug, Args)]
pub struct BenchMultipathArgs {
    /// A path of the goodput test (repeat; default two: rate=50mbit,rtt=20ms and rate=50mbit,rtt=40ms).
    #[arg(long = "path", value_name = "SPEC", value_parser = parse_link)]
    paths: Vec<LinkSpec>,
    /// Scheduler of the Braid goodput run: a shipped one's name (`braid progmp list`) or a .progmp file.
    #[arg(long, value_name = "NAME_OR_FILE", default_value = "min_rtt")]
    scheduler: String,
    /// Seconds of goodput measurement per variant (after --warmup).
    #[arg(long, value_name = "SECS", default_value = "8", value_parser = parse_secs)]
    secs: Duration,
    /// Seconds of each goodput run not counted (slow start).
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_secs)]
    warmup: Duration,
    /// Response size of the request/response flows.
    #[arg(long, value_name = "SIZE", default_value = "10KB", value_parser = parse_size)]
    fct: ByteSize,
    /// Request/response flows per scheduler.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Pause between two flows, in seconds (0: back to back).
    #[arg(long, value_name = "SECS", default_value = "0.01", value_parser = parse_gap)]
    gap: Duration,
    /// Schedulers compared on flow-completion time, comma-separated (names or .progmp files).
    #[arg(long, value_name = "LIST", default_value = "min_rtt,redundant", value_delimiter = ',')]
    schedulers: Vec<String>,
    /// A path of the flow-completion-time test (repeat; default: the --path links with loss=2% each).
    #[arg(long = "fct-path", value_name = "SPEC", value_parser = parse_link)]
    fct_paths: Vec<LinkSpec>,
    /// Skip the goodput part.
    #[arg(long)]
    no_goodput: bool,
    /// Skip the flow-completion-time part.
    #[arg(long, conflicts_with = "no_goodput")]
    no_fct: bool,
    /// Braid's largest UDP payload, bytes (default: the smallest path MTU
    /// minus 28 bytes of IPv4 and UDP headers, what path-MTU discovery
    /// finds; kernel TCP and MPTCP size their segments from the MTU too).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(1200..=65527))]
    mtu: Option<u16>,
    /// Seed of the emulated links' random choices (loss).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Run Braid without authentication or encryption (the bare protocol;
    /// by default each end has a fresh identity pinned to the other's).
    /// The JSON's `encrypted` says which.
    #[arg(long)]
    insecure_no_auth: bool,
}

fn parse_gap(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=60.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("invalid gap `{s}`: expected seconds from 0 to 60, e.g. 0 or 0.01")),
    }
}

/// What the flags ask for, checked and with the defaults filled in.
#[derive(Debug)]
struct Plan {
    paths: Vec<LinkSpec>,
    fct_paths: Vec<LinkSpec>,
    /// The goodput scheduler's name.
    scheduler: String,
    /// The FCT schedulers as given (names or files) and their names.
    fct_schedulers: Vec<(String, String)>,
    fct_bytes: u64,
    datagram: u16,
}

fn plan(args: &BenchMultipathArgs) -> anyhow::Result<Plan> {
    let paths: Vec<LinkSpec> = if args.paths.is_empty() {
        DEFAULT_PATHS.iter().map(|s| s.parse().map_err(|e| anyhow::anyhow!("{s}: {e}"))).collect::<anyhow::Result<_>>()?
    } else {
        args.paths.clone()
    };
    anyhow::ensure!(paths.len() >= 2, "--path: give at least two paths (or none for the default two)");
    let fct_paths: Vec<LinkSpec> = if args.fct_paths.is_empty() {
        paths
            .iter()
            .map(|p| format!("{p},loss=2%").parse::<LinkSpec>().map_err(|e| anyhow::anyhow!("{p},loss=2%: {e}")))
            .collect::<anyhow::Result<_>>()?
    } else {
        args.fct_paths.clone()
    };
    anyhow::ensure!(fct_paths.len() >= 2, "--fct-path: give at least two paths (or none for the default)");
    let (scheduler, _) = scheduler::load(&args.scheduler).map_err(|e| anyhow::anyhow!("--scheduler: {e}"))?;
    let fct_schedulers = if args.no_fct {
        Vec::new()
    } else {
        args.schedulers
            .iter()
            .map(|s| {
                let (name, _) = scheduler::load(s.trim()).map_err(|e| anyhow::anyhow!("--schedulers: {e}"))?;
                Ok((s.trim().to_string(), name))
            })
            .collect::<anyhow::Result<_>>()?
    };
    anyhow::ensure!(
        (1..=(64 << 20)).contains(&args.fct.0),
        "--fct {}: expected a response size from 1 byte to 64 MiB, e.g. 10KB",
        args.fct.0
    );
    let datagram = args.mtu.unwrap_or_else(|| default_datagram(paths.iter().chain(&fct_paths)));
    Ok(Plan { paths, fct_paths, scheduler, fct_schedulers, fct_bytes: args.fct.0, datagram })
}

/// One experiment's parameter values.
type Experiment = Vec<(String, Value)>;

/// `path1`, `path2` and `more_paths` for `paths` (at least two).
fn path_params(paths: &[LinkSpec]) -> Experiment {
    let mut e = Vec::new();
    for (i, p) in paths.iter().take(2).enumerate() {
        e.push((format!("path{}", i + 1), Value::Link(p.to_string())));
    }
    let more: Vec<String> = paths.iter().skip(2).map(LinkSpec::to_string).collect();
    e.push(("more_paths".into(), Value::String(more.join(&PATH_SEPARATOR.to_string()))));
    e
}

/// The goodput experiment (unless `--no-goodput`), then one FCT
/// experiment per scheduler.
fn experiments(args: &BenchMultipathArgs, plan: &Plan) -> Vec<Experiment> {
    let datagram = ("max_datagram_size".to_string(), Value::Int(i64::from(plan.datagram)));
    let encrypted = ("encrypted".to_string(), Value::Bool(!args.insecure_no_auth));
    let mut out = Vec::new();
    if !args.no_goodput {
        let mut e: Experiment = vec![
            ("part".into(), Value::Enum("goodput".into())),
            ("scheduler".into(), Value::String(args.scheduler.clone())),
            ("secs".into(), Value::Duration(args.secs)),
            ("warmup".into(), Value::Duration(args.warmup)),
            datagram.clone(),
            encrypted.clone(),
        ];
        e.extend(path_params(&plan.paths));
        out.push(e);
    }
    for (given, _) in &plan.fct_schedulers {
        let mut e: Experiment = vec![
            ("part".into(), Value::Enum("fct".into())),
            ("scheduler".into(), Value::String(given.clone())),
            ("fct_bytes".into(), Value::Size(plan.fct_bytes)),
            ("flows".into(), Value::Int(i64::from(args.flows))),
            ("gap".into(), Value::Duration(args.gap)),
            datagram.clone(),
            encrypted.clone(),
        ];
        e.extend(path_params(&plan.fct_paths));
        out.push(e);
    }
    out
}

/// Longest one experiment may take: the goodput part's three runs, or the
/// FCT flows, each with the runs' own slack, and the set-up.
fn experiment_timeout(args: &BenchMultipathArgs) -> Duration {
    let goodput = (args.warmup + args.secs + Duration::from_secs(45)) * 3;
    let fct = (args.gap + Duration::from_secs(1)) * args.flows + Duration::from_secs(45);
    goodput.max(fct) + Duration::from_secs(30)
}

fn report_of(r: &OneOffResult, what: &str) -> anyhow::Result<MultipathRun> {
    if let Some(e) = &r.error {
        anyhow::bail!("{what}: {e}");
    }
    let json = r.artifact("report").with_context(|| format!("{what}: no report"))?;
    serde_json::from_value(json.clone()).context("reading the multipath template's report")
}

pub async fn run(args: BenchMultipathArgs) -> anyhow::Result<Outcome> {
    braid_emu::check_capabilities().context("`braid bench multipath` needs the emulator")?;
    let plan = plan(&args)?;
    let experiments = experiments(&args, &plan);
    let options = OneOffOptions { seed: args.seed, timeout: Some(experiment_timeout(&args)) };
    // The testbeds and the runs block (threads in namespaces): off the runtime.
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Multipath), experiments, &options, show_progress))
    }
        .await
        .context("benchmark thread")??;
    let mut results = results.iter();
    let goodput = if args.no_goodput {
        None
    } else {
        Some(report_of(results.next().context("no goodput experiment ran")?, "goodput")?)
    };
    let fct = plan
        .fct_schedulers
        .iter()
        .map(|(_, name)| report_of(results.next().context("an FCT experiment did not run")?, &format!("FCT run of {name}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let settings = BenchSettings {
        paths: plan.paths.iter().map(LinkSpec::to_string).collect(),
        scheduler: plan.scheduler.clone(),
        max_datagram_size: plan.datagram,
        fct_paths: plan.fct_paths.iter().map(LinkSpec::to_string).collect(),
        fct_bytes: plan.fct_bytes,
        encrypted: !args.insecure_no_auth,
    };
    let report = MultipathReport::new(&settings, goodput.as_ref(), &fct);
    if args.json {
        emit(&serde_json::to_string(&report)?);
    } else {
        print_text(&report);
    }
    Ok(Outcome::from_ok(report.ok))
}

/// A lab table in the CLI's layout (numbers right-aligned).
fn render(t: &braid_lab::analysis::table::Table) -> String {
    let header: Vec<&str> = t.columns.iter().map(String::as_str).collect();
    super::table::render(&header, &t.rows)
}

fn print_text(r: &MultipathReport) {
    emit(if r.encrypted { "braid authenticated and encrypted" } else { "braid NOT encrypted (--insecure-no-auth)" });
    if !r.goodput.is_empty() {
        emit(&format!("goodput over {}", r.paths.join(" + ")));
        emit(&render(&r.goodput_table()));
        if let Some(x) = r.braid_over_mptcp {
            emit(&format!("braid / mptcp: {x:.3}"));
        }
        emit("");
    }
    if !r.fct.is_empty() {
        emit(&format!("request/response flows ({} bytes) over {}", r.fct_bytes, r.fct_paths.join(" + ")));
        emit(&render(&r.fct_table()));
        if let Some(x) = r.p90_reduction {
            emit(&format!("p90 reduction, {} vs {}: {:.1}%", r.fct[1].scheduler, r.fct[0].scheduler, x * 100.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> BenchMultipathArgs {
        crate::cli::parse_flags(argv)
    }

    fn value<'a>(e: &'a Experiment, name: &str) -> Option<&'a Value> {
        e.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    #[test]
    fn defaults_give_one_goodput_and_one_fct_experiment_per_scheduler() {
        let a = args(&[]);
        let p = plan(&a).unwrap();
        assert_eq!(p.datagram, 1472);
        assert_eq!(p.scheduler, "min_rtt");
        let e = experiments(&a, &p);
        assert_eq!(e.len(), 3);
        let parts: Vec<_> = e.iter().map(|x| value(x, "part").unwrap().to_text()).collect();
        assert_eq!(parts, ["goodput", "fct", "fct"]);
        assert_eq!(value(&e[0], "path1").unwrap().to_text(), "rtt=20ms,rate=50mbit");
        assert_eq!(value(&e[1], "path2").unwrap().to_text(), "rtt=40ms,rate=50mbit,loss=2%");
        assert_eq!(value(&e[2], "scheduler"), Some(&Value::String("redundant".into())));
        assert_eq!(value(&e[1], "max_datagram_size"), Some(&Value::Int(1472)));
    }

    #[test]
    fn flags_become_template_parameters() {
        let a = args(&[
            "--path", "rate=10mbit,rtt=5ms", "--path", "rate=10mbit,rtt=6ms", "--path", "rate=10mbit,rtt=7ms",
            "--no-goodput", "--schedulers", "minRTT,round-robin", "--flows", "20", "--gap", "0", "--mtu", "1300",
        ]);
        let p = plan(&a).unwrap();
        assert_eq!(p.fct_schedulers, [("minRTT".to_string(), "min_rtt".to_string()), ("round-robin".into(), "round_robin".into())]);
        let e = experiments(&a, &p);
        assert_eq!(e.len(), 2);
        assert_eq!(value(&e[0], "more_paths").unwrap().to_text(), "rtt=7ms,rate=10mbit,loss=2%");
        assert_eq!(value(&e[0], "flows"), Some(&Value::Int(20)));
        assert_eq!(value(&e[0], "gap"), Some(&Value::Duration(Duration::ZERO)));
        assert_eq!(value(&e[1], "max_datagram_size"), Some(&Value::Int(1300)));
    }

    #[test]
    fn bad_flags_fail_before_anything_runs() {
        assert!(plan(&args(&["--path", "rtt=5ms"])).unwrap_err().to_string().contains("at least two"));
        assert!(plan(&args(&["--scheduler", "fastest"])).unwrap_err().to_string().contains("not a shipped scheduler"));
        assert!(plan(&args(&["--schedulers", "min_rtt,nope"])).unwrap_err().to_string().contains("--schedulers"));
        assert!(plan(&args(&["--fct", "0"])).unwrap_err().to_string().contains("1 byte to 64 MiB"));
    }

    #[test]
    fn every_experiment_is_one_the_template_accepts() {
        use braid_lab::template::Template;
        let a = args(&["--path", "rate=10mbit,rtt=5ms", "--path", "rate=10mbit,rtt=6ms", "--path", "rtt=7ms"]);
        let decls = Multipath.params();
        for e in experiments(&a, &plan(&a).unwrap()) {
            for (name, v) in &e {
                let d = decls.iter().find(|d| &d.name == name).unwrap_or_else(|| panic!("undeclared {name}"));
                assert_eq!(d.ty.parse_text(&v.to_text()).as_ref(), Ok(v), "{name}");
            }
        }
        assert!(experiment_timeout(&a) >= Duration::from_secs(3 * 11));
    }
}
