//! Delivery notifications (seed 000 §III-A, `MessageNotify`).

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
/// [`crate::Node::send_notify`].
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

/// The sending half, carried with a message through the node. Dropping it
/// before a final status reports `Failed(NodeClosed)`.
#[derive(Debug)]
pub(crate) struct Notifier {
    tx: Option<watch::Sender<DeliveryStatus>>,
    confirms: bool,
}

impl Notifier {
    /// A pair; `confirms`: whether `Delivered` will be reported.
    pub(crate) fn pair(confirms: bool) -> (Notifier, Notify) {
        let (tx, rx) = watch::channel(DeliveryStatus::Queued);
        (Notifier { tx: Some(tx), confirms }, Notify { rx, confirms })
    }

    /// No notification wanted.
    pub(crate) fn none() -> Notifier {
        Notifier { tx: None, confirms: false }
    }

    pub(crate) fn is_wanted(&self) -> bool {
        self.tx.is_some()
    }

    fn set(&mut self, s: DeliveryStatus) {
        if let Some(tx) = &self.tx {
            let terminal = s.is_terminal(self.confirms);
            let _ = tx.send(s);
            if terminal {
                self.tx = None;
            }
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
