//! The UDP socket: creation with large kernel buffers, batched receive
//! (`recvmmsg` + GRO) and segmented send (GSO), through quinn-udp.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};

use bytes::BytesMut;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState, BATCH_SIZE};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;

use crate::error::NetError;

/// Kernel buffer sizes tried in turn. Linux silently caps a request at
/// `net.core.{r,w}mem_max`; other systems refuse too large a value, hence
/// the fallbacks.
const SOCKET_BUFFER_SIZES: [usize; 4] = [8 << 20, 4 << 20, 2 << 20, 1 << 20];

/// Largest UDP payload of one send on Linux (65,535 less the IPv4 and UDP
/// headers). A GSO send above it fails with EMSGSIZE, which quinn-udp
/// swallows, so batches are capped below it.
pub(crate) const MAX_SEND_BYTES: usize = 65_507;

/// One receive slot: a GRO-coalesced batch (or a single datagram) is at most
/// 64 KiB.
const SLOT_SIZE: usize = 64 * 1024;

/// A bound, non-blocking UDP socket registered with tokio, and quinn-udp's
/// view of its offload capabilities.
#[derive(Debug)]
pub(crate) struct UdpSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
}

impl UdpSocket {
    /// Create and bind a socket, asking for large kernel buffers. Must run
    /// inside a tokio runtime (the caller checks).
    pub(crate) fn bind(addr: SocketAddr) -> Result<UdpSocket, NetError> {
        let socket_err = |source| NetError::Socket { addr, source };
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(socket_err)?;
        socket.set_nonblocking(true).map_err(socket_err)?;
        // Ask for big buffers before binding so that a burst arriving early
        // is not dropped. Failure only costs performance.
        set_largest(|n| socket.set_recv_buffer_size(n));
        set_largest(|n| socket.set_send_buffer_size(n));
        socket.bind(&addr.into()).map_err(|source| NetError::Bind { addr, source })?;
        let std_socket: std::net::UdpSocket = socket.into();
        let state = UdpSocketState::new(UdpSockRef::from(&std_socket)).map_err(socket_err)?;
        let io = tokio::net::UdpSocket::from_std(std_socket).map_err(socket_err)?;
        tracing::debug!(
            %addr,
            recv_buffer = ?state.recv_buffer_size(UdpSockRef::from(&io)).ok(),
            send_buffer = ?state.send_buffer_size(UdpSockRef::from(&io)).ok(),
            gso_segments = state.max_gso_segments(),
            gro_segments = state.gro_segments(),
            "UDP socket bound"
        );
        Ok(UdpSocket { io, state })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// Datagrams of `segment_size` bytes that one send may carry.
    pub(crate) fn max_segments(&self, segment_size: usize) -> usize {
        self.state.max_gso_segments().min(MAX_SEND_BYTES / segment_size.max(1)).max(1)
    }

    /// Wait until the socket may have datagrams to read.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }

    /// Wait until the socket may accept a send.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.io.writable().await
    }

    /// Send `buf[sent..]`, `size` bytes of datagrams of `segment_size` (or one
    /// datagram when `None`) to `dest` from the local address `src_ip` (or
    /// the kernel's choice), in as few GSO sends as allowed.
    /// Advances `sent`; returns `WouldBlock` when the socket is full (call
    /// again once writable). Other errors are logged and the rest of the
    /// batch is dropped: UDP is lossy, the protocol retransmits.
    pub(crate) fn send(
        &self,
        dest: SocketAddr,
        src_ip: Option<IpAddr>,
        buf: &[u8],
        segment_size: Option<usize>,
        sent: &mut usize,
        errors: &mut u64,
    ) -> io::Result<()> {
        while *sent < buf.len() {
            let rest = &buf[*sent..];
            let (chunk, segment_size) = match segment_size {
                Some(s) if rest.len() > s => {
                    let n = (self.max_segments(s) * s).min(rest.len());
                    // One segment needs no GSO control message.
                    (n, if n > s { Some(s) } else { None })
                }
                _ => (rest.len(), None),
            };
            let transmit = quinn_udp::Transmit {
                destination: dest,
                ecn: None,
                contents: &rest[..chunk],
                segment_size,
                src_ip,
            };
            let result = self
                .io
                .try_io(Interest::WRITABLE, || self.state.try_send(UdpSockRef::from(&self.io), &transmit));
            match result {
                Ok(()) => *sent += chunk,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) => {
                    *errors += 1;
                    // Rate-limit the log: a dead route fails every send.
                    if errors.is_power_of_two() {
                        tracing::warn!(%dest, bytes = chunk, error = %e, total_errors = *errors, "UDP send failed");
                    }
                    *sent = buf.len();
                }
            }
        }
        Ok(())
    }
}

