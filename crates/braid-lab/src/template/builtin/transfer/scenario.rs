//! The scenarios of `braid bench transfer` (seed 002 §5, Fig. 6–8): each a
//! testbed and storage whose optimal concurrency is known by
//! construction, and the runs that measure it — a sweep of fixed (read,
//! network, write) counts for the static optimum, Braid's Marlin and
//! Falcon-style tuners, and the peer tools.
//!
//! The models behind the numbers:
//! - **read / write**: each emulated reader (writer) moves at most `PER`
//!   bytes/s and all together at most `TOTAL`, so throughput grows with
//!   the count up to `TOTAL / PER` workers and not beyond: the optimum is
//!   that count, and every worker past it is waste;
//! - **network**: the hosts' TCP buffer is capped, so one stream carries
//!   about window / RTT (the window a fraction of the buffer) and the
//!   link's rate needs rate × RTT / window streams; the sweep finds the
//!   count, whatever the kernel's window fraction is;
//! - **mixed**: all three at once, each stage with its own optimum;
//! - **small-files**, **large**: no emulation; Braid against rsync and
//!   rclone (and iperf3's memory-to-memory ceiling for large files);
//! - **small-files-wan**: the same tree over the network scenario's
//!   wide-area path, where the hosts' capped TCP buffers hold each
//!   connection to about buffer / RTT (the per-connection limit of the
//!   paper's wide-area runs): a single-connection tool (rsync) moves one
//!   stream's worth, a tool with parallel connections what the link
//!   carries;
//! - **competing**: 1 to 4 Braid transfers on one bottleneck: fairness
//!   (Jain's index) and the workers all of them use together.
//!
//! The sweep is a small grid around the constructed optimum (the optimum
//! is measured, not assumed: the grid only has to contain it), with the
//! static optimum the fastest setting, ties within 3% going to fewer
//! workers (Marlin's utility charges every worker).

use std::time::Duration;

use crate::param::Value;

/// A scenario of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Source storage is the bottleneck.
    Read,
    /// The network (per-stream limit) is.
    Network,
    /// Destination storage is.
    Write,
    /// Each stage has its own optimum.
    Mixed,
    /// Many small files.
    SmallFiles,
    /// Many small files over a wide-area path with a per-connection limit.
    SmallFilesWan,
    /// A large file on a clean path.
    Large,
    /// Several transfers share one bottleneck.
    Competing,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 8] = [
        Scenario::Read,
        Scenario::Network,
        Scenario::Write,
        Scenario::Mixed,
        Scenario::SmallFiles,
        Scenario::SmallFilesWan,
        Scenario::Large,
        Scenario::Competing,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Read => "read",
            Scenario::Network => "network",
            Scenario::Write => "write",
            Scenario::Mixed => "mixed",
            Scenario::SmallFiles => "small-files",
            Scenario::SmallFilesWan => "small-files-wan",
            Scenario::Large => "large",
            Scenario::Competing => "competing",
        }
    }

    /// The scenario named `name`.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One run of a scenario and what it is for.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// Braid with every stage pinned: (read, net, write).
    Fixed([u32; 3]),
    /// Braid's Marlin tuner.
    Marlin,
    /// Braid's Falcon-style tuner (one shared count).
    Falcon,
    /// A peer tool (`rsync`, `rclone`, `rclone_optimum`, `iperf3`).
    Peer(String),
    /// `n` Braid transfers at once.
    Competing(u32),
}

impl Role {
    /// A short label.
    pub fn label(&self) -> String {
        match self {
            Role::Fixed([r, n, w]) => format!("fixed {r}/{n}/{w}"),
            Role::Marlin => "braid (marlin)".into(),
            Role::Falcon => "braid (falcon)".into(),
            Role::Peer(p) => p.clone(),
            Role::Competing(n) => format!("{n} transfers"),
        }
    }
}

/// What a scenario runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioSpec {
    /// Which.
    pub scenario: Scenario,
    /// The link.
    pub link: String,
    /// TCP buffer cap on the hosts (0: none).
    pub stream_buffer: u64,
    /// Braid's emulated source storage (empty: none).
    pub emulate_read: String,
    /// Braid's emulated destination storage (empty: none).
    pub emulate_write: String,
    /// Files of the tree the tuners and peers copy.
    pub files: u64,
    /// Their size range.
    pub size: (u64, u64),
    /// Files of the (smaller) tree each sweep run copies: a rate is
    /// measured, and the sweep has many runs.
    pub sweep_files: u64,
    /// The grid of fixed (read, net, write) counts.
    pub sweep: [Vec<u32>; 3],
    /// Braid's chunk size: [`BENCH_CHUNK`].
    pub chunk_size: u64,
}

/// The chunk size the benchmark runs Braid with. A stage's throughput in
/// a probe interval counts whole chunks, so it is quantized to one chunk
/// per interval: with the default 4 MiB chunks and 1 s intervals that is
/// 33 Mbit/s, a quarter of a 134 Mbit/s storage bottleneck, noise enough
/// to walk the tuner past the optimum. With 1 MiB chunks the step is
/// 8 Mbit/s (6% there, less on faster stages), at a cost of per-chunk
/// overhead that stays small up to link rates (120 chunks/s at 1 Gbit/s).
pub const BENCH_CHUNK: u64 = 1 << 20;

