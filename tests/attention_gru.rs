//! RestrictedAttentionComponent, GruNonlinearityComponent and OutputGruNonlinearityComponent.
//!
//! Against Kaldi: byte-exact text and binary round trips and info lines of the components of
//! the `extras-attention-gru` golden model (its outputs are compared in `golden_compute.rs`).
//! Against independent f64 re-derivations of the equations: attention per output Index from
//! the input rows of its window (missing optional inputs as zeros, as Kaldi pads them), the
//! GRU cells row by row. Numeric derivative checks of attention through its own Index hooks
//! (reorder, precompute) on several shapes; the GRUs' go through the generic harness
//! (`tests/components.rs`). Statistics, self-repair, and bad configs and files.

use compnet::io::{TokenReader, TokenWriter};
use compnet::matrix::{Matrix, Trans};
use compnet::nnet::component::{
    new_component_from_config, read_component, Backprop, Component, MiscComputationInfo, Propagate,
};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Index;
use compnet::testing::component::ParamCopies;
use compnet::testing::component::Step;
use compnet::testing::golden::{check_golden_info, round_trip_golden};
use compnet::testing::numeric::{dot, gauss, max_abs_diff};
use std::collections::HashMap;

fn component(config: &str) -> Box<dyn Component> {
    new_component_from_config(
        &ConfigLine::parse_str(config).unwrap(),
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap_or_else(|e| panic!("{config}: {e}"))
}

// ------------------------------------------------------------------ golden models

#[test]
fn golden_round_trips_and_info_lines() {
    for name in ["att1.attention", "gru1.gru_nonlin", "opgru1.gru_nonlin"] {
        round_trip_golden("extras-attention-gru", name).unwrap_or_else(|e| panic!("{e}"));
        check_golden_info("extras-attention-gru", name).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn kaldi_property_flags_and_dimensions() {
    let a = component(
        "type=RestrictedAttentionComponent value-dim=8 key-dim=4 num-left-inputs=3 \
         num-right-inputs=1 time-stride=2 num-heads=2",
    );
    // kReordersIndexes|kBackpropNeedsInput|kPropagateAdds|kBackpropAdds|kStoresStats|kUsesMemo
    assert_eq!(a.properties().0, 0x10 | 0x40 | 0x8 | 0x20 | 0x200 | 0x1000);
    assert_eq!((a.input_dim(), a.output_dim()), (42, 26));
    let a = component(
        "type=RestrictedAttentionComponent value-dim=8 key-dim=4 num-left-inputs=3 \
         num-right-inputs=1 output-context=false",
    );
    assert_eq!((a.input_dim(), a.output_dim()), (21, 8));
    // kSimple|kUpdatable|kBackpropNeedsInput|kBackpropNeedsOutput|kBackpropAdds
    let g = component("type=GruNonlinearityComponent cell-dim=16");
    assert_eq!(g.properties().0, 0x1 | 0x2 | 0x40 | 0x80 | 0x20);
    assert_eq!((g.input_dim(), g.output_dim()), (64, 32));
    let g = component("type=GruNonlinearityComponent cell-dim=16 recurrent-dim=8");
    assert_eq!((g.input_dim(), g.output_dim()), (64, 32));
    assert_eq!(g.as_updatable().unwrap().num_parameters(), 128);
    let g = component("type=GruNonlinearityComponent cell-dim=10 recurrent-dim=4");
    assert_eq!(g.input_dim(), 38);
    let o = component("type=OutputGruNonlinearityComponent cell-dim=16");
    assert_eq!(o.properties().0, 0x1 | 0x2 | 0x40 | 0x80 | 0x20);
    assert_eq!((o.input_dim(), o.output_dim()), (48, 32));
    assert_eq!(o.as_updatable().unwrap().num_parameters(), 16);
}

#[test]
fn config_defaults_are_kaldis() {
    let a = component(
        "type=RestrictedAttentionComponent value-dim=8 key-dim=16 num-left-inputs=3 \
         num-right-inputs=1",
    );
    assert!(a.info().ends_with(
        "num-heads=1, time-stride=1, key-dim=16, value-dim=8, num-left-inputs=3, \
         num-right-inputs=1, context-dim=5, num-left-inputs-required=3, \
         num-right-inputs-required=1, output-context=true, key-scale=0.25"
    ));
    let g = component("type=GruNonlinearityComponent cell-dim=16");
    let info = g.info();
    assert!(info.contains("learning-rate=0.001"), "{info}");
    assert!(
        info.ends_with(
            "self-repair-threshold=0.2, self-repair-scale=1e-05, alpha=4, rank-in=20, \
             rank-out=80, update-period=4"
        ),
        "{info}"
    );
    let o = component("type=OutputGruNonlinearityComponent cell-dim=16");
    assert!(o.info().ends_with(
        "self-repair-threshold=0.2, self-repair-scale=1e-05, alpha=4, rank=8, update-period=10"
    ));
}

// ------------------------------------------------------------------ attention

/// Indexes for each (n, x) in `nx` and each t in `ts`, in an arbitrary (n-major) order.
fn indexes(nx: &[(i32, i32)], ts: impl Iterator<Item = i32> + Clone) -> Vec<Index> {
    let mut v = Vec::new();
    for &(n, x) in nx {
        for t in ts.clone() {
            v.push(Index::new(n, t, x));
        }
    }
    v
}

/// The inputs the graph would give a step computing `outputs` when the input node has
/// `available` Indexes: the union of the used inputs (all computable outputs kept).
fn step_for(c: &dyn Component, available: &[Index], wanted: &[Index]) -> (Vec<Index>, Vec<Index>) {
    let avail: std::collections::HashSet<Index> = available.iter().copied().collect();
    let misc = MiscComputationInfo::default();
    let mut inputs = std::collections::BTreeSet::new();
    let mut outputs = Vec::new();
    for o in wanted {
        let mut used = Vec::new();
        if c.is_computable(&misc, o, &|i| avail.contains(i), Some(&mut used)) {
            outputs.push(*o);
            inputs.extend(used);
        }
    }
    (inputs.into_iter().collect(), outputs)
}

/// Attention for output `o` computed in f64 from the definition, with absent inputs as zeros.
#[allow(clippy::too_many_arguments)]
fn attention_reference(
    rows: &HashMap<Index, Vec<f32>>,
    o: &Index,
    heads: usize,
    kd: usize,
    vd: usize,
    left: i32,
    right: i32,
    stride: i32,
    key_scale: f64,
    output_context: bool,
) -> Vec<f64> {
    let cd = (left + 1 + right) as usize;
    let ip = 2 * kd + vd + cd;
    let zero = vec![0.0f32; heads * ip];
    let row = |t: i32| rows.get(&Index::new(o.n, t, o.x)).unwrap_or(&zero);
    let q = row(o.t);
    let mut out = Vec::new();
    for h in 0..heads {
        let base = h * ip;
        let query_key = &q[base + kd + vd..base + kd + vd + kd];
        let query_ctx = &q[base + 2 * kd + vd..base + ip];
        let mut b = Vec::new();
        for (k, off) in (-left..=right).enumerate() {
            let r = row(o.t + off * stride);
            let key = &r[base..base + kd];
            let s: f64 = key
                .iter()
                .zip(query_key)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            b.push(key_scale * s + query_ctx[k] as f64);
        }
        let m = b.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = b.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        let c: Vec<f64> = e.iter().map(|x| x / z).collect();
        for j in 0..vd {
            let mut s = 0.0;
            for (k, off) in (-left..=right).enumerate() {
                s += c[k] * row(o.t + off * stride)[base + kd + j] as f64;
            }
            out.push(s);
        }
        if output_context {
            out.extend(&c);
        }
    }
    out
}

/// A test shape: config, sequences (n, x), available input t range, wanted output t values.
type Case = (String, Vec<(i32, i32)>, (i32, i32), Vec<i32>);

fn attention_cases() -> Vec<Case> {
    let base = "type=RestrictedAttentionComponent";
    vec![
        (
            format!("{base} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1"),
            vec![(0, 0)],
            (0, 12),
            (2..12).collect(),
        ),
        (
            format!(
                "{base} num-heads=2 key-dim=4 value-dim=8 num-left-inputs=3 num-right-inputs=1 \
                 time-stride=2 key-scale=0.5"
            ),
            vec![(0, 0), (1, 0)],
            (-3, 20),
            (3..18).collect(),
        ),
        // Fewer inputs required than used: edges see zero-padded windows.
        (
            format!(
                "{base} num-heads=3 key-dim=2 value-dim=3 num-left-inputs=2 num-right-inputs=2 \
                 time-stride=3 num-left-inputs-required=0 num-right-inputs-required=1 \
                 output-context=false"
            ),
            vec![(0, 0), (2, 1)],
            (0, 14),
            (0..14).collect(),
        ),
        (
            format!(
                "{base} key-dim=2 value-dim=2 num-left-inputs=0 num-right-inputs=3 \
                 num-right-inputs-required=0"
            ),
            vec![(0, 0), (1, 0), (2, 0)],
            (0, 7),
            (0..8).collect(),
        ),
        // Outputs every third frame only, stride 2: the grid is refined to step 1.
        (
            format!(
                "{base} num-heads=2 key-dim=2 value-dim=3 num-left-inputs=2 num-right-inputs=1 \
                 time-stride=2 num-left-inputs-required=1"
            ),
            vec![(0, 0)],
            (0, 20),
            (0..20).step_by(3).collect(),
        ),
    ]
}

fn attention_numbers(config: &str) -> (usize, usize, usize, i32, i32, i32, f64, bool) {
    let cfg = ConfigLine::parse_str(config).unwrap();
    let kd: usize = cfg.require("key-dim").unwrap();
    let key_scale: f64 = cfg.get_or("key-scale", 1.0 / (kd as f64).sqrt()).unwrap();
    (
        cfg.get_or("num-heads", 1usize).unwrap(),
        kd,
        cfg.require("value-dim").unwrap(),
        cfg.require("num-left-inputs").unwrap(),
        cfg.require("num-right-inputs").unwrap(),
        cfg.get_or("time-stride", 1).unwrap(),
        key_scale,
        cfg.get_or("output-context", true).unwrap(),
    )
}

#[test]
fn attention_matches_an_independent_reference_on_padded_windows() {
    for (k, (config, nx, (t0, t1), ts)) in attention_cases().into_iter().enumerate() {
        let c = component(&config);
        let available = indexes(&nx, t0..t1);
        let wanted = indexes(&nx, ts.iter().copied());
        let (input, output) = step_for(c.as_ref(), &available, &wanted);
        assert!(!output.is_empty(), "{config}: nothing computable");
        let x = gauss(input.len(), c.input_dim(), 100 + k as u64);
        let step = Step::new(c.as_ref(), &input, &output);
        let y = step.forward(&x);
        let rows: HashMap<Index, Vec<f32>> = input
            .iter()
            .enumerate()
            .map(|(r, i)| (*i, x.row_to_vec(r)))
            .collect();
        let (heads, kd, vd, left, right, stride, ks, oc) = attention_numbers(&config);
        for (r, o) in output.iter().enumerate() {
            let want = attention_reference(&rows, o, heads, kd, vd, left, right, stride, ks, oc);
            for (j, w) in want.iter().enumerate() {
                let got = y.get(r, j) as f64;
                assert!(
                    (got - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{config}: output {o} column {j}: {got} vs {w}"
                );
            }
        }
    }
}

#[test]
fn attention_input_derivative_is_the_derivative() {
    for (k, (config, nx, (t0, t1), ts)) in attention_cases().into_iter().enumerate() {
        let c = component(&config);
        let (input, output) = step_for(
            c.as_ref(),
            &indexes(&nx, t0..t1),
            &indexes(&nx, ts.iter().copied()),
        );
        let step = Step::new(c.as_ref(), &input, &output);
        let x = gauss(input.len(), c.input_dim(), 200 + k as u64);
        let d = gauss(output.len(), c.output_dim(), 300 + k as u64);
        let g = step.backward_onto(&x, &d, Some(0.0), None);
        // BACKPROP_ADDS: the derivative is added to what is there.
        let g1 = step.backward_onto(&x, &d, Some(1.0), None);
        let mut g1m = g1.clone();
        g1m.view_mut().add_const(-1.0);
        assert!(
            max_abs_diff(&g, &g1m) < 1e-5,
            "{config}: backprop does not add"
        );
        for j in 0..3 {
            let mut dir = gauss(x.num_rows(), x.num_cols(), 400 + 10 * k as u64 + j);
            dir.view_mut().scale(1e-2);
            let mut xp = x.clone();
            xp.view_mut().add_mat(1.0, dir.view(), Trans::No);
            let mut xm = x.clone();
            xm.view_mut().add_mat(-1.0, dir.view(), Trans::No);
            let measured = (dot(&step.forward(&xp), &d) - dot(&step.forward(&xm), &d)) / 2.0;
            let predicted = dot(&g, &dir);
            assert!(
                (measured - predicted).abs() <= 0.01 * measured.abs().max(predicted.abs()) + 1e-4,
                "{config}: predicted {predicted}, measured {measured}"
            );
        }
    }
}

#[test]
fn attention_propagate_adds_to_its_output() {
    let (config, nx, (t0, t1), ts) = attention_cases().swap_remove(1);
    let c = component(&config);
    let (input, output) = step_for(
        c.as_ref(),
        &indexes(&nx, t0..t1),
        &indexes(&nx, ts.iter().copied()),
    );
    let step = Step::new(c.as_ref(), &input, &output);
    let xin = step.permute_in(&gauss(input.len(), c.input_dim(), 7));
    let (y0, _) = step.propagate_onto(&xin, Some(0.0));
    let mut y1 = Matrix::zeros(step.output.len(), c.output_dim());
    y1.view_mut().set_const(1.0);
    c.propagate(Propagate {
        input: xin.view(),
        output: y1.view_mut(),
        indexes: step.pre.as_deref(),
        rng: &mut compnet::random::seeded_rng(0),
    });
    y1.view_mut().add_const(-1.0);
    assert!(max_abs_diff(&y0, &y1) < 1e-5);
}

#[test]
fn attention_context_at_utterance_edges() {
    let misc = MiscComputationInfo::default();
    // Frames 0..10 exist; window t-6, t-4, t-2, t, t+2 (stride 2, 3 left, 1 right).
    let avail = |i: &Index| (0..10).contains(&i.t);
    let all = component(
        "type=RestrictedAttentionComponent key-dim=2 value-dim=2 num-left-inputs=3 \
         num-right-inputs=1 time-stride=2",
    );
    let mut want = Vec::new();
    all.get_input_indexes(&misc, &Index::new(0, 6, 0), &mut want);
    let ts: Vec<i32> = want.iter().map(|i| i.t).collect();
    assert_eq!(ts, vec![0, 2, 4, 6, 8]);
    let computable = |c: &dyn Component| -> Vec<i32> {
        (-5..15)
            .filter(|&t| c.is_computable(&misc, &Index::new(0, t, 0), &avail, None))
            .collect()
    };
    assert_eq!(computable(all.as_ref()), vec![6, 7]);
    let some = component(
        "type=RestrictedAttentionComponent key-dim=2 value-dim=2 num-left-inputs=3 \
         num-right-inputs=1 time-stride=2 num-left-inputs-required=1 \
         num-right-inputs-required=0",
    );
    assert_eq!(computable(some.as_ref()), (2..10).collect::<Vec<_>>());
    // Used inputs: those of the window that exist; not computable → none.
    let mut used = Vec::new();
    assert!(some.is_computable(&misc, &Index::new(0, 3, 0), &avail, Some(&mut used)));
    assert_eq!(used.iter().map(|i| i.t).collect::<Vec<_>>(), vec![1, 3, 5]);
    assert!(!some.is_computable(&misc, &Index::new(0, 1, 0), &avail, Some(&mut used)));
    assert!(used.is_empty());
    // The graph builder's t bound agrees with is_computable.
    use compnet::nnet::TRange;
    assert_eq!(some.output_t_range(TRange::span(0, 9)), TRange::span(2, 9));
    assert_eq!(all.output_t_range(TRange::span(0, 9)), TRange::span(6, 7));
}

#[test]
fn attention_stats_are_entropy_and_posterior_sums() {
    let (config, nx, (t0, t1), ts) = attention_cases().swap_remove(1);
    let mut c = component(&config);
    let (input, output) = step_for(
        c.as_ref(),
        &indexes(&nx, t0..t1),
        &indexes(&nx, ts.iter().copied()),
    );
    let step = Step::new(c.as_ref(), &input, &output);
    let xin = step.permute_in(&gauss(input.len(), c.input_dim(), 9));
    let (y, memo) = step.propagate_onto(&xin, Some(0.0));
    // The context part of the output is c itself (output-context=true).
    let (heads, cd, vd) = (2, 5, 8);
    let mut entropy = [0.0f64; 2];
    let mut post = [[0.0f64; 5]; 2];
    for r in 0..y.num_rows() {
        for (h, (ph, eh)) in post.iter_mut().zip(entropy.iter_mut()).enumerate() {
            for (k, pk) in ph.iter_mut().enumerate() {
                let p = y.get(r, h * (vd + cd) + vd + k) as f64;
                *pk += p;
                *eh -= p * p.max(1e-20).ln();
            }
        }
    }
    let rows = y.num_rows() as f64;
    // Kaldi stores them on two minibatches in three: draw until some are stored.
    let mut rng = compnet::random::seeded_rng(3);
    let mut stored = 0;
    for _ in 0..12 {
        c.store_stats(xin.view(), y.view(), memo.as_ref(), &mut rng);
        let info = c.info();
        if let Some(p) = info.find("stats-count=") {
            let count: f64 = info[p + 12..].parse().unwrap();
            assert_eq!(count % rows, 0.0);
            stored = (count / rows) as usize;
        }
    }
    assert!(
        (4..12).contains(&stored),
        "stored {stored} of 12 minibatches"
    );
    let info = c.info();
    let ent = info.split(", entropy=").nth(1).unwrap();
    let vals: Vec<f64> = ent
        .split([',', ' ', '='])
        .filter_map(|s| s.parse().ok())
        .collect();
    for h in 0..heads {
        assert!((vals[h] - entropy[h] / rows).abs() < 1e-4, "{info}");
    }
    let p0 = info.split("posterior-stats[1]=").nth(1).unwrap();
    let p0: Vec<f64> = p0.split(',').take(cd).map(|s| s.parse().unwrap()).collect();
    for (got, sum) in p0.iter().zip(&post[1]) {
        assert!((got - sum / rows).abs() < 1e-4, "{info}");
    }
    // Statistics survive a write/read cycle, scale and add like Kaldi's.
    for binary in [false, true] {
        let mut w = TokenWriter::new(binary);
        c.write(&mut w);
        let bytes = w.into_bytes();
        let back = read_component(&mut TokenReader::new(&bytes, binary, "t")).unwrap();
        assert_eq!(back.info(), c.info());
    }
    let before = c.info();
    let copy = c.clone_box();
    c.add_stats(1.0, copy.as_ref());
    c.scale_stats(0.5);
    assert_eq!(c.info(), before);
    c.zero_stats();
    assert!(!c.info().contains("entropy"));
}

// ------------------------------------------------------------------ GRUs

/// GRU outputs computed row by row in f64 from the equations.
fn gru_reference(x: &Matrix, w_h: &Matrix, c: usize, r: usize) -> Matrix {
    let mut out = Matrix::zeros(x.num_rows(), 2 * c);
    for i in 0..x.num_rows() {
        let row = x.row_to_vec(i);
        let z = &row[0..c];
        let rr = &row[c..c + r];
        let hpart = &row[c + r..2 * c + r];
        let c_prev = &row[2 * c + r..3 * c + r];
        let s_prev = &row[row.len() - r..];
        for j in 0..c {
            let mut a = hpart[j] as f64;
            for k in 0..r {
                a += w_h.get(j, k) as f64 * (rr[k] as f64 * s_prev[k] as f64);
            }
            let h = a.tanh();
            out.set(i, j, h as f32);
            let ct = (1.0 - z[j] as f64) * h + z[j] as f64 * c_prev[j] as f64;
            out.set(i, c + j, ct as f32);
        }
    }
    out
}

fn forward(c: &dyn Component, x: &Matrix) -> Matrix {
    let mut y = Matrix::zeros(x.num_rows(), c.output_dim());
    c.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut compnet::random::seeded_rng(0),
    ));
    y
}

#[test]
fn gru_matches_the_equations() {
    for (cell, rec) in [(5usize, 5usize), (6, 3)] {
        let cfg = format!("type=GruNonlinearityComponent cell-dim={cell} recurrent-dim={rec}");
        let c = component(&cfg);
        let g = c
            .as_any()
            .downcast_ref::<compnet::nnet::component::gru::GruNonlinearityComponent>()
            .unwrap();
        let x = gauss(7, c.input_dim(), 11);
        let want = gru_reference(&x, g.w_h(), cell, rec);
        assert!(
            max_abs_diff(&forward(c.as_ref(), &x), &want) < 1e-5,
            "{cfg}"
        );
    }
}

#[test]
fn output_gru_matches_the_equations() {
    let c = component("type=OutputGruNonlinearityComponent cell-dim=6 param-mean=0.3");
    let w = c
        .as_any()
        .downcast_ref::<compnet::nnet::component::gru::OutputGruNonlinearityComponent>()
        .unwrap()
        .w_h()
        .to_vec();
    let x = gauss(5, 18, 12);
    let y = forward(c.as_ref(), &x);
    for i in 0..5 {
        for (j, &wj) in w.iter().enumerate() {
            let (z, hp, cp) = (
                x.get(i, j) as f64,
                x.get(i, 6 + j) as f64,
                x.get(i, 12 + j) as f64,
            );
            let h = (hp + wj as f64 * cp).tanh();
            assert!((y.get(i, j) as f64 - h).abs() < 1e-6);
            assert!((y.get(i, 6 + j) as f64 - ((1.0 - z) * h + z * cp)).abs() < 1e-6);
        }
    }
}

/// Backprop with a delta component of the same type: returns the input derivative.
fn backprop_with_delta(
    c: &dyn Component,
    delta: &mut dyn Component,
    x: &Matrix,
    seed: u64,
) -> Matrix {
    let y = forward(c, x);
    let d = gauss(x.num_rows(), c.output_dim(), 5);
    let mut g = Matrix::zeros(x.num_rows(), c.input_dim());
    let mut rng = compnet::random::seeded_rng(seed);
    c.backprop(Backprop {
        in_value: x.view(),
        out_value: y.view(),
        to_update: Some(delta),
        ..Backprop::new(d.view(), Some(g.view_mut()), &mut rng)
    });
    g
}

#[test]
fn gru_stats_and_self_repair_as_kaldi() {
    for cfg in [
        "type=GruNonlinearityComponent cell-dim=4 self-repair-scale=0.01",
        "type=OutputGruNonlinearityComponent cell-dim=4 self-repair-scale=0.01",
    ] {
        let c = component(cfg);
        let (cell, hpart_col) = (4, if cfg.contains("Output") { 4 } else { 8 });
        // Saturated tanh in cells 0 and 1 (large hpart): their derivative average is below
        // the 0.2 threshold, so they are repaired; cells 2, 3 are not.
        let mut x = gauss(20, c.input_dim(), 21);
        x.view_mut().scale(0.1);
        for i in 0..20 {
            x.set(i, hpart_col, 8.0);
            x.set(i, hpart_col + 1, -8.0);
        }
        let mut plain_delta = c.clone_box();
        plain_delta.as_updatable_mut().unwrap().set_zero(true);
        plain_delta
            .as_updatable_mut()
            .unwrap()
            .common_mut()
            .learning_rate = 0.0;
        // Find a seed where the stats are stored (probability 1/2) and one where not.
        let mut seen = [false, false];
        for seed in 0..20u64 {
            let mut delta = plain_delta.clone_box();
            let g = backprop_with_delta(c.as_ref(), delta.as_mut(), &x, seed);
            let info = delta.info();
            let stored = info.contains("count=20");
            let mut rng = compnet::random::seeded_rng(0);
            let y = forward(c.as_ref(), &x);
            let d = gauss(20, c.output_dim(), 5);
            let mut g0 = Matrix::zeros(20, c.input_dim());
            c.backprop(Backprop {
                in_value: x.view(),
                out_value: y.view(),
                ..Backprop::new(d.view(), Some(g0.view_mut()), &mut rng)
            });
            if stored {
                seen[0] = true;
                // 2 of 4 cells repaired in this minibatch.
                assert!(info.contains("self-repaired-proportion=0.025"), "{info}");
                // hpart's derivative gets -scale/0.5 · h for the repaired cells only.
                for i in 0..20 {
                    let h = y.get(i, 0) as f64;
                    let diff = (g.get(i, hpart_col) - g0.get(i, hpart_col)) as f64;
                    assert!(
                        (diff - (-0.02 * h)).abs() < 1e-4,
                        "{cfg}: {diff} vs {}",
                        -0.02 * h
                    );
                    let diff3 = g.get(i, hpart_col + 3) - g0.get(i, hpart_col + 3);
                    assert!(diff3.abs() < 1e-6, "{cfg}: unrepaired cell changed");
                }
                assert_eq!(cell, 4);
            } else {
                seen[1] = true;
                assert!(!info.contains("count="), "{info}");
                assert!(max_abs_diff(&g, &g0) < 1e-6);
            }
        }
        assert!(
            seen[0] && seen[1],
            "{cfg}: stats stored on every or no minibatch"
        );
    }
}

#[test]
fn gru_parameter_update_follows_the_gradient() {
    // A gradient holder (is_gradient) gets exactly the summed gradient; check against
    // central differences of the objective Σ d ⊙ y in the parameters.
    for cfg in [
        "type=GruNonlinearityComponent cell-dim=4 recurrent-dim=3 self-repair-scale=0",
        "type=OutputGruNonlinearityComponent cell-dim=4 self-repair-scale=0",
    ] {
        let c = component(cfg);
        let x = gauss(9, c.input_dim(), 31);
        let mut delta = c.clone_box();
        delta.as_updatable_mut().unwrap().set_zero(true);
        backprop_with_delta(c.as_ref(), delta.as_mut(), &x, 0);
        let d = gauss(9, c.output_dim(), 5);
        let n = c.as_updatable().unwrap().num_parameters();
        let mut grad = vec![0.0f32; n];
        delta.as_updatable().unwrap().copy_params_to(&mut grad);
        let mut p = vec![0.0f32; n];
        c.as_updatable().unwrap().copy_params_to(&mut p);
        for k in 0..n {
            let eval = |delta_k: f32| {
                let mut q = p.clone();
                q[k] += delta_k;
                let mut cc = c.clone_box();
                cc.as_updatable_mut().unwrap().copy_params_from(&q);
                dot(&forward(cc.as_ref(), &x), &d)
            };
            let measured = (eval(1e-2) - eval(-1e-2)) / 2e-2;
            assert!(
                (measured - grad[k] as f64).abs() <= 0.01 * measured.abs() + 1e-3,
                "{cfg}: parameter {k}: {} vs {measured}",
                grad[k]
            );
        }
    }
}

// ------------------------------------------------------------------ bad input

#[test]
fn bad_configs_and_files_are_errors() {
    let a = "type=RestrictedAttentionComponent";
    for cfg in [
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=2"),
        format!("{a} key-dim=0 value-dim=4 num-left-inputs=2 num-right-inputs=1"),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=0 num-right-inputs=0"),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=-1 num-right-inputs=2"),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1 time-stride=0"),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1 num-heads=0"),
        format!(
            "{a} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1 \
             num-left-inputs-required=3"
        ),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1 key-scale=2"),
        format!(
            "{a} key-dim=2000000 value-dim=2000000 num-left-inputs=2000000 num-right-inputs=1 \
             num-heads=2000000"
        ),
        format!("{a} key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1 bogus=1"),
        "type=GruNonlinearityComponent".into(),
        "type=GruNonlinearityComponent cell-dim=0".into(),
        "type=GruNonlinearityComponent cell-dim=4 recurrent-dim=5".into(),
        "type=GruNonlinearityComponent cell-dim=4 recurrent-dim=0".into(),
        "type=GruNonlinearityComponent cell-dim=4 self-repair-scale=-1".into(),
        "type=GruNonlinearityComponent cell-dim=4 rank-in=0".into(),
        "type=GruNonlinearityComponent cell-dim=2000000000".into(),
        "type=OutputGruNonlinearityComponent".into(),
        "type=OutputGruNonlinearityComponent cell-dim=4 rank=-2".into(),
        "type=OutputGruNonlinearityComponent cell-dim=4 update-period=0".into(),
        "type=OutputGruNonlinearityComponent cell-dim=4 self-repair-threshold=-0.1".into(),
    ] {
        let r = std::panic::catch_unwind(|| {
            new_component_from_config(
                &ConfigLine::parse_str(&cfg).unwrap(),
                &mut compnet::random::seeded_rng(0),
            )
            .is_err()
        });
        assert_eq!(r.ok(), Some(true), "{cfg} accepted or panicked");
    }
    let att = "<RestrictedAttentionComponent> <NumHeads> 2 <KeyDim> 4 <ValueDim> 8 \
               <NumLeftInputs> 3 <NumRightInputs> 1 <TimeStride> 2 <NumLeftInputsRequired> 3 \
               <NumRightInputsRequired> 1 <OutputContext> T <KeyScale> 0.5 <StatsCount> 0 \
               <EntropyStats>  [ ]\n<PosteriorStats>  [ ]\n</RestrictedAttentionComponent> ";
    // The good one reads, so each bad one below fails for its own change.
    read_component(&mut TokenReader::new(att.as_bytes(), false, "t")).unwrap();
    let gru = "<GruNonlinearityComponent> <LearningRate> 0.001 <CellDim> 2 <RecurrentDim> 1 \
               <w_h>  [\n  1 \n  2 ]\n<ValueAvg>  [ 0 0 ]\n<DerivAvg>  [ 0 0 ]\n\
               <SelfRepairTotal> 0 <Count> 0 <SelfRepairThreshold> 0.2 <SelfRepairScale> 1e-05 \
               <Alpha> 4 <RankInOut> 20 80 <UpdatePeriod> 4 </GruNonlinearityComponent> ";
    read_component(&mut TokenReader::new(gru.as_bytes(), false, "t")).unwrap();
    let ogru = "<OutputGruNonlinearityComponent> <LearningRate> 0.001 <CellDim> 2 \
                <w_h>  [ 1 2 ]\n<ValueAvg>  [ 0 0 ]\n<DerivAvg>  [ 0 0 ]\n<SelfRepairTotal> 0 \
                <Count> 0 <SelfRepairThreshold> 0.2 <SelfRepairScale> 1e-05 <Alpha> 4 <Rank> 8 \
                <UpdatePeriod> 10 </OutputGruNonlinearityComponent> ";
    read_component(&mut TokenReader::new(ogru.as_bytes(), false, "t")).unwrap();
    let bad = [
        att.replace("<NumHeads> 2", "<NumHeads> 0"),
        att.replace("<NumLeftInputs> 3", "<NumLeftInputs> -3"),
        att.replace("<NumLeftInputsRequired> 3", "<NumLeftInputsRequired> 4"),
        att.replace("<KeyScale> 0.5", "<KeyScale> 0"),
        att.replace("<KeyDim> 4", "<KeyDim> 2147483647"),
        att.replace("<EntropyStats>  [ ]", "<EntropyStats>  [ 1 2 3 ]"),
        att.replace("<PosteriorStats>  [ ]", "<PosteriorStats>  [\n 1 2 ]"),
        att.replace("<StatsCount> 0", "<StatsCount> -1"),
        att.replace("</RestrictedAttentionComponent> ", ""),
        gru.replace("<RecurrentDim> 1", "<RecurrentDim> 3"),
        gru.replace("<CellDim> 2", "<CellDim> 0"),
        gru.replace("<ValueAvg>  [ 0 0 ]", "<ValueAvg>  [ 0 ]"),
        gru.replace("<RankInOut> 20 80", "<RankInOut> 20 -1"),
        gru.replace("<w_h>  [\n  1 \n  2 ]", "<w_h>  [\n  1 2 ]"),
        gru.replace("<Count> 0", "<Count> -5"),
        ogru.replace("<w_h>  [ 1 2 ]", "<w_h>  [ 1 ]"),
        ogru.replace("<UpdatePeriod> 10", "<UpdatePeriod> 0"),
        ogru.replace("<SelfRepairScale> 1e-05", "<SelfRepairScale> -1"),
        ogru[..ogru.len() / 2].to_string(),
    ];
    for text in &bad {
        let r = std::panic::catch_unwind(|| {
            read_component(&mut TokenReader::new(text.as_bytes(), false, "t")).is_err()
        });
        assert_eq!(r.ok(), Some(true), "{text} accepted or panicked");
    }
}

