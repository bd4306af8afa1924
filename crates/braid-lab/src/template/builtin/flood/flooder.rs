//! The attacker: UDP sockets opened inside the receiver's host, each bound
//! to its own source (an address of the spoofed range on the host's
//! loopback device where one could be added, and its own port), connected
//! to the receiver's service address. Their datagrams reach the receiver
//! through the host's loopback, never across the emulated bottleneck: what
//! a flood may cost a receiver is its work per packet, not the link (an
//! attacker with more bandwidth than the link is a different problem).
//!
//! Sending is paced to a rate and bounded by a count and a deadline,
//! whichever comes first, in `sendmmsg` batches so that the attacker's own
//! system-call cost stays small on a machine it shares with the receiver.
//!
//! Against Exon, the attacker first learns the receiver's public key as
//! anyone can: a key request from one of its sockets ([`learn_exon_key`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_emu::Testbed;

use braid::exon::secure::PublicKey;

use super::legit::Counters;
use super::spoof::{self, Forger};
use crate::template::{ResultExt, TemplateError};

/// The spoofed source range, on the receiver host's loopback device
/// (TEST-NET-3, RFC 5737: never a real host).
pub const SPOOFED_NET: &str = "203.0.113.0/24";

/// Datagrams per `sendmmsg` call.
const BATCH: usize = 32;

/// The attacker's sockets.
pub struct Sockets {
    socks: Vec<UdpSocket>,
    /// Distinct source addresses among them.
    pub addresses: usize,
}

/// Adds [`SPOOFED_NET`] to `host`'s loopback device, so that sockets there
/// can send from any of its addresses. False (and why) if it could not.
pub fn add_spoofed_range(tb: &Testbed, host: &str) -> Result<(), String> {
    let mut ip = tb.command(host, "ip").map_err(|e| e.to_string())?;
    let out = ip
        .args(["addr", "add", "203.0.113.1/24", "dev", "lo"])
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Opens `n` sockets in `host`, connected to `target`: bound to
/// 203.0.113.1, .2, ... (cycling through `addresses` of them) if
/// `spoofed`, else to the host's loopback address, each on its own port.
pub fn open(tb: &Testbed, host: &str, target: SocketAddr, n: usize, spoofed: bool) -> Result<Sockets, TemplateError> {
    let addresses = if spoofed { n.clamp(1, 250) } else { 1 };
    let h = tb
        .in_host(host, move || -> std::io::Result<Vec<UdpSocket>> {
            (0..n)
                .map(|i| {
                    let ip = if spoofed {
                        Ipv4Addr::new(203, 0, 113, (i % addresses) as u8 + 1)
                    } else {
                        Ipv4Addr::LOCALHOST
                    };
                    let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0))?;
                    s.connect(target)?;
                    Ok(s)
                })
                .collect()
        })
        .with_context(|| format!("starting a thread in host {host}"))?;
    let socks = h
        .join()
        .map_err(|_| TemplateError::failed("the thread opening the flood's sockets panicked"))?
        .with_context(|| format!("opening the flood's sockets in host {host}"))?;
    Ok(Sockets { socks, addresses })
}

/// Key requests sent before giving up, and how long each waits for its
/// reply.
const KEY_TRIES: u32 = 10;
const KEY_WAIT: Duration = Duration::from_millis(300);

/// The Exon receiver's public key, asked for with a key request from the
/// first socket and read from the reply (datagrams that are not one are
/// skipped), as an attacker would learn it.
pub fn learn_exon_key(sockets: &Sockets) -> Result<PublicKey, TemplateError> {
    let sock = sockets.socks.first().ok_or_else(|| TemplateError::failed("the flood has no socket"))?;
    sock.set_read_timeout(Some(KEY_WAIT)).context("setting a read timeout")?;
    let mut buf = vec![0u8; 2048];
    let mut learned = None;
    'tries: for _ in 0..KEY_TRIES {
        sock.send(&spoof::key_request()).context("sending a key request")?;
        let until = Instant::now() + KEY_WAIT;
        while Instant::now() < until {
            match sock.recv(&mut buf) {
                Ok(n) => {
                    if let Some(key) = spoof::read_key_reply(&buf[..n]) {
                        learned = Some(key);
                        break 'tries;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(e) => return Err(TemplateError::io("reading a key reply", e)),
            }
        }
    }
    sock.set_read_timeout(None).context("clearing the read timeout")?;
    learned.ok_or_else(|| TemplateError::failed("the Exon receiver answered no key request: its key is unknown to the flood"))
}

/// How far one flood got.
#[derive(Debug, Clone, Copy)]
pub struct Flooded {
    /// Datagrams the kernel took.
    pub sent: u64,
    /// Failed `sendmmsg` calls.
    pub send_errors: u64,
    /// When the first batch went.
    pub started: Instant,
    /// When the last one went.
    pub ended: Instant,
    /// The receiver's (bytes, messages) at `started` and at `ended`.
    pub at_start: (u64, u64),
    pub at_end: (u64, u64),
}

/// Pacing and bounds of one flood.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Datagrams per second.
    pub pps: u64,
    /// Datagrams at most.
    pub max: u64,
    /// Longest it runs.
    pub duration: Duration,
}

