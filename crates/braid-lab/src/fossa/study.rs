//! The learning study file of `braid rules learn` (issue 20 items 3–5):
//! which scenario, which environments for training and which held out,
//! how utilities aggregate, the `adapt` template's fixed parameters, and
//! the genetic-programming settings. Parsed whole and checked before
//! anything runs; errors name the file, the key and the allowed form.
//!
//! ```toml
//! name = "rules-transport"
//! scenario = "transport"          # transport | priority
//! seed = 1
//!
//! [utility]
//! aggregation = "mean"            # mean | min | quantile
//! quantile = 0.25                 # with aggregation = "quantile"
//!
//! [experiment]                    # adapt parameters for every run
//! duration = "2s"
//! warmup = "1s"
//! window = 4
//! repetitions = 1                 # runs (seeds) averaged per evaluation
//! held_out_repetitions = 4        # on held-out environments (default: repetitions)
//!
//! [environments]
//! training = ["rtt=10ms,rate=50mbit", "rtt=80ms,rate=20mbit,loss=2%"]
//! held_out = ["rtt=40ms,rate=30mbit,loss=1%"]
//!
//! [learn]
//! population = 8
//! offspring = 8
//! generations = 4                 # budget = (population + generations x offspring) x training
//! max_rules = 3
//! max_window = "2s"
//! plain = true                    # also run GP without the efficiency measures
//! random = true                   # and random search with the same budget
//! seeds = ["on first match\n  true: set transport = braid;"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use braid_rules::learn::{Aggregation, GenConfig, LearnConfig, Measures};
use serde::Deserialize;

use crate::param::{parse_duration, Value};
use crate::template::builtin::adapt::{Adapt, SCENARIOS};
use crate::template::Template;

