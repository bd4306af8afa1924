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

/// Run the web interface until interrupted.
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
    let config = ServeConfig { db: db.clone(), listen: a.listen, token: a.token, run_options: options.clone() };
    let auth = config.auth().map_err(|e| anyhow::anyhow!("{e}"))?;
    let app = App::new(&db, auth.clone(), options);
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
        tokio::select! {
            r = web::serve(listener, app, std::future::pending()) => r.context("serving")?,
            _ = tokio::signal::ctrl_c() => eprintln!("braid lab serve: interrupted; studies still running resume with `braid lab run`"),
        }
        anyhow::Ok(())
    })?;
    Ok(Outcome::Success)
}
