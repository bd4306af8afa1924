//! Stopping a run from outside (issue 21): Ctrl-C or SIGTERM to
//! `braid lab run`, or whatever reason a library user has.
//!
//! The runner installs no signal handlers: a library must not take over a
//! process's signals behind its user's back. The caller puts an
//! [`Interrupt`] in [`RunOptions::interrupt`](super::RunOptions::interrupt)
//! and [requests](Interrupt::request) it from wherever it learns that the
//! run must stop (the CLI: from its SIGINT and SIGTERM handler).
//!
//! On the first request the local executor starts nothing more, takes
//! back what is queued, and ends the running experiments the way it ends
//! one at its deadline: SIGTERM to the process group of each worker and
//! of each command template's program, SIGKILL
//! [`KILL_GRACE`](super::KILL_GRACE) later (the same grace a command
//! template gives its own program at its deadline). A second request
//! kills at once. Then it kills what the experiments left outside their
//! groups, and tears down the emulator testbeds whose owners died (a
//! killed worker cannot tear down its own). The experiments it stopped
//! are not stored (neither ok nor failed), so running the study again
//! runs them; those that finished before the request are stored as usual.
//!
//! The running experiments' processes are found the way a new run finds
//! what a killed runner's experiments left running: by the records file
//! their environment names (`BRAID_LAB_RECORDS`), which everything an
//! experiment starts inherits. The runner does not know a command
//! template's pid (the template spawns its program itself), and a scan
//! also finds a worker that was just being spawned when the request came:
//! the scan is repeated until every stopped experiment's thread returned.
//!
//! An in-process template that is not a command template runs on a thread
//! that cannot be killed: the runner stops waiting for it [`STOP_WAIT`]
//! after the SIGKILL and leaves it running in the background, as it does
//! for one that ignores its deadline (testbeds it built belong to this
//! process: they are reclaimed by the next run, once this process is
//! gone).

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::logs::RECORDS_FILE;
use super::orphans::{canonical_records, kill_orphans, scan};

/// How long after the SIGKILL the runner still waits for the stopped
/// experiments' threads to return (a worker's or a command template's
/// returns within milliseconds of its process dying).
pub const STOP_WAIT: Duration = Duration::from_secs(1);

/// How often a running study looks whether it was interrupted, and how
/// often the teardown looks for processes of the stopped experiments.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// A request to stop a run, shared between the run and whoever may stop
/// it (clones share the request).
///
/// ```
/// use braid_lab::runner::Interrupt;
/// let interrupt = Interrupt::new();
/// let handle = interrupt.clone();
/// assert!(!interrupt.is_requested());
/// handle.request(); // e.g. from a signal-handling thread
/// assert!(interrupt.is_requested() && !interrupt.is_urgent());
/// handle.request(); // asked twice: no more grace
/// assert!(interrupt.is_urgent());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    requests: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Not requested yet.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Ask the run to stop; returns how many times it was asked so far.
    /// The first request stops the running experiments with SIGTERM and a
    /// grace, any later one with SIGKILL at once. Cheap and lock-free:
    /// callable from a signal-handling thread.
    pub fn request(&self) -> usize {
        self.requests.fetch_add(1, Ordering::SeqCst).saturating_add(1)
    }

    /// Whether the run was asked to stop.
    pub fn is_requested(&self) -> bool {
        self.requests.load(Ordering::SeqCst) > 0
    }

    /// Whether it was asked more than once: kill without grace.
    pub fn is_urgent(&self) -> bool {
        self.requests.load(Ordering::SeqCst) > 1
    }
}

