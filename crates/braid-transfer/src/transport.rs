//! Byte streams the engine runs over: a [`Connector`] opens streams on the sender, an
//! [`Acceptor`] yields them on the receiver. Kernel TCP is the default ([`TcpConnector`],
//! [`TcpAcceptor`]); TLS or Braid streams plug in by implementing the two traits.
//!
//! Each stream may come with a [`LossProbe`] reporting its retransmission counters, which the
//! network stage's utility (seed 002 eq. 2) charges: for TCP, `TCP_INFO`'s `tcpi_total_retrans`
//! over `tcpi_segs_out` (Linux), read with `getsockopt` as `braid-node` reads `tcpi_bytes_acked`.
//!
//! A stream may also come with [`ReceiveBatching`]: a receiver that knows how many bytes it still
//! needs (the rest of a chunk) asks the kernel not to wake it before most of them are there
//! (`SO_RCVLOWAT`). Without it a chunk arriving at link rate wakes its reader every few segments:
//! at 500 Mbit/s over an emulated 20 ms path, 205,000 `recvfrom` and 223,000 `epoll_wait` calls
//! per GiB, two thirds of the receiver's CPU.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::congestion::TcpCongestion;

/// A bidirectional byte stream.
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ByteStream for T {}

/// A boxed future, for the object-safe connector traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Retransmission counters and round-trip times of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LossCounters {
    /// Segments retransmitted so far.
    pub retransmitted: u64,
    /// Segments sent so far.
    pub sent: u64,
    /// Smoothed round-trip time now, µs (0: unknown).
    pub smoothed_rtt_us: u32,
    /// Smallest round-trip time seen, µs (0: unknown).
    pub min_rtt_us: u32,
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
    /// Its wake-up threshold, if the transport has one.
    pub batching: Option<ReceiveBatching>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("loss", &self.loss.is_some()).field("batching", &self.batching).finish()
    }
}

/// Sets how many bytes must wait in a socket's receive queue before a reader sleeping on it is
/// woken (`SO_RCVLOWAT`); 1 is the default, wake on any data.
pub trait WakeThreshold: Send + Sync {
    /// Sets the threshold; a failure leaves the old one (waking earlier is only slower).
    fn set(&self, bytes: usize);
}

/// The largest wake-up threshold a reader asks for: a wake-up per 256 KiB is about 240 a second
/// at 500 Mbit/s, against thousands with one per few segments, and it stays far below any
/// receive buffer a bulk stream has (the kernel grows an unlocked buffer to twice the threshold).
pub const MAX_WAKE_THRESHOLD: usize = 256 << 10;

/// Below this many bytes, batching is not worth a system call: the reader wakes on any data.
const MIN_WAKE_THRESHOLD: usize = 16 << 10;

/// Receive batching for one stream: the socket's threshold and how much the layers between the
/// socket and the reader may already hold.
///
/// The threshold must never exceed the bytes certain still to arrive on the socket, or a reader
/// waits for data the sender will not send until it hears back. A reader that still needs
/// `remaining` bytes of a frame is certain to see at least `remaining − held_above` more on the
/// socket (the layers above hold at most `held_above` of the frame already, and encryption only
/// adds bytes on the wire), so that is the bound [`ReceiveBatching::threshold`] keeps.
#[derive(Clone)]
pub struct ReceiveBatching {
    socket: Arc<dyn WakeThreshold>,
    held_above: usize,
}

impl std::fmt::Debug for ReceiveBatching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveBatching").field("held_above", &self.held_above).finish()
    }
}

impl ReceiveBatching {
    /// Batching through `socket`, with at most `held_above` bytes buffered between it and the
    /// reader (0 for a bare socket; a TLS layer's record and plaintext buffers otherwise).
    pub fn new(socket: Arc<dyn WakeThreshold>, held_above: usize) -> Self {
        ReceiveBatching { socket, held_above }
    }

    /// The threshold for a reader that still needs `remaining` bytes: as large as is certain to
    /// arrive, at most [`MAX_WAKE_THRESHOLD`], and 1 (any data) when that is too little to batch.
    pub fn threshold(&self, remaining: usize) -> usize {
        let certain = remaining.saturating_sub(self.held_above);
        if certain < MIN_WAKE_THRESHOLD {
            1
        } else {
            certain.min(MAX_WAKE_THRESHOLD)
        }
    }

