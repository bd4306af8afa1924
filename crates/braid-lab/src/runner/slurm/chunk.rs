//! Chunks: which experiments one Slurm array task runs, one after another,
//! and how long Slurm should let that task run.
//!
//! The model: every Slurm job costs the scheduler a fixed amount (its
//! scheduling pass, the job's prolog and epilog, starting `braid` on the
//! node), on the order of a second on an idle cluster and more on a busy
//! one. Experiments shorter than that would spend most of their time on
//! overhead if each were a task of its own, so consecutive experiments (in
//! the plan's order) are packed into a chunk until their expected
//! durations add up to a target ([`TASK_TARGET`], 30 s: the fixed cost
//! stays a few percent). A long experiment is a chunk of its own.
//! Exclusive experiments go into chunks of their own (submitted with
//! `--exclusive`), never beside shared ones.
//!
//! A task's time limit is the sum of its experiments' timeouts (the task
//! ends each experiment at its timeout) plus, per experiment, the grace
//! the worker gets between SIGTERM and SIGKILL and the grace an in-process
//! template gets, plus a fixed margin for the task's start, rounded up to
//! whole minutes (Slurm's unit).

use std::time::Duration;

use crate::plan::PlannedExperiment;
use crate::runner::{IN_PROCESS_GRACE, KILL_GRACE};

/// The wall time a chunk of short experiments aims at.
pub const TASK_TARGET: Duration = Duration::from_secs(30);

/// Added to every task's time limit: starting the task and `braid` on the
/// node, reading the chunk, writing the last bundle.
pub const TASK_MARGIN: Duration = Duration::from_secs(60);

/// How many experiments go into one array task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkSize {
    /// From the experiments' expected durations: enough for
    /// [`TASK_TARGET`] of work per task.
    #[default]
    Auto,
    /// This many per task (at least 1).
    Fixed(usize),
}

impl std::str::FromStr for ChunkSize {
    type Err = String;

    /// `auto` or a positive integer.
    fn from_str(s: &str) -> Result<ChunkSize, String> {
        match s.trim() {
            "auto" => Ok(ChunkSize::Auto),
            n => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(ChunkSize::Fixed(n)),
                _ => Err(format!("expected `auto` or a number of experiments per task (at least 1), got `{s}`")),
            },
        }
    }
}

/// Consecutive experiments for one array task.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk<'p> {
    /// Its experiments, in the plan's order.
    pub experiments: Vec<&'p PlannedExperiment>,
    /// Whether they are exclusive (the task asks for a whole node).
    pub exclusive: bool,
}

impl Chunk<'_> {
    /// The task's time limit: see the [module documentation](self).
    pub fn time_limit(&self) -> Duration {
        let per_experiment = KILL_GRACE + IN_PROCESS_GRACE;
        self.experiments.iter().fold(TASK_MARGIN, |sum, e| sum.saturating_add(e.timeout).saturating_add(per_experiment))
    }
}

/// Split `pending` (in plan order) into chunks of `size`; shared and
/// exclusive experiments into separate chunks. Never an empty chunk.
pub fn chunks<'p>(pending: &[&'p PlannedExperiment], size: ChunkSize) -> Vec<Chunk<'p>> {
    let mut out = Vec::new();
    for exclusive in [false, true] {
        let mut current: Vec<&PlannedExperiment> = Vec::new();
        let mut expected = Duration::ZERO;
        for &e in pending.iter().filter(|e| e.exclusive == exclusive) {
            current.push(e);
            expected = expected.saturating_add(e.expected);
            let full = match size {
                ChunkSize::Fixed(n) => current.len() >= n.max(1),
                ChunkSize::Auto => expected >= TASK_TARGET,
            };
            if full {
                out.push(Chunk { experiments: std::mem::take(&mut current), exclusive });
                expected = Duration::ZERO;
            }
        }
        if !current.is_empty() {
            out.push(Chunk { experiments: current, exclusive });
        }
    }
    out
}

