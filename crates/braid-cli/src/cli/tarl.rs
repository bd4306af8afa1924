//! `braid tarl`: TARL topology adaptation rules (issue 22): check and
//! pretty-print rule files, list the shipped rules with their lines of code
//! next to the thesis's (Frömmgen 2018, Table 7.3), run a shipped rule to
//! convergence in the simulator against its brute-force checker (on one or
//! many random graphs), and measure matching cost (evaluations per second).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context};
use braid_tarl::algorithms::{lines_of_code, shipped, Shipped, SHIPPED};
use braid_tarl::bench::bench_rule;
use braid_tarl::sim::{geometric_world, run_to_convergence, tree_world, SimWorld};
use braid_tarl::{checkers, compile, geometric_schema, parse, pretty, tree_schema, Budget, Engine, EngineConfig, Schema, TarlError, TopoId};
use clap::{Args, Subcommand};

use super::Outcome;

#[derive(Debug, Subcommand)]
pub enum TarlCommand {
    /// Parse and type-check rule files; errors as FILE:LINE:COL. Exit status 1 if any fails.
    Check(CheckArgs),
    /// Pretty-print a rule file (or a shipped rule by name).
    Show(ShowArgs),
    /// The shipped rules with their lines of code next to the thesis's.
    List(ListArgs),
    /// Run a shipped rule to convergence in the simulator and compare with its checker.
    Sim(SimArgs),
    /// Evaluations per second of the shipped rules on dense views of N nodes.
    Bench(BenchArgs),
}

/// The schemas `check` tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaArg {
    /// Whichever of the others the rule compiles against.
    Auto,
    /// `Phys` and an undirected `Ctrl` (Gabriel, RNG, kTC).
    Geometric,
    /// `Phys` and a directed `Ctrl` (Yao).
    GeometricDirected,
    /// `Tree` (directed) and `Neighborhood` (mTreebone's low-delay jump).
    Tree,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Rule files (or names of shipped rules).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// The schema to check against.
    #[arg(long, value_enum, default_value = "auto")]
    pub schema: SchemaArg,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A rule file, or the name of a shipped rule.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// The shipped rule (see `braid tarl list`).
    #[arg(long)]
    pub rule: String,
    /// Nodes of the random geometric graph.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(2..=5000))]
    pub nodes: u32,
    /// Seed of the graph and of the activation order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Radius of the unit-disk graph in the unit square (default: a mean degree of about 8).
    #[arg(long)]
    pub radius: Option<f64>,
    /// Give up after this many rounds.
    #[arg(long, default_value_t = 200)]
    pub max_rounds: usize,
    /// Run this many graphs, seeds SEED, SEED+1, ...; print a summary (one JSON object with every graph's result with --json).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub graphs: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Shipped rules to measure (default: all).
    #[arg(long = "rule", value_name = "NAME")]
    pub rules: Vec<String>,
    /// View sizes in nodes, comma-separated (dense views: n² links, at most 1000 nodes).
    #[arg(long, value_delimiter = ',', default_value = "10,50,200", value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub views: Vec<u32>,
    /// Measure each rule and view for at least this many milliseconds.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub millis: u64,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: TarlCommand) -> anyhow::Result<Outcome> {
    match command {
        TarlCommand::Check(a) => check(a),
        TarlCommand::Show(a) => show(a),
        TarlCommand::List(a) => list(a),
        TarlCommand::Sim(a) => sim(a),
        TarlCommand::Bench(a) => bench(a),
    }
}

/// The text of `file`, or of the shipped rule it names.
fn source(file: &std::path::Path) -> anyhow::Result<(String, String)> {
    let origin = file.display().to_string();
    if file.exists() {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read `{origin}`"))?;
        Ok((origin, text))
    } else if let Some(s) = shipped(&origin) {
        Ok((format!("{origin}.tarl"), s.source.to_string()))
    } else {
        bail!("`{origin}`: no such file, and not the name of a shipped rule (see `braid tarl list`)")
    }
}

