//! Tokens of ProgMP (thesis appendix A.5, "LEXER Rules"), with positions.
//!
//! Upper-case words are keywords, entities and property names; the aliases
//! the thesis's own listings use (`IS_EMPTY`, `IS_THROTTLED`, `IS_LOSSY`,
//! `PACKETS_IN_FLIGHT`) map to the grammar's names. Variables start with a
//! lower-case letter (A.5 line 205 enforces this in the lexer "to avoid
//! ambiguity and improve error messages"); unlike A.5 we also allow digits
//! after the first character. `//` and `/* */` comments may appear anywhere
//! whitespace may.

use crate::diag::{suggest, Diagnostic, Span};

/// Reserved upper-case words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kw {
    Scheduler,
    Var,
    If,
    Else,
    Foreach,
    In,
    Return,
    Drop,
    Print,
    Set,
    True,
    False,
    Null,
    And,
    Or,
    Q,
    Qu,
    Rq,
    Subflows,
    /// `R1`..`R6`, holding 0..=5.
    Reg(u8),
    CurrentTimeMs,
    Random,
    Filter,
    Min,
    Max,
    Sum,
    Get,
    Top,
    Pop,
    Empty,
    Count,
    Push,
    SetUser,
    Length,
    Seq,
    User,
    Psh,
    SentOn,
    Id,
    Rtt,
    RttMs,
    RttVar,
    Cwnd,
    Ssthresh,
    SkbsInFlight,
    Queued,
    LostSkbs,
    DelayIn,
    DelayOut,
    DelayOutEstimator,
    IsBackup,
    Throttled,
    Lossy,
    HasWindowFor,
}

/// Every spelling the lexer accepts, aliases included.
pub(crate) const KEYWORDS: &[(&str, Kw)] = &[
    ("SCHEDULER", Kw::Scheduler),
    ("VAR", Kw::Var),
    ("IF", Kw::If),
    ("ELSE", Kw::Else),
    ("FOREACH", Kw::Foreach),
    ("IN", Kw::In),
    ("RETURN", Kw::Return),
    ("DROP", Kw::Drop),
    ("PRINT", Kw::Print),
    ("SET", Kw::Set),
    ("TRUE", Kw::True),
    ("FALSE", Kw::False),
    ("NULL", Kw::Null),
    ("AND", Kw::And),
    ("OR", Kw::Or),
    ("Q", Kw::Q),
    ("QU", Kw::Qu),
    ("RQ", Kw::Rq),
    ("SUBFLOWS", Kw::Subflows),
    ("R1", Kw::Reg(0)),
    ("R2", Kw::Reg(1)),
    ("R3", Kw::Reg(2)),
    ("R4", Kw::Reg(3)),
    ("R5", Kw::Reg(4)),
    ("R6", Kw::Reg(5)),
    ("CURRENT_TIME_MS", Kw::CurrentTimeMs),
    ("RANDOM", Kw::Random),
    ("FILTER", Kw::Filter),
    ("MIN", Kw::Min),
    ("MAX", Kw::Max),
    ("SUM", Kw::Sum),
    ("GET", Kw::Get),
    ("TOP", Kw::Top),
    ("POP", Kw::Pop),
    ("EMPTY", Kw::Empty),
    ("IS_EMPTY", Kw::Empty),
    ("COUNT", Kw::Count),
    ("PUSH", Kw::Push),
    ("SET_USER", Kw::SetUser),
    ("LENGTH", Kw::Length),
    ("SEQ", Kw::Seq),
    ("USER", Kw::User),
    ("PSH", Kw::Psh),
    ("SENT_ON", Kw::SentOn),
    ("ID", Kw::Id),
    ("RTT", Kw::Rtt),
    ("RTT_MS", Kw::RttMs),
    ("RTT_VAR", Kw::RttVar),
    ("CWND", Kw::Cwnd),
    ("SSTHRESH", Kw::Ssthresh),
    ("SKBS_IN_FLIGHT", Kw::SkbsInFlight),
    ("PACKETS_IN_FLIGHT", Kw::SkbsInFlight),
    ("QUEUED", Kw::Queued),
    ("LOST_SKBS", Kw::LostSkbs),
    ("DELAY_IN", Kw::DelayIn),
    ("DELAY_OUT", Kw::DelayOut),
    ("DELAY_OUT_ESTIMATOR", Kw::DelayOutEstimator),
    ("IS_BACKUP", Kw::IsBackup),
    ("THROTTLED", Kw::Throttled),
    ("IS_THROTTLED", Kw::Throttled),
    ("LOSSY", Kw::Lossy),
    ("IS_LOSSY", Kw::Lossy),
    ("HAS_WINDOW_FOR", Kw::HasWindowFor),
];

