//! The `dash` template: adaptive video streaming over an emulated link
//! (issue 21; seed 001 chapter 8, the thesis's DASH study with MACI), with
//! real browser players (dash.js and Shaka Player in headless Chromium) or
//! Braid's own ABR client, and the QoE metrics of `braid_dash::qoe`.
//!
//! One experiment:
//! 1. makes (or reuses from the cache, [`serve::cache_dir`]) the thesis's
//!    content with `segment`-second segments (`braid_dash::content`);
//! 2. builds a two-host testbed: the server on `a`, the client on `b`, the
//!    path's `a2b` direction (server → client) shaped by `link`, plus either
//!    a generated rate process (`bandwidth_mean`, `bandwidth_variance`:
//!    [`bandwidth`]) or a Mahimahi trace file (`trace`). With `trace2`, a
//!    second path: `link2` (default: `link`) with `trace2` as its
//!    server-to-client rate and the same `queue` ([`paths`]), for every
//!    transport and player; `transport = multipath` uses both, the
//!    single-path transports and the browser players use the better one
//!    (higher mean rate over the first `duration` + 120 s). Path 1 may be a
//!    generated process while path 2 is a trace (`bandwidth_mean` > 0 with
//!    `trace2`): the better path is then chosen from the drawn rates;
//! 3. runs `braid dash serve` on `a` over a directory holding the content
//!    and the player page, and on `b` either Chromium with the page
//!    ([`page`]; `player` = dashjs or shaka) or `braid dash play`
//!    (`player` = braid, over `transport` tcp, braid or multipath: one
//!    `--path` per path, the server's Braid port bound to the wildcard
//!    address so both of its path addresses answer; the server schedules
//!    the segments with the connection's default ProgMP scheduler);
//! 4. with `cut_at` > 0, cuts the link `cut_for` seconds at `cut_at`
//!    seconds into the playback (packets wait, nothing is delivered: see
//!    [`bandwidth::outage`]) and restores it;
//! 5. records every `QoeSummary` field and the playback's series.
//!
//! Records: `stall_count`, `stall_total_s`, `startup_s`, `mean_kbps`,
//! `switches`, `switch_magnitude_kbps`, `qoe_hossfeld`, `qoe_linear`,
//! `played_s`, `ended`, `requests`, `http_errors`; with a generated rate
//! `bandwidth_mean_mbps` and `bandwidth_variance` (what the process drew);
//! with a cut `cut_stall_s` (the stall it caused, 0 if none) and
//! `cut_buffer_s` (the buffer when it began: the stall a perfect player
//! shows is the cut minus that); on a two-path testbed `path1_mean_mbps`,
//! `path2_mean_mbps` (the ranking window's means), `path_used` (1 or 2;
//! single-path transports and browser players) and, over Braid,
//! `path1_bytes`, `path2_bytes` and `path1_srtt_ms`, `path2_srtt_ms` (what
//! the client received on each path, its smoothed RTT); for Braid's
//! client, `abandons` (segment downloads it gave up for a lower
//! representation, as dash.js does). Series: `kbps` (bitrate played, at wall
//! time), `buffer_s` (browser players: sampled every 0.5 s; braid: at each
//! segment request), `link_mbps` (generated rate).
//! Artifact: `playback` (the page's log or the client's report).
//!
//! A missing or malformed manifest, a segment answered 404, a player that
//! does not start within `startup_limit` or stalls longer than
//! `stall_limit`: a failed experiment with the player's message; the
//! browser, the server and the testbed are torn down on every path (their
//! handles kill them on drop).

pub mod bandwidth;
pub mod page;
pub mod paths;
pub mod serve;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid::LinkSpec;
use braid_dash::qoe::{summarize, PlaybackTrace, QoeSummary};

use self::page::{Cut, Limits, PageLog};
use super::transfer::tools::braid_program;
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};

/// The template (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Dash;

/// The players.
pub const PLAYERS: [&str; 3] = ["dashjs", "shaka", "braid"];

