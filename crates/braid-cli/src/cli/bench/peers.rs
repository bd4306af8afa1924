//! One timed run of a workload over each peer: Braid (braid-net), kernel TCP
//! (tokio) and QUIC (quinn), all on 127.0.0.1 in this process.
//!
//! Every run measures the same interval: from just before the client starts
//! connecting until the receiver holds every byte. Listening sockets are
//! opened before the clock starts; handshakes are inside the interval.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use braid::framing::{FrameReader, FrameWriter};
use braid::stats::ConnectionStats;
use braid::{EndpointConfig, Endpoint};
use bytes::Bytes;
use indicatif::ProgressBar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::quic::{QuicConfigs, SERVER_NAME};

/// What is sent.
#[derive(Debug, Clone)]
pub enum Workload {
    /// `bytes` in application chunks of `chunk` bytes (messages for Braid,
    /// writes for the byte streams).
    Bulk { bytes: u64, chunk: usize, payload: Bytes },
    /// `count` messages of `payload.len()` bytes, pipelined; on byte
    /// streams each is a length-prefixed frame.
    Messages { count: u64, payload: Bytes },
}

impl Workload {
    /// Application payload bytes the receiver must get.
    pub fn total_bytes(&self) -> u64 {
        match self {
            Workload::Bulk { bytes, .. } => *bytes,
            Workload::Messages { count, payload } => count * payload.len() as u64,
        }
    }

    /// The pieces to send, in order: chunks or messages.
    fn pieces(&self) -> impl Iterator<Item = Bytes> + '_ {
        let (n, last) = match self {
            Workload::Bulk { bytes, chunk, .. } => {
                let c = *chunk as u64;
                (bytes.div_ceil(c), (bytes - bytes.saturating_sub(1) / c * c) as usize)
            }
            Workload::Messages { count, payload } => (*count, payload.len()),
        };
        let payload = match self {
            Workload::Bulk { payload, .. } | Workload::Messages { payload, .. } => payload,
        };
        (0..n).map(move |i| if i + 1 == n { payload.slice(..last) } else { payload.clone() })
    }

    fn is_messages(&self) -> bool {
        matches!(self, Workload::Messages { .. })
    }
}

/// Counts received bytes into the progress bar without touching it on
/// every message.
struct Counter<'a> {
    got: u64,
    shown: u64,
    bar: &'a ProgressBar,
}

impl<'a> Counter<'a> {
    fn new(bar: &'a ProgressBar) -> Self {
        Counter { got: 0, shown: 0, bar }
    }

    fn add(&mut self, n: usize) {
        self.got += n as u64;
        if self.got - self.shown >= 1 << 20 {
            self.shown = self.got;
            self.bar.set_position(self.got);
        }
    }
}

/// Result of one run.
#[derive(Debug, Clone, Copy)]
pub struct RunResult {
    pub elapsed: Duration,
    /// Braid's sender-side counters.
    pub braid_stats: Option<ConnectionStats>,
}

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

pub async fn braid(w: &Workload, cfg: &EndpointConfig, bar: &ProgressBar) -> anyhow::Result<RunResult> {
    let server_cfg = EndpointConfig { accept_incoming: true, ..cfg.clone() };
    let client_cfg = EndpointConfig { accept_incoming: false, ..cfg.clone() };
    let server = Endpoint::bind_with(localhost(), server_cfg).context("braid server socket")?;
    let client = Endpoint::bind_with(localhost(), client_cfg).context("braid client socket")?;
    let addr = server.local_addr();
    let total = w.total_bytes();
    let bar_rx = bar.clone();
    let receiver = tokio::spawn(async move {
        let conn = server.accept().await.context("braid server closed")?;
        let mut count = Counter::new(&bar_rx);
        while count.got < total {
            let m = conn.recv_message().await.context("braid receive")?;
            count.add(m.len());
        }
        anyhow::Ok((Instant::now(), conn, server))
    });
    let start = Instant::now();
    let conn = client.connect(addr).await.context("braid connect")?;
    for piece in w.pieces() {
        conn.send_message(piece).await.context("braid send")?;
    }
    let (end, _server_conn, _server) = receiver.await.context("braid receiver task")??;
    let stats = conn.stats();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
    client.close();
    Ok(RunResult { elapsed: end.duration_since(start), braid_stats: Some(stats) })
}

