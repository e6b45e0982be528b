//! One line of a Kaldi config file: an optional first token, then `key=value` pairs
//! (facts §2.6, Kaldi's `ConfigLine::ParseLine`).
//!
//! Rules: everything from the first `#` is a comment; values may be quoted with `'` or `"`
//! (no escapes); an unquoted value extends up to the last whitespace before the next `=`, so
//! descriptors with spaces parse; a repeated key keeps its *first* value; booleans accept any
//! word starting with t/T/f/F; every key must be consumed by whoever reads the line.

use crate::error::{Error, Result, TextPos};
use std::cell::Cell;

/// One `key=value` pair with where it came from.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    value: String,
    /// 1-based column of the key in the line.
    key_col: usize,
    /// 1-based column of the value in the line.
    value_col: usize,
    used: Cell<bool>,
}

/// A parsed config line.
#[derive(Debug, Clone)]
pub struct ConfigLine {
    first_token: String,
    entries: Vec<Entry>,
    pos: TextPos,
}

/// True if `name` is a valid Kaldi name: first char letter or `_`, others alphanumeric or
/// `_`, `-`, `.`.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Strips a `#` comment and surrounding spaces/tabs (Kaldi's `ReadConfigLines`).
pub fn strip_comment(line: &str) -> &str {
    let line = match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    };
    line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r')
}

/// Splits a config text into (1-based line number, raw line) pairs that are not empty after
/// stripping comments.
pub fn config_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !strip_comment(l).is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect()
}

impl ConfigLine {
    /// Parses one line. `pos` names the file and line (its column and text are filled in here).
    pub fn parse(raw_line: &str, mut pos: TextPos) -> Result<ConfigLine> {
        pos.line_text = raw_line.trim_end_matches(['\r', '\n']).to_string();
        let body_end = raw_line.find('#').unwrap_or(raw_line.len());
        let chars: Vec<(usize, char)> = raw_line[..body_end].char_indices().collect();
        // Column (1-based, in chars) for a char index into `chars`.
        let col = |ci: usize| ci + 1;
        let err = |ci: usize, msg: String| {
            let mut p = pos.clone();
            p.column = col(ci);
            Error::parse(p, msg)
        };
        let n = chars.len();
        let is_ws = |c: char| c == ' ' || c == '\t' || c == '\r';
        let mut i = 0;
        while i < n && is_ws(chars[i].1) {
            i += 1;
        }
        let mut first_token = String::new();
        // The first token is a word without '=' (e.g. `component-node`).
        {
            let mut j = i;
            while j < n && !is_ws(chars[j].1) && chars[j].1 != '=' {
                j += 1;
            }
            if j > i && (j == n || chars[j].1 != '=') {
                first_token = chars[i..j].iter().map(|c| c.1).collect();
                i = j;
            }
        }
        let mut entries: Vec<Entry> = Vec::new();
        loop {
            while i < n && is_ws(chars[i].1) {
                i += 1;
            }
            if i >= n {
                break;
            }
            let key_start = i;
            while i < n && chars[i].1 != '=' && !is_ws(chars[i].1) {
                i += 1;
            }
            let key: String = chars[key_start..i].iter().map(|c| c.1).collect();
            if i >= n || chars[i].1 != '=' {
                return Err(err(
                    key_start,
                    format!("expected key=value, found '{key}' with no '='"),
                ));
            }
            if !is_valid_name(&key) {
                return Err(err(key_start, format!("invalid key name '{key}'")));
            }
            i += 1; // '='
            let value_start = i;
            let value: String;
            if i < n && (chars[i].1 == '\'' || chars[i].1 == '"') {
                let q = chars[i].1;
                let close = (i + 1..n)
                    .find(|&k| chars[k].1 == q)
                    .ok_or_else(|| err(i, format!("unterminated quoted value for key '{key}'")))?;
                value = chars[i + 1..close].iter().map(|c| c.1).collect();
                i = close + 1;
                if i < n && !is_ws(chars[i].1) {
                    return Err(err(i, "expected whitespace after a quoted value".into()));
                }
            } else {
                // Up to the last whitespace before the next '=' (or end of line).
                let next_eq = (i..n).find(|&k| chars[k].1 == '=');
                let end = match next_eq {
                    None => n,
                    Some(eq) => {
                        // Walk back over the next key to the whitespace before it.
                        let mut k = eq;
                        while k > i && !is_ws(chars[k - 1].1) {
                            k -= 1;
                        }
                        if k == i {
                            return Err(err(eq, format!("bad value for key '{key}'")));
                        }
                        k
                    }
                };
                value = chars[i..end]
                    .iter()
                    .map(|c| c.1)
                    .collect::<String>()
                    .trim_matches(|c| c == ' ' || c == '\t' || c == '\r')
                    .to_string();
                i = end;
            }
            if !entries.iter().any(|e| e.key == key) {
                entries.push(Entry {
                    key,
                    value,
                    key_col: col(key_start),
                    value_col: col(value_start),
                    used: Cell::new(false),
                });
            }
        }
        Ok(ConfigLine {
            first_token,
            entries,
            pos,
        })
    }

