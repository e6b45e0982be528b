//! The LSTM cell nonlinearity and its backward pass (Kaldi's ComputeLstmNonlinearity and
//! BackpropLstmNonlinearity), fused per frame as Kaldi's kernels are.
//!
//! Input columns: `[i_part, f_part, c_part, o_part, c_prev]`, C each, plus three dropout
//! scales `(i, f, o)` when `use_dropout`. Output: `[c_t, m_t]`. `params` is 3 × C: the
//! peephole weights w_ic, w_fc, w_oc.

use super::{MatView, MatViewMut, Real};

fn sigmoid(x: Real) -> Real {
    1.0 / (1.0 + (-x).exp())
}

/// Where the backward pass adds the per-unit statistics: the sums (5 × C, in f64) of the
/// five nonlinearities' values and derivatives, order i, f, tanh(c_part), o, tanh(c_t).
pub struct LstmStatsSums<'s> {
    /// Σ of the values.
    pub value_sum: &'s mut [f64],
    /// Σ of the derivatives.
    pub deriv_sum: &'s mut [f64],
}

/// The operands of [`backprop_lstm_nonlinearity`] besides what it writes.
#[derive(Clone, Copy)]
pub struct LstmBackpropInput<'a> {
    /// The forward input (see the module doc).
    pub in_value: MatView<'a>,
    /// The 3 × C peephole weights.
    pub params: MatView<'a>,
    /// The derivative with respect to the output `[c_t, m_t]`.
    pub out_deriv: MatView<'a>,
    /// Whether the input carries the three dropout scales.
    pub use_dropout: bool,
    /// 5 × C self-repair terms (0 where a unit is not repaired): sigmoids are pushed
    /// towards 0.5 and tanh units towards 0 by this much.
    pub self_repair: &'a [Real],
}

impl MatViewMut<'_> {
    /// `self = [c_t, m_t]` of the LSTM cell for every row of `input` (Kaldi's
    /// ComputeLstmNonlinearity); `params` is 3 × C.
    pub fn compute_lstm_nonlinearity(
        &mut self,
        input: MatView<'_>,
        params: MatView<'_>,
        use_dropout: bool,
    ) {
        let c = params.num_cols();
        assert_eq!(params.num_rows(), 3, "compute_lstm_nonlinearity: params");
        assert_eq!(
            self.num_cols(),
            2 * c,
            "compute_lstm_nonlinearity: output dim"
        );
        assert!(
            input.num_cols() == 5 * c + if use_dropout { 3 } else { 0 },
            "compute_lstm_nonlinearity: input dim"
        );
        let (w_ic, w_fc, w_oc) = (params.row(0), params.row(1), params.row(2));
        for r in 0..input.num_rows().min(self.num_rows()) {
            let x = input.row(r);
            let (i_s, f_s, o_s) = if use_dropout {
                (x[5 * c], x[5 * c + 1], x[5 * c + 2])
            } else {
                (1.0, 1.0, 1.0)
            };
            let y = self.row_mut(r);
            for j in 0..c {
                let c_prev = x[4 * c + j];
                let i_t = sigmoid(x[j] + w_ic[j] * c_prev);
                let f_t = sigmoid(x[c + j] + w_fc[j] * c_prev);
                let c_t = f_t * f_s * c_prev + i_t * i_s * x[2 * c + j].tanh();
                let o_t = sigmoid(x[3 * c + j] + w_oc[j] * c_t);
                y[j] = c_t;
                y[c + j] = o_t * o_s * c_t.tanh();
            }
        }
    }
}

