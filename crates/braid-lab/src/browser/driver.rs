//! The chromedriver process: started in its own process group (so that
//! killing the group also ends the Chromium it launches and Chromium's
//! helper processes), optionally inside a network namespace (`ip netns
//! exec` replaces itself with chromedriver, so the group leader is
//! chromedriver), and killed with its group on drop, also when the caller
//! fails or panics half-way.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::BrowserError;

/// What chromedriver prints once it listens (`--port=0` lets it choose).
const STARTED: &str = "started successfully on port ";

/// A running chromedriver, killed with its process group on drop.
#[derive(Debug)]
pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// Start `chromedriver` (inside `netns` if given) on a port it
    /// chooses, and wait up to `timeout` for it to say which.
    pub fn start(chromedriver: &Path, netns: Option<&str>, timeout: Duration) -> Result<Driver, BrowserError> {
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(chromedriver);
                c
            }
            None => Command::new(chromedriver),
        };
        let mut child = command
            .arg("--port=0")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BrowserError::Start { program: chromedriver.display().to_string(), source: e })?;
        let stdout = child.stdout.take();
        // From here on, `Driver`'s drop kills it whatever happens.
        let mut driver = Driver { child, port: 0 };
        let Some(stdout) = stdout else {
            return Err(BrowserError::Driver("chromedriver's standard output was not captured".into()));
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut sent = false;
            for line in lines.by_ref().map_while(Result::ok) {
                if !sent {
                    if let Some(port) = parse_port(&line) {
                        let _ = tx.send(port);
                        sent = true;
                    }
                }
                // Keep reading: a full pipe would block chromedriver.
            }
        });
        match rx.recv_timeout(timeout) {
            Ok(port) => {
                driver.port = port;
                Ok(driver)
            }
            Err(_) => {
                let status = driver.child.try_wait().ok().flatten();
                Err(BrowserError::Driver(match status {
                    Some(s) => format!("chromedriver exited ({s}) before it listened"),
                    None => format!("chromedriver did not say its port within {timeout:?}"),
                }))
            }
        }
    }

    /// The port it listens on (on 127.0.0.1 of its namespace).
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the process group this module created for
            // chromedriver (pid = pgid); Chromium inherits the group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port in chromedriver's "... started successfully on port N." line.
fn parse_port(line: &str) -> Option<u16> {
    let rest = &line[line.find(STARTED)? + STARTED.len()..];
    rest.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_read_from_chromedriver_s_banner() {
        assert_eq!(parse_port("ChromeDriver was started successfully on port 38751."), Some(38751));
        assert_eq!(parse_port("ChromeDriver was started successfully on port 9515"), Some(9515));
        assert_eq!(parse_port("Starting ChromeDriver 156.0 on port 0"), None);
        assert_eq!(parse_port("ChromeDriver was started successfully on port x."), None);
    }

    #[test]
    fn a_program_that_never_says_its_port_is_an_error_and_is_killed() {
        let dir = std::env::temp_dir().join(format!("braid-lab-driver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("fake-driver");
        std::fs::write(&fake, "#!/bin/sh\necho starting\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let e = Driver::start(&fake, None, Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("did not say its port"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
