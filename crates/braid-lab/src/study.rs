//! Study files: which template to run, over which value lists, how often.
//!
//! A study is one template, value lists for some of its parameters under
//! `[configuration]` and `[environment]`, a number of repetitions and a base
//! seed. Its experiments are the Cartesian product of the lists, repeated
//! ([`crate::plan`] expands it). A study file is validated whole before
//! anything runs: every error names the file, the line and column, the key
//! and the allowed form.
//!
//! ```toml
//! name = "redundancy"            # optional; default: the file stem
//! template = "sim-multipath"     # a built-in, or the path of a command-template TOML file
//! repetitions = 10               # >= 1, default 1
//! seed = 1                       # base seed, default 0
//! timeout = "60s"                # per experiment; default 10 x expected, at least 30 s
//! exclusive = true               # default: what the template requires
//! [configuration]                # the template's configuration parameters: a list or one value
//! scheduler = ["minrtt", "redundant"]
//! [environment]                  # the template's environment parameters
//! path1 = ["rtt=20ms,rate=50mbit", "rtt=20ms,rate=50mbit,loss=2%"]
//! [[exclude]]                    # optional, any number: combinations not to plan
//! scheduler = "redundant"        # an experiment matching every key of one table
//! path1 = ["rtt=20ms,rate=50mbit,loss=2%"]  # (a list: any of its values) is left out
//! [slurm]                        # optional: read by the Slurm executor (runner::slurm::StudySlurm)
//! constraint = "emu"
//! ```
//!
//! Some combinations of the lists do not exist (the `dash` template's
//! browser players fetch over TCP only, a ProgMP scheduler applies to
//! multipath only): each `[[exclude]]` table names parameters the study
//! lists, with one value or a list of values from the study's own lists, and
//! the experiments matching all of it are not planned, counted or run
//! ([`exclude`] has the details). An exclude that names a parameter the
//! study does not list, a value not in its list, nothing at all, or that
//! removes no experiment the other excludes keep, is an error; so is
//! excluding everything. The remaining experiments keep their ids and seeds.
//!
//! Instead of `template = "..."`, a `[template]` table may define a command
//! template inline (the format of [`CommandTemplate`]). A parameter the
//! study does not list takes the template's default. Relative paths (a
//! template file, a trace) are relative to the study file's directory.
//!
//! ```
//! use std::sync::Arc;
//! use braid_lab::param::{ParamDecl, ParamType, Value};
//! use braid_lab::study::{Study, StudyError};
//! use braid_lab::template::{Context, Template, TemplateError};
//!
//! struct Echo;
//! impl Template for Echo {
//!     fn name(&self) -> &str { "echo" }
//!     fn description(&self) -> &str { "records x" }
//!     fn params(&self) -> Vec<ParamDecl> {
//!         vec![
//!             ParamDecl::config("x", ParamType::int(), Value::Int(1)),
//!             ParamDecl::env("rate", ParamType::Size, Value::Size(1 << 20)),
//!         ]
//!     }
//!     fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
//!         let x = ctx.params.float("x")?;
//!         ctx.record("x", x);
//!         Ok(())
//!     }
//! }
//!
//! let templates: Vec<Arc<dyn Template>> = vec![Arc::new(Echo)];
//! let text = "template = \"echo\"\nrepetitions = 3\n[configuration]\nx = [1, 2]\n";
//! let study = Study::parse(text, "demo.toml".as_ref(), &templates).unwrap();
//! assert_eq!((study.name.as_str(), study.count()), ("demo", 6));
//!
//! let bad = "template = \"echo\"\n[environment]\nx = [1]\n";
//! let err = Study::parse(bad, "demo.toml".as_ref(), &templates).unwrap_err();
//! assert!(matches!(err, StudyError::WrongTable { .. }));
//! assert!(err.to_string().starts_with("demo.toml:3:1: "), "{err}");
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub mod exclude;

pub use exclude::Exclude;

use crate::param::{parse_duration, ParamDecl, ParamType, Params, Role, Value};
use crate::search::{Axis, Grid};
use crate::template::command::{CommandTemplate, CommandTemplateError};
use crate::template::Template;

/// The most experiments one study may expand to: a plan is held in memory,
/// and a study beyond this is almost certainly a typo in a list.
pub const MAX_EXPERIMENTS: usize = 1_000_000;

/// The keys a study file may have at its top level.
pub const STUDY_KEYS: &[&str] = &[
    "name",
    "description",
    "template",
    "repetitions",
    "seed",
    "timeout",
    "exclusive",
    "configuration",
    "environment",
    "exclude",
    "slurm",
];

/// A place in a file: 1-based line and column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file (shared: every error of a file names it).
    pub file: Arc<Path>,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
