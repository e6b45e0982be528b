//! Parsing the descriptor config syntax, normalising it, and printing Kaldi's canonical form.
//!
//! Three stages: [`tokenize`] splits the text into `(`, `)`, `,` and words (names or numbers);
//! [`GeneralDescriptor::parse`] builds a general expression tree of the simplified syntax;
//! [`GeneralDescriptor::normalize`] turns that tree into the three-level [`Descriptor`]
//! exactly as Kaldi's normalisation does (facts §2.6, §5.3). Every error carries the
//! character offset within the descriptor text of the token or expression at fault.

use crate::io::codec::{fmt_g, parse_float};
use crate::nnet::config_line::is_valid_name;
use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, IndexVar, SumDescriptor};

/// A descriptor syntax or normalisation error at a character offset within the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorError {
    /// 0-based character offset within the descriptor text.
    pub offset: usize,
    /// What went wrong.
    pub msg: String,
}

impl DescriptorError {
    fn new(offset: usize, msg: impl Into<String>) -> Self {
        DescriptorError {
            offset,
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at character {}: {}", self.offset + 1, self.msg)
    }
}

impl std::error::Error for DescriptorError {}

/// Deepest expression nesting accepted (guards the recursive parser's stack).
const MAX_DEPTH: usize = 256;

/// One descriptor token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    LParen,
    RParen,
    Comma,
    /// A name (`[A-Za-z_][A-Za-z0-9_.-]*`) or a number such as `-112`, `+3` or `0.75`.
    Word(String),
}

/// A token with the character offset where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub offset: usize,
}

impl Token {
    fn describe(&self) -> String {
        match &self.kind {
            TokenKind::LParen => "'('".into(),
            TokenKind::RParen => "')'".into(),
            TokenKind::Comma => "','".into(),
            TokenKind::Word(w) => format!("'{w}'"),
        }
    }
}

/// Splits descriptor text into tokens (Kaldi's `DescriptorTokenize`): spaces and tabs
/// separate; `(`, `)` and `,` are tokens of their own; every other run of characters must be
/// a valid name or a number (so `1abc` is an error).
pub fn tokenize(text: &str) -> Result<Vec<Token>, DescriptorError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' | '\n' => i += 1,
            '(' | ')' | ',' => {
                let kind = match c {
                    '(' => TokenKind::LParen,
                    ')' => TokenKind::RParen,
                    _ => TokenKind::Comma,
                };
                out.push(Token { kind, offset: i });
                i += 1;
            }
            _ => {
                let start = i;
                while i < chars.len()
                    && !matches!(chars[i], ' ' | '\t' | '\r' | '\n' | '(' | ')' | ',')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                if !is_valid_name(&word) && parse_float(&word).is_none() {
                    return Err(DescriptorError::new(
                        start,
                        format!("'{word}' is neither a valid name nor a number"),
                    ));
                }
                out.push(Token {
                    kind: TokenKind::Word(word),
                    offset: start,
                });
            }
        }
    }
    Ok(out)
}

/// The general (not yet normalised) expression tree of the simplified descriptor syntax.
#[derive(Clone, Debug, PartialEq)]
pub enum GeneralKind {
    /// A node, by index.
    Node(usize),
    Append(Vec<GeneralDescriptor>),
    Sum(Vec<GeneralDescriptor>),
    Switch(Vec<GeneralDescriptor>),
    Failover(Box<GeneralDescriptor>, Box<GeneralDescriptor>),
    IfDefined(Box<GeneralDescriptor>),
    Offset(Box<GeneralDescriptor>, i32, i32),
    Round(Box<GeneralDescriptor>, i32),
    ReplaceIndex(Box<GeneralDescriptor>, IndexVar, i32),
    Scale(f32, Box<GeneralDescriptor>),
    Const(f32, usize),
}

/// A general expression with the character offset where it starts in the text.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneralDescriptor {
    pub kind: GeneralKind,
    pub offset: usize,
}

impl GeneralDescriptor {
    /// An expression with no known position (for building trees in code).
    pub fn new(kind: GeneralKind) -> Self {
        GeneralDescriptor { kind, offset: 0 }
    }

