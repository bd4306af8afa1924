//! The forwarder: one thread that owns every TUN device of a testbed and
//! moves packets between them through the link model.
//!
//! Why one thread: a packet's whole life (read, [`Link::enqueue`], wait,
//! write) touches only this thread's memory, so there are no locks, no
//! channels and no cross-core hand-offs per packet; a multi-threaded design
//! with channels measured much slower on 2 cores. The loop is
//!
//! 1. poll every link whose queue has a decision due (a CoDel or FQ-CoDel
//!    dequeue, [`Link::next_event`]) and schedule what it delivers;
//! 2. deliver every packet whose arrival time has come (a heap keyed by
//!    (time, sequence number), so equal times keep their order);
//! 3. sleep in `ppoll` until the next arrival or link decision, a readable
//!    TUN device or a control message;
//! 4. read each readable device until it is empty (bounded per round so
//!    one busy direction cannot starve the others), queue each packet in
//!    its direction's [`Link`] under its flow (a hash of the IP 5-tuple,
//!    [`flow_key`], which FQ-CoDel's flow queues use) and schedule the
//!    packets whose fate is decided.
//!
//! Packets live in a pool of fixed-size slots that grows to a bound and is
//! reused, so the steady state allocates nothing per packet.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use braid_core::Instant;
use braid_link::{Link, LinkParams, LinkStats, Outcome};
use serde::{Deserialize, Serialize};

use crate::sys::{self, EventFd, NetNs};
use crate::EmuError;

/// Packets read from one device before the loop looks at the others and at
/// due deliveries again.
const READ_BATCH: usize = 64;

/// Upper bound on buffered packets (queued in links or in flight), so a
/// huge delay × rate cannot exhaust memory: 256 Ki slots of 2 KiB = 512 MiB
/// at most, far above any spec in the source evaluations (1 Gbit/s × 350 ms
/// ≈ 30 Ki packets per direction).
const MAX_SLOTS: usize = 256 * 1024;

/// A TUN device to open: in which namespace, under which name, and the
/// port index the forwarder knows it by.
#[derive(Debug, Clone)]
pub(crate) struct TunSpec {
    pub netns: String,
    pub ifname: String,
}

/// Counters of the forwarder itself (the links count their own drops).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwarderStats {
    /// Packets read from the TUN devices.
    pub packets_read: u64,
    /// Packets written to the TUN devices (duplicates included).
    pub packets_written: u64,
    /// Packets dropped because every buffer slot was in use.
    pub dropped_no_buffer: u64,
    /// Writes to a TUN device that failed (the packet is lost).
    pub write_errors: u64,
    /// Packets buffered right now (queued or in flight).
    pub buffered: u64,
    /// Most packets buffered at once.
    pub max_buffered: u64,
}

/// Counters of one path: each direction's link, as in the simulator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathStats {
    /// The path id.
    pub id: usize,
    /// Host `a` to host `b` (the path's first host to its second).
    pub a2b: LinkStats,
    /// Host `b` to host `a`.
    pub b2a: LinkStats,
}

/// A snapshot of the forwarder's counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    /// Per path.
    pub paths: Vec<PathStats>,
    /// The forwarder itself.
    pub forwarder: ForwarderStats,
}

pub(crate) enum Control {
    /// New parameters for a path's two directions.
    Set {
        path: usize,
        params: Box<(LinkParams, LinkParams)>,
        done: SyncSender<()>,
    },
    Stats(SyncSender<Stats>),
    Stop,
}

