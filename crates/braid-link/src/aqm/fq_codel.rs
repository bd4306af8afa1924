//! FQ-CoDel, "The Flow Queue CoDel Packet Scheduler and Active Queue
//! Management Algorithm" (Hoeiland-Joergensen, McKenney, Taht, Gettys,
//! Dumazet: RFC 8290, 2018), as Linux's `fq_codel` qdisc runs it.
//!
//! Model: packets are hashed by flow into 1024 queues (§4.1.1). The
//! queues are served by deficit round robin with a quantum of 1514 bytes
//! (§4.2: one Ethernet MTU), each queue managed by its own CoDel state
//! (`super::codel`, with the qdisc's total backlog in CoDel's
//! `maxpacket` test, as Linux passes it). A queue that becomes active
//! goes to the *new flows* list, served before the *old flows* list: a
//! flow that never builds a queue (a sparse flow: pings, ACKs, a
//! low-rate stream) is sent at once instead of waiting behind bulk
//! flows. A new flow that still has a deficit after its quantum moves to
//! the old list; an emptied queue in the new list also moves to the old
//! list once (so it cannot starve the old flows by coming back as new),
//! and one emptied in the old list leaves the lists (§4.2, the Linux
//! `fq_codel_dequeue`). When the total limit is exceeded, packets are
//! dropped from the head of the queue with the most bytes (§4.1, "drop
//! from the fattest queue"), one at a time until the total fits.
//!
//! The flow hash is the caller's flow key (the simulator hashes a
//! datagram's addresses and ports, the emulator the IP 5-tuple) mixed
//! with a per-link perturbation, as Linux perturbs its jhash.

use std::collections::VecDeque;

use braid_core::{mix64, Instant};

use super::codel::{CodelParams, CodelQueue, CodelVars};
use super::Packet;
use crate::spec::ResolvedQueue;

/// Flow queues (RFC 8290 §5.2.1 and Linux's default `flows 1024`).
pub(crate) const FLOWS: usize = 1024;
/// DRR quantum in bytes (RFC 8290 §5.2.2 and Linux's default: an
/// Ethernet MTU, 1514 bytes).
pub(crate) const QUANTUM: i64 = 1514;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    New,
    Old,
}

#[derive(Debug, Clone)]
struct Flow {
    queue: VecDeque<Packet>,
    bytes: u64,
    deficit: i64,
    vars: CodelVars,
    list: List,
}

/// The FQ-CoDel scheduler state of one link direction.
#[derive(Debug, Clone)]
pub(crate) struct FqCodel {
    flows: Vec<Flow>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    bytes: u64,
    packets: u64,
    params: CodelParams,
    max_packet: u64,
    perturbation: u64,
}

/// One flow's queue as CoDel sees it: pops update the totals, and the
/// backlog tested is the whole scheduler's.
struct FlowView<'a> {
    queue: &'a mut VecDeque<Packet>,
    flow_bytes: &'a mut u64,
    bytes: &'a mut u64,
    packets: &'a mut u64,
}

impl CodelQueue for FlowView<'_> {
    fn pop(&mut self) -> Option<Packet> {
        let p = self.queue.pop_front()?;
        *self.flow_bytes -= p.len;
        *self.bytes -= p.len;
        *self.packets -= 1;
        Some(p)
    }
    fn backlog(&self) -> u64 {
        *self.bytes
    }
}


impl FqCodel {
    pub(crate) fn new(params: CodelParams, perturbation: u64) -> FqCodel {
        let flow = Flow {
            queue: VecDeque::new(),
            bytes: 0,
            deficit: 0,
            vars: CodelVars::default(),
            list: List::None,
        };
        FqCodel {
            flows: vec![flow; FLOWS],
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            bytes: 0,
            packets: 0,
            params,
            max_packet: 0,
            perturbation,
        }
    }

    pub(crate) fn params(&self) -> CodelParams {
        self.params
    }

