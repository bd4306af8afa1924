//! Compiler-style diagnostics for Braid's small languages (ProgMP
//! schedulers, ECA rules): a problem rendered with its origin, line and
//! column, the quoted source line and a caret under the offending text, and
//! "did you mean" suggestions for misspelt names. Each language keeps its
//! own span and error types; this module only renders and suggests.

use std::fmt::Write;

/// One problem to render: where it is and what to say.
#[derive(Clone, Copy, Debug)]
pub struct Located<'a> {
    /// Byte offset of the first offending character in the source.
    pub start: usize,
    /// Byte offset just past the last offending character.
    pub end: usize,
    /// 1-based line of `start`.
    pub line: u32,
    /// 1-based column of `start`, in characters.
    pub column: u32,
    /// What is wrong.
    pub message: &'a str,
    /// How to fix it, if there is something useful to say.
    pub hint: Option<&'a str>,
}

/// Appends `d` to `out` the way a compiler prints an error:
///
/// ```
/// use braid_core::diag::{render, Located};
/// let src = "VAR a = 1;\nVAR x = y;\n";
/// let mut out = String::new();
/// render(&mut out, "s.progmp", src, &Located {
///     start: 19, end: 20, line: 2, column: 9,
///     message: "unknown variable y", hint: Some("declare it with VAR first"),
/// });
/// assert_eq!(out, "error: unknown variable y\n --> s.progmp:2:9\n  |\n2 | VAR x = y;\n  |         ^\n  = hint: declare it with VAR first\n");
/// ```
///
/// The underline stops at the end of the quoted line and is at least one
/// character long; a span outside `source` quotes an empty line rather
/// than panicking.
pub fn render(out: &mut String, origin: &str, source: &str, d: &Located<'_>) {
    let line_no = d.line.max(1);
    let text = source.lines().nth(line_no as usize - 1).unwrap_or("");
    let gutter = line_no.to_string().len();
    let _ = writeln!(out, "error: {}", d.message);
    let _ = writeln!(out, "{:gutter$}--> {origin}:{}:{}", "", d.line, d.column);
    let _ = writeln!(out, "{:gutter$} |", "");
    let _ = writeln!(out, "{line_no} | {}", text.replace('\t', " "));
    let col = d.column.max(1) as usize - 1;
    let line_chars = text.chars().count();
    let len_chars = source
        .get(d.start..d.end.min(source.len()))
        .map(|s| s.chars().take_while(|&c| c != '\n').count())
        .unwrap_or(1)
        .clamp(1, line_chars.saturating_sub(col).max(1));
    let _ = writeln!(out, "{:gutter$} | {:col$}{}", "", "", "^".repeat(len_chars));
    if let Some(h) = d.hint {
        let _ = writeln!(out, "{:gutter$} = hint: {h}", "");
    }
}

/// Every problem of `diagnostics` rendered by [`render`], a blank line
/// between two.
pub fn render_all<'a>(origin: &str, source: &str, diagnostics: impl IntoIterator<Item = Located<'a>>) -> String {
    let mut out = String::new();
    for (i, d) in diagnostics.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render(&mut out, origin, source, &d);
    }
    out
}

/// The candidate closest to `word` by edit distance, if close enough (at
/// most a third of the word's length, at least 1) to be a plausible typo.
///
/// ```
/// use braid_core::diag::suggest;
/// assert_eq!(suggest("RTTT", ["RTT", "CWND"]), Some("RTT"));
/// assert_eq!(suggest("XYZ", ["RTT", "CWND"]), None);
/// ```
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.len() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance in characters (insertions, deletions and
/// substitutions each cost 1).
pub fn edit_distance(a: &str, b: &str) -> usize {
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
        assert_eq!(suggest("QUEUD", ["QUEUED", "SEQ"]), Some("QUEUED"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    #[test]
    fn spans_past_the_source_do_not_panic() {
        let mut out = String::new();
        let d = Located { start: 50, end: 60, line: 9, column: 40, message: "m", hint: None };
        render(&mut out, "f", "one line", &d);
        assert!(out.contains("9 | \n"), "{out}");
        assert!(out.ends_with("^\n"), "{out}");
    }
}
