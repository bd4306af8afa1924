//! Tree transfers over Braid (`braid send --transport braid`): each engine stream (the control
//! stream and one per network worker) is its own Braid connection, carried as a byte stream by
//! `braid::transfer_stream`, with a loss probe from the connection's counters (lost over sent
//! packets, the network utility's loss term, seed 002 eq. 2). With `--priority 0` every
//! connection yields to other traffic (LEDBAT-like, the priority controller): a background copy.
//!
//! The receiver tells these connections from Braid single-file transfers on the same UDP port
//! by their first message, [`STREAM_MAGIC`]; the others go to the single-file receiver with
//! that first message handed back ([`Peeked`]), and the streams join the TCP ones in one engine
//! receiver ([`MergedAcceptor`]), so a transfer is resumed whichever transport carries it.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use braid::transfer::{IoError, MessageIo};
use braid::transfer_stream::ConnectionStream;
use braid::{Connection, Endpoint, Program};
use braid_identity::TrustPolicy;
use braid_transfer::transport::{
    Acceptor, BoxFuture, Connection as Stream, Connector, LossCounters, LossProbe, StreamRole,
};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::Protection;

/// The first message of a connection that carries an engine stream.
pub const STREAM_MAGIC: &[u8] = b"braid-transfer-stream/1";

/// Opens one Braid connection per engine stream.
pub struct BraidConnector {
    endpoint: Endpoint,
    to: SocketAddr,
    priority: Option<f64>,
    policy: TrustPolicy,
    seen: Arc<Mutex<Option<Protection>>>,
    multipath: Option<Multipath>,
}

/// The paths every stream's connection runs over (`--path`) and its ProgMP
/// scheduler (`--scheduler`; the endpoint's default, min-RTT, without it).
pub struct Multipath {
    /// `(local address, server address)` per path; the first carries the handshake.
    pub paths: Vec<(IpAddr, SocketAddr)>,
    /// The scheduler program.
    pub scheduler: Option<Arc<Program>>,
}

impl BraidConnector {
    /// Connections from `endpoint` to `to`, each set to `priority` if given (the endpoint's
    /// congestion controller must then be the priority controller); the protection of the first
    /// goes to `seen`.
    pub fn new(
        endpoint: Endpoint,
        to: SocketAddr,
        priority: Option<f64>,
        policy: TrustPolicy,
        seen: Arc<Mutex<Option<Protection>>>,
    ) -> Self {
        BraidConnector { endpoint, to, priority, policy, seen, multipath: None }
    }

    /// Every connection over these paths, scheduled by this program.
    pub fn over_paths(mut self, multipath: Multipath) -> Self {
        self.multipath = Some(multipath);
        self
    }
}

impl Drop for BraidConnector {
    fn drop(&mut self) {
        self.endpoint.close();
    }
}

impl Connector for BraidConnector {
    fn connect(&self, _role: StreamRole) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            let conn = match &self.multipath {
                None => self.endpoint.connect(self.to).await.map_err(io::Error::other)?,
                Some(m) => {
                    let conn = self.endpoint.connect_multipath(&m.paths).await.map_err(io::Error::other)?;
                    if let Some(program) = &m.scheduler {
                        conn.set_scheduler(program.clone()).map_err(io::Error::other)?;
                    }
                    conn
                }
            };
            if let Some(p) = self.priority {
                conn.set_congestion_parameter("priority", p).map_err(io::Error::other)?;
            }
            conn.send_message(Bytes::from_static(STREAM_MAGIC)).await.map_err(io::Error::other)?;
            self.seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(|| Protection::of(&conn, self.policy));
            Ok(stream(conn))
        })
    }
}

fn stream(conn: Connection) -> Stream {
    let loss = Arc::new(BraidLoss(conn.clone())) as Arc<dyn LossProbe>;
    Stream { stream: Box::new(ConnectionStream::new(conn)), loss: Some(loss), batching: None }
}

/// A Braid connection's loss counters: packets declared lost over packets sent.
struct BraidLoss(Connection);

impl LossProbe for BraidLoss {
    fn counters(&self) -> Option<LossCounters> {
        let stats = self.0.stats();
        Some(LossCounters { retransmitted: stats.packets_lost, sent: stats.packets_sent, ..LossCounters::default() })
    }
}

/// What an accepted Braid connection carries.
pub enum Accepted {
    /// An engine stream.
    Stream(Connection),
    /// A single-file transfer, its first message already read.
    Single(Connection, Result<Option<Bytes>, IoError>),
}