/// The adaptation algorithms, over all players (see [`Settings::check`]).
pub const ABRS: [&str; 5] = ["default", "throughput", "bola", "dynamic", "mpc"];

/// Braid's client's transports.
pub const TRANSPORTS: [&str; 3] = ["tcp", "braid", "multipath"];

/// The server's HTTP port, and its Braid port.
const HTTP_PORT: u16 = 8080;
const BRAID_PORT: u16 = 8443;

/// How much longer than the video a generated rate trace runs (startup,
/// stalls); it repeats after that.
const TRACE_SLACK_S: u64 = 120;

impl Template for Dash {
    fn name(&self) -> &str {
        "dash"
    }

    fn description(&self) -> &str {
        "DASH video over an emulated link with dash.js or Shaka Player in headless Chromium, or Braid's ABR client: \
         stalls, startup delay, bitrate, switches and QoE (Hossfeld, linear)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::config("player", ParamType::one_of(&PLAYERS), Value::Enum("dashjs".into()))
                .doc("dashjs or shaka (in headless Chromium), or braid (Braid's own ABR client, braid dash play)"),
            ParamDecl::config("abr", ParamType::one_of(&ABRS), Value::Enum("default".into())).doc(
                "adaptation: dash.js throughput, bola, dynamic or default (= dynamic); Shaka default; \
                 braid throughput, bola, mpc or default (= throughput)",
            ),
            ParamDecl::config("transport", ParamType::one_of(&TRANSPORTS), Value::Enum("tcp".into()))
                .doc("braid player only: HTTP over tcp, over a braid connection, or over multipath braid"),
            ParamDecl::config(
                "scheduler",
                ParamType::one_of(&braid_progmp::BUILTINS.iter().map(|b| b.name).collect::<Vec<_>>()),
                Value::Enum(braid_progmp::DEFAULT_SCHEDULER.into()),
            )
            .doc("multipath only: the shipped ProgMP scheduler of both ends (braid progmp list); the server's decides which path carries the segments")
            .added_later(),
            crate::template::builtin::sim_transfer::cc_decl("cc", braid_proto::CcAlgorithm::Cubic)
                .doc("braid and multipath only: the congestion controller of both ends' Braid connections (TCP runs the kernel's default, BBR on this project's machines)")
                .added_later(),
            ParamDecl::config("segment", ParamType::int_range(1, 60), Value::Int(2))
                .doc("segment length, seconds (the thesis: 1, 2, 6, 10, 15)"),
            ParamDecl::config("buffer", ParamType::Duration, Value::Duration(Duration::from_secs(30)))
                .doc("the player's buffer target (dash.js bufferTimeDefault, Shaka bufferingGoal, braid --buffer)"),
            ParamDecl::config("duration", ParamType::Duration, Value::Duration(Duration::from_secs(120)))
                .doc("seconds of video to play (at most content_duration)"),
            ParamDecl::config("content_duration", ParamType::Duration, Value::Duration(Duration::from_secs(120)))
                .doc("length of the encoded video (cached per segment length and length)"),
            ParamDecl::config("startup_limit", ParamType::Duration, Value::Duration(Duration::from_secs(60)))
                .doc("fail if playback has not started after this long"),
            ParamDecl::config("stall_limit", ParamType::Duration, Value::Duration(Duration::from_secs(60)))
                .doc("fail if one stall lasts longer than this"),
            ParamDecl::config("manifest", ParamType::String, Value::String("manifest.mpd".into()))
                .doc("the manifest's file name in the content directory (another name: a missing manifest, for fault tests)"),
            ParamDecl::config("missing_segment", ParamType::int_range(0, 100_000), Value::Int(0))
                .doc("fault injection: segment number N of every representation is not served (404); 0: none"),
            ParamDecl::env("link", ParamType::Link, Value::Link("rtt=40ms".into()))
                .doc("the path between server (a) and client (b), as a link spec; a rate here is overridden by bandwidth_mean or trace"),
            ParamDecl::env("bandwidth_mean", ParamType::float_range(0.0, 10_000.0), Value::Float(5.0)).doc(
                "server-to-client rate, Mbit/s: redrawn every second from a gamma distribution with this mean; 0: no \
                 process (the link's rate or the trace)",
            ),
            ParamDecl::env("bandwidth_variance", ParamType::float_range(0.0, 1e6), Value::Float(0.0))
                .doc("the rate process's variance, (Mbit/s)^2; 0: a constant rate"),
            ParamDecl::env("bandwidth_floor", ParamType::float_range(0.001, 10_000.0), Value::Float(0.1))
                .doc("the rate process never draws below this, Mbit/s"),
            ParamDecl::env("queue", ParamType::Size, Value::Size(0)).doc(
                "drop-tail queue in front of the server-to-client rate process or trace, bytes; 0: the link model's default",
            ),
            ParamDecl::env("trace", ParamType::Trace, Value::Trace(PathBuf::new()))
                .doc("a Mahimahi trace as the server-to-client rate (bandwidth_mean must be 0); default none"),
            ParamDecl::env("trace2", ParamType::Trace, Value::Trace(PathBuf::new())).doc(
                "a Mahimahi trace as a second path's server-to-client rate: the testbed gets two paths (multipath \
                 uses both, the other transports and players the better one); default none (one path)",
            )
            .added_later(),
            ParamDecl::env("link2", ParamType::Link, Value::Link(String::new()))
                .doc("the second path (with trace2) as a link spec, its rate overridden by trace2; empty: the same as link")
                .added_later(),
            ParamDecl::env("cut_at", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("cut the link this long after the player page opened (0: no cut)"),
            ParamDecl::env("cut_for", ParamType::Duration, Value::Duration(Duration::from_secs(10)))
                .doc("how long the cut lasts (nothing delivered, packets wait)"),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: true, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let play = params.duration("duration").unwrap_or(Duration::from_secs(120));
        play + Duration::from_secs(15)
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = Settings::from_params(ctx.params)?;
        braid::emu::check_capabilities()
            .map_err(|e| TemplateError::Unavailable(format!("the dash template runs over the emulator: {e}")))?;
        let braid = braid_program()?;
        let players = if s.player == "braid" { None } else { Some(serve::players_dir()?) };
        let content = braid_dash::content::ensure(&serve::cache_dir(), &s.content())
            .map_err(|e| TemplateError::Unavailable(format!("the DASH content: {e}")))?;
        ctx.progress(0.1);
        let work = ctx.work_dir().to_path_buf();
        let www = work.join("www");
        serve::assemble(&www, &content, players.as_deref())?;
        if s.missing_segment > 0 {
            serve::remove_segment(&www, s.missing_segment)?;
        }
        let (link, generated) = s.link(&work, ctx.seed)?;
        if let Some(g) = &generated {
            ctx.record("bandwidth_mean_mbps", g.mean_mbps());
            ctx.record("bandwidth_variance", g.variance());
            for (i, r) in g.rates_mbps.iter().enumerate() {
                ctx.series("link_mbps", (i as u64 * bandwidth::REDRAW_MS) as f64 / 1000.0, *r);
            }
        }
        let link2 = s.link2()?;
        let means = s.path_means(&work, &link)?;
        let multipath = s.transport == "multipath";
        // The path a single-path transport or a browser uses (0-based).
        let used = paths::better(&means);
        if link2.is_some() {
            for (i, m) in means.iter().enumerate() {
                if let Some(m) = m {
                    ctx.record(&format!("path{}_mean_mbps", i + 1), *m);
                }
            }
            if !multipath {
                ctx.record("path_used", (used + 1) as f64);
            }
        }
        let mut builder = ctx.testbed().link(link.clone());
        if let Some(l) = &link2 {
            builder = builder.link(l.clone());
        }
        let mut tb = builder.build().context("building the testbed (needs root, /dev/net/tun and iproute2)")?;
        let addrs: Vec<(Ipv4Addr, Ipv4Addr)> = tb.layout().paths.iter().map(|p| (p.a_addr, p.b_addr)).collect();
        // Multipath: the URL names path 1's server address, which carries
        // the handshake; the others are added with `--path`.
        let server_addr = addrs
            .get(if multipath { 0 } else { used })
            .map(|&(a, _)| a)
            .ok_or_else(|| TemplateError::Failed(format!("the testbed has {} path(s), not {}", addrs.len(), means.len())))?;
        let log = work.join("requests.jsonl");
        // Over multipath the server's Braid port answers on every address of
        // its host (a wildcard bind), so each path reaches it.
        let braid_listen = (s.player == "braid" && s.transport != "tcp").then(|| {
            let ip = if multipath { Ipv4Addr::UNSPECIFIED } else { server_addr };
            SocketAddr::from((ip, BRAID_PORT))
        });
        let server = serve::start_server(
            &tb,
            "a",
            &braid,
            &www,
            SocketAddr::from((server_addr, HTTP_PORT)),
            braid_listen,
            multipath.then_some(s.scheduler.as_str()),
            s.cc.as_str(),
            &log,
        )?;
        let mut cut = s.cut(&work, &link)?;
        let limits = Limits { startup: s.startup_limit, stall: s.stall_limit, deadline: ctx.deadline };
        let played = if s.player == "braid" {
            // Over Braid the URL names the server's Braid address.
            let port = if s.transport == "tcp" { HTTP_PORT } else { BRAID_PORT };
            let url = serve::url(server_addr, port, &format!("{}/{}", serve::CONTENT_DIR, s.manifest));
            let abr = if s.abr == "default" { "throughput" } else { s.abr.as_str() };
            let limit = ctx.remaining();
            // Each path from the client's address on it to the server's.
            let client_paths: Vec<(Ipv4Addr, SocketAddr)> = if multipath {
                addrs.iter().map(|&(a, b)| (b, SocketAddr::from((a, BRAID_PORT)))).collect()
            } else {
                Vec::new()
            };
            let play = serve::Play {
                url: &url,
                transport: &s.transport,
                abr,
                buffer: s.buffer,
                duration: s.duration,
                paths: &client_paths,
                scheduler: multipath.then_some(s.scheduler.as_str()),
                cc: s.cc.as_str(),
            };
            let report = serve::play_client(&tb, "b", &braid, &play, limit, &work)?;
            ctx.artifact("playback", serde_json::to_value(&report.trace).context("the client's trace")?);
            for seg in &report.segments {
                ctx.series("buffer_s", seg.requested_s, seg.buffer_s);
            }
            ctx.record("abandons", report.abandons as f64);
            if link2.is_some() {
                record_paths(ctx, &report.paths, &addrs);
            }
            Playback { trace: report.trace, page: None }
        } else {
            let url = serve::url(server_addr, HTTP_PORT, &s.page_query());
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| TemplateError::io("starting a tokio runtime", e))?;
            let page = rt.block_on(page::play(&mut tb, "b", &url, limits, cut.as_mut()))?;
            ctx.artifact("playback", serde_json::to_value(&page).context("the page's log")?);
            Playback { trace: page.trace(), page: Some(page) }
        };
        drop(server);
        let (requests, http_errors) = serve::request_counts_all(&log);
        ctx.record("requests", requests as f64);
        ctx.record("http_errors", http_errors as f64);
        record(ctx, &played, cut.as_ref());
        ctx.progress(1.0);
        tb.down().context("tearing the testbed down")?;
        Ok(())
    }
}

