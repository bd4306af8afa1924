//! `braid rules`: Fossa's ECA adaptation rules (issue 20; seed 001 ch. 6).
//! Print a rule file's normal form, type-check it against a vocabulary,
//! run it on a live Node over the emulator (the lab's `adapt` template),
//! and learn rule sets by genetic programming as lab studies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use braid_lab::fossa::campaign::{planned_evaluations, planned_experiments, rule_file, run_campaign, CampaignReport, Entry, LearnRun};
use braid_lab::fossa::study::LearnStudy;
use braid_lab::fossa::scenario_vocabulary;
use braid_lab::oneoff::{run_experiments, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::runner::{default_work_root, Isolation, RunOptions};
use braid_lab::session::default_db;
use braid_lab::store::Store;
use braid_lab::template::builtin::adapt::{transport_of_index, Adapt};
use braid_rules::Vocabulary;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::{emit, signals, table, Outcome};

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Pretty-print a rule file's normal form (constants folded, commutative operands ordered).
    Show(ShowArgs),
    /// Parse and type-check rule files; errors as FILE:LINE:COL. Exit status 1 if any fails.
    Check(CheckArgs),
    /// Run a rule set on a live Node over one emulated link (the lab's `adapt` template; needs root).
    Eval(EvalArgs),
    /// Learn rule sets by genetic programming: GP, plain GP, random search and every static baseline, as lab studies.
    Learn(LearnArgs),
}

/// Which vocabulary a rule file is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VocabularyArg {
    /// Everything a Node monitors and every actuator it has.
    Node,
    /// The transport case study: only `set transport`.
    Transport,
    /// The priority case study: only `set priority`.
    Priority,
}

impl VocabularyArg {
    fn vocabulary(self) -> Vocabulary {
        match self {
            VocabularyArg::Node => scenario_vocabulary("node"),
            VocabularyArg::Transport => scenario_vocabulary("transport"),
            VocabularyArg::Priority => scenario_vocabulary("priority"),
        }
    }
}

/// The `adapt` scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioArg {
    /// Request/response loop; the rules pick the transport.
    Transport,
    /// Bulk transfer plus on/off interactive traffic; the rules set the bulk priority.
    Priority,
    /// Multipath scheduler choice (not available: the Node has no multipath yet).
    Scheduler,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The rule file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Rule files.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// The vocabulary to check against.
    #[arg(long, value_enum, default_value = "node")]
    pub vocabulary: VocabularyArg,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The rule file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The emulated link, e.g. rtt=40ms,rate=20mbit,loss=1%.
    #[arg(long, value_name = "LINKSPEC")]
    pub env: String,
    /// The workload and utility.
    #[arg(long, value_enum, default_value = "transport")]
    pub scenario: ScenarioArg,
    /// How long the workload runs measured (1s to 600s).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// How long it runs first, unmeasured (0s to 60s).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Seed of the experiment.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LearnArgs {
    /// The learning study file (see studies/rules-*.toml).
    #[arg(value_name = "STUDY")]
    pub study: PathBuf,
    /// Write the learned rule set (GP's best) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The results database (SQLite); default $BRAID_LAB_DB or ./lab.db.
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Run experiments in this process instead of worker processes.
    #[arg(long)]
    pub in_process: bool,
    /// Check the study file and print how many evaluations it plans, without running any.
    #[arg(long)]
    pub plan: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    braid_lab::param::parse_duration(s).ok_or_else(|| format!("`{s}`: expected a duration such as 500ms, 3s or 1min"))
}

pub fn run(command: RulesCommand) -> anyhow::Result<Outcome> {
    match command {
        RulesCommand::Show(a) => show(a),
        RulesCommand::Check(a) => check(a),
        RulesCommand::Eval(a) => eval(a),
        RulesCommand::Learn(a) => learn(a),
    }
}

fn read(file: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read `{}`", file.display()))
}

