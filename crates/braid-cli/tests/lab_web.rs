//! The lab's web interface in a real browser (issue 19 §1): `braid lab
//! serve` and headless Chromium driven over WebDriver (chromedriver,
//! through fantoccini). The test opens the new-study form, sees a field
//! error for a bad value, launches a study, watches its progress advance
//! live on the studies page (server-sent events, no reload), opens an
//! experiment and sees its time-series plot, and is refused without the
//! token by a server listening on a non-loopback address (0.0.0.0, with
//! the token it generated and printed).
//!
//! Needs `chromium` and `chromedriver` (Debian: `chromium`,
//! `chromium-driver`; scripts/test installs them when root). Without
//! them the test fails with a message when `CI=true` and is skipped
//! otherwise. Every process it starts is killed on drop, also when an
//! assertion fails.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use braid_lab::browser::{Browser, BrowserOptions, BrowserTools, Client, Locator};

/// A child process killed (and reaped) on drop. A child started in its
/// own process group (chromedriver, which starts Chromium and its helper
/// processes) is killed with the whole group.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) on the process group this test created for
            // its child (a no-op error for a child without its own group).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| std::env::split_paths(&path).map(|d| d.join(n)).find(|p| p.is_file()))
}

/// The browser and its driver, or `None` (skip) outside CI.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let chromium = which(&["chromium", "chromium-browser", "google-chrome"]);
    let driver = which(&["chromedriver"]);
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        _ => {
            let msg =
                "lab_web: needs chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("{msg}: skipped");
            None
        }
    }
}

/// `braid lab serve ARGS`; the URL it printed (with the token, if any).
fn serve(db: &Path, args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["lab", "serve", "--db"])
        .process_group(0)
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting braid lab serve");
    let stdout = child.stdout.take().expect("stdout");
    let guard = Killed(child);
    let mut line = String::new();
    let mut out = BufReader::new(stdout);
    out.read_line(&mut line).expect("reading the URL line");
    // Keep reading: a closed pipe would fail the server's next line.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = line.split("open ").nth(1).map(|u| u.trim().to_string()).unwrap_or_else(|| panic!("no URL in `{line}`"));
    (guard, url)
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < end, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text(c: &Client, css: &str) -> String {
    match c.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn js(c: &Client, script: &str) -> serde_json::Value {
    c.execute(script, vec![]).await.expect("script")
}

async fn fill(c: &Client, css: &str, value: &str) {
    let e = c.find(Locator::Css(css)).await.unwrap_or_else(|_| panic!("no field {css}"));
    e.clear().await.expect("clear");
    e.send_keys(value).await.expect("type");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_in_a_browser() {
    let Some((chromium, driver)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lab.db");
    let (_server, base) = serve(&db, &["--listen", "127.0.0.1:0", "--jobs", "1", "--in-process"]);
    let base = base.trim_end_matches('/').to_string();

    // braid-lab's harness: chromedriver in its own process group, killed
    // with Chromium on drop (also when an assertion fails).
    let tools = BrowserTools { chromium, chromedriver: driver };
    let browser = Browser::start(&tools, &BrowserOptions::default()).await.expect("starting Chromium");
    scenario(browser.client(), &base, &db).await;
    browser.close().await;
}

async fn scenario(c: &Client, base: &str, db: &Path) {
    // The studies page of an empty database.
    c.goto(&format!("{base}/")).await.unwrap();
    assert!(text(c, "main").await.contains("No studies"), "{}", text(c, "main").await);

    // The form: a bad value gets the CLI's message under its field.
    c.goto(&format!("{base}/new?template=sim-transfer")).await.unwrap();
    fill(c, "#f-name", "browser").await;
    fill(c, "#p-flows", "many").await;
    wait_until("the field error for flows", Duration::from_secs(10), || async {
        text(c, "[data-error-for=flows]").await.contains("expected a whole number")
    })
    .await;
    // Fixed: the count and the expected duration.
    // About 5 ms of simulation per MB: 48 experiments of 24 to 47 MB take
    // about 10 s at one job, long enough to watch the progress move.
    let sizes: Vec<String> = (24..48).map(|mb| format!("{mb}MB")).collect();
    fill(c, "#p-flows", "1").await;
    fill(c, "#p-bytes", &sizes.join("\n")).await;
    fill(c, "#f-repetitions", "2").await;
    wait_until("the plan's count", Duration::from_secs(10), || async {
        text(c, "#plan").await.starts_with("48 experiments")
    })
    .await;
    assert!(text(c, "[data-error-for=flows]").await.is_empty());
    c.find(Locator::Css("#launch")).await.unwrap().click().await.unwrap();
    wait_until("the study page", Duration::from_secs(10), || async {
        c.current_url().await.is_ok_and(|u| u.path() == "/studies/browser")
    })
    .await;

    // The studies page: progress advances live (no reload).
    c.goto(&format!("{base}/")).await.unwrap();
    js(c, "window.__notReloaded = true; return null").await;
    let done = || async { text(c, "tr[data-study=browser] [data-col=done]").await.parse::<u64>().unwrap_or(0) };
    let first = done().await;
    let mut seen = vec![first];
    let end = Instant::now() + Duration::from_secs(120);
    while seen.len() < 3 {
        assert!(Instant::now() < end, "progress did not advance twice in 120 s: {seen:?}");
        let d = done().await;
        if seen.last() != Some(&d) {
            seen.push(d);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(js(c, "return window.__notReloaded === true").await, serde_json::json!(true), "the page reloaded");
    assert!(js(c, "return Number(document.body.dataset.updates || 0)").await.as_u64().unwrap_or(0) >= 2);
    wait_until("the study to finish", Duration::from_secs(300), || async { done().await == 48 }).await;
    assert_eq!(text(c, "tr[data-study=browser] [data-col=state]").await, "complete");

    // An experiment: its parameters and its time-series plot.
    c.goto(&format!("{base}/studies/browser")).await.unwrap();
    c.find(Locator::Css("#experiments tbody tr td a")).await.unwrap().click().await.unwrap();
    wait_until("the experiment page", Duration::from_secs(10), || async {
        c.current_url().await.is_ok_and(|u| u.path().starts_with("/experiments/"))
    })
    .await;
    let plots = c.find_all(Locator::Css("figure.series svg")).await.unwrap();
    assert!(!plots.is_empty(), "no series plot on {}", c.current_url().await.unwrap());
    assert!(text(c, "#params").await.contains("bytes"));

    // The analysis page draws the box plot.
    c.goto(&format!("{base}/studies/browser/analysis")).await.unwrap();
    assert!(!c.find_all(Locator::Css("#distribution svg")).await.unwrap().is_empty());

    // On a non-loopback address: refused without the token it printed.
    let (_open, url) = serve(db, &["--listen", "0.0.0.0:0"]);
    let (root, token) = url.split_once("?token=").expect("a generated token in the URL");
    assert_eq!(token.len(), 32);
    let port = root.trim_end_matches('/').rsplit(':').next().unwrap();
    let local = format!("http://127.0.0.1:{port}");
    c.goto(&format!("{local}/")).await.unwrap();
    let refused = text(c, "body").await;
    assert!(refused.contains("requires a token") && !refused.contains("browser"), "{refused}");
    c.goto(&format!("{local}/api/studies")).await.unwrap();
    assert!(text(c, "body").await.contains("requires a token"));
    // With it: a cookie, then the pages.
    c.goto(&format!("{local}/?token={token}")).await.unwrap();
    assert!(c.current_url().await.unwrap().query().is_none(), "the token stays out of the address bar");
    assert!(text(c, "tr[data-study=browser]").await.contains("sim-transfer"));
}
