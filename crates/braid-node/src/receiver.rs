//! The receiving end of a queue of the inbox (the node's own, or a virtual
//! node's): single messages and batches in arrival order, handed out in
//! the form the application asks for. A batch taken by `recv` or
//! `recv_many` is split lazily (what was not taken waits here, ahead of
//! the queue), a message taken by `recv_batch` becomes a batch of one: the
//! order of arrival holds whatever mix of calls reads the queue.

use tokio::sync::{mpsc, watch};

use crate::{Header, Message, MessageBatch};

/// What a transport delivered: one message or a batch
/// ([`crate::decode_frame`] decodes a frame into one).
#[derive(Debug)]
pub enum Received<H> {
    /// A message sent alone.
    Message(Message<H>),
    /// A batch ([`crate::Node::send_batch`]).
    Batch(MessageBatch<H>),
}

impl<H: Header> Received<H> {
    /// Where it goes.
    pub fn destination(&self) -> &H::Addr {
        match self {
            Received::Message(m) => m.header().destination(),
            Received::Batch(b) => b.header().destination(),
        }
    }

    /// The header.
    pub fn header(&self) -> &H {
        match self {
            Received::Message(m) => m.header(),
            Received::Batch(b) => b.header(),
        }
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        match self {
            Received::Message(_) => 1,
            Received::Batch(b) => b.len(),
        }
    }

    /// Whether it holds no message (an empty batch; never received).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A queue's receiving end, with what is left of a batch partly taken.
pub(crate) struct Receiver<H> {
    rx: mpsc::Receiver<Received<H>>,
    /// The rest of a batch `recv`/`recv_many` took messages from; never
    /// empty.
    partial: Option<MessageBatch<H>>,
}

impl<H: Header> Receiver<H> {
    pub(crate) fn new(rx: mpsc::Receiver<Received<H>>) -> Self {
        Receiver { rx, partial: None }
    }

    /// The next item, waiting for one; `None` once the node is shutting
    /// down and the queue is empty.
    async fn next(&mut self, shutdown: &mut watch::Receiver<bool>) -> Option<Received<H>> {
        if let Some(b) = self.partial.take() {
            return Some(Received::Batch(b));
        }
        tokio::select! {
            biased;
            m = self.rx.recv() => m,
            _ = crate::node::stopped(shutdown) => self.rx.try_recv().ok(),
        }
    }

    /// The next item if one is there.
    fn try_next(&mut self) -> Option<Received<H>> {
        match self.partial.take() {
            Some(b) => Some(Received::Batch(b)),
            None => self.rx.try_recv().ok(),
        }
    }

    /// Keep what is left of `batch` for the next call.
    fn keep(&mut self, batch: MessageBatch<H>) {
        if !batch.is_empty() {
            self.partial = Some(batch);
        }
    }

    /// The next message.
    pub(crate) async fn recv(&mut self, shutdown: &mut watch::Receiver<bool>) -> Option<Message<H>> {
        loop {
            match self.next(shutdown).await? {
                Received::Message(m) => return Some(m),
                Received::Batch(mut b) => {
                    let m = b.pop_front();
                    self.keep(b);
                    if m.is_some() {
                        return m;
                    }
                }
            }
        }
    }

    /// Wait for a message, then append it and whatever else is queued, up
    /// to `max` in all; how many.
    pub(crate) async fn recv_many(&mut self, shutdown: &mut watch::Receiver<bool>, out: &mut Vec<Message<H>>, max: usize) -> usize {
        if max == 0 {
            return 0;
        }
        let Some(first) = self.next(shutdown).await else { return 0 };
        let mut n = 0;
        let mut item = Some(first);
        while let Some(it) = item.take() {
            match it {
                Received::Message(m) => {
                    out.push(m);
                    n += 1;
                }
                Received::Batch(mut b) => {
                    while n < max {
                        match b.pop_front() {
                            Some(m) => {
                                out.push(m);
                                n += 1;
                            }
                            None => break,
                        }
                    }
                    self.keep(b);
                }
            }
            if n < max {
                item = self.try_next();
            }
        }
        n
    }

    /// The next batch: a batch as it arrived (or what is left of one), a
    /// message sent alone as a batch of one. A typed message that never
    /// left this host is encoded for it; one that cannot be is skipped
    /// and counted in `messages_failed` (postcard refused the value).
    pub(crate) async fn recv_batch(&mut self, shutdown: &mut watch::Receiver<bool>, counters: &crate::stats::Counters) -> Option<MessageBatch<H>> {
        loop {
            match self.next(shutdown).await? {
                Received::Batch(b) if !b.is_empty() => return Some(b),
                Received::Batch(_) => {}
                Received::Message(m) => match MessageBatch::of_message(m) {
                    Ok(b) => return Some(b),
                    Err(e) => {
                        crate::stats::bump(&counters.messages_failed);
                        tracing::debug!(error = %e, "a received message could not be made a batch: skipped");
                    }
                },
            }
        }
    }
}
