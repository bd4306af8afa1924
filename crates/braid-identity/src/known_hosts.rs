//! The known-hosts file: which public key a peer must present, in the manner
//! of OpenSSH's `known_hosts` (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"),
//! simplified to one pattern per line.
//!
//! Each line is `PATTERN PUBLIC_KEY [comment]`; blank lines and lines starting
//! with `#` are ignored. PATTERN is one of
//! - a host name (letters, digits, `.`, `-`, `_`; compared without case),
//! - an address `ip:port` (`[v6]:port` for IPv6),
//! - an `ip` (any port),
//! - `*`: the key is trusted for any peer.
//!
//! A key is [`Trust::Known`] for a peer if any line whose pattern matches the
//! peer carries it. It is [`Trust::Changed`] if lines with a name or address
//! pattern match the peer but none carries it (a `*` line never makes a key
//! "changed": it adds a key, it does not pin one). Otherwise it is
//! [`Trust::Unknown`].

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::key::{excerpt, PublicKey};
use crate::private_file::{self, GROUP_OTHER_WRITE};

/// Largest known-hosts file read (about 80,000 lines): a bound on memory for
/// a file that anyone with write access (or TOFU) could grow.
pub const MAX_KNOWN_HOSTS_BYTES: usize = 8 << 20;

/// Why a known-hosts file could not be read, parsed or extended.
#[derive(Debug, thiserror::Error)]
pub enum KnownHostsError {
    /// A line does not follow `PATTERN PUBLIC_KEY [comment]`.
    #[error("{file}:{line}: {problem}")]
    Parse {
        /// The file (or source name) parsed.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// Group or others may change the file, so they could add keys.
    #[error("known hosts file {path} has permissions {mode:04o}: it must not be writable by group or others; run `chmod go-w {path}`", path = path.display())]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is larger than [`MAX_KNOWN_HOSTS_BYTES`].
    #[error("known hosts file {path} is larger than {MAX_KNOWN_HOSTS_BYTES} bytes", path = path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error("{action} {path}: {source}", path = path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
}

/// Whom a known-hosts line is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `*`: any peer.
    Any,
    /// `ip:port`: one address.
    Addr(SocketAddr),
    /// `ip`: one host, any port.
    Ip(IpAddr),
    /// A host or node name, stored in lower case.
    Name(String),
}

/// The allowed forms, for error messages.
const PATTERN_FORMS: &str =
    "a pattern: `*`, an address `ip:port` (`[v6]:port`), an `ip`, or a name of letters, digits, `.`, `-`, `_`";

impl Pattern {
    /// Whether this pattern names `peer`.
    pub fn matches(&self, peer: &Peer) -> bool {
        match self {
            Self::Any => true,
            // IP and port only: the IPv6 flow label of a received datagram
            // says nothing about who sent it. IPs are compared canonically
            // because a dual-stack socket reports 10.0.0.2 as ::ffff:10.0.0.2.
            Self::Addr(addr) => peer.addr.is_some_and(|p| {
                p.ip().to_canonical() == addr.ip().to_canonical() && p.port() == addr.port()
            }),
            Self::Ip(ip) => peer
                .addr
                .is_some_and(|addr| addr.ip().to_canonical() == ip.to_canonical()),
            Self::Name(name) => peer.name.as_deref() == Some(name.as_str()),
        }
    }
}

impl FromStr for Pattern {
    type Err = String;

    /// Parses a pattern; the error says what is allowed.
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "*" {
            return Ok(Self::Any);
        }
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self::Addr(addr));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        valid_name(text)
            .map(Self::Name)
            .ok_or_else(|| format!("{:?} is not {PATTERN_FORMS}", excerpt(text)))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Addr(addr) => write!(f, "{addr}"),
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Name(name) => f.write_str(name),
        }
    }
}

/// A name as stored (lower case) if it is one: non-empty, at most 253
/// characters (a DNS name's limit), of letters, digits, `.`, `-`, `_`.
fn valid_name(text: &str) -> Option<String> {
    let ok = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    ok.then(|| text.to_ascii_lowercase())
}

