//! Delivery notifications (seed 000 §III-A, `MessageNotify`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use crate::FailReason;

/// Where a message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Accepted by the node, waiting for its channel or its turn.
    Queued,
    /// Handed to the transport (written to the socket or to Braid's send
    /// buffer).
    Sent,
    /// The receiving host's transport acknowledged it (Braid: the peer
    /// acknowledged every byte of it; TCP: the peer's kernel acknowledged
    /// every byte, not that the application read it; Exon: delivered
    /// exactly once; in-process: put in the receiver's queue).
    Delivered,
    /// It will not arrive (or, for [`FailReason::ConnectionLost`], it is
    /// unknown whether it did).
    Failed(FailReason),
}

impl DeliveryStatus {
    fn is_terminal(&self, confirms: bool) -> bool {
        match self {
            DeliveryStatus::Queued => false,
            DeliveryStatus::Sent => !confirms,
            DeliveryStatus::Delivered | DeliveryStatus::Failed(_) => true,
        }
    }
}

/// The receiving half of a notification, returned by
/// [`crate::Node::send_notify`] (one message) and
/// [`crate::Node::send_batch_notify`] (one batch, whatever number of frames
/// it travels in).
#[derive(Debug)]
pub struct Notify {
    rx: watch::Receiver<DeliveryStatus>,
    confirms: bool,
}

impl Notify {
    /// Whether the transport can report [`DeliveryStatus::Delivered`]
    /// (Braid, Exon, TCP on Linux and in-process delivery can; UDP ends at
    /// `Sent`).
    pub fn confirms_delivery(&self) -> bool {
        self.confirms
    }

    /// The status now.
    pub fn status(&self) -> DeliveryStatus {
        self.rx.borrow().clone()
    }

    /// Wait until the message was sent (or later): `Err` if it failed
    /// first.
    pub async fn sent(&mut self) -> Result<(), FailReason> {
        let s = self
            .rx
            .wait_for(|s| !matches!(s, DeliveryStatus::Queued))
            .await
            .map(|s| s.clone())
            .unwrap_or(DeliveryStatus::Failed(FailReason::NodeClosed));
        match s {
            DeliveryStatus::Failed(r) => Err(r),
            _ => Ok(()),
        }
    }

    /// Wait for the final status: `Delivered` or `Failed`, or `Sent` where
    /// the transport cannot know more.
    pub async fn outcome(&mut self) -> DeliveryStatus {
        let confirms = self.confirms;
        self.rx
            .wait_for(|s| s.is_terminal(confirms))
            .await
            .map(|s| s.clone())
            .unwrap_or(DeliveryStatus::Failed(FailReason::NodeClosed))
    }
}

/// The sending half, carried with a message (or one frame of a batch)
/// through the node. Dropping it before a final status reports
/// `Failed(NodeClosed)`.
///
/// The transports complete it the same way in both cases (`sent`, then
/// `delivered` or `failed`): a frame of a batch sent with
/// [`crate::Node::send_batch_notify`] carries a member of a [`Group`],
/// which turns the frames' statuses into the one status of the batch.
#[derive(Debug)]
pub(crate) struct Notifier {
    to: Target,
    confirms: bool,
}

#[derive(Debug)]
enum Target {
    /// No notification wanted, or its final status was reported.
    Nobody,
    /// The one message this notifier is for.
    Alone(watch::Sender<DeliveryStatus>),
    /// One frame of a batch; `sent`: this frame was counted as sent.
    Member { group: Arc<Group>, sent: bool },
}

/// One notification for the frames of a batch, without a task or channel
/// per frame: counters of the frames not yet sent and not yet delivered,
/// and the batch's status, which only moves forward (Queued → Sent →
/// Delivered or Failed; the first failure wins and stays).
#[derive(Debug)]
struct Group {
    tx: watch::Sender<DeliveryStatus>,
    unsent: AtomicUsize,
    undelivered: AtomicUsize,
}

impl Group {
    /// Move the status to `to` if that is forward from where it is.
    fn advance(&self, to: DeliveryStatus) {
        self.tx.send_if_modified(|now| {
            let forward = matches!(
                (&*now, &to),
                (DeliveryStatus::Queued, _) | (DeliveryStatus::Sent, DeliveryStatus::Delivered | DeliveryStatus::Failed(_))
            );
            if forward {
                *now = to;
            }
            forward
        });
    }
}

impl Notifier {
    /// A pair; `confirms`: whether `Delivered` will be reported.
    pub(crate) fn pair(confirms: bool) -> (Notifier, Notify) {
        let (tx, rx) = watch::channel(DeliveryStatus::Queued);
        (Notifier { to: Target::Alone(tx), confirms }, Notify { rx, confirms })
    }

    /// One notification for `frames` frames (at least one) of a batch: a
    /// notifier per frame and the batch's [`Notify`], which reports `Sent`
    /// once every frame was sent, `Delivered` once every frame was
    /// delivered, and `Failed` as soon as one frame failed.
    pub(crate) fn group(confirms: bool, frames: usize) -> (Vec<Notifier>, Notify) {
        let (tx, rx) = watch::channel(DeliveryStatus::Queued);
        let group = Arc::new(Group { tx, unsent: AtomicUsize::new(frames), undelivered: AtomicUsize::new(frames) });
        let members =
            (0..frames).map(|_| Notifier { to: Target::Member { group: group.clone(), sent: false }, confirms }).collect();
        (members, Notify { rx, confirms })
    }

    /// No notification wanted.
    pub(crate) fn none() -> Notifier {
        Notifier { to: Target::Nobody, confirms: false }
    }

    pub(crate) fn is_wanted(&self) -> bool {
        !matches!(self.to, Target::Nobody)
    }

