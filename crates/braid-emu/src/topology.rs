//! What a testbed consists of: hosts and the paths between them, from
//! `--link` specs or a TOML topology file, and the names and addresses they
//! get.
//!
//! Topology file:
//!
//! ```toml
//! name = "lab"                  # optional testbed name
//! hosts = ["client", "server"]  # optional; default: the hosts the paths name
//!
//! [[path]]
//! name = "wifi"                 # optional; `braid emu set lab wifi SPEC`
//! a = "client"                  # default "a"
//! b = "server"                  # default "b"
//! link = "rtt=20ms,rate=50mbit"
//!
//! [[path]]
//! name = "lte"
//! a = "client"
//! b = "server"
//! link = "rtt=60ms,rate=10mbit"
//! ```

use std::net::Ipv4Addr;
use std::path::Path;

use braid_link::LinkSpec;
use serde::Deserialize;

use crate::EmuError;

/// Prefix of every network namespace the emulator creates:
/// `braid-emu-<testbed>-<host>`.
pub const NETNS_PREFIX: &str = "braid-emu-";

/// Prefix of every interface the emulator creates: `be-<testbed>-<path>`.
pub const IF_PREFIX: &str = "be-";

/// Most paths a testbed can have: 64 point-to-point /30 blocks in each of
/// the three IPv4 documentation ranges.
pub const MAX_PATHS: usize = 192;

/// The documentation ranges (RFC 5737) addresses are taken from.
const RANGES: [[u8; 3]; 3] = [[192, 0, 2], [198, 51, 100], [203, 0, 113]];

/// One path: two hosts and the link between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathDef {
    /// Optional name, usable instead of the id in `set`.
    pub name: Option<String>,
    /// First host (direction `a2b` goes from it).
    pub a: String,
    /// Second host.
    pub b: String,
    /// The link.
    pub spec: LinkSpec,
}

/// Hosts and paths. The default, from `--link` specs, is two hosts `a` and
/// `b` with one path per spec.
///
/// ```
/// use braid_emu::Topology;
/// let t = Topology::two_hosts(vec!["rtt=20ms".parse().unwrap(), "rtt=40ms".parse().unwrap()]).unwrap();
/// assert_eq!(t.hosts, ["a", "b"]);
/// assert_eq!(t.paths.len(), 2);
/// let t = Topology::from_toml("[[path]]\na = \"x\"\nb = \"y\"\nlink = \"rtt=5ms\"\n").unwrap();
/// assert_eq!(t.hosts, ["x", "y"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The testbed name the file asks for, if any.
    pub name: Option<String>,
    /// Host names, in order.
    pub hosts: Vec<String>,
    /// Paths, in order: path `i` has id `i`.
    pub paths: Vec<PathDef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    name: Option<String>,
    hosts: Option<Vec<String>>,
    #[serde(default)]
    path: Vec<FilePath>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePath {
    name: Option<String>,
    a: Option<String>,
    b: Option<String>,
    link: String,
}

impl Topology {
    /// Hosts `a` and `b`, one path per spec.
    pub fn two_hosts(specs: Vec<LinkSpec>) -> Result<Topology, EmuError> {
        let paths = specs
            .into_iter()
            .map(|spec| PathDef {
                name: None,
                a: "a".into(),
                b: "b".into(),
                spec,
            })
            .collect();
        let t = Topology {
            name: None,
            hosts: vec!["a".into(), "b".into()],
            paths,
        };
        t.validate()?;
        Ok(t)
    }

    /// Parse a topology file's text.
    pub fn from_toml(text: &str) -> Result<Topology, EmuError> {
        let f: FileTopology = toml::from_str(text)
            .map_err(|e| EmuError::Topology(e.to_string().trim_end().to_string()))?;
        let mut paths = Vec::with_capacity(f.path.len());
        for (i, p) in f.path.into_iter().enumerate() {
            let spec = p.link.parse::<LinkSpec>().map_err(|e| {
                EmuError::Topology(format!("path {i} (`link = \"{}\"`): {e}", p.link))
            })?;
            paths.push(PathDef {
                name: p.name,
                a: p.a.unwrap_or_else(|| "a".into()),
                b: p.b.unwrap_or_else(|| "b".into()),
                spec,
            });
        }
        let hosts = match f.hosts {
            Some(h) => h,
            None => {
                let mut h: Vec<String> = Vec::new();
                for p in &paths {
                    for name in [&p.a, &p.b] {
                        if !h.contains(name) {
                            h.push(name.clone());
                        }
                    }
                }
                h
            }
        };
        let t = Topology {
            name: f.name,
            hosts,
            paths,
        };
        t.validate()?;
        Ok(t)
    }

