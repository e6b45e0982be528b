//! JSON with positions: every value and object key remembers the byte offset where it starts,
//! so that a semantic error found later (an unknown layer type, a dangling connection) can
//! point at line:column of the file, which `serde_json::Value` cannot do.
//!
//! Strict JSON (RFC 8259), plus errors that say what to change when a Brainstorm architecture
//! was pasted in its Python form (single quotes, tuples, trailing commas). Nesting is bounded
//! so that hostile input cannot overflow the stack.

use crate::error::{Error, Result, TextPos};

/// Deepest nesting of arrays and objects accepted.
const MAX_DEPTH: usize = 64;

/// A parsed value and the byte offset where it starts.
#[derive(Debug, Clone)]
pub struct Spanned {
    pub value: Value,
    pub at: usize,
}

/// A JSON value; objects keep their members in file order.
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Spanned>),
    Object(Vec<Member>),
}

/// One `"key": value` member of an object.
#[derive(Debug, Clone)]
pub struct Member {
    pub key: String,
    /// Byte offset of the key's opening quote.
    pub key_at: usize,
    pub value: Spanned,
}

impl Value {
    /// What kind of value this is, for "expected ..., found ..." messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
        }
    }
}

/// The text being read and its name, to turn byte offsets into `file:line:column`.
pub struct Source<'a> {
    pub text: &'a str,
    pub file: &'a str,
}

impl Source<'_> {
    /// The 1-based line and column (in characters) of byte `offset`, with the line's text.
    pub fn pos(&self, offset: usize) -> TextPos {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line_start = before.rfind('\n').map_or(0, |p| p + 1);
        let line_end = self.text[offset..]
            .find('\n')
            .map_or(self.text.len(), |p| offset + p);
        TextPos {
            file: self.file.to_string(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            line_text: self.text[line_start..line_end]
                .trim_end_matches('\r')
                .to_string(),
        }
    }

    /// An error at byte `offset`.
    pub fn error(&self, offset: usize, msg: impl Into<String>) -> Error {
        Error::parse(self.pos(offset), msg)
    }
}

/// Parses `src.text` as one JSON value (nothing but white space may follow it).
pub fn parse(src: &Source<'_>) -> Result<Spanned> {
    let mut p = Parser {
        src,
        bytes: src.text.as_bytes(),
        at: 0,
    };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.at < p.bytes.len() {
        return Err(p.unexpected("the end of the file after the top-level value"));
    }
    Ok(v)
}

