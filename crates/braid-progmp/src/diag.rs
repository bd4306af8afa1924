//! Source positions and compile errors: every error names a line, a column
//! and, where one helps, a hint on how to fix it.

use std::fmt;

/// A range of the source text, with the 1-based line and column (in
/// characters) of its first character.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    /// Byte offset of the first character.
    pub start: usize,
    /// Byte offset just past the last character.
    pub end: usize,
    /// 1-based line of `start`.
    pub line: u32,
    /// 1-based column of `start`, counted in characters.
    pub column: u32,
}

impl Span {
    /// The span from the start of `self` to the end of `other`.
    pub(crate) fn to(self, other: Span) -> Span {
        Span {
            end: other.end.max(self.end),
            ..self
        }
    }
}

/// One problem found in a scheduler's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the problem is.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

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

    /// 1-based line.
    pub fn line(&self) -> u32 {
        self.span.line
    }

    /// 1-based column, in characters.
    pub fn column(&self) -> u32 {
        self.span.column
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}",
            self.span.line, self.span.column, self.message
        )?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// A scheduler that does not compile: one syntax error, or every type
/// error the checker found (in source order).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CompileError {
    /// The problems, never empty.
    pub diagnostics: Vec<Diagnostic>,
}

impl CompileError {
    pub(crate) fn one(d: Diagnostic) -> Self {
        CompileError {
            diagnostics: vec![d],
        }
    }

    /// The first problem (there is always one).
    pub fn first(&self) -> &Diagnostic {
        &self.diagnostics[0]
    }

    /// Renders every problem the way a compiler would, quoting the source
    /// line and underlining the offending text:
    ///
    /// ```text
    /// error: RTTT is not a property of a subflow
    ///  --> sched.progmp:2:27
    ///   |
    /// 2 | VAR x = SUBFLOWS.GET(0).RTTT;
    ///   |                         ^^^^
    ///   = hint: did you mean RTT?
    /// ```
    ///
    /// `source` must be the text that was compiled; `origin` names it (a
    /// file name, say).
    pub fn render(&self, origin: &str, source: &str) -> String {
        braid_core::diag::render_all(origin, source, self.diagnostics.iter().map(Diagnostic::located))
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.diagnostics[0])?;
        if self.diagnostics.len() > 1 {
            write!(f, " (and {} more)", self.diagnostics.len() - 1)?;
        }
        Ok(())
    }
}

pub(crate) use braid_core::diag::suggest;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_only() {
        assert_eq!(suggest("RTTT", ["RTT", "CWND"]), Some("RTT"));
        assert_eq!(suggest("QUEUD", ["QUEUED", "SEQ"]), Some("QUEUED"));
        assert_eq!(suggest("XYZ", ["RTT", "CWND"]), None);
    }

    #[test]
    fn render_quotes_the_line_and_underlines() {
        let src = "VAR a = 1;\nVAR x = y;\n";
        let e = CompileError::one(
            Diagnostic::new(
                Span {
                    start: 19,
                    end: 20,
                    line: 2,
                    column: 9,
                },
                "unknown variable y",
            )
            .hint("declare it with VAR first"),
        );
        let r = e.render("s.progmp", src);
        assert!(r.contains("--> s.progmp:2:9"), "{r}");
        assert!(r.contains("2 | VAR x = y;"), "{r}");
        assert!(r.contains("  |         ^\n"), "{r}");
        assert!(r.contains("= hint: declare it with VAR first"), "{r}");
    }
}
