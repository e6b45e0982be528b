//! convert-addition (Kaldi's `ConvertAdditionToAssignment`): `dst += x` where dst is still
//! the zero its allocation wrote becomes `dst = x`.
//!
//! The compiler sums every contribution to a matrix into it, so the first contribution to a
//! derivative matrix is an addition to zeros. As a copy, it fully overwrites its
//! destination, which lets the later passes drop the zeroing (initialize-undefined) and turn
//! the copy into an alias (remove-assignments). Only the adding forms with a copying twin
//! change: MatrixAdd → MatrixCopy, AddRows → CopyRows, AddRowsMulti → CopyRowsMulti (rows
//! whose index is −1 are left alone by the add and zeroed by the copy: zero either way).
//!
//! The destination is known to be zero when its matrix was allocated zeroed and no earlier
//! command touched any part of the matrix that overlaps the destination's rectangle.

use super::analysis::{command_accesses, MatrixOp};
use super::computation::{Command, NnetComputation, RowsCommand, SubMatrixInfo};
use crate::nnet::Nnet;

/// True if the two sub-matrices share at least one element.
pub fn overlaps(a: &SubMatrixInfo, b: &SubMatrixInfo) -> bool {
    a.matrix == b.matrix
        && a.row_offset < b.row_offset + b.num_rows
        && b.row_offset < a.row_offset + a.num_rows
        && a.col_offset < b.col_offset + b.num_cols
        && b.col_offset < a.col_offset + a.num_cols
}

/// Rewrites the additions to known-zero destinations as copies; returns how many.
pub fn convert_addition_to_assignment(nnet: &Nnet, comp: &mut NnetComputation) -> usize {
    let nm = comp.matrices.len();
    // Per matrix: allocated zeroed (and not yet freed), and the sub-matrices touched so far.
    let mut zeroed = vec![false; nm];
    let mut touched: Vec<Vec<usize>> = vec![Vec::new(); nm];
    let mut converted = 0;
    for k in 0..comp.commands.len() {
        let acc = command_accesses(nnet, &comp.commands[k]);
        match acc.matrix {
            MatrixOp::Alloc { m, zeroed: z } if m < nm => {
                zeroed[m] = z;
                touched[m].clear();
            }
            MatrixOp::Dealloc { m } if m < nm => zeroed[m] = false,
            MatrixOp::Swap { a, b } if a < nm && b < nm => {
                zeroed[a] = false;
                zeroed[b] = false;
            }
            _ => {}
        }
        let dst = match comp.commands[k] {
            Command::MatrixAdd { dst, .. }
            | Command::AddRows(RowsCommand { dst, .. })
            | Command::AddRowsMulti { dst, .. } => dst,
            _ => 0,
        };
        if dst != 0 && dst < comp.submatrices.len() {
            let d = comp.submatrices[dst];
            let still_zero = d.matrix < nm
                && zeroed[d.matrix]
                && touched[d.matrix]
                    .iter()
                    .all(|&s| !overlaps(&comp.submatrices[s], &d));
            if still_zero {
                comp.commands[k] = match comp.commands[k].clone() {
                    Command::MatrixAdd { dst, src, alpha } => {
                        Command::MatrixCopy { dst, src, alpha }
                    }
                    Command::AddRows(r) => Command::CopyRows(r),
                    Command::AddRowsMulti {
                        dst,
                        indexes_multi,
                        alpha,
                    } => Command::CopyRowsMulti {
                        dst,
                        indexes_multi,
                        alpha,
                    },
                    other => other,
                };
                converted += 1;
            }
        }
        for (s, _) in acc.submatrices(comp) {
            let m = comp.submatrices[s].matrix;
            if m < nm {
                touched[m].push(s);
            }
        }
    }
    converted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(n: usize) -> NnetComputation {
        let mut c = NnetComputation::default();
        for _ in 0..n {
            let m = c.new_matrix(4, 2);
            c.whole_submatrix(m);
        }
        c
    }

    fn add(dst: usize, src: usize) -> Command {
        Command::MatrixAdd {
            dst,
            src,
            alpha: 1.0,
        }
    }

    #[test]
    fn only_additions_to_untouched_zeroed_regions_become_copies() {
        let nnet = crate::testing::relu_nnet(false);
        let mut c = comp(3);
        let top = c.new_submatrix(SubMatrixInfo {
            matrix: 3,
            row_offset: 0,
            num_rows: 2,
            col_offset: 0,
            num_cols: 2,
        });
        let bottom = c.new_submatrix(SubMatrixInfo {
            row_offset: 2,
            ..c.submatrices[top]
        });
        let src_top = c.new_submatrix(SubMatrixInfo {
            matrix: 1,
            ..c.submatrices[top]
        });
        c.commands = vec![
            Command::AllocMatrix { m: 1 },
            Command::AllocMatrixUndefined { m: 2 },
            Command::AllocMatrix { m: 3 },
            Command::SetConst { s: 1, alpha: 1.0 },
            add(2, 1),            // 4: m2 is undefined, not zero: stays
            add(top, src_top),    // 5: m3's top is zero: a copy
            add(top, src_top),    // 6: now it is not: stays
            add(bottom, src_top), // 7: the bottom is still zero: a copy
            add(3, 1),            // 8: stays
        ];
        assert_eq!(convert_addition_to_assignment(&nnet, &mut c), 2);
        let kinds: Vec<&str> = c.commands[4..].iter().map(|c| c.kind_name()).collect();
        assert_eq!(
            kinds,
            [
                "MatrixAdd",
                "MatrixCopy",
                "MatrixAdd",
                "MatrixCopy",
                "MatrixAdd"
            ]
        );
    }
}
