//! CNTK's configuration language (the `configFile` of `cntk configFile=... name=value`).
//!
//! ```text
//! # a comment
//! command=Train:Test
//! ExpDir=exp
//! Train=[
//!     action=train
//!     modelPath=$ExpDir$/model.dnn     # $name$ is looked up from here outwards
//!     SGD=[ minibatchSize=256:1024; learningRatesPerMB=0.8:3.2*14:0.08 ]
//! ]
//! include=more.config                  # the file's entries, spliced in here
//! ```
//!
//! Entries are `name=value` separated by new lines or `;`; a value is text to the end of the
//! line (or `;`, `#`, or the `]` closing its block), a quoted string, or a block `[...]`.
//! Names are matched without regard to case and the last entry of a name wins, so
//! command-line `name=value` (or `Block.name=value`) overrides are appended at the end.
//! `$name$` is filled when a value is read, from the innermost enclosing block outwards to the
//! top level (so a block's own variables come first).

use crate::error::{Error, Result, TextPos};

/// Where an entry was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file)
        } else {
            write!(f, "{}:{}", self.file, self.line)
        }
    }
}

#[derive(Clone, Debug)]
pub enum Value {
    Text(String),
    Block(Block),
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub key: String,
    pub value: Value,
    pub origin: Origin,
}

/// A block: its entries in order.
#[derive(Clone, Debug, Default)]
pub struct Block {
    pub entries: Vec<Entry>,
}

impl Block {
    /// The last entry named `key` (any case).
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.key.eq_ignore_ascii_case(key))
    }

    fn entry_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.entries
            .iter_mut()
            .rev()
            .find(|e| e.key.eq_ignore_ascii_case(key))
    }
}

struct Parser<'a> {
    text: &'a [u8],
    src: &'a str,
    pos: usize,
    line: usize,
    file: String,
    depth: usize,
}

const MAX_INCLUDE_DEPTH: usize = 16;