/// Why a learning study file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LearnStudyError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The TOML does not parse or has unknown keys (the message gives the
    /// line and column).
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A value outside its allowed form.
    #[error("{path}: `{key}` must be {allowed}, got {got}")]
    Field {
        /// The file.
        path: String,
        /// The key (`learn.population`).
        key: String,
        /// The allowed form.
        allowed: String,
        /// What was given.
        got: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    description: String,
    scenario: String,
    #[serde(default = "one")]
    seed: u64,
    #[serde(default)]
    utility: UtilityFile,
    #[serde(default)]
    experiment: BTreeMap<String, toml::Value>,
    environments: EnvFile,
    #[serde(default)]
    learn: LearnFile,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UtilityFile {
    aggregation: Option<String>,
    quantile: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    training: Vec<String>,
    #[serde(default)]
    held_out: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LearnFile {
    population: Option<usize>,
    offspring: Option<usize>,
    generations: Option<u64>,
    budget: Option<u64>,
    measures: Option<bool>,
    plain: Option<bool>,
    random: Option<bool>,
    max_rules: Option<usize>,
    max_window: Option<String>,
    min_window: Option<String>,
    p_crossover: Option<f64>,
    p_mutation: Option<f64>,
    #[serde(default)]
    seeds: Vec<String>,
}

/// A checked learning study.
#[derive(Debug, Clone)]
pub struct LearnStudy {
    /// The name; the lab studies of its batches are named after it.
    pub name: String,
    /// Free text.
    pub description: String,
    /// The `adapt` scenario.
    pub scenario: String,
    /// The `adapt` parameters every run gets (besides `rules` and `link`).
    pub experiment: Vec<(String, Value)>,
    /// Runs per evaluation, each with its own seed (lab repetition), whose
    /// objectives are averaged: `[experiment] repetitions`, default 1.
    pub repetitions: u32,
    /// Runs per evaluation on a held-out environment, where the reports
    /// compare rule sets: `[experiment] held_out_repetitions`, default
    /// `repetitions`.
    pub held_out_repetitions: u32,
    /// Link specs the search sees.
    pub training: Vec<String>,
    /// Link specs only the reports see.
    pub held_out: Vec<String>,
    /// The learner's settings (environments are indices: training first,
    /// then held-out, as [`LearnStudy::environment`] numbers them).
    pub config: LearnConfig,
    /// Also run plain GP (no efficiency measures), for the curve.
    pub plain: bool,
    /// Also run random search with the same budget.
    pub random: bool,
    /// The file's text, stored with every batch study.
    pub text: String,
}

impl LearnStudy {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<LearnStudy, LearnStudyError> {
        let text = std::fs::read_to_string(path).map_err(|source| LearnStudyError::Io { path: path.display().to_string(), source })?;
        LearnStudy::parse(&text, &path.display().to_string())
    }

    /// Parses and checks `text` (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<LearnStudy, LearnStudyError> {
        let f: File = toml::from_str(text).map_err(|e| LearnStudyError::Syntax { path: origin.to_string(), message: e.to_string() })?;
        let field = |key: &str, allowed: &str, got: String| LearnStudyError::Field {
            path: origin.to_string(),
            key: key.to_string(),
            allowed: allowed.to_string(),
            got,
        };
        if f.name.trim().is_empty() || !f.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(field("name", "a non-empty name of letters, digits, `-`, `_` and `.`", format!("`{}`", f.name)));
        }
        if !SCENARIOS.contains(&f.scenario.as_str()) {
            return Err(field("scenario", &format!("one of {}", SCENARIOS.join(", ")), format!("`{}`", f.scenario)));
        }
        if i64::try_from(f.seed).is_err() {
            return Err(field("seed", "at most 2^63 - 1", f.seed.to_string()));
        }
        let aggregation = match (f.utility.aggregation.as_deref().unwrap_or("mean"), f.utility.quantile) {
            ("mean", None) => Aggregation::Mean,
            ("min", None) => Aggregation::Min,
            ("quantile", Some(q)) if (0.0..=1.0).contains(&q) => Aggregation::Quantile(q),
            ("quantile", q) => return Err(field("utility.quantile", "a number in [0, 1] with aggregation = \"quantile\"", format!("{q:?}"))),
            (a @ ("mean" | "min"), Some(_)) => return Err(field("utility.quantile", "given only with aggregation = \"quantile\"", format!("aggregation = \"{a}\""))),
            (other, _) => return Err(field("utility.aggregation", "mean, min or quantile", format!("`{other}`"))),
        };
        // The fixed experiment parameters, typed by the template's
        // declarations.
        let decls = Adapt.params();
        let mut experiment = vec![("scenario".to_string(), Value::Enum(f.scenario.clone()))];
        let (mut repetitions, mut held_out_repetitions) = (1u32, None);
        for (k, v) in &f.experiment {
            let key = format!("experiment.{k}");
            if k == "repetitions" || k == "held_out_repetitions" {
                // Not template parameters: how many lab repetitions (seeds)
                // one evaluation averages.
                let n = v
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| field(&key, "an integer from 1 to 100", v.to_string()))?;
                if k == "repetitions" {
                    repetitions = n;
                } else {
                    held_out_repetitions = Some(n);
                }
                continue;
            }
            if ["rules", "link", "scenario"].contains(&k.as_str()) {
                return Err(field(&key, "not set here (the learner sets rules, environments set link, scenario is top-level)", v.to_string()));
            }
            let Some(d) = decls.iter().find(|d| &d.name == k) else {
                let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).filter(|n| !["rules", "link", "scenario"].contains(n)).collect();
                return Err(field(&key, &format!("repetitions, held_out_repetitions or a parameter of the adapt template ({})", names.join(", ")), "an unknown key".into()));
            };
            let text = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let value = d.ty.parse_text(&text).map_err(|why| field(&key, &d.ty.allowed_form(), format!("`{text}` ({why})")))?;
            experiment.push((k.clone(), value));
        }
        let link_ty = crate::param::ParamType::Link;
        let check_envs = |key: &str, list: &[String]| -> Result<Vec<String>, LearnStudyError> {
            list.iter()
                .map(|l| match link_ty.parse_text(l) {
                    Ok(Value::Link(s)) => Ok(s),
                    Ok(other) => Ok(other.to_text()),
                    Err(why) => Err(field(key, "link specs such as rtt=20ms,rate=50mbit,loss=1%", format!("`{l}` ({why})"))),
                })
                .collect()
        };
        let training = check_envs("environments.training", &f.environments.training)?;
        let held_out = check_envs("environments.held_out", &f.environments.held_out)?;
        if training.is_empty() {
            return Err(field("environments.training", "at least one link spec", "none".into()));
        }
        let l = &f.learn;
        let population = l.population.unwrap_or(8);
        let offspring = l.offspring.unwrap_or(population);
        let per_gen = (offspring * training.len()) as u64;
        let initial = (population * training.len()) as u64;
        let budget = match (l.budget, l.generations) {
            (Some(_), Some(_)) => return Err(field("learn.budget", "given without learn.generations (one decides the other)", "both".into())),
            (Some(b), None) => b,
            (None, g) => initial + g.unwrap_or(4) * per_gen,
        };
        let dur = |key: &str, v: &Option<String>, default: Duration| -> Result<Duration, LearnStudyError> {
            match v {
                None => Ok(default),
                Some(t) => parse_duration(t).ok_or_else(|| field(key, "a duration such as 500ms or 2s", format!("`{t}`"))),
            }
        };
        let gen_default = GenConfig::default();
        let max_window = dur("learn.max_window", &l.max_window, Duration::from_secs(2))?;
        let min_window = dur("learn.min_window", &l.min_window, Duration::from_millis(200))?;
        if min_window.is_zero() || min_window > max_window {
            return Err(field("learn.min_window", "positive and at most learn.max_window", format!("{min_window:?} (max {max_window:?})")));
        }
        let measures = if l.measures.unwrap_or(true) { Measures::ALL } else { Measures::NONE };
        let (objectives, bounds) = (crate::template::builtin::adapt::objectives(&f.scenario), Some((0.0, 1.0)));
        let config = LearnConfig {
            seed: f.seed,
            population,
            offspring,
            budget,
            objectives,
            aggregation,
            training: (0..training.len()).collect(),
            held_out: (training.len()..training.len() + held_out.len()).collect(),
            utility_bounds: bounds,
            measures,
            p_crossover: l.p_crossover.unwrap_or(LearnConfig::default().p_crossover),
            p_mutation: l.p_mutation.unwrap_or(LearnConfig::default().p_mutation),
            generate: GenConfig { max_rules: l.max_rules.unwrap_or(3), windows: (min_window, max_window), ..gen_default },
            // Messages and responses: up to a few thousand per second.
            event_rate: (0.0, 2000.0),
            seeds: Vec::new(),
        };
        config.validate().map_err(|e| field("learn", "valid learner settings", e.to_string()))?;
        let mut study = LearnStudy {
            name: f.name,
            description: f.description,
            scenario: f.scenario,
            experiment,
            repetitions,
            held_out_repetitions: held_out_repetitions.unwrap_or(repetitions),
            training,
            held_out,
            config,
            plain: l.plain.unwrap_or(true),
            random: l.random.unwrap_or(true),
            text: text.to_string(),
        };
        let vocab = study.vocabulary();
        for (i, s) in l.seeds.iter().enumerate() {
            let rules = braid_rules::compile(s, &vocab).map_err(|e| field(&format!("learn.seeds[{i}]"), "a rule set over the scenario's vocabulary", format!("\n{}", e.render(&format!("learn.seeds[{i}]"), s))))?;
            study.config.seeds.push(rules);
        }
        Ok(study)
    }

    /// The vocabulary the learner draws from: the Node's, with only the
    /// scenario's target.
    pub fn vocabulary(&self) -> braid_rules::Vocabulary {
        super::scenario_vocabulary(&self.scenario)
    }

    /// The link spec of environment `i` (training first, then held-out).
    pub fn environment(&self, i: usize) -> Option<&str> {
        self.training.iter().chain(&self.held_out).nth(i).map(String::as_str)
    }

    /// Runs per evaluation in environment `i` (training first, then
    /// held-out).
    pub fn repetitions_in(&self, i: usize) -> u32 {
        if i < self.training.len() {
            self.repetitions
        } else {
            self.held_out_repetitions
        }
    }

    /// Every environment, training first.
    pub fn environments(&self) -> Vec<String> {
        self.training.iter().chain(&self.held_out).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
name = "t"
scenario = "transport"
[experiment]
duration = "2s"
window = 2
[environments]
training = ["rtt=10ms,rate=50mbit", "rtt=80ms,rate=20mbit,loss=2%"]
held_out = ["rtt=40ms,rate=30mbit"]
[learn]
population = 4
generations = 2
seeds = ["on first match\n  true: set transport = tcp;"]
"#;

    #[test]
    fn a_study_reads_with_its_budget_environments_and_seeds() {
        let s = LearnStudy::parse(OK, "t.toml").unwrap();
        assert_eq!(s.config.training, [0, 1]);
        assert_eq!(s.config.held_out, [2]);
        // (4 initial + 2 generations x 4 offspring) x 2 environments.
        assert_eq!(s.config.budget, 24);
        assert_eq!(s.config.seeds.len(), 1);
        assert_eq!(s.environment(2), Some("rtt=40ms,rate=30mbit"));
        assert!(s.experiment.iter().any(|(k, v)| k == "window" && *v == Value::Int(2)));
        assert_eq!(s.config.aggregation, Aggregation::Mean);
        assert_eq!(s.repetitions, 1, "one run per evaluation unless asked");
        assert_eq!((s.repetitions_in(0), s.repetitions_in(2)), (1, 1));
        let r = LearnStudy::parse(&OK.replace("window = 2", "window = 2\nrepetitions = 3\nwarmup = \"1s\""), "t.toml").unwrap();
        assert_eq!(r.repetitions, 3);
        assert_eq!((r.repetitions_in(1), r.repetitions_in(2)), (3, 3), "held-out runs as many unless asked");
        let h = LearnStudy::parse(&OK.replace("window = 2", "window = 2\nheld_out_repetitions = 5"), "t.toml").unwrap();
        assert_eq!((h.repetitions_in(1), h.repetitions_in(2)), (1, 5));
        assert!(!r.experiment.iter().any(|(k, _)| k == "repetitions"), "not passed to the template");
        assert!(r.experiment.iter().any(|(k, v)| k == "warmup" && *v == Value::Duration(Duration::from_secs(1))));
    }

    #[test]
    fn errors_name_the_key_and_the_allowed_form() {
        let cases = [
            (OK.replace("scenario = \"transport\"", "scenario = \"video\""), "`scenario` must be one of transport, priority"),
            (OK.replace("window = 2", "window = 0"), "experiment.window"),
            (OK.replace("window = 2", "colour = 2"), "a parameter of the adapt template"),
            (OK.replace("window = 2", "repetitions = 0"), "experiment.repetitions"),
            (OK.replace("window = 2", "repetitions = \"3\""), "experiment.repetitions"),
            (OK.replace("window = 2", "held_out_repetitions = 101"), "experiment.held_out_repetitions"),
            (OK.replace("\"rtt=40ms,rate=30mbit\"", "\"rtt=fast\""), "environments.held_out"),
            (OK.replace("set transport = tcp", "set transport = quic"), "learn.seeds[0]"),
            (OK.replace("population = 4", "population = 1"), "population"),
            (OK.replace("[learn]", "[learn]\nbudget = 10"), "learn.budget"),
            (OK.replace("[learn]", "[learn]\nbogus = 1"), "unknown field"),
            (format!("{OK}\n[utility]\naggregation = \"quantile\"\n"), "utility.quantile"),
        ];
        for (text, want) in cases {
            let e = LearnStudy::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(want), "want {want}: {e}");
            assert!(e.starts_with("t.toml"), "{e}");
        }
    }
}
