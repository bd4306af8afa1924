//! Command templates: any program, in any language, as a lab template.
//!
//! A command template is a TOML file (or a study's inline `[template]`
//! table):
//!
//! ```toml
//! name = "ping-rtt"                 # default: the file stem (inline: the study's name)
//! description = "..."
//! version = 1                       # bump when old results become incomparable
//! command = ["python3", "{{template_dir}}/probe.py", "--rate", "{{rate}}"]
//! expected_duration = "2s"          # default 1s
//! exclusive = false                 # run alone (timing-sensitive); default false
//! emulator = false                  # builds emulator testbeds; default false
//! [params.rate]
//! type = "size"                     # int, float, bool, string, enum, size, duration, link, trace
//! default = "1MB"
//! role = "configuration"            # or "environment"; default configuration
//! values = ["a", "b"]               # enum only: the allowed names
//! min = 1                           # int and float only, optional (also max)
//! doc = "..."
//! ```
//!
//! # What the program gets
//! - `{{name}}` in any argument replaced by the parameter's canonical text
//!   ([`Value::to_text`](crate::param::Value::to_text)); besides the declared parameters,
//!   `{{template_dir}}` (the template file's directory, absolute),
//!   `{{work_dir}}` and `{{seed}}`. A `{{name}}` naming nothing is an error
//!   when the template loads.
//! - The program: a name without `/` is looked up in `PATH`; a path with
//!   `/` is relative to the template file's directory.
//! - Working directory: the experiment's work directory.
//! - Environment: every parameter as `BRAID_PARAM_<NAME>` (canonical text),
//!   `BRAID_LAB_RECORDS` (the records file, [`RECORDS_FILE`] in the work
//!   directory), `BRAID_LAB_SEED`, `BRAID_LAB_WORK_DIR`.
//! - stdout and stderr go to [`STDOUT_LOG`] and [`STDERR_LOG`] in the work
//!   directory; stdin is empty.
//!
//! # The records contract
//! After [`run`](Template::run) every record of the experiment is in
//! `records.jsonl` in the work directory: the runner ingests that file.
//! A runner may give the [`Context`] a file recorder for that same file
//! (created before `run`, so the file exists when the program starts); the
//! recorder is flushed before the program starts and the program appends
//! after it. If the file does not exist when the program starts, the
//! context's recorder writes elsewhere (in memory, in a test): the
//! program's records are then also pushed into it after the program ends.
//!
//! # Ending
//! The program runs in its own process group. At the deadline the group
//! gets SIGTERM, and SIGKILL 2 s later: [`TemplateError::Timeout`]. When
//! the program ends by itself, whatever it left running in its group is
//! killed. A nonzero exit is [`TemplateError::Failed`] with the status and
//! the last lines of stderr. (A process that leaves the group, with
//! `setsid`, is beyond reach: don't.)

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{Context, Requirements, Template, TemplateError};
use crate::param::{valid_name, ParamDecl, ParamType, Params, Role};
use crate::record::{parse_records, RECORDS_ENV};
use crate::study::{
    bool_field, duration_field, entries, int_field, name_field, plain_value, str_field, FieldError, Location, Source,
    SyntaxError,
};

/// The records file in the work directory (`BRAID_LAB_RECORDS`).
pub const RECORDS_FILE: &str = "records.jsonl";
/// The program's stdout, in the work directory.
pub const STDOUT_LOG: &str = "stdout.log";
/// The program's stderr, in the work directory.
pub const STDERR_LOG: &str = "stderr.log";
/// The seed, in the program's environment.
pub const SEED_ENV: &str = "BRAID_LAB_SEED";
/// The work directory, in the program's environment.
pub const WORK_DIR_ENV: &str = "BRAID_LAB_WORK_DIR";
/// How long after SIGTERM the group gets SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How many lines of stderr a failure quotes.
pub const STDERR_TAIL_LINES: usize = 20;

/// Placeholders every command template has besides its parameters (so no
/// parameter may take these names).
pub const BUILTIN_PLACEHOLDERS: &[&str] = &["template_dir", "work_dir", "seed"];

const TEMPLATE_KEYS: &[&str] =
    &["name", "description", "version", "command", "expected_duration", "exclusive", "emulator", "params"];
const PARAM_KEYS: &[&str] = &["type", "default", "role", "values", "min", "max", "doc"];
const TYPE_NAMES: &[&str] = &["int", "float", "bool", "string", "enum", "size", "duration", "link", "trace"];