/// An offset past the end maps to the end; one inside a character to that
/// character.
///
/// ```
/// assert_eq!(braid_lab::study::line_col("a = 1\nbé = 2\n", 10), (2, 4));
/// ```
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A top-level field (or a command template's field) of the wrong type or
/// out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: `{key}` must be {allowed}, not `{got}`")]
pub struct FieldError {
    /// Where the value is.
    pub at: Location,
    /// The key.
    pub key: String,
    /// The allowed form.
    pub allowed: String,
    /// The value as written (clipped).
    pub got: String,
}

/// A study file or command template that is not valid TOML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: not valid TOML: {message}")]
pub struct SyntaxError {
    /// Where the parser stopped.
    pub at: Location,
    /// The parser's message.
    pub message: String,
}

/// Why a study file (or a study built in code) is not valid.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// The file could not be read.
    #[error("{}: cannot read the study file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML.
    #[error(transparent)]
    Syntax(#[from] SyntaxError),
    /// A top-level key a study file does not have.
    #[error("{at}: unknown key `{key}`; a study file has: {}", allowed.join(", "))]
    UnknownKey {
        /// Where.
        at: Location,
        /// The key.
        key: String,
        /// The keys a study file has.
        allowed: Vec<String>,
    },
    /// A top-level field of the wrong type or out of range.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// `repetitions = 0`.
    #[error("{at}: `repetitions = 0`: every experiment runs at least once; expected a whole number >= 1")]
    ZeroRepetitions {
        /// Where.
        at: Location,
    },
    /// Neither `template = "..."` nor a `[template]` table.
    #[error(
        "{at}: no template: add `template = \"NAME\"` (built-in: {}), `template = \"PATH.toml\"` or a [template] table",
        builtins.join(", ")
    )]
    NoTemplate {
        /// The start of the file.
        at: Location,
        /// The templates a name can refer to.
        builtins: Vec<String>,
    },
    /// `template = "name"` names no known template.
    #[error(
        "{at}: unknown template `{name}`; expected a built-in template ({}) or the path of a command-template file ending in .toml",
        builtins.join(", ")
    )]
    UnknownTemplate {
        /// Where.
        at: Location,
        /// The name as written.
        name: String,
        /// The templates a name can refer to.
        builtins: Vec<String>,
    },
    /// The command template (a file, or the inline `[template]` table) is
    /// not valid.
    #[error("{at}: template: {source}")]
    Template {
        /// Where the study names or defines it.
        at: Location,
        /// What is wrong with it (with its own file and line).
        source: Box<CommandTemplateError>,
    },
    /// A parameter the template does not have.
    #[error("{at}: [{}] `{key}`: template `{template}` has no such parameter; its {} parameters: {}", table.name(), table.name(), names_or_none(allowed))]
    UnknownParam {
        /// Where.
        at: Location,
        /// The table it is listed under.
        table: Role,
        /// The key.
        key: String,
        /// The template.
        template: String,
        /// The template's parameters of that role.
        allowed: Vec<String>,
    },
    /// A parameter listed under the other table.
    #[error("{at}: `{key}` is a{} {} parameter of template `{template}`: list it under [{}], not [{}]",
        if matches!(belongs, Role::Environment) { "n" } else { "" }, belongs.name(), belongs.name(), table.name())]
    WrongTable {
        /// Where.
        at: Location,
        /// The key.
        key: String,
        /// Where it is listed.
        table: Role,
        /// Where it belongs.
        belongs: Role,
        /// The template.
        template: String,
    },
    /// A value of the wrong type, or out of its allowed range.
    #[error("{at}: `{key}`: {why}")]
    BadValue {
        /// Where the value is.
        at: Location,
        /// The parameter.
        key: String,
        /// What is wrong, with the allowed form.
        why: String,
        /// The allowed form.
        allowed: String,
    },
    /// A link parameter's value is not a valid link spec.
    #[error("{at}: `{key}`: bad link spec {why}")]
    BadLink {
        /// Where the value is.
        at: Location,
        /// The parameter.
        key: String,
        /// What is wrong, with the allowed form.
        why: String,
        /// The allowed form.
        allowed: String,
    },
    /// A trace parameter names a file that does not exist.
    #[error("{at}: `{key}`: trace file {} does not exist; expected the path of an existing file (relative to the study file)", path.display())]
    MissingTrace {
        /// Where the value is.
        at: Location,
        /// The parameter.
        key: String,
        /// The path looked at.
        path: PathBuf,
    },
    /// `key = []`.
    #[error("{at}: `{key}`: empty list; expected one value or a non-empty list of {allowed}")]
    EmptyList {
        /// Where.
        at: Location,
        /// The parameter.
        key: String,
        /// The allowed form of one value.
        allowed: String,
    },
    /// The same value twice in one list (compared in canonical form, so
    /// `65536` and `"64KiB"` are the same size).
    #[error("{at}: `{key}`: `{value}` is listed twice (first at line {first_line}); each value once")]
    DuplicateValue {
        /// Where the repeat is.
        at: Location,
        /// The parameter.
        key: String,
        /// The value, in canonical form.
        value: String,
        /// The line where it was first.
        first_line: usize,
    },
    /// `[[exclude]]` names a parameter the template does not have.
    #[error(
        "{at}: [[exclude]] `{key}`: template `{template}` has no such parameter; an exclude names parameters the study lists under [configuration] or [environment]: {}",
        names_or_none(listed)
    )]
    ExcludeUnknownParam {
        /// Where.
        at: Location,
        /// The key.
        key: String,
        /// The template.
        template: String,
        /// The parameters the study lists.
        listed: Vec<String>,
    },
    /// `[[exclude]]` names a parameter of the template the study does not
    /// list (every experiment has its default).
    #[error(
        "{at}: [[exclude]] `{key}`: the study does not vary or set `{key}` (every experiment has the template's default, `{default}`); an exclude names parameters the study lists under [configuration] or [environment]: {}",
        names_or_none(listed)
    )]
    ExcludeUnlisted {
        /// Where.
        at: Location,
        /// The key.
        key: String,
        /// The template's default, in canonical form.
        default: String,
        /// The parameters the study lists.
        listed: Vec<String>,
    },
    /// `[[exclude]]` gives a value the study's list of that parameter does
    /// not hold (a typo: it would exclude nothing).
    #[error("{at}: [[exclude]] `{key}`: `{value}` is not in the study's list of `{key}`; expected one of: {}", allowed.join(", "))]
    ExcludeValue {
        /// Where the value is.
        at: Location,
        /// The parameter.
        key: String,
        /// The value, in canonical form.
        value: String,
        /// The study's values of the parameter, in canonical form.
        allowed: Vec<String>,
    },
    /// An empty `[[exclude]]` table (it would match every experiment).
    #[error(
        "{at}: empty [[exclude]]: expected `PARAMETER = VALUE` or `PARAMETER = [VALUES]` for one or more parameters the study lists"
    )]
    EmptyExclude {
        /// Where.
        at: Location,
    },
    /// An `[[exclude]]` whose every experiment the other excludes remove
    /// already.
    #[error(
        "{at}: this [[exclude]] removes no experiment: the [[exclude]] at line{} {} remove{} every experiment it matches already; delete it or correct its values",
        if by.len() == 1 { "" } else { "s" },
        by.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "),
        if by.len() == 1 { "s" } else { "" }
    )]
    ExcludeRemovesNothing {
        /// Where (its first key).
        at: Location,
        /// The lines of the excludes it overlaps.
        by: Vec<usize>,
    },
    /// The `[[exclude]]` tables remove every experiment.
    #[error("{at}: the [[exclude]] tables remove all {count} combinations of the lists; nothing would run: narrow an [[exclude]]")]
    AllExcluded {
        /// Where the first exclude is.
        at: Location,
        /// How many combinations the lists make.
        count: u128,
    },
    /// The product of the lists times the repetitions is too large.
    #[error(
        "{at}: the study expands to {count} experiments; at most {max} are allowed: shorten a list or the repetitions"
    )]
    TooLarge {
        /// The start of the file.
        at: Location,
        /// How many it would be.
        count: u128,
        /// The limit ([`MAX_EXPERIMENTS`]).
        max: usize,
    },
    /// A study built in code ([`Study::from_values`]) is not valid.
    #[error("study `{study}`: {why}")]
    Invalid {
        /// The study.
        study: String,
        /// What is wrong.
        why: String,
    },
}

fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl StudyError {
    /// Where in which file the error is, when it is in a file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            StudyError::Read { .. } | StudyError::Invalid { .. } => None,
            StudyError::Field(f) => Some(&f.at),
            StudyError::Syntax(e) => Some(&e.at),
            StudyError::UnknownKey { at, .. }
            | StudyError::ZeroRepetitions { at }
            | StudyError::NoTemplate { at, .. }
            | StudyError::UnknownTemplate { at, .. }
            | StudyError::Template { at, .. }
            | StudyError::UnknownParam { at, .. }
            | StudyError::WrongTable { at, .. }
            | StudyError::BadValue { at, .. }
            | StudyError::BadLink { at, .. }
            | StudyError::MissingTrace { at, .. }
            | StudyError::EmptyList { at, .. }
            | StudyError::DuplicateValue { at, .. }
            | StudyError::ExcludeUnknownParam { at, .. }
            | StudyError::ExcludeUnlisted { at, .. }
            | StudyError::ExcludeValue { at, .. }
            | StudyError::EmptyExclude { at }
            | StudyError::ExcludeRemovesNothing { at, .. }
            | StudyError::AllExcluded { at, .. }
            | StudyError::TooLarge { at, .. } => Some(at),
        }
    }
}

/// One parameter's values in a study.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamValues {
    /// The template's declaration.
    pub decl: ParamDecl,
    /// The values, in the order listed (at least one; no two alike).
    pub values: Vec<Value>,
    /// Whether the study lists it (else `values` is the default alone).
    pub listed: bool,
}

/// A validated study: a template and value lists for all its parameters.
pub struct Study {
    /// The study's name (the file stem unless the file says `name`).
    pub name: String,
    /// One line about it (`description`), possibly empty.
    pub description: String,
    /// The study file, when it came from one.
    pub path: Option<PathBuf>,
    /// The study file verbatim (for a study built in code: an equivalent
    /// study file naming the template).
    pub text: String,
    /// The template.
    pub template: Arc<dyn Template>,
    /// Every parameter of the template, in its declared order.
    pub params: Vec<ParamValues>,
    /// The combinations not planned (`[[exclude]]`), in file order.
    pub excludes: Vec<Exclude>,
    /// How often each configuration runs in each environment (>= 1).
    pub repetitions: u32,
    /// The base seed every experiment's seed derives from.
    pub seed: u64,
    /// Per-experiment timeout (`None`: derived from the expected duration).
    pub timeout: Option<Duration>,
    /// Whether experiments run alone (`None`: the template's requirement).
    pub exclusive: Option<bool>,
}

impl fmt::Debug for Study {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Study")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("template", &self.template.name())
            .field("params", &self.params)
            .field("excludes", &self.excludes)
            .field("repetitions", &self.repetitions)
            .field("seed", &self.seed)
            .field("timeout", &self.timeout)
            .field("exclusive", &self.exclusive)
            .finish_non_exhaustive()
    }
}

