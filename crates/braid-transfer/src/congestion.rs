//! The kernel congestion control of a transfer's TCP streams (`TCP_CONGESTION`, set per socket
//! right after it connects).
//!
//! **The host's default unless asked** (`--tcp-congestion`). Measured both ways over the
//! emulator (`braid bench transfer`), neither wins everywhere:
//! - one large file on a clean 500 Mbit/s, 20 ms path: CUBIC 475 Mbit/s (0.950 of the link),
//!   BBR v1 (this host's default) 466: BBR's ProbeRTT empties the pipe for 200 ms every 10 s
//!   and it loses segments at any stream count on a one-BDP queue (`iperf3 -P 4`: 82,000
//!   retransmissions in 17 s against CUBIC's 1,100);
//! - two to four transfers sharing a 300 Mbit/s bottleneck: under CUBIC each transfer's network
//!   stage kept adding streams (a new stream takes its share from the other transfers' streams
//!   faster than the loss term, seed 002 eq. 2, charges for it): 41 workers in all for four
//!   transfers, Jain's index 0.95; under BBR 16–21 workers (one transfer needs 3.3), Jain 0.99.
//!   Since the tuner stops adding streams at a full bottleneck (its standing queue, see
//!   `tuner`'s "A full bottleneck"), both stay at 3 workers per transfer (3/6/9/12, Jain ≥ 0.99).
//!
//! The default stays the host's choice (the host's administrator chose it for the host's paths),
//! and a user who wants CUBIC's last 2% on a clean path asks for `cubic`.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, PoisonError};

/// The longest algorithm name the kernel accepts (`TCP_CA_NAME_MAX`, with its NUL).
const NAME_MAX: usize = 16;

/// Which congestion control a connector's TCP streams run, and which one they got.
#[derive(Debug, Clone)]
pub struct TcpCongestion {
    choice: Choice,
    used: Arc<Mutex<Option<String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    /// Leave the host's default.
    Kernel,
    /// This algorithm, or the connection fails.
    Require(String),
}

impl Default for TcpCongestion {
    /// The host's default.
    fn default() -> Self {
        TcpCongestion::kernel()
    }
}

impl TcpCongestion {
    fn with(choice: Choice) -> Self {
        TcpCongestion { choice, used: Arc::default() }
    }

    /// The host's default (`net.ipv4.tcp_congestion_control`), untouched.
    pub fn kernel() -> Self {
        TcpCongestion::with(Choice::Kernel)
    }

    /// Exactly `name` (a stream the kernel cannot give it to fails).
    ///
    /// ```
    /// use braid_transfer::congestion::TcpCongestion;
    /// assert!(TcpCongestion::require("reno").is_ok());
    /// assert!(TcpCongestion::require("a name far too long").is_err());
    /// ```
    pub fn require(name: &str) -> Result<Self, String> {
        check_name(name)?;
        Ok(TcpCongestion::with(Choice::Require(name.into())))
    }

    /// Reads a command-line value: `kernel` for the host's default, or an algorithm's name.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "kernel" => Ok(TcpCongestion::kernel()),
            name => TcpCongestion::require(name),
        }
    }

    /// Sets the algorithm on a freshly connected socket and records what it runs.
    pub fn apply(&self, socket: &impl AsRawFd) -> io::Result<()> {
        match &self.choice {
            Choice::Kernel => {}
            Choice::Require(name) => set(socket, name).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "TCP congestion control {name:?}: {e} (see net.ipv4.tcp_available_congestion_control; \
                         without CAP_NET_ADMIN only net.ipv4.tcp_allowed_congestion_control)"
                    ),
                )
            })?,
        }
        if let Some(running) = get(socket) {
            self.used.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(running);
        }
        Ok(())
    }

    /// The algorithm the first stream ran, once one has connected.
    pub fn used(&self) -> Option<String> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty() && name.len() < NAME_MAX && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!("TCP congestion control {name:?}: expected `kernel` or an algorithm's name (letters, digits, `_`, at most {} characters), e.g. cubic, bbr, reno", NAME_MAX - 1))
    }
}

fn set(socket: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: the name's bytes are readable for their length and the descriptor is open while
    // `socket` is borrowed; the kernel copies at most that many bytes.
    let rc = unsafe {
        libc::setsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_ptr().cast(), name.len() as libc::socklen_t)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The algorithm a socket runs.
fn get(socket: &impl AsRawFd) -> Option<String> {
    let mut buf = [0u8; NAME_MAX];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most that many.
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    let name = &buf[..(len as usize).min(buf.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket() -> std::net::TcpStream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap()
    }

    #[test]
    fn the_kernel_choice_leaves_the_hosts_default_and_reports_it() {
        let s = socket();
        let default = get(&s).expect("TCP_CONGESTION readable on Linux");
        let c = TcpCongestion::kernel();
        c.apply(&s).unwrap();
        assert_eq!(c.used(), Some(default));
    }

    #[test]
    fn reno_is_always_there_and_is_what_the_stream_runs() {
        // Reno is built into every Linux kernel and always allowed.
        let s = socket();
        let c = TcpCongestion::parse("reno").unwrap();
        c.apply(&s).unwrap();
        assert_eq!(get(&s).as_deref(), Some("reno"));
        assert_eq!(c.used().as_deref(), Some("reno"));
    }

    #[test]
    fn an_unknown_algorithm_fails_the_stream_and_says_which() {
        let s = socket();
        let default = get(&s).unwrap();
        let err = TcpCongestion::require("nosuchcc").unwrap().apply(&s).unwrap_err();
        assert!(err.to_string().contains("\"nosuchcc\""), "{err}");
        assert_eq!(get(&s), Some(default), "the socket keeps what it ran");
    }

    #[test]
    fn bad_names_say_what_is_allowed() {
        for bad in ["", "has space", "x".repeat(16).as_str(), "a/b"] {
            let e = TcpCongestion::parse(bad).unwrap_err();
            assert!(e.contains("expected `kernel` or an algorithm's name"), "{e}");
        }
        assert!(TcpCongestion::parse("kernel").is_ok());
    }
}
