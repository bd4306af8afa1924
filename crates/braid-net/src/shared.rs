//! State shared by the driver task and the application's handles: the
//! protocol endpoint behind one mutex, and the notifiers that wake tasks.
//!
//! Locking rule: the mutex is held only while calling into the protocol
//! state machine and updating the bookkeeping below, never across a socket
//! call or an `.await`. Tasks are woken after the lock is released.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use braid_core::Instant;
use braid_proto::{CloseReason, ConnectionHandle, ConnectionStats};
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::error::DriverExit;
use crate::socket::UdpSocket;

/// Everything one endpoint's tasks share.
pub(crate) struct Shared {
    pub(crate) socket: UdpSocket,
    pub(crate) local_addr: SocketAddr,
    pub(crate) clock: Clock,
    pub(crate) inner: Mutex<Inner>,
    /// Wakes the driver: new data to send, a close, a dropped handle.
    pub(crate) wake: Notify,
    /// Wakes `accept` callers.
    pub(crate) accept: Notify,
    /// Wakes `wait_idle` callers when the driver stops.
    pub(crate) exited: Notify,
    /// Live application handles (the `Endpoint` and every `Connection`).
    /// When it reaches zero the endpoint closes itself and the driver stops
    /// once its connections are gone.
    pub(crate) handles: AtomicUsize,
    /// Bytes read by the application after which the driver is woken to
    /// announce the freed receive window.
    pub(crate) read_wake_bytes: u64,
}

impl Shared {
    /// Lock the protocol state. A panic while it was held (a bug in the
    /// state machine) must not turn every later call into a panic too.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The mutable state behind the mutex.
pub(crate) struct Inner {
    pub(crate) ep: braid_proto::Endpoint,
    pub(crate) slots: HashMap<ConnectionHandle, Slot>,
    /// Accepted connections not yet handed to `accept`.
    pub(crate) incoming: VecDeque<ConnectionHandle>,
    /// `Endpoint::close` was called, or every handle dropped.
    pub(crate) closed: bool,
    /// Set when the driver has stopped.
    pub(crate) exit: Option<DriverExit>,
}

/// The driver's view of one connection.
pub(crate) struct Slot {
    pub(crate) signals: Arc<Signals>,
    pub(crate) remote: SocketAddr,
    pub(crate) status: Status,
    /// A graceful close was requested.
    pub(crate) closing: bool,
    /// Everything sent before the close was acknowledged.
    pub(crate) flushed: bool,
    /// No application handle refers to it any more: forget it as soon as it
    /// is closed.
    pub(crate) detached: bool,
    /// Bytes read since the driver was last woken for a window update.
    pub(crate) unannounced_read: u64,
    /// Counters captured before the endpoint forgot the connection.
    pub(crate) final_stats: Option<ConnectionStats>,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Connecting,
    Established,
    Closed(CloseReason),
}

/// Notifiers of one connection, waited on by its application tasks.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    /// A message arrived.
    pub(crate) readable: Notify,
    /// The send buffer has room again.
    pub(crate) writable: Notify,
    /// Established, flushed or closed.
    pub(crate) state: Notify,
}

impl Signals {
    pub(crate) fn wake_all(&self) {
        self.readable.notify_waiters();
        self.writable.notify_waiters();
        self.state.notify_waiters();
    }
}

impl Slot {
    pub(crate) fn new(status: Status, remote: SocketAddr) -> Slot {
        Slot {
            signals: Arc::new(Signals::default()),
            remote,
            status,
            closing: false,
            flushed: false,
            detached: false,
            unannounced_read: 0,
            final_stats: None,
        }
    }

    pub(crate) fn close_reason(&self) -> Option<&CloseReason> {
        match &self.status {
            Status::Closed(reason) => Some(reason),
            _ => None,
        }
    }
}

impl Inner {
    pub(crate) fn new(ep: braid_proto::Endpoint) -> Inner {
        Inner { ep, slots: HashMap::new(), incoming: VecDeque::new(), closed: false, exit: None }
    }

    /// Start a graceful close of `h`, once.
    pub(crate) fn close_connection(&mut self, now: Instant, h: ConnectionHandle) {
        if let Some(slot) = self.slots.get_mut(&h) {
            if slot.closing || slot.close_reason().is_some() {
                return;
            }
            slot.closing = true;
        }
        self.ep.close(now, h);
    }

    /// Close the endpoint: stop accepting, close every connection
    /// gracefully. Connections nobody accepted yet are detached, so they are
    /// forgotten once closed.
    pub(crate) fn close_all(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        self.closed = true;
        for h in std::mem::take(&mut self.incoming) {
            if let Some(slot) = self.slots.get_mut(&h) {
                slot.detached = true;
            }
        }
        for h in self.ep.connections() {
            if let Entry::Vacant(entry) = self.slots.entry(h) {
                // Accepted by the protocol but its event not drained yet:
                // nobody will ever hold it.
                let remote = self.ep.remote_address(h).unwrap_or(unspecified());
                let mut slot = Slot::new(Status::Established, remote);
                slot.detached = true;
                entry.insert(slot);
            }
            self.close_connection(now, h);
        }
    }

    /// Read and discard what is left of a closed connection so that the
    /// endpoint forgets it, then drop its slot.
    pub(crate) fn forget(&mut self, h: ConnectionHandle) {
        if let Some(slot) = self.slots.get_mut(&h) {
            if slot.final_stats.is_none() {
                slot.final_stats = self.ep.connection_stats(h);
            }
        }
        // The endpoint forgets a closed connection when `recv_message`
        // reports `Closed`; `Ok(None)` would mean it is not closed yet.
        while let Ok(Some(_)) = self.ep.recv_message(h) {}
        self.slots.remove(&h);
    }
}

/// Placeholder address for a connection whose peer the endpoint no longer
/// knows (only used for connections nobody can observe).
pub(crate) fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}
