//! The TARL lexer: turns rule text into tokens with positions.
//!
//! Tokens follow the thesis's notation (Frömmgen 2018, §7.2, Listing 7.1):
//! `a - e -> b` (directed edge) lexes as `Ident Minus Ident Arrow Ident`, and
//! `a <- e -> b` (undirected edge) as `Ident LArrow Ident Arrow Ident`.
//! Comments run from `//` or `#` to the end of the line.

use crate::error::{Span, TarlError};

/// One token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// An identifier or keyword.
    Ident(String),
    /// A non-negative number literal.
    Num(f64),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `,`
    Comma,
    /// `;`
    Semi,
    /// `:`
    Colon,
    /// `.`
    Dot,
    /// `=`
    Assign,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `*`
    Star,
    /// `/`
    Slash,
    /// `&&`
    AndAnd,
    /// `||`
    OrOr,
    /// `!`
    Bang,
    /// `->`
    Arrow,
    /// `<-`
    LArrow,
    /// End of input.
    Eof,
}

impl Tok {
    /// How the token is written, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Num(n) => format!("number {n}"),
            Tok::Eof => "end of input".to_string(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Semi => ";",
            Tok::Colon => ":",
            Tok::Dot => ".",
            Tok::Assign => "=",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::AndAnd => "&&",
            Tok::OrOr => "||",
            Tok::Bang => "!",
            Tok::Arrow => "->",
            Tok::LArrow => "<-",
            Tok::Ident(_) | Tok::Num(_) | Tok::Eof => "",
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Its position.
    pub span: Span,
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
///
/// # Errors
/// A character that starts no token, or a malformed number.
pub fn lex(src: &str) -> Result<Vec<Token>, TarlError> {
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let (mut line, mut col) = (1u32, 1u32);
    while i < chars.len() {
        let (off, c) = chars[i];
        let span = Span {
            offset: off,
            line,
            col,
        };
        let next = chars.get(i + 1).map(|&(_, c)| c);
        // Advances over `n` characters of the current line.
        let take = |n: usize, i: &mut usize, col: &mut u32| {
            *i += n;
            *col += n as u32;
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            take(1, &mut i, &mut col);
            continue;
        }
        if c == '#' || (c == '/' && next == Some('/')) {
            while i < chars.len() && chars[i].1 != '\n' {
                take(1, &mut i, &mut col);
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].1.is_ascii_alphanumeric() || chars[i].1 == '_') {
                take(1, &mut i, &mut col);
            }
            let s: String = chars[start..i].iter().map(|&(_, c)| c).collect();
            out.push(Token {
                tok: Tok::Ident(s),
                span,
            });
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].1.is_ascii_digit() {
                take(1, &mut i, &mut col);
            }
            if i + 1 < chars.len() && chars[i].1 == '.' && chars[i + 1].1.is_ascii_digit() {
                take(1, &mut i, &mut col);
                while i < chars.len() && chars[i].1.is_ascii_digit() {
                    take(1, &mut i, &mut col);
                }
            }
            if i < chars.len() && (chars[i].1 == 'e' || chars[i].1 == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j].1 == '+' || chars[j].1 == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].1.is_ascii_digit() {
                    let n = j - i;
                    take(n, &mut i, &mut col);
                    while i < chars.len() && chars[i].1.is_ascii_digit() {
                        take(1, &mut i, &mut col);
                    }
                }
            }
            let s: String = chars[start..i].iter().map(|&(_, c)| c).collect();
            let v: f64 = s
                .parse()
                .map_err(|_| TarlError::syntax(span, format!("malformed number `{s}`")))?;
            if !v.is_finite() {
                return Err(TarlError::syntax(
                    span,
                    format!("number `{s}` is out of range"),
                ));
            }
            out.push(Token {
                tok: Tok::Num(v),
                span,
            });
            continue;
        }
        let two = next.map(|n| (c, n));
        let (tok, n) = match two {
            Some(('=', '=')) => (Tok::EqEq, 2),
            Some(('!', '=')) => (Tok::NotEq, 2),
            Some(('<', '=')) => (Tok::Le, 2),
            Some(('>', '=')) => (Tok::Ge, 2),
            Some(('&', '&')) => (Tok::AndAnd, 2),
            Some(('|', '|')) => (Tok::OrOr, 2),
            Some(('-', '>')) => (Tok::Arrow, 2),
            Some(('<', '-')) => (Tok::LArrow, 2),
            _ => match c {
                '(' => (Tok::LParen, 1),
                ')' => (Tok::RParen, 1),
                ',' => (Tok::Comma, 1),
                ';' => (Tok::Semi, 1),
                ':' => (Tok::Colon, 1),
                '.' => (Tok::Dot, 1),
                '=' => (Tok::Assign, 1),
                '<' => (Tok::Lt, 1),
                '>' => (Tok::Gt, 1),
                '+' => (Tok::Plus, 1),
                '-' => (Tok::Minus, 1),
                '*' => (Tok::Star, 1),
                '/' => (Tok::Slash, 1),
                '!' => (Tok::Bang, 1),
                _ => {
                    return Err(TarlError::syntax(
                        span,
                        format!("unexpected character `{c}`"),
                    ))
                }
            },
        };
        take(n, &mut i, &mut col);
        out.push(Token { tok, span });
    }
    let end = Span {
        offset: src.len(),
        line,
        col,
    };
    out.push(Token {
        tok: Tok::Eof,
        span: end,
    });
    Ok(out)
}