/// What the Braid client received on each path of a two-path testbed
/// (`addrs`: each path's server and client addresses), matched by the
/// server address it reached.
fn record_paths(ctx: &mut Context<'_>, paths: &[serve::ClientPath], addrs: &[(Ipv4Addr, Ipv4Addr)]) {
    for (i, &(server, _)) in addrs.iter().enumerate() {
        let on: Vec<_> = paths.iter().filter(|p| p.remote.ip() == std::net::IpAddr::V4(server)).collect();
        if on.is_empty() {
            continue;
        }
        ctx.record(&format!("path{}_bytes", i + 1), on.iter().map(|p| p.bytes_received as f64).sum());
        if let Some(p) = on.first() {
            ctx.record(&format!("path{}_srtt_ms", i + 1), p.srtt_ms);
        }
    }
}

/// What one playback produced.
struct Playback {
    trace: PlaybackTrace,
    page: Option<PageLog>,
}

/// Every metric and series of a playback.
fn record(ctx: &mut Context<'_>, p: &Playback, cut: Option<&Cut>) {
    let q: QoeSummary = summarize(&p.trace);
    ctx.record("stall_count", f64::from(q.stall_count));
    ctx.record("stall_total_s", q.stall_total_s);
    if q.startup_s.is_finite() {
        ctx.record("startup_s", q.startup_s);
    }
    ctx.record("mean_kbps", q.mean_kbps);
    ctx.record("switches", f64::from(q.switches));
    ctx.record("switch_magnitude_kbps", q.switch_magnitude_kbps);
    ctx.record("qoe_hossfeld", q.qoe_hossfeld);
    if q.qoe_linear.is_finite() {
        ctx.record("qoe_linear", q.qoe_linear);
    }
    ctx.record("played_s", p.trace.played.iter().map(|x| x.duration_s).sum());
    ctx.record("ended", if p.trace.ended { 1.0 } else { 0.0 });
    for (t, kbps) in wall_bitrates(&p.trace) {
        ctx.series("kbps", t, kbps);
    }
    if let Some(page) = &p.page {
        for b in &page.buffer {
            ctx.series("buffer_s", b.t_s, b.level_s);
        }
        for e in page.errors.iter().filter(|e| !e.fatal) {
            ctx.warn(&format!("player at {:.1} s: {}", e.t_s, e.message));
        }
    }
    if let Some((start, end)) = cut.and_then(|c| c.applied) {
        let end = end.filter(|e| e.is_finite()).unwrap_or(start);
        ctx.record("cut_start_s", start);
        ctx.record("cut_length_s", end - start);
        ctx.record("cut_stall_s", cut_stall(&p.trace, start, end));
        if let Some(b) = cut.and_then(|c| c.buffer_at_cut_s) {
            ctx.record("cut_buffer_s", b);
        }
    }
}