/// The peer a key is checked for: the name it was reached by (a client that
/// dialled a name knows it) and/or its address (a server knows only this).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    name: Option<String>,
    addr: Option<SocketAddr>,
    /// It connected to us (we accepted it): its address is where it happens
    /// to be, not who it is (see [`Peer::accepted`]).
    accepted: bool,
}

impl Peer {
    /// A peer known by address only.
    pub fn addr(addr: SocketAddr) -> Self {
        Self {
            name: None,
            addr: Some(addr),
            accepted: false,
        }
    }

    /// A peer that connected to us from `addr`: a server judging a client.
    ///
    /// Known-hosts lines name the address a client may come from, but the
    /// address does not identify it: many clients share an address behind
    /// a NAT, and one client's port changes with every connection. So a
    /// key that no line for the address carries is unknown, never
    /// "changed", and trust on first use records the client's IP, not its
    /// ephemeral port (which would add a line per connection).
    pub fn accepted(addr: SocketAddr) -> Self {
        Self {
            name: None,
            addr: Some(addr),
            accepted: true,
        }
    }

    /// Whether this peer connected to us (see [`Peer::accepted`]).
    pub fn is_accepted(&self) -> bool {
        self.accepted
    }

    /// A peer known by name only; `None` if `name` is not a valid name.
    pub fn name(name: &str) -> Option<Self> {
        Some(Self {
            name: Some(valid_name(name)?),
            addr: None,
            accepted: false,
        })
    }

    /// A peer dialled by `name` and reached at `addr`; lines for either match.
    /// `None` if `name` is not a valid name.
    pub fn named_at(name: &str, addr: SocketAddr) -> Option<Self> {
        Some(Self {
            name: Some(valid_name(name)?),
            addr: Some(addr),
            accepted: false,
        })
    }

    /// The pattern TOFU records for this peer: its name if it has one (the
    /// stable way a user refers to it), else its exact address; for a peer
    /// that connected to us, its IP (see [`Peer::accepted`]).
    pub fn tofu_pattern(&self) -> Pattern {
        match (&self.name, self.addr) {
            (Some(name), _) => Pattern::Name(name.clone()),
            (None, Some(addr)) if self.accepted => Pattern::Ip(addr.ip().to_canonical()),
            (None, Some(addr)) => Pattern::Addr(addr),
            // Constructors always set one of the two.
            (None, None) => Pattern::Any,
        }
    }
}

impl FromStr for Peer {
    type Err = String;

    /// `ip:port` becomes an address peer, anything else a name.
    fn from_str(text: &str) -> Result<Self, String> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self::addr(addr));
        }
        Self::name(text).ok_or_else(|| {
            format!(
                "peer {:?}: expected an address `ip:port` or a name of letters, digits, `.`, `-`, `_`",
                excerpt(text)
            )
        })
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.addr) {
            (Some(name), Some(addr)) => write!(f, "{name} ({addr})"),
            (Some(name), None) => f.write_str(name),
            (None, Some(addr)) => write!(f, "{addr}"),
            (None, None) => f.write_str("?"),
        }
    }
}

/// What the known hosts say about a key presented by a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// A matching line carries this key.
    Known,
    /// No line names this peer (other than `*` lines with other keys).
    Unknown,
    /// Lines name this peer with other keys: possibly an impostor, or a key
    /// the peer's owner replaced.
    Changed {
        /// The key of the first such line.
        expected: PublicKey,
        /// That line's number (0 for entries not from a file).
        line: usize,
    },
}

/// One known-hosts line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Whom it is about.
    pub pattern: Pattern,
    /// The key trusted for them.
    pub key: PublicKey,
    /// Free text after the key (may be empty).
    pub comment: String,
    /// 1-based line number in the file it was read from (0 if added in
    /// memory).
    pub line: usize,
}

/// A parsed known-hosts file, optionally tied to its path so entries can be
/// appended.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    path: Option<PathBuf>,
    entries: Vec<Entry>,
    /// Entry positions by what their pattern matches, so a check costs a few
    /// hash lookups however long the file is (checks run once per handshake,
    /// which a flood of spoofed handshakes can make frequent).
    index: HashMap<Slot, Vec<usize>>,
}