/// Why a command template is not valid.
#[derive(Debug, thiserror::Error)]
pub enum CommandTemplateError {
    /// The file could not be read.
    #[error("{}: cannot read the command template: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML.
    #[error(transparent)]
    Syntax(#[from] SyntaxError),
    /// A key a command template (or a parameter table) does not have.
    #[error("{at}: unknown key `{key}` in {table}; allowed: {}", allowed.join(", "))]
    UnknownKey {
        /// Where.
        at: Location,
        /// The key.
        key: String,
        /// `the template` or `[params.NAME]`.
        table: String,
        /// The allowed keys.
        allowed: Vec<String>,
    },
    /// A required key is missing.
    #[error("{at}: {table} has no `{key}`; expected {allowed}")]
    Missing {
        /// The table's place.
        at: Location,
        /// The key.
        key: String,
        /// `the template` or `[params.NAME]`.
        table: String,
        /// Its allowed form.
        allowed: String,
    },
    /// A field of the wrong type or out of range.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A parameter declaration that makes no sense.
    #[error("{at}: parameter `{param}`: {why}")]
    BadParam {
        /// Where.
        at: Location,
        /// The parameter.
        param: String,
        /// What is wrong.
        why: String,
    },
    /// `{{name}}` names no parameter.
    #[error("{at}: `{{{{{name}}}}}` in the command names no parameter; known: {}", known.join(", "))]
    UnknownPlaceholder {
        /// Where (the argument).
        at: Location,
        /// The name.
        name: String,
        /// The names it could be.
        known: Vec<String>,
    },
    /// `{{` without `}}`.
    #[error("{at}: `{{{{` without `}}}}` in the argument `{arg}`; write `{{{{name}}}}`")]
    Unclosed {
        /// Where (the argument).
        at: Location,
        /// The argument.
        arg: String,
    },
}

impl CommandTemplateError {
    /// Where the error is, when it is in a file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            CommandTemplateError::Read { .. } => None,
            CommandTemplateError::Field(f) => Some(&f.at),
            CommandTemplateError::Syntax(e) => Some(&e.at),
            CommandTemplateError::UnknownKey { at, .. }
            | CommandTemplateError::Missing { at, .. }
            | CommandTemplateError::BadParam { at, .. }
            | CommandTemplateError::UnknownPlaceholder { at, .. }
            | CommandTemplateError::Unclosed { at, .. } => Some(at),
        }
    }
}

/// A piece of a command-line argument.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Param(String),
}

/// A program run as a template (see the module docs for the contract).
#[derive(Debug, Clone)]
pub struct CommandTemplate {
    name: String,
    description: String,
    version: u32,
    command: Vec<String>,
    argv: Vec<Vec<Piece>>,
    base_dir: PathBuf,
    params: Vec<ParamDecl>,
    expected: Duration,
    requirements: Requirements,
}

impl CommandTemplate {
    /// Read a command-template file.
    pub fn load(path: &Path) -> Result<CommandTemplate, CommandTemplateError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| CommandTemplateError::Read { path: path.to_path_buf(), source })?;
        CommandTemplate::parse(&text, path)
    }

    /// Parse a command-template file's text; `path` names it in messages,
    /// gives the default name (its stem) and the directory relative paths
    /// start from.
    pub fn parse(text: &str, path: &Path) -> Result<CommandTemplate, CommandTemplateError> {
        let src = Source { file: path, text };
        let doc = src.parse_table()?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        CommandTemplate::from_table(doc.get_ref(), &src, path.parent().unwrap_or(Path::new("")), &stem)
    }

    /// A command template from a parsed table (a file's, or a study's
    /// `[template]`): `base_dir` is where relative paths start,
    /// `default_name` the name when the table has none.
    pub(crate) fn from_table(
        table: &DeTable<'_>,
        src: &Source<'_>,
        base_dir: &Path,
        default_name: &str,
    ) -> Result<CommandTemplate, CommandTemplateError> {
        let table_at = table_location(src, table);
        for (key, _) in entries(table) {
            if !TEMPLATE_KEYS.contains(&key.get_ref().as_ref()) {
                return Err(CommandTemplateError::UnknownKey {
                    at: src.at(key.span()),
                    key: key.get_ref().to_string(),
                    table: "the template".into(),
                    allowed: TEMPLATE_KEYS.iter().map(|s| s.to_string()).collect(),
                });
            }
        }
        let name = match table.get("name") {
            Some(v) => name_field(src, "name", v)?,
            None => default_name.to_string(),
        };
        let description = match table.get("description") {
            Some(v) => str_field(src, "description", v, "a string")?.to_string(),
            None => String::new(),
        };
        let version = match table.get("version") {
            Some(v) => int_field(src, "version", v, 1, u32::MAX.into(), "a whole number >= 1")? as u32,
            None => 1,
        };
        let expected = match table.get("expected_duration") {
            Some(v) => duration_field(src, "expected_duration", v)?,
            None => Duration::from_secs(1),
        };
        let exclusive = table.get("exclusive").map(|v| bool_field(src, "exclusive", v)).transpose()?.unwrap_or(false);
        let emulator = table.get("emulator").map(|v| bool_field(src, "emulator", v)).transpose()?.unwrap_or(false);
        // Absolute, because the program runs in the work directory.
        let base_dir = std::path::absolute(base_dir).unwrap_or_else(|_| base_dir.to_path_buf());

        let params = match table.get("params") {
            None => Vec::new(),
            Some(v) => match v.get_ref() {
                DeValue::Table(t) => entries(t)
                    .into_iter()
                    .map(|(k, v)| param_decl(src, &base_dir, k, v))
                    .collect::<Result<Vec<_>, _>>()?,
                _ => {
                    return Err(FieldError {
                        at: src.at(v.span()),
                        key: "params".into(),
                        allowed: "a table of parameter tables ([params.NAME])".into(),
                        got: src.snippet(v.span()),
                    }
                    .into())
                }
            },
        };

        const COMMAND_FORM: &str = "a non-empty list of strings (the program and its arguments)";
        let Some(command_value) = table.get("command") else {
            return Err(CommandTemplateError::Missing {
                at: table_at,
                key: "command".into(),
                table: "the template".into(),
                allowed: COMMAND_FORM.into(),
            });
        };
        let bad_command = || FieldError {
            at: src.at(command_value.span()),
            key: "command".into(),
            allowed: COMMAND_FORM.into(),
            got: src.snippet(command_value.span()),
        };
        let DeValue::Array(items) = command_value.get_ref() else { return Err(bad_command().into()) };
        if items.is_empty() {
            return Err(bad_command().into());
        }
        let known: Vec<String> =
            params.iter().map(|p| p.name.clone()).chain(BUILTIN_PLACEHOLDERS.iter().map(|s| s.to_string())).collect();
        let mut command = Vec::with_capacity(items.len());
        let mut argv = Vec::with_capacity(items.len());
        for item in items.iter() {
            let DeValue::String(arg) = item.get_ref() else { return Err(bad_command().into()) };
            let pieces = split_placeholders(arg)
                .ok_or_else(|| CommandTemplateError::Unclosed { at: src.at(item.span()), arg: arg.to_string() })?;
            for piece in &pieces {
                if let Piece::Param(p) = piece {
                    if !known.contains(p) {
                        return Err(CommandTemplateError::UnknownPlaceholder {
                            at: src.at(item.span()),
                            name: p.clone(),
                            known: known.clone(),
                        });
                    }
                }
            }
            command.push(arg.to_string());
            argv.push(pieces);
        }
        Ok(CommandTemplate {
            name,
            description,
            version,
            command,
            argv,
            base_dir,
            params,
            expected,
            requirements: Requirements { emulator, exclusive },
        })
    }

    /// The command as written (with its `{{name}}`s).
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The directory relative program paths and trace defaults start from.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The command line for one experiment: placeholders substituted, the
    /// program resolved (a path with `/` against the template directory).
    pub fn argv(&self, params: &Params, seed: u64, work_dir: &Path) -> Result<Vec<String>, TemplateError> {
        let mut out = Vec::with_capacity(self.argv.len());
        for pieces in &self.argv {
            let mut arg = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(t) => arg.push_str(t),
                    Piece::Param(p) => match p.as_str() {
                        "template_dir" => arg.push_str(&self.base_dir.to_string_lossy()),
                        "work_dir" => arg.push_str(&work_dir.to_string_lossy()),
                        "seed" => arg.push_str(&seed.to_string()),
                        name => arg.push_str(&params.get(name)?.to_text()),
                    },
                }
            }
            out.push(arg);
        }
        if let Some(program) = out.first_mut() {
            if program.contains('/') && Path::new(program.as_str()).is_relative() {
                *program = self.base_dir.join(program.as_str()).to_string_lossy().into_owned();
            }
        }
        Ok(out)
    }
}