/// The bitrate played at each stretch's wall-clock start: startup, plus
/// the media time, plus the stalls before it.
pub fn wall_bitrates(trace: &PlaybackTrace) -> Vec<(f64, f64)> {
    let Some(startup) = trace.startup_s else { return Vec::new() };
    let mut stalls: Vec<_> = trace.stalls.clone();
    stalls.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let (mut waited, mut next) = (0.0, 0);
    let mut out = Vec::new();
    for p in &trace.played {
        let mut wall = startup + p.start_s + waited;
        while next < stalls.len() && stalls[next].start_s <= wall + 1e-6 {
            waited += stalls[next].duration_s.max(0.0);
            next += 1;
            wall = startup + p.start_s + waited;
        }
        out.push((wall, p.kbps));
    }
    out
}

/// The total length of the stalls that began during the cut [start, end]
/// (a player with buffer left stalls after the cut began, never before).
pub fn cut_stall(trace: &PlaybackTrace, start: f64, end: f64) -> f64 {
    trace.stalls.iter().filter(|s| s.start_s >= start - 0.5 && s.start_s <= end).map(|s| s.duration_s).sum()
}

/// The parameters, checked.
#[derive(Debug, Clone)]
struct Settings {
    player: String,
    abr: String,
    transport: String,
    /// The ProgMP scheduler of a multipath connection's two ends.
    scheduler: String,
    /// The congestion controller of the Braid connections.
    cc: braid_proto::CcAlgorithm,
    segment: u32,
    buffer: Duration,
    duration: Duration,
    content_duration: Duration,
    startup_limit: Duration,
    stall_limit: Duration,
    link_text: String,
    link: LinkSpec,
    bandwidth_mean: f64,
    bandwidth_variance: f64,
    bandwidth_floor: f64,
    trace: Option<PathBuf>,
    /// Path 2's rate (a second path), and its link text (empty: `link`).
    trace2: Option<PathBuf>,
    link2_text: String,
    queue: u64,
    manifest: String,
    missing_segment: u32,
    cut_at: Duration,
    cut_for: Duration,
}

