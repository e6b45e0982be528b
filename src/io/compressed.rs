//! Kaldi's `CompressedMatrix` (facts §3.4): the CM / CM2 / CM3 binary formats, their decoding,
//! and an encoder that reproduces Kaldi's bytes (same quantiles, rounding and clamping).

use super::codec::{TokenReader, TokenWriter};
use crate::error::Result;
use crate::matrix::Matrix;

/// Kaldi's `CompressionMethod` (the numbers are the `--compression-method` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionMethod {
    /// CM (speech-feature format) for more than 8 rows, else CM2.
    Automatic = 1,
    /// CM: per-column quantile headers, one byte per value.
    SpeechFeature = 2,
    /// CM2 with the matrix's own min/max.
    TwoByteAuto = 3,
    /// CM2 with the fixed int16 range [-32768, 32767].
    TwoByteSignedInteger = 4,
    /// CM3 with the matrix's own min/max.
    OneByteAuto = 5,
    /// CM3 with the fixed range [0, 255].
    OneByteUnsignedInteger = 6,
    /// CM3 with the fixed range [0, 1].
    OneByteZeroOne = 7,
}

impl CompressionMethod {
    /// The method for a `--compression-method` number (1..7).
    pub fn from_number(n: i64) -> Option<Self> {
        use CompressionMethod::*;
        Some(match n {
            1 => Automatic,
            2 => SpeechFeature,
            3 => TwoByteAuto,
            4 => TwoByteSignedInteger,
            5 => OneByteAuto,
            6 => OneByteUnsignedInteger,
            7 => OneByteZeroOne,
            _ => return None,
        })
    }
}

/// The three on-disk layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressedFormat {
    /// `CM`: column headers of four u16 quantiles, then bytes column by column.
    OneByteWithColHeaders,
    /// `CM2`: u16 per value, row-major.
    TwoByte,
    /// `CM3`: u8 per value, row-major.
    OneByte,
}

impl CompressedFormat {
    /// The binary token naming the format.
    pub fn token(self) -> &'static str {
        match self {
            CompressedFormat::OneByteWithColHeaders => "CM",
            CompressedFormat::TwoByte => "CM2",
            CompressedFormat::OneByte => "CM3",
        }
    }
    /// Payload bytes for a rows×cols matrix (None on overflow).
    fn payload_len(self, rows: usize, cols: usize) -> Option<usize> {
        let cells = rows.checked_mul(cols)?;
        match self {
            CompressedFormat::OneByteWithColHeaders => cols.checked_mul(8)?.checked_add(cells),
            CompressedFormat::TwoByte => cells.checked_mul(2),
            CompressedFormat::OneByte => Some(cells),
        }
    }
}

/// A compressed matrix, holding the on-disk payload unchanged so that a copy is bit-exact.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressedMatrix {
    /// Layout of `data`.
    pub format: CompressedFormat,
    /// Global minimum of the code range.
    pub min_value: f32,
    /// Width of the code range.
    pub range: f32,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// The payload exactly as on disk (column headers + bytes, or u16 LE, or u8).
    pub data: Vec<u8>,
}

/// `1/65535` as Kaldi writes the constant (a float literal).
const INV_65535: f32 = 1.525_902_2e-5;

impl CompressedMatrix {
    /// An empty (0×0) compressed matrix, written as `CM` with a zeroed header.
    pub fn empty() -> Self {
        CompressedMatrix {
            format: CompressedFormat::OneByteWithColHeaders,
            min_value: 0.0,
            range: 0.0,
            rows: 0,
            cols: 0,
            data: Vec::new(),
        }
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.rows
    }
    /// Number of columns.
    pub fn num_cols(&self) -> usize {
        self.cols
    }

