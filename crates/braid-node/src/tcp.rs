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
    /// `tcpi_bytes_acked` when the connection opened (the SYN may count
    /// as one byte); acknowledgements are counted from here.
    acked_base: Option<u64>,
    /// Bytes written (prefixes included).
    written: u64,
}

/// How long a closing channel waits for the peer's kernel to acknowledge
/// what it wrote before reporting the rest as unknown.
const CLOSE_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether TCP can report `Delivered` on this system (Linux: from
/// `TCP_INFO`).
pub(crate) const CAN_CONFIRM: bool = cfg!(target_os = "linux");

/// Bytes of this connection the peer's kernel acknowledged
/// (`tcpi_bytes_acked`, RFC 4898's `tcpEStatsAppHCThruOctetsAcked`, Linux
/// ≥ 4.2). It says the data reached the peer's receive buffer, not that
/// the application read it. `None` where unavailable.
#[cfg(target_os = "linux")]
fn bytes_acked(s: &impl std::os::fd::AsRawFd) -> Option<u64> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable `tcp_info` of `len` bytes and the
    // descriptor is open for the lifetime of `s`; the kernel writes at
    // most `len` bytes and reports how many it wrote.
    let rc = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len)
    };
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + std::mem::size_of::<u64>();
    if rc != 0 || (len as usize) < end {
        // An old kernel without the field.
        return None;
    }
    // SAFETY: zero-initialised, then (partly) written by the kernel; every
    // bit pattern is a valid `tcp_info` (plain integers).
    Some(unsafe { info.assume_init() }.tcpi_bytes_acked)
}

#[cfg(not(target_os = "linux"))]
fn bytes_acked<T>(_: &T) -> Option<u64> {
    None
}

/// Set `TCP_NOTSENT_LOWAT` (see `NodeConfig::tcp_notsent_lowat`); best
/// effort: without it the connection works, with deeper kernel queues.
#[cfg(target_os = "linux")]
fn set_notsent_lowat(s: &TcpStream, bytes: u32) {
    use std::os::fd::AsRawFd;
    let v = bytes as libc::c_int;
    // SAFETY: a valid descriptor and a pointer to a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "TCP_NOTSENT_LOWAT refused");
    }
}

#[cfg(not(target_os = "linux"))]
fn set_notsent_lowat(_: &TcpStream, _: u32) {}

impl Link for TcpLink {
    async fn send(&mut self, frame: &Encoded) -> Result<(), String> {
        self.wr.write_all(frame.prefixed()).await.map_err(|e| e.to_string())?;
        self.written += frame.prefixed().len() as u64;
        Ok(())
    }
    fn acked(&self) -> Option<u64> {
        let base = self.acked_base?;
        // The channel polls this while notifications wait; a failing
        // getsockopt (socket gone) reports nothing new.
        Some(bytes_acked(self.wr.as_ref()).unwrap_or(base).saturating_sub(base))
    }
    fn ack_probe(&self) -> Option<crate::channel::AckProbe> {
        let base = self.acked_base?;
        // A duplicate of the descriptor: the probe never reads a closed
        // (or reused) descriptor, whatever outlives what.
        let dup = socket2::SockRef::from(self.wr.as_ref()).try_clone().ok()?;
        Some(Box::new(move || Some(bytes_acked(&dup).unwrap_or(base).saturating_sub(base))))
    }
    fn cost(&self, len: usize) -> u64 {
        (len + PREFIX) as u64
    }
    async fn close(mut self) -> bool {
        // A FIN after everything written. Where TCP_INFO is available,
        // wait (bounded) until the peer's kernel acknowledged every byte;
        // elsewhere TCP cannot tell, and nothing waits for it.
        if self.wr.shutdown().await.is_err() {
            return false;
        }
        if self.acked_base.is_none() {
            return true;
        }
        let deadline = tokio::time::Instant::now() + CLOSE_ACK_WAIT;
        while tokio::time::Instant::now() < deadline {
            if self.acked().is_some_and(|a| a >= self.written) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        false
    }
}

/// Open a connection to `addr`; its read half is served like an accepted
/// connection's, and its end is the channel's closed signal.
pub(crate) async fn connect<H: Header>(
    core: Arc<Core<H>>,
    addr: SocketAddr,
    notsent_lowat: Option<u32>,
) -> Result<(TcpLink, ClosedSignal), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    if let Some(b) = notsent_lowat {
        set_notsent_lowat(&stream, b);
    }
    let acked_base = bytes_acked(&stream);
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
    Ok((TcpLink { wr, acked_base, written: 0 }, closed))
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