    fn set(&mut self, s: DeliveryStatus) {
        let terminal = s.is_terminal(self.confirms);
        match &mut self.to {
            Target::Nobody => return,
            Target::Alone(tx) => {
                let _ = tx.send(s);
            }
            Target::Member { group, sent } => {
                // A frame delivered (in-process) or failed without being
                // reported sent still counts as sent.
                if !*sent {
                    *sent = true;
                    if group.unsent.fetch_sub(1, Ordering::AcqRel) == 1 {
                        group.advance(DeliveryStatus::Sent);
                    }
                }
                match s {
                    DeliveryStatus::Delivered => {
                        if group.undelivered.fetch_sub(1, Ordering::AcqRel) == 1 {
                            group.advance(DeliveryStatus::Delivered);
                        }
                    }
                    DeliveryStatus::Failed(_) => group.advance(s),
                    DeliveryStatus::Queued | DeliveryStatus::Sent => {}
                }
            }
        }
        if terminal {
            self.to = Target::Nobody;
        }
    }

    pub(crate) fn sent(&mut self) {
        self.set(DeliveryStatus::Sent);
    }

    pub(crate) fn delivered(mut self) {
        self.set(DeliveryStatus::Delivered);
    }

    pub(crate) fn failed(mut self, reason: FailReason) {
        self.set(DeliveryStatus::Failed(reason));
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.set(DeliveryStatus::Failed(FailReason::NodeClosed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What happens to one frame of a batch.
    #[derive(Debug, Clone, Copy)]
    enum Fate {
        Delivered,
        /// Sent, then failed.
        Failed,
        /// Delivered in-process without being reported sent first.
        DeliveredUnsent,
        /// Dropped after being sent (the node closed).
        Dropped,
        /// Sent, nothing more (the transport cannot confirm, or has not yet).
        SentOnly,
    }

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            4 => Just(Fate::Delivered),
            1 => Just(Fate::Failed),
            1 => Just(Fate::DeliveredUnsent),
            1 => Just(Fate::Dropped),
            1 => Just(Fate::SentOnly),
        ]
    }

    #[test]
    fn a_batch_is_delivered_once_its_last_frame_is() {
        let (mut frames, note) = Notifier::group(true, 3);
        for f in &mut frames {
            f.sent();
        }
        assert_eq!(note.status(), DeliveryStatus::Sent);
        let last = frames.pop().unwrap();
        for f in frames {
            f.delivered();
            assert_eq!(note.status(), DeliveryStatus::Sent, "delivered before its last frame");
        }
        last.delivered();
        assert_eq!(note.status(), DeliveryStatus::Delivered);
    }

    #[test]
    fn a_batch_is_sent_once_its_last_frame_is() {
        let (mut frames, note) = Notifier::group(false, 2);
        frames[0].sent();
        assert_eq!(note.status(), DeliveryStatus::Queued);
        frames[1].sent();
        assert_eq!(note.status(), DeliveryStatus::Sent);
        // A transport that cannot confirm drops its notifiers once sent:
        // that is no failure.
        drop(frames);
        assert_eq!(note.status(), DeliveryStatus::Sent);
    }

    #[test]
    fn the_first_failure_wins() {
        let (mut frames, note) = Notifier::group(true, 3);
        let c = frames.pop().unwrap();
        let b = frames.pop().unwrap();
        let mut a = frames.pop().unwrap();
        a.sent();
        b.failed(FailReason::ConnectionLost("first".into()));
        a.delivered();
        c.failed(FailReason::Io("second".into()));
        assert_eq!(note.status(), DeliveryStatus::Failed(FailReason::ConnectionLost("first".into())));
    }

    proptest! {
        /// Whatever the frames' fates, in any order: the batch is Delivered
        /// iff every frame was, Failed with the first failure if one
        /// failed, and else Sent once every frame was sent.
        #[test]
        fn the_batch_status_follows_its_frames(fates in proptest::collection::vec(fate(), 1..12), order in any::<proptest::sample::Index>()) {
            let (frames, mut note) = Notifier::group(true, fates.len());
            let mut frames: Vec<(Fate, Notifier)> = fates.iter().copied().zip(frames).collect();
            // Report sends first, in one order, then outcomes in another.
            for (fate, f) in frames.iter_mut() {
                if !matches!(fate, Fate::DeliveredUnsent) {
                    f.sent();
                }
            }
            let k = order.index(frames.len());
            frames.rotate_left(k);
            let mut first_failure = None;
            let mut kept = Vec::new();
            for (fate, f) in frames {
                match fate {
                    Fate::Delivered | Fate::DeliveredUnsent => f.delivered(),
                    Fate::Failed => {
                        first_failure.get_or_insert(FailReason::Io("frame".into()));
                        f.failed(FailReason::Io("frame".into()));
                    }
                    Fate::Dropped => {
                        first_failure.get_or_insert(FailReason::NodeClosed);
                        drop(f);
                    }
                    Fate::SentOnly => kept.push(f),
                }
            }
            let want = if let Some(r) = first_failure {
                DeliveryStatus::Failed(r)
            } else if kept.is_empty() {
                DeliveryStatus::Delivered
            } else {
                DeliveryStatus::Sent
            };
            prop_assert_eq!(note.status(), want.clone());
            // Frames still in flight when the node closes fail the batch,
            // unless it already ended.
            drop(kept);
            let end = block_on(note.outcome());
            match want {
                DeliveryStatus::Sent => prop_assert_eq!(end, DeliveryStatus::Failed(FailReason::NodeClosed)),
                w => prop_assert_eq!(end, w),
            }
        }
    }

    /// Poll a future that is ready (the status is final here).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(f)
    }
}