/// A duration as Slurm's `--time` wants it: whole minutes, rounded up, at
/// least 1.
pub fn slurm_minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;
    use proptest::prelude::*;

    fn planned(i: usize, expected_ms: u64, exclusive: bool) -> PlannedExperiment {
        PlannedExperiment {
            id: format!("{i:016x}"),
            template: "t".into(),
            template_version: 1,
            params: Params::default(),
            repetition: 0,
            seed: i as u64,
            timeout: Duration::from_secs(30),
            exclusive,
            expected: Duration::from_millis(expected_ms),
        }
    }

    #[test]
    fn short_experiments_fill_a_task_of_about_thirty_seconds() {
        // 200 one-second experiments: 7 tasks, 6 of 30 and one of 20.
        let plan: Vec<_> = (0..200).map(|i| planned(i, 1000, false)).collect();
        let refs: Vec<_> = plan.iter().collect();
        let c = chunks(&refs, ChunkSize::Auto);
        let sizes: Vec<usize> = c.iter().map(|c| c.experiments.len()).collect();
        assert_eq!(sizes, [30, 30, 30, 30, 30, 30, 20]);
        // A long experiment is a task of its own.
        let long: Vec<_> = (0..3).map(|i| planned(i, 120_000, false)).collect();
        let refs: Vec<_> = long.iter().collect();
        assert_eq!(chunks(&refs, ChunkSize::Auto).len(), 3);
    }

    #[test]
    fn exclusive_experiments_never_share_a_task_with_shared_ones() {
        let plan: Vec<_> = (0..10).map(|i| planned(i, 1000, i % 3 == 0)).collect();
        let refs: Vec<_> = plan.iter().collect();
        let c = chunks(&refs, ChunkSize::Fixed(4));
        for chunk in &c {
            assert!(chunk.experiments.iter().all(|e| e.exclusive == chunk.exclusive));
        }
        let sizes: Vec<(usize, bool)> = c.iter().map(|c| (c.experiments.len(), c.exclusive)).collect();
        assert_eq!(sizes, [(4, false), (2, false), (4, true)]);
    }

    #[test]
    fn time_limit_covers_every_timeout_and_its_graces() {
        let plan: Vec<_> = (0..4).map(|i| planned(i, 1000, false)).collect();
        let refs: Vec<_> = plan.iter().collect();
        let c = chunks(&refs, ChunkSize::Fixed(4));
        // 60 s + 4 x (30 s + 2 s + 3 s) = 200 s: 4 minutes.
        assert_eq!(c[0].time_limit(), Duration::from_secs(200));
        assert_eq!(slurm_minutes(c[0].time_limit()), 4);
        assert_eq!(slurm_minutes(Duration::from_secs(1)), 1);
        assert_eq!(slurm_minutes(Duration::from_secs(120)), 2);
    }

    #[test]
    fn chunk_size_parses() {
        assert_eq!("auto".parse::<ChunkSize>(), Ok(ChunkSize::Auto));
        assert_eq!("25".parse::<ChunkSize>(), Ok(ChunkSize::Fixed(25)));
        assert!("0".parse::<ChunkSize>().unwrap_err().contains("at least 1"));
        assert!("many".parse::<ChunkSize>().is_err());
    }

    proptest! {
        #[test]
        fn every_experiment_lands_in_exactly_one_chunk_in_order(
            spec in proptest::collection::vec((0u64..60_000, any::<bool>()), 0..120),
            fixed in proptest::option::of(1usize..40),
        ) {
            let plan: Vec<_> = spec.iter().enumerate().map(|(i, &(ms, x))| planned(i, ms, x)).collect();
            let refs: Vec<_> = plan.iter().collect();
            let size = fixed.map_or(ChunkSize::Auto, ChunkSize::Fixed);
            let c = chunks(&refs, size);
            let mut seen: Vec<&str> = Vec::new();
            for chunk in &c {
                prop_assert!(!chunk.experiments.is_empty());
                if let Some(n) = fixed {
                    prop_assert!(chunk.experiments.len() <= n);
                } else {
                    // Only the last experiment may push a chunk past the target.
                    let before: Duration = chunk.experiments[..chunk.experiments.len() - 1].iter().map(|e| e.expected).sum();
                    prop_assert!(before < TASK_TARGET);
                }
                seen.extend(chunk.experiments.iter().map(|e| e.id.as_str()));
            }
            let mut expected: Vec<&str> = plan.iter().filter(|e| !e.exclusive).map(|e| e.id.as_str()).collect();
            expected.extend(plan.iter().filter(|e| e.exclusive).map(|e| e.id.as_str()));
            prop_assert_eq!(seen, expected);
        }
    }
}
