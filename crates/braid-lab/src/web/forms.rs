//! The new-study form and the add-values form: what the browser sends,
//! turned into a study file and validated by [`Study::parse`], the very
//! check `braid lab run` applies to a file, so a bad value gets the CLI's
//! message (without the file position, which means nothing in a form),
//! attached to its field.
//!
//! A value list is one value per line. Values are written into the study
//! file as the TOML the CLI expects: numbers and booleans as themselves
//! when they read as such, everything else as a TOML string (quoted by
//! the `toml` crate, so no input can add keys or tables). A value of the
//! wrong type therefore reaches the study parser, which names the key and
//! the allowed form.
//!
//! Studies made in the browser use built-in templates only: a command
//! template runs a program of the user's choice, which a web form must not
//! be able to name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::WebError;
use crate::param::{ParamDecl, ParamType, Role};
use crate::plan::{Plan, PlanSummary};
use crate::study::{Study, StudyError};
use crate::template::Template;

/// The field a form-wide message is attached to.
pub const FORM_FIELD: &str = "_form";

/// Values for a parameter: one per line in a string, or a JSON list.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ValueList {
    /// One value per line; blank lines are ignored.
    Lines(String),
    /// One value per item.
    List(Vec<String>),
}

impl ValueList {
    /// The values, trimmed, blank ones dropped.
    pub fn values(&self) -> Vec<String> {
        let items: Vec<&str> = match self {
            ValueList::Lines(s) => s.lines().collect(),
            ValueList::List(v) => v.iter().map(String::as_str).collect(),
        };
        items.into_iter().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    }
}

/// What the new-study form sends (`POST /api/plan`, `POST /api/studies`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct NewStudy {
    /// A built-in template's name.
    pub template: String,
    /// The study's name.
    pub name: String,
    /// Repetitions (empty: 1).
    #[serde(default)]
    pub repetitions: String,
    /// Base seed (empty: 0).
    #[serde(default)]
    pub seed: String,
    /// Per-experiment timeout (empty: derived from the expected duration).
    #[serde(default)]
    pub timeout: String,
    /// Value lists by parameter; a parameter left out (or empty) takes the
    /// template's default.
    #[serde(default)]
    pub values: BTreeMap<String, ValueList>,
}

/// What the add-values form sends (`POST /api/studies/{name}/values`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct AddValues {
    /// New values by parameter.
    pub values: BTreeMap<String, ValueList>,
}

/// A validated form: the study and its plan's summary.
#[derive(Debug)]
pub struct Checked {
    /// The study.
    pub study: Study,
    /// Its experiment count and expected duration.
    pub summary: PlanSummary,
}

/// The path a browser-made study is parsed at: beside the database, so a
/// relative trace path starts there. The file is never written.
pub fn browser_study_path(db: &Path) -> PathBuf {
    db.parent().unwrap_or(Path::new("")).join("browser-study.toml")
}

/// A value as the TOML the study parser expects for its type.
pub fn toml_value(ty: &ParamType, text: &str) -> toml::Value {
    let t = text.trim();
    let as_string = || toml::Value::String(t.to_string());
    match ty {
        ParamType::Int { .. } => t.parse::<i64>().map(toml::Value::Integer).unwrap_or_else(|_| as_string()),
        ParamType::Float { .. } => match (t.parse::<i64>(), t.parse::<f64>()) {
            (Ok(i), _) => toml::Value::Integer(i),
            (_, Ok(f)) => toml::Value::Float(f),
            _ => as_string(),
        },
        ParamType::Bool => match t {
            "true" => toml::Value::Boolean(true),
            "false" => toml::Value::Boolean(false),
            _ => as_string(),
        },
        _ => as_string(),
    }
}

/// A whole number if it reads as one, else the text (for the parser to
/// refuse with the field's allowed form).
fn int_or_text(text: &str) -> toml::Value {
    let t = text.trim();
    t.parse::<i64>().map(toml::Value::Integer).unwrap_or_else(|_| toml::Value::String(t.to_string()))
}

/// The form's study file, for `template`.
pub fn study_text(form: &NewStudy, template: &dyn Template) -> Result<String, WebError> {
    let decls = template.params();
    if let Some(unknown) = form.values.keys().find(|k| !decls.iter().any(|d| &d.name == *k)) {
        let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        return Err(WebError::Fields(vec![(
            unknown.clone(),
            format!(
                "template `{}` has no parameter `{unknown}`; its parameters: {}",
                template.name(),
                names.join(", ")
            ),
        )]));
    }
    let mut doc = toml::Table::new();
    doc.insert("name".into(), toml::Value::String(form.name.trim().to_string()));
    doc.insert("template".into(), toml::Value::String(template.name().to_string()));
    if !form.repetitions.trim().is_empty() {
        doc.insert("repetitions".into(), int_or_text(&form.repetitions));
    }
    if !form.seed.trim().is_empty() {
        doc.insert("seed".into(), int_or_text(&form.seed));
    }
    if !form.timeout.trim().is_empty() {
        doc.insert("timeout".into(), toml::Value::String(form.timeout.trim().to_string()));
    }
    for role in [Role::Configuration, Role::Environment] {
        let mut table = toml::Table::new();
        for decl in decls.iter().filter(|d| d.role == role) {
            let Some(list) = form.values.get(&decl.name) else { continue };
            let values = list.values();
            // The default alone is what an unlisted parameter takes.
            if values.is_empty() || (values.len() == 1 && values[0] == decl.default.to_text()) {
                continue;
            }
            table.insert(decl.name.clone(), list_value(decl, &values));
        }
        if !table.is_empty() {
            doc.insert(role.name().into(), toml::Value::Table(table));
        }
    }
    toml::to_string(&doc).map_err(|e| WebError::Internal(format!("writing the study file: {e}")))
}