impl Study {
    /// Read and validate a study file; `templates` are the templates
    /// `template = "NAME"` may name.
    pub fn load(path: &Path, templates: &[Arc<dyn Template>]) -> Result<Study, StudyError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| StudyError::Read { path: path.to_path_buf(), source })?;
        Study::parse(&text, path, templates)
    }

    /// [`load`](Self::load) with the built-in templates.
    pub fn load_builtin(path: &Path) -> Result<Study, StudyError> {
        Study::load(path, &crate::template::builtins())
    }

    /// Validate a study file's text; `path` is the file's path (for
    /// messages, the default name, and the directory relative paths start
    /// from).
    pub fn parse(text: &str, path: &Path, templates: &[Arc<dyn Template>]) -> Result<Study, StudyError> {
        let src = Source { file: path, text };
        let doc = src.parse_table()?;
        let doc = doc.get_ref();
        for (key, _) in entries(doc) {
            if !STUDY_KEYS.contains(&key.get_ref().as_ref()) {
                return Err(StudyError::UnknownKey {
                    at: src.at(key.span()),
                    key: key.get_ref().to_string(),
                    allowed: STUDY_KEYS.iter().map(|s| s.to_string()).collect(),
                });
            }
        }
        let base = path.parent().unwrap_or(Path::new(""));
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).filter(|s| !s.is_empty());
        let name = match doc.get("name") {
            Some(v) => name_field(&src, "name", v)?,
            None => stem.unwrap_or_else(|| "study".to_string()),
        };
        let description = match doc.get("description") {
            Some(v) => str_field(&src, "description", v, "a string")?.to_string(),
            None => String::new(),
        };
        let repetitions = match doc.get("repetitions") {
            Some(v) => {
                let n = int_field(&src, "repetitions", v, 0, u32::MAX.into(), "a whole number >= 1")?;
                if n == 0 {
                    return Err(StudyError::ZeroRepetitions { at: src.at(v.span()) });
                }
                n as u32
            }
            None => 1,
        };
        let seed = match doc.get("seed") {
            Some(v) => int_field(&src, "seed", v, 0, i64::MAX as u64, "a whole number >= 0")?,
            None => 0,
        };
        let timeout = doc.get("timeout").map(|v| duration_field(&src, "timeout", v)).transpose()?;
        let exclusive = doc.get("exclusive").map(|v| bool_field(&src, "exclusive", v)).transpose()?;
        let template = resolve_template(&src, doc, base, &name, templates)?;

        let decls = template.params();
        let mut listed: HashMap<String, Vec<Value>> = HashMap::new();
        for role in [Role::Configuration, Role::Environment] {
            let Some(table) = doc.get(role.name()) else { continue };
            let DeValue::Table(table) = table.get_ref() else {
                return Err(FieldError {
                    at: src.at(table.span()),
                    key: role.name().to_string(),
                    allowed: format!("a table ([{}]) of parameter value lists", role.name()),
                    got: src.snippet(table.span()),
                }
                .into());
            };
            for (key, value) in entries(table) {
                let key_name = key.get_ref().as_ref();
                let decl = check_param(&src, key, role, &decls, template.name())?;
                listed.insert(key_name.to_string(), value_list(&src, base, decl, key_name, value)?);
            }
        }
        let params: Vec<ParamValues> = decls
            .into_iter()
            .map(|decl| match listed.remove(&decl.name) {
                Some(values) => ParamValues { decl, values, listed: true },
                None => ParamValues { values: vec![decl.default.clone()], decl, listed: false },
            })
            .collect();
        let excludes = exclude::parse(&src, base, doc, &params, template.name())?;
        let study = Study {
            name,
            description,
            path: Some(path.to_path_buf()),
            text: text.to_string(),
            template,
            params,
            excludes,
            repetitions,
            seed,
            timeout,
            exclusive,
        };
        exclude::check(study.grid().axes(), &study.excludes)?;
        let count = study.count_u128();
        if count > MAX_EXPERIMENTS as u128 {
            return Err(StudyError::TooLarge { at: src.at(0..0), count, max: MAX_EXPERIMENTS });
        }
        Ok(study)
    }

    /// A study built in code (a bench command's one-experiment study):
    /// `values` lists some of the template's parameters (the rest take
    /// their defaults). Its [`text`](Self::text) is an equivalent study
    /// file naming the template by name.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use braid_lab::param::{ParamDecl, ParamType, Value};
    /// # use braid_lab::template::{Context, Template, TemplateError};
    /// # struct Echo;
    /// # impl Template for Echo {
    /// #     fn name(&self) -> &str { "echo" }
    /// #     fn description(&self) -> &str { "" }
    /// #     fn params(&self) -> Vec<ParamDecl> { vec![ParamDecl::config("x", ParamType::int(), Value::Int(1))] }
    /// #     fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> { Ok(()) }
    /// # }
    /// use braid_lab::study::Study;
    /// let study = Study::from_values("bench", Arc::new(Echo), &[("x", vec![Value::Int(2), Value::Int(3)])], 1, 0).unwrap();
    /// assert_eq!(study.count(), 2);
    /// assert!(Study::from_values("bench", Arc::new(Echo), &[("y", vec![Value::Int(2)])], 1, 0).is_err());
    /// ```
    pub fn from_values(
        name: &str,
        template: Arc<dyn Template>,
        values: &[(&str, Vec<Value>)],
        repetitions: u32,
        seed: u64,
    ) -> Result<Study, StudyError> {
        let invalid = |why: String| StudyError::Invalid { study: name.to_string(), why };
        if name.trim().is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if repetitions == 0 {
            return Err(invalid("repetitions is 0; every experiment runs at least once".into()));
        }
        if i64::try_from(seed).is_err() {
            return Err(invalid(format!("seed {seed} is above {}, the largest a study file can hold", i64::MAX)));
        }
        let decls = template.params();
        for (key, _) in values {
            if !decls.iter().any(|d| d.name == *key) {
                let known: Vec<String> = decls.iter().map(|d| d.name.clone()).collect();
                return Err(invalid(format!(
                    "template `{}` has no parameter `{key}`; its parameters: {}",
                    template.name(),
                    names_or_none(&known)
                )));
            }
            if values.iter().filter(|(k, _)| k == key).count() > 1 {
                return Err(invalid(format!("`{key}` is given twice")));
            }
        }
        let mut params = Vec::with_capacity(decls.len());
        for decl in decls {
            let Some((_, list)) = values.iter().find(|(k, _)| *k == decl.name) else {
                params.push(ParamValues { values: vec![decl.default.clone()], decl, listed: false });
                continue;
            };
            if list.is_empty() {
                return Err(invalid(format!("`{}`: empty list; expected {}", decl.name, decl.ty.allowed_form())));
            }
            for (i, v) in list.iter().enumerate() {
                check_typed(&decl, v).map_err(|why| invalid(format!("`{}`: {why}", decl.name)))?;
                if list[..i].iter().any(|w| w.to_text() == v.to_text()) {
                    return Err(invalid(format!("`{}`: `{v}` is listed twice", decl.name)));
                }
            }
            params.push(ParamValues { decl, values: list.clone(), listed: true });
        }
        let mut study = Study {
            name: name.to_string(),
            description: String::new(),
            path: None,
            text: String::new(),
            template,
            params,
            excludes: Vec::new(),
            repetitions,
            seed,
            timeout: None,
            exclusive: None,
        };
        let count = study.count_u128();
        if count > MAX_EXPERIMENTS as u128 {
            return Err(invalid(format!("it expands to {count} experiments; at most {MAX_EXPERIMENTS} are allowed")));
        }
        study.text = study.to_toml();
        Ok(study)
    }

    /// The values of the parameter `name`.
    pub fn param(&self, name: &str) -> Option<&ParamValues> {
        self.params.iter().find(|p| p.decl.name == name)
    }

    /// The parameters of one role, in declared order.
    pub fn params_of(&self, role: Role) -> impl Iterator<Item = &ParamValues> {
        self.params.iter().filter(move |p| p.decl.role == role)
    }

    /// How many configurations: the product of the configuration lists
    /// (before any `[[exclude]]`; [`excluded`](Self::excluded) says how
    /// many experiments the excludes remove).
    pub fn configurations(&self) -> usize {
        self.params_of(Role::Configuration).map(|p| p.values.len()).product()
    }

    /// How many environments: the product of the environment lists
    /// (before any `[[exclude]]`).
    pub fn environments(&self) -> usize {
        self.params_of(Role::Environment).map(|p| p.values.len()).product()
    }

    /// How many experiments: configurations × environments × repetitions,
    /// minus the excluded.
    pub fn count(&self) -> usize {
        usize::try_from(self.count_u128()).unwrap_or(usize::MAX)
    }

    /// How many experiments the `[[exclude]]` tables remove from
    /// configurations × environments × repetitions.
    pub fn excluded(&self) -> usize {
        let all = self.params.iter().fold(u128::from(self.repetitions), |n, p| n.saturating_mul(p.values.len() as u128));
        usize::try_from(all - self.count_u128().min(all)).unwrap_or(usize::MAX)
    }

    fn count_u128(&self) -> u128 {
        let grid = self.grid();
        let lens: Vec<usize> = grid.axes().iter().map(|a| a.values.len()).collect();
        let masks = exclude::masks(grid.axes(), &self.excludes);
        let masks: Vec<&exclude::Mask> = masks.iter().collect();
        exclude::kept(&lens, &masks).saturating_mul(u128::from(self.repetitions))
    }

    /// Every point of the study to run (every parameter's value), in the
    /// grid's order: the [`grid`](Self::grid) without the points an
    /// `[[exclude]]` matches.
    pub fn points(&self) -> impl Iterator<Item = Params> {
        let axes = self.grid().axes().to_vec();
        let masks = exclude::masks(&axes, &self.excludes);
        exclude::Points::new(axes, masks)
    }

    /// The Cartesian product of the value lists: environment parameters
    /// outermost, then configuration parameters, each role in declared
    /// order (the first declared varies slowest). It ignores the
    /// `[[exclude]]` tables; [`points`](Self::points) applies them.
    pub fn grid(&self) -> Grid {
        let axes = self
            .params_of(Role::Environment)
            .chain(self.params_of(Role::Configuration))
            .map(|p| Axis { name: p.decl.name.clone(), values: p.values.clone() })
            .collect();
        Grid::new(axes)
    }

    /// Whether the experiments run alone: the study's `exclusive`, else the
    /// template's requirement.
    pub fn exclusive(&self) -> bool {
        self.exclusive.unwrap_or_else(|| self.template.requirements().exclusive)
    }

    /// The timeout of an experiment expected to take `expected`: the
    /// study's `timeout`, else 10 × `expected` and at least 30 s.
    pub fn timeout_for(&self, expected: Duration) -> Duration {
        self.timeout.unwrap_or_else(|| expected.saturating_mul(10).max(Duration::from_secs(30)))
    }

    /// An equivalent study file (naming the template by name).
    fn to_toml(&self) -> String {
        let mut doc = toml::Table::new();
        doc.insert("name".into(), self.name.clone().into());
        doc.insert("template".into(), self.template.name().into());
        doc.insert("repetitions".into(), i64::from(self.repetitions).into());
        // `from_values` keeps seeds within TOML's integers.
        doc.insert("seed".into(), i64::try_from(self.seed).unwrap_or(i64::MAX).into());
        if let Some(t) = self.timeout {
            doc.insert("timeout".into(), crate::param::format_duration(t).into());
        }
        if let Some(e) = self.exclusive {
            doc.insert("exclusive".into(), e.into());
        }
        for role in [Role::Configuration, Role::Environment] {
            let mut table = toml::Table::new();
            for p in self.params_of(role).filter(|p| p.listed) {
                let list: Vec<toml::Value> = p.values.iter().map(toml_value).collect();
                table.insert(p.decl.name.clone(), toml::Value::Array(list));
            }
            if !table.is_empty() {
                doc.insert(role.name().into(), toml::Value::Table(table));
            }
        }
        toml::to_string(&doc).unwrap_or_default()
    }
}

