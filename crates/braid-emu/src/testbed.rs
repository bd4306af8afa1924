//! [`Testbed`]: hosts in network namespaces joined by emulated paths, built
//! from link specs, torn down on drop.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use braid_link::{Direction, LinkSpec};

use crate::forwarder::{ForwarderHandle, Stats, TunSpec};
use crate::layout::{HostLayout, Layout, PathLayout};
use crate::state::{self, State};
use crate::sys::{self, NetNs};
use crate::topology::{self, Topology};
use crate::{netns, EmuError};

/// Packets a TUN device may hold for the forwarder before the kernel drops
/// them (the default of 500 is short for a burst at 1 Gbit/s).
const TXQUEUELEN: u32 = 10_000;

/// First routing table used for source-based routing on multipath hosts.
const TABLE_BASE: usize = 100;

/// Check what the emulator needs, naming what is missing: root,
/// /dev/net/tun and the `ip` command.
///
/// ```no_run
/// match braid_emu::check_capabilities() {
///     Ok(()) => println!("ready"),
///     Err(e) => eprintln!("cannot emulate: {e}"),
/// }
/// ```
pub fn check_capabilities() -> Result<(), EmuError> {
    if !sys::is_root() {
        return Err(EmuError::NotRoot);
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(EmuError::NoTun)?;
    netns::check_ip()
}

/// Builds a [`Testbed`]. Without a topology, hosts `a` and `b` get one path
/// per [`link`](Self::link).
#[derive(Debug, Clone, Default)]
pub struct TestbedBuilder {
    name: Option<String>,
    links: Vec<LinkSpec>,
    topology: Option<Topology>,
    seed: u64,
}

impl TestbedBuilder {
    /// The testbed's name (1–8 characters of `a-z0-9-`); default: one made
    /// from this process's id.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Add a path between hosts `a` and `b`.
    pub fn link(mut self, spec: LinkSpec) -> Self {
        self.links.push(spec);
        self
    }

    /// Use this topology instead of `a`, `b` and the links.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Seed of the links' random choices (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Create the namespaces, devices, addresses and routes and start the
    /// forwarder. Reclaims leftovers of testbeds whose owner died first.
    pub fn build(self) -> Result<Testbed, EmuError> {
        check_capabilities()?;
        let topology = match self.topology {
            Some(t) if !self.links.is_empty() => return Err(EmuError::Topology(format!(
                "give either links or a topology, not both ({} links and a topology of {} paths)",
                self.links.len(),
                t.paths.len()
            ))),
            Some(t) => {
                t.validate()?;
                t
            }
            None => Topology::two_hosts(self.links)?,
        };
        let name = self
            .name
            .or_else(|| topology.name.clone())
            .unwrap_or_else(default_name);
        topology::check_name(&name)?;
        state::reclaim_dead();
        let me = sys::getpid();
        let mut st = State {
            name: name.clone(),
            pid: me,
            start_time: sys::process_start_time(me).unwrap_or(0),
            netns: topology
                .hosts
                .iter()
                .map(|h| topology::netns_name(&name, h))
                .collect(),
            socket: None,
            layout: None,
        };
        state::claim(&st)?;
        // From here on, failures must undo what exists: the guard does.
        let mut guard = Cleanup {
            name: name.clone(),
            armed: true,
        };
        for ns in &st.netns {
            netns::add(ns)?;
        }
        let layout = plan(&name, me, &topology);
        let tuns = layout
            .paths
            .iter()
            .flat_map(|p| {
                [
                    TunSpec {
                        netns: layout.hosts[&p.a].netns.clone(),
                        ifname: p.ifname.clone(),
                    },
                    TunSpec {
                        netns: layout.hosts[&p.b].netns.clone(),
                        ifname: p.ifname.clone(),
                    },
                ]
            })
            .collect();
        let links = topology
            .paths
            .iter()
            .map(|p| {
                (
                    p.spec.params(Direction::AToB),
                    p.spec.params(Direction::BToA),
                )
            })
            .collect();
        let mtus: Vec<u32> = topology.paths.iter().map(|p| iface_mtu(&p.spec)).collect();
        let slot_size = mtus
            .iter()
            .map(|&m| (m as usize + 64).next_multiple_of(64))
            .max()
            .unwrap_or(0)
            .max(2048);
        let forwarder = ForwarderHandle::start(tuns, links, self.seed, slot_size)?;
        for (host, h) in &layout.hosts {
            configure_host(host, h, &layout, &mtus)?;
        }
        st.layout = Some(layout.clone());
        state::update(&st)?;
        guard.armed = false;
        Ok(Testbed {
            layout,
            topology,
            forwarder: Some(forwarder),
            state: st,
        })
    }
}

/// Removes a half-built testbed if building fails.
struct Cleanup {
    name: String,
    armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            let _ = state::reclaim(&self.name);
        }
    }
}

