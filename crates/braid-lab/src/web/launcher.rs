//! The server's runner: studies launched from the browser run here, one
//! background thread per study, each calling [`session::run_study`] (the
//! function behind `braid lab run`) with its own writable connection, on
//! the executor the server was started with (the local executor, worker
//! processes or in process, as the CLI's flags choose).
//!
//! Adding values to a study that is running queues the new study text: the
//! current run goes on with its plan, and when it ends the thread runs the
//! study again with the new text. The runner skips what is stored, so
//! only the new experiments run: they join the end of the queue.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::runner::RunOptions;
use crate::session;
use crate::store::Store;
use crate::study::Study;

/// What the server knows of a study it runs (or ran).
#[derive(Debug, Clone, Serialize)]
pub struct RunStatus {
    /// A thread is running it.
    pub active: bool,
    /// Experiments at once.
    pub jobs: usize,
    /// Stored experiments when the run started.
    pub stored_at_start: u64,
    /// Expected seconds per experiment at `jobs` in parallel (the plan's
    /// expected duration over its count): the ETA before any finished.
    pub expected_per_experiment_s: f64,
    /// Seconds since the run started.
    pub elapsed_s: f64,
    /// A newer study text (added values) waits for the current run.
    pub queued_update: bool,
    /// Why the last run stopped early, if it did.
    pub error: Option<String>,
}

/// A study file to run: its text, the path it is parsed at (relative
/// names start from its directory), and the path stored with it (none for
/// a study made in the browser).
#[derive(Debug, Clone)]
struct Source {
    text: String,
    parse_at: PathBuf,
    file_path: Option<PathBuf>,
}

#[derive(Debug)]
struct RunState {
    active: bool,
    started: Instant,
    stored_at_start: u64,
    expected_per_experiment_s: f64,
    pending: Option<Source>,
    error: Option<String>,
}

/// The studies the server runs.
#[derive(Debug, Clone)]
pub struct Launcher {
    db: PathBuf,
    options: RunOptions,
    runs: Arc<Mutex<HashMap<String, RunState>>>,
}

impl Launcher {
    /// A runner writing to the database at `db` with `options`.
    pub fn new(db: &Path, options: RunOptions) -> Launcher {
        let mut options = options;
        options.show_progress = false;
        Launcher { db: db.to_path_buf(), options, runs: Arc::default() }
    }

    /// Experiments at once.
    pub fn jobs(&self) -> usize {
        self.options.jobs.max(1)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, RunState>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `study` (already validated; `text` and `path` are its file's
    /// text and the path relative names start from). If it is running,
    /// the text waits until the current run ends, then runs. `stored` is
    /// how many of its experiments are stored now (for the ETA).
    pub fn launch(&self, study: &Study, stored: u64) {
        let count = crate::plan::Plan::new(study);
        let per_experiment = if count.count() == 0 {
            0.0
        } else {
            count.expected_total(self.jobs()).as_secs_f64() / count.count() as f64
        };
        let source = Source {
            text: study.text.clone(),
            parse_at: study.path.clone().unwrap_or_else(|| super::forms::browser_study_path(&self.db)),
            file_path: study.path.clone(),
        };
        let name = study.name.clone();
        {
            let mut runs = self.lock();
            if let Some(state) = runs.get_mut(&name).filter(|s| s.active) {
                state.pending = Some(source);
                return;
            }
            runs.insert(
                name.clone(),
                RunState {
                    active: true,
                    started: Instant::now(),
                    stored_at_start: stored,
                    expected_per_experiment_s: per_experiment,
                    pending: None,
                    error: None,
                },
            );
        }
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("lab-web-run-{name}"))
            .spawn(move || me.run_thread(name, source))
            .map_err(|e| {
                if let Some(s) = self.lock().get_mut(&study.name) {
                    s.active = false;
                    s.error = Some(format!("starting the runner thread: {e}"));
                }
            })
            .ok();
    }

    fn run_thread(&self, name: String, source: Source) {
        /// Marks the run inactive however the thread ends (a panic too).
        struct Done<'a>(&'a Launcher, &'a str);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                if let Some(s) = self.0.lock().get_mut(self.1) {
                    s.active = false;
                    if std::thread::panicking() {
                        s.error = Some("the runner panicked".into());
                    }
                }
            }
        }
        let _done = Done(self, &name);
        let mut next = Some(source);
        while let Some(source) = next.take() {
            let result = Study::parse(&source.text, &source.parse_at, &crate::template::builtins())
                .map_err(session::SessionError::from)
                .and_then(|mut study| {
                    study.path = source.file_path;
                    let mut store = Store::open(&self.db)?;
                    session::run_study(&study, &mut store, &self.options)
                });
            let mut runs = self.lock();
            let Some(state) = runs.get_mut(&name) else { return };
            state.error = result.err().map(|e| e.to_string());
            next = state.pending.take();
        }
    }

    /// What the server knows of `study`'s run, if it ran one.
    pub fn status(&self, study: &str) -> Option<RunStatus> {
        self.lock().get(study).map(|s| RunStatus {
            active: s.active,
            jobs: self.jobs(),
            stored_at_start: s.stored_at_start,
            expected_per_experiment_s: s.expected_per_experiment_s,
            elapsed_s: s.started.elapsed().as_secs_f64(),
            queued_update: s.pending.is_some(),
            error: s.error.clone(),
        })
    }

    /// Wait until no launched study runs, up to `timeout`; whether that
    /// happened.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if !self.lock().values().any(|s| s.active) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