impl Settings {
    fn from_params(p: &Params) -> Result<Settings, TemplateError> {
        let trace = p.str("trace")?.trim();
        let trace2 = p.str("trace2")?.trim();
        let s = Settings {
            player: p.str("player")?.to_string(),
            abr: p.str("abr")?.to_string(),
            transport: p.str("transport")?.to_string(),
            scheduler: p.str("scheduler")?.to_string(),
            cc: crate::template::builtin::sim_transfer::cc_param(p, "cc")?,
            segment: u32::try_from(p.int("segment")?).map_err(|_| TemplateError::Invalid("segment: 1 to 60 s".into()))?,
            buffer: p.duration("buffer")?,
            duration: p.duration("duration")?,
            content_duration: p.duration("content_duration")?,
            startup_limit: p.duration("startup_limit")?,
            stall_limit: p.duration("stall_limit")?,
            link_text: p.str("link")?.to_string(),
            link: p.link("link")?,
            bandwidth_mean: p.float("bandwidth_mean")?,
            bandwidth_variance: p.float("bandwidth_variance")?,
            bandwidth_floor: p.float("bandwidth_floor")?,
            trace: (!trace.is_empty()).then(|| PathBuf::from(trace)),
            trace2: (!trace2.is_empty()).then(|| PathBuf::from(trace2)),
            link2_text: p.str("link2")?.trim().to_string(),
            queue: p.size("queue")?,
            manifest: p.str("manifest")?.to_string(),
            missing_segment: u32::try_from(p.int("missing_segment")?)
                .map_err(|_| TemplateError::Invalid("missing_segment: 0 to 100000".into()))?,
            cut_at: p.duration("cut_at")?,
            cut_for: p.duration("cut_for")?,
        };
        s.check()?;
        if let Some(t) = &s.trace2 {
            // Read now: a missing or malformed file fails before any testbed.
            paths::mean_of("trace2", t, s.window())?;
            s.link2()?;
        }
        Ok(s)
    }

