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

use braid_core::{Rng, RngCore, SeedableRng};
use braid_identity::{Identity, PublicKey, X25519Public, X25519Secret, KEY_LEN};
use curve25519_dalek::MontgomeryPoint;
use snow::params::{DHChoice, NoiseParams};
use zeroize::Zeroizing;
use snow::resolvers::{CryptoResolver, DefaultResolver, FallbackResolver};

use super::packet_key::CipherSuite;
use crate::wire::MAX_NOISE_LEN;

/// The protocol name; both peers must use the same.
const PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
/// Version of the handshake payload.
const PAYLOAD_VERSION: u8 = 1;

/// Why a handshake message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Decryption or a Diffie-Hellman step failed: not from the peer we
    /// expected, or altered on the way.
    #[error("handshake message failed authentication")]
    Authentication,
    /// The payload inside a valid message is malformed.
    #[error("malformed handshake payload: {0}")]
    Payload(&'static str),
    /// The Ed25519 key sent does not belong to the static key proved.
    #[error("the peer's Ed25519 key does not match its Noise static key")]
    KeyMismatch,
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

/// Feeds snow the randomness the endpoint passed in (its ephemeral keys),
/// so the simulator's runs stay deterministic and no thread RNG is used.
struct SeededRandom(Rng);

impl snow::types::Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// X25519 (RFC 7748) for snow: the arithmetic of snow's default
/// (curve25519-dalek's Montgomery ladder, so every handshake's bytes are
/// the same) without its two needless costs per handshake and side (found
/// profiling `braid bench handshake`): snow derives the static public key
/// again from the private key, though the identity's X25519 form is known
/// ([`StaticPair`]); and its build of curve25519-dalek has no precomputed
/// tables, so each derivation (the ephemeral key's too) was a variable-base
/// multiplication of the base point. Here the ephemeral key is a fixed-base
/// multiplication with the tables. Measured: both keys of one side in
/// about 30 µs instead of 96 µs, of about 700 µs for the whole handshake
/// (both sides), most of which are IK's eight X25519 operations.
struct Dh25519 {
    private: Zeroizing<[u8; KEY_LEN]>,
    public: [u8; KEY_LEN],
    known: Option<StaticPair>,
}

/// The identity's X25519 key pair, the public half precomputed.
#[derive(Clone)]
struct StaticPair {
    secret: X25519Secret,
    public: X25519Public,
}

impl StaticPair {
    fn of(identity: &Identity) -> StaticPair {
        StaticPair { secret: identity.x25519_secret(), public: identity.x25519_public() }
    }
}

impl snow::types::Dh for Dh25519 {
    fn name(&self) -> &'static str {
        "25519"
    }
    fn pub_len(&self) -> usize {
        KEY_LEN
    }
    fn priv_len(&self) -> usize {
        KEY_LEN
    }
    fn set(&mut self, private: &[u8]) {
        let mut bytes = [0u8; KEY_LEN];
        let n = private.len().min(KEY_LEN);
        bytes[..n].copy_from_slice(&private[..n]);
        *self.private = bytes;
        // A plain comparison: both are our own key, nothing a peer sent.
        let known = self.known.as_ref().filter(|k| k.secret.as_bytes() == &bytes);
        self.public = match known {
            Some(k) => *k.public.as_bytes(),
            None => MontgomeryPoint::mul_base_clamped(bytes).to_bytes(),
        };
        bytes.fill(0);
    }
    fn generate(&mut self, rng: &mut dyn snow::types::Random) -> Result<(), snow::Error> {
        rng.try_fill_bytes(&mut self.private[..])?;
        self.public = MontgomeryPoint::mul_base_clamped(*self.private).to_bytes();
        Ok(())
    }
    fn pubkey(&self) -> &[u8] {
        &self.public
    }
    fn privkey(&self) -> &[u8] {
        &self.private[..]
    }
    fn dh(&self, public: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let point: [u8; KEY_LEN] = public.get(..KEY_LEN).and_then(|p| p.try_into().ok()).ok_or(snow::Error::Dh)?;
        let shared = Zeroizing::new(MontgomeryPoint(point).mul_clamped(*self.private).to_bytes());
        out.get_mut(..KEY_LEN).ok_or(snow::Error::Dh)?.copy_from_slice(&shared[..]);
        Ok(())
    }
}

