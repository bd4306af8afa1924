//! Node identity and peer trust for Braid: the first layer of authenticated
//! transport (issue 17, item 1).
//!
//! - [`Identity`]: a node's Ed25519 key pair (RFC 8032). Its X25519 form
//!   (RFC 7748, converted as libsodium's `crypto_sign_ed25519_*_to_curve25519`)
//!   is the Noise static key; the same key signs for TLS 1.3 (PKCS#8 export);
//!   its [`NodeId`] names the node in Exon and cannot be chosen.
//! - Key file: versioned text, created atomically with mode 0600, refused
//!   when group or others can access it (see [`keyfile`]).
//! - [`KnownHosts`] and [`TrustStore`]: which key each peer must present,
//!   under a [`TrustPolicy`] (known hosts, trust on first use, or none).
//!
//! Apart from reading and writing those two files (its job) the crate is
//! sans-IO: randomness comes from the caller or, for real keys, the OS. It
//! depends on no protocol crate and no runtime (braid-proto, braid-exon and
//! the CLI depend on it, not the other way round).
//!
//! ```
//! use braid_identity::{Identity, KnownHosts, Peer, TrustPolicy, TrustStore, Authorized};
//!
//! let server = Identity::from_seed(&[7; 32]);
//! let line = format!("10.0.0.2:4433 {} server", server.public_key());
//! let store = TrustStore::new(TrustPolicy::KnownHosts, KnownHosts::parse(&line, "example")?);
//! let peer = Peer::addr("10.0.0.2:4433".parse()?);
//! assert_eq!(store.authorize(&peer, &server.public_key())?, Authorized::Known);
//!
//! let impostor = Identity::from_seed(&[8; 32]);
//! assert!(store.authorize(&peer, &impostor.public_key()).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod home;
mod identity;
mod key;
pub mod keyfile;
mod known_hosts;
mod private_file;
mod trust;

pub use error::IdentityError;
pub use home::{
    braid_home, braid_home_from, default_identity_path, default_known_hosts_path, BRAID_HOME_VAR,
    IDENTITY_FILE, KNOWN_HOSTS_FILE,
};
pub use identity::Identity;
pub use key::{
    Fingerprint, KeyError, NodeId, PublicKey, Signature, SignatureError, X25519Public,
    X25519Secret, KEY_LEN, PUBLIC_KEY_PREFIX, SIGNATURE_LEN,
};
pub use known_hosts::{
    render_line, Entry, KnownHosts, KnownHostsError, Pattern, Peer, Trust, MAX_KNOWN_HOSTS_BYTES,
};
pub use rand_core;
pub use trust::{Authorized, TrustError, TrustPolicy, TrustStore};
