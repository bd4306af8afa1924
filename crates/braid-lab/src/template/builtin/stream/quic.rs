//! quinn configured as Braid's peer: the same largest UDP payload (MTU
//! discovery off, up to what quinn's Initial and its default
//! `max_udp_payload_size` allow: see [`LARGEST_INITIAL`]; the stream
//! template records the size quinn ended at as `quinn_mtu`), the same
//! initial window, flow-control windows as large
//! as Braid's and the same congestion-control family, so a difference in
//! the results comes from the implementations, not the settings.

use std::sync::Arc;

use braid::{CcAlgorithm, TransportConfig};
use quinn::congestion::{CubicConfig, NewRenoConfig};
use quinn::VarInt;

use crate::template::{ResultExt, TemplateError};

/// Server and client configurations sharing one self-signed certificate.
#[derive(Debug, Clone)]
pub struct QuicConfigs {
    /// The receiving end's.
    pub server: quinn::ServerConfig,
    /// The sending end's.
    pub client: quinn::ClientConfig,
}

/// Name the certificate is issued for and the client asks for.
pub const SERVER_NAME: &str = "localhost";

/// Configurations matching `braid`'s; an error if quinn has no controller
/// of Braid's family (it has NewReno and CUBIC).
pub fn configs(braid: &TransportConfig) -> Result<QuicConfigs, TemplateError> {
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .context("generating a self-signed certificate")?;
    let cert_der = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let transport = Arc::new(transport_config(braid)?);

    let mut server = quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key)
        .context("quinn server TLS configuration")?;
    server.transport_config(Arc::clone(&transport));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).context("trusting the self-signed certificate")?;
    let mut client =
        quinn::ClientConfig::with_root_certificates(Arc::new(roots)).context("quinn client TLS configuration")?;
    client.transport_config(transport);
    Ok(QuicConfigs { server, client })
}

/// Whether quinn can run with Braid's congestion control `cc` (quinn has
/// NewReno and CUBIC): check before running anything else.
pub fn check_cc(cc: CcAlgorithm) -> Result<(), TemplateError> {
    match cc {
        CcAlgorithm::NewReno | CcAlgorithm::Cubic => Ok(()),
        other => Err(unsupported(other)),
    }
}

fn unsupported(cc: CcAlgorithm) -> TemplateError {
    TemplateError::Invalid(format!("quinn has no `{cc}` congestion control: compare with cc = newreno or cubic"))
}

/// Largest UDP payload a quinn Initial packet may fill. quinn writes a long
/// header's Length field in two bytes (a varint below 2^14, RFC 9000 §16)
/// and asserts that the padded Initial fits: an `initial_mtu` above this
/// panics quinn. 64 bytes are left for the header before the field. Above
/// it, quinn starts here and its MTU discovery may probe up to the size
/// asked for (its probes go out only when it has nothing else to send, and
/// its peer's default `max_udp_payload_size` of 1472 bytes caps them).
pub const LARGEST_INITIAL: u16 = (1 << 14) - 64;

/// quinn's transport parameters matching `braid`'s (see the module).
pub fn transport_config(braid: &TransportConfig) -> Result<quinn::TransportConfig, TemplateError> {
    let mtu = braid.max_datagram_size;
    let window = |v: u64| VarInt::from_u64(v).context("window too large for QUIC");
    let initial_window = u64::from(braid.initial_window_packets) * u64::from(mtu);
    let initial_mtu = mtu.min(LARGEST_INITIAL);
    let discovery = (mtu > initial_mtu).then(|| {
        let mut d = quinn::MtuDiscoveryConfig::default();
        d.upper_bound(mtu);
        d
    });
    let mut t = quinn::TransportConfig::default();
    t.initial_mtu(initial_mtu)
        .min_mtu(initial_mtu)
        .mtu_discovery_config(discovery)
        .stream_receive_window(window(braid.receive_window)?)
        .receive_window(window(braid.receive_window)?)
        .send_window(braid.send_buffer)
        .max_idle_timeout(Some(braid.idle_timeout.try_into().context("idle timeout")?));
    match braid.congestion_control {
        CcAlgorithm::NewReno => {
            let mut cc = NewRenoConfig::default();
            cc.initial_window(initial_window);
            t.congestion_controller_factory(Arc::new(cc));
        }
        CcAlgorithm::Cubic => {
            let mut cc = CubicConfig::default();
            cc.initial_window(initial_window);
            t.congestion_controller_factory(Arc::new(cc));
        }
        other => return Err(unsupported(other)),
    }
    Ok(t)
}