/// The runs of the benchmark, each with its parameter values.
pub type Runs = Vec<(Role, Vec<(String, Value)>)>;

impl ScenarioSpec {
    /// The scenario's settings; `quick` shrinks data and grid for CI.
    pub fn new(scenario: Scenario, quick: bool) -> ScenarioSpec {
        const MIB: u64 = 1 << 20;
        let shrink = |full: u64, small: u64| if quick { small } else { full };
        let grid = |full: &[u32], small: &[u32]| if quick { small.to_vec() } else { full.to_vec() };
        let base = ScenarioSpec {
            scenario,
            link: "rtt=10ms,rate=1gbit".into(),
            stream_buffer: 0,
            emulate_read: String::new(),
            emulate_write: String::new(),
            files: shrink(16, 4),
            size: (32 * MIB, 32 * MIB),
            sweep_files: shrink(4, 2),
            sweep: [vec![], vec![], vec![]],
            chunk_size: BENCH_CHUNK,
        };
        match scenario {
            Scenario::Read => ScenarioSpec {
                emulate_read: "4MiB/s,16MiB/s".into(),
                sweep: [grid(&[2, 3, 4, 5, 6], &[2, 4, 6]), grid(&[1, 2], &[1]), grid(&[1, 2], &[1])],
                ..base
            },
            Scenario::Write => ScenarioSpec {
                emulate_write: "4MiB/s,16MiB/s".into(),
                sweep: [grid(&[1, 2], &[1]), grid(&[1, 2], &[1]), grid(&[2, 3, 4, 5, 6], &[2, 4, 6])],
                ..base
            },
            Scenario::Network => ScenarioSpec {
                link: "rtt=40ms,rate=300mbit".into(),
                stream_buffer: 256 << 10,
                // Long enough to see the search settle and hold: the network stage climbs to
                // its optimum over about 10 intervals (every change has a settle interval).
                files: shrink(32, 4),
                // A sweep run long enough for several whole intervals between set-up and the
                // partial last one: with 4 files (3.5 s here) its steady rate was the mean of one
                // or two intervals, and the writers' catching up after a stall put one at 344
                // Mbit/s on this 300 Mbit/s link, an optimum no tuner could be held to.
                sweep_files: shrink(10, 2),
                // One stream carries about 20 Mbit/s here (the buffer cap over the RTT, times
                // the kernel's window share), so the link needs about 15: the grid reaches well
                // past that (the optimum must be inside it, not at its edge). Storage is not the
                // bottleneck, so one reader or two and one writer cover it.
                sweep: [grid(&[1, 2], &[1]), grid(&[4, 8, 12, 16, 20, 24], &[4, 12, 20]), grid(&[1], &[1])],
                ..base
            },
            Scenario::Mixed => ScenarioSpec {
                link: "rtt=40ms,rate=300mbit".into(),
                stream_buffer: 256 << 10,
                emulate_read: "6MiB/s,24MiB/s".into(),
                emulate_write: "8MiB/s,24MiB/s".into(),
                sweep: [grid(&[3, 4, 5], &[4]), grid(&[4, 6, 8], &[4, 8]), grid(&[2, 3, 4], &[3])],
                ..base
            },
            Scenario::SmallFiles => ScenarioSpec {
                files: shrink(50_000, 5_000),
                size: (1000, 16_000),
                sweep_files: 0,
                ..base
            },
            // The network scenario's path and buffer cap (one connection carries about 20
            // Mbit/s of its 300): what a tool gains from parallel connections on a wide-area
            // path, with the per-file costs of the small-files tree.
            Scenario::SmallFilesWan => ScenarioSpec {
                link: "rtt=40ms,rate=300mbit".into(),
                stream_buffer: 256 << 10,
                files: shrink(50_000, 5_000),
                size: (1000, 16_000),
                sweep_files: 0,
                ..base
            },
            Scenario::Large => ScenarioSpec {
                link: "rtt=20ms,rate=500mbit".into(),
                files: 1,
                size: (shrink(1024, 256) * MIB, shrink(1024, 256) * MIB),
                sweep_files: 0,
                ..base
            },
            Scenario::Competing => ScenarioSpec {
                link: "rtt=20ms,rate=300mbit".into(),
                files: shrink(8, 3),
                sweep_files: 0,
                ..base
            },
        }
    }

    /// The fixed settings of the sweep.
    pub fn sweep_settings(&self) -> Vec<[u32; 3]> {
        let mut out = Vec::new();
        for &r in &self.sweep[0] {
            for &n in &self.sweep[1] {
                for &w in &self.sweep[2] {
                    out.push([r, n, w]);
                }
            }
        }
        out
    }

