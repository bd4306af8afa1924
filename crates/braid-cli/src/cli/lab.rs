//! `braid lab`: experiment studies (seed 001 ch. 4, MACI). Flags in,
//! tables and JSON out; everything else is `braid_lab`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use braid_lab::analysis::{self, ExportFormat, Goal, Objective, ParetoQuery, ShowQuery, Table};
use braid_lab::figures::{self, DistributionQuery, Kind};
use braid_lab::plan::Plan;
use braid_lab::runner::{default_work_root, Isolation, RunOptions};
use braid_lab::session::{self, default_db};
use braid_lab::store::Store;
use braid_lab::study::Study;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use super::signals::{interrupt_on_signals, interrupted_line};
use super::{emit, Outcome};

#[path = "lab_serve.rs"]
mod lab_serve;
#[path = "lab_slurm.rs"]
mod lab_slurm;

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// List the templates and their typed parameters.
    Templates(TemplatesArgs),
    /// Validate a study file and print its experiment count and expected duration.
    Plan(PlanArgs),
    /// Run a study's missing experiments in parallel and store the results.
    Run(RunArgs),
    /// Run one stored experiment again (same parameters and seed) and compare.
    Rerun(RerunArgs),
    /// Studies and their progress.
    Status(StatusArgs),
    /// Summary statistics per group: n, mean, median, p5, p95, sd, 95% CI.
    Show(ShowArgs),
    /// Box plots (or mean lines with confidence bands) of a metric per x value and group.
    Plot(PlotArgs),
    /// One experiment's time series (drill-down).
    Series(SeriesArgs),
    /// The Pareto-optimal configurations on two or more metrics.
    Pareto(ParetoArgs),
    /// The best configuration for each environment, with its margin and significance.
    Best(BestArgs),
    /// Every experiment of a study, one row each: CSV or JSON lines.
    Export(ExportArgs),
    /// The lab's web interface: studies, live progress, analysis, new studies.
    Serve(lab_serve::ServeArgs),
    /// Run one experiment from a spec file (used by `braid lab run`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// `--db`, shared by every subcommand that opens the database.
#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// The results database (SQLite); default $BRAID_LAB_DB or ./lab.db.
    #[arg(long, value_name = "FILE")]
    db: Option<PathBuf>,
}

impl DbArg {
    /// Absolute, so worker processes (which run in their experiment's
    /// directory) find the work directories beside it.
    fn path(&self) -> PathBuf {
        let p = self.db.clone().unwrap_or_else(default_db);
        std::path::absolute(&p).unwrap_or(p)
    }

    /// The database for reading; it must exist.
    fn read(&self) -> anyhow::Result<Store> {
        let path = self.path();
        anyhow::ensure!(
            path.exists(),
            "no results database at {} (run a study first with `braid lab run STUDY.toml`, or pass --db)",
            path.display()
        );
        Ok(Store::open_read_only(&path)?)
    }
}

