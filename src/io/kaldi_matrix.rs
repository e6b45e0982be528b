//! Kaldi matrices and vectors on disk: FM/DM, FV/DV, text `[ ... ]` (facts §2.2).
//! Compressed (CM/CM2/CM3) and sparse (SM/SV) forms live in their own modules.

use super::codec::{parse_f32, parse_float, TokenReader};
use crate::error::Result;
use crate::matrix::{Matrix, Vector, Vector64};

/// Matrix and vector reading as reader methods, for the component readers. They live here,
/// not in the codec, so that the codec (basic types) does not depend on the matrix formats.
impl TokenReader<'_> {
    /// A float matrix (FM/DM/CM* in binary, `[ ... ]` in text).
    pub fn matrix(&mut self) -> Result<Matrix> {
        read_matrix(self)
    }
    /// A float vector (FV/DV in binary, `[ ... ]` in text).
    pub fn vector(&mut self) -> Result<Vector> {
        read_vector(self)
    }
    /// A matrix read into double precision, row-major, with its rows and columns
    /// (statistics Kaldi keeps in a double matrix).
    pub fn matrix_f64(&mut self) -> Result<(usize, usize, Vec<f64>)> {
        read_matrix_f64(self)
    }
    /// A vector read into double precision (statistics Kaldi keeps in doubles).
    pub fn vector_f64(&mut self) -> Result<Vec<f64>> {
        read_vector_f64(self)
    }
    /// [`TokenReader::vector_f64`] as a [`Vector64`] (component statistics).
    pub fn vector64(&mut self) -> Result<Vector64> {
        read_vector_f64(self).map(Vector64::from_vec)
    }
    /// [`TokenReader::matrix_f64`] with the elements as a row-major [`Vector64`].
    pub fn matrix64(&mut self) -> Result<(usize, usize, Vector64)> {
        let (rows, cols, data) = read_matrix_f64(self)?;
        Ok((rows, cols, Vector64::from_vec(data)))
    }
}

/// Reads a binary `FM`/`DM` header and the raw element bytes after it: (double, rows, cols,
/// bytes), checking the dimensions against what is left of the file before taking them.
/// `expected` names the tokens allowed at `at` for the error.
fn read_binary_matrix_data<'a>(
    r: &mut TokenReader<'a>,
    at: usize,
    expected: &str,
) -> Result<(bool, usize, usize, &'a [u8])> {
    let tok = r.token()?;
    let double = match tok.as_str() {
        "FM" => false,
        "DM" => true,
        _ => return Err(r.err_at(at, expected)),
    };
    let rows = r.i32()?;
    let cols = r.i32()?;
    if rows < 0 || cols < 0 {
        return Err(r.err_at(at, "non-negative matrix dimensions"));
    }
    let (rows, cols) = (rows as usize, cols as usize);
    let esz = if double { 8 } else { 4 };
    if rows.saturating_mul(cols).saturating_mul(esz) > r.rest().len() {
        return Err(r.err(format!("{rows}x{cols} matrix data (file truncated)")));
    }
    let raw = r.bytes(rows * cols * esz)?;
    Ok((double, rows, cols, raw))
}

