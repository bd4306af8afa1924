//! [`Endpoint`]: bind a socket, start its driver, connect and accept.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use braid_proto::{EndpointConfig, EndpointStats, TransportConfig};

use crate::clock::Clock;
use crate::connection::Connection;
use crate::error::{ConnectionError, NetError};
use crate::shared::{Inner, Shared, Slot, Status};
use crate::socket::UdpSocket;

/// A Braid endpoint on a UDP socket: connects to peers and, if its
/// configuration says so (the default), accepts their connections.
///
/// Cloning is cheap and every clone refers to the same endpoint. A driver
/// task spawned at bind does all the socket I/O; it stops after
/// [`Endpoint::close`], or once every `Endpoint` and [`Connection`] handle
/// is dropped and the connections have closed gracefully.
///
/// ```no_run
/// use braid_net::Endpoint;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = Endpoint::bind("127.0.0.1:0".parse()?)?;
/// let client = Endpoint::bind("127.0.0.1:0".parse()?)?;
/// let server_addr = server.local_addr();
/// tokio::spawn(async move {
///     while let Some(conn) = server.accept().await {
///         tokio::spawn(async move {
///             // Echo every message back until the client closes.
///             while let Ok(msg) = conn.recv_message().await {
///                 if conn.send_message(msg).await.is_err() {
///                     break;
///                 }
///             }
///         });
///     }
/// });
/// let conn = client.connect(server_addr).await?;
/// conn.send_message(&b"hello"[..]).await?;
/// assert_eq!(&conn.recv_message().await?[..], b"hello");
/// conn.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Endpoint {
    handle: Arc<EndpointHandle>,
}

/// The one registered application handle behind every clone of an
/// `Endpoint`.
struct EndpointHandle {
    shared: Arc<Shared>,
}

impl Drop for EndpointHandle {
    fn drop(&mut self) {
        self.shared.handles.fetch_sub(1, Ordering::AcqRel);
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("local_addr", &self.local_addr()).finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Bind a UDP socket to `addr` (port 0 picks a free port) with the
    /// default configuration, which accepts incoming connections. Must be
    /// called within a tokio runtime.
    pub fn bind(addr: SocketAddr) -> Result<Endpoint, NetError> {
        Endpoint::bind_with(addr, EndpointConfig::default())
    }

    /// Bind with `config`. The endpoint's randomness (connection IDs,
    /// cookie key, handshake keys) is a CSPRNG seeded with 32 bytes from the
    /// operating system.
    pub fn bind_with(addr: SocketAddr, config: EndpointConfig) -> Result<Endpoint, NetError> {
        let seed: [u8; 32] = rand::random();
        Endpoint::bind_protocol(addr, config, |config| braid_proto::Endpoint::with_seed(config, seed))
    }

    /// Bind with `config` and an explicit protocol seed, for reproducible
    /// runs. The seed keys the handshake cookies and connection IDs and
    /// has only 64 bits, so a real deployment should use
    /// [`Endpoint::bind_with`].
    pub fn bind_with_seed(addr: SocketAddr, config: EndpointConfig, seed: u64) -> Result<Endpoint, NetError> {
        Endpoint::bind_protocol(addr, config, |config| braid_proto::Endpoint::new(config, seed))
    }

    fn bind_protocol(
        addr: SocketAddr,
        config: EndpointConfig,
        protocol: impl FnOnce(EndpointConfig) -> braid_proto::Endpoint,
    ) -> Result<Endpoint, NetError> {
        config.transport.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NetError::NoRuntime)?;
        let socket = UdpSocket::bind(addr)?;
        let local_addr = socket.local_addr().map_err(|source| NetError::Socket { addr, source })?;
        let read_wake_bytes = (config.transport.receive_window / 8).max(1);
        let shared = Arc::new(Shared {
            socket,
            local_addr,
            clock: Clock::new(),
            inner: Mutex::new(Inner::new(protocol(config))),
            wake: tokio::sync::Notify::new(),
            accept: tokio::sync::Notify::new(),
            exited: tokio::sync::Notify::new(),
            handles: AtomicUsize::new(1),
            read_wake_bytes,
        });
        runtime.spawn(crate::driver::run(shared.clone()));
        Ok(Endpoint { handle: Arc::new(EndpointHandle { shared }) })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared().local_addr
    }

    /// Connect to `addr` with the endpoint's transport configuration;
    /// resolves once the handshake completed. A peer that never answers
    /// gives `Err(Closed(HandshakeTimeout))` after the configured handshake
    /// timeout.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, ConnectionError> {
        self.start_connect(None, addr, None)?.established().await
    }

    /// Connect to `addr` with `transport` instead of the endpoint's
    /// configuration.
    pub async fn connect_with(&self, addr: SocketAddr, transport: TransportConfig) -> Result<Connection, ConnectionError> {
        self.start_connect(None, addr, Some(transport))?.established().await
    }

    /// Start a handshake with `addr` from the local address `local` (`None`:
    /// the socket's choice), with `transport` or the endpoint's
    /// configuration. The returned connection is not established yet.
    pub(crate) fn start_connect(
        &self,
        local: Option<SocketAddr>,
        addr: SocketAddr,
        transport: Option<TransportConfig>,
    ) -> Result<Connection, ConnectionError> {
        let shared = self.shared();
        let conn = {
            let mut inner = shared.lock();
            if let Some(exit) = &inner.exit {
                return Err(exit.to_error());
            }
            if inner.closed {
                return Err(ConnectionError::EndpointClosed);
            }
            let now = shared.clock.now();
            let transport = transport.unwrap_or_else(|| inner.ep.config().transport.clone());
            let h = inner.ep.connect_from(now, local, addr, transport)?;
            let slot = Slot::new(Status::Connecting, addr);
            let signals = slot.signals.clone();
            inner.slots.insert(h, slot);
            // Made before waiting, so that dropping the `connect` future
            // closes the half-open connection.
            Connection::new(shared.clone(), h, addr, signals)
        };
        shared.wake.notify_one();
        Ok(conn)
    }

    /// The next connection a peer opened, established. `None` once the
    /// endpoint is closed (or was configured not to accept).
    pub async fn accept(&self) -> Option<Connection> {
        let shared = self.shared();
        loop {
            let notified = shared.accept.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut inner = shared.lock();
                if let Some(h) = inner.incoming.pop_front() {
                    let slot = inner.slots.get(&h).expect("incoming connections have a slot");
                    return Some(Connection::new(shared.clone(), h, slot.remote, slot.signals.clone()));
                }
                if inner.closed || inner.exit.is_some() || !inner.ep.config().accept_incoming {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Endpoint-wide counters.
    pub fn stats(&self) -> EndpointStats {
        self.shared().lock().ep.stats()
    }

    /// Stop accepting and close every connection gracefully (what was
    /// already sent is still delivered). `accept` then returns `None` and
    /// `connect` fails; the driver stops once the connections are closed.
    pub fn close(&self) {
        let shared = self.shared();
        {
            let mut inner = shared.lock();
            let now = shared.clock.now();
            inner.close_all(now);
        }
        shared.accept.notify_waiters();
        shared.wake.notify_one();
    }

    /// Resolves when the driver has stopped: after [`Endpoint::close`] once
    /// every connection is closed (a connection still held by the
    /// application must also have been read to its end or dropped), or
    /// after a socket failure.
    pub async fn wait_idle(&self) {
        let shared = self.shared();
        loop {
            let notified = shared.exited.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if shared.lock().exit.is_some() {
                return;
            }
            notified.await;
        }
    }
}