/// A name unique among this machine's processes: `t`, the pid in base 36
/// and a per-process counter.
fn default_name() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "t{}{}",
        base36(u64::from(sys::getpid())),
        base36(u64::from(n % 1296))
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

/// The interface MTU of a path: the spec's `mtu` when it is a usable
/// interface MTU (so the hosts' stacks respect it), else 1500. Programs
/// on a testbed may size their datagrams from it, as path-MTU discovery
/// would.
pub fn iface_mtu(spec: &LinkSpec) -> u32 {
    let m = [Direction::AToB, Direction::BToA]
        .into_iter()
        .filter_map(|d| spec.params(d).mtu)
        .min();
    match m {
        Some(m) if (576..=9000).contains(&m) => m,
        _ => 1500,
    }
}

/// Names and addresses of everything, before anything is configured.
fn plan(name: &str, pid: u32, t: &Topology) -> Layout {
    let mut hosts: BTreeMap<String, HostLayout> = t
        .hosts
        .iter()
        .map(|h| {
            (
                h.clone(),
                HostLayout {
                    netns: topology::netns_name(name, h),
                    addrs: Vec::new(),
                },
            )
        })
        .collect();
    let paths = t
        .paths
        .iter()
        .enumerate()
        .map(|(id, p)| {
            let (a_addr, b_addr) = topology::path_addrs(id);
            hosts.get_mut(&p.a).expect("validated").addrs.push(a_addr);
            hosts.get_mut(&p.b).expect("validated").addrs.push(b_addr);
            PathLayout {
                id,
                name: p.name.clone(),
                a: p.a.clone(),
                b: p.b.clone(),
                spec: p.spec.to_string(),
                a_addr,
                b_addr,
                ifname: topology::if_name(name, id),
            }
        })
        .collect();
    Layout {
        name: name.to_string(),
        pid,
        hosts,
        paths,
    }
}

