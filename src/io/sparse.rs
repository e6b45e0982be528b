//! Sparse vectors and matrices (`SV` / `SM`), `GeneralMatrix` (full / compressed / sparse),
//! `Posterior` lists and Kaldi's basic integer vectors (facts §2.2).

use super::codec::{parse_float, TokenReader, TokenWriter};
use super::compressed::{CompressedMatrix, CompressionMethod};
use crate::error::Result;
use crate::matrix::{Matrix, Real};

/// A sparse vector: dimension plus (index, value) pairs in the order stored.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SparseVector {
    /// Logical dimension.
    pub dim: usize,
    /// Non-zero entries (index, value).
    pub pairs: Vec<(i32, Real)>,
}

/// A sparse matrix: one [`SparseVector`] per row (all of the same dimension).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SparseMatrix {
    /// The rows.
    pub rows: Vec<SparseVector>,
}

/// Reads `what=N` as one token.
fn read_eq_token(r: &mut TokenReader<'_>, what: &str) -> Result<usize> {
    r.skip_ws();
    let at = r.pos();
    let tok = r.token()?;
    tok.strip_prefix(what)
        .and_then(|s| s.strip_prefix('='))
        .and_then(|s| s.parse::<usize>().ok())
        .ok_or_else(|| r.err_at(at, format!("{what}=<non-negative integer>")))
}

/// Reads a binary int32 count of items of at least `min_bytes` each and checks that they can
/// still be in the buffer, so a corrupted count never triggers a huge allocation.
fn read_count(r: &mut TokenReader<'_>, min_bytes: usize, what: &str) -> Result<usize> {
    let at = r.pos();
    let count = r.i32()?;
    r.count_fits(count, min_bytes).ok_or_else(|| {
        let left = r.rest().len();
        r.err_at(
            at,
            format!("a plausible {what} (got {count}, {left} bytes left)"),
        )
    })
}

impl SparseVector {
    /// Reads `SV dim n (i v)*` in binary or `dim=D [ i v ... ]` in text.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        if r.is_binary() {
            r.expect_token("SV")?;
            let at = r.pos();
            let dim = r.i32()?;
            if dim < 0 {
                return Err(r.err_at(at, "non-negative sparse-vector dimension"));
            }
            let n = read_count(r, 10, "number of sparse elements")?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let at = r.pos();
                let i = r.i32()?;
                let v = r.f32()?;
                if i < 0 || i >= dim {
                    return Err(r.err_at(at, format!("an index in [0, {dim}), got {i}")));
                }
                pairs.push((i, v));
            }
            Ok(SparseVector {
                dim: dim as usize,
                pairs,
            })
        } else {
            let dim = read_eq_token(r, "dim")?;
            r.skip_ws();
            let at = r.pos();
            if r.token()? != "[" {
                return Err(r.err_at(at, "'[' opening a sparse vector"));
            }
            let mut pairs = Vec::new();
            loop {
                r.skip_ws();
                let at = r.pos();
                let t = r.token()?;
                if t == "]" {
                    break;
                }
                let i: i32 = t.parse().map_err(|_| r.err_at(at, "an index or ']'"))?;
                if i < 0 || i as usize >= dim {
                    return Err(r.err_at(at, format!("an index in [0, {dim}), got {i}")));
                }
                r.skip_ws();
                let at = r.pos();
                let t = r.token()?;
                let v = parse_float(&t).ok_or_else(|| r.err_at(at, "a value"))?;
                pairs.push((i, v as Real));
            }
            Ok(SparseVector { dim, pairs })
        }
    }

    /// Writes the vector (no newline).
    pub fn write(&self, w: &mut TokenWriter) {
        if w.is_binary() {
            w.token("SV");
            w.i32(self.dim as i32);
            w.i32(self.pairs.len() as i32);
            for &(i, v) in &self.pairs {
                w.i32(i);
                w.f32(v);
            }
        } else {
            w.raw(format!("dim={} [ ", self.dim).as_bytes());
            for &(i, v) in &self.pairs {
                w.raw(format!("{i} {} ", super::codec::fmt_float(v as f64)).as_bytes());
            }
            w.raw(b"] ");
        }
    }
}