struct SeededResolver {
    rng: std::sync::Mutex<Option<Rng>>,
    known: StaticPair,
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn snow::types::Random>> {
        let rng = self.rng.lock().ok()?.take()?;
        Some(Box::new(SeededRandom(rng)))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn snow::types::Dh>> {
        match choice {
            DHChoice::Curve25519 => Some(Box::new(Dh25519 {
                private: Zeroizing::new([0; KEY_LEN]),
                public: [0; KEY_LEN],
                known: Some(self.known.clone()),
            })),
            _ => None,
        }
    }
    fn resolve_hash(&self, _: &snow::params::HashChoice) -> Option<Box<dyn snow::types::Hash>> {
        None
    }
    fn resolve_cipher(&self, _: &snow::params::CipherChoice) -> Option<Box<dyn snow::types::Cipher>> {
        None
    }
}

fn builder<'a>(seed: [u8; 32], known: StaticPair) -> snow::Builder<'a> {
    let params: NoiseParams = PATTERN.parse().unwrap_or_else(|_| unreachable!("the pattern is valid"));
    let seeded = SeededResolver { rng: std::sync::Mutex::new(Some(Rng::from_seed(seed))), known };
    let resolver = FallbackResolver::new(Box::new(seeded), Box::new(DefaultResolver));
    snow::Builder::with_resolver(params, Box::new(resolver))
}

/// `braid/3 IK` ‖ client CID ‖ cookie.
fn prologue(client_cid: u64, cookie: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(18 + cookie.len());
    p.extend_from_slice(b"braid/3 IK");
    p.extend_from_slice(&client_cid.to_be_bytes());
    p.extend_from_slice(cookie);
    p
}

/// The client's half-done handshake: message 1 is sent, message 2 awaited.
pub(crate) struct ClientHandshake {
    state: snow::HandshakeState,
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
        let known = StaticPair::of(identity);
        let remote = server_key.to_x25519();
        let prologue = prologue(client_cid, cookie);
        let mut state = builder(seed, known.clone())
            .local_private_key(known.secret.as_bytes())
            .and_then(|b| b.remote_public_key(remote.as_bytes()))
            .and_then(|b| b.prologue(&prologue))
            .and_then(|b| b.build_initiator())
            .map_err(|_| HandshakeError::Authentication)?;
        let mut payload = Vec::with_capacity(2 + suites.len() + KEY_LEN);
        payload.push(PAYLOAD_VERSION);
        payload.push(suites.len() as u8);
        payload.extend(suites.iter().map(|s| s.code()));
        payload.extend_from_slice(&identity.public_key().to_bytes());
        let mut message = vec![0u8; MAX_NOISE_LEN];
        let len = state.write_message(&payload, &mut message).map_err(|_| HandshakeError::Authentication)?;
        message.truncate(len);
        Ok(ClientHandshake { state, message, server_key, suites: suites.to_vec() })
    }

    /// The server's key this handshake was addressed to.
    pub(crate) fn server_key(&self) -> PublicKey {
        self.server_key
    }