    fn check(&self) -> Result<(), TemplateError> {
        let invalid = |m: String| Err(TemplateError::Invalid(m));
        let allowed: &[&str] = match self.player.as_str() {
            "dashjs" => &["default", "throughput", "bola", "dynamic"],
            "shaka" => &["default"],
            _ => &["default", "throughput", "bola", "mpc"],
        };
        if !allowed.contains(&self.abr.as_str()) {
            return invalid(format!("abr: player {} takes {}, not `{}`", self.player, allowed.join(", "), self.abr));
        }
        if self.player != "braid" && self.transport != "tcp" {
            return invalid(format!("transport: the browser players fetch over tcp only, not `{}`", self.transport));
        }
        if self.transport != "multipath" && self.scheduler != braid_progmp::DEFAULT_SCHEDULER {
            return invalid(format!(
                "scheduler: schedules multipath connections only, not transport {} (leave it at {})",
                self.transport,
                braid_progmp::DEFAULT_SCHEDULER
            ));
        }
        if self.transport == "tcp" && self.cc != braid_proto::CcAlgorithm::Cubic {
            return invalid(format!(
                "cc: sets the Braid connections' controller, not kernel TCP's (leave it at cubic with transport tcp, not {})",
                self.cc.as_str()
            ));
        }
        if self.transport == "multipath" && self.trace2.is_none() {
            return invalid("transport multipath: needs a second path; set trace2 (path 2's server-to-client trace)".into());
        }
        if self.trace2.is_none() && !self.link2_text.is_empty() {
            return invalid("link2: describes the second path, which only trace2 creates (set trace2 or leave link2 empty)".into());
        }
        if self.trace2.is_some() && !self.cut_at.is_zero() {
            // The cut replaces path 0 only; a cut of one path of two is
            // another experiment (a path failure), not the stall test.
            return invalid("cut_at: the link cut runs on one-path testbeds only (not with trace2)".into());
        }
        if self.buffer < Duration::from_secs(1) || self.buffer > Duration::from_secs(600) {
            return invalid("buffer: a duration from 1s to 600s".into());
        }
        let content = u64::from(self.segment);
        if self.content_duration.as_secs() < content || self.content_duration.subsec_nanos() != 0 {
            return invalid(format!("content_duration: whole seconds, at least one segment ({content} s)"));
        }
        if self.duration.is_zero() || self.duration > self.content_duration {
            return invalid(format!(
                "duration: above 0 and at most content_duration ({} s)",
                self.content_duration.as_secs()
            ));
        }
        if self.manifest.is_empty() || self.manifest.contains(['/', '?', '&', '#', '%']) || self.manifest.starts_with('.') {
            return invalid(format!("manifest: a plain file name such as manifest.mpd, not `{}`", self.manifest));
        }
        if self.trace.is_some() && self.bandwidth_mean > 0.0 {
            return invalid("trace and bandwidth_mean: give one rate source (set bandwidth_mean = 0 with a trace)".into());
        }
        if self.bandwidth_mean > 0.0 && self.bandwidth_floor >= self.bandwidth_mean {
            return invalid(format!("bandwidth_floor: below bandwidth_mean ({} Mbit/s)", self.bandwidth_mean));
        }
        if !self.cut_at.is_zero() && (self.cut_for.is_zero() || self.link.changes() > 0) {
            return invalid("cut_at: needs cut_for above 0 and a link without a schedule (`;at=`)".into());
        }
        Ok(())
    }

