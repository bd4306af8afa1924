//! The local executor's scheduling: the thread pool, exclusive
//! experiments, and storing outcomes in the batches the sink asks for.
//!
//! The calling thread is the only one that touches the sink. Experiments
//! run on the [pool](super::pool)'s `jobs` threads, which take them from a
//! queue in the plan's order and send their outcomes back over a channel.
//! The calling thread loops: take every outcome waiting in the channel
//! (without blocking), give up on in-process experiments stuck past their
//! deadline, store the batch of finished experiments if it is due (see
//! [`Batching`]: at once, or once enough finished or the first waited long
//! enough), queue more experiments while the limit allows, and otherwise
//! sleep until the next outcome or timer.
//!
//! The limit: at most `jobs + max_experiments` experiments started and not
//! yet stored. With [`Batching::IMMEDIATE`] that is `jobs`: a slot is
//! refilled only after the outcome that freed it went to the sink, so a
//! batch holds at most `jobs` experiments and an outcome waits only for
//! the store call in progress. With a group commit, finished experiments
//! wait for their batch while the next ones run; a `kill -9` loses what
//! was not stored yet, and resuming runs it again. Either way, once the
//! sink fails nothing new starts: queued experiments are taken back, the
//! running ones finish and are given to the sink.
//!
//! An exclusive experiment is queued once every started experiment has
//! finished, and nothing is queued beside it.
//!
//! With [`RunOptions::interrupt`] set, the loop wakes at least every
//! [`POLL`] to look at it; once requested, [`stop`] ends the run (see
//! [`super::interrupt`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::execute::{reclaim_testbeds, Job, Outcome};
use super::interrupt::{Interrupt, Stopper, POLL, STOP_WAIT};
use super::pool::{Done, Pool, Task};
use super::progress::Progress;
use super::provenance::{host_name, BRAID_VERSION, GIT_COMMIT};
use super::sink::Batching;
use super::store_api::{ExperimentStatus, FinishedExperiment};
use super::summary::{OverheadStats, RunSummary};
use super::{ResultSink, RunError, RunOptions, TemplateLookup, IN_PROCESS_GRACE, KILL_GRACE};
use crate::plan::PlannedExperiment;
use crate::template::Template;

/// Experiments between queued and stored.
#[derive(Default)]
struct Flight {
    /// Queued, running, or finished and waiting to be stored.
    open: usize,
    /// Queued or running.
    unfinished: usize,
    /// An exclusive experiment is queued or running.
    exclusive: bool,
}