/// A value as TOML: numbers and booleans as themselves, the rest as their
/// canonical text (which [`ParamType::parse_toml`] reads back).
fn toml_value(v: &Value) -> toml::Value {
    match v {
        Value::Int(i) => toml::Value::Integer(*i),
        Value::Float(f) => toml::Value::Float(*f),
        Value::Bool(b) => toml::Value::Boolean(*b),
        other => toml::Value::String(other.to_text()),
    }
}

/// Is `v` a value of `decl`'s type (its canonical text parses back to it)?
fn check_typed(decl: &ParamDecl, v: &Value) -> Result<(), String> {
    let back = decl.ty.parse_text(&v.to_text())?;
    if back == *v {
        Ok(())
    } else {
        Err(format!("`{v}` is not a value of type {}; expected {}", decl.ty.name(), decl.ty.allowed_form()))
    }
}

/// Find the template: `template = "NAME"`, `template = "PATH.toml"` or an
/// inline `[template]` table.
fn resolve_template(
    src: &Source<'_>,
    doc: &DeTable<'_>,
    base: &Path,
    study_name: &str,
    templates: &[Arc<dyn Template>],
) -> Result<Arc<dyn Template>, StudyError> {
    let names = || templates.iter().map(|t| t.name().to_string()).collect::<Vec<_>>();
    let Some((key, value)) = doc.get_key_value("template") else {
        return Err(StudyError::NoTemplate { at: src.at(0..0), builtins: names() });
    };
    let at = src.at(key.span());
    match value.get_ref() {
        DeValue::String(s) if looks_like_path(s) => {
            let file = base.join(s.as_ref());
            let t =
                CommandTemplate::load(&file).map_err(|source| StudyError::Template { at, source: Box::new(source) })?;
            Ok(Arc::new(t))
        }
        DeValue::String(s) => templates.iter().find(|t| t.name() == s.as_ref()).cloned().ok_or_else(|| {
            StudyError::UnknownTemplate { at: src.at(value.span()), name: s.to_string(), builtins: names() }
        }),
        DeValue::Table(table) => {
            let t = CommandTemplate::from_table(table, src, base, study_name)
                .map_err(|source| StudyError::Template { at, source: Box::new(source) })?;
            Ok(Arc::new(t))
        }
        _ => Err(FieldError {
            at: src.at(value.span()),
            key: "template".into(),
            allowed: "a template name, the path of a command-template file, or a [template] table".into(),
            got: src.snippet(value.span()),
        }
        .into()),
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.ends_with(".toml")
}

/// The declaration of `key` listed under `table`, or why it cannot be.
fn check_param<'d>(
    src: &Source<'_>,
    key: &Spanned<Cow<'_, str>>,
    table: Role,
    decls: &'d [ParamDecl],
    template: &str,
) -> Result<&'d ParamDecl, StudyError> {
    let name = key.get_ref().as_ref();
    match decls.iter().find(|d| d.name == name) {
        Some(d) if d.role == table => Ok(d),
        Some(d) => Err(StudyError::WrongTable {
            at: src.at(key.span()),
            key: name.to_string(),
            table,
            belongs: d.role,
            template: template.to_string(),
        }),
        None => Err(StudyError::UnknownParam {
            at: src.at(key.span()),
            table,
            key: name.to_string(),
            template: template.to_string(),
            allowed: decls.iter().filter(|d| d.role == table).map(|d| d.name.clone()).collect(),
        }),
    }
}

