//! The tokio driver of Braid's DASH client (issue 21, item 4): fetches a manifest and its
//! segments over HTTP/1.1 on kernel TCP, on a Braid connection, or on a multipath Braid
//! connection (ProgMP scheduler chosen by the server, which sends the data), lets an
//! [`crate::abr`] algorithm pick each segment's representation, and feeds the arrivals to the
//! virtual [`Player`] so it reports the same metrics as the browser players.
//!
//! Segments are fetched one at a time on one keep-alive connection, as dash.js and Shaka do for
//! a single adaptation set; the audio segment of the same number (if the manifest has audio)
//! follows its video segment and counts in the throughput sample. A video segment whose download
//! the network can no longer carry in time is abandoned and fetched again lower
//! ([`crate::abandon`], as dash.js does), on a new connection (HTTP/1.1 cannot cancel a response).
//! A request fails when nothing arrives for its timeout, the session has a wall-clock limit, and a
//! segment that is missing or not ISO-BMFF ends the session with an error naming it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::abandon::{AbandonRule, Download};
use crate::abr::{AbrInput, AbrKind};
use crate::http::{HttpClient, HttpError, HttpUrl, Progress};
use crate::mpd::{Manifest, MpdError};
use crate::player::Player;
use crate::qoe::{summarize, PlaybackTrace, QoeSummary};

/// How the client reaches the server.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Kernel TCP to the URL's host and port.
    Tcp,
    /// One Braid connection to the URL's host and port (UDP).
    Braid {
        /// Endpoint configuration (security, congestion control).
        config: braid::EndpointConfig,
    },
    /// A multipath Braid connection: one path per `(local address, server address)`.
    Multipath {
        /// Endpoint configuration (security, congestion control).
        config: braid::EndpointConfig,
        /// The paths; the first carries the handshake.
        paths: Vec<(IpAddr, SocketAddr)>,
        /// Scheduler of what the client sends (requests); the server's scheduler decides the
        /// segments' paths.
        scheduler: Option<Arc<braid::Program>>,
    },
}

impl Transport {
    /// `tcp`, `braid` or `multipath`.
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Braid { .. } => "braid",
            Transport::Multipath { .. } => "multipath",
        }
    }
}

/// One playback session.
#[derive(Debug, Clone)]
pub struct PlayConfig {
    /// The manifest's URL, `http://HOST:PORT/PATH` (for Braid, HOST:PORT is the server's UDP address).
    pub url: String,
    /// How to reach the server.
    pub transport: Transport,
    /// The adaptation algorithm.
    pub abr: AbrKind,
    /// Buffer target, seconds of media.
    pub buffer_target_s: f64,
    /// Wall-clock limit of the session from its start (`None`: play to the end).
    pub max_duration_s: Option<f64>,
    /// How long an HTTP request may receive nothing (no head, no body bytes) before it fails.
    pub request_timeout: Duration,
    /// When to abandon a video segment's download (`None`: never; wait it out).
    pub abandon: Option<AbandonRule>,
    /// Bound on opening the connection.
    pub connect_timeout: Duration,
    /// Fetch the audio segments too (as browsers do).
    pub audio: bool,
}

impl PlayConfig {
    /// Defaults: throughput ABR, 30 s buffer, no limit, 30 s without data fails a request,
    /// dash.js's abandonment rule, 10 s to connect, audio on.
    pub fn new(url: impl Into<String>, transport: Transport) -> PlayConfig {
        PlayConfig {
            url: url.into(),
            transport,
            abr: AbrKind::Throughput,
            buffer_target_s: 30.0,
            max_duration_s: None,
            request_timeout: Duration::from_secs(30),
            abandon: Some(AbandonRule::default()),
            connect_timeout: Duration::from_secs(10),
            audio: true,
        }
    }
}

/// One downloaded segment.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentRecord {
    /// Segment index (0-based).
    pub index: usize,
    /// Representation id chosen.
    pub representation: String,
    /// Its bitrate, kbit/s.
    pub kbps: f64,
    /// Bytes fetched for it (video, its init segment if new, audio).
    pub bytes: u64,
    /// When it was requested, seconds since the session began.
    pub requested_s: f64,
    /// Seconds the downloads took.
    pub download_s: f64,
    /// Measured throughput, kbit/s.
    pub throughput_kbps: f64,
    /// Buffer level when it was requested, seconds.
    pub buffer_s: f64,
    /// Downloads of this segment abandoned before this one, each at a higher representation.
    pub abandoned: Vec<AbandonRecord>,
}