impl Flight {
    /// Whether `experiment` may be queued now, under `limit` open ones.
    fn admits(&self, experiment: &PlannedExperiment, limit: usize) -> bool {
        !self.exclusive && self.open < limit && (!experiment.exclusive || self.unfinished == 0)
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

    let super::pending::Pending { experiments: pending, planned, skipped, retry } =
        super::pending::pending(plan, &stored, options.retry_failed);
    let templates = resolve_templates(&pending, templates)?;
    std::fs::create_dir_all(&options.work_root)
        .map_err(|source| RunError::WorkRoot { path: options.work_root.clone(), source })?;
    sweep_stale(&options.work_root, &pending);
    // Delete old failures only once nothing can stop the run from starting
    // them again.
    let retried =
        if retry { sink.delete_failed(study_id).map_err(sink_error("deleting failed experiments"))? } else { 0 };

    let batching = sink.batching();
    let limit = options.jobs.saturating_add(batching.max_experiments);
    let mut scheduler = Scheduler {
        study_id,
        options,
        host: host_name(),
        progress: Progress::new(&pending, options.jobs, options.show_progress),
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
        overheads: Vec::with_capacity(pending.len()),
        error: None,
        cleaner: None,
    };
    let (tx, rx) = mpsc::channel::<Done>();
    let mut pool = Pool::new(options.jobs, tx);
    let mut flight = Flight::default();
    let mut next = 0;
    let mut batch = Batch::default();
    // How many running experiments an interrupt stopped.
    let mut interrupted = None;
    loop {
        // Everything that finished meanwhile joins the batch.
        while let Ok(done) = rx.try_recv() {
            batch.arrived(done, &mut flight);
        }
        if let Some(interrupt) = options.interrupt.as_ref().filter(|i| i.is_requested()) {
            // What finished before this point is stored (the batch above);
            // what runs now is stopped and not stored.
            interrupted = Some(stop(&mut pool, &rx, &mut flight, &mut scheduler, sink, &mut batch, interrupt));
            break;
        }
        let now = Instant::now();
        for (index, outcome) in pool.give_up_overdue(now) {
            batch.arrived(Done { experiment: pending[index].clone(), outcome }, &mut flight);
        }
        if pool.size() == 0 || scheduler.error.is_some() {
            // Nothing can (no thread) or may (the sink failed) run what is
            // queued.
            for Task { job, .. } in pool.cancel_queued() {
                if pool.size() == 0 {
                    let outcome = Outcome::not_started("cannot start a thread for it".into());
                    batch.arrived(Done { experiment: job.experiment, outcome }, &mut flight);
                } else {
                    flight.cancelled(&job.experiment);
                    scheduler.progress.cancelled();
                }
            }
        }

        let launchable = |flight: &Flight, next: usize, error: bool| {
            next < pending.len() && !error && flight.admits(pending[next], limit)
        };
        let idle = flight.unfinished == 0 && !launchable(&flight, next, scheduler.error.is_some());
        if batch.due(&batching, now, idle) {
            scheduler.store(sink, &mut batch, &mut flight);
        }
        while launchable(&flight, next, scheduler.error.is_some()) {
            let experiment = pending[next];
            flight.open += 1;
            flight.unfinished += 1;
            flight.exclusive = experiment.exclusive;
            scheduler.progress.started();
            let index = next;
            next += 1;
            if pool.size() == 0 {
                let outcome = Outcome::not_started("cannot start a thread for it".into());
                batch.arrived(Done { experiment: experiment.clone(), outcome }, &mut flight);
                continue;
            }
            let job = Job {
                isolation: options.isolation_for(&experiment.template),
                template: templates[experiment.template.as_str()].clone(),
                work_dir: options.work_root.join(&experiment.id),
                experiment: experiment.clone(),
            };
            pool.submit(Task { index, job });
        }
        if flight.unfinished == 0 {
            if batch.is_empty() {
                break;
            }
            // Nothing can join it any more: it is due now.
            continue;
        }
        // Sleep until an outcome arrives, the batch is due, or a running
        // in-process experiment may need giving up on. Experiments that
        // start while this thread sleeps give up no sooner than
        // IN_PROCESS_GRACE from now.
        let now = Instant::now();
        let mut wake = now + IN_PROCESS_GRACE;
        if let Some(at) = batch.due_at(&batching) {
            wake = wake.min(at);
        }
        if let Some(at) = pool.next_give_up() {
            wake = wake.min(at);
        }
        if options.interrupt.is_some() {
            wake = wake.min(now + POLL);
        }
        if let Ok(done) = rx.recv_timeout(wake.saturating_duration_since(now)) {
            batch.arrived(done, &mut flight);
        }
    }
    // Every thread is idle: this only joins them.
    drop(pool);
    scheduler.progress.finish();
    if let Some(cleaner) = scheduler.cleaner.take() {
        cleaner.finish();
    }
    if let Some(e) = scheduler.error {
        return Err(e);
    }
    if let Some(stopped) = interrupted {
        return Err(RunError::Interrupted { stopped, stored: scheduler.summary.ran });
    }
    let mut summary = scheduler.summary;
    summary.elapsed_s = began.elapsed().as_secs_f64();
    summary.overhead = OverheadStats::from_samples(&scheduler.overheads);
    Ok(summary)
}

/// Stop the run (see [`super::interrupt`]): take back what is queued,
/// store the finished experiments' batch, end the running experiments
/// (SIGTERM, SIGKILL after [`KILL_GRACE`], or at once on a second request)
/// and drop their outcomes, kill what they left behind, and reclaim
/// emulator testbeds. Returns how many running experiments were stopped.
/// Takes at most about `KILL_GRACE + STOP_WAIT`, plus the store call.
fn stop<S: ResultSink + ?Sized>(
    pool: &mut Pool,
    rx: &mpsc::Receiver<Done>,
    flight: &mut Flight,
    scheduler: &mut Scheduler<'_>,
    sink: &mut S,
    batch: &mut Batch,
    interrupt: &Interrupt,
) -> usize {
    for Task { job, .. } in pool.cancel_queued() {
        flight.cancelled(&job.experiment);
        scheduler.progress.cancelled();
    }
    let stopped = flight.unfinished;
    let mut stopper = Stopper::new(pool.running_work_dirs());
    let began = Instant::now();
    let mut killed_at = None;
    let signal = |stopper: &mut Stopper, killed_at: &mut Option<Instant>| {
        if killed_at.is_some() || interrupt.is_urgent() || began.elapsed() >= KILL_GRACE {
            killed_at.get_or_insert_with(Instant::now);
            stopper.kill();
        } else {
            stopper.terminate();
        }
    };
    signal(&mut stopper, &mut killed_at);
    // Signalled first, stored next: the grace runs meanwhile.
    scheduler.store(sink, batch, flight);
    while flight.unfinished > 0 && killed_at.is_none_or(|at| at.elapsed() < STOP_WAIT) {
        if let Ok(Done { experiment, .. }) = rx.recv_timeout(POLL) {
            flight.cancelled(&experiment);
            scheduler.progress.cancelled();
        }
        // Again: a worker spawned just as the request came shows its
        // records variable only once it has exec'd.
        signal(&mut stopper, &mut killed_at);
    }
    let abandoned = pool.abandon_running();
    let leftovers = stopper.kill_leftovers();
    reclaim_testbeds();
    tracing::info!(stopped, abandoned, leftovers, "run interrupted");
    stopped
}

impl Flight {
    /// A queued experiment was taken back before it started (or a stopped
    /// one's outcome is dropped).
    fn cancelled(&mut self, experiment: &PlannedExperiment) {
        self.open -= 1;
        self.unfinished -= 1;
        if experiment.exclusive {
            self.exclusive = false;
        }
    }
}

/// Remove what earlier attempts left in the work directories of the
/// experiments about to run (a killed run's, retried failures'): an
/// experiment that never asks for its work directory would leave it there
/// for good. What a killed runner's attempts left running is killed first
/// (see [`super::orphans`]), so that it writes nothing into the new
/// attempts' directories. One directory listing when the root is empty.
fn sweep_stale(root: &Path, pending: &[&PlannedExperiment]) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let mut ids: Option<HashSet<&str>> = None;
    let mut stale = Vec::new();
    for entry in entries.flatten() {
        let ids = ids.get_or_insert_with(|| pending.iter().map(|e| e.id.as_str()).collect());
        if entry.file_name().to_str().is_some_and(|name| ids.contains(name)) {
            stale.push(entry.path());
        }
    }
    let records: HashSet<std::ffi::OsString> =
        stale.iter().map(|dir| super::orphans::canonical_records(&dir.join(super::logs::RECORDS_FILE)).into_os_string()).collect();
    let killed = super::orphans::kill_orphans(Path::new("/proc"), &records);
    if killed > 0 {
        tracing::info!(killed, "killed what a killed runner's experiments left running");
        reclaim_testbeds();
    }
    for dir in stale {
        remove_work_dir(&dir);
    }
}