/// The location of a table: its first key, or the start of the text.
fn table_location(src: &Source<'_>, table: &DeTable<'_>) -> Location {
    let start = table.iter().map(|(k, _)| k.span().start).min().unwrap_or(0);
    src.at(start..start)
}

/// `a{{x}}b` → [Text(a), Param(x), Text(b)]; `None` for an unclosed `{{`.
fn split_placeholders(arg: &str) -> Option<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let close = after.find("}}")?;
        pieces.push(Piece::Param(after[..close].trim().to_string()));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Some(pieces)
}

/// One `[params.NAME]` table.
fn param_decl(
    src: &Source<'_>,
    base_dir: &Path,
    key: &Spanned<Cow<'_, str>>,
    value: &Spanned<DeValue<'_>>,
) -> Result<ParamDecl, CommandTemplateError> {
    let name = key.get_ref().to_string();
    let at = src.at(key.span());
    let table_name = format!("[params.{name}]");
    let bad = |why: String| CommandTemplateError::BadParam { at: at.clone(), param: name.clone(), why };
    if !valid_name(&name) {
        return Err(bad("a parameter name is a-z, 0-9 and _, starting with a letter, at most 64 characters".into()));
    }
    if BUILTIN_PLACEHOLDERS.contains(&name.as_str()) {
        return Err(bad(format!("the name is reserved for the built-in {{{{{name}}}}}")));
    }
    let DeValue::Table(t) = value.get_ref() else {
        return Err(FieldError {
            at: src.at(value.span()),
            key: format!("params.{name}"),
            allowed: "a table with type, default, role, doc".into(),
            got: src.snippet(value.span()),
        }
        .into());
    };
    for (k, _) in entries(t) {
        if !PARAM_KEYS.contains(&k.get_ref().as_ref()) {
            return Err(CommandTemplateError::UnknownKey {
                at: src.at(k.span()),
                key: k.get_ref().to_string(),
                table: table_name.clone(),
                allowed: PARAM_KEYS.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    let missing = |key: &str, allowed: &str| CommandTemplateError::Missing {
        at: at.clone(),
        key: key.into(),
        table: table_name.clone(),
        allowed: allowed.into(),
    };
    let type_form = format!("one of {}", TYPE_NAMES.join(", "));
    let ty_value = t.get("type").ok_or_else(|| missing("type", &type_form))?;
    let ty_name = str_field(src, "type", ty_value, &type_form)?;
    let number = |k: &str| -> Result<Option<toml::Value>, CommandTemplateError> {
        let Some(v) = t.get(k) else { return Ok(None) };
        match plain_value(v) {
            Ok(n @ (toml::Value::Integer(_) | toml::Value::Float(_))) => Ok(Some(n)),
            _ => Err(FieldError {
                at: src.at(v.span()),
                key: k.into(),
                allowed: "a number".into(),
                got: src.snippet(v.span()),
            }
            .into()),
        }
    };
    let (min, max) = (number("min")?, number("max")?);
    if (min.is_some() || max.is_some()) && !matches!(ty_name, "int" | "float") {
        return Err(bad(format!("min and max apply to int and float, not {ty_name}")));
    }
    if t.contains_key("values") && ty_name != "enum" {
        return Err(bad(format!("values applies to enum, not {ty_name}")));
    }
    let ty = match ty_name {
        "int" => {
            let int = |v: Option<toml::Value>, dflt: i64| match v {
                None => Ok(dflt),
                Some(toml::Value::Integer(i)) => Ok(i),
                Some(other) => Err(bad(format!("an int parameter's bounds are whole numbers, not {other}"))),
            };
            ParamType::Int { min: int(min, i64::MIN)?, max: int(max, i64::MAX)? }
        }
        "float" => {
            let float = |v: Option<toml::Value>, dflt: f64| match v {
                None => dflt,
                Some(toml::Value::Integer(i)) => i as f64,
                Some(toml::Value::Float(f)) => f,
                Some(_) => dflt,
            };
            ParamType::Float { min: float(min, f64::MIN), max: float(max, f64::MAX) }
        }
        "bool" => ParamType::Bool,
        "string" => ParamType::String,
        "enum" => ParamType::Enum { values: enum_values(src, t, &bad, &missing)? },
        "size" => ParamType::Size,
        "duration" => ParamType::Duration,
        "link" => ParamType::Link,
        "trace" => ParamType::Trace,
        _ => {
            return Err(FieldError {
                at: src.at(ty_value.span()),
                key: "type".into(),
                allowed: type_form,
                got: ty_name.into(),
            }
            .into())
        }
    };
    if let ParamType::Int { min, max } = ty {
        if min > max {
            return Err(bad(format!("min {min} is above max {max}")));
        }
    }
    if let ParamType::Float { min, max } = ty {
        if min.is_nan() || max.is_nan() || min > max {
            return Err(bad(format!("min {min} is above max {max}")));
        }
    }
    let role = match t.get("role") {
        None => Role::Configuration,
        Some(v) => match str_field(src, "role", v, "configuration or environment")? {
            "configuration" => Role::Configuration,
            "environment" => Role::Environment,
            other => {
                return Err(FieldError {
                    at: src.at(v.span()),
                    key: "role".into(),
                    allowed: "configuration or environment".into(),
                    got: other.into(),
                }
                .into())
            }
        },
    };
    let doc = match t.get("doc") {
        Some(v) => str_field(src, "doc", v, "a string")?.to_string(),
        None => String::new(),
    };
    let default_value = t.get("default").ok_or_else(|| missing("default", &ty.allowed_form()))?;
    let default =
        crate::study::typed_value(src, base_dir, &ty, default_value).map_err(|e| CommandTemplateError::BadParam {
            at: src.at(default_value.span()),
            param: name.clone(),
            why: format!("default: {e}"),
        })?;
    Ok(ParamDecl { name, ty, role, default, doc, added_later: false })
}

/// An enum's `values`: a non-empty list of distinct strings.
fn enum_values(
    src: &Source<'_>,
    t: &DeTable<'_>,
    bad: &dyn Fn(String) -> CommandTemplateError,
    missing: &dyn Fn(&str, &str) -> CommandTemplateError,
) -> Result<Vec<String>, CommandTemplateError> {
    const FORM: &str = "a non-empty list of distinct names";
    let v = t.get("values").ok_or_else(|| missing("values", FORM))?;
    let field =
        || FieldError { at: src.at(v.span()), key: "values".into(), allowed: FORM.into(), got: src.snippet(v.span()) };
    let DeValue::Array(items) = v.get_ref() else { return Err(field().into()) };
    let mut values: Vec<String> = Vec::new();
    for item in items.iter() {
        match item.get_ref() {
            DeValue::String(s) if !s.trim().is_empty() && !values.iter().any(|x| x == s.as_ref()) => {
                values.push(s.to_string())
            }
            DeValue::String(s) if !s.trim().is_empty() => return Err(bad(format!("`{s}` is in values twice"))),
            _ => return Err(field().into()),
        }
    }
    if values.is_empty() {
        return Err(field().into());
    }
    Ok(values)
}

impl Template for CommandTemplate {
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn params(&self) -> Vec<ParamDecl> {
        self.params.clone()
    }

    fn requirements(&self) -> Requirements {
        self.requirements
    }

    fn expected_duration(&self, _params: &Params) -> Duration {
        self.expected
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        ctx.check_deadline("before starting the command")?;
        let work_dir =
            std::path::absolute(ctx.work_dir()).map_err(|e| TemplateError::io("resolving the work directory", e))?;
        let argv = self.argv(ctx.params, ctx.seed, &work_dir)?;
        let records = work_dir.join(RECORDS_FILE);
        ctx.recorder().flush().map_err(|e| TemplateError::io("flushing the records before the command", e))?;
        // The contract in the module docs: an existing file is the
        // runner's (its recorder writes there too); otherwise the records
        // are also handed to the context's recorder afterwards.
        let recorder_owns_file = records.exists();
        let open = |name: &str| {
            File::create(work_dir.join(name)).map_err(|e| TemplateError::io(format!("creating {name}"), e))
        };
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(&work_dir)
            .stdin(Stdio::null())
            .stdout(open(STDOUT_LOG)?)
            .stderr(open(STDERR_LOG)?)
            .process_group(0)
            .env(RECORDS_ENV, &records)
            .env(SEED_ENV, ctx.seed.to_string())
            .env(WORK_DIR_ENV, &work_dir);
        for (name, value) in ctx.params.iter() {
            command.env(format!("BRAID_PARAM_{}", name.to_ascii_uppercase()), value.to_text());
        }
        let child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TemplateError::Unavailable(format!(
                "program `{}` not found ({})",
                argv[0],
                if argv[0].contains('/') { "no such file" } else { "not in PATH" }
            )),
            _ => TemplateError::io(format!("starting `{}`", argv[0]), e),
        })?;
        let end = supervise(child, ctx.deadline);

        if !recorder_owns_file {
            if let Ok(text) = std::fs::read_to_string(&records) {
                for record in parse_records(&text) {
                    ctx.recorder().push(record);
                }
            }
        }
        let tail = || stderr_tail(&work_dir.join(STDERR_LOG));
        match end {
            Ended::Exited(status) if status.success() => Ok(()),
            Ended::Exited(status) => {
                Err(TemplateError::Failed(format!("`{}` {}; {}", argv[0], describe(status), tail())))
            }
            Ended::Waiting(e) => Err(TemplateError::io(format!("waiting for `{}`", argv[0]), e)),
            Ended::TimedOut { killed } => Err(TemplateError::Timeout(format!(
                "`{}` still running at the deadline: its process group got SIGTERM{}; {}",
                argv[0],
                if killed { format!(", then SIGKILL {} s later", KILL_GRACE.as_secs()) } else { String::new() },
                tail()
            ))),
        }
    }
}

/// How a supervised program ended.
#[derive(Debug)]
enum Ended {
    /// By itself.
    Exited(ExitStatus),
    /// At the deadline; `killed` if it needed SIGKILL.
    TimedOut { killed: bool },
    /// Waiting failed (should not happen).
    Waiting(std::io::Error),
}

/// Wait for `child` until `deadline`; then SIGTERM its group, and SIGKILL
/// after [`KILL_GRACE`]. Either way, whatever is left in its group is
/// killed and the child is reaped.
///
/// A helper thread waits for the child to exit *without reaping it*
/// (`waitid` with `WNOWAIT`): while the zombie exists its pid, and so the
/// group id, cannot be reused, so signals to the group never reach a
/// stranger. The main thread sleeps on a channel, so a quick program
/// returns at once (no polling delay).
fn supervise(mut child: Child, deadline: Instant) -> Ended {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel::<()>();
    let waiter = std::thread::Builder::new().name(format!("wait-{pid}")).spawn(move || {
        wait_exited_unreaped(pid);
        let _ = tx.send(());
    });
    if waiter.is_err() {
        // No thread: wait in place (no timeout possible without it, so
        // poll).
        return poll(&mut child, deadline);
    }
    let remaining = deadline.saturating_duration_since(Instant::now());
    let ended = match rx.recv_timeout(remaining) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => None,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            signal_group(pid, libc::SIGTERM);
            let exited = rx.recv_timeout(KILL_GRACE).is_ok();
            Some(Ended::TimedOut { killed: !exited })
        }
    };
    // The leader is gone (or must go): nothing of the group outlives it.
    signal_group(pid, libc::SIGKILL);
    if matches!(ended, Some(Ended::TimedOut { killed: true })) {
        // SIGKILL cannot be ignored; bounded anyway, in case the process
        // is stuck in the kernel.
        let _ = rx.recv_timeout(Duration::from_secs(10));
    }
    match (ended, child.try_wait()) {
        (Some(timed_out), _) => timed_out,
        (None, Ok(Some(status))) => Ended::Exited(status),
        (None, Ok(None)) => match child.wait() {
            Ok(status) => Ended::Exited(status),
            Err(e) => Ended::Waiting(e),
        },
        (None, Err(e)) => Ended::Waiting(e),
    }
}