    /// Compresses `m` with `method`, reproducing Kaldi's encoder bit for bit.
    pub fn compress(m: &Matrix, method: CompressionMethod) -> Self {
        let (rows, cols) = (m.num_rows(), m.num_cols());
        if rows == 0 || cols == 0 {
            return Self::empty();
        }
        // One host copy, row-major: the encoder reads plain memory whatever the storage.
        let host = m.to_vec();
        use CompressionMethod::*;
        let method = match method {
            Automatic if rows > 8 => SpeechFeature,
            Automatic => TwoByteAuto,
            x => x,
        };
        let format = match method {
            SpeechFeature => CompressedFormat::OneByteWithColHeaders,
            TwoByteAuto | TwoByteSignedInteger => CompressedFormat::TwoByte,
            _ => CompressedFormat::OneByte,
        };
        let (min_value, range) = match method {
            TwoByteSignedInteger => (-32768.0f32, 65535.0f32),
            OneByteUnsignedInteger => (0.0, 255.0),
            OneByteZeroOne => (0.0, 1.0),
            _ => {
                let mut lo = f32::INFINITY;
                let mut hi = f32::NEG_INFINITY;
                for &x in &host {
                    lo = lo.min(x);
                    hi = hi.max(x);
                }
                if hi == lo {
                    // A constant matrix still needs a non-zero range.
                    hi = lo + (1.0 + lo.abs());
                }
                (lo, hi - lo)
            }
        };
        let mut cm = CompressedMatrix {
            format,
            min_value,
            range,
            rows,
            cols,
            data: Vec::new(),
        };
        let mut data = Vec::with_capacity(format.payload_len(rows, cols).unwrap_or(0));
        match format {
            CompressedFormat::TwoByte => {
                for &x in &host {
                    data.extend_from_slice(&cm.value_to_u16(x).to_le_bytes());
                }
            }
            CompressedFormat::OneByte => {
                for &x in &host {
                    data.push(cm.value_to_u8(x));
                }
            }
            CompressedFormat::OneByteWithColHeaders => {
                let mut bytes = Vec::with_capacity(rows * cols);
                let mut col = vec![0f32; rows];
                for c in 0..cols {
                    for (r, v) in col.iter_mut().enumerate() {
                        *v = host[r * cols + c];
                    }
                    let q = cm.col_quantiles(&col);
                    for v in q {
                        data.extend_from_slice(&v.to_le_bytes());
                    }
                    let p = q.map(|v| cm.code_to_value(v));
                    bytes.extend(col.iter().map(|&x| quantize_byte(p, x)));
                }
                data.extend_from_slice(&bytes);
            }
        }
        cm.data = data;
        cm
    }

    /// Value → u16 code over the global range (Kaldi rounds with +0.499, not +0.5).
    fn value_to_u16(&self, x: f32) -> u16 {
        let f = ((x - self.min_value) / self.range).clamp(0.0, 1.0);
        ((f * 65535.0) as f64 + 0.499) as u16
    }
    /// Value → u8 code over the global range.
    fn value_to_u8(&self, x: f32) -> u8 {
        let f = ((x - self.min_value) / self.range).clamp(0.0, 1.0);
        ((f * 255.0) as f64 + 0.499) as u8
    }
    /// u16 code → value (used for the CM column headers).
    fn code_to_value(&self, v: u16) -> f32 {
        self.min_value + self.range * INV_65535 * v as f32
    }

    /// The four column-header codes: 0/25/75/100% order statistics, made strictly increasing
    /// and kept below the top codes so every segment is non-empty.
    fn col_quantiles(&self, col: &[f32]) -> [u16; 4] {
        let mut s = col.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let code = |i: usize| self.value_to_u16(s.get(i).copied().unwrap_or(0.0)) as u32;
        let (i25, i75, i100) = if n >= 5 {
            let q = n / 4;
            (Some(q), Some(3 * q), Some(n - 1))
        } else {
            (
                (n > 1).then_some(1),
                (n > 2).then_some(2),
                (n > 3).then_some(3),
            )
        };
        let p0 = code(0).min(65532);
        let p25 = i25.map_or(p0 + 1, |i| code(i).max(p0 + 1).min(65533));
        let p75 = i75.map_or(p25 + 1, |i| code(i).max(p25 + 1).min(65534));
        let p100 = i100.map_or(p75 + 1, |i| code(i).max(p75 + 1));
        [p0 as u16, p25 as u16, p75 as u16, p100.min(65535) as u16]
    }

    /// Decompresses into a full matrix.
    pub fn to_matrix(&self) -> Matrix {
        let (rows, cols) = (self.rows, self.cols);
        // Decoded into host memory, then handed to the matrix in one piece.
        let mut host = vec![0.0f32; rows * cols];
        if self.data.len() < self.format.payload_len(rows, cols).unwrap_or(usize::MAX) {
            return Matrix::from_vec(rows, cols, host); // cannot happen for `read`/`compress` output
        }
        match self.format {
            CompressedFormat::TwoByte => {
                let inc = (self.range as f64 * (1.0 / 65535.0)) as f32;
                for (r, row) in host.chunks_exact_mut(cols.max(1)).enumerate() {
                    let src = &self.data[r * cols * 2..(r + 1) * cols * 2];
                    for (d, b) in row.iter_mut().zip(src.chunks_exact(2)) {
                        let v = u16::from_le_bytes([b[0], b[1]]);
                        *d = self.min_value + v as f32 * inc;
                    }
                }
            }
            CompressedFormat::OneByte => {
                let inc = (self.range as f64 * (1.0 / 255.0)) as f32;
                for (r, row) in host.chunks_exact_mut(cols.max(1)).enumerate() {
                    for (d, &v) in row.iter_mut().zip(&self.data[r * cols..(r + 1) * cols]) {
                        *d = self.min_value + v as f32 * inc;
                    }
                }
            }
            CompressedFormat::OneByteWithColHeaders => {
                let (heads, bytes) = self.data.split_at(cols * 8);
                for c in 0..cols {
                    let h = &heads[c * 8..c * 8 + 8];
                    let p = [0, 1, 2, 3]
                        .map(|k| self.code_to_value(u16::from_le_bytes([h[2 * k], h[2 * k + 1]])));
                    for (r, &b) in bytes[c * rows..(c + 1) * rows].iter().enumerate() {
                        host[r * cols + c] = dequantize_byte(p, b);
                    }
                }
            }
        }
        Matrix::from_vec(rows, cols, host)
    }