impl Parser<'_> {
    fn err(&self, msg: String) -> Error {
        let line_text = self
            .src
            .lines()
            .nth(self.line - 1)
            .unwrap_or("")
            .to_string();
        let start = self.src[..self.pos.min(self.src.len())]
            .rfind('\n')
            .map_or(0, |p| p + 1);
        Error::Parse {
            pos: TextPos {
                file: self.file.clone(),
                line: self.line,
                column: self.src[start..self.pos.min(self.src.len())]
                    .chars()
                    .count()
                    + 1,
                line_text,
            },
            msg,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
        }
        self.pos += 1;
    }

    /// Skips blanks, separators and comments.
    fn skip(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\r' | b'\n' | b';' => self.bump(),
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    /// At the end of a line after `name =`: whether the next non-blank line is the value
    /// (it has no `=`, and is no `]` or comment).
    fn continued_value(&self) -> bool {
        let rest = &self.src[self.pos..];
        let next = rest.lines().skip(1).map(str::trim).find(|l| !l.is_empty());
        next.is_some_and(|l| !l.contains('=') && !l.starts_with(']') && !l.starts_with('#'))
    }

    /// Entries up to the end (`inner` = false) or the `]` closing the block.
    fn block(&mut self, inner: bool, nesting: usize) -> Result<Block> {
        if nesting > 64 {
            return Err(self.err("blocks nested more than 64 deep".into()));
        }
        let mut b = Block::default();
        loop {
            self.skip();
            match self.peek() {
                None if inner => return Err(self.err("a block '[' is never closed by ']'".into())),
                None => return Ok(b),
                Some(b']') if inner => {
                    self.bump();
                    return Ok(b);
                }
                Some(b']') => return Err(self.err("a ']' without a '['".into())),
                _ => {}
            }
            let line = self.line;
            let start = self.pos;
            while self
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
            {
                self.bump();
            }
            let key = self.src[start..self.pos].to_string();
            if key.is_empty() {
                return Err(self.err(format!(
                    "expected a name (name=value or name=[...]), found '{}'",
                    self.src[self.pos..].chars().next().unwrap_or(' ')
                )));
            }
            while matches!(self.peek(), Some(b' ' | b'\t')) {
                self.bump();
            }
            if self.peek() != Some(b'=') {
                return Err(self.err(format!("expected '=' after '{key}'")));
            }
            self.bump();
            while matches!(self.peek(), Some(b' ' | b'\t')) {
                self.bump();
            }
            let origin = Origin {
                file: self.file.clone(),
                line,
            };
            let value = match self.peek() {
                Some(b'[') => {
                    self.bump();
                    Value::Block(self.block(true, nesting + 1)?)
                }
                Some(b'"') => {
                    self.bump();
                    let s = self.pos;
                    while self.peek().is_some_and(|c| c != b'"' && c != b'\n') {
                        self.bump();
                    }
                    if self.peek() != Some(b'"') {
                        return Err(self.err("a quoted value is not closed on its line".into()));
                    }
                    let v = self.src[s..self.pos].to_string();
                    self.bump();
                    Value::Text(v)
                }
                Some(b'\r' | b'\n') if self.continued_value() => {
                    // `name =` with the value on the next line (as the seed's slides wrap them).
                    while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                        self.bump();
                    }
                    let s = self.pos;
                    while self.peek().is_some_and(|c| {
                        !(c == b'\n' || c == b';' || c == b'#' || (inner && c == b']'))
                    }) {
                        self.bump();
                    }
                    Value::Text(self.src[s..self.pos].trim().to_string())
                }
                _ => {
                    let s = self.pos;
                    while self.peek().is_some_and(|c| {
                        !(c == b'\n' || c == b';' || c == b'#' || (inner && c == b']'))
                    }) {
                        self.bump();
                    }
                    Value::Text(self.src[s..self.pos].trim().to_string())
                }
            };
            if key.eq_ignore_ascii_case("include") {
                let Value::Text(path) = &value else {
                    return Err(self.err("include takes a file name, not a block".into()));
                };
                if self.depth >= MAX_INCLUDE_DEPTH {
                    return Err(self.err(format!(
                        "include nested more than {MAX_INCLUDE_DEPTH} deep (a file including \
                         itself?)"
                    )));
                }
                let full = relative_to(&self.file, path);
                let included = parse_file_at(&full, self.depth + 1)
                    .map_err(|e| Error::Usage(format!("{origin}: in include={path}: {e}")))?;
                b.entries.extend(included.entries);
                continue;
            }
            b.entries.push(Entry { key, value, origin });
        }
    }
}

/// `path` relative to the directory of `file` (absolute paths as they are).
pub fn relative_to(file: &str, path: &str) -> String {
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        return path.to_string();
    }
    match std::path::Path::new(file).parent() {
        Some(d) if !d.as_os_str().is_empty() => d.join(p).to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

/// Parses config text (`file` names it in errors and anchors `include`).
pub fn parse(text: &str, file: &str) -> Result<Block> {
    parse_at(text, file, 0)
}

fn parse_at(text: &str, file: &str, depth: usize) -> Result<Block> {
    Parser {
        text: text.as_bytes(),
        src: text,
        pos: 0,
        line: 1,
        file: file.to_string(),
        depth,
    }
    .block(false, 0)
}

fn parse_file_at(path: &str, depth: usize) -> Result<Block> {
    let text = crate::frontend::read_text(path)?;
    parse_at(&text, path, depth)
}

/// Reads and parses a config file.
pub fn parse_file(path: &str) -> Result<Block> {
    parse_file_at(path, 0)
}

/// Applies a command-line `name=value` (or `Block.Inner.name=value`): appended to the named
/// block, so it wins over the file.
pub fn apply_override(root: &mut Block, arg: &str) -> Result<()> {
    let (path, value) = arg
        .split_once('=')
        .ok_or_else(|| Error::Usage(format!("the argument '{arg}' is not name=value")))?;
    let parts: Vec<&str> = path.trim().split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::Usage(format!("the argument '{arg}': an empty name")));
    }
    let origin = Origin {
        file: "<command line>".into(),
        line: 0,
    };
    let value = value.trim();
    let value = if value.starts_with('[') && value.ends_with(']') {
        Value::Block(parse(&value[1..value.len() - 1], "<command line>")?)
    } else {
        Value::Text(value.trim_matches('"').to_string())
    };
    let mut b = root;
    for p in &parts[..parts.len() - 1] {
        if b.entry(p)
            .is_none_or(|e| !matches!(e.value, Value::Block(_)))
        {
            b.entries.push(Entry {
                key: p.to_string(),
                value: Value::Block(Block::default()),
                origin: origin.clone(),
            });
        }
        let Value::Block(inner) = &mut b.entry_mut(p).expect("just made").value else {
            unreachable!("a block was just made")
        };
        b = inner;
    }
    b.entries.push(Entry {
        key: parts[parts.len() - 1].to_string(),
        value,
        origin,
    });
    Ok(())
}

