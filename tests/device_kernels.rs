//! The CUDA kernels of the host operations they replace, each against that host operation
//! on the same operands: the self-repair terms, the grouped reductions and their
//! derivatives, BatchNorm's per-block work, the LSTM and GRU cells' forward and backward
//! passes (the LSTM's input derivative and its f64 sums, with and without dropout), the
//! random masks (drawn on the host, then copied over), statistics extraction and pooling
//! with their backward passes (overlapping ranges, with and without standard deviations and
//! log counts, short and long windows), the convolutions' gathers and scatters (the
//! factorised block unfold and fold, with colliding destinations, and the column gather and
//! scatter) and restricted self-attention forward and backward. Needs a GPU, so it is
//! ignored by default; `scripts/gpu_check.sh` runs each test with `--ignored --exact` in a
//! process of its own, without `COMPNET_DEVICE` (the operands are made on the host first,
//! then the GPU is selected and they are copied to it; the selection is for the whole
//! process).
#![cfg(feature = "cuda")]

use compnet::matrix::device::{select, Selected, UseGpu};
use compnet::matrix::{
    backprop_gru_cell, backprop_lstm_nonlinearity, LstmBackpropInput, LstmStatsSums, MatView,
    MatViewMut, Matrix, PoolingOptions, Trans, Vector, Vector64,
};
use compnet::random::seeded_rng;
use compnet::testing::random_matrix;
use rand::rngs::StdRng;

/// Relative agreement of a kernel's result with the host's (the GPU contracts multiply-adds
/// and has its own powf, so not to the bit).
const TOL: f32 = 1e-5;

fn assert_close(what: &str, host: &[f32], device: &[f32]) {
    assert_eq!(host.len(), device.len(), "{what}: length");
    for (i, (h, d)) in host.iter().zip(device).enumerate() {
        let ok = (h.is_nan() && d.is_nan()) || (h - d).abs() <= TOL * (1.0 + h.abs());
        assert!(ok, "{what}: element {i}: host {h}, GPU {d}");
    }
}

/// One operation: `run` on host copies of the operands now, and on device copies later.
struct Case {
    name: String,
    inputs: Vec<Matrix>,
    vectors: Vec<Vector>,
    out_shape: (usize, usize),
    out_init: Option<Matrix>,
    #[allow(clippy::type_complexity)]
    run: Box<dyn Fn(&mut MatViewMut<'_>, &[MatView<'_>], &[Vector])>,
}

impl Case {
    fn compute(&self, inputs: &[Matrix], vectors: &[Vector], init: Option<&Matrix>) -> Vec<f32> {
        let mut out = match init {
            Some(m) => Matrix::from_vec(m.num_rows(), m.num_cols(), m.to_vec()),
            None => Matrix::zeros(self.out_shape.0, self.out_shape.1),
        };
        let views: Vec<MatView<'_>> = inputs.iter().map(|m| m.view()).collect();
        (self.run)(&mut out.view_mut(), &views, vectors);
        out.to_vec()
    }
}

fn copy(m: &Matrix) -> Matrix {
    Matrix::from_vec(m.num_rows(), m.num_cols(), m.to_vec())
}

/// Which outputs an LSTM backward case asks for: dropout scales in the input, the input
/// derivative, the f64 sums.
#[derive(Clone, Copy, Debug)]
struct LstmWants {
    dropout: bool,
    in_deriv: bool,
    sums: bool,
}

/// The LSTM cell's backward pass on `m` = [in_value, params, out_deriv, in_deriv's start]
/// with self-repair terms `repair`, the f64 sums starting from `start` (peephole, values,
/// derivatives): the input derivative, then the three sums rounded to f32.
fn lstm_backward(m: &[Matrix], repair: &Vector, w: LstmWants, start: &[Vector64]) -> Vec<Vec<f32>> {
    let mut in_deriv = copy(&m[3]);
    let mut sums: Vec<Vector64> = start.to_vec();
    let [pd, vs, ds] = &mut sums[..] else {
        panic!("three sums")
    };
    backprop_lstm_nonlinearity(
        LstmBackpropInput {
            in_value: m[0].view(),
            params: m[1].view(),
            out_deriv: m[2].view(),
            use_dropout: w.dropout,
            self_repair: repair,
        },
        w.in_deriv.then_some(&mut in_deriv.view_mut()),
        w.sums.then_some(pd),
        w.sums.then_some(LstmStatsSums {
            value_sum: vs,
            deriv_sum: ds,
        }),
    );
    let mut out = vec![in_deriv.to_vec()];
    out.extend(
        sums.iter()
            .map(|v| v.to_vec().into_iter().map(|x| x as f32).collect()),
    );
    out
}

