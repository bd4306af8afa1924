//! TLS 1.3 (RFC 8446) with mutual authentication by Braid identities, for the
//! transports that run over kernel TCP: the Node's TCP transport and file
//! transfer (issue 17 items 4 and 5).
//!
//! Each side presents its Ed25519 identity as a raw public key (RFC 7250,
//! not a self-signed certificate: Braid pins keys, so a certificate would
//! only add fields to ignore, an X.509 parser facing the peer's bytes, and
//! expiry dates that need a clock; rustls 0.23 negotiates raw keys for both
//! sides), proves it with the
//! CertificateVerify signature, and is authorized by the peer's
//! [`braid_identity::TrustStore`] (known hosts, TOFU, or no authentication) —
//! the same keys and files the Braid transport's Noise handshake uses. The
//! server requires a client key. Only TLS 1.3, only Ed25519, the ring
//! provider's AEADs (AES-GCM, ChaCha20-Poly1305) and X25519 / P-256 key
//! exchange; no resumption, no 0-RTT. After the handshake the server sends
//! one confirmation byte ([`ACCEPTED`]) that `connect` consumes, so a client
//! whose key the server refuses learns it from `connect`, before sending
//! anything (TLS 1.3 alone would tell it only on its first read).
//!
//! ```
//! use std::sync::Arc;
//! use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
//! use braid_tls::TlsSettings;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio::net::{TcpListener, TcpStream};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (server_id, client_id) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
//! let listener = TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! // Each side's known hosts list the other (the server knows clients by address: here any).
//! let client_hosts = KnownHosts::parse(&format!("{addr} {}", server_id.public_key()), "client")?;
//! let server_hosts = KnownHosts::parse(&format!("* {}", client_id.public_key()), "server")?;
//! let client = TlsSettings::new(&client_id, Arc::new(TrustStore::new(TrustPolicy::KnownHosts, client_hosts)))?;
//! let server = TlsSettings::new(&server_id, Arc::new(TrustStore::new(TrustPolicy::KnownHosts, server_hosts)))?;
//!
//! let serve = tokio::spawn(async move {
//!     let (tcp, _) = listener.accept().await?;
//!     let (mut tls, client_key) = server.accept(tcp).await?;
//!     tls.write_all(b"hello").await?;
//!     tls.shutdown().await?;
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(client_key)
//! });
//! let (mut tls, server_key) = client.connect(TcpStream::connect(addr).await?, addr).await?;
//! let mut text = String::new();
//! tls.read_to_string(&mut text).await?;
//! assert_eq!((text.as_str(), server_key), ("hello", server_id.public_key()));
//! assert_eq!(serve.await?.map_err(|e| e.to_string())?, client_id.public_key());
//! # Ok(())
//! # }
//! ```

// `TlsError` names the peer and its key so a user can act on it; it is built
// once per failed handshake, so its size costs nothing that matters (as
// `braid_identity::TrustError`, which it carries).
#![allow(clippy::result_large_err)]

mod error;
mod rpk;
mod settings;
mod verify;

pub use error::TlsError;
pub use settings::{TlsSettings, ACCEPTED};
pub use tokio_rustls::{client, server};
