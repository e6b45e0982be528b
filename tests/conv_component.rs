//! TimeHeightConvolutionComponent: propagate against a direct, slow convolution (loops over
//! frames, heights, offsets and filters, written from the definition), numeric input- and
//! parameter-derivative checks through the component's own Index hooks, the natural-gradient
//! update, the split into row blocks under max-memory-mb, the Index hooks, round trips, and
//! bad configs and damaged files (errors, never panics).

use compnet::io::{TokenReader, TokenWriter};
use compnet::matrix::{Matrix, Trans};
use compnet::nnet::component::time_height_convolution::TimeHeightConvolutionComponent;
use compnet::nnet::component::{
    new_component_from_config, read_component, Component, MiscComputationInfo,
};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Index;
use compnet::testing::component::ParamCopies;
use compnet::testing::component::Step;
use compnet::testing::golden::{golden_component, round_trip_golden};
use compnet::testing::numeric::{dot, gauss, max_abs_diff};
use rand::Rng;

fn component(config: &str) -> Box<dyn Component> {
    new_component_from_config(
        &ConfigLine::parse_str(config).unwrap_or_else(|e| panic!("{config}: {e}")),
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap_or_else(|e| panic!("{config}: {e}"))
}

fn conv(c: &dyn Component) -> &TimeHeightConvolutionComponent {
    c.as_any()
        .downcast_ref::<TimeHeightConvolutionComponent>()
        .unwrap()
}

/// The convolution computed from its definition, in f64, one output value at a time.
fn reference(c: &dyn Component, input: &[Index], x: &Matrix, output: &[Index]) -> Matrix {
    let m = &conv(c).model;
    let w = conv(c).linear.to_vec();
    let b = conv(c).bias.to_vec();
    let wcols = m.num_filters_in * m.offsets.len();
    let mut y = Matrix::zeros(output.len(), m.output_dim());
    for (r, o) in output.iter().enumerate() {
        for h in 0..m.height_out {
            for j in 0..m.num_filters_out {
                let mut sum = b[j] as f64;
                for (k, &(dt, dh)) in m.offsets.iter().enumerate() {
                    let want = Index::new(o.n, o.t + dt, o.x);
                    let Some(row) = input.iter().position(|i| *i == want) else {
                        continue; // a missing frame reads zeros
                    };
                    let hi = (h * m.height_subsample_out) as i64 + dh as i64;
                    if hi < 0 || hi >= m.height_in as i64 {
                        continue; // padding
                    }
                    for i in 0..m.num_filters_in {
                        let xv = x.get(row, hi as usize * m.num_filters_in + i) as f64;
                        sum += w[j * wcols + k * m.num_filters_in + i] as f64 * xv;
                    }
                }
                y.set(r, h * m.num_filters_out + j, sum as f32);
            }
        }
    }
    y
}

/// Indexes for sequences `ns` and frames `ts`, n-major or t-major.
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

/// The outputs computable from `input` by the component's own rule (required offsets).
fn computable(c: &dyn Component, input: &[Index], candidates: &[Index]) -> Vec<Index> {
    let avail = |i: &Index| input.contains(i);
    candidates
        .iter()
        .copied()
        .filter(|o| c.is_computable(&MiscComputationInfo::default(), o, &avail, None))
        .collect()
}

/// Fixed configs covering the cases the task names: padding or not, height subsampling,
/// required-time-offsets (with missing frames), the split path, natural gradient on and off.
const CONFIGS: &[&str] = &[
    // Padding at both height edges, all offsets required.
    "num-filters-in=2 num-filters-out=3 height-in=6 height-out=6 height-offsets=-1,0,1 time-offsets=-1,0,1",
    // No padding: height-out smaller, offsets only inward.
    "num-filters-in=3 num-filters-out=2 height-in=6 height-out=4 height-offsets=0,1,2 time-offsets=0,2 use-natural-gradient=false",
    // Height subsampling with padding, required only t=0 (missing frames read zeros).
    "num-filters-in=2 num-filters-out=4 height-in=7 height-out=4 height-subsample-out=2 height-offsets=-1,0,1 time-offsets=-2,0,2 required-time-offsets=0",
    // An offsets list (not a product), tiny max-memory-mb: one output row per block.
    "num-filters-in=1 num-filters-out=3 height-in=5 height-out=5 offsets=-1,0;0,-1;0,0;0,1;1,0 max-memory-mb=0.00001",
    // Subsampling 3, required -1 and 0, a block size of a few rows.
    "num-filters-in=2 num-filters-out=2 height-in=9 height-out=3 height-subsample-out=3 height-offsets=0,1,2 time-offsets=-1,0,1 required-time-offsets=-1,0 max-memory-mb=0.0003",
];

/// Input and output Index sets for a config: sequences with gaps, both row orders.
fn layouts(c: &dyn Component) -> Vec<(Vec<Index>, Vec<Index>)> {
    let mut out = Vec::new();
    for (ns, ts, n_major) in [
        (vec![0], (-3..9).collect::<Vec<_>>(), false),
        (vec![0, 1], (-3..9).collect::<Vec<_>>(), true),
        // Frames 2 and 3 missing: non-required offsets read zeros there.
        (vec![0, 1, 2], vec![-3, -2, -1, 0, 1, 4, 5, 6, 7, 8], false),
    ] {
        let input = grid(&ns, &ts, n_major);
        let output = computable(c, &input, &grid(&ns, &(-3..9).collect::<Vec<_>>(), n_major));
        assert!(!output.is_empty());
        out.push((input, output));
    }
    out
}

#[test]
fn propagate_matches_the_direct_convolution() {
    for cfg in CONFIGS {
        let c = component(&format!("type=TimeHeightConvolutionComponent {cfg}"));
        for (seed, (input, output)) in layouts(c.as_ref()).into_iter().enumerate() {
            let x = gauss(input.len(), c.input_dim(), seed as u64 + 1);
            let step = Step::new(c.as_ref(), &input, &output);
            let y = step.forward(&x);
            let want = reference(c.as_ref(), &input, &x, &output);
            let diff = max_abs_diff(&y, &want);
            assert!(diff < 1e-4, "{cfg}, layout {seed}: max diff {diff}");
        }
    }
}

/// Random shapes: filters, heights, subsampling, offsets and required offsets drawn from a
/// seeded generator; every valid model is compared with the direct convolution.
#[test]
fn random_shapes_match_the_direct_convolution() {
    let mut rng = compnet::random::seeded_rng(17);
    let mut checked = 0;
    for trial in 0..200 {
        let fin = rng.random_range(1..4);
        let fout = rng.random_range(1..5);
        let hin: usize = rng.random_range(1..9);
        let s: usize = rng.random_range(1..4);
        let hs: Vec<i32> = (-2..=2).filter(|_| rng.random_bool(0.5)).collect();
        let ts: Vec<i32> = (-2..=2).filter(|_| rng.random_bool(0.4)).collect();
        if hs.is_empty() || ts.is_empty() {
            continue;
        }
        let hout = rng.random_range(1..=hin.div_ceil(s) + 1);
        let req = if rng.random_bool(0.5) {
            format!(
                " required-time-offsets={}",
                ts[rng.random_range(0..ts.len())]
            )
        } else {
            String::new()
        };
        let mem = if rng.random_bool(0.3) {
            " max-memory-mb=0.0001"
        } else {
            ""
        };
        let join = |v: &[i32]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let cfg = format!(
            "type=TimeHeightConvolutionComponent num-filters-in={fin} num-filters-out={fout} \
             height-in={hin} height-out={hout} height-subsample-out={s} height-offsets={} \
             time-offsets={}{req}{mem}",
            join(&hs),
            join(&ts)
        );
        let Ok(c) = new_component_from_config(
            &ConfigLine::parse_str(&cfg).unwrap(),
            &mut compnet::random::seeded_rng(trial),
        ) else {
            continue; // heights unused or unreachable: an invalid model, rejected
        };
        let input = grid(&[0, 1], &[-4, -3, -2, -1, 0, 2, 3, 4, 5], trial % 2 == 0);
        let output = computable(
            c.as_ref(),
            &input,
            &grid(&[0, 1], &(-4..6).collect::<Vec<_>>(), false),
        );
        if output.is_empty() {
            continue;
        }
        let x = gauss(input.len(), c.input_dim(), trial);
        let y = Step::new(c.as_ref(), &input, &output).forward(&x);
        let diff = max_abs_diff(&y, &reference(c.as_ref(), &input, &x, &output));
        assert!(diff < 1e-4, "{cfg}: max diff {diff}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} random models were valid");
}

#[test]
fn input_derivative_is_the_derivative() {
    for cfg in CONFIGS {
        let c = component(&format!("type=TimeHeightConvolutionComponent {cfg}"));
        for (seed, (input, output)) in layouts(c.as_ref()).into_iter().enumerate() {
            let seed = seed as u64 * 100;
            let x = gauss(input.len(), c.input_dim(), seed + 1);
            let step = Step::new(c.as_ref(), &input, &output);
            let d = gauss(output.len(), c.output_dim(), seed + 2);
            let g = step.backward_onto(&x, &d, Some(0.0), None);
            // BACKPROP_ADDS: a prefilled derivative is added to.
            let g1 = step.backward_onto(&x, &d, Some(1.0), None);
            let mut g1m = g1.clone();
            g1m.view_mut().add_const(-1.0);
            assert!(
                max_abs_diff(&g, &g1m) < 1e-5,
                "{cfg}: backprop does not add"
            );
            for k in 0..3 {
                let mut dir = gauss(x.num_rows(), x.num_cols(), seed + 10 + k);
                dir.view_mut().scale(1e-2);
                let mut xp = x.clone();
                xp.view_mut().add_mat(1.0, dir.view(), Trans::No);
                let mut xm = x.clone();
                xm.view_mut().add_mat(-1.0, dir.view(), Trans::No);
                let measured = (dot(&step.forward(&xp), &d) - dot(&step.forward(&xm), &d)) / 2.0;
                let predicted = dot(&g, &dir);
                assert!(
                    (measured - predicted).abs()
                        <= 0.01 * measured.abs().max(predicted.abs()) + 1e-4,
                    "{cfg}: predicted {predicted}, measured {measured}"
                );
            }
        }
    }
}

#[test]
fn parameter_gradient_is_the_derivative() {
    for cfg in CONFIGS {
        let c = component(&format!("type=TimeHeightConvolutionComponent {cfg}"));
        for (seed, (input, output)) in layouts(c.as_ref()).into_iter().enumerate() {
            let seed = seed as u64 * 100 + 7;
            let x = gauss(input.len(), c.input_dim(), seed);
            let d = gauss(output.len(), c.output_dim(), seed + 1);
            let step = Step::new(c.as_ref(), &input, &output);
            let mut grad = c.clone_box();
            grad.as_updatable_mut().unwrap().set_zero(true);
            step.backward_onto(&x, &d, Some(0.0), Some(grad.as_mut()));
            let u = c.as_updatable().unwrap();
            let n = u.num_parameters();
            let mut p0 = vec![0.0; n];
            u.copy_params_to(&mut p0);
            let mut gv = vec![0.0; n];
            grad.as_updatable().unwrap().copy_params_to(&mut gv);
            assert!(gv.iter().any(|&v| v != 0.0), "{cfg}: zero gradient");
            let dir = gauss(1, n, seed + 2).to_vec();
            let f = |sign: f32| {
                let mut c2 = c.clone_box();
                let p: Vec<f32> = p0
                    .iter()
                    .zip(&dir)
                    .map(|(a, b)| a + sign * 1e-2 * b)
                    .collect();
                c2.as_updatable_mut().unwrap().copy_params_from(&p);
                dot(&Step::new(c2.as_ref(), &input, &output).forward(&x), &d)
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

/// The split path (one output row per block) gives the same output, input derivative and
/// parameter gradient as one block.
#[test]
fn max_memory_split_changes_nothing() {
    let base = "type=TimeHeightConvolutionComponent num-filters-in=3 num-filters-out=4 \
                height-in=8 height-out=4 height-subsample-out=2 height-offsets=-1,0,1 \
                time-offsets=-1,0,1 use-natural-gradient=false";
    let big = component(base);
    let mut small = big.clone_box();
    let s = small
        .as_any_mut()
        .downcast_mut::<TimeHeightConvolutionComponent>()
        .unwrap();
    s.max_memory_mb = 1e-6;
    let input = grid(&[0, 1], &(0..12).collect::<Vec<_>>(), false);
    let output = computable(big.as_ref(), &input, &input);
    let x = gauss(input.len(), big.input_dim(), 3);
    let d = gauss(output.len(), big.output_dim(), 4);
    let run = |c: &dyn Component| {
        let step = Step::new(c, &input, &output);
        let mut grad = c.clone_box();
        grad.as_updatable_mut().unwrap().set_zero(true);
        let g = step.backward_onto(&x, &d, Some(0.0), Some(grad.as_mut()));
        let mut gv = vec![0.0; c.as_updatable().unwrap().num_parameters()];
        grad.as_updatable().unwrap().copy_params_to(&mut gv);
        (step.forward(&x), g, Matrix::from_vec(1, gv.len(), gv))
    };
    let (a, b) = (run(big.as_ref()), run(small.as_ref()));
    assert!(max_abs_diff(&a.0, &b.0) < 1e-5);
    assert!(max_abs_diff(&a.1, &b.1) < 1e-5);
    assert!(max_abs_diff(&a.2, &b.2) < 1e-4);
}

/// Natural gradient: the update differs from the plain one in direction but goes downhill,
/// and with natural gradient off the update is exactly lr × the gradient.
#[test]
fn natural_gradient_update_goes_downhill() {
    let cfg = "type=TimeHeightConvolutionComponent num-filters-in=4 num-filters-out=6 \
               height-in=10 height-out=5 height-subsample-out=2 height-offsets=-1,0,1 \
               time-offsets=-1,0,1 learning-rate=0.01";
    let c = component(cfg);
    let input = grid(&[0, 1, 2], &(0..20).collect::<Vec<_>>(), false);
    let output = computable(c.as_ref(), &input, &input);
    let step = Step::new(c.as_ref(), &input, &output);
    let mut gradient = c.clone_box();
    gradient.as_updatable_mut().unwrap().set_zero(true);
    let mut plain = c.clone_box();
    conv_mut(plain.as_mut()).use_natural_gradient = false;
    let mut ng = c.clone_box();
    let n = c.as_updatable().unwrap().num_parameters();
    let params = |c: &dyn Component| {
        let mut v = vec![0.0; n];
        c.as_updatable().unwrap().copy_params_to(&mut v);
        v
    };
    let p0 = params(c.as_ref());
    // Several minibatches, so the preconditioners' estimates form.
    for mb in 0..6 {
        let x = gauss(input.len(), c.input_dim(), 50 + mb);
        let d = gauss(output.len(), c.output_dim(), 60 + mb);
        gradient.as_updatable_mut().unwrap().set_zero(true);
        step.backward_onto(&x, &d, Some(0.0), Some(gradient.as_mut()));
        let before_plain = params(plain.as_ref());
        step.backward_onto(&x, &d, Some(0.0), Some(plain.as_mut()));
        let before_ng = params(ng.as_ref());
        step.backward_onto(&x, &d, Some(0.0), Some(ng.as_mut()));
        let g = params(gradient.as_ref());
        let delta = |after: Vec<f32>, before: Vec<f32>| -> Vec<f64> {
            after
                .iter()
                .zip(&before)
                .map(|(a, b)| (a - b) as f64)
                .collect()
        };
        let dp = delta(params(plain.as_ref()), before_plain);
        let dn = delta(params(ng.as_ref()), before_ng);
        for (a, b) in dp.iter().zip(&g) {
            assert!(
                (a - 0.01 * *b as f64).abs() < 1e-6,
                "plain update is not lr × gradient"
            );
        }
        let dotg = |v: &[f64]| v.iter().zip(&g).map(|(a, b)| a * *b as f64).sum::<f64>();
        let norm = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>().sqrt();
        assert!(
            dotg(&dn) > 0.0,
            "minibatch {mb}: NG step not along the gradient"
        );
        if mb == 5 {
            let cos = dotg(&dn) / norm(&dn) / norm(&dp) * 0.01;
            assert!(cos < 0.9999, "NG step has the plain direction (cos {cos})");
            // The preconditioner keeps the step's size (its scale factors).
            let ratio = norm(&dn) / norm(&dp);
            assert!((0.2..5.0).contains(&ratio), "NG step size ratio {ratio}");
        }
    }
    assert_ne!(p0, params(ng.as_ref()));
}

fn conv_mut(c: &mut dyn Component) -> &mut TimeHeightConvolutionComponent {
    c.as_any_mut()
        .downcast_mut::<TimeHeightConvolutionComponent>()
        .unwrap()
}

#[test]
fn index_hooks_follow_required_time_offsets() {
    let c = component(
        "type=TimeHeightConvolutionComponent num-filters-in=1 num-filters-out=1 height-in=3 \
         height-out=3 height-offsets=-1,0,1 time-offsets=-3,0,3 required-time-offsets=0,3",
    );
    let misc = MiscComputationInfo::default();
    let mut want = Vec::new();
    c.get_input_indexes(&misc, &Index::new(1, 5, 0), &mut want);
    assert_eq!(
        want,
        vec![
            Index::new(1, 2, 0),
            Index::new(1, 5, 0),
            Index::new(1, 8, 0)
        ]
    );
    let avail = |i: &Index| (0..10).contains(&i.t);
    let mut used = Vec::new();
    // t=1: -3 is missing (not required), 0 and 3 present.
    assert!(c.is_computable(&misc, &Index::new(0, 1, 0), &avail, Some(&mut used)));
    assert_eq!(used, vec![Index::new(0, 1, 0), Index::new(0, 4, 0)]);
    // t=7: +3 is required and missing.
    assert!(!c.is_computable(&misc, &Index::new(0, 7, 0), &avail, Some(&mut used)));
    assert!(used.is_empty());
    use compnet::nnet::TRange;
    assert_eq!(c.output_t_range(TRange::Span(0, 9)), TRange::Span(0, 6));
}

#[test]
fn config_defaults_and_round_trips() {
    let c = component(
        "type=TimeHeightConvolutionComponent num-filters-in=3 num-filters-out=4 height-in=20 \
         height-out=20 height-offsets=-1,0,1 time-offsets=-1,0,1",
    );
    let cc = conv(c.as_ref());
    // Kaldi's defaults, as cnn-small's model shows them (rank-in 14, rank-out 2).
    assert_eq!((cc.rank_in, cc.rank_out), (14, 2));
    assert_eq!((cc.max_memory_mb, cc.num_minibatches_history), (200.0, 4.0));
    assert_eq!(cc.model.required_time_offsets, vec![-1, 0, 1]);
    // As nnet3-init: a zero bias unless bias-stddev is given.
    assert_eq!(cc.bias.to_vec(), vec![0.0; 4]);
    assert_eq!((c.input_dim(), c.output_dim()), (60, 80));
    for binary in [false, true] {
        let mut w = TokenWriter::new(binary);
        c.write(&mut w);
        let bytes = w.into_bytes();
        let back = read_component(&mut TokenReader::new(&bytes, binary, "t")).unwrap();
        let mut w2 = TokenWriter::new(binary);
        back.write(&mut w2);
        assert_eq!(bytes, w2.into_bytes());
        assert_eq!(back.info(), c.info());
    }
    // Input heights no output reads: nnet3-init only warns, so they are accepted.
    component(
        "type=TimeHeightConvolutionComponent num-filters-in=1 num-filters-out=1 height-in=4 \
         height-out=2 height-offsets=0,1 time-offsets=0",
    );
    // offsets= is the same model as the product of the two lists.
    let a = component(
        "type=TimeHeightConvolutionComponent num-filters-in=1 num-filters-out=1 height-in=3 \
         height-out=3 offsets=1,0;-1,1;-1,0;0,0",
    );
    assert_eq!(
        conv(a.as_ref()).model.offsets,
        vec![(-1, 0), (-1, 1), (0, 0), (1, 0)]
    );
    // init-unit: the (0,0) block is the unit matrix, everything else zero.
    let u = component(
        "type=TimeHeightConvolutionComponent num-filters-in=2 num-filters-out=2 height-in=3 \
         height-out=3 height-offsets=-1,0,1 time-offsets=0 init-unit=true",
    );
    let x = gauss(4, 6, 1);
    let input = grid(&[0], &[0, 1, 2, 3], false);
    let y = Step::new(u.as_ref(), &input, &input).forward(&x);
    assert!(max_abs_diff(&x, &y) == 0.0);
}

#[test]
fn golden_cnn_components_round_trip_and_have_kaldi_properties() {
    for name in ["cnn1.conv", "cnn2.conv"] {
        if let Err(msg) = round_trip_golden("cnn-small", name) {
            panic!("{msg}");
        }
        let bytes = golden_component("cnn-small", name, true).unwrap();
        let c = read_component(&mut TokenReader::new(&bytes, true, name)).unwrap();
        // kUpdatable|kReordersIndexes|kBackpropAdds|kBackpropNeedsInput|kInputContiguous|
        // kOutputContiguous.
        assert_eq!(c.properties().0, 0x2 | 0x10 | 0x20 | 0x40 | 0x400 | 0x800);
    }
}

#[test]
fn bad_configs_are_errors() {
    let ok = "num-filters-in=2 num-filters-out=2 height-in=4 height-out=4";
    for cfg in [
        ok.to_string(),                                           // no offsets
        format!("{ok} height-offsets=0"),                         // no time offsets
        format!("{ok} height-offsets=0,0 time-offsets=0"),        // repeated
        format!("{ok} offsets=0,0;0,0"),                          // repeated
        format!("{ok} offsets=0,0;1"),                            // not a pair
        format!("{ok} offsets=0,0 time-offsets=0"),               // both forms
        format!("{ok} height-offsets=0 time-offsets=0,1 required-time-offsets=2"),
        format!("{ok} height-offsets=0 time-offsets=0 max-memory-mb=0"),
        format!("{ok} height-offsets=0 time-offsets=0 num-minibatches-history=1"),
        format!("{ok} height-offsets=0 time-offsets=0 rank-in=0"),
        format!("{ok} height-offsets=0 time-offsets=0 alpha-out=-1"),
        "num-filters-in=2 num-filters-out=3 height-in=4 height-out=4 height-offsets=0 time-offsets=0 init-unit=true".into(),
        format!("{ok} height-offsets=1 time-offsets=0 init-unit=true"),
        format!("{ok} height-offsets=0 time-offsets=0 bogus=1"),
        // Output height 0 reads an input height only through the non-required t = -1
        // (nnet3-init refuses this too).
        "num-filters-in=1 num-filters-out=1 height-in=2 height-out=2 offsets=-1,1;0,-1 required-time-offsets=0".into(),
        // Output height 3 reads only heights past the top.
        "num-filters-in=1 num-filters-out=1 height-in=2 height-out=4 height-offsets=0 time-offsets=0".into(),
        "num-filters-in=0 num-filters-out=1 height-in=2 height-out=2 height-offsets=0 time-offsets=0".into(),
        "num-filters-in=1 num-filters-out=1 height-in=2 height-out=2 height-subsample-out=0 height-offsets=0 time-offsets=0".into(),
        // Sizes past the memory limit are refused before anything is allocated.
        "num-filters-in=2000000000 num-filters-out=2000000000 height-in=1 height-out=1 height-offsets=0 time-offsets=0".into(),
        "num-filters-in=60000 num-filters-out=60000 height-in=1 height-out=1 height-offsets=0 time-offsets=0".into(),
    ] {
        let line = format!("type=TimeHeightConvolutionComponent {cfg}");
        let r = ConfigLine::parse_str(&line).map_err(|e| e.to_string()).and_then(|l| {
            new_component_from_config(&l, &mut compnet::random::seeded_rng(0))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        assert!(r.is_err(), "{line} accepted");
    }
}

/// Every truncation of the golden component, and single-byte damage at every position of
/// its text and binary forms, gives an error or a component; never a panic.
#[test]
fn damaged_files_are_errors_never_panics() {
    for binary in [false, true] {
        let bytes = golden_component("cnn-small", "cnn2.conv", binary).unwrap();
        for len in 0..bytes.len() {
            let r = std::panic::catch_unwind(|| {
                read_component(&mut TokenReader::new(&bytes[..len], binary, "t")).is_err()
            });
            assert!(r.is_ok(), "panic reading {len} bytes (binary {binary})");
            assert!(
                r.unwrap(),
                "truncation to {len} bytes accepted (binary {binary})"
            );
        }
        for pos in 0..bytes.len() {
            for v in [0u8, b'9', 0xff, b'-'] {
                let mut b = bytes.clone();
                b[pos] = v;
                let r = std::panic::catch_unwind(|| {
                    let read = read_component(&mut TokenReader::new(&b, binary, "t"));
                    // Whatever was accepted must be usable (at sizes a test can allocate: a
                    // damaged height can make a valid model with rows of millions of values).
                    if let Some(c) = read
                        .ok()
                        .filter(|c| c.input_dim() + c.output_dim() < 100_000)
                    {
                        let input = grid(&[0], &(0..6).collect::<Vec<_>>(), false);
                        let out = computable(c.as_ref(), &input, &input);
                        let x = gauss(input.len(), c.input_dim(), 1);
                        Step::new(c.as_ref(), &input, &out).forward(&x);
                    }
                });
                assert!(
                    r.is_ok(),
                    "panic with byte {pos} set to {v} (binary {binary})"
                );
            }
        }
    }
    // A model file that passes the token syntax but describes an invalid model.
    let text = "<TimeHeightConvolutionComponent> <LearningRate> 0.001 <Model> <ConvolutionModel> <NumFiltersIn> 1 <NumFiltersOut> 1 <HeightIn> 2 <HeightOut> 4 <HeightSubsampleOut> 1 <Offsets> [ 0,0 ]\n<RequiredTimeOffsets> [ 0 ]\n</ConvolutionModel> <LinearParams> [\n 1 ]\n<BiasParams> [ 0 ]\n<MaxMemoryMb> 200 <UseNaturalGradient> T <NumMinibatchesHistory> 4 <AlphaInOut> 4 4 <RankInOut> 1 1 </TimeHeightConvolutionComponent> ";
    let err = read_component(&mut TokenReader::new(text.as_bytes(), false, "t")).unwrap_err();
    assert!(err.to_string().contains("output height"), "{err}");
    let text = text
        .replace("<HeightOut> 4", "<HeightOut> 2")
        .replace("[\n 1 ]", "[\n 1 2 ]");
    let err = read_component(&mut TokenReader::new(text.as_bytes(), false, "t")).unwrap_err();
    assert!(err.to_string().contains("1x1 parameter matrix"), "{err}");
}

/// The trainer on Kaldi's cnn-small model (natural gradient, max-change 0.75 and 1.5 as the
/// model file has them): fifty steps on one example of two 12-frame sequences raise the
/// objective well, and both convolutions' parameters move.
#[test]
fn trainer_learns_through_the_golden_cnn() {
    use compnet::io::egs::{NnetExample, NnetIo};
    use compnet::io::GeneralMatrix;
    use compnet::nnet::Nnet;
    use compnet::train::{
        NnetComputeProb, NnetComputeProbOptions, NnetTrainer, NnetTrainerOptions,
    };
    let path = compnet::testing::golden::golden_path("cases/cnn-small/model.raw");
    let mut nnet = Nnet::read_model_file(path.to_str().unwrap()).unwrap().nnet;
    // Context 2/2: inputs t = -2..14 give outputs t = 0..12.
    let inputs: Vec<Index> = grid(&[0, 1], &(-2..14).collect::<Vec<_>>(), false);
    let outputs: Vec<Index> = grid(&[0, 1], &(0..12).collect::<Vec<_>>(), false);
    let mut targets = Matrix::zeros(outputs.len(), 16);
    for r in 0..outputs.len() {
        targets.set(r, (r * 5) % 16, 1.0);
    }
    let eg = NnetExample {
        io: vec![
            NnetIo {
                name: "input".into(),
                indexes: inputs.clone(),
                features: GeneralMatrix::Full(gauss(inputs.len(), 20, 3)),
            },
            NnetIo {
                name: "output".into(),
                indexes: outputs,
                features: GeneralMatrix::Full(targets),
            },
        ],
    };
    let objective = |nnet: &Nnet| {
        let mut p = NnetComputeProb::new(NnetComputeProbOptions::default(), nnet);
        p.compute(&eg).expect("compute-prob");
        p.objective("output").unwrap().tot_objf / 24.0
    };
    let conv_params = |nnet: &Nnet| -> Vec<Vec<f32>> {
        nnet.components
            .iter()
            .filter(|c| c.type_name() == "TimeHeightConvolutionComponent")
            .map(|c| {
                let u = c.as_updatable().unwrap();
                let mut v = vec![0.0; u.num_parameters()];
                u.copy_params_to(&mut v);
                v
            })
            .collect()
    };
    nnet.set_learning_rate(0.01);
    let (first, p0) = (objective(&nnet), conv_params(&nnet));
    {
        let opts = NnetTrainerOptions {
            srand: 1,
            print_interval: 1000,
            ..Default::default()
        };
        let mut t = NnetTrainer::new(opts, &mut nnet).unwrap();
        for _ in 0..50 {
            t.train(&eg).unwrap();
        }
    }
    let (last, p1) = (objective(&nnet), conv_params(&nnet));
    assert_eq!(p0.len(), 2);
    for (a, b) in p0.iter().zip(&p1) {
        assert!(a != b, "a convolution did not train");
    }
    assert!(
        last > first + 0.5,
        "objective went from {first} to {last} only"
    );
}
