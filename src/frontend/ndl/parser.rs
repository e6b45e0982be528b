//! The NDL syntax tree and its parser: assignments `name = expr`, macro definitions (one
//! line `M(a, b=1) = expr` or a block `M(a) { ... }`), sections `name = [ ... ]` (NDL inside,
//! or `key = value` settings for SimpleNetworkBuilder, SGD and reader), expressions (numbers,
//! strings, dotted names `L1.T`, calls with positional and `key=value` arguments, lists
//! `(a, b)`, unary minus). Semicolons between statements are allowed.

use super::lexer::{Pos, Tok, Token};

#[derive(Clone, Debug)]
pub enum Expr {
    Num(f64, Pos),
    Str(String, Pos),
    /// A name with optional dot access (`L1.BFF.FF`).
    Name(Vec<String>, Pos),
    Call {
        name: String,
        pos: Pos,
        args: Vec<Arg>,
    },
    List(Vec<Expr>, Pos),
}

impl Expr {
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Num(_, p) | Expr::Str(_, p) | Expr::Name(_, p) | Expr::List(_, p) => *p,
            Expr::Call { pos, .. } => *pos,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Arg {
    /// `Some(key)` for `key=value` arguments.
    pub name: Option<(String, Pos)>,
    pub value: Expr,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub default: Option<Expr>,
}

#[derive(Clone, Debug)]
pub enum MacroBody {
    Expr(Expr),
    Block(Vec<Stmt>),
}

#[derive(Clone, Debug)]
pub struct Setting {
    pub key: String,
    pub value: String,
    pub pos: Pos,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Assign {
        name: String,
        pos: Pos,
        expr: Expr,
    },
    Macro {
        name: String,
        pos: Pos,
        params: Vec<Param>,
        body: MacroBody,
    },
    /// `name = [ statements ]`.
    Section {
        name: String,
        pos: Pos,
        body: Vec<Stmt>,
    },
    /// `name = [ key = value ... ]` for the sections that are not NDL.
    Settings {
        name: String,
        pos: Pos,
        entries: Vec<Setting>,
    },
}

/// Sections whose contents are settings, not NDL (compared case-insensitively).
const SETTINGS_SECTIONS: &[&str] = &["simplenetworkbuilder", "sgd", "reader"];

pub struct Parser<'a> {
    toks: &'a [Token],
    i: usize,
    /// Where the text ends (for "unexpected end" errors).
    end: Pos,
    /// Nesting of expressions and blocks now, bounded so that no input overflows the stack.
    depth: usize,
}

/// How deeply expressions and blocks may nest.
pub const MAX_NESTING: usize = 200;

type PResult<T> = Result<T, (Pos, String)>;

impl<'a> Parser<'a> {
    pub fn new(toks: &'a [Token], end: Pos) -> Self {
        Parser {
            toks,
            i: 0,
            end,
            depth: 0,
        }
    }

