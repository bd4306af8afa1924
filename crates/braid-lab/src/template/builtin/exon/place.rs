//! Where the two ends of a measurement run: threads in hosts `a` and `b`
//! of an emulator testbed, or plain threads on loopback.
//!
//! Each end runs on its own thread with its own single-threaded tokio
//! runtime, so sockets it opens belong to its host's network namespace.

use std::net::{IpAddr, Ipv4Addr};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use braid_emu::Testbed;

use crate::template::{ResultExt, TemplateError};

/// One end: a testbed host (or none: this process's namespace) and the
/// address to bind there.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    tb: Option<&'a Testbed>,
    host: &'a str,
    /// The address sockets of this end bind to.
    pub addr: IpAddr,
}

/// Both ends of a measurement, plus the clock every timestamp of the run
/// is taken against.
#[derive(Clone, Copy)]
pub struct Ends<'a> {
    /// The sending (or RPC client) end.
    pub a: Place<'a>,
    /// The receiving (or RPC server) end.
    pub b: Place<'a>,
    /// Time zero of the run.
    pub epoch: Instant,
}

impl<'a> Ends<'a> {
    /// Hosts `a` and `b` of `tb`, over path 0.
    pub fn testbed(tb: &'a Testbed) -> Result<Ends<'a>, TemplateError> {
        let p = tb.layout().paths.first().context("the testbed has no path")?;
        Ok(Ends {
            a: Place { tb: Some(tb), host: "a", addr: IpAddr::V4(p.a_addr) },
            b: Place { tb: Some(tb), host: "b", addr: IpAddr::V4(p.b_addr) },
            epoch: Instant::now(),
        })
    }

    /// Both ends in this process, on 127.0.0.1.
    pub fn loopback() -> Ends<'static> {
        let here = Place { tb: None, host: "local", addr: IpAddr::V4(Ipv4Addr::LOCALHOST) };
        Ends { a: here, b: here, epoch: Instant::now() }
    }

    /// Time since the epoch.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

impl Place<'_> {
    /// Runs `f` on a new thread at this end.
    pub fn spawn<T, F>(&self, f: F) -> Result<JoinHandle<T>, TemplateError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self.tb {
            Some(tb) => tb.in_host(self.host, f).with_context(|| format!("starting a thread in host {}", self.host)),
            None => std::thread::Builder::new()
                .name(format!("exon-bench-{}", self.host))
                .spawn(f)
                .context("spawning a thread"),
        }
    }

    /// Runs the future `f` (built on the new thread) on a single-threaded
    /// tokio runtime at this end.
    pub fn spawn_async<T, F, Fut>(&self, f: F) -> Result<JoinHandle<Result<T, TemplateError>>, TemplateError>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, TemplateError>>,
    {
        self.spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| TemplateError::io("starting a runtime", e))?;
            rt.block_on(f())
        })
    }
}

/// Joins a thread that returns a result, turning a panic into an error.
pub fn join<T>(h: JoinHandle<Result<T, TemplateError>>, what: &str) -> Result<T, TemplateError> {
    h.join().map_err(|_| TemplateError::Failed(format!("{what}: thread panicked")))?.with_context(|| what.to_string())
}
