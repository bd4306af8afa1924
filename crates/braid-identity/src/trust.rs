//! Deciding whether to talk to a peer that has proved it holds a key: the
//! trust policy (known hosts only, trust on first use, or no authentication)
//! applied to the known-hosts file.
//!
//! Contract for transports: call [`TrustStore::authorize`] once the handshake
//! has proved the peer holds the key (Noise static key, TLS certificate
//! signature) and *before* keeping any per-peer state (connection, session,
//! slots, buffers). The decision depends on the key and the peer's
//! name/address alone, and a refusal allocates nothing, so a flood of
//! unknown keys costs the receiver no memory. The one exception is TOFU,
//! which the user asks for: it records each new peer, bounded by
//! [`TrustStore::tofu_limit`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use crate::key::PublicKey;
use crate::known_hosts::{render_line, KnownHosts, KnownHostsError, Peer, Trust};

/// How peers' keys are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrustPolicy {
    /// Only keys listed for the peer in known hosts (the default).
    #[default]
    KnownHosts,
    /// Trust on first use: an unknown peer's key is recorded and accepted; a
    /// changed key is still refused (as ssh's `StrictHostKeyChecking
    /// accept-new`).
    Tofu,
    /// No authentication at all: any key is accepted. For benchmarks of the
    /// bare protocol only; loudly named so nobody picks it by accident.
    InsecureNoAuth,
}

impl TrustPolicy {
    /// The name used on command lines and in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KnownHosts => "known-hosts",
            Self::Tofu => "tofu",
            Self::InsecureNoAuth => "insecure-no-auth",
        }
    }

    /// Whether peers are authenticated under this policy.
    pub fn authenticates(self) -> bool {
        self != Self::InsecureNoAuth
    }
}

impl fmt::Display for TrustPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TrustPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "known-hosts" => Ok(Self::KnownHosts),
            "tofu" => Ok(Self::Tofu),
            "insecure-no-auth" => Ok(Self::InsecureNoAuth),
            other => Err(format!(
                "trust policy {other:?}: expected `known-hosts`, `tofu` or `insecure-no-auth`"
            )),
        }
    }
}

/// Why a peer's key is refused.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// No known-hosts line names the peer (policy `known-hosts`).
    #[error("peer {peer} presented key {key} (fingerprint {fingerprint}), which is not in {file}: add the line `{line}` there if you trust it, or use --tofu", fingerprint = key.fingerprint(), line = render_line(&peer.tofu_pattern(), key, ""))]
    UnknownKey {
        /// The peer.
        peer: Peer,
        /// The key it presented.
        key: PublicKey,
        /// The known-hosts file (or "known hosts" if none).
        file: String,
    },
    /// The peer presented another key than the one recorded for it.
    #[error("KEY CHANGED: peer {peer} presented key {presented} (fingerprint {presented_fp}), but {file}:{line} expects {expected} (fingerprint {expected_fp}); someone may be impersonating the peer. If its owner replaced the key, edit that line", presented_fp = presented.fingerprint(), expected_fp = expected.fingerprint())]
    KeyChanged {
        /// The peer.
        peer: Peer,
        /// The key it presented.
        presented: PublicKey,
        /// The key on record.
        expected: PublicKey,
        /// The known-hosts file.
        file: String,
        /// The line holding the expected key.
        line: usize,
    },
    /// TOFU has recorded as many peers as it may.
    #[error("peer {peer} is unknown and trust-on-first-use already recorded {limit} keys in {file}: refused; review the file and raise the limit if needed")]
    TofuLimit {
        /// The peer.
        peer: Peer,
        /// The limit on entries.
        limit: usize,
        /// The known-hosts file.
        file: String,
    },
    /// Recording a new key (TOFU) failed; the key is not trusted.
    #[error("recording the key of peer {peer}: {source}")]
    Record {
        /// The peer.
        peer: Peer,
        /// The failure.
        #[source]
        source: KnownHostsError,
    },
}

/// Why a peer was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authorized {
    /// The key is in known hosts for this peer.
    Known,
    /// TOFU: the key was unknown and has now been recorded.
    Learned,
    /// `insecure-no-auth`: nothing was checked.
    Unauthenticated,
}

/// The known hosts with a policy, shared by all of a node's connections
/// (it is `Sync`: TOFU appends under a lock).
#[derive(Debug)]
pub struct TrustStore {
    policy: TrustPolicy,
    tofu_limit: usize,
    hosts: Mutex<KnownHosts>,
}

