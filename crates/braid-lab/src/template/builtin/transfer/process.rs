//! A program a `transfer` experiment runs on an emulated host (a `braid`,
//! `rsync`, `rclone` or `iperf3` end), with what it cost: CPU seconds and
//! peak resident memory, read from `wait4(2)` when it exits, so every tool
//! is charged the same way, whatever it reports about itself. (`ip netns
//! exec` replaces itself with the program, so the process waited for is
//! the program; the usage `wait4` returns includes the children it waited
//! for, such as the connection processes an rsync daemon forks.)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::template::TemplateError;

/// How a program ended and what it used.
#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    /// Exit code; `None` if a signal ended it.
    pub code: Option<i32>,
    /// User plus system CPU time, seconds.
    pub cpu_secs: f64,
    /// Peak resident set size, bytes.
    pub max_rss: u64,
    /// When it ended.
    pub at: Instant,
}

impl Exit {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// A started program: its stdout lines as they come, its exit once it ends.
pub struct Running {
    what: String,
    pid: libc::pid_t,
    exit: Receiver<std::io::Result<Exit>>,
    ended: Option<Exit>,
    lines: Arc<Mutex<Vec<String>>>,
    line_rx: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    /// Start `command` (stdout and stderr captured). `what` names it in
    /// errors ("the braid receiver").
    pub fn start(what: &str, mut command: Command) -> Result<Running, TemplateError> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| TemplateError::io(format!("starting {what}"), e))?;
        let pid = child.id() as libc::pid_t;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (line_tx, line_rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line.clone());
                    let _ = line_tx.send(line);
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(err) = child.stderr.take() {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let mut s = stderr.lock().unwrap_or_else(|e| e.into_inner());
                    // Keep the tail: what explains a failure is at the end.
                    if s.len() > 16 << 10 {
                        let cut = s.len() - (8 << 10);
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
                        s.drain(..cut);
                    }
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        // `Child` is dropped without waiting: the waiter below reaps the
        // process with wait4 to read its resource usage.
        drop(child);
        let (exit_tx, exit) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = exit_tx.send(wait4(pid));
        });
        Ok(Running { what: what.to_string(), pid, exit, ended: None, lines, line_rx, stderr })
    }

    /// Wait up to `timeout` for the next stdout line.
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        self.line_rx.recv_timeout(timeout).ok()
    }

    /// Every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The tail of stderr so far.
    pub fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let start = s.len().saturating_sub(2000);
        let start = (start..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
        s[start..].trim().to_string()
    }

    /// Wait until it exits or `timeout` passes (then kill it and say so).
    pub fn wait(&mut self, timeout: Duration) -> Result<Exit, TemplateError> {
        if let Some(e) = &self.ended {
            return Ok(e.clone());
        }
        let exit = match self.exit.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| TemplateError::io(format!("waiting for {}", self.what), e))?,
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                return Err(TemplateError::Timeout(format!("{} did not finish within {timeout:?}", self.what)));
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(TemplateError::Failed(format!("lost track of {}", self.what)));
            }
        };
        // Give the output readers a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(20));
        self.ended = Some(exit.clone());
        Ok(exit)
    }

    /// How it ended, once it has (also after `wait` timed out and killed it).
    pub fn ended(&self) -> Option<&Exit> {
        self.ended.as_ref()
    }

    /// Ask it to stop (SIGTERM), then wait up to 5 s, then kill it.
    pub fn stop(&mut self) -> Result<Exit, TemplateError> {
        if self.ended.is_none() {
            // SAFETY: kill(2) on a pid this process started and has not
            // reaped yet (the waiter thread reaps it only once it exits).
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
        }
        self.wait(Duration::from_secs(5))
    }

    fn kill(&mut self) {
        if self.ended.is_none() {
            // SAFETY: as in `stop`.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            if let Ok(Ok(e)) = self.exit.recv_timeout(Duration::from_secs(5)) {
                self.ended = Some(e);
            }
        }
    }

    /// `Failed` naming the program, its exit and its stderr's tail.
    pub fn failure(&self, exit: &Exit) -> TemplateError {
        let how = match exit.code {
            Some(c) => format!("exit code {c}"),
            None => "a signal".to_string(),
        };
        TemplateError::Failed(format!("{} ended with {how}: {}", self.what, self.stderr_tail()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait4(pid: libc::pid_t) -> std::io::Result<Exit> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for a child of this process, with valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    Ok(Exit {
        code,
        cpu_secs: secs(usage.ru_utime) + secs(usage.ru_stime),
        // ru_maxrss is in KiB on Linux.
        max_rss: (usage.ru_maxrss.max(0) as u64) * 1024,
        at: Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_charged_its_cpu_and_memory_and_its_output_is_kept() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo one; echo two; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo oops >&2; exit 3"]);
        let mut p = Running::start("the test shell", c).unwrap();
        assert_eq!(p.next_line(Duration::from_secs(5)).as_deref(), Some("one"));
        let exit = p.wait(Duration::from_secs(30)).unwrap();
        assert_eq!(exit.code, Some(3));
        assert!(exit.cpu_secs > 0.0, "{exit:?}");
        assert!(exit.max_rss > 100 << 10, "{exit:?}");
        assert_eq!(p.lines(), ["one", "two"]);
        assert!(p.failure(&exit).to_string().contains("exit code 3: oops"));
    }

    #[test]
    fn a_program_past_its_time_is_killed() {
        let mut c = Command::new("sleep");
        c.arg("30");
        let mut p = Running::start("a sleeper", c).unwrap();
        let e = p.wait(Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("a sleeper did not finish"), "{e}");
        let mut c = Command::new("sleep");
        c.arg("30");
        let mut p = Running::start("a sleeper", c).unwrap();
        let exit = p.stop().unwrap();
        assert_eq!(exit.code, None, "ended by SIGTERM");
    }
}