/// Reads the first message of an accepted connection to tell what it carries.
pub async fn classify(mut conn: Connection) -> Accepted {
    let first = MessageIo::recv(&mut conn).await;
    match &first {
        Ok(Some(m)) if m.as_ref() == STREAM_MAGIC => Accepted::Stream(conn),
        _ => Accepted::Single(conn, first),
    }
}

/// A connection whose first message was already read: returned once, then the connection's.
pub struct Peeked<'a> {
    /// The first message (or what reading it gave).
    pub first: Option<Result<Option<Bytes>, IoError>>,
    /// The connection.
    pub conn: &'a mut Connection,
}

impl MessageIo for Peeked<'_> {
    async fn send(&mut self, msg: Bytes) -> Result<(), IoError> {
        MessageIo::send(self.conn, msg).await
    }

    async fn flush(&mut self) -> Result<(), IoError> {
        MessageIo::flush(self.conn).await
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, IoError> {
        match self.first.take() {
            Some(first) => first,
            None => MessageIo::recv(self.conn).await,
        }
    }
}

/// The engine receiver's streams: from the TCP (or TLS) acceptor and from Braid connections
/// handed over by the UDP accept loop.
pub struct MergedAcceptor {
    tcp: Box<dyn Acceptor>,
    braid: tokio::sync::Mutex<mpsc::UnboundedReceiver<Connection>>,
}

impl MergedAcceptor {
    /// Streams from `tcp` and from the connections sent to `braid`.
    pub fn new(tcp: Box<dyn Acceptor>, braid: mpsc::UnboundedReceiver<Connection>) -> Self {
        MergedAcceptor { tcp, braid: tokio::sync::Mutex::new(braid) }
    }
}

impl Acceptor for MergedAcceptor {
    fn accept(&self) -> BoxFuture<'_, io::Result<Stream>> {
        // Cancel-safe: both accepts are (the engine's receiver drops this future when another
        // of its events comes first).
        Box::pin(async move {
            let mut braid = self.braid.lock().await;
            tokio::select! {
                accepted = self.tcp.accept() => accepted,
                Some(conn) = braid.recv() => Ok(stream(conn)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid::EndpointConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn streams_and_single_transfers_are_told_apart() {
        let server = Endpoint::bind_with("127.0.0.1:0".parse().unwrap(), EndpointConfig::default()).unwrap();
        let addr = server.local_addr();
        let client = Endpoint::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            EndpointConfig { accept_incoming: false, ..Default::default() },
        )
        .unwrap();
        let seen = Arc::default();
        let connector = BraidConnector::new(client, addr, None, TrustPolicy::InsecureNoAuth, Arc::clone(&seen));
        let (tx, rx) = mpsc::unbounded_channel();
        let tcp = braid_transfer::transport::TcpAcceptor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let merged = MergedAcceptor::new(Box::new(tcp), rx);
        let sending = tokio::spawn(async move {
            let mut s = connector.connect(StreamRole::Data).await.unwrap();
            s.stream.write_all(b"through braid").await.unwrap();
            s.stream.shutdown().await.unwrap();
            let counters = s.loss.unwrap().counters().unwrap();
            assert!(counters.sent >= 1);
            connector
        });
        let Accepted::Stream(conn) = classify(server.accept().await.unwrap()).await else { panic!("not a stream") };
        tx.send(conn).unwrap();
        let mut got = Vec::new();
        merged.accept().await.unwrap().stream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"through braid");
        let _connector = sending.await.unwrap();
        assert_eq!(seen.lock().unwrap().as_ref().unwrap().trust, "insecure-no-auth");

        // Anything else is handed back whole, its first message first.
        let other = Endpoint::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            EndpointConfig { accept_incoming: false, ..Default::default() },
        )
        .unwrap();
        let conn = other.connect(addr).await.unwrap();
        conn.send_message(&b"an offer"[..]).await.unwrap();
        conn.send_message(&b"data"[..]).await.unwrap();
        let Accepted::Single(mut conn, first) = classify(server.accept().await.unwrap()).await else {
            panic!("a stream")
        };
        let mut peeked = Peeked { first: Some(first), conn: &mut conn };
        assert_eq!(peeked.recv().await.unwrap().unwrap(), &b"an offer"[..]);
        assert_eq!(peeked.recv().await.unwrap().unwrap(), &b"data"[..]);
    }
}
