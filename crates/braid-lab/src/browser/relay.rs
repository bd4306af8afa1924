//! A TCP relay from the lab's network namespace into another one: the
//! WebDriver client (fantoccini, on the lab's tokio runtime) reaches a
//! chromedriver that listens on 127.0.0.1 inside an emulated host.
//!
//! The trick: a socket belongs to the namespace its creating thread was in
//! when it was created. The relay binds its listener on the caller's thread
//! (the lab's namespace), then its accept thread enters the target
//! namespace, so every socket it connects for a client lives there. Each
//! relayed connection is two plain copy threads; WebDriver traffic is a
//! few small requests per second, so threads cost nothing here.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use braid::emu::sys::NetNs;

use super::BrowserError;

/// A listening relay; stops accepting when dropped (connections already
/// relayed end with their peers, i.e. when chromedriver is killed).
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Listen on 127.0.0.1 (a free port) here; relay each connection to
    /// 127.0.0.1:`port` inside the network namespace `netns`.
    pub fn start(netns: &str, port: u16) -> Result<Relay, BrowserError> {
        let ns = NetNs::named(netns).map_err(|e| BrowserError::Namespace { netns: netns.to_string(), source: e })?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| BrowserError::Relay(format!("binding: {e}")))?;
        let addr = listener.local_addr().map_err(|e| BrowserError::Relay(format!("its address: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("webdriver-relay".into())
            .spawn(move || {
                if let Err(e) = ns.enter() {
                    let _ = tx.send(Err(e));
                    return;
                }
                let _ = tx.send(Ok(()));
                for client in listener.incoming() {
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    match TcpStream::connect(("127.0.0.1", port)) {
                        Ok(server) => pipe(client, server),
                        Err(_) => drop(client),
                    }
                }
            })
            .map_err(|e| BrowserError::Relay(format!("spawning its thread: {e}")))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(Relay { addr, stop }),
            Ok(Err(e)) => Err(BrowserError::Namespace { netns: netns.to_string(), source: e }),
            Err(_) => Err(BrowserError::Relay("its thread died".into())),
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copy both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else { return };
    std::thread::spawn(move || copy(a, b2));
    std::thread::spawn(move || copy(b, a2));
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_named_in_the_error() {
        let e = Relay::start("braid-no-such-netns", 1).unwrap_err();
        assert!(e.to_string().contains("braid-no-such-netns"), "{e}");
    }

    #[test]
    fn bytes_cross_the_relay_both_ways() {
        // The copying, without a namespace (making one needs root; the
        // browser test runs the whole relay across namespaces).
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let echo = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (client, _) = listener.accept().unwrap();
            pipe(client, TcpStream::connect(("127.0.0.1", port)).unwrap());
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello").unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"hello");
        echo.join().unwrap();
    }
}