fn show(a: ShowArgs) -> anyhow::Result<Outcome> {
    let origin = a.file.display().to_string();
    let text = read(&a.file)?;
    match braid_rules::parse(&text) {
        Ok(rules) => {
            let normal = braid_rules::normalize(&rules);
            print!("{normal}");
            if !normal.to_string().ends_with('\n') {
                println!();
            }
            Ok(Outcome::Success)
        }
        Err(e) => {
            eprint!("{}", e.render(&origin, &text));
            bail!("{origin}: {e}")
        }
    }
}

fn check(a: CheckArgs) -> anyhow::Result<Outcome> {
    let vocab = a.vocabulary.vocabulary();
    let mut failed = 0;
    for f in &a.files {
        let origin = f.display().to_string();
        let text = match read(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e:#}");
                failed += 1;
                continue;
            }
        };
        match braid_rules::compile(&text, &vocab) {
            Ok(rules) => emit(&format!("{origin}: ok ({} rules, size {})", rules.len(), rules.size())),
            Err(e) => {
                eprint!("{}", e.render(&origin, &text));
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} rule files failed", a.files.len());
    }
    Ok(Outcome::Success)
}

/// What `braid rules eval` reports.
#[derive(Debug, Serialize)]
struct EvalReport {
    file: String,
    env: String,
    scenario: String,
    utility: Option<f64>,
    objectives: Vec<f64>,
    metrics: Vec<(String, f64)>,
    rule_applied: Vec<u64>,
    actions: Vec<Action>,
    warnings: Vec<String>,
}

/// One applied action, from the recorded series.
#[derive(Debug, Serialize)]
struct Action {
    at_s: f64,
    target: String,
    value: String,
}

fn eval(a: EvalArgs) -> anyhow::Result<Outcome> {
    let scenario = match a.scenario {
        ScenarioArg::Transport => "transport",
        ScenarioArg::Priority => "priority",
        ScenarioArg::Scheduler => bail!(
            "--scenario scheduler: braid-node has no multipath connection yet, so a rule has no paths to schedule over; \
             use transport or priority"
        ),
    };
    let origin = a.file.display().to_string();
    let text = read(&a.file)?;
    let vocab = scenario_vocabulary("node");
    let rules = match braid_rules::compile(&text, &vocab) {
        Ok(r) => r,
        Err(e) => {
            eprint!("{}", e.render(&origin, &text));
            bail!("{origin}: {e}");
        }
    };
    let spec: braid::LinkSpec = a.env.parse().map_err(|e| anyhow::anyhow!("--env `{}`: {e}", a.env))?;
    let values = vec![
        ("scenario".to_string(), Value::Enum(scenario.into())),
        ("rules".to_string(), Value::String(rules.to_string())),
        ("link".to_string(), Value::Link(spec.to_string())),
        ("duration".to_string(), Value::Duration(a.duration)),
        ("warmup".to_string(), Value::Duration(a.warmup)),
    ];
    let runs = run_experiments(std::sync::Arc::new(Adapt), vec![values], &OneOffOptions { seed: a.seed, timeout: None })?;
    let r = runs.into_iter().next().context("the lab returned no result")?;
    if let Some(e) = &r.error {
        bail!("the experiment failed: {e}");
    }
    let n = rules.len();
    let mut metrics = Vec::new();
    for rec in &r.records {
        if let braid_lab::record::Record::Metric { name, value } = rec {
            metrics.push((name.clone(), *value));
        }
    }
    let get = |m: &str| r.metric(m);
    let objectives: Vec<f64> = (0..2).filter_map(|k| get(&format!("objective.{k}"))).collect();
    let rule_applied: Vec<u64> = (0..n).map(|i| get(&format!("rule_applied.{i}")).unwrap_or(0.0) as u64).collect();
    let mut actions: Vec<Action> = Vec::new();
    for (t, v) in r.series("set.transport") {
        let value = transport_of_index(v).map(|t| t.name().to_string()).unwrap_or_else(|| v.to_string());
        actions.push(Action { at_s: t, target: "transport".into(), value });
    }
    for (t, v) in r.series("set.priority") {
        actions.push(Action { at_s: t, target: "priority".into(), value: v.to_string() });
    }
    actions.sort_by(|x, y| x.at_s.total_cmp(&y.at_s));
    let report = EvalReport {
        file: origin,
        env: spec.to_string(),
        scenario: scenario.into(),
        utility: get("utility"),
        objectives,
        metrics: metrics.into_iter().filter(|(m, _)| !m.starts_with("rule_applied.")).collect(),
        rule_applied,
        actions,
        warnings: r.warnings().map(str::to_string).collect(),
    };
    if a.json {
        emit(&serde_json::to_string(&report)?);
        return Ok(Outcome::Success);
    }
    emit(&format!(
        "{} in {} ({}): utility {}",
        report.file,
        report.env,
        report.scenario,
        report.utility.map(|u| format!("{u:.3}")).unwrap_or_else(|| "-".into())
    ));
    let rows: Vec<Vec<String>> = report.metrics.iter().map(|(m, v)| vec![m.clone(), format!("{v:.3}")]).collect();
    emit(&table::render(&["metric", "value"], &rows));
    let rows: Vec<Vec<String>> = rules
        .rules()
        .zip(&report.rule_applied)
        .enumerate()
        .map(|(i, (rule, c))| vec![i.to_string(), c.to_string(), rule.to_string().trim().to_string()])
        .collect();
    emit(&table::render(&["rule", "applied", "text"], &rows));
    let rows: Vec<Vec<String>> = report.actions.iter().map(|x| vec![format!("{:.2}", x.at_s), x.target.clone(), x.value.clone()]).collect();
    emit(&table::render(&["at (s)", "target", "value"], &rows));
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(Outcome::Success)
}