fn schemas(arg: SchemaArg) -> Vec<(&'static str, Schema)> {
    let all = [
        (SchemaArg::Geometric, "geometric", geometric_schema(false)),
        (SchemaArg::GeometricDirected, "geometric-directed", geometric_schema(true)),
        (SchemaArg::Tree, "tree", tree_schema()),
    ];
    all.into_iter()
        .filter(|(a, _, _)| arg == SchemaArg::Auto || *a == arg)
        .map(|(_, n, s)| (n, s))
        .collect()
}

/// Compiles `text` against the schemas of `arg`: the names of those that
/// accept it with the first compiled rule, or the error that got furthest
/// into the file (the schema the author meant).
fn check_one(origin: &str, text: &str, arg: SchemaArg) -> Result<(String, braid_tarl::CompiledRule), TarlError> {
    let mut furthest: Option<TarlError> = None;
    let mut ok: Option<(Vec<&'static str>, braid_tarl::CompiledRule)> = None;
    for (name, schema) in schemas(arg) {
        match compile(origin, text, &schema) {
            Ok(rule) => match &mut ok {
                Some((names, _)) => names.push(name),
                None => ok = Some((vec![name], rule)),
            },
            Err(e) => {
                let e = e.in_file(origin);
                if furthest.as_ref().is_none_or(|f| (e.line, e.col) > (f.line, f.col)) {
                    furthest = Some(e);
                }
            }
        }
    }
    if let Some((names, rule)) = ok {
        return Ok((names.join(", "), rule));
    }
    Err(furthest.unwrap_or_else(|| unreachable_schema(origin)))
}

fn unreachable_schema(origin: &str) -> TarlError {
    TarlError { kind: braid_tarl::ErrorKind::Type, file: origin.into(), line: 1, col: 1, message: "no schema to check against".into() }
}

fn check(args: CheckArgs) -> anyhow::Result<Outcome> {
    let mut failed = 0;
    for f in &args.files {
        let (origin, text) = match source(f) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("error: {e:#}");
                failed += 1;
                continue;
            }
        };
        match check_one(&origin, &text, args.schema) {
            Ok((schema, rule)) => println!(
                "{origin}: ok (schema {schema}; {} lines of code, {} action{})",
                lines_of_code(&text),
                rule.actions.len(),
                if rule.actions.len() == 1 { "" } else { "s" }
            ),
            Err(e) => {
                eprintln!("{e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} rule files failed", args.files.len());
    }
    Ok(Outcome::Success)
}

fn show(args: ShowArgs) -> anyhow::Result<Outcome> {
    let (origin, text) = source(&args.file)?;
    match parse(&text) {
        Ok(rule) => {
            print!("{}", pretty(&rule));
            if !pretty(&rule).ends_with('\n') {
                println!();
            }
            Ok(Outcome::Success)
        }
        Err(e) => {
            eprintln!("{}", e.in_file(&origin));
            bail!("`{origin}` is not a TARL rule")
        }
    }
}

fn schema_name(s: &Shipped) -> &'static str {
    let schema = (s.schema)();
    if schema == tree_schema() {
        "tree"
    } else if schema == geometric_schema(true) {
        "geometric-directed"
    } else {
        "geometric"
    }
}

fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    if args.json {
        let v: Vec<_> = SHIPPED
            .iter()
            .map(|s| {
                serde_json::json!({"name": s.name, "loc": s.loc(), "thesis_loc": s.thesis_loc, "k": s.k, "schema": schema_name(s)})
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
    } else {
        println!("{:<16} {:>4} {:>11} {:>2}  schema", "rule", "LoC", "thesis LoC", "k");
        for s in SHIPPED {
            println!("{:<16} {:>4} {:>11} {:>2}  {}", s.name, s.loc(), s.thesis_loc, s.k, schema_name(s));
        }
    }
    Ok(Outcome::Success)
}

/// What `sim` found.
#[derive(Debug, serde::Serialize)]
struct SimResult {
    rule: String,
    nodes: u32,
    seed: u64,
    radius: f64,
    candidate_links: usize,
    links: usize,
    checker_links: usize,
    rounds: usize,
    converged: bool,
    changes: usize,
    cutoffs: usize,
    failures: Vec<String>,
    matches_checker: bool,
    /// Why not, when it does not.
    difference: Option<String>,
}

fn diff(got: &BTreeSet<(u32, u32)>, want: &BTreeSet<(u32, u32)>) -> Option<String> {
    if got == want {
        return None;
    }
    let extra: Vec<_> = got.difference(want).take(5).collect();
    let missing: Vec<_> = want.difference(got).take(5).collect();
    Some(format!("extra links {extra:?}, missing links {missing:?}"))
}

/// Runs `s` on the random graph of `seed` and compares with its checker.
fn sim_one(s: &Shipped, engine: &Engine, nodes: u32, radius: f64, seed: u64, max_rounds: usize) -> anyhow::Result<SimResult> {
    let n = nodes as usize;
    let directed = schema_name(s) == "geometric-directed";
    let tree = schema_name(s) == "tree";
    let mut world: SimWorld = if tree {
        tree_world(n, radius, seed)
    } else {
        geometric_world(n, radius, seed, directed, directed)
    };
    let (cand_topo, ctrl_topo) = if tree { (TopoId(1), TopoId(0)) } else { (TopoId(0), TopoId(1)) };
    let candidates = world.edges(cand_topo);
    let rep = run_to_convergence(engine, &mut world, seed ^ 0x5eed, max_rounds);
    let got = world.edges(ctrl_topo);
    let (checker_links, difference) = if tree {
        let d = checkers::low_delay_tree(n, &candidates, &got, 0).err();
        (got.len(), d)
    } else {
        let want = match s.name {
            "gabriel" => checkers::gabriel(world.positions(), &candidates),
            "rng" => checkers::relative_neighborhood(world.positions(), &candidates),
            "yao" => checkers::yao(world.positions(), &candidates, 6.0),
            "ktc" => checkers::ktc(world.positions(), &candidates, 1.5),
            other => bail!("no checker for `{other}`"),
        };
        (want.len(), diff(&got, &want))
    };
    Ok(SimResult {
        rule: s.name.into(),
        nodes,
        seed,
        radius,
        candidate_links: candidates.len(),
        links: got.len(),
        checker_links,
        rounds: rep.rounds,
        converged: rep.converged,
        changes: rep.changes,
        cutoffs: rep.cutoffs,
        failures: rep.failures,
        matches_checker: difference.is_none(),
        difference,
    })
}

impl SimResult {
    /// Converged to the checker's topology without failures or cut-offs.
    fn ok(&self) -> bool {
        self.converged && self.matches_checker && self.failures.is_empty() && self.cutoffs == 0
    }
}

/// What `sim --graphs N` found over N graphs.
#[derive(Debug, serde::Serialize)]
struct SimSummary {
    rule: String,
    nodes: u32,
    radius: f64,
    graphs: u32,
    first_seed: u64,
    /// Graphs that converged to exactly the checker's topology (no failures, no cut-offs).
    matched: u32,
    converged: u32,
    /// Seeds of the graphs that did not match.
    mismatched_seeds: Vec<u64>,
    rounds_max: usize,
    mean_rounds: f64,
    mean_candidate_links: f64,
    mean_links: f64,
    results: Vec<SimResult>,
}

fn sim(args: SimArgs) -> anyhow::Result<Outcome> {
    let s = shipped(&args.rule)
        .with_context(|| format!("--rule `{}`: not a shipped rule (see `braid tarl list`)", args.rule))?;
    let n = args.nodes as usize;
    let radius = args.radius.unwrap_or_else(|| (8.0 / (std::f64::consts::PI * n as f64)).sqrt().min(1.5));
    if !(radius.is_finite() && radius > 0.0) {
        bail!("--radius: expected a finite distance > 0, got {radius}");
    }
    let rule = s.compile().with_context(|| format!("shipped rule `{}`", s.name))?;
    let engine = Engine::new((s.schema)(), vec![rule], EngineConfig { k: s.k, budget: Budget::default() })?;
    if args.graphs > 1 {
        return sim_many(&args, s, &engine, radius);
    }
    let r = sim_one(s, &engine, args.nodes, radius, args.seed, args.max_rounds)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("rule             {}", r.rule);
        println!("nodes            {} (seed {}, radius {:.3})", r.nodes, r.seed, r.radius);
        println!("candidate links  {}", r.candidate_links);
        println!("links            {} (checker: {})", r.links, r.checker_links);
        println!("rounds           {} ({})", r.rounds, if r.converged { "converged" } else { "not converged" });
        println!("changes          {}", r.changes);
        println!("cut off          {}", r.cutoffs);
        println!("matches checker  {}", if r.matches_checker { "yes" } else { "NO" });
        if let Some(d) = &r.difference {
            println!("difference       {d}");
        }
        for f in r.failures.iter().take(10) {
            println!("failure          {f}");
        }
    }
    Ok(Outcome::from_ok(r.ok()))
}