/// A parameter's values: a list, or one value standing for a list of one.
fn value_list(
    src: &Source<'_>,
    base: &Path,
    decl: &ParamDecl,
    key: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<Vec<Value>, StudyError> {
    let DeValue::Array(items) = value.get_ref() else {
        return Ok(vec![param_value(src, base, decl, key, value)?]);
    };
    if items.is_empty() {
        return Err(StudyError::EmptyList {
            at: src.at(value.span()),
            key: key.to_string(),
            allowed: decl.ty.allowed_form(),
        });
    }
    let mut values: Vec<Value> = Vec::with_capacity(items.len());
    let mut seen: HashMap<String, Range<usize>> = HashMap::new();
    for item in items.iter() {
        let v = param_value(src, base, decl, key, item)?;
        let text = v.to_text();
        if let Some(first) = seen.get(&text) {
            return Err(StudyError::DuplicateValue {
                at: src.at(item.span()),
                key: key.to_string(),
                value: text,
                first_line: src.at(first.clone()).line,
            });
        }
        seen.insert(text, item.span());
        values.push(v);
    }
    Ok(values)
}

/// One value, typed by the parameter's declaration. A relative trace path
/// is taken relative to `base` (the study file's directory).
fn param_value(
    src: &Source<'_>,
    base: &Path,
    decl: &ParamDecl,
    key: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<Value, StudyError> {
    let at = src.at(value.span());
    let key = key.to_string();
    typed_value(src, base, &decl.ty, value).map_err(|e| match e {
        ValueError::Bad(why) => StudyError::BadValue { at, key, why, allowed: decl.ty.allowed_form() },
        ValueError::Link(why) => StudyError::BadLink { at, key, why, allowed: decl.ty.allowed_form() },
        ValueError::MissingTrace(path) => StudyError::MissingTrace { at, key, path },
    })
}

/// Why a value does not fit its type.
pub(crate) enum ValueError {
    /// Wrong type or out of range (with the allowed form).
    Bad(String),
    /// Not a link spec (with the allowed form).
    Link(String),
    /// A trace file that does not exist.
    MissingTrace(PathBuf),
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Bad(why) => f.write_str(why),
            ValueError::Link(why) => write!(f, "bad link spec {why}"),
            ValueError::MissingTrace(p) => write!(f, "trace file {} does not exist", p.display()),
        }
    }
}

/// A TOML value typed by `ty`; a relative trace path starts at `base`.
pub(crate) fn typed_value(
    src: &Source<'_>,
    base: &Path,
    ty: &ParamType,
    value: &Spanned<DeValue<'_>>,
) -> Result<Value, ValueError> {
    let plain = plain_value(value).map_err(|why| ValueError::Bad(format!("`{}`: {why}", src.snippet(value.span()))))?;
    match (ty, &plain) {
        (ParamType::Trace, toml::Value::String(s)) => {
            let path = base.join(s);
            if path.is_file() {
                Ok(Value::Trace(path))
            } else {
                Err(ValueError::MissingTrace(path))
            }
        }
        (ParamType::Link, toml::Value::String(_)) => ty.parse_toml(&plain).map_err(ValueError::Link),
        _ => ty.parse_toml(&plain).map_err(ValueError::Bad),
    }
}

/// A study file's text and path, for locating spans.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    /// The file (for messages).
    pub file: &'a Path,
    /// Its text (spans are byte offsets into it).
    pub text: &'a str,
}

impl<'a> Source<'a> {
    /// The text parsed as a TOML table, with spans.
    pub fn parse_table(&self) -> Result<Spanned<DeTable<'a>>, SyntaxError> {
        DeTable::parse(self.text)
            .map_err(|e| SyntaxError { at: self.at(e.span().unwrap_or(0..0)), message: e.message().trim().to_string() })
    }

    /// The location of a span's start.
    pub fn at(&self, span: Range<usize>) -> Location {
        let (line, column) = line_col(self.text, span.start);
        Location { file: Arc::from(self.file), line, column }
    }

    /// The text of a span, clipped to 60 characters for messages.
    pub fn snippet(&self, span: Range<usize>) -> String {
        let text = self.text.get(span).unwrap_or("");
        let mut s: String = text.chars().take(60).collect();
        if s.len() < text.len() {
            s.push('…');
        }
        s
    }
}

/// A table's entries in the order they appear in the file (the parser
/// keeps them sorted by key), so the first error reported is the first in
/// the file.
pub(crate) fn entries<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Spanned<Cow<'i, str>>, &'t Spanned<DeValue<'i>>)> {
    let mut v: Vec<_> = table.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// A spanned parser value as a plain `toml::Value`.