    /// Parses a line with no file information (tests, programmatic use).
    pub fn parse_str(line: &str) -> Result<ConfigLine> {
        ConfigLine::parse(
            line,
            TextPos {
                file: "<config>".into(),
                line: 1,
                ..Default::default()
            },
        )
    }

    /// The leading word (e.g. `component-node`), or "" if none.
    pub fn first_token(&self) -> &str {
        &self.first_token
    }
    /// File and line of this config line.
    pub fn pos(&self) -> &TextPos {
        &self.pos
    }
    /// True if the key is present (does not mark it used).
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|e| e.key == key)
    }
    /// All keys in order.
    pub fn keys(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.key.as_str()).collect()
    }
    /// The raw value of a key, marking it used.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|e| e.key == key).map(|e| {
            e.used.set(true);
            e.value.as_str()
        })
    }
    /// The typed value of a key, if present; marks it used.
    pub fn get<T: FromConfigValue>(&self, key: &str) -> Result<Option<T>> {
        match self.entries.iter().find(|e| e.key == key) {
            None => Ok(None),
            Some(e) => {
                e.used.set(true);
                T::from_config_value(&e.value).map(Some).map_err(|what| {
                    self.error_at_value(
                        key,
                        format!("bad value '{}' for {key}: expected {what}", e.value),
                    )
                })
            }
        }
    }
    /// The typed value of a key, or `default` if absent.
    pub fn get_or<T: FromConfigValue>(&self, key: &str, default: T) -> Result<T> {
        Ok(self.get(key)?.unwrap_or(default))
    }
    /// The typed value of a required key.
    pub fn require<T: FromConfigValue>(&self, key: &str) -> Result<T> {
        self.get(key)?
            .ok_or_else(|| self.error(format!("missing required option {key}=...")))
    }
    /// Keys nobody consumed.
    pub fn unused_keys(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| !e.used.get())
            .map(|e| e.key.as_str())
            .collect()
    }
    /// Fails naming the first unconsumed key (Kaldi's HasUnusedValues check).
    pub fn check_all_used(&self, what: &str) -> Result<()> {
        if let Some(e) = self.entries.iter().find(|e| !e.used.get()) {
            let mut p = self.pos.clone();
            p.column = e.key_col;
            return Err(Error::parse(
                p,
                format!("unknown option '{}' for {what}", e.key),
            ));
        }
        Ok(())
    }
    /// An error about the whole line (column 1).
    pub fn error(&self, msg: impl Into<String>) -> Error {
        let mut p = self.pos.clone();
        p.column = 1;
        Error::parse(p, msg)
    }
    /// An error pointing at the value of `key` (or the line start if absent).
    pub fn error_at_value(&self, key: &str, msg: impl Into<String>) -> Error {
        let mut p = self.pos.clone();
        p.column = self
            .entries
            .iter()
            .find(|e| e.key == key)
            .map_or(1, |e| e.value_col);
        Error::parse(p, msg)
    }
    /// An error pointing at a character offset within the value of `key`.
    pub fn error_in_value(&self, key: &str, offset: usize, msg: impl Into<String>) -> Error {
        let mut p = self.pos.clone();
        p.column = self
            .entries
            .iter()
            .find(|e| e.key == key)
            .map_or(1, |e| e.value_col + offset);
        Error::parse(p, msg)
    }
}

/// How many float copies of its parameters a component may hold at once (parameters,
/// gradient or statistics, the inference copy of a weight matrix, the copy being written...):
/// the size check below multiplies by this so that a layer it passes can also be used.
const PARAMETER_COPIES: u64 = 8;