pub async fn tcp(w: &Workload, bar: &ProgressBar) -> anyhow::Result<RunResult> {
    let listener = tokio::net::TcpListener::bind(localhost()).await.context("tcp listen")?;
    let addr = listener.local_addr()?;
    let total = w.total_bytes();
    let messages = w.is_messages();
    let bar_rx = bar.clone();
    let receiver = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.context("tcp accept")?;
        let mut count = Counter::new(&bar_rx);
        if messages {
            let mut frames = FrameReader::new(&mut stream);
            while count.got < total {
                let m = frames.recv().await?.context("tcp stream ended early")?;
                count.add(m.len());
            }
        } else {
            let mut buf = vec![0u8; 256 << 10];
            while count.got < total {
                let n = stream.read(&mut buf).await.context("tcp read")?;
                anyhow::ensure!(n > 0, "tcp stream ended early");
                count.add(n);
            }
        }
        anyhow::Ok((Instant::now(), stream))
    });
    let start = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(addr).await.context("tcp connect")?;
    if messages {
        let mut frames = FrameWriter::new(&mut stream);
        for piece in w.pieces() {
            frames.send(&piece).await?;
        }
        frames.flush().await?;
    } else {
        for piece in w.pieces() {
            stream.write_all(&piece).await.context("tcp write")?;
        }
    }
    let (end, _peer) = receiver.await.context("tcp receiver task")??;
    let _ = stream.shutdown().await;
    Ok(RunResult { elapsed: end.duration_since(start), braid_stats: None })
}

pub async fn quinn(w: &Workload, cfg: &QuicConfigs, bar: &ProgressBar) -> anyhow::Result<RunResult> {
    let server = quinn::Endpoint::server(cfg.server.clone(), localhost()).context("quinn server socket")?;
    let mut client = quinn::Endpoint::client(localhost()).context("quinn client socket")?;
    client.set_default_client_config(cfg.client.clone());
    let addr = server.local_addr()?;
    let total = w.total_bytes();
    let messages = w.is_messages();
    let bar_rx = bar.clone();
    let server_task = server.clone();
    let receiver = tokio::spawn(async move {
        let incoming = server_task.accept().await.context("quinn server closed")?;
        let conn = incoming.await.context("quinn handshake")?;
        let mut stream = conn.accept_uni().await.context("quinn accept stream")?;
        let mut count = Counter::new(&bar_rx);
        if messages {
            let mut frames = FrameReader::new(&mut stream);
            while count.got < total {
                let m = frames.recv().await?.context("quinn stream ended early")?;
                count.add(m.len());
            }
        } else {
            while count.got < total {
                let chunk = stream.read_chunk(usize::MAX, true).await.context("quinn read")?;
                count.add(chunk.context("quinn stream ended early")?.bytes.len());
            }
        }
        anyhow::Ok((Instant::now(), conn))
    });
    let start = Instant::now();
    let conn = client.connect(addr, SERVER_NAME)?.await.context("quinn connect")?;
    let mut stream = conn.open_uni().await.context("quinn open stream")?;
    if messages {
        let mut frames = FrameWriter::new(&mut stream);
        for piece in w.pieces() {
            frames.send(&piece).await?;
        }
        frames.flush().await?;
    } else {
        for piece in w.pieces() {
            stream.write_chunk(piece).await.context("quinn write")?;
        }
    }
    let _ = stream.finish();
    let (end, server_conn) = receiver.await.context("quinn receiver task")??;
    conn.close(0u32.into(), b"done");
    server_conn.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(2), client.wait_idle()).await;
    server.close(0u32.into(), b"done");
    Ok(RunResult { elapsed: end.duration_since(start), braid_stats: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_add_up() {
        let payload = Bytes::from(vec![1u8; 10]);
        for bytes in [0u64, 1, 9, 10, 11, 95, 100] {
            let w = Workload::Bulk { bytes, chunk: 10, payload: payload.clone() };
            let sizes: Vec<usize> = w.pieces().map(|p| p.len()).collect();
            assert_eq!(sizes.iter().sum::<usize>() as u64, bytes, "{bytes}: {sizes:?}");
            assert!(sizes.iter().all(|&s| s > 0 && s <= 10));
        }
        let w = Workload::Messages { count: 3, payload: Bytes::from_static(b"abcd") };
        assert_eq!(w.pieces().count(), 3);
        assert_eq!(w.total_bytes(), 12);
    }
}