#[derive(Debug, Args)]
pub struct TemplatesArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The study file (TOML).
    study: PathBuf,
    /// Parallel jobs the expected duration assumes (default: one per core).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The study file (TOML).
    study: PathBuf,
    #[command(flatten)]
    db: DbArg,
    /// Experiments at once (default: one per core; exclusive ones run alone).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Run the experiments stored as failed or timed out again.
    #[arg(long)]
    retry_failed: bool,
    /// Run built-in templates on the runner's threads instead of in worker processes.
    #[arg(long)]
    in_process: bool,
    /// Keep every experiment's work directory (records, logs), not only failed ones'.
    #[arg(long)]
    keep_work_dirs: bool,
    #[command(flatten)]
    slurm: lab_slurm::SlurmArgs,
    /// Print JSON (no progress bar).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RerunArgs {
    /// The experiment's id (`braid lab export STUDY` lists them).
    id: String,
    #[command(flatten)]
    db: DbArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this study.
    study: Option<String>,
    #[command(flatten)]
    db: DbArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The study's name.
    study: String,
    #[command(flatten)]
    db: DbArg,
    /// Only experiments whose parameter KEY has VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
    /// Group by these parameters (repeatable; default: every parameter that varies).
    #[arg(long, value_name = "KEY")]
    group_by: Vec<String>,
    /// Only these metrics (repeatable; default: all).
    #[arg(long, value_name = "M")]
    metric: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PlotKind {
    /// Box plots per x value and group (MACI's main view).
    Box,
    /// Mean per x value with a 95% confidence band (numeric x).
    Band,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The study's name.
    study: String,
    #[command(flatten)]
    db: DbArg,
    /// The metric on the y axis.
    #[arg(long, value_name = "M")]
    metric: String,
    /// The parameter on the x axis.
    #[arg(long, value_name = "KEY")]
    x: String,
    /// Split each x value by these parameters (repeatable).
    #[arg(long, value_name = "KEY")]
    group_by: Vec<String>,
    /// Only experiments whose parameter KEY has VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
    /// box or band.
    #[arg(long, value_enum, default_value = "box")]
    kind: PlotKind,
    /// The file to write: .svg or .png.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SeriesArgs {
    /// The experiment's id.
    id: String,
    #[command(flatten)]
    db: DbArg,
    /// The series (also draws every `M.<part>` series, e.g. one per flow).
    #[arg(long, value_name = "M")]
    metric: String,
    /// The file to write: .svg or .png (without it: print the points).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ParetoArgs {
    /// The study's name.
    study: String,
    #[command(flatten)]
    db: DbArg,
    /// A metric to maximize (repeatable).
    #[arg(long, value_name = "M")]
    max: Vec<String>,
    /// A metric to minimize (repeatable).
    #[arg(long, value_name = "M")]
    min: Vec<String>,
    /// One front per environment instead of one over all experiments.
    #[arg(long)]
    per_environment: bool,
    /// Only experiments whose parameter KEY has VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
    /// Also draw the front of the first two metrics: .svg or .png.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("goal").required(true).args(["max", "min"])))]
pub struct BestArgs {
    /// The study's name.
    study: String,
    #[command(flatten)]
    db: DbArg,
    /// The metric to maximize.
    #[arg(long, value_name = "M")]
    max: Option<String>,
    /// The metric to minimize.
    #[arg(long, value_name = "M")]
    min: Option<String>,
    /// Only experiments whose parameter KEY has VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The study's name.
    study: String,
    #[command(flatten)]
    db: DbArg,
    /// csv or jsonl.
    #[arg(long, value_name = "FORMAT", default_value = "csv", value_parser = parse_format)]
    format: ExportFormat,
    /// Write to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["spec", "slurm_task"])))]
pub struct WorkerArgs {
    /// The spec file the runner wrote.
    spec: Option<PathBuf>,
    /// Run this Slurm array task's chunk (from BRAID_LAB_CHUNKS and SLURM_ARRAY_TASK_ID).
    #[arg(long)]
    slurm_task: bool,
}

fn parse_format(s: &str) -> Result<ExportFormat, String> {
    s.parse()
}

/// Run a `braid lab` subcommand.
pub fn run(cmd: LabCommand) -> anyhow::Result<Outcome> {
    match cmd {
        LabCommand::Templates(a) => templates(a),
        LabCommand::Plan(a) => plan(a),
        LabCommand::Run(a) => run_study(a),
        LabCommand::Rerun(a) => rerun(a),
        LabCommand::Status(a) => {
            let report = analysis::status(&a.db.read()?, a.study.as_deref())?;
            print(a.json, &report, || report.table())
        }
        LabCommand::Show(a) => {
            let q = ShowQuery {
                study: a.study,
                filters: a.filter,
                group_by: (!a.group_by.is_empty()).then_some(a.group_by),
                metrics: a.metric,
            };
            let report = analysis::show(&a.db.read()?, &q)?;
            print(a.json, &report, || report.table())
        }
        LabCommand::Plot(a) => {
            let q = DistributionQuery {
                study: a.study,
                metric: a.metric,
                x: a.x,
                group_by: a.group_by,
                filters: a.filter,
                kind: match a.kind {
                    PlotKind::Box => Kind::Box,
                    PlotKind::Band => Kind::Band,
                },
            };
            let summary = figures::distribution(&a.db.read()?, &q, &a.out)?;
            print_written(a.json, &summary)
        }
        LabCommand::Series(a) => {
            let store = a.db.read()?;
            match &a.out {
                Some(out) => {
                    let summary = figures::experiment_series(&store, &a.id, &a.metric, out)?;
                    print_written(a.json, &summary)
                }
                None => {
                    let report = analysis::series(&store, &a.id, &a.metric)?;
                    print(a.json, &report, || report.table())
                }
            }
        }
        LabCommand::Pareto(a) => pareto(a),
        LabCommand::Best(a) => {
            let (metric, goal) = match (a.max, a.min) {
                (Some(m), None) => (m, Goal::Maximize),
                (None, Some(m)) => (m, Goal::Minimize),
                _ => anyhow::bail!("give one of --max M or --min M"),
            };
            let q = analysis::BestQuery { study: a.study, metric, goal, filters: a.filter };
            let report = analysis::best(&a.db.read()?, &q)?;
            print(a.json, &report, || report.table())
        }
        LabCommand::Export(a) => {
            let store = a.db.read()?;
            match &a.out {
                Some(path) => {
                    let file = std::fs::File::create(path).with_context(|| format!("--out {}", path.display()))?;
                    let mut w = std::io::BufWriter::new(file);
                    let summary = analysis::export(&store, &a.study, a.format, &mut w)?;
                    use std::io::Write;
                    w.flush().with_context(|| format!("writing {}", path.display()))?;
                    eprintln!("wrote {} experiments to {}", summary.experiments, path.display());
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut lock = stdout.lock();
                    analysis::export(&store, &a.study, a.format, &mut lock)?;
                }
            }
            Ok(Outcome::Success)
        }
        LabCommand::Serve(a) => lab_serve::serve(a),
        LabCommand::Worker(a) => {
            let code = match &a.spec {
                Some(spec) => {
                    // The runner SIGTERMs its workers when the run is
                    // interrupted: stop the template through its context so
                    // it tears its testbed down, and exit with
                    // EXIT_INTERRUPTED (issue 21).
                    let (stop, _) = interrupt_on_signals()?;
                    braid_lab::runner::worker::run_spec_with(spec, &braid_lab::template::find_builtin, &stop)
                }
                None => lab_slurm::slurm_task()?,
            };
            std::process::exit(code);
        }
    }
}

fn templates(a: TemplatesArgs) -> anyhow::Result<Outcome> {
    #[derive(Serialize)]
    struct Row {
        name: String,
        version: u32,
        description: String,
        emulator: bool,
        exclusive: bool,
        params: Vec<braid_lab::param::ParamDecl>,
    }
    let rows: Vec<Row> = braid_lab::template::builtins()
        .iter()
        .map(|t| Row {
            name: t.name().into(),
            version: t.version(),
            description: t.description().into(),
            emulator: t.requirements().emulator,
            exclusive: t.requirements().exclusive,
            params: t.params(),
        })
        .collect();
    if a.json {
        emit(&serde_json::to_string(&rows)?);
        return Ok(Outcome::Success);
    }
    for r in &rows {
        let needs = match (r.emulator, r.exclusive) {
            (true, _) => " (emulator, runs alone)",
            (false, true) => " (runs alone)",
            _ => "",
        };
        emit(&format!("{} v{}: {}{needs}", r.name, r.version, r.description));
        let mut t = Table::new(["parameter", "role", "type", "default", "about"]);
        for p in &r.params {
            t.push(vec![p.name.clone(), p.role.name().into(), p.ty.allowed_form(), p.default.to_text(), p.doc.clone()]);
        }
        emit(&t.render());
    }
    Ok(Outcome::Success)
}

fn load_study(path: &Path) -> anyhow::Result<Study> {
    // The error names file, line, key and the allowed form.
    Study::load_builtin(path).map_err(|e| anyhow::anyhow!("{e}"))
}

fn plan(a: PlanArgs) -> anyhow::Result<Outcome> {
    let study = load_study(&a.study)?;
    lab_slurm::check_study(&study)?;
    let jobs = a.jobs.unwrap_or_else(cores).max(1);
    let summary = Plan::new(&study).summary(jobs);
    if a.json {
        emit(&serde_json::to_string(&summary)?);
        return Ok(Outcome::Success);
    }
    emit(&format!(
        "study {} (template {} v{}): {} experiments = {} configurations × {} environments × {} repetitions{}",
        summary.study,
        summary.template,
        summary.template_version,
        summary.count,
        summary.configurations,
        summary.environments,
        summary.repetitions,
        summary.excluded_text()
    ));
    emit(&format!(
        "expected duration with {} jobs: {} ({} experiments run alone)",
        summary.jobs,
        human_secs(summary.expected_secs),
        summary.exclusive
    ));
    let mut t = Table::new(["parameter", "role", "type", "count", "values"]);
    // The first row of param_rows is its own header.
    for row in summary.param_rows().into_iter().skip(1) {
        t.push(row.to_vec());
    }
    emit(&t.render());
    Ok(Outcome::Success)
}

fn run_study(a: RunArgs) -> anyhow::Result<Outcome> {
    let study = load_study(&a.study)?;
    let db = a.db.path();
    let mut store = Store::open(&db)?;
    let mut options = RunOptions::new(default_work_root(&db));
    if let Some(j) = a.jobs {
        anyhow::ensure!(j >= 1, "--jobs: expected at least 1");
        options.jobs = j;
    }
    options.retry_failed = a.retry_failed;
    options.keep_work_dirs = a.keep_work_dirs;
    options.show_progress = !a.json;
    if !a.in_process {
        let program = std::env::current_exe().context("finding the braid binary for worker processes")?;
        options.isolation = Isolation::Worker { program, args: vec!["lab".into(), "worker".into()] };
    }
    a.slurm.apply(&study, &db, &mut options)?;
    // SIGINT and SIGTERM stop the run cleanly (issue 21).
    let (interrupt, first_signal) = interrupt_on_signals()?;
    options.interrupt = Some(interrupt);
    let run = match session::run_study(&study, &mut store, &options) {
        Err(session::SessionError::Run(e)) if e.is_interrupted() => {
            drop(store);
            eprintln!("braid lab run: {}", interrupted_line(&e, &first_signal));
            // The shell's convention for a command ended by a signal.
            std::process::exit(first_signal.exit_code());
        }
        run => run?,
    };
    let failed = run.summary.failed + run.summary.timed_out;
    if a.json {
        emit(&serde_json::to_string(&run)?);
    } else {
        let s = &run.summary;
        emit(&format!(
            "study {}: {} planned, {} already stored, {} ran: {} ok, {} failed, {} timed out in {} (database {})",
            run.study,
            s.planned,
            s.skipped,
            s.ran,
            s.ok,
            s.failed,
            s.timed_out,
            human_secs(s.elapsed_s),
            db.display()
        ));
        if failed > 0 {
            show_failures(&store, &run.study);
            emit(&format!(
                "failed experiments are stored with their error and stderr: `braid lab export {} --db {}`; rerun them with --retry-failed",
                run.study,
                db.display()
            ));
        }
    }
    // A study that ran with failures still ran: exit 3 tells scripts.
    Ok(Outcome::from_ok(failed == 0))
}

/// The errors of the first few failed experiments of `study`, on stderr.
fn show_failures(store: &Store, study: &str) {
    const SHOWN: usize = 3;
    let Ok(Some(id)) = store.study_id(study) else { return };
    let Ok(rows) = store.experiments(id) else { return };
    let failed: Vec<_> = rows.iter().filter(|r| r.status != braid_lab::store::ExperimentStatus::Ok).collect();
    for r in failed.iter().take(SHOWN) {
        let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!("experiment {} ({}) {}: {}", r.id, params.join(" "), r.status.as_str(), r.error.as_deref().unwrap_or("(no error message)"));
        let tail: Vec<&str> = r.stderr_tail.lines().rev().take(5).collect();
        for line in tail.iter().rev() {
            eprintln!("    {line}");
        }
    }
    if failed.len() > SHOWN {
        eprintln!("... and {} more", failed.len() - SHOWN);
    }
}

fn rerun(a: RerunArgs) -> anyhow::Result<Outcome> {
    let db = a.db.path();
    let store = a.db.read()?;
    let mut options = RunOptions::new(default_work_root(&db));
    options.show_progress = false;
    let program = std::env::current_exe().context("finding the braid binary for the worker process")?;
    options.isolation = Isolation::Worker { program, args: vec!["lab".into(), "worker".into()] };
    let r = session::rerun_experiment(&store, &a.id, &options)?;
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            experiment: &'a str,
            template: &'a str,
            reproduced: bool,
            compared: usize,
            differences: &'a [(String, Option<f64>, Option<f64>)],
            records: &'a [braid_lab::record::Record],
        }
        emit(&serde_json::to_string(&Out {
            experiment: &r.experiment,
            template: &r.template,
            reproduced: r.reproduced(),
            compared: r.compared,
            differences: &r.differences,
            records: &r.records,
        })?);
    } else if r.reproduced() {
        emit(&format!("experiment {} ({}): all {} metrics as stored", r.experiment, r.template, r.compared));
    } else {
        emit(&format!(
            "experiment {} ({}): {} of {} metrics differ from the stored run",
            r.experiment,
            r.template,
            r.differences.len(),
            r.compared
        ));
        let mut t = Table::new(["metric", "stored", "now"]);
        let f = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_else(|| "-".into());
        for (m, before, now) in &r.differences {
            t.push(vec![m.clone(), f(*before), f(*now)]);
        }
        emit(&t.render());
    }
    Ok(Outcome::Success)
}

