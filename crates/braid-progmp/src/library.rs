//! The schedulers shipped with Braid (thesis chapter 5) and a library of
//! loaded schedulers that connections choose from by name (thesis
//! §3.3.4, "Choosing a scheduler": load once, reuse for many
//! connections).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::diag::CompileError;
use crate::runtime::Program;

/// A scheduler shipped with Braid, as ProgMP source.
#[derive(Clone, Copy, Debug)]
pub struct Builtin {
    /// Its `SCHEDULER` name.
    pub name: &'static str,
    /// What it does, in a line.
    pub summary: &'static str,
    /// Where it comes from: a section of the thesis (seed 001, e.g.
    /// `5.2.2`), or for a scheduler beyond the thesis, the paper's key in
    /// `docs/bibliography.md` (e.g. `ECF`).
    pub section: &'static str,
    /// Its source.
    pub source: &'static str,
}

macro_rules! builtin {
    ($name:literal, $section:literal, $summary:literal) => {
        Builtin {
            name: $name,
            summary: $summary,
            section: $section,
            source: include_str!(concat!("../schedulers/", $name, ".progmp")),
        }
    };
}

/// Every shipped scheduler; the first, `min_rtt`, is the default.
pub const BUILTINS: &[Builtin] = &[
    builtin!(
        "min_rtt",
        "5.2.2",
        "lowest RTT among subflows with room in their window (the default)"
    ),
    builtin!(
        "min_rtt_backup",
        "5.2.2",
        "lowest RTT; backup subflows only when no other subflow exists"
    ),
    builtin!(
        "round_robin",
        "5.2.3",
        "subflows take turns, a quota of packets each"
    ),
    builtin!(
        "round_robin_cyclic",
        "5.2.3",
        "subflows take turns by a cyclic index in R1"
    ),
    builtin!(
        "redundant",
        "5.2.4",
        "every packet on every available subflow"
    ),
    builtin!(
        "opportunistic_redundant",
        "5.4.2",
        "a packet on every subflow with room when first scheduled"
    ),
    builtin!(
        "redundant_if_q_empty",
        "5.4.2",
        "lowest RTT; resend in flight packets on idle subflows once Q is empty"
    ),
    builtin!(
        "active_probing",
        "5.3",
        "lowest RTT; probe stale subflows with the last packet of a burst"
    ),
    builtin!(
        "selective_compensation",
        "5.5",
        "lowest RTT; at the signalled end of a flow (R1 = 1) resend what only slow subflows carry"
    ),
    builtin!(
        "rtt_preference_aware",
        "5.6",
        "backup subflows only while no preferred one has an RTT below R1 ms"
    ),
    builtin!(
        "rtt_preference_aware_advanced",
        "5.6",
        "backup only if under R1 ms while the best preferred one is over R2 ms"
    ),
    builtin!(
        "tap",
        "5.7",
        "preferred subflows first; backups only to reach the target throughput R1 (KB/s)"
    ),
    builtin!("one_way_delay", "5.8", "lowest outgoing one-way delay"),
    builtin!(
        "http2_aware",
        "5.9",
        "per-packet USER picks the strategy: 0 avoid high RTT, 1 lowest RTT, 2 preferred only"
    ),
    builtin!(
        "ecf",
        "ECF",
        "lowest RTT, but hold a packet for the fastest subflow when it would finish the rest first"
    ),
    builtin!(
        "ecf_tail",
        "ECF",
        "ecf; once Q is empty the fastest subflow resends what only subflows of over twice its RTT carry"
    ),
];

/// The name of the default scheduler.
pub const DEFAULT_SCHEDULER: &str = "min_rtt";

/// The shipped scheduler called `name` (`"default"` means
/// [`DEFAULT_SCHEDULER`]).
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    let name = if name == "default" {
        DEFAULT_SCHEDULER
    } else {
        name
    };
    BUILTINS.iter().find(|b| b.name == name)
}

/// Why a scheduler could not be loaded or found.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// The source does not compile.
    #[error("scheduler does not compile: {0}")]
    Compile(#[from] CompileError),
    /// A scheduler loaded into a library needs a name to be chosen by.
    #[error("scheduler has no name; start it with `SCHEDULER name;`")]
    Unnamed,
    /// No scheduler of that name is loaded or shipped.
    #[error("no scheduler named {name:?}; known: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
}

/// Loaded schedulers by name. Shipped schedulers are available without
/// loading and compiled on first use; a loaded scheduler of the same name
/// replaces one (connections already using the old one keep it).
///
/// ```
/// use braid_progmp::{Library, Scheduler};
/// let mut lib = Library::new();
/// let redundant = lib.get("redundant").unwrap();
/// let mine = lib.load("SCHEDULER first; SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap();
/// assert_eq!(mine.name(), Some("first"));
/// // Two connections share one compiled program.
/// let (a, b) = (Scheduler::new(redundant.clone(), 1), Scheduler::new(redundant, 2));
/// assert!(std::sync::Arc::ptr_eq(a.program(), b.program()));
/// ```
#[derive(Debug, Default)]
pub struct Library {
    programs: BTreeMap<String, Arc<Program>>,
}

impl Library {
    /// A library with the shipped schedulers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compiles `source` and makes it available under its `SCHEDULER`
    /// name.
    pub fn load(&mut self, source: &str) -> Result<Arc<Program>, LibraryError> {
        let program = Program::compile(source)?;
        let name = program.name().ok_or(LibraryError::Unnamed)?.to_string();
        let program = Arc::new(program);
        self.programs.insert(name, program.clone());
        Ok(program)
    }

