//! The lab's web interface (`braid lab serve`, issue 19 §1; seed 001 ch. 4:
//! MACI's users worked in a browser): server-rendered HTML over the same
//! store, analysis and plot functions as the CLI, so the browser and the
//! terminal show the same numbers and the same SVG figures.
//!
//! Pages ([`pages`]): the studies with live progress (server-sent events,
//! [`sse`]), a study (parameters, value lists, the experiment table, adding
//! values), its analysis (box plot, best configuration per environment,
//! Pareto front, CSV/JSON export of what is shown), an experiment
//! (parameters, scalars, warnings, time series) and the new-study form
//! ([`forms`]) whose studies run in the server's runner ([`launcher`]). A
//! JSON API ([`api`]) serves the same data.
//!
//! Security ([`auth`]): the server listens on loopback unless told
//! otherwise; on any other address it requires a token on every request
//! (a cookie set by a `?token=` login, or a header), and every request that
//! changes something needs the token in a header and a JSON body, which a
//! cross-site form cannot send. URLs name studies and experiments only:
//! nothing on disk but the database is reachable.
//!
//! The store is synchronous (SQLite): every handler opens its own
//! read-only connection on a blocking thread; the runner threads hold the
//! only writer.

pub mod api;
pub mod auth;
mod error;
mod figure;
pub mod forms;
mod html;
pub mod launcher;
pub mod pages;
pub mod progress;
mod router;
pub mod sse;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use self::auth::{generate_token, Auth};
pub use self::error::WebError;
pub use self::launcher::Launcher;
pub use self::router::router;

use crate::runner::RunOptions;
use crate::store::Store;

/// What `braid lab serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The results database (created if missing).
    pub db: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The token every request must carry (`None`: only allowed on a
    /// loopback address; [`ServeConfig::auth`] generates one otherwise).
    pub token: Option<String>,
    /// How launched studies run (jobs, isolation, work root): the CLI's
    /// choice for `braid lab run`.
    pub run_options: RunOptions,
}

impl ServeConfig {
    /// The authentication policy: the given token; on a non-loopback
    /// address without one, a fresh random token (the caller prints it).
    pub fn auth(&self) -> Result<Auth, WebError> {
        match (&self.token, self.listen.ip().is_loopback()) {
            (Some(t), _) => Auth::with_token(t),
            (None, true) => Ok(Auth::open()),
            (None, false) => Auth::with_token(&generate_token()?),
        }
    }
}

/// Everything a handler needs: the database's path, the token policy and
/// the runner of launched studies.
#[derive(Debug)]
pub struct App {
    db: PathBuf,
    auth: Auth,
    launcher: Launcher,
    progress: progress::Tracker,
}

impl App {
    /// An app over the database at `db` (which must exist and carry the
    /// lab's schema: open it once with [`Store::open`] first).
    pub fn new(db: &Path, auth: Auth, run_options: RunOptions) -> Arc<App> {
        Arc::new(App {
            db: db.to_path_buf(),
            auth,
            launcher: Launcher::new(db, run_options),
            progress: progress::Tracker::default(),
        })
    }

    /// The database's path.
    pub fn db(&self) -> &Path {
        &self.db
    }

    /// The token policy.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The runner of studies launched from the browser.
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// A read-only connection to the database.
    pub(crate) fn read(&self) -> Result<Store, WebError> {
        Ok(Store::open_read_only(&self.db)?)
    }
}

/// Run `f` with a read-only store on a blocking thread.
pub(crate) async fn with_store<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&Store, &App) -> Result<T, WebError> + Send + 'static,
) -> Result<T, WebError> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || {
        let store = app.read()?;
        f(&store, &app)
    })
    .await
    .map_err(|e| WebError::Internal(format!("a request's worker thread failed: {e}")))?
}

/// Serve `app` on `listener` until the process ends (or `shutdown`
/// resolves).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app)).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests;