pub(crate) fn plain_value(value: &Spanned<DeValue<'_>>) -> Result<toml::Value, String> {
    use serde::Deserialize;
    toml::Value::deserialize(toml::de::ValueDeserializer::from(value.clone())).map_err(|e| e.message().to_string())
}

fn field_error(src: &Source<'_>, key: &str, value: &Spanned<DeValue<'_>>, allowed: &str) -> FieldError {
    FieldError {
        at: src.at(value.span()),
        key: key.to_string(),
        allowed: allowed.to_string(),
        got: src.snippet(value.span()),
    }
}

/// A string field.
pub(crate) fn str_field<'v>(
    src: &Source<'_>,
    key: &str,
    value: &'v Spanned<DeValue<'_>>,
    allowed: &str,
) -> Result<&'v str, FieldError> {
    match value.get_ref() {
        DeValue::String(s) => Ok(s.as_ref()),
        _ => Err(field_error(src, key, value, allowed)),
    }
}

/// A name: non-empty, letters, digits, `_`, `-` and `.` only (it is typed
/// on command lines and stored as a key).
pub(crate) fn name_field(src: &Source<'_>, key: &str, value: &Spanned<DeValue<'_>>) -> Result<String, FieldError> {
    const ALLOWED: &str = "a non-empty name of letters, digits, `_`, `-` and `.`";
    let s = str_field(src, key, value, ALLOWED)?;
    if !s.is_empty() && s.len() <= 128 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        Ok(s.to_string())
    } else {
        Err(field_error(src, key, value, ALLOWED))
    }
}

/// A boolean field.
pub(crate) fn bool_field(src: &Source<'_>, key: &str, value: &Spanned<DeValue<'_>>) -> Result<bool, FieldError> {
    match value.get_ref() {
        DeValue::Boolean(b) => Ok(*b),
        _ => Err(field_error(src, key, value, "true or false")),
    }
}

/// A whole-number field in `min..=max`.
pub(crate) fn int_field(
    src: &Source<'_>,
    key: &str,
    value: &Spanned<DeValue<'_>>,
    min: u64,
    max: u64,
    allowed: &str,
) -> Result<u64, FieldError> {
    match plain_value(value) {
        Ok(toml::Value::Integer(i)) => match u64::try_from(i) {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(field_error(src, key, value, allowed)),
        },
        _ => Err(field_error(src, key, value, allowed)),
    }
}