/// Fallback without a helper thread: poll every 10 ms.
fn poll(child: &mut Child, deadline: Instant) -> Ended {
    let pid = child.id() as libc::pid_t;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                signal_group(pid, libc::SIGKILL);
                return Ended::Exited(status);
            }
            Ok(None) if Instant::now() >= deadline => {
                signal_group(pid, libc::SIGTERM);
                let grace = Instant::now() + KILL_GRACE;
                while Instant::now() < grace {
                    if let Ok(Some(_)) = child.try_wait() {
                        signal_group(pid, libc::SIGKILL);
                        return Ended::TimedOut { killed: false };
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                signal_group(pid, libc::SIGKILL);
                let _ = child.wait();
                return Ended::TimedOut { killed: true };
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Ended::Waiting(e),
        }
    }
}

/// Block until `pid` has exited, leaving it unreaped.
fn wait_exited_unreaped(pid: libc::pid_t) {
    loop {
        // SAFETY: waitid only writes the siginfo_t we pass, which lives on
        // this stack frame; WNOWAIT leaves the child for Child::wait.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Send `signal` to the process group `pgid` (no such group: nothing to
/// do).
fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory effects; a negative pid addresses the
    // group, which exists while its unreaped leader does.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// "exited with status 3" or "was killed by signal 11 (SIGSEGV)".
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => {
            format!("was killed by signal {sig}{}", signal_name(sig).map(|n| format!(" ({n})")).unwrap_or_default())
        }
        (None, None) => format!("ended with {status}"),
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// "last lines of stderr:\n..." (at most [`STDERR_TAIL_LINES`] lines of
/// the last 8 KiB), or "stderr was empty".
fn stderr_tail(path: &Path) -> String {
    const MAX: u64 = 8192;
    let read = || -> std::io::Result<String> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    let text = read().unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..];
    if tail.iter().all(|l| l.trim().is_empty()) {
        "stderr was empty".to_string()
    } else {
        format!("last lines of stderr:\n{}", tail.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Value;
    use crate::record::{Record, Recorder};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "braid-lab-cmd-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("work")).unwrap();
            TempDir(dir)
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p
        }
        fn work(&self) -> PathBuf {
            self.0.join("work")
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn defaults(t: &CommandTemplate) -> Params {
        let mut p = Params::default();
        for d in t.params() {
            p.insert(&d.name, d.default);
        }
        p
    }

    /// Run `t` with `params` and an in-memory recorder.
    fn run(
        t: &CommandTemplate,
        params: &Params,
        work: &Path,
        timeout: Duration,
    ) -> (Result<(), TemplateError>, Vec<Record>) {
        let mut rec = Recorder::in_memory();
        let result = {
            let mut ctx = Context::new(params, 42, Instant::now() + timeout, &mut rec, work, "test");
            t.run(&mut ctx)
        };
        (result, rec.take())
    }

    /// Whether `pid` still runs a moment after it was signalled: a signal
    /// is delivered asynchronously, so on a loaded machine the process may
    /// take a while to die (given up to 5 s).
    fn survives(pid: i32) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while alive(pid) {
            if Instant::now() > until {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn alive(pid: i32) -> bool {
        // A zombie (never reaped when PID 1 does not reap) counts as dead.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) != Some("Z"),
            Err(_) => false,
        }
    }

    #[test]
    fn placeholders_split() {
        assert_eq!(
            split_placeholders("--rate={{ rate }}x{{b}}"),
            Some(vec![
                Piece::Text("--rate=".into()),
                Piece::Param("rate".into()),
                Piece::Text("x".into()),
                Piece::Param("b".into())
            ])
        );
        assert_eq!(split_placeholders("plain"), Some(vec![Piece::Text("plain".into())]));
        assert_eq!(split_placeholders("{{open"), None);
    }

    #[test]
    fn a_python_program_reports_records() {
        let dir = TempDir::new("py");
        dir.write(
            "probe.py",
            "import json, os, sys\n\
             rate = int(sys.argv[1])\n\
             with open(os.environ['BRAID_LAB_RECORDS'], 'a') as f:\n\
             \x20   f.write(json.dumps({'metric': 'rate', 'value': rate}) + '\\n')\n\
             \x20   f.write(json.dumps({'series': 'cwnd', 't': 0.5, 'value': 10}) + '\\n')\n\
             \x20   f.write(json.dumps({'warn': 'seed ' + os.environ['BRAID_LAB_SEED']}) + '\\n')\n\
             print('hello')\n",
        );
        let path = dir.write(
            "probe.toml",
            "command = [\"python3\", \"{{template_dir}}/probe.py\", \"{{rate}}\"]\n\
             [params.rate]\ntype = \"int\"\ndefault = 1024\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        assert_eq!(t.name(), "probe");
        let (result, records) = run(&t, &defaults(&t), &dir.work(), Duration::from_secs(30));
        result.unwrap();
        assert_eq!(
            records,
            [
                Record::Metric { name: "rate".into(), value: 1024.0 },
                Record::Series { name: "cwnd".into(), t: 0.5, value: 10.0 },
                Record::Warn { warn: "seed 42".into() },
            ]
        );
        assert_eq!(std::fs::read_to_string(dir.work().join(STDOUT_LOG)).unwrap(), "hello\n");
        // The file holds them too: the runner's contract.
        assert_eq!(parse_records(&std::fs::read_to_string(dir.work().join(RECORDS_FILE)).unwrap()), records);
    }

    #[test]
    fn params_reach_argv_and_environment() {
        let dir = TempDir::new("env");
        let path = dir.write(
            "t.toml",
            "name = \"envy\"\n\
             command = [\"/bin/sh\", \"-c\", \"printf '%s|%s|%s|%s|%s' \\\"$1\\\" \\\"$BRAID_PARAM_LINK\\\" \\\"$BRAID_PARAM_WAIT\\\" \\\"$BRAID_LAB_SEED\\\" \\\"$(pwd)\\\" > out.txt\", \"sh\", \"x={{wait}}/{{mode}}\"]\n\
             [params.wait]\ntype = \"duration\"\ndefault = 1.5\n\
             [params.mode]\ntype = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = \"b\"\n\
             [params.link]\ntype = \"link\"\ndefault = \"rtt=20ms,rate=10mbit\"\nrole = \"environment\"\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        let decls = t.params();
        assert_eq!(decls.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["wait", "mode", "link"], "file order");
        assert_eq!(decls[2].role, Role::Environment);
        let mut params = defaults(&t);
        params.insert("mode", Value::Enum("a".into()));
        let (result, _) = run(&t, &params, &dir.work(), Duration::from_secs(30));
        result.unwrap();
        let out = std::fs::read_to_string(dir.work().join("out.txt")).unwrap();
        let link = decls[2].default.to_text();
        let work = std::fs::canonicalize(dir.work()).unwrap();
        assert_eq!(out, format!("x=1.5s/a|{link}|1.5s|42|{}", work.display()));
    }

    #[test]
    fn nonzero_exit_reports_the_stderr_tail() {
        let dir = TempDir::new("fail");
        let path = dir.write(
            "t.toml",
            "command = [\"/bin/sh\", \"-c\", \"for i in $(seq 1 30); do echo line$i >&2; done; exit 3\"]\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        let (result, _) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(30));
        let msg = match result {
            Err(TemplateError::Failed(msg)) => msg,
            other => panic!("{other:?}"),
        };
        assert!(msg.contains("exited with status 3"), "{msg}");
        assert!(msg.contains("line30") && msg.contains("line11"), "{msg}");
        assert!(!msg.contains("line10\n"), "only the last {STDERR_TAIL_LINES} lines: {msg}");
    }

    #[test]
    fn the_deadline_kills_the_whole_group() {
        let dir = TempDir::new("timeout");
        let path = dir.write(
            "t.toml",
            "command = [\"/bin/sh\", \"-c\", \"sleep 60 & echo $! > grandchild.pid; echo started >&2; wait\"]\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        let started = Instant::now();
        let (result, _) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(1));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let msg = match result {
            Err(TemplateError::Timeout(msg)) => msg,
            other => panic!("{other:?}"),
        };
        assert!(msg.contains("SIGTERM") && msg.contains("started"), "{msg}");
        let pid: i32 = std::fs::read_to_string(dir.work().join("grandchild.pid")).unwrap().trim().parse().unwrap();
        assert!(!survives(pid), "the grandchild sleep {pid} survived");
    }

    #[test]
    fn a_program_ignoring_sigterm_gets_sigkill() {
        let dir = TempDir::new("stubborn");
        let path = dir.write(
            "t.toml",
            "command = [\"/bin/sh\", \"-c\", \"trap '' TERM; echo $$ > self.pid; while true; do sleep 0.05; done\"]\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        let started = Instant::now();
        let (result, _) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(1));
        let elapsed = started.elapsed();
        assert!(elapsed >= KILL_GRACE && elapsed < KILL_GRACE + Duration::from_secs(3), "{elapsed:?}");
        match result {
            Err(TemplateError::Timeout(msg)) => assert!(msg.contains("SIGKILL"), "{msg}"),
            other => panic!("{other:?}"),
        }
        let pid: i32 = std::fs::read_to_string(dir.work().join("self.pid")).unwrap().trim().parse().unwrap();
        assert!(!survives(pid));
    }

    #[test]
    fn leftovers_are_killed_when_the_program_exits() {
        let dir = TempDir::new("leftover");
        let path = dir.write("t.toml", "command = [\"/bin/sh\", \"-c\", \"sleep 60 & echo $! > bg.pid\"]\n");
        let t = CommandTemplate::load(&path).unwrap();
        let (result, _) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(30));
        result.unwrap();
        let pid: i32 = std::fs::read_to_string(dir.work().join("bg.pid")).unwrap().trim().parse().unwrap();
        // The kill is sent before run returns; give the kernel a moment to
        // deliver it.
        let until = Instant::now() + Duration::from_secs(2);
        while alive(pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!survives(pid), "background sleep {pid} survived");
    }

    #[test]
    fn a_file_recorder_on_the_same_file_gets_no_duplicates() {
        let dir = TempDir::new("filerec");
        let path = dir.write(
            "t.toml",
            "command = [\"/bin/sh\", \"-c\", \"echo '{\\\"metric\\\":\\\"m\\\",\\\"value\\\":2}' >> \\\"$BRAID_LAB_RECORDS\\\"\"]\n",
        );
        let t = CommandTemplate::load(&path).unwrap();
        let file = dir.work().join(RECORDS_FILE);
        let mut rec = Recorder::create(&file).unwrap();
        rec.record("before", 1.0);
        {
            let params = Params::default();
            let work = dir.work();
            let mut ctx = Context::new(&params, 1, Instant::now() + Duration::from_secs(30), &mut rec, &work, "t");
            t.run(&mut ctx).unwrap();
        }
        rec.record("after", 3.0);
        drop(rec);
        let names: Vec<String> = parse_records(&std::fs::read_to_string(&file).unwrap())
            .into_iter()
            .map(|r| match r {
                Record::Metric { name, .. } => name,
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names, ["before", "m", "after"]);
    }

    #[test]
    fn a_missing_program_is_unavailable() {
        let dir = TempDir::new("missing");
        let path = dir.write("t.toml", "command = [\"./no-such-program\"]\n");
        let t = CommandTemplate::load(&path).unwrap();
        let (result, _) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(5));
        match result {
            Err(TemplateError::Unavailable(msg)) => assert!(msg.contains("no-such-program"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_relative_program_path_starts_at_the_template_directory() {
        let dir = TempDir::new("relprog");
        let script =
            dir.write("bin.sh", "#!/bin/sh\necho '{\"metric\":\"ok\",\"value\":1}' >> \"$BRAID_LAB_RECORDS\"\n");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = dir.write("t.toml", "command = [\"./bin.sh\"]\n");
        let t = CommandTemplate::load(&path).unwrap();
        let (result, records) = run(&t, &Params::default(), &dir.work(), Duration::from_secs(30));
        result.unwrap();
        assert_eq!(records, [Record::Metric { name: "ok".into(), value: 1.0 }]);
    }

    #[test]
    fn load_errors_name_line_and_key() {
        let p = Path::new("tpl/x.toml");
        let cases: &[(&str, usize, &str)] = &[
            ("command = [\"a\", \"{{nope}}\"]\n", 1, "`{{nope}}`"),
            ("command = [\"a\",\n  \"{{open\"]\n", 2, "without"),
            ("description = \"d\"\n", 1, "no `command`"),
            ("command = []\n", 1, "non-empty list"),
            ("command = [\"a\"]\nbogus = 1\n", 2, "unknown key `bogus`"),
            ("command = [\"a\"]\n[params.r]\ntype = \"sise\"\ndefault = 1\n", 3, "one of int"),
            ("command = [\"a\"]\n[params.r]\ntype = \"size\"\n", 2, "no `default`"),
            ("command = [\"a\"]\n[params.r]\ntype = \"size\"\ndefault = \"lots\"\n", 4, "e.g. 4096"),
            ("command = [\"a\"]\n[params.r]\ntype = \"enum\"\ndefault = \"x\"\n", 2, "no `values`"),
            ("command = [\"a\"]\n[params.r]\ntype = \"enum\"\nvalues = [\"a\"]\ndefault = \"x\"\n", 5, "one of a"),
            ("command = [\"a\"]\n[params.r]\ntype = \"size\"\nmin = 1\ndefault = 1\n", 2, "min and max"),
            ("command = [\"a\"]\n[params.R]\ntype = \"int\"\ndefault = 1\n", 2, "a-z"),
            ("command = [\"a\"]\n[params.seed]\ntype = \"int\"\ndefault = 1\n", 2, "reserved"),
            ("command = [\"a\"]\n[params.r]\ntype = \"int\"\nmin = 5\ndefault = 1\n", 5, "out of range"),
            (
                "command = [\"a\"]\n[params.r]\ntype = \"int\"\ndefault = 1\nrole = \"system\"\n",
                5,
                "configuration or environment",
            ),
            ("command = [\"a\"]\n[params.t]\ntype = \"trace\"\ndefault = \"no-such.trace\"\n", 4, "does not exist"),
            ("command = [\"a\"]\nexpected_duration = \"soon\"\n", 2, "positive duration"),
        ];
        for (text, line, needle) in cases {
            let e = CommandTemplate::parse(text, p).unwrap_err();
            assert_eq!(e.location().map(|l| l.line), Some(*line), "{text:?}: {e}");
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("tpl/x.toml:{line}:")), "{msg}");
            assert!(msg.contains(needle), "{text:?}: {msg}");
        }
    }

    #[test]
    fn declarations_parse_with_bounds_and_docs() {
        let t = CommandTemplate::parse(
            "name = \"n\"\nversion = 3\nexpected_duration = \"2s\"\nexclusive = true\nemulator = true\ncommand = [\"a\"]\n\
             [params.k]\ntype = \"int\"\nmin = 1\nmax = 8\ndefault = 2\ndoc = \"the k\"\n\
             [params.f]\ntype = \"float\"\nmax = 1\ndefault = 0.5\nrole = \"environment\"\n",
            Path::new("n.toml"),
        )
        .unwrap();
        assert_eq!((t.name(), t.version()), ("n", 3));
        assert_eq!(t.expected_duration(&Params::default()), Duration::from_secs(2));
        assert_eq!(t.requirements(), Requirements { emulator: true, exclusive: true });
        let d = t.params();
        assert_eq!(d[0].ty, ParamType::int_range(1, 8));
        assert_eq!((d[0].default.clone(), d[0].doc.as_str()), (Value::Int(2), "the k"));
        assert_eq!(d[1].ty, ParamType::Float { min: f64::MIN, max: 1.0 });
        assert_eq!(d[1].role, Role::Environment);
    }
}
