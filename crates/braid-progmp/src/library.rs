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
    /// The thesis section it comes from.
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
