//! Cutting an utterance's rows into the matrices of a training example (Kaldi's
//! `ExtractRowRangeWithPadding` and the example's `input`), and the posterior rows of its
//! supervision, for `get-egs` and for `fit`'s examples cut straight from feature archives.

use crate::egs::splitter::ChunkTimeInfo;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::compressed::{CompressedFormat, CompressedMatrix, CompressionMethod};
use crate::io::egs::{NnetExample, NnetIo};
use crate::io::sparse::{GeneralMatrix, SparseMatrix, SparseVector};
use crate::matrix::Matrix;

/// Rows `first..first+n` of `m`, repeating the edge rows beyond either end (`m` non-empty).
pub fn rows_with_padding(m: &Matrix, first: i32, n: usize) -> Matrix {
    let last = m.num_rows() as i32 - 1;
    let mut out = Matrix::zeros(n, m.num_cols());
    for r in 0..n {
        let src = (first + r as i32).clamp(0, last) as usize;
        out.copy_row_from_slice(r, &m.row_to_vec(src));
    }
    out
}

/// The same for a compressed matrix, without decompressing (Kaldi's sub-range constructor
/// with padding): the codes of the clamped rows are copied; a one-byte-with-column-headers
/// result of fewer than 8 rows is re-encoded as two-byte, as Kaldi does.
fn compressed_rows_with_padding(c: &CompressedMatrix, first: i32, n: usize) -> CompressedMatrix {
    let (rows, cols) = (c.rows, c.cols);
    let src = |r: usize| (first + r as i32).clamp(0, rows as i32 - 1) as usize;
    let mut data = Vec::new();
    match c.format {
        CompressedFormat::OneByteWithColHeaders => {
            data.extend_from_slice(&c.data[..cols * 8]);
            let bytes = &c.data[cols * 8..];
            for col in 0..cols {
                data.extend((0..n).map(|r| bytes[col * rows + src(r)]));
            }
        }
        CompressedFormat::TwoByte => {
            for r in 0..n {
                let s = src(r);
                data.extend_from_slice(&c.data[s * cols * 2..(s + 1) * cols * 2]);
            }
        }
        CompressedFormat::OneByte => {
            for r in 0..n {
                let s = src(r);
                data.extend_from_slice(&c.data[s * cols..(s + 1) * cols]);
            }
        }
    }
    let out = CompressedMatrix {
        format: c.format,
        min_value: c.min_value,
        range: c.range,
        rows: n,
        cols,
        data,
    };
    if n < 8 && c.format == CompressedFormat::OneByteWithColHeaders {
        CompressedMatrix::compress(&out.to_matrix(), CompressionMethod::TwoByteAuto)
    } else {
        out
    }
}

/// An example's `input`: `total` rows of `feats` from row `start` (padded as
/// [`extract_rows`]), at t = `t0`, `t0` + 1, ...; its size checked against the memory limit
/// first.
pub fn input_io(feats: &GeneralMatrix, start: i32, total: i32, t0: i32) -> Result<NnetIo> {
    crate::limits::check_product(
        &[total.max(0) as u64, feats.num_cols() as u64, 4],
        "an example's input matrix",
    )
    .map_err(Error::Usage)?;
    Ok(NnetIo {
        name: "input".into(),
        indexes: (0..total).map(|i| Index::new(0, t0 + i, 0)).collect(),
        features: extract_rows(feats, start, total as usize),
    })
}

/// A new example holding the `input` of `chunk`, its context frames included (t relative to
/// the chunk's first frame).
pub fn chunk_example(feats: &GeneralMatrix, chunk: &ChunkTimeInfo) -> Result<NnetExample> {
    let total = chunk.left_context + chunk.num_frames + chunk.right_context;
    let start = chunk.first_frame - chunk.left_context;
    let mut eg = NnetExample::default();
    eg.io
        .push(input_io(feats, start, total, -chunk.left_context)?);
    Ok(eg)
}

/// Kaldi's `ExtractRowRangeWithPadding` for the feature types a feature archive can hold.
pub fn extract_rows(feats: &GeneralMatrix, first: i32, n: usize) -> GeneralMatrix {
    match feats {
        GeneralMatrix::Full(m) => GeneralMatrix::Full(rows_with_padding(m, first, n)),
        GeneralMatrix::Compressed(c) => {
            GeneralMatrix::Compressed(compressed_rows_with_padding(c, first, n))
        }
        GeneralMatrix::Sparse(s) => {
            let last = s.rows.len() as i32 - 1;
            GeneralMatrix::Sparse(SparseMatrix {
                rows: (0..n)
                    .map(|r| s.rows[(first + r as i32).clamp(0, last) as usize].clone())
                    .collect(),
            })
        }
    }
}

/// A posterior row as Kaldi's `SparseVector` stores it: sorted by (id, weight), weights of the
/// same id summed, zero sums dropped. Ids outside `0..dim` are an error (Kaldi asserts).
pub fn sparse_row(dim: usize, pairs: &[(i32, f32)]) -> std::result::Result<SparseVector, i32> {
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<(i32, f32)> = Vec::with_capacity(sorted.len());
    let mut i = 0;
    while i < sorted.len() {
        let (id, mut w) = sorted[i];
        i += 1;
        while i < sorted.len() && sorted[i].0 == id {
            w += sorted[i].1;
            i += 1;
        }
        if w != 0.0 {
            out.push((id, w));
        }
    }
    if let Some(&(bad, _)) = out.iter().find(|p| p.0 < 0 || p.0 as usize >= dim) {
        return Err(bad);
    }
    Ok(SparseVector { dim, pairs: out })
}