impl TrustStore {
    /// Entries (listed by hand or learned) beyond which TOFU refuses new
    /// peers: a bound on the file and on memory when peers can mint keys
    /// freely (an entry is about 100 bytes, so 4096 is about 400 KiB).
    pub const DEFAULT_TOFU_LIMIT: usize = 4096;

    /// A store over already parsed known hosts.
    pub fn new(policy: TrustPolicy, hosts: KnownHosts) -> Self {
        Self {
            policy,
            tofu_limit: Self::DEFAULT_TOFU_LIMIT,
            hosts: Mutex::new(hosts),
        }
    }

    /// A store over the known-hosts file at `path` (missing: empty).
    pub fn open(policy: TrustPolicy, path: &Path) -> Result<Self, KnownHostsError> {
        Ok(Self::new(policy, KnownHosts::load(path)?))
    }

    /// Sets how many entries TOFU may hold (see [`Self::DEFAULT_TOFU_LIMIT`]).
    pub fn with_tofu_limit(mut self, limit: usize) -> Self {
        self.tofu_limit = limit;
        self
    }

    /// The policy.
    pub fn policy(&self) -> TrustPolicy {
        self.policy
    }

    /// The TOFU entry limit.
    pub fn tofu_limit(&self) -> usize {
        self.tofu_limit
    }

    /// The known-hosts file, if the store has one.
    pub fn path(&self) -> Option<PathBuf> {
        self.lock().path().map(Path::to_path_buf)
    }

    /// What the known hosts say about `key` for `peer`, without acting.
    pub fn check(&self, peer: &Peer, key: &PublicKey) -> Trust {
        self.lock().check(peer, key)
    }