    /// Parses descriptor text; `resolve` maps a node name to its index or explains why not.
    pub fn parse(
        text: &str,
        resolve: &dyn Fn(&str) -> Result<usize, String>,
    ) -> Result<GeneralDescriptor, DescriptorError> {
        let tokens = tokenize(text)?;
        let end = text.chars().count();
        let mut p = Parser {
            tokens: &tokens,
            pos: 0,
            end,
            resolve,
        };
        let d = p.expr(0)?;
        if let Some(t) = p.peek() {
            return Err(DescriptorError::new(
                t.offset,
                format!("expected end of descriptor, found {}", t.describe()),
            ));
        }
        Ok(d)
    }

    /// Prints the expression as written (no normalisation), in Kaldi's spacing.
    pub fn to_config(&self, node_names: &[String]) -> String {
        let mut s = String::new();
        self.write(node_names, &mut s);
        s
    }

    fn write(&self, names: &[String], s: &mut String) {
        let list = |s: &mut String, op: &str, v: &[GeneralDescriptor]| {
            write_call(s, op, v, |d, s| d.write(names, s));
        };
        match &self.kind {
            GeneralKind::Node(n) => s.push_str(node_name(names, *n)),
            GeneralKind::Append(v) => list(s, "Append", v),
            GeneralKind::Sum(v) => list(s, "Sum", v),
            GeneralKind::Switch(v) => list(s, "Switch", v),
            GeneralKind::Failover(a, b) => {
                s.push_str("Failover(");
                a.write(names, s);
                s.push_str(", ");
                b.write(names, s);
                s.push(')');
            }
            GeneralKind::IfDefined(a) => {
                s.push_str("IfDefined(");
                a.write(names, s);
                s.push(')');
            }
            GeneralKind::Offset(a, t, x) => {
                s.push_str("Offset(");
                a.write(names, s);
                s.push_str(&format!(", {t}"));
                if *x != 0 {
                    s.push_str(&format!(", {x}"));
                }
                s.push(')');
            }
            GeneralKind::Round(a, m) => {
                s.push_str("Round(");
                a.write(names, s);
                s.push_str(&format!(", {m})"));
            }
            GeneralKind::ReplaceIndex(a, var, v) => {
                s.push_str("ReplaceIndex(");
                a.write(names, s);
                s.push_str(&format!(", {}, {v})", var_name(*var)));
            }
            GeneralKind::Scale(alpha, a) => {
                s.push_str(&format!("Scale({}, ", fmt_scalar(*alpha)));
                a.write(names, s);
                s.push(')');
            }
            GeneralKind::Const(v, d) => s.push_str(&format!("Const({}, {d})", fmt_scalar(*v))),
        }
    }