/// The LSTM cell's backward pass (Kaldi's BackpropLstmNonlinearity): writes the input
/// derivative into `in_deriv` (when given), adds the peephole derivative (3 × C, row-major,
/// f64) into `params_deriv` and the value/derivative sums into `stats` (when given).
pub fn backprop_lstm_nonlinearity(
    a: LstmBackpropInput<'_>,
    mut in_deriv: Option<&mut MatViewMut<'_>>,
    mut params_deriv: Option<&mut [f64]>,
    mut stats: Option<LstmStatsSums<'_>>,
) {
    let LstmBackpropInput {
        in_value,
        params,
        out_deriv,
        use_dropout,
        self_repair: repair,
    } = a;
    let c = params.num_cols();
    assert_eq!(params.num_rows(), 3, "backprop_lstm_nonlinearity: params");
    assert_eq!(
        repair.len(),
        5 * c,
        "backprop_lstm_nonlinearity: self-repair"
    );
    assert_eq!(out_deriv.num_rows(), in_value.num_rows());
    let (w_ic, w_fc, w_oc) = (params.row(0), params.row(1), params.row(2));
    for r in 0..in_value.num_rows() {
        let x = in_value.row(r);
        let od = out_deriv.row(r);
        let (i_s, f_s, o_s) = if use_dropout {
            (x[5 * c], x[5 * c + 1], x[5 * c + 2])
        } else {
            (1.0, 1.0, 1.0)
        };
        // Derivatives w.r.t. the three dropout scales (they feed nothing trainable in
        // practice, but this keeps Backprop the true derivative).
        let mut scale_deriv = [0.0f32; 3];
        for j in 0..c {
            let (i_part, f_part, c_part, o_part, c_prev) =
                (x[j], x[c + j], x[2 * c + j], x[3 * c + j], x[4 * c + j]);
            let i_t = sigmoid(i_part + w_ic[j] * c_prev);
            let f_t = sigmoid(f_part + w_fc[j] * c_prev);
            let tanh_c_part = c_part.tanh();
            let c_t = f_t * f_s * c_prev + i_t * i_s * tanh_c_part;
            let o_t = sigmoid(o_part + w_oc[j] * c_t);
            let tanh_c_t = c_t.tanh();
            if let Some(st) = stats.as_mut() {
                let vals = [i_t, f_t, tanh_c_part, o_t, tanh_c_t];
                let ders = [
                    i_t * (1.0 - i_t),
                    f_t * (1.0 - f_t),
                    1.0 - tanh_c_part * tanh_c_part,
                    o_t * (1.0 - o_t),
                    1.0 - tanh_c_t * tanh_c_t,
                ];
                for (k, (&v, &d)) in vals.iter().zip(&ders).enumerate() {
                    st.value_sum[k * c + j] += v as f64;
                    st.deriv_sum[k * c + j] += d as f64;
                }
            }
            let (dc_out, dm) = (od[j], od[c + j]);
            let sr = |k: usize| repair[k * c + j];
            let do_t = dm * o_s * tanh_c_t;
            let dtanh_c_t = dm * o_t * o_s;
            let do_in = o_t * (1.0 - o_t) * do_t - (2.0 * o_t - 1.0) * sr(3);
            let dc = dc_out + (1.0 - tanh_c_t * tanh_c_t) * dtanh_c_t - 2.0 * tanh_c_t * sr(4)
                + do_in * w_oc[j];
            let df_t = dc * f_s * c_prev;
            let di_t = dc * i_s * tanh_c_part;
            let dtanh_c_part = dc * i_t * i_s;
            let df_in = f_t * (1.0 - f_t) * df_t - (2.0 * f_t - 1.0) * sr(1);
            let di_in = i_t * (1.0 - i_t) * di_t - (2.0 * i_t - 1.0) * sr(0);
            let dc_part =
                (1.0 - tanh_c_part * tanh_c_part) * dtanh_c_part - 2.0 * tanh_c_part * sr(2);
            let dc_prev = dc * f_t * f_s + di_in * w_ic[j] + df_in * w_fc[j];
            scale_deriv[0] += dc * i_t * tanh_c_part;
            scale_deriv[1] += dc * f_t * c_prev;
            scale_deriv[2] += dm * o_t * tanh_c_t;
            if let Some(g) = in_deriv.as_deref_mut() {
                let row = g.row_mut(r);
                row[j] = di_in;
                row[c + j] = df_in;
                row[2 * c + j] = dc_part;
                row[3 * c + j] = do_in;
                row[4 * c + j] = dc_prev;
            }
            if let Some(p) = params_deriv.as_deref_mut() {
                p[j] += (di_in * c_prev) as f64;
                p[c + j] += (df_in * c_prev) as f64;
                p[2 * c + j] += (do_in * c_t) as f64;
            }
        }
        if use_dropout {
            if let Some(g) = in_deriv.as_deref_mut() {
                g.row_mut(r)[5 * c..5 * c + 3].copy_from_slice(&scale_deriv);
            }
        }
    }
}