/// A segment download given up because the network could not carry it in time.
#[derive(Debug, Clone, Serialize)]
pub struct AbandonRecord {
    /// The representation it was fetching.
    pub representation: String,
    /// Its bitrate, kbit/s.
    pub kbps: f64,
    /// Body bytes received.
    pub bytes: u64,
    /// Seconds it ran.
    pub elapsed_s: f64,
}

/// One path of a Braid connection at the end of the session.
#[derive(Debug, Clone, Serialize)]
pub struct PathRecord {
    /// Local address.
    pub local: Option<SocketAddr>,
    /// Server address.
    pub remote: SocketAddr,
    /// UDP payload bytes received on it.
    pub bytes_received: u64,
    /// Smoothed round-trip time, ms.
    pub srtt_ms: f64,
}

/// The outcome of a session.
#[derive(Debug, Clone, Serialize)]
pub struct PlayReport {
    /// What the virtual player saw.
    pub trace: PlaybackTrace,
    /// Its metrics.
    pub summary: QoeSummary,
    /// Every downloaded segment, in order.
    pub segments: Vec<SegmentRecord>,
    /// `tcp`, `braid` or `multipath`.
    pub transport: &'static str,
    /// The ABR algorithm.
    pub abr: &'static str,
    /// Session length, seconds.
    pub wall_s: f64,
    /// Video bitrates of the manifest, kbit/s ascending.
    pub ladder_kbps: Vec<f64>,
    /// Nominal segment length, seconds.
    pub segment_s: f64,
    /// Why the session stopped: `ended`, `time limit`.
    pub stopped: &'static str,
    /// The Braid connection's paths (empty over TCP); after an abandonment reopened the
    /// connection, each path's bytes summed over the connections.
    pub paths: Vec<PathRecord>,
    /// Segment downloads abandoned (see [`SegmentRecord::abandoned`]).
    pub abandons: usize,
}

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    /// The URL is unusable.
    #[error(transparent)]
    Url(HttpError),
    /// The connection could not be opened.
    #[error("cannot connect to {to} over {transport}: {error}")]
    Connect {
        /// The server address.
        to: String,
        /// The transport.
        transport: &'static str,
        /// Why.
        error: String,
    },
    /// The manifest could not be fetched.
    #[error("manifest: {0}")]
    ManifestFetch(HttpError),
    /// The manifest is malformed.
    #[error("manifest {url}: {error}")]
    Manifest {
        /// Its URL.
        url: String,
        /// What is wrong.
        error: MpdError,
    },
    /// A segment could not be fetched.
    #[error("segment {index}: {error}")]
    Segment {
        /// Its index.
        index: usize,
        /// Why.
        error: HttpError,
    },
    /// A segment is not an ISO base media file.
    #[error("segment {path}: not an ISO-BMFF media segment ({problem})")]
    BadSegment {
        /// Its path.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// A byte stream the client can speak HTTP over.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// The open connection: the HTTP client and, for Braid, the connection (for path statistics).
struct Link {
    http: HttpClient,
    braid: Option<(braid::Endpoint, braid::Connection)>,
}

async fn open(config: &PlayConfig, url: &HttpUrl) -> Result<Link, PlayError> {
    let transport = config.transport.name();
    let to = url.authority();
    let fail = |error: String| PlayError::Connect { to: to.clone(), transport, error };
    let resolve = async {
        let mut addrs = tokio::net::lookup_host(to.as_str()).await.map_err(|e| fail(e.to_string()))?;
        addrs.next().ok_or_else(|| fail("the host name has no address".into()))
    };
    let connecting = async {
        let (stream, braid): (Box<dyn StreamBox>, _) = match &config.transport {
            Transport::Tcp => {
                let addr = resolve.await?;
                let s = tokio::net::TcpStream::connect(addr).await.map_err(|e| fail(e.to_string()))?;
                let _ = s.set_nodelay(true);
                (Box::new(s), None)
            }
            Transport::Braid { config: cfg } => {
                let addr = resolve.await?;
                let mut cfg = cfg.clone();
                cfg.accept_incoming = false;
                let ep = braid::Endpoint::bind_with(unspecified_for(addr), cfg).map_err(|e| fail(e.to_string()))?;
                let conn = ep.connect(addr).await.map_err(|e| fail(e.to_string()))?;
                (Box::new(braid::transfer_stream::ConnectionStream::new(conn.clone())), Some((ep, conn)))
            }
            Transport::Multipath { config: cfg, paths, scheduler } => {
                let first = paths.first().ok_or_else(|| fail("no paths given".into()))?;
                let mut cfg = cfg.clone();
                cfg.accept_incoming = false;
                let ep = braid::Endpoint::bind_with(unspecified_for(first.1), cfg).map_err(|e| fail(e.to_string()))?;
                let conn = ep.connect_multipath(paths).await.map_err(|e| fail(e.to_string()))?;
                if let Some(p) = scheduler {
                    conn.set_scheduler(p.clone()).map_err(|e| fail(e.to_string()))?;
                }
                (Box::new(braid::transfer_stream::ConnectionStream::new(conn.clone())), Some((ep, conn)))
            }
        };
        let http = HttpClient::handshake(stream, &to, config.request_timeout).await.map_err(|e| fail(e.to_string()))?;
        Ok(Link { http, braid })
    };
    match tokio::time::timeout(config.connect_timeout, connecting).await {
        Ok(r) => r,
        Err(_) => Err(fail(format!("no connection within {} s", config.connect_timeout.as_secs_f64()))),
    }
}

/// Boxed streams (TCP or Braid) behind one type.
trait StreamBox: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: Stream> StreamBox for T {}

/// A wildcard address of `peer`'s family (several local path addresses need one).
fn unspecified_for(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// Checks that `body` is a sequence of ISO-BMFF boxes (ISO/IEC 14496-12 §4.2) that tiles it exactly.
pub fn check_segment(body: &[u8]) -> Result<(), String> {
    if body.is_empty() {
        return Err("empty body".into());
    }
    let mut at = 0usize;
    while at < body.len() {
        let head = body.get(at..at + 8).ok_or_else(|| format!("truncated box header at byte {at}"))?;
        let size32 = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as u64;
        let kind = &head[4..8];
        if !kind.iter().all(|c| c.is_ascii_alphanumeric() || *c == b' ') {
            return Err(format!("box type {kind:02x?} at byte {at} is not a four-character code"));
        }
        let size = match size32 {
            0 => (body.len() - at) as u64,
            1 => {
                let large = body.get(at + 8..at + 16).ok_or_else(|| format!("truncated 64-bit box size at byte {at}"))?;
                u64::from_be_bytes(large.try_into().map_err(|_| "bad box size".to_string())?)
            }
            s => s,
        };
        if size < 8 || size > (body.len() - at) as u64 {
            return Err(format!("box `{}` at byte {at} claims {size} bytes, {} remain", String::from_utf8_lossy(kind), body.len() - at));
        }
        at += size as usize;
    }
    Ok(())
}

/// Plays the manifest at `config.url` (see the module documentation).
pub async fn play(config: PlayConfig) -> Result<PlayReport, PlayError> {
    let start = Instant::now();
    let deadline = config.max_duration_s.map(|d| start + Duration::from_secs_f64(d.clamp(0.0, 1e7)));
    let now_s = || start.elapsed().as_secs_f64();
    let url = HttpUrl::parse(&config.url).map_err(PlayError::Url)?;
    let mut link = open(&config, &url).await?;
    let text = link.http.get(&url.path).await.map_err(PlayError::ManifestFetch)?;
    let manifest_err = |error| PlayError::Manifest { url: config.url.clone(), error };
    let xml = std::str::from_utf8(&text.body).map_err(|_| manifest_err(MpdError::Xml("not UTF-8".into())))?;
    let manifest = Manifest::parse(xml).map_err(manifest_err)?;
    let video = manifest.video().map_err(manifest_err)?.clone();
    let audio = if config.audio { manifest.audio().and_then(|a| a.representations.first().cloned()) } else { None };
    let ladder: Vec<f64> = video.representations.iter().map(|r| r.kbps()).collect();
    let count = video.segment_count();
    let segment_s = video.representations[0].segments.first().map(|s| s.duration_s).unwrap_or(0.0);
    let total_media: f64 = video.representations[0].segments.iter().take(count).map(|s| s.duration_s).sum();
    let mut player = Player::new(config.buffer_target_s, total_media);
    let mut abr = config.abr.build();
    let mut throughputs: Vec<f64> = Vec::new();
    let mut segments: Vec<SegmentRecord> = Vec::new();
    let mut inited = vec![false; video.representations.len()];
    let mut audio_inited = false;
    let mut last: Option<usize> = None;
    let mut next = 0usize;
    // After an abandonment: the representation to fetch the same segment at, and what was given up.
    let mut forced: Option<usize> = None;
    let mut abandoned: Vec<AbandonRecord> = Vec::new();
    let mut abandons = 0usize;
    let mut earlier_paths: Vec<PathRecord> = Vec::new();
    let mut stopped = "ended";
    let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);

    'session: while next < count {
        if past_deadline() {
            stopped = "time limit";
            break;
        }
        player.advance(now_s());
        let wait = player.fetch_delay_s();
        if wait > 0.0 {
            let mut until = Instant::now() + Duration::from_secs_f64(wait);
            if let Some(d) = deadline {
                until = until.min(d);
            }
            tokio::time::sleep_until(until.into()).await;
            continue;
        }
        let buffer_s = player.buffer_s();
        let input = AbrInput {
            ladder_kbps: &ladder,
            buffer_s,
            buffer_target_s: config.buffer_target_s,
            segment_s: video.representations[0].segments[next].duration_s,
            last,
            throughput_kbps: &throughputs,
            segments_left: count - next,
        };
        let m = forced.take().unwrap_or_else(|| abr.choose(&input)).min(ladder.len() - 1);
        let rep = &video.representations[m];
        let segment_duration_s = video.representations[0].segments[next].duration_s;
        let mut paths = Vec::new();
        if !inited[m] {
            if let Some(init) = &rep.init {
                paths.push(url.resolve(init));
            }
        }
        let media = url.resolve(&rep.media_path(next).unwrap_or_default());
        paths.push(media.clone());
        if let Some(a) = &audio {
            if !audio_inited {
                if let Some(init) = &a.init {
                    paths.push(url.resolve(init));
                }
            }
            if let Some(p) = a.media_path(next) {
                paths.push(url.resolve(&p));
            }
        }
        let requested_s = now_s();
        let t0 = Instant::now();
        let mut bytes = 0u64;
        for path in &paths {
            // Only the video segment may be abandoned: init segments and audio are small.
            let rule = config.abandon.filter(|_| *path == media && m > 0);
            let guessed_bytes = (rep.kbps() * 1000.0 * segment_duration_s / 8.0) as u64;
            let mut replacement = None;
            let watch = |p: &Progress| {
                let Some(rule) = rule else { return true };
                let download = Download {
                    representation: m,
                    bytes: p.bytes,
                    total_bytes: p.content_length.unwrap_or(guessed_bytes),
                    elapsed_s: p.elapsed_s,
                    segment_s: segment_duration_s,
                    buffer_s,
                };
                replacement = rule.replacement(&ladder, &download);
                replacement.is_none()
            };
            let fetch = link.http.get_watched(path, watch);
            let got = match deadline {
                Some(d) => match tokio::time::timeout_at(d.into(), fetch).await {
                    Ok(r) => r,
                    Err(_) => {
                        stopped = "time limit";
                        break 'session;
                    }
                },
                None => fetch.await,
            };
            let got = match got {
                Err(HttpError::Abandoned { bytes: got_bytes, elapsed_s, .. }) => {
                    // What it carried is a throughput sample like any other.
                    throughputs.push((bytes + got_bytes) as f64 * 8.0 / 1000.0 / t0.elapsed().as_secs_f64().max(1e-6));
                    tracing::debug!(segment = next, rep = %rep.id, got_bytes, elapsed_s, "segment download abandoned");
                    abandoned.push(AbandonRecord { representation: rep.id.clone(), kbps: rep.kbps(), bytes: got_bytes, elapsed_s });
                    abandons += 1;
                    forced = replacement;
                    earlier_paths.extend(path_records(&link));
                    close(link).await;
                    link = open(&config, &url).await?;
                    continue 'session;
                }
                other => other,
            };
            let got = got.map_err(|error| PlayError::Segment { index: next, error })?;
            check_segment(&got.body).map_err(|problem| PlayError::BadSegment { path: path.clone(), problem })?;
            bytes += got.body.len() as u64;
        }
        let download_s = t0.elapsed().as_secs_f64().max(1e-6);
        inited[m] = true;
        audio_inited = true;
        let throughput_kbps = bytes as f64 * 8.0 / 1000.0 / download_s;
        throughputs.push(throughput_kbps);
        let seg = video.representations[0].segments[next];
        player.segment_arrived(now_s(), seg.duration_s, rep.kbps());
        segments.push(SegmentRecord {
            index: next,
            representation: rep.id.clone(),
            kbps: rep.kbps(),
            bytes,
            requested_s,
            download_s,
            throughput_kbps,
            buffer_s,
            abandoned: std::mem::take(&mut abandoned),
        });
        tracing::debug!(segment = next, rep = %rep.id, kbps = rep.kbps(), throughput_kbps, buffer_s, "segment fetched");
        last = Some(m);
        next += 1;
    }
    // Everything downloaded: nothing else can happen, so the rest of playback (up to the time
    // limit) is computed rather than waited for.
    let mut end_s = now_s();
    if stopped == "ended" {
        end_s += player.buffer_s();
        if let Some(limit) = config.max_duration_s {
            if end_s > limit {
                end_s = limit;
                stopped = "time limit";
            }
        }
    }
    let mut paths = path_records(&link);
    merge_paths(&mut paths, earlier_paths);
    close(link).await;
    let trace = player.finish(end_s);
    let summary = summarize(&trace);
    Ok(PlayReport {
        trace,
        summary,
        segments,
        transport: config.transport.name(),
        abr: config.abr.as_str(),
        wall_s: end_s,
        ladder_kbps: ladder,
        segment_s,
        stopped,
        paths,
        abandons,
    })
}

