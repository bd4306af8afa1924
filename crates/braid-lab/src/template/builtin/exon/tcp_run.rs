//! Kernel TCP's side of a measurement, the peer Exon is compared with: one
//! connection, messages in length-prefixed frames. One-way: a writes
//! frames as fast as the connection takes them. RPC: the paper's
//! multiplexed connection, all actors' requests on it, replies matched to
//! requests by identifier.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::measure::{rpc_window, window_end, PeerResult, RunCfg};
use super::message::{decode, encode, frame, FrameReader, Tally};
use super::place::{join, Ends};
use super::rpc::{Actors, Pending};
use crate::fail;
use crate::template::{ResultExt, TemplateError};

/// Read timeout of blocking loops that also watch the clock or a flag.
const TICK: Duration = Duration::from_millis(20);

/// Sets the congestion control of the TCP socket `s` (e.g. "cubic"), by
/// name.
pub fn set_congestion_control(s: &impl std::os::fd::AsRawFd, name: &str) -> Result<(), TemplateError> {
    // SAFETY: a valid socket descriptor and a buffer of the given length.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        fail!("setting TCP congestion control `{name}`: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Accepts one connection within `within`.
fn accept(listener: &TcpListener, within: Duration) -> Result<TcpStream, TemplateError> {
    listener.set_nonblocking(true).context("TCP listener")?;
    let until = Instant::now() + within;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).context("TCP connection")?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e).context("accepting the TCP connection"),
        }
    }
}

/// A running one-way measurement (so that fairness can run one next to
/// Exon's).
pub struct OnewayRun {
    receiver: std::thread::JoinHandle<Result<(Tally, u64), TemplateError>>,
    sender: std::thread::JoinHandle<Result<(), TemplateError>>,
    /// The sender's connection, shut down to unblock it at the end.
    sender_stream: TcpStream,
    start: Duration,
    cfg: RunCfg,
}

/// Starts a one-way measurement; `cc` names the sender's congestion
/// control (the system default if `None`).
pub fn oneway_start(ends: &Ends, cfg: &RunCfg, cc: &str) -> Result<OnewayRun, TemplateError> {
    let listener = {
        let bind = SocketAddr::new(ends.b.addr, 0);
        join(ends.b.spawn(move || TcpListener::bind(bind).context("binding the TCP receiver"))?, "TCP bind")?
    };
    let dst = listener.local_addr().context("TCP listener address")?;
    let (epoch, size, limit, messages) = (ends.epoch, cfg.size, cfg.limit, cfg.messages);
    let start = ends.now();
    let deadline = start + limit;
    let cc = cc.to_string();
    let receiver = ends.b.spawn(move || -> Result<(Tally, u64), TemplateError> {
        let mut s = accept(&listener, Duration::from_secs(10))?;
        s.set_read_timeout(Some(TICK)).context("TCP connection")?;
        let mut tally = Tally::default();
        let mut reader = FrameReader::default();
        let mut buf = vec![0u8; 1 << 18];
        let mut expected = 0u64;
        let mut bytes = 0u64;
        while epoch.elapsed() < deadline && tally.distinct() < messages {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => return Err(e).context("TCP receive"),
            };
            bytes += n as u64;
            let now = epoch.elapsed();
            reader.extend(&buf[..n]);
            while let Some(m) = reader.next_frame().map_err(|l| TemplateError::Failed(format!("TCP frame of {l} bytes")))? {
                match decode(m, size) {
                    Some(id) if id == expected => {
                        tally.record(id, now);
                        expected += 1;
                    }
                    _ => tally.corrupt += 1,
                }
            }
        }
        Ok((tally, bytes))
    })?;
    let (stream_tx, stream_rx) = std::sync::mpsc::channel();
    let sender = ends.a.spawn(move || -> Result<(), TemplateError> {
        let s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).context("connecting over TCP")?;
        set_congestion_control(&s, &cc)?;
        let _ = stream_tx.send(s.try_clone().context("TCP connection")?);
        let mut w = std::io::BufWriter::with_capacity(1 << 16, s);
        let mut out = Vec::with_capacity(size + 4);
        for k in 0..messages {
            if k % 64 == 0 && epoch.elapsed() >= deadline {
                break;
            }
            out.clear();
            frame(&mut out, &encode(k, size));
            if w.write_all(&out).is_err() {
                return Ok(()); // the receiver closed at its deadline
            }
        }
        let _ = w.flush();
        Ok(())
    })?;
    let sender_stream = stream_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| TemplateError::failed("the TCP sender did not connect"))?;
    Ok(OnewayRun { receiver, sender, sender_stream, start, cfg: cfg.clone() })
}

impl OnewayRun {
    /// Waits for the end of the measurement.
    pub fn finish(self) -> Result<PeerResult, TemplateError> {
        let r = join(self.receiver, "TCP receiver");
        let _ = self.sender_stream.shutdown(Shutdown::Both);
        join(self.sender, "TCP sender")?;
        let (tally, _) = r?;
        let deadline = self.start + self.cfg.limit;
        let end = window_end(tally.distinct(), tally.last_first_delivery(), self.cfg.messages, deadline);
        Ok(PeerResult {
            delivered: tally.delivered_between(self.start, end),
            window: end.saturating_sub(self.start),
            accepted: tally.distinct(),
            corrupt: tally.corrupt,
            drained: true,
            start: self.start,
            tally,
            ..Default::default()
        })
    }
}