// ------------------------------------------------------------------ trained model

/// Kaldi's model after one training pass (`train/attention-gru`), with attention entropy and
/// posterior statistics (doubles) and GRU statistics: copied like `nnet3-copy` in binary
/// and text (Kaldi's text dump), and its info lines as `nnet3-info` prints them.
#[test]
fn trained_model_copies_and_info_match_kaldi() {
    use compnet::testing::golden::golden_path;
    let dir = golden_path("train/attention-gru");
    let tmp = std::env::temp_dir().join(format!("compnet-attgru-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let after = dir.join("after.raw");
    let bin = tmp.join("copy.raw");
    let txt = tmp.join("copy.txt");
    run(&["copy", after.to_str().unwrap(), bin.to_str().unwrap()]);
    run(&[
        "copy",
        "--binary=false",
        after.to_str().unwrap(),
        txt.to_str().unwrap(),
    ]);
    assert!(
        std::fs::read(&bin).unwrap() == std::fs::read(dir.join("after_copy.raw")).unwrap(),
        "binary copy differs from Kaldi's nnet3-copy"
    );
    assert!(
        std::fs::read(&txt).unwrap() == std::fs::read(dir.join("after.txt")).unwrap(),
        "text copy differs from Kaldi's"
    );
    let info = run(&["info", after.to_str().unwrap()]);
    let want = std::fs::read(dir.join("after_info.txt")).unwrap();
    assert!(
        String::from_utf8_lossy(&want).contains("entropy="),
        "the golden has attention statistics"
    );
    assert_eq!(
        String::from_utf8_lossy(&info),
        String::from_utf8_lossy(&want)
    );
    std::fs::remove_dir_all(&tmp).ok();
}

/// The shared component harness (numeric input and parameter derivatives, in-place and
/// strided forms, I/O) on both GRU types, with and without a recurrent projection: a wrong
/// sign anywhere in the fused backward pass (`matrix::gru`) fails here, not only in
/// `tests/components.rs`.
#[test]
fn gru_backprop_is_the_derivative() {
    for cfg in [
        "type=GruNonlinearityComponent cell-dim=4",
        "type=GruNonlinearityComponent cell-dim=6 recurrent-dim=3 param-stddev=0.5",
        "type=OutputGruNonlinearityComponent cell-dim=5 param-stddev=0.5",
    ] {
        for seed in [3, 4] {
            let notes = compnet::testing::component::check_component_config(cfg, seed)
                .unwrap_or_else(|e| panic!("{cfg} (seed {seed}): {e}"));
            assert!(notes.is_empty(), "{cfg}: checks skipped: {notes:?}");
        }
    }
}
