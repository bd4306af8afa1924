//! The driver task: the only code that touches the socket. Each turn it
//! receives everything the socket has (up to a budget), feeds it to the
//! endpoint under one lock together with due timers, collects the
//! endpoint's events and transmissions, then wakes application tasks and
//! sends without holding the lock.
//!
//! Receiving a whole batch before polling transmissions lets the endpoint
//! acknowledge many packets with one ACK; polling several transmissions per
//! lock keeps the lock count per datagram low.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use braid_core::Instant;
use braid_proto::Event;
use bytes::BytesMut;

use crate::error::DriverExit;
use crate::shared::{Inner, Shared, Signals, Slot, Status};
use crate::socket::Receiver;

/// `recvmmsg` calls per turn before the batch is processed. Each may carry
/// up to 8 GRO batches (`socket::RECV_SLOTS`).
pub(crate) const RECV_CALLS_PER_TURN: usize = 4;

/// Transmissions (each up to ~64 KB with GSO) polled per lock.
const TRANSMITS_PER_LOCK: usize = 8;

/// A task to wake once the lock is released.
enum Wake {
    Readable(Arc<Signals>),
    Writable(Arc<Signals>),
    State(Arc<Signals>),
    All(Arc<Signals>),
    Accept,
}

/// Datagrams polled from the endpoint, waiting to be sent.
struct Pending {
    destination: SocketAddr,
    /// Local address to send from, when the path needs one.
    source: Option<IpAddr>,
    segment_size: Option<usize>,
    buf: Vec<u8>,
    /// Bytes of `buf` already sent.
    sent: usize,
}

struct Driver {
    receiver: Receiver,
    /// Datagrams with their sender and the local address they reached.
    received: Vec<(SocketAddr, Option<IpAddr>, BytesMut)>,
    pending: VecDeque<Pending>,
    /// Spare transmit buffers, so sending allocates nothing in steady state.
    pool: Vec<Vec<u8>>,
    wakes: Vec<Wake>,
    /// The socket refused a send; wait for it to become writable.
    send_blocked: bool,
    send_errors: u64,
    max_datagram_size: usize,
    /// The endpoint's next deadline, as of the end of the last turn.
    timeout: Option<Instant>,
}

/// What a turn under the lock decided.
struct Turn {
    timeout: Option<Instant>,
    /// The endpoint may have more to send right away.
    more_to_send: bool,
    exit: bool,
}

/// Marks the endpoint as stopped and wakes every waiting task when the
/// driver ends, whether it returns, panics or is dropped with the runtime.
struct ExitGuard<'a> {
    shared: &'a Shared,
    exit: DriverExit,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        let signals: Vec<Arc<Signals>> = {
            let mut inner = self.shared.lock();
            inner.exit = Some(self.exit.clone());
            inner.slots.values().map(|slot| slot.signals.clone()).collect()
        };
        for s in signals {
            s.wake_all();
        }
        self.shared.accept.notify_waiters();
        self.shared.exited.notify_waiters();
    }
}

/// Run the endpoint until it is closed (or every handle dropped) and its
/// connections are gone, or the socket fails.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut guard = ExitGuard { shared: &shared, exit: DriverExit::Closed };
    let max_datagram_size = usize::from(shared.lock().ep.config().transport.max_datagram_size);
    let mut driver = Driver {
        receiver: Receiver::new(),
        received: Vec::new(),
        pending: VecDeque::new(),
        pool: Vec::new(),
        wakes: Vec::new(),
        send_blocked: false,
        send_errors: 0,
        max_datagram_size,
        timeout: None,
    };
    let sleep = tokio::time::sleep(std::time::Duration::from_secs(3600));
    tokio::pin!(sleep);
    let mut armed: Option<tokio::time::Instant> = None;
    loop {
        if let Err(e) = driver.receive(&shared) {
            tracing::error!(error = %e, "UDP receive failed; endpoint stops");
            guard.exit = DriverExit::Failed(e.kind(), e.to_string());
            return;
        }
        // A turn that starts blocked polls nothing new; if the socket took
        // the backlog, go back for what the endpoint has waiting.
        let was_blocked = driver.send_blocked;
        let turn = driver.turn(&shared);
        driver.wake_tasks(&shared);
        driver.send(&shared);
        if turn.exit {
            return;
        }
        if (turn.more_to_send || was_blocked) && !driver.send_blocked {
            // Let application tasks sharing this thread run, then go on.
            tokio::task::yield_now().await;
            continue;
        }
        let deadline = turn.timeout.map(|t| shared.clock.deadline(t));
        if deadline != armed {
            if let Some(d) = deadline {
                sleep.as_mut().reset(d);
            }
            armed = deadline;
        }
        tokio::select! {
            biased;
            r = shared.socket.readable() => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "UDP socket failed; endpoint stops");
                    guard.exit = DriverExit::Failed(e.kind(), e.to_string());
                    return;
                }
            }
            _ = shared.socket.writable(), if driver.send_blocked => {}
            _ = &mut sleep, if armed.is_some() => armed = None,
            _ = shared.wake.notified() => {}
        }
    }
}

