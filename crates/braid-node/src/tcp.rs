//! TCP: length-prefixed frames on kernel TCP connections, inside TLS 1.3
//! with mutual authentication (`braid-tls`: Ed25519 raw public keys judged by
//! the node's known hosts, issue 17 item 4), or in the clear when the node
//! runs `InsecureNoAuth`.
//!
//! Delivery notifications come from `TCP_INFO`'s `tcpi_bytes_acked` (the
//! peer's kernel acknowledged the bytes). Under TLS the socket carries more
//! than the frames (handshake, record headers and tags), so each frame is
//! booked at the socket byte count reached once its last record was
//! written, and counts as acknowledged when the kernel's count passes it:
//! exact whatever the record sizes. A client's connect returns only after
//! the server confirmed it accepted the client's key (`braid-tls`), so
//! nothing is sent, let alone acknowledged, to a server that refused it.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use braid_tls::TlsSettings;
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::channel::{ClosedSignal, Link};
use crate::node::Core;
use crate::stats::bump;
use crate::wire::{Encoded, PREFIX};
use crate::{Header, Message, Transport, WireError};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// A TCP socket that counts the bytes handed to the kernel.
struct Counted {
    inner: TcpStream,
    written: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &poll {
            self.written.fetch_add(*n as u64, Ordering::AcqRel);
        }
        poll
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &poll {
            self.written.fetch_add(*n as u64, Ordering::AcqRel);
        }
        poll
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Frames written but not yet known acknowledged: (socket bytes written
/// once the frame was out, cumulative frame bytes up to it).
#[derive(Default)]
struct Marks {
    pending: VecDeque<(u64, u64)>,
    acked: u64,
}

/// Reads how many frame bytes the peer's kernel acknowledged.
#[derive(Clone)]
struct AckReader {
    /// A duplicate of the socket's descriptor, for `TCP_INFO`: never a
    /// closed (or reused) descriptor, whatever outlives what.
    socket: Arc<socket2::Socket>,
    /// `tcpi_bytes_acked` when the connection opened (the SYN may count as
    /// one byte).
    base: u64,
    marks: Arc<Mutex<Marks>>,
}

impl AckReader {
    fn read(&self) -> u64 {
        // A failing getsockopt (socket gone) reports nothing new.
        let on_wire = bytes_acked(&*self.socket).unwrap_or(self.base).saturating_sub(self.base);
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(&(wire_end, frame_end)) = marks.pending.front() {
            if wire_end > on_wire {
                break;
            }
            marks.acked = frame_end;
            marks.pending.pop_front();
        }
        marks.acked
    }
}

pub(crate) struct TcpLink {
    wr: Writer,
    /// Socket bytes written (TLS handshake and records included).
    on_wire: Arc<AtomicU64>,
    acks: Option<AckReader>,
    /// Frame bytes written (prefixes included).
    written: u64,
    /// Where a batch of small frames is gathered into one write.
    gather: Vec<u8>,
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

/// Frames smaller than this are copied together and written at once (one
/// system call, one TLS record where they fit) when several are queued;
/// larger ones are written from their own buffer.
const GATHER_BYTES: usize = 64 << 10;

impl TcpLink {
    /// Book frame bytes up to `self.written` at the socket byte count
    /// reached now (after the flush that put them on the socket).
    fn mark_written(&self) {
        if let Some(acks) = &self.acks {
            let mark = (self.on_wire.load(Ordering::Acquire), self.written);
            acks.marks.lock().unwrap_or_else(PoisonError::into_inner).pending.push_back(mark);
        }
    }
}

impl Link for TcpLink {
    async fn send(&mut self, frame: &Encoded) -> Result<(), String> {
        self.send_batch(&[frame]).await
    }
    async fn send_batch(&mut self, frames: &[&Encoded]) -> Result<(), String> {
        if let [frame] = frames {
            self.wr.write_all(frame.prefixed()).await.map_err(|e| e.to_string())?;
        } else {
            for frame in frames {
                let bytes = frame.prefixed();
                if !self.gather.is_empty() && self.gather.len() + bytes.len() > GATHER_BYTES {
                    self.wr.write_all(&self.gather).await.map_err(|e| e.to_string())?;
                    self.gather.clear();
                }
                if bytes.len() >= GATHER_BYTES {
                    self.wr.write_all(bytes).await.map_err(|e| e.to_string())?;
                } else {
                    self.gather.extend_from_slice(bytes);
                }
            }
            if !self.gather.is_empty() {
                self.wr.write_all(&self.gather).await.map_err(|e| e.to_string())?;
                self.gather.clear();
            }
        }
        // TLS holds records until flushed; plain TCP's flush does nothing.
        self.wr.flush().await.map_err(|e| e.to_string())?;
        self.written += frames.iter().map(|f| f.prefixed().len() as u64).sum::<u64>();
        self.mark_written();
        Ok(())
    }
    fn acked(&self) -> Option<u64> {
        self.acks.as_ref().map(AckReader::read)
    }
    fn ack_probe(&self) -> Option<crate::channel::AckProbe> {
        let acks = self.acks.clone()?;
        Some(Box::new(move || Some(acks.read())))
    }
    fn cost(&self, len: usize) -> u64 {
        (len + PREFIX) as u64
    }
    async fn close(mut self) -> bool {
        // A FIN (after TLS's close_notify) after everything written. Where
        // TCP_INFO is available, wait (bounded) until the peer's kernel
        // acknowledged every frame; elsewhere TCP cannot tell, and nothing
        // waits for it.
        if self.wr.shutdown().await.is_err() {
            return false;
        }
        if self.acks.is_none() {
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

/// Open a connection to `addr` (TLS when `tls` is given); its read half is
/// served like an accepted connection's, and its end is the channel's
/// closed signal.
pub(crate) async fn connect<H: Header>(
    core: Arc<Core<H>>,
    addr: SocketAddr,
    notsent_lowat: Option<u32>,
    tls: Option<TlsSettings>,
) -> Result<(TcpLink, ClosedSignal), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    if let Some(b) = notsent_lowat {
        set_notsent_lowat(&stream, b);
    }
    let acks = bytes_acked(&stream).and_then(|base| {
        let socket = socket2::SockRef::from(&stream).try_clone().ok()?;
        Some(AckReader { socket: Arc::new(socket), base, marks: Arc::default() })
    });
    let on_wire = Arc::new(AtomicU64::new(0));
    let counted = Counted { inner: stream, written: on_wire.clone() };
    let (rd, wr): (Reader, Writer) = match tls {
        Some(tls) => {
            // The error names the peer and, if we refused it, its key.
            let (stream, _key) = tls.connect(counted, addr).await.map_err(|e| e.to_string())?;
            let (rd, wr) = tokio::io::split(stream);
            (Box::new(rd), Box::new(wr))
        }
        None => {
            let (rd, wr) = tokio::io::split(counted);
            (Box::new(rd), Box::new(wr))
        }
    };
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
    Ok((TcpLink { wr, on_wire, acks, written: 0, gather: Vec::new() }, closed))
}

/// TLS handshakes an accepting node runs at once. Each holds a socket and
/// rustls's buffers (tens of KiB) for at most the handshake timeout
/// (`NodeConfig::connect_timeout`); beyond this many, new connections wait
/// in the kernel's backlog, so a flood of silent or hostile clients costs
/// bounded memory while established channels keep running.
const MAX_PENDING_HANDSHAKES: usize = 256;

/// Accept connections until the node shuts down; under TLS each handshake
/// runs in its connection's task (at most [`MAX_PENDING_HANDSHAKES`] at
/// once), so a slow or hostile client holds up no one else.
pub(crate) async fn accept_loop<H: Header>(core: Arc<Core<H>>, listener: TcpListener, tls: Option<TlsSettings>) {
    let mut shutdown = core.shutdown.clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let slot = tokio::select! {
            // The semaphore is never closed.
            s = Arc::clone(&slots).acquire_owned() => match s { Ok(s) => s, Err(_) => return },
            _ = crate::node::stopped(&mut shutdown) => return,
        };
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tracing::trace!(%peer, "tcp connection accepted");
                    let core = core.clone();
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        let (rd, wr): (Reader, Writer) = match tls {
                            Some(tls) => match tls.accept_from(stream, peer).await {
                                Ok((stream, _key)) => {
                                    let (rd, wr) = tokio::io::split(stream);
                                    (Box::new(rd), Box::new(wr))
                                }
                                Err(e) => {
                                    // An unknown or changed key, no key, or not TLS: nothing kept.
                                    tracing::info!(%peer, error = %e, "tcp connection refused");
                                    return;
                                }
                            },
                            None => {
                                let (rd, wr) = stream.into_split();
                                (Box::new(rd), Box::new(wr))
                            }
                        };
                        drop(slot);
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

/// Bytes read from the socket at a time. Frames are cut out of the read
/// buffer without a copy or an allocation of their own (`split_to`), so a
/// message the application keeps holds on to the chunk it arrived in:
/// this bounds what one kept message can pin (the chunk of a frame larger
/// than this is the frame itself).
const READ_CHUNK: usize = 64 << 10;
/// The most a chunk is grown to for frames larger than [`READ_CHUNK`] (a
/// kept message pins at most this, or its own frame if larger).
const LARGE_FRAMES_CHUNK: usize = 1 << 20;
/// A read buffer with less room than this gets a new chunk before reading.
const MIN_READ_ROOM: usize = 4 << 10;

/// A TCP frame's length prefix outside what the node accepts (an empty
/// frame, or one above `max_frame_size`): the byte stream cannot be
/// re-synchronised, so the reader drops the connection and counts it in
/// `malformed_frames`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes outside 1..={max}")]
pub struct FrameLengthError {
    /// The length the prefix gave.
    pub len: usize,
    /// The node's `max_frame_size`.
    pub max: usize,
}

/// The TCP reader's batch decoder: bytes read from a connection, a chunk
/// of up to 64 KiB at a time, and the frames cut out of them (a 4-byte big
/// endian length, then the frame; see the `wire` module), each a zero-copy
/// slice of the chunk it arrived in. Every frame a read completed comes out
/// of one call after another to [`TcpFrames::next_frame`], so a read of
/// many small messages is decoded in one pass. Public so that tests and the
/// fuzz target (`fuzz/fuzz_targets/node_tcp_frames.rs`) drive the very code
/// the reader runs; frames are then decoded by [`decode_frame`].
///
/// ```
/// use braid_node::TcpFrames;
/// let mut f = TcpFrames::new(1 << 20);
/// f.push(&[0, 0, 0, 2, b'h']);
/// assert_eq!(f.next_frame(), Ok(None)); // the rest is not here yet
/// f.push(&[b'i', 0, 0, 0, 0]);
/// assert_eq!(f.next_frame().unwrap().as_deref(), Some(&b"hi"[..]));
/// assert!(f.next_frame().is_err()); // an empty frame breaks the stream
/// ```
#[derive(Debug)]
pub struct TcpFrames {
    buf: BytesMut,
    max_frame_size: usize,
}

impl TcpFrames {
    /// An empty reader accepting frames of 1 to `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        TcpFrames { buf: BytesMut::with_capacity(READ_CHUNK), max_frame_size }
    }

    /// The next complete frame read so far, `None` until more bytes come,
    /// or the error that ends the connection (what follows a bad prefix
    /// is never cut: the reader stops there).
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameLengthError> {
        if self.buf.len() < PREFIX {
            return Ok(None);
        }
        let mut prefix = [0u8; PREFIX];
        prefix.copy_from_slice(&self.buf[..PREFIX]);
        let len = u32::from_be_bytes(prefix) as usize;
        if len == 0 || len > self.max_frame_size {
            return Err(FrameLengthError { len, max: self.max_frame_size });
        }
        if self.buf.len() < PREFIX + len {
            // Room for the whole frame, so that it arrives in one piece
            // (what was read of it is copied once). A frame larger than a
            // chunk (a batch, issue 23) gets room for about four, up to
            // 1 MiB: in a stream of such frames the next ones then land in
            // place instead of each being copied once more.
            let want = PREFIX + len;
            let room = want.saturating_mul(4).min(LARGE_FRAMES_CHUNK).max(want);
            self.buf.reserve(room - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(PREFIX);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Where the next read goes: a new chunk when the current one has less
    /// than 4 KiB of room left.
    pub fn read_buf(&mut self) -> &mut BytesMut {
        if self.buf.capacity() - self.buf.len() < MIN_READ_ROOM {
            self.buf.reserve(READ_CHUNK);
        }
        &mut self.buf
    }

    /// Bytes as a read would deliver them (tests, fuzzing).
    pub fn push(&mut self, bytes: &[u8]) {
        self.read_buf().extend_from_slice(bytes);
    }

    /// Bytes read and not yet cut into frames.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Decodes one frame as the node does on every transport: a message, a
/// batch ([`crate::MessageBatch`], every body checked), or why the node
/// drops it (and counts it in `malformed_frames`).
pub fn decode_frame<H: Header>(frame: Bytes) -> Result<crate::Received<H>, WireError> {
    Ok(match crate::wire::decode_any::<H>(frame)? {
        crate::wire::Decoded::One(header, body) => crate::Received::Message(Message::from_wire(header, body)),
        crate::wire::Decoded::Batch(batch) => crate::Received::Batch(batch),
    })
}

/// Read frames until the connection ends (or breaks the framing, or the
/// node shuts down).
async fn serve<H: Header>(core: Arc<Core<H>>, mut rd: Reader) -> Ended {
    let mut frames = TcpFrames::new(core.max_frame_size);
    let mut shutdown = core.shutdown.clone();
    let (mut complete, mut msgs) = (Vec::new(), Vec::new());
    loop {
        // Every complete frame read so far, in order, delivered together.
        let broken = loop {
            match frames.next_frame() {
                Ok(Some(frame)) => complete.push(frame),
                Ok(None) => break None,
                // The stream cannot be re-synchronised: drop the connection
                // (after delivering the frames before the bad one).
                Err(e) => break Some(e),
            }
        };
        if !complete.is_empty() {
            let bytes = complete.iter().map(Bytes::len).sum();
            core.counters.tcp.on_received_many(complete.len(), bytes);
            if core.receive_frames(complete.drain(..), Transport::Tcp, &mut msgs).await.is_err() {
                return Ended::NodeClosed;
            }
        }
        if let Some(e) = broken {
            bump(&core.counters.malformed_frames);
            return Ended::Connection(e.to_string());
        }
        let pending = frames.pending();
        tokio::select! {
            r = rd.read_buf(frames.read_buf()) => match r {
                Ok(0) if pending == 0 => return Ended::Connection("closed by peer".into()),
                Ok(0) => return Ended::Connection(format!("closed by peer within a frame ({pending} bytes of it read)")),
                Ok(_) => {}
                Err(e) => return Ended::Connection(e.to_string()),
            },
            _ = crate::node::stopped(&mut shutdown) => return Ended::NodeClosed,
        }
    }
}
