//! Where the sender's data comes from: a file read in chunks, or generated
//! bytes for `braid send --bytes`.

use std::path::Path;

use braid_core::{RngCore, SeedableRng};
use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;

/// Application chunk size: each data message carries at most this much.
pub const CHUNK_SIZE: usize = 128 << 10;

/// A stream of data chunks of a size known up front.
#[derive(Debug)]
pub struct Source {
    kind: Kind,
    size: u64,
    produced: u64,
    chunk: usize,
}

#[derive(Debug)]
enum Kind {
    File { file: tokio::fs::File, path: String },
    Generated(Pattern),
}

/// Pseudo-random bytes repeating with a period that is not a multiple of
/// the chunk size, so a reordered or duplicated chunk changes the digest.
/// Chunks are slices of one shared buffer: generating costs nothing, which
/// keeps the sender's CPU for the transport.
#[derive(Debug, Clone)]
struct Pattern {
    buf: Bytes,
    period: usize,
}

/// 1 MiB plus a prime: coprime with every power-of-two chunk size.
const PATTERN_PERIOD: usize = (1 << 20) + 4099;

impl Pattern {
    fn new(chunk: usize, seed: u64) -> Pattern {
        let mut buf = vec![0u8; PATTERN_PERIOD + chunk];
        braid_core::Rng::seed_from_u64(seed).fill_bytes(&mut buf[..PATTERN_PERIOD]);
        buf.copy_within(..chunk, PATTERN_PERIOD);
        Pattern { buf: Bytes::from(buf), period: PATTERN_PERIOD }
    }

    fn at(&self, offset: u64, len: usize) -> Bytes {
        let start = (offset % self.period as u64) as usize;
        self.buf.slice(start..start + len)
    }
}

/// Reading the source failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file became shorter while it was being sent.
    #[error("file shrank while being sent: {got} of {expected} bytes")]
    Shrank {
        /// Bytes read before the end.
        got: u64,
        /// Size announced.
        expected: u64,
    },
}

impl Source {
    /// The whole of the file at `path`, read in [`CHUNK_SIZE`] pieces.
    pub async fn file(path: &Path) -> Result<Source, SourceError> {
        let io = |source| SourceError::Io { path: path.display().to_string(), source };
        let file = tokio::fs::File::open(path).await.map_err(io)?;
        let meta = file.metadata().await.map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
        }
        let path = path.display().to_string();
        Ok(Source { kind: Kind::File { file, path }, size: meta.len(), produced: 0, chunk: CHUNK_SIZE })
    }

    /// `size` bytes of seeded pseudo-random data.
    pub fn generated(size: u64, seed: u64) -> Source {
        Source { kind: Kind::Generated(Pattern::new(CHUNK_SIZE, seed)), size, produced: 0, chunk: CHUNK_SIZE }
    }

    /// Bytes this source yields in total.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True for generated data.
    pub fn is_generated(&self) -> bool {
        matches!(self.kind, Kind::Generated(_))
    }

    /// The next chunk, `None` once `size` bytes were produced.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, SourceError> {
        let left = self.size - self.produced;
        if left == 0 {
            return Ok(None);
        }
        let len = left.min(self.chunk as u64) as usize;
        let chunk = match &mut self.kind {
            Kind::Generated(p) => p.at(self.produced, len),
            Kind::File { file, path } => {
                let mut buf = BytesMut::with_capacity(len);
                while buf.len() < len {
                    // `take` stops at the announced size even if the file grows.
                    let n = (&mut *file)
                        .take((len - buf.len()) as u64)
                        .read_buf(&mut buf)
                        .await
                        .map_err(|source| SourceError::Io { path: path.clone(), source })?;
                    if n == 0 {
                        return Err(SourceError::Shrank { got: self.produced + buf.len() as u64, expected: self.size });
                    }
                }
                buf.freeze()
            }
        };
        self.produced += len as u64;
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn drain(mut s: Source) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = s.next_chunk().await.unwrap() {
            assert!(c.len() <= CHUNK_SIZE);
            out.extend_from_slice(&c);
        }
        out
    }

    #[tokio::test]
    async fn generated_data_has_the_size_and_no_short_period() {
        let size = 3 * PATTERN_PERIOD as u64 + 17;
        let data = drain(Source::generated(size, 7)).await;
        assert_eq!(data.len() as u64, size);
        // Consecutive chunks differ (the pattern is not chunk-periodic)...
        assert_ne!(data[..CHUNK_SIZE], data[CHUNK_SIZE..2 * CHUNK_SIZE]);
        // ...and the stream is the pattern repeated exactly.
        assert_eq!(data[..1000], data[PATTERN_PERIOD..PATTERN_PERIOD + 1000]);
        // A different seed gives different data.
        assert_ne!(drain(Source::generated(1000, 8)).await, data[..1000]);
    }

    #[tokio::test]
    async fn file_is_read_whole_in_chunks() {
        let dir = std::env::temp_dir().join(format!("braid-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        let content: Vec<u8> = (0..(CHUNK_SIZE * 2 + 5)).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let src = Source::file(&path).await.unwrap();
        assert_eq!(src.size(), content.len() as u64);
        assert_eq!(drain(src).await, content);
        assert!(matches!(Source::file(&dir).await, Err(SourceError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
