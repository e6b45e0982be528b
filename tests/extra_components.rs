//! Recurrence and dropout components: LstmNonlinearity, BackpropTruncation, GeneralDropout,
//! DropoutMask, SpecAugmentTimeMask.
//!
//! Checked against Kaldi's golden model files (byte-exact text and binary round trips, info
//! lines), an independent f64 re-derivation of the LSTM cell equations, numeric derivatives,
//! and the test-mode behaviour the golden README documents.

use compnet::io::{TokenReader, TokenWriter};
use compnet::matrix::{MatView, MatViewMut, Matrix};
use compnet::nnet::component::{
    new_component_from_config, read_component, Backprop, BackpropInPlace, Component,
    MiscComputationInfo, Propagate, PropagateInPlace,
};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::index::Index;
use compnet::testing::component::ParamCopies;
use compnet::testing::component::{check_component_config, round_trip_bytes};
use compnet::testing::golden::{
    check_golden_info, golden_component, golden_path, round_trip_golden, split_model_components,
};

fn make(config: &str) -> Box<dyn Component> {
    let cfg = ConfigLine::parse_str(config).expect("config parses");
    new_component_from_config(&cfg, &mut compnet::random::seeded_rng(0))
        .expect("component initialises")
}

fn empty() -> Matrix {
    Matrix::zeros(0, 0)
}

/// Deterministic pseudo-random values in [-2, 2) (an LCG; independent of the crate's RNG).
fn lcg_matrix(rows: usize, cols: usize, seed: u64) -> Matrix {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data = (0..rows * cols)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Matrix::from_vec(rows, cols, data)
}

const GOLDEN_COMPONENTS: &[(&str, &str)] = &[
    ("fast-lstmp", "lstm1.lstm_nonlin"),
    ("fast-lstmp", "lstm1.cr_trunc"),
    ("fast-lstmp", "lstm1.dropout_mask"),
    ("tdnnf", "tdnnf2.dropout"),
    ("tdnnf", "tdnnf3.dropout"),
    ("extras-attention-gru", "spec-augment.freq-mask"),
    ("extras-attention-gru", "spec-augment.time-mask"),
    ("extras-attention-gru", "gru1.s_r"),
    ("extras-attention-gru", "opgru1.s_r"),
];