fn pareto(a: ParetoArgs) -> anyhow::Result<Outcome> {
    let mut objectives: Vec<Objective> =
        a.max.iter().map(|m| Objective { metric: m.clone(), goal: Goal::Maximize }).collect();
    objectives.extend(a.min.iter().map(|m| Objective { metric: m.clone(), goal: Goal::Minimize }));
    anyhow::ensure!(objectives.len() >= 2, "give at least two metrics with --max M and --min M");
    let q = ParetoQuery { study: a.study, objectives, per_environment: a.per_environment, filters: a.filter };
    let store = a.db.read()?;
    let report = analysis::pareto(&store, &q)?;
    if let Some(out) = &a.out {
        let written = figures::pareto_figure(&report, out)?;
        if !a.json {
            eprintln!("wrote {}", written.out);
        }
    }
    print(a.json, &report, || report.table())
}

fn print<T: Serialize>(json: bool, value: &T, table: impl FnOnce() -> Table) -> anyhow::Result<Outcome> {
    if json {
        emit(&serde_json::to_string(value)?);
    } else {
        emit(table().render().trim_end());
    }
    Ok(Outcome::Success)
}

fn print_written(json: bool, summary: &figures::FigureSummary) -> anyhow::Result<Outcome> {
    if json {
        emit(&serde_json::to_string(summary)?);
    } else {
        emit(&format!("wrote {} ({} values)", summary.out, summary.points));
    }
    Ok(Outcome::Success)
}

fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}