/// The GRU cell's backward pass on `m` = [z, c_prev, h, out_deriv, in_deriv's start]: the
/// derivative before the tanh, then the input derivative (z and c_prev columns 0 and 2C when
/// `with_in`, else untouched).
fn gru_backward(m: &[Matrix], with_in: bool) -> Vec<Vec<f32>> {
    let c = m[0].num_cols();
    let mut hd = Matrix::zeros(m[0].num_rows(), c);
    let mut in_deriv = copy(&m[4]);
    backprop_gru_cell(
        m[0].view(),
        m[1].view(),
        m[2].view(),
        m[3].view(),
        &mut hd.view_mut(),
        with_in.then_some((&mut in_deriv.view_mut(), 0, 2 * c)),
    );
    vec![hd.to_vec(), in_deriv.to_vec()]
}

#[test]
#[ignore = "needs a GPU: scripts/gpu_check.sh runs it with --ignored"]
fn kernels_agree_with_the_host() {
    let mut rng = seeded_rng(7);
    let (rows, cols, g) = (37, 48, 4);
    let x = random_matrix(rows, cols, &mut rng);
    let y = random_matrix(rows, cols, &mut rng);
    let v = Vector::from_vec(random_matrix(1, cols, &mut rng).to_vec());
    let block = Vector::from_vec(random_matrix(1, 16, &mut rng).to_vec());
    let block2 = Vector::from_vec(random_matrix(1, 16, &mut rng).to_vec());
    let block3 = Vector::from_vec(random_matrix(1, 16, &mut rng).to_vec());
    // Grouped outputs and their derivatives, made on the host from x.
    let mut grouped = Matrix::zeros(rows, cols / g);
    grouped.view_mut().group_pnorm_from(x.view(), 3.0);
    let mut maxed = Matrix::zeros(rows, cols / g);
    maxed.view_mut().group_max_from(x.view());
    let dy = random_matrix(rows, cols / g, &mut rng);

    let mut cases: Vec<Case> = Vec::new();
    cases.push(Case {
        name: "add_affine_mat_diag_vec".into(),
        inputs: vec![copy(&x)],
        vectors: vec![v.clone()],
        out_shape: (rows, cols),
        out_init: Some(copy(&y)),
        run: Box::new(|o, m, v| o.add_affine_mat_diag_vec(&v[0], -0.7, m[0], 0.3)),
    });
    for beta in [0.0, 0.5] {
        cases.push(Case {
            name: format!("add_mat_diag_vec beta {beta}"),
            inputs: vec![copy(&x)],
            vectors: vec![v.clone()],
            out_shape: (rows, cols),
            out_init: Some(copy(&y)),
            run: Box::new(move |o, m, v| o.add_mat_diag_vec(1.3, m[0], Trans::No, &v[0], beta)),
        });
    }
    for p in [0.0, 1.0, 2.0, 3.0, f32::INFINITY] {
        cases.push(Case {
            name: format!("group_pnorm_from p {p}"),
            inputs: vec![copy(&x)],
            vectors: vec![],
            out_shape: (rows, cols / g),
            out_init: None,
            run: Box::new(move |o, m, _| o.group_pnorm_from(m[0], p)),
        });
        let mut out = Matrix::zeros(rows, cols / g);
        out.view_mut().group_pnorm_from(x.view(), p);
        cases.push(Case {
            name: format!("diff_group_pnorm p {p}"),
            inputs: vec![copy(&x), out, copy(&dy)],
            vectors: vec![],
            out_shape: (rows, cols),
            out_init: None,
            run: Box::new(move |o, m, _| o.diff_group_pnorm(m[0], m[1], m[2], p)),
        });
    }
    cases.push(Case {
        name: "group_2norm_from".into(),
        inputs: vec![copy(&x)],
        vectors: vec![],
        out_shape: (rows, cols / g),
        out_init: None,
        run: Box::new(|o, m, _| o.group_2norm_from(m[0])),
    });
    let mut two = Matrix::zeros(rows, cols / g);
    two.view_mut().group_2norm_from(x.view());
    cases.push(Case {
        name: "diff_group_2norm".into(),
        inputs: vec![copy(&x), two, copy(&dy)],
        vectors: vec![],
        out_shape: (rows, cols),
        out_init: None,
        run: Box::new(|o, m, _| o.diff_group_2norm(m[0], m[1], m[2])),
    });
    cases.push(Case {
        name: "group_max_from".into(),
        inputs: vec![copy(&x)],
        vectors: vec![],
        out_shape: (rows, cols / g),
        out_init: None,
        run: Box::new(|o, m, _| o.group_max_from(m[0])),
    });
    cases.push(Case {
        name: "group_max_deriv".into(),
        inputs: vec![copy(&x), copy(&maxed)],
        vectors: vec![],
        out_shape: (rows, cols),
        out_init: None,
        run: Box::new(|o, m, _| o.group_max_deriv(m[0], m[1])),
    });
    // The LSTM cell, with and without the three dropout scales (C = 12 units).
    let params = random_matrix(3, 12, &mut rng);
    for dropout in [false, true] {
        let width = 5 * 12 + if dropout { 3 } else { 0 };
        cases.push(Case {
            name: format!("compute_lstm_nonlinearity dropout {dropout}"),
            inputs: vec![random_matrix(rows, width, &mut rng), copy(&params)],
            vectors: vec![],
            out_shape: (rows, 2 * 12),
            out_init: None,
            run: Box::new(move |o, m, _| o.compute_lstm_nonlinearity(m[0], m[1], dropout)),
        });
    }
    // The GRU cells' forward work (C = 12 units).
    let z = random_matrix(rows, 12, &mut rng);
    let c_prev = random_matrix(rows, 12, &mut rng);
    cases.push(Case {
        name: "set_gru_reset_product".into(),
        inputs: vec![copy(&z), copy(&c_prev)],
        vectors: vec![],
        out_shape: (rows, 12),
        out_init: None,
        run: Box::new(|o, m, _| o.set_gru_reset_product(m[0], m[1])),
    });
    cases.push(Case {
        name: "gru_cell_from_preactivation".into(),
        inputs: vec![copy(&z), copy(&c_prev)],
        vectors: vec![],
        out_shape: (rows, 24),
        out_init: Some(random_matrix(rows, 24, &mut rng)),
        run: Box::new(|o, m, _| o.gru_cell_from_preactivation(m[0], m[1])),
    });
    cases.push(Case {
        name: "compute_output_gru_cell".into(),
        inputs: vec![random_matrix(rows, 36, &mut rng)],
        vectors: vec![Vector::from_vec(random_matrix(1, 12, &mut rng).to_vec())],
        out_shape: (rows, 24),
        out_init: None,
        run: Box::new(|o, m, v| o.compute_output_gru_cell(m[0], &v[0])),
    });
    // The random masks, drawn on the host for a device matrix and copied over: the same draws
    // as the host's (odd widths, so that a row is not a whole number of vectors).
    let mask = |name: &str, run: fn(&mut MatViewMut<'_>)| Case {
        name: name.into(),
        inputs: vec![],
        vectors: vec![],
        out_shape: (rows, 29),
        out_init: Some(random_matrix(rows, 29, &mut seeded_rng(3))),
        run: Box::new(move |o, _, _| run(o)),
    };
    cases.push(mask("set_rand_dropout_mask", |o| {
        o.set_rand_dropout_mask(&mut seeded_rng(11), 0.3, 1.5)
    }));
    cases.push(mask("set_rand_continuous_dropout_mask", |o| {
        o.set_rand_continuous_dropout_mask(&mut seeded_rng(12), 0.2)
    }));
    cases.push(mask("set_rand_zeroed_regions_mask", |o| {
        o.set_rand_zeroed_regions_mask(&mut seeded_rng(13), 9, 3)
    }));
    cases.push(mask("apply_dropout_rand", |o| {
        o.apply_dropout_rand(&mut seeded_rng(14), 0.4)
    }));
    let per_block = |name: &str, run: fn(&mut MatViewMut<'_>, &[MatView<'_>], &[Vector])| Case {
        name: name.into(),
        inputs: vec![copy(&y)],
        vectors: vec![block.clone(), block2.clone(), block3.clone()],
        out_shape: (rows, cols),
        out_init: Some(copy(&x)),
        run: Box::new(run),
    };
    cases.push(per_block("mul_vec_per_block", |o, _, v| {
        o.mul_vec_per_block(&v[0])
    }));
    cases.push(per_block("mul_add_vec_per_block", |o, _, v| {
        o.mul_add_vec_per_block(&v[0], &v[1])
    }));
    cases.push(per_block("sub_vec_mul_vec_per_block", |o, _, v| {
        o.sub_vec_mul_vec_per_block(&v[0], &v[1])
    }));
    cases.push(per_block(
        "add_vec_mul_vec_add_mat_vec_per_block",
        |o, m, v| o.add_vec_mul_vec_add_mat_vec_per_block(&v[0], &v[1], m[0], &v[2]),
    ));

    // The cells' backward passes, which write several outputs: LSTM with C = 70 (two blocks
    // of units, the rows in several chunks), self-repair on every third unit.
    let lc = 70;
    let repair = Vector::from_vec(
        (0..5 * lc)
            .map(|i| if i % 3 == 0 { 0.1 } else { 0.0 })
            .collect(),
    );
    let lstm_start: Vec<Vector64> = [3 * lc, 5 * lc, 5 * lc]
        .iter()
        .map(|&n| Vector64::from_f32(&Vector::from_vec(random_matrix(1, n, &mut rng).to_vec())))
        .collect();
    let mut lstm_cases = Vec::new();
    for dropout in [false, true] {
        let width = 5 * lc + if dropout { 3 } else { 0 };
        let operands = vec![
            random_matrix(rows, width, &mut rng),
            random_matrix(3, lc, &mut rng),
            random_matrix(rows, 2 * lc, &mut rng),
            random_matrix(rows, width, &mut rng),
        ];
        for (in_deriv, sums) in [(true, true), (false, true), (true, false)] {
            let w = LstmWants {
                dropout,
                in_deriv,
                sums,
            };
            let host = lstm_backward(&operands, &repair, w, &lstm_start);
            lstm_cases.push((w, operands.iter().map(copy).collect::<Vec<_>>(), host));
        }
    }
    let gru_operands: Vec<Matrix> = [12, 12, 12, 24, 36]
        .iter()
        .map(|&n| random_matrix(rows, n, &mut rng))
        .collect();
    let gru_host = [false, true].map(|with_in| gru_backward(&gru_operands, with_in));

    pooling_cases(&mut cases, &mut rng);
    gather_cases(&mut cases, &mut rng);

    // The host's results, then the GPU's on copies of the same operands.
    let host: Vec<Vec<f32>> = cases
        .iter()
        .map(|c| c.compute(&c.inputs, &c.vectors, c.out_init.as_ref()))
        .collect();
    let sums = x.view().block_col_sum_and_sum_squares(16);
    let dots = x.view().block_col_dot_and_sum(y.view(), 16);
    match select(UseGpu::Yes) {
        Ok(Selected::Gpu(_)) => {}
        other => panic!("this test needs a GPU: {other:?}"),
    }
    for (c, h) in cases.iter().zip(&host) {
        let inputs: Vec<Matrix> = c.inputs.iter().map(copy).collect();
        let vectors: Vec<Vector> = c
            .vectors
            .iter()
            .map(|v| Vector::from_vec(v.to_vec()))
            .collect();
        let init = c.out_init.as_ref().map(copy);
        assert!(
            inputs.iter().chain(init.as_ref()).all(Matrix::is_on_device),
            "{}: the copies are not on the GPU",
            c.name
        );
        let d = c.compute(&inputs, &vectors, init.as_ref());
        assert_close(&c.name, h, &d);
    }
    let names = ["in_deriv", "params_deriv", "value_sum", "deriv_sum"];
    let repair = Vector::from_vec(repair.to_vec());
    for (w, operands, host) in &lstm_cases {
        let operands: Vec<Matrix> = operands.iter().map(copy).collect();
        assert!(operands.iter().all(Matrix::is_on_device));
        let device = lstm_backward(&operands, &repair, *w, &lstm_start);
        for ((h, d), name) in host.iter().zip(&device).zip(names) {
            assert_close(&format!("backprop_lstm_nonlinearity {w:?} {name}"), h, d);
        }
    }
    let gru_operands: Vec<Matrix> = gru_operands.iter().map(copy).collect();
    assert!(gru_operands.iter().all(Matrix::is_on_device));
    for (with_in, host) in [false, true].into_iter().zip(&gru_host) {
        let device = gru_backward(&gru_operands, with_in);
        for ((h, d), name) in host.iter().zip(&device).zip(["h_deriv", "in_deriv"]) {
            assert_close(
                &format!("backprop_gru_cell in_deriv {with_in} {name}"),
                h,
                d,
            );
        }
    }
    // The per-block column sums, whose results are vectors (host ones computed above).
    let (dx, dy2) = (copy(&x), copy(&y));
    assert!(dx.is_on_device() && dy2.is_on_device());
    let device = [
        dx.view().block_col_sum_and_sum_squares(16),
        dx.view().block_col_dot_and_sum(dy2.view(), 16),
    ];
    let names = [
        [
            "block_col_sum_and_sum_squares (sum)",
            "block_col_sum_and_sum_squares (squares)",
        ],
        ["block_col_dot_and_sum (dot)", "block_col_dot_and_sum (sum)"],
    ];
    for ((h, d), [first, second]) in [sums, dots].iter().zip(&device).zip(names) {
        assert_close(first, &h.0.to_vec(), &d.0.to_vec());
        assert_close(second, &h.1.to_vec(), &d.1.to_vec());
    }
}

