//! The UDP socket: creation with large kernel buffers, batched receive
//! (`recvmmsg` + GRO) and segmented send (GSO), through quinn-udp.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};

use bytes::BytesMut;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState};
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

/// Slots (messages, each one GRO batch) per `recvmmsg` call: 512 KiB of
/// landing room. The model is the cache: what the kernel writes should
/// still be in the core's L2 when the endpoint opens and copies it. A
/// driver turn makes up to four calls before processing, so four calls'
/// data (2 MiB) must fit in about an L2 (1 to 2 MiB per core on current
/// x86-64 server and desktop parts); quinn-udp's full batch of 32 (2 MiB
/// a call) thrashed it, and cost 3 to 6% more CPU per byte received in an
/// encrypted loopback transfer (perf stat, alternating runs). More slots
/// would save only system calls, about one per 350 KB.
const RECV_SLOTS: usize = 8;
const _: () = assert!(RECV_SLOTS <= quinn_udp::BATCH_SIZE);

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

/// Receive side: `recvmmsg` straight into a reusable *arena*, whose slices
/// (one per datagram, split at the GRO stride) go to the endpoint without
/// a copy.
///
/// An arena is a buffer of [`RECV_SLOTS`] slots of [`SLOT_SIZE`] bytes
/// (512 KiB), one per message of the call. It is
/// reused once the endpoint has let go of every slice of it: the usual
/// case, since the endpoint copies payloads into messages and copies data
/// it must hold out of order. A fresh buffer per call cost a page fault per
/// 4 KiB received (glibc maps large blocks afresh and returns freed heap
/// tops to the kernel), a tenth of the CPU of a loopback transfer. The
/// driver makes several receive calls before the endpoint sees the first
/// batch, hence [`ARENAS`] of them.
///
/// While every arena is still held (short messages not yet read), the call
/// lands in one fixed buffer instead and its datagrams are copied out into
/// a fresh buffer of exactly their size, so a held datagram keeps no more
/// memory than its own batch beyond the arenas. Landing in the arena saves
/// that copy in the common case: a pass over every received byte, about a
/// tenth of the receiving thread's CPU in an encrypted loopback transfer.
pub(crate) struct Receiver {
    /// Landing buffer for calls that find no free arena.
    buf: Box<[u8]>,
    metas: [RecvMeta; RECV_SLOTS],
    /// Each either ready (all [`ARENA_BYTES`] long) or lent out (empty, its
    /// slices with the endpoint).
    arenas: Vec<BytesMut>,
}

/// Receive arenas kept per socket: one per receive call of a driver turn
/// and one for the turn before. A busy socket ends up with all of them
/// resident, so 2.5 MiB at most per socket, beside its kernel buffers of up
/// to 8 MiB each way.
pub(crate) const ARENAS: usize = crate::driver::RECV_CALLS_PER_TURN + 1;