impl SparseMatrix {
    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.rows.len()
    }
    /// Number of columns (the rows' dimension; 0 for no rows).
    pub fn num_cols(&self) -> usize {
        self.rows.first().map_or(0, |r| r.dim)
    }

    /// Reads `SM rows SV...` in binary or `rows=N dim=D [ ... ] ...` in text.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        let n = if r.is_binary() {
            r.expect_token("SM")?;
            read_count(r, 12, "number of sparse rows")?
        } else {
            let at = r.pos();
            let n = read_eq_token(r, "rows")?;
            if n > r.rest().len() {
                return Err(r.err_at(at, "a plausible number of sparse rows"));
            }
            n
        };
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            let at = r.pos();
            let v = SparseVector::read(r)?;
            if let Some(first) = rows.first().map(|x: &SparseVector| x.dim) {
                if v.dim != first {
                    return Err(r.err_at(at, format!("a row of dimension {first}, got {}", v.dim)));
                }
            }
            rows.push(v);
        }
        Ok(SparseMatrix { rows })
    }

    /// Writes the matrix (text ends with a newline).
    pub fn write(&self, w: &mut TokenWriter) {
        if w.is_binary() {
            w.token("SM");
            w.i32(self.rows.len() as i32);
        } else {
            w.raw(format!("rows={} ", self.rows.len()).as_bytes());
        }
        for row in &self.rows {
            row.write(w);
        }
        w.newline_if_text();
    }

    /// The dense equivalent (a later duplicate index adds to the earlier one).
    pub fn to_matrix(&self) -> Matrix {
        let mut m = Matrix::zeros(self.num_rows(), self.num_cols());
        let elements: Vec<(usize, usize, f32)> = self
            .rows
            .iter()
            .enumerate()
            .flat_map(|(r, row)| row.pairs.iter().map(move |&(i, v)| (r, i as usize, v)))
            .filter(|&(_, c, _)| c < m.num_cols())
            .collect();
        m.view_mut().add_elements(1.0, &elements);
        m
    }
}

/// Kaldi's `GeneralMatrix`: whichever of full, compressed or sparse was read or stored.
#[derive(Debug, Clone, PartialEq)]
pub enum GeneralMatrix {
    /// A full float matrix.
    Full(Matrix),
    /// A compressed matrix, kept as its bytes.
    Compressed(CompressedMatrix),
    /// A sparse matrix.
    Sparse(SparseMatrix),
}

impl Default for GeneralMatrix {
    fn default() -> Self {
        GeneralMatrix::Full(Matrix::zeros(0, 0))
    }
}

impl GeneralMatrix {
    /// Multiplies every value by `alpha` (Kaldi's `GeneralMatrix::Scale`: a compressed matrix
    /// scales the range in its header, keeping its codes).
    pub fn scale(&mut self, alpha: f32) {
        match self {
            GeneralMatrix::Full(m) => m.view_mut().scale(alpha),
            GeneralMatrix::Compressed(c) => {
                c.min_value *= alpha;
                c.range *= alpha;
            }
            GeneralMatrix::Sparse(sm) => {
                for row in &mut sm.rows {
                    for p in &mut row.pairs {
                        p.1 *= alpha;
                    }
                }
            }
        }
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        match self {
            GeneralMatrix::Full(m) => m.num_rows(),
            GeneralMatrix::Compressed(c) => c.num_rows(),
            GeneralMatrix::Sparse(s) => s.num_rows(),
        }
    }
    /// Number of columns.
    pub fn num_cols(&self) -> usize {
        match self {
            GeneralMatrix::Full(m) => m.num_cols(),
            GeneralMatrix::Compressed(c) => c.num_cols(),
            GeneralMatrix::Sparse(s) => s.num_cols(),
        }
    }
    /// The dense value (decompressed / densified as needed).
    pub fn to_matrix(&self) -> Matrix {
        match self {
            GeneralMatrix::Full(m) => m.clone(),
            GeneralMatrix::Compressed(c) => c.to_matrix(),
            GeneralMatrix::Sparse(s) => s.to_matrix(),
        }
    }
    /// Compresses a full matrix (sparse and already-compressed ones are left alone).
    pub fn compress(&mut self, method: CompressionMethod) {
        if let GeneralMatrix::Full(m) = self {
            *self = GeneralMatrix::Compressed(CompressedMatrix::compress(m, method));
        }
    }
    /// Reads whichever form is next (binary: `C` → compressed, `S` → sparse; text: `r` → sparse).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        let save = r.pos();
        r.skip_ws();
        let first = r.rest().first().copied();
        if r.is_binary() {
            r.set_pos(save);
            match first {
                Some(b'C') => Ok(GeneralMatrix::Compressed(CompressedMatrix::read(r)?)),
                Some(b'S') => Ok(GeneralMatrix::Sparse(SparseMatrix::read(r)?)),
                _ => Ok(GeneralMatrix::Full(super::kaldi_matrix::read_matrix(r)?)),
            }
        } else if first == Some(b'r') {
            Ok(GeneralMatrix::Sparse(SparseMatrix::read(r)?))
        } else {
            Ok(GeneralMatrix::Full(super::kaldi_matrix::read_matrix(r)?))
        }
    }
    /// Writes whichever form is held (a compressed matrix is written full in text mode).
    pub fn write(&self, w: &mut TokenWriter) {
        match self {
            GeneralMatrix::Full(m) => w.matrix(m),
            GeneralMatrix::Compressed(c) => c.write(w),
            GeneralMatrix::Sparse(s) => s.write(w),
        }
    }
}

