//! The Noise IK handshake (Noise Protocol Framework rev. 34, §7.5) that
//! authenticates both peers and yields the connection's traffic secrets,
//! carried in Braid's existing handshake after the stateless cookie:
//!
//! ```text
//! client                                          server
//! Initial (no cookie)                 ─────────▶
//!                                     ◀─────────  Retry: cookie, server's Ed25519 key
//! [client checks the key: known hosts / TOFU]
//! Initial: cookie, IK msg 1           ─────────▶  -> e, es, s, ss  + payload
//!    payload: version, cipher suites, client's Ed25519 key
//!                                                 [cookie checked first, then msg 1,
//!                                                  then the client's key: before any state]
//!                                     ◀─────────  Accept: IK msg 2 (<- e, ee, se + payload:
//!                                                 the chosen suite), packets sealed
//! ```
//!
//! The Retry costs the server nothing (it stays stateless) and lets a
//! client that has never seen the server learn its key (trust on first use)
//! or check it against its known hosts before sending anything
//! identifying. The static keys Noise uses are the X25519 forms of the
//! peers' Ed25519 identities; each side checks that the Ed25519 key it was
//! given maps to the static key the handshake proved (`matches_x25519`).
//! The prologue binds the handshake to the connection IDs and cookie.
//!
//! After message 2 both sides take Noise's `Split()` (§5.2) as the two
//! directions' traffic secrets ([`super::packet_key`]).
//!
//! The handshake state machine (snow, the faster X25519 with the
//! identity's known public key, the split) is `braid_crypto::noise`,
//! shared with Exon; this module owns Braid's part: the prologue, the
//! payloads, their version and the suite negotiation.

use braid_crypto::noise::{IkParams, Initiator, NoiseError, Responder};
use braid_identity::{Identity, PublicKey, KEY_LEN};

use super::packet_key::CipherSuite;
use crate::wire::MAX_NOISE_LEN;

/// Version of the handshake payload.
const PAYLOAD_VERSION: u8 = 1;

/// Why a handshake message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The Noise message failed (authentication, a key that is not the
    /// proved one, a payload too long): see [`NoiseError`].
    #[error(transparent)]
    Noise(#[from] NoiseError),
    /// The payload inside a valid message is malformed.
    #[error("malformed handshake payload: {0}")]
    Payload(&'static str),
    /// The peers share no cipher suite.
    #[error("no cipher suite in common")]
    NoCommonSuite,
}

/// The two traffic secrets a completed handshake yields, and the suite.
pub(crate) struct Secrets {
    pub suite: CipherSuite,
    pub send: [u8; 32],
    pub recv: [u8; 32],
}

/// `braid/3 IK` ‖ client CID ‖ cookie.
fn prologue(client_cid: u64, cookie: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(18 + cookie.len());
    p.extend_from_slice(b"braid/3 IK");
    p.extend_from_slice(&client_cid.to_be_bytes());
    p.extend_from_slice(cookie);
    p
}

fn params(prologue: &[u8]) -> IkParams<'_> {
    IkParams { prologue, max_message_len: MAX_NOISE_LEN }
}

/// The client's half-done handshake: message 1 is sent, message 2 awaited.
pub(crate) struct ClientHandshake {
    initiator: Initiator,
    /// Message 1, resent as is with every repeated Initial.
    pub message: Vec<u8>,
    server_key: PublicKey,
    suites: Vec<CipherSuite>,
}

impl std::fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandshake").field("server_key", &self.server_key).finish()
    }
}

impl ClientHandshake {
    /// Message 1 to `server_key`, for the Initial that echoes `cookie`.
    pub(crate) fn start(
        identity: &Identity,
        suites: &[CipherSuite],
        server_key: PublicKey,
        client_cid: u64,
        cookie: &[u8],
        seed: [u8; 32],
    ) -> Result<ClientHandshake, HandshakeError> {
        let count = u8::try_from(suites.len()).map_err(|_| HandshakeError::Payload("too many suites"))?;
        let mut payload = Vec::with_capacity(2 + suites.len() + KEY_LEN);
        payload.push(PAYLOAD_VERSION);
        payload.push(count);
        payload.extend(suites.iter().map(|s| s.code()));
        payload.extend_from_slice(&identity.public_key().to_bytes());
        let prologue = prologue(client_cid, cookie);
        let (initiator, message) = Initiator::start(identity, &server_key, &params(&prologue), &payload, seed)?;
        Ok(ClientHandshake { initiator, message, server_key, suites: suites.to_vec() })
    }

    /// The server's key this handshake was addressed to.
    pub(crate) fn server_key(&self) -> PublicKey {
        self.server_key
    }

    /// Reads message 2: the traffic secrets, or why not.
    pub(crate) fn finish(mut self, message: &[u8]) -> Result<Secrets, HandshakeError> {
        let (payload, traffic) = self.initiator.finish(message)?;
        let (&version, rest) = payload.split_first().ok_or(HandshakeError::Payload("empty"))?;
        if version != PAYLOAD_VERSION {
            return Err(HandshakeError::Payload("version"));
        }
        let suite = rest
            .first()
            .and_then(|&c| CipherSuite::from_code(c))
            .filter(|s| self.suites.contains(s))
            .ok_or(HandshakeError::NoCommonSuite)?;
        Ok(Secrets { suite, send: traffic.send, recv: traffic.recv })
    }
}

/// What the server learned from message 1 and answers with.
pub(crate) struct ServerHandshake {
    /// The client's identity, proved by the handshake.
    pub client_key: PublicKey,
    /// Message 2, carried by every Accept packet until the client confirms.
    pub message: Vec<u8>,
    pub secrets: Secrets,
}