    /// The content to play.
    fn content(&self) -> braid_dash::content::ContentSpec {
        let mut spec = braid_dash::content::ContentSpec::thesis(self.segment);
        spec.duration_secs = u32::try_from(self.content_duration.as_secs()).unwrap_or(u32::MAX);
        spec
    }

    /// Appends the server-to-client rate source to a link spec's text: the
    /// trace at `path` and, if set, the queue in front of it.
    fn push_rate_source(&self, text: &mut String, path: &Path) {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(&format!("a2b:trace={}", path.display()));
        if self.queue > 0 {
            text.push_str(&format!(",a2b:queue={}b", self.queue));
        }
    }

    /// The link: `link` with the rate source on `a2b`, and the generated
    /// process if any (its trace written into `work`).
    fn link(&self, work: &std::path::Path, seed: u64) -> Result<(LinkSpec, Option<bandwidth::RateTrace>), TemplateError> {
        let mut text = self.link_text.trim().to_string();
        let mut generated = None;
        let trace = if self.bandwidth_mean > 0.0 {
            let seconds = self.duration.as_secs() + TRACE_SLACK_S;
            let g = bandwidth::rate_process(self.bandwidth_mean, self.bandwidth_variance, self.bandwidth_floor, seconds, seed);
            let path = Self::generated_trace(work);
            std::fs::write(&path, &g.text).map_err(|e| TemplateError::io(format!("writing {}", path.display()), e))?;
            generated = Some(g);
            Some(path)
        } else {
            self.trace.clone()
        };
        if let Some(path) = trace {
            self.push_rate_source(&mut text, &path);
        }
        let spec = text.parse().map_err(|e| TemplateError::Invalid(format!("link with the rate source (`{text}`): {e}")))?;
        Ok((spec, generated))
    }