    pub(crate) fn set_params(&mut self, params: CodelParams) {
        self.params = params;
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn packets(&self) -> u64 {
        self.packets
    }

    /// The queue a flow key maps to.
    fn index(&self, flow: u64) -> usize {
        (mix64(flow ^ self.perturbation) % FLOWS as u64) as usize
    }

    fn over(&self, limit: ResolvedQueue) -> bool {
        match limit {
            ResolvedQueue::Bytes(max) => self.bytes > max,
            ResolvedQueue::Packets(max) => self.packets > max,
        }
    }

    /// Queue `packet`, then drop from the head of the fattest queue while
    /// the total is over `limit`; dropped packets (possibly `packet`
    /// itself) are appended to `dropped`.
    pub(crate) fn enqueue(
        &mut self,
        packet: Packet,
        limit: ResolvedQueue,
        dropped: &mut Vec<Packet>,
    ) {
        let i = self.index(packet.flow);
        let flow = &mut self.flows[i];
        flow.queue.push_back(packet);
        flow.bytes += packet.len;
        self.bytes += packet.len;
        self.packets += 1;
        if flow.list == List::None {
            flow.list = List::New;
            flow.deficit = QUANTUM;
            self.new_flows.push_back(i);
        }
        while self.over(limit) {
            let Some(fattest) =
                (0..FLOWS).max_by_key(|&j| (self.flows[j].bytes, std::cmp::Reverse(j)))
            else {
                break;
            };
            let flow = &mut self.flows[fattest];
            let Some(p) = flow.queue.pop_front() else {
                break;
            };
            flow.bytes -= p.len;
            self.bytes -= p.len;
            self.packets -= 1;
            dropped.push(p);
        }
    }

    /// The packet to send at `now`, if any; packets the flows' CoDel
    /// drops on the way are appended to `dropped`.
    pub(crate) fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Packet>) -> Option<Packet> {
        loop {
            let (from_new, i) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return None,
            };
            let list = if from_new {
                &mut self.new_flows
            } else {
                &mut self.old_flows
            };
            let flow = &mut self.flows[i];
            if flow.deficit <= 0 {
                // Used its quantum: to the back of the old flows.
                flow.deficit += QUANTUM;
                list.pop_front();
                flow.list = List::Old;
                self.old_flows.push_back(i);
                continue;
            }
            let mut view = FlowView {
                queue: &mut flow.queue,
                flow_bytes: &mut flow.bytes,
                bytes: &mut self.bytes,
                packets: &mut self.packets,
            };
            let sent =
                flow.vars
                    .dequeue(now, &self.params, &mut self.max_packet, &mut view, dropped);
            match sent {
                Some(p) => {
                    flow.deficit -= p.len as i64;
                    return Some(p);
                }
                None => {
                    list.pop_front();
                    if from_new && !self.old_flows.is_empty() {
                        // Once through the old list, so that a flow
                        // emptying and refilling cannot starve them.
                        flow.list = List::Old;
                        self.old_flows.push_back(i);
                    } else {
                        flow.list = List::None;
                    }
                }
            }
        }
    }

    /// Remove every packet, in arrival (id) order.
    pub(crate) fn take_all(&mut self) -> Vec<Packet> {
        let mut all: Vec<Packet> = self
            .flows
            .iter_mut()
            .flat_map(|f| {
                f.bytes = 0;
                f.list = List::None;
                f.queue.drain(..)
            })
            .collect();
        all.sort_by_key(|p| p.id);
        self.new_flows.clear();
        self.old_flows.clear();
        self.bytes = 0;
        self.packets = 0;
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const P: CodelParams = CodelParams {
        target: Duration::from_millis(5),
        interval: Duration::from_millis(100),
    };

    fn pkt(id: u64, flow: u64, len: u64) -> Packet {
        Packet {
            id,
            len,
            enqueued: Instant::ZERO,
            flow,
        }
    }

    #[test]
    fn drr_shares_bytes_per_quantum_and_new_flows_go_first() {
        let mut fq = FqCodel::new(P, 0);
        let mut dropped = Vec::new();
        let lim = ResolvedQueue::Packets(10_000);
        // Flow 1: 1500-byte packets; flow 2: 300-byte packets.
        for k in 0..100 {
            fq.enqueue(pkt(k, 1, 1500), lim, &mut dropped);
            fq.enqueue(pkt(1000 + k, 2, 300), lim, &mut dropped);
        }
        assert_ne!(fq.index(1), fq.index(2));
        let mut bytes = [0u64; 3];
        for _ in 0..60 {
            let p = fq.dequeue(Instant::ZERO, &mut dropped).unwrap();
            bytes[p.flow as usize] += p.len;
        }
        // Equal bytes within one quantum.
        assert!(
            bytes[1].abs_diff(bytes[2]) <= QUANTUM as u64 + 1500,
            "{bytes:?}"
        );
        // A packet of a new flow goes before the backlogged ones.
        fq.enqueue(pkt(5000, 3, 100), lim, &mut dropped);
        assert_eq!(fq.dequeue(Instant::ZERO, &mut dropped).unwrap().id, 5000);
        assert!(dropped.is_empty());
    }

    #[test]
    fn overflow_drops_from_the_fattest_queue_head() {
        let mut fq = FqCodel::new(P, 0);
        let mut dropped = Vec::new();
        let lim = ResolvedQueue::Packets(10);
        for k in 0..9 {
            fq.enqueue(pkt(k, 1, 1500), lim, &mut dropped);
        }
        fq.enqueue(pkt(100, 2, 1500), lim, &mut dropped);
        assert!(dropped.is_empty());
        fq.enqueue(pkt(101, 2, 1500), lim, &mut dropped);
        // Flow 1 is fattest: its head (id 0) goes, not the arrival.
        assert_eq!(dropped.iter().map(|p| p.id).collect::<Vec<_>>(), [0]);
        assert_eq!(fq.packets(), 10);
        assert_eq!(fq.bytes(), 15_000);
    }
}
