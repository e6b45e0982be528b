//! extend-matrices (Kaldi's `ExtendMatrices`): a whole-width copy of the first rows of a
//! matrix (at least 80 % of them) into the last rows of another becomes a copy of the whole
//! source, the destination growing by the rows that were left out. The destination's extra
//! rows are written only by that copy and read by nothing; what it gains is a copy between
//! a whole matrix and a sub-matrix, which Kaldi's variable merging can turn into an alias.
//!
//! One restriction against Kaldi: the destination must be all of its matrix, so that after
//! the extension the copy is between two whole matrices of one shape, which compnet's
//! merging (remove-assignments) can alias. Kaldi also extends a copy into a column block or
//! the last rows of a matrix, which its merging then aliases by a left or right merge (a
//! whole matrix becoming a sub-matrix of another); compnet's merging has no such merges, so
//! there the extension only grew the destination, and the rows it added (never written in the
//! other columns) made its allocation zero it: on the wsj TDNN training step the peak of live
//! matrix memory rose 2.7 % and a spliced layer input was zeroed twice per step.
//!
//! Matrices exchanged with the caller are not resized. The allocations (compnet allocates a
//! whole matrix by its index) follow the new size; zeroing of what was the whole
//! destination is widened to the whole again; debug info gets the extra rows as copies of
//! its own last rows with t = kNoTime, as in Kaldi. Runs before the variable merging and
//! leaves looped computations alone (the caller's `OptimizeOptions::looped`).

use super::computation::{Command, NnetComputation, SubMatrixInfo};
use crate::index::NO_TIME;

/// Kaldi's `min_proportion_`: the copy must cover at least this much of its source.
const MIN_PROPORTION: f64 = 0.8;

/// Extends what qualifies (module doc); returns how many copies it rewrote.
pub fn extend_matrices(comp: &mut NnetComputation) -> usize {
    let nm = comp.matrices.len();
    let orig_rows: Vec<usize> = comp.matrices.iter().map(|m| m.num_rows).collect();
    let mut is_io = vec![false; nm];
    for c in &comp.commands {
        if let Command::AcceptInput { s, .. } | Command::ProvideOutput { s, .. } = *c {
            if let Some(info) = comp.submatrices.get(s) {
                if info.matrix < nm {
                    is_io[info.matrix] = true;
                }
            }
        }
    }
    let mut changed = 0;
    for k in 0..comp.commands.len() {
        let Command::MatrixCopy { dst, src, alpha } = comp.commands[k] else {
            continue;
        };
        if alpha != 1.0 || dst == 0 || src == 0 {
            continue;
        }
        let (Some(&d), Some(&s)) = (comp.submatrices.get(dst), comp.submatrices.get(src)) else {
            continue;
        };
        if d.matrix == s.matrix || d.matrix >= nm || s.matrix >= nm || is_io[d.matrix] {
            continue;
        }
        let src_rows = comp.matrices[s.matrix].num_rows;
        let qualifies = (s.num_rows as f64) >= MIN_PROPORTION * orig_rows[s.matrix] as f64
            && s.row_offset == 0
            && s.col_offset == 0
            && s.num_cols == comp.matrices[s.matrix].num_cols
            && s.num_rows < src_rows
            && d.row_offset + d.num_rows == orig_rows[d.matrix]
            // compnet's restriction: the destination is its whole matrix (see module doc).
            && d.row_offset == 0
            && d.col_offset == 0
            && d.num_cols == comp.matrices[d.matrix].num_cols;
        if !qualifies {
            continue;
        }
        let new_rows = d.row_offset + src_rows;
        let dm = &mut comp.matrices[d.matrix];
        dm.num_rows = dm.num_rows.max(new_rows);
        let new_dst = comp.new_submatrix(SubMatrixInfo {
            num_rows: src_rows,
            ..d
        });
        let new_src = comp.new_submatrix(SubMatrixInfo {
            row_offset: 0,
            num_rows: src_rows,
            ..s
        });
        comp.commands[k] = Command::MatrixCopy {
            dst: new_dst,
            src: new_src,
            alpha,
        };
        changed += 1;
    }
    if changed > 0 {
        fix_computation(comp, &orig_rows);
    }
    changed
}

/// Zeroing of what was a whole matrix covers the whole grown matrix; debug info describes
/// the new rows.
fn fix_computation(comp: &mut NnetComputation, orig_rows: &[usize]) {
    for k in 0..comp.commands.len() {
        let Command::SetConst { s, alpha } = comp.commands[k] else {
            continue;
        };
        let Some(&info) = comp.submatrices.get(s) else {
            continue;
        };
        let Some(m) = comp.matrices.get(info.matrix).cloned() else {
            continue;
        };
        let was_whole = info.row_offset == 0
            && info.col_offset == 0
            && info.num_cols == m.num_cols
            && info.num_rows == orig_rows[info.matrix];
        if alpha == 0.0 && was_whole && m.num_rows != info.num_rows {
            let whole = comp.new_submatrix(SubMatrixInfo {
                num_rows: m.num_rows,
                ..info
            });
            comp.commands[k] = Command::SetConst { s: whole, alpha };
        }
    }
    if comp.matrix_debug_info.len() == comp.matrices.len() {
        for (m, info) in comp.matrices.iter().enumerate().skip(1) {
            let rows = &mut comp.matrix_debug_info[m].cindexes;
            let old = rows.len();
            if old == 0 || old >= info.num_rows {
                continue;
            }
            // Row r repeats row r − (new − old): the last rows again, in order (there are
            // at most as many new rows as old ones, as MIN_PROPORTION > 0.5).
            let back = info.num_rows - old;
            for r in old..info.num_rows {
                let j = r.checked_sub(back).unwrap_or(r % old);
                let (node, mut index) = rows[j];
                index.t = NO_TIME;
                rows.push((node, index));
            }
        }
    }
}