/// Per-frame lists of (pdf or class id, weight): Kaldi's `Posterior`.
pub type Posterior = Vec<Vec<(i32, f32)>>;

/// Frame-level supervision as `get-egs` reads it: Kaldi posteriors, or (beyond Kaldi's tool,
/// which wants `ali-to-post` first) an integer pdf alignment, each frame's pdf with weight 1.
/// Read as a posterior first; an alignment is taken when that fails, or when the posterior
/// reading gives only empty frames (how a binary alignment of pdf 0s would read).
#[derive(Clone, Debug, PartialEq)]
pub struct PdfSupervision(pub Posterior);

/// Reads a Posterior: binary counts and pairs, or text `[ id w ... ] [ ... ]` up to the end
/// of the line.
pub fn read_posterior(r: &mut TokenReader<'_>) -> Result<Posterior> {
    if r.is_binary() {
        let n = read_count(r, 5, "number of frames")?;
        let mut post = Vec::with_capacity(n);
        for _ in 0..n {
            let k = read_count(r, 10, "number of pairs in a frame")?;
            let mut frame = Vec::with_capacity(k);
            for _ in 0..k {
                let id = r.i32()?;
                let w = r.f32()?;
                frame.push((id, w));
            }
            post.push(frame);
        }
        Ok(post)
    } else {
        let mut post = Vec::new();
        loop {
            // Skip blanks on this line; a newline (or end of input) ends the object.
            skip_blanks(r)?;
            let at = r.pos();
            match r.rest().first() {
                None => break,
                Some(b'\n') => {
                    r.byte()?;
                    break;
                }
                Some(b'[') => {
                    r.byte()?;
                }
                Some(_) => return Err(r.err_at(at, "'[' opening a posterior frame")),
            }
            let mut frame = Vec::new();
            loop {
                let (at, word) = next_word(r)?;
                if word.is_empty() {
                    return Err(r.err_at(at, "']' closing a posterior frame"));
                }
                if word == "]" {
                    break;
                }
                let id: i32 = word
                    .parse()
                    .map_err(|_| r.err_at(at, "an integer id or ']'"))?;
                let (at, word) = next_word(r)?;
                let w = parse_float(&word).ok_or_else(|| r.err_at(at, "a weight"))?;
                frame.push((id, w as f32));
            }
            post.push(frame);
        }
        Ok(post)
    }
}

/// Skips blanks (not newlines: a text Posterior is one line).
fn skip_blanks(r: &mut TokenReader<'_>) -> Result<()> {
    while matches!(r.rest().first(), Some(b' ' | b'\t' | b'\r')) {
        r.byte()?;
    }
    Ok(())
}

/// The next word on a text Posterior line and its byte offset (empty at a newline or the
/// end); consumed.
fn next_word(r: &mut TokenReader<'_>) -> Result<(usize, String)> {
    skip_blanks(r)?;
    let at = r.pos();
    let rest = r.rest();
    let n = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let word = String::from_utf8_lossy(&rest[..n]).into_owned();
    r.bytes(n)?;
    Ok((at, word))
}

/// Writes a Posterior (text: one line, each frame `[ id w ... ] `).
pub fn write_posterior(w: &mut TokenWriter, post: &Posterior) {
    if w.is_binary() {
        w.i32(post.len() as i32);
        for frame in post {
            w.i32(frame.len() as i32);
            for &(id, x) in frame {
                w.i32(id);
                w.f32(x);
            }
        }
    } else {
        for frame in post {
            w.raw(b"[ ");
            for &(id, x) in frame {
                w.raw(format!("{id} {} ", super::codec::fmt_float(x as f64)).as_bytes());
            }
            w.raw(b"] ");
        }
        w.raw(b"\n");
    }
}

/// Reads Kaldi's basic int32 vector (alignments): binary size then elements, text one line
/// of integers.
pub fn read_basic_int_vector(r: &mut TokenReader<'_>) -> Result<Vec<i32>> {
    if r.is_binary() {
        let n = read_count(r, 5, "vector length")?;
        (0..n).map(|_| r.i32()).collect()
    } else {
        let mut v = Vec::new();
        loop {
            skip_blanks(r)?;
            match r.rest().first() {
                None => break,
                Some(b'\n') => {
                    r.byte()?;
                    break;
                }
                Some(_) => {
                    let (at, word) = next_word(r)?;
                    let x = word
                        .parse::<i32>()
                        .map_err(|_| r.err_at(at, "an integer"))?;
                    v.push(x);
                }
            }
        }
        Ok(v)
    }
}

/// Writes Kaldi's basic int32 vector (text: each element then a space, then a newline).
pub fn write_basic_int_vector(w: &mut TokenWriter, v: &[i32]) {
    if w.is_binary() {
        w.i32(v.len() as i32);
        for &x in v {
            w.i32(x);
        }
    } else {
        for &x in v {
            w.i32(x);
        }
        w.raw(b"\n");
    }
}
