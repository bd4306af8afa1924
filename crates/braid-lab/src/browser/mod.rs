//! A headless Chromium driven over WebDriver (W3C WebDriver, through
//! chromedriver and the fantoccini client), for templates and tests that
//! need a real browser: the DASH players of issue 21 and the lab's own web
//! interface (issue 19).
//!
//! [`Browser::start`] starts chromedriver in its own process group (killed
//! with Chromium on drop, also on failure: [`driver`]) and opens a session
//! with Chromium's headless flags (as root it needs `--no-sandbox`). With
//! [`BrowserOptions::netns`] chromedriver, and so Chromium, runs inside that
//! network namespace (an emulated host): the browser's traffic crosses the
//! emulated link, and the WebDriver client reaches chromedriver through a
//! relay from the lab's namespace ([`relay`]). Every WebDriver command has
//! a timeout, so a hung page or browser fails the caller instead of hanging
//! it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), braid_lab::browser::BrowserError> {
//! use braid_lab::browser::{Browser, BrowserOptions, BrowserTools};
//! let tools = BrowserTools::find()?;
//! let browser = Browser::start(&tools, &BrowserOptions::default()).await?;
//! browser.goto("http://127.0.0.1:8080/").await?;
//! let title = browser.execute("return document.title").await?;
//! browser.close().await;
//! # let _ = title; Ok(()) }
//! ```

pub mod driver;
pub mod relay;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use fantoccini::{Client, Locator};

use self::driver::Driver;
use self::relay::Relay;

/// Chromium's flags for a headless run as root in a container or
/// namespace: no sandbox (root), no GPU, no /dev/shm (small in containers),
/// and media may play without a user gesture (the DASH players autoplay).
pub const HEADLESS_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--autoplay-policy=no-user-gesture-required",
    "--window-size=1280,1000",
];

/// Why the browser could not be started or a command failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// A program is not installed.
    #[error("`{program}` is not on PATH (Debian: apt-get install -y chromium chromium-driver)")]
    Missing {
        /// The program looked for.
        program: String,
    },
    /// A program could not be started.
    #[error("starting {program}: {source}")]
    Start {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// chromedriver did not come up.
    #[error("{0}")]
    Driver(String),
    /// The network namespace cannot be used.
    #[error("network namespace {netns}: {source}")]
    Namespace {
        /// Its name.
        netns: String,
        /// The error.
        source: std::io::Error,
    },
    /// The relay into the namespace failed.
    #[error("the WebDriver relay: {0}")]
    Relay(String),
    /// No WebDriver session could be opened.
    #[error("opening a WebDriver session on {url}: {message}")]
    Session {
        /// chromedriver's URL.
        url: String,
        /// The last error.
        message: String,
    },
    /// A command took longer than its timeout.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// The command.
        what: String,
        /// Its timeout.
        after: Duration,
    },
    /// A command failed.
    #[error("{what}: {message}")]
    Command {
        /// The command.
        what: String,
        /// The WebDriver error.
        message: String,
    },
}

/// Where the browser and its driver are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserTools {
    /// The Chromium (or Chrome) binary.
    pub chromium: PathBuf,
    /// chromedriver.
    pub chromedriver: PathBuf,
}

impl BrowserTools {
    /// Both from PATH (`chromium`, `chromium-browser` or `google-chrome`;
    /// `chromedriver`).
    pub fn find() -> Result<BrowserTools, BrowserError> {
        let chromium = which(&["chromium", "chromium-browser", "google-chrome"])
            .ok_or_else(|| BrowserError::Missing { program: "chromium".into() })?;
        let chromedriver = which(&["chromedriver"]).ok_or_else(|| BrowserError::Missing { program: "chromedriver".into() })?;
        Ok(BrowserTools { chromium, chromedriver })
    }
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| std::env::split_paths(&path).map(|d| d.join(n)).find(|p| p.is_file()))
}

/// How to start the browser.
#[derive(Debug, Clone)]
pub struct BrowserOptions {
    /// Run chromedriver and Chromium inside this network namespace
    /// (`ip netns` name, e.g. an emulated host's); `None`: here.
    pub netns: Option<String>,
    /// Chromium's command-line flags.
    pub args: Vec<String>,
    /// How long chromedriver and the session may take to come up.
    pub start_timeout: Duration,
    /// How long one WebDriver command (navigate, script) may take.
    pub command_timeout: Duration,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        BrowserOptions {
            netns: None,
            args: HEADLESS_ARGS.iter().map(|s| s.to_string()).collect(),
            start_timeout: Duration::from_secs(30),
            command_timeout: Duration::from_secs(30),
        }
    }
}

/// A WebDriver session on a headless Chromium. Dropping it kills the
/// browser and its driver; [`close`](Self::close) ends the session first.
pub struct Browser {
    client: Client,
    command_timeout: Duration,
    // Dropped after the client: the relay, then the driver's process group.
    _relay: Option<Relay>,
    _driver: Driver,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("driver", &self._driver).finish_non_exhaustive()
    }
}

