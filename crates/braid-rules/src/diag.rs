//! Errors of the rule front end: every problem names a line and a column
//! and, where one helps, how to fix it; [`RuleError::render`] prints them
//! the way a compiler does, quoting the line.

use std::fmt;

use crate::ast::Span;

/// One problem found in a rule file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the problem is.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl Eq for Span {}

impl Diagnostic {
    pub(crate) fn new(span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            span,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Where and what, for [`braid_core::diag`]'s renderer.
    fn located(&self) -> braid_core::diag::Located<'_> {
        let Span { start, end, line, column } = self.span;
        braid_core::diag::Located { start, end, line, column, message: &self.message, hint: self.hint.as_deref() }
    }

    pub(crate) fn hint_opt(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.span.line, self.span.column, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// Which stage rejected the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The text is not a rule file (one error, where parsing stopped).
    Syntax,
    /// The rules parse but do not fit the vocabulary or the units.
    Type,
}

/// Rules that do not compile: one syntax error, or every type error the
/// checker found, in source order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct RuleError {
    /// Which stage failed.
    pub stage: Stage,
    /// The problems, never empty.
    pub diagnostics: Vec<Diagnostic>,
}

impl RuleError {
    pub(crate) fn syntax(d: Diagnostic) -> Self {
        RuleError {
            stage: Stage::Syntax,
            diagnostics: vec![d],
        }
    }

    /// The first problem, if any (a `RuleError` built by this crate always
    /// has one).
    pub fn first(&self) -> Option<&Diagnostic> {
        self.diagnostics.first()
    }

    /// Renders every problem with `origin:line:col`, the quoted line and a
    /// caret under the offending text:
    ///
    /// ```text
    /// error: unknown metric `rttt`
    ///  --> rules.eca:2:3
    ///   |
    /// 2 |   rttt > 80ms: set transport = braid;
    ///   |   ^^^^
    ///   = hint: did you mean `rtt`?
    /// ```
    pub fn render(&self, origin: &str, source: &str) -> String {
        braid_core::diag::render_all(origin, source, self.diagnostics.iter().map(Diagnostic::located))
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.diagnostics.first() {
            Some(d) => write!(f, "{d}")?,
            None => write!(f, "invalid rules")?,
        }
        if self.diagnostics.len() > 1 {
            write!(f, " (and {} more)", self.diagnostics.len() - 1)?;
        }
        Ok(())
    }
}

pub(crate) use braid_core::diag::suggest;
