//! Testbeds that outlive the command that started them (`braid emu up`):
//! the daemon that owns one and the client that talks to it.
//!
//! The daemon owns a [`Testbed`] and serves requests on a unix socket next
//! to its state file, one JSON object per connection, one JSON reply:
//! `{"op":"set","path":"0","spec":"rtt=100ms"}`, `{"op":"stats"}`,
//! `{"op":"layout"}`, `{"op":"down"}`. SIGINT, SIGTERM and SIGHUP tear the
//! testbed down too; so does a panic (the testbed's drop guard).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use braid_link::LinkSpec;
use serde::{Deserialize, Serialize};

use crate::forwarder::Stats;
use crate::layout::Layout;
use crate::state;
use crate::sys::{self, SignalPipe};
use crate::{EmuError, Testbed};

/// How long a client waits for the daemon to answer.
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Set { path: String, spec: String },
    Stats,
    Layout,
    Down,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stats: Option<Stats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layout: Option<Layout>,
}

impl Reply {
    fn ok() -> Reply {
        Reply {
            ok: true,
            error: None,
            stats: None,
            layout: None,
        }
    }
    fn err(e: impl ToString) -> Reply {
        Reply {
            ok: false,
            error: Some(e.to_string()),
            stats: None,
            layout: None,
        }
    }
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A client asked for `down`.
    Down,
    /// A signal (its number) arrived.
    Signal(i32),
    /// The forwarder stopped on its own (a bug or a lost device).
    ForwarderDied,
}

/// Serve `testbed` on its control socket until `down`, a signal or the
/// forwarder's death, then tear it down. `signals` must have been
/// installed before the testbed was built, so that no signal arriving
/// during the build kills the process without cleanup.
pub fn serve(mut testbed: Testbed, signals: &SignalPipe) -> Result<Ended, EmuError> {
    let path = state::socket_path(testbed.name());
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| EmuError::io(format!("binding {}", path.display()), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| EmuError::io("socket setup", e))?;
    testbed.set_socket(path)?;
    let ended = loop {
        let mut fds = [
            sys::pollin(listener.as_raw_fd()),
            sys::pollin(signals.raw()),
        ];
        sys::ppoll(&mut fds, Some(Duration::from_millis(500)))
            .map_err(|e| EmuError::io("poll", e))?;
        if let Some(sig) = signals.take() {
            break Ended::Signal(sig);
        }
        if !testbed.is_running() {
            break Ended::ForwarderDied;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if handle(&mut testbed, stream) {
                    break Ended::Down;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(EmuError::io("accepting a control connection", e)),
        }
    };
    if ended != Ended::Down {
        testbed.down()?;
    }
    Ok(ended)
}

/// Answer one request; true if it was `down` (the testbed is then gone).
fn handle(testbed: &mut Testbed, stream: UnixStream) -> bool {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new(&stream);
    if reader.read_line(&mut line).is_err() {
        return false;
    }
    let (reply, down) = match serde_json::from_str::<Request>(&line) {
        Err(e) => (Reply::err(format!("bad request: {e}")), false),
        Ok(Request::Set { path, spec }) => match spec.parse::<LinkSpec>() {
            Err(e) => (Reply::err(e), false),
            Ok(spec) => match testbed.set_path(&path, &spec) {
                Ok(()) => (Reply::ok(), false),
                Err(e) => (Reply::err(e), false),
            },
        },
        Ok(Request::Stats) => match testbed.stats() {
            Ok(s) => (
                Reply {
                    stats: Some(s),
                    ..Reply::ok()
                },
                false,
            ),
            Err(e) => (Reply::err(e), false),
        },
        Ok(Request::Layout) => (
            Reply {
                layout: Some(testbed.layout().clone()),
                ..Reply::ok()
            },
            false,
        ),
        Ok(Request::Down) => {
            // Tear down before answering: when the client has its answer,
            // nothing of the testbed is left. The testbed is replaced by
            // nothing; `serve` then returns.
            let name = testbed.name().to_string();
            let result = teardown_in_place(testbed);
            let reply = match result {
                Ok(()) => Reply::ok(),
                Err(e) => Reply::err(format!("{name}: {e}")),
            };
            (reply, true)
        }
    };
    let mut text = serde_json::to_string(&reply).expect("reply serializes");
    text.push('\n');
    let _ = (&stream).write_all(text.as_bytes());
    down
}

fn teardown_in_place(testbed: &mut Testbed) -> Result<(), EmuError> {
    testbed.teardown_now()
}

fn request(name: &str, req: &Request) -> Result<Reply, EmuError> {
    let st = state::read(name)
        .filter(|s| s.owner_alive())
        .ok_or_else(|| EmuError::NotRunning(name.to_string()))?;
    let sock = st.socket.ok_or_else(|| EmuError::Control {
        name: name.to_string(),
        message: "this testbed has no control socket (it belongs to a program using the Rust API)"
            .into(),
    })?;
    let stream = UnixStream::connect(&sock)
        .map_err(|e| EmuError::io(format!("connecting to {}", sock.display()), e))?;
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| EmuError::io("socket setup", e))?;
    let mut text = serde_json::to_string(req).expect("request serializes");
    text.push('\n');
    (&stream)
        .write_all(text.as_bytes())
        .map_err(|e| EmuError::io("sending the request", e))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| EmuError::io("reading the reply", e))?;
    let reply: Reply = serde_json::from_str(&line).map_err(|e| EmuError::Control {
        name: name.to_string(),
        message: format!("bad reply {line:?}: {e}"),
    })?;
    if reply.ok {
        Ok(reply)
    } else {
        Err(EmuError::Control {
            name: name.to_string(),
            message: reply.error.unwrap_or_default(),
        })
    }
}