impl Browser {
    /// Start chromedriver (in `options.netns` if set) and open a session.
    pub async fn start(tools: &BrowserTools, options: &BrowserOptions) -> Result<Browser, BrowserError> {
        let driver = Driver::start(&tools.chromedriver, options.netns.as_deref(), options.start_timeout)?;
        let relay = match &options.netns {
            Some(ns) => Some(Relay::start(ns, driver.port())?),
            None => None,
        };
        let url = match &relay {
            Some(r) => format!("http://{}", r.addr()),
            None => format!("http://127.0.0.1:{}", driver.port()),
        };
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": tools.chromium, "args": options.args }),
        );
        // fantoccini's HTTP client is built with rustls and the workspace
        // enables two crypto providers: name one (chromedriver is plain
        // HTTP on loopback; an error means one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = fantoccini::ClientBuilder::rustls()
            .map_err(|e| BrowserError::Session { url: url.clone(), message: format!("TLS setup: {e}") })?;
        builder.capabilities(caps);
        let end = Instant::now() + options.start_timeout;
        let client = loop {
            let left = end.saturating_duration_since(Instant::now());
            let attempt = tokio::time::timeout(left.max(Duration::from_millis(1)), builder.connect(&url)).await;
            match attempt {
                Ok(Ok(c)) => break c,
                Ok(Err(e)) if Instant::now() + Duration::from_millis(200) < end => {
                    tracing::debug!(error = %e, "WebDriver session not ready yet");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Err(e)) => return Err(BrowserError::Session { url, message: e.to_string() }),
                Err(_) => {
                    return Err(BrowserError::Timeout {
                        what: format!("opening a WebDriver session on {url}"),
                        after: options.start_timeout,
                    })
                }
            }
        };
        Ok(Browser { client, command_timeout: options.command_timeout, _relay: relay, _driver: driver })
    }

    /// The fantoccini client, for commands this type does not wrap (find,
    /// click, type). They have no timeout of their own.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Navigate to `url` and wait for the page to load.
    pub async fn goto(&self, url: &str) -> Result<(), BrowserError> {
        let what = format!("opening {url}");
        self.timed(&what, self.client.goto(url)).await
    }

    /// Run `script` (a function body: `return ...` gives the value) in the
    /// page and return its value.
    pub async fn execute(&self, script: &str) -> Result<serde_json::Value, BrowserError> {
        let what = format!("running `{}`", script.chars().take(60).collect::<String>());
        self.timed(&what, self.client.execute(script, vec![])).await
    }

    async fn timed<T, E: std::fmt::Display>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, BrowserError> {
        match tokio::time::timeout(self.command_timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(BrowserError::Command { what: what.to_string(), message: e.to_string() }),
            Err(_) => Err(BrowserError::Timeout { what: what.to_string(), after: self.command_timeout }),
        }
    }

    /// End the session (best effort, bounded by the command timeout), then
    /// kill the browser and its driver.
    pub async fn close(self) {
        let _ = tokio::time::timeout(self.command_timeout, self.client.clone().close()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::process::Command;

    /// A network namespace of its own, deleted on drop.
    struct Netns(String);

    impl Netns {
        fn new() -> Option<Netns> {
            let name = format!("braidbrw{}", std::process::id());
            let ok = Command::new("ip").args(["netns", "add", &name]).status().is_ok_and(|s| s.success());
            if !ok {
                return None;
            }
            let ns = Netns(name);
            let up = Command::new("ip").args(["netns", "exec", &ns.0, "ip", "link", "set", "lo", "up"]).status();
            up.is_ok_and(|s| s.success()).then_some(ns)
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    /// A page served on 127.0.0.1 of the namespace only: the browser
    /// reaches it only if it really runs inside, and the client reaches
    /// the browser only through the relay.
    #[test]
    fn a_browser_inside_a_namespace_is_driven_through_the_relay() {
        let Ok(tools) = BrowserTools::find() else {
            eprintln!("skipped: needs chromium and chromedriver");
            return;
        };
        let Some(ns) = (braid::emu::sys::is_root()).then(Netns::new).flatten() else {
            eprintln!("skipped: needs root to make a network namespace");
            return;
        };
        let inside = braid::emu::sys::NetNs::named(&ns.0).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            inside.enter().unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let body = "<html><head><title>inside</title></head><body>ns</body></html>";
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            }
        });
        let port = rx.recv().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let options = BrowserOptions { netns: Some(ns.0.clone()), ..BrowserOptions::default() };
            let browser = Browser::start(&tools, &options).await.unwrap();
            browser.goto(&format!("http://127.0.0.1:{port}/")).await.unwrap();
            assert_eq!(browser.execute("return document.title").await.unwrap(), serde_json::json!("inside"));
            // A script that never returns is cut off by the command timeout.
            let short = Browser { command_timeout: Duration::from_millis(500), ..browser };
            let e = short.execute("return new Promise(() => {})").await;
            assert!(e.is_err(), "{e:?}");
            short.close().await;
        });
    }
}
