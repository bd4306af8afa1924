//! Runs one priority scenario ([`ScenarioConfig`]) on an emulator testbed:
//! the same flows, phases and schedule as the simulator's
//! ([`priority_sim::run`]), with real sockets, measured the same way
//! ([`priority_sim::build_report`]).
//!
//! - Host `a` sends, host `b` receives, over one emulated path whose link
//!   spec is the scenario's (the bottleneck is its `a` → `b` direction).
//! - A flow with the `priority` controller is a braid-net connection from
//!   one client endpoint on `a` to one server endpoint on `b`; its
//!   parameters are set on the live connection right after the handshake,
//!   and its schedule through `Connection::set_congestion_parameter` at the
//!   scheduled times. Any other flow is a kernel TCP connection (CUBIC, or
//!   Reno for `tcp = newreno`, through `TCP_CONGESTION`) that writes as
//!   fast as the socket takes data.
//! - Delivered bytes: Braid's `stream_bytes_acked` (as in the simulator),
//!   kernel TCP's bytes read by the receiver; sampled by the calling thread
//!   at every bin and phase edge on the wall clock.
//! - Queuing delay: a 32-byte UDP probe every `probe_interval` from `a`,
//!   echoed by `b` through the same path (as `ping` would), on threads of
//!   their own so that the senders' load does not delay the timestamps.
//! - Stalls at a switch: the switched connection's `packets_sent` is polled
//!   every millisecond for `STALL_WINDOW` (10 s) after the switch.
//! - A stopped kernel TCP flow is reset (`SO_LINGER` 0) so that its socket
//!   buffer does not keep sending; a stopped Braid flow drains what is
//!   buffered, as in the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use braid_emu::{Testbed, TestbedBuilder};
use braid_net::{Bytes, Connection, Endpoint, EndpointConfig, Security};
use braid_proto::CcAlgorithm;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::priority_sim::{
    self, bin_edges, FlowCounters, Measurements, ScenarioConfig, ScenarioReport, Snapshot, SwitchRecord,
};
use crate::template::{ResultExt, TemplateError};

/// Braid's server port on host `b`.
const BRAID_PORT: u16 = 4433;
/// Kernel TCP flow `i` listens on `TCP_BASE_PORT + i`.
const TCP_BASE_PORT: u16 = 5300;
/// The delay probe's echo port on host `b`.
const PROBE_PORT: u16 = 7007;
const PROBE_MAGIC: [u8; 4] = *b"BRPQ";
const PROBE_LEN: usize = 32;
/// Application write size of every sender.
const CHUNK: usize = 16 << 10;
/// Stalls are looked for up to this long after a switch (as the simulator).
const STALL_WINDOW: Duration = Duration::from_secs(10);
/// How long the hosts get to wind down after the run before it fails.
const WIND_DOWN: Duration = Duration::from_secs(10);

/// State shared by the host threads and the sampler.
struct Shared {
    t0: Instant,
    stop: AtomicBool,
    /// Bytes read by the receiver of each kernel TCP flow.
    tcp_rx: Vec<AtomicU64>,
    /// The live Braid connection of each Braid flow.
    conns: Mutex<Vec<Option<Connection>>>,
    errors: Mutex<Vec<Option<String>>>,
    probe: Mutex<Vec<(Duration, Duration)>>,
    switches: Mutex<Vec<SwitchRecord>>,
}

impl Shared {
    fn fail(&self, flow: usize, e: impl std::fmt::Display) {
        let mut errors = self.errors.lock().expect("not poisoned");
        errors[flow].get_or_insert_with(|| e.to_string());
    }

    fn at(&self, t: Duration) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.t0 + t)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

fn is_braid(cc: CcAlgorithm) -> bool {
    cc == CcAlgorithm::Priority
}

/// The kernel congestion control standing in for a non-Braid flow's.
fn kernel_cc(cc: CcAlgorithm) -> &'static str {
    match cc {
        CcAlgorithm::NewReno => "reno",
        _ => "cubic",
    }
}

