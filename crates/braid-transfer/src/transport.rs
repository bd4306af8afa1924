//! Byte streams the engine runs over: a [`Connector`] opens streams on the sender, an
//! [`Acceptor`] yields them on the receiver. Kernel TCP is the default ([`TcpConnector`],
//! [`TcpAcceptor`]); TLS or Braid streams plug in by implementing the two traits.
//!
//! Each stream may come with a [`LossProbe`] reporting its retransmission counters, which the
//! network stage's utility (seed 002 eq. 2) charges: for TCP, `TCP_INFO`'s `tcpi_total_retrans`
//! over `tcpi_segs_out` (Linux), read with `getsockopt` as `braid-node` reads `tcpi_bytes_acked`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

/// A bidirectional byte stream.
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ByteStream for T {}

/// A boxed future, for the object-safe connector traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Retransmission counters of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LossCounters {
    /// Segments retransmitted so far.
    pub retransmitted: u64,
    /// Segments sent so far.
    pub sent: u64,
}

/// Reads a stream's loss counters while another task uses the stream.
pub trait LossProbe: Send + Sync {
    /// The counters now; `None` when unavailable.
    fn counters(&self) -> Option<LossCounters>;
}

/// An open stream and its optional loss probe.
pub struct Connection {
    /// The stream.
    pub stream: Box<dyn ByteStream>,
    /// Its loss counters, if the transport has them.
    pub loss: Option<Arc<dyn LossProbe>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("loss", &self.loss.is_some()).finish()
    }
}

/// What a stream is for (a transport may tune them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRole {
    /// The control stream: small messages, latency matters.
    Control,
    /// A data stream: bulk chunks.
    Data,
}

/// Opens streams to the receiver.
pub trait Connector: Send + Sync + 'static {
    /// Opens one stream.
    fn connect(&self, role: StreamRole) -> BoxFuture<'_, io::Result<Connection>>;
}

/// Yields the streams senders open.
pub trait Acceptor: Send + Sync + 'static {
    /// Waits for the next stream.
    fn accept(&self) -> BoxFuture<'_, io::Result<Connection>>;
}

/// Kernel TCP to `addr`.
#[derive(Debug, Clone, Copy)]
pub struct TcpConnector {
    /// The receiver's address.
    pub addr: SocketAddr,
}

fn tcp_connection(stream: TcpStream, role: StreamRole) -> io::Result<Connection> {
    // Bulk streams keep Nagle on (full segments); control messages go out at once.
    stream.set_nodelay(role == StreamRole::Control)?;
    let probe = stream.as_fd().try_clone_to_owned().ok().map(|fd| Arc::new(TcpInfoProbe { fd }) as Arc<dyn LossProbe>);
    Ok(Connection { stream: Box::new(stream), loss: probe })
}

impl Connector for TcpConnector {
    fn connect(&self, role: StreamRole) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move { tcp_connection(TcpStream::connect(self.addr).await?, role) })
    }
}

/// A TCP listener.
#[derive(Debug)]
pub struct TcpAcceptor {
    listener: TcpListener,
}

impl TcpAcceptor {
    /// Listens on `addr`.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Ok(TcpAcceptor { listener: TcpListener::bind(addr).await? })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl Acceptor for TcpAcceptor {
    fn accept(&self) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            let (stream, _) = self.listener.accept().await?;
            // The receiver reads bulk data; its control replies are small and sent at once.
            stream.set_nodelay(true)?;
            let probe = stream.as_fd().try_clone_to_owned().ok().map(|fd| Arc::new(TcpInfoProbe { fd }) as Arc<dyn LossProbe>);
            Ok(Connection { stream: Box::new(stream), loss: probe })
        })
    }
}

/// `TCP_INFO` on a duplicate of the socket's descriptor (the same socket, usable while the
/// stream itself is owned by a worker).
struct TcpInfoProbe {
    fd: OwnedFd,
}

impl LossProbe for TcpInfoProbe {
    fn counters(&self) -> Option<LossCounters> {
        tcp_loss_counters(&self.fd)
    }
}

/// `tcpi_total_retrans` and `tcpi_segs_out` of a TCP socket (Linux ≥ 4.2); `None` elsewhere.
#[cfg(target_os = "linux")]
pub fn tcp_loss_counters(fd: &impl AsRawFd) -> Option<LossCounters> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable `tcp_info` of `len` bytes and the descriptor is open for the
    // lifetime of `fd`; the kernel writes at most `len` bytes and reports how many it wrote.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len)
    };
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_segs_out) + std::mem::size_of::<u32>();
    if rc != 0 || (len as usize) < end {
        return None;
    }
    // SAFETY: zero-initialised, then (partly) written by the kernel; every bit pattern is a valid
    // `tcp_info` (plain integers).
    let info = unsafe { info.assume_init() };
    Some(LossCounters { retransmitted: u64::from(info.tcpi_total_retrans), sent: u64::from(info.tcpi_segs_out) })
}

/// `TCP_INFO` is Linux-only.
#[cfg(not(target_os = "linux"))]
pub fn tcp_loss_counters(_fd: &impl AsRawFd) -> Option<LossCounters> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn tcp_streams_connect_and_report_segments() {
        let acceptor = TcpAcceptor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let connector = TcpConnector { addr: acceptor.local_addr().unwrap() };
        let (client, server) = tokio::join!(connector.connect(StreamRole::Data), acceptor.accept());
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        client.stream.write_all(&[1u8; 100_000]).await.unwrap();
        client.stream.flush().await.unwrap();
        let mut buf = vec![0u8; 100_000];
        server.stream.read_exact(&mut buf).await.unwrap();
        let counters = client.loss.as_ref().unwrap().counters().unwrap();
        assert!(counters.sent >= 2, "{counters:?}");
        assert!(counters.retransmitted <= counters.sent);
    }
}
