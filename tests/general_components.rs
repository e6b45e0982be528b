//! General (non-simple) components: TdnnComponent, StatisticsExtraction/PoolingComponent,
//! ConstantComponent. Byte-exact round trips and info lines against Kaldi's golden models;
//! propagate against independent per-Index reference computations; numeric derivative checks
//! of backprop (inputs and parameters) through the components' own Index hooks.

use compnet::io::TokenReader;
use compnet::matrix::Matrix;
use compnet::nnet::component::{
    new_component_from_config, read_component, Backprop, Component, MiscComputationInfo, Propagate,
};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Index;
use compnet::testing::component::ParamCopies;
use compnet::testing::component::Step;
use compnet::testing::golden::{
    check_golden_info, golden_component, golden_path, round_trip_golden,
};
use compnet::testing::numeric::{dot, gauss, max_abs_diff};
use std::collections::HashMap;

fn component(config: &str) -> Box<dyn Component> {
    new_component_from_config(
        &ConfigLine::parse_str(config).unwrap(),
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap()
}

/// Pooling does not differentiate its count column (nor does Kaldi): column 0 is left out of
/// the numeric checks.
fn pooling_count(c: &dyn Component) -> Vec<usize> {
    if c.type_name() == "StatisticsPoolingComponent" {
        vec![0]
    } else {
        Vec::new()
    }
}

// ------------------------------------------------------------------ golden models

#[test]
fn golden_round_trips_and_info_lines() {
    for (case, name) in [
        ("tdnn-component", "tdnn1"),
        ("tdnn-component", "tdnn2"),
        ("tdnnf", "tdnnf2.linear"),
        ("tdnnf", "tdnnf2.affine"),
        ("tdnnf", "tdnnf3.linear"),
        ("xvector-small", "stats-extraction-12-12"),
        ("xvector-small", "stats-pooling-12-12"),
        ("lstm-primitives", "c0"),
    ] {
        if let Err(msg) = round_trip_golden(case, name) {
            panic!("{msg}");
        }
        if let Err(msg) = check_golden_info(case, name) {
            panic!("{msg}");
        }
    }
}

#[test]
fn golden_tdnn_has_kaldi_properties() {
    let bytes = golden_component("tdnn-component", "tdnn2", true).unwrap();
    let c = read_component(&mut TokenReader::new(&bytes, true, "tdnn2")).unwrap();
    // No bias: kUpdatable|kReordersIndexes|kBackpropAdds|kBackpropNeedsInput|kPropagateAdds.
    assert_eq!(c.properties().0, 0x2 | 0x10 | 0x20 | 0x40 | 0x8);
    assert_eq!((c.input_dim(), c.output_dim()), (32, 16));
    let c = component("type=TdnnComponent input-dim=3 output-dim=2 time-offsets=0");
    assert_eq!(c.properties().0, 0x2 | 0x10 | 0x20 | 0x40);
}

#[test]
fn bad_configs_and_files_are_errors() {
    for cfg in [
        "type=TdnnComponent input-dim=3 output-dim=2",
        "type=TdnnComponent input-dim=3 output-dim=2 time-offsets=0,0",
        "type=StatisticsExtractionComponent input-dim=3 input-period=2 output-period=3",
        "type=StatisticsPoolingComponent input-dim=9 left-context=0 right-context=0",
        "type=StatisticsPoolingComponent input-dim=9 input-period=3 left-context=2 right-context=3",
        "type=StatisticsPoolingComponent input-dim=8 left-context=2 right-context=3",
        "type=ConstantComponent output-dim=0",
    ] {
        assert!(
            new_component_from_config(
                &ConfigLine::parse_str(cfg).unwrap(),
                &mut compnet::random::seeded_rng(0)
            )
            .is_err(),
            "{cfg} accepted"
        );
    }
    for text in [
        "<TdnnComponent> <LearningRate> 0.001 <TimeOffsets> [ -1 0 ] <LinearParams> [\n 1 2 3 ]\n <BiasParams> [ ] <OrthonormalConstraint> 0 <UseNaturalGradient> T <NumSamplesHistory> 2000 <AlphaInOut> 4 4 <RankInOut> 2 2 </TdnnComponent> ",
        "<StatisticsPoolingComponent> <InputDim> 9 <InputPeriod> 3 <LeftContext> 2 <RightContext> 3 <NumLogCountFeatures> 0 <OutputStddevs> T <VarianceFloor> 1e-10 </StatisticsPoolingComponent> ",
        "<StatisticsExtractionComponent> <InputDim> 4 <InputPeriod> 0 <OutputPeriod> 3 <IncludeVarinance> T </StatisticsExtractionComponent> ",
        "<ConstantComponent> <LearningRate> 0.001 <Output> [ ] <IsUpdatable> T <UseNaturalGradient> T </ConstantComponent> ",
        "<StatisticsPoolingComponent> <InputDim> 9 <InputPeriod> 1 <LeftContext> 2147483647 <RightContext> 2147483647 <NumLogCountFeatures> 0 <OutputStddevs> T <VarianceFloor> 1e-10 </StatisticsPoolingComponent> ",
        "<StatisticsExtractionComponent> <InputDim> 4 <InputPeriod> 1 <OutputPeriod> 2147483647 <IncludeVarinance> T </StatisticsExtractionComponent> ",
    ] {
        let mut r = TokenReader::new(text.as_bytes(), false, "t");
        assert!(read_component(&mut r).is_err(), "{text} accepted");
    }
}

// ------------------------------------------------------------------ TdnnComponent

/// Indexes for sequences `ns` and frames `ts`, in (t, n) order unless `n_major`.
fn grid(ns: &[i32], ts: &[i32], n_major: bool) -> Vec<Index> {
    let mut v = Vec::new();
    if n_major {
        for &n in ns {
            for &t in ts {
                v.push(Index::new(n, t, 0));
            }
        }
    } else {
        for &t in ts {
            for &n in ns {
                v.push(Index::new(n, t, 0));
            }
        }
    }
    v
}

/// Tdnn output computed row by row from the weights, independent of the component's code.
fn tdnn_reference(c: &dyn Component, input: &[Index], x: &Matrix, output: &[Index]) -> Matrix {
    let tdnn = c
        .as_any()
        .downcast_ref::<compnet::nnet::component::tdnn::TdnnComponent>()
        .unwrap();
    let (id, od) = (c.input_dim(), c.output_dim());
    let pos: HashMap<Index, usize> = input.iter().enumerate().map(|(i, x)| (*x, i)).collect();
    let mut y = Matrix::zeros(output.len(), od);
    for (r, o) in output.iter().enumerate() {
        for j in 0..od {
            let mut s = tdnn.bias_params.to_vec().get(j).copied().unwrap_or(0.0) as f64;
            for (k, &off) in tdnn.time_offsets.iter().enumerate() {
                let xi = x.row_to_vec(pos[&Index::new(o.n, o.t + off, o.x)]);
                for (c2, &xv) in xi.iter().enumerate() {
                    s += tdnn.linear_params.get(j, k * id + c2) as f64 * xv as f64;
                }
            }
            y.set(r, j, s as f32);
        }
    }
    y
}

#[test]
fn tdnn_matches_reference_on_varied_layouts() {
    let c = component("type=TdnnComponent input-dim=4 output-dim=3 time-offsets=-2,0,1");
    let c2 =
        component("type=TdnnComponent input-dim=4 output-dim=3 time-offsets=-3,0 use-bias=false");
    let cases: Vec<(Vec<Index>, Vec<Index>)> = vec![
        // contiguous frames, several sequences, t-major and n-major orders
        (
            grid(&[0, 1, 2], &(-3..9).collect::<Vec<_>>(), false),
            grid(&[0, 1, 2], &(0..6).collect::<Vec<_>>(), false),
        ),
        (
            grid(&[0, 1], &(-3..9).collect::<Vec<_>>(), true),
            grid(&[0, 1], &(0..6).collect::<Vec<_>>(), true),
        ),
        // subsampled outputs (gathered rows)
        (
            grid(&[0, 1], &(-3..12).collect::<Vec<_>>(), false),
            grid(&[0, 1], &[0, 3, 6, 9], false),
        ),
        // many sequences, subsampled outputs: runs of 20 rows
        (
            grid(
                &(0..20).collect::<Vec<_>>(),
                &(-3..8).collect::<Vec<_>>(),
                false,
            ),
            grid(&(0..20).collect::<Vec<_>>(), &[0, 3, 6], false),
        ),
        // one long sequence: single block
        (
            grid(&[0], &(-3..60).collect::<Vec<_>>(), false),
            grid(&[0], &(0..56).collect::<Vec<_>>(), false),
        ),
    ];
    // Kaldi only requires distinct offsets; block k still belongs to offset k.
    let c3 = component("type=TdnnComponent input-dim=4 output-dim=3 time-offsets=1,-3,0");
    for comp in [&c, &c2, &c3] {
        for (input, output) in &cases {
            let x = gauss(input.len(), 4, 3);
            let step = Step::new(comp.as_ref(), input, output);
            let y = step.forward(&x);
            let want = tdnn_reference(comp.as_ref(), input, &x, output);
            assert!(max_abs_diff(&y, &want) < 1e-4, "tdnn output differs");
            step.check_input_derivative(&x, 17, &pooling_count(step.c))
                .unwrap();
        }
    }
}

#[test]
fn tdnn_parameter_gradient_is_the_derivative() {
    for cfg in [
        "type=TdnnComponent input-dim=4 output-dim=3 time-offsets=-1,0,1",
        "type=TdnnComponent input-dim=4 output-dim=3 time-offsets=-3,0 use-bias=false",
    ] {
        let c = component(cfg);
        for (input, output) in [
            (
                grid(&[0, 1], &(-3..8).collect::<Vec<_>>(), false),
                grid(&[0, 1], &(0..7).collect::<Vec<_>>(), false),
            ),
            (
                grid(&[0, 1], &(-3..8).collect::<Vec<_>>(), false),
                grid(&[0, 1], &[0, 3, 6], false),
            ),
        ] {
            let x = gauss(input.len(), 4, 5);
            let step = Step::new(c.as_ref(), &input, &output);
            let d = gauss(output.len(), 3, 6);
            let mut grad = c.clone_box();
            grad.as_updatable_mut().unwrap().set_zero(true);
            step.backward(&x, &d, Some(grad.as_mut()));
            let u = c.as_updatable().unwrap();
            let n = u.num_parameters();
            let mut p0 = vec![0.0; n];
            u.copy_params_to(&mut p0);
            let mut gv = vec![0.0; n];
            grad.as_updatable().unwrap().copy_params_to(&mut gv);
            let dir = gauss(1, n, 9).to_vec();
            let f = |sign: f32| {
                let mut c2 = c.clone_box();
                let p: Vec<f32> = p0
                    .iter()
                    .zip(&dir)
                    .map(|(a, b)| a + sign * 1e-2 * b)
                    .collect();
                c2.as_updatable_mut().unwrap().copy_params_from(&p);
                let s2 = Step::new(c2.as_ref(), &input, &output);
                dot(&s2.forward(&x), &d)
            };
            let measured = (f(1.0) - f(-1.0)) / 2.0;
            let predicted: f64 = gv
                .iter()
                .zip(&dir)
                .map(|(a, b)| *a as f64 * *b as f64 * 1e-2)
                .sum();
            assert!(
                (measured - predicted).abs() <= 0.01 * measured.abs() + 1e-4,
                "{cfg}: predicted {predicted}, measured {measured}"
            );
        }
    }
}

#[test]
fn tdnn_index_hooks() {
    let c = component("type=TdnnComponent input-dim=2 output-dim=2 time-offsets=-1,2");
    let misc = MiscComputationInfo::default();
    let mut want = Vec::new();
    c.get_input_indexes(&misc, &Index::new(1, 5, 0), &mut want);
    assert_eq!(want, vec![Index::new(1, 4, 0), Index::new(1, 7, 0)]);
    let avail = |i: &Index| i.t >= 0 && i.t < 10;
    let mut used = Vec::new();
    assert!(c.is_computable(&misc, &Index::new(0, 1, 0), &avail, Some(&mut used)));
    assert_eq!(used, vec![Index::new(0, 0, 0), Index::new(0, 3, 0)]);
    assert!(!c.is_computable(&misc, &Index::new(0, 0, 0), &avail, Some(&mut used)));
    assert!(!c.is_computable(&misc, &Index::new(0, 8, 0), &avail, None));
}

// ------------------------------------------------------------------ statistics

/// [count, Σx, Σx²] then pooled [log-count, mean, stddev], computed per output Index in f64
/// directly from the frames (independent of the components' code).
fn stats_reference(
    frames: &HashMap<Index, Vec<f32>>,
    out: &Index,
    in_period: i32,
    out_period: i32,
    left: i32,
    right: i32,
    nlc: usize,
) -> Vec<f32> {
    let floor = 1e-10f64;
    let mut xs: Vec<&Vec<f32>> = Vec::new();
    let mut t = out.t - left;
    while t <= out.t + right {
        // the extraction group starting at t (t is a multiple of out_period here)
        let mut u = t;
        while u < t + out_period {
            if let Some(x) = frames.get(&Index::new(out.n, u, out.x)) {
                xs.push(x);
            }
            u += in_period;
        }
        t += out_period;
    }
    let d = xs[0].len();
    let c = xs.len() as f64;
    let mut res = vec![c.ln() as f32; nlc];
    let mean: Vec<f64> = (0..d)
        .map(|j| xs.iter().map(|x| x[j] as f64).sum::<f64>() / c)
        .collect();
    res.extend(mean.iter().map(|&m| m as f32));
    for j in 0..d {
        let var = xs.iter().map(|x| (x[j] as f64).powi(2)).sum::<f64>() / c - mean[j] * mean[j];
        res.push(var.max(floor).sqrt() as f32);
    }
    res
}

#[test]
fn statistics_pooling_matches_reference_with_partial_windows() {
    let ext = component(
        "type=StatisticsExtractionComponent input-dim=3 input-period=1 output-period=3 include-variance=true",
    );
    let pool = component(
        "type=StatisticsPoolingComponent input-dim=7 input-period=3 left-context=6 right-context=6 num-log-count-features=2 output-stddevs=true",
    );
    let misc = MiscComputationInfo::default();
    // Two sequences with different available frame ranges (only frames 2..=10 and 0..=4).
    let avail_frame = |i: &Index| {
        if i.n == 0 {
            (2..=10).contains(&i.t)
        } else {
            (0..=4).contains(&i.t)
        }
    };
    let frame_idx: Vec<Index> = (0..2)
        .flat_map(|n| (-2..14).map(move |t| Index::new(n, t, 0)))
        .filter(|i| avail_frame(i))
        .collect();
    let x = gauss(frame_idx.len(), 3, 21);
    let frames: HashMap<Index, Vec<f32>> = frame_idx
        .iter()
        .enumerate()
        .map(|(r, i)| (*i, x.row_to_vec(r)))
        .collect();

    // Which extraction outputs are computable, and which pooling outputs.
    let ext_out: Vec<Index> = (0..2)
        .flat_map(|n| (-1..5).map(move |k| Index::new(n, 3 * k, 0)))
        .filter(|o| ext.is_computable(&misc, o, &avail_frame, None))
        .collect();
    let ext_avail = |i: &Index| ext_out.contains(i);
    let pool_out: Vec<Index> = (0..2)
        .flat_map(|n| (0..4).map(move |k| Index::new(n, 3 * k, 0)))
        .filter(|o| pool.is_computable(&misc, o, &ext_avail, None))
        .collect();
    assert_eq!(pool_out.len(), 8);
    assert!(!pool.is_computable(&misc, &Index::new(0, 1, 0), &ext_avail, None));

    // Inputs of each step = union of the used inputs (as the compiler builds them).
    let mut pool_in: Vec<Index> = Vec::new();
    for o in &pool_out {
        let mut u = Vec::new();
        assert!(pool.is_computable(&misc, o, &ext_avail, Some(&mut u)));
        pool_in.extend(u);
    }
    pool_in.sort();
    pool_in.dedup();
    let mut ext_in: Vec<Index> = Vec::new();
    for o in &pool_in {
        let mut u = Vec::new();
        assert!(ext.is_computable(&misc, o, &avail_frame, Some(&mut u)));
        ext_in.extend(u);
    }
    ext_in.sort();
    ext_in.dedup();

    let x_in = {
        let mut m = Matrix::zeros(ext_in.len(), 3);
        for (r, i) in ext_in.iter().enumerate() {
            m.copy_row_from_slice(r, &frames[i]);
        }
        m
    };
    let s1 = Step::new(ext.as_ref(), &ext_in, &pool_in);
    let stats = s1.forward(&x_in);
    let s2 = Step::new(pool.as_ref(), &pool_in, &pool_out);
    let y = s2.forward(&stats);
    for (r, o) in pool_out.iter().enumerate() {
        let want = stats_reference(&frames, o, 1, 3, 6, 6, 2);
        for (a, b) in y.row_to_vec(r).iter().zip(&want) {
            assert!(
                (a - b).abs() < 1e-4 * (1.0 + b.abs()),
                "pooled stats at {o}: {a} vs {b}"
            );
        }
    }
    s1.check_input_derivative(&x_in, 31, &pooling_count(s1.c))
        .unwrap();
    s2.check_input_derivative(&stats, 32, &pooling_count(s2.c))
        .unwrap();

    // A window holding one frame has variance 0 -> floored stddev sqrt(1e-10).
    let one = vec![Index::new(0, 0, 0)];
    let s1 = Step::new(ext.as_ref(), &one, &one);
    let st = s1.forward(&gauss(1, 3, 4));
    let s2 = Step::new(pool.as_ref(), &one, &one);
    let y = s2.forward(&st);
    for j in 5..8 {
        assert!((y.get(0, j) - 1e-5).abs() < 1e-7, "stddev {}", y.get(0, j));
    }
    assert_eq!(y.get(0, 0), 0.0); // log(1)
}

/// Pooled stddev over a window that holds one frame (variance exactly 0), for an extraction
/// and a pooling component with pooling input period 3: it must be √variance-floor.
fn single_frame_stddevs(ext: &dyn Component, pool: &dyn Component) -> Vec<f32> {
    let one = vec![Index::new(0, 0, 0)];
    let stats = Step::new(ext, &one, &one).forward(&gauss(1, ext.input_dim(), 4));
    let y = Step::new(pool, &one, &one).forward(&stats);
    let d = ext.input_dim();
    let nl = pool.output_dim() - 2 * d;
    (nl + d..nl + 2 * d).map(|j| y.get(0, j)).collect()
}

/// The variance floor, from the config default, an explicit config value and a Kaldi model
/// file (its value parsed from model.txt here, not through our reader): a floor off by any
/// factor moves √floor by its square root and fails.
#[test]
fn statistics_pooling_floors_the_variance_at_variance_floor() {
    let ext = component(
        "type=StatisticsExtractionComponent input-dim=3 input-period=1 output-period=3 include-variance=true",
    );
    let pool_cfg = "type=StatisticsPoolingComponent input-dim=7 input-period=3 left-context=6 right-context=6 num-log-count-features=1 output-stddevs=true";
    let golden_txt = std::fs::read_to_string(golden_path("cases/xvector-small/model.txt")).unwrap();
    let kaldi_floor: f32 = golden_txt
        .split("<VarianceFloor> ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a <VarianceFloor> in xvector-small/model.txt");
    let golden = |name: &str| {
        let bytes = golden_component("xvector-small", name, true).unwrap();
        read_component(&mut TokenReader::new(&bytes, true, name)).unwrap()
    };
    // (what, extraction, pooling, the floor it should apply)
    type Case = (&'static str, Box<dyn Component>, Box<dyn Component>, f32);
    let cases: Vec<Case> = vec![
        (
            "default (Kaldi: 1e-10)",
            ext.clone_box(),
            component(pool_cfg),
            1e-10,
        ),
        (
            "variance-floor=1e-4",
            ext.clone_box(),
            component(&format!("{pool_cfg} variance-floor=1e-4")),
            1e-4,
        ),
        (
            "xvector-small/model.raw",
            golden("stats-extraction-12-12"),
            golden("stats-pooling-12-12"),
            kaldi_floor,
        ),
    ];
    for (what, ext, pool, floor) in cases {
        let want = floor.sqrt();
        for sd in single_frame_stddevs(ext.as_ref(), pool.as_ref()) {
            assert!(
                (sd - want).abs() <= 1e-4 * want,
                "{what}: stddev {sd}, want sqrt({floor}) = {want}"
            );
        }
    }
}

#[test]
fn statistics_without_variance_or_log_counts() {
    let ext = component(
        "type=StatisticsExtractionComponent input-dim=2 output-period=2 include-variance=false",
    );
    let pool = component("type=StatisticsPoolingComponent input-dim=3 input-period=2 left-context=2 right-context=4 output-stddevs=false");
    assert_eq!((ext.output_dim(), pool.output_dim()), (3, 2));
    let ins = grid(&[0], &(0..10).collect::<Vec<_>>(), false);
    let mids = grid(&[0], &[0, 2, 4, 6, 8], false);
    let outs = grid(&[0], &[0, 4, 8], false);
    let x = gauss(10, 2, 8);
    let s1 = Step::new(ext.as_ref(), &ins, &mids);
    let st = s1.forward(&x);
    let s2 = Step::new(pool.as_ref(), &mids, &outs);
    let y = s2.forward(&st);
    // output t=4: frames 2..=9 (groups 2,4,6,8); t=8: frames 6..=9; t=0: frames 0..=5
    for (r, lo, hi) in [(0usize, 0usize, 6usize), (1, 2, 10), (2, 6, 10)] {
        for j in 0..2 {
            let m = (lo..hi).map(|t| x.get(t, j)).sum::<f32>() / (hi - lo) as f32;
            assert!((y.get(r, j) - m).abs() < 1e-5);
        }
    }
    s1.check_input_derivative(&x, 41, &pooling_count(s1.c))
        .unwrap();
    s2.check_input_derivative(&st, 42, &pooling_count(s2.c))
        .unwrap();
}

// ------------------------------------------------------------------ ConstantComponent

#[test]
fn constant_component_needs_no_input_and_learns() {
    let c = component("type=ConstantComponent output-dim=4 output-mean=1 output-stddev=0.5");
    let misc = MiscComputationInfo::default();
    let mut want = vec![Index::new(0, 0, 0)];
    c.get_input_indexes(&misc, &Index::new(0, 3, 0), &mut want);
    assert!(want.is_empty());
    let mut used = vec![Index::new(0, 0, 0)];
    assert!(c.is_computable(&misc, &Index::new(0, 3, 0), &|_| false, Some(&mut used)));
    assert!(used.is_empty());
    let empty = Matrix::zeros(0, 4);
    let mut y = Matrix::zeros(3, 4);
    c.propagate(Propagate::new(
        empty.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    let mut p = vec![0.0; 4];
    c.as_updatable().unwrap().copy_params_to(&mut p);
    for r in 0..3 {
        assert_eq!(y.row_to_vec(r), p);
    }
    let d = gauss(3, 4, 2);
    let mut g = c.clone_box();
    g.as_updatable_mut().unwrap().set_zero(true);
    c.backprop(Backprop {
        in_value: empty.view(),
        out_value: empty.view(),
        to_update: Some(g.as_mut()),
        ..Backprop::new(d.view(), None, &mut compnet::random::seeded_rng(0))
    });
    let mut gv = vec![0.0; 4];
    g.as_updatable().unwrap().copy_params_to(&mut gv);
    for (j, g) in gv.iter().enumerate() {
        let s: f32 = (0..3).map(|r| d.get(r, j)).sum();
        assert!((g - s).abs() < 1e-5);
    }
    let fixed = component("type=ConstantComponent output-dim=2 is-updatable=false");
    assert!(fixed.as_updatable().is_none());
    assert_eq!(fixed.properties().0, 0);
}

/// x-vector style pooling (every frame pools up to the end of the utterance): long windows
/// take the prefix-sum path of StatisticsPoolingComponent, which must agree with the
/// reference too.
#[test]
fn statistics_pooling_long_windows_match_reference() {
    let ext = component(
        "type=StatisticsExtractionComponent input-dim=4 input-period=1 output-period=1 include-variance=true",
    );
    let pool = component(
        "type=StatisticsPoolingComponent input-dim=9 input-period=1 left-context=0 right-context=10000 num-log-count-features=1 output-stddevs=true",
    );
    let misc = MiscComputationInfo::default();
    let frames_n = 120;
    let idx: Vec<Index> = (0..frames_n).map(|t| Index::new(0, t, 0)).collect();
    let x = gauss(idx.len(), 4, 77);
    let frames: HashMap<Index, Vec<f32>> = idx
        .iter()
        .enumerate()
        .map(|(r, i)| (*i, x.row_to_vec(r)))
        .collect();
    let avail = |i: &Index| i.n == 0 && (0..frames_n).contains(&i.t);
    let mut pool_in: Vec<Index> = Vec::new();
    for o in &idx {
        let mut u = Vec::new();
        assert!(pool.is_computable(&misc, o, &avail, Some(&mut u)));
        pool_in.extend(u);
    }
    pool_in.sort();
    pool_in.dedup();
    let s1 = Step::new(ext.as_ref(), &pool_in, &pool_in);
    let stats = s1.forward(&x);
    let s2 = Step::new(pool.as_ref(), &pool_in, &idx);
    let y = s2.forward(&stats);
    for (r, o) in idx.iter().enumerate() {
        let want = stats_reference(&frames, o, 1, 1, 0, frames_n, 1);
        for (a, b) in y.row_to_vec(r).iter().zip(&want) {
            assert!(
                (a - b).abs() < 1e-4 * (1.0 + b.abs()),
                "pooled stats at {o}: {a} vs {b}"
            );
        }
    }
}
