//! Where, when and with what code an experiment ran: the host, the Braid
//! version, the git commit the lab was built at, and wall-clock times.

use std::time::{SystemTime, UNIX_EPOCH};

/// The Braid version (the lab crate's, which is the workspace's).
pub const BRAID_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the lab was built at (12 hex digits), or `unknown` when
/// it was built outside a repository. Set by the crate's build script.
pub const GIT_COMMIT: &str = env!("BRAID_GIT_COMMIT");

/// This machine's host name (`unknown` if the system does not say).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call;
    // gethostname writes at most `len` bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if end > 0 {
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Now, in seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_name_matches_the_kernel() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(host_name(), kernel.trim());
    }

    #[test]
    fn commit_is_hex_or_unknown() {
        assert!(
            GIT_COMMIT == "unknown" || (GIT_COMMIT.len() >= 7 && GIT_COMMIT.chars().all(|c| c.is_ascii_hexdigit())),
            "{GIT_COMMIT}"
        );
    }

    #[test]
    fn unix_now_is_after_2024() {
        assert!(unix_now() > 1.7e9);
    }
}