/// Run `cfg` on a testbed built from `builder` (named and seeded by the
/// caller, so that parallel runs never collide) with the scenario's link;
/// `tick` is called with the elapsed time at every sample. Fails with
/// [`TemplateError::Timeout`] if `deadline` passes during the run; the
/// testbed is torn down whatever happens.
pub fn run(
    cfg: &ScenarioConfig,
    builder: TestbedBuilder,
    deadline: Instant,
    tick: &dyn Fn(Duration),
) -> Result<ScenarioReport, TemplateError> {
    priority_sim::validate(cfg).map_err(|e| TemplateError::Invalid(e.to_string()))?;
    braid_emu::check_capabilities().map_err(|e| TemplateError::Unavailable(e.to_string()))?;
    let tb = builder.link(cfg.link.clone()).build().context("building the testbed")?;
    let path = &tb.layout().paths[0];
    let (a_ip, b_ip) = (IpAddr::V4(path.a_addr), IpAddr::V4(path.b_addr));
    let n = cfg.flows.len();
    let shared = Arc::new(Shared {
        t0: Instant::now() + Duration::from_millis(300),
        stop: AtomicBool::new(false),
        tcp_rx: (0..n).map(|_| AtomicU64::new(0)).collect(),
        conns: Mutex::new(vec![None; n]),
        errors: Mutex::new(vec![None; n]),
        probe: Mutex::new(Vec::new()),
        switches: Mutex::new(Vec::new()),
    });

    // Whatever happens from here on (an error included), the host threads
    // are told to stop.
    let _stop = StopOnDrop(shared.clone());
    let (server_security, client_security) = if cfg.encrypted {
        braid_net::pinned_pair().map_err(|e| TemplateError::Failed(e.to_string()))?
    } else {
        (Security::Insecure, Security::Insecure)
    };
    let mut hosts = Vec::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), TemplateError>>();
    {
        let (cfg, shared, ready) = (cfg.clone(), shared.clone(), ready_tx.clone());
        hosts.push(
            tb.in_host("b", move || receiver_host(&cfg, &shared, b_ip, server_security, ready))
                .context("starting host b")?,
        );
    }
    // The senders start only once the receivers listen.
    ready_rx.recv_timeout(Duration::from_secs(10)).context("the receivers did not start")??;
    {
        let shared = shared.clone();
        hosts.push(tb.in_host("b", move || probe_echo(&shared, b_ip)).context("starting host b")?);
    }
    if let Some(interval) = cfg.probe_interval {
        let shared = shared.clone();
        let echo = SocketAddr::new(b_ip, PROBE_PORT);
        hosts.push(tb.in_host("a", move || probe_client(&shared, a_ip, echo, interval)).context("starting host a")?);
    }
    {
        let (cfg, shared) = (cfg.clone(), shared.clone());
        hosts.push(
            tb.in_host("a", move || sender_host(&cfg, &shared, a_ip, b_ip, client_security)).context("starting host a")?,
        );
    }

    // Sample at every time the report needs, as the simulator does.
    let bins = bin_edges(cfg);
    let mut times: BTreeSet<Duration> = bins.iter().copied().collect();
    times.extend(cfg.phases.iter().flat_map(|p| [p.start, p.end]));
    for f in &cfg.flows {
        times.insert(f.start);
        times.extend(f.stop);
        times.extend(f.schedule.iter().map(|s| s.0));
    }
    times.insert(cfg.duration);
    let mut snapshots = BTreeMap::new();
    let mut late = None;
    for t in times.into_iter().filter(|t| *t <= cfg.duration) {
        let wake = shared.t0 + t;
        if wake > deadline {
            // Stop here, but wind the hosts down as after a full run.
            late = Some(TemplateError::Timeout(format!(
                "{}: the deadline came {:.1} s into the run of {:.1} s",
                cfg.name,
                deadline.saturating_duration_since(shared.t0).as_secs_f64(),
                cfg.duration.as_secs_f64()
            )));
            break;
        }
        if let Some(wait) = wake.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        snapshots.insert(t, snapshot(cfg, &shared, &tb));
        tick(t);
    }
    shared.stop.store(true, Ordering::Release);
    let forward_link = tb.stats().map(|s| s.paths[0].a2b).unwrap_or_default();
    let flows = final_counters(cfg, &shared);
    let wind_down = Instant::now() + WIND_DOWN;
    for h in hosts {
        while !h.is_finished() && Instant::now() < wind_down {
            std::thread::sleep(Duration::from_millis(20));
        }
        crate::ensure!(h.is_finished(), "a host of the testbed did not stop within {WIND_DOWN:?}");
        h.join().map_err(|_| TemplateError::Failed("a host thread panicked".into()))??;
    }
    drop(tb);
    if let Some(e) = late {
        return Err(e);
    }
    let mut switches = shared.switches.lock().expect("not poisoned").clone();
    switches.sort_by_key(|s| (s.at, s.flow));
    let mut probe = shared.probe.lock().expect("not poisoned").clone();
    probe.sort();
    let m = Measurements {
        bins,
        snapshots,
        flows,
        probe,
        switches,
        trace_hash: None,
        forward_link,
    };
    Ok(priority_sim::build_report(cfg, &m))
}

