//! TCP: length-prefixed frames on kernel TCP connections.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use crate::channel::{ClosedSignal, Link};
use crate::node::Core;
use crate::stats::bump;
use crate::wire::{Encoded, PREFIX};
use crate::{Header, Transport};

pub(crate) struct TcpLink {
    wr: OwnedWriteHalf,
}

impl Link for TcpLink {
    async fn send(&mut self, frame: &Encoded) -> Result<(), String> {
        self.wr.write_all(frame.prefixed()).await.map_err(|e| e.to_string())
    }
    fn acked(&self) -> Option<u64> {
        None
    }
    fn cost(&self, len: usize) -> u64 {
        (len + PREFIX) as u64
    }
    async fn close(mut self) -> bool {
        // A FIN after everything written; the kernel delivers it unless
        // the connection fails, which TCP does not report back.
        self.wr.shutdown().await.is_ok()
    }
}

/// Open a connection to `addr`; its read half is served like an accepted
/// connection's, and its end is the channel's closed signal.
pub(crate) async fn connect<H: Header>(core: Arc<Core<H>>, addr: SocketAddr) -> Result<(TcpLink, ClosedSignal), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        match serve(core, rd).await {
            // The node is closing: the channel closes by itself, after
            // sending what it still holds.
            Ended::NodeClosed => drop(tx),
            Ended::Connection(reason) => {
                let _ = tx.send(reason);
            }
        }
    });
    let closed: ClosedSignal = Box::pin(async move {
        match rx.await {
            Ok(reason) => reason,
            Err(_) => std::future::pending().await,
        }
    });
    Ok((TcpLink { wr }, closed))
}

/// Accept connections until the node shuts down.
pub(crate) async fn accept_loop<H: Header>(core: Arc<Core<H>>, listener: TcpListener) {
    let mut shutdown = core.shutdown.clone();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tracing::trace!(%peer, "tcp connection accepted");
                    let (rd, wr) = stream.into_split();
                    let core = core.clone();
                    tokio::spawn(async move {
                        // This node sends over connections it opened
                        // itself, so each direction's FIFO order depends
                        // on one connection only; the write half is held
                        // unused, since dropping it would send a FIN that
                        // the peer takes for the end of its channel.
                        let _write_half = wr;
                        if let Ended::Connection(reason) = serve(core, rd).await {
                            tracing::trace!(%peer, %reason, "tcp connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Out of descriptors and the like: back off briefly
                    // rather than spin.
                    tracing::warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

/// Why a reader stopped.
enum Ended {
    NodeClosed,
    Connection(String),
}

/// Read frames until the connection ends (or breaks the framing, or the
/// node shuts down).
async fn serve<H: Header>(core: Arc<Core<H>>, rd: OwnedReadHalf) -> Ended {
    let mut rd = BufReader::with_capacity(256 << 10, rd);
    let mut shutdown = core.shutdown.clone();
    loop {
        let mut len = [0u8; PREFIX];
        tokio::select! {
            r = rd.read_exact(&mut len) => if let Err(e) = r {
                return Ended::Connection(if e.kind() == std::io::ErrorKind::UnexpectedEof { "closed by peer".into() } else { e.to_string() });
            },
            _ = crate::node::stopped(&mut shutdown) => return Ended::NodeClosed,
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > core.max_frame_size {
            // The stream cannot be re-synchronised: drop the connection.
            bump(&core.counters.malformed_frames);
            return Ended::Connection(format!("frame of {len} bytes outside 1..={}", core.max_frame_size));
        }
        let mut buf = BytesMut::zeroed(len);
        if let Err(e) = rd.read_exact(&mut buf).await {
            return Ended::Connection(e.to_string());
        }
        core.counters.tcp.on_received(len);
        if core.receive_frame(buf.freeze(), Transport::Tcp).await.is_err() {
            return Ended::NodeClosed;
        }
    }
}
