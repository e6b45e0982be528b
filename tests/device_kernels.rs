//! The CUDA kernels of the host operations they replace, each against that host operation
//! on the same operands: the self-repair terms, the grouped reductions and their
//! derivatives, BatchNorm's per-block work, the LSTM and GRU cells' forward passes,
//! statistics extraction and pooling with their backward passes (overlapping ranges, with and
//! without standard deviations and log counts, short and long windows), and the
//! convolutions' gathers and scatters (the factorised block unfold and fold, with colliding
//! destinations, and the column gather and scatter). Needs a GPU, so it is ignored by
//! default; `scripts/gpu_check.sh` runs it with `--ignored`, without `COMPNET_DEVICE` (the
//! operands are made on the host first, then the GPU is selected and they are copied to it).
#![cfg(feature = "cuda")]

use compnet::matrix::device::{select, Selected, UseGpu};
use compnet::matrix::{MatView, MatViewMut, Matrix, PoolingOptions, Trans, Vector};
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
            inputs.iter().all(Matrix::is_on_device),
            "{}: the copies are not on the GPU",
            c.name
        );
        let d = c.compute(&inputs, &vectors, init.as_ref());
        assert_close(&c.name, h, &d);
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
