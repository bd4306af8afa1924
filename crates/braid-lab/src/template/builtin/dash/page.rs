//! The browser players' side of a `dash` experiment: headless Chromium in
//! the client's network namespace ([`crate::browser`]) opens the player page
//! (`players/player.html`, served with the content by `braid dash serve`),
//! and this module polls the page's playback log (`window.braidPlayback`)
//! until the playback finishes, fails or runs out of time, cutting the link
//! on schedule meanwhile ([`Cut`]).
//!
//! Failure model (never a hang): the page must load its script within
//! [`PAGE_TIMEOUT`], playback must start within the startup limit, no stall
//! may last longer than the stall limit, every WebDriver command has a
//! timeout, and the experiment's deadline bounds the whole. A fatal player
//! error (missing or malformed manifest, 404 segment, unsupported media) is
//! reported with the player's own message.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use braid::emu::Testbed;
use braid::LinkSpec;
use serde::{Deserialize, Serialize};

use crate::browser::{Browser, BrowserOptions, BrowserTools};
use crate::template::TemplateError;

/// How long the page may take to define its log object.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(15);

/// How often the log is read.
const POLL: Duration = Duration::from_millis(200);

/// One stall as the page saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PageStall {
    /// Wall seconds since the page's script started.
    pub start_s: f64,
    /// Its length so far, seconds.
    pub duration_s: f64,
    /// Still going when the log was read.
    #[serde(default)]
    pub open: bool,
}

/// Media played at one bitrate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PagePlayed {
    /// Media time where it begins, seconds.
    pub start_s: f64,
    /// Media seconds played.
    pub duration_s: f64,
    /// The rendered video representation's bitrate, kbit/s (`None`: not
    /// known yet when it played).
    pub kbps: Option<f64>,
}

/// A rendered-bitrate change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PageQuality {
    /// Wall seconds since the page's script started.
    pub t_s: f64,
    /// The new bitrate, kbit/s.
    pub kbps: f64,
}

/// Seconds buffered ahead of the playhead at a time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PageBuffer {
    /// Wall seconds since the page's script started.
    pub t_s: f64,
    /// Buffered media ahead of the playhead, seconds.
    pub level_s: f64,
}

/// A player or page error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageError {
    /// Wall seconds since the page's script started.
    pub t_s: f64,
    /// The player's message.
    pub message: String,
    /// Whether it ends the playback.
    pub fatal: bool,
}

/// The page's playback log (see `players/player.js` for the model).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PageLog {
    /// Player versions.
    pub versions: BTreeMap<String, String>,
    /// Seconds from the script's start to the first frame.
    pub startup_s: Option<f64>,
    /// Stalls after startup.
    pub stalls: Vec<PageStall>,
    /// Media played, by bitrate.
    pub played: Vec<PagePlayed>,
    /// Rendered-bitrate changes.
    pub quality: Vec<PageQuality>,
    /// Buffer level samples.
    pub buffer: Vec<PageBuffer>,
    /// Errors.
    pub errors: Vec<PageError>,
    /// Played to the end of the video.
    pub ended: bool,
    /// Playback is over (ended, reached the asked duration, or failed).
    pub finished: bool,
    /// The playhead, media seconds.
    pub media_s: f64,
    /// The page's clock when the log was read.
    pub now_s: f64,
    /// Seconds buffered ahead of the playhead when the log was read.
    pub buffer_now_s: f64,
}

impl PageLog {
    /// The lab's playback trace: closed stalls, and played stretches whose
    /// bitrate is known.
    pub fn trace(&self) -> braid_dash::qoe::PlaybackTrace {
        use braid_dash::qoe::{PlaybackTrace, Played, Stall};
        PlaybackTrace {
            startup_s: self.startup_s,
            stalls: self.stalls.iter().map(|s| Stall { start_s: s.start_s, duration_s: s.duration_s }).collect(),
            played: self
                .played
                .iter()
                .filter_map(|p| p.kbps.map(|kbps| Played { start_s: p.start_s, duration_s: p.duration_s, kbps }))
                .collect(),
            ended: self.ended,
        }
    }

    /// The fatal errors, joined.
    fn fatal(&self) -> Option<String> {
        let fatal: Vec<&str> = self.errors.iter().filter(|e| e.fatal).map(|e| e.message.as_str()).collect();
        (!fatal.is_empty()).then(|| fatal.join("; "))
    }
}

