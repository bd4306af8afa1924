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
    let _ = writeln!(
        out,
        "{:gutter$}--> {origin}:{}:{}",
        "", d.span.line, d.span.column
    );
    let _ = writeln!(out, "{:gutter$} |", "");
    let _ = writeln!(out, "{line_no} | {}", text.replace('\t', " "));
    // Underline at most to the end of the quoted line.
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

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.diagnostics[0])?;
        if self.diagnostics.len() > 1 {
            write!(f, " (and {} more)", self.diagnostics.len() - 1)?;
        }
        Ok(())
    }
}

/// The candidate closest to `word` by edit distance, if it is close enough
/// to be a plausible typo.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
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