    /// Read and parse a topology file.
    pub fn load(path: &Path) -> Result<Topology, EmuError> {
        let text = std::fs::read_to_string(path).map_err(|e| EmuError::TopologyFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Topology::from_toml(&text).map_err(|e| match e {
            EmuError::Topology(message) => EmuError::TopologyFile {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Check names, references and sizes.
    pub fn validate(&self) -> Result<(), EmuError> {
        if self.paths.is_empty() {
            return Err(EmuError::Topology(
                "no path: give at least one --link SPEC (or a [[path]] in the file)".into(),
            ));
        }
        if self.paths.len() > MAX_PATHS {
            return Err(EmuError::Topology(format!(
                "{} paths; at most {MAX_PATHS} are supported",
                self.paths.len()
            )));
        }
        for (i, h) in self.hosts.iter().enumerate() {
            check_host_name(h)?;
            if self.hosts[..i].contains(h) {
                return Err(EmuError::Topology(format!("host `{h}` listed twice")));
            }
        }
        for (i, p) in self.paths.iter().enumerate() {
            for h in [&p.a, &p.b] {
                if !self.hosts.contains(h) {
                    return Err(EmuError::Topology(format!(
                        "path {i} names host `{h}`, which is not in hosts {:?}",
                        self.hosts
                    )));
                }
            }
            if p.a == p.b {
                return Err(EmuError::Topology(format!(
                    "path {i} joins host `{}` to itself",
                    p.a
                )));
            }
            if let Some(n) = &p.name {
                if n.is_empty() || n.parse::<usize>().is_ok() {
                    return Err(EmuError::Topology(format!("path {i}: name `{n}` must be non-empty and not a number (numbers are path ids)")));
                }
                if self.paths[..i].iter().any(|q| q.name.as_deref() == Some(n)) {
                    return Err(EmuError::Topology(format!("path name `{n}` used twice")));
                }
            }
        }
        Ok(())
    }
}

/// Check a testbed name: 1 to 8 characters of `a-z0-9-`, not starting with
/// `-` (it becomes part of namespace and interface names, which are at most
/// 15 characters).
pub fn check_name(name: &str) -> Result<(), EmuError> {
    let ok = (1..=8).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(EmuError::InvalidName(name.to_string()))
    }
}

/// Check a host name: 1 to 15 characters of `a-z0-9_` (no `-`, so that
/// `braid-emu-<testbed>-<host>` splits back unambiguously).
pub fn check_host_name(name: &str) -> Result<(), EmuError> {
    let ok = (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(EmuError::InvalidHost(name.to_string()))
    }
}

/// The namespace of `host` in testbed `name`.
pub fn netns_name(name: &str, host: &str) -> String {
    format!("{NETNS_PREFIX}{name}-{host}")
}

/// The testbed and host a namespace of ours belongs to.
pub fn parse_netns_name(ns: &str) -> Option<(&str, &str)> {
    ns.strip_prefix(NETNS_PREFIX)?.rsplit_once('-')
}

/// The interface of path `id` (the same name on both of its hosts).
pub fn if_name(name: &str, id: usize) -> String {
    format!("{IF_PREFIX}{name}-{id}")
}

/// The addresses of path `id` on its first and second host: the first two
/// host addresses of the `id`-th /30 of the documentation ranges
/// (192.0.2.1 and .2 for path 0, .5 and .6 for path 1, …).
pub fn path_addrs(id: usize) -> (Ipv4Addr, Ipv4Addr) {
    assert!(id < MAX_PATHS, "path id {id} out of range");
    let [x, y, z] = RANGES[id / 64];
    let base = (id % 64) as u8 * 4;
    (
        Ipv4Addr::new(x, y, z, base + 1),
        Ipv4Addr::new(x, y, z, base + 2),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_plan_uses_documentation_ranges_without_overlap() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..MAX_PATHS {
            let (a, b) = path_addrs(id);
            assert!(seen.insert(a) && seen.insert(b));
            for ip in [a, b] {
                assert!(RANGES.contains(&[ip.octets()[0], ip.octets()[1], ip.octets()[2]]));
            }
        }
        assert_eq!(
            path_addrs(0),
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap())
        );
        assert_eq!(
            path_addrs(1),
            ("192.0.2.5".parse().unwrap(), "192.0.2.6".parse().unwrap())
        );
        assert_eq!(
            path_addrs(64).0,
            "198.51.100.1".parse::<Ipv4Addr>().unwrap()
        );
    }

    #[test]
    fn names_fit_and_split_back() {
        check_name("abcdefgh").unwrap();
        for bad in ["", "abcdefghi", "-x", "A", "a_b", "a b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(if_name("abcdefgh", MAX_PATHS - 1).len() <= 15);
        let ns = netns_name("t-1", "client_2");
        assert_eq!(parse_netns_name(&ns), Some(("t-1", "client_2")));
        assert_eq!(parse_netns_name("other"), None);
        assert!(check_host_name("a-b").is_err());
    }

    #[test]
    fn topology_file() {
        let t = Topology::from_toml(
            r#"
name = "lab"
hosts = ["c", "s", "r"]
[[path]]
name = "wifi"
a = "c"
b = "s"
link = "rtt=20ms,rate=50mbit"
[[path]]
a = "c"
b = "r"
link = "rtt=60ms"
"#,
        )
        .unwrap();
        assert_eq!(t.name.as_deref(), Some("lab"));
        assert_eq!(t.paths[0].name.as_deref(), Some("wifi"));
        assert_eq!(t.paths[1].b, "r");
        let err = |s: &str| Topology::from_toml(s).unwrap_err().to_string();
        assert!(err("[[path]]\na = \"x\"\nb = \"x\"\nlink = \"\"").contains("to itself"));
        assert!(err("[[path]]\nlink = \"rate=fast\"").contains("invalid `rate` value `fast`"));
        assert!(err("hosts = [\"a\"]\n[[path]]\nlink = \"\"").contains("not in hosts"));
        assert!(err("[[path]]\nlink = \"\"\nspeed = 1").contains("unknown field"));
        assert!(err("").contains("no path"));
        assert!(err("[[path]]\nname = \"0\"\nlink = \"\"").contains("not a number"));
    }
}
