//! The local executor's scheduling: job slots, exclusive experiments, and
//! storing each outcome as it arrives.
//!
//! The calling thread is the only one that touches the sink. Each
//! experiment runs on a thread of its own (see [`execute`](super::execute))
//! and sends its outcome back over a channel; the calling thread starts
//! experiments in the plan's order while a slot is free, and otherwise
//! waits for an outcome, stores it, and frees the slot.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::execute::{execute, Job, Outcome};
use super::progress::Progress;
use super::provenance::{host_name, BRAID_VERSION, GIT_COMMIT};
use super::store_api::{ExperimentStatus, FinishedExperiment};
use super::summary::{OverheadStats, RunSummary};
use super::{ResultSink, RunError, RunOptions, TemplateLookup};
use crate::plan::PlannedExperiment;
use crate::template::Template;

/// An outcome on its way back to the scheduler.
struct Done {
    index: usize,
    outcome: Outcome,
}

/// A started experiment.
struct Running {
    launched: Instant,
}

/// See [`super::run`].
pub(crate) fn run<S: ResultSink + ?Sized>(
    study_id: i64,
    plan: &[PlannedExperiment],
    templates: &TemplateLookup<'_>,
    sink: &mut S,
    options: &RunOptions,
) -> Result<RunSummary, RunError> {
    if options.jobs == 0 {
        return Err(RunError::NoJobs);
    }
    let began = Instant::now();
    let stored = sink.stored_experiments(study_id).map_err(sink_error("reading the stored experiments"))?;

    // What to run: the plan's experiments not stored yet (or stored as
    // failures, when retrying), each once, in the plan's order.
    let mut seen = HashSet::new();
    let mut pending: Vec<&PlannedExperiment> = Vec::new();
    let mut skipped = 0;
    let mut retry = false;
    for e in plan {
        if !seen.insert(e.id.as_str()) {
            continue;
        }
        match stored.get(&e.id) {
            None => pending.push(e),
            Some(ExperimentStatus::Ok) => skipped += 1,
            Some(_) if options.retry_failed => {
                retry = true;
                pending.push(e);
            }
            Some(_) => skipped += 1,
        }
    }
    let templates = resolve_templates(&pending, templates)?;
    std::fs::create_dir_all(&options.work_root)
        .map_err(|source| RunError::WorkRoot { path: options.work_root.clone(), source })?;
    // Delete old failures only once nothing can stop the run from starting
    // them again.
    let retried =
        if retry { sink.delete_failed(study_id).map_err(sink_error("deleting failed experiments"))? } else { 0 };

    let mut scheduler = Scheduler {
        study_id,
        options,
        host: host_name(),
        progress: Progress::new(&pending, options.jobs, options.show_progress),
        summary: RunSummary {
            planned: seen.len(),
            skipped,
            ran: 0,
            ok: 0,
            failed: 0,
            timed_out: 0,
            retried,
            elapsed_s: 0.0,
            overhead: None,
        },
        overheads: Vec::with_capacity(pending.len()),
        error: None,
    };
    let (tx, rx) = mpsc::channel::<Done>();
    let mut running: HashMap<usize, Running> = HashMap::new();
    let mut exclusive_running = false;
    let mut next = 0;
    loop {
        let can_start = next < pending.len()
            && scheduler.error.is_none()
            && !exclusive_running
            && if pending[next].exclusive { running.is_empty() } else { running.len() < options.jobs };
        if can_start {
            let experiment = pending[next];
            let index = next;
            next += 1;
            let launched = Instant::now();
            let job = Job {
                isolation: options.isolation_for(&experiment.template),
                template: templates[experiment.template.as_str()].clone(),
                work_dir: options.work_root.join(&experiment.id),
                experiment: experiment.clone(),
            };
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("lab-run-{}", experiment.id.chars().take(8).collect::<String>()))
                .spawn(move || {
                    let outcome = execute(job);
                    let _ = tx.send(Done { index, outcome });
                });
            match spawned {
                Ok(_) => {
                    exclusive_running = experiment.exclusive;
                    running.insert(index, Running { launched });
                    scheduler.progress.started();
                }
                Err(e) => {
                    let outcome = not_started(format!("cannot start a thread for it: {e}"));
                    scheduler.store(sink, experiment, outcome, launched);
                }
            }
            continue;
        }
        if running.is_empty() {
            break;
        }
        // Every running experiment's thread holds a sender, so this returns
        // once one of them is done.
        let Ok(done) = rx.recv() else { break };
        let Some(r) = running.remove(&done.index) else { continue };
        if pending[done.index].exclusive {
            exclusive_running = false;
        }
        scheduler.store(sink, pending[done.index], done.outcome, r.launched);
    }
    scheduler.progress.finish();
    if let Some(e) = scheduler.error {
        return Err(e);
    }
    let mut summary = scheduler.summary;
    summary.elapsed_s = began.elapsed().as_secs_f64();
    summary.overhead = OverheadStats::from_samples(&scheduler.overheads);
    Ok(summary)
}

