//! `braid lab run` stopped by SIGTERM or Ctrl-C (SIGINT) (issue 21): it
//! ends the running experiments' programs and everything they started,
//! stores what finished, says on one line that it was interrupted and that
//! running the same command again resumes, and exits with 128 + the
//! signal's number. Running again completes only the missing experiments.

mod cli_support;

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cli_support::{braid, last_json, run, TempDir};

/// A command template: `x >= 2` hangs while `hold` exists, in a program
/// that starts a child of its own, after leaving `started-X` beside the
/// study (`x == 2` traps SIGTERM and leaves `started-term`; `x == 3`
/// ignores it, so only the runner's SIGKILL ends it); the others record
/// `x` at once.
fn write_study(dir: &Path) -> PathBuf {
    let (hold, started) = (dir.join("hold"), dir.join("started-"));
    let template = format!(
        r#"
name = "nap"
command = ["sh", "-c", '''
if [ {{{{x}}}} -ge 2 ] && [ -e "{hold}" ]; then
  if [ {{{{x}}}} -eq 2 ]; then trap 'touch "{started}term"; exit 0' TERM; fi
  if [ {{{{x}}}} -eq 3 ]; then trap '' TERM; fi
  sleep 60 &
  touch "{started}{{{{x}}}}"
  wait
fi
echo '{{"metric":"x","value":{{{{x}}}}}}' >> "$BRAID_LAB_RECORDS"
''']
expected_duration = "50ms"
[params.x]
type = "int"
default = 0
role = "configuration"
"#,
        hold = hold.display(),
        started = started.display()
    );
    std::fs::write(dir.join("nap.toml"), template).unwrap();
    let study = dir.join("naps.toml");
    std::fs::write(&study, "name = \"naps\"\ntemplate = \"nap.toml\"\n[configuration]\nx = [0, 1, 2, 3, 4, 5]\n")
        .unwrap();
    std::fs::write(&hold, "").unwrap();
    study
}

/// The processes whose `BRAID_LAB_RECORDS` lies under `dir`: the
/// experiments' programs and what they started.
fn processes_under(dir: &Path) -> Vec<i32> {
    let prefix = [b"BRAID_LAB_RECORDS=".as_slice(), dir.as_os_str().as_bytes()].concat();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var.starts_with(&prefix)))
        })
        .collect()
}

/// A running `braid lab run`; killed, with whatever its experiments left,
/// when dropped (also when the test fails).
struct Runner {
    child: Child,
    dir: PathBuf,
}

impl Runner {
    fn start(study: &Path, db: &Path, dir: &Path) -> Runner {
        let child = braid()
            .args(["lab", "run", study.to_str().unwrap(), "--db", db.to_str().unwrap(), "--jobs", "2", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn braid lab run");
        Runner { child, dir: dir.to_path_buf() }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory effects; the child is not reaped yet,
        // so its pid is its own.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// Its exit code and stderr, waiting at most `limit`.
    fn finish(&mut self, limit: Duration) -> (Option<i32>, String) {
        let until = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < until, "braid lab run did not exit within {limit:?} of the signal");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut stderr);
        (status.code(), stderr)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in processes_under(&self.dir) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn wait_started(dir: &Path, runner: &mut Runner) {
    let until = Instant::now() + Duration::from_secs(60);
    while !(dir.join("started-2").exists() && dir.join("started-3").exists()) {
        assert!(runner.child.try_wait().unwrap().is_none(), "braid lab run ended before it was interrupted");
        assert!(Instant::now() < until, "the held experiments never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_none_left(dir: &Path) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let left = processes_under(dir);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "the interrupted run left processes running: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_the_run_cleanly_and_running_again_resumes() {
    let dir = TempDir::new("lab-sigterm");
    let study = write_study(&dir.0);
    let db = dir.0.join("lab.db");
    let mut runner = Runner::start(&study, &db, &dir.0);
    wait_started(&dir.0, &mut runner);
    runner.signal(libc::SIGTERM);
    let (code, stderr) = runner.finish(Duration::from_secs(15));
    assert_eq!(code, Some(143), "stderr:\n{stderr}");
    let line = stderr.lines().find(|l| l.contains("interrupted")).unwrap_or_else(|| panic!("no message:\n{stderr}"));
    assert!(line.contains("interrupted by SIGTERM"), "{line}");
    assert!(line.contains("stopped 2 running experiments"), "{line}");
    assert!(line.contains("2 finished ones stored"), "{line}");
    assert!(line.contains("run the same command again to resume"), "{line}");
    assert!(dir.0.join("started-term").exists(), "the running program never got SIGTERM");
    assert_none_left(&dir.0);

    std::fs::remove_file(dir.0.join("hold")).unwrap();
    let out = run(
        &["lab", "run", study.to_str().unwrap(), "--db", db.to_str().unwrap(), "--json"],
        Duration::from_secs(120),
    );
    assert!(out.success(), "{out:?}");
    let again = last_json(&out);
    let counts = (again["skipped"].as_u64(), again["ran"].as_u64(), again["ok"].as_u64());
    assert_eq!(counts, (Some(2), Some(4), Some(4)), "{again}");
}

#[test]
fn ctrl_c_twice_kills_at_once_and_exits_130() {
    let dir = TempDir::new("lab-sigint");
    let study = write_study(&dir.0);
    let db = dir.0.join("lab.db");
    let mut runner = Runner::start(&study, &db, &dir.0);
    wait_started(&dir.0, &mut runner);
    runner.signal(libc::SIGINT);
    // Apart, so the two are not merged into one pending signal.
    std::thread::sleep(Duration::from_millis(200));
    runner.signal(libc::SIGINT);
    let (code, stderr) = runner.finish(Duration::from_secs(15));
    assert_eq!(code, Some(130), "stderr:\n{stderr}");
    assert!(stderr.contains("interrupted by SIGINT"), "{stderr}");
    assert_none_left(&dir.0);
}