/// Signals the processes of the experiments being stopped: those whose
/// environment names one of their records files, and the process groups
/// they are in.
pub(crate) struct Stopper {
    /// The records files of the stopped experiments, as the runner names
    /// them.
    files: Vec<PathBuf>,
    /// Those, and the forms a process may hold: absolute, and canonical
    /// (looked up again on every scan: a work directory may not exist
    /// yet when the request comes).
    records: HashSet<OsString>,
    /// Groups (negative) and processes sent SIGTERM already: a program
    /// that traps it to tear down gets it once, not on every scan.
    terminated: HashSet<libc::pid_t>,
    /// This process's group, never signalled (a process that is in it
    /// would take the runner down with it).
    own_group: libc::pid_t,
}

impl Stopper {
    /// A stopper for the experiments with these work directories.
    pub fn new(work_dirs: impl IntoIterator<Item = PathBuf>) -> Stopper {
        let files: Vec<PathBuf> = work_dirs.into_iter().map(|dir| dir.join(RECORDS_FILE)).collect();
        // SAFETY: getpgrp cannot fail and has no memory effects.
        let own_group = unsafe { libc::getpgrp() };
        let mut stopper = Stopper { files, records: HashSet::new(), terminated: HashSet::new(), own_group };
        stopper.refresh();
        stopper
    }

    /// Add the forms of the records files that exist by now.
    fn refresh(&mut self) {
        for file in &self.files {
            if let Ok(absolute) = std::path::absolute(file) {
                self.records.insert(absolute.into_os_string());
            }
            self.records.insert(canonical_records(file).into_os_string());
            self.records.insert(file.clone().into_os_string());
        }
    }

    /// SIGTERM every process of the experiments, and its group, that has
    /// not had it yet; returns how many processes were found.
    pub fn terminate(&mut self) -> usize {
        self.signal(libc::SIGTERM)
    }

    /// SIGKILL every process of the experiments and its group (on every
    /// call: a process may have forked since the last scan).
    pub fn kill(&mut self) -> usize {
        self.signal(libc::SIGKILL)
    }

    /// Kill, until a scan finds none, whatever of the experiments is left
    /// (what left their process groups); returns how many were killed.
    pub fn kill_leftovers(&mut self) -> usize {
        self.refresh();
        kill_orphans(Path::new("/proc"), &self.records)
    }

    fn signal(&mut self, signal: libc::c_int) -> usize {
        self.refresh();
        let found = scan(Path::new("/proc"), &self.records);
        for &pid in &found {
            // SAFETY: getpgid has no memory effects; a pid that is gone
            // gives -1 (ESRCH).
            let group = unsafe { libc::getpgid(pid) };
            // The whole group (a worker's, a command's program's), unless
            // it is ours: then just the process.
            let target = if group > 1 && group != self.own_group { -group } else { pid };
            if signal == libc::SIGTERM && !self.terminated.insert(target) {
                continue;
            }
            // SAFETY: kill has no memory effects; `target` names one
            // process (> 0) or one group other than ours (< -1).
            unsafe {
                libc::kill(target, signal);
            }
        }
        found.len()
    }