impl ConfigLine {
    /// Checks the sizes this line asks for against the memory limit ([`crate::limits`])
    /// before anything is built from it: every `*dim` value, the sum of `sizes=`, and a
    /// weight matrix of `input-dim` × `output-dim` (× the number of `time-offsets`). Values
    /// that are not positive integers are left to the reader of the line, which names them.
    /// Marks nothing used.
    pub fn check_sizes(&self) -> Result<()> {
        let value = |key: &str| -> Option<u64> {
            let e = self.entries.iter().find(|e| e.key == key)?;
            e.value.trim().parse::<u64>().ok().filter(|&v| v > 0)
        };
        let list = |key: &str| -> Option<Vec<u64>> {
            let e = self.entries.iter().find(|e| e.key == key)?;
            Some(
                e.value
                    .split(',')
                    .map(|p| p.trim().parse::<u64>().unwrap_or(0))
                    .collect(),
            )
        };
        // (key to point at, float count asked for)
        let mut asks: Vec<(String, Option<u64>)> = Vec::new();
        for e in self.entries.iter().filter(|e| e.key.ends_with("dim")) {
            if let Some(v) = value(&e.key) {
                asks.push((e.key.clone(), Some(v)));
            }
        }
        if let Some(sizes) = list("sizes") {
            let total = sizes.iter().try_fold(0u64, |a, &v| a.checked_add(v));
            asks.push(("sizes".into(), total));
        }
        if let (Some(i), Some(o)) = (value("input-dim"), value("output-dim")) {
            let offsets = list("time-offsets").map_or(1, |v| v.len() as u64);
            let weights = i.checked_mul(o).and_then(|p| p.checked_mul(offsets));
            asks.push(("input-dim".into(), weights));
        }
        for (key, floats) in asks {
            let bytes = floats.and_then(|f| f.checked_mul(4 * PARAMETER_COPIES));
            if bytes.is_none_or(|b| b > crate::limits::max_bytes()) {
                let what = format!(
                    "{} '{}' (with {PARAMETER_COPIES} copies of its parameters)",
                    self.first_token,
                    self.get_str_unmarked("name").unwrap_or("")
                );
                return Err(self.error_at_value(
                    &key,
                    crate::limits::too_big(bytes, crate::limits::max_bytes(), &what),
                ));
            }
        }
        Ok(())
    }

    fn get_str_unmarked(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    }
}

/// Types a config value can be read as. The error is a description of what was expected.
pub trait FromConfigValue: Sized {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str>;
}

impl FromConfigValue for String {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        Ok(s.to_string())
    }
}
impl FromConfigValue for bool {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        match s.chars().next() {
            Some('t') | Some('T') => Ok(true),
            Some('f') | Some('F') => Ok(false),
            _ => Err("a boolean (true/false)"),
        }
    }
}
impl FromConfigValue for i32 {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        s.parse().map_err(|_| "an integer")
    }
}
impl FromConfigValue for usize {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        s.parse().map_err(|_| "a non-negative integer")
    }
}
impl FromConfigValue for f32 {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        crate::io::codec::parse_float(s)
            .map(|v| v as f32)
            .ok_or("a number")
    }
}
impl FromConfigValue for f64 {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        crate::io::codec::parse_float(s).ok_or("a number")
    }
}
/// Comma-separated integers, e.g. `time-offsets=-1,0,1`.
impl FromConfigValue for Vec<i32> {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        s.split(',')
            .map(|p| p.trim().parse::<i32>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| "a comma-separated list of integers")
    }
}
/// Comma-separated numbers.
impl FromConfigValue for Vec<f32> {
    fn from_config_value(s: &str) -> std::result::Result<Self, &'static str> {
        s.split(',')
            .map(|p| crate::io::codec::parse_float(p.trim()).map(|v| v as f32))
            .collect::<Option<Vec<_>>>()
            .ok_or("a comma-separated list of numbers")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_descriptor_values_with_spaces() {
        let c = ConfigLine::parse_str(
            "component-node name=a component=b input=Append(x, Offset(y, -1))  foo=bar",
        )
        .unwrap();
        assert_eq!(c.first_token(), "component-node");
        assert_eq!(c.get_str("input"), Some("Append(x, Offset(y, -1))"));
        assert_eq!(c.get_str("foo"), Some("bar"));
        assert_eq!(c.unused_keys(), vec!["name", "component"]);
    }

    #[test]
    fn repeated_key_keeps_first_and_quotes() {
        let c = ConfigLine::parse_str("component name=x name=y sub='a b=c' flag=True").unwrap();
        assert_eq!(c.get_str("name"), Some("x"));
        assert_eq!(c.get_str("sub"), Some("a b=c"));
        assert_eq!(c.get::<bool>("flag").unwrap(), Some(true));
    }

    #[test]
    fn bad_key_reports_column() {
        let e = ConfigLine::parse_str("component name=x 9bad=3").unwrap_err();
        let s = e.to_string();
        assert!(s.contains(":1:18"), "{s}");
    }
}
