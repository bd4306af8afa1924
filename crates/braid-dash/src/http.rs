//! A minimal HTTP/1.1 `GET` client over any byte stream (kernel TCP, a Braid connection's
//! [`braid::transfer_stream::ConnectionStream`], a multipath Braid connection), built on hyper's
//! connection-level client: one keep-alive connection, requests in sequence, timed to their first
//! and last body byte (the ABR client's throughput samples). A request fails when nothing arrives
//! for the timeout; one that keeps arriving, however slowly, is not cut short (the player stalls,
//! and that is what the experiment measures), unless its watcher abandons it.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL is not of the form `http://HOST[:PORT]/PATH`.
    #[error("URL `{url}`: {problem}; expected http://HOST[:PORT]/PATH")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The HTTP handshake or request failed at the protocol level.
    #[error("GET {path}: {error}")]
    Protocol {
        /// The request path.
        path: String,
        /// hyper's description.
        error: String,
    },
    /// Nothing arrived for the timeout (no response head, or no body bytes since the last).
    #[error("GET {path}: nothing received for {secs} s")]
    Timeout {
        /// The request path.
        path: String,
        /// The timeout.
        secs: f64,
    },
    /// The watcher gave up on the download ([`HttpClient::get_watched`]); the connection cannot
    /// carry another request (HTTP/1.1 has no way to cancel a response but closing it).
    #[error("GET {path}: abandoned after {bytes} bytes")]
    Abandoned {
        /// The request path.
        path: String,
        /// Body bytes received before.
        bytes: u64,
        /// Seconds since the request was sent.
        elapsed_s: f64,
    },
    /// The server answered with an error status.
    #[error("GET {path}: HTTP status {status}")]
    Status {
        /// The request path.
        path: String,
        /// The status code.
        status: u16,
    },
}

/// An `http://` URL split into what the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host name or IP address (without IPv6 brackets).
    pub host: String,
    /// Port (80 if absent).
    pub port: u16,
    /// Absolute path, with the query if any.
    pub path: String,
}

impl HttpUrl {
    /// Parses `http://HOST[:PORT][/PATH]`.
    pub fn parse(url: &str) -> Result<HttpUrl, HttpError> {
        let bad = |problem| HttpError::Url { url: url.to_string(), problem };
        let rest = url.strip_prefix("http://").ok_or_else(|| bad("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed `[` in an IPv6 host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("junk after the IPv6 host")),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| bad("the port is not a number 0..=65535"))?,
            None => 80,
        };
        if host.is_empty() || host.contains(['@', ' ']) {
            return Err(bad("no usable host"));
        }
        Ok(HttpUrl { host: host.to_string(), port, path: path.to_string() })
    }

    /// `HOST:PORT` for the `Host` header and for name resolution.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path of `relative` resolved against this URL's path (RFC 3986 §5.2, for the relative
    /// references manifests hold: segment names, with or without a leading `/`).
    pub fn resolve(&self, relative: &str) -> String {
        if relative.starts_with('/') {
            return relative.to_string();
        }
        let base = self.path.split('?').next().unwrap_or("/");
        let dir = match base.rfind('/') {
            Some(i) => &base[..=i],
            None => "/",
        };
        format!("{dir}{relative}")
    }
}

/// One fetched resource.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The body.
    pub body: Bytes,
    /// Seconds from sending the request to the response head (≈ one round trip plus server time).
    pub first_byte_s: f64,
    /// Seconds from sending the request to the last body byte.
    pub total_s: f64,
}

/// How a download is going, shown to the watcher of [`HttpClient::get_watched`] at each body chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Body bytes received so far.
    pub bytes: u64,
    /// The body's length from `Content-Length`, if the server sent it.
    pub content_length: Option<u64>,
    /// Seconds since the request was sent.
    pub elapsed_s: f64,
}

/// An HTTP/1.1 connection over one byte stream.
#[derive(Debug)]
pub struct HttpClient {
    sender: SendRequest<Empty<Bytes>>,
    host: String,
    timeout: Duration,
    driver: tokio::task::JoinHandle<()>,
}

