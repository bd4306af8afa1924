//! Every study's progress: done / failed / running / ETA, what the studies
//! page shows and its event stream sends.
//!
//! Counts come from the store ([`crate::analysis::status`], as
//! `braid lab status` prints them). Running and ETA come from the runner
//! that runs the study: for a study the server launched, its
//! [`Launcher`](super::Launcher) knows the jobs and start; ETA is the
//! missing experiments times the time per stored experiment so far (before
//! the first one, the plan's expected time per experiment). A study that
//! another process runs (`braid lab run`) shows an ETA from the rate its
//! stored count grew at since the server first saw it, while it grows.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{App, WebError};
use crate::store::Store;

/// A study counts as running elsewhere while its stored count grew within
/// this long.
const ELSEWHERE_IDLE: Duration = Duration::from_secs(30);

/// One study's progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyProgress {
    /// The study.
    pub study: String,
    /// Its template.
    pub template: String,
    /// Experiments planned.
    pub planned: u64,
    /// Stored (ok, failed or timed out).
    pub done: u64,
    /// Stored as ok.
    pub ok: u64,
    /// Stored as failed or timed out.
    pub failed: u64,
    /// Running now (none: unknown, another process runs it).
    pub running: Option<u64>,
    /// Seconds left (none: not running, or no estimate yet).
    pub eta_s: Option<f64>,
    /// Running in this server or, as far as it can tell, elsewhere.
    pub active: bool,
    /// Why the server's last run of it stopped early.
    pub error: Option<String>,
}

/// What the server saw of studies it does not run: when it first saw
/// each, its stored count then, and when that count last changed.
#[derive(Debug, Default)]
pub struct Tracker {
    seen: Mutex<HashMap<String, Seen>>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    first: Instant,
    stored_first: u64,
    changed: Instant,
    stored: u64,
}

impl Tracker {
    /// Note `stored` for `study`; the rate-based ETA if it is growing.
    fn observe(&self, study: &str, stored: u64, missing: u64) -> Option<f64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let s =
            seen.entry(study.to_string()).or_insert(Seen { first: now, stored_first: stored, changed: now, stored });
        if stored != s.stored {
            s.stored = stored;
            s.changed = now;
        }
        let grew = stored.saturating_sub(s.stored_first);
        (grew > 0 && missing > 0 && now.duration_since(s.changed) < ELSEWHERE_IDLE)
            .then(|| missing as f64 * s.changed.duration_since(s.first).as_secs_f64() / grew as f64)
    }
}

/// Every study's progress, by name.
pub fn progress(store: &Store, app: &App) -> Result<Vec<StudyProgress>, WebError> {
    let report = crate::analysis::status(store, None)?;
    Ok(report
        .studies
        .into_iter()
        .map(|r| {
            let done = r.ok + r.failed + r.timed_out;
            let missing = r.missing;
            let run = app.launcher().status(&r.study);
            let (active, running, eta_s) = match &run {
                Some(s) if s.active => {
                    let finished = done.saturating_sub(s.stored_at_start);
                    let per = if finished > 0 { s.elapsed_s / finished as f64 } else { s.expected_per_experiment_s };
                    (true, Some(missing.min(s.jobs as u64)), Some(missing as f64 * per))
                }
                _ => {
                    let eta = app.progress.observe(&r.study, done, missing);
                    (eta.is_some(), None, eta)
                }
            };
            StudyProgress {
                study: r.study,
                template: r.template,
                planned: r.planned,
                done,
                ok: r.ok,
                failed: r.failed + r.timed_out,
                running,
                eta_s,
                active,
                error: run.and_then(|s| s.error),
            }
        })
        .collect())
}
