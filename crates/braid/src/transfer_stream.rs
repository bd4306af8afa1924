//! A byte stream (`AsyncRead` + `AsyncWrite`) over a Braid connection's messages, so that
//! code written for byte streams — the file-transfer engine's TCP-style streams — can run over
//! Braid (UDP, congestion control chosen per connection, Noise encryption).
//!
//! Model: a Braid connection is a reliable, ordered, message-preserving pipe
//! (`send_message` / `recv_message`). The stream cuts what is written into messages of at most
//! [`MESSAGE_BYTES`] bytes, each tagged as data; shutting the write half down sends one end
//! marker, which the peer's read half turns into end of file. Reads return the data of
//! received messages in order. Once both directions have ended, the connection is closed
//! gracefully (everything sent acknowledged). Both ends must use this stream: the tag byte is
//! the whole framing.
//!
//! ```no_run
//! # async fn f(conn: braid::Connection) -> std::io::Result<()> {
//! use tokio::io::AsyncWriteExt;
//! let mut stream = braid::transfer_stream::ConnectionStream::new(conn);
//! stream.write_all(b"bytes, cut into messages").await?;
//! stream.shutdown().await?;
//! # Ok(()) }
//! ```

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use braid_net::{Connection, ConnectionError};
use braid_proto::CloseReason;
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, DuplexStream, ReadBuf, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

/// Largest data payload per message. Large enough that the per-message cost (a tag byte, the
/// message header, one wake-up) is negligible, small enough to interleave with other messages.
pub const MESSAGE_BYTES: usize = 64 << 10;

/// Bytes written but not yet cut into messages; beyond it, writes wait (backpressure, on top
/// of the connection's own send buffer).
const PIPE_BYTES: usize = 4 * MESSAGE_BYTES;

/// Messages received but not yet read; beyond it, the connection's receive window pushes back.
const READ_QUEUE: usize = 16;

/// How long the final graceful close may wait for the peer's acknowledgements.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Tag of a message that carries stream data.
const DATA: u8 = 0;
/// Tag of the message that ends the sender's direction.
const END: u8 = 1;

/// A byte stream over one Braid connection (see the module documentation).
#[derive(Debug)]
pub struct ConnectionStream {
    write: WriteHalf<DuplexStream>,
    read: mpsc::Receiver<io::Result<Bytes>>,
    pending: Bytes,
    read_done: bool,
}

impl ConnectionStream {
    /// Runs the stream over `conn` (its pumps are tokio tasks: call within a runtime). The
    /// connection should carry nothing else.
    pub fn new(conn: Connection) -> Self {
        let (app, pump) = tokio::io::duplex(PIPE_BYTES);
        let (_, write) = tokio::io::split(app);
        let (pump_read, _) = tokio::io::split(pump);
        let (tx, read) = mpsc::channel(READ_QUEUE);
        let (up_conn, down_conn) = (conn.clone(), conn.clone());
        tokio::spawn(async move {
            let up = tokio::spawn(send_pump(pump_read, up_conn));
            let down = tokio::spawn(receive_pump(down_conn, tx));
            let (_, _) = tokio::join!(up, down);
            // Both directions ended: everything sent is acknowledged before the close returns.
            let _ = tokio::time::timeout(CLOSE_WAIT, conn.close()).await;
        });
        ConnectionStream { write, read, pending: Bytes::new(), read_done: false }
    }
}

/// Cuts what the application writes into tagged messages; the end marker at end of file.
async fn send_pump(mut from: ReadHalf<DuplexStream>, conn: Connection) {
    let mut buf = BytesMut::with_capacity(1 + MESSAGE_BYTES);
    loop {
        buf.clear();
        buf.extend_from_slice(&[DATA]);
        buf.resize(1 + MESSAGE_BYTES, 0);
        // A failed read of the in-memory pipe can only mean the application side is gone.
        let n = from.read(&mut buf[1..]).await.unwrap_or_default();
        if n == 0 {
            let _ = conn.send_message(Bytes::from_static(&[END])).await;
            return;
        }
        buf.truncate(1 + n);
        if conn.send_message(buf.split().freeze()).await.is_err() {
            return;
        }
    }
}

/// Hands received data to the reader; end of file at the end marker or a graceful close.
async fn receive_pump(conn: Connection, to: mpsc::Sender<io::Result<Bytes>>) {
    loop {
        let item = match conn.recv_message().await {
            Ok(mut msg) => match msg.first() {
                Some(&DATA) => {
                    msg.advance(1);
                    Ok(msg)
                }
                Some(&END) => return,
                _ => Err(io::Error::new(io::ErrorKind::InvalidData, "a Braid stream message without its tag byte")),
            },
            Err(ConnectionError::Closed(CloseReason::Remote { .. } | CloseReason::Local)) => return,
            Err(e) => Err(io::Error::other(e)),
        };
        let failed = item.is_err();
        if to.send(item).await.is_err() || failed {
            return;
        }
    }
}

impl AsyncRead for ConnectionStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.read_done {
                return Poll::Ready(Ok(()));
            }
            match self.read.poll_recv(cx) {
                Poll::Ready(Some(Ok(data))) => self.pending = data,
                Poll::Ready(Some(Err(e))) => {
                    self.read_done = true;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(None) => self.read_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl AsyncWrite for ConnectionStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.write).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The pump sends whatever is in the pipe as soon as it is there.
        Pin::new(&mut self.write).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Endpoint, EndpointConfig};
    use tokio::io::AsyncWriteExt;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 1000) as u8).collect()
    }

    #[tokio::test]
    async fn bytes_cross_in_both_directions_and_end_of_file_arrives() {
        let server = Endpoint::bind_with("127.0.0.1:0".parse().unwrap(), EndpointConfig::default()).unwrap();
        let client_cfg = EndpointConfig { accept_incoming: false, ..Default::default() };
        let client = Endpoint::bind_with("127.0.0.1:0".parse().unwrap(), client_cfg).unwrap();
        let addr = server.local_addr();
        let echo = tokio::spawn(async move {
            let conn = server.accept().await.unwrap();
            let mut stream = ConnectionStream::new(conn);
            let mut got = Vec::new();
            stream.read_to_end(&mut got).await.unwrap();
            stream.write_all(&got[..1000]).await.unwrap();
            stream.shutdown().await.unwrap();
            got
        });
        let conn = client.connect(addr).await.unwrap();
        let mut stream = ConnectionStream::new(conn);
        // Not a multiple of the message size, several messages long.
        let data = pattern(3 * MESSAGE_BYTES + 4321);
        stream.write_all(&data).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut back = Vec::new();
        stream.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, data[..1000]);
        assert_eq!(echo.await.unwrap(), data);
    }
}
