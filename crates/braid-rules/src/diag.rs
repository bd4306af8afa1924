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
        let mut out = String::new();
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            render_one(&mut out, d, origin, source);
        }
        out
    }
}

fn render_one(out: &mut String, d: &Diagnostic, origin: &str, source: &str) {
    use std::fmt::Write;
    let line_no = d.span.line.max(1);
    let text = source.lines().nth(line_no as usize - 1).unwrap_or("");
    let gutter = line_no.to_string().len();
    let _ = writeln!(out, "error: {}", d.message);
    let _ = writeln!(out, "{:gutter$}--> {origin}:{}:{}", "", d.span.line, d.span.column);
    let _ = writeln!(out, "{:gutter$} |", "");
    let _ = writeln!(out, "{line_no} | {}", text.replace('\t', " "));
    let col = d.span.column.max(1) as usize - 1;
    let line_chars = text.chars().count();
    let len_chars = source
        .get(d.span.start..d.span.end.min(source.len()))
        .map(|s| s.chars().take_while(|&c| c != '\n').count())
        .unwrap_or(1)
        .clamp(1, line_chars.saturating_sub(col).max(1));
    let _ = writeln!(out, "{:gutter$} | {:col$}{}", "", "", "^".repeat(len_chars));
    if let Some(h) = &d.hint {
        let _ = writeln!(out, "{:gutter$} = hint: {h}", "");
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

/// The candidate closest to `word` by edit distance, if close enough to be
/// a plausible typo.
pub(crate) fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.len() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}