    /// Reads a compressed matrix (the reader must be binary and at `CM`, `CM2` or `CM3`).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        let at = r.pos();
        let tok = r.token()?;
        let format = match tok.as_str() {
            "CM" => CompressedFormat::OneByteWithColHeaders,
            "CM2" => CompressedFormat::TwoByte,
            "CM3" => CompressedFormat::OneByte,
            _ => return Err(r.err_at(at, "compressed-matrix token CM, CM2 or CM3")),
        };
        let hdr_at = r.pos();
        let h = r
            .bytes(16)
            .map_err(|_| r.err_at(hdr_at, "16-byte compressed-matrix header (file truncated)"))?;
        let f = |i: usize| [h[i], h[i + 1], h[i + 2], h[i + 3]];
        let min_value = f32::from_le_bytes(f(0));
        let range = f32::from_le_bytes(f(4));
        let rows = i32::from_le_bytes(f(8));
        let cols = i32::from_le_bytes(f(12));
        if rows < 0 || cols < 0 {
            return Err(r.err_at(
                hdr_at + 8,
                format!("non-negative dimensions, got {rows}x{cols}"),
            ));
        }
        let (rows, cols) = (rows as usize, cols as usize);
        if rows == 0 || cols == 0 {
            // Kaldi writes an empty matrix as a zeroed header without payload.
            let mut e = Self::empty();
            e.format = format;
            return Ok(e);
        }
        let need = format.payload_len(rows, cols).unwrap_or(usize::MAX);
        if need > r.rest().len() {
            return Err(r.err(format!(
                "{need} bytes of {rows}x{cols} {tok} data, only {} left (file truncated)",
                r.rest().len()
            )));
        }
        let data = r.bytes(need)?.to_vec();
        Ok(CompressedMatrix {
            format,
            min_value,
            range,
            rows,
            cols,
            data,
        })
    }

    /// Writes the compressed matrix; in text mode Kaldi writes the decompressed full matrix.
    pub fn write(&self, w: &mut TokenWriter) {
        if !w.is_binary() {
            w.matrix(&self.to_matrix());
            return;
        }
        if self.rows == 0 || self.cols == 0 {
            w.token("CM");
            w.raw(&[0u8; 16]);
            return;
        }
        w.token(self.format.token());
        w.raw(&self.min_value.to_le_bytes());
        w.raw(&self.range.to_le_bytes());
        w.raw(&(self.rows as i32).to_le_bytes());
        w.raw(&(self.cols as i32).to_le_bytes());
        w.raw(&self.data);
    }
}

/// Value → CM byte: piecewise-linear over the column's quantiles (64 / 128 / 63 steps).
fn quantize_byte(p: [f32; 4], x: f32) -> u8 {
    let [p0, p25, p75, p100] = p;
    if x < p25 {
        let f = (x - p0) / (p25 - p0);
        ((f * 64.0) as f64 + 0.5).clamp(0.0, 64.0) as u8
    } else if x < p75 {
        let f = (x - p25) / (p75 - p25);
        (64.0 + ((f * 128.0) as f64 + 0.5).trunc()).clamp(64.0, 192.0) as u8
    } else {
        let f = (x - p75) / (p100 - p75);
        (192.0 + ((f * 63.0) as f64 + 0.5).trunc()).clamp(192.0, 255.0) as u8
    }
}

/// CM byte → value (inverse of [`quantize_byte`]).
fn dequantize_byte(p: [f32; 4], b: u8) -> f32 {
    let [p0, p25, p75, p100] = p;
    let (lo, hi, steps, k) = if b <= 64 {
        (p0, p25, 64.0, b as f32)
    } else if b <= 192 {
        (p25, p75, 128.0, (b - 64) as f32)
    } else {
        (p75, p100, 63.0, (b - 192) as f32)
    };
    (lo as f64 + ((hi - lo) * k) as f64 * (1.0 / steps)) as f32
}