    /// Where [`Settings::link`] writes the generated rate process.
    fn generated_trace(work: &Path) -> PathBuf {
        work.join("bandwidth.trace")
    }

    /// The window the paths are ranked over.
    fn window(&self) -> Duration {
        paths::window(self.duration, TRACE_SLACK_S)
    }

    /// The second path, if any: `link2` (or `link`) with `trace2` and the
    /// queue on `a2b`, as path 1 gets its rate source.
    fn link2(&self) -> Result<Option<LinkSpec>, TemplateError> {
        let Some(trace2) = &self.trace2 else { return Ok(None) };
        let mut text = if self.link2_text.is_empty() { self.link_text.trim().to_string() } else { self.link2_text.clone() };
        self.push_rate_source(&mut text, trace2);
        let spec = text.parse().map_err(|e| {
            let from = if self.link2_text.is_empty() { " (link2 is empty, so it is link; give link2 without a rate)" } else { "" };
            TemplateError::Invalid(format!("link2 with trace2 (`{text}`){from}: {e}"))
        })?;
        Ok(Some(spec))
    }

    /// Each path's mean server-to-client rate over [`Settings::window`],
    /// Mbit/s (`None`: no rate limits it): path 1 from its generated process
    /// (written by [`Settings::link`] into `work`), its trace or `link`'s
    /// rate; path 2, if any, from `trace2`.
    fn path_means(&self, work: &Path, link: &LinkSpec) -> Result<Vec<Option<f64>>, TemplateError> {
        let window = self.window();
        let first = if self.bandwidth_mean > 0.0 {
            Some(paths::mean_of("bandwidth_mean", &Self::generated_trace(work), window)?)
        } else if let Some(t) = &self.trace {
            Some(paths::mean_of("trace", t, window)?)
        } else {
            link.rate().map(|r| r.bits_per_sec() as f64 / 1e6)
        };
        let mut means = vec![first];
        if let Some(t) = &self.trace2 {
            means.push(Some(paths::mean_of("trace2", t, window)?));
        }
        Ok(means)
    }

    /// The cut, if asked for: the link's delay, an outage trace both ways.
    fn cut(&self, work: &std::path::Path, link: &LinkSpec) -> Result<Option<Cut>, TemplateError> {
        if self.cut_at.is_zero() {
            return Ok(None);
        }
        // After the outage the queued packets drain at the link's rate (the
        // link itself is restored right after).
        let after = if self.bandwidth_mean > 0.0 {
            self.bandwidth_mean
        } else {
            link.rate().map(|r| r.bits_per_sec() as f64 / 1e6).unwrap_or(100.0)
        };
        let cut_ms = u64::try_from(self.cut_for.as_millis()).unwrap_or(u64::MAX);
        let path = work.join("cut.trace");
        std::fs::write(&path, bandwidth::outage(cut_ms, after, 60_000))
            .map_err(|e| TemplateError::io(format!("writing {}", path.display()), e))?;
        // Packets wait during the outage: the queue holds whatever the ends
        // send (a window or two plus retransmissions), far from this.
        let rtt_ms = link.rtt().as_secs_f64() * 1000.0;
        let text = format!("rtt={rtt_ms}ms,queue=10000p,trace={}", path.display());
        let during = text.parse().map_err(|e| TemplateError::Invalid(format!("the cut's link `{text}`: {e}")))?;
        Ok(Some(Cut {
            at_s: self.cut_at.as_secs_f64(),
            for_s: self.cut_for.as_secs_f64(),
            during,
            restore: link.clone(),
            applied: None,
            buffer_at_cut_s: None,
        }))
    }

    /// The player page's path and query.
    fn page_query(&self) -> String {
        format!(
            "player.html?player={}&abr={}&buffer={}&duration={}&mpd={}/{}",
            self.player,
            self.abr,
            self.buffer.as_secs_f64(),
            self.duration.as_secs_f64(),
            serve::CONTENT_DIR,
            self.manifest
        )
    }
}

#[cfg(test)]
mod tests;
