//! Socket-buffer limits for a `data` experiment, so that a 1 Gbit/s ×
//! 320 ms path (40 MB in flight) is not limited by them.
//!
//! Inside each host's namespace `net.ipv4.tcp_rmem`/`tcp_wmem` get a
//! maximum of 4 BDP, at least 16 MiB (these are per network namespace;
//! autotuning grows the buffers only as far as needed). The global
//! `net.core.rmem_max`/`wmem_max`, which cap Braid's UDP socket buffers,
//! are raised to 64 MiB if lower for the experiment, and put back
//! afterwards unless another program changed them meanwhile.

use braid::emu::Testbed;

use crate::template::{ResultExt, TemplateError};

/// What the global UDP buffer limits are raised to.
pub const GLOBAL_BUFFER_MAX: u64 = 64 << 20;

/// Raise a global sysctl under /proc/sys to at least `min`.
pub fn raise_global(path: &'static str, min: u64) -> Result<RaisedLimit, TemplateError> {
    let text = std::fs::read_to_string(path).map_err(|e| TemplateError::io(format!("reading {path}"), e))?;
    let now: u64 = text.trim().parse().unwrap_or(0);
    if now >= min {
        return Ok(RaisedLimit { path, restore: None });
    }
    std::fs::write(path, min.to_string()).map_err(|e| TemplateError::io(format!("raising {path} to {min}"), e))?;
    Ok(RaisedLimit { path, restore: Some((now, min)) })
}

/// A global limit this experiment raised: put back when it ends (even on
/// error), unless something else changed it meanwhile.
#[derive(Debug)]
pub struct RaisedLimit {
    path: &'static str,
    /// (the value before, the value written).
    restore: Option<(u64, u64)>,
}

impl Drop for RaisedLimit {
    fn drop(&mut self) {
        let Some((before, written)) = self.restore else { return };
        let current = std::fs::read_to_string(self.path).ok().and_then(|v| v.trim().parse::<u64>().ok());
        if current == Some(written) {
            if let Err(e) = std::fs::write(self.path, before.to_string()) {
                tracing::warn!("could not restore {} to {before}: {e}", self.path);
            }
        }
    }
}

/// The largest TCP buffer inside the hosts for a path of `bdp` bytes.
pub fn tcp_buffer_max(bdp: u64) -> u64 {
    (4 * bdp).max(16 << 20)
}

/// Braid's receive window and send buffer for a path of `bdp` bytes: 3
/// BDP (the 1-BDP link queue can double the RTT), at least 4 MiB. Not
/// more: whatever sits unsent in a transport's send buffer when DATA's
/// stream ends drains over that transport alone while the other idles
/// (measured at 3 ms with a 16 MiB floor, 45 BDP: DATA's last episode at
/// 2/3 of the path, `data_over_best` 0.88; with 4 MiB 0.99, Braid alone
/// unchanged within the noise).
pub fn braid_window(bdp: u64) -> u64 {
    (3 * bdp).max(4 << 20)
}

/// Set TCP's buffer limits inside both hosts' namespaces.
pub fn tune_tcp(tb: &Testbed, max: u64) -> Result<(), TemplateError> {
    for host in ["a", "b"] {
        for (key, default) in [("net.ipv4.tcp_rmem", 131_072), ("net.ipv4.tcp_wmem", 16_384)] {
            let out = tb
                .command(host, "sysctl")
                .with_context(|| format!("sysctl on {host}"))?
                .args(["-q", "-w", &format!("{key}=4096 {default} {max}")])
                .output()
                .map_err(|e| TemplateError::io(format!("running sysctl on {host}"), e))?;
            crate::ensure!(out.status.success(), "sysctl {key} on {host}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_scale_with_the_bdp_above_their_floors() {
        assert_eq!(tcp_buffer_max(0), 16 << 20);
        assert_eq!(braid_window(0), 4 << 20);
        // 1 Gbit/s × 320 ms = 40 MB.
        assert_eq!(tcp_buffer_max(40_000_000), 160_000_000);
        assert_eq!(braid_window(40_000_000), 120_000_000);
    }
}