fn learn(a: LearnArgs) -> anyhow::Result<Outcome> {
    let study = LearnStudy::load(&a.study)?;
    if a.plan {
        let count = planned_evaluations(&study);
        let experiments = planned_experiments(&study);
        let name = a.study.display().to_string();
        if a.json {
            let j = serde_json::json!({
                "study": name,
                "count": count,
                "repetitions": study.repetitions,
                "held_out_repetitions": study.held_out_repetitions,
                "experiments": experiments,
            });
            emit(&j.to_string());
        } else {
            emit(&format!(
                "{name}: {count} evaluations planned (static baselines, GP, and the runs compared with it); {} run(s) each, {} on held-out environments: {experiments} experiments",
                study.repetitions, study.held_out_repetitions
            ));
        }
        return Ok(Outcome::Success);
    }
    let db = a.db.clone().unwrap_or_else(default_db);
    let db = std::path::absolute(&db).unwrap_or(db);
    let mut store = Store::open(&db)?;
    let mut options = RunOptions::new(default_work_root(&db));
    options.jobs = 1;
    options.show_progress = false;
    if !a.in_process {
        let program = std::env::current_exe().context("finding the braid binary for worker processes")?;
        options.isolation = Isolation::Worker { program, args: vec!["lab".into(), "worker".into()] };
    }
    let bar = indicatif::ProgressBar::new(planned_evaluations(&study));
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>9} [{bar:30}] {pos}/{len} evaluations {elapsed_precise} ETA {eta} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    // SIGINT and SIGTERM stop the batch being evaluated the way they stop
    // `braid lab run` (issue 21): its running experiments are ended and
    // not stored, the batch fails, and so does the campaign.
    let (interrupt, first_signal) = signals::interrupt_on_signals()?;
    options.interrupt = Some(interrupt.clone());
    let report = run_campaign(&study, &mut store, &options, &mut |p| {
        bar.set_prefix(p.phase.to_string());
        bar.inc(p.batch.evaluations as u64);
        bar.set_message(if p.batch.failed > 0 { format!("{} failed in {}", p.batch.failed, p.batch.study) } else { p.batch.study.clone() });
    });
    bar.finish_and_clear();
    let report = match report {
        Err(_) if interrupt.is_requested() => {
            drop(store);
            // The evaluator reads experiments already stored as ok back
            // instead of running them: a rerun replays the seeded search
            // up to here from the database.
            eprintln!(
                "braid rules learn: interrupted by {}: stopped the running experiments (not stored), the finished ones \
                 are stored in {}; run the same command again to resume",
                first_signal.name(),
                db.display()
            );
            std::process::exit(first_signal.exit_code());
        }
        report => report?,
    };
    if let Some(out) = &a.out {
        std::fs::write(out, rule_file(&report, &report.gp.best)).with_context(|| format!("writing {}", out.display()))?;
    }
    if a.json {
        emit(&serde_json::to_string(&report)?);
    } else {
        print_report(&report, &db, a.out.as_deref());
    }
    Ok(Outcome::Success)
}