    /// Every run: the sweep (if any), Marlin, Falcon (where a sweep
    /// defines an optimum to compare it with), the peers, or the
    /// competing transfers. `common` goes into every run (security,
    /// probe interval, timeouts).
    pub fn runs(&self, common: &[(String, Value)], peers: bool) -> Runs {
        let env = |files: u64| -> Vec<(String, Value)> {
            let mut v = vec![
                ("link".to_string(), Value::Link(self.link.clone())),
                ("stream_buffer".to_string(), Value::Size(self.stream_buffer)),
                ("files".to_string(), Value::Int(files as i64)),
                ("file_size_min".to_string(), Value::Size(self.size.0)),
                ("file_size_max".to_string(), Value::Size(self.size.1)),
            ];
            v.extend(common.iter().cloned());
            v
        };
        let braid = |files: u64| -> Vec<(String, Value)> {
            let mut v = env(files);
            v.push(("chunk_size".to_string(), Value::Size(self.chunk_size)));
            v.push(("emulate_read".to_string(), Value::String(self.emulate_read.clone())));
            v.push(("emulate_write".to_string(), Value::String(self.emulate_write.clone())));
            v
        };
        let with = |mut v: Vec<(String, Value)>, extra: &[(&str, Value)]| {
            v.extend(extra.iter().map(|(k, x)| (k.to_string(), x.clone())));
            v
        };
        let mut runs: Runs = Vec::new();
        for [r, n, w] in self.sweep_settings() {
            let pins = [("read", Value::Int(r.into())), ("net", Value::Int(n.into())), ("write", Value::Int(w.into()))];
            runs.push((Role::Fixed([r, n, w]), with(braid(self.sweep_files), &pins)));
        }
        match self.scenario {
            Scenario::Competing => {
                for n in 1..=4u32 {
                    runs.push((Role::Competing(n), with(braid(self.files), &[("transfers", Value::Int(n.into()))])));
                }
            }
            Scenario::Large => {
                runs.push((Role::Marlin, with(braid(self.files), &[("compare_iperf3", Value::Bool(true))])));
            }
            _ => runs.push((Role::Marlin, braid(self.files))),
        }
        if !self.sweep[0].is_empty() {
            runs.push((Role::Falcon, with(braid(self.files), &[("tuner", Value::Enum("falcon".into()))])));
        }
        let storage_free = self.emulate_read.is_empty() && self.emulate_write.is_empty();
        if peers && storage_free && self.scenario != Scenario::Competing {
            let tool = |t: &str| ("tool", Value::Enum(t.into()));
            runs.push((Role::Peer("rsync".into()), with(env(self.files), &[tool("rsync")])));
            runs.push((Role::Peer("rclone".into()), with(env(self.files), &[tool("rclone")])));
            // rclone at a high --transfers: what a user who tunes it by
            // hand would pick for many files or a capped-window path.
            let many = ("rclone_transfers", Value::Int(16));
            runs.push((Role::Peer("rclone_16".into()), with(env(self.files), &[tool("rclone"), many])));
        }
        runs
    }
}

/// The probe interval the benchmark runs the tuners with by default: the
/// paper's 3 s makes a 15-interval convergence take 45 s per run; 1 s
/// keeps runs short while staying well above the 40 ms RTTs here (a
/// probe must span many round trips to measure a settled rate).
pub const BENCH_PROBE_INTERVAL: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::transfer::Transfer;
    use crate::template::Template;

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("fast"), None);
    }

    #[test]
    fn every_run_of_every_scenario_is_one_the_template_accepts() {
        let decls = Transfer.params();
        for quick in [false, true] {
            for s in Scenario::ALL {
                let spec = ScenarioSpec::new(s, quick);
                let runs = spec.runs(&[("encrypted".to_string(), Value::Bool(true))], true);
                assert!(runs.iter().any(|(r, _)| matches!(r, Role::Marlin | Role::Competing(_))), "{s:?}");
                for (role, values) in &runs {
                    for (name, v) in values {
                        let d = decls.iter().find(|d| &d.name == name).unwrap_or_else(|| panic!("{s:?} {role:?}: undeclared {name}"));
                        assert_eq!(d.ty.parse_text(&v.to_text()).as_ref(), Ok(v), "{s:?} {role:?} {name}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_sweep_contains_the_constructed_optimum_and_peers_only_run_without_emulated_storage() {
        let read = ScenarioSpec::new(Scenario::Read, false);
        assert!(read.sweep_settings().iter().any(|c| c[0] == 4), "16/4 = 4 readers");
        assert!(read.runs(&[], true).iter().all(|(r, _)| !matches!(r, Role::Peer(_))));
        let small = ScenarioSpec::new(Scenario::SmallFiles, false);
        assert_eq!(small.files, 50_000);
        let roles: Vec<String> = small.runs(&[], true).iter().map(|(r, _)| r.label()).collect();
        assert_eq!(roles, ["braid (marlin)", "rsync", "rclone", "rclone_16"]);
        let competing = ScenarioSpec::new(Scenario::Competing, true).runs(&[], true);
        assert_eq!(competing.len(), 4);
    }
}