    fn peek(&self) -> Option<&'a Token> {
        self.toks.get(self.i)
    }

    fn peek_at(&self, k: usize) -> Option<&'a Token> {
        self.toks.get(self.i + k)
    }

    fn is_punct(&self, c: char) -> bool {
        matches!(self.peek(), Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
    }

    fn unexpected(&self, expected: &str) -> (Pos, String) {
        match self.peek() {
            Some(t) => (
                t.pos,
                format!("expected {expected}, found {}", t.describe()),
            ),
            None => (
                self.end,
                format!("expected {expected}, found the end of the file"),
            ),
        }
    }

    fn expect(&mut self, c: char) -> PResult<Pos> {
        if self.is_punct(c) {
            let p = self.toks[self.i].pos;
            self.i += 1;
            Ok(p)
        } else {
            Err(self.unexpected(&format!("'{c}'")))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<(String, Pos)> {
        match self.peek() {
            Some(Token {
                tok: Tok::Ident(s),
                pos,
                ..
            }) => {
                self.i += 1;
                Ok((s.clone(), *pos))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn skip_semicolons(&mut self) {
        while self.is_punct(';') {
            self.i += 1;
        }
    }

    /// Statements up to the end of the text or, with `close`, up to that closing character.
    pub fn statements(&mut self, close: Option<char>) -> PResult<Vec<Stmt>> {
        let mut out = Vec::new();
        loop {
            self.skip_semicolons();
            match (self.peek(), close) {
                (None, None) => return Ok(out),
                (None, Some(c)) => return Err(self.unexpected(&format!("'{c}'"))),
                (Some(_), Some(c)) if self.is_punct(c) => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => out.push(self.statement()?),
            }
        }
    }

    fn statement(&mut self) -> PResult<Stmt> {
        let (name, pos) = self.ident("a statement (name = ... or a macro definition)")?;
        if self.is_punct('(') {
            // A macro definition: parameters, then `=` expr or a `{ block }`.
            self.i += 1;
            let mut params = Vec::new();
            if !self.is_punct(')') {
                loop {
                    let (p, _) = self.ident("a parameter name")?;
                    let default = if self.is_punct('=') {
                        self.i += 1;
                        Some(self.expr()?)
                    } else {
                        None
                    };
                    params.push(Param { name: p, default });
                    if self.is_punct(',') {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
            }
            self.expect(')')?;
            let body = if self.is_punct('{') {
                self.i += 1;
                MacroBody::Block(self.nested(|p| p.statements(Some('}')))?)
            } else if self.is_punct('=') {
                self.i += 1;
                MacroBody::Expr(self.expr()?)
            } else {
                return Err(self.unexpected("'=' or '{' after the macro's parameters"));
            };
            return Ok(Stmt::Macro {
                name,
                pos,
                params,
                body,
            });
        }
        self.expect('=')?;
        if self.is_punct('[') {
            self.i += 1;
            if SETTINGS_SECTIONS.contains(&name.to_ascii_lowercase().as_str()) {
                let entries = self.settings()?;
                return Ok(Stmt::Settings { name, pos, entries });
            }
            let body = self.nested(|p| p.statements(Some(']')))?;
            return Ok(Stmt::Section { name, pos, body });
        }
        let expr = self.expr()?;
        Ok(Stmt::Assign { name, pos, expr })
    }

    /// `key = value` entries up to `]`; a value is the text of its tokens to the end of the
    /// line (or on the next line when nothing follows the `=`), the next `key =` or the
    /// closing bracket.
    fn settings(&mut self) -> PResult<Vec<Setting>> {
        let mut out = Vec::new();
        let mut depth = 0usize;
        loop {
            if self.is_punct(']') {
                self.i += 1;
                return Ok(out);
            }
            let (key, pos) = self.ident("a setting name")?;
            self.expect('=')?;
            let mut value = String::new();
            let mut last_line = 0;
            loop {
                let Some(t) = self.peek() else {
                    return Err(self.unexpected("']'"));
                };
                // A value ends with its line, unless it has not started yet.
                if !value.is_empty() && depth == 0 && t.pos.line > last_line {
                    break;
                }
                last_line = t.pos.line;
                let next_key = matches!(t.tok, Tok::Ident(_))
                    && matches!(
                        self.peek_at(1),
                        Some(Token {
                            tok: Tok::Punct('='),
                            ..
                        })
                    )
                    && !value.is_empty()
                    && depth == 0;
                if next_key || (depth == 0 && matches!(t.tok, Tok::Punct(']'))) {
                    break;
                }
                match t.tok {
                    Tok::Punct('[') => depth += 1,
                    Tok::Punct(']') => depth -= 1,
                    _ => {}
                }
                value.push_str(&t.text);
                self.i += 1;
            }
            out.push(Setting { key, value, pos });
        }
    }

    pub fn expr(&mut self) -> PResult<Expr> {
        self.nested(|p| p.expr_inner())
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        if self.depth >= MAX_NESTING {
            let pos = self.peek().map_or(self.end, |t| t.pos);
            return Err((
                pos,
                format!("expressions and blocks nest deeper than {MAX_NESTING}"),
            ));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self) -> PResult<Expr> {
        let Some(t) = self.peek() else {
            return Err(self.unexpected("an expression"));
        };
        let pos = t.pos;
        match &t.tok {
            Tok::Num(v) => {
                self.i += 1;
                Ok(Expr::Num(*v, pos))
            }
            Tok::Str(s) => {
                self.i += 1;
                Ok(Expr::Str(s.clone(), pos))
            }
            Tok::Punct('-') => {
                self.i += 1;
                match self.expr()? {
                    Expr::Num(v, _) => Ok(Expr::Num(-v, pos)),
                    _ => Err((pos, "unary '-' applies to numbers only".into())),
                }
            }
            Tok::Punct('(') => {
                self.i += 1;
                let mut items = vec![self.expr()?];
                while self.is_punct(',') {
                    self.i += 1;
                    items.push(self.expr()?);
                }
                self.expect(')')?;
                Ok(Expr::List(items, pos))
            }
            Tok::Ident(name) => {
                self.i += 1;
                if self.is_punct('(') {
                    self.i += 1;
                    let mut args = Vec::new();
                    if !self.is_punct(')') {
                        loop {
                            args.push(self.arg()?);
                            if self.is_punct(',') {
                                self.i += 1;
                            } else {
                                break;
                            }
                        }
                    }
                    self.expect(')')?;
                    return Ok(Expr::Call {
                        name: name.clone(),
                        pos,
                        args,
                    });
                }
                let mut path = vec![name.clone()];
                while self.is_punct('.') {
                    self.i += 1;
                    path.push(self.ident("a name after '.'")?.0);
                }
                Ok(Expr::Name(path, pos))
            }
            _ => Err(self.unexpected("an expression")),
        }
    }

    fn arg(&mut self) -> PResult<Arg> {
        if let (
            Some(Token {
                tok: Tok::Ident(k),
                pos,
                ..
            }),
            Some(Token {
                tok: Tok::Punct('='),
                ..
            }),
        ) = (self.peek(), self.peek_at(1))
        {
            self.i += 2;
            return Ok(Arg {
                name: Some((k.clone(), *pos)),
                value: self.expr()?,
            });
        }
        Ok(Arg {
            name: None,
            value: self.expr()?,
        })
    }
}