fn fmt_v(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" / ")
}

fn print_report(r: &CampaignReport, db: &Path, out: Option<&Path>) {
    emit(&format!(
        "study {} (scenario {}): {} training and {} held-out environments; database {}",
        r.study,
        r.scenario,
        r.training.len(),
        r.held_out.len(),
        db.display()
    ));
    let row = |e: &Entry, evals: String| vec![e.name.clone(), fmt_v(&e.training), fmt_v(&e.held_out), e.size.to_string(), evals];
    let mut rows: Vec<Vec<String>> = r.baselines.iter().map(|e| row(e, "-".into())).collect();
    let runs: Vec<&LearnRun> = std::iter::once(&r.gp).chain(r.plain.as_ref()).chain(r.random.as_ref()).collect();
    for l in &runs {
        rows.push(row(&l.best, l.evaluations.to_string()));
    }
    emit(&table::render(&["rule set", "training utility", "held-out utility", "size", "evaluations"], &rows));
    if let Some(b) = r.best_static() {
        let gp = r.gp.best.held_out_utility();
        emit(&format!("held-out: learned {gp:.3} vs best static ({}) {:.3}{}", b.name, b.held_out_utility(), match &r.random {
            Some(x) => format!(" vs random search {:.3}", x.best.held_out_utility()),
            None => String::new(),
        }));
    }
    for l in &runs {
        let s = &l.savings;
        emit(&format!(
            "{}: {} generations; saved {} evaluations by duplicates ({} skipped, {} semantic), {} by aborts ({} aborted); {} rules dropped unmatched, {} folded away; {} failed",
            l.label,
            l.generations,
            s.evaluations_saved_by_duplicates,
            s.duplicates_skipped,
            s.semantic_duplicates,
            s.evaluations_saved_by_abort,
            s.aborted,
            s.rules_dropped_unmatched,
            s.rules_folded_away,
            l.failed
        ));
    }
    if let Some(e) = &r.efficiency {
        emit(&format!(
            "efficiency: plain GP reached {:.3} after {} evaluations; GP with measures after {}{}",
            e.target,
            e.plain_evaluations,
            e.measured_evaluations.map(|m| m.to_string()).unwrap_or_else(|| "never".into()),
            e.ratio.map(|x| format!(" ({:.0}%)", x * 100.0)).unwrap_or_default()
        ));
    }
    let curve_rows: Vec<Vec<String>> = runs
        .iter()
        .filter(|l| l.label != "random")
        .flat_map(|l| l.curve.iter().map(move |(e, u)| vec![l.label.clone(), e.to_string(), format!("{u:.3}")]))
        .collect();
    emit(&table::render(&["run", "evaluations", "best training utility"], &curve_rows));
    emit(&format!("learned rule set ({}):\n{}", r.gp.best.name, r.gp.best.rules.trim_end()));
    if let Some(o) = out {
        emit(&format!("written to {}", o.display()));
    }
}