/// What a pattern is filed under: IPs in canonical form (IPv4-mapped IPv6
/// as IPv4), names in lower case, so that a peer finds every line that
/// matches it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    Any,
    Addr(IpAddr, u16),
    Ip(IpAddr),
    Name(String),
}

impl Slot {
    fn of(pattern: &Pattern) -> Self {
        match pattern {
            Pattern::Any => Self::Any,
            Pattern::Addr(addr) => Self::Addr(addr.ip().to_canonical(), addr.port()),
            Pattern::Ip(ip) => Self::Ip(ip.to_canonical()),
            Pattern::Name(name) => Self::Name(name.clone()),
        }
    }

    /// Every slot whose lines match `peer`.
    fn of_peer(peer: &Peer) -> Vec<Self> {
        let mut slots = vec![Self::Any];
        if let Some(name) = &peer.name {
            slots.push(Self::Name(name.clone()));
        }
        if let Some(addr) = peer.addr {
            let ip = addr.ip().to_canonical();
            slots.push(Self::Addr(ip, addr.port()));
            slots.push(Self::Ip(ip));
        }
        slots
    }
}

impl KnownHosts {
    /// An empty set with no file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses known-hosts text; `source` names it in errors (a path).
    pub fn parse(text: &str, source: &str) -> Result<Self, KnownHostsError> {
        let mut hosts = Self::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let problem = |problem: String| KnownHostsError::Parse {
                file: source.to_string(),
                line,
                problem,
            };
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let mut words = trimmed.splitn(3, char::is_whitespace);
            let pattern_text = words.next().unwrap_or_default();
            let pattern = pattern_text
                .parse::<Pattern>()
                .map_err(|e| problem(format!("expected `PATTERN PUBLIC_KEY [comment]`: {e}")))?;
            let key_text = words.next().map(str::trim).unwrap_or_default();
            if key_text.is_empty() {
                return Err(problem(
                    "expected `PATTERN PUBLIC_KEY [comment]`: no public key after the pattern"
                        .into(),
                ));
            }
            let key = key_text
                .parse::<PublicKey>()
                .map_err(|e| problem(format!("expected `PATTERN PUBLIC_KEY [comment]`: {e}")))?;
            let comment = words.next().map(str::trim).unwrap_or_default().to_string();
            hosts.push(Entry {
                pattern,
                key,
                comment,
                line,
            });
        }
        Ok(hosts)
    }

    /// Reads the file at `path`; a missing file is an empty set (it is
    /// created when TOFU first appends). The file must not be writable by
    /// group or others.
    pub fn load(path: &Path) -> Result<Self, KnownHostsError> {
        let io_error = |action, source| KnownHostsError::Io {
            action,
            path: path.to_path_buf(),
            source,
        };
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Self {
                    path: Some(path.to_path_buf()),
                    ..Self::default()
                });
            }
            Err(e) => return Err(io_error("opening known hosts file", e)),
        };
        let (_, mode) =
            private_file::mode_of(&file).map_err(|e| io_error("inspecting known hosts file", e))?;
        if mode & GROUP_OTHER_WRITE != 0 {
            return Err(KnownHostsError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
        let bytes = private_file::read_bounded(&mut file, MAX_KNOWN_HOSTS_BYTES)
            .map_err(|e| io_error("reading known hosts file", e))?
            .ok_or_else(|| KnownHostsError::TooLarge {
                path: path.to_path_buf(),
            })?;
        let text = String::from_utf8_lossy(&bytes);
        let mut hosts = Self::parse(&text, &path.display().to_string())?;
        hosts.path = Some(path.to_path_buf());
        Ok(hosts)
    }

    /// The file these entries come from and go to, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// All entries in file order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn push(&mut self, entry: Entry) {
        self.index
            .entry(Slot::of(&entry.pattern))
            .or_default()
            .push(self.entries.len());
        self.entries.push(entry);
    }

    /// What the entries say about `key` presented by `peer`.
    pub fn check(&self, peer: &Peer, key: &PublicKey) -> Trust {
        let mut matching: Vec<usize> = Slot::of_peer(peer)
            .iter()
            .filter_map(|slot| self.index.get(slot))
            .flatten()
            .copied()
            .collect();
        // File order, so `Changed` names the first line that pins the peer.
        matching.sort_unstable();
        let mut pinned_elsewhere = None;
        for entry in matching.iter().filter_map(|&i| self.entries.get(i)) {
            if entry.key == *key {
                return Trust::Known;
            }
            if entry.pattern != Pattern::Any && pinned_elsewhere.is_none() {
                pinned_elsewhere = Some(entry);
            }
        }
        match pinned_elsewhere {
            // Another client's key for the same address says nothing about
            // this one (see `Peer::accepted`).
            Some(_) if peer.accepted => Trust::Unknown,
            Some(entry) => Trust::Changed {
                expected: entry.key,
                line: entry.line,
            },
            None => Trust::Unknown,
        }
    }

    /// Adds an entry; with a file, the line is appended to it first (created
    /// with mode 0600 if missing). The line is written with one `write` on a
    /// file opened for appending, so concurrent appenders do not interleave
    /// and readers never see part of a line.
    pub fn append(
        &mut self,
        pattern: Pattern,
        key: PublicKey,
        comment: &str,
    ) -> Result<(), KnownHostsError> {
        let comment: String = comment
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let comment = comment.trim().to_string();
        let mut line_no = 0;
        if let Some(path) = &self.path {
            line_no = append_line(path, &render_line(&pattern, &key, &comment))?;
        }
        self.push(Entry {
            pattern,
            key,
            comment,
            line: line_no,
        });
        Ok(())
    }
}

