//! A study's experiments, each with a content-derived id.
//!
//! [`Plan::new`] expands a [`Study`] into [`PlannedExperiment`]s: every
//! point of its grid that no `[[exclude]]` matches ([`Study::points`])
//! times every repetition. The order is
//! stable: environments outermost, then configurations (each role's
//! parameters in the template's declared order, the first declared varying
//! slowest), then repetitions innermost, so the repetitions of one
//! configuration in one environment are neighbours.
//!
//! An experiment's id is a hash of what determines its outcome and where it
//! belongs: the study's name, the template's name and version, every
//! parameter value in canonical text, the repetition and the seed. Resume is
//! "run what is not stored yet"; "never stored twice" is the store's UNIQUE
//! constraint on the id. A parameter a template gains later
//! ([`ParamDecl::added_later`](crate::param::ParamDecl::added_later)) counts
//! only where it is not at its default, so stored studies keep their ids.
//!
//! An experiment's seed derives from the study's base seed, every parameter
//! value and the repetition, and from nothing else: adding a value to a
//! list, or a repetition, leaves the seeds (and so the ids) of the
//! experiments already planned as they were, so a grown study resumes.
//! Excluding a combination removes its experiments and leaves the others'
//! ids and seeds as they were too.
//!
//! ```
//! # use std::sync::Arc;
//! # use braid_lab::param::{ParamDecl, ParamType, Value};
//! # use braid_lab::template::{Context, Template, TemplateError};
//! # struct Echo;
//! # impl Template for Echo {
//! #     fn name(&self) -> &str { "echo" }
//! #     fn description(&self) -> &str { "" }
//! #     fn params(&self) -> Vec<ParamDecl> { vec![ParamDecl::config("x", ParamType::int(), Value::Int(1))] }
//! #     fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> { Ok(()) }
//! # }
//! use braid_lab::plan::Plan;
//! use braid_lab::study::Study;
//! let study = Study::from_values("s", Arc::new(Echo), &[("x", vec![Value::Int(1), Value::Int(2)])], 3, 7).unwrap();
//! let plan = Plan::new(&study);
//! assert_eq!(plan.count(), 6);
//! assert_eq!(plan.experiments[0].id.len(), 16);
//! // One second each (the trait's default), two at a time.
//! assert_eq!(plan.expected_total(2).as_secs(), 3);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::param::{Params, Role};
use crate::study::Study;

/// One experiment to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedExperiment {
    /// Content-derived id (hex, 16 characters).
    pub id: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// Every declared parameter's value.
    pub params: Params,
    /// 0-based repetition index.
    pub repetition: u32,
    /// The experiment's seed (derived from the study's base seed, the
    /// configuration, the environment and the repetition).
    pub seed: u64,
    /// When the runner gives up on it.
    pub timeout: Duration,
    /// Run alone (no other experiment at the same time).
    pub exclusive: bool,
    /// Expected wall-clock duration.
    pub expected: Duration,
}

/// A study's experiments in their stable order, with what `braid lab plan`
/// shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The study's name.
    pub study: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// Every experiment: environments outermost, then configurations, then
    /// repetitions.
    pub experiments: Vec<PlannedExperiment>,
    /// How many configurations (product of the configuration lists).
    pub configurations: usize,
    /// How many environments (product of the environment lists).
    pub environments: usize,
    /// Repetitions of each configuration in each environment.
    pub repetitions: u32,
    /// Experiments the study's `[[exclude]]` tables remove from
    /// configurations × environments × repetitions.
    pub excluded: usize,
    /// How many `[[exclude]]` tables the study has.
    pub excludes: usize,
    /// Every parameter with its values.
    pub params: Vec<ParamSummary>,
}

impl Plan {
    /// Expand `study`.
    pub fn new(study: &Study) -> Plan {
        let mut experiments = Vec::with_capacity(study.count());
        for params in study.points() {
            for repetition in 0..study.repetitions {
                experiments.push(experiment(study, params.clone(), repetition));
            }
        }
        Plan {
            study: study.name.clone(),
            template: study.template.name().to_string(),
            template_version: study.template.version(),
            experiments,
            configurations: study.configurations(),
            environments: study.environments(),
            repetitions: study.repetitions,
            excluded: study.excluded(),
            excludes: study.excludes.len(),
            params: study
                .params
                .iter()
                .map(|p| ParamSummary {
                    name: p.decl.name.clone(),
                    role: p.decl.role,
                    ty: p.decl.ty.name().to_string(),
                    count: p.values.len(),
                    values: p.values.iter().map(|v| v.to_text()).collect(),
                    listed: p.listed,
                })
                .collect(),
        }
    }