/// Bytes of one arena (and of the fallback landing buffer).
const ARENA_BYTES: usize = SLOT_SIZE * RECV_SLOTS;

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            buf: vec![0; ARENA_BYTES].into_boxed_slice(),
            metas: [RecvMeta::default(); RECV_SLOTS],
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
        match self.ready_arena() {
            Some(i) => self.recv_in_arena(i, socket, out),
            None => self.recv_and_copy(socket, out),
        }
    }

    /// An arena ready to land a call in: one left ready by a call that
    /// received nothing, one whose slices are all dropped, or a new one.
    fn ready_arena(&mut self) -> Option<usize> {
        if let Some(i) = self.arenas.iter_mut().position(|a| {
            if a.len() == ARENA_BYTES {
                return true;
            }
            if !a.try_reclaim(ARENA_BYTES) {
                return false;
            }
            // SAFETY: `try_reclaim` succeeded without allocating, so the
            // arena again owns its whole original allocation of
            // ARENA_BYTES bytes (its capacity is at least that), and every
            // byte of that allocation was initialized by
            // `BytesMut::zeroed` below and has only been written since.
            unsafe { a.set_len(ARENA_BYTES) };
            true
        }) {
            return Some(i);
        }
        if self.arenas.len() < ARENAS {
            self.arenas.push(BytesMut::zeroed(ARENA_BYTES));
            return Some(self.arenas.len() - 1);
        }
        None
    }

    /// Lands the call in arena `i` and lends its datagrams out.
    fn recv_in_arena(
        &mut self,
        i: usize,
        socket: &UdpSocket,
        out: &mut Vec<(SocketAddr, Option<IpAddr>, BytesMut)>,
    ) -> io::Result<usize> {
        let arena = &mut self.arenas[i];
        let metas = &mut self.metas;
        let n = {
            let mut slots = arena.chunks_mut(SLOT_SIZE);
            let mut iovs: [IoSliceMut<'_>; RECV_SLOTS] =
                std::array::from_fn(|_| IoSliceMut::new(slots.next().expect("an arena holds RECV_SLOTS slots")));
            socket
                .io
                .try_io(Interest::READABLE, || socket.state.recv(UdpSockRef::from(&socket.io), &mut iovs, metas))?
        };
        let before = out.len();
        for meta in &self.metas[..n] {
            let mut slot = arena.split_to(SLOT_SIZE);
            slot.truncate(landed_len(meta));
            split_datagrams(meta, slot, out);
        }
        // Lent out: ready again once every slice is dropped.
        arena.clear();
        Ok(out.len() - before)
    }

    /// Lands the call in the fixed buffer and copies its datagrams into a
    /// fresh buffer of their size.
    fn recv_and_copy(
        &mut self,
        socket: &UdpSocket,
        out: &mut Vec<(SocketAddr, Option<IpAddr>, BytesMut)>,
    ) -> io::Result<usize> {
        let metas = &mut self.metas;
        let mut slots = self.buf.chunks_mut(SLOT_SIZE);
        let mut iovs: [IoSliceMut<'_>; RECV_SLOTS] =
            std::array::from_fn(|_| IoSliceMut::new(slots.next().expect("buffer holds RECV_SLOTS slots")));
        let n = socket
            .io
            .try_io(Interest::READABLE, || socket.state.recv(UdpSockRef::from(&socket.io), &mut iovs, metas))?;
        let metas = &self.metas[..n];
        let mut data = BytesMut::with_capacity(metas.iter().map(landed_len).sum());
        for (meta, iov) in metas.iter().zip(iovs.iter()) {
            data.extend_from_slice(&iov[..landed_len(meta)]);
        }
        let before = out.len();
        for meta in metas {
            split_datagrams(meta, data.split_to(landed_len(meta)), out);
        }
        Ok(out.len() - before)
    }
}

/// Bytes one receive slot got. The kernel never reports more than a slot
/// holds; clamped anyway rather than trusted with a slice index.
fn landed_len(meta: &RecvMeta) -> usize {
    meta.len.min(SLOT_SIZE)
}

/// Appends the datagrams of one slot, a GRO batch split at its stride
/// (each a view of the buffer, no copy, which the endpoint may modify:
/// sealed packets are opened in place).
fn split_datagrams(meta: &RecvMeta, mut rest: BytesMut, out: &mut Vec<(SocketAddr, Option<IpAddr>, BytesMut)>) {
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

    /// A call that finds nothing to read leaves its arena ready, and the
    /// next call lands its datagrams in it without a copy.
    #[tokio::test]
    async fn an_empty_call_keeps_its_arena_and_datagrams_land_in_it() {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut rx = Receiver::new();
        let mut out = Vec::new();
        assert_eq!(rx.recv(&socket, &mut out).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!((rx.arenas.len(), rx.arenas[0].len()), (1, ARENA_BYTES));
        let arena = rx.arenas[0].as_ptr() as usize..rx.arenas[0].as_ptr() as usize + ARENA_BYTES;
        let got = batch(&sender, &socket, &mut rx, 2, 300).await;
        assert_eq!(rx.arenas.len(), 1);
        for d in &got {
            assert!(arena.contains(&(d.as_ptr() as usize)), "landed outside the arena: copied");
            assert_eq!(d.len(), 300);
        }
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
        let arena = first[0].as_ptr() as usize..first[0].as_ptr() as usize + SLOT_SIZE * RECV_SLOTS;
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