impl Driver {
    /// Read what the socket holds, up to the per-turn budget.
    fn receive(&mut self, shared: &Shared) -> io::Result<()> {
        for _ in 0..RECV_CALLS_PER_TURN {
            match self.receiver.recv(&shared.socket, &mut self.received) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // ICMP errors reported on some systems, and interrupted
                // calls: nothing wrong with the socket.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
                    ) =>
                {
                    tracing::debug!(error = %e, "ignored UDP receive error");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One pass of protocol work under the lock.
    fn turn(&mut self, shared: &Shared) -> Turn {
        let now = shared.clock.now();
        let mut inner = shared.lock();
        let inner = &mut *inner;
        let port = shared.local_addr.port();
        for (remote, local_ip, datagram) in self.received.drain(..) {
            // The local address tells the paths of a multipath connection
            // apart on a socket bound to a wildcard address.
            let local = local_ip.map(|ip| SocketAddr::new(ip, port));
            inner.ep.handle_datagram_mut_on(now, local, remote, datagram);
        }
        // The deadline computed at the end of the previous turn: anything
        // the application changed since then only adds later timers, or
        // ones the end of this turn picks up (`poll_timeout` is O(n)).
        if self.timeout.is_some_and(|t| t <= now) {
            inner.ep.handle_timeout(now);
        }
        if shared.handles.load(Ordering::Acquire) == 0 {
            inner.close_all(now);
        }
        self.drain_events(inner, now);
        let mut more_to_send = false;
        if !self.send_blocked {
            let max_datagrams = shared.socket.max_segments(self.max_datagram_size);
            let wildcard = shared.local_addr.ip().is_unspecified();
            while self.pending.len() < TRANSMITS_PER_LOCK {
                let mut buf = self.pool.pop().unwrap_or_default();
                match inner.ep.poll_transmit(now, max_datagrams, &mut buf) {
                    Some(t) => {
                        buf.truncate(t.size);
                        self.pending.push_back(Pending {
                            destination: t.destination,
                            // A socket bound to one address sends from it
                            // anyway: no per-send source option then.
                            source: t.source.map(|s| s.ip()).filter(|_| wildcard),
                            segment_size: t.segment_size,
                            buf,
                            sent: 0,
                        });
                    }
                    None => {
                        self.pool.push(buf);
                        break;
                    }
                }
            }
            more_to_send = self.pending.len() >= TRANSMITS_PER_LOCK;
            // Sending can close a connection (a close completes).
            self.drain_events(inner, now);
        }
        let exit = inner.closed && inner.ep.connections().is_empty();
        self.timeout = inner.ep.poll_timeout();
        Turn { timeout: self.timeout, more_to_send, exit }
    }

    /// Turn endpoint events into bookkeeping and tasks to wake.
    fn drain_events(&mut self, inner: &mut Inner, now: Instant) {
        while let Some(event) = inner.ep.poll_event() {
            match event {
                Event::Connected(h) => {
                    if let Some(slot) = inner.slots.get_mut(&h) {
                        if slot.status == Status::Connecting {
                            slot.status = Status::Established;
                        }
                        self.wakes.push(Wake::State(slot.signals.clone()));
                    }
                }
                Event::Accepted(h) => {
                    if inner.slots.contains_key(&h) {
                        // Already closed by `close_all` before its event.
                        continue;
                    }
                    let remote = inner.ep.remote_address(h).unwrap_or(crate::shared::unspecified());
                    let mut slot = Slot::new(Status::Established, remote);
                    if inner.closed {
                        slot.detached = true;
                        inner.slots.insert(h, slot);
                        inner.close_connection(now, h);
                    } else {
                        inner.slots.insert(h, slot);
                        inner.incoming.push_back(h);
                        self.wakes.push(Wake::Accept);
                    }
                }
                Event::Readable(h) => {
                    if let Some(slot) = inner.slots.get(&h) {
                        self.wakes.push(Wake::Readable(slot.signals.clone()));
                    }
                }
                Event::Writable(h) => {
                    if let Some(slot) = inner.slots.get(&h) {
                        self.wakes.push(Wake::Writable(slot.signals.clone()));
                    }
                }
                Event::Flushed(h) => {
                    if let Some(slot) = inner.slots.get_mut(&h) {
                        slot.flushed = true;
                        self.wakes.push(Wake::State(slot.signals.clone()));
                    }
                }
                Event::Closed(h, reason) => {
                    let Some(slot) = inner.slots.get_mut(&h) else { continue };
                    tracing::debug!(handle = h.0, remote = %slot.remote, %reason, "connection closed");
                    slot.status = Status::Closed(reason);
                    // The endpoint may forget a closed connection at any
                    // later call; keep its counters.
                    slot.final_stats = inner.ep.connection_stats(h).or(slot.final_stats);
                    self.wakes.push(Wake::All(slot.signals.clone()));
                    if slot.detached {
                        inner.forget(h);
                    }
                }
            }
        }
    }

    fn wake_tasks(&mut self, shared: &Shared) {
        for wake in self.wakes.drain(..) {
            match wake {
                Wake::Readable(s) => s.readable.notify_waiters(),
                Wake::Writable(s) => s.writable.notify_waiters(),
                Wake::State(s) => s.state.notify_waiters(),
                Wake::All(s) => s.wake_all(),
                // One permit per accepted connection: one acceptor each.
                Wake::Accept => shared.accept.notify_one(),
            }
        }
    }

    /// Send pending transmissions in order until done or the socket is full.
    fn send(&mut self, shared: &Shared) {
        self.send_blocked = false;
        while let Some(p) = self.pending.front_mut() {
            match shared.socket.send(p.destination, p.source, &p.buf, p.segment_size, &mut p.sent, &mut self.send_errors) {
                Ok(()) => {
                    let done = self.pending.pop_front().expect("front exists");
                    self.pool.push(done.buf);
                }
                Err(_would_block) => {
                    self.send_blocked = true;
                    return;
                }
            }
        }
    }
}