    /// Accepts or refuses `key` presented by `peer` under the policy (see the
    /// module's contract: call after the key is proved, before any per-peer
    /// state).
    // The error carries both keys and the peer for a message a user can act
    // on; it is built once per refused handshake, so its size costs nothing
    // that matters and boxing would only obscure the fields.
    #[allow(clippy::result_large_err)]
    pub fn authorize(&self, peer: &Peer, key: &PublicKey) -> Result<Authorized, TrustError> {
        if self.policy == TrustPolicy::InsecureNoAuth {
            return Ok(Authorized::Unauthenticated);
        }
        let mut hosts = self.lock();
        let file = hosts
            .path()
            .map_or_else(|| "known hosts".to_string(), |p| p.display().to_string());
        match hosts.check(peer, key) {
            Trust::Known => Ok(Authorized::Known),
            Trust::Changed { expected, line } => Err(TrustError::KeyChanged {
                peer: peer.clone(),
                presented: *key,
                expected,
                file,
                line,
            }),
            Trust::Unknown if self.policy == TrustPolicy::Tofu => {
                if hosts.entries().len() >= self.tofu_limit {
                    return Err(TrustError::TofuLimit {
                        peer: peer.clone(),
                        limit: self.tofu_limit,
                        file,
                    });
                }
                hosts
                    .append(peer.tofu_pattern(), *key, "added on first use (tofu)")
                    .map_err(|source| TrustError::Record {
                        peer: peer.clone(),
                        source,
                    })?;
                Ok(Authorized::Learned)
            }
            Trust::Unknown => Err(TrustError::UnknownKey {
                peer: peer.clone(),
                key: *key,
                file,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KnownHosts> {
        // Entries are pushed only after a successful append, so a panic in
        // another holder cannot leave them half-changed.
        self.hosts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;
    use std::os::unix::fs::PermissionsExt as _;

    fn key(n: u8) -> PublicKey {
        Identity::from_seed(&[n; 32]).public_key()
    }

    fn peer(text: &str) -> Peer {
        text.parse().unwrap()
    }

    fn store(policy: TrustPolicy) -> TrustStore {
        let text = format!("srv.example {}\n", key(1));
        TrustStore::new(policy, KnownHosts::parse(&text, "kh").unwrap())
    }

    #[test]
    fn known_hosts_policy_accepts_only_listed_keys() {
        let s = store(TrustPolicy::KnownHosts);
        assert_eq!(
            s.authorize(&peer("srv.example"), &key(1)).unwrap(),
            Authorized::Known
        );
        let unknown = s.authorize(&peer("other.example"), &key(2)).unwrap_err();
        assert!(matches!(unknown, TrustError::UnknownKey { .. }));
        let message = unknown.to_string();
        assert!(
            message.contains(&format!("other.example {}", key(2))),
            "{message}"
        );
        assert!(message.contains("--tofu"), "{message}");
        let changed = s.authorize(&peer("srv.example"), &key(2)).unwrap_err();
        assert!(matches!(changed, TrustError::KeyChanged { line: 1, .. }));
        assert!(changed.to_string().contains("KEY CHANGED"));
        // Refusals record nothing.
        assert_eq!(s.lock().entries().len(), 1);
    }

    #[test]
    fn tofu_learns_unknown_keys_and_still_refuses_changed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let s = TrustStore::open(TrustPolicy::Tofu, &path).unwrap();
        let addr = peer("192.0.2.1:7000");
        assert_eq!(s.authorize(&addr, &key(1)).unwrap(), Authorized::Learned);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(s.authorize(&addr, &key(1)).unwrap(), Authorized::Known);
        assert!(matches!(
            s.authorize(&addr, &key(2)),
            Err(TrustError::KeyChanged { .. })
        ));
        // What TOFU learned is what a later strict run trusts.
        let strict = TrustStore::open(TrustPolicy::KnownHosts, &path).unwrap();
        assert_eq!(strict.authorize(&addr, &key(1)).unwrap(), Authorized::Known);
        assert_eq!(
            strict.check(&addr, &key(2)),
            Trust::Changed {
                expected: key(1),
                line: 1
            }
        );
    }

    #[test]
    fn accepted_clients_are_learned_by_ip_and_never_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let s = TrustStore::open(TrustPolicy::Tofu, &path).unwrap();
        let from = |port| Peer::accepted(std::net::SocketAddr::from(([192, 0, 2, 1], port)));
        // One line per client key, whatever ports its connections come from.
        assert_eq!(s.authorize(&from(40_001), &key(1)).unwrap(), Authorized::Learned);
        for port in 40_002..40_010 {
            assert_eq!(s.authorize(&from(port), &key(1)).unwrap(), Authorized::Known);
        }
        // A second client behind the same address is another client, not an
        // impostor of the first.
        assert_eq!(s.authorize(&from(40_011), &key(2)).unwrap(), Authorized::Learned);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("192.0.2.1 ")).count(), 2, "{text}");
        // Under known hosts, an unlisted client is unknown.
        let strict = TrustStore::open(TrustPolicy::KnownHosts, &path).unwrap();
        assert!(matches!(strict.authorize(&from(1), &key(3)), Err(TrustError::UnknownKey { .. })));
        assert_eq!(strict.authorize(&from(2), &key(2)).unwrap(), Authorized::Known);
    }

    #[test]
    fn tofu_stops_at_its_limit() {
        let s = store(TrustPolicy::Tofu).with_tofu_limit(3);
        assert_eq!(
            s.authorize(&peer("a.example"), &key(2)).unwrap(),
            Authorized::Learned
        );
        assert_eq!(
            s.authorize(&peer("b.example"), &key(3)).unwrap(),
            Authorized::Learned
        );
        assert!(matches!(
            s.authorize(&peer("c.example"), &key(4)),
            Err(TrustError::TofuLimit { limit: 3, .. })
        ));
        // Known peers still pass at the limit.
        assert_eq!(
            s.authorize(&peer("a.example"), &key(2)).unwrap(),
            Authorized::Known
        );
    }

    #[test]
    fn insecure_no_auth_accepts_everything_and_says_so() {
        let s = store(TrustPolicy::InsecureNoAuth);
        assert_eq!(
            s.authorize(&peer("srv.example"), &key(9)).unwrap(),
            Authorized::Unauthenticated
        );
        assert!(!TrustPolicy::InsecureNoAuth.authenticates());
        assert!(TrustPolicy::Tofu.authenticates());
    }

    #[test]
    fn policy_names_round_trip() {
        for policy in [
            TrustPolicy::KnownHosts,
            TrustPolicy::Tofu,
            TrustPolicy::InsecureNoAuth,
        ] {
            assert_eq!(policy.to_string().parse::<TrustPolicy>().unwrap(), policy);
        }
        assert!("none"
            .parse::<TrustPolicy>()
            .unwrap_err()
            .contains("insecure-no-auth"));
    }

    #[test]
    fn store_is_shareable_between_threads() {
        fn assert_sync<T: Send + Sync>() {}
        assert_sync::<TrustStore>();
    }
}