/// A positive duration: `"60s"`, `"250ms"`, or a number of seconds.
pub(crate) fn duration_field(
    src: &Source<'_>,
    key: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<Duration, FieldError> {
    const ALLOWED: &str = "a positive duration, e.g. \"250ms\", \"60s\", \"2min\", or a number of seconds";
    let d = match plain_value(value) {
        Ok(toml::Value::String(s)) => parse_duration(&s),
        Ok(toml::Value::Integer(i)) => u64::try_from(i).ok().map(Duration::from_secs),
        Ok(toml::Value::Float(f)) if (0.0..1e12).contains(&f) => Some(Duration::from_secs_f64(f)),
        _ => None,
    };
    d.filter(|d| !d.is_zero()).ok_or_else(|| field_error(src, key, value, ALLOWED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;
    use crate::template::{Context, TemplateError};
    use proptest::prelude::*;

    struct T;
    impl Template for T {
        fn name(&self) -> &str {
            "t"
        }
        fn description(&self) -> &str {
            "test"
        }
        fn params(&self) -> Vec<ParamDecl> {
            vec![
                ParamDecl::config("n", ParamType::int_range(0, 1000), Value::Int(1)),
                ParamDecl::config("chunk", ParamType::Size, Value::Size(4096)),
                ParamDecl::env("link", ParamType::Link, Value::Link("rtt=10ms".into())),
                ParamDecl::env("loss", ParamType::float_range(0.0, 1.0), Value::Float(0.0)),
            ]
        }
        fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> {
            Ok(())
        }
    }

    fn templates() -> Vec<Arc<dyn Template>> {
        vec![Arc::new(T)]
    }

    fn parse(text: &str) -> Result<Study, StudyError> {
        Study::parse(text, Path::new("dir/s.toml"), &templates())
    }

    #[test]
    fn line_col_counts_characters() {
        let text = "ab\ncé\nx";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 6), (2, 3));
        assert_eq!(line_col(text, 5), (2, 2), "inside é");
        assert_eq!(line_col(text, 100), (3, 2));
    }

    #[test]
    fn defaults_fill_what_is_not_listed() {
        let s = parse("template = \"t\"\n[configuration]\nn = [1, 2, 3]\n").unwrap();
        assert_eq!(s.name, "s");
        assert_eq!((s.repetitions, s.seed, s.timeout, s.exclusive), (1, 0, None, None));
        assert_eq!(s.params.iter().map(|p| p.decl.name.as_str()).collect::<Vec<_>>(), ["n", "chunk", "link", "loss"]);
        assert_eq!(s.param("n").unwrap().values, [Value::Int(1), Value::Int(2), Value::Int(3)]);
        assert!(s.param("n").unwrap().listed);
        assert_eq!(s.param("chunk").unwrap().values, [Value::Size(4096)]);
        assert!(!s.param("chunk").unwrap().listed);
        assert_eq!((s.configurations(), s.environments(), s.count()), (3, 1, 3));
    }

    #[test]
    fn single_values_and_top_level_fields() {
        let s = parse(
            "name = \"x-1\"\ntemplate = \"t\"\nrepetitions = 4\nseed = 9\ntimeout = \"90s\"\nexclusive = true\n\
             [environment]\nloss = 0.5\n",
        )
        .unwrap();
        assert_eq!(s.name, "x-1");
        assert_eq!((s.repetitions, s.seed), (4, 9));
        assert_eq!(s.timeout, Some(Duration::from_secs(90)));
        assert_eq!(s.exclusive, Some(true));
        assert_eq!(s.param("loss").unwrap().values, [Value::Float(0.5)]);
        assert!(s.exclusive());
        assert_eq!(s.timeout_for(Duration::from_secs(1)), Duration::from_secs(90));
    }

    #[test]
    fn timeout_default_is_ten_times_expected_and_at_least_30s() {
        let s = parse("template = \"t\"\n").unwrap();
        assert_eq!(s.timeout_for(Duration::from_secs(1)), Duration::from_secs(30));
        assert_eq!(s.timeout_for(Duration::from_secs(7)), Duration::from_secs(70));
    }

    #[test]
    fn grid_puts_environments_outermost() {
        let s = parse("template = \"t\"\n[configuration]\nn = [1, 2]\n[environment]\nloss = [0.1, 0.2]\n").unwrap();
        let names: Vec<String> = s.grid().axes().iter().map(|a| a.name.clone()).collect();
        assert_eq!(names, ["link", "loss", "n", "chunk"]);
        let points: Vec<Params> = s.grid().points().collect();
        let pairs: Vec<(f64, i64)> = points.iter().map(|p| (p.float("loss").unwrap(), p.int("n").unwrap())).collect();
        assert_eq!(pairs, [(0.1, 1), (0.1, 2), (0.2, 1), (0.2, 2)]);
    }

    #[test]
    fn errors_point_at_the_offending_line() {
        type Case = (&'static str, usize, fn(&StudyError) -> bool);
        let cases: &[Case] = &[
            ("template = \"t\"\nbogus = 1\n", 2, |e| matches!(e, StudyError::UnknownKey { .. })),
            ("template = \"t\"\n\nrepetitions = 0\n", 3, |e| matches!(e, StudyError::ZeroRepetitions { .. })),
            ("template = \"t\"\nrepetitions = -2\n", 2, |e| matches!(e, StudyError::Field(_))),
            ("template = \"nope\"\n", 1, |e| matches!(e, StudyError::UnknownTemplate { .. })),
            ("seed = 1\n", 1, |e| matches!(e, StudyError::NoTemplate { .. })),
            ("template = \"t\"\n[configuration]\nfoo = 1\n", 3, |e| matches!(e, StudyError::UnknownParam { .. })),
            ("template = \"t\"\n[environment]\nn = 1\n", 3, |e| matches!(e, StudyError::WrongTable { .. })),
            ("template = \"t\"\n[configuration]\nn = []\n", 3, |e| matches!(e, StudyError::EmptyList { .. })),
            ("template = \"t\"\n[configuration]\nn = [1,\n 2,\n 1]\n", 5, |e| {
                matches!(e, StudyError::DuplicateValue { .. })
            }),
            ("template = \"t\"\n[configuration]\nn = \"4\"\n", 3, |e| matches!(e, StudyError::BadValue { .. })),
            ("template = \"t\"\n[environment]\nlink = \"rtt=x\"\n", 3, |e| matches!(e, StudyError::BadLink { .. })),
            ("template = \"t\"\ntimeout = \"0s\"\n", 2, |e| matches!(e, StudyError::Field(_))),
            ("template = \"t\"\nx = [\n", 2, |e| matches!(e, StudyError::Syntax(_))),
        ];
        for (text, line, is) in cases {
            let e = parse(text).unwrap_err();
            assert!(is(&e), "{text:?}: {e:?}");
            assert_eq!(e.location().map(|l| l.line), Some(*line), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("dir/s.toml:{line}:")), "{e}");
        }
    }

    #[test]
    fn duplicates_compare_canonical_forms() {
        let e = parse("template = \"t\"\n[configuration]\nchunk = [65536, \"64KiB\"]\n").unwrap_err();
        match e {
            StudyError::DuplicateValue { value, first_line, at, .. } => {
                assert_eq!(value, "64KiB");
                assert_eq!(first_line, 3);
                assert_eq!((at.line, at.column), (3, 17));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn too_large_studies_are_refused() {
        let list: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let text = format!("template = \"t\"\nrepetitions = 1001\n[configuration]\nn = [{}]\n", list.join(","));
        assert!(matches!(parse(&text).unwrap_err(), StudyError::TooLarge { .. }));
    }

    #[test]
    fn from_values_checks_types() {
        let t: Arc<dyn Template> = Arc::new(T);
        let e = Study::from_values("b", t.clone(), &[("n", vec![Value::Float(1.0)])], 1, 0).unwrap_err();
        assert!(e.to_string().contains("`n`"), "{e}");
        let e = Study::from_values("b", t.clone(), &[("n", vec![Value::Int(5000)])], 1, 0).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert!(Study::from_values("b", t.clone(), &[("n", vec![])], 1, 0).is_err());
        assert!(Study::from_values("b", t.clone(), &[("n", vec![Value::Int(1)])], 0, 0).is_err());
        assert!(Study::from_values("b", t, &[("n", vec![Value::Int(1), Value::Int(1)])], 1, 0).is_err());
    }

    proptest! {
        /// A study built in code writes a study file that parses back to
        /// the same lists.
        #[test]
        fn from_values_text_parses_back(
            ns in proptest::collection::btree_set(0i64..1000, 1..5),
            chunks in proptest::collection::btree_set(1u64..(1 << 30), 1..4),
            losses in proptest::collection::btree_set(0u32..=1000, 0..4),
            reps in 1u32..20,
            seed in 0u64..(i64::MAX as u64),
        ) {
            let mut values = vec![
                ("n", ns.iter().map(|n| Value::Int(*n)).collect::<Vec<_>>()),
                ("chunk", chunks.iter().map(|c| Value::Size(*c)).collect()),
            ];
            if !losses.is_empty() {
                values.push(("loss", losses.iter().map(|l| Value::Float(f64::from(*l) / 1000.0)).collect()));
            }
            let built = Study::from_values("round", Arc::new(T), &values, reps, seed).unwrap();
            let parsed = Study::parse(&built.text, Path::new("round.toml"), &templates()).unwrap();
            prop_assert_eq!(&parsed.params, &built.params);
            prop_assert_eq!((parsed.repetitions, parsed.seed), (reps, seed));
            prop_assert_eq!(parsed.count(), built.count());
        }

        /// Any text: an error or a study, never a panic.
        #[test]
        fn any_text_is_an_error_or_a_study(text in "\\PC{0,200}") {
            let _ = parse(&text);
        }
    }
}