fn set_largest(mut set: impl FnMut(usize) -> io::Result<()>) {
    for size in SOCKET_BUFFER_SIZES {
        match set(size) {
            Ok(()) => return,
            Err(e) => tracing::debug!(size, error = %e, "socket buffer size refused"),
        }
    }
}

/// Receive side: a reusable landing buffer for one `recvmmsg` (each slot
/// may receive a GRO batch of several datagrams).
///
/// The datagrams of one call are copied into one buffer and handed to the
/// endpoint as slices of it: one copy per call, none per datagram. Lending
/// the landing slots themselves (zero-copy) measured no faster on loopback,
/// and would let a single small datagram the endpoint keeps (a short
/// message not yet read) pin a 64 KiB slot.
///
/// That buffer is one of a few *arenas*, each large enough for any batch,
/// reused once the endpoint has let go of every slice of it (the usual
/// case: it copies payloads into messages and copies data it must hold
/// out of order). A fresh buffer per call cost a page fault per 4 KiB
/// received: glibc maps large blocks afresh and returns freed heap tops to
/// the kernel, a tenth of the CPU of a loopback transfer. The driver makes
/// several receive calls before the endpoint sees the first batch, hence
/// [`ARENAS`] of them. While every arena is still held (short messages not
/// yet read), the batch goes to a fresh buffer of exactly its size
/// instead, so a held datagram keeps no more memory than its own batch
/// beyond the arenas.
pub(crate) struct Receiver {
    buf: Box<[u8]>,
    metas: [RecvMeta; BATCH_SIZE],
    arenas: Vec<BytesMut>,
}

