//! State files: which process owns which testbed, and reclaiming what a
//! killed owner left behind.
//!
//! `/run/braid-emu/<name>.json` records the owner's pid and start time, the
//! testbed's namespaces, its control socket and its layout. Creating it
//! claims the name (atomically, by hard-linking a complete temporary file),
//! *before* any namespace exists; teardown deletes the namespaces *before*
//! the file. So a namespace of ours whose file is missing, or whose owner
//! is dead, is a leftover, and any later `up` may reclaim it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::Layout;
use crate::topology::{parse_netns_name, NETNS_PREFIX};
use crate::{netns, sys, EmuError};

/// Directory of state files and control sockets.
pub const STATE_DIR: &str = "/run/braid-emu";

/// How long processes left in a namespace get between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(500);

/// The content of a state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Testbed name.
    pub name: String,
    /// The process that owns the testbed (runs its forwarder).
    pub pid: u32,
    /// Its start time (see [`sys::process_start_time`]), against pid reuse.
    pub start_time: u64,
    /// Namespaces it created or will create.
    pub netns: Vec<String>,
    /// Its control socket, if it has one (testbeds of `braid emu up`).
    pub socket: Option<PathBuf>,
    /// Hosts, addresses and paths, once set up.
    pub layout: Option<Layout>,
}

impl State {
    /// Whether the owner is still running.
    pub fn owner_alive(&self) -> bool {
        sys::process_alive(self.pid, self.start_time)
    }
}

/// The state file of testbed `name`.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}.json"))
}

/// The control socket of testbed `name`.
pub fn socket_path(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}.sock"))
}

/// Read the state of testbed `name`, if the file exists and parses.
pub fn read(name: &str) -> Option<State> {
    let text = std::fs::read_to_string(path(name)).ok()?;
    serde_json::from_str(&text).ok()
}

fn ensure_dir() -> Result<(), EmuError> {
    std::fs::create_dir_all(STATE_DIR).map_err(|e| EmuError::io(format!("creating {STATE_DIR}"), e))
}

fn write_temp(state: &State) -> Result<PathBuf, EmuError> {
    ensure_dir()?;
    let tmp = PathBuf::from(STATE_DIR).join(format!(".{}.{}.tmp", state.name, sys::getpid()));
    let text = serde_json::to_string_pretty(state).expect("state serializes");
    std::fs::write(&tmp, text)
        .map_err(|e| EmuError::io(format!("writing {}", tmp.display()), e))?;
    Ok(tmp)
}

/// Claim testbed name `state.name` for this process by creating its state
/// file. If a testbed of that name exists and its owner runs, fails with
/// [`EmuError::NameInUse`]; if the owner is dead, reclaims it first.
pub fn claim(state: &State) -> Result<(), EmuError> {
    let target = path(&state.name);
    for _ in 0..3 {
        let tmp = write_temp(state)?;
        let linked = std::fs::hard_link(&tmp, &target);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(&state.name) {
                Some(old) if old.owner_alive() => {
                    return Err(EmuError::NameInUse {
                        name: state.name.clone(),
                        pid: old.pid,
                    });
                }
                // Dead owner, or a file being written/removed right now:
                // reclaim and try again.
                _ => reclaim(&state.name)?,
            },
            Err(e) => return Err(EmuError::io(format!("creating {}", target.display()), e)),
        }
    }
    Err(EmuError::Control {
        name: state.name.clone(),
        message: "could not claim the name (another process keeps creating it)".into(),
    })
}

/// Replace the state file of a testbed this process owns.
pub fn update(state: &State) -> Result<(), EmuError> {
    let tmp = write_temp(state)?;
    std::fs::rename(&tmp, path(&state.name))
        .map_err(|e| EmuError::io(format!("updating {}", path(&state.name).display()), e))
}

/// Remove what testbed `name` left: processes in its namespaces, the
/// namespaces, its socket and its state file (in that order). Only for a
/// testbed whose owner is dead, or by the owner itself.
pub fn reclaim(name: &str) -> Result<(), EmuError> {
    let mut first_err = None;
    let mut spaces: Vec<String> = read(name).map(|s| s.netns).unwrap_or_default();
    for ns in netns::list() {
        if parse_netns_name(&ns).is_some_and(|(n, _)| n == name) && !spaces.contains(&ns) {
            spaces.push(ns);
        }
    }
    for ns in &spaces {
        if std::path::Path::new(netns::NETNS_DIR).join(ns).exists() {
            if let Err(e) = netns::remove(ns, GRACE) {
                first_err.get_or_insert(e);
            }
        }
    }
    let _ = std::fs::remove_file(socket_path(name));
    let _ = std::fs::remove_file(PathBuf::from(STATE_DIR).join(format!("{name}.log")));
    let _ = std::fs::remove_file(path(name));
    first_err.map_or(Ok(()), Err)
}

/// Reclaim every testbed whose owner is dead, and every namespace of ours
/// without a state file. Returns the names reclaimed.
pub fn reclaim_dead() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = f.strip_suffix(".json") {
                if !n.starts_with('.') {
                    names.push(n.to_string());
                }
            }
        }
    }
    for ns in netns::list() {
        if ns.starts_with(NETNS_PREFIX) {
            if let Some((n, _)) = parse_netns_name(&ns) {
                if !names.iter().any(|m| m == n) {
                    names.push(n.to_string());
                }
            }
        }
    }
    let mut done = Vec::new();
    for n in names {
        let dead = match read(&n) {
            Some(s) => !s.owner_alive(),
            // No (readable) state file: a leftover, unless an owner is
            // writing it this very moment; check again after a moment.
            None => {
                std::thread::sleep(Duration::from_millis(50));
                read(&n).is_none_or(|s| !s.owner_alive())
            }
        };
        if dead && reclaim(&n).is_ok() {
            done.push(n);
        }
    }
    done
}
