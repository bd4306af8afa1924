//! The driver's UDP socket: large kernel buffers, segmented sends (Linux
//! UDP GSO: many datagrams in one `sendmsg`) and batched receives
//! (`recvmmsg`, each slot possibly a GRO-coalesced run of datagrams),
//! through quinn-udp, which falls back to one datagram per call where the
//! kernel lacks either.
//!
//! System calls, not bytes, bound a user-space datagram stack's message
//! rate: one call per datagram caps it near the kernel's per-call cost
//! (about a microsecond). Batching both ways divides that cost by the
//! batch.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use bytes::Bytes;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState, BATCH_SIZE};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;

/// Kernel socket buffers asked for (the kernel caps them at its maximum).
/// The default (about 208 KiB) holds some 90 datagrams, 8 ms at 100 Mbit/s:
/// a driver stalled that long by a busy machine overflows it, and every
/// datagram lost there is a retransmission. TCP autotunes its buffers.
const SOCKET_BUFFER: usize = 8 << 20;

/// Largest UDP payload of one send on Linux (65,535 less the IPv4 and UDP
/// headers): a segmented send above it fails with EMSGSIZE.
const MAX_SEND_BYTES: usize = 65_507;

/// One receive slot: a GRO-coalesced run (or one datagram) is at most
/// 64 KiB.
const SLOT_SIZE: usize = 64 * 1024;

/// A bound, non-blocking UDP socket registered with tokio, and quinn-udp's
/// view of its offloads.
pub(crate) struct Udp {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
}

impl Udp {
    /// A UDP socket bound to `addr` with large kernel buffers (inside a
    /// tokio runtime).
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<Udp> {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: a smaller buffer costs retransmissions, not correctness.
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        let std_socket: std::net::UdpSocket = s.into();
        let state = UdpSocketState::new(UdpSockRef::from(&std_socket))?;
        let io = tokio::net::UdpSocket::from_std(std_socket)?;
        Ok(Udp { io, state })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// Datagrams of `segment_size` bytes one send may carry (1 without GSO).
    pub(crate) fn max_segments(&self, segment_size: usize) -> usize {
        self.state
            .max_gso_segments()
            .min(MAX_SEND_BYTES / segment_size.max(1))
            .max(1)
    }

    /// Sends `contents`, datagrams of `segment_size` bytes (the last may be
    /// shorter), to `dst` in one call, waiting while the socket buffer is
    /// full. Any other error loses the datagrams: Exon retransmits (and
    /// quinn-udp turns GSO off if the kernel refused it).
    pub(crate) async fn send(&self, dst: SocketAddr, contents: &[u8], segment_size: usize) {
        let transmit = quinn_udp::Transmit {
            destination: dst,
            ecn: None,
            contents,
            // One datagram needs no segmentation control message.
            segment_size: (contents.len() > segment_size).then_some(segment_size),
            src_ip: None,
        };
        loop {
            let sent = self.io.try_io(Interest::WRITABLE, || {
                self.state.try_send(UdpSockRef::from(&self.io), &transmit)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.io.writable().await.is_err() {
                        return;
                    }
                }
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(%dst, bytes = contents.len(), error = %e, "Exon UDP send failed");
                    return;
                }
            }
        }
    }

    /// Waits until the socket may have datagrams to read.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }
}

/// The largest UDP payload a socket bound to `addr` can send in one
/// datagram when `addr` is a loopback address: the loopback device's MTU
/// (the kernel's route MTU towards `addr` itself, `IP_MTU` of a socket
/// connected there) less the IP and UDP headers, at most UDP's 65,507.
/// `None` for other addresses (their peers lie behind paths of unknown
/// MTU) or if the kernel does not say.
pub(crate) fn loopback_payload(addr: SocketAddr) -> Option<usize> {
    use std::os::fd::AsRawFd;
    if !addr.ip().is_loopback() {
        return None;
    }
    let probe = std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).ok()?;
    // Connecting a UDP socket sends nothing: it only fixes the route.
    probe.connect(SocketAddr::new(addr.ip(), 9)).ok()?;
    let (level, name, headers) = match addr {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU, 20 + 8),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU, 40 + 8),
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, and an int-sized buffer whose
    // length is passed along.
    let r = unsafe {
        libc::getsockopt(
            probe.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    let payload = usize::try_from(mtu).ok()?.checked_sub(headers)?;
    Some(payload.min(MAX_SEND_BYTES))
}

/// Receive side: a reusable landing buffer for one `recvmmsg`.
///
/// The datagrams of one call are copied into one fresh, exactly sized
/// buffer and handed out as slices of it: one allocation and one copy per
/// call, none per datagram, and messages (slices of those) cost none
/// either. A message the application keeps pins only its call's buffer,
/// never a 64 KiB landing slot.
pub(crate) struct Receiver {
    buf: Box<[u8]>,
    metas: [RecvMeta; BATCH_SIZE],
}

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            buf: vec![0; SLOT_SIZE * BATCH_SIZE].into_boxed_slice(),
            metas: [RecvMeta::default(); BATCH_SIZE],
        }
    }

    /// One non-blocking receive call: appends each datagram with its
    /// sender to `out`, split at the GRO stride, and returns how many;
    /// `WouldBlock` when nothing is waiting.
    pub(crate) fn recv(
        &mut self,
        socket: &Udp,
        out: &mut Vec<(SocketAddr, Bytes)>,
    ) -> io::Result<usize> {
        let metas = &mut self.metas;
        let mut slots = self.buf.chunks_mut(SLOT_SIZE);
        let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(slots.next().unwrap_or_default()));
        let n = socket.io.try_io(Interest::READABLE, || {
            socket
                .state
                .recv(UdpSockRef::from(&socket.io), &mut iovs, metas)
        })?;
        // The kernel never reports more than a slot holds; clamp anyway
        // rather than trust it with a slice index.
        let metas = &self.metas[..n.min(BATCH_SIZE)];
        let len = |m: &RecvMeta| m.len.min(SLOT_SIZE);
        let before = out.len();
        // Each datagram in its own buffer: a sealed one is opened in place
        // (no second copy), which needs a buffer no other datagram shares.
        for (meta, iov) in metas.iter().zip(iovs.iter()) {
            let data = &iov[..len(meta)];
            if data.is_empty() {
                // An empty datagram: still handed over, to be counted as
                // malformed.
                out.push((meta.addr, Bytes::new()));
            }
            let stride = if meta.stride == 0 {
                data.len()
            } else {
                meta.stride
            };
            for segment in data.chunks(stride.max(1)) {
                out.push((meta.addr, Bytes::from(segment.to_vec())));
            }
        }
        Ok(out.len() - before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_datagrams_take_the_device_mtu_others_none() {
        let lo = loopback_payload("127.0.0.1:0".parse().unwrap());
        // Linux's loopback MTU is 64 KiB; any loopback carries a full
        // Ethernet frame's payload.
        assert!(
            lo.is_some_and(|n| (1_472..=MAX_SEND_BYTES).contains(&n)),
            "{lo:?}"
        );
        assert_eq!(loopback_payload("192.0.2.1:5".parse().unwrap()), None);
        assert_eq!(loopback_payload("0.0.0.0:5".parse().unwrap()), None);
    }
}
