//! File transfer with an end-to-end SHA-256 check: the application protocol
//! behind `braid send` and `braid serve`, usable over any [`MessageIo`].
//!
//! The sender announces the name and exact size ([`Offer`]), streams the
//! data in chunks while hashing it, then sends the digest; the receiver
//! hashes what it got, saves it if asked to, and answers with a
//! [`Verdict`]. Both sides thus know whether the bytes that arrived are the
//! bytes that left. See [`wire`] for the message layout.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use braid::transfer::{self, Source};
//! let endpoint = braid::Endpoint::bind("127.0.0.1:0".parse()?)?;
//! let mut conn = endpoint.connect("127.0.0.1:4433".parse()?).await?;
//! let source = Source::file("report.pdf".as_ref()).await?;
//! let report = transfer::send(&mut conn, Some("report.pdf".into()), source, &mut |_done| {}).await?;
//! assert!(report.ok());
//! conn.close().await?;
//! # Ok(()) }
//! ```

mod io;
mod sink;
mod source;
pub mod wire;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use io::{FramedStream, IoError, MessageIo};
pub use sink::{sanitize_file_name, Sink};
pub use source::{Source, SourceError, CHUNK_SIZE};
pub use wire::{Content, Control, Offer, Verdict, WireError};

/// A transfer could not be carried out (a digest mismatch is *not* an
/// error: it is reported in the result).
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The transport failed.
    #[error("connection failed: {0}")]
    Transport(#[source] IoError),
    /// The peer closed before the transfer completed.
    #[error("peer closed the connection before the transfer completed")]
    Closed,
    /// The peer sent something out of place.
    #[error("peer broke the file-transfer protocol: {0}")]
    Protocol(String),
    /// A control message did not decode.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The data could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// What the sender learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReport {
    /// Data bytes sent.
    pub bytes: u64,
    /// SHA-256 of the data sent, lowercase hex.
    pub sha256: String,
    /// The receiver's answer.
    pub verdict: Verdict,
}

impl SendReport {
    /// The receiver got exactly the bytes sent.
    pub fn ok(&self) -> bool {
        self.verdict.ok && self.verdict.bytes == self.bytes && self.verdict.sha256 == self.sha256
    }
}

/// What the receiver got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveReport {
    /// The sender's announcement.
    pub offer: Offer,
    /// Data bytes received.
    pub bytes: u64,
    /// SHA-256 of the data received, lowercase hex.
    pub sha256: String,
    /// Size and digest matched, and the file (if any) was saved.
    pub ok: bool,
    /// Where the file was saved.
    pub saved: Option<PathBuf>,
    /// Why `ok` is false.
    pub error: Option<String>,
}

async fn recv_control<T: MessageIo>(io: &mut T) -> Result<Control, TransferError> {
    let msg = io.recv().await.map_err(TransferError::Transport)?.ok_or(TransferError::Closed)?;
    Ok(Control::decode(&msg)?)
}

/// Send `source` under the suggested `name`, then wait for the verdict.
/// `progress` is called with the number of data bytes queued so far.
pub async fn send<T: MessageIo>(
    io: &mut T,
    name: Option<String>,
    mut source: Source,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<SendReport, TransferError> {
    let content = if source.is_generated() { Content::Generated } else { Content::File };
    let offer = Offer { name, size: source.size(), content };
    io.send(Control::Offer(offer).encode()).await.map_err(TransferError::Transport)?;
    let mut hasher = Sha256::new();
    let mut sent = 0u64;
    while let Some(chunk) = source.next_chunk().await? {
        hasher.update(&chunk);
        sent += chunk.len() as u64;
        io.send(chunk).await.map_err(TransferError::Transport)?;
        progress(sent);
    }
    let digest: [u8; 32] = hasher.finalize().into();
    io.send(Control::Done(digest).encode()).await.map_err(TransferError::Transport)?;
    io.flush().await.map_err(TransferError::Transport)?;
    match recv_control(io).await? {
        Control::Verdict(verdict) => Ok(SendReport { bytes: sent, sha256: wire::hex(&digest), verdict }),
        other => Err(TransferError::Protocol(format!("expected a verdict, got {other:?}"))),
    }
}

/// Receive one transfer. Files are saved under `out_dir` if given
/// (generated data never is); `progress` is called with the offer and the
/// number of data bytes received so far. The verdict has been sent when
/// this returns `Ok`.
pub async fn receive<T: MessageIo>(
    io: &mut T,
    out_dir: Option<&Path>,
    progress: &mut (dyn FnMut(&Offer, u64) + Send),
) -> Result<ReceiveReport, TransferError> {
    let offer = match recv_control(io).await? {
        Control::Offer(o) => o,
        other => return Err(TransferError::Protocol(format!("expected an offer, got {other:?}"))),
    };
    progress(&offer, 0);
    let mut error = None;
    let mut sink = match (out_dir, offer.content) {
        (Some(dir), Content::File) => {
            match Sink::file(dir, offer.name.as_deref().unwrap_or("")).await {
                Ok(s) => s,
                Err(e) => {
                    // Keep reading (and hashing) so the sender is not stuck
                    // on flow control, and say why at the end.
                    error = Some(format!("cannot create a file in {}: {e}", dir.display()));
                    Sink::discard()
                }
            }
        }
        _ => Sink::discard(),
    };
    let mut hasher = Sha256::new();
    let mut received = 0u64;
    while received < offer.size {
        let Some(chunk) = io.recv().await.map_err(TransferError::Transport)? else {
            sink.abort().await;
            return Err(TransferError::Closed);
        };
        if chunk.len() as u64 > offer.size - received {
            sink.abort().await;
            return Err(TransferError::Protocol(format!(
                "more data than the {} bytes offered",
                offer.size
            )));
        }
        hasher.update(&chunk);
        received += chunk.len() as u64;
        if let Err(e) = sink.write(&chunk).await {
            error.get_or_insert(format!("cannot write the received file: {e}"));
            std::mem::replace(&mut sink, Sink::discard()).abort().await;
        }
        progress(&offer, received);
    }
    let digest: [u8; 32] = hasher.finalize().into();
    let claimed = match recv_control(io).await {
        Ok(Control::Done(d)) => d,
        Ok(other) => {
            sink.abort().await;
            return Err(TransferError::Protocol(format!("expected the digest, got {other:?}")));
        }
        Err(e) => {
            sink.abort().await;
            return Err(e);
        }
    };
    if claimed != digest {
        error.get_or_insert(format!(
            "SHA-256 mismatch: sender has {}, receiver computed {}",
            wire::hex(&claimed),
            wire::hex(&digest)
        ));
    }
    let mut saved = None;
    if error.is_none() {
        match sink.commit().await {
            Ok(p) => saved = p,
            Err(e) => error = Some(format!("cannot save the received file: {e}")),
        }
    } else {
        sink.abort().await;
    }
    let verdict = Verdict { ok: error.is_none(), bytes: received, sha256: wire::hex(&digest), error: error.clone() };
    io.send(Control::Verdict(verdict.clone()).encode()).await.map_err(TransferError::Transport)?;
    io.flush().await.map_err(TransferError::Transport)?;
    Ok(ReceiveReport { offer, bytes: received, sha256: verdict.sha256, ok: verdict.ok, saved, error })
}

#[cfg(test)]
mod tests;
