//! The shipped rule files (`rules/*.tarl`) with the schema and view size
//! each needs, and their lines of code next to the thesis's Table 7.3.

use crate::check::compile;
use crate::error::TarlError;
use crate::ir::CompiledRule;
use crate::schema::Schema;
use crate::sim::{geometric_schema, tree_schema};

/// A rule shipped with the crate.
#[derive(Clone, Copy, Debug)]
pub struct Shipped {
    /// Its name (the file stem).
    pub name: &'static str,
    /// The rule text.
    pub source: &'static str,
    /// Lines of code of the thesis's version (Frömmgen 2018, Table 7.3).
    pub thesis_loc: u32,
    /// The smallest view size the rule is exact with.
    pub k: u32,
    /// The schema it is written against.
    pub schema: fn() -> Schema,
}

fn geometric_undirected() -> Schema {
    geometric_schema(false)
}

fn geometric_directed() -> Schema {
    geometric_schema(true)
}

/// Every shipped rule.
pub const SHIPPED: &[Shipped] = &[
    Shipped {
        name: "gabriel",
        source: include_str!("../rules/gabriel.tarl"),
        thesis_loc: 9,
        k: 1,
        schema: geometric_undirected,
    },
    Shipped {
        name: "rng",
        source: include_str!("../rules/rng.tarl"),
        thesis_loc: 9,
        k: 1,
        schema: geometric_undirected,
    },
    Shipped {
        name: "yao",
        source: include_str!("../rules/yao.tarl"),
        thesis_loc: 13,
        k: 1,
        schema: geometric_directed,
    },
    Shipped {
        name: "ktc",
        source: include_str!("../rules/ktc.tarl"),
        thesis_loc: 17,
        k: 2,
        schema: geometric_undirected,
    },
    Shipped {
        name: "low_delay_jump",
        source: include_str!("../rules/low_delay_jump.tarl"),
        thesis_loc: 9,
        k: 1,
        schema: tree_schema,
    },
];

/// The shipped rule called `name`.
pub fn shipped(name: &str) -> Option<&'static Shipped> {
    SHIPPED.iter().find(|s| s.name == name)
}

impl Shipped {
    /// Compiles the rule against its schema.
    ///
    /// # Errors
    /// Never for the shipped files (tested); the type is the compiler's.
    pub fn compile(&self) -> Result<CompiledRule, TarlError> {
        compile(self.name, self.source, &(self.schema)())
    }

    /// Its lines of code.
    pub fn loc(&self) -> usize {
        lines_of_code(self.source)
    }
}

/// Lines that are neither blank nor only a comment.
pub fn lines_of_code(src: &str) -> usize {
    src.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('#'))
        .count()
}
