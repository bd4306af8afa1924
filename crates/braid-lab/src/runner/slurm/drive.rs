//! The runner's loop for the Slurm executor: submit what is missing, adopt
//! what is queued, ingest bundles into the store in batches, and store the
//! experiments of lost tasks as failed. See the [parent module](super).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::bundle::{bundle_id, bundle_path, ResultBundle};
use super::chunk::{chunks, Chunk};
use super::layout::{append_journal, chunk_path, read_journal, Layout, Submission};
use super::queue::{scontrol_show, squeue, TaskId};
use super::submit::{sbatch, sbatch_args, write_chunks, MAX_ARRAY_TASKS};
use super::{SlurmError, SlurmOptions};
use crate::plan::PlannedExperiment;
use crate::runner::logs::tail_of_file;
use crate::runner::progress::Progress;
use crate::runner::provenance::{unix_now, BRAID_VERSION, GIT_COMMIT};
use crate::runner::store_api::{ExperimentStatus, FinishedExperiment};
use crate::runner::summary::{OverheadStats, RunSummary};
use crate::runner::{ResultSink, RunError, RunOptions};

/// See the [parent module](super).
pub(crate) fn run<S: ResultSink + ?Sized>(
    study_id: i64,
    plan: &[PlannedExperiment],
    sink: &mut S,
    options: &RunOptions,
    slurm: &SlurmOptions,
) -> Result<RunSummary, RunError> {
    if slurm.task_command.is_empty() {
        return Err(SlurmError::NoTaskCommand.into());
    }
    let began = Instant::now();
    let stored = sink.stored_experiments(study_id).map_err(sink_error("reading the stored experiments"))?;
    let layout = Layout::new(&slurm.shared_dir, study_id);
    layout.create().map_err(|source| SlurmError::SharedDir { path: layout.root.clone(), source })?;

    let crate::runner::pending::Pending { experiments: pending, planned, skipped, retry } =
        crate::runner::pending::pending(plan, &stored, options.retry_failed);
    if let Some(e) = pending.iter().find(|e| !(options.worker_resolves)(&e.template)) {
        return Err(SlurmError::NotResolvable { experiment: e.id.clone(), template: e.template.clone() }.into());
    }
    // Bundles of stored experiments are left from a runner killed between
    // storing them and removing them: stale (and a retried failure's old
    // bundle must not come back as its new result).
    remove_bundles(&layout.bundles(), |id| stored.contains_key(id))?;
    let retried =
        if retry { sink.delete_failed(study_id).map_err(sink_error("deleting failed experiments"))? } else { 0 };

    // Who runs what: every journalled task's experiments.
    let journal_path = layout.journal();
    let journal =
        read_journal(&journal_path).map_err(|source| SlurmError::Journal { path: journal_path.clone(), source })?;
    let waiting_ids: HashSet<&str> = pending.iter().map(|e| e.id.as_str()).collect();
    let mut owner: HashMap<String, TaskId> = HashMap::new();
    for s in &journal {
        for i in 0..s.tasks {
            let Ok(file) = super::task::read_chunk(&chunk_path(&layout.submission(s.number), i)) else { continue };
            for e in file.experiments {
                if waiting_ids.contains(e.id.as_str()) {
                    owner.insert(e.id, TaskId { job: s.job, task: i });
                }
            }
        }
    }
    // The queue before the bundles: a task not in the queue any more has
    // written every bundle it will. (Asked only if a journalled task may
    // still be running: a study whose results are all on disk needs no
    // Slurm to be ingested.)
    let queue = if owner.is_empty() { HashMap::new() } else { squeue().map_err(SlurmError::from)? };
    let mut to_submit: Vec<&PlannedExperiment> = Vec::new();
    let mut tasks: HashMap<TaskId, Vec<String>> = HashMap::new();
    for &e in &pending {
        if bundle_path(&layout.bundles(), &e.id).exists() {
            continue;
        }
        match owner.get(&e.id) {
            Some(t) if queue.contains_key(t) => tasks.entry(*t).or_default().push(e.id.clone()),
            _ => to_submit.push(e),
        }
    }
    let adopted = tasks.len();
    let mut next_number = journal.iter().map(|s| s.number + 1).max().unwrap_or(0);
    let planned_chunks = chunks(&to_submit, slurm.chunk);
    for group in planned_chunks.chunk_by(|a, b| a.exclusive == b.exclusive) {
        for array in group.chunks(MAX_ARRAY_TASKS) {
            let submission = submit_array(&layout, slurm, study_id, next_number, array)?;
            next_number += 1;
            for (i, chunk) in array.iter().enumerate() {
                let t = TaskId { job: submission.job, task: i as u32 };
                tasks.insert(t, chunk.experiments.iter().map(|e| e.id.clone()).collect());
            }
        }
    }
    tracing::info!(
        study_id,
        pending = pending.len(),
        submitted = to_submit.len(),
        tasks = planned_chunks.len(),
        adopted,
        "slurm executor started"
    );

    let jobs = slurm.max_jobs.unwrap_or(tasks.len()).max(1);
    let mut state = Ingest {
        study_id,
        options,
        layout: &layout,
        waiting: pending.iter().map(|e| (e.id.as_str(), *e)).collect(),
        progress: Progress::new(&pending, jobs, options.show_progress),
        summary: RunSummary {
            planned,
            skipped,
            ran: 0,
            ok: 0,
            failed: 0,
            timed_out: 0,
            retried,
            elapsed_s: 0.0,
            overhead: None,
        },
        latencies: Vec::with_capacity(pending.len()),
        cleaner: Cleaner::start(),
    };
    for _ in 0..pending.len() {
        state.progress.started();
    }
    let batching = sink.batching();
    // A bundle stays on disk until its experiment is stored, so a crash of
    // the runner loses nothing however many bundles one transaction takes:
    // unlike the local executor's group commit, the batch is bounded only
    // by memory and a transaction's length (the sink's `max_records`, and
    // INGEST_MAX_EXPERIMENTS). Fewer commits matter on a busy disk, where
    // each one's fsync can take a second.
    let max_batch = IngestLimit { experiments: INGEST_MAX_EXPERIMENTS, records: batching.max_records };
    let mut gone: HashMap<TaskId, Instant> = HashMap::new();
    let mut last_queue = Instant::now();
    let result = loop {
        state.ingest(sink, max_batch)?;
        if state.waiting.is_empty() {
            break Ok(());
        }
        // Interrupted: the arrays keep running and are adopted on resume.
        if slurm.cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst))
            || options.interrupt.as_ref().is_some_and(|i| i.is_requested())
        {
            break Err(SlurmError::Interrupted);
        }
        if last_queue.elapsed() >= slurm.queue_interval {
            last_queue = Instant::now();
            match squeue() {
                Err(e) => tracing::warn!(error = %e, "squeue failed; trying again"),
                Ok(queue) => {
                    let now = Instant::now();
                    tasks.retain(|_, ids| ids.iter().any(|id| state.waiting.contains_key(id.as_str())));
                    gone.retain(|t, _| tasks.contains_key(t));
                    for t in tasks.keys() {
                        if queue.contains_key(t) {
                            gone.remove(t);
                        } else {
                            gone.entry(*t).or_insert(now);
                        }
                    }
                    let lost: Vec<TaskId> = gone
                        .iter()
                        .filter(|(t, since)| tasks.contains_key(t) && now.duration_since(**since) >= slurm.lost_grace)
                        .map(|(t, _)| *t)
                        .collect();
                    for t in lost {
                        gone.remove(&t);
                        if let Some(ids) = tasks.remove(&t) {
                            state.lost(sink, t, &ids)?;
                        }
                    }
                }
            }
        }
        std::thread::sleep(slurm.poll_interval);
    };
    state.progress.finish();
    state.cleaner.finish();
    result?;
    let mut summary = state.summary;
    summary.elapsed_s = began.elapsed().as_secs_f64();
    summary.overhead = OverheadStats::from_samples(&state.latencies);
    Ok(summary)
}

