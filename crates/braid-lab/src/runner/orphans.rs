//! Processes that a killed runner's experiments left behind.
//!
//! A worker dies with its runner (`PR_SET_PDEATHSIG`), but what the
//! worker started (a command template's shell, its programs) lives on as
//! orphans. Left alone, an orphan of experiment `E` keeps writing into
//! `<work_root>/E/records.jsonl`, which by then belongs to the next
//! runner's attempt at `E`: its records would mix with the new ones (a
//! scalar recorded twice, an extra series point). Before a work directory
//! is reused, every process whose environment names its records file
//! (`BRAID_LAB_RECORDS`, inherited by everything an experiment starts) is
//! killed. Matching on that variable rather than on a saved pid cannot hit
//! a stranger that reused the pid.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::record::RECORDS_ENV;

/// Rescans after a kill: a process may fork between the scan that found
/// it and the kill, and its child inherits the variable.
const MAX_SCANS: usize = 8;

/// SIGKILL every process (other than this one) whose `BRAID_LAB_RECORDS`
/// is one of `records`, until a scan of `proc` finds none; returns how many
/// distinct processes were killed. Processes of other users (unreadable
/// environments) and processes that exit meanwhile are passed over.
pub(crate) fn kill_orphans(proc: &Path, records: &HashSet<OsString>) -> usize {
    if records.is_empty() {
        return 0;
    }
    // A process dies some time after SIGKILL is sent: a rescan can still
    // see it (and kill it again, harmlessly), so kills are counted by pid.
    let mut killed = HashSet::new();
    for _ in 0..MAX_SCANS {
        let found = scan(proc, records);
        if found.is_empty() {
            break;
        }
        for pid in found {
            // SAFETY: kill has no memory effects; pid > 0 names one process.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.insert(pid);
            }
        }
    }
    killed.len()
}

/// The pids under `proc` whose environment sets `BRAID_LAB_RECORDS` to one
/// of `records` (also how an interrupted run finds its experiments'
/// processes, see [`super::interrupt`]).
pub(crate) fn scan(proc: &Path, records: &HashSet<OsString>) -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(entries) = std::fs::read_dir(proc) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else { continue };
        if pid <= 1 || pid == me {
            continue;
        }
        // Zombies and kernel threads have empty environments.
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let Some(value) = records_of(&environ) else { continue };
        if records.contains(value) || resolved(&entry.path(), value).is_some_and(|r| records.contains(r.as_os_str())) {
            found.push(pid);
        }
    }
    found
}

/// A records path as the process at `proc_pid` sees it, made canonical:
/// the runner that started it may have named the work root differently
/// (relative, through a link) from the one sweeping now.
fn resolved(proc_pid: &Path, value: &OsStr) -> Option<std::path::PathBuf> {
    let path = Path::new(value);
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::fs::read_link(proc_pid.join("cwd")).ok()?.join(path) };
    Some(canonical_records(&absolute))
}

/// `records` with its directory made canonical (the file itself may not
/// exist); unchanged if the directory does not exist either.
pub(crate) fn canonical_records(records: &Path) -> std::path::PathBuf {
    match (records.parent().and_then(|d| std::fs::canonicalize(d).ok()), records.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => records.to_path_buf(),
    }
}

/// The value of `BRAID_LAB_RECORDS` in a NUL-separated environment block.
fn records_of(environ: &[u8]) -> Option<&OsStr> {
    let key = RECORDS_ENV.as_bytes();
    environ.split(|&b| b == 0).find_map(|var| {
        (var.len() > key.len() && var.starts_with(key) && var[key.len()] == b'=')
            .then(|| OsStr::from_bytes(&var[key.len() + 1..]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn the_variable_is_found_among_others() {
        let block = b"A=1\0BRAID_LAB_RECORDSX=no\0BRAID_LAB_RECORDS=/w/e/records.jsonl\0B=2\0";
        assert_eq!(records_of(block), Some(OsStr::new("/w/e/records.jsonl")));
        assert_eq!(records_of(b"BRAID_LAB_RECORDSX=no\0"), None);
        assert_eq!(records_of(b""), None);
    }

    #[test]
    fn an_orphaned_process_of_a_stale_attempt_is_killed_and_no_other() {
        let tag = format!("/nonexistent/braid-orphans-{}", std::process::id());
        let spawn = |records: &str| {
            let child = Command::new("sleep")
                .arg("30")
                .env(RECORDS_ENV, records)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // Until it has exec'd, the child shows this process's
            // environment in /proc: wait for its own.
            let began = Instant::now();
            let environ = format!("/proc/{}/environ", child.id());
            while !std::fs::read(&environ).is_ok_and(|e| records_of(&e) == Some(OsStr::new(records))) {
                assert!(began.elapsed() < Duration::from_secs(10), "the child never exec'd");
                std::thread::sleep(Duration::from_millis(1));
            }
            child
        };
        let mut stale = spawn(&format!("{tag}/stale/records.jsonl"));
        let mut other = spawn(&format!("{tag}/other/records.jsonl"));
        let wanted: HashSet<OsString> = [OsString::from(format!("{tag}/stale/records.jsonl"))].into();
        assert_eq!(kill_orphans(Path::new("/proc"), &wanted), 1);
        let began = Instant::now();
        let status = loop {
            if let Some(s) = stale.try_wait().unwrap() {
                break s;
            }
            assert!(began.elapsed() < Duration::from_secs(10), "the stale process survived");
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(other.try_wait().unwrap().is_none(), "a process of another experiment was killed");
        other.kill().unwrap();
        other.wait().unwrap();
        assert_eq!(kill_orphans(Path::new("/proc"), &HashSet::new()), 0);
    }
}