    /// Reads message 2: the traffic secrets, or why not.
    pub(crate) fn finish(mut self, message: &[u8]) -> Result<Secrets, HandshakeError> {
        let mut payload = [0u8; MAX_NOISE_LEN];
        let len = self.state.read_message(message, &mut payload).map_err(|_| HandshakeError::Authentication)?;
        let payload = &payload[..len];
        let (&version, rest) = payload.split_first().ok_or(HandshakeError::Payload("empty"))?;
        if version != PAYLOAD_VERSION {
            return Err(HandshakeError::Payload("version"));
        }
        let suite = rest
            .first()
            .and_then(|&c| CipherSuite::from_code(c))
            .filter(|s| self.suites.contains(s))
            .ok_or(HandshakeError::NoCommonSuite)?;
        let (i2r, r2i) = self.state.dangerously_get_raw_split();
        Ok(Secrets { suite, send: i2r, recv: r2i })
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
    let known = StaticPair::of(identity);
    let prologue = prologue(client_cid, cookie);
    let mut state = builder(seed, known.clone())
        .local_private_key(known.secret.as_bytes())
        .and_then(|b| b.prologue(&prologue))
        .and_then(|b| b.build_responder())
        .map_err(|_| HandshakeError::Authentication)?;
    let mut payload = [0u8; MAX_NOISE_LEN];
    let len = state.read_message(message, &mut payload).map_err(|_| HandshakeError::Authentication)?;
    let payload = &payload[..len];
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
    let remote_static = state.get_remote_static().ok_or(HandshakeError::Authentication)?;
    let proved = braid_identity::X25519Public(remote_static.try_into().map_err(|_| HandshakeError::Authentication)?);
    if !client_key.matches_x25519(&proved) {
        return Err(HandshakeError::KeyMismatch);
    }
    // Our first preference that the client offers.
    let suite = suites.iter().copied().find(|s| offered.contains(s)).ok_or(HandshakeError::NoCommonSuite)?;
    if let Err(refusal) = authorize(&client_key) {
        return Ok(Err(refusal));
    }
    let mut message = vec![0u8; MAX_NOISE_LEN];
    let len = state
        .write_message(&[PAYLOAD_VERSION, suite.code()], &mut message)
        .map_err(|_| HandshakeError::Authentication)?;
    message.truncate(len);
    let (i2r, r2i) = state.dangerously_get_raw_split();
    Ok(Ok(ServerHandshake { client_key, message, secrets: Secrets { suite, send: r2i, recv: i2r } }))
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
        assert!(matches!(handshake(&c, other.public_key(), &s), Err(HandshakeError::Authentication)));
    }

    #[test]
    fn a_changed_prologue_or_altered_message_fails() {
        let (c, s) = (identity(1), identity(2));
        let suites = CipherSuite::preferred();
        let hs = ClientHandshake::start(&c, &suites, s.public_key(), 42, b"cookie", [1; 32]).unwrap();
        let other_cookie = respond(&s, &suites, 42, b"cookiX", &hs.message, [2; 32], |_| Ok::<(), ()>(()));
        assert!(other_cookie.is_err());
        for i in 0..hs.message.len() {
            let mut bad = hs.message.clone();
            bad[i] ^= 0x10;
            assert!(respond(&s, &suites, 42, b"cookie", &bad, [2; 32], |_| Ok::<(), ()>(())).is_err(), "byte {i}");
        }
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

    /// The faster X25519 is the same function: keys, shared secrets and so
    /// the handshake's bytes equal snow's default resolver's.
    #[test]
    fn x25519_matches_snows_default() {
        use snow::types::Dh;
        let id = identity(7);
        let mut ours = Dh25519 { private: Zeroizing::new([0; KEY_LEN]), public: [0; KEY_LEN], known: Some(StaticPair::of(&id)) };
        let mut theirs = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        // The static key: taken from the identity, equal to the derived one.
        ours.set(id.x25519_secret().as_bytes());
        theirs.set(id.x25519_secret().as_bytes());
        assert_eq!(ours.pubkey(), theirs.pubkey());
        // Another key (not the identity's): derived.
        ours.set(&[9; 32]);
        theirs.set(&[9; 32]);
        assert_eq!(ours.pubkey(), theirs.pubkey());
        // Ephemeral keys from the same randomness.
        let mut a = SeededRandom(Rng::from_seed([3; 32]));
        let mut b = SeededRandom(Rng::from_seed([3; 32]));
        ours.generate(&mut a).unwrap();
        theirs.generate(&mut b).unwrap();
        assert_eq!((ours.pubkey(), ours.privkey()), (theirs.pubkey(), theirs.privkey()));
        let peer = identity(8).x25519_public();
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        ours.dh(peer.as_bytes(), &mut x).unwrap();
        theirs.dh(peer.as_bytes(), &mut y).unwrap();
        assert_eq!(x, y);
        assert!(ours.dh(&[1; 31], &mut x).is_err(), "a short key is an error, not a panic");
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