/// Sets the stop flag when dropped.
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
    }
}

fn snapshot(cfg: &ScenarioConfig, shared: &Shared, tb: &Testbed) -> Snapshot {
    let link = tb.stats().map(|s| s.paths[0].a2b).unwrap_or_default();
    let mut s = Snapshot {
        queue_drops: link.dropped_queue,
        link_offered: link.offered,
        link_dropped: link.dropped(),
        ..Snapshot::default()
    };
    let conns = shared.conns.lock().expect("not poisoned").clone();
    for (i, f) in cfg.flows.iter().enumerate() {
        if is_braid(f.cc) {
            let st = conns[i].as_ref().map(Connection::stats).unwrap_or_default();
            s.acked.push(st.stream_bytes_acked);
            s.sent.push(st.packets_sent);
            s.lost.push(st.packets_lost);
        } else {
            s.acked.push(shared.tcp_rx[i].load(Ordering::Relaxed));
            s.sent.push(0);
            s.lost.push(0);
        }
    }
    s
}

fn final_counters(cfg: &ScenarioConfig, shared: &Shared) -> Vec<FlowCounters> {
    let conns = shared.conns.lock().expect("not poisoned").clone();
    let errors = shared.errors.lock().expect("not poisoned").clone();
    (0..cfg.flows.len())
        .map(|i| {
            let st = conns[i].as_ref().map(Connection::stats).unwrap_or_default();
            FlowCounters {
                packets_sent: st.packets_sent,
                packets_lost: st.packets_lost,
                congestion_events: st.congestion_events,
                rto_count: st.rto_count,
                error: errors[i].clone(),
            }
        })
        .collect()
}

fn runtime() -> Result<tokio::runtime::Runtime, TemplateError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting a runtime")
}

/// Host `b`: the Braid server and one TCP listener per kernel TCP flow;
/// everything received is counted and discarded.
fn receiver_host(
    cfg: &ScenarioConfig,
    shared: &Arc<Shared>,
    ip: IpAddr,
    security: Security,
    ready: std::sync::mpsc::Sender<Result<(), TemplateError>>,
) -> Result<(), TemplateError> {
    let rt = runtime()?;
    rt.block_on(async {
        let setup = async {
            let config = EndpointConfig {
                accept_incoming: true,
                transport: priority_sim::transport_config(cfg, None),
                security,
                ..EndpointConfig::default()
            };
            let server = Endpoint::bind_with(SocketAddr::new(ip, BRAID_PORT), config).context("binding the Braid server")?;
            let mut listeners = Vec::new();
            for (i, f) in cfg.flows.iter().enumerate().filter(|(_, f)| !is_braid(f.cc)) {
                let port = TCP_BASE_PORT + i as u16;
                let l = tokio::net::TcpListener::bind(SocketAddr::new(ip, port))
                    .await
                    .with_context(|| format!("flow {}: listening on TCP port {port}", f.label))?;
                listeners.push((i, l));
            }
            Ok::<_, TemplateError>((server, listeners))
        };
        let (server, listeners) = match setup.await {
            Ok(v) => {
                let _ = ready.send(Ok(()));
                v
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return Ok(());
            }
        };
        for (i, l) in listeners {
            let shared = shared.clone();
            tokio::spawn(async move {
                let Ok((mut s, _)) = l.accept().await else { return };
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(k) = s.read(&mut buf).await {
                    if k == 0 {
                        break;
                    }
                    shared.tcp_rx[i].fetch_add(k as u64, Ordering::Relaxed);
                }
            });
        }
        let accept = async {
            while let Some(conn) = server.accept().await {
                tokio::spawn(async move { while conn.recv_message().await.is_ok() {} });
            }
        };
        tokio::select! {
            () = accept => {}
            () = wait_stop(shared) => {}
        }
        server.close();
        Ok(())
    })
}

