//! [`Connection`]: the application's handle on one established connection.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use braid_proto::{CloseReason, ConnectionHandle, ConnectionStats, RecvBatch, RecvError, SendError};
use bytes::Bytes;

use crate::error::ConnectionError;
use crate::shared::{Inner, Shared, Signals, Status};

/// A connection to a peer: a reliable, ordered stream of messages each way.
///
/// Cloning is cheap; clones refer to the same connection, so one task may
/// send while another receives. Dropping the last clone closes the
/// connection gracefully in the background (queued messages are still
/// delivered) and discards whatever the peer sends afterwards. See
/// [`crate::Endpoint`] for an example.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<ConnectionRef>,
}

/// The registered application handle behind every clone of a `Connection`.
struct ConnectionRef {
    shared: Arc<Shared>,
    handle: ConnectionHandle,
    remote: SocketAddr,
    signals: Arc<Signals>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("handle", &self.inner.handle)
            .field("remote", &self.inner.remote)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn new(shared: Arc<Shared>, handle: ConnectionHandle, remote: SocketAddr, signals: Arc<Signals>) -> Self {
        shared.handles.fetch_add(1, Ordering::AcqRel);
        Connection { inner: Arc::new(ConnectionRef { shared, handle, remote, signals }) }
    }

    /// Wait for the handshake to complete.
    pub(crate) async fn established(self) -> Result<Connection, ConnectionError> {
        let r = &*self.inner;
        loop {
            let notified = r.signals.state.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = r.shared.lock();
                match inner.slots.get(&r.handle).map(|s| &s.status) {
                    Some(Status::Established) => break,
                    Some(Status::Connecting) if inner.exit.is_none() => {}
                    _ => return Err(gone(&inner, r.handle)),
                }
            }
            notified.await;
        }
        Ok(self)
    }

    /// Queue `msg` for delivery. Waits while the send buffer is full
    /// (backpressure); returns once the message is queued, not when it is
    /// acknowledged (see [`Connection::close`] for that).
    pub async fn send_message(&self, msg: impl Into<Bytes>) -> Result<(), ConnectionError> {
        let r = &*self.inner;
        let mut msg = msg.into();
        loop {
            let notified = r.signals.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut inner = r.shared.lock();
                if inner.exit.is_some() {
                    return Err(gone(&inner, r.handle));
                }
                match inner.ep.send_message(r.handle, msg) {
                    Ok(()) => {
                        drop(inner);
                        r.shared.wake.notify_one();
                        return Ok(());
                    }
                    Err(SendError::Blocked(back)) => msg = back,
                    Err(SendError::TooLarge { size, max }) => return Err(ConnectionError::TooLarge { size, max }),
                    Err(SendError::Closed(reason)) => return Err(ConnectionError::Closed(reason)),
                    Err(SendError::UnknownConnection) => return Err(gone(&inner, r.handle)),
                }
            }
            notified.await;
        }
    }

    /// Queue `msgs` in order: [`Connection::send_message`] for a run of
    /// messages, taking the endpoint's lock and waking the driver once for
    /// as many as the send buffer has room for, instead of once per
    /// message (a sender with many small messages queued, issue 23 item 2:
    /// the driver then packs them into full packets when it runs). Waits
    /// while the send buffer is full. On an error, the messages before the
    /// one that failed were queued and may still be delivered.
    ///
    /// ```no_run
    /// # async fn f(conn: braid_net::Connection) -> Result<(), braid_net::ConnectionError> {
    /// let batch: Vec<bytes::Bytes> = (0..64u8).map(|i| bytes::Bytes::from(vec![i; 64])).collect();
    /// conn.send_messages(batch).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_messages<I>(&self, msgs: I) -> Result<(), ConnectionError>
    where
        I: IntoIterator,
        I::Item: Into<Bytes>,
    {
        let r = &*self.inner;
        let mut msgs = msgs.into_iter().map(Into::into).peekable();
        let mut held: Option<Bytes> = None;
        loop {
            let notified = r.signals.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let mut queued = false;
            {
                let mut inner = r.shared.lock();
                if inner.exit.is_some() {
                    return Err(gone(&inner, r.handle));
                }
                while let Some(msg) = held.take().or_else(|| msgs.next()) {
                    match inner.ep.send_message(r.handle, msg) {
                        Ok(()) => queued = true,
                        Err(SendError::Blocked(back)) => {
                            held = Some(back);
                            break;
                        }
                        Err(e) => {
                            let error = match e {
                                SendError::TooLarge { size, max } => ConnectionError::TooLarge { size, max },
                                SendError::Closed(reason) => ConnectionError::Closed(reason),
                                SendError::UnknownConnection | SendError::Blocked(_) => gone(&inner, r.handle),
                            };
                            drop(inner);
                            if queued {
                                r.shared.wake.notify_one();
                            }
                            return Err(error);
                        }
                    }
                }
            }
            if queued {
                r.shared.wake.notify_one();
            }
            if held.is_none() && msgs.peek().is_none() {
                return Ok(());
            }
            notified.await;
        }
    }

    /// Queue copies of `msgs`, in order: [`Connection::send_messages`] for
    /// messages the application keeps (a reused buffer, a slice of a
    /// larger one). Small messages are copied into the stream's packs, so
    /// a batch costs no allocation per message (issue 23). Waits while the
    /// send buffer is full. A message over the size limit, or a closed
    /// connection, is an error before any message of the batch is queued;
    /// on an error after waiting, the messages before were queued and may
    /// still be delivered.
    ///
    /// ```no_run
    /// # async fn f(conn: braid_net::Connection) -> Result<(), braid_net::ConnectionError> {
    /// let scratch = vec![7u8; 64 * 1024];
    /// let msgs: Vec<&[u8]> = scratch.chunks(64).collect();
    /// conn.send_copies(&msgs).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_copies<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<(), ConnectionError> {
        let r = &*self.inner;
        let mut rest = msgs;
        while !rest.is_empty() {
            let notified = r.signals.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let queued = {
                let mut inner = r.shared.lock();
                if inner.exit.is_some() {
                    return Err(gone(&inner, r.handle));
                }
                match inner.ep.send_copies(r.handle, rest) {
                    Ok(n) => n,
                    Err(SendError::TooLarge { size, max }) => return Err(ConnectionError::TooLarge { size, max }),
                    Err(SendError::Closed(reason)) => return Err(ConnectionError::Closed(reason)),
                    Err(SendError::UnknownConnection | SendError::Blocked(_)) => return Err(gone(&inner, r.handle)),
                }
            };
            if queued > 0 {
                r.shared.wake.notify_one();
                rest = &rest[queued..];
            }
            if !rest.is_empty() {
                notified.await;
            }
        }
        Ok(())
    }

    /// The next message, waiting for one if needed. After the connection
    /// closed, the messages already received are still returned, then
    /// `Err(Closed(reason))`.
    pub async fn recv_message(&self) -> Result<Bytes, ConnectionError> {
        self.recv_with(|ep, handle| {
            Ok(ep.recv_message(handle)?.map(|msg| {
                let read = msg.len() as u64;
                (msg, read)
            }))
        })
        .await
    }

    /// Waits until at least one message is ready, then moves up to `max`
    /// of them into `batch` (after what it holds, in order) and returns
    /// how many: one lock, one wake-up and one reference count per packet
    /// for a whole batch, where [`Connection::recv_message`] takes one of
    /// each per message (the way to drain a stream of small messages,
    /// issue 23). After the connection closed, the messages already
    /// received are still returned, then `Err(Closed(reason))`. `max == 0`
    /// returns `Ok(0)` at once.
    ///
    /// ```no_run
    /// # async fn f(conn: braid_net::Connection) -> Result<(), braid_net::ConnectionError> {
    /// let mut batch = braid_net::RecvBatch::new();
    /// loop {
    ///     conn.recv_batch(&mut batch, 1024).await?;
    ///     for msg in batch.iter() {
    ///         println!("{} bytes", msg.len());
    ///     }
    ///     batch.clear();
    /// }
    /// # }
    /// ```
    pub async fn recv_batch(&self, batch: &mut RecvBatch, max: usize) -> Result<usize, ConnectionError> {
        if max == 0 {
            return Ok(0);
        }
        self.recv_with(|ep, handle| {
            let before = batch.len();
            Ok(match ep.recv_batch(handle, batch, max)? {
                0 => None,
                n => Some((n, batch.iter().skip(before).map(|m| m.len() as u64).sum())),
            })
        })
        .await
    }

    /// Waits until `take` gets something from the endpoint (`Some((what,
    /// bytes read))`), then returns it: the receive loop of
    /// [`Connection::recv_message`] and [`Connection::recv_batch`]. After
    /// the connection closed and everything received was taken, `take`
    /// fails with `Closed`, which is returned.
    async fn recv_with<T>(
        &self,
        mut take: impl FnMut(&mut braid_proto::Endpoint, ConnectionHandle) -> Result<Option<(T, u64)>, RecvError>,
    ) -> Result<T, ConnectionError> {
        let r = &*self.inner;
        loop {
            let notified = r.signals.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_driver;
            {
                let mut guard = r.shared.lock();
                let inner = &mut *guard;
                let Some(slot) = inner.slots.get_mut(&r.handle) else {
                    return Err(gone(inner, r.handle));
                };
                if slot.close_reason().is_some() {
                    // The endpoint forgets the connection, and its counters,
                    // once the end is read.
                    slot.final_stats = inner.ep.connection_stats(r.handle).or(slot.final_stats);
                }
                match take(&mut inner.ep, r.handle) {
                    Ok(Some((got, read))) => {
                        // Wake the driver now and then so that it announces
                        // the receive window the application freed.
                        slot.unannounced_read += read;
                        let wake = slot.unannounced_read >= r.shared.read_wake_bytes;
                        if wake {
                            slot.unannounced_read = 0;
                        }
                        drop(guard);
                        if wake {
                            r.shared.wake.notify_one();
                        }
                        return Ok(got);
                    }
                    Ok(None) => {
                        if inner.exit.is_some() {
                            return Err(gone(inner, r.handle));
                        }
                        // Everything received is consumed: a peer blocked by
                        // flow control must hear about it before we wait.
                        wake_driver = slot.unannounced_read > 0;
                        slot.unannounced_read = 0;
                    }
                    Err(RecvError::Closed(reason)) => {
                        slot.status = Status::Closed(reason.clone());
                        return Err(ConnectionError::Closed(reason));
                    }
                    Err(RecvError::UnknownConnection) => return Err(gone(inner, r.handle)),
                }
            }
            if wake_driver {
                r.shared.wake.notify_one();
            }
            notified.await;
        }
    }

    /// Close gracefully: returns once everything sent was acknowledged by
    /// the peer. The endpoint then tells the peer and keeps the connection
    /// for a short closing period in the background ([`Connection::closed`]
    /// resolves after it). Messages received before the close can still be
    /// read. `Err(Closed(reason))` if the connection had already ended
    /// otherwise (peer close, timeout) before everything was acknowledged:
    /// then it is unknown how much the peer got.
    pub async fn close(&self) -> Result<(), ConnectionError> {
        let r = &*self.inner;
        {
            let mut inner = r.shared.lock();
            let now = r.shared.clock.now();
            inner.close_connection(now, r.handle);
        }
        r.shared.wake.notify_one();
        loop {
            let notified = r.signals.state.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = r.shared.lock();
                match inner.slots.get(&r.handle) {
                    Some(slot) => match &slot.status {
                        // Everything acknowledged: the endpoint now tells the
                        // peer and lingers for a few RTOs in the background
                        // (closing period); no need to wait for that.
                        _ if slot.flushed => return Ok(()),
                        Status::Closed(CloseReason::Local) => return Ok(()),
                        Status::Closed(reason) => return Err(ConnectionError::Closed(reason.clone())),
                        _ if inner.exit.is_some() => return Err(gone(&inner, r.handle)),
                        _ => {}
                    },
                    None => return Err(gone(&inner, r.handle)),
                }
            }
            notified.await;
        }
    }

    /// Wait until the connection is closed, for whatever reason (messages
    /// may still be readable).
    pub async fn closed(&self) -> CloseReason {
        let r = &*self.inner;
        loop {
            let notified = r.signals.state.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = r.shared.lock();
                match inner.slots.get(&r.handle).and_then(|s| s.close_reason()) {
                    Some(reason) => return reason.clone(),
                    // The endpoint stopped under it: from the application's
                    // point of view it was closed locally.
                    None if inner.exit.is_some() => return CloseReason::Local,
                    None => {}
                }
            }
            notified.await;
        }
    }

    /// The connection's counters (the last values once it is forgotten).
    pub fn stats(&self) -> ConnectionStats {
        let r = &*self.inner;
        let inner = r.shared.lock();
        inner
            .ep
            .connection_stats(r.handle)
            .or_else(|| inner.slots.get(&r.handle).and_then(|s| s.final_stats))
            .unwrap_or_default()
    }

    /// The shared endpoint state and this connection's handle (for the
    /// other modules' `impl Connection` blocks).
    pub(crate) fn parts(&self) -> (&Arc<Shared>, ConnectionHandle) {
        (&self.inner.shared, self.inner.handle)
    }

    /// The peer's public key, proved by the handshake (`None` when the
    /// endpoints run without authentication).
    pub fn peer_key(&self) -> Option<braid_identity::PublicKey> {
        let r = &*self.inner;
        r.shared.lock().ep.peer_key(r.handle)
    }

    /// The cipher suite sealing this connection's packets (`None` without
    /// authentication).
    pub fn cipher_suite(&self) -> Option<braid_proto::CipherSuite> {
        let r = &*self.inner;
        r.shared.lock().ep.cipher_suite(r.handle)
    }

    /// The peer's address (on the handshake's path).
    pub fn remote_addr(&self) -> SocketAddr {
        self.inner.remote
    }

    /// The endpoint's handle of this connection (unique within the
    /// endpoint, for logs).
    pub fn handle(&self) -> ConnectionHandle {
        self.inner.handle
    }

    /// Set a parameter of the live congestion controller (names depend on
    /// the algorithm; an unknown name lists the known ones in the error).
    pub fn set_congestion_parameter(&self, name: &str, value: f64) -> Result<(), ConnectionError> {
        let r = &*self.inner;
        let mut inner = r.shared.lock();
        match inner.ep.congestion_controller(r.handle) {
            Some(cc) => Ok(cc.set_parameter(name, value)?),
            None => Err(gone(&inner, r.handle)),
        }
    }

    /// The congestion controller's name and current parameters.
    pub fn congestion_parameters(&self) -> Result<CongestionParameters, ConnectionError> {
        let r = &*self.inner;
        let mut inner = r.shared.lock();
        match inner.ep.congestion_controller(r.handle) {
            Some(cc) => Ok(CongestionParameters { algorithm: cc.name(), values: cc.parameters() }),
            None => Err(gone(&inner, r.handle)),
        }
    }
}