/// A link cut: path 0 replaced by `during` from page time `at_s` for
/// `for_s` seconds, then `restore` again.
#[derive(Debug, Clone)]
pub struct Cut {
    /// When, page seconds.
    pub at_s: f64,
    /// How long, seconds.
    pub for_s: f64,
    /// The link during the cut.
    pub during: LinkSpec,
    /// The link after it.
    pub restore: LinkSpec,
    /// When it was applied and lifted (page seconds, estimated from the
    /// last log read and the time since).
    pub applied: Option<(f64, Option<f64>)>,
    /// The player's buffer at the log read just before the cut (at most
    /// one poll, 0.2 s, earlier).
    pub buffer_at_cut_s: Option<f64>,
}

impl Cut {
    /// Apply or lift the cut if page time `now_s` says so.
    fn step(&mut self, tb: &mut Testbed, now_s: f64, buffer_s: f64) -> Result<(), TemplateError> {
        match self.applied {
            None if now_s >= self.at_s => {
                tb.set_path("0", &self.during).map_err(|e| TemplateError::Failed(format!("cutting the link: {e}")))?;
                self.applied = Some((now_s, None));
                self.buffer_at_cut_s = Some(buffer_s);
            }
            Some((start, None)) if now_s >= start + self.for_s => {
                tb.set_path("0", &self.restore).map_err(|e| TemplateError::Failed(format!("restoring the link: {e}")))?;
                self.applied = Some((start, Some(now_s)));
            }
            _ => {}
        }
        Ok(())
    }

    /// Time until its next change, from page time `now_s`.
    fn next_in(&self, now_s: f64) -> Option<f64> {
        match self.applied {
            None => Some(self.at_s - now_s),
            Some((start, None)) => Some(start + self.for_s - now_s),
            Some(_) => None,
        }
    }
}

/// When playback is given up.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Playback must start within this (from the page's load).
    pub startup: Duration,
    /// No stall may last longer.
    pub stall: Duration,
    /// The experiment's deadline.
    pub deadline: Instant,
}

/// Play `url` in a headless Chromium on `host` of `tb` and return the
/// page's final log. `cut`, if any, is applied on the page's clock.
pub async fn play(
    tb: &mut Testbed,
    host: &str,
    url: &str,
    limits: Limits,
    mut cut: Option<&mut Cut>,
) -> Result<PageLog, TemplateError> {
    let tools = BrowserTools::find().map_err(|e| TemplateError::Unavailable(e.to_string()))?;
    let netns = tb.netns(host).map_err(|e| TemplateError::Failed(e.to_string()))?.to_string();
    let options = BrowserOptions { netns: Some(netns), command_timeout: Duration::from_secs(20), ..BrowserOptions::default() };
    let browser = Browser::start(&tools, &options).await.map_err(|e| TemplateError::Failed(format!("starting Chromium: {e}")))?;
    let result = drive(&browser, tb, url, limits, cut.as_deref_mut()).await;
    browser.close().await;
    // A cut still in force when playback ended is lifted: the testbed may
    // be used again (the caller tears it down anyway).
    if let Some(c) = cut {
        if let Some((start, None)) = c.applied {
            let _ = tb.set_path("0", &c.restore);
            c.applied = Some((start, Some(f64::NAN)));
        }
    }
    result
}