/// One-way over TCP with congestion control `cc`.
pub fn oneway(ends: &Ends, cfg: &RunCfg, cc: &str) -> Result<PeerResult, TemplateError> {
    oneway_start(ends, cfg, cc)?.finish()
}

/// RPC: `actors` loops at a over one TCP connection; b answers each
/// request frame with a reply frame of the same identifier.
pub fn rpc(ends: &Ends, cfg: &RunCfg, cc: &str) -> Result<PeerResult, TemplateError> {
    let listener = {
        let bind = SocketAddr::new(ends.b.addr, 0);
        join(ends.b.spawn(move || TcpListener::bind(bind).context("binding the TCP server"))?, "TCP bind")?
    };
    let dst = listener.local_addr().context("TCP listener address")?;
    let stop = Arc::new(AtomicBool::new(false));
    let (size, epoch) = (cfg.size, ends.epoch);
    let stop2 = stop.clone();
    let server = ends.b.spawn(move || -> Result<Tally, TemplateError> {
        let mut s = accept(&listener, Duration::from_secs(10))?;
        s.set_nodelay(true).context("TCP connection")?;
        s.set_read_timeout(Some(TICK)).context("TCP connection")?;
        let mut tally = Tally::default();
        let mut reader = FrameReader::default();
        let mut buf = vec![0u8; 1 << 18];
        let mut out = Vec::new();
        while !stop2.load(Ordering::Relaxed) {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(_) => break,
            };
            let now = epoch.elapsed();
            reader.extend(&buf[..n]);
            out.clear();
            while let Some(m) = reader.next_frame().map_err(|l| TemplateError::Failed(format!("TCP frame of {l} bytes")))? {
                match decode(m, size) {
                    Some(id) => {
                        tally.record(id, now);
                        frame(&mut out, &encode(id, size));
                    }
                    None => tally.corrupt += 1,
                }
            }
            // Every reply of this read in one write.
            if s.write_all(&out).is_err() {
                break;
            }
        }
        Ok(tally)
    })?;
    let c = cfg.clone();
    let cc = cc.to_string();
    let client = ends.a.spawn_async(move || async move {
        let s = tokio::net::TcpSocket::new_v4().context("TCP socket")?;
        set_congestion_control(&s, &cc)?;
        let s = tokio::time::timeout(Duration::from_secs(5), s.connect(dst))
            .await
            .map_err(|_| TemplateError::failed("connecting over TCP timed out"))?
            .context("connecting over TCP")?;
        s.set_nodelay(true).context("TCP connection")?;
        let (mut rd, mut wr) = s.into_split();
        let pending = Pending::default();
        let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        // Writer: everything queued goes out in one write.
        let writer = tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(f) = frames_rx.recv().await {
                batch.clear();
                batch.extend_from_slice(&f);
                while let Ok(f) = frames_rx.try_recv() {
                    batch.extend_from_slice(&f);
                }
                if wr.write_all(&batch).await.is_err() {
                    break;
                }
            }
        });
        // Reader: replies to whoever waits for them.
        let reader = {
            let pending = pending.clone();
            tokio::spawn(async move {
                let mut fr = FrameReader::default();
                let mut buf = vec![0u8; 1 << 18];
                let mut corrupt = 0u64;
                loop {
                    let n = match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let now = epoch.elapsed();
                    fr.extend(&buf[..n]);
                    while let Ok(Some(m)) = fr.next_frame() {
                        match decode(m, size).and_then(|id| pending.lock().expect("pending").remove(&id)) {
                            Some(tx) => {
                                let _ = tx.send(now);
                            }
                            None => corrupt += 1,
                        }
                    }
                }
                corrupt
            })
        };
        let start = epoch.elapsed();
        let shared = Actors::new(epoch, start, &c, pending);
        let mut actors = Vec::new();
        for _ in 0..c.actors {
            let frames_tx = frames_tx.clone();
            actors.push(tokio::spawn(shared.clone().run(move |id| {
                let mut f = Vec::with_capacity(size + 4);
                frame(&mut f, &encode(id, size));
                // The writer is gone only if the connection is.
                let sent = frames_tx.send(f).is_ok();
                async move { Ok(sent) }
            })));
        }
        drop(frames_tx);
        let mut completions = Vec::new();
        for a in actors {
            completions.extend(a.await.context("actor task")??);
        }
        writer.abort();
        reader.abort();
        Ok((start, completions))
    })?;
    let c = join(client, "TCP RPC client");
    stop.store(true, Ordering::Relaxed);
    let requests = join(server, "TCP RPC server")?;
    let (start, completions) = c?;
    let (end, counted) = rpc_window(&completions, start, cfg);
    Ok(PeerResult {
        delivered: counted.len() as u64,
        window: end.saturating_sub(start),
        latencies: counted,
        accepted: requests.distinct(),
        duplicated: requests.duplicated(),
        corrupt: requests.corrupt,
        drained: true,
        start,
        tally: requests,
        ..Default::default()
    })
}