fn sim_many(args: &SimArgs, s: &Shipped, engine: &Engine, radius: f64) -> anyhow::Result<Outcome> {
    let mut results = Vec::with_capacity(args.graphs as usize);
    for i in 0..u64::from(args.graphs) {
        let seed = args.seed.wrapping_add(i);
        results.push(sim_one(s, engine, args.nodes, radius, seed, args.max_rounds)?);
    }
    let g = f64::from(args.graphs);
    let mean = |f: fn(&SimResult) -> usize| results.iter().map(|r| f(r) as f64).sum::<f64>() / g;
    let summary = SimSummary {
        rule: s.name.into(),
        nodes: args.nodes,
        radius,
        graphs: args.graphs,
        first_seed: args.seed,
        matched: results.iter().filter(|r| r.ok()).count() as u32,
        converged: results.iter().filter(|r| r.converged).count() as u32,
        mismatched_seeds: results.iter().filter(|r| !r.ok()).map(|r| r.seed).collect(),
        rounds_max: results.iter().map(|r| r.rounds).max().unwrap_or(0),
        mean_rounds: mean(|r| r.rounds),
        mean_candidate_links: mean(|r| r.candidate_links),
        mean_links: mean(|r| r.links),
        results,
    };
    let ok = summary.matched == summary.graphs;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("rule             {}", summary.rule);
        println!(
            "graphs           {} of {} nodes (seeds {}..={}, radius {:.3})",
            summary.graphs,
            summary.nodes,
            summary.first_seed,
            summary.first_seed.wrapping_add(u64::from(summary.graphs) - 1),
            summary.radius
        );
        println!("converged        {}", summary.converged);
        println!("match checker    {} of {}", summary.matched, summary.graphs);
        println!("rounds           mean {:.1}, max {}", summary.mean_rounds, summary.rounds_max);
        println!("links            mean {:.1} of {:.1} candidates", summary.mean_links, summary.mean_candidate_links);
        for r in summary.results.iter().filter(|r| !r.ok()).take(5) {
            println!(
                "mismatch         seed {}: {}",
                r.seed,
                r.difference.as_deref().or(r.failures.first().map(String::as_str)).unwrap_or("not converged")
            );
        }
    }
    Ok(Outcome::from_ok(ok))
}

fn bench(args: BenchArgs) -> anyhow::Result<Outcome> {
    let rules: Vec<&Shipped> = if args.rules.is_empty() {
        SHIPPED.iter().collect()
    } else {
        args.rules
            .iter()
            .map(|r| shipped(r).with_context(|| format!("--rule `{r}`: not a shipped rule (see `braid tarl list`)")))
            .collect::<anyhow::Result<_>>()?
    };
    let min_time = std::time::Duration::from_millis(args.millis);
    if !args.json {
        println!("{:<16} {:>5} {:>2} {:>12} {:>9} {:>9} {:>8}", "rule", "view", "k", "evals/s", "matches", "steps", "actions");
    }
    let mut rows = Vec::new();
    for s in rules {
        for &n in &args.views {
            let r = bench_rule(s, n as usize, min_time).with_context(|| format!("rule `{}` on {n} nodes", s.name))?;
            if !args.json {
                let m = r.matches.map_or_else(|| "-".to_string(), |m| m.to_string());
                println!("{:<16} {:>5} {:>2} {:>12.0} {:>9} {:>9} {:>8}", r.rule, r.view_nodes, r.k, r.evals_per_sec, m, r.steps, r.planned);
            }
            rows.push(r);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(Outcome::Success)
}
