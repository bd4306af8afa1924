//! Tokens of the rule language, with positions. `#` and `//` start a
//! comment to the end of the line. A number may carry a unit suffix written
//! directly after it (`80ms`, `1%`, `10mbit`, `2/s`); see [`crate::units`].

use crate::ast::{Literal, Span};
use crate::diag::Diagnostic;
use crate::units::Unit;

/// A token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    Number(Literal),
    LParen,
    RParen,
    Comma,
    Semi,
    Colon,
    Assign,
    Plus,
    Minus,
    Star,
    Slash,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    Ne,
    Eof,
}

impl Tok {
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Number(_) => "a number".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Semi => "`;`".into(),
            Tok::Colon => "`:`".into(),
            Tok::Assign => "`=`".into(),
            Tok::Plus => "`+`".into(),
            Tok::Minus => "`-`".into(),
            Tok::Star => "`*`".into(),
            Tok::Slash => "`/`".into(),
            Tok::Lt => "`<`".into(),
            Tok::Le => "`<=`".into(),
            Tok::Gt => "`>`".into(),
            Tok::Ge => "`>=`".into(),
            Tok::EqEq => "`==`".into(),
            Tok::Ne => "`!=`".into(),
            Tok::Eof => "the end of the file".into(),
        }
    }
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub(crate) fn lex(src: &str) -> Result<Vec<(Tok, Span)>, Diagnostic> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut i = 0;
    let mut line = 1u32;
    let mut col = 1u32;
    let byte_at = |k: usize| chars.get(k).map(|c| c.0).unwrap_or(src.len());
    while i < chars.len() {
        let (start, c) = chars[i];
        let span_from = |j: usize, line: u32, col: u32| Span {
            start,
            end: byte_at(j),
            line,
            column: col,
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        let next = chars.get(i + 1).map(|c| c.1);
        if c == '#' || (c == '/' && next == Some('/')) {
            while i < chars.len() && chars[i].1 != '\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_ascii_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let text: String = chars[i..j].iter().map(|c| c.1).collect();
            out.push((Tok::Ident(text), span_from(j, line, col)));
            col += (j - i) as u32;
            i = j;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < chars.len() && chars[j].1.is_ascii_digit() {
                j += 1;
            }
            let mut integer = true;
            if chars.get(j).map(|c| c.1) == Some('.') && chars.get(j + 1).is_some_and(|c| c.1.is_ascii_digit()) {
                integer = false;
                j += 1;
                while j < chars.len() && chars[j].1.is_ascii_digit() {
                    j += 1;
                }
            }
            let digits: String = chars[i..j].iter().map(|c| c.1).collect();
            let mantissa: f64 = digits.parse().unwrap_or(f64::INFINITY);
            // The unit suffix: letters, `%`, or `/s` not followed by a name.
            let mut k = j;
            if chars.get(k).map(|c| c.1) == Some('%') {
                k += 1;
            } else if chars.get(k).is_some_and(|c| c.1.is_ascii_alphabetic()) {
                while k < chars.len() && chars[k].1.is_ascii_alphanumeric() {
                    k += 1;
                }
            } else if chars.get(k).map(|c| c.1) == Some('/')
                && chars.get(k + 1).map(|c| c.1) == Some('s')
                && !chars.get(k + 2).is_some_and(|c| c.1.is_ascii_alphanumeric() || c.1 == '_')
            {
                k += 2;
            }
            let suffix: String = chars[j..k].iter().map(|c| c.1).collect();
            let span = span_from(k, line, col);
            let unit = Unit::parse(&suffix).ok_or_else(|| {
                Diagnostic::new(span, format!("unknown unit `{suffix}`"))
                    .hint(format!("units are {}", Unit::all_suffixes()))
            })?;
            if !mantissa.is_finite() {
                return Err(Diagnostic::new(span, "number too large"));
            }
            out.push((Tok::Number(Literal { mantissa, integer, unit }), span));
            col += (k - i) as u32;
            i = k;
            continue;
        }
        let two = next.map(|n| (c, n));
        let (tok, len) = match two {
            Some(('<', '=')) => (Tok::Le, 2),
            Some(('>', '=')) => (Tok::Ge, 2),
            Some(('=', '=')) => (Tok::EqEq, 2),
            Some(('!', '=')) => (Tok::Ne, 2),
            _ => match c {
                '(' => (Tok::LParen, 1),
                ')' => (Tok::RParen, 1),
                ',' => (Tok::Comma, 1),
                ';' => (Tok::Semi, 1),
                ':' => (Tok::Colon, 1),
                '=' => (Tok::Assign, 1),
                '+' => (Tok::Plus, 1),
                '-' => (Tok::Minus, 1),
                '*' => (Tok::Star, 1),
                '/' => (Tok::Slash, 1),
                '<' => (Tok::Lt, 1),
                '>' => (Tok::Gt, 1),
                other => {
                    return Err(Diagnostic::new(span_from(i + 1, line, col), format!("unexpected character `{other}`"))
                        .hint("rules use names, numbers with units, ( ) , ; : = + - * / < <= > >= == !="))
                }
            },
        };
        out.push((tok, span_from(i + len, line, col)));
        i += len;
        col += len as u32;
    }
    out.push((
        Tok::Eof,
        Span {
            start: src.len(),
            end: src.len(),
            line,
            column: col,
        },
    ));
    Ok(out)
}