async fn wait_stop(shared: &Shared) {
    while !shared.stopped() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Host `a`: every flow's sender, started, re-prioritised and stopped on
/// schedule.
fn sender_host(
    cfg: &ScenarioConfig,
    shared: &Arc<Shared>,
    a: IpAddr,
    b: IpAddr,
    security: Security,
) -> Result<(), TemplateError> {
    let rt = runtime()?;
    rt.block_on(async {
        let config = EndpointConfig {
            accept_incoming: false,
            transport: priority_sim::transport_config(cfg, None),
            security,
            ..EndpointConfig::default()
        };
        let client = Endpoint::bind_with(SocketAddr::new(a, 0), config).context("binding the Braid client")?;
        let chunk = Bytes::from(vec![0x5a; CHUNK]);
        let mut tasks = tokio::task::JoinSet::new();
        for (i, f) in cfg.flows.iter().enumerate() {
            let (cfg, shared, chunk) = (cfg.clone(), shared.clone(), chunk.clone());
            if is_braid(f.cc) {
                let client = client.clone();
                tasks.spawn(async move {
                    if let Err(e) = braid_flow(&cfg, i, &shared, &client, SocketAddr::new(b, BRAID_PORT), chunk).await {
                        shared.fail(i, e);
                    }
                });
            } else {
                tasks.spawn(async move {
                    let to = SocketAddr::new(b, TCP_BASE_PORT + i as u16);
                    if let Err(e) = tcp_flow(&cfg, i, &shared, to, &chunk).await {
                        shared.fail(i, e);
                    }
                });
            }
        }
        wait_stop(shared).await;
        tasks.abort_all();
        client.close();
        Ok(())
    })
}

async fn braid_flow(
    cfg: &ScenarioConfig,
    i: usize,
    shared: &Arc<Shared>,
    client: &Endpoint,
    to: SocketAddr,
    chunk: Bytes,
) -> Result<(), TemplateError> {
    let f = &cfg.flows[i];
    tokio::time::sleep_until(shared.at(f.start)).await;
    let conn = client
        .connect_with(to, priority_sim::transport_config(cfg, Some(f.cc)))
        .await
        .context("connecting")?;
    for (name, value) in &f.params {
        conn.set_congestion_parameter(name, *value).with_context(|| format!("setting `{name}`"))?;
    }
    shared.conns.lock().expect("not poisoned")[i] = Some(conn.clone());
    // Priority changes, each followed by a stall watch.
    let sched = {
        let (conn, shared, schedule) = (conn.clone(), shared.clone(), f.schedule.clone());
        tokio::spawn(async move {
            for (at, p) in schedule {
                tokio::time::sleep_until(shared.at(at)).await;
                let from = conn
                    .congestion_parameters()
                    .ok()
                    .and_then(|c| c.values.iter().find(|(n, _)| *n == "priority").map(|&(_, v)| v));
                if let Err(e) = conn.set_congestion_parameter("priority", p) {
                    shared.fail(i, format!("setting priority {p}: {e}"));
                    return;
                }
                let srtt = conn.stats().smoothed_rtt;
                // When it really happened (a late wake-up shows).
                let at = shared.t0.elapsed();
                let record = {
                    let mut switches = shared.switches.lock().expect("not poisoned");
                    switches.push(SwitchRecord { flow: i, at, from, to: p, srtt, longest: Duration::ZERO });
                    switches.len() - 1
                };
                // Watched alongside the next switches, as in the simulator.
                let (conn, shared) = (conn.clone(), shared.clone());
                tokio::spawn(async move { watch_stall(&conn, &shared, at, record).await });
            }
        })
    };
    let stop = shared.at(f.stop.unwrap_or(cfg.duration + WIND_DOWN));
    let send = async {
        loop {
            conn.send_message(chunk.clone()).await?;
        }
        #[allow(unreachable_code)]
        Ok::<(), braid_net::ConnectionError>(())
    };
    tokio::select! {
        r = send => { r.context("sending")?; }
        () = tokio::time::sleep_until(stop) => {}
    }
    // Keep the connection (and its counters) until the end of the run.
    wait_stop(shared).await;
    sched.abort();
    Ok(())
}

/// Records in `shared.switches[record]` the longest time without a
/// packet sent by `conn` within [`STALL_WINDOW`] after a switch at `at` (or
/// until the run ends), as it goes.
async fn watch_stall(conn: &Connection, shared: &Shared, at: Duration, record: usize) {
    // `at` is from `t0`.
    let switched = shared.t0 + at;
    let until = switched + STALL_WINDOW;
    let mut last_sent = conn.stats().packets_sent;
    let mut last_change = switched;
    let mut longest = Duration::ZERO;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until && !shared.stopped() {
        tick.tick().await;
        let sent = conn.stats().packets_sent;
        let now = Instant::now();
        if sent > last_sent {
            if now - last_change > longest {
                longest = now - last_change;
                shared.switches.lock().expect("not poisoned")[record].longest = longest;
            }
            last_sent = sent;
            last_change = now;
        }
    }
}

async fn tcp_flow(cfg: &ScenarioConfig, i: usize, shared: &Arc<Shared>, to: SocketAddr, chunk: &[u8]) -> Result<(), TemplateError> {
    let f = &cfg.flows[i];
    tokio::time::sleep_until(shared.at(f.start)).await;
    let socket = if to.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .context("opening a TCP socket")?;
    set_tcp_congestion(socket.as_raw_fd(), kernel_cc(f.cc)).with_context(|| format!("TCP_CONGESTION {}", kernel_cc(f.cc)))?;
    let mut s = socket.connect(to).await.context("connecting")?;
    let stop = shared.at(f.stop.unwrap_or(cfg.duration + WIND_DOWN));
    let send = async {
        loop {
            s.write_all(chunk).await?;
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    tokio::select! {
        r = send => { r.context("sending")?; }
        () = tokio::time::sleep_until(stop) => {}
        () = wait_stop(shared) => {}
    }
    // Stop now: a reset discards what the socket buffer still holds.
    let _ = reset_on_close(s.as_raw_fd());
    drop(s);
    Ok(())
}

/// `SO_LINGER` with a zero timeout: closing sends a reset at once (and
/// never blocks) instead of draining the send buffer.
fn reset_on_close(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: `fd` is an open socket; `linger` outlives the call and the
    // length is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn set_tcp_congestion(fd: std::os::fd::RawFd, name: &str) -> std::io::Result<()> {
    // SAFETY: `fd` is an open socket; the option value is a byte string of
    // the given length that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Host `b`: echo every probe datagram back.
fn probe_echo(shared: &Shared, ip: IpAddr) -> Result<(), TemplateError> {
    let s = UdpSocket::bind(SocketAddr::new(ip, PROBE_PORT)).context("binding the probe echo")?;
    s.set_read_timeout(Some(Duration::from_millis(50))).context("the probe echo's read timeout")?;
    let mut buf = [0u8; 64];
    while !shared.stopped() {
        if let Ok((k, from)) = s.recv_from(&mut buf) {
            if k == PROBE_LEN && buf[..4] == PROBE_MAGIC {
                let _ = s.send_to(&buf[..k], from);
            }
        }
    }
    Ok(())
}

/// Host `a`: a numbered probe every `interval`; records `(send time, RTT)`
/// of every echo.
fn probe_client(shared: &Arc<Shared>, ip: IpAddr, echo: SocketAddr, interval: Duration) -> Result<(), TemplateError> {
    let s = UdpSocket::bind(SocketAddr::new(ip, 0)).context("binding the probe")?;
    let rx = s.try_clone().context("cloning the probe socket")?;
    rx.set_read_timeout(Some(Duration::from_millis(50))).context("the probe's read timeout")?;
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let receiver = {
        let (shared, sent) = (shared.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !shared.stopped() {
                let Ok(k) = rx.recv(&mut buf) else { continue };
                let now = Instant::now();
                if k != PROBE_LEN || buf[..4] != PROBE_MAGIC {
                    continue;
                }
                let seq = u64::from_le_bytes(buf[4..12].try_into().expect("8 bytes")) as usize;
                if let Some(&at) = sent.lock().expect("not poisoned").get(seq) {
                    let since = at.saturating_duration_since(shared.t0);
                    shared.probe.lock().expect("not poisoned").push((since, now - at));
                }
            }
        })
    };
    let mut next = shared.t0;
    let mut seq = 0u64;
    while !shared.stopped() {
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut p = [0u8; PROBE_LEN];
        p[..4].copy_from_slice(&PROBE_MAGIC);
        p[4..12].copy_from_slice(&seq.to_le_bytes());
        sent.lock().expect("not poisoned").push(Instant::now());
        let _ = s.send_to(&p, echo);
        seq += 1;
        next += interval;
    }
    let _ = receiver.join();
    Ok(())
}
