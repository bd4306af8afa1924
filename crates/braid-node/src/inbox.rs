//! Where received messages wait: the node's own queue and one per
//! registered virtual node (seed 000 §III-B: a message is delivered only
//! to the vnode its destination names).
//!
//! Single messages and batches wait in the same queue, in the order they
//! arrived, so that neither overtakes the other: a batch takes one place
//! in the queue, whatever number of messages it holds (its frame's size is
//! bounded by the transport's unit and `max_frame_size`).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::stats::{bump, Counters};
use crate::{Address, FailReason, Header, Received, VnodeId};

pub(crate) struct Inbox<H> {
    main: mpsc::Sender<Received<H>>,
    vnodes: Mutex<HashMap<VnodeId, mpsc::Sender<Received<H>>>>,
    capacity: usize,
}

/// Why a message could not be queued without waiting.
pub(crate) enum TryDeliver {
    Full,
    Unknown,
    Closed,
}

impl<H: Header> Inbox<H> {
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Received<H>>) {
        let (main, rx) = mpsc::channel(capacity);
        (Inbox { main, vnodes: Mutex::new(HashMap::new()), capacity }, rx)
    }

    fn vnodes(&self) -> std::sync::MutexGuard<'_, HashMap<VnodeId, mpsc::Sender<Received<H>>>> {
        self.vnodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `id`; `None` if it already is.
    pub(crate) fn register(&self, id: VnodeId) -> Option<mpsc::Receiver<Received<H>>> {
        let mut v = self.vnodes();
        if v.contains_key(&id) {
            return None;
        }
        let (tx, rx) = mpsc::channel(self.capacity);
        v.insert(id, tx);
        Some(rx)
    }

    pub(crate) fn unregister(&self, id: VnodeId) {
        self.vnodes().remove(&id);
    }

    pub(crate) fn has_vnode(&self, id: VnodeId) -> bool {
        self.vnodes().contains_key(&id)
    }

    fn queue_for(&self, msg: &Received<H>, counters: &Counters) -> Result<mpsc::Sender<Received<H>>, VnodeId> {
        match msg.destination().vnode() {
            None => Ok(self.main.clone()),
            Some(id) => self.vnodes().get(&id).cloned().ok_or_else(|| {
                bump(&counters.unknown_vnode);
                id
            }),
        }
    }

    /// Queue `msg`, waiting for room (reliable transports and local sends:
    /// a slow receiver slows the sender down instead of losing messages).
    pub(crate) async fn deliver(&self, msg: Received<H>, counters: &Counters) -> Result<(), FailReason> {
        let q = self.queue_for(&msg, counters).map_err(FailReason::UnknownVnode)?;
        q.send(msg).await.map_err(|_| FailReason::NodeClosed)
    }

    /// Queue `msgs` in order, waiting for room: [`Inbox::deliver`] for a
    /// batch, with one reservation of queue room per run of messages to
    /// the same queue instead of one per message (issue 23: the cost per
    /// message of a batch received together). Messages to an unknown vnode
    /// are dropped and counted; `Err` only if the node closed.
    pub(crate) async fn deliver_many(&self, msgs: &mut Vec<Received<H>>, counters: &Counters) -> Result<(), FailReason> {
        let mut msgs = msgs.drain(..).peekable();
        while let Some(first) = msgs.next() {
            let dest = first.destination().vnode();
            // Unknown vnode: counted by `queue_for`, dropped.
            let Ok(queue) = self.queue_for(&first, counters) else { continue };
            let mut run = vec![first];
            while run.len() < self.capacity && msgs.peek().is_some_and(|m| m.destination().vnode() == dest) {
                run.extend(msgs.next());
            }
            let permits = queue.reserve_many(run.len()).await.map_err(|_| FailReason::NodeClosed)?;
            for (permit, msg) in permits.zip(run) {
                permit.send(msg);
            }
        }
        Ok(())
    }

    /// Queue `msg` if there is room (UDP: never wait).
    pub(crate) fn try_deliver(&self, msg: Received<H>, counters: &Counters) -> Result<(), TryDeliver> {
        let q = self.queue_for(&msg, counters).map_err(|_| TryDeliver::Unknown)?;
        q.try_send(msg).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                bump(&counters.recv_queue_full);
                TryDeliver::Full
            }
            mpsc::error::TrySendError::Closed(_) => TryDeliver::Closed,
        })
    }
}
