//! Node configuration, including who the node is and whom it trusts
//! ([`NodeAuth`], issue 17 items 4–5: authenticated and encrypted by default).

use std::sync::Arc;
use std::time::Duration;

use braid_identity::{Identity, TrustPolicy, TrustStore};

use crate::{ConfigError, NodeError, Transport};

/// The node's identity and trust: where they come from.
///
/// Under any policy but [`TrustPolicy::InsecureNoAuth`], Braid connections
/// run the Noise IK handshake and seal every packet, and TCP connections run
/// TLS 1.3 with mutual authentication (`braid-tls`), both with this identity
/// and judging peers by this trust store; `InsecureNoAuth` turns both off
/// (plain TCP, unauthenticated Braid), for benchmarks of the bare protocols.
/// A peer that proves it holds the node's own key is accepted too: nodes
/// sharing one key file are one principal (two nodes of one program with
/// the default settings trust each other and no one else).
#[derive(Debug, Clone)]
pub enum NodeAuth {
    /// The identity and known-hosts files (default: `$BRAID_HOME/identity`,
    /// created on first use with mode 0600, and `$BRAID_HOME/known_hosts`)
    /// under a trust policy, as the CLI's `--identity`, `--known-hosts`,
    /// `--tofu` and `--insecure-no-auth` give them.
    Files(braid_net::NodeSecurity),
    /// An identity and trust store already loaded (embedding programs,
    /// tests); the store's policy applies.
    Keys {
        /// The node's key pair.
        identity: Identity,
        /// Whom it trusts.
        trust: Arc<TrustStore>,
    },
}

impl Default for NodeAuth {
    /// The files under `$BRAID_HOME`, known hosts only.
    fn default() -> Self {
        NodeAuth::Files(braid_net::NodeSecurity::default())
    }
}

impl NodeAuth {
    /// No authentication and no encryption (`--insecure-no-auth`).
    pub fn insecure() -> Self {
        NodeAuth::Files(braid_net::NodeSecurity { policy: TrustPolicy::InsecureNoAuth, ..Default::default() })
    }

    /// Two fresh identities, each trusting only the other's key: the two
    /// nodes of one program (the lab's DATA runs, benchmarks), as
    /// `braid_net::pinned_pair` is for two endpoints. Keys come from the
    /// operating system and live only in memory.
    pub fn pinned_pair() -> Result<(NodeAuth, NodeAuth), NodeError> {
        let fresh = || Identity::generate_os().map_err(|e| NodeError::Security(format!("a fresh identity: {e}")));
        let (a, b) = (fresh()?, fresh()?);
        let trusting = |other: &Identity| -> Result<Arc<TrustStore>, NodeError> {
            let mut hosts = braid_identity::KnownHosts::new();
            hosts
                .append(braid_identity::Pattern::Any, other.public_key(), "the other node of this program")
                .map_err(|e| NodeError::Security(e.to_string()))?;
            Ok(Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts)))
        };
        let (trust_b, trust_a) = (trusting(&b)?, trusting(&a)?);
        Ok((NodeAuth::Keys { identity: a, trust: trust_b }, NodeAuth::Keys { identity: b, trust: trust_a }))
    }

    /// The trust policy in force.
    pub fn policy(&self) -> TrustPolicy {
        match self {
            NodeAuth::Files(files) => files.policy,
            NodeAuth::Keys { trust, .. } => trust.policy(),
        }
    }

    /// The identity and trust store, loaded (files created on first use);
    /// `None` under `InsecureNoAuth`.
    pub(crate) fn load(&self) -> Result<Option<(Identity, Arc<TrustStore>)>, NodeError> {
        if !self.policy().authenticates() {
            return Ok(None);
        }
        match self {
            NodeAuth::Keys { identity, trust } => Ok(Some((identity.clone(), trust.clone()))),
            NodeAuth::Files(files) => {
                let home = |r: Result<std::path::PathBuf, braid_identity::IdentityError>| {
                    r.map_err(|e| NodeError::Security(format!("{e} (set `security` in NodeConfig, or BRAID_HOME)")))
                };
                let identity_path = match &files.identity {
                    Some(p) => p.clone(),
                    None => home(braid_identity::default_identity_path())?,
                };
                let known_hosts = match &files.known_hosts {
                    Some(p) => p.clone(),
                    None => home(braid_identity::default_known_hosts_path())?,
                };
                let identity = Identity::load_or_create(&identity_path)
                    .map_err(|e| NodeError::Security(format!("identity {}: {e}", identity_path.display())))?;
                let trust = TrustStore::open(files.policy, &known_hosts).map_err(|e| NodeError::Security(e.to_string()))?;
                Ok(Some((identity, Arc::new(trust))))
            }
        }
    }
}