    /// How many experiments.
    pub fn count(&self) -> usize {
        self.experiments.len()
    }

    /// How long the whole plan takes with `jobs` parallel slots:
    /// [`expected_makespan`] of its experiments.
    pub fn expected_total(&self, jobs: usize) -> Duration {
        expected_makespan(&self.experiments, jobs)
    }

    /// What `braid lab plan` prints (as a table or JSON).
    pub fn summary(&self, jobs: usize) -> PlanSummary {
        let jobs = jobs.max(1);
        PlanSummary {
            study: self.study.clone(),
            template: self.template.clone(),
            template_version: self.template_version,
            count: self.count(),
            configurations: self.configurations,
            environments: self.environments,
            repetitions: self.repetitions,
            excluded: self.excluded,
            excludes: self.excludes,
            exclusive: self.experiments.iter().filter(|e| e.exclusive).count(),
            jobs,
            expected_secs: self.expected_total(jobs).as_secs_f64(),
            params: self.params.clone(),
        }
    }
}

/// The experiment for one point of a study's parameter space (every
/// parameter's value) and one repetition: what [`Plan::new`] makes for each
/// grid point, and what a runner driven by an ask/tell
/// [`ParamSource`](crate::search::ParamSource) makes for each point asked.
pub fn experiment(study: &Study, params: Params, repetition: u32) -> PlannedExperiment {
    let template = study.template.as_ref();
    let identity = params.identity(&template.params());
    let seed = experiment_seed(study.seed, &identity, repetition);
    let expected = template.expected_duration(&params);
    PlannedExperiment {
        id: experiment_id(&study.name, template.name(), template.version(), &identity, repetition, seed),
        template: template.name().to_string(),
        template_version: template.version(),
        repetition,
        seed,
        timeout: study.timeout_for(expected),
        exclusive: study.exclusive(),
        expected,
        params,
    }
}

