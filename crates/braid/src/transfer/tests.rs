use super::*;
use bytes::Bytes;
use proptest::prelude::*;
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

type Pipe = FramedStream<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

fn pipe(capacity: usize) -> (Pipe, Pipe) {
    let (a, b) = tokio::io::duplex(capacity);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (FramedStream::new(ar, aw), FramedStream::new(br, bw))
}

/// Flips one bit of the `n`th message it sends: a corrupting path.
struct Tamper {
    inner: Pipe,
    n: usize,
    count: usize,
}

impl MessageIo for Tamper {
    async fn send(&mut self, msg: Bytes) -> Result<(), IoError> {
        self.count += 1;
        let msg = if self.count == self.n {
            let mut v = msg.to_vec();
            v[0] ^= 1;
            Bytes::from(v)
        } else {
            msg
        };
        self.inner.send(msg).await
    }
    async fn flush(&mut self) -> Result<(), IoError> {
        self.inner.flush().await
    }
    async fn recv(&mut self) -> Result<Option<Bytes>, IoError> {
        self.inner.recv().await
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("braid-transfer-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn generated_data_is_verified_and_not_saved() {
    let (mut a, mut b) = pipe(64 << 10);
    let dir = temp_dir("gen");
    let size = 3 * CHUNK_SIZE as u64 + 11;
    let sender = tokio::spawn(async move {
        let mut last = 0;
        let r = send(&mut a, Some("gen".into()), Source::generated(size, 1), &mut |d| last = d).await;
        (r, last)
    });
    let mut seen = 0;
    let got = receive(&mut b, Some(&dir), &mut |o, d| {
        assert_eq!(o.size, size);
        seen = d;
    })
    .await
    .unwrap();
    let (sent, last) = sender.await.unwrap();
    let sent = sent.unwrap();
    assert!(got.ok && sent.ok(), "{got:?} {sent:?}");
    assert_eq!((got.bytes, sent.bytes, seen, last), (size, size, size, size));
    assert_eq!(got.sha256, sent.sha256);
    assert_eq!(got.saved, None);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_corrupted_chunk_is_a_mismatch_on_both_sides() {
    let dir = temp_dir("tamper");
    let src = dir.join("in.bin");
    std::fs::write(&src, vec![7u8; 2 * CHUNK_SIZE]).unwrap();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    let (a, mut b) = pipe(64 << 10);
    // Message 1 is the offer, 2 and 3 the data.
    let mut a = Tamper { inner: a, n: 3, count: 0 };
    let source = Source::file(&src).await.unwrap();
    let sender = tokio::spawn(async move { send(&mut a, Some("in.bin".into()), source, &mut |_| {}).await });
    let got = receive(&mut b, Some(&out), &mut |_, _| {}).await.unwrap();
    let sent = sender.await.unwrap().unwrap();
    assert!(!got.ok && !sent.ok());
    assert!(got.error.as_deref().unwrap().contains("SHA-256 mismatch"));
    assert_eq!(sent.verdict.error, got.error);
    assert_eq!(got.saved, None);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "partial file left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_sender_that_stops_early_is_an_error_and_leaves_no_file() {
    let dir = temp_dir("early");
    let (mut a, mut b) = pipe(64 << 10);
    let offer = Offer { name: Some("x".into()), size: 1000, content: Content::File };
    a.send(Control::Offer(offer).encode()).await.unwrap();
    a.send(Bytes::from_static(&[1; 400])).await.unwrap();
    a.shutdown().await.unwrap();
    let r = receive(&mut b, Some(&dir), &mut |_, _| {}).await;
    assert!(matches!(r, Err(TransferError::Closed)), "{r:?}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn excess_data_and_garbage_are_protocol_errors() {
    let (mut a, mut b) = pipe(64 << 10);
    let offer = Offer { name: None, size: 10, content: Content::Generated };
    a.send(Control::Offer(offer).encode()).await.unwrap();
    a.send(Bytes::from_static(&[0; 11])).await.unwrap();
    a.flush().await.unwrap();
    assert!(matches!(receive(&mut b, None, &mut |_, _| {}).await, Err(TransferError::Protocol(_))));

    let (mut a, mut b) = pipe(1024);
    a.send(Bytes::from_static(b"GET / HTTP/1.1")).await.unwrap();
    a.flush().await.unwrap();
    assert!(matches!(receive(&mut b, None, &mut |_, _| {}).await, Err(TransferError::Wire(WireError::NotControl))));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn files_arrive_byte_exact(content in proptest::collection::vec(any::<u8>(), 0..(3 * CHUNK_SIZE)),
                               capacity in 1usize..100_000, name in "[a-z./]{0,12}") {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = temp_dir("prop");
        let src = dir.join("src.bin");
        std::fs::write(&src, &content).unwrap();
        let out = dir.join("out");
        std::fs::create_dir(&out).unwrap();
        let (got, sent) = rt.block_on(async {
            let (mut a, mut b) = pipe(capacity);
            let source = Source::file(&src).await.unwrap();
            let sender = tokio::spawn(async move { send(&mut a, Some(name), source, &mut |_| {}).await });
            let got = receive(&mut b, Some(&out), &mut |_, _| {}).await.unwrap();
            (got, sender.await.unwrap().unwrap())
        });
        prop_assert!(got.ok && sent.ok());
        let saved = got.saved.unwrap();
        prop_assert_eq!(saved.parent(), Some(out.as_path()));
        prop_assert_eq!(std::fs::read(&saved).unwrap(), content);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