/// Receive arenas kept per socket: one per receive call of a driver turn
/// and one for the turn before. Each is the landing buffer's size (2 MiB
/// with Linux's batch of 32 slots), allocated only once a batch finds no
/// free arena; a busy socket ends up with all of them resident (batches
/// move on through an arena before it wraps), so 10 MiB at most per
/// socket, beside its kernel buffers of up to 8 MiB each way.
pub(crate) const ARENAS: usize = crate::driver::RECV_CALLS_PER_TURN + 1;

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            buf: vec![0; SLOT_SIZE * BATCH_SIZE].into_boxed_slice(),
            metas: [RecvMeta::default(); BATCH_SIZE],
            arenas: Vec::new(),
        }
    }

    /// One non-blocking receive call. Appends each datagram to `out` with
    /// its sender and the local address it was sent to (when the kernel
    /// reports it), split at the GRO stride. Returns how many datagrams
    /// were appended; `WouldBlock` when there is nothing to read.
    pub(crate) fn recv(
        &mut self,
        socket: &UdpSocket,
        out: &mut Vec<(SocketAddr, Option<IpAddr>, BytesMut)>,
    ) -> io::Result<usize> {
        let metas = &mut self.metas;
        let mut slots = self.buf.chunks_mut(SLOT_SIZE);
        let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(slots.next().expect("buffer holds BATCH_SIZE slots")));
        let n = socket
            .io
            .try_io(Interest::READABLE, || socket.state.recv(UdpSockRef::from(&socket.io), &mut iovs, metas))?;
        // The kernel never reports more than a slot holds; clamp anyway
        // rather than trust it with a slice index.
        let len = |m: &RecvMeta| m.len.min(SLOT_SIZE);
        let metas = &self.metas[..n];
        let total = metas.iter().map(len).sum();
        let mut fresh = BytesMut::new();
        let data = match self.arenas.iter_mut().position(|a| a.try_reclaim(total)) {
            Some(i) => &mut self.arenas[i],
            None if self.arenas.len() < ARENAS => {
                self.arenas.push(BytesMut::with_capacity(SLOT_SIZE * BATCH_SIZE));
                self.arenas.last_mut().expect("just pushed")
            }
            None => {
                fresh.reserve(total);
                &mut fresh
            }
        };
        for (meta, iov) in metas.iter().zip(iovs.iter()) {
            data.extend_from_slice(&iov[..len(meta)]);
        }
        // Each datagram is split off as its own view of the buffer (no
        // copy), which the endpoint may modify: sealed packets are opened
        // in place.
        let before = out.len();
        for meta in metas {
            let mut rest = data.split_to(len(meta));
            if rest.is_empty() {
                // Still handed over, so the endpoint counts it as malformed.
                out.push((meta.addr, meta.dst_ip, BytesMut::new()));
            }
            let stride = if meta.stride == 0 { rest.len() } else { meta.stride };
            while !rest.is_empty() {
                let piece = rest.split_to(stride.min(rest.len()));
                out.push((meta.addr, meta.dst_ip, piece));
            }
        }
        Ok(out.len() - before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` datagrams of `len` bytes to `to`, then receives them all.
    async fn batch(from: &std::net::UdpSocket, to: &UdpSocket, rx: &mut Receiver, n: usize, len: usize) -> Vec<BytesMut> {
        let addr = to.local_addr().unwrap();
        for i in 0..n {
            from.send_to(&vec![i as u8; len], addr).unwrap();
        }
        let mut out = Vec::new();
        while out.len() < n {
            to.readable().await.unwrap();
            match rx.recv(to, &mut out) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        out.into_iter().map(|(_, _, d)| d).collect()
    }

    /// The arenas are reused once every slice of a batch is dropped, and a
    /// held slice only makes the receiver use another arena: the contents
    /// of held datagrams are never overwritten.
    #[tokio::test]
    async fn arenas_are_reused_and_held_datagrams_stay_intact() {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut rx = Receiver::new();
        let first = batch(&sender, &socket, &mut rx, 3, 1000).await;
        let arena = first[0].as_ptr() as usize..first[0].as_ptr() as usize + SLOT_SIZE * BATCH_SIZE;
        drop(first);
        let second = batch(&sender, &socket, &mut rx, 3, 1000).await;
        // Nothing else was held: the same arena again (further into it, or
        // from its start).
        assert!(arena.contains(&(second[0].as_ptr() as usize)), "a dropped batch's arena is reused");
        assert_eq!(rx.arenas.len(), 1);
        // Hold one datagram of each batch: every later batch must land
        // elsewhere, and the held bytes must not change.
        let mut held = vec![second.into_iter().nth(1).unwrap()];
        for round in 0..ARENAS + 3 {
            let got = batch(&sender, &socket, &mut rx, 2, 500 + round).await;
            for d in &got {
                assert_eq!(d.len(), 500 + round);
            }
            held.push(got.into_iter().next().unwrap());
        }
        assert!(held[0].iter().all(|&b| b == 1) && held[0].len() == 1000);
        for (round, d) in held[1..].iter().enumerate() {
            assert_eq!(d.len(), 500 + round);
            assert!(d.iter().all(|&b| b == 0), "held datagram {round} overwritten");
        }
        assert!(rx.arenas.len() <= ARENAS);
    }
}
