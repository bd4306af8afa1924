//! Braid runs of the `multipath` template, each end on its own thread inside
//! its host's namespace with its own tokio runtime: bulk goodput of one
//! multipath connection, and flow-completion times of request/response
//! flows on one multipath connection.
//!
//! Both ends bind wildcard addresses: the client opens one path per
//! testbed path (from host a's address on it to host b's), and the server
//! answers each path from the address it was reached on.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid::progmp::Program;
use braid::{Connection, Endpoint, EndpointConfig};
use braid_net::Security;
use braid_emu::Testbed;
use bytes::Bytes;

use crate::template::{ResultExt, TemplateError};

/// Results of this module.
type Result<T> = std::result::Result<T, TemplateError>;

fn failed(why: impl Into<String>) -> TemplateError {
    TemplateError::Failed(why.into())
}

/// Messages of a bulk run.
const BULK_MESSAGE: usize = 64 << 10;

/// Bytes of a request (it carries the response size).
const REQUEST_BYTES: usize = 64;

/// Longest a run may take beyond its planned length.
const SLACK: Duration = Duration::from_secs(30);

/// How the two Braid ends of a run are set up.
#[derive(Debug, Clone, Copy)]
pub struct BraidEnds {
    /// Bytes of UDP payload per datagram.
    pub datagram: u16,
    /// Authenticated and encrypted (each end a fresh identity pinned to the
    /// other's), or the bare protocol.
    pub encrypted: bool,
}

impl BraidEnds {
    /// The server's and the client's endpoint configuration.
    fn configs(self) -> Result<(EndpointConfig, EndpointConfig)> {
        let (server, client) = if self.encrypted {
            braid_net::pinned_pair().map_err(|e| failed(e.to_string()))?
        } else {
            (Security::Insecure, Security::Insecure)
        };
        let config = |accept_incoming, security| {
            let mut config = EndpointConfig { accept_incoming, security, ..Default::default() };
            config.transport.max_datagram_size = self.datagram;
            config
        };
        Ok((config(true, server), config(false, client)))
    }
}

/// The (local, remote) pairs of every testbed path, to `port` on host b.
fn path_pairs(tb: &Testbed, port: u16) -> Vec<(IpAddr, SocketAddr)> {
    tb.layout()
        .paths
        .iter()
        .map(|p| (IpAddr::V4(p.a_addr), SocketAddr::new(IpAddr::V4(p.b_addr), port)))
        .collect()
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| TemplateError::io("starting a tokio runtime", e))
}

/// Any wildcard address: the ends pick their source per path.
fn wildcard() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0)
}