/// A block seen from inside: its chain of enclosing blocks, for `$var$` lookups.
#[derive(Clone)]
pub struct Scope<'a> {
    chain: Vec<&'a Block>,
    /// `Train.SGD`, for messages.
    pub path: String,
}

impl<'a> Scope<'a> {
    pub fn root(b: &'a Block) -> Scope<'a> {
        Scope {
            chain: vec![b],
            path: String::new(),
        }
    }

    fn innermost(&self) -> &'a Block {
        self.chain.last().expect("a scope has a block")
    }

    /// The nested block `key` of this one.
    pub fn block(&self, key: &str) -> Option<Scope<'a>> {
        match &self.innermost().entry(key)?.value {
            Value::Block(b) => {
                let mut chain = self.chain.clone();
                chain.push(b);
                Some(Scope {
                    chain,
                    path: if self.path.is_empty() {
                        key.to_string()
                    } else {
                        format!("{}.{key}", self.path)
                    },
                })
            }
            Value::Text(_) => None,
        }
    }

    /// The text value of `key` in this block or the nearest enclosing block that has it
    /// (CNTK's inherited settings: `deviceId`, `modelPath`, ...), `$var$` filled in.
    pub fn get_inherited(&self, key: &str) -> Result<Option<String>> {
        match self.lookup(key) {
            None => Ok(None),
            Some((t, origin, level)) => Scope {
                chain: self.chain[..=level].to_vec(),
                path: self.path.clone(),
            }
            .substitute(t, origin, 0)
            .map(Some),
        }
    }

    /// Where [`Self::get_inherited`] finds `key`.
    pub fn origin_inherited(&self, key: &str) -> Option<String> {
        self.lookup(key).map(|(_, o, _)| o.to_string())
    }

    /// The block `key` of this block or of the nearest enclosing block that has one.
    pub fn block_inherited(&self, key: &str) -> Option<Scope<'a>> {
        for level in (0..self.chain.len()).rev() {
            let outer = Scope {
                chain: self.chain[..=level].to_vec(),
                path: self.path.clone(),
            };
            if let Some(mut b) = outer.block(key) {
                b.path = self.name(key);
                return Some(b);
            }
        }
        None
    }

    /// The entry `key` of this block.
    pub fn entry(&self, key: &str) -> Option<&'a Entry> {
        self.innermost().entry(key)
    }

    /// The text value of `key` in this block with `$var$` filled in.
    pub fn get(&self, key: &str) -> Result<Option<String>> {
        match self.entry(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Block(_),
                origin,
                ..
            }) => Err(Error::Usage(format!(
                "{origin}: {} is a block [...], a value was expected",
                self.name(key)
            ))),
            Some(Entry {
                value: Value::Text(t),
                origin,
                ..
            }) => self.substitute(t, origin, 0).map(Some),
        }
    }

    /// `key` in the path form `Train.SGD.key`.
    pub fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value of `key` looked up from this block outwards (a `$key$` reference).
    fn lookup(&self, key: &str) -> Option<(&'a str, &'a Origin, usize)> {
        for (level, b) in self.chain.iter().enumerate().rev() {
            if let Some(e) = b.entry(key) {
                if let Value::Text(t) = &e.value {
                    return Some((t, &e.origin, level));
                }
            }
        }
        None
    }

    fn substitute(&self, text: &str, origin: &Origin, depth: usize) -> Result<String> {
        if depth > 32 {
            return Err(Error::Usage(format!(
                "{origin}: $variables$ refer to each other in a loop"
            )));
        }
        let mut out = String::new();
        let mut rest = text;
        while let Some(s) = rest.find('$') {
            out.push_str(&rest[..s]);
            let after = &rest[s + 1..];
            let e = after.find('$').ok_or_else(|| {
                Error::Usage(format!(
                    "{origin}: a '$' without its closing '$' in '{text}'"
                ))
            })?;
            let var = &after[..e];
            let (value, at, level) = self.lookup(var).ok_or_else(|| {
                Error::Usage(format!(
                    "{origin}: ${var}$ is not defined (in this block, an enclosing one or on \
                     the command line)"
                ))
            })?;
            // A value is filled from where it was defined outwards.
            let outer = Scope {
                chain: self.chain[..=level].to_vec(),
                path: self.path.clone(),
            };
            out.push_str(&outer.substitute(value, at, depth + 1)?);
            rest = &after[e + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `$var$` in `text` (from `what`, e.g. an MEL file) filled from this block outwards.
    pub fn fill(&self, text: &str, what: &str) -> Result<String> {
        let origin = Origin {
            file: what.to_string(),
            line: 0,
        };
        self.substitute(text, &origin, 0)
    }

    /// `get` parsed as `T`, with a message naming the entry.
    pub fn parse<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        let Some(v) = self.get(key)? else {
            return Ok(None);
        };
        v.parse().map(Some).map_err(|_| {
            Error::Usage(format!(
                "{}: {}={v}: not a valid value",
                self.entry(key).expect("read").origin,
                self.name(key)
            ))
        })
    }

    /// A boolean as CNTK writes them (true/false, 1/0, t/f, yes/no).
    pub fn flag(&self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.get(key)? else {
            return Ok(None);
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" => Ok(Some(true)),
            "false" | "f" | "0" | "no" => Ok(Some(false)),
            _ => Err(Error::Usage(format!(
                "{}: {}={v}: expected true or false",
                self.entry(key).expect("read").origin,
                self.name(key)
            ))),
        }
    }

    /// The entry names of this block, in order (each once).
    pub fn keys(&self) -> Vec<&'a str> {
        let mut out: Vec<&str> = Vec::new();
        for e in &self.innermost().entries {
            if !out.iter().any(|k| k.eq_ignore_ascii_case(&e.key)) {
                out.push(&e.key);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# top\ncommand=Train:Test\nExpDir=exp ; Dim=3\n\
        Train=[\n  action=train  # trailing\n  modelPath=$ExpDir$/m.dnn\n  Dim=5\n  \
        SGD=[minibatchSize=256:1024; lr=$Dim$]\n  name=\"a b;c\"\n]\nTest=[action=eval; d=$Dim$]\n";

    #[test]
    fn blocks_variables_and_overrides() {
        let mut root = parse(TEXT, "t.config").unwrap();
        let s = Scope::root(&root);
        assert_eq!(s.get("COMMAND").unwrap().unwrap(), "Train:Test");
        let train = s.block("train").unwrap();
        assert_eq!(train.get("action").unwrap().unwrap(), "train");
        assert_eq!(train.get("modelPath").unwrap().unwrap(), "exp/m.dnn");
        assert_eq!(train.get("name").unwrap().unwrap(), "a b;c");
        // The innermost definition wins.
        let sgd = train.block("SGD").unwrap();
        assert_eq!(sgd.path, "train.SGD");
        assert_eq!(sgd.get("lr").unwrap().unwrap(), "5");
        assert_eq!(sgd.get("minibatchSize").unwrap().unwrap(), "256:1024");
        assert_eq!(s.block("Test").unwrap().get("d").unwrap().unwrap(), "3");
        assert_eq!(train.entry("SGD").unwrap().origin.line, 8);
        // A value on the line after `name =`, as the seed's slides wrap them.
        let wrapped = parse("B=[\n  a =\n     Cross\n  b=\n  c=1\n]\n", "w.config").unwrap();
        let b = Scope::root(&wrapped).block("B").unwrap();
        assert_eq!(b.get("a").unwrap().unwrap(), "Cross");
        assert_eq!(b.get("b").unwrap().unwrap(), "");
        assert_eq!(b.get("c").unwrap().unwrap(), "1");
        // Command-line values win and reach into blocks.
        apply_override(&mut root, "ExpDir=/x").unwrap();
        apply_override(&mut root, "Train.SGD.minibatchSize=64").unwrap();
        apply_override(&mut root, "New.Inner.k=v").unwrap();
        let s = Scope::root(&root);
        let train = s.block("Train").unwrap();
        assert_eq!(train.get("modelPath").unwrap().unwrap(), "/x/m.dnn");
        let sgd = train.block("SGD").unwrap();
        assert_eq!(sgd.get("minibatchSize").unwrap().unwrap(), "64");
        assert_eq!(sgd.get("lr").unwrap().unwrap(), "5");
        let k = s.block("New").unwrap().block("Inner").unwrap().get("k");
        assert_eq!(k.unwrap().unwrap(), "v");
    }

    #[test]
    fn includes_are_spliced_in_relative_to_the_including_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/more.config"), "B=2\nC=[d=$A$]\n").unwrap();
        std::fs::write(
            dir.path().join("main.config"),
            "A=1\ninclude=sub/more.config\nB=3\n",
        )
        .unwrap();
        let root = parse_file(dir.path().join("main.config").to_str().unwrap()).unwrap();
        let s = Scope::root(&root);
        assert_eq!(s.get("B").unwrap().unwrap(), "3");
        assert_eq!(s.block("C").unwrap().get("d").unwrap().unwrap(), "1");
        std::fs::write(dir.path().join("loop.config"), "include=loop.config\n").unwrap();
        let e = parse_file(dir.path().join("loop.config").to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("include nested more than"), "{e}");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        for (text, want) in [
            ("a=[b=1\n", "c.config:2:1: a block '[' is never closed"),
            ("a=1\n]\n", "c.config:2:1: a ']' without a '['"),
            ("a=1\nb 2\n", "c.config:2:3: expected '=' after 'b'"),
            ("a=\"x\n", "c.config:1:5: a quoted value is not closed"),
            ("=1\n", "c.config:1:1: expected a name"),
        ] {
            let e = parse(text, "c.config").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let root = parse("a=$b$\nb=$a$\nc=$nope$\nd=$x\nBlk=[k=1]\n", "v.config").unwrap();
        let s = Scope::root(&root);
        for (key, want) in [
            ("a", "$variables$ refer to each other in a loop"),
            ("c", "v.config:3: $nope$ is not defined"),
            ("d", "v.config:4: a '$' without its closing '$'"),
            ("Blk", "v.config:5: Blk is a block"),
        ] {
            let e = s.get(key).unwrap_err().to_string();
            assert!(e.contains(want), "{key}: {e}");
        }
        assert!(apply_override(&mut Block::default(), "novalue").is_err());
    }
}