fn list_value(decl: &ParamDecl, values: &[String]) -> toml::Value {
    toml::Value::Array(values.iter().map(|v| toml_value(&decl.ty, v)).collect())
}

/// Validate the new-study form: the study, or field errors.
pub fn check_new(form: &NewStudy, db: &Path) -> Result<Checked, WebError> {
    let Some(template) = crate::template::find_builtin(form.template.trim()) else {
        let names: Vec<String> = crate::template::builtins().iter().map(|t| t.name().to_string()).collect();
        return Err(WebError::Fields(vec![(
            "template".into(),
            format!("unknown template `{}`; expected a built-in template ({})", form.template, names.join(", ")),
        )]));
    };
    let text = study_text(form, template.as_ref())?;
    let mut study = Study::parse(&text, &browser_study_path(db), &crate::template::builtins())
        .map_err(|e| WebError::Fields(field_errors(&e)))?;
    // Made in the browser: no file on disk to point to.
    study.path = None;
    let summary = Plan::new(&study).summary(1);
    Ok(Checked { study, summary })
}

/// Add `add`'s values to a stored study file (`text`, read from `path`)
/// and validate the result: the new study, or field errors (a value
/// already listed is the CLI's duplicate-value error).
pub fn check_add(text: &str, path: Option<&Path>, db: &Path, add: &AddValues) -> Result<Checked, WebError> {
    let parse_path = path.map(Path::to_path_buf).unwrap_or_else(|| browser_study_path(db));
    let current = Study::parse(text, &parse_path, &crate::template::builtins())
        .map_err(|e| WebError::BadRequest(format!("the stored study file no longer loads: {e}")))?;
    let mut doc: toml::Table =
        text.parse().map_err(|e| WebError::BadRequest(format!("the stored study file is not valid TOML: {e}")))?;
    let mut any = false;
    for (key, list) in &add.values {
        let values = list.values();
        if values.is_empty() {
            continue;
        }
        let Some(p) = current.param(key) else {
            let names: Vec<&str> = current.params.iter().map(|p| p.decl.name.as_str()).collect();
            return Err(WebError::Fields(vec![(
                key.clone(),
                format!("study `{}` has no parameter `{key}`; its parameters: {}", current.name, names.join(", ")),
            )]));
        };
        any = true;
        let role = p.decl.role.name();
        let table = doc.entry(role.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(table) = table else {
            return Err(WebError::BadRequest(format!("the stored study file's `{role}` is not a table")));
        };
        let entry = table.entry(key.clone()).or_insert_with(|| {
            // Unlisted: it took the default, which stays in the list.
            toml_value(&p.decl.ty, &p.decl.default.to_text())
        });
        if !matches!(entry, toml::Value::Array(_)) {
            let single = entry.clone();
            *entry = toml::Value::Array(vec![single]);
        }
        if let toml::Value::Array(items) = entry {
            items.extend(values.iter().map(|v| toml_value(&p.decl.ty, v)));
        }
    }
    if !any {
        return Err(WebError::Fields(vec![(FORM_FIELD.into(), "no values to add: give at least one".into())]));
    }
    let new_text = toml::to_string(&doc).map_err(|e| WebError::Internal(format!("writing the study file: {e}")))?;
    let mut study = Study::parse(&new_text, &parse_path, &crate::template::builtins())
        .map_err(|e| WebError::Fields(field_errors(&e)))?;
    study.path = path.map(Path::to_path_buf);
    let summary = Plan::new(&study).summary(1);
    Ok(Checked { study, summary })
}

/// A study error as `(field, message)`: the field it is about (a
/// parameter, or a top-level key such as `repetitions`), and the CLI's
/// message without its `file:line:column: ` prefix.
pub fn field_errors(e: &StudyError) -> Vec<(String, String)> {
    let field = match e {
        StudyError::Field(f) => f.key.clone(),
        StudyError::ZeroRepetitions { .. } => "repetitions".into(),
        StudyError::UnknownParam { key, .. }
        | StudyError::WrongTable { key, .. }
        | StudyError::BadValue { key, .. }
        | StudyError::BadLink { key, .. }
        | StudyError::MissingTrace { key, .. }
        | StudyError::EmptyList { key, .. }
        | StudyError::DuplicateValue { key, .. } => key.clone(),
        StudyError::UnknownTemplate { .. } | StudyError::NoTemplate { .. } => "template".into(),
        _ => FORM_FIELD.into(),
    };
    let text = e.to_string();
    let message = match e.location() {
        Some(at) => text.strip_prefix(&format!("{at}: ")).map(str::to_string).unwrap_or(text),
        None => text,
    };
    vec![(field, message)]
}
