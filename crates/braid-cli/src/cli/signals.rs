//! SIGINT (Ctrl-C) and SIGTERM for the commands that run lab studies
//! (issue 21): `braid lab run`, `braid lab worker`, `braid rules learn`,
//! `braid lab serve`. The lab installs no signal handlers (it is a
//! library); these commands turn the signals into requests of an
//! [`Interrupt`], which the runner (or the worker) watches.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use anyhow::Context;
use braid_lab::runner::{Interrupt, RunError};

/// The first signal that came, shared with the thread that watches for
/// them (0 before any).
#[derive(Debug, Clone, Default)]
pub struct FirstSignal(Arc<AtomicI32>);

impl FirstSignal {
    /// The first signal's number; SIGINT if none came (the interrupt was
    /// requested some other way).
    pub fn number(&self) -> i32 {
        match self.0.load(Ordering::SeqCst) {
            0 => libc::SIGINT,
            n => n,
        }
    }

    /// The exit code of a command that this signal stopped: the shell's
    /// convention, 128 + its number (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(&self) -> i32 {
        128 + self.number()
    }

    /// `SIGINT` or `SIGTERM`.
    pub fn name(&self) -> &'static str {
        if self.number() == libc::SIGTERM {
            "SIGTERM"
        } else {
            "SIGINT"
        }
    }
}

/// Each SIGINT and SIGTERM from now on requests the returned
/// [`Interrupt`] (for the runner: the first stops the running experiments
/// with SIGTERM and a grace, a second kills them at once). The handlers
/// are tokio's, on a thread of their own, since the lab runs without an
/// async runtime; they stay for the rest of the process.
pub fn interrupt_on_signals() -> anyhow::Result<(Interrupt, FirstSignal)> {
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime that watches for SIGINT and SIGTERM")?;
    // Registered before the caller goes on: from here on these signals are
    // caught, no longer fatal.
    let (mut int, mut term) = runtime
        .block_on(async {
            let int = signal(SignalKind::interrupt())?;
            Ok::<_, std::io::Error>((int, signal(SignalKind::terminate())?))
        })
        .context("installing the SIGINT and SIGTERM handlers")?;
    let interrupt = Interrupt::new();
    let first = FirstSignal::default();
    let (requests, which) = (interrupt.clone(), first.clone());
    std::thread::Builder::new()
        .name("lab-signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                loop {
                    let number = tokio::select! {
                        Some(()) = int.recv() => libc::SIGINT,
                        Some(()) = term.recv() => libc::SIGTERM,
                        else => return,
                    };
                    let _ = which.0.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
                    requests.request();
                }
            })
        })
        .context("starting the thread that watches for SIGINT and SIGTERM")?;
    Ok((interrupt, first))
}

/// The one line `braid lab run` prints when a signal stopped it.
pub fn interrupted_line(e: &RunError, signal: &FirstSignal) -> String {
    let name = signal.name();
    match e {
        RunError::Interrupted { stopped, stored } => format!(
            "interrupted by {name}: stopped {stopped} running experiments (not stored), {stored} finished ones stored; \
             run the same command again to resume"
        ),
        _ => format!(
            "interrupted by {name}: the submitted Slurm arrays keep running; run the same command again to adopt them \
             and resume"
        ),
    }
}