struct Parser<'a> {
    src: &'a Source<'a>,
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// What is at the current position, for messages.
    fn found(&self) -> String {
        match self.src.text.get(self.at..).and_then(|s| s.chars().next()) {
            None => "the end of the file".into(),
            Some(c) => format!("'{c}'"),
        }
    }

    /// "expected X, found Y", with a hint when Y is Python syntax.
    fn unexpected(&self, expected: &str) -> Error {
        let hint = match self.bytes.get(self.at) {
            Some(b'\'') => {
                "; JSON strings use double quotes (write Brainstorm's Python dict as JSON)"
            }
            Some(b'(') => "; write Python tuples as JSON lists [...]",
            Some(b'}' | b']') => "; JSON allows no comma before a closing bracket",
            _ => "",
        };
        self.src.error(
            self.at,
            format!("expected {expected}, found {}{hint}", self.found()),
        )
    }

    fn value(&mut self, depth: usize) -> Result<Spanned> {
        let at = self.at;
        let value = match self.bytes.get(self.at) {
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => Value::String(self.string()?),
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(b't') => self.literal("true", Value::Bool(true))?,
            Some(b'f') => self.literal("false", Value::Bool(false))?,
            Some(b'n') => self.literal("null", Value::Null)?,
            Some(b'T' | b'F' | b'N') => {
                return Err(self.unexpected(
                    "a JSON value (Python's True, False and None are true, false and null)",
                ))
            }
            _ => return Err(self.unexpected("a JSON value")),
        };
        Ok(Spanned { value, at })
    }

    fn enter(&self, depth: usize) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(self.src.error(
                self.at,
                format!("lists and objects nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(v)
        } else {
            Err(self.unexpected("a JSON value (true, false and null are lower case)"))
        }
    }

    /// Steps over the opening bracket of an object or array at nesting `depth`; true when
    /// `close` follows at once (an empty one, also stepped over).
    fn open(&mut self, depth: usize, close: u8) -> Result<bool> {
        self.enter(depth)?;
        self.at += 1;
        self.skip_ws();
        Ok(self.step_over(close))
    }

    /// True (and stepped over) when the next byte is `b`.
    fn step_over(&mut self, b: u8) -> bool {
        let here = self.bytes.get(self.at) == Some(&b);
        if here {
            self.at += 1;
        }
        here
    }

    /// After an item of an object or array: `,` (more follow: false) or `close` (the end:
    /// true), else an error saying `expected`.
    fn end_of_item(&mut self, close: u8, expected: &str) -> Result<bool> {
        self.skip_ws();
        if self.step_over(b',') {
            Ok(false)
        } else if self.step_over(close) {
            Ok(true)
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value> {
        let mut members: Vec<Member> = Vec::new();
        if self.open(depth, b'}')? {
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.at) != Some(&b'"') {
                return Err(self.unexpected("an object key in double quotes"));
            }
            let key_at = self.at;
            let key = self.string()?;
            if members.iter().any(|m| m.key == key) {
                return Err(self
                    .src
                    .error(key_at, format!("duplicate key \"{key}\" in this object")));
            }
            self.skip_ws();
            if self.bytes.get(self.at) != Some(&b':') {
                return Err(self.unexpected("':' after the key"));
            }
            self.at += 1;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            members.push(Member { key, key_at, value });
            if self.end_of_item(b'}', "',' or '}' after an object member")? {
                return Ok(Value::Object(members));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value> {
        let mut items = Vec::new();
        if self.open(depth, b']')? {
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            if self.end_of_item(b']', "',' or ']' after a list item")? {
                return Ok(Value::Array(items));
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self.bytes.get(self.at..self.at + 4);
        let v = digits
            .and_then(|d| std::str::from_utf8(d).ok())
            .filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| u32::from_str_radix(s, 16).ok());
        match v {
            Some(v) => {
                self.at += 4;
                Ok(v)
            }
            None => Err(self.unexpected("four hex digits after \\u")),
        }
    }

    fn string(&mut self) -> Result<String> {
        let start = self.at;
        self.at += 1;
        let mut out = String::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(self.src.error(start, "string not closed by '\"'"));
            };
            match b {
                b'"' => {
                    self.at += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.at += 1;
                    let esc = self.bytes.get(self.at).copied();
                    self.at += 1;
                    let c = match esc {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if !self.bytes[self.at..].starts_with(b"\\u") {
                                    return Err(self.unexpected("the low half of a surrogate pair"));
                                }
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.src.error(
                                        self.at - 6,
                                        "not the low half of a surrogate pair",
                                    ));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or_else(|| {
                                self.src
                                    .error(self.at - 6, "\\u escape of a lone surrogate")
                            })?
                        }
                        _ => {
                            self.at -= 1;
                            return Err(self
                                .unexpected("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)"));
                        }
                    };
                    out.push(c);
                }
                0x00..=0x1f => {
                    return Err(self
                        .unexpected("a printable character (control characters must be escaped)"))
                }
                _ => {
                    // A whole UTF-8 character (the text is a &str, so it is valid).
                    let c = self.src.text[self.at..]
                        .chars()
                        .next()
                        .unwrap_or('\u{fffd}');
                    out.push(c);
                    self.at += c.len_utf8();
                }
            }
        }
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let s = p.at;
            while p.bytes.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at - s
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let int_start = self.at;
        if digits(self) == 0 {
            return Err(self.unexpected("a digit"));
        }
        if self.bytes[int_start] == b'0' && self.at - int_start > 1 {
            return Err(self
                .src
                .error(int_start, "JSON numbers have no leading zeros"));
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.unexpected("a digit after the decimal point"));
            }
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.unexpected("a digit in the exponent"));
            }
        }
        let text = &self.src.text[start..self.at];
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Value::Number(v)),
            _ => Err(self
                .src
                .error(start, format!("number {text} is out of range"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Spanned> {
        parse(&Source {
            text,
            file: "t.json",
        })
    }

    #[test]
    fn keeps_positions_and_order() {
        let v =
            parse_str("{\n  \"b\": [1, 2.5e1],\n  \"a\": {\"x\": \"\\u00e9\\ud83d\\ude00\"}\n}")
                .unwrap();
        let Value::Object(m) = &v.value else {
            panic!("not an object")
        };
        assert_eq!(m[0].key, "b");
        assert_eq!(m[1].key, "a");
        let src = Source {
            text: "{\n  \"b\": [1, 2.5e1],\n  \"a\": {\"x\": \"\\u00e9\\ud83d\\ude00\"}\n}",
            file: "t.json",
        };
        let p = src.pos(m[1].key_at);
        assert_eq!((p.line, p.column), (3, 3));
        let Value::Array(items) = &m[0].value.value else {
            panic!("not a list")
        };
        assert!(matches!(items[1].value, Value::Number(x) if x == 25.0));
        let Value::Object(inner) = &m[1].value.value else {
            panic!("not an object")
        };
        assert!(matches!(&inner[0].value.value, Value::String(s) if s == "é😀"));
    }

    #[test]
    fn errors_name_line_and_column() {
        let cases: &[(&str, usize, usize, &str)] = &[
            ("{\"a\": 1,}", 1, 9, "JSON allows no comma"),
            ("{\n 'a': 1}", 2, 2, "double quotes"),
            ("{\"a\": (1, 2)}", 1, 7, "tuples"),
            ("{\"a\": 1 \"b\": 2}", 1, 9, "',' or '}'"),
            ("[1, 2", 1, 6, "the end of the file"),
            ("{\"a\": 1, \"a\": 2}", 1, 10, "duplicate key"),
            ("[01]", 1, 2, "leading zeros"),
            ("[1e999]", 1, 2, "out of range"),
            ("\"abc", 1, 1, "not closed"),
            ("{} x", 1, 4, "end of the file"),
            ("[True]", 1, 2, "are true, false and null"),
        ];
        for &(text, line, col, what) in cases {
            let e = parse_str(text).expect_err(text);
            let Error::Parse { pos, msg } = &e else {
                panic!("{text}: not a parse error: {e}")
            };
            assert_eq!((pos.line, pos.column), (line, col), "{text}: {e}");
            assert!(msg.contains(what), "{text}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = "[".repeat(100_000);
        let e = parse_str(&text).unwrap_err();
        assert!(e.to_string().contains("nested deeper"), "{e}");
    }
}
