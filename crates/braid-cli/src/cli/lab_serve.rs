//! `braid lab serve`: the lab's web interface ([`braid_lab::web`]) on
//! this machine's database. Flags in, one line with the URL out;
//! everything else is `braid_lab::web`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use braid_lab::runner::{default_work_root, Isolation, RunOptions};
use braid_lab::store::Store;
use braid_lab::web::{self, App, ServeConfig};
use clap::Args;

use super::super::signals;
use super::{DbArg, Outcome};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    db: DbArg,
    /// Address to listen on; any non-loopback address requires a token.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The token every request must carry (default on a non-loopback address: a random one, printed).
    #[arg(long, value_name = "T")]
    token: Option<String>,
    /// Experiments at once for studies launched from the browser (default: one per core).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Run built-in templates on the runner's threads instead of in worker processes.
    #[arg(long)]
    in_process: bool,
}

/// How often the server looks whether it was interrupted.
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How long an interrupted server waits for the studies it runs to stop
/// (the runner's grace and teardown take a few seconds at most).
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Run the web interface until interrupted (SIGINT or SIGTERM: then exit
/// 130 or 143).
pub fn serve(a: ServeArgs) -> anyhow::Result<Outcome> {
    let db: PathBuf = a.db.path();
    // Create and migrate the database, as `braid lab run` would.
    Store::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let mut options = RunOptions::new(default_work_root(&db));
    if let Some(j) = a.jobs {
        anyhow::ensure!(j >= 1, "--jobs: expected at least 1");
        options.jobs = j;
    }
    options.show_progress = false;
    if !a.in_process {
        let program = std::env::current_exe().context("finding the braid binary for worker processes")?;
        options.isolation = Isolation::Worker { program, args: vec!["lab".into(), "worker".into()] };
    }
    // Ctrl-C and SIGTERM stop the server gracefully and interrupt the
    // studies it runs through the runner's Interrupt (issue 21).
    let (interrupt, first_signal) = signals::interrupt_on_signals()?;
    options.interrupt = Some(interrupt.clone());
    let config = ServeConfig { db: db.clone(), listen: a.listen, token: a.token, run_options: options.clone() };
    let auth = config.auth().map_err(|e| anyhow::anyhow!("{e}"))?;
    let app = App::new(&db, auth.clone(), options);
    let launched = app.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("--listen {}: cannot listen", config.listen))?;
        let local = listener.local_addr().context("reading the bound address")?;
        let host = if local.ip().is_unspecified() { "HOST".to_string() } else { local.ip().to_string() };
        let host = if local.is_ipv6() && !local.ip().is_unspecified() { format!("[{host}]") } else { host };
        // Through `emit`, which ignores a closed stdout: a script that read the URL and went
        // away must not take the server down with a panic on EPIPE.
        match auth.token() {
            Some(t) => super::emit(&format!("braid lab serve: listening on {local}; open http://{host}:{}/?token={t}", local.port())),
            None => super::emit(&format!("braid lab serve: listening on {local}; open http://{host}:{}/", local.port())),
        }
        super::emit(&format!("database {}", db.display()));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let requested = interrupt.clone();
        let shutdown = async move {
            while !requested.is_requested() {
                tokio::time::sleep(SIGNAL_POLL).await;
            }
        };
        web::serve(listener, app, shutdown).await.context("serving")?;
        anyhow::Ok(())
    })?;
    // The runtime is gone, but a study's runner thread may still be
    // stopping its experiments: wait for the launcher's runs to end.
    let stopped = launched.launcher().wait_idle(STOP_WAIT);
    eprintln!(
        "braid lab serve: interrupted by {}{}; run a study again with `braid lab run` to resume it",
        first_signal.name(),
        if stopped { "" } else { " (a study was still stopping)" }
    );
    std::process::exit(first_signal.exit_code());
}
