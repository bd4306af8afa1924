//! The transfer engine over TLS 1.3 (`braid_transfer::tls`): a tree sent with
//! `send` and taken by `receive_one` between two identities that list each
//! other in known hosts arrives identical; a receiver whose key the sender
//! does not trust is refused, and the error names the key.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
use braid_tls::TlsSettings;
use braid_transfer::tls::{TlsAcceptor, TlsConnector};
use braid_transfer::{receive_one, send, ReceiveOptions, SendOptions, TransferError};
use rand::{Rng, SeedableRng};

fn settings(me: &Identity, known_hosts: &str) -> TlsSettings {
    let hosts = KnownHosts::parse(known_hosts, "test").unwrap();
    TlsSettings::new(me, Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts))).unwrap()
}

/// Nested directories, a multi-chunk file, small files, an empty file, a symlink, modes.
fn build_tree(root: &Path) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    fs::create_dir_all(root.join("a/b")).unwrap();
    let mut big = vec![0u8; 2_500_000 + 17];
    rng.fill(&mut big[..]);
    fs::write(root.join("a/b/big.bin"), &big).unwrap();
    for i in 0..200 {
        let mut small = vec![0u8; rng.random_range(1..3000)];
        rng.fill(&mut small[..]);
        fs::write(root.join(format!("a/s{i:03}")), small).unwrap();
    }
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("run.sh"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink("a/b/big.bin", root.join("link")).unwrap();
}

/// Relative path -> (kind, content hash or link target, mode).
fn snapshot(root: &Path) -> BTreeMap<String, (char, String, u32)> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, (char, String, u32)>) {
        for child in fs::read_dir(dir).unwrap() {
            let path = child.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                out.insert(rel, ('l', fs::read_link(&path).unwrap().to_string_lossy().into_owned(), 0));
            } else if meta.is_dir() {
                out.insert(rel, ('d', String::new(), mode));
                walk(base, &path, out);
            } else {
                out.insert(rel, ('f', blake3::hash(&fs::read(&path).unwrap()).to_string(), mode));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn send_options() -> SendOptions {
    SendOptions {
        chunk_size: 1 << 20,
        staging_memory: Some(8 << 20),
        probe_interval: Duration::from_millis(200),
        ..SendOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_arrives_identical_over_mutual_tls() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("src/tree");
    build_tree(&source);
    let dest = tmp.path().join("dest");
    let (sender, receiver) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
    // The receiver knows senders by IP (their ports are ephemeral); the sender knows the receiver's address.
    let acceptor =
        TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), settings(&receiver, &format!("127.0.0.1 {}", sender.public_key())))
            .await
            .unwrap();
    let addr = acceptor.local_addr().unwrap();
    let options = ReceiveOptions { staging_memory: Some(4 << 20), ..ReceiveOptions::new(&dest) };
    let receiving = tokio::spawn(async move {
        let summary = receive_one(&acceptor, &options).await;
        (summary, acceptor.refusals())
    });
    let connector = TlsConnector::new(addr, settings(&sender, &format!("{addr} {}", receiver.public_key())));
    let proven = connector.proven();
    assert_eq!(proven.get(), None);
    let sent = send(&[&source], Arc::new(connector), send_options()).await.unwrap();
    let proof = proven.get().expect("the receiver proved its key");
    assert_eq!(proof.key, receiver.public_key());
    assert!(proof.cipher.is_some_and(|c| c.starts_with("TLS13_")), "{proof:?}");
    let (received, refusals) = tokio::time::timeout(Duration::from_secs(60), receiving).await.unwrap().unwrap();
    let received = received.unwrap();
    assert_eq!(refusals, 0);
    assert_eq!(received.bytes_written, sent.bytes_sent);
    assert_eq!(sent.files, 200 + 3);
    assert_eq!(snapshot(&source), snapshot(&dest.join("tree")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_receiver_is_refused_and_its_key_named() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("src/tree");
    build_tree(&source);
    let dest = tmp.path().join("dest");
    let (sender, receiver, expected) =
        (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]), Identity::from_seed(&[3; 32]));
    let acceptor = TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), settings(&receiver, &format!("* {}", sender.public_key())))
        .await
        .unwrap();
    let addr = acceptor.local_addr().unwrap();
    let options = ReceiveOptions::new(&dest);
    let receiving = tokio::spawn(async move { receive_one(&acceptor, &options).await });
    // The sender expects another key at this address: the receiver is an impostor to it.
    let connector = TlsConnector::new(addr, settings(&sender, &format!("{addr} {}", expected.public_key())));
    let err = send(&[&source], Arc::new(connector), send_options()).await.unwrap_err();
    assert!(matches!(err, TransferError::Connect(_)), "{err}");
    let message = err.to_string();
    assert!(message.contains(&receiver.public_key().to_string()), "{message}");
    assert!(message.contains("KEY CHANGED"), "{message}");
    // Nothing was written at the destination.
    assert!(!dest.join("tree").exists());
    receiving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_refuses_an_untrusted_sender_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("src/tree");
    build_tree(&source);
    let dest = tmp.path().join("dest");
    let (sender, receiver, other) =
        (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]), Identity::from_seed(&[3; 32]));
    // The receiver trusts someone else; the sender trusts the receiver.
    let acceptor = Arc::new(
        TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), settings(&receiver, &format!("* {}", other.public_key())))
            .await
            .unwrap(),
    );
    let addr = acceptor.local_addr().unwrap();
    let serving = Arc::clone(&acceptor);
    let options = ReceiveOptions::new(&dest);
    let receiving = tokio::spawn(async move { receive_one(&*serving, &options).await });
    let connector = TlsConnector::new(addr, settings(&sender, &format!("{addr} {}", receiver.public_key())));
    let err = send(&[&source], Arc::new(connector), send_options()).await.unwrap_err();
    assert!(err.to_string().contains("refused the handshake"), "{err}");
    // The receiver kept serving and recorded whom it refused.
    assert!(acceptor.refusals() >= 1);
    let recent = acceptor.recent_refusals();
    assert!(recent.iter().any(|m| m.contains(&sender.public_key().to_string())), "{recent:?}");
    assert!(!receiving.is_finished());
    assert!(!dest.join("tree").exists());
    receiving.abort();
}