/// Bring up a host's loopback and path interfaces with point-to-point
/// addresses; on a host with several paths to the same peer, add
/// source-based routes and MPTCP endpoints.
///
/// Routing across parallel paths: a packet from this host's address on
/// path `i` to the peer's address on path `j` takes path max(i, j), on
/// both hosts. The rule is symmetric, so both directions of any address
/// pair use the same path: the initial MPTCP subflow (path-0 addresses)
/// stays on path 0, and a subflow from the path-1 address to the peer's
/// path-0 address runs over path 1 both ways.
fn configure_host(
    host: &str,
    h: &HostLayout,
    layout: &Layout,
    mtus: &[u32],
) -> Result<(), EmuError> {
    let mut cmds = vec!["link set lo up".to_string()];
    // (path id, local, remote, ifname, peer host)
    let mine: Vec<(usize, std::net::Ipv4Addr, std::net::Ipv4Addr, &str, &str)> = layout
        .paths
        .iter()
        .filter_map(|p| {
            if p.a == host {
                Some((p.id, p.a_addr, p.b_addr, p.ifname.as_str(), p.b.as_str()))
            } else if p.b == host {
                Some((p.id, p.b_addr, p.a_addr, p.ifname.as_str(), p.a.as_str()))
            } else {
                None
            }
        })
        .collect();
    for &(id, local, remote, ifname, _) in &mine {
        cmds.push(format!(
            "link set dev {ifname} up mtu {} txqueuelen {TXQUEUELEN}",
            mtus[id]
        ));
        cmds.push(format!("addr add {local} peer {remote} dev {ifname}"));
    }
    let mut mptcp = Vec::new();
    for &(i, local, _, _, peer) in &mine {
        let siblings: Vec<_> = mine.iter().filter(|m| m.4 == peer).collect();
        if siblings.len() < 2 {
            continue;
        }
        let table = TABLE_BASE + i;
        cmds.push(format!(
            "rule add from {local} table {table} priority {}",
            1000 + i
        ));
        for &&(j, _, remote_j, _, _) in &siblings {
            let via = mine.iter().find(|m| m.0 == i.max(j)).expect("sibling").3;
            cmds.push(format!(
                "route add {remote_j} dev {via} src {local} table {table}"
            ));
        }
        if siblings[0].0 != i {
            mptcp.push(format!(
                "mptcp endpoint add {local} dev {} subflow",
                mine.iter().find(|m| m.0 == i).expect("own").3
            ));
        }
    }
    netns::ip_batch(&h.netns, &cmds)?;
    if !mptcp.is_empty() {
        let n = mptcp.len().min(8);
        mptcp.insert(
            0,
            format!("mptcp limits set subflows {n} add_addr_accepted {n}"),
        );
        // A kernel without MPTCP only loses MPTCP, not the testbed.
        let _ = netns::ip_batch(&h.netns, &mptcp);
    }
    Ok(())
}

/// A running testbed: hosts in network namespaces, paths between them, and
/// the forwarder applying the link model. Dropping it tears everything
/// down (processes in its hosts, namespaces, devices, state file).
///
/// ```no_run
/// use braid_emu::Testbed;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tb = Testbed::builder().name("doc").link("rtt=40ms,rate=100mbit".parse()?).build()?;
/// let b_addr = tb.layout().paths[0].b_addr;
/// let out = tb.command("a", "ping")?.args(["-c", "3", &b_addr.to_string()]).output()?;
/// assert!(out.status.success());
/// tb.set_path("0", &"rtt=100ms".parse()?)?; // applies to packets arriving from now on
/// tb.down()?;
/// # Ok(()) }
/// ```
pub struct Testbed {
    layout: Layout,
    topology: Topology,
    forwarder: Option<ForwarderHandle>,
    state: State,
}

