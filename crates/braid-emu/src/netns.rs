//! Network namespaces, addresses and routes, through iproute2's `ip`
//! command (one `ip -batch` per namespace keeps setup to a few processes).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::EmuError;

/// Where `ip netns add` puts the namespaces' bind mounts.
pub const NETNS_DIR: &str = "/run/netns";

/// Run `ip ARGS…`, returning its standard output.
pub fn ip(args: &[&str]) -> Result<String, EmuError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EmuError::NoIpCommand,
            _ => EmuError::io("running ip", e),
        })?;
    if !out.status.success() {
        return Err(EmuError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run `ip -n NETNS -batch -` with `commands`, one per line.
pub fn ip_batch(netns: &str, commands: &[String]) -> Result<(), EmuError> {
    let mut child = Command::new("ip")
        .args(["-n", netns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EmuError::NoIpCommand,
            _ => EmuError::io("running ip", e),
        })?;
    let text = commands.join("\n") + "\n";
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| EmuError::io("writing to ip -batch", e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| EmuError::io("waiting for ip -batch", e))?;
    if !out.status.success() {
        return Err(EmuError::Command {
            command: format!("ip -n {netns} -batch - <<< {:?}", commands.join("; ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Check that `ip` can be run.
pub fn check_ip() -> Result<(), EmuError> {
    ip(&["-V"]).map(drop)
}

/// Create namespace `name`.
pub fn add(name: &str) -> Result<(), EmuError> {
    ip(&["netns", "add", name]).map(drop)
}

/// Every namespace name `ip netns add` created (read from its directory,
/// which is what `ip netns list` shows).
pub fn list() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect()
}

/// Processes whose network namespace is `name`.
pub fn pids(name: &str) -> Vec<u32> {
    ip(&["netns", "pids", name])
        .map(|out| {
            out.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// End every process in namespace `name` (SIGTERM, then SIGKILL after
/// `grace`), skipping this process, then delete the namespace. Deleting
/// a namespace some process still uses would only unlink its name and
/// leave the namespace alive, hence the killing first.
pub fn remove(name: &str, grace: Duration) -> Result<(), EmuError> {
    let me = crate::sys::getpid();
    let victims: Vec<u32> = pids(name).into_iter().filter(|&p| p != me).collect();
    if !victims.is_empty() {
        for &p in &victims {
            crate::sys::kill(p, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            let left: Vec<u32> = pids(name).into_iter().filter(|&p| p != me).collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for p in left {
                    crate::sys::kill(p, libc::SIGKILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    match ip(&["netns", "delete", name]) {
        Ok(_) => Ok(()),
        // Someone else (a concurrent reclaim) deleted it first: fine.
        Err(_) if !std::path::Path::new(NETNS_DIR).join(name).exists() => Ok(()),
        Err(e) => Err(e),
    }
}