    /// The scheduler called `name`: a loaded one, else a shipped one.
    pub fn get(&mut self, name: &str) -> Result<Arc<Program>, LibraryError> {
        if let Some(p) = self.programs.get(name) {
            return Ok(p.clone());
        }
        let b = builtin(name).ok_or_else(|| LibraryError::Unknown {
            name: name.to_string(),
            known: self.names().join(", "),
        })?;
        let program = Arc::new(Program::compile(b.source)?);
        self.programs.insert(name.to_string(), program.clone());
        Ok(program)
    }

    /// Names of all loaded and shipped schedulers, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.programs.keys().cloned().collect();
        names.extend(BUILTINS.iter().map(|b| b.name.to_string()));
        names.sort();
        names.dedup();
        names
    }
}

/// Canonical form of a scheduler name: `minRTT`, `min-rtt` and `min_rtt`
/// all name the shipped `min_rtt`.
fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Why [`load_scheduler`] has no scheduler for what it was given.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file exists but could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file as given.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid ProgMP scheduler.
    #[error("{path}: not a valid ProgMP scheduler:\n{rendered}")]
    Invalid {
        /// The file as given.
        path: String,
        /// Every error, rendered with its position and the source line
        /// ([`CompileError::render`]).
        rendered: String,
    },
    /// Neither an existing file nor a shipped scheduler's name.
    #[error("{name}: no such file, and not a shipped scheduler; expected a .progmp file or one of: {known}")]
    Unknown {
        /// The name as given.
        name: String,
        /// The shipped schedulers' names, comma-separated.
        known: String,
    },
    /// A shipped scheduler does not compile (a bug in Braid, not in the
    /// input).
    #[error("shipped scheduler {name} does not compile: {error}")]
    Shipped {
        /// The shipped scheduler.
        name: &'static str,
        /// Why.
        error: CompileError,
    },
}

/// The scheduler a user names on a command line or in a study: an
/// existing file is compiled as ProgMP, anything else names a shipped
/// scheduler (underscores, dashes and case do not matter; `default` is
/// [`DEFAULT_SCHEDULER`]). Returns the scheduler's name (the file's
/// `SCHEDULER` name, else the path as given; a shipped one's canonical
/// name) and its program.
///
/// ```
/// let (name, _program) = braid_progmp::load_scheduler("minRTT").unwrap();
/// assert_eq!(name, "min_rtt");
/// let e = braid_progmp::load_scheduler("fastest").unwrap_err();
/// assert!(e.to_string().contains("one of: min_rtt"));
/// ```
pub fn load_scheduler(name_or_file: &str) -> Result<(String, Arc<Program>), LoadError> {
    let path = std::path::Path::new(name_or_file);
    if path.is_file() {
        let source = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: name_or_file.to_string(),
            source,
        })?;
        let program = Program::compile(&source).map_err(|e| LoadError::Invalid {
            path: name_or_file.to_string(),
            rendered: e.render(name_or_file, &source),
        })?;
        let name = program
            .name()
            .map(str::to_string)
            .unwrap_or_else(|| name_or_file.to_string());
        return Ok((name, Arc::new(program)));
    }
    let wanted = squash(if name_or_file == "default" {
        DEFAULT_SCHEDULER
    } else {
        name_or_file
    });
    let Some(builtin) = BUILTINS.iter().find(|b| squash(b.name) == wanted) else {
        let known: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
        return Err(LoadError::Unknown {
            name: name_or_file.to_string(),
            known: known.join(", "),
        });
    };
    let program = Program::compile(builtin.source).map_err(|error| LoadError::Shipped {
        name: builtin.name,
        error,
    })?;
    Ok((builtin.name.to_string(), Arc::new(program)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scheduler_loads_under_its_name_in_any_spelling() {
        for b in BUILTINS {
            assert_eq!(load_scheduler(b.name).unwrap().0, b.name);
            assert_eq!(
                load_scheduler(&b.name.to_uppercase().replace('_', "-"))
                    .unwrap()
                    .0,
                b.name
            );
        }
        assert_eq!(load_scheduler("default").unwrap().0, DEFAULT_SCHEDULER);
    }

    #[test]
    fn an_unknown_name_lists_the_shipped_ones() {
        match load_scheduler("fastest") {
            Err(LoadError::Unknown { name, known }) => {
                assert_eq!(name, "fastest");
                assert_eq!(known.split(", ").count(), BUILTINS.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_compiles_and_a_bad_one_says_where() {
        let dir = std::env::temp_dir().join(format!("progmp-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.progmp");
        std::fs::write(&good, builtin("redundant").unwrap().source).unwrap();
        assert_eq!(
            load_scheduler(good.to_str().unwrap()).unwrap().0,
            "redundant"
        );
        let unnamed = dir.join("unnamed.progmp");
        std::fs::write(&unnamed, "SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap();
        assert_eq!(
            load_scheduler(unnamed.to_str().unwrap()).unwrap().0,
            unnamed.to_str().unwrap()
        );
        let bad = dir.join("bad.progmp");
        std::fs::write(&bad, "SCHEDULER broken;\nVAR x = ;").unwrap();
        let e = load_scheduler(bad.to_str().unwrap()).unwrap_err();
        assert!(matches!(e, LoadError::Invalid { .. }), "{e:?}");
        assert!(e.to_string().contains("bad.progmp:2:"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