// ---- Restricted self-attention ----------------------------------------------------------

/// A forward case: output rows, key dim, value dim, C, row shift, output-context, and the
/// row of the first query (rows_left).
type AttentionForward = (usize, usize, usize, usize, usize, bool, usize);

/// A backward case: heads, output rows, key dim, value dim, C, row shift, output-context,
/// rows_left.
type AttentionBackward = (usize, usize, usize, usize, usize, usize, bool, usize);

const KEY_SCALE: f32 = 0.35;

/// One head forward as the component calls it, on `m` = [input (keys, values, query keys,
/// query context), the output's start]: the output, then the weights.
fn attention_forward(m: &[Matrix], shape: AttentionForward) -> Vec<Vec<f32>> {
    let (n, kd, vd, c, shift, _, rows_left) = shape;
    let mut out = copy(&m[1]);
    let mut weights = Matrix::zeros(n, c);
    out.view_mut().add_restricted_attention(
        &mut weights.view_mut(),
        m[0].view().cols_range(0, kd + vd),
        m[0].view().sub(rows_left, n, kd + vd, kd + c),
        kd,
        KEY_SCALE,
        shift,
    );
    vec![out.to_vec(), weights.to_vec()]
}

/// The backward pass on `m` = [input, weights, out_deriv, the derivative's start]: the
/// input derivative.
fn attention_backward(m: &[Matrix], shape: AttentionBackward) -> Vec<f32> {
    let (heads, _, kd, _, _, shift, _, rows_left) = shape;
    let mut deriv = copy(&m[3]);
    deriv.view_mut().add_restricted_attention_backprop(
        m[0].view(),
        m[1].view(),
        m[2].view(),
        rows_left,
        heads,
        kd,
        KEY_SCALE,
        shift,
    );
    deriv.to_vec()
}