/// The template of every pending experiment, looked up once per name,
/// before anything runs.
fn resolve_templates<'p>(
    pending: &[&'p PlannedExperiment],
    lookup: &TemplateLookup<'_>,
) -> Result<HashMap<&'p str, Arc<dyn Template>>, RunError> {
    let mut found: HashMap<&str, Arc<dyn Template>> = HashMap::new();
    for e in pending {
        if !found.contains_key(e.template.as_str()) {
            let t = lookup(&e.template)
                .ok_or_else(|| RunError::UnknownTemplate { experiment: e.id.clone(), template: e.template.clone() })?;
            found.insert(e.template.as_str(), t);
        }
    }
    Ok(found)
}

/// The scheduler's state besides its slots.
struct Scheduler<'o> {
    study_id: i64,
    options: &'o RunOptions,
    host: String,
    progress: Progress,
    summary: RunSummary,
    overheads: Vec<Duration>,
    /// The first sink error: nothing more starts, the running ones finish.
    error: Option<RunError>,
}

impl Scheduler<'_> {
    /// Store an outcome, count it, and remove the work directory of a
    /// success.
    fn store<S: ResultSink + ?Sized>(
        &mut self,
        sink: &mut S,
        experiment: &PlannedExperiment,
        outcome: Outcome,
        launched: Instant,
    ) {
        let busy = outcome.busy;
        let finished = FinishedExperiment {
            planned: experiment.clone(),
            status: outcome.status,
            exit_code: outcome.exit_code,
            error: outcome.error,
            stderr_tail: outcome.stderr_tail,
            started: outcome.started,
            ended: outcome.ended,
            host: self.host.clone(),
            braid_version: BRAID_VERSION.to_string(),
            git_commit: GIT_COMMIT.to_string(),
            records: outcome.records,
        };
        let failed = !matches!(finished.status, ExperimentStatus::Ok);
        if let Err(e) = sink.insert_experiment(self.study_id, &finished) {
            if self.error.is_none() {
                self.error = Some(RunError::Sink {
                    doing: format!("storing experiment {}", experiment.id),
                    source: Box::new(e),
                });
            }
            self.progress.finished(experiment, true, launched.elapsed());
            return;
        }
        self.summary.ran += 1;
        match finished.status {
            ExperimentStatus::Ok => self.summary.ok += 1,
            ExperimentStatus::Failed => self.summary.failed += 1,
            ExperimentStatus::TimedOut => self.summary.timed_out += 1,
        }
        if !failed && !self.options.keep_work_dirs {
            let dir = self.options.work_root.join(&experiment.id);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an experiment's work directory");
                }
            }
        }
        let total = launched.elapsed();
        self.overheads.push(total.saturating_sub(busy));
        self.progress.finished(experiment, failed, total);
    }
}

/// The outcome of an experiment that could not even start.
fn not_started(error: String) -> Outcome {
    let now = super::provenance::unix_now();
    Outcome {
        status: ExperimentStatus::Failed,
        exit_code: None,
        error: Some(error),
        stderr_tail: String::new(),
        records: Vec::new(),
        started: now,
        ended: now,
        busy: Duration::ZERO,
    }
}

fn sink_error<E: std::error::Error + Send + Sync + 'static>(doing: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Sink { doing: doing.to_string(), source: Box::new(e) }
}