async fn drive(
    browser: &Browser,
    tb: &mut Testbed,
    url: &str,
    limits: Limits,
    mut cut: Option<&mut Cut>,
) -> Result<PageLog, TemplateError> {
    let opened = Instant::now();
    browser.goto(url).await.map_err(|e| TemplateError::Failed(format!("the player page: {e}")))?;
    let mut last: Option<(PageLog, Instant)> = None;
    loop {
        let value = browser
            .execute("return window.braidPlayback ? window.braidPlayback.log() : null")
            .await
            .map_err(|e| TemplateError::Failed(format!("reading the playback log: {e}")))?;
        let read_at = Instant::now();
        if value.is_null() {
            if opened.elapsed() > PAGE_TIMEOUT {
                return Err(TemplateError::Failed(format!(
                    "the player page at {url} did not start its script within {PAGE_TIMEOUT:?} (is player.js served?)"
                )));
            }
        } else {
            let log: PageLog = serde_json::from_value(value)
                .map_err(|e| TemplateError::Failed(format!("the page's playback log is malformed: {e}")))?;
            if let Some(errors) = log.fatal() {
                return Err(TemplateError::Failed(format!("the player failed: {errors}")));
            }
            if log.finished {
                return Ok(log);
            }
            if log.startup_s.is_none() && opened.elapsed() > limits.startup {
                return Err(TemplateError::Failed(format!(
                    "the player did not start playing within {:?} (playhead at {:.1} s)",
                    limits.startup, log.media_s
                )));
            }
            if let Some(s) = log.stalls.iter().find(|s| s.open && s.duration_s > limits.stall.as_secs_f64()) {
                return Err(TemplateError::Failed(format!(
                    "playback stalled for {:.0} s at media time {:.1} s (limit {:?})",
                    s.duration_s, log.media_s, limits.stall
                )));
            }
            last = Some((log, read_at));
        }
        if Instant::now() >= limits.deadline {
            return Err(TemplateError::Timeout(format!(
                "the playback did not finish before the experiment's deadline (playhead at {:.1} s)",
                last.as_ref().map(|(l, _)| l.media_s).unwrap_or(0.0)
            )));
        }
        // Sleep until the next poll or the cut's next change, whichever
        // comes first, then apply the cut on the page's clock.
        let mut nap = POLL;
        if let (Some(c), Some((log, at))) = (cut.as_deref(), last.as_ref()) {
            let page_now = log.now_s + at.elapsed().as_secs_f64();
            if let Some(next) = c.next_in(page_now) {
                nap = nap.min(Duration::from_secs_f64(next.max(0.0)));
            }
        }
        tokio::time::sleep(nap).await;
        if let (Some(c), Some((log, at))) = (cut.as_deref_mut(), last.as_ref()) {
            c.step(tb, log.now_s + at.elapsed().as_secs_f64(), log.buffer_now_s)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_log_reads_back_and_becomes_a_trace() {
        let json = serde_json::json!({
            "player": "dashjs", "versions": {"dashjs": "5.2.1"}, "startup_s": 0.6,
            "stalls": [{"start_s": 8.0, "duration_s": 2.5}, {"start_s": 20.0, "duration_s": 1.0, "open": true}],
            "played": [{"start_s": 0.0, "duration_s": 0.5, "kbps": null}, {"start_s": 0.5, "duration_s": 7.0, "kbps": 1000.0}],
            "quality": [{"t_s": 0.7, "kbps": 1000.0, "source": "rendered"}],
            "buffer": [{"t_s": 0.5, "level_s": 2.0}],
            "errors": [{"t_s": 1.0, "message": "recoverable", "fatal": false}],
            "events": {"playing": 1}, "ended": false, "finished": true, "media_s": 7.5, "now_s": 21.0
        });
        let log: PageLog = serde_json::from_value(json).unwrap();
        assert!(log.fatal().is_none());
        let t = log.trace();
        assert_eq!(t.startup_s, Some(0.6));
        assert_eq!(t.stalls.len(), 2);
        assert_eq!(t.played.len(), 1, "a stretch of unknown bitrate is left out");
        assert_eq!(t.played[0].kbps, 1000.0);
    }

    #[test]
    fn fatal_errors_are_joined() {
        let log = PageLog {
            errors: vec![
                PageError { t_s: 1.0, message: "dash.js error 25: manifest.mpd is not available".into(), fatal: true },
                PageError { t_s: 2.0, message: "warning".into(), fatal: false },
            ],
            ..PageLog::default()
        };
        assert_eq!(log.fatal().as_deref(), Some("dash.js error 25: manifest.mpd is not available"));
    }

    #[test]
    fn the_cut_changes_on_the_page_clock() {
        let spec: LinkSpec = "rtt=10ms".parse().unwrap();
        let c = Cut { at_s: 5.0, for_s: 10.0, during: spec.clone(), restore: spec, applied: None, buffer_at_cut_s: None };
        assert_eq!(c.next_in(2.0), Some(3.0));
        let mut c2 = c.clone();
        c2.applied = Some((5.1, None));
        assert!((c2.next_in(6.0).unwrap() - 9.1).abs() < 1e-9);
        c2.applied = Some((5.1, Some(15.1)));
        assert_eq!(c2.next_in(20.0), None);
    }
}
