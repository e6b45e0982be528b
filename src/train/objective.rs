//! Objectives of output nodes (Kaldi's `ComputeObjectiveFunction` and `ComputeAccuracy`):
//! `linear` is Σ output ⊙ supervision (cross-entropy when the output is a LogSoftmax and the
//! supervision a posterior), `quadratic` is −½‖output − target‖².

use crate::error::{Error, Result};
use crate::io::GeneralMatrix;
use crate::matrix::{Matrix, Vector};
use crate::nnet::ObjectiveType;

/// An objective summed over a minibatch: its total and its weight (frames, or the sum of
/// the supervision for `linear`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ObjectiveSum {
    pub tot_weight: f64,
    pub tot_objf: f64,
}

/// The objective of `output` against `supervision`, and (with `want_deriv`) its derivative
/// w.r.t. the output, which the backward pass starts from.
pub fn compute_objective(
    output_name: &str,
    objective: ObjectiveType,
    supervision: &GeneralMatrix,
    output: &Matrix,
    want_deriv: bool,
) -> Result<(ObjectiveSum, Option<Matrix>)> {
    let (rows, cols) = (supervision.num_rows(), supervision.num_cols());
    if (rows, cols) != (output.num_rows(), output.num_cols()) {
        return Err(Error::Compute(format!(
            "supervision for output '{output_name}' is {rows}x{cols} but the network output is \
             {}x{}",
            output.num_rows(),
            output.num_cols()
        )));
    }
    match objective {
        ObjectiveType::Linear => {
            let sum = match supervision {
                GeneralMatrix::Sparse(sm) => {
                    let mut s = ObjectiveSum::default();
                    let mut elements = Vec::new();
                    for (r, row) in sm.rows.iter().enumerate() {
                        for &(c, v) in &row.pairs {
                            if c < 0 || c as usize >= cols {
                                return Err(Error::Compute(format!(
                                    "supervision for output '{output_name}' row {r} has \
                                     index {c}, outside 0..{cols}"
                                )));
                            }
                            s.tot_weight += v as f64;
                            elements.push((r, c as usize, v));
                        }
                    }
                    s.tot_objf = output.view().dot_elements(&elements);
                    s
                }
                _ => {
                    let m = supervision.to_matrix();
                    ObjectiveSum {
                        tot_weight: m.view().sum_f64(),
                        tot_objf: output.view().trace_mat_mat_f64(m.view()),
                    }
                }
            };
            Ok((sum, want_deriv.then(|| supervision.to_matrix())))
        }
        ObjectiveType::Quadratic => {
            let mut diff = supervision.to_matrix();
            diff.view_mut()
                .add_mat(-1.0, output.view(), crate::matrix::Trans::No);
            let sum = ObjectiveSum {
                tot_weight: rows as f64,
                tot_objf: -0.5 * diff.view().sum_squares_f64(),
            };
            Ok((sum, want_deriv.then_some(diff)))
        }
    }
}

/// Frame accuracy: a row counts (with the weight of its supervision) when the output's
/// largest element is where the supervision's largest element is (first on ties).
pub fn compute_accuracy(supervision: &GeneralMatrix, output: &Matrix) -> ObjectiveSum {
    // Row sums are single precision and the totals double, as Kaldi's: with dense targets
    // of both signs the weights nearly cancel and the last printed digit depends on it.
    let (mut weight, mut correct) = (0.0f64, 0.0f64);
    for_each_accuracy_row(supervision, output, |_, _, row_sum, right| {
        weight += row_sum as f64;
        if right {
            correct += row_sum as f64;
        }
    });
    ObjectiveSum {
        tot_weight: weight,
        tot_objf: correct,
    }
}

/// Per-dimension accuracy sums (`nnet3-compute-prob --compute-per-dim-accuracy`): for each
/// reference dimension, the weight of the frames whose reference it is and of those the output
/// got right, added into `weight` and `correct` (sized to the output dimension, in single
/// precision as Kaldi keeps them).
pub fn add_per_dim_accuracy(
    supervision: &GeneralMatrix,
    output: &Matrix,
    weight: &mut Vector,
    correct: &mut Vector,
) {
    let (mut weight, mut correct) = (weight.as_row_mut(), correct.as_row_mut());
    for_each_accuracy_row(supervision, output, |reference, _, row_sum, right| {
        if let Ok(i) = usize::try_from(reference) {
            if i < weight.num_cols() {
                weight.set(0, i, weight.get(0, i) + row_sum);
            }
            if right && i < correct.num_cols() {
                correct.set(0, i, correct.get(0, i) + row_sum);
            }
        }
    });
}

/// Calls `f(reference dimension, output's best dimension, row weight, whether they agree)` for
/// every supervision row (Kaldi's `ComputeAccuracy`: the reference is the row's largest
/// entry, the weight its sum).
fn for_each_accuracy_row(
    supervision: &GeneralMatrix,
    output: &Matrix,
    mut f: impl FnMut(i32, i32, f32, bool),
) {
    let best_out = output.view().row_max_index();
    let mut row = |r: usize, row_sum: f32, best: i32| {
        let hyp = best_out.get(r).copied().unwrap_or(-1);
        f(best, hyp, row_sum, hyp == best)
    };
    match supervision {
        GeneralMatrix::Sparse(sm) => {
            for (r, row_pairs) in sm.rows.iter().enumerate() {
                let row_sum: f32 = row_pairs.pairs.iter().map(|p| p.1).sum();
                let mut best = (-1i32, f32::NEG_INFINITY);
                for &(c, v) in &row_pairs.pairs {
                    if v > best.1 {
                        best = (c, v);
                    }
                }
                row(r, row_sum, best.0);
            }
        }
        _ => {
            let m = supervision.to_matrix();
            let best_sup = m.view().row_max_index();
            for (r, &best) in best_sup.iter().enumerate() {
                let row_sum: f32 = m.row_to_vec(r).iter().sum();
                row(r, row_sum, best);
            }
        }
    }
}
