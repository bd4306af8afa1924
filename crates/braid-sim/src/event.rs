//! The event queue: a min-heap ordered by (time, sequence number), so events
//! at the same instant run in the order they were scheduled and a run is a
//! pure function of its inputs.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::net::SocketAddr;

use braid_core::Instant;
use bytes::Bytes;

use crate::NodeId;

/// What happens when an event fires.
#[derive(Debug)]
pub(crate) enum EventKind {
    /// A datagram reaches the host owning `dst`'s address.
    Arrival {
        src: SocketAddr,
        dst: SocketAddr,
        payload: Bytes,
    },
    /// A node's timer, valid only if `generation` is still the node's
    /// current timer generation (a later `poll_timeout` supersedes it).
    Timer { node: NodeId, generation: u64 },
    /// A link's queue has something to decide (a CoDel or FQ-CoDel
    /// dequeue): poll it.
    LinkWake { link: usize },
}

#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) time: Instant,
    seq: u64,
    pub(crate) kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

/// Pending events, earliest first.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Reverse<Event>>,
    next_seq: u64,
}

impl EventQueue {
    pub(crate) fn push(&mut self, time: Instant, kind: EventKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Event { time, seq, kind }));
    }

    pub(crate) fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.0.time)
    }

    pub(crate) fn pop(&mut self) -> Option<Event> {
        self.heap.pop().map(|e| e.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::default();
        let timer = |g| EventKind::Timer {
            node: NodeId(0),
            generation: g,
        };
        q.push(Instant::from_nanos(5), timer(0));
        q.push(Instant::from_nanos(3), timer(1));
        q.push(Instant::from_nanos(5), timer(2));
        q.push(Instant::from_nanos(3), timer(3));
        let order: Vec<u64> = std::iter::from_fn(|| q.pop())
            .map(|e| match e.kind {
                EventKind::Timer { generation, .. } => generation,
                EventKind::Arrival { .. } | EventKind::LinkWake { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(order, [1, 3, 0, 2]);
    }
}