/// The Braid connection's paths now (none over TCP).
fn path_records(link: &Link) -> Vec<PathRecord> {
    match &link.braid {
        Some((_, conn)) => conn
            .paths()
            .iter()
            .map(|p| PathRecord {
                local: p.local,
                remote: p.remote,
                bytes_received: p.bytes_received,
                srtt_ms: p.smoothed_rtt.as_secs_f64() * 1e3,
            })
            .collect(),
        None => Vec::new(),
    }
}

/// Adds the bytes of earlier connections' paths to the same (local, remote) path of the last
/// connection (whose smoothed RTT is kept); a path only an earlier connection had is appended.
fn merge_paths(last: &mut Vec<PathRecord>, earlier: Vec<PathRecord>) {
    for e in earlier {
        match last.iter_mut().find(|p| p.local == e.local && p.remote == e.remote) {
            Some(p) => p.bytes_received += e.bytes_received,
            None => last.push(e),
        }
    }
}

/// Closes the link's Braid connection and endpoint (waiting at most a second for the close to
/// be sent); a TCP link closes when dropped.
async fn close(mut link: Link) {
    if let Some((ep, conn)) = link.braid.take() {
        drop(link);
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.close()).await;
        ep.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_must_be_iso_bmff() {
        let mut ok = Vec::new();
        ok.extend_from_slice(&16u32.to_be_bytes());
        ok.extend_from_slice(b"styp");
        ok.extend_from_slice(&[0; 8]);
        ok.extend_from_slice(&8u32.to_be_bytes());
        ok.extend_from_slice(b"mdat");
        assert_eq!(check_segment(&ok), Ok(()));
        assert!(check_segment(b"").unwrap_err().contains("empty"));
        assert!(check_segment(b"<html>404</html>").unwrap_err().contains("four-character"));
        let mut short = ok.clone();
        short.truncate(20);
        assert!(check_segment(&short).is_err());
    }
}