    /// Normalises into Kaldi's three-level form: Append pulled outward and flattened, Sum
    /// made binary and right-nested, Offsets merged and pushed into Sums, Scales multiplied
    /// and pushed down onto node names.
    pub fn normalize(&self) -> Result<Descriptor, DescriptorError> {
        let terms = self.append_terms()?;
        let parts = terms
            .iter()
            .map(|t| t.to_sum(None))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Descriptor { parts })
    }

    /// Splits into Append-free terms: Append concatenates its arguments' terms; any other
    /// operator needs the same number of terms in every argument and is applied termwise.
    fn append_terms(&self) -> Result<Vec<GeneralDescriptor>, DescriptorError> {
        let at = |kind| GeneralDescriptor {
            kind,
            offset: self.offset,
        };
        // Terms of each argument, checked to agree in number.
        let args = |v: &[&GeneralDescriptor]| -> Result<(Vec<Vec<GeneralDescriptor>>, usize), DescriptorError> {
            let mut all = Vec::with_capacity(v.len());
            let mut n = None;
            for d in v {
                let t = d.append_terms()?;
                match n {
                    None => n = Some(t.len()),
                    Some(k) if k != t.len() => {
                        return Err(DescriptorError::new(
                            self.offset,
                            format!(
                                "the arguments of this expression have different numbers of \
                                 Append() terms ({k} and {})",
                                t.len()
                            ),
                        ))
                    }
                    _ => {}
                }
                all.push(t);
            }
            Ok((all, n.unwrap_or(0)))
        };
        // Takes term k of argument a (both in range by construction).
        fn take(all: &mut [Vec<GeneralDescriptor>], a: usize, k: usize) -> GeneralDescriptor {
            std::mem::replace(
                &mut all[a][k],
                GeneralDescriptor::new(GeneralKind::Const(0.0, 1)),
            )
        }
        Ok(match &self.kind {
            GeneralKind::Node(_) | GeneralKind::Const(..) => vec![self.clone()],
            GeneralKind::Append(v) => {
                let mut out = Vec::new();
                for d in v {
                    out.extend(d.append_terms()?);
                }
                out
            }
            GeneralKind::Sum(v) | GeneralKind::Switch(v) => {
                let refs: Vec<&GeneralDescriptor> = v.iter().collect();
                let (mut all, n) = args(&refs)?;
                let is_sum = matches!(self.kind, GeneralKind::Sum(_));
                (0..n)
                    .map(|k| {
                        let items: Vec<_> = (0..all.len()).map(|a| take(&mut all, a, k)).collect();
                        at(if is_sum {
                            GeneralKind::Sum(items)
                        } else {
                            GeneralKind::Switch(items)
                        })
                    })
                    .collect()
            }
            GeneralKind::Failover(a, b) => {
                let (mut all, n) = args(&[a, b])?;
                (0..n)
                    .map(|k| {
                        let x = take(&mut all, 0, k);
                        let y = take(&mut all, 1, k);
                        at(GeneralKind::Failover(Box::new(x), Box::new(y)))
                    })
                    .collect()
            }
            GeneralKind::IfDefined(a)
            | GeneralKind::Offset(a, ..)
            | GeneralKind::Round(a, _)
            | GeneralKind::ReplaceIndex(a, ..)
            | GeneralKind::Scale(_, a) => a
                .append_terms()?
                .into_iter()
                .map(|t| {
                    let b = Box::new(t);
                    at(match &self.kind {
                        GeneralKind::IfDefined(_) => GeneralKind::IfDefined(b),
                        GeneralKind::Offset(_, t, x) => GeneralKind::Offset(b, *t, *x),
                        GeneralKind::Round(_, m) => GeneralKind::Round(b, *m),
                        GeneralKind::ReplaceIndex(_, var, v) => {
                            GeneralKind::ReplaceIndex(b, *var, *v)
                        }
                        GeneralKind::Scale(s, _) => GeneralKind::Scale(*s, b),
                        _ => GeneralKind::IfDefined(b), // unreachable by the outer match
                    })
                })
                .collect(),
        })
    }

    /// Normalises an Append-free expression into a SumDescriptor. `scale` is the product of
    /// the Scale() expressions above (None if there are none); it is pushed through Sum,
    /// Offset, Round and ReplaceIndex down onto node names, and is an error anywhere else.
    fn to_sum(&self, scale: Option<f32>) -> Result<SumDescriptor, DescriptorError> {
        let no_scale = |what: &str| -> Result<(), DescriptorError> {
            if scale.is_some() {
                Err(DescriptorError::new(
                    self.offset,
                    format!(
                        "cannot normalise Scale() applied to {what}; push the Scale() inside \
                         the {what} expression"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        Ok(match &self.kind {
            GeneralKind::Node(n) => SumDescriptor::Simple(ForwardingDescriptor::Simple {
                node: *n,
                scale: scale.unwrap_or(1.0),
            }),
            GeneralKind::Const(v, d) => {
                no_scale("Const()")?;
                SumDescriptor::Const { value: *v, dim: *d }
            }
            GeneralKind::Scale(alpha, a) => a.to_sum(Some(scale.unwrap_or(1.0) * alpha))?,
            GeneralKind::Sum(v) => {
                // Right-nested, built from the last term backwards: linear in the terms.
                let mut terms = v
                    .iter()
                    .map(|a| a.to_sum(scale))
                    .collect::<Result<Vec<_>, _>>()?;
                let Some(mut sum) = terms.pop() else {
                    return Err(DescriptorError::new(self.offset, "empty Sum()"));
                };
                while let Some(t) = terms.pop() {
                    sum = SumDescriptor::Sum(Box::new(t), Box::new(sum));
                }
                sum
            }
            GeneralKind::Failover(a, b) => {
                no_scale("Failover()")?;
                SumDescriptor::Failover(Box::new(a.to_sum(None)?), Box::new(b.to_sum(None)?))
            }
            GeneralKind::IfDefined(a) => {
                no_scale("IfDefined()")?;
                SumDescriptor::Optional(Box::new(a.to_sum(None)?))
            }
            GeneralKind::Offset(a, t, x) => {
                let inner = a.to_sum(scale)?;
                self.map_forwarding(inner, &|f| offset_fwd(f, *t, *x), *t == 0 && *x == 0)?
            }
            GeneralKind::Round(a, m) => {
                if *m <= 0 {
                    return Err(DescriptorError::new(
                        self.offset,
                        format!("Round() needs a positive modulus, got {m}"),
                    ));
                }
                let inner = a.to_sum(scale)?;
                self.map_forwarding(
                    inner,
                    &|f| ForwardingDescriptor::Round {
                        src: Box::new(f),
                        t_modulus: *m,
                    },
                    false,
                )?
            }
            GeneralKind::ReplaceIndex(a, var, value) => {
                let inner = a.to_sum(scale)?;
                self.map_forwarding(
                    inner,
                    &|f| ForwardingDescriptor::ReplaceIndex {
                        src: Box::new(f),
                        var: *var,
                        value: *value,
                    },
                    false,
                )?
            }
            GeneralKind::Switch(v) => {
                no_scale("Switch()")?;
                if let [a] = v.as_slice() {
                    let inner = a.to_sum(None)?;
                    self.map_forwarding(inner, &|f| ForwardingDescriptor::Switch(vec![f]), false)?
                } else {
                    let mut fs = Vec::with_capacity(v.len());
                    for d in v {
                        match d.to_sum(None)? {
                            SumDescriptor::Simple(f) => fs.push(f),
                            _ => {
                                return Err(DescriptorError::new(
                                    d.offset,
                                    "Sum(), Failover(), IfDefined() or Const() inside a \
                                     Switch() with more than one argument cannot be normalised",
                                ))
                            }
                        }
                    }
                    SumDescriptor::Simple(ForwardingDescriptor::Switch(fs))
                }
            }
            GeneralKind::Append(_) => {
                return Err(DescriptorError::new(self.offset, "unexpected Append()"))
            }
        })
    }

    /// Applies a forwarding-level operator to a normalised SumDescriptor, distributing it into
    /// Sum, Failover and IfDefined. A Const is only allowed if the operator is the identity.
    fn map_forwarding(
        &self,
        s: SumDescriptor,
        f: &dyn Fn(ForwardingDescriptor) -> ForwardingDescriptor,
        identity: bool,
    ) -> Result<SumDescriptor, DescriptorError> {
        Ok(match s {
            SumDescriptor::Simple(fd) => SumDescriptor::Simple(f(fd)),
            SumDescriptor::Sum(a, b) => SumDescriptor::Sum(
                Box::new(self.map_forwarding(*a, f, identity)?),
                Box::new(self.map_forwarding(*b, f, identity)?),
            ),
            SumDescriptor::Failover(a, b) => SumDescriptor::Failover(
                Box::new(self.map_forwarding(*a, f, identity)?),
                Box::new(self.map_forwarding(*b, f, identity)?),
            ),
            SumDescriptor::Optional(a) => {
                SumDescriptor::Optional(Box::new(self.map_forwarding(*a, f, identity)?))
            }
            c @ SumDescriptor::Const { .. } => {
                if identity {
                    c
                } else {
                    return Err(DescriptorError::new(
                        self.offset,
                        "Const() cannot appear inside Offset(), Round(), ReplaceIndex() or Switch()",
                    ));
                }
            }
        })
    }
}

/// Offset of a normalised forwarding descriptor: nested Offsets add, a zero Offset vanishes.
fn offset_fwd(f: ForwardingDescriptor, t: i32, x: i32) -> ForwardingDescriptor {
    match f {
        ForwardingDescriptor::Offset {
            src,
            t_offset,
            x_offset,
        } => offset_fwd(*src, t.wrapping_add(t_offset), x.wrapping_add(x_offset)),
        f if t == 0 && x == 0 => f,
        f => ForwardingDescriptor::Offset {
            src: Box::new(f),
            t_offset: t,
            x_offset: x,
        },
    }
}

/// The keywords that start an operator expression.
const KEYWORDS: &[&str] = &[
    "Append",
    "Sum",
    "Switch",
    "Failover",
    "IfDefined",
    "Offset",
    "Round",
    "ReplaceIndex",
    "Scale",
    "Const",
];

/// Recursive-descent parser over the token list.
struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    /// Character length of the text (offset reported for "end of descriptor").
    end: usize,
    resolve: &'a dyn Fn(&str) -> Result<usize, String>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn here(&self) -> usize {
        self.peek().map_or(self.end, |t| t.offset)
    }

    fn found(&self) -> String {
        self.peek()
            .map_or_else(|| "end of descriptor".to_string(), Token::describe)
    }

    fn err_expected(&self, what: &str) -> DescriptorError {
        DescriptorError::new(
            self.here(),
            format!("expected {what}, found {}", self.found()),
        )
    }

    fn expect(&mut self, kind: TokenKind, context: &str) -> Result<(), DescriptorError> {
        if self.peek().map(|t| &t.kind) == Some(&kind) {
            self.pos += 1;
            return Ok(());
        }
        let what = match kind {
            TokenKind::LParen => "'('",
            TokenKind::RParen => "')'",
            TokenKind::Comma => "','",
            TokenKind::Word(_) => "a word",
        };
        Err(self.err_expected(&format!("{what} in {context}")))
    }

    fn word(&mut self) -> Option<(String, usize)> {
        match self.peek() {
            Some(Token {
                kind: TokenKind::Word(w),
                offset,
            }) => {
                let r = (w.clone(), *offset);
                self.pos += 1;
                Some(r)
            }
            _ => None,
        }
    }

    fn integer(&mut self, what: &str) -> Result<i32, DescriptorError> {
        let at = self.pos;
        match self.word() {
            Some((w, _)) => match w.parse::<i32>() {
                Ok(v) => Ok(v),
                Err(_) => {
                    self.pos = at;
                    Err(self.err_expected(&format!("an integer {what}")))
                }
            },
            None => Err(self.err_expected(&format!("an integer {what}"))),
        }
    }

    fn real(&mut self, what: &str) -> Result<f32, DescriptorError> {
        let at = self.pos;
        match self.word().and_then(|(w, _)| parse_float(&w)) {
            Some(v) => Ok(v as f32),
            None => {
                self.pos = at;
                Err(self.err_expected(&format!("a number ({what})")))
            }
        }
    }

    /// `, <expr>` repeated until `)`; at least one expression already parsed by the caller.
    fn list(
        &mut self,
        first: GeneralDescriptor,
        depth: usize,
        op: &str,
    ) -> Result<Vec<GeneralDescriptor>, DescriptorError> {
        let mut v = vec![first];
        // A Sum as the last argument of a Sum is read into the same list without recursing:
        // Sum(a, Sum(b, c)) and Sum(a, b, c) normalise alike, and that is how Sums of many
        // terms are written, so their nesting must not count against MAX_DEPTH. `inner` holds,
        // per open inner Sum, where its terms start in `v` and its offset.
        let mut inner: Vec<(usize, usize)> = Vec::new();
        loop {
            match self.peek().map(|t| &t.kind) {
                Some(TokenKind::RParen) => {
                    self.pos += 1;
                    let Some((start, offset)) = inner.pop() else {
                        return Ok(v);
                    };
                    if self.peek().map(|t| &t.kind) != Some(&TokenKind::RParen) {
                        // Not the last argument after all: its terms become one Sum term.
                        let items = v.split_off(start);
                        v.push(GeneralDescriptor {
                            kind: GeneralKind::Sum(items),
                            offset,
                        });
                    }
                }
                Some(TokenKind::Comma) => {
                    self.pos += 1;
                    let nested_sum = op == "Sum"
                        && matches!(self.peek().map(|t| &t.kind), Some(TokenKind::Word(w)) if w == "Sum")
                        && self.tokens.get(self.pos + 1).map(|t| &t.kind)
                            == Some(&TokenKind::LParen);
                    if nested_sum {
                        let offset = self.here();
                        self.pos += 2;
                        inner.push((v.len(), offset));
                    }
                    v.push(self.expr(depth + 1)?);
                }
                _ => return Err(self.err_expected(&format!("',' or ')' in {op}()"))),
            }
        }
    }

    fn expr(&mut self, depth: usize) -> Result<GeneralDescriptor, DescriptorError> {
        if depth > MAX_DEPTH {
            return Err(DescriptorError::new(
                self.here(),
                "descriptor nested too deeply",
            ));
        }
        let start = self.pos;
        let Some((w, offset)) = self.word() else {
            return Err(self.err_expected("a descriptor"));
        };
        if !KEYWORDS.contains(&w.as_str()) {
            if !is_valid_name(&w) {
                self.pos = start;
                return Err(self.err_expected("a node name or descriptor expression"));
            }
            let node = (self.resolve)(&w).map_err(|m| DescriptorError::new(offset, m))?;
            return Ok(GeneralDescriptor {
                kind: GeneralKind::Node(node),
                offset,
            });
        }
        let op = w.as_str();
        self.expect(TokenKind::LParen, op)?;
        let d = depth + 1;
        let kind = match op {
            "Append" | "Sum" | "Switch" => {
                let first = self.expr(d)?;
                let v = self.list(first, d, op)?;
                match op {
                    "Append" => GeneralKind::Append(v),
                    "Sum" => GeneralKind::Sum(v),
                    _ => GeneralKind::Switch(v),
                }
            }
            "Failover" => {
                let a = self.expr(d)?;
                self.expect(TokenKind::Comma, op)?;
                let b = self.expr(d)?;
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::Failover(Box::new(a), Box::new(b))
            }
            "IfDefined" => {
                let a = self.expr(d)?;
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::IfDefined(Box::new(a))
            }
            "Offset" => {
                let a = self.expr(d)?;
                self.expect(TokenKind::Comma, op)?;
                let t = self.integer("t-offset")?;
                let x = if self.peek().map(|t| &t.kind) == Some(&TokenKind::Comma) {
                    self.pos += 1;
                    self.integer("x-offset")?
                } else {
                    0
                };
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::Offset(Box::new(a), t, x)
            }
            "Round" => {
                let a = self.expr(d)?;
                self.expect(TokenKind::Comma, op)?;
                let m = self.integer("t-modulus")?;
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::Round(Box::new(a), m)
            }
            "ReplaceIndex" => {
                let a = self.expr(d)?;
                self.expect(TokenKind::Comma, op)?;
                let var = match self.peek().map(|t| &t.kind) {
                    Some(TokenKind::Word(v)) if v == "t" => IndexVar::T,
                    Some(TokenKind::Word(v)) if v == "x" => IndexVar::X,
                    _ => return Err(self.err_expected("'t' or 'x' in ReplaceIndex")),
                };
                self.pos += 1;
                self.expect(TokenKind::Comma, op)?;
                let value = self.integer("value")?;
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::ReplaceIndex(Box::new(a), var, value)
            }
            "Scale" => {
                let s = self.real("the scale")?;
                self.expect(TokenKind::Comma, op)?;
                let a = self.expr(d)?;
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::Scale(s, Box::new(a))
            }
            _ => {
                // Const(value, dim)
                let v = self.real("the value")?;
                self.expect(TokenKind::Comma, op)?;
                let at = self.here();
                let dim = self.integer("dimension")?;
                if dim <= 0 {
                    return Err(DescriptorError::new(
                        at,
                        format!("Const() needs a positive dimension, got {dim}"),
                    ));
                }
                self.expect(TokenKind::RParen, op)?;
                GeneralKind::Const(v, dim as usize)
            }
        };
        Ok(GeneralDescriptor { kind, offset })
    }
}

/// Formats a scale or constant as C++ `<<` does (`%g`, 6 significant digits).
pub fn fmt_scalar(v: f32) -> String {
    fmt_g(v as f64, 6)
}

fn var_name(v: IndexVar) -> &'static str {
    match v {
        IndexVar::T => "t",
        IndexVar::X => "x",
    }
}

/// A node's name, or a visible placeholder for an out-of-range index.
fn node_name(names: &[String], n: usize) -> &str {
    names.get(n).map_or("<invalid-node>", |s| s.as_str())
}

impl ForwardingDescriptor {
    /// Appends Kaldi's config form (`WriteConfig`) to `s`.
    pub fn write_config(&self, names: &[String], s: &mut String) {
        match self {
            ForwardingDescriptor::Simple { node, scale } => {
                if *scale == 1.0 {
                    s.push_str(node_name(names, *node));
                } else {
                    s.push_str(&format!(
                        "Scale({}, {})",
                        fmt_scalar(*scale),
                        node_name(names, *node)
                    ));
                }
            }
            ForwardingDescriptor::Offset {
                src,
                t_offset,
                x_offset,
            } => {
                s.push_str("Offset(");
                src.write_config(names, s);
                s.push_str(&format!(", {t_offset}"));
                if *x_offset != 0 {
                    s.push_str(&format!(", {x_offset}"));
                }
                s.push(')');
            }
            ForwardingDescriptor::Switch(v) => {
                write_call(s, "Switch", v, |f, s| f.write_config(names, s));
            }
            ForwardingDescriptor::Round { src, t_modulus } => {
                s.push_str("Round(");
                src.write_config(names, s);
                s.push_str(&format!(", {t_modulus})"));
            }
            ForwardingDescriptor::ReplaceIndex { src, var, value } => {
                s.push_str("ReplaceIndex(");
                src.write_config(names, s);
                s.push_str(&format!(", {}, {value})", var_name(*var)));
            }
        }
    }
}

impl SumDescriptor {
    /// Appends Kaldi's config form (`WriteConfig`) to `s`.
    pub fn write_config(&self, names: &[String], s: &mut String) {
        match self {
            SumDescriptor::Simple(f) => f.write_config(names, s),
            SumDescriptor::Optional(a) => {
                s.push_str("IfDefined(");
                a.write_config(names, s);
                s.push(')');
            }
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                s.push_str(if matches!(self, SumDescriptor::Sum(..)) {
                    "Sum("
                } else {
                    "Failover("
                });
                a.write_config(names, s);
                s.push_str(", ");
                b.write_config(names, s);
                s.push(')');
            }
            SumDescriptor::Const { value, dim } => {
                s.push_str(&format!("Const({}, {dim})", fmt_scalar(*value)));
            }
        }
    }
}

