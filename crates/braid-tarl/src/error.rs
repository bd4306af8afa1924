//! Source positions and front-end errors (syntax and type errors) of TARL.
//!
//! Every error carries the 1-based line and column of the offending token and
//! renders as `file:line:col: message`, so a rule author can jump to it.

use std::fmt;

/// A position in the rule source: byte offset plus 1-based line and column.
///
/// Spans compare equal to every other span: the AST is compared structurally
/// (for `parse(pretty(ast)) == ast`), and positions are not part of a rule's meaning.
#[derive(Clone, Copy, Debug, Default, Eq)]
pub struct Span {
    /// Byte offset of the first character.
    pub offset: usize,
    /// 1-based line.
    pub line: u32,
    /// 1-based column in characters.
    pub col: u32,
}

impl PartialEq for Span {
    fn eq(&self, _other: &Span) -> bool {
        true
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Which front-end stage rejected the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The lexer or parser: the text is not a TARL rule.
    Syntax,
    /// The type checker: unknown names, wrong types, unbound variables.
    Type,
}

/// A rule that does not compile, with the position of the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{col}: {kind_name} error: {message}", kind_name = match .kind { ErrorKind::Syntax => "syntax", ErrorKind::Type => "type" })]
pub struct TarlError {
    /// Syntax or type error.
    pub kind: ErrorKind,
    /// The file (or other source name) the rule came from.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What is wrong, naming the offending thing and the allowed form.
    pub message: String,
}

impl TarlError {
    pub(crate) fn syntax(span: Span, message: impl Into<String>) -> Self {
        Self::at(ErrorKind::Syntax, span, message)
    }

    pub(crate) fn typ(span: Span, message: impl Into<String>) -> Self {
        Self::at(ErrorKind::Type, span, message)
    }

    fn at(kind: ErrorKind, span: Span, message: impl Into<String>) -> Self {
        TarlError {
            kind,
            file: String::from("<rule>"),
            line: span.line,
            col: span.col,
            message: message.into(),
        }
    }

    /// The same error attributed to `file`.
    pub fn in_file(mut self, file: &str) -> Self {
        self.file = file.to_string();
        self
    }
}