#[test]
fn golden_components_round_trip_byte_exact() {
    let mut failures = Vec::new();
    for (case, name) in GOLDEN_COMPONENTS {
        if let Err(e) = round_trip_golden(case, name) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn golden_formats_model_components_round_trip() {
    // formats/model is a copy of tdnnf with non-zero BatchNorm stats; check our types in it.
    let ours = [
        "GeneralDropoutComponent",
        "DropoutMaskComponent",
        "LstmNonlinearityComponent",
        "BackpropTruncationComponent",
        "SpecAugmentTimeMaskComponent",
    ];
    let mut seen = 0;
    for (file, binary) in [
        ("formats/model/model.txt", false),
        ("formats/model/model.raw", true),
    ] {
        let bytes = std::fs::read(golden_path(file)).expect("read golden model");
        for (name, ty, body) in split_model_components(&bytes) {
            if ours.contains(&ty.as_str()) {
                round_trip_bytes(&body, binary, &format!("{file}/{name}"))
                    .unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
    }
    assert!(
        seen >= 4,
        "expected GeneralDropout components in formats/model, saw {seen}"
    );
}

#[test]
fn golden_info_lines_match() {
    let mut failures = Vec::new();
    for (case, name) in GOLDEN_COMPONENTS {
        if let Err(e) = check_golden_info(case, name) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn registered_configs_pass_the_generic_harness() {
    for config in [
        "type=LstmNonlinearityComponent cell-dim=4",
        "type=LstmNonlinearityComponent cell-dim=3 use-dropout=true param-stddev=0.5",
        "type=LstmNonlinearityComponent cell-dim=6 param-stddev=2.0 learning-rate=0.1",
    ] {
        let notes = check_component_config(config, 11).unwrap_or_else(|e| panic!("{config}: {e}"));
        assert!(notes.is_empty(), "{config}: {notes:?}");
    }
}

/// The LSTM cell in f64, written straight from the equations (the reference).
fn lstm_reference(x: &[f32], w: &Matrix, c: usize, dropout: bool) -> Vec<f64> {
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let g = |k: usize, j: usize| x[k * c + j] as f64;
    let (si, sf, so) = if dropout {
        (x[5 * c] as f64, x[5 * c + 1] as f64, x[5 * c + 2] as f64)
    } else {
        (1.0, 1.0, 1.0)
    };
    let mut out = vec![0.0; 2 * c];
    for j in 0..c {
        let cp = g(4, j);
        let i = sig(g(0, j) + w.get(0, j) as f64 * cp);
        let f = sig(g(1, j) + w.get(1, j) as f64 * cp);
        let ct = f * sf * cp + i * si * g(2, j).tanh();
        let o = sig(g(3, j) + w.get(2, j) as f64 * ct);
        out[j] = ct;
        out[c + j] = o * so * ct.tanh();
    }
    out
}

fn golden_lstm() -> Box<dyn Component> {
    let bytes = golden_component("fast-lstmp", "lstm1.lstm_nonlin", true).unwrap();
    let mut r = TokenReader::new(&bytes, true, "model.raw");
    read_component(&mut r).expect("golden LSTM reads")
}

#[test]
fn lstm_forward_matches_reference_with_golden_params() {
    let comp = golden_lstm();
    let lstm = comp
        .as_any()
        .downcast_ref::<compnet::nnet::component::lstm::LstmNonlinearityComponent>()
        .expect("an LstmNonlinearityComponent");
    let c = lstm.cell_dim();
    assert_eq!((c, comp.input_dim(), comp.output_dim()), (16, 83, 32));
    let mut x = lcg_matrix(9, 83, 5);
    // Dropout scales as DropoutMask produces them: 0/1 in training, 0.75 in test mode.
    for r in 0..9 {
        let scales: [f32; 3] = match r % 3 {
            0 => [1.0, 1.0, 1.0],
            1 => [0.0, 1.0, 0.0],
            _ => [0.75, 0.75, 0.75],
        };
        for (k, s) in scales.iter().enumerate() {
            x.set(r, 80 + k, *s);
        }
    }
    let mut y = Matrix::zeros(9, 32);
    comp.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    for r in 0..9 {
        let want = lstm_reference(&x.row_to_vec(r), lstm.params(), c, true);
        for (j, (&a, &b)) in y.row_to_vec(r).iter().zip(&want).enumerate() {
            assert!(
                (a as f64 - b).abs() < 2e-6 * (1.0 + b.abs()),
                "row {r} col {j}: {a} vs {b}"
            );
        }
    }
    // With i and o gates dropped, m is zero and c = f ⊙ c_prev.
    assert!(y.row_to_vec(1)[16..].iter().all(|&v| v == 0.0));
}

/// Objective Σ y ⊙ d as a function of the input, in f64 via the reference.
fn lstm_objective(x: &Matrix, w: &Matrix, c: usize, dropout: bool, d: &Matrix) -> f64 {
    (0..x.num_rows())
        .map(|r| {
            lstm_reference(&x.row_to_vec(r), w, c, dropout)
                .iter()
                .zip(&d.row_to_vec(r))
                .map(|(a, &b)| a * b as f64)
                .sum::<f64>()
        })
        .sum()
}

#[test]
fn lstm_backprop_matches_numeric_derivatives_of_the_reference() {
    for dropout in [false, true] {
        let c = 5;
        let cfg = format!("type=LstmNonlinearityComponent cell-dim={c} use-dropout={dropout}");
        let comp = make(&cfg);
        let lstm = comp
            .as_any()
            .downcast_ref::<compnet::nnet::component::lstm::LstmNonlinearityComponent>()
            .expect("lstm");
        let w = lstm.params().clone();
        let id = comp.input_dim();
        let rows = 6;
        let mut x = lcg_matrix(rows, id, 17);
        if dropout {
            for r in 0..rows {
                for k in 0..3 {
                    x.set(r, 5 * c + k, if (r + k) % 3 == 0 { 0.0 } else { 1.0 });
                }
            }
        }
        let d = lcg_matrix(rows, 2 * c, 23);
        let mut grad = comp.clone_box();
        grad.as_updatable_mut().expect("updatable").set_zero(true);
        let mut g = Matrix::zeros(rows, id);
        comp.backprop(Backprop {
            in_value: x.view(),
            out_value: empty().view(),
            to_update: Some(grad.as_mut()),
            ..Backprop::new(
                d.view(),
                Some(g.view_mut()),
                &mut compnet::random::seeded_rng(0),
            )
        });
        // Input derivative, element by element (central differences in f64).
        let h = 1e-3f32;
        let data_cols = id;
        for r in 0..rows {
            for j in 0..data_cols {
                let mut xp = x.clone();
                xp.set(r, j, x.get(r, j) + h);
                let mut xm = x.clone();
                xm.set(r, j, x.get(r, j) - h);
                let hp = (xp.get(r, j) - x.get(r, j)) as f64;
                let hm = (x.get(r, j) - xm.get(r, j)) as f64;
                let num = (lstm_objective(&xp, &w, c, dropout, &d)
                    - lstm_objective(&xm, &w, c, dropout, &d))
                    / (hp + hm);
                let got = g.get(r, j) as f64;
                assert!(
                    (got - num).abs() < 2e-3 * (1.0 + num.abs()),
                    "dropout={dropout} in-deriv ({r},{j}): {got} vs {num}"
                );
            }
        }
        // Parameter derivative (the gradient holder has learning rate 1).
        let mut gp = vec![0.0f32; 3 * c];
        grad.as_updatable()
            .expect("updatable")
            .copy_params_to(&mut gp);
        for k in 0..3 {
            for j in 0..c {
                let mut wp = w.clone();
                wp.set(k, j, w.get(k, j) + h);
                let mut wm = w.clone();
                wm.set(k, j, w.get(k, j) - h);
                let num = (lstm_objective(&x, &wp, c, dropout, &d)
                    - lstm_objective(&x, &wm, c, dropout, &d))
                    / (wp.get(k, j) - wm.get(k, j)) as f64;
                let got = gp[k * c + j] as f64;
                assert!(
                    (got - num).abs() < 2e-3 * (1.0 + num.abs()),
                    "param ({k},{j}): {got} vs {num}"
                );
            }
        }
    }
}

#[test]
fn lstm_stats_accumulate_and_survive_io() {
    let comp = make("type=LstmNonlinearityComponent cell-dim=3");
    let x = lcg_matrix(4, 15, 3);
    let d = lcg_matrix(4, 6, 4);
    let mut upd = comp.clone_box();
    comp.backprop(Backprop {
        in_value: x.view(),
        out_value: empty().view(),
        to_update: Some(upd.as_mut()),
        ..Backprop::new(d.view(), None, &mut compnet::random::seeded_rng(0))
    });
    let lstm = upd
        .as_any()
        .downcast_ref::<compnet::nnet::component::lstm::LstmNonlinearityComponent>()
        .expect("lstm");
    assert_eq!(lstm.count(), 4.0);
    // The i-gate value average of unit 0 is the mean of σ(i_part + w_ic c_prev).
    // The parameters of `comp`: `upd` took a (tiny) SGD step.
    let w = comp
        .as_any()
        .downcast_ref::<compnet::nnet::component::lstm::LstmNonlinearityComponent>()
        .expect("lstm")
        .params();
    let want: f64 = (0..4)
        .map(|r| {
            1.0 / (1.0 + (-(x.get(r, 0) as f64 + w.get(0, 0) as f64 * x.get(r, 12) as f64)).exp())
        })
        .sum::<f64>()
        / 4.0;
    let mut wtr = TokenWriter::new(false);
    upd.write(&mut wtr);
    let text = String::from_utf8(wtr.into_bytes()).expect("utf8");
    let after = text.split("<ValueAvg>").nth(1).expect("ValueAvg");
    let first: f64 = after
        .trim_start()
        .trim_start_matches('[')
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .expect("a number");
    assert!((first - want).abs() < 1e-6, "{first} vs {want}");
    assert!(text.contains("<Count> 4 "), "{text}");
    for binary in [false, true] {
        let mut w = TokenWriter::new(binary);
        upd.write(&mut w);
        let back = round_trip_bytes(&w.into_bytes(), binary, "lstm stats").expect("round trip");
        assert_eq!(back.info(), upd.info());
    }
    // Without statistics Kaldi's test (derivative sum / (1 + count) below the threshold)
    // repairs every unit, and counts it.
    assert!(
        upd.info()
            .contains("self-repaired-proportion=1, value-avg=[ "),
        "{}",
        upd.info()
    );
}

#[test]
fn lstm_self_repair_pushes_saturated_units() {
    // A component whose stats say every i-gate unit is saturated (deriv avg 0 < 0.05).
    let comp = make("type=LstmNonlinearityComponent cell-dim=2 self-repair-scale=0.01");
    let mut with_stats = comp.clone_box();
    // Huge i_part saturates the i gate: its derivative average becomes ~0.
    let mut x = Matrix::zeros(3, 10);
    for r in 0..3 {
        x.set(r, 0, 30.0);
        x.set(r, 1, 30.0);
    }
    let zero_d = Matrix::zeros(3, 4);
    comp.backprop(Backprop {
        in_value: x.view(),
        out_value: empty().view(),
        to_update: Some(with_stats.as_mut()),
        ..Backprop::new(zero_d.view(), None, &mut compnet::random::seeded_rng(0))
    });
    let mut g = Matrix::zeros(3, 10);
    with_stats.backprop(Backprop {
        in_value: x.view(),
        out_value: empty().view(),
        ..Backprop::new(
            zero_d.view(),
            Some(g.view_mut()),
            &mut compnet::random::seeded_rng(0),
        )
    });
    // Zero output derivative: only self-repair remains; σ ≈ 1 gives −(2σ − 1)·0.01 ≈ −0.01.
    assert!((g.get(0, 0) + 0.01).abs() < 1e-4, "{}", g.get(0, 0));
    // o-gate units (σ(0) = 0.5, derivative 0.25 ≥ 0.05) are not repaired.
    assert_eq!(g.get(0, 6), 0.0);
}

#[test]
fn lstm_rejects_malformed_files() {
    let good = b"<LstmNonlinearityComponent> <LearningRate> 0.001 <Params> [ 1 2 \n 3 4 \n 5 6 ] <ValueAvg> [ ] <DerivAvg> [ ] <SelfRepairConfig> [ 0.05 0.05 0.2 0.05 0.2 1e-05 1e-05 1e-05 1e-05 1e-05 ] <SelfRepairProb> [ 0 0 0 0 0 ] <Count> 0 </LstmNonlinearityComponent> ";
    // Empty stats matrices have the wrong shape: an error naming the field, not a panic.
    let mut r = TokenReader::new(good, false, "x.txt");
    let e = read_component(&mut r)
        .expect_err("bad stats shape")
        .to_string();
    assert!(e.contains("ValueAvg"), "{e}");
    let text = String::from_utf8_lossy(good).replace(
        "<ValueAvg> [ ] <DerivAvg> [ ]",
        "<ValueAvg> [ 0 0\n 0 0\n 0 0\n 0 0\n 0 0 ] <DerivAvg> [ 0 0\n 0 0\n 0 0\n 0 0\n 0 0 ]",
    );
    let ok =
        read_component(&mut TokenReader::new(text.as_bytes(), false, "lstm")).expect("valid file");
    assert_eq!(ok.input_dim(), 10);
    for cut in [10, 40, 80, 200, text.len() - 5] {
        let mut r = TokenReader::new(&text.as_bytes()[..cut], false, "cut.txt");
        assert!(
            read_component(&mut r).is_err(),
            "truncated at {cut} accepted"
        );
    }
    let bad_cfg = text.replace("1e-05 1e-05 ]", "1e-05 ]");
    let mut r = TokenReader::new(bad_cfg.as_bytes(), false, "x.txt");
    let e = read_component(&mut r)
        .expect_err("short config")
        .to_string();
    assert!(e.contains("SelfRepairConfig"), "{e}");
}

#[test]
fn backprop_truncation_scales_clips_and_zeroes() {
    let comp = make(
        "type=BackpropTruncationComponent dim=2 scale=0.5 clipping-threshold=3 zeroing-threshold=1 zeroing-interval=4 recurrence-interval=1",
    );
    assert!(!comp
        .properties()
        .has(compnet::nnet::component::Properties::SIMPLE));
    let x = Matrix::from_rows(&[vec![2.0, -4.0], vec![1.0, 1.0]]);
    let mut y = Matrix::zeros(2, 2);
    comp.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    assert_eq!(y.to_vec(), vec![1.0, -2.0, 0.5, 0.5]);
    // Rows at t = 3, 4, 5, 8: t = 4 and 8 cross a multiple of 4 from t − 1.
    let outs: Vec<Index> = [3, 4, 5, 8].iter().map(|&t| Index::new(0, t, 0)).collect();
    let pre = comp.precompute_indexes(&MiscComputationInfo::default(), &outs, &outs, true);
    let d = Matrix::from_rows(&[
        vec![6.0, 8.0],
        vec![6.0, 8.0],
        vec![0.6, 0.8],
        vec![1.0, 0.0],
    ]);
    let mut g = Matrix::zeros(4, 2);
    let mut upd = comp.clone_box();
    comp.backprop(Backprop {
        indexes: pre.as_deref(),
        in_value: empty().view(),
        out_value: empty().view(),
        to_update: Some(upd.as_mut()),
        ..Backprop::new(
            d.view(),
            Some(g.view_mut()),
            &mut compnet::random::seeded_rng(0),
        )
    });
    // Row 0: scaled to norm 5, clipped to 3. Row 1: same, then zeroed (boundary, norm 3 > 1).
    // Row 2: scaled (norm 0.5), untouched. Row 3: boundary but norm 0.5 < 1: kept.
    let want = [1.8, 2.4, 0.0, 0.0, 0.3, 0.4, 0.5, 0.0];
    for (a, b) in g.to_vec().iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{:?}", g.to_vec());
    }
    assert!(upd.info().contains("count=4,"), "{}", upd.info());
    assert!(
        upd.info().contains("count-zeroing-boundaries=2"),
        "{}",
        upd.info()
    );
    assert!(
        upd.info().contains("zeroed-proportion=0.5"),
        "{}",
        upd.info()
    );
    assert!(
        upd.info().contains("clipped-proportion=0.5"),
        "{}",
        upd.info()
    );
}

/// The numbers between `<tag>  [` and `]` in a Kaldi text model.
fn text_vector_after(text: &str, tag: &str) -> Vec<f64> {
    let rest = text.split(tag).nth(1).unwrap_or_else(|| panic!("no {tag}"));
    let inner = rest
        .split('[')
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap();
    inner
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// BatchNorm in test mode, on a trained Kaldi component with target-rms 0.5 and block-dim 8
/// (train/ng-batchnorm bn2): y = (x − StatsMean)·target-rms / √(StatsVar + epsilon), per
/// block column, as the golden README states. The statistics are parsed from after.txt
/// here; the component is read from after.raw. (No inference golden has target-rms ≠ 1.)
#[test]
fn batchnorm_test_mode_uses_the_stored_stats_and_target_rms() {
    let raw = std::fs::read(golden_path("train/ng-batchnorm/after.raw")).unwrap();
    let (_, _, body) = split_model_components(&raw)
        .into_iter()
        .find(|(n, _, _)| n == "bn2")
        .expect("bn2 in train/ng-batchnorm/after.raw");
    let mut c = read_component(&mut TokenReader::new(&body, true, "bn2")).unwrap();
    let txt = std::fs::read_to_string(golden_path("train/ng-batchnorm/after.txt")).unwrap();
    let bn2 = txt
        .split("<ComponentName> bn2 ")
        .nth(1)
        .and_then(|r| r.split("</BatchNormComponent>").next())
        .expect("bn2 in after.txt");
    assert!(bn2.contains("<BlockDim> 8 ") && bn2.contains("<TargetRms> 0.5 "));
    let (mean, var) = (
        text_vector_after(bn2, "<StatsMean>"),
        text_vector_after(bn2, "<StatsVar>"),
    );
    let (target_rms, epsilon) = (0.5f64, 0.001f64);
    c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
    let x = lcg_matrix(5, 24, 17);
    let mut y = Matrix::zeros(5, 24);
    c.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    for r in 0..5 {
        for j in 0..24 {
            let b = j % 8;
            let want = (x.get(r, j) as f64 - mean[b]) * target_rms / (var[b] + epsilon).sqrt();
            let got = y.get(r, j) as f64;
            // after.txt has 7 significant digits.
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "row {r} col {j}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn test_mode_behaviour_matches_the_golden_readme() {
    let x = lcg_matrix(5, 4, 9);
    // GeneralDropout and SpecAugmentTimeMask: identity in test mode.
    for cfg in [
        "type=GeneralDropoutComponent dim=4 dropout-proportion=0.5",
        "type=GeneralDropoutComponent dim=4 block-dim=2 continuous=true dropout-proportion=0.3",
        "type=SpecAugmentTimeMaskComponent dim=4 zeroed-proportion=0.5 time-mask-max-frames=2",
    ] {
        let mut c = make(cfg);
        c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
        let mut y = Matrix::zeros(5, 4);
        let memo = c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut compnet::random::seeded_rng(0),
        ));
        assert!(memo.is_none());
        assert_eq!(y.to_vec(), x.to_vec(), "{cfg}");
    }
    // DropoutMask: 1 − p, or 1 when continuous or p = 0.
    for (cfg, want) in [
        ("output-dim=3 dropout-proportion=0.25", 0.75),
        ("output-dim=3 dropout-proportion=0.25 continuous=true", 1.0),
        ("output-dim=3 dropout-proportion=0", 1.0),
    ] {
        let mut c = make(&format!("type=DropoutMaskComponent {cfg}"));
        c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
        let mut y = Matrix::zeros(4, 3);
        c.propagate(Propagate::new(
            Matrix::zeros(0, 3).view(),
            y.view_mut(),
            &mut compnet::random::seeded_rng(0),
        ));
        assert!(
            y.to_vec().iter().all(|&v| v == want),
            "{cfg}: {:?}",
            y.to_vec()
        );
    }
    // The golden fast-lstmp mask component is read in training mode; test mode gives 0.75.
    {
        let bytes = golden_component("fast-lstmp", "lstm1.dropout_mask", true).unwrap();
        let mut c = read_component(&mut TokenReader::new(&bytes, true, "model.raw")).expect("read");
        c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
        let mut y = Matrix::zeros(2, 3);
        c.propagate(Propagate::new(
            Matrix::zeros(0, 3).view(),
            y.view_mut(),
            &mut compnet::random::seeded_rng(0),
        ));
        assert_eq!(y.to_vec(), vec![0.75; 6]);
        let mut desired = vec![];
        c.get_input_indexes(
            &MiscComputationInfo::default(),
            &Index::new(0, 5, 0),
            &mut desired,
        );
        assert!(desired.is_empty());
        let mut used = vec![Index::new(0, 1, 0)];
        assert!(c.is_computable(
            &MiscComputationInfo::default(),
            &Index::new(0, 5, 0),
            &|_| false,
            Some(&mut used)
        ));
        assert!(used.is_empty());
    }
}

#[test]
fn dropout_mask_training_values() {
    let c = make("type=DropoutMaskComponent output-dim=3 dropout-proportion=0.25");
    let mut y = Matrix::zeros(400, 3);
    c.propagate(Propagate::new(
        Matrix::zeros(0, 3).view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    let v = y.to_vec();
    assert!(v.iter().all(|&x| x == 0.0 || x == 1.0));
    let zeros = v.iter().filter(|&&x| x == 0.0).count() as f64 / v.len() as f64;
    assert!((zeros - 0.25).abs() < 0.06, "{zeros}");
    let c = make("type=DropoutMaskComponent output-dim=3 dropout-proportion=0.2 continuous=true");
    c.propagate(Propagate::new(
        Matrix::zeros(0, 3).view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    assert!(y.to_vec().iter().all(|&x| (0.6..=1.4).contains(&x)));
}

#[test]
fn general_dropout_shares_masks_by_sequence_and_time_block() {
    let c =
        make("type=GeneralDropoutComponent dim=6 block-dim=3 time-period=2 dropout-proportion=0.5");
    // Two sequences, t = 0..4: time blocks {0,1}, {2,3}.
    let idx: Vec<Index> = (0..2)
        .flat_map(|n| (0..4).map(move |t| Index::new(n, t, 0)))
        .collect();
    let pre = c.precompute_indexes(&MiscComputationInfo::default(), &idx, &idx, true);
    let x = Matrix::from_vec(8, 6, vec![1.0; 48]);
    for _ in 0..5 {
        let mut y = Matrix::zeros(8, 6);
        let memo = c.propagate(Propagate {
            input: x.view(),
            output: y.view_mut(),
            indexes: pre.as_deref(),
            rng: &mut compnet::random::seeded_rng(0),
        });
        assert!(memo.is_some());
        for r in 0..8 {
            let row = y.row_to_vec(r);
            // Both blocks of a row share the mask; values are 0 or 1/(1−p) = 2.
            assert_eq!(row[..3], row[3..]);
            assert!(row.iter().all(|&v| v == 0.0 || v == 2.0), "{row:?}");
        }
        // Rows of the same (n, time block) share the mask.
        for (a, b) in [(0, 1), (2, 3), (4, 5), (6, 7)] {
            assert_eq!(y.row_to_vec(a), y.row_to_vec(b));
        }
        // Backprop applies the same mask.
        let d = Matrix::from_vec(8, 6, vec![3.0; 48]);
        let mut g = Matrix::zeros(8, 6);
        c.backprop(Backprop {
            indexes: pre.as_deref(),
            in_value: empty().view(),
            out_value: empty().view(),
            memo: memo.as_ref(),
            ..Backprop::new(
                d.view(),
                Some(g.view_mut()),
                &mut compnet::random::seeded_rng(0),
            )
        });
        let want: Vec<f32> = y.to_vec().iter().map(|v| v * 3.0).collect();
        assert_eq!(g.to_vec(), want);
    }
}

#[test]
fn spec_augment_time_mask_zeroes_whole_frames() {
    let c = make(
        "type=SpecAugmentTimeMaskComponent dim=3 zeroed-proportion=0.2 time-mask-max-frames=4",
    );
    // One sequence of 50 frames, given in reverse time order.
    let idx: Vec<Index> = (0..50).rev().map(|t| Index::new(0, t, 0)).collect();
    let pre = c.precompute_indexes(&MiscComputationInfo::default(), &idx, &idx, true);
    let x = Matrix::from_vec(50, 3, vec![1.0; 150]);
    let mut y = Matrix::zeros(50, 3);
    let mut data = x.clone();
    let memo = c.propagate_in_place(PropagateInPlace {
        data: data.view_mut(),
        indexes: pre.as_deref(),
        rng: &mut compnet::random::seeded_rng(0),
    });
    c.propagate(Propagate {
        input: x.view(),
        output: y.view_mut(),
        indexes: pre.as_deref(),
        rng: &mut compnet::random::seeded_rng(0),
    });
    assert_eq!(y, data, "in place and not: the same mask");
    // Kaldi's segments along time (rows in reverse order here): zeroed runs of at most
    // time-mask-max-frames = 4 frames, kept runs of at most 4 · 0.8 / 0.2 = 16.
    let zero: Vec<bool> = (0..50)
        .rev()
        .map(|r| {
            let row = y.row_to_vec(r);
            assert!(row == [0.0; 3] || row == [1.0; 3], "{row:?}");
            row == [0.0; 3]
        })
        .collect();
    let mut runs: Vec<(bool, usize)> = Vec::new();
    for &z in &zero {
        match runs.last_mut() {
            Some((v, n)) if *v == z => *n += 1,
            _ => runs.push((z, 1)),
        }
    }
    assert!(
        runs.iter().any(|r| r.0) && runs.iter().any(|r| !r.0),
        "{runs:?}"
    );
    for (z, n) in &runs {
        assert!(*n <= if *z { 4 } else { 16 }, "{runs:?}");
    }
    let d = Matrix::from_vec(50, 3, vec![2.0; 150]);
    let mut g = d.clone();
    c.backprop_in_place(BackpropInPlace {
        indexes: pre.as_deref(),
        in_value: empty().view(),
        out_value: empty().view(),
        memo: memo.as_ref(),
        ..BackpropInPlace::new(g.view_mut(), &mut compnet::random::seeded_rng(0))
    });
    for r in 0..50 {
        let want = if data.row_to_vec(r)[0] == 0.0 {
            0.0
        } else {
            2.0
        };
        assert!(g.row_to_vec(r).iter().all(|&v| v == want));
    }
}

#[test]
fn non_simple_components_in_place_agree() {
    let x = lcg_matrix(6, 4, 2);
    let c = make("type=BackpropTruncationComponent dim=4 scale=0.9");
    let mut y = Matrix::zeros(6, 4);
    c.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    let mut z = x.clone();
    c.propagate_in_place(PropagateInPlace::new(
        z.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    assert_eq!(y.to_vec(), z.to_vec());
    let d = lcg_matrix(6, 4, 3);
    let mut g = Matrix::zeros(6, 4);
    c.backprop(Backprop {
        in_value: empty().view(),
        out_value: empty().view(),
        ..Backprop::new(
            d.view(),
            Some(g.view_mut()),
            &mut compnet::random::seeded_rng(0),
        )
    });
    let mut gi = d.clone();
    c.backprop_in_place(BackpropInPlace {
        in_value: empty().view(),
        out_value: empty().view(),
        ..BackpropInPlace::new(gi.view_mut(), &mut compnet::random::seeded_rng(0))
    });
    assert_eq!(g.to_vec(), gi.to_vec());
    // Strided views work (no contiguity flag for dim == block-dim).
    let mut wide = Matrix::zeros(6, 7);
    let gd = make("type=GeneralDropoutComponent dim=4 dropout-proportion=0");
    gd.propagate(Propagate::new(
        x.view(),
        wide.sub_mut(0, 6, 1, 4),
        &mut compnet::random::seeded_rng(0),
    ));
    assert_eq!(wide.sub(0, 6, 1, 4).to_vec(), x.to_vec());
    let _ = (
        MatView::from_slice(&[], 0, 0),
        MatViewMut::from_slice(&mut [], 0, 0),
    );
}

#[test]
fn config_errors_name_the_problem() {
    for (cfg, key) in [
        ("type=LstmNonlinearityComponent cell-dim=0", "cell-dim"),
        ("type=LstmNonlinearityComponent", "cell-dim"),
        (
            "type=BackpropTruncationComponent dim=4 zeroing-interval=0",
            "zeroing-interval",
        ),
        (
            "type=GeneralDropoutComponent dim=6 block-dim=4",
            "block-dim",
        ),
        (
            "type=GeneralDropoutComponent dim=6 dropout-proportion=1.5",
            "dropout-proportion",
        ),
        (
            "type=DropoutMaskComponent output-dim=3 dropout-proportion=-0.1",
            "dropout-proportion",
        ),
        (
            "type=SpecAugmentTimeMaskComponent dim=3 time-mask-max-frames=0",
            "time-mask-max-frames",
        ),
    ] {
        let parsed = ConfigLine::parse_str(cfg).expect("parses");
        let e = new_component_from_config(&parsed, &mut compnet::random::seeded_rng(0))
            .expect_err(cfg)
            .to_string();
        assert!(e.contains(key), "{cfg}: {e}");
    }
}

/// BatchNorm with target-rms 0.5 in test mode (trained statistics, train/ng-batchnorm bn2):
/// the backward pass predicts the change of ⟨y, D⟩ under small input changes (train mode
/// with target-rms ≠ 1 is among the registry's test configs, through the generic harness).
#[test]
fn batchnorm_test_mode_with_target_rms_has_the_right_derivative() {
    let raw = std::fs::read(golden_path("train/ng-batchnorm/after.raw")).unwrap();
    let (_, _, body) = split_model_components(&raw)
        .into_iter()
        .find(|(n, _, _)| n == "bn2")
        .expect("bn2 in train/ng-batchnorm/after.raw");
    let mut c = read_component(&mut TokenReader::new(&body, true, "bn2")).unwrap();
    c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
    let (x, d) = (lcg_matrix(6, 24, 3), lcg_matrix(6, 24, 4));
    let f = |x: &Matrix| -> f64 {
        let mut y = Matrix::zeros(6, 24);
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut compnet::random::seeded_rng(0),
        ));
        (0..6)
            .flat_map(|r| (0..24).map(move |j| (r, j)))
            .map(|(r, j)| y.get(r, j) as f64 * d.get(r, j) as f64)
            .sum()
    };
    let mut y = Matrix::zeros(6, 24);
    let memo = c.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    let mut g = Matrix::zeros(6, 24);
    let mut rng = compnet::random::seeded_rng(0);
    c.backprop(Backprop {
        out_deriv: d.view(),
        in_deriv: Some(g.view_mut()),
        indexes: None,
        in_value: x.view(),
        out_value: y.view(),
        memo: memo.as_ref(),
        to_update: None,
        rng: &mut rng,
    });
    let dir = lcg_matrix(6, 24, 5);
    let eps = 1e-3f32;
    let (mut xp, mut xm) = (x.clone(), x.clone());
    xp.view_mut()
        .add_mat(eps, dir.view(), compnet::matrix::Trans::No);
    xm.view_mut()
        .add_mat(-eps, dir.view(), compnet::matrix::Trans::No);
    let measured = (f(&xp) - f(&xm)) / 2.0;
    let predicted: f64 = (0..6)
        .flat_map(|r| (0..24).map(move |j| (r, j)))
        .map(|(r, j)| eps as f64 * dir.get(r, j) as f64 * g.get(r, j) as f64)
        .sum();
    assert!(
        (predicted - measured).abs() <= 1e-3 * predicted.abs().max(1e-4),
        "predicted {predicted}, measured {measured}"
    );
    // Test mode is affine with slope target-rms / √(var + ε): not the identity.
    assert!(predicted.abs() > 1e-4);
}