    /// Sets the socket's threshold.
    pub fn set(&self, bytes: usize) {
        self.socket.set(bytes);
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
#[derive(Debug, Clone)]
pub struct TcpConnector {
    /// The receiver's address.
    pub addr: SocketAddr,
    /// The streams' congestion control.
    pub congestion: TcpCongestion,
}

impl TcpConnector {
    /// Streams to `addr` with the default congestion control ([`TcpCongestion::default`]).
    pub fn new(addr: SocketAddr) -> Self {
        TcpConnector { addr, congestion: TcpCongestion::default() }
    }
}

/// Every stream, data streams included, sends without Nagle's delay (`TCP_NODELAY`). Nagle
/// holds a small write back until everything before it is acknowledged, and the receiver
/// delays its acknowledgements: a data stream's Attach message after the TLS handshake and the
/// short tail of a transfer's last chunk each waited for that, 62 ms of a 1 KB transfer's 167 ms
/// over a 20 ms path (105 ms without). Bulk segments stay full without it: chunks are written
/// in large pieces, and while the congestion window is what limits a stream, the kernel cuts
/// the queued bytes into full segments anyway.
pub(crate) fn set_stream_options(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

fn tcp_connection(stream: TcpStream) -> io::Result<Connection> {
    set_stream_options(&stream)?;
    let (loss, batching) = tcp_socket_hooks(&stream, 0);
    Ok(Connection { stream: Box::new(stream), loss, batching })
}

/// A TCP stream's loss probe and receive batching, both on a duplicate of its descriptor (the
/// same socket, usable while the stream itself is owned by a worker); `held_above` is what a
/// layer over the socket (TLS) may buffer. `None`s when the descriptor cannot be duplicated.
pub(crate) fn tcp_socket_hooks(tcp: &TcpStream, held_above: usize) -> (Option<Arc<dyn LossProbe>>, Option<ReceiveBatching>) {
    match tcp.as_fd().try_clone_to_owned() {
        Ok(fd) => {
            let socket = Arc::new(TcpSocket { fd });
            (Some(Arc::clone(&socket) as Arc<dyn LossProbe>), Some(ReceiveBatching::new(socket, held_above)))
        }
        Err(_) => (None, None),
    }
}

impl Connector for TcpConnector {
    fn connect(&self, _role: StreamRole) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            let stream = TcpStream::connect(self.addr).await?;
            self.congestion.apply(&stream)?;
            tcp_connection(stream)
        })
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
            // The receiver's replies are small: sent at once.
            set_stream_options(&stream)?;
            let (loss, batching) = tcp_socket_hooks(&stream, 0);
            Ok(Connection { stream: Box::new(stream), loss, batching })
        })
    }
}

/// A duplicate of a TCP stream's descriptor: `TCP_INFO` and `SO_RCVLOWAT` while a worker owns
/// the stream.
struct TcpSocket {
    fd: OwnedFd,
}

impl LossProbe for TcpSocket {
    fn counters(&self) -> Option<LossCounters> {
        tcp_loss_counters(&self.fd)
    }
}

impl WakeThreshold for TcpSocket {
    /// Never more than a quarter of the socket's current receive buffer. Linux grows a buffer too
    /// small for the threshold, and when it does it also clamps the advertised window to the
    /// threshold (`tcp_set_rcvlowat`): early in a connection, before autotuning has grown the
    /// buffer, a 256 KiB threshold held a 20 ms, 500 Mbit/s path to a 256 KiB window for half a
    /// second. Within the buffer, the window is left to autotuning.
    fn set(&self, bytes: usize) {
        let buffer = socket_option(&self.fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0);
        let value = bytes.min(usize::try_from(buffer).unwrap_or(0) / 4).max(1);
        let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
        // SAFETY: the descriptor is open for the lifetime of `self.fd`, and the option value is a
        // `c_int` of the length given. A failure leaves the old threshold (see the trait).
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// An integer socket option.
fn socket_option(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a writable `c_int` of `len` bytes and the descriptor is open for the
    // lifetime of `fd`; the kernel writes at most `len` bytes.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&mut value as *mut libc::c_int).cast(), &mut len) };
    (rc == 0).then_some(value)
}

/// `tcpi_total_retrans` and `tcpi_segs_out` of a TCP socket (Linux ≥ 4.2), with `tcpi_rtt` and
/// `tcpi_min_rtt` (Linux ≥ 4.6; 0 before); `None` elsewhere.
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
    let has_min_rtt = len as usize >= std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt) + std::mem::size_of::<u32>();
    Some(LossCounters {
        retransmitted: u64::from(info.tcpi_total_retrans),
        sent: u64::from(info.tcpi_segs_out),
        smoothed_rtt_us: info.tcpi_rtt,
        min_rtt_us: if has_min_rtt { info.tcpi_min_rtt } else { 0 },
    })
}