/// A snapshot of a connection's congestion controller.
#[derive(Debug, Clone, PartialEq)]
pub struct CongestionParameters {
    /// The algorithm's short name (`"cubic"`, `"newreno"`).
    pub algorithm: &'static str,
    /// Every parameter, by name, with its current value.
    pub values: Vec<(&'static str, f64)>,
}

/// The error for a connection the endpoint no longer serves.
pub(crate) fn gone(inner: &Inner, h: ConnectionHandle) -> ConnectionError {
    if let Some(reason) = inner.slots.get(&h).and_then(|s| s.close_reason()) {
        return ConnectionError::Closed(reason.clone());
    }
    match &inner.exit {
        Some(exit) => exit.to_error(),
        None => ConnectionError::EndpointClosed,
    }
}

impl Drop for ConnectionRef {
    fn drop(&mut self) {
        {
            let mut guard = self.shared.lock();
            let inner = &mut *guard;
            if let Some(slot) = inner.slots.get_mut(&self.handle) {
                slot.detached = true;
                if slot.close_reason().is_some() {
                    inner.forget(self.handle);
                } else {
                    let now = self.shared.clock.now();
                    inner.close_connection(now, self.handle);
                }
            }
        }
        self.shared.handles.fetch_sub(1, Ordering::AcqRel);
        self.shared.wake.notify_one();
    }
}