/// Restricted attention forward (one head) and backward (all heads) against the host:
/// with and without output-context, row shifts 1 to 3, queries below the window's first row,
/// key and value dims off multiples of 32, C above a warp.
#[test]
#[ignore = "needs a GPU: scripts/gpu_check.sh runs it with --ignored"]
fn attention_kernels_agree_with_the_host() {
    let mut rng = seeded_rng(11);
    let forward: [AttentionForward; 4] = [
        (23, 40, 72, 5, 1, false, 2),
        (17, 16, 33, 7, 3, true, 9),
        (9, 5, 8, 40, 2, true, 0),
        (12, 64, 64, 9, 2, false, 16),
    ];
    let backward: [AttentionBackward; 5] = [
        (2, 19, 16, 24, 5, 1, true, 2),
        (2, 13, 8, 20, 4, 3, false, 3),
        (2, 11, 33, 9, 3, 3, true, 4),
        (2, 10, 16, 40, 40, 1, false, 39),
        (3, 8, 7, 12, 6, 2, true, 10),
    ];
    let mut fwd_cases = Vec::new();
    for shape in forward {
        let (n, kd, vd, c, shift, ctx, _) = shape;
        let rows_in = n + (c - 1) * shift;
        let operands = vec![
            random_matrix(rows_in, 2 * kd + vd + c, &mut rng),
            random_matrix(n, vd + if ctx { c } else { 0 }, &mut rng),
        ];
        assert!(
            !operands[0].is_on_device(),
            "the GPU was selected before the host operands were made: run with \
             --test-threads=1"
        );
        let host = attention_forward(&operands, shape);
        fwd_cases.push((shape, operands, host));
    }
    let mut bwd_cases = Vec::new();
    for shape in backward {
        let (heads, n, kd, vd, c, shift, ctx, _) = shape;
        let rows_in = n + (c - 1) * shift;
        let cols = heads * (2 * kd + vd + c);
        // Softmax weights per head, as the forward pass keeps them.
        let scores = random_matrix(n, heads * c, &mut rng);
        let mut weights = Matrix::zeros(n, heads * c);
        for h in 0..heads {
            weights
                .sub_mut(0, n, h * c, c)
                .softmax_per_row_from(scores.view().cols_range(h * c, c));
        }
        let operands = vec![
            random_matrix(rows_in, cols, &mut rng),
            weights,
            random_matrix(n, heads * (vd + if ctx { c } else { 0 }), &mut rng),
            random_matrix(rows_in, cols, &mut rng),
        ];
        let host = attention_backward(&operands, shape);
        bwd_cases.push((shape, operands, host));
    }
    match select(UseGpu::Yes) {
        Ok(Selected::Gpu(_)) => {}
        other => panic!("this test needs a GPU: {other:?}"),
    }
    for (shape, operands, host) in &fwd_cases {
        let operands: Vec<Matrix> = operands.iter().map(copy).collect();
        assert!(operands.iter().all(Matrix::is_on_device));
        let device = attention_forward(&operands, *shape);
        for ((h, d), what) in host.iter().zip(&device).zip(["output", "weights"]) {
            assert_close(&format!("add_restricted_attention {shape:?} {what}"), h, d);
        }
    }
    for (shape, operands, host) in &bwd_cases {
        let operands: Vec<Matrix> = operands.iter().map(copy).collect();
        assert!(operands.iter().all(Matrix::is_on_device));
        let device = attention_backward(&operands, *shape);
        assert_close(
            &format!("add_restricted_attention_backprop {shape:?}"),
            host,
            &device,
        );
    }
}