/// Wait (bounded) until the connection's paths are all validated, so that
/// measurements start with every path usable.
async fn all_paths_validated(conn: &Connection, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let paths = conn.paths();
        if paths.len() == n && paths.iter().all(|p| p.validated) {
            return Ok(());
        }
        if Instant::now() > deadline {
            crate::fail!("paths not validated after 5 s: {paths:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Start a server thread on host b; returns its port and join handle. The
/// closure serves the one accepted connection.
fn serve<T, F, Fut>(tb: &Testbed, program: Arc<Program>, config: EndpointConfig, f: F) -> Result<(u16, std::thread::JoinHandle<Result<T>>)>
where
    T: Send + 'static,
    F: FnOnce(Connection) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
{
    let b = tb.layout().paths.first().context("the testbed has no path")?.b.clone();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let handle = tb
        .in_host(&b, move || -> Result<T> {
            let rt = runtime()?;
            rt.block_on(async move {
                let server = Endpoint::bind_with(wildcard(), config).context("binding the Braid server")?;
                let _ = tx.send(server.local_addr().port());
                let conn = tokio::time::timeout(Duration::from_secs(10), server.accept())
                    .await
                    .map_err(|_| failed("no connection arrived"))?
                    .context("endpoint closed")?;
                conn.set_scheduler(program).context("setting the server's scheduler")?;
                let out = f(conn).await;
                server.close();
                out
            })
        })
        .context("starting the Braid server's host thread")?;
    let port = rx.recv_timeout(Duration::from_secs(5)).map_err(|_| failed("the Braid server did not start"))?;
    Ok((port, handle))
}

/// Start the client thread on host a: connect over every path, pick the
/// scheduler, wait for the paths, run `f`.
fn client<T, F, Fut>(tb: &Testbed, port: u16, program: Arc<Program>, config: EndpointConfig, f: F) -> Result<std::thread::JoinHandle<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce(Connection) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
{
    let pairs = path_pairs(tb, port);
    let a = tb.layout().paths.first().context("the testbed has no path")?.a.clone();
    tb.in_host(&a, move || -> Result<T> {
        let rt = runtime()?;
        rt.block_on(async move {
            let ep = Endpoint::bind_with(wildcard(), config).context("binding the Braid client")?;
            let conn = tokio::time::timeout(Duration::from_secs(10), ep.connect_multipath(&pairs))
                .await
                .map_err(|_| failed("connecting timed out"))?
                .context("connecting over every path")?;
            conn.set_scheduler(program).context("setting the client's scheduler")?;
            all_paths_validated(&conn, pairs.len()).await?;
            let out = f(conn.clone()).await;
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
            ep.close();
            out
        })
    })
    .context("starting the Braid client's host thread")
}

fn join<T>(h: std::thread::JoinHandle<Result<T>>, who: &str) -> Result<T> {
    h.join().map_err(|_| failed(format!("{who} panicked")))?
}

/// What a Braid bulk run measured.
#[derive(Debug, Clone)]
pub struct BulkRun {
    /// Goodput over the measurement window, bit/s.
    pub bps: f64,
    /// Application bytes received during the whole run.
    pub delivered: u64,
    /// Stream bytes each path carried (sender side), retransmissions and
    /// redundant copies included.
    pub stream_bytes_by_path: Vec<u64>,
}

/// Goodput of one Braid multipath connection scheduled by `program`, host
/// a to host b, counted at the receiver over `measure` after `warmup`.
pub fn bulk(tb: &Testbed, program: Arc<Program>, ends: BraidEnds, warmup: Duration, measure: Duration) -> Result<BulkRun> {
    let (server_config, client_config) = ends.configs()?;
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    let limit = warmup + measure + SLACK;
    let (port, server) = serve(tb, program.clone(), server_config, {
        let (stop, delivered) = (stop.clone(), delivered.clone());
        move |conn| async move {
            let start = Instant::now();
            let (t0, t1) = (start + warmup, start + warmup + measure);
            let mut counted = 0u64;
            let work = async {
                loop {
                    let msg = conn.recv_message().await.context("receiving bulk data")?;
                    let now = Instant::now();
                    delivered.fetch_add(msg.len() as u64, Ordering::Relaxed);
                    if now >= t1 {
                        break;
                    }
                    if now >= t0 {
                        counted += msg.len() as u64;
                    }
                }
                Ok::<(), TemplateError>(())
            };
            tokio::time::timeout(limit, work).await.map_err(|_| failed("bulk receiver timed out"))??;
            stop.store(true, Ordering::Relaxed);
            Ok(counted as f64 * 8.0 / measure.as_secs_f64())
        }
    })?;
    let sender = client(tb, port, program, client_config, {
        let stop = stop.clone();
        move |conn| async move {
            let payload = Bytes::from(vec![0x5au8; BULK_MESSAGE]);
            let deadline = Instant::now() + limit;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                // A closed receiver ends the run.
                if tokio::time::timeout(Duration::from_millis(200), conn.send_message(payload.clone())).await.is_ok_and(|r| r.is_err()) {
                    break;
                }
            }
            Ok(conn.paths().iter().map(|p| p.stream_bytes_sent).collect::<Vec<_>>())
        }
    })?;
    let bps = join(server, "the Braid receiver");
    stop.store(true, Ordering::Relaxed);
    let by_path = join(sender, "the Braid sender")?;
    Ok(BulkRun { bps: bps?, delivered: delivered.load(Ordering::Relaxed), stream_bytes_by_path: by_path })
}

/// What a flow-completion-time run measured.
#[derive(Debug, Clone)]
pub struct FctRun {
    /// Completion time of each flow: request sent to the whole response
    /// received, at the client.
    pub fcts: Vec<Duration>,
    /// When each flow started, after the first.
    pub starts: Vec<Duration>,
    /// Application bytes delivered both ways.
    pub delivered: u64,
}

/// `flows` request/response flows, one after the other (`gap` apart) on
/// one multipath connection: the client sends a small request, the server
/// answers `response` bytes. Both ends schedule with `program`.
pub fn fct(
    tb: &Testbed,
    program: Arc<Program>,
    ends: BraidEnds,
    response: usize,
    flows: usize,
    gap: Duration,
) -> Result<FctRun> {
    let (server_config, client_config) = ends.configs()?;
    let limit = (gap + Duration::from_secs(1)) * flows as u32 + SLACK;
    let (port, server) = serve(tb, program.clone(), server_config, move |conn| async move {
        let body = Bytes::from(vec![0xa5u8; response]);
        let mut served = 0u64;
        let work = async {
            while let Ok(req) = conn.recv_message().await {
                served += req.len() as u64;
                conn.send_message(body.clone()).await.context("sending a response")?;
                served += body.len() as u64;
            }
            Ok::<(), TemplateError>(())
        };
        tokio::time::timeout(limit, work).await.map_err(|_| failed("FCT server timed out"))??;
        Ok(served)
    })?;
    let requester = client(tb, port, program, client_config, move |conn| async move {
        let request = Bytes::from(vec![0x11u8; REQUEST_BYTES]);
        let mut fcts = Vec::with_capacity(flows);
        let mut starts = Vec::with_capacity(flows);
        let first = Instant::now();
        let work = async {
            for _ in 0..flows {
                let start = Instant::now();
                conn.send_message(request.clone()).await.context("sending a request")?;
                let got = conn.recv_message().await.context("receiving a response")?;
                crate::ensure!(got.len() == response, "response of {} bytes, want {response}", got.len());
                fcts.push(start.elapsed());
                starts.push(start.duration_since(first));
                if !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
            }
            Ok::<(), TemplateError>(())
        };
        tokio::time::timeout(limit, work).await.map_err(|_| failed("FCT client timed out"))??;
        Ok((fcts, starts))
    })?;
    let (fcts, starts) = join(requester, "the FCT client")?;
    let delivered = join(server, "the FCT server")?;
    Ok(FctRun { fcts, starts, delivered })
}