/// Server: reads message 1 and writes message 2 in one step (IK needs no
/// state between them). `authorize` decides on the client's key before
/// anything is kept; its refusal is returned as is.
pub(crate) fn respond<E>(
    identity: &Identity,
    suites: &[CipherSuite],
    client_cid: u64,
    cookie: &[u8],
    message: &[u8],
    seed: [u8; 32],
    authorize: impl FnOnce(&PublicKey) -> Result<(), E>,
) -> Result<Result<ServerHandshake, E>, HandshakeError> {
    let prologue = prologue(client_cid, cookie);
    let responder = Responder::read(identity, &params(&prologue), message, seed)?;
    let payload = responder.payload();
    let (&version, rest) = payload.split_first().ok_or(HandshakeError::Payload("empty"))?;
    if version != PAYLOAD_VERSION {
        return Err(HandshakeError::Payload("version"));
    }
    let (&count, rest) = rest.split_first().ok_or(HandshakeError::Payload("suite count"))?;
    let count = usize::from(count);
    if rest.len() != count + KEY_LEN {
        return Err(HandshakeError::Payload("length"));
    }
    let offered: Vec<CipherSuite> = rest[..count].iter().filter_map(|&c| CipherSuite::from_code(c)).collect();
    let mut key = [0u8; KEY_LEN];
    key.copy_from_slice(&rest[count..]);
    let client_key = PublicKey::from_bytes(&key).map_err(|_| HandshakeError::Payload("client key"))?;
    let proved = responder.prove(&client_key)?;
    // Our first preference that the client offers.
    let suite = suites.iter().copied().find(|s| offered.contains(s)).ok_or(HandshakeError::NoCommonSuite)?;
    if let Err(refusal) = authorize(&client_key) {
        return Ok(Err(refusal));
    }
    let (message, traffic) = proved.respond(&[PAYLOAD_VERSION, suite.code()])?;
    Ok(Ok(ServerHandshake { client_key, message, secrets: Secrets { suite, send: traffic.send, recv: traffic.recv } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(seed: u8) -> Identity {
        Identity::from_seed(&[seed; 32])
    }

    fn handshake(
        client: &Identity,
        addressed_to: PublicKey,
        server: &Identity,
    ) -> Result<(Secrets, ServerHandshake), HandshakeError> {
        let suites = CipherSuite::preferred();
        let hs = ClientHandshake::start(client, &suites, addressed_to, 42, b"cookie", [1; 32])?;
        let answer = respond(server, &suites, 42, b"cookie", &hs.message, [2; 32], |_| Ok::<(), ()>(()))?
            .expect("authorized");
        let secrets = hs.finish(&answer.message)?;
        Ok((secrets, answer))
    }

    #[test]
    fn both_sides_derive_mirrored_secrets_and_learn_the_client() {
        let (c, s) = (identity(1), identity(2));
        let (client, server) = handshake(&c, s.public_key(), &s).unwrap();
        assert_eq!(client.send, server.secrets.recv);
        assert_eq!(client.recv, server.secrets.send);
        assert_ne!(client.send, client.recv);
        assert_eq!(client.suite, server.secrets.suite);
        assert_eq!(server.client_key, c.public_key());
    }

    #[test]
    fn a_client_addressing_another_key_fails() {
        let (c, s, other) = (identity(1), identity(2), identity(3));
        assert!(matches!(handshake(&c, other.public_key(), &s), Err(HandshakeError::Noise(NoiseError::Authentication))));
    }

    /// The prologue binds the client's connection ID and the cookie.
    #[test]
    fn another_cookie_or_connection_id_fails() {
        let (c, s) = (identity(1), identity(2));
        let suites = CipherSuite::preferred();
        let hs = ClientHandshake::start(&c, &suites, s.public_key(), 42, b"cookie", [1; 32]).unwrap();
        let ok = |cid, cookie: &[u8]| respond(&s, &suites, cid, cookie, &hs.message, [2; 32], |_| Ok::<(), ()>(())).is_ok();
        assert!(ok(42, b"cookie"));
        assert!(!ok(42, b"cookiX"));
        assert!(!ok(43, b"cookie"));
    }

    #[test]
    fn the_server_refuses_before_answering() {
        let (c, s) = (identity(1), identity(2));
        let suites = CipherSuite::preferred();
        let hs = ClientHandshake::start(&c, &suites, s.public_key(), 42, b"cookie", [1; 32]).unwrap();
        let mut seen = None;
        let r = respond(&s, &suites, 42, b"cookie", &hs.message, [2; 32], |k| {
            seen = Some(*k);
            Err("unknown key")
        })
        .unwrap();
        assert!(matches!(r, Err("unknown key")));
        assert_eq!(seen, Some(c.public_key()));
    }

    #[test]
    fn suites_are_negotiated() {
        let (c, s) = (identity(1), identity(2));
        let hs = ClientHandshake::start(&c, &[CipherSuite::ChaCha20Poly1305], s.public_key(), 1, b"", [1; 32]).unwrap();
        let answer = respond(&s, &CipherSuite::preferred(), 1, b"", &hs.message, [2; 32], |_| Ok::<(), ()>(()))
            .unwrap()
            .unwrap();
        assert_eq!(answer.secrets.suite, CipherSuite::ChaCha20Poly1305);
        let hs = ClientHandshake::start(&c, &[CipherSuite::ChaCha20Poly1305], s.public_key(), 1, b"", [1; 32]).unwrap();
        let none = respond(&s, &[CipherSuite::Aes256Gcm], 1, b"", &hs.message, [2; 32], |_| Ok::<(), ()>(()));
        assert!(matches!(none, Err(HandshakeError::NoCommonSuite)));
    }
}