/// Reads a matrix in whatever form the reader is positioned at.
pub fn read_matrix(r: &mut TokenReader<'_>) -> Result<Matrix> {
    if r.is_binary() {
        let at = r.pos();
        if r.rest().first() == Some(&b'C') {
            // Matrix::Read decompresses a CompressedMatrix transparently.
            return Ok(super::compressed::CompressedMatrix::read(r)?.to_matrix());
        }
        let (double, rows, cols, raw) =
            read_binary_matrix_data(r, at, "matrix token FM, DM, CM, CM2 or CM3")?;
        let data = if double {
            raw.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect()
        } else {
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        Ok(Matrix::from_vec(rows, cols, data))
    } else {
        read_text_matrix(r)
    }
}

/// Reads a matrix into double precision (DM exactly, FM widened; text parsed as doubles).
pub fn read_matrix_f64(r: &mut TokenReader<'_>) -> Result<(usize, usize, Vec<f64>)> {
    if !r.is_binary() {
        let (rows, cols, data) = read_text_matrix_with(r, parse_float)?;
        return Ok((rows, cols, data));
    }
    let at = r.pos();
    let (double, rows, cols, raw) = read_binary_matrix_data(r, at, "matrix token FM or DM")?;
    let data = if double {
        raw.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect()
    } else {
        raw.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect()
    };
    Ok((rows, cols, data))
}

/// Skips spaces, tabs and carriage returns, stopping at a newline (which ends a text row).
fn skip_inline_ws(r: &mut TokenReader<'_>) -> Result<()> {
    while let Some(&b) = r.rest().first() {
        if b == b' ' || b == b'\t' || b == b'\r' {
            r.byte()?;
        } else {
            break;
        }
    }
    Ok(())
}

/// The number that starts here, up to whitespace, `]` or one of `ends`, parsed by `parse`;
/// `expected` names it in the error.
fn number_word<T>(
    r: &mut TokenReader<'_>,
    ends: &[u8],
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<T> {
    let here = r.pos();
    let rest = r.rest();
    let n = rest
        .iter()
        .position(|b| b.is_ascii_whitespace() || *b == b']' || ends.contains(b))
        .unwrap_or(rest.len());
    let word = std::str::from_utf8(&rest[..n]).unwrap_or("");
    let x = parse(word).ok_or_else(|| r.err_at(here, expected))?;
    r.bytes(n)?;
    Ok(x)
}

/// Reads a text matrix `[ a b \n c d ]` (a newline or `;` ends a row).
fn read_text_matrix(r: &mut TokenReader<'_>) -> Result<Matrix> {
    let (rows, cols, data) = read_text_matrix_with(r, parse_f32)?;
    Ok(Matrix::from_vec(rows, cols, data))
}

/// Reads a text matrix with numbers parsed by `parse`: rows, columns, row-major data.
fn read_text_matrix_with<T: Copy>(
    r: &mut TokenReader<'_>,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<(usize, usize, Vec<T>)> {
    let at = r.open_bracket("a matrix")?;
    let mut rows: Vec<Vec<T>> = Vec::new();
    let mut cur: Vec<T> = Vec::new();
    loop {
        skip_inline_ws(r)?;
        match r.rest().first() {
            None => return Err(r.err("']' closing the matrix (file truncated)")),
            Some(b'\n') | Some(b';') => {
                r.byte()?;
                if !cur.is_empty() {
                    rows.push(std::mem::take(&mut cur));
                }
            }
            Some(b']') => {
                r.byte()?;
                if !cur.is_empty() {
                    rows.push(std::mem::take(&mut cur));
                }
                break;
            }
            Some(_) => cur.push(number_word(r, b";", &parse, "a number in the matrix")?),
        }
    }
    // Kaldi's writer ends with a newline after ']'.
    if r.rest().first() == Some(&b'\n') {
        r.byte()?;
    }
    let cols = rows.first().map_or(0, |x| x.len());
    if let Some((i, _)) = rows.iter().enumerate().find(|(_, x)| x.len() != cols) {
        return Err(r.err_at(at, format!("rows of equal length (row {i} differs)")));
    }
    let n = rows.len();
    Ok((n, cols, rows.into_iter().flatten().collect()))
}

/// Reads a vector (FV/DV in binary, `[ ... ]` in text).
pub fn read_vector(r: &mut TokenReader<'_>) -> Result<Vector> {
    read_vector_with(r, |x| x, |x| x as f32, parse_f32).map(Vector::from_vec)
}

/// Reads a vector into double precision, as Kaldi does for statistics kept in doubles: binary
/// floats widen exactly, and text numbers are parsed as doubles (not rounded to float first).
pub fn read_vector_f64(r: &mut TokenReader<'_>) -> Result<Vec<f64>> {
    read_vector_with(r, |x| x as f64, |x| x, parse_float)
}

fn read_vector_with<T>(
    r: &mut TokenReader<'_>,
    from_f32: impl Fn(f32) -> T,
    from_f64: impl Fn(f64) -> T,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>> {
    if r.is_binary() {
        let at = r.pos();
        let tok = r.token()?;
        let double = match tok.as_str() {
            "FV" => false,
            "DV" => true,
            _ => return Err(r.err_at(at, "vector token FV or DV")),
        };
        let dim = r.i32()?;
        if dim < 0 {
            return Err(r.err_at(at, "non-negative vector dimension"));
        }
        let esz = if double { 8 } else { 4 };
        let dim = dim as usize;
        if dim.saturating_mul(esz) > r.rest().len() {
            return Err(r.err(format!("{dim} vector elements (file truncated)")));
        }
        let raw = r.bytes(dim * esz)?;
        let data = if double {
            raw.chunks_exact(8)
                .map(|c| from_f64(f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))))
                .collect()
        } else {
            raw.chunks_exact(4)
                .map(|c| from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        };
        Ok(data)
    } else {
        r.open_bracket("a vector")?;
        let mut v = Vec::new();
        loop {
            skip_inline_ws(r)?;
            let here = r.pos();
            match r.rest().first() {
                None => return Err(r.err("']' closing the vector (file truncated)")),
                Some(b'\n') => return Err(r.err_at(here, "']' (a vector may not span lines)")),
                Some(b']') => {
                    r.byte()?;
                    break;
                }
                Some(_) => v.push(number_word(r, b"", &parse, "a number in the vector")?),
            }
        }
        if r.rest().first() == Some(&b'\n') {
            r.byte()?;
        }
        Ok(v)
    }
}