impl Descriptor {
    /// Parses and normalises descriptor text; node names resolve to their index in
    /// `node_names`. Errors carry the character offset within `text`.
    pub fn parse(text: &str, node_names: &[String]) -> Result<Descriptor, DescriptorError> {
        let resolve = |name: &str| -> Result<usize, String> {
            node_names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| format!("unknown node name '{name}'"))
        };
        Descriptor::parse_with(text, &resolve)
    }

    /// Like [`Descriptor::parse`], with a custom node-name resolver (which may reject some
    /// names with its own message).
    pub fn parse_with(
        text: &str,
        resolve: &dyn Fn(&str) -> Result<usize, String>,
    ) -> Result<Descriptor, DescriptorError> {
        GeneralDescriptor::parse(text, resolve)?.normalize()
    }

    /// Kaldi's canonical config form (`Descriptor::WriteConfig`), e.g.
    /// `Append(Offset(input, -1), input)`.
    pub fn to_config(&self, node_names: &[String]) -> String {
        let mut s = String::new();
        match self.parts.as_slice() {
            [one] => one.write_config(node_names, &mut s),
            parts => {
                write_call(&mut s, "Append", parts, |p, s| {
                    p.write_config(node_names, s)
                });
            }
        }
        s
    }
}

/// `op(a, b, ...)`: the descriptor expression `op` applied to `items`, each written by
/// `write`.
fn write_call<T>(s: &mut String, op: &str, items: &[T], write: impl Fn(&T, &mut String)) {
    s.push_str(op);
    s.push('(');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write(item, s);
    }
    s.push(')');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tokenizer_basics() {
        let t = tokenize("(,test )").unwrap();
        let k: Vec<_> = t.iter().map(|t| t.kind.clone()).collect();
        assert_eq!(
            k,
            vec![
                TokenKind::LParen,
                TokenKind::Comma,
                TokenKind::Word("test".into()),
                TokenKind::RParen
            ]
        );
        assert_eq!(t[2].offset, 2);
        assert!(tokenize("-112").is_ok());
        assert!(tokenize("+112").is_ok());
        let e = tokenize("Offset(a, 1abc)").unwrap_err();
        assert_eq!(e.offset, 10);
    }

    #[test]
    fn round_trip_simple() {
        let n = names();
        let d = Descriptor::parse("Append(Offset(a, -1), a, Scale(-1.0, b))", &n).unwrap();
        assert_eq!(d.to_config(&n), "Append(Offset(a, -1), a, Scale(-1, b))");
    }
}