/// Dropping a fraction of outgoing UDP datagrams on purpose, to test an
/// application's behaviour under loss without a lossy network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UdpLoss {
    /// Probability of dropping each datagram, in `[0, 1]`.
    pub rate: f64,
    /// Seed of the drop decisions.
    pub seed: u64,
}

/// What a node runs and how.
///
/// ```
/// use braid_node::{NodeAuth, NodeConfig, Transport};
/// use std::time::Duration;
/// let c = NodeConfig { transports: vec![Transport::Tcp, Transport::Braid], idle_timeout: Duration::from_secs(10), ..Default::default() };
/// assert!(c.validate().is_ok());
/// let bad = NodeConfig { udp_max_datagram: 70_000, ..Default::default() };
/// assert_eq!(bad.validate().unwrap_err().field, "udp_max_datagram");
/// // UDP carries no authentication: it must be asked for by name.
/// let udp = NodeConfig { transports: vec![Transport::Udp], ..Default::default() };
/// assert_eq!(udp.validate().unwrap_err().field, "allow_unauthenticated_udp");
/// assert!(NodeConfig { allow_unauthenticated_udp: true, ..udp.clone() }.validate().is_ok());
/// assert!(NodeConfig { security: NodeAuth::insecure(), ..udp }.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Transports to listen on and send with; each at
    /// `base port + Transport::port_offset()` (Exon at base + 2). `Data`
    /// is refused: it is a pseudo-transport (see [`Transport`]). Default:
    /// TCP and Braid, both authenticated and encrypted (add `Exon` to run
    /// it too; `Udp` needs [`NodeConfig::allow_unauthenticated_udp`]).
    pub transports: Vec<Transport>,
    /// Who the node is and whom it trusts (default: the identity and known
    /// hosts under `$BRAID_HOME`, known hosts only). It replaces
    /// `braid.security`, and secures TCP with TLS 1.3.
    pub security: NodeAuth,
    /// Run UDP even though its datagrams are neither authenticated nor
    /// encrypted: anyone on the path can read them, and anyone who can send
    /// to the port can inject messages with any header. UDP is the node's
    /// one unauthenticated transport (at-most-once datagrams have no
    /// handshake to carry keys); it is refused unless this is set or the
    /// policy is `InsecureNoAuth`. Default false.
    pub allow_unauthenticated_udp: bool,
    /// A TCP or Braid channel this node opened is closed after this long
    /// without a message to send. Default 60 s (channels are kept long:
    /// opening one costs at least a round trip).
    pub idle_timeout: Duration,
    /// Giving up opening a channel after this long. Default 10 s.
    pub connect_timeout: Duration,
    /// Messages queued per channel before `send` waits. Default 256.
    pub channel_queue: usize,
    /// Received messages queued per receiver (the node, each virtual node)
    /// before the network is slowed down (TCP, Braid) or datagrams are
    /// dropped (UDP); a received batch ([`crate::MessageBatch`]) takes one
    /// place, whatever number of messages it holds. Default 4096.
    pub recv_queue: usize,
    /// Largest framed message sent over UDP; larger ones are refused.
    /// Default and maximum 65507 (the largest IPv4 UDP payload).
    pub udp_max_datagram: usize,
    /// Largest framed message accepted over TCP. Default 64 MiB.
    pub max_frame_size: usize,
    /// `TCP_NOTSENT_LOWAT` of the connections this node opens (Linux):
    /// bytes written but not yet sent that the kernel holds before the
    /// channel must wait. Keeps the queue of a busy TCP channel in the
    /// node, where FIFO order, notifications and the DATA interceptor see
    /// it, instead of in a send buffer that autotuning grows to several
    /// BDPs (a small message written behind such a buffer waits for all
    /// of it: the paper's Fig. 8). Data in flight is not limited by it.
    /// `None` leaves the kernel's default (unlimited). Default 512 KiB.
    pub tcp_notsent_lowat: Option<u32>,
    /// Braid's endpoint configuration. Default: Braid's, with a 5 s
    /// keep-alive so a channel outlives Braid's own idle timeout as long
    /// as the node keeps it.
    pub braid: braid_net::EndpointConfig,
    /// Congestion control of the bulk lane's Braid connections (those
    /// the DATA interceptor sends on), instead of `braid.transport`'s;
    /// `None`: as the other channels. Default `Some(Bbr)`.
    ///
    /// Why BBR: a bulk stream under a loss-based controller (CUBIC,
    /// Braid's default) keeps the bottleneck's queue full, and every
    /// control message to the same host waits that queue out (seed 000
    /// Fig. 8). Measured with `braid bench data --repeat 3` over the
    /// emulator (1 Gbit/s, one-BDP queue): the control p50 that DATA's
    /// bulk adds is +2.7 ms at 150 ms RTT and +1.2 ms at 320 ms under
    /// BBR (TCP/TCP in the same run: +214 and +242 ms), against +46 and
    /// +114 ms under CUBIC (TCP/TCP: +183 and +216 ms); DATA's goodput
    /// was 0.93, 0.97, 0.92 and 0.96 of the better pure transport at 0,
    /// 3, 150 and 320 ms.
    pub bulk_congestion_control: Option<braid_net::CcAlgorithm>,
    /// Drop outgoing UDP datagrams on purpose (testing). Default none.
    pub udp_loss: Option<UdpLoss>,
    /// Exon's socket configuration (protocol limits, congestion control,
    /// where its durable clock lives). Default: Exon's, with the clock in
    /// memory, so exactly-once holds while the process lives; give a
    /// `ClockFile::Path` for it to survive restarts.
    pub exon: braid_exon_net::SocketConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        let mut braid = braid_net::EndpointConfig::default();
        braid.transport.keep_alive_interval = Some(Duration::from_secs(5));
        NodeConfig {
            transports: vec![Transport::Tcp, Transport::Braid],
            security: NodeAuth::default(),
            allow_unauthenticated_udp: false,
            idle_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            channel_queue: 256,
            recv_queue: 4096,
            udp_max_datagram: 65_507,
            max_frame_size: 64 << 20,
            tcp_notsent_lowat: Some(512 << 10),
            braid,
            bulk_congestion_control: Some(braid_net::CcAlgorithm::Bbr),
            udp_loss: None,
            exon: braid_exon_net::SocketConfig::default(),
        }
    }
}