/// Statistics extraction and pooling, forward and backward, over overlapping ranges (several
/// output rows adding to, or writing, one input row) with an empty one.
fn pooling_cases(cases: &mut Vec<Case>, rng: &mut StdRng) {
    let (n_in, d) = (37, 10);
    let x = random_matrix(n_in, d, rng);
    let ranges = vec![
        (0, 5),
        (3, 9),
        (9, 9),
        (10, 37),
        (0, 37),
        (20, 21),
        (4, 6),
        (30, 37),
    ];
    let n_out = ranges.len();
    for var in [false, true] {
        let width = 1 + d + if var { d } else { 0 };
        let r = ranges.clone();
        cases.push(Case {
            name: format!("add_row_range_stats variance {var}"),
            inputs: vec![copy(&x)],
            vectors: vec![],
            out_shape: (n_out, width),
            out_init: Some(random_matrix(n_out, width, rng)),
            run: Box::new(move |o, m, _| o.add_row_range_stats(m[0], &r, var)),
        });
        let r = ranges.clone();
        cases.push(Case {
            name: format!("backprop_row_range_stats with input {var}"),
            inputs: vec![random_matrix(n_out, width, rng), copy(&x)],
            vectors: vec![],
            out_shape: (n_in, d),
            out_init: Some(random_matrix(n_in, d, rng)),
            run: Box::new(move |o, m, _| o.backprop_row_range_stats(m[0], &r, var.then_some(m[1]))),
        });
    }
    // Pooling reads extraction statistics: [count, Σ x, Σ x²] of overlapping windows.
    let windows: Vec<(usize, usize)> = (0..n_in).map(|i| (i, (i + 4).min(n_in))).collect();
    let mut stats = Matrix::zeros(n_in, 1 + 2 * d);
    stats
        .view_mut()
        .add_row_range_stats(x.view(), &windows, true);
    // Short ranges add rows in order; long ones (more than 16 rows added per input row in
    // all) go through double prefix sums.
    let long: Vec<(usize, usize)> = (0..40)
        .map(|o| {
            if o == 5 {
                (7, 7)
            } else {
                (o % 3, n_in - o % 5)
            }
        })
        .collect();
    for (kind, r) in [("short", ranges.clone()), ("long", long)] {
        for nl in [0, 2] {
            for output_stddevs in [false, true] {
                let opts = PoolingOptions {
                    num_log_count_features: nl,
                    output_stddevs,
                    variance_floor: 1e-10,
                };
                let out_cols = nl + 2 * d;
                let name = format!("{kind} ranges, log counts {nl}, stddevs {output_stddevs}");
                let rr = r.clone();
                cases.push(Case {
                    name: format!("pool_row_range_stats, {name}"),
                    inputs: vec![copy(&stats)],
                    vectors: vec![],
                    out_shape: (r.len(), out_cols),
                    out_init: Some(random_matrix(r.len(), out_cols, rng)),
                    run: Box::new(move |o, m, _| o.pool_row_range_stats(m[0], &rr, opts)),
                });
                let mut pooled = Matrix::zeros(r.len(), out_cols);
                pooled
                    .view_mut()
                    .pool_row_range_stats(stats.view(), &r, opts);
                let rr = r.clone();
                cases.push(Case {
                    name: format!("backprop_pool_row_range_stats, {name}"),
                    inputs: vec![copy(&stats), pooled, random_matrix(r.len(), out_cols, rng)],
                    vectors: vec![],
                    out_shape: (n_in, 1 + 2 * d),
                    out_init: Some(random_matrix(n_in, 1 + 2 * d, rng)),
                    run: Box::new(move |o, m, _| {
                        o.backprop_pool_row_range_stats(m[0], m[1], m[2], &rr, opts)
                    }),
                });
            }
        }
    }
}