impl HttpClient {
    /// Runs the HTTP/1.1 handshake on `stream`; `host` is the `Host` header, `timeout` bounds each
    /// wait for data (the response head, then each body chunk).
    pub async fn handshake<S>(stream: S, host: &str, timeout: Duration) -> Result<HttpClient, HttpError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| HttpError::Protocol { path: "(handshake)".into(), error: e.to_string() })?;
        let driver = tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP client connection ended with an error");
            }
        });
        Ok(HttpClient { sender, host: host.to_string(), timeout, driver })
    }

    /// `GET path`: the body on status 200, an error otherwise (never waits longer than the
    /// timeout for the next data).
    pub async fn get(&mut self, path: &str) -> Result<Fetched, HttpError> {
        self.get_watched(path, |_| true).await
    }

    /// [`get`](Self::get), showing the download's [`Progress`] to `keep_going` at each body
    /// chunk; when it returns `false` the download stops with [`HttpError::Abandoned`] and this
    /// connection is done (open a new one).
    pub async fn get_watched(
        &mut self,
        path: &str,
        mut keep_going: impl FnMut(&Progress) -> bool,
    ) -> Result<Fetched, HttpError> {
        let timeout = self.timeout;
        let timed_out = || HttpError::Timeout { path: path.to_string(), secs: timeout.as_secs_f64() };
        let proto = |e: &dyn std::fmt::Display| HttpError::Protocol { path: path.to_string(), error: e.to_string() };
        let req = Request::get(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::USER_AGENT, "braid-dash")
            .body(Empty::<Bytes>::new())
            .map_err(|e| proto(&e))?;
        tokio::time::timeout(timeout, self.sender.ready()).await.map_err(|_| timed_out())?.map_err(|e| proto(&e))?;
        let start = Instant::now();
        let resp =
            tokio::time::timeout(timeout, self.sender.send_request(req)).await.map_err(|_| timed_out())?.map_err(|e| proto(&e))?;
        let first_byte_s = start.elapsed().as_secs_f64();
        let status = resp.status().as_u16();
        let content_length = resp
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut body = resp.into_body();
        let mut data = BytesMut::new();
        while let Some(frame) = tokio::time::timeout(timeout, body.frame()).await.map_err(|_| timed_out())? {
            let frame = frame.map_err(|e| proto(&e))?;
            if let Ok(chunk) = frame.into_data() {
                data.extend_from_slice(&chunk);
            }
            let progress = Progress { bytes: data.len() as u64, content_length, elapsed_s: start.elapsed().as_secs_f64() };
            if status == 200 && !keep_going(&progress) {
                return Err(HttpError::Abandoned { path: path.to_string(), bytes: progress.bytes, elapsed_s: progress.elapsed_s });
            }
        }
        if status != 200 {
            return Err(HttpError::Status { path: path.to_string(), status });
        }
        Ok(Fetched { body: data.freeze(), first_byte_s, total_s: start.elapsed().as_secs_f64() })
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_resolve() {
        let u = HttpUrl::parse("http://10.0.0.1:8080/v/manifest.mpd").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("10.0.0.1", 8080, "/v/manifest.mpd"));
        assert_eq!(u.resolve("chunk-1.m4s"), "/v/chunk-1.m4s");
        assert_eq!(u.resolve("/x.m4s"), "/x.m4s");
        let u = HttpUrl::parse("http://[::1]:9/m.mpd").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.authority()), ("::1", 9, "[::1]:9".to_string()));
        assert_eq!(HttpUrl::parse("http://host").unwrap().path, "/");
        for bad in ["https://h/", "http://", "http://h:99999/", "http://[::1/", "ftp://x"] {
            assert!(HttpUrl::parse(bad).unwrap_err().to_string().contains("expected http://"), "{bad}");
        }
    }

    /// A server that answers one request with `chunks` body chunks of `chunk` bytes, `gap` apart.
    async fn trickling_server(chunks: usize, chunk: usize, gap: Duration) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).await;
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", chunks * chunk);
            s.write_all(head.as_bytes()).await.unwrap();
            for _ in 0..chunks {
                tokio::time::sleep(gap).await;
                if s.write_all(&vec![7u8; chunk]).await.is_err() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_slow_download_that_keeps_arriving_completes_past_the_timeout() {
        // 8 chunks 100 ms apart: 800 ms in all, each within the 300 ms timeout.
        let addr = trickling_server(8, 1000, Duration::from_millis(100)).await;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut c = HttpClient::handshake(stream, "x", Duration::from_millis(300)).await.unwrap();
        let mut seen = Vec::new();
        let got = c.get_watched("/s.m4s", |p| {
            seen.push(*p);
            true
        })
        .await
        .unwrap();
        assert_eq!(got.body.len(), 8000);
        assert!(got.total_s > 0.6, "{}", got.total_s);
        assert_eq!(seen.last().map(|p| (p.bytes, p.content_length)), Some((8000, Some(8000))));
        assert!(seen.windows(2).all(|w| w[0].bytes <= w[1].bytes && w[0].elapsed_s <= w[1].elapsed_s));
    }

    #[tokio::test]
    async fn the_watcher_abandons_a_download() {
        let addr = trickling_server(20, 1000, Duration::from_millis(50)).await;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut c = HttpClient::handshake(stream, "x", Duration::from_secs(2)).await.unwrap();
        let e = c.get_watched("/s.m4s", |p| p.bytes < 3000).await.unwrap_err();
        match e {
            HttpError::Abandoned { bytes, .. } => assert!((3000..20_000).contains(&bytes), "{bytes}"),
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn a_silent_server_times_out_instead_of_hanging() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts, never answers.
        let _hold = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(s);
        });
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut c = HttpClient::handshake(stream, "x", Duration::from_millis(300)).await.unwrap();
        let t = Instant::now();
        let e = c.get("/m.mpd").await.unwrap_err();
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