/// The running forwarder thread, as seen from the testbed.
pub(crate) struct ForwarderHandle {
    control: Sender<Control>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl ForwarderHandle {
    /// Start a forwarder for paths whose ends are `tuns[2p]` (first host)
    /// and `tuns[2p + 1]` (second host), with `links[p]` = (a2b, b2a).
    /// Returns once every device is open (or opening one failed).
    pub(crate) fn start(
        tuns: Vec<TunSpec>,
        links: Vec<(LinkParams, LinkParams)>,
        seed: u64,
        slot_size: usize,
    ) -> Result<ForwarderHandle, EmuError> {
        let wake = Arc::new(EventFd::new().map_err(|e| EmuError::io("eventfd", e))?);
        let (control, control_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let thread_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("braid-emu-forwarder".into())
            .spawn(move || {
                let fds = match open_devices(&tuns) {
                    Ok(fds) => fds,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut fwd = Forwarder::new(fds, &links, seed, slot_size, control_rx, thread_wake);
                let _ = ready_tx.send(Ok(()));
                fwd.run();
            })
            .map_err(|e| EmuError::io("spawning the forwarder thread", e))?;
        let handle = ForwarderHandle {
            control,
            wake,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(EmuError::ForwarderGone),
        }
    }

    fn send(&self, c: Control) -> Result<(), EmuError> {
        self.control.send(c).map_err(|_| EmuError::ForwarderGone)?;
        self.wake.notify();
        Ok(())
    }

    /// Change path `path`; returns once packets arriving from now on see
    /// the new parameters.
    pub(crate) fn set(
        &self,
        path: usize,
        a2b: LinkParams,
        b2a: LinkParams,
    ) -> Result<(), EmuError> {
        let (done, rx) = mpsc::sync_channel(1);
        self.send(Control::Set {
            path,
            params: Box::new((a2b, b2a)),
            done,
        })?;
        rx.recv().map_err(|_| EmuError::ForwarderGone)
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> Result<Stats, EmuError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Control::Stats(tx))?;
        rx.recv().map_err(|_| EmuError::ForwarderGone)
    }

    /// Whether the thread is still running.
    pub(crate) fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stop the thread (closing the devices) and wait for it.
    pub(crate) fn stop(&mut self) {
        let _ = self.send(Control::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ForwarderHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Enter each device's namespace in turn, open the device there with IPv6
/// off (no router solicitations or other stray traffic through the model),
/// and come back. The descriptors keep working from any namespace.
fn open_devices(tuns: &[TunSpec]) -> Result<Vec<OwnedFd>, EmuError> {
    let home =
        NetNs::current().map_err(|e| EmuError::io("opening this thread's network namespace", e))?;
    let result = (|| {
        let mut fds = Vec::with_capacity(tuns.len());
        for t in tuns {
            let ns = NetNs::named(&t.netns)
                .map_err(|e| EmuError::io(format!("opening namespace {}", t.netns), e))?;
            ns.enter()
                .map_err(|e| EmuError::io(format!("entering namespace {}", t.netns), e))?;
            let fd = sys::open_tun(&t.ifname).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => EmuError::NoTun(e),
                _ => EmuError::io(
                    format!("creating TUN device {} in {}", t.ifname, t.netns),
                    e,
                ),
            })?;
            // /proc/sys/net shows the namespace of the thread that opens it.
            let knob = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", t.ifname);
            if std::path::Path::new(&knob).exists() {
                std::fs::write(&knob, "1")
                    .map_err(|e| EmuError::io(format!("writing {knob}"), e))?;
            }
            fds.push(fd);
        }
        Ok(fds)
    })();
    home.enter()
        .map_err(|e| EmuError::io("returning to the original network namespace", e))?;
    result
}

/// A scheduled delivery: `slot` holds `len` bytes for port `out` at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: u64,
    seq: u64,
    slot: u32,
    len: u32,
    out: u32,
}

/// Fixed-size packet buffers, reused through a free list.
struct Pool {
    mem: Vec<u8>,
    slot_size: usize,
    free: Vec<u32>,
    slots: usize,
}

impl Pool {
    fn new(slot_size: usize) -> Pool {
        Pool {
            mem: Vec::new(),
            slot_size,
            free: Vec::new(),
            slots: 0,
        }
    }

    fn get(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if self.slots >= MAX_SLOTS {
            return None;
        }
        // Grow by a chunk at a time so growth is rare.
        let grow = self.slots.clamp(256, 8192).min(MAX_SLOTS - self.slots);
        self.mem.resize((self.slots + grow) * self.slot_size, 0);
        self.free
            .extend((self.slots as u32 + 1..(self.slots + grow) as u32).rev());
        let s = self.slots as u32;
        self.slots += grow;
        Some(s)
    }

    fn put(&mut self, s: u32) {
        self.free.push(s);
    }

    fn buf(&mut self, s: u32) -> &mut [u8] {
        let start = s as usize * self.slot_size;
        &mut self.mem[start..start + self.slot_size]
    }

    fn in_use(&self) -> u64 {
        (self.slots - self.free.len()) as u64
    }
}

/// Maps the monotonic clock to [`braid_core::Instant`], with the epoch at
/// the forwarder's start (so `at=10s` in a schedule means 10 s after it).
struct Clock(std::time::Instant);

impl Clock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

struct Forwarder {
    fds: Vec<OwnedFd>,
    /// One link per port: packets read from port `i` go through `links[i]`
    /// and out of port `i ^ 1` (the other end of the same path).
    links: Vec<Link>,
    /// Per link: packets it holds (its id → buffer slot and length) until
    /// their fate is decided.
    held: Vec<HashMap<u64, (u32, usize)>>,
    pool: Pool,
    heap: BinaryHeap<Reverse<Due>>,
    seq: u64,
    clock: Clock,
    control: Receiver<Control>,
    wake: Arc<EventFd>,
    stats: ForwarderStats,
    scratch: Vec<u8>,
}

/// A per-direction seed derived from the testbed seed (splitmix64), so
/// directions draw independent random sequences.
fn direction_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(index + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Forwarder {
    fn new(
        fds: Vec<OwnedFd>,
        links: &[(LinkParams, LinkParams)],
        seed: u64,
        slot_size: usize,
        control: Receiver<Control>,
        wake: Arc<EventFd>,
    ) -> Forwarder {
        let links: Vec<Link> = links
            .iter()
            .flat_map(|(a2b, b2a)| [a2b.clone(), b2a.clone()])
            .enumerate()
            .map(|(i, p)| Link::new(p, direction_seed(seed, i as u64)))
            .collect();
        Forwarder {
            fds,
            held: vec![HashMap::new(); links.len()],
            links,
            pool: Pool::new(slot_size),
            heap: BinaryHeap::new(),
            seq: 0,
            clock: Clock(std::time::Instant::now()),
            control,
            wake,
            stats: ForwarderStats::default(),
            scratch: vec![0; slot_size],
        }
    }

    fn run(&mut self) {
        sys::set_timer_slack(Duration::from_nanos(1));
        if !sys::set_thread_realtime(10) {
            sys::set_thread_nice(-10);
        }
        let mut pfds: Vec<libc::pollfd> = std::iter::once(sys::pollin(self.wake.raw()))
            .chain(self.fds.iter().map(|f| sys::pollin(f.as_raw_fd())))
            .collect();
        loop {
            let now = self.clock.now();
            for port in 0..self.links.len() {
                if self.links[port]
                    .next_event()
                    .is_some_and(|t| t.as_nanos() <= now)
                {
                    self.drain_link(port, now);
                }
            }
            self.deliver_due(now);
            let next_link = self
                .links
                .iter()
                .filter_map(|l| l.next_event().map(|t| t.as_nanos()))
                .min();
            let next = self.heap.peek().map(|Reverse(d)| d.at);
            let timeout = [next, next_link]
                .into_iter()
                .flatten()
                .min()
                .map(|at| Duration::from_nanos(at.saturating_sub(self.clock.now())));
            if let Err(e) = sys::ppoll(&mut pfds, timeout) {
                eprintln!("braid-emu forwarder: poll failed: {e}");
                return;
            }
            if pfds[0].revents != 0 {
                self.wake.drain();
                if !self.handle_control() {
                    return;
                }
            }
            for port in 0..self.fds.len() {
                let pfd = &mut pfds[port + 1];
                if pfd.revents & libc::POLLIN != 0 {
                    if let Err(e) = self.read_port(port) {
                        // The device is gone (its namespace was deleted under
                        // us): stop polling it rather than spin.
                        eprintln!("braid-emu forwarder: reading port {port}: {e}; ignoring it from now on");
                        pfd.fd = -1;
                    }
                } else if pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                    pfd.fd = -1;
                }
            }
        }
    }

    /// Apply queued control messages; false when told to stop.
    fn handle_control(&mut self) -> bool {
        loop {
            match self.control.try_recv() {
                Ok(Control::Set { path, params, done }) => {
                    let (a2b, b2a) = *params;
                    let now = Instant::from_nanos(self.clock.now());
                    for (port, params) in [(2 * path, a2b), (2 * path + 1, b2a)] {
                        if let Some(l) = self.links.get_mut(port) {
                            l.set_params_at(now, params);
                            // A new discipline may decide at once what the
                            // old one held.
                            self.drain_link(port, now.as_nanos());
                        }
                    }
                    let _ = done.send(());
                }
                Ok(Control::Stats(reply)) => {
                    let mut forwarder = self.stats;
                    forwarder.buffered = self.pool.in_use();
                    let paths = self
                        .links
                        .chunks(2)
                        .enumerate()
                        .map(|(id, l)| PathStats {
                            id,
                            a2b: *l[0].stats(),
                            b2a: *l[1].stats(),
                        })
                        .collect();
                    let _ = reply.send(Stats { paths, forwarder });
                }
                Ok(Control::Stop) | Err(mpsc::TryRecvError::Disconnected) => return false,
                Err(mpsc::TryRecvError::Empty) => return true,
            }
        }
    }

    /// Read up to [`READ_BATCH`] packets from `port` and schedule them.
    fn read_port(&mut self, port: usize) -> io::Result<()> {
        let fd = self.fds[port].as_raw_fd();
        for _ in 0..READ_BATCH {
            let Some(slot) = self.pool.get() else {
                // Out of buffers: still drain the device so it does not
                // stall, counting the loss.
                match sys::read(fd, &mut self.scratch) {
                    Ok(_) => {
                        self.stats.packets_read += 1;
                        self.stats.dropped_no_buffer += 1;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            let len = match sys::read(fd, self.pool.buf(slot)) {
                Ok(n) => n,
                Err(e) => {
                    self.pool.put(slot);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(()),
                        io::ErrorKind::Interrupted => continue,
                        _ => return Err(e),
                    }
                }
            };
            self.stats.packets_read += 1;
            let now = self.clock.now();
            let flow = flow_key(&self.pool.buf(slot)[..len]);
            match self.links[port].enqueue(Instant::from_nanos(now), len, flow) {
                Ok(id) => {
                    self.held[port].insert(id.0, (slot, len));
                }
                Err(_) => self.pool.put(slot),
            }
            self.drain_link(port, now);
        }
        Ok(())
    }

    /// Take the decided fates from the link of `port`: schedule the
    /// delivered packets (and duplicates) out of the other end, free the
    /// buffers of dropped ones.
    fn drain_link(&mut self, port: usize, now: u64) {
        while let Some(outcome) = self.links[port].poll(Instant::from_nanos(now)) {
            let Some((slot, len)) = self.held[port].remove(&outcome.id().0) else {
                continue;
            };
            match outcome {
                Outcome::Dropped { .. } => self.pool.put(slot),
                Outcome::Delivered {
                    at, duplicate_at, ..
                } => {
                    let out = (port ^ 1) as u32;
                    self.schedule(at.as_nanos(), slot, len, out);
                    if let Some(dup_at) = duplicate_at {
                        if let Some(copy) = self.pool.get() {
                            let start = slot as usize * self.pool.slot_size;
                            let dst = copy as usize * self.pool.slot_size;
                            self.pool.mem.copy_within(start..start + len, dst);
                            self.schedule(dup_at.as_nanos(), copy, len, out);
                        } else {
                            self.stats.dropped_no_buffer += 1;
                        }
                    }
                }
            }
        }
    }

    fn schedule(&mut self, at: u64, slot: u32, len: usize, out: u32) {
        self.seq += 1;
        self.heap.push(Reverse(Due {
            at,
            seq: self.seq,
            slot,
            len: len as u32,
            out,
        }));
        self.stats.max_buffered = self.stats.max_buffered.max(self.pool.in_use());
    }

    /// Write every packet due by `now`.
    fn deliver_due(&mut self, now: u64) {
        while let Some(Reverse(d)) = self.heap.peek().copied() {
            if d.at > now {
                break;
            }
            self.heap.pop();
            let fd = self.fds[d.out as usize].as_raw_fd();
            let len = d.len as usize;
            match sys::write(fd, &self.pool.buf(d.slot)[..len]) {
                Ok(_) => self.stats.packets_written += 1,
                Err(_) => self.stats.write_errors += 1,
            }
            self.pool.put(d.slot);
        }
    }
}

/// The flow an IP packet belongs to: a hash of its 5-tuple (addresses,
/// protocol, and ports for TCP, UDP, UDP-Lite, DCCP and SCTP when the
/// packet is not a later IPv4 fragment), as Linux's `fq_codel` hashes
/// flows. A packet too short to parse hashes as what it has.
pub(crate) fn flow_key(packet: &[u8]) -> u64 {
    const PORTED: [u8; 5] = [6, 17, 33, 132, 136];
    let field = |r: std::ops::Range<usize>| packet.get(r).unwrap_or(&[]);
    let (proto, addrs, transport) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let frag_offset = u16::from_be_bytes([
                field(6..7).first().copied().unwrap_or(0) & 0x1f,
                field(7..8).first().copied().unwrap_or(0),
            ]);
            let proto = field(9..10).first().copied().unwrap_or(0);
            let ports = (frag_offset == 0).then_some(ihl);
            (proto, field(12..20), ports)
        }
        Some(6) => {
            let proto = field(6..7).first().copied().unwrap_or(0);
            (proto, field(8..40), Some(40))
        }
        _ => (0, packet, None),
    };
    let ports = match transport {
        Some(off) if PORTED.contains(&proto) => field(off..off + 4),
        _ => &[],
    };
    // FNV-1a over the tuple, then a finaliser to spread it.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in std::iter::once(&proto).chain(addrs).chain(ports) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    direction_seed(h, 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn flow_key_tells_five_tuples_apart() {
        // IPv4 UDP 192.0.2.1:1000 -> 192.0.2.2:2000, then other ports, and
        // the same tuple with another payload.
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p[16..20].copy_from_slice(&[192, 0, 2, 2]);
        p[20..24].copy_from_slice(&[0x03, 0xe8, 0x07, 0xd0]);
        let a = flow_key(&p);
        let mut same = p.clone();
        same[30] = 99;
        assert_eq!(flow_key(&same), a);
        let mut other_port = p.clone();
        other_port[21] = 0xe9;
        assert_ne!(flow_key(&other_port), a);
        let mut icmp = p.clone();
        icmp[9] = 1;
        // ICMP has no ports: its flow ignores those bytes.
        let mut icmp2 = icmp.clone();
        icmp2[21] = 0xe9;
        assert_eq!(flow_key(&icmp), flow_key(&icmp2));
        assert_ne!(flow_key(&icmp), a);
        // Short or empty packets hash without panicking.
        assert_eq!(flow_key(&[]), flow_key(&[]));
        let _ = flow_key(&[0x45]);
        let _ = flow_key(&[0x60, 0, 0]);
    }

    use super::*;

    #[test]
    fn pool_reuses_slots_and_is_bounded() {
        let mut p = Pool::new(16);
        let a = p.get().unwrap();
        let b = p.get().unwrap();
        assert_ne!(a, b);
        p.buf(a)[0] = 7;
        p.put(a);
        assert_eq!(p.get(), Some(a));
        assert_eq!(p.in_use(), 2);
        let mut n = 2;
        while p.get().is_some() {
            n += 1;
        }
        assert_eq!(n, MAX_SLOTS);
    }

    #[test]
    fn deliveries_order_by_time_then_sequence() {
        let mut h = BinaryHeap::new();
        for (at, seq) in [(5, 1), (3, 2), (5, 0), (3, 3)] {
            h.push(Reverse(Due {
                at,
                seq,
                slot: 0,
                len: 0,
                out: 0,
            }));
        }
        let order: Vec<_> =
            std::iter::from_fn(|| h.pop().map(|Reverse(d)| (d.at, d.seq))).collect();
        assert_eq!(order, [(3, 2), (3, 3), (5, 0), (5, 1)]);
    }

    #[test]
    fn direction_seeds_differ() {
        let s: std::collections::HashSet<_> = (0..100).map(|i| direction_seed(1, i)).collect();
        assert_eq!(s.len(), 100);
    }
}