/// The cost of TLS for the report (`cargo test --release -p braid-transfer --test tls
/// tls_and_tcp_throughput -- --ignored --nocapture`): one 512 MiB file over loopback, plain TCP
/// and TLS 1.3 in the same run, tmpfs on both sides when /dev/shm exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn tls_and_tcp_throughput() {
    use braid_transfer::transport::{TcpAcceptor, TcpConnector};
    let base = if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { Path::new("/tmp") };
    let tmp = tempfile::tempdir_in(base).unwrap();
    let source = tmp.path().join("large");
    fs::create_dir_all(&source).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut data = vec![0u8; 512 << 20];
    rng.fill(&mut data[..]);
    fs::write(source.join("file.bin"), &data).unwrap();
    drop(data);
    let (sender, receiver) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
    let mut rates = Vec::new();
    for round in 0..2 {
        for tls in [false, true] {
            let dest = tmp.path().join(format!("dest-{round}-{tls}"));
            let options = ReceiveOptions { fsync: false, ..ReceiveOptions::new(&dest) };
            let opts = SendOptions { probe_interval: Duration::from_millis(500), ..SendOptions::default() };
            let summary = if tls {
                let acceptor = TlsAcceptor::bind(
                    "127.0.0.1:0".parse().unwrap(),
                    settings(&receiver, &format!("* {}", sender.public_key())),
                )
                .await
                .unwrap();
                let addr = acceptor.local_addr().unwrap();
                let receiving = tokio::spawn(async move { receive_one(&acceptor, &options).await });
                let connector = TlsConnector::new(addr, settings(&sender, &format!("* {}", receiver.public_key())));
                let summary = send(&[&source], Arc::new(connector), opts).await.unwrap();
                receiving.await.unwrap().unwrap();
                summary
            } else {
                let acceptor = TcpAcceptor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
                let addr = acceptor.local_addr().unwrap();
                let receiving = tokio::spawn(async move { receive_one(&acceptor, &options).await });
                let summary = send(&[&source], Arc::new(TcpConnector::new(addr)), opts).await.unwrap();
                receiving.await.unwrap().unwrap();
                summary
            };
            let gb = summary.bytes_sent as f64 / 1e9;
            eprintln!(
                "round {round} {}: {:.0} MB/s, {:.2} s, CPU {:.2} s/GB (both ends)",
                if tls { "TLS 1.3" } else { "plain TCP" },
                summary.throughput_bps / 1e6,
                summary.seconds,
                summary.cpu_seconds / gb
            );
            rates.push((tls, summary.throughput_bps));
            fs::remove_dir_all(&dest).unwrap();
        }
    }
    let mean = |tls: bool| {
        let v: Vec<f64> = rates.iter().filter(|r| r.0 == tls).map(|r| r.1).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    eprintln!("TLS / plain TCP throughput: {:.2}", mean(true) / mean(false));
}
