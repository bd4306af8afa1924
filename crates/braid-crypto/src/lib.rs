//! The cryptography Braid's two sans-IO protocols share: the transport
//! (`braid-proto`) and Exon (`braid-exon`) both authenticate peers with the
//! same Noise IK handshake and seal packets with the same AEADs, and differ
//! only in what they carry around them (payloads, prologues, labels,
//! nonces, wire codes of their own packets).
//!
//! What it owns:
//! - [`noise`]: the Noise IK handshake state machine (Noise Protocol
//!   Framework rev. 34, §7.5) over `snow`, initiator and responder, with
//!   the protocol's prologue, payload and largest message as parameters,
//!   yielding the two traffic secrets of `Split()` (§5.2). Its X25519
//!   (RFC 7748) takes the static public key from the [`Identity`] instead
//!   of deriving it again, and makes ephemeral keys with curve25519-dalek's
//!   precomputed base-point tables; secrets are zeroized.
//! - [`CipherSuite`]: the AEADs both protocols speak (AES-128-GCM,
//!   AES-256-GCM, ChaCha20-Poly1305), the faster one on this CPU first,
//!   and their codes in handshake payloads.
//! - [`aead`]: a traffic key (RFC 9001 §5.1's construction): HKDF-Expand
//!   (RFC 5869) of a traffic secret with the protocol's labels into an AEAD
//!   key and IV; sealing and opening in place with nonce = IV XOR the
//!   protocol's 12-byte packet nonce.
//! - [`backend`]: whose AEAD code does the sealing on this CPU (ring, or
//!   aws-lc where it has 512-bit vector AES); the bytes are the same.
//!
//! What stays in the protocols: payload formats and versions, prologues,
//! HKDF labels, how a packet nonce is built (braid: path ID ‖ packet
//! number; Exon: a counter), header protection and key update (braid),
//! the replay window and endorsements (Exon), and each protocol's error
//! enum (mapped from [`noise::NoiseError`]).
//!
//! What it must not depend on: tokio, sockets, threads, clocks, files, a
//! thread RNG. Randomness comes in as a seed from the caller (the
//! simulator's runs stay deterministic); keys come from `braid-identity`.
//!
//! [`Identity`]: braid_identity::Identity

pub mod aead;
pub mod backend;
pub mod hkdf;
pub mod noise;
mod suite;

pub use aead::{KeyLabels, TrafficKey, NONCE_LEN, TAG_LEN};
pub use backend::Backend;
pub use noise::{IkParams, Initiator, NoiseError, ProvedResponder, Responder, TrafficSecrets};
pub use suite::CipherSuite;

/// Bytes of a traffic secret (Noise's `HASHLEN` for BLAKE2s, §4.3).
pub const SECRET_LEN: usize = 32;
