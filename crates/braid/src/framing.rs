//! Length-prefixed messages over a byte stream (kernel TCP, a QUIC stream).
//!
//! Braid's transport carries messages natively; a byte stream does not, so
//! to compare like with like (and to run the file-transfer protocol over
//! TCP) each message is sent as a 4-byte big-endian length followed by the
//! payload.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};

/// Largest frame accepted by [`FrameReader`] unless told otherwise (64 MiB,
/// Braid's default `max_message_size`).
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;

/// Reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed.
    #[error("stream error: {0}")]
    Io(#[from] std::io::Error),
    /// A length prefix announced more than the reader accepts.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({got} of {expected} bytes)")]
    Truncated { got: usize, expected: usize },
}

/// Writes frames, buffered: call [`FrameWriter::flush`] before waiting for
/// an answer.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use braid::framing::{FrameReader, FrameWriter};
/// let (a, b) = tokio::io::duplex(1024);
/// let mut w = FrameWriter::new(a);
/// let mut r = FrameReader::new(b);
/// w.send(b"hello").await.unwrap();
/// w.shutdown().await.unwrap();
/// assert_eq!(r.recv().await.unwrap().as_deref(), Some(&b"hello"[..]));
/// assert_eq!(r.recv().await.unwrap(), None);
/// # });
/// ```
#[derive(Debug)]
pub struct FrameWriter<W: AsyncWrite + Unpin> {
    inner: BufWriter<W>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Frames written to `inner` through a 64 KiB buffer, so that small
    /// messages do not cost a system call each.
    pub fn new(inner: W) -> Self {
        FrameWriter { inner: BufWriter::with_capacity(64 << 10, inner) }
    }

    /// Queue one frame.
    pub async fn send(&mut self, payload: &[u8]) -> Result<(), FrameError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| FrameError::TooLarge { len: payload.len(), max: u32::MAX as usize })?;
        self.inner.write_all(&len.to_be_bytes()).await?;
        self.inner.write_all(payload).await?;
        Ok(())
    }

    /// Push buffered frames to the stream.
    pub async fn flush(&mut self) -> Result<(), FrameError> {
        self.inner.flush().await?;
        Ok(())
    }

    /// Flush, then close the writing side (the reader sees the end).
    pub async fn shutdown(&mut self) -> Result<(), FrameError> {
        self.inner.shutdown().await?;
        Ok(())
    }

    /// The underlying stream.
    pub fn get_mut(&mut self) -> &mut W {
        self.inner.get_mut()
    }
}

/// Reads frames written by [`FrameWriter`].
#[derive(Debug)]
pub struct FrameReader<R: AsyncRead + Unpin> {
    inner: R,
    buf: BytesMut,
    max_frame: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader accepting frames up to [`DEFAULT_MAX_FRAME`].
    pub fn new(inner: R) -> Self {
        Self::with_max_frame(inner, DEFAULT_MAX_FRAME)
    }

    /// A reader accepting frames up to `max_frame` bytes; a longer length
    /// prefix is an error rather than an allocation of that size.
    pub fn with_max_frame(inner: R, max_frame: usize) -> Self {
        FrameReader { inner, buf: BytesMut::with_capacity(256 << 10), max_frame }
    }

    /// The next frame, or `None` if the stream ended cleanly between frames.
    pub async fn recv(&mut self) -> Result<Option<Bytes>, FrameError> {
        if !self.fill(4).await? {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max_frame {
            return Err(FrameError::TooLarge { len, max: self.max_frame });
        }
        if !self.fill(4 + len).await? {
            return Err(FrameError::Truncated { got: self.buf.len().saturating_sub(4), expected: len });
        }
        let mut frame = self.buf.split_to(4 + len);
        let _ = frame.split_to(4);
        Ok(Some(frame.freeze()))
    }

    /// Read until `buf` holds `n` bytes. False if the stream ends first
    /// (an error if it ends with a partial length prefix).
    async fn fill(&mut self, n: usize) -> Result<bool, FrameError> {
        while self.buf.len() < n {
            // Read in large pieces: one system call brings many small frames.
            self.buf.reserve((n - self.buf.len()).max(128 << 10));
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                if n == 4 && !self.buf.is_empty() {
                    return Err(FrameError::Truncated { got: self.buf.len(), expected: 4 });
                }
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn frames_round_trip(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 0..40),
                             pipe in 1usize..5000) {
            let got = rt().block_on(async {
                let (a, b) = tokio::io::duplex(pipe);
                let sent = frames.clone();
                let writer = tokio::spawn(async move {
                    let mut w = FrameWriter::new(a);
                    for f in &sent {
                        w.send(f).await.unwrap();
                    }
                    w.shutdown().await.unwrap();
                });
                let mut r = FrameReader::new(b);
                let mut got = Vec::new();
                while let Some(f) = r.recv().await.unwrap() {
                    got.push(f.to_vec());
                }
                writer.await.unwrap();
                got
            });
            prop_assert_eq!(got, frames);
        }
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        rt().block_on(async {
            let mut r = FrameReader::with_max_frame(&[0u8, 0, 1, 0, 9][..], 100);
            assert!(matches!(r.recv().await, Err(FrameError::TooLarge { len: 256, max: 100 })));
            let mut r = FrameReader::new(&[0u8, 0, 0, 3, 1, 2][..]);
            assert!(matches!(r.recv().await, Err(FrameError::Truncated { got: 2, expected: 3 })));
            let mut r = FrameReader::new(&[0u8, 0][..]);
            assert!(matches!(r.recv().await, Err(FrameError::Truncated { got: 2, expected: 4 })));
        });
    }
}
