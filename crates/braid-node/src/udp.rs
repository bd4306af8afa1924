//! UDP: one frame per datagram, no channel, no order, at most once.
//!
//! The node's one unauthenticated transport (issue 17 item 4 allows it if
//! documented and off by default): datagrams are neither encrypted nor
//! authenticated, so anyone on the path reads them and anyone who can reach
//! the port can inject a message with any header. It runs only when
//! `NodeConfig::allow_unauthenticated_udp` is set (or the node runs
//! `InsecureNoAuth`). Applications that need authenticated unreliable
//! messages use Braid or Exon instead.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use braid_core::{Rng, RngExt, SeedableRng};
use bytes::BytesMut;
use tokio::net::UdpSocket;

use crate::node::Core;
use crate::stats::bump;
use crate::{FailReason, Header, UdpLoss};

/// Kernel buffers asked for: large enough for bursts of 64 KiB datagrams.
const SOCKET_BUFFER: usize = 4 << 20;

pub(crate) struct Udp {
    pub(crate) socket: UdpSocket,
    loss: Option<(f64, Mutex<Rng>)>,
}

impl Udp {
    pub(crate) fn bind(addr: SocketAddr, loss: Option<UdpLoss>) -> std::io::Result<Udp> {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: the kernel caps these at its maximum.
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        let socket = UdpSocket::from_std(s.into())?;
        Ok(Udp { socket, loss: loss.map(|l| (l.rate, Mutex::new(Rng::seed_from_u64(l.seed)))) })
    }

    /// Send one datagram (or drop it on purpose).
    pub(crate) async fn send<H: Header>(&self, core: &Core<H>, datagram: &[u8], to: SocketAddr) -> Result<(), FailReason> {
        if let Some((rate, rng)) = &self.loss {
            let drop = rng.lock().unwrap_or_else(|e| e.into_inner()).random_bool(*rate);
            if drop {
                bump(&core.counters.udp_injected_drops);
                return Ok(());
            }
        }
        self.socket.send_to(datagram, to).await.map_err(|e| FailReason::Io(e.to_string()))?;
        core.counters.udp.on_sent(datagram.len());
        Ok(())
    }
}

/// Receive datagrams until the node shuts down.
pub(crate) async fn recv_loop<H: Header>(core: Arc<Core<H>>, udp: Arc<Udp>) {
    let mut shutdown = core.shutdown.clone();
    let mut buf = BytesMut::new();
    loop {
        buf.clear();
        buf.reserve(65_536);
        tokio::select! {
            r = udp.socket.recv_buf_from(&mut buf) => match r {
                Ok((n, _from)) => {
                    core.counters.udp.on_received(n);
                    let frame = buf.split().freeze();
                    core.receive_datagram(frame);
                }
                Err(e) => {
                    // ICMP errors of earlier sends surface here on some
                    // systems; they say nothing about this socket.
                    tracing::trace!(error = %e, "udp receive error");
                }
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

