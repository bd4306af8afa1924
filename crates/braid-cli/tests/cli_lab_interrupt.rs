//! `braid lab run` stopped by SIGTERM or Ctrl-C (SIGINT) (issue 21): it
//! ends the running experiments' programs and everything they started,
//! stores what finished, says on one line that it was interrupted and that
//! running the same command again resumes, and exits with 128 + the
//! signal's number. Running again completes only the missing experiments.
//! The same holds for `braid rules learn` and `braid lab serve`, and a
//! `braid lab worker` (what the runner SIGTERMs) stops within the runner's
//! grace with exit code 143.

mod cli_support;
mod emu_support;

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
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
        Runner::spawn(
            &["lab", "run", study.to_str().unwrap(), "--db", db.to_str().unwrap(), "--jobs", "2", "--json"],
            dir,
        )
    }

    /// `braid args...` in a process group of its own (as the runner starts
    /// a worker), stderr piped; `dir`: where its experiments' records lie.
    fn spawn(args: &[&str], dir: &Path) -> Runner {
        let child = braid()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn braid");
        Runner { child, dir: dir.to_path_buf() }
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
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
            assert!(Instant::now() < until, "braid did not exit within {limit:?} of the signal");
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

/// Every file named `name` under `dir`.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            found.extend(files_named(&path, name));
        } else if e.file_name() == name {
            found.push(path);
        }
    }
    found
}

/// A worker spec for a sim-transfer that runs for tens of seconds: the
/// spec of a tiny one that `braid lab run --keep-work-dirs` ran, with
/// 20 GB to transfer and a deadline two minutes away.
fn long_worker_spec(dir: &Path) -> PathBuf {
    let study = dir.join("long.toml");
    std::fs::write(
        &study,
        "name = \"long\"\ntemplate = \"sim-transfer\"\n[configuration]\nbytes = [\"10KB\"]\ntime_limit = [\"3600s\"]\n\
         [environment]\nlink = [\"rtt=10ms,rate=1gbit\"]\n",
    )
    .unwrap();
    let db = dir.join("long.db");
    let out = run(
        &["lab", "run", study.to_str().unwrap(), "--db", db.to_str().unwrap(), "--keep-work-dirs", "--json"],
        Duration::from_secs(120),
    );
    assert!(out.success(), "{out:?}");
    let specs = files_named(dir, "spec.json");
    assert_eq!(specs.len(), 1, "the worker's spec was kept: {specs:?}");
    let mut spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&specs[0]).unwrap()).unwrap();
    spec["experiment"]["params"]["bytes"] = serde_json::json!({"type": "size", "value": 20_000_000_000u64});
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    spec["deadline_unix"] = serde_json::json!(now + 120.0);
    std::fs::write(&specs[0], spec.to_string()).unwrap();
    specs[0].clone()
}

/// The runner SIGTERMs a worker and SIGKILLs it 2 s later: a worker whose
/// template does not poll its context (sim-transfer runs to its end)
/// still exits, with 143, within those 2 s.
#[test]
fn a_worker_exits_143_within_the_grace_on_sigterm() {
    let dir = TempDir::new("lab-worker-term");
    let spec = long_worker_spec(&dir.0);
    let mut worker = Runner::spawn(&["lab", "worker", spec.to_str().unwrap()], &dir.0);
    std::thread::sleep(Duration::from_secs(1));
    assert!(worker.is_running(), "the worker ended before the signal: make its experiment longer");
    worker.signal(libc::SIGTERM);
    let began = Instant::now();
    let (code, stderr) = worker.finish(Duration::from_secs(5));
    let took = began.elapsed();
    assert_eq!(code, Some(143), "stderr:\n{stderr}");
    assert!(took < Duration::from_secs(2), "the worker took {took:?} after SIGTERM");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_none_left(&dir.0);
}

/// `braid rules learn` (as root: its experiments use the emulator)
/// stopped by SIGTERM while a batch runs: exits 143 with one line, and
/// leaves no experiment process behind.
#[test]
fn sigterm_stops_rules_learn_with_one_line() {
    if !emu_support::ready(&["ip"]) {
        return;
    }
    let _serial = emu_support::serial();
    let dir = TempDir::new("rules-learn-term");
    let study = dir.0.join("tiny.toml");
    std::fs::write(
        &study,
        r#"name = "rules-term"
scenario = "transport"
seed = 3
[experiment]
duration = "3s"
[environments]
training = ["rtt=10ms,rate=50mbit"]
held_out = ["rtt=30ms,rate=20mbit,loss=1%"]
[learn]
population = 4
generations = 2
max_rules = 2
max_window = "1s"
plain = false
random = false
"#,
    )
    .unwrap();
    let db = dir.0.join("lab.db");
    let mut learner = Runner::spawn(&["rules", "learn", study.to_str().unwrap(), "--json", "--db", db.to_str().unwrap()], &dir.0);
    let until = Instant::now() + Duration::from_secs(60);
    while processes_under(&dir.0).is_empty() {
        assert!(learner.is_running(), "braid rules learn ended before it was interrupted");
        assert!(Instant::now() < until, "no experiment ever started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    learner.signal(libc::SIGTERM);
    let (code, stderr) = learner.finish(Duration::from_secs(15));
    assert_eq!(code, Some(143), "stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("interrupted")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("interrupted by SIGTERM"), "{}", lines[0]);
    assert!(lines[0].contains("run the same command again to resume"), "{}", lines[0]);
    assert_none_left(&dir.0);
}

/// `braid lab serve` stops gracefully on SIGTERM and exits 143.
#[test]
fn sigterm_stops_lab_serve() {
    let dir = TempDir::new("lab-serve-term");
    let db = dir.0.join("lab.db");
    let mut server = Runner::spawn(&["lab", "serve", "--listen", "127.0.0.1:0", "--db", db.to_str().unwrap()], &dir.0);
    // Its first line (the URL) comes after the signal handlers are in.
    let stdout = server.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("braid lab serve never said where it listens");
    assert!(line.contains("listening on"), "{line}");
    server.signal(libc::SIGTERM);
    let (code, stderr) = server.finish(Duration::from_secs(10));
    assert_eq!(code, Some(143), "stderr:\n{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
}
