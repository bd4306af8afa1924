//! Who may use the server, and how requests prove it.
//!
//! Model: the server listens on loopback unless told otherwise, where only
//! local users reach it; on any other address, everyone on the network
//! can, so every request must carry a secret token. A browser logs in once
//! with `?token=T` (the URL `braid lab serve` prints): the server sets an
//! `HttpOnly`, `SameSite=Strict` cookie and redirects to the same URL
//! without the token. Scripts send the `X-Braid-Token` header (or
//! `Authorization: Bearer T`).
//!
//! Cross-site requests: a page on another site can make the browser send
//! a form post (with the cookie, were it not `SameSite`), but cannot add a
//! custom header or a JSON content type without a CORS preflight, which
//! this server never answers. So every state-changing request (any method
//! but GET and HEAD) must carry `X-Braid-Token` and a JSON body, also on
//! loopback without a token (where the header's value is not checked).
//! On loopback without a token the `Host` header must name a loopback
//! host, so that a DNS-rebinding page cannot reach the server under its
//! own name.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::{App, WebError};

/// The header state-changing requests carry.
pub const TOKEN_HEADER: &str = "x-braid-token";
/// The cookie a `?token=` login sets.
pub const TOKEN_COOKIE: &str = "braid_token";

/// The token policy.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    token: Option<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Auth").field("token", &self.token.as_ref().map(|_| "<set>")).finish()
    }
}

impl Auth {
    /// No token (loopback only).
    pub fn open() -> Auth {
        Auth { token: None }
    }

    /// Every request must carry `token`: 16 to 256 characters of
    /// `A-Z a-z 0-9 - _ . ~` (it goes into a cookie and a URL unescaped).
    pub fn with_token(token: &str) -> Result<Auth, WebError> {
        let fine = (16..=256).contains(&token.len())
            && token.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'));
        if !fine {
            return Err(WebError::BadRequest(
                "--token: expected 16 to 256 characters of A-Z, a-z, 0-9, -, _, . or ~".into(),
            ));
        }
        Ok(Auth { token: Some(token.to_string()) })
    }

    /// The token, if one is required.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// What pages put in their `braid-token` meta tag for their scripts'
    /// header: the token, or `-` when none is required.
    pub(crate) fn header_value(&self) -> &str {
        self.token.as_deref().unwrap_or("-")
    }

    fn matches(&self, given: &str) -> bool {
        match &self.token {
            None => true,
            Some(t) => constant_time_eq(t.as_bytes(), given.as_bytes()),
        }
    }
}

/// A random token: 128 bits from the kernel's generator, as 32 hex digits.
pub fn generate_token() -> Result<String, WebError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| WebError::Internal(format!("generating a token from /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal without an early exit, so the time taken does not tell how much
/// of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware every route runs behind.
pub(crate) async fn check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let auth = app.auth();
    let api = req.uri().path().starts_with("/api/");
    if auth.token.is_none() && !loopback_host(req.headers()) {
        return refuse(StatusCode::FORBIDDEN, "this server listens on loopback only: use http://127.0.0.1:PORT/", api);
    }
    // A `?token=` login.
    if let Some(given) = query_token(req.uri()) {
        if auth.token.is_some() && !auth.matches(&given) {
            return refuse(StatusCode::UNAUTHORIZED, "wrong token", api);
        }
        if req.method() == Method::GET {
            let target = without_token(req.uri());
            let mut resp = Redirect::to(&target).into_response();
            if let Some(t) = &auth.token {
                let cookie = format!("{TOKEN_COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict");
                if let Ok(v) = header::HeaderValue::from_str(&cookie) {
                    resp.headers_mut().insert(header::SET_COOKIE, v);
                }
            }
            return resp;
        }
    }
    let header_token = header_token(req.headers());
    if auth.token.is_some() {
        let given = header_token.clone().or_else(|| cookie_token(req.headers()));
        if !given.is_some_and(|g| auth.matches(&g)) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "this server requires a token: open the URL `braid lab serve` printed (…/?token=T), or send the X-Braid-Token header",
                api,
            );
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        if !header_token.is_some_and(|g| auth.matches(&g)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "a request that changes something needs the X-Braid-Token header",
                true,
            );
        }
        let json =
            req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
                v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
        if !json {
            return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "a request that changes something sends JSON", true);
        }
    }
    next.run(req).await
}

fn refuse(status: StatusCode, why: &str, api: bool) -> Response {
    let e = WebError::BadRequest(why.to_string());
    let mut resp = if api { e.json() } else { e.into_response() };
    *resp.status_mut() = status;
    resp
}

/// The token from `X-Braid-Token` or `Authorization: Bearer`.
fn header_token(h: &HeaderMap) -> Option<String> {
    if let Some(v) = h.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
        return Some(v.trim().to_string());
    }
    h.get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
}

fn cookie_token(h: &HeaderMap) -> Option<String> {
    h.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == TOKEN_COOKIE).then(|| v.to_string())
    })
}

fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| kv.strip_prefix("token=").map(str::to_string))
}

/// The URI's path and query without its `token=` pair.
fn without_token(uri: &Uri) -> String {
    let rest: Vec<&str> =
        uri.query().unwrap_or("").split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("token=")).collect();
    if rest.is_empty() {
        uri.path().to_string()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    }
}

/// Does the `Host` header (if any) name a loopback host?
fn loopback_host(h: &HeaderMap) -> bool {
    let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) else { return true };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_for_form_and_compared_whole() {
        assert!(Auth::with_token("short").is_err());
        assert!(Auth::with_token("0123456789abcdef;x").is_err());
        let a = Auth::with_token("0123456789abcdef").unwrap();
        assert!(a.matches("0123456789abcdef"));
        assert!(!a.matches("0123456789abcdeF"));
        assert!(!a.matches("0123456789abcde"));
        assert!(Auth::open().matches("anything"));
        let g = generate_token().unwrap();
        assert_eq!(g.len(), 32);
        assert!(Auth::with_token(&g).is_ok());
        assert_ne!(g, generate_token().unwrap());
    }

    #[test]
    fn login_url_loses_only_the_token() {
        let u: Uri = "/studies/a?token=abc&sort=id".parse().unwrap();
        assert_eq!(query_token(&u).as_deref(), Some("abc"));
        assert_eq!(without_token(&u), "/studies/a?sort=id");
        assert_eq!(without_token(&"/?token=abc".parse().unwrap()), "/");
    }

    #[test]
    fn only_loopback_hosts_pass_the_rebinding_check() {
        let host = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, h.parse().unwrap());
            loopback_host(&m)
        };
        assert!(host("127.0.0.1:8080") && host("localhost:1") && host("[::1]:8080") && host("127.0.0.2"));
        assert!(!host("evil.example:8080") && !host("10.0.0.1:8080"));
    }
}