/// Remove a work directory (gone already is fine; anything else is logged).
fn remove_work_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an experiment's work directory");
        }
    }
}

/// Removes stored successes' work directories on a thread of its own, off
/// the scheduler's path (or in place, if that thread cannot start).
struct Cleaner {
    tx: Option<mpsc::Sender<PathBuf>>,
    thread: Option<JoinHandle<()>>,
}

impl Cleaner {
    fn start() -> Cleaner {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let spawned = std::thread::Builder::new().name("lab-cleaner".into()).spawn(move || {
            for dir in rx {
                remove_work_dir(&dir);
            }
        });
        match spawned {
            Ok(thread) => Cleaner { tx: Some(tx), thread: Some(thread) },
            Err(_) => Cleaner { tx: None, thread: None },
        }
    }

    fn remove(&self, dir: PathBuf) {
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(dir)) = tx.send(dir) {
                    remove_work_dir(&dir);
                }
            }
            None => remove_work_dir(&dir),
        }
    }

    /// Wait until every directory handed over is removed.
    fn finish(mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
    /// For each: when it began, how long its template ran, whether its
    /// work directory exists.
    meta: Vec<(Instant, Duration, bool)>,
    /// Records in `finished`.
    records: usize,
    /// When the first of them arrived.
    since: Option<Instant>,
}

