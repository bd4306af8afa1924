//! Kernel peers of the `multipath` template: bulk goodput of one MPTCP
//! connection (RFC 8684, Linux's in-kernel implementation) over every
//! path of a testbed, and of one plain TCP connection on path 0, both
//! measured the same way (receiver-side, after a warm-up) and counting
//! every byte delivered, so that wire bytes per delivered byte compare.
//!
//! The emulator already configures the namespaces for MPTCP (an endpoint
//! per extra local address with the `subflow` flag, limits raised, source
//! routing per path); this module only opens `IPPROTO_MPTCP` sockets.
//! socket2 is not a dependency of this crate, so the sockets are made with
//! libc and handed to std.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_emu::Testbed;

use crate::template::{ResultExt, TemplateError};

fn failed(why: impl Into<String>) -> TemplateError {
    TemplateError::Failed(why.into())
}

/// `IPPROTO_MPTCP` (Linux ≥ 5.6).
const IPPROTO_MPTCP: libc::c_int = 262;

/// Which kernel transport a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Multipath TCP over every path.
    Mptcp,
    /// Plain TCP, on path 0 only.
    Tcp,
}

/// A stream socket of `kind` (not yet bound or connected).
fn stream_socket(kind: Kernel) -> std::io::Result<libc::c_int> {
    let protocol = match kind {
        Kernel::Mptcp => IPPROTO_MPTCP,
        Kernel::Tcp => libc::IPPROTO_TCP,
    };
    // SAFETY: plain system call with constant arguments; the returned
    // descriptor is owned by the caller (checked for -1 below).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Closes `fd` on error paths before it is owned by a std type.
fn close_on_err<T>(fd: libc::c_int, r: std::io::Result<T>) -> std::io::Result<T> {
    if r.is_err() {
        // SAFETY: `fd` is ours and not yet owned by anything else.
        unsafe { libc::close(fd) };
    }
    r
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A listener of `kind` on `addr`.
fn listen(kind: Kernel, addr: SocketAddrV4) -> std::io::Result<TcpListener> {
    let fd = stream_socket(kind)?;
    let sa = sockaddr(addr);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` is a valid sockaddr_in of `len` bytes; `fd` is a socket.
    let r = check(unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), len) })
        .and_then(|()| check(unsafe { libc::listen(fd, 8) }));
    close_on_err(fd, r)?;
    // SAFETY: `fd` is a listening stream socket we own; std takes it over.
    Ok(unsafe { TcpListener::from_raw_fd(fd) })
}

/// A connection of `kind` to `addr` (blocking connect).
fn connect(kind: Kernel, addr: SocketAddrV4) -> std::io::Result<TcpStream> {
    let fd = stream_socket(kind)?;
    let sa = sockaddr(addr);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: as in `mptcp_listen`.
    let r = check(unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_in).cast(), len) });
    close_on_err(fd, r)?;
    // SAFETY: a connected stream socket we own.
    Ok(unsafe { TcpStream::from_raw_fd(fd) })
}

/// Whether `stream` really runs MPTCP (the kernel falls back to TCP when
/// the peer or a middlebox refuses it): `SOL_MPTCP`'s `MPTCP_INFO` answers
/// only on an MPTCP socket.
fn is_mptcp(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    const SOL_MPTCP: libc::c_int = 284;
    const MPTCP_INFO: libc::c_int = 1;
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` has `len` writable bytes.
    let rc = unsafe { libc::getsockopt(stream.as_raw_fd(), SOL_MPTCP, MPTCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    rc == 0
}

/// What a kernel bulk run measured.
#[derive(Debug, Clone, Copy)]
pub struct KernelRun {
    /// Goodput over the measurement window, bit/s.
    pub bps: f64,
    /// Application bytes received during the whole run.
    pub delivered: u64,
    /// The connection ran MPTCP (for `Kernel::Mptcp`: no fallback to TCP).
    pub mptcp: bool,
}

/// Goodput of one `kind` connection from host a's address on path 0 to
/// host b's, counted at the receiver over `measure` after `warmup`.
pub fn goodput(tb: &Testbed, kind: Kernel, warmup: Duration, measure: Duration) -> Result<KernelRun, TemplateError> {
    let p0 = tb.layout().paths.first().context("the testbed has no path")?;
    let (a, b, b_addr) = (p0.a.clone(), p0.b.clone(), p0.b_addr);
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let receiver = tb.in_host(&b, move || -> Result<(f64, u64), TemplateError> {
        let listener = listen(kind, SocketAddrV4::new(b_addr, 0)).context("kernel listener")?;
        let _ = tx.send(listener.local_addr().context("the kernel listener's address")?);
        let (mut s, _) = listener.accept().context("accepting the kernel connection")?;
        s.set_read_timeout(Some(Duration::from_secs(10))).context("setting a read timeout")?;
        let mut buf = vec![0u8; 1 << 20];
        let start = Instant::now();
        let (t0, t1) = (start + warmup, start + warmup + measure);
        let (mut counted, mut total) = (0u64, 0u64);
        loop {
            let n = s.read(&mut buf).context("receiving")?;
            let now = Instant::now();
            total += n as u64;
            if n == 0 || now >= t1 {
                break;
            }
            if now >= t0 {
                counted += n as u64;
            }
        }
        Ok((counted as f64 * 8.0 / measure.as_secs_f64(), total))
    })
    .context("starting the kernel receiver's host thread")?;
    let addr: SocketAddr = rx.recv_timeout(Duration::from_secs(5)).map_err(|_| failed("the kernel receiver did not start"))?;
    let SocketAddr::V4(addr) = addr else { crate::fail!("the kernel receiver is not on IPv4: {addr}") };
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let sender = tb.in_host(&a, move || -> Result<bool, TemplateError> {
        let mut s = connect(kind, addr).with_context(|| format!("connecting ({kind:?})"))?;
        let mptcp = is_mptcp(&s);
        s.set_write_timeout(Some(Duration::from_secs(10))).context("setting a write timeout")?;
        let buf = vec![0x5au8; 1 << 18];
        while !stop2.load(Ordering::Relaxed) {
            if s.write_all(&buf).is_err() {
                break; // the receiver closed after its measurement
            }
        }
        Ok(mptcp)
    })
    .context("starting the kernel sender's host thread")?;
    let result = receiver.join().map_err(|_| failed("the kernel receiver panicked"))?;
    stop.store(true, Ordering::Relaxed);
    let mptcp = sender.join().map_err(|_| failed("the kernel sender panicked"))??;
    let (bps, delivered) = result?;
    Ok(KernelRun { bps, delivered, mptcp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn sockaddr_is_in_network_byte_order() {
        let sa = sockaddr(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 6), 4433));
        assert_eq!(sa.sin_port, 4433u16.to_be());
        assert_eq!(sa.sin_addr.s_addr.to_ne_bytes(), [192, 0, 2, 6]);
    }
}