/// Write the chunk files of one array, submit it, and journal it.
fn submit_array(
    layout: &Layout,
    slurm: &SlurmOptions,
    study_id: i64,
    number: u32,
    array: &[Chunk<'_>],
) -> Result<Submission, SlurmError> {
    let dir = layout.submission(number);
    write_chunks(&dir, layout, array)?;
    let args = sbatch_args(slurm, layout, study_id, array);
    let job = sbatch(&dir, &args, &slurm.task_command)?;
    let submission = Submission { number, job, tasks: array.len() as u32 };
    let journal = layout.journal();
    append_journal(&journal, &submission).map_err(|source| SlurmError::Journal { path: journal, source })?;
    tracing::info!(job, tasks = array.len(), "submitted array");
    Ok(submission)
}

/// Remove the bundles in `dir` whose experiment `stale` says.
fn remove_bundles(dir: &Path, stale: impl Fn(&str) -> bool) -> Result<(), SlurmError> {
    let entries = std::fs::read_dir(dir).map_err(|source| SlurmError::SharedDir { path: dir.to_path_buf(), source })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(bundle_id).is_some_and(&stale) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// The most experiments one ingest transaction takes.
const INGEST_MAX_EXPERIMENTS: usize = 10_000;

/// How much one ingest transaction takes at most.
#[derive(Clone, Copy)]
struct IngestLimit {
    experiments: usize,
    records: usize,
}

/// The runner's side of the shared directory while it runs.
struct Ingest<'a, 'p> {
    study_id: i64,
    options: &'a RunOptions,
    layout: &'a Layout,
    /// Experiments not stored yet.
    waiting: HashMap<&'p str, &'p PlannedExperiment>,
    progress: Progress,
    summary: RunSummary,
    /// From each experiment's end (on its node) to its commit here.
    latencies: Vec<Duration>,
    /// Removes stored bundles and work directories.
    cleaner: Cleaner,
}

/// What to remove once stored.
enum Removal {
    Bundle(PathBuf),
    WorkDir(PathBuf),
}

/// Removes stored experiments' bundles and work directories on a thread
/// of its own: on a shared filesystem a removal is a round trip to the
/// server (about 0.1–0.5 ms each even on a local disk under load), which
/// the ingest loop need not wait for. A bundle not removed yet is stale,
/// never ingested twice: the loop only reads bundles of experiments not
/// stored, and a restarted runner removes those of stored ones first.
struct Cleaner {
    tx: Option<std::sync::mpsc::Sender<Removal>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Cleaner {
    fn start() -> Cleaner {
        let (tx, rx) = std::sync::mpsc::channel::<Removal>();
        let spawned = std::thread::Builder::new().name("lab-bundle-cleaner".into()).spawn(move || {
            for removal in rx {
                remove(removal);
            }
        });
        match spawned {
            Ok(thread) => Cleaner { tx: Some(tx), thread: Some(thread) },
            Err(_) => Cleaner { tx: None, thread: None },
        }
    }

    fn remove(&self, removal: Removal) {
        match &self.tx {
            Some(tx) => {
                if let Err(std::sync::mpsc::SendError(removal)) = tx.send(removal) {
                    remove(removal);
                }
            }
            None => remove(removal),
        }
    }

    /// Wait until everything handed over is removed.
    fn finish(mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn remove(removal: Removal) {
    let (result, path) = match removal {
        Removal::Bundle(p) => (std::fs::remove_file(&p), p),
        Removal::WorkDir(p) => (std::fs::remove_dir_all(&p), p),
    };
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a stored experiment's files");
        }
    }
}

impl Ingest<'_, '_> {
    /// Store every bundle that appeared for a waiting experiment, within
    /// `limit` per transaction, and remove them once stored.
    fn ingest<S: ResultSink + ?Sized>(&mut self, sink: &mut S, limit: IngestLimit) -> Result<(), RunError> {
        let dir = self.layout.bundles();
        let entries = std::fs::read_dir(&dir).map_err(|source| SlurmError::SharedDir { path: dir.clone(), source })?;
        let mut found: Vec<(&str, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(bundle_id) else { continue };
            if let Some((&id, _)) = self.waiting.get_key_value(id) {
                found.push((id, entry.path()));
            }
        }
        let mut batch = Vec::new();
        let mut paths = Vec::new();
        let mut records = 0;
        for (i, (id, path)) in found.iter().enumerate() {
            let planned = self.waiting[id].clone();
            let finished = match ResultBundle::read(path, id) {
                Ok(bundle) => bundle.into_finished(planned),
                Err(e) => failed(planned, format!("{e}"), String::new()),
            };
            records += finished.records.len();
            batch.push(finished);
            paths.push(path.clone());
            let last = i + 1 == found.len();
            if last || batch.len() >= limit.experiments || records >= limit.records {
                self.store(sink, std::mem::take(&mut batch))?;
                for path in paths.drain(..) {
                    self.cleaner.remove(Removal::Bundle(path));
                }
                records = 0;
            }
        }
        Ok(())
    }

    /// Store the experiments of `task`, which left the queue, that have no
    /// bundle, as failed with how the task ended.
    fn lost<S: ResultSink + ?Sized>(&mut self, sink: &mut S, task: TaskId, ids: &[String]) -> Result<(), RunError> {
        let missing: Vec<&PlannedExperiment> = ids
            .iter()
            .filter_map(|id| self.waiting.get(id.as_str()).copied())
            .filter(|e| !bundle_path(&self.layout.bundles(), &e.id).exists())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let how = match scontrol_show(task) {
            Ok(Some(ended)) => format!("it ended {ended}"),
            Ok(None) => "Slurm no longer knows it (cancelled before it started, or purged)".to_string(),
            Err(e) => format!("scontrol could not say how: {e}"),
        };
        let tail = tail_of_file(&self.layout.task_log(task));
        tracing::warn!(%task, experiments = missing.len(), how = %how, "array task lost");
        let batch: Vec<FinishedExperiment> = missing
            .into_iter()
            .map(|e| {
                let error = format!(
                    "Slurm task {task} ended without a result for this experiment: {how}; its log: {}",
                    self.layout.task_log(task).display()
                );
                failed(e.clone(), error, tail.clone())
            })
            .collect();
        self.store(sink, batch)
    }

    /// One insert; count, clean up, draw.
    fn store<S: ResultSink + ?Sized>(&mut self, sink: &mut S, batch: Vec<FinishedExperiment>) -> Result<(), RunError> {
        if batch.is_empty() {
            return Ok(());
        }
        sink.insert_experiments(self.study_id, &batch).map_err(|e| RunError::Sink {
            doing: format!("storing {} experiments from result bundles", batch.len()),
            source: Box::new(e),
        })?;
        let now = unix_now();
        for f in &batch {
            self.waiting.remove(f.planned.id.as_str());
            self.summary.ran += 1;
            match f.status {
                ExperimentStatus::Ok => self.summary.ok += 1,
                ExperimentStatus::Failed => self.summary.failed += 1,
                ExperimentStatus::TimedOut => self.summary.timed_out += 1,
            }
            let ok = matches!(f.status, ExperimentStatus::Ok);
            if ok && !self.options.keep_work_dirs {
                self.cleaner.remove(Removal::WorkDir(self.layout.work().join(&f.planned.id)));
            }
            self.latencies.push(Duration::try_from_secs_f64(now - f.ended).unwrap_or(Duration::ZERO));
            let took = Duration::try_from_secs_f64(f.ended - f.started).unwrap_or(Duration::ZERO);
            self.progress.finished(&f.planned, !ok, took);
        }
        Ok(())
    }
}

/// A failed experiment that left no bundle (or a bad one).
fn failed(planned: PlannedExperiment, error: String, stderr_tail: String) -> FinishedExperiment {
    let now = unix_now();
    FinishedExperiment {
        planned,
        status: ExperimentStatus::Failed,
        exit_code: None,
        error: Some(error),
        stderr_tail,
        started: now,
        ended: now,
        host: String::new(),
        braid_version: BRAID_VERSION.to_string(),
        git_commit: GIT_COMMIT.to_string(),
        records: Vec::new(),
    }
}

fn sink_error<E: std::error::Error + Send + Sync + 'static>(doing: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Sink { doing: doing.to_string(), source: Box::new(e) }
}