impl std::fmt::Debug for Testbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Testbed {
    /// Start describing a testbed.
    pub fn builder() -> TestbedBuilder {
        TestbedBuilder::default()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// Hosts, addresses and paths.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The namespace of `host`.
    pub fn netns(&self, host: &str) -> Result<&str, EmuError> {
        self.layout
            .hosts
            .get(host)
            .map(|h| h.netns.as_str())
            .ok_or_else(|| EmuError::NoSuchHost(host.to_string()))
    }

    /// A command that runs `program` on `host` (through `ip netns exec`);
    /// add arguments, then spawn or run it.
    pub fn command(&self, host: &str, program: impl AsRef<OsStr>) -> Result<Command, EmuError> {
        let ns = self.netns(host)?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        Ok(c)
    }

    /// Start `argv` on `host`. The process is ended at teardown if still
    /// running.
    pub fn spawn<S: AsRef<OsStr>>(&self, host: &str, argv: &[S]) -> Result<Child, EmuError> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| EmuError::Topology("empty command".into()))?;
        self.command(host, program)?
            .args(args)
            .spawn()
            .map_err(|e| EmuError::io(format!("starting {:?} on {host}", program.as_ref()), e))
    }

    /// Run `f` on a new thread inside `host`'s network namespace: sockets
    /// it opens belong to that host.
    pub fn in_host<T, F>(&self, host: &str, f: F) -> Result<JoinHandle<T>, EmuError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let name = self.netns(host)?.to_string();
        let ns = NetNs::named(&name)
            .map_err(|e| EmuError::io(format!("opening namespace {name}"), e))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name(format!("in-{host}"))
            .spawn(move || {
                let entered = ns.enter();
                let ok = entered.is_ok();
                let _ = tx.send(entered);
                if !ok {
                    // The caller gets the error; this thread must not run `f`
                    // in the wrong namespace.
                    std::process::abort();
                }
                f()
            })
            .map_err(|e| EmuError::io("spawning a thread", e))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => Err(EmuError::io(format!("entering namespace {name}"), e)),
            Err(_) => Err(EmuError::io(
                format!("entering namespace {name}"),
                std::io::Error::other("thread died"),
            )),
        }
    }

    /// The id of the path named `key` (its id or its topology name).
    pub fn path_id(&self, key: &str) -> Result<usize, EmuError> {
        self.layout
            .path(key)
            .map(|p| p.id)
            .ok_or_else(|| EmuError::NoSuchPath(key.to_string()))
    }

    /// Change path `key` (id or name) to `spec`. Packets that arrive after
    /// this returns see the new parameters; queued and in-flight packets
    /// keep their schedule and none is dropped by the change.
    pub fn set_path(&mut self, key: &str, spec: &LinkSpec) -> Result<(), EmuError> {
        let id = self.path_id(key)?;
        let fwd = self.forwarder.as_ref().ok_or(EmuError::ForwarderGone)?;
        fwd.set(
            id,
            spec.params(Direction::AToB),
            spec.params(Direction::BToA),
        )?;
        self.topology.paths[id].spec = spec.clone();
        self.layout.paths[id].spec = spec.to_string();
        self.state.layout = Some(self.layout.clone());
        state::update(&self.state)
    }

    /// Counters of every path and of the forwarder.
    pub fn stats(&self) -> Result<Stats, EmuError> {
        self.forwarder
            .as_ref()
            .ok_or(EmuError::ForwarderGone)?
            .stats()
    }

    /// Whether the forwarder is still running.
    pub fn is_running(&self) -> bool {
        self.forwarder
            .as_ref()
            .is_some_and(ForwarderHandle::is_running)
    }

    /// Record the control socket in the state file (daemon use).
    pub(crate) fn set_socket(&mut self, socket: std::path::PathBuf) -> Result<(), EmuError> {
        self.state.socket = Some(socket);
        state::update(&self.state)
    }

    /// Tear down now, reporting errors (drop does the same silently).
    pub fn down(mut self) -> Result<(), EmuError> {
        self.teardown()
    }

    /// Tear down in place (the daemon answers `down` only once done).
    pub(crate) fn teardown_now(&mut self) -> Result<(), EmuError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), EmuError> {
        let Some(mut fwd) = self.forwarder.take() else {
            return Ok(());
        };
        fwd.stop();
        state::reclaim(&self.layout.name)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_valid_and_distinct() {
        let a = default_name();
        let b = default_name();
        assert_ne!(a, b);
        topology::check_name(&a).unwrap();
        assert!(topology::check_name(&format!("t{}zz", base36(4_194_304))).is_ok());
    }

    #[test]
    fn mtu_follows_the_spec_when_usable() {
        assert_eq!(iface_mtu(&"rtt=1ms".parse().unwrap()), 1500);
        assert_eq!(iface_mtu(&"mtu=1280".parse().unwrap()), 1280);
        assert_eq!(iface_mtu(&"mtu=100".parse().unwrap()), 1500);
    }

    #[test]
    fn plan_gives_each_host_its_path_addresses() {
        let t = Topology::two_hosts(vec!["rtt=1ms".parse().unwrap(), "rtt=2ms".parse().unwrap()])
            .unwrap();
        let l = plan("x", 1, &t);
        assert_eq!(
            l.hosts["a"].addrs,
            [topology::path_addrs(0).0, topology::path_addrs(1).0]
        );
        assert_eq!(l.hosts["b"].netns, "braid-emu-x-b");
        assert_eq!(l.paths[1].ifname, "be-x-1");
        assert_eq!(l.paths[1].spec, "rtt=2ms");
    }
}