/// Change path `path` (id or name) of running testbed `name`.
pub fn set(name: &str, path: &str, spec: &LinkSpec) -> Result<(), EmuError> {
    request(
        name,
        &Request::Set {
            path: path.to_string(),
            spec: spec.to_string(),
        },
    )
    .map(drop)
}

/// Counters of running testbed `name`.
pub fn stats(name: &str) -> Result<Stats, EmuError> {
    request(name, &Request::Stats)?
        .stats
        .ok_or_else(|| EmuError::Control {
            name: name.to_string(),
            message: "no stats in the reply".into(),
        })
}

/// The layout of running testbed `name` (from its state file).
pub fn layout(name: &str) -> Result<Layout, EmuError> {
    state::read(name)
        .filter(|s| s.owner_alive())
        .and_then(|s| s.layout)
        .ok_or_else(|| EmuError::NotRunning(name.to_string()))
}

/// Tear down testbed `name`: ask its daemon, or, if the daemon is dead or
/// does not answer, kill it and reclaim what it left. Also fine for a
/// testbed whose owner was killed (SIGKILL). Fails with
/// [`EmuError::NotRunning`] if there is nothing of that name.
pub fn down(name: &str) -> Result<(), EmuError> {
    crate::topology::check_name(name)?;
    let st = state::read(name);
    let leftovers = crate::netns::list()
        .iter()
        .any(|ns| crate::topology::parse_netns_name(ns).is_some_and(|(n, _)| n == name));
    match st {
        Some(st) if st.owner_alive() => {
            if st.socket.is_some() && request(name, &Request::Down).is_ok() {
                wait_gone(st.pid, st.start_time, Duration::from_secs(5));
            }
            if st.owner_alive() {
                sys::kill(st.pid, libc::SIGKILL);
                wait_gone(st.pid, st.start_time, Duration::from_secs(5));
            }
            state::reclaim(name)
        }
        Some(_) => state::reclaim(name),
        None if leftovers => state::reclaim(name),
        None => Err(EmuError::NotRunning(name.to_string())),
    }
}

fn wait_gone(pid: u32, start_time: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while sys::process_alive(pid, start_time) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Names of testbeds whose owner runs.
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state::STATE_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .filter(|n| !n.starts_with('.') && state::read(n).is_some_and(|s| s.owner_alive()))
        .collect();
    names.sort();
    names
}