/// The id of an experiment: the first 8 bytes, in hex, of the BLAKE3 hash
/// of a length-prefixed encoding of the study name, template name and
/// version, every (parameter name, canonical value text) in name order,
/// the repetition and the seed.
pub fn experiment_id(
    study: &str,
    template: &str,
    template_version: u32,
    params: &Params,
    repetition: u32,
    seed: u64,
) -> String {
    let mut h = Canonical::new("braid-lab experiment id v1");
    h.text(study);
    h.text(template);
    h.u64(template_version.into());
    h.params(params);
    h.u64(repetition.into());
    h.u64(seed);
    let hash = h.0.finalize();
    hash.as_bytes()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// An experiment's seed: from the base seed, every parameter's canonical
/// value and the repetition only (not the experiment's place in the plan),
/// so it stays when lists grow.
pub fn experiment_seed(base: u64, params: &Params, repetition: u32) -> u64 {
    let mut h = Canonical::new("braid-lab experiment seed v1");
    h.u64(base);
    h.params(params);
    h.u64(repetition.into());
    let hash = h.0.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// An unambiguous byte encoding: every field length-prefixed, so no two
/// different field lists hash the same input.
struct Canonical(blake3::Hasher);

impl Canonical {
    fn new(domain: &str) -> Canonical {
        let mut c = Canonical(blake3::Hasher::new());
        c.text(domain);
        c
    }

    fn text(&mut self, s: &str) {
        self.0.update(&(s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.0.update(&v.to_le_bytes());
    }

    fn params(&mut self, params: &Params) {
        self.u64(params.0.len() as u64);
        for (name, value) in params.iter() {
            self.text(name);
            self.text(&value.to_text());
        }
    }
}

/// How long `experiments` take with `jobs` slots: exclusive experiments one
/// after another with nothing beside them, the others placed in order on
/// the slot that frees first (the runner's policy).
pub fn expected_makespan(experiments: &[PlannedExperiment], jobs: usize) -> Duration {
    let jobs = jobs.max(1);
    let alone: Duration = experiments.iter().filter(|e| e.exclusive).map(|e| e.expected).sum();
    let mut slots: BinaryHeap<Reverse<Duration>> = (0..jobs).map(|_| Reverse(Duration::ZERO)).collect();
    for e in experiments.iter().filter(|e| !e.exclusive) {
        if let Some(Reverse(free_at)) = slots.pop() {
            slots.push(Reverse(free_at + e.expected));
        }
    }
    let parallel = slots.into_iter().map(|Reverse(d)| d).max().unwrap_or_default();
    alone + parallel
}

/// One parameter in a plan summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamSummary {
    /// The parameter.
    pub name: String,
    /// Configuration or environment.
    pub role: Role,
    /// Its type's name (`int`, `size`, `link`, ...).
    #[serde(rename = "type")]
    pub ty: String,
    /// How many values.
    pub count: usize,
    /// The values in canonical text.
    pub values: Vec<String>,
    /// Whether the study lists it (else it is the template's default).
    pub listed: bool,
}

/// What `braid lab plan STUDY.toml` prints, before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// The study.
    pub study: String,
    /// The template.
    pub template: String,
    /// Its version.
    pub template_version: u32,
    /// How many experiments.
    pub count: usize,
    /// How many configurations.
    pub configurations: usize,
    /// How many environments.
    pub environments: usize,
    /// Repetitions of each.
    pub repetitions: u32,
    /// Experiments the `[[exclude]]` tables remove (`count` is the product
    /// minus these).
    #[serde(default)]
    pub excluded: usize,
    /// How many `[[exclude]]` tables.
    #[serde(default)]
    pub excludes: usize,
    /// How many run alone.
    pub exclusive: usize,
    /// Parallel slots assumed.
    pub jobs: usize,
    /// Expected wall-clock seconds for the whole study.
    pub expected_secs: f64,
    /// Every parameter with its value count.
    pub params: Vec<ParamSummary>,
}

impl PlanSummary {
    /// ` - N excluded by M [[exclude]]` when something is excluded, else
    /// nothing: the tail of the count line.
    pub fn excluded_text(&self) -> String {
        if self.excludes == 0 {
            return String::new();
        }
        format!(
            " - {} excluded by {} [[exclude]] table{}",
            self.excluded,
            self.excludes,
            if self.excludes == 1 { "" } else { "s" }
        )
    }

    /// The parameter table: a header row, then one row per parameter
    /// (name, role, type, count, values).
    pub fn param_rows(&self) -> Vec<[String; 5]> {
        let mut rows = vec![["parameter", "role", "type", "values", ""].map(String::from)];
        for p in &self.params {
            let shown = if p.listed { p.values.join(", ") } else { format!("{} (default)", p.values.join(", ")) };
            rows.push([p.name.clone(), p.role.name().to_string(), p.ty.clone(), p.count.to_string(), shown]);
        }
        rows
    }
}

impl fmt::Display for PlanSummary {
    /// The summary as text: the totals, then the parameter table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "study {} (template {} v{})", self.study, self.template, self.template_version)?;
        writeln!(
            f,
            "{} experiments = {} configurations x {} environments x {} repetitions{}",
            self.count,
            self.configurations,
            self.environments,
            self.repetitions,
            self.excluded_text()
        )?;
        if self.exclusive > 0 {
            writeln!(f, "{} of them run alone (exclusive)", self.exclusive)?;
        }
        writeln!(
            f,
            "expected duration with {} job{}: {}",
            self.jobs,
            if self.jobs == 1 { "" } else { "s" },
            human_secs(self.expected_secs)
        )?;
        let rows = self.param_rows();
        let widths: Vec<usize> = (0..5).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        for row in &rows {
            let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
            writeln!(f, "  {}", line.join("  ").trim_end())?;
        }
        Ok(())
    }
}

/// `42s`, `12m 5s`, `3h 20m`.
fn human_secs(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::{ParamDecl, ParamType, Value};
    use crate::template::{Context, Requirements, Template, TemplateError};
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    /// Four parameters; its expected duration is `secs` seconds.
    struct T {
        exclusive: bool,
    }
    impl Template for T {
        fn name(&self) -> &str {
            "t"
        }
        fn description(&self) -> &str {
            "test"
        }
        fn params(&self) -> Vec<ParamDecl> {
            vec![
                ParamDecl::config("a", ParamType::int(), Value::Int(0)),
                ParamDecl::config("b", ParamType::int(), Value::Int(0)),
                ParamDecl::env("e", ParamType::int(), Value::Int(0)),
                ParamDecl::env("secs", ParamType::int_range(1, 100), Value::Int(1)),
            ]
        }
        fn requirements(&self) -> Requirements {
            Requirements { emulator: false, exclusive: self.exclusive }
        }
        fn expected_duration(&self, params: &Params) -> Duration {
            Duration::from_secs(params.int("secs").map_or(1, |s| s as u64))
        }
        fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> {
            Ok(())
        }
    }

    fn ints(n: usize) -> Vec<Value> {
        (0..n as i64).map(Value::Int).collect()
    }

    fn study(a: usize, b: usize, e: usize, reps: u32) -> Study {
        Study::from_values(
            "s",
            Arc::new(T { exclusive: false }),
            &[("a", ints(a)), ("b", ints(b)), ("e", ints(e))],
            reps,
            5,
        )
        .unwrap()
    }

    fn key(x: &PlannedExperiment) -> (i64, i64, i64, u32) {
        let p = &x.params;
        (p.int("e").unwrap(), p.int("a").unwrap(), p.int("b").unwrap(), x.repetition)
    }

    #[test]
    fn order_is_environment_configuration_repetition() {
        let plan = Plan::new(&study(2, 2, 2, 2));
        let keys: Vec<_> = plan.experiments.iter().map(key).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "environment, then a, then b, then repetition");
        assert_eq!(keys[..3], [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0)]);
        assert_eq!((plan.configurations, plan.environments, plan.repetitions), (4, 2, 2));
    }

    #[test]
    fn ids_and_seeds_are_stable_across_runs() {
        let a = Plan::new(&study(2, 3, 2, 2));
        let b = Plan::new(&study(2, 3, 2, 2));
        assert_eq!(a, b);
        // A fixed vector: the encoding is part of the store's contract; a
        // change here makes every stored study rerun.
        let mut p = Params::default();
        p.insert("x", Value::Int(1));
        assert_eq!(experiment_id("s", "t", 1, &p, 0, 42), "6f56c4c85b691552");
        assert_eq!(experiment_seed(42, &p, 0), 12966581329628356225);
        assert_ne!(experiment_id("s", "t", 1, &p, 0, 42), experiment_id("s", "t", 2, &p, 0, 42));
        assert_ne!(experiment_id("s", "t", 1, &p, 0, 42), experiment_id("s2", "t", 1, &p, 0, 42));
        assert_ne!(experiment_seed(1, &p, 0), experiment_seed(2, &p, 0));
        assert_ne!(experiment_seed(1, &p, 0), experiment_seed(1, &p, 1));
    }

    /// `T` after a release that gave it a parameter `g`, marked or not as
    /// added later.
    struct Grown {
        added_later: bool,
    }
    impl Template for Grown {
        fn name(&self) -> &str {
            "t"
        }
        fn description(&self) -> &str {
            "test, grown"
        }
        fn params(&self) -> Vec<ParamDecl> {
            let g = ParamDecl::env("g", ParamType::int(), Value::Int(0));
            let mut v = T { exclusive: false }.params();
            v.push(if self.added_later { g.added_later() } else { g });
            v
        }
        fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> {
            Ok(())
        }
    }

    #[test]
    fn a_parameter_added_later_keeps_the_stored_ids_at_its_default() {
        let values = |t: Arc<dyn Template>, g: Option<Vec<Value>>| {
            let mut lists = vec![("a", ints(3)), ("e", ints(2))];
            lists.extend(g.map(|g| ("g", g)));
            Plan::new(&Study::from_values("s", t, &lists, 2, 7).unwrap())
        };
        let key = |e: &PlannedExperiment| (e.id.clone(), e.seed);
        let before: Vec<_> = values(Arc::new(T { exclusive: false }), None).experiments.iter().map(key).collect();
        let grown = values(Arc::new(Grown { added_later: true }), None);
        assert_eq!(grown.experiments.iter().map(key).collect::<Vec<_>>(), before);
        // The worker still gets the new parameter, at its default.
        assert!(grown.experiments.iter().all(|e| e.params.int("g") == Ok(0)));
        // Listing the default changes nothing; another value is a new experiment.
        let listed = values(Arc::new(Grown { added_later: true }), Some(vec![Value::Int(0), Value::Int(5)]));
        let (at_default, set): (Vec<_>, Vec<_>) = listed.experiments.iter().partition(|e| e.params.int("g") == Ok(0));
        assert_eq!(at_default.iter().map(|e| key(e)).collect::<Vec<_>>(), before);
        assert!(set.iter().all(|e| !before.iter().any(|(id, _)| id == &e.id)));
        // Without the mark, a new parameter is part of every identity.
        let unmarked = values(Arc::new(Grown { added_later: false }), None);
        assert!(unmarked.experiments.iter().all(|e| !before.iter().any(|(id, _)| id == &e.id)));
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let mut p = Params::default();
        p.insert("ab", Value::String("c".into()));
        let mut q = Params::default();
        q.insert("a", Value::String("bc".into()));
        assert_ne!(experiment_id("s", "t", 1, &p, 0, 0), experiment_id("s", "t", 1, &q, 0, 0));
        assert_ne!(experiment_id("st", "", 1, &p, 0, 0), experiment_id("s", "t", 1, &p, 0, 0));
    }

    #[test]
    fn timeout_and_exclusive_come_from_study_or_template() {
        let t: Arc<dyn Template> = Arc::new(T { exclusive: true });
        let mut s = Study::from_values("s", t, &[("secs", vec![Value::Int(2), Value::Int(7)])], 1, 0).unwrap();
        let plan = Plan::new(&s);
        assert!(plan.experiments.iter().all(|e| e.exclusive));
        let timeouts: Vec<u64> = plan.experiments.iter().map(|e| e.timeout.as_secs()).collect();
        assert_eq!(timeouts, [30, 70]);
        assert_eq!(plan.experiments[1].expected, Duration::from_secs(7));
        s.exclusive = Some(false);
        s.timeout = Some(Duration::from_secs(5));
        let plan = Plan::new(&s);
        assert!(plan.experiments.iter().all(|e| !e.exclusive && e.timeout == Duration::from_secs(5)));
    }

    #[test]
    fn makespan_serializes_exclusive_experiments() {
        let t: Arc<dyn Template> = Arc::new(T { exclusive: true });
        let secs = vec![Value::Int(1), Value::Int(2), Value::Int(3)];
        let s = Study::from_values("s", t, &[("secs", secs)], 2, 0).unwrap();
        // Exclusive: 2 × (1 + 2 + 3) = 12 s whatever the jobs.
        assert_eq!(Plan::new(&s).expected_total(4), Duration::from_secs(12));
        let mut s = s;
        s.exclusive = Some(false);
        let plan = Plan::new(&s);
        assert_eq!(plan.expected_total(1), Duration::from_secs(12));
        // In order 1,1,2,2,3,3 on two slots: [1,2,3] and [1,2,3] → 6 s.
        assert_eq!(plan.expected_total(2), Duration::from_secs(6));
        // More slots than experiments: the longest one.
        assert_eq!(plan.expected_total(16), Duration::from_secs(3));
        assert_eq!(plan.expected_total(0), plan.expected_total(1));
    }

    #[test]
    fn summary_counts_and_prints() {
        let plan = Plan::new(&study(2, 3, 4, 5));
        let s = plan.summary(2);
        assert_eq!((s.count, s.configurations, s.environments, s.repetitions), (120, 6, 4, 5));
        assert_eq!(s.expected_secs, 60.0);
        let counts: Vec<(&str, usize, bool)> = s.params.iter().map(|p| (p.name.as_str(), p.count, p.listed)).collect();
        assert_eq!(counts, [("a", 2, true), ("b", 3, true), ("e", 4, true), ("secs", 1, false)]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["count"], 120);
        assert_eq!(json["params"][0]["type"], "int");
        let text = s.to_string();
        assert!(text.contains("120 experiments = 6 configurations x 4 environments x 5 repetitions"), "{text}");
        assert!(text.contains("expected duration with 2 jobs: 1m 0s"), "{text}");
        assert!(text.contains("1 (default)"), "{text}");
    }

    proptest! {
        #[test]
        fn count_is_product_times_repetitions_and_ids_unique(
            a in 1usize..5, b in 1usize..5, e in 1usize..5, reps in 1u32..5,
        ) {
            let plan = Plan::new(&study(a, b, e, reps));
            prop_assert_eq!(plan.count(), a * b * e * reps as usize);
            let ids: HashSet<&str> = plan.experiments.iter().map(|x| x.id.as_str()).collect();
            prop_assert_eq!(ids.len(), plan.count());
            prop_assert!(plan.experiments.iter().all(|x| x.id.len() == 16 && x.id.chars().all(|c| c.is_ascii_hexdigit())));
            let seeds: HashSet<u64> = plan.experiments.iter().map(|x| x.seed).collect();
            prop_assert_eq!(seeds.len(), plan.count());
        }

        /// Growing any list (or the repetitions) keeps every existing
        /// experiment's id and seed.
        #[test]
        fn growing_a_study_keeps_ids_and_seeds(
            a in 1usize..4, b in 1usize..4, e in 1usize..4, reps in 1u32..4, which in 0usize..4,
        ) {
            let small = Plan::new(&study(a, b, e, reps));
            let big = match which {
                0 => study(a + 1, b, e, reps),
                1 => study(a, b + 2, e, reps),
                2 => study(a, b, e + 1, reps),
                _ => study(a, b, e, reps + 1),
            };
            let big = Plan::new(&big);
            let by_id: std::collections::HashMap<&str, &PlannedExperiment> =
                big.experiments.iter().map(|x| (x.id.as_str(), x)).collect();
            for x in &small.experiments {
                let y = by_id.get(x.id.as_str());
                prop_assert!(y.is_some(), "{} vanished", x.id);
                prop_assert_eq!(*y.unwrap(), x);
            }
        }
    }
}
