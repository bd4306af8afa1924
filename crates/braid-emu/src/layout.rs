//! What `braid emu up` prints and the state file records: hosts, their
//! addresses and the paths.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// A host of a running testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLayout {
    /// Its network namespace (`ip netns exec NETNS …`).
    pub netns: String,
    /// Its addresses, one per path it is on, in path order.
    pub addrs: Vec<Ipv4Addr>,
}

/// A path of a running testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathLayout {
    /// Id (its index): what `set` takes.
    pub id: usize,
    /// Name from the topology file, if any (also accepted by `set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// First host.
    pub a: String,
    /// Second host.
    pub b: String,
    /// The link spec in force (canonical form).
    pub spec: String,
    /// Address of the path on host `a`.
    pub a_addr: Ipv4Addr,
    /// Address of the path on host `b`.
    pub b_addr: Ipv4Addr,
    /// Interface of the path (same name on both hosts).
    pub ifname: String,
}

/// A running testbed as users see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Testbed name.
    pub name: String,
    /// The process running its forwarder.
    pub pid: u32,
    /// Hosts by name.
    pub hosts: BTreeMap<String, HostLayout>,
    /// Paths by id.
    pub paths: Vec<PathLayout>,
}

impl Layout {
    /// The path named `key`: its id (`0`, `1`, …) or its topology name.
    pub fn path(&self, key: &str) -> Option<&PathLayout> {
        match key.parse::<usize>() {
            Ok(id) => self.paths.get(id),
            Err(_) => self.paths.iter().find(|p| p.name.as_deref() == Some(key)),
        }
    }

    /// Human-readable summary: one line per host, one per path.
    pub fn to_text(&self) -> String {
        let mut s = format!("testbed {} (forwarder pid {})\n", self.name, self.pid);
        for (name, h) in &self.hosts {
            let addrs: Vec<String> = h.addrs.iter().map(|a| a.to_string()).collect();
            s += &format!(
                "  host {name}: netns {}, addrs {}\n",
                h.netns,
                addrs.join(" ")
            );
        }
        for p in &self.paths {
            let label = p
                .name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            s += &format!(
                "  path {}{label}: {} {} <-> {} {} [{}] {}\n",
                p.id, p.a, p.a_addr, p.b, p.b_addr, p.ifname, p.spec
            );
        }
        s
    }
}