/// One known-hosts line (without the newline).
pub fn render_line(pattern: &Pattern, key: &PublicKey, comment: &str) -> String {
    if comment.is_empty() {
        format!("{pattern} {key}")
    } else {
        format!("{pattern} {key} {comment}")
    }
}

/// Appends `line` to the file at `path`, creating it (mode 0600, folders
/// 0700) if missing. Returns the new line's number, counted after the write.
fn append_line(path: &Path, line: &str) -> Result<usize, KnownHostsError> {
    let io_error = |action, source| KnownHostsError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let dir = private_file::parent_dir(path);
    private_file::create_private_dir(&dir).map_err(|e| io_error("creating the folder of", e))?;
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| io_error("opening known hosts file", e))?;
    let existing = read_all(&mut file).map_err(|e| io_error("reading known hosts file", e))?;
    let mut record = String::with_capacity(line.len() + 2);
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        record.push('\n');
    }
    record.push_str(line);
    record.push('\n');
    file.write_all(record.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("appending to known hosts file", e))?;
    let lines_before = existing.split(|&b| b == b'\n').count();
    Ok(if existing.is_empty() {
        1
    } else {
        lines_before + usize::from(!existing.ends_with(b"\n"))
    })
}

fn read_all(file: &mut File) -> io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.take(MAX_KNOWN_HOSTS_BYTES as u64)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;
    use proptest::prelude::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn key(n: u8) -> PublicKey {
        Identity::from_seed(&[n; 32]).public_key()
    }

    fn sample() -> KnownHosts {
        let text = format!(
            "# braid known hosts\n\n\
             server.example {k1} main server\n\
             10.0.0.2:4433 {k2}\n\
             10.0.0.3 {k3} any port\n\
             [::1]:9000 {k4}\n\
             * {k5} lab-wide key\n",
            k1 = key(1),
            k2 = key(2),
            k3 = key(3),
            k4 = key(4),
            k5 = key(5)
        );
        KnownHosts::parse(&text, "hosts").unwrap()
    }

    fn at(text: &str) -> Peer {
        text.parse().unwrap()
    }

    #[test]
    fn patterns_match_as_documented() {
        let hosts = sample();
        assert_eq!(hosts.entries().len(), 5);
        assert_eq!(hosts.entries()[0].comment, "main server");
        assert_eq!(hosts.entries()[0].line, 3);
        assert_eq!(hosts.check(&at("SERVER.example"), &key(1)), Trust::Known);
        assert_eq!(hosts.check(&at("10.0.0.2:4433"), &key(2)), Trust::Known);
        assert_eq!(hosts.check(&at("10.0.0.3:1"), &key(3)), Trust::Known);
        assert_eq!(hosts.check(&at("10.0.0.3:65535"), &key(3)), Trust::Known);
        assert_eq!(hosts.check(&at("[::1]:9000"), &key(4)), Trust::Known);
        // `*` trusts key 5 for everyone...
        assert_eq!(hosts.check(&at("10.9.9.9:1"), &key(5)), Trust::Known);
        assert_eq!(hosts.check(&at("10.0.0.2:4433"), &key(5)), Trust::Known);
        // ...but never pins: another key for an unlisted peer is unknown.
        assert_eq!(hosts.check(&at("10.9.9.9:1"), &key(6)), Trust::Unknown);
        assert_eq!(hosts.check(&at("10.0.0.2:4434"), &key(2)), Trust::Unknown);
        assert_eq!(
            hosts.check(&at("10.0.0.2:4433"), &key(6)),
            Trust::Changed {
                expected: key(2),
                line: 4
            }
        );
        assert_eq!(
            hosts.check(&at("server.example"), &key(2)),
            Trust::Changed {
                expected: key(1),
                line: 3
            }
        );
        // Dual-stack sockets and IPv6 flow labels do not hide a listed peer.
        assert_eq!(
            hosts.check(&at("[::ffff:10.0.0.2]:4433"), &key(2)),
            Trust::Known
        );
        assert_eq!(
            hosts.check(&at("[::ffff:10.0.0.3]:80"), &key(3)),
            Trust::Known
        );
        let labelled = std::net::SocketAddrV6::new("::1".parse().unwrap(), 9000, 77, 0);
        assert_eq!(
            hosts.check(&Peer::addr(labelled.into()), &key(4)),
            Trust::Known
        );
        let both = Peer::named_at("server.example", "10.0.0.2:4433".parse().unwrap()).unwrap();
        assert_eq!(hosts.check(&both, &key(1)), Trust::Known);
        assert_eq!(hosts.check(&both, &key(2)), Trust::Known);
        assert!(matches!(hosts.check(&both, &key(3)), Trust::Changed { .. }));
    }

    #[test]
    fn parse_errors_name_file_line_and_form() {
        let cases = [
            (
                format!("ok.example {}\nbad/name {}", key(1), key(2)),
                2,
                "a pattern",
            ),
            ("host.example".to_string(), 1, "no public key"),
            ("host.example braid1xyz".to_string(), 1, "base64url"),
            ("host.example ssh-ed25519".to_string(), 1, "braid1"),
        ];
        for (text, line, needle) in cases {
            let err = KnownHosts::parse(&text, "/etc/kh").unwrap_err();
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("/etc/kh:{line}: ")),
                "{message}"
            );
            assert!(message.contains(needle), "{message}");
        }
    }

    #[test]
    fn append_creates_file_0600_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg").join("known_hosts");
        let mut hosts = KnownHosts::load(&path).unwrap();
        assert!(hosts.entries().is_empty());
        hosts
            .append(Pattern::Name("a.example".into()), key(1), "first\nline")
            .unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A file edited by hand without a final newline still gets whole lines.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("b.example {}", key(2)));
        std::fs::write(&path, &text).unwrap();
        let mut hosts = KnownHosts::load(&path).unwrap();
        hosts
            .append(Pattern::Addr("10.0.0.1:1".parse().unwrap()), key(3), "")
            .unwrap();
        assert_eq!(hosts.entries()[2].line, 3);
        let reloaded = KnownHosts::load(&path).unwrap();
        assert_eq!(reloaded.entries(), hosts.entries());
        assert_eq!(reloaded.entries()[0].comment, "first line");
    }

    #[test]
    fn writable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(&path, format!("a.example {}\n", key(1))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(KnownHosts::load(&path).unwrap().entries().len(), 1);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        let message = KnownHosts::load(&path).unwrap_err().to_string();
        assert!(
            message.contains("0664") && message.contains("known_hosts"),
            "{message}"
        );
    }

    #[test]
    fn peers_parse_or_say_what_is_allowed() {
        assert!("10.0.0.1:80".parse::<Peer>().is_ok());
        assert!("node-7.lab".parse::<Peer>().is_ok());
        let message = "has space".parse::<Peer>().unwrap_err();
        assert!(message.contains("ip:port"), "{message}");
        assert!(Peer::name("").is_none());
        assert!(Peer::name(&"a".repeat(254)).is_none());
    }

    fn pattern_strategy() -> impl Strategy<Value = Pattern> {
        prop_oneof![
            Just(Pattern::Any),
            (any::<IpAddr>(), any::<u16>())
                .prop_map(|(ip, port)| Pattern::Addr(SocketAddr::new(ip, port))),
            any::<IpAddr>().prop_map(Pattern::Ip),
            "[a-z0-9][a-z0-9._-]{0,30}".prop_map(Pattern::Name),
        ]
    }

    /// The definition `check` implements, by scanning every line.
    fn check_by_scan(hosts: &KnownHosts, peer: &Peer, key: &PublicKey) -> Trust {
        let matching: Vec<&Entry> = hosts
            .entries()
            .iter()
            .filter(|e| e.pattern.matches(peer))
            .collect();
        if matching.iter().any(|e| e.key == *key) {
            return Trust::Known;
        }
        match matching.iter().find(|e| e.pattern != Pattern::Any) {
            Some(e) => Trust::Changed {
                expected: e.key,
                line: e.line,
            },
            None => Trust::Unknown,
        }
    }

    /// Small pools of IPs, ports, names and keys, so that random entries and
    /// peers collide often.
    fn small_pattern() -> impl Strategy<Value = Pattern> {
        let ip = prop_oneof![
            Just("10.0.0.1".parse::<IpAddr>().unwrap()),
            Just("10.0.0.2".parse::<IpAddr>().unwrap()),
            Just("::ffff:10.0.0.1".parse::<IpAddr>().unwrap()),
        ];
        prop_oneof![
            Just(Pattern::Any),
            (ip.clone(), 1u16..3).prop_map(|(ip, port)| Pattern::Addr(SocketAddr::new(ip, port))),
            ip.prop_map(Pattern::Ip),
            prop_oneof![Just("a"), Just("b")].prop_map(|n| Pattern::Name(n.to_string())),
        ]
    }

    proptest! {
        #[test]
        fn indexed_check_agrees_with_scanning_every_line(
            lines in proptest::collection::vec((small_pattern(), 0u8..4), 0..12),
            name in proptest::option::of(prop_oneof![Just("a"), Just("B"), Just("c")]),
            addr in proptest::option::of((prop_oneof![Just("10.0.0.1"), Just("10.0.0.2"), Just("::ffff:10.0.0.2")], 1u16..3)),
            presented in 0u8..4,
        ) {
            let mut hosts = KnownHosts::new();
            for (pattern, k) in lines {
                hosts.append(pattern, key(k), "").unwrap();
            }
            let addr = addr.map(|(ip, port)| SocketAddr::new(ip.parse().unwrap(), port));
            let peer = match (name, addr) {
                (Some(n), Some(a)) => Peer::named_at(n, a).unwrap(),
                (Some(n), None) => Peer::name(n).unwrap(),
                (None, Some(a)) => Peer::addr(a),
                (None, None) => Peer::addr("10.9.9.9:9".parse().unwrap()),
            };
            prop_assert_eq!(hosts.check(&peer, &key(presented)), check_by_scan(&hosts, &peer, &key(presented)));
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
            let _ = KnownHosts::parse(&text, "f");
            let _ = text.parse::<Pattern>();
            let _ = text.parse::<Peer>();
        }

        #[test]
        fn arbitrary_lines_with_a_valid_key_never_panic(pattern in "\\PC{0,40}", comment in "\\PC{0,40}") {
            let _ = KnownHosts::parse(&format!("{pattern} {} {comment}", key(1)), "f");
        }

        #[test]
        fn rendered_lines_parse_back(pattern in pattern_strategy(), seed in any::<u8>(), comment in "[ -~]{0,30}") {
            let k = key(seed);
            let line = render_line(&pattern, &k, comment.trim());
            let hosts = KnownHosts::parse(&line, "f").unwrap();
            prop_assert_eq!(&hosts.entries()[0].pattern, &pattern);
            prop_assert_eq!(hosts.entries()[0].key, k);
            prop_assert_eq!(hosts.entries()[0].comment.as_str(), comment.trim());
        }
    }
}
