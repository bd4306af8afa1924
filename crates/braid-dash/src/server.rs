//! The static HTTP/1.1 server of the DASH study (issue 21, item 2): serves the manifest, the
//! segments and any other file under a root directory (e.g. the browser players' page), over
//! kernel TCP or over Braid connections (one HTTP/1.1 keep-alive connection per Braid connection,
//! through [`braid::transfer_stream::ConnectionStream`]), and logs one JSON line per request.
//!
//! Model: DASH players issue plain `GET`s for whole segments (SegmentTemplate addressing, no
//! byte ranges), cross-origin from the player page, so the server answers `GET`/`HEAD` with the
//! right MIME types (ISO/IEC 23009-1 Annex C: `application/dash+xml`, `video/iso.segment`) and
//! `Access-Control-Allow-Origin: *`. Paths never leave the root: `..` components are refused and
//! the resolved file must lie under the canonical root (no symlink escape).
//!
//! The response body goes out in [`CHUNK`]-sized frames; hyper asks for the next frame only once
//! the previous one is written, so the logged `duration_s` (from the request to the last frame
//! handed to the transport) tracks the transfer time up to the transport's send buffer.

use std::convert::Infallible;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

/// Body frame size: small enough that the log's duration follows the transfer, large enough to
/// cost nothing per frame.
pub const CHUNK: usize = 64 << 10;

/// Why the server stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The root directory is unusable.
    #[error("--root {path}: {reason}")]
    Root {
        /// The root given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The request log cannot be written.
    #[error("request log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Accepting connections failed for good.
    #[error("accepting connections: {0}")]
    Accept(String),
}

/// One served request, as logged (one JSON object per line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Seconds since the server started, when the request arrived.
    pub t_s: f64,
    /// Unix time of the request, seconds (to align with other logs).
    pub unix_s: f64,
    /// The request path as sent.
    pub path: String,
    /// The response status.
    pub status: u16,
    /// Body bytes handed to the transport.
    pub bytes: u64,
    /// Seconds from the request to the last body byte handed to the transport (or to the abort).
    pub duration_s: f64,
    /// Whether the whole body was sent (false: the client went away first).
    pub complete: bool,
}

/// A JSON-lines request log shared by all connections of a server.
#[derive(Debug)]
pub struct RequestLog {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl RequestLog {
    /// Creates (truncates) the log file at `path`.
    pub fn create(path: &Path) -> Result<RequestLog, ServerError> {
        let file = std::fs::File::create(path).map_err(|source| ServerError::Log { path: path.to_path_buf(), source })?;
        Ok(RequestLog { path: path.to_path_buf(), file: Mutex::new(file) })
    }

    /// Appends one record; a failed write is reported through `tracing` (serving goes on).
    pub fn record(&self, record: &RequestRecord) {
        let Ok(mut line) = serde_json::to_vec(record) else { return };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::warn!(log = %self.path.display(), error = %e, "cannot write the request log");
        }
    }

    /// Reads a log back.
    pub fn read(path: &Path) -> std::io::Result<Vec<RequestRecord>> {
        let text = std::fs::read_to_string(path)?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
            .collect()
    }
}

/// What every connection of one server shares.
#[derive(Debug)]
struct Site {
    root: PathBuf,
    log: Option<RequestLog>,
    started: Instant,
}

impl Site {
    fn open(root: PathBuf, log: Option<PathBuf>) -> Result<Arc<Site>, ServerError> {
        let root = std::fs::canonicalize(&root).map_err(|e| ServerError::Root { path: root.clone(), reason: e.to_string() })?;
        if !root.is_dir() {
            return Err(ServerError::Root { path: root, reason: "not a directory".into() });
        }
        let log = log.as_deref().map(RequestLog::create).transpose()?;
        Ok(Arc::new(Site { root, log, started: Instant::now() }))
    }
}