/// `TCP_INFO` is Linux-only.
#[cfg(not(target_os = "linux"))]
pub fn tcp_loss_counters(_fd: &impl AsRawFd) -> Option<LossCounters> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Ignored;
    impl WakeThreshold for Ignored {
        fn set(&self, _bytes: usize) {}
    }

    proptest! {
        /// The threshold never asks for more than is certain to arrive (or a reader would wait
        /// for bytes its peer will not send), never exceeds the cap, and is 1 when too little
        /// is left to batch.
        #[test]
        fn the_wake_threshold_stays_within_what_is_certain_to_arrive(remaining in 0usize..(8 << 20), held in 0usize..(1 << 20)) {
            let t = ReceiveBatching::new(Arc::new(Ignored), held).threshold(remaining);
            prop_assert!(t >= 1);
            prop_assert!(t <= MAX_WAKE_THRESHOLD);
            prop_assert!(t == 1 || t <= remaining.saturating_sub(held), "{t} for {remaining} with {held} held");
            if remaining.saturating_sub(held) >= MAX_WAKE_THRESHOLD {
                prop_assert_eq!(t, MAX_WAKE_THRESHOLD);
            }
        }
    }

    /// Forwards to a real socket and remembers what was asked.
    struct Recording {
        socket: TcpSocket,
        asked: std::sync::Mutex<Vec<usize>>,
    }
    impl WakeThreshold for Recording {
        fn set(&self, bytes: usize) {
            self.asked.lock().unwrap().push(bytes);
            self.socket.set(bytes);
        }
    }

    #[tokio::test]
    async fn a_batched_read_gets_every_byte_and_leaves_the_socket_waking_on_any_data() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let connector = TcpConnector::new(listener.local_addr().unwrap());
        let (client, server) = tokio::join!(connector.connect(StreamRole::Data), listener.accept());
        let (mut client, (mut server, _)) = (client.unwrap(), server.unwrap());
        let fd = server.as_fd().try_clone_to_owned().unwrap();
        let recording = Arc::new(Recording { socket: TcpSocket { fd: fd.try_clone().unwrap() }, asked: Default::default() });
        let batching = ReceiveBatching::new(Arc::clone(&recording) as Arc<dyn WakeThreshold>, 0);
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = tokio::spawn(async move {
            // In pieces with pauses, as a sender held back by the network writes: the reader
            // must never wait for more than the rest of the frame brings.
            for piece in sent.chunks(700_001) {
                client.stream.write_all(piece).await.unwrap();
                client.stream.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            (client, sent)
        });
        let mut got = vec![0u8; 3_000_000];
        tokio::time::timeout(std::time::Duration::from_secs(10), crate::protocol::read_body(&mut server, &mut got, Some(&batching)))
            .await
            .expect("the read ends once the last byte is there")
            .unwrap();
        let (_client, sent) = writer.await.unwrap();
        assert!(got == sent);
        let asked = recording.asked.lock().unwrap().clone();
        assert!(asked.iter().any(|&t| t > 1), "{asked:?}");
        assert_eq!(asked.last(), Some(&1), "{asked:?}");
        assert_eq!(socket_option(&fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT), Some(1));
    }

    #[tokio::test]
    async fn tcp_streams_connect_and_report_segments() {
        let acceptor = TcpAcceptor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let connector = TcpConnector::new(acceptor.local_addr().unwrap());
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
