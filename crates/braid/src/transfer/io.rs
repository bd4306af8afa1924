//! The message pipe a transfer runs over: a Braid connection, or framed
//! messages on a byte stream (kernel TCP) so the same protocol can be
//! compared across transports.

use std::future::Future;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::framing::{FrameReader, FrameWriter};

/// Any transport error, boxed: the protocol only reports it.
pub type IoError = Box<dyn std::error::Error + Send + Sync>;

/// A reliable, ordered, message-preserving pipe.
pub trait MessageIo: Send {
    /// Queue a message; may wait for room (backpressure).
    fn send(&mut self, msg: Bytes) -> impl Future<Output = Result<(), IoError>> + Send;
    /// Push queued messages out before waiting for an answer.
    fn flush(&mut self) -> impl Future<Output = Result<(), IoError>> + Send;
    /// The next message; `None` once the peer closed and all was read.
    fn recv(&mut self) -> impl Future<Output = Result<Option<Bytes>, IoError>> + Send;
}

impl MessageIo for braid_net::Connection {
    async fn send(&mut self, msg: Bytes) -> Result<(), IoError> {
        self.send_message(msg).await.map_err(Into::into)
    }

    async fn flush(&mut self) -> Result<(), IoError> {
        // Queued messages are sent by the endpoint's driver on its own.
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, IoError> {
        match self.recv_message().await {
            Ok(m) => Ok(Some(m)),
            // A graceful close (by the peer, or by us) ends the stream; a
            // timeout or a protocol violation is a failure to report.
            Err(braid_net::ConnectionError::Closed(braid_proto::CloseReason::Remote { .. } | braid_proto::CloseReason::Local)) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Messages as length-prefixed frames over a split byte stream.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use braid::transfer::FramedStream;
/// let tcp = tokio::net::TcpStream::connect("127.0.0.1:4433").await?;
/// let (r, w) = tcp.into_split();
/// let framed = FramedStream::new(r, w);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FramedStream<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> {
    reader: FrameReader<R>,
    writer: FrameWriter<W>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> FramedStream<R, W> {
    /// Frames read from `r` and written to `w`.
    pub fn new(r: R, w: W) -> Self {
        FramedStream { reader: FrameReader::new(r), writer: FrameWriter::new(w) }
    }

    /// Flush and close the writing half: the peer's `recv` returns `None`.
    pub async fn shutdown(&mut self) -> Result<(), IoError> {
        self.writer.shutdown().await.map_err(Into::into)
    }
}

impl<R, W> MessageIo for FramedStream<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    async fn send(&mut self, msg: Bytes) -> Result<(), IoError> {
        self.writer.send(&msg).await.map_err(Into::into)
    }

    async fn flush(&mut self) -> Result<(), IoError> {
        self.writer.flush().await.map_err(Into::into)
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, IoError> {
        self.reader.recv().await.map_err(Into::into)
    }
}
