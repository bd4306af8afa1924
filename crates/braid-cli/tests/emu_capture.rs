//! Issue 17's acceptance on the emulator: the packets of a transfer, as
//! captured on the sender's interface, carry no plaintext of the data, for
//! a single file over Braid (UDP) and a tree over TLS 1.3 (TCP). The same
//! capture of an `--insecure-no-auth` transfer does contain it, which shows
//! the capture sees the payload (needs root; see emu_support).

mod cli_support;
mod emu_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cli_support::TempDir;
use emu_support::*;

/// What the files are made of; found in a capture only as plaintext.
const CANARY: &[u8] = b"braid-canary:plaintext-must-not-cross-the-wire;";

/// Captures every packet on the namespace's interfaces (AF_PACKET, both
/// directions; TUN devices carry bare IP packets) until `stop` is set.
fn capture(stop: Arc<AtomicBool>) -> Vec<u8> {
    // SAFETY: plain socket calls with valid arguments; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from((libc::ETH_P_ALL as u16).to_be())) };
    assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
    let timeout = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
    // SAFETY: `timeout` is a valid timeval for SO_RCVTIMEO.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    let mut all = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Acquire) {
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n > 0 {
            all.extend_from_slice(&buf[..n as usize]);
        }
    }
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `braid serve` on host b, once it listens.
fn serve(tb: &braid_emu::Testbed, home: &Path, listen: &str, dir: &Path, trust: &str) -> Child {
    let mut c = tb.command("b", env!("CARGO_BIN_EXE_braid")).unwrap();
    c.env("BRAID_HOME", home).args(["serve", "--listen", listen, "--dir"]).arg(dir).args(["--json", trust]);
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn serve");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).expect("serve's first line");
    assert!(first.contains("listening"), "{first}");
    child
}

/// `braid send ARGS --to TO TRUST` on host a, to completion.
fn send(tb: &braid_emu::Testbed, home: &Path, args: &[&Path], to: &str, trust: &str) {
    let mut c = tb.command("a", env!("CARGO_BIN_EXE_braid")).unwrap();
    c.env("BRAID_HOME", home).arg("send").args(args).args(["--to", to, "--json", trust]);
    let out = run_limited(c, Duration::from_secs(60));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// One single-file transfer (Braid) and one tree transfer (TLS over TCP,
/// or plain TCP when insecure) from a to b, captured on a.
fn captured_transfers(tb: &braid_emu::Testbed, tmp: &TempDir, trust: &str, tag: &str) -> Vec<u8> {
    let b_addr = tb.layout().paths[0].b_addr;
    let listen = format!("{b_addr}:4433");
    let (home_a, home_b) = (tmp.0.join(format!("home-a-{tag}")), tmp.0.join(format!("home-b-{tag}")));
    let (dest, tree) = (tmp.0.join(format!("dest-{tag}")), tmp.0.join("tree"));
    for d in [&home_a, &home_b, &dest] {
        std::fs::create_dir_all(d).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let capturing = {
        let stop = stop.clone();
        tb.in_host("a", move || capture(stop)).unwrap()
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut server = serve(tb, &home_b, &listen, &dest, trust);
    send(tb, &home_a, &[&tree.join("one.bin")], &listen, trust);
    send(tb, &home_a, &[&tree], &listen, trust);
    stop.store(true, Ordering::Release);
    let _ = server.kill();
    let _ = server.wait();
    let bytes = capturing.join().expect("capture thread");
    assert_eq!(std::fs::read(dest.join("tree/two.bin")).unwrap(), std::fs::read(tree.join("two.bin")).unwrap());
    bytes
}

#[test]
fn captured_traffic_carries_no_plaintext() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    let tmp = TempDir::new("capture");
    let tree = tmp.0.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let content: Vec<u8> = CANARY.iter().copied().cycle().take(1 << 20).collect();
    std::fs::write(tree.join("one.bin"), &content).unwrap();
    std::fs::write(tree.join("two.bin"), &content[..300_000]).unwrap();
    let tb = testbed("capture", &["rtt=2ms,rate=200mbit"]);

    let sealed = captured_transfers(&tb, &tmp, "--tofu", "sealed");
    assert!(sealed.len() > 2 * content.len(), "the capture saw only {} bytes", sealed.len());
    assert!(!contains(&sealed, &CANARY[..24]), "plaintext of the data crossed the wire");

    // The control: without encryption the same capture finds it.
    let bare = captured_transfers(&tb, &tmp, "--insecure-no-auth", "bare");
    assert!(contains(&bare, &CANARY[..24]), "the capture does not see payloads ({} bytes)", bare.len());
}
