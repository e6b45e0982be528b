//! Kaldi's token / basic-type codec, in text and binary (facts §2.1).
//!
//! The same call sequence writes both forms; only the primitive encodings differ. Readers work
//! on an in-memory byte buffer so every error can name the byte offset where it happened.

use crate::error::{Error, Result};
use crate::matrix::{Matrix, Real};

/// Formats a float the way a Kaldi text stream does (C++ `<<` with precision 7, `%g`-like).
pub fn fmt_float(v: f64) -> String {
    fmt_g(v, 7)
}

/// C's `%.{prec}g` formatting.
pub fn fmt_g(v: f64, prec: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let p = prec.max(1);
    // Exponent after rounding to p significant digits.
    let e_form = format!("{:.*e}", p - 1, v);
    let (mant, exp) = e_form.split_once('e').unwrap_or((&e_form, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if x < -4 || x >= p as i32 {
        let mant = strip_zeros(mant);
        let sign = if x < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", x.abs())
    } else {
        let decimals = (p as i32 - 1 - x).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, v)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Writes Kaldi objects into a byte buffer, in text or binary.
pub struct TokenWriter {
    buf: Vec<u8>,
    binary: bool,
}

impl TokenWriter {
    pub fn new(binary: bool) -> Self {
        TokenWriter {
            buf: Vec::new(),
            binary,
        }
    }
    pub fn is_binary(&self) -> bool {
        self.binary
    }
    /// A writer that appends to `buf` after clearing it (reusing its allocation).
    pub fn with_buffer(binary: bool, mut buf: Vec<u8>) -> Self {
        buf.clear();
        TokenWriter { buf, binary }
    }
    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
    /// Raw bytes, unchanged.
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// The `\0B` binary header (written by Kaldi's stream/archive layer, only in binary).
    pub fn binary_header(&mut self) {
        if self.binary {
            self.buf.extend_from_slice(b"\0B");
        }
    }
    /// A token followed by one space (identical in both modes).
    pub fn token(&mut self, t: &str) {
        self.buf.extend_from_slice(t.as_bytes());
        self.buf.push(b' ');
    }
    /// A newline, in text mode only (Kaldi's `if (!binary) os << "\n"`).
    pub fn newline_if_text(&mut self) {
        if !self.binary {
            self.buf.push(b'\n');
        }
    }
    /// A number: in binary its size byte and little-endian bytes `le`, in text `text()` and a
    /// space.
    fn number(&mut self, le: &[u8], text: impl FnOnce() -> String) {
        if self.binary {
            self.buf.push(le.len() as u8);
            self.buf.extend_from_slice(le);
        } else {
            self.buf.extend_from_slice(text().as_bytes());
            self.buf.push(b' ');
        }
    }
    pub fn i32(&mut self, v: i32) {
        self.number(&v.to_le_bytes(), || v.to_string());
    }
    pub fn i64(&mut self, v: i64) {
        self.number(&v.to_le_bytes(), || v.to_string());
    }
    pub fn f32(&mut self, v: f32) {
        self.number(&v.to_le_bytes(), || fmt_float(v as f64));
    }
    pub fn f64(&mut self, v: f64) {
        self.number(&v.to_le_bytes(), || fmt_float(v));
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.push(if v { b'T' } else { b'F' });
        if !self.binary {
            self.buf.push(b' ');
        }
    }
    /// Kaldi's WriteIntegerVector for int32.
    pub fn int_vec(&mut self, v: &[i32]) {
        if self.binary {
            self.buf.push(4);
            self.buf.extend_from_slice(&(v.len() as i32).to_le_bytes());
            for x in v {
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
        } else {
            self.buf.extend_from_slice(b"[ ");
            for x in v {
                self.buf.extend_from_slice(format!("{x} ").as_bytes());
            }
            self.buf.extend_from_slice(b"]\n");
        }
    }
    /// Kaldi's WriteIntegerPairVector for int32 pairs.
    pub fn int_pair_vec(&mut self, v: &[(i32, i32)]) {
        if self.binary {
            self.buf.push(4);
            self.buf.extend_from_slice(&(v.len() as i32).to_le_bytes());
            for (a, b) in v {
                self.buf.extend_from_slice(&a.to_le_bytes());
                self.buf.extend_from_slice(&b.to_le_bytes());
            }
        } else {
            self.buf.extend_from_slice(b"[ ");
            for (a, b) in v {
                self.buf.extend_from_slice(format!("{a},{b} ").as_bytes());
            }
            self.buf.extend_from_slice(b"]\n");
        }
    }
    /// A float matrix (`FM` in binary; ` [ ... ]` in text).
    pub fn matrix(&mut self, m: &Matrix) {
        if self.binary {
            self.binary_matrix_header(m.num_rows(), m.num_cols());
            // Straight from the rows into the buffer (which the table writer reuses).
            m.view().extend_le_bytes(&mut self.buf);
        } else {
            self.text_matrix(m.num_rows(), m.num_cols(), &m.to_vec());
        }
    }
    /// The start of a binary float matrix (`FM`, rows, columns), which its row-major
    /// little-endian data follows.
    pub fn binary_matrix_header(&mut self, rows: usize, cols: usize) {
        self.token("FM");
        self.i32(rows as i32);
        self.i32(cols as i32);
    }
    /// A double vector (`DV` in binary; ` [ ... ]` in text, as a float vector prints).
    pub fn vector_f64(&mut self, v: &[f64]) {
        if self.binary {
            self.token("DV");
            self.i32(v.len() as i32);
            for &x in v {
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
        } else {
            self.text_vector(v);
        }
    }
    /// A row-major double matrix (`DM` in binary; ` [ ... ]` in text, as a float matrix
    /// prints).
    pub fn matrix_f64(&mut self, rows: usize, cols: usize, data: &[f64]) {
        if self.binary {
            self.token("DM");
            self.i32(rows as i32);
            self.i32(cols as i32);
            for &x in data {
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
        } else {
            self.text_matrix(rows, cols, data);
        }
    }
    /// A float vector (`FV` in binary; ` [ ... ]` in text).
    pub fn vector(&mut self, v: &[Real]) {
        if self.binary {
            self.token("FV");
            self.i32(v.len() as i32);
            for &x in v {
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
        } else {
            self.text_vector(v);
        }
    }
    /// ` [ x x ... ]`: a vector in text (floats and doubles print alike).
    fn text_vector<T: Copy + Into<f64>>(&mut self, v: &[T]) {
        self.buf.extend_from_slice(b" [ ");
        for &x in v {
            self.buf.extend_from_slice(fmt_float(x.into()).as_bytes());
            self.buf.push(b' ');
        }
        self.buf.extend_from_slice(b"]\n");
    }
    /// A row-major matrix in text: ` [ ]` when empty, else one indented line per row.
    fn text_matrix<T: Copy + Into<f64>>(&mut self, rows: usize, cols: usize, data: &[T]) {
        if rows == 0 || cols == 0 {
            self.buf.extend_from_slice(b" [ ]\n");
            return;
        }
        self.buf.extend_from_slice(b" [");
        for row in data.chunks_exact(cols) {
            self.buf.extend_from_slice(b"\n  ");
            for &x in row {
                self.buf.extend_from_slice(fmt_float(x.into()).as_bytes());
                self.buf.push(b' ');
            }
        }
        self.buf.extend_from_slice(b"]\n");
    }
}

/// Reads Kaldi objects from a byte buffer, in text or binary, tracking the byte offset.
pub struct TokenReader<'a> {
    buf: &'a [u8],
    pos: usize,
    binary: bool,
    /// File name for error messages.
    file: String,
}

impl<'a> TokenReader<'a> {
    /// A reader over `buf`; `binary` says which encoding to expect.
    pub fn new(buf: &'a [u8], binary: bool, file: impl Into<String>) -> Self {
        TokenReader {
            buf,
            pos: 0,
            binary,
            file: file.into(),
        }
    }
    /// A reader that detects the `\0B` header at the start (Kaldi's InitKaldiInputStream).
    pub fn detect(buf: &'a [u8], file: impl Into<String>) -> Result<Self> {
        let file = file.into();
        if buf.first() == Some(&0) {
            if buf.get(1) != Some(&b'B') {
                return Err(Error::format(
                    file,
                    1,
                    "'B' after binary marker \\0",
                    describe(buf, 1),
                ));
            }
            let mut r = TokenReader::new(buf, true, file);
            r.pos = 2;
            Ok(r)
        } else {
            Ok(TokenReader::new(buf, false, file))
        }
    }
    pub fn is_binary(&self) -> bool {
        self.binary
    }
    pub fn set_binary(&mut self, binary: bool) {
        self.binary = binary;
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }
    pub fn file(&self) -> &str {
        &self.file
    }
    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }
    /// Where the next token starts (a text reader skips whitespace first), for error
    /// positions.
    pub fn next_token_pos(&self) -> usize {
        let mut p = self.pos;
        if !self.binary {
            while self.buf.get(p).is_some_and(|b| b.is_ascii_whitespace()) {
                p += 1;
            }
        }
        p
    }
    /// `n` as a count of items of at least `min_bytes` each, if it is not negative and that
    /// many items can still be in the buffer (checked before anything of that size is
    /// allocated).
    pub fn count_fits(&self, n: i32, min_bytes: usize) -> Option<usize> {
        (n >= 0 && (n as usize).saturating_mul(min_bytes) <= self.rest().len())
            .then_some(n as usize)
    }
    /// The next token and where it starts.
    pub fn token_at(&mut self) -> Result<(usize, String)> {
        let at = self.next_token_pos();
        Ok((at, self.token()?))
    }
    pub fn at_eof(&self) -> bool {
        self.pos >= self.buf.len()
    }
    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }
    /// A format error at the current position.
    pub fn err(&self, expected: impl Into<String>) -> Error {
        Error::format(
            self.file.clone(),
            self.pos,
            expected,
            describe(self.buf, self.pos),
        )
    }
    /// A format error at a given position.
    pub fn err_at(&self, pos: usize, expected: impl Into<String>) -> Error {
        Error::format(self.file.clone(), pos, expected, describe(self.buf, pos))
    }
    /// Skips whitespace (space, tab, newline, CR, VT, FF).
    pub fn skip_ws(&mut self) {
        while self.pos < self.buf.len() && self.buf[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }
    /// Skips whitespace in text mode only.
    fn skip_ws_text(&mut self) {
        if !self.binary {
            self.skip_ws();
        }
    }
    /// Reads one raw byte.
    pub fn byte(&mut self) -> Result<u8> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err("more data"))?;
        self.pos += 1;
        Ok(b)
    }
    /// Reads `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.pos + n > self.buf.len() {
            return Err(self.err(format!("{n} more bytes (file truncated)")));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// Reads a token (Kaldi's ReadToken): up to whitespace, then consumes exactly one
    /// whitespace character.
    pub fn token(&mut self) -> Result<String> {
        self.skip_ws_text();
        let start = self.pos;
        while self.pos < self.buf.len() && !self.buf[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("a token"));
        }
        let tok = String::from_utf8_lossy(&self.buf[start..self.pos]).into_owned();
        if self.pos >= self.buf.len() {
            return Err(self.err(format!("whitespace after token {tok}")));
        }
        self.pos += 1;
        Ok(tok)
    }
    /// The next token, without consuming it.
    pub fn peek_token(&mut self) -> Result<String> {
        let save = self.pos;
        self.skip_ws_text();
        let start = self.pos;
        let mut end = start;
        while end < self.buf.len() && !self.buf[end].is_ascii_whitespace() {
            end += 1;
        }
        self.pos = save;
        if end == start {
            return Err(self.err_at(start, "a token"));
        }
        Ok(String::from_utf8_lossy(&self.buf[start..end]).into_owned())
    }
    /// Consumes the given token or fails (accepts it with its leading `<` missing, as Kaldi does).
    pub fn expect_token(&mut self, t: &str) -> Result<()> {
        let save = self.pos;
        let got = self
            .token()
            .map_err(|_| self.err_at(save, format!("token {t}")))?;
        if got == t || (t.starts_with('<') && got == t[1..]) {
            Ok(())
        } else {
            self.pos = save;
            self.skip_ws_text();
            Err(self.err(format!("token {t}")))
        }
    }
    /// If the next token is `t`, consumes it and returns true.
    pub fn try_token(&mut self, t: &str) -> Result<bool> {
        match self.peek_token() {
            Ok(p) if p == t => {
                self.token()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    /// A text number token (no whitespace consumed after it).
    fn text_word(&mut self, what: &str) -> Result<(usize, &'a str)> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.buf.len() && !self.buf[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err_at(start, what.to_string()));
        }
        let s = std::str::from_utf8(&self.buf[start..self.pos])
            .map_err(|_| self.err_at(start, what.to_string()))?;
        Ok((start, s))
    }
    fn size_byte(&mut self, what: &str) -> Result<u8> {
        let at = self.pos;
        let b = self.byte().map_err(|_| self.err_at(at, what.to_string()))?;
        Ok(b)
    }
    pub fn i32(&mut self) -> Result<i32> {
        if self.binary {
            let at = self.pos;
            let sz = self.size_byte("an int32")?;
            if sz != 4 {
                return Err(self.err_at(at, "int32 size byte 4"));
            }
            let b = self.bytes(4)?;
            Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            self.text_integer()
        }
    }
    pub fn i64(&mut self) -> Result<i64> {
        if self.binary {
            self.binary_4_or_8(
                "an int64",
                "int64 size byte 8",
                |b| i32::from_le_bytes(b) as i64,
                i64::from_le_bytes,
            )
        } else {
            self.text_integer()
        }
    }
    /// A float; in binary accepts a 4- or 8-byte value.
    pub fn f64(&mut self) -> Result<f64> {
        if self.binary {
            self.binary_4_or_8(
                "a float",
                "float size byte 4 or 8",
                |b| f32::from_le_bytes(b) as f64,
                f64::from_le_bytes,
            )
        } else {
            let (start, s) = self.text_word("a number")?;
            parse_float(s).ok_or_else(|| self.err_at(start, "a number"))
        }
    }
    /// A binary number of 4 or 8 bytes (as its size byte says), widened by `from4` or read by
    /// `from8`; `what` names it when the size byte is missing, `expected` when it is wrong.
    fn binary_4_or_8<T>(
        &mut self,
        what: &str,
        expected: &str,
        from4: impl FnOnce([u8; 4]) -> T,
        from8: impl FnOnce([u8; 8]) -> T,
    ) -> Result<T> {
        let at = self.pos;
        match self.size_byte(what)? {
            4 => {
                let b = self.bytes(4)?;
                Ok(from4([b[0], b[1], b[2], b[3]]))
            }
            8 => {
                let b = self.bytes(8)?;
                Ok(from8(b.try_into().unwrap_or([0; 8])))
            }
            _ => Err(self.err_at(at, expected)),
        }
    }
    /// A text integer token.
    fn text_integer<T: std::str::FromStr>(&mut self) -> Result<T> {
        let (start, s) = self.text_word("an integer")?;
        s.parse().map_err(|_| self.err_at(start, "an integer"))
    }
    pub fn f32(&mut self) -> Result<f32> {
        if self.binary {
            Ok(self.f64()? as f32)
        } else {
            // Parse text directly as f32: going through f64 could round twice.
            let (start, s) = self.text_word("a number")?;
            parse_f32(s).ok_or_else(|| self.err_at(start, "a number"))
        }
    }
    pub fn bool(&mut self) -> Result<bool> {
        self.skip_ws_text();
        let at = self.pos;
        let c = self.byte().map_err(|_| self.err_at(at, "T or F"))?;
        let v = match c {
            b'T' => true,
            b'F' => false,
            _ => return Err(self.err_at(at, "T or F")),
        };
        if !self.binary && self.pos < self.buf.len() && self.buf[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        Ok(v)
    }
    /// Skips whitespace, then expects the `[` opening `what` (a text vector or matrix); returns
    /// the offset of the `[`.
    pub fn open_bracket(&mut self, what: &str) -> Result<usize> {
        self.skip_ws();
        let at = self.pos;
        if self.byte()? != b'[' {
            return Err(self.err_at(at, format!("'[' opening {what}")));
        }
        Ok(at)
    }
    /// Kaldi's ReadIntegerVector for int32.
    pub fn int_vec(&mut self) -> Result<Vec<i32>> {
        self.int_elements(
            4,
            "an integer vector",
            |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            |r| r.i32(),
        )
    }
    /// Kaldi's ReadIntegerPairVector for int32 pairs.
    pub fn int_pair_vec(&mut self) -> Result<Vec<(i32, i32)>> {
        self.int_elements(
            8,
            "an integer-pair vector",
            |b| {
                (
                    i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                    i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                )
            },
            |r| {
                let (start, s) = r.text_word("a pair a,b")?;
                s.split_once(',')
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                    .ok_or_else(|| r.err_at(start, "a pair a,b"))
            },
        )
    }
    /// The layout both integer vectors share: in binary the int32 size byte 4, the count and
    /// `width` bytes an element (`from_bytes`); in text `[ e e ... ]` with elements read by
    /// `from_text` and the writer's closing newline consumed if present.
    fn int_elements<T>(
        &mut self,
        width: usize,
        what: &str,
        from_bytes: impl Fn(&[u8]) -> T,
        mut from_text: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        if self.binary {
            let at = self.pos;
            let sz = self.byte()?;
            if sz != 4 {
                return Err(self.err_at(at, "int32 element size 4"));
            }
            let b = self.bytes(4)?;
            let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if n < 0 || n as usize * width > self.buf.len() - self.pos {
                return Err(self.err_at(at + 1, "a valid vector length"));
            }
            let mut v = Vec::with_capacity(n as usize);
            for _ in 0..n {
                v.push(from_bytes(self.bytes(width)?));
            }
            Ok(v)
        } else {
            self.open_bracket(what)?;
            let mut v = Vec::new();
            loop {
                self.skip_ws();
                if self.buf.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    break;
                }
                v.push(from_text(self)?);
            }
            // Kaldi's writer ends with a newline; consume it if present.
            if self.buf.get(self.pos) == Some(&b'\n') {
                self.pos += 1;
            }
            Ok(v)
        }
    }
}

/// Parses a text number directly as f32 (no double rounding through f64).
pub fn parse_f32(s: &str) -> Option<f32> {
    s.parse::<f32>()
        .ok()
        .or_else(|| parse_float(s).map(|v| v as f32))
}

/// Parses a float the way Kaldi's text readers accept it (also inf/nan, any case).
pub fn parse_float(s: &str) -> Option<f64> {
    if let Ok(v) = s.parse::<f64>() {
        return Some(v);
    }
    let l = s.to_ascii_lowercase();
    let (neg, body) = match l.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, l.strip_prefix('+').unwrap_or(&l)),
    };
    let v = match body {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => return None,
    };
    Some(if neg { -v } else { v })
}

/// A short printable description of what is at `pos`, for error messages.
pub fn describe(buf: &[u8], pos: usize) -> String {
    if pos >= buf.len() {
        return "end of file".to_string();
    }
    let end = (pos + 16).min(buf.len());
    let s: String = buf[pos..end]
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect();
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_format_matches_kaldi_g7() {
        assert_eq!(fmt_float(0.001), "0.001");
        assert_eq!(fmt_float(1e-5), "1e-05");
        assert_eq!(fmt_float(-3.9416134), "-3.941613");
        assert_eq!(fmt_float(2000.0), "2000");
        assert_eq!(fmt_float(0.6903247_f32 as f64), "0.6903247");
        assert_eq!(fmt_float(12345678.0), "1.234568e+07");
        assert_eq!(fmt_float(-0.0006800742_f32 as f64), "-0.0006800742");
    }

    #[test]
    fn binary_int_round_trip() {
        let mut w = TokenWriter::new(true);
        w.token("<Dim>");
        w.i32(-7);
        w.f32(0.5);
        w.bool(true);
        w.int_vec(&[1, -2, 3]);
        let b = w.into_bytes();
        let mut r = TokenReader::new(&b, true, "t");
        r.expect_token("<Dim>").unwrap();
        assert_eq!(r.i32().unwrap(), -7);
        assert_eq!(r.f32().unwrap(), 0.5);
        assert!(r.bool().unwrap());
        assert_eq!(r.int_vec().unwrap(), vec![1, -2, 3]);
        assert!(r.at_eof());
    }
}