impl Kw {
    /// The canonical spelling, for messages.
    pub(crate) fn name(self) -> &'static str {
        KEYWORDS
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(s, _)| *s)
            .unwrap_or("?")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    Int(i64),
    Str(String),
    Ident(String),
    Kw(Kw),
    LParen,
    RParen,
    LBrace,
    RBrace,
    Dot,
    Comma,
    Semi,
    Assign,
    Arrow,
    EqEq,
    NotEq,
    Lt,
    Gt,
    Le,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Bang,
    Eof,
}

impl Tok {
    /// How the token reads in a message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Int(v) => format!("number {v}"),
            Tok::Str(_) => "a string".into(),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Kw(k) => k.name().to_string(),
            Tok::Eof => "the end of the scheduler".into(),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::Dot => ".",
            Tok::Comma => ",",
            Tok::Semi => ";",
            Tok::Assign => "=",
            Tok::Arrow => "=>",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Gt => ">",
            Tok::Le => "<=",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Bang => "!",
            _ => "?",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

struct Cursor<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    column: u32,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn mark(&self) -> Span {
        Span {
            start: self.pos,
            end: self.pos,
            line: self.line,
            column: self.column,
        }
    }

    fn close(&self, start: Span) -> Span {
        Span {
            end: self.pos,
            ..start
        }
    }
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>, Diagnostic> {
    let mut c = Cursor {
        src,
        pos: 0,
        line: 1,
        column: 1,
    };
    let mut out = Vec::new();
    loop {
        skip_trivia(&mut c)?;
        let start = c.mark();
        let Some(ch) = c.peek() else {
            out.push(Token {
                tok: Tok::Eof,
                span: start,
            });
            return Ok(out);
        };
        let tok = if ch.is_ascii_digit() {
            lex_int(&mut c, start)?
        } else if ch.is_ascii_alphabetic() || ch == '_' {
            lex_word(&mut c, start)?
        } else if ch == '"' {
            lex_string(&mut c, start)?
        } else {
            lex_symbol(&mut c, start, ch)?
        };
        out.push(Token {
            tok,
            span: c.close(start),
        });
    }
}

fn skip_trivia(c: &mut Cursor<'_>) -> Result<(), Diagnostic> {
    loop {
        match (c.peek(), c.peek2()) {
            (Some(' ' | '\t' | '\r' | '\n'), _) => {
                c.bump();
            }
            (Some('/'), Some('/')) => {
                while let Some(ch) = c.peek() {
                    if ch == '\n' {
                        break;
                    }
                    c.bump();
                }
            }
            (Some('/'), Some('*')) => {
                let start = c.mark();
                c.bump();
                c.bump();
                loop {
                    match (c.peek(), c.peek2()) {
                        (Some('*'), Some('/')) => {
                            c.bump();
                            c.bump();
                            break;
                        }
                        (Some(_), _) => {
                            c.bump();
                        }
                        (None, _) => {
                            return Err(Diagnostic::new(
                                Span {
                                    end: start.start + 2,
                                    ..start
                                },
                                "comment is never closed",
                            )
                            .hint("end it with */"));
                        }
                    }
                }
            }
            _ => return Ok(()),
        }
    }
}

fn lex_int(c: &mut Cursor<'_>, start: Span) -> Result<Tok, Diagnostic> {
    while c.peek().is_some_and(|ch| ch.is_ascii_digit()) {
        c.bump();
    }
    let text = &c.src[start.start..c.pos];
    text.parse::<i64>().map(Tok::Int).map_err(|_| {
        Diagnostic::new(c.close(start), format!("number {text} is too large"))
            .hint(format!("integers are 64-bit signed, at most {}", i64::MAX))
    })
}

fn lex_word(c: &mut Cursor<'_>, start: Span) -> Result<Tok, Diagnostic> {
    while c
        .peek()
        .is_some_and(|ch| ch.is_ascii_alphanumeric() || ch == '_')
    {
        c.bump();
    }
    let word = &c.src[start.start..c.pos];
    let span = c.close(start);
    let first = word.chars().next().unwrap_or('_');
    if first.is_ascii_lowercase() {
        return Ok(Tok::Ident(word.to_string()));
    }
    let all_upper = word
        .chars()
        .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_');
    if first == '_' || !all_upper {
        return Err(Diagnostic::new(span, format!("`{word}` is neither a keyword nor a variable name"))
            .hint("variable names start with a lower-case letter; keywords and properties are all upper case"));
    }
    if let Some((_, kw)) = KEYWORDS.iter().find(|(s, _)| *s == word) {
        return Ok(Tok::Kw(*kw));
    }
    let mut d = Diagnostic::new(span, format!("unknown word {word}"));
    if word.len() == 2 && word.starts_with('R') && word[1..].chars().all(|ch| ch.is_ascii_digit()) {
        d = d.hint("the registers are R1 to R6");
    } else if let Some(s) = suggest(word, KEYWORDS.iter().map(|(s, _)| *s)) {
        d = d.hint(format!("did you mean {s}?"));
    } else {
        d = d.hint("keywords and properties are listed in the braid-progmp documentation");
    }
    Err(d)
}

fn lex_string(c: &mut Cursor<'_>, start: Span) -> Result<Tok, Diagnostic> {
    c.bump();
    let body_start = c.pos;
    loop {
        match c.peek() {
            Some('"') => {
                let s = c.src[body_start..c.pos].to_string();
                c.bump();
                return Ok(Tok::Str(s));
            }
            Some('\n' | '\r') | None => {
                return Err(Diagnostic::new(c.close(start), "string is never closed")
                    .hint("end it with \" on the same line"));
            }
            Some(_) => {
                c.bump();
            }
        }
    }
}

fn lex_symbol(c: &mut Cursor<'_>, start: Span, ch: char) -> Result<Tok, Diagnostic> {
    let next = c.peek2();
    let (tok, len) = match (ch, next) {
        ('=', Some('>')) => (Tok::Arrow, 2),
        ('=', Some('=')) => (Tok::EqEq, 2),
        ('!', Some('=')) => (Tok::NotEq, 2),
        ('<', Some('=')) => (Tok::Le, 2),
        ('>', Some('=')) => (Tok::Ge, 2),
        ('=', _) => (Tok::Assign, 1),
        ('!', _) => (Tok::Bang, 1),
        ('<', _) => (Tok::Lt, 1),
        ('>', _) => (Tok::Gt, 1),
        ('(', _) => (Tok::LParen, 1),
        (')', _) => (Tok::RParen, 1),
        ('{', _) => (Tok::LBrace, 1),
        ('}', _) => (Tok::RBrace, 1),
        ('.', _) => (Tok::Dot, 1),
        (',', _) => (Tok::Comma, 1),
        (';', _) => (Tok::Semi, 1),
        ('+', _) => (Tok::Plus, 1),
        ('-', _) => (Tok::Minus, 1),
        ('*', _) => (Tok::Star, 1),
        ('/', _) => (Tok::Slash, 1),
        ('%', _) => (Tok::Percent, 1),
        _ => {
            c.bump();
            let d = Diagnostic::new(c.close(start), format!("unexpected character {ch:?}"));
            return Err(match ch {
                '&' => d.hint("write AND"),
                '|' => d.hint("write OR"),
                '\'' => d.hint("strings use double quotes"),
                _ => d,
            });
        }
    };
    for _ in 0..len {
        c.bump();
    }
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn aliases_map_to_grammar_names() {
        assert_eq!(
            toks("IS_EMPTY EMPTY")[..2],
            [Tok::Kw(Kw::Empty), Tok::Kw(Kw::Empty)]
        );
        assert_eq!(toks("PACKETS_IN_FLIGHT")[0], Tok::Kw(Kw::SkbsInFlight));
        assert_eq!(
            toks("IS_THROTTLED IS_LOSSY")[..2],
            [Tok::Kw(Kw::Throttled), Tok::Kw(Kw::Lossy)]
        );
    }

    #[test]
    fn comments_anywhere_and_positions() {
        let t = tokenize("/* a\n b */ VAR // x\n  x1 = 3;").unwrap();
        assert_eq!(t[0].tok, Tok::Kw(Kw::Var));
        assert_eq!((t[0].span.line, t[0].span.column), (2, 7));
        assert_eq!(t[1].tok, Tok::Ident("x1".into()));
        assert_eq!((t[1].span.line, t[1].span.column), (3, 3));
        assert_eq!(toks("a=>b==c!=d<=e>=f")[1], Tok::Arrow);
    }

    #[test]
    fn errors_name_position_and_hint() {
        let e = tokenize("VAR x = SUBFLOWS.GET(0).RTTT;").unwrap_err();
        assert_eq!((e.span.line, e.span.column), (1, 25));
        assert_eq!(e.hint.as_deref(), Some("did you mean RTT?"));
        assert!(tokenize("SET(R7, 1);")
            .unwrap_err()
            .hint
            .unwrap()
            .contains("R1 to R6"));
        assert!(tokenize("x && y")
            .unwrap_err()
            .hint
            .unwrap()
            .contains("AND"));
        assert!(tokenize("/* open").is_err());
        assert!(tokenize("\"open\n\"").is_err());
        assert!(tokenize("99999999999999999999").is_err());
        assert!(tokenize("Foo").is_err());
    }
}