/// Sends forged datagrams at `plan.pps` until `plan.max` went, `duration`
/// passed or `stop` is set; notes the receiver's counters at the first and
/// the last send, so that the throughput under flood is measured over the
/// flood itself.
pub fn run(sockets: &Sockets, forger: &mut Forger, plan: Plan, counters: &Counters, stop: &Arc<AtomicBool>) -> Flooded {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| Vec::with_capacity(forger.max_len())).collect();
    let started = Instant::now();
    let at_start = counters.read();
    let (mut sent, mut send_errors, mut next_sock) = (0u64, 0u64, 0usize);
    let mut ended = started;
    loop {
        let elapsed = started.elapsed();
        if sent >= plan.max || elapsed >= plan.duration || stop.load(Ordering::Relaxed) {
            break;
        }
        // Datagrams due by now (the first batch at once).
        let due = ((plan.pps as f64 * elapsed.as_secs_f64()) as u64).max(BATCH as u64).min(plan.max);
        if sent >= due {
            let wait = Duration::from_secs_f64(BATCH as f64 / plan.pps.max(1) as f64).min(Duration::from_millis(1));
            std::thread::sleep(wait);
            continue;
        }
        let n = ((due - sent) as usize).min(BATCH);
        for b in &mut bufs[..n] {
            forger.forge(b);
        }
        let sock = &sockets.socks[next_sock % sockets.socks.len()];
        next_sock += 1;
        match send_batch(sock, &bufs[..n]) {
            Ok(k) => sent += k as u64,
            Err(_) => {
                // A full socket buffer or a transient error: the attacker
                // backs off a little, as the kernel asks.
                send_errors += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        ended = Instant::now();
    }
    Flooded { sent, send_errors, started, ended, at_start, at_end: counters.read() }
}

/// One `sendmmsg` of `bufs` on the connected `sock`: how many went.
fn send_batch(sock: &UdpSocket, bufs: &[Vec<u8>]) -> std::io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = bufs
        .iter()
        .map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    // SAFETY: zeroed mmsghdr is a valid empty header (null name, no
    // control data); each points at one iovec of `iovs`, which with the
    // buffers it points into outlives the call.
    let mut msgs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .map(|iov| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: `msgs` holds `msgs.len()` valid headers (see above) and the
    // socket is open for the call's duration.
    let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::flood::Target;

    /// Paced and bounded on 127.0.0.1 (no namespaces needed): the count
    /// stops it, and at the paced rate it takes about count / rate.
    #[test]
    fn a_flood_is_paced_and_bounded() {
        let target = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = target.local_addr().unwrap();
        let socks = (0..4)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.connect(addr).unwrap();
                s
            })
            .collect();
        let sockets = Sockets { socks, addresses: 1 };
        let key = braid::exon::Identity::from_seed(&[1; 32]).public_key();
        let mut forger = Forger::new(Target::Exon, 1, Some(key));
        let counters = Counters::default();
        let stop = Arc::new(AtomicBool::new(false));
        let plan = Plan { pps: 20_000, max: 4_000, duration: Duration::from_secs(10) };
        let f = run(&sockets, &mut forger, plan, &counters, &stop);
        assert_eq!(f.sent, 4_000, "{f:?}");
        let secs = f.ended.duration_since(f.started).as_secs_f64();
        // 0.2 s at the paced rate; never faster, and not much slower.
        assert!((0.18..1.0).contains(&secs), "{secs} s");
        // The deadline bounds it too.
        let plan = Plan { pps: 1_000, max: 1_000_000, duration: Duration::from_millis(100) };
        let f = run(&sockets, &mut forger, plan, &counters, &stop);
        assert!(f.sent < 400, "{f:?}");
    }

    /// A real (sans-IO) Exon node behind a UDP socket on 127.0.0.1: the
    /// key learned with a key request is its key, a stray datagram before
    /// the reply is skipped.
    #[test]
    fn the_exon_key_is_learned_with_a_key_request() {
        use braid::exon::{AcceptAnyKey, ExonNode, Identity, NodeConfig, Security};
        let identity = Identity::from_seed(&[6; 32]);
        let want = identity.public_key();
        let target = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = target.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let security = Security::authenticated(identity, Arc::new(AcceptAnyKey));
            let mut node = ExonNode::new(NodeConfig::default(), security, [6; 32], 0);
            let mut buf = vec![0u8; 2048];
            let (n, src) = target.recv_from(&mut buf).unwrap();
            target.send_to(b"not a key reply", src).unwrap();
            let now = braid::Instant::from_nanos(1);
            node.handle_datagram(now, src, bytes::Bytes::copy_from_slice(&buf[..n]));
            let mut out = Vec::new();
            let t = node.poll_transmit(now, &mut out).expect("a key reply");
            target.send_to(&out[..t.size], t.dst).unwrap();
        });
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect(addr).unwrap();
        let sockets = Sockets { socks: vec![s], addresses: 1 };
        assert_eq!(learn_exon_key(&sockets).unwrap(), want);
        server.join().unwrap();
    }
}
