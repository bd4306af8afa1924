//! Multipath on real sockets: the application side of `braid-proto`'s
//! paths and ProgMP schedulers.
//!
//! One endpoint has one UDP socket. To send from several local addresses
//! (one per path), bind it to a wildcard address (`0.0.0.0:0`, `[::]:0`):
//! the driver then tells paths apart by the local address each datagram
//! reached (`IP_PKTINFO`) and sends each path's datagrams from its own
//! local address. A path's local address is therefore an IP address only;
//! its port is the socket's. A server that must accept paths to several
//! of its addresses binds a wildcard address too.
//!
//! Only the connecting side opens paths (as in MPTCP); both sides may mark
//! paths backup, choose a scheduler, set its registers and tag messages.
//! The scheduler's `PRINT` lines go to `tracing` (target
//! `braid_progmp::print`, rate-limited) and, on request, to
//! [`Connection::take_scheduler_prints`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use braid_proto::progmp::{Program, Register};
use braid_proto::{CcAlgorithm, PathError, PathInfo, TransportConfig};

use crate::connection::{gone, Connection};
use crate::endpoint::Endpoint;
use crate::error::ConnectionError;
use crate::shared::Shared;

/// The local socket address of a path leaving from `local`, on an endpoint
/// whose socket is bound to `bound`: the socket's port, and an address the
/// socket can send from.
fn path_local(bound: SocketAddr, local: IpAddr) -> Result<SocketAddr, ConnectionError> {
    let same_family = bound.is_ipv4() == local.is_ipv4();
    let usable = same_family && (bound.ip().is_unspecified() || bound.ip() == local);
    if !usable {
        return Err(ConnectionError::LocalAddress { local, bound });
    }
    Ok(SocketAddr::new(local, bound.port()))
}

impl Endpoint {
    /// Connect over several paths: the handshake runs on the first
    /// `(local, remote)` pair, the others are opened once it completes
    /// (each carries data after the peer's first acknowledgement on it).
    /// `local` is the address the path's packets leave from; with more than
    /// one distinct local address the endpoint must be bound to a wildcard
    /// address (see the module docs). `remote` is the peer's address on the
    /// path; the peer answers from it.
    ///
    /// The connection schedules its packets with the shipped minimum-RTT
    /// scheduler until [`Connection::set_scheduler`] picks another.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use braid_net::{Endpoint, Program};
    /// use braid_proto::progmp::builtin;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // A server reachable on 127.0.0.1 and 127.0.0.2, same port.
    /// let server = Endpoint::bind("0.0.0.0:4433".parse()?)?;
    /// let client = Endpoint::bind("0.0.0.0:0".parse()?)?;
    /// let conn = client
    ///     .connect_multipath(&[
    ///         ("127.0.0.1".parse()?, "127.0.0.1:4433".parse()?),
    ///         ("127.0.0.2".parse()?, "127.0.0.2:4433".parse()?),
    ///     ])
    ///     .await?;
    /// // Compile once, share with every connection.
    /// let redundant = Arc::new(Program::compile(builtin("redundant").unwrap().source)?);
    /// conn.set_scheduler(redundant.clone())?;
    /// conn.send_message(&b"on both paths"[..]).await?;
    /// for p in conn.paths() {
    ///     println!("path {} {:?} -> {}: {} bytes sent", p.id, p.local, p.remote, p.bytes_sent);
    /// }
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_multipath(&self, paths: &[(IpAddr, SocketAddr)]) -> Result<Connection, ConnectionError> {
        self.connect_multipath_inner(paths, None).await
    }

    /// [`Endpoint::connect_multipath`] with `transport` instead of the
    /// endpoint's configuration.
    pub async fn connect_multipath_with(
        &self,
        paths: &[(IpAddr, SocketAddr)],
        transport: TransportConfig,
    ) -> Result<Connection, ConnectionError> {
        self.connect_multipath_inner(paths, Some(transport)).await
    }

    async fn connect_multipath_inner(
        &self,
        paths: &[(IpAddr, SocketAddr)],
        transport: Option<TransportConfig>,
    ) -> Result<Connection, ConnectionError> {
        let (&(local, remote), rest) = paths.split_first().ok_or(ConnectionError::NoPaths)?;
        let bound = self.local_addr();
        // Check every pair before anything is sent.
        let locals = paths.iter().map(|&(l, _)| path_local(bound, l)).collect::<Result<Vec<_>, _>>()?;
        let conn = self.start_connect(Some(locals[0]), remote, transport)?.established().await?;
        debug_assert_eq!(locals[0].ip(), local);
        for (&(_, remote), &local) in rest.iter().zip(&locals[1..]) {
            conn.add_path_at(local, remote, false)?;
        }
        Ok(conn)
    }
}

impl Connection {
    /// Run `f` on this connection's protocol state; a connection the
    /// endpoint no longer serves gives the usual error. Wakes the driver
    /// afterwards when `wake` (something may be due to send).
    fn with_proto<T>(
        &self,
        wake: bool,
        f: impl FnOnce(&mut braid_proto::Endpoint, braid_proto::ConnectionHandle) -> Result<T, PathError>,
    ) -> Result<T, ConnectionError> {
        let (shared, h): (&Arc<Shared>, _) = self.parts();
        let result = {
            let mut inner = shared.lock();
            if inner.exit.is_some() || inner.ep.close_reason(h).is_some() {
                return Err(gone(&inner, h));
            }
            match f(&mut inner.ep, h) {
                Err(PathError::UnknownConnection) => return Err(gone(&inner, h)),
                other => other,
            }
        };
        if wake {
            shared.wake.notify_one();
        }
        Ok(result?)
    }