impl Batch {
    /// An outcome came back: it leaves the running ones and joins the
    /// batch.
    fn arrived(&mut self, done: Done, flight: &mut Flight) {
        flight.unfinished -= 1;
        if done.experiment.exclusive {
            flight.exclusive = false;
        }
        let o = done.outcome;
        self.meta.push((o.began, o.busy, o.work_dir_made));
        self.records += o.records.len();
        self.since.get_or_insert_with(Instant::now);
        self.finished.push(FinishedExperiment {
            planned: done.experiment,
            status: o.status,
            exit_code: o.exit_code,
            error: o.error,
            stderr_tail: o.stderr_tail,
            started: o.started,
            ended: o.ended,
            // Filled in when stored (one clone per experiment, not two).
            host: String::new(),
            braid_version: String::new(),
            git_commit: String::new(),
            records: o.records,
        });
    }

    fn is_empty(&self) -> bool {
        self.finished.is_empty()
    }

    /// Whether to store it now: it is full, its first experiment waited
    /// long enough, or nothing can join it (`idle`).
    fn due(&self, batching: &Batching, now: Instant, idle: bool) -> bool {
        !self.is_empty()
            && (idle
                || self.finished.len() >= batching.max_experiments.max(1)
                || self.records >= batching.max_records
                || self.due_at(batching).is_some_and(|at| now >= at))
    }

    /// When it is due at the latest (`None` when empty).
    fn due_at(&self, batching: &Batching) -> Option<Instant> {
        self.since.map(|since| since + batching.max_wait)
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

    fn clear(&mut self) {
        self.finished.clear();
        self.meta.clear();
        self.records = 0;
        self.since = None;
    }
}

/// The scheduler's state besides the pool and the batch.
struct Scheduler<'o> {
    study_id: i64,
    options: &'o RunOptions,
    host: String,
    progress: Progress,
    summary: RunSummary,
    overheads: Vec<Duration>,
    /// The first sink error: nothing more starts, the running ones finish.
    error: Option<RunError>,
    /// Started when the first work directory is to be removed.
    cleaner: Option<Cleaner>,
}

impl Scheduler<'_> {
    /// Store the batch in one insert and empty it; count what was stored
    /// and have the work directories of its successes removed. If the sink
    /// fails, the batch counts as not stored (the store stores all or
    /// none; resume reruns it) and its work directories stay.
    fn store<S: ResultSink + ?Sized>(&mut self, sink: &mut S, batch: &mut Batch, flight: &mut Flight) {
        if batch.is_empty() {
            return;
        }
        for f in &mut batch.finished {
            f.host.clone_from(&self.host);
            BRAID_VERSION.clone_into(&mut f.braid_version);
            GIT_COMMIT.clone_into(&mut f.git_commit);
        }
        let result = sink.insert_experiments(self.study_id, &batch.finished);
        let stored_at = Instant::now();
        flight.open -= batch.finished.len();
        match result {
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(RunError::Sink { doing: batch.describe(), source: Box::new(e) });
                }
                for (f, &(began, _, _)) in batch.finished.iter().zip(&batch.meta) {
                    self.progress.finished(&f.planned, true, stored_at.saturating_duration_since(began));
                }
            }
            Ok(()) => {
                for i in 0..batch.finished.len() {
                    let (began, busy, work_dir_made) = batch.meta[i];
                    let f = &batch.finished[i];
                    self.stored(&f.planned, f.status, work_dir_made, stored_at.saturating_duration_since(began), busy);
                }
            }
        }
        batch.clear();
    }

    /// Count one stored experiment that took `took` from its start to its
    /// batch's commit, `busy` of it in its template.
    fn stored(
        &mut self,
        experiment: &PlannedExperiment,
        status: ExperimentStatus,
        work_dir_made: bool,
        took: Duration,
        busy: Duration,
    ) {
        self.summary.ran += 1;
        match status {
            ExperimentStatus::Ok => self.summary.ok += 1,
            ExperimentStatus::Failed => self.summary.failed += 1,
            ExperimentStatus::TimedOut => self.summary.timed_out += 1,
        }
        let failed = !matches!(status, ExperimentStatus::Ok);
        if !failed && work_dir_made && !self.options.keep_work_dirs {
            self.cleaner.get_or_insert_with(Cleaner::start).remove(self.options.work_root.join(&experiment.id));
        }
        self.overheads.push(took.saturating_sub(busy));
        self.progress.finished(experiment, failed, took);
    }
}