/// Serves `root` over HTTP/1.1 on TCP connections from `listener` until accepting fails for good.
pub async fn serve_tcp(listener: tokio::net::TcpListener, root: PathBuf, log: Option<PathBuf>) -> Result<(), ServerError> {
    let site = Site::open(root, log)?;
    let mut failures = 0u32;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                failures = 0;
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, Arc::clone(&site)));
            }
            // Out of descriptors and the like: back off and retry, give up if it persists.
            Err(e) => {
                failures += 1;
                if failures > 100 {
                    return Err(ServerError::Accept(e.to_string()));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves `root` over HTTP/1.1 on every Braid connection `endpoint` accepts (each carried by a
/// [`braid::transfer_stream::ConnectionStream`]), until the endpoint closes.
pub async fn serve_braid(endpoint: braid::Endpoint, root: PathBuf, log: Option<PathBuf>) -> Result<(), ServerError> {
    serve_braid_scheduled(endpoint, root, log, None).await
}

/// [`serve_braid`] with a ProgMP scheduler for multipath connections: the server sends the
/// segments, so its scheduler decides which path carries them.
pub async fn serve_braid_scheduled(
    endpoint: braid::Endpoint,
    root: PathBuf,
    log: Option<PathBuf>,
    scheduler: Option<Arc<braid::Program>>,
) -> Result<(), ServerError> {
    let site = Site::open(root, log)?;
    while let Some(conn) = endpoint.accept().await {
        if let Some(program) = &scheduler {
            if let Err(e) = conn.set_scheduler(Arc::clone(program)) {
                tracing::warn!(error = %e, "cannot set the scheduler of an accepted connection");
            }
        }
        let stream = braid::transfer_stream::ConnectionStream::new(conn);
        tokio::spawn(serve_connection(stream, Arc::clone(&site)));
    }
    Ok(())
}

/// Serves `root` on one already-open byte stream (used by both transports and by tests).
async fn serve_connection<S>(stream: S, site: Arc<Site>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let site = Arc::clone(&site);
        async move { Ok::<_, Infallible>(respond(&site, req).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

/// The MIME type of a file name.
pub fn mime_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("mpd") => "application/dash+xml",
        Some("m4s") => "video/iso.segment",
        Some("mp4") | Some("m4v") => "video/mp4",
        Some("m4a") => "audio/mp4",
        Some("html") | Some("htm") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("map") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

/// The file under `root` that the request path names, or `None` if it would leave the root or is
/// not a plain relative path. `%XX` escapes are decoded; the query string is ignored.
pub fn resolve(root: &Path, request_path: &str) -> Option<PathBuf> {
    let path = request_path.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode(path)?;
    let mut out = root.to_path_buf();
    for part in decoded.split('/') {
        match part {
            "" | "." => continue,
            ".." => return None,
            p if p.contains('\\') || p.contains('\0') => return None,
            p => out.push(p),
        }
    }
    Some(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

async fn respond(site: &Arc<Site>, req: Request<Incoming>) -> Response<LoggedBody> {
    let arrived = Instant::now();
    let path = req.uri().path().to_string();
    let head = req.method() == Method::HEAD;
    let (status, body, mime) = if req.method() == Method::OPTIONS {
        (StatusCode::NO_CONTENT, Bytes::new(), "text/plain")
    } else if req.method() != Method::GET && !head {
        (StatusCode::METHOD_NOT_ALLOWED, Bytes::from_static(b"only GET and HEAD\n"), "text/plain")
    } else {
        match load(&site.root, &path).await {
            Ok((bytes, file)) => (StatusCode::OK, bytes, mime_type(&file)),
            Err(status) => (status, Bytes::from(format!("{status}\n")), "text/plain"),
        }
    };
    let len = body.len();
    let logger = Logger {
        site: Arc::clone(site),
        arrived,
        path,
        status: status.as_u16(),
        t_s: arrived.duration_since(site.started).as_secs_f64(),
        unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
    };
    let body = LoggedBody { rest: if head { Bytes::new() } else { body }, sent: 0, logger: Some(logger) };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(mime));
    h.insert(hyper::header::CONTENT_LENGTH, hyper::header::HeaderValue::from(len));
    h.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, hyper::header::HeaderValue::from_static("*"));
    h.insert(hyper::header::ACCESS_CONTROL_ALLOW_METHODS, hyper::header::HeaderValue::from_static("GET, HEAD, OPTIONS"));
    h.insert(hyper::header::ACCESS_CONTROL_ALLOW_HEADERS, hyper::header::HeaderValue::from_static("*"));
    // Every experiment must fetch from the network, never from a cache.
    h.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    resp
}

/// The file's bytes, or the status to answer with.
async fn load(root: &Path, request_path: &str) -> Result<(Bytes, PathBuf), StatusCode> {
    let mut file = resolve(root, request_path).ok_or(StatusCode::FORBIDDEN)?;
    if file.is_dir() {
        file.push("index.html");
    }
    // A symlink may point outside the root: check where the file really is.
    let real = tokio::fs::canonicalize(&file).await.map_err(|_| StatusCode::NOT_FOUND)?;
    if !real.starts_with(root) {
        return Err(StatusCode::FORBIDDEN);
    }
    match tokio::fs::read(&real).await {
        Ok(bytes) => Ok((Bytes::from(bytes), real)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StatusCode::NOT_FOUND),
        Err(_) => Err(StatusCode::FORBIDDEN),
    }
}

/// Writes a request's log line once its body is done or dropped.
#[derive(Debug)]
struct Logger {
    site: Arc<Site>,
    arrived: Instant,
    path: String,
    status: u16,
    t_s: f64,
    unix_s: f64,
}

impl Logger {
    fn finish(self, bytes: u64, complete: bool) {
        if let Some(log) = &self.site.log {
            log.record(&RequestRecord {
                t_s: self.t_s,
                unix_s: self.unix_s,
                path: self.path,
                status: self.status,
                bytes,
                duration_s: self.arrived.elapsed().as_secs_f64(),
                complete,
            });
        }
    }
}

/// A response body sent in [`CHUNK`]-sized frames that logs the request when it ends.
#[derive(Debug)]
struct LoggedBody {
    rest: Bytes,
    sent: u64,
    logger: Option<Logger>,
}

impl Body for LoggedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.rest.is_empty() {
            let sent = self.sent;
            if let Some(logger) = self.logger.take() {
                logger.finish(sent, true);
            }
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(CHUNK);
        let frame = self.rest.split_to(n);
        self.sent += n as u64;
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        // Not before the logger ran: hyper stops polling a body that says it ended.
        self.rest.is_empty() && self.logger.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        // The client went away before the end (or hyper finished without a last poll).
        if let Some(logger) = self.logger.take() {
            let complete = self.rest.is_empty();
            logger.finish(self.sent, complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn paths_never_leave_the_root() {
        let root = Path::new("/srv/dash");
        assert_eq!(resolve(root, "/a/b.m4s"), Some(root.join("a/b.m4s")));
        assert_eq!(resolve(root, "/a%20b.mpd?x=1"), Some(root.join("a b.mpd")));
        assert_eq!(resolve(root, "/../etc/passwd"), None);
        assert_eq!(resolve(root, "/a/%2e%2e/%2e%2e/etc"), None);
        assert_eq!(resolve(root, "/a\\..\\b"), None);
        assert_eq!(resolve(root, "/%zz"), None);
    }

    #[test]
    fn mime_types_follow_the_dash_standard() {
        assert_eq!(mime_type(Path::new("manifest.mpd")), "application/dash+xml");
        assert_eq!(mime_type(Path::new("chunk-1.m4s")), "video/iso.segment");
        assert_eq!(mime_type(Path::new("dash.all.min.js")), "text/javascript; charset=utf-8");
        assert_eq!(mime_type(Path::new("x.bin")), "application/octet-stream");
    }

    async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn serves_files_with_cors_refuses_escapes_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("manifest.mpd"), "<MPD/>").unwrap();
        std::fs::write(dir.path().join("secret"), "no").unwrap();
        let big = vec![7u8; 3 * CHUNK + 5];
        std::fs::write(root.join("seg.m4s"), &big).unwrap();
        let log = dir.path().join("log.jsonl");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_tcp(listener, root.clone(), Some(log.clone())));

        let r = raw_get(addr, "/manifest.mpd").await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains("content-type: application/dash+xml"), "{r}");
        assert!(r.contains("access-control-allow-origin: *"), "{r}");
        assert!(r.ends_with("<MPD/>"));
        let r = raw_get(addr, "/seg.m4s").await;
        assert!(r.contains(&format!("content-length: {}", big.len())), "{r}");
        assert!(raw_get(addr, "/missing.m4s").await.starts_with("HTTP/1.1 404"));
        assert!(raw_get(addr, "/../secret").await.starts_with("HTTP/1.1 403"));
        assert!(raw_get(addr, "/%2e%2e/secret").await.starts_with("HTTP/1.1 403"));
        // A symlink out of the root is refused too.
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        assert!(raw_get(addr, "/link").await.starts_with("HTTP/1.1 403"));
        server.abort();

        let records = RequestLog::read(&log).unwrap();
        let paths: Vec<_> = records.iter().map(|r| (r.path.as_str(), r.status)).collect();
        assert_eq!(paths[..4], [("/manifest.mpd", 200), ("/seg.m4s", 200), ("/missing.m4s", 404), ("/../secret", 403)]);
        assert_eq!(records[1].bytes, big.len() as u64);
        assert!(records[1].complete && records[1].duration_s >= 0.0);
        assert!(records.windows(2).all(|w| w[0].t_s <= w[1].t_s));
    }
}