    /// Open a path from the local address `local` to the peer's address
    /// `remote`; `backup` marks it a backup path at both ends (ProgMP's
    /// `IS_BACKUP`). Returns the path's id (ProgMP's subflow `ID`). Only
    /// the connecting side opens paths. The path carries data once the
    /// peer acknowledges its first packet ([`PathInfo::validated`]).
    ///
    /// A path whose retransmission timer fires repeatedly while another
    /// works is abandoned, its unacknowledged data rescheduled; it then
    /// disappears from [`Connection::paths`]. It is opened again later on
    /// the same addresses, under a new id, with waits doubling up to
    /// [`TransportConfig::path_retry_max_backoff`] (one probe packet per
    /// attempt), and carries data once the peer answers;
    /// [`Connection::remove_path`] with its old id stops that.
    pub fn add_path(&self, local: IpAddr, remote: SocketAddr, backup: bool) -> Result<u32, ConnectionError> {
        let (shared, _) = self.parts();
        let local = path_local(shared.local_addr, local)?;
        self.add_path_at(local, remote, backup)
    }

    fn add_path_at(&self, local: SocketAddr, remote: SocketAddr, backup: bool) -> Result<u32, ConnectionError> {
        self.with_proto(true, |ep, h| ep.add_path(h, Some(local), remote, backup))
    }

    /// Close path `id`: what it carried and was not yet acknowledged is
    /// rescheduled on the others, and the peer is told. The last path
    /// cannot be removed (close the connection instead).
    pub fn remove_path(&self, id: u32) -> Result<(), ConnectionError> {
        self.with_proto(true, |ep, h| ep.remove_path(h, id))
    }

    /// Mark path `id` as a backup path, or not, here and at the peer.
    pub fn set_path_backup(&self, id: u32, backup: bool) -> Result<(), ConnectionError> {
        self.with_proto(true, |ep, h| ep.set_path_backup(h, id, backup))
    }

    /// The connection's paths, the handshake's first, with their counters
    /// (bytes and packets sent, received and lost, RTT, congestion window).
    /// Empty once the endpoint has forgotten the connection.
    pub fn paths(&self) -> Vec<PathInfo> {
        let (shared, h) = self.parts();
        shared.lock().ep.paths(h)
    }

    /// Replace the congestion controller of every path by one of
    /// `algorithm`, live: the new controller continues from the old one's
    /// window, slow-start state, RTT estimates and delivery rate, with the
    /// bytes in flight unchanged, so the switch neither bursts nor stalls
    /// ([`braid_proto::cc::Handover`] states the model). Parameters set on
    /// the old controller are not carried over.
    pub fn set_congestion_control(&self, algorithm: CcAlgorithm) -> Result<(), ConnectionError> {
        let now = self.parts().0.clock.now();
        self.with_proto(true, |ep, h| ep.set_congestion_control(now, h, algorithm))
    }

    /// Schedule this connection's packets with `program` from now on, even
    /// on a single path. Compile a program once ([`Program::compile`], or
    /// a [`braid_proto::progmp::Library`]) and share the `Arc` between
    /// connections. Switching a busy connection's scheduler works but the
    /// thesis (§3.3.4) advises setting registers instead.
    pub fn set_scheduler(&self, program: Arc<Program>) -> Result<(), ConnectionError> {
        self.with_proto(true, |ep, h| ep.set_scheduler(h, program))
    }

    /// The scheduler in use, if one was chosen or the connection has more
    /// than one path (then at least the default minimum-RTT one).
    pub fn scheduler(&self) -> Option<Arc<Program>> {
        let (shared, h) = self.parts();
        shared.lock().ep.scheduler(h)
    }

    /// Set register `register` (R1..R6) of the connection's scheduler; the
    /// scheduler runs at once (a register change is a trigger).
    pub fn set_register(&self, register: Register, value: i64) -> Result<(), ConnectionError> {
        self.with_proto(true, |ep, h| ep.set_register(h, register, value))
    }

    /// The value of a register (0 until set).
    pub fn register(&self, register: Register) -> Result<i64, ConnectionError> {
        self.with_proto(false, |ep, h| ep.register(h, register).ok_or(PathError::UnknownConnection))
    }

    /// Tag the messages sent from now on with `tag`: the ProgMP `USER`
    /// property of their packets (e.g. the HTTP/2-aware scheduler reads
    /// it). A packet never mixes two tags.
    pub fn set_user_tag(&self, tag: i64) -> Result<(), ConnectionError> {
        self.with_proto(false, |ep, h| ep.set_user_tag(h, tag))
    }

    /// Keep (or stop keeping) the scheduler's `PRINT` lines for
    /// [`Connection::take_scheduler_prints`]; `tracing` gets them either
    /// way, rate-limited.
    pub fn capture_scheduler_prints(&self, on: bool) -> Result<(), ConnectionError> {
        self.with_proto(false, |ep, h| ep.capture_scheduler_prints(h, on))
    }

    /// The `PRINT` lines captured since the last call, oldest first.
    pub fn take_scheduler_prints(&self) -> Vec<String> {
        let (shared, h) = self.parts();
        shared.lock().ep.take_scheduler_prints(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_must_suit_the_socket() {
        let wild: SocketAddr = "0.0.0.0:5000".parse().unwrap();
        let one: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let v4: IpAddr = "127.0.0.2".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(path_local(wild, v4).unwrap(), "127.0.0.2:5000".parse().unwrap());
        assert_eq!(path_local(one, one.ip()).unwrap(), one);
        assert!(matches!(path_local(one, v4), Err(ConnectionError::LocalAddress { .. })));
        assert!(matches!(path_local(wild, v6), Err(ConnectionError::LocalAddress { .. })));
        let msg = path_local(one, v4).unwrap_err().to_string();
        assert!(msg.contains("wildcard"), "{msg}");
    }
}
