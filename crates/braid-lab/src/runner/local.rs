//! The local executor's scheduling: job slots, exclusive experiments, and
//! storing outcomes as they arrive, those that arrive together in one
//! insert.
//!
//! The calling thread is the only one that touches the sink. Each
//! experiment runs on a thread of its own (see [`execute`](super::execute))
//! and sends its outcome back over a channel. The calling thread loops:
//! take every outcome waiting in the channel (without blocking), store
//! them with one [`ResultSink::insert_experiments`] (one transaction in the
//! store: short experiments finishing together cost one commit, not one
//! each), start experiments in the plan's order while a slot is free, and
//! otherwise block until the next outcome.
//!
//! Storing before starting keeps two promises. An outcome waits at most
//! for the store call in progress, never for more experiments to finish,
//! so a `kill -9` loses at most the batch being written (resume reruns
//! it). And once the sink fails nothing new starts: a slot is refilled
//! only after the outcome that freed it went to the sink. Slots free only
//! when their outcome is taken, so a batch holds at most `jobs`
//! experiments (plus any whose thread could not start).

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

/// The job slots: which experiments are running (by index in `pending`,
/// with when each was launched), and whether one of them is exclusive.
#[derive(Default)]
struct Slots {
    running: HashMap<usize, Instant>,
    exclusive: bool,
}

impl Slots {
    /// Whether `experiment` may start now: nothing runs beside an
    /// exclusive experiment, and it waits for the running ones to end.
    fn free_for(&self, experiment: &PlannedExperiment, jobs: usize) -> bool {
        !self.exclusive && if experiment.exclusive { self.running.is_empty() } else { self.running.len() < jobs }
    }

    fn occupy(&mut self, index: usize, experiment: &PlannedExperiment, launched: Instant) {
        self.exclusive = experiment.exclusive;
        self.running.insert(index, launched);
    }

    /// Free the slot of experiment `index`; when it was launched.
    fn free(&mut self, index: usize, experiment: &PlannedExperiment) -> Option<Instant> {
        let launched = self.running.remove(&index)?;
        if experiment.exclusive {
            self.exclusive = false;
        }
        Some(launched)
    }
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
    let mut slots = Slots::default();
    let mut next = 0;
    let mut batch = Batch::default();
    loop {
        // Everything that finished meanwhile goes into one insert.
        while let Ok(done) = rx.try_recv() {
            arrived(done, &mut slots, &pending, &scheduler, &mut batch);
        }
        scheduler.store(sink, &pending, &mut batch);

        while next < pending.len() && scheduler.error.is_none() && slots.free_for(pending[next], options.jobs) {
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
                    slots.occupy(index, experiment, launched);
                    scheduler.progress.started();
                }
                Err(e) => {
                    let outcome = not_started(format!("cannot start a thread for it: {e}"));
                    batch.push(scheduler.finished(experiment, outcome), index, launched);
                }
            }
        }
        if !batch.is_empty() {
            // Experiments that could not start: store them before waiting.
            continue;
        }
        if slots.running.is_empty() {
            break;
        }
        // Every running experiment's thread holds a sender, so this returns
        // once one of them is done.
        let Ok(done) = rx.recv() else { break };
        arrived(done, &mut slots, &pending, &scheduler, &mut batch);
    }
    // The loop only ends with nothing waiting; this keeps "stored before
    // returning" true even if that changes.
    scheduler.store(sink, &pending, &mut batch);
    scheduler.progress.finish();
    if let Some(e) = scheduler.error {
        return Err(e);
    }
    let mut summary = scheduler.summary;
    summary.elapsed_s = began.elapsed().as_secs_f64();
    summary.overhead = OverheadStats::from_samples(&scheduler.overheads);
    Ok(summary)
}

/// An outcome came back: free its slot and queue it for storing.
fn arrived(
    done: Done,
    slots: &mut Slots,
    pending: &[&PlannedExperiment],
    scheduler: &Scheduler<'_>,
    batch: &mut Batch,
) {
    let experiment = pending[done.index];
    if let Some(launched) = slots.free(done.index, experiment) {
        batch.push(scheduler.finished(experiment, done.outcome), done.index, launched);
    }
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

/// Finished experiments waiting to be stored together.
#[derive(Default)]
struct Batch {
    /// What goes to the sink, as one slice.
    finished: Vec<FinishedExperiment>,
    /// For each: its index in `pending`, when it was launched and how long
    /// its template ran.
    meta: Vec<(usize, Instant, Duration)>,
}

impl Batch {
    fn push(&mut self, (finished, busy): (FinishedExperiment, Duration), index: usize, launched: Instant) {
        self.finished.push(finished);
        self.meta.push((index, launched, busy));
    }

    fn is_empty(&self) -> bool {
        self.finished.is_empty()
    }

    /// What a failed insert was doing, naming the experiments.
    fn describe(&self) -> String {
        match self.finished.as_slice() {
            [one] => format!("storing experiment {}", one.planned.id),
            [first, .., last] => {
                format!(
                    "storing {} experiments together ({} … {})",
                    self.finished.len(),
                    first.planned.id,
                    last.planned.id
                )
            }
            [] => "storing nothing".to_string(),
        }
    }
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
    /// The experiment as it will be stored, and its template's time.
    fn finished(&self, experiment: &PlannedExperiment, outcome: Outcome) -> (FinishedExperiment, Duration) {
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
        (finished, outcome.busy)
    }

    /// Store the batch in one insert and empty it; count what was stored
    /// and remove the work directories of its successes. If the sink
    /// fails, the batch counts as not stored (the store stores all or
    /// none; resume reruns it) and its work directories stay.
    fn store<S: ResultSink + ?Sized>(&mut self, sink: &mut S, pending: &[&PlannedExperiment], batch: &mut Batch) {
        if batch.is_empty() {
            return;
        }
        let result = sink.insert_experiments(self.study_id, &batch.finished);
        let stored_at = Instant::now();
        match result {
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(RunError::Sink { doing: batch.describe(), source: Box::new(e) });
                }
                for &(index, launched, _) in &batch.meta {
                    self.progress.finished(pending[index], true, stored_at.saturating_duration_since(launched));
                }
            }
            Ok(()) => {
                for (finished, &(index, launched, busy)) in batch.finished.iter().zip(&batch.meta) {
                    self.stored(pending[index], finished.status, launched, stored_at, busy);
                }
            }
        }
        batch.finished.clear();
        batch.meta.clear();
    }

    /// Count one stored experiment. Its time runs from its launch to its
    /// batch's commit, plus removing its own work directory (not the
    /// others' in the batch).
    fn stored(
        &mut self,
        experiment: &PlannedExperiment,
        status: ExperimentStatus,
        launched: Instant,
        stored_at: Instant,
        busy: Duration,
    ) {
        self.summary.ran += 1;
        match status {
            ExperimentStatus::Ok => self.summary.ok += 1,
            ExperimentStatus::Failed => self.summary.failed += 1,
            ExperimentStatus::TimedOut => self.summary.timed_out += 1,
        }
        let failed = !matches!(status, ExperimentStatus::Ok);
        let cleaning = Instant::now();
        if !failed && !self.options.keep_work_dirs {
            let dir = self.options.work_root.join(&experiment.id);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an experiment's work directory");
                }
            }
        }
        let total = stored_at.saturating_duration_since(launched) + cleaning.elapsed();
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
