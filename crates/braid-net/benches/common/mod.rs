//! What the loopback benchmarks share: environment knobs, the loopback
//! address, medians and a time bound on every phase.

#![allow(dead_code)] // each benchmark uses a subset

use std::net::SocketAddr;
use std::time::Duration;

/// Every phase is bounded; a hang is a failure, not a slow result.
pub const LIMIT: Duration = Duration::from_secs(120);

/// A positive integer from the environment variable `name`, else `default`.
pub fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name} must be a positive integer, got {v:?}")),
        Err(_) => default,
    }
}

/// 127.0.0.1, any port.
pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// The median (the upper middle for even lengths).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `f`, or a panic naming `what` once it runs past [`LIMIT`].
pub async fn bounded(what: &str, f: impl std::future::Future<Output = f64>) -> f64 {
    tokio::time::timeout(LIMIT, f).await.unwrap_or_else(|_| panic!("{what} took longer than {LIMIT:?}"))
}