fn sink_error<E: std::error::Error + Send + Sync + 'static>(doing: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Sink { doing: doing.to_string(), source: Box::new(e) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;

    fn planned(id: &str, exclusive: bool) -> PlannedExperiment {
        PlannedExperiment {
            id: id.into(),
            template: "t".into(),
            template_version: 1,
            params: Params::default(),
            repetition: 0,
            seed: 0,
            timeout: Duration::from_secs(1),
            exclusive,
            expected: Duration::from_millis(1),
        }
    }

    fn done(id: &str, records: usize) -> Done {
        let mut outcome = Outcome::not_started("x".into());
        outcome.records = (0..records).map(|_| crate::record::Record::Warn { warn: "w".into() }).collect();
        Done { experiment: planned(id, false), outcome }
    }

    #[test]
    fn exclusive_experiments_wait_for_the_running_ones_and_run_alone() {
        let limit = 4;
        let mut f = Flight::default();
        assert!(f.admits(&planned("x", true), limit));
        f.open = 1;
        f.unfinished = 1;
        assert!(!f.admits(&planned("x", true), limit), "one is running");
        assert!(f.admits(&planned("s", false), limit));
        // Finished, not stored: it may start.
        f.unfinished = 0;
        assert!(f.admits(&planned("x", true), limit));
        f.exclusive = true;
        assert!(!f.admits(&planned("s", false), limit), "nothing beside an exclusive one");
        f = Flight { open: limit, unfinished: 0, exclusive: false };
        assert!(!f.admits(&planned("s", false), limit), "the limit counts what is not stored yet");
    }

    #[test]
    fn a_batch_is_due_when_full_old_or_alone() {
        let now = Instant::now();
        let group = Batching { max_experiments: 3, max_records: 10, max_wait: Duration::from_millis(5) };
        let mut flight = Flight { open: 9, unfinished: 9, exclusive: false };
        let mut b = Batch::default();
        assert!(!b.due(&group, now, true), "an empty batch is never due");
        assert_eq!(b.due_at(&group), None);
        b.arrived(done("a", 1), &mut flight);
        assert_eq!(flight.unfinished, 8);
        let since = b.since.unwrap();
        assert!(!b.due(&group, since, false));
        assert!(b.due(&group, since, true), "nothing can join it");
        assert!(b.due(&group, since + Duration::from_millis(5), false), "waited long enough");
        b.arrived(done("b", 1), &mut flight);
        assert!(!b.due(&group, since, false));
        b.arrived(done("c", 1), &mut flight);
        assert!(b.due(&group, since, false), "full");
        b.clear();
        b.arrived(done("d", 10), &mut flight);
        assert!(b.due(&group, b.since.unwrap(), false), "enough records");
        // Immediate: whatever is there.
        assert!(b.due(&Batching::IMMEDIATE, b.since.unwrap(), false));
    }

    #[test]
    fn stale_work_dirs_of_pending_experiments_are_swept() {
        let root = std::env::temp_dir().join(format!("braid-lab-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for id in ["pending", "kept-failure"] {
            std::fs::create_dir_all(root.join(id)).unwrap();
            std::fs::write(root.join(id).join("records.jsonl"), "").unwrap();
        }
        let p = planned("pending", false);
        sweep_stale(&root, &[&p]);
        assert!(!root.join("pending").exists());
        assert!(root.join("kept-failure").exists(), "not pending: its logs stay");
        sweep_stale(&root.join("missing"), &[&p]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
