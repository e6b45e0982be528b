//! `ByteReader`: the little-endian pieces of compnet's own binary files (fit's checkpoints:
//! stepper state, natural-gradient state, exact statistics), each read with an error that
//! names the file and the byte offset. The numbers it returns are host copies of the file's
//! contents, made here at the I/O edge.

use crate::error::{Error, Result};
use crate::matrix::{Matrix, Vector64};

/// Reads the little-endian pieces of a checkpoint, errors naming the file and byte offset.
pub struct ByteReader<'a> {
    pub bytes: &'a [u8],
    pub pos: usize,
    pub file: &'a str,
}

impl<'a> ByteReader<'a> {
    /// A reader at the start of `bytes`, the contents of `file`.
    pub fn new(bytes: &'a [u8], file: &'a str) -> Self {
        ByteReader {
            bytes,
            pos: 0,
            file,
        }
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn err(&self, what: &str) -> Error {
        Error::Usage(format!("{}: byte {}: {what}", self.file, self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.err(&format!("expected {n} more bytes, the file ends")));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn cstr(&mut self) -> Result<String> {
        let end = self.bytes[self.pos..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.err("expected a name ended by a zero byte"))?;
        let s = String::from_utf8_lossy(&self.bytes[self.pos..self.pos + end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }

    /// `n` single-precision numbers.
    pub fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        let b = self.take(n.checked_mul(4).ok_or_else(|| self.err("size overflows"))?)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// `n` double-precision numbers as a vector, refused (naming `what`) unless every one is
    /// finite.
    pub fn finite_vector64(&mut self, n: usize, what: &str) -> Result<Vector64> {
        let b = self.take(n.checked_mul(8).ok_or_else(|| self.err("size overflows"))?)?;
        let v: Vec<f64> = b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(self.err(&format!("{what} are not finite (a damaged checkpoint)")));
        }
        Ok(Vector64::from_vec(v))
    }

    /// A `rows × cols` matrix stored row by row (an explicit host copy).
    pub fn matrix(&mut self, rows: usize, cols: usize) -> Result<Matrix> {
        let n = rows
            .checked_mul(cols)
            .ok_or_else(|| self.err("size overflows"))?;
        Ok(Matrix::from_vec(rows, cols, self.f32s(n)?))
    }

    /// Matrices of the shapes `(rows, cols)` in `shapes`, each stored row by row, refused
    /// (naming `what`) unless every value is finite.
    pub fn finite_matrices(
        &mut self,
        shapes: &[(usize, usize)],
        what: &str,
    ) -> Result<Vec<Matrix>> {
        let m = shapes
            .iter()
            .map(|&(rows, cols)| self.matrix(rows, cols))
            .collect::<Result<Vec<Matrix>>>()?;
        if !m.iter().all(|m| m.view().is_finite()) {
            return Err(self.err(&format!("{what} that is not finite (a damaged checkpoint)")));
        }
        Ok(m)
    }

    /// `n` bytes as a slice.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }
}