    #[cfg(test)]
    fn records(&self) -> &HashSet<OsString> {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RECORDS_ENV;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    #[test]
    fn requests_count_and_clones_share_them() {
        let a = Interrupt::new();
        let b = a.clone();
        assert!(!a.is_requested() && !a.is_urgent());
        assert_eq!(b.request(), 1);
        assert!(a.is_requested() && !a.is_urgent());
        assert_eq!(a.request(), 2);
        assert!(b.is_urgent());
    }

    #[test]
    fn both_forms_of_a_records_path_are_looked_for() {
        let dir = std::env::temp_dir().join(format!("braid-lab-stopper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let relative = Path::new("nonexistent-relative").join("e1");
        let s = Stopper::new([dir.clone(), relative.clone()]);
        assert!(s.records().contains(dir.join(RECORDS_FILE).as_os_str()));
        assert!(s.records().contains(canonical_records(&dir.join(RECORDS_FILE)).as_os_str()));
        assert!(s.records().contains(relative.join(RECORDS_FILE).as_os_str()));
        let absolute = std::env::current_dir().unwrap().join(&relative).join(RECORDS_FILE);
        assert!(s.records().contains(absolute.as_os_str()));
        // A work directory made after the request: its canonical form
        // (through a link here) is looked for from the next scan on.
        let late = dir.join("late");
        std::os::unix::fs::symlink(&dir, &late).unwrap();
        let mut s2 = Stopper::new([late.join("e2")]);
        let canonical = std::fs::canonicalize(&dir).unwrap().join("e2").join(RECORDS_FILE);
        assert!(!s2.records().contains(canonical.as_os_str()));
        std::fs::create_dir_all(dir.join("e2")).unwrap();
        s2.refresh();
        assert!(s2.records().contains(canonical.as_os_str()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Starts `sh -c SCRIPT` in a group of its own with the records
    /// variable set, and waits until it has exec'd (until then /proc shows
    /// this process's environment).
    fn spawn(script: &str, records: &Path) -> std::process::Child {
        let child = Command::new("sh")
            .args(["-c", script])
            .env(RECORDS_ENV, records)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let environ = format!("/proc/{}/environ", child.id());
        let began = Instant::now();
        while !std::fs::read(&environ).is_ok_and(|e| e.windows(RECORDS_ENV.len()).any(|w| w == RECORDS_ENV.as_bytes()))
        {
            assert!(began.elapsed() < Duration::from_secs(10), "the child never exec'd");
            std::thread::sleep(Duration::from_millis(1));
        }
        child
    }

    fn wait(child: &mut std::process::Child) -> std::process::ExitStatus {
        let began = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if began.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!("process {} survived", child.id());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn sigterm_goes_once_to_the_group_and_sigkill_ends_what_traps_it() {
        let tag = std::env::temp_dir().join(format!("braid-lab-stop-{}", std::process::id()));
        let (polite, stubborn, other) = (tag.join("polite"), tag.join("stubborn"), tag.join("other"));
        let mut polite_child = spawn("sleep 30", &polite.join(RECORDS_FILE));
        // Traps SIGTERM and counts it: it must get exactly one.
        let count = tag.with_extension("terms");
        let ready = tag.with_extension("trapped");
        let _ = std::fs::remove_file(&count);
        let _ = std::fs::remove_file(&ready);
        let script = format!(
            "trap 'echo t >> {}' TERM; touch {}; while :; do sleep 0.05; done",
            count.display(),
            ready.display()
        );
        let mut stubborn_child = spawn(&script, &stubborn.join(RECORDS_FILE));
        let mut other_child = spawn("sleep 30", &other.join(RECORDS_FILE));
        // A SIGTERM before the shell has installed its trap would end it
        // (a loaded machine can take that long): wait for the trap.
        let began = Instant::now();
        while !ready.exists() {
            assert!(began.elapsed() < Duration::from_secs(10), "the trap was never installed");
            std::thread::sleep(Duration::from_millis(1));
        }

        let mut stopper = Stopper::new([polite, stubborn]);
        assert!(stopper.terminate() >= 2, "both experiments' processes are found");
        assert_eq!(wait(&mut polite_child).signal(), Some(libc::SIGTERM));
        std::thread::sleep(Duration::from_millis(200));
        stopper.terminate();
        std::thread::sleep(Duration::from_millis(200));
        assert!(stubborn_child.try_wait().unwrap().is_none(), "it traps SIGTERM");
        let terms = std::fs::read_to_string(&count).unwrap_or_default();
        assert_eq!(terms.lines().count(), 1, "SIGTERM is sent once per process: {terms:?}");
        stopper.kill();
        assert_eq!(wait(&mut stubborn_child).signal(), Some(libc::SIGKILL));
        assert!(other_child.try_wait().unwrap().is_none(), "another experiment's process was signalled");
        other_child.kill().unwrap();
        other_child.wait().unwrap();
        let _ = std::fs::remove_file(&count);
        let _ = std::fs::remove_file(&ready);
    }
}