/// Convolution's block gather and scatter (blocks that overlap, so that the scatter adds
/// several sources to one destination, also from one row group's two slots) and the old
/// convolution's column gather and scatter.
fn gather_cases(cases: &mut Vec<Case>, rng: &mut StdRng) {
    // Source 7 × 12, blocks of 3; 5 row groups × 2 groups, 3 slots: unfolded 10 × 9.
    let src = random_matrix(7, 12, rng);
    let rows: Vec<i32> = vec![0, 1, 2, 1, 1, -1, 6, 5, 4, 3, 3, 3, -1, -1, 2];
    let cols: Vec<i32> = vec![0, 2, 9, 2, -1, 1];
    let (r, c) = (rows.clone(), cols.clone());
    cases.push(Case {
        name: "copy_blocks_outer".into(),
        inputs: vec![copy(&src)],
        vectors: vec![],
        out_shape: (10, 9),
        out_init: Some(random_matrix(10, 9, rng)),
        run: Box::new(move |o, m, _| o.copy_blocks_outer(m[0], 3, 2, &r, &c)),
    });
    cases.push(Case {
        name: "add_blocks_outer_to".into(),
        inputs: vec![random_matrix(10, 9, rng)],
        vectors: vec![],
        out_shape: (7, 12),
        out_init: Some(random_matrix(7, 12, rng)),
        run: Box::new(move |o, m, _| m[0].add_blocks_outer_to(0.7, o, 3, 2, &rows, &cols)),
    });
    let idx: Vec<i32> = vec![2, -1, 0, 2, 1, 5, 5, 5, -1, 3];
    let i = idx.clone();
    cases.push(Case {
        name: "add_to_cols".into(),
        inputs: vec![random_matrix(9, 10, rng)],
        vectors: vec![],
        out_shape: (9, 6),
        out_init: Some(random_matrix(9, 6, rng)),
        run: Box::new(move |o, m, _| o.add_to_cols(m[0], &i)),
    });
    cases.push(Case {
        name: "copy_cols".into(),
        inputs: vec![random_matrix(9, 6, rng)],
        vectors: vec![],
        out_shape: (9, 10),
        out_init: Some(random_matrix(9, 10, rng)),
        run: Box::new(move |o, m, _| o.copy_cols(m[0], &idx)),
    });
}