impl NodeConfig {
    /// Check every field; the error names the field and the allowed form.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, expected| Err(ConfigError { field, expected });
        if self.transports.is_empty() {
            return err("transports", "at least one of udp, tcp, braid, exon");
        }
        if self.idle_timeout.is_zero() {
            return err("idle_timeout", "a positive duration");
        }
        if self.connect_timeout.is_zero() {
            return err("connect_timeout", "a positive duration");
        }
        if self.channel_queue == 0 {
            return err("channel_queue", "at least 1");
        }
        if self.recv_queue == 0 {
            return err("recv_queue", "at least 1");
        }
        if !(64..=65_507).contains(&self.udp_max_datagram) {
            return err("udp_max_datagram", "64 to 65507 bytes");
        }
        if !(64..=(1 << 31)).contains(&self.max_frame_size) {
            return err("max_frame_size", "64 bytes to 2 GiB");
        }
        if self.tcp_notsent_lowat == Some(0) {
            return err("tcp_notsent_lowat", "a positive number of bytes, or None");
        }
        if self.transports.contains(&Transport::Udp) && self.security.policy().authenticates() && !self.allow_unauthenticated_udp {
            return err(
                "allow_unauthenticated_udp",
                "true to run UDP, whose datagrams are neither authenticated nor encrypted (or drop Udp from transports)",
            );
        }
        if let Some(l) = self.udp_loss {
            if !(0.0..=1.0).contains(&l.rate) {
                return err("udp_loss.rate", "a probability in [0, 1]");
            }
        }
        Ok(())
    }
}
