//! The pre-xconfig components: ConvolutionComponent against a direct (per-output-element)
//! reference convolution written from Kaldi's layout, MaxpoolingComponent's tie rule,
//! CompositeComponent's row chunking and the trainer's whole-network operations reaching its
//! sub-components, and bad configs / damaged model files of all four types failing cleanly.
//! (Numeric derivative checks: `tests/components.rs`; DistributeComponent through the
//! compiler: the random "distribute" networks of `tests/reference_eval.rs` and
//! `tests/derivative.rs`; Kaldi's own outputs: the golden cases old-cnn and
//! composite-distribute.)

use compnet::matrix::Matrix;
use compnet::nnet::component::composite::CompositeComponent;
use compnet::nnet::component::old_cnn::{ConvolutionComponent, Vectorization};
use compnet::nnet::component::{new_component_from_config, Backprop, Component, Propagate};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Nnet;
use compnet::testing::component::ParamCopies;
use compnet::testing::golden::golden_path;

fn make(config: &str) -> Box<dyn Component> {
    let cfg = ConfigLine::parse_str(config).expect("config parses");
    new_component_from_config(&cfg, &mut compnet::random::seeded_rng(3))
        .unwrap_or_else(|e| panic!("{config}: {e}"))
}

/// Deterministic values in [-2, 2) from an LCG (independent of the crate's generators).
fn lcg_matrix(rows: usize, cols: usize, seed: u64) -> Matrix {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
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

fn forward(c: &dyn Component, x: &Matrix) -> Matrix {
    let mut y = Matrix::zeros(x.num_rows(), c.output_dim());
    let mut rng = compnet::random::seeded_rng(0);
    c.propagate(Propagate::new(x.view(), y.view_mut(), &mut rng));
    y
}

/// (input derivative, gradient holder after backprop) at `x` for output derivative `d`.
fn backward(c: &dyn Component, x: &Matrix, d: &Matrix) -> (Matrix, Box<dyn Component>) {
    let y = forward(c, x);
    let mut grad = c.clone_box();
    if let Some(u) = grad.as_updatable_mut() {
        u.set_zero(true);
    }
    let mut g = Matrix::zeros(x.num_rows(), c.input_dim());
    let mut rng = compnet::random::seeded_rng(0);
    c.backprop(Backprop {
        in_value: x.view(),
        out_value: y.view(),
        to_update: Some(grad.as_mut()),
        ..Backprop::new(d.view(), Some(g.view_mut()), &mut rng)
    });
    (g, grad)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Column of element (x, y, z) in Kaldi's two vectorisations.
fn column(v: Vectorization, x: usize, y: usize, z: usize, ydim: usize, zdim: usize) -> usize {
    match v {
        Vectorization::Zyx => x * ydim * zdim + y * zdim + z,
        Vectorization::Yzx => x * ydim * zdim + z * ydim + y,
    }
}

/// The convolution, its input derivative and its filter/bias gradients, one output element
/// at a time, in f64.
fn reference_convolution(
    c: &ConvolutionComponent,
    x: &Matrix,
    d: &Matrix,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let [xd, yd, zd] = c.input_dims;
    let [fx, fy] = c.filt_dims;
    let [sx, sy] = c.filt_steps;
    let (nx, ny) = ((xd - fx) / sx + 1, (yd - fy) / sy + 1);
    let nf = c.filters.num_rows();
    let w = |f: usize, k: usize| c.filters.get(f, k) as f64;
    let rows = x.num_rows();
    let out_dim = nx * ny * nf;
    let mut out = vec![0.0f64; rows * out_dim];
    let mut in_deriv = vec![0.0f64; rows * xd * yd * zd];
    let mut w_grad = vec![0.0f64; nf * fx * fy * zd];
    let mut b_grad = vec![0.0f64; nf];
    for r in 0..rows {
        for i in 0..nx {
            for j in 0..ny {
                for f in 0..nf {
                    let o = (i * ny + j) * nf + f;
                    let od = d.get(r, o) as f64;
                    let mut sum = c.bias.to_vec()[f] as f64;
                    b_grad[f] += od;
                    for a in 0..fx {
                        for b in 0..fy {
                            for z in 0..zd {
                                let k = (a * fy + b) * zd + z;
                                let col =
                                    column(c.vectorization, i * sx + a, j * sy + b, z, yd, zd);
                                let xv = x.get(r, col) as f64;
                                sum += w(f, k) * xv;
                                in_deriv[r * xd * yd * zd + col] += od * w(f, k);
                                w_grad[f * fx * fy * zd + k] += od * xv;
                            }
                        }
                    }
                    out[r * out_dim + o] = sum;
                }
            }
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    (f(out), f(in_deriv), f(w_grad), f(b_grad))
}

#[test]
fn convolution_matches_a_direct_reference() {
    for (k, config) in [
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=8 input-z-dim=1 filt-x-dim=2 filt-y-dim=4 filt-x-step=1 filt-y-step=2 num-filters=4 input-vectorization-order=yzx",
        "type=ConvolutionComponent input-x-dim=5 input-y-dim=4 input-z-dim=3 filt-x-dim=3 filt-y-dim=2 filt-x-step=2 filt-y-step=1 num-filters=2",
        "type=ConvolutionComponent input-x-dim=4 input-y-dim=7 input-z-dim=2 filt-x-dim=2 filt-y-dim=3 filt-x-step=2 filt-y-step=2 num-filters=3 input-vectorization-order=yzx",
        "type=ConvolutionComponent input-x-dim=2 input-y-dim=3 input-z-dim=4 filt-x-dim=2 filt-y-dim=3 filt-x-step=1 filt-y-step=1 num-filters=5 input-vectorization-order=zyx",
    ]
    .iter()
    .enumerate()
    {
        let c = make(config);
        let conv = c.as_any().downcast_ref::<ConvolutionComponent>().unwrap();
        let x = lcg_matrix(6, c.input_dim(), 10 + k as u64);
        let d = lcg_matrix(6, c.output_dim(), 20 + k as u64);
        let (out, in_deriv, w_grad, b_grad) = reference_convolution(conv, &x, &d);
        assert!(max_diff(&forward(c.as_ref(), &x).to_vec(), &out) < 1e-4, "{config}: forward");
        let (g, grad) = backward(c.as_ref(), &x, &d);
        assert!(max_diff(&g.to_vec(), &in_deriv) < 1e-4, "{config}: input derivative");
        let grad = grad.as_any().downcast_ref::<ConvolutionComponent>().unwrap();
        assert!(max_diff(&grad.filters.to_vec(), &w_grad) < 1e-3, "{config}: filter gradient");
        assert!(max_diff(&grad.bias.to_vec(), &b_grad) < 1e-4, "{config}: bias gradient");
    }
}

#[test]
fn maxpooling_sends_the_derivative_to_every_tied_maximum() {
    // Pools over y: (0,1) and (1,2). Element 1 is the maximum of both pools, and element 2
    // ties with it in the second, so (as Kaldi's mask of equal elements does) it gets the
    // second pool's derivative too.
    let c = make(
        "type=MaxpoolingComponent input-x-dim=1 input-y-dim=3 input-z-dim=1 pool-x-size=1 pool-y-size=2 pool-z-size=1 pool-x-step=1 pool-y-step=1 pool-z-step=1",
    );
    let x = Matrix::from_rows(&[vec![1.0, 3.0, 3.0], vec![-1.0, -2.0, -0.5]]);
    let d = Matrix::from_rows(&[vec![10.0, 20.0], vec![1.0, 2.0]]);
    assert_eq!(forward(c.as_ref(), &x).to_vec(), vec![3.0, 3.0, -1.0, -0.5]);
    let (g, _) = backward(c.as_ref(), &x, &d);
    assert_eq!(g.to_vec(), vec![0.0, 30.0, 20.0, 1.0, 0.0, 2.0]);
}

#[test]
fn composite_chunks_give_the_same_results_as_one_pass() {
    let subs = "component1='type=AffineComponent input-dim=5 output-dim=6' component2='type=RectifiedLinearComponent dim=6' component3='type=ConvolutionComponent input-x-dim=2 input-y-dim=3 input-z-dim=1 filt-x-dim=1 filt-y-dim=2 filt-x-step=1 filt-y-step=1 num-filters=2' component4='type=NaturalGradientAffineComponent input-dim=8 output-dim=3'";
    let whole = make(&format!("type=CompositeComponent num-components=4 {subs}"));
    let x = lcg_matrix(11, 5, 1);
    let d = lcg_matrix(11, 3, 2);
    let (y, (g, grad)) = (
        forward(whole.as_ref(), &x),
        backward(whole.as_ref(), &x, &d),
    );
    let params = |c: &dyn Component| {
        let u = c.as_updatable().unwrap();
        let mut v = vec![0.0; u.num_parameters()];
        u.copy_params_to(&mut v);
        v
    };
    for rows in [1, 2, 4, 10] {
        let chunked = make(&format!(
            "type=CompositeComponent num-components=4 max-rows-process={rows} {subs}"
        ));
        assert_eq!(params(chunked.as_ref()), params(whole.as_ref()));
        let (yc, (gc, gradc)) = (
            forward(chunked.as_ref(), &x),
            backward(chunked.as_ref(), &x, &d),
        );
        assert!(
            max_diff(&yc.to_vec(), &y.to_vec()) < 1e-5,
            "{rows} rows: output"
        );
        assert!(
            max_diff(&gc.to_vec(), &g.to_vec()) < 1e-5,
            "{rows} rows: input derivative"
        );
        // The natural-gradient sub-component is a gradient holder here (plain update), so
        // the summed gradients must agree too.
        assert!(
            max_diff(&params(gradc.as_ref()), &params(grad.as_ref())) < 1e-4,
            "{rows} rows: parameter gradient"
        );
    }
}

/// A network with one composite whose sub-components carry learning-rate factors, L2,
/// natural gradient and an orthonormal constraint.
fn composite_net() -> Nnet {
    let config = "input-node name=input dim=4
component name=comp type=CompositeComponent num-components=3 max-rows-process=3 component1='type=AffineComponent input-dim=4 output-dim=6 learning-rate-factor=0.5 l2-regularize=0.01 orthonormal-constraint=1.0' component2='type=TanhComponent dim=6' component3='type=NaturalGradientAffineComponent input-dim=6 output-dim=3'
component-node name=comp component=comp input=input
output-node name=output input=comp
";
    Nnet::from_config_text(config, "<test>", &mut compnet::random::seeded_rng(5)).unwrap()
}

fn sub(nnet: &Nnet, i: usize) -> &dyn Component {
    let c = nnet.components[0]
        .as_any()
        .downcast_ref::<CompositeComponent>()
        .unwrap();
    c.components[i].as_ref()
}

fn common(nnet: &Nnet, i: usize) -> compnet::nnet::component::UpdatableCommon {
    sub(nnet, i).as_updatable().unwrap().common().clone()
}

#[test]
fn whole_network_operations_reach_the_sub_components() {
    use compnet::train::network_ops::{
        apply_l2_regularization, constrain_orthonormal, freeze_natural_gradient,
    };
    let mut nnet = composite_net();
    assert_eq!(nnet.num_parameters(), 4 * 6 + 6 + 6 * 3 + 3);

    nnet.set_learning_rate(0.1);
    assert!((common(&nnet, 0).learning_rate - 0.05).abs() < 1e-7);
    assert!((common(&nnet, 2).learning_rate - 0.1).abs() < 1e-7);

    freeze_natural_gradient(true, &mut nnet);
    assert!(common(&nnet, 2).natural_gradient_frozen);
    freeze_natural_gradient(false, &mut nnet);
    assert!(!common(&nnet, 2).natural_gradient_frozen);

    // L2: delta += −2 · scale · lr · l2 · W on the sub-component with l2-regularize.
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        c.as_updatable_mut().unwrap().set_zero(false);
    }
    apply_l2_regularization(&nnet, 2.0, &mut delta);
    let w = |n: &Nnet, i: usize| {
        let u = sub(n, i).as_updatable().unwrap();
        let mut v = vec![0.0; u.num_parameters()];
        u.copy_params_to(&mut v);
        v
    };
    let want: Vec<f32> = w(&nnet, 0)
        .iter()
        .map(|p| -2.0 * 2.0 * 0.05 * 0.01 * p)
        .collect();
    assert!(max_diff(&w(&delta, 0), &want) < 1e-9);
    assert!(w(&delta, 2).iter().all(|&v| v == 0.0), "no L2 on the third");

    // Scaling reaches every sub-component's parameters.
    let before = w(&nnet, 2);
    nnet.scale_all(0.5);
    let halved: Vec<f32> = before.iter().map(|v| v * 0.5).collect();
    assert!(max_diff(&w(&nnet, 2), &halved) < 1e-7);

    // The orthonormal constraint moves the constrained sub-component only.
    let (w0, w2) = (w(&nnet, 0), w(&nnet, 2));
    let mut rng = compnet::random::seeded_rng(9);
    for _ in 0..16 {
        constrain_orthonormal(&mut nnet, &mut rng);
    }
    assert!(max_diff(&w(&nnet, 0), &w0) > 1e-3, "constraint not applied");
    assert_eq!(w(&nnet, 2), w2);
}

#[test]
fn bad_configs_are_errors() {
    for line in [
        // Convolution: steps that do not tile, missing options, unknown order, filter too big.
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=2 filt-y-dim=2 filt-x-step=2 filt-y-step=1 num-filters=2",
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=2 filt-y-dim=2 num-filters=2",
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=2 filt-y-dim=2 filt-x-step=1 filt-y-step=1 num-filters=2 input-vectorization-order=xyz",
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=4 filt-y-dim=2 filt-x-step=1 filt-y-step=1 num-filters=2",
        "type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=2 filt-y-dim=2 filt-x-step=1 filt-y-step=1 num-filters=0",
        "type=ConvolutionComponent input-x-dim=2000000000 input-y-dim=2000000000 input-z-dim=1 filt-x-dim=1 filt-y-dim=1 filt-x-step=1 filt-y-step=1 num-filters=1",
        // Maxpooling: missing steps, steps that do not tile, zero size.
        "type=MaxpoolingComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 pool-x-size=1 pool-y-size=2 pool-z-size=1",
        "type=MaxpoolingComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 pool-x-size=2 pool-y-size=2 pool-z-size=1 pool-x-step=2 pool-y-step=2 pool-z-step=1",
        "type=MaxpoolingComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 pool-x-size=0 pool-y-size=2 pool-z-size=1 pool-x-step=1 pool-y-step=2 pool-z-step=1",
        // Composite: nesting, random or general sub-components, mismatched dims, missing
        // pieces, options Kaldi does not take, unknown options inside a sub-config.
        "type=CompositeComponent num-components=1 component1=\"type=CompositeComponent num-components=1 component1='type=TanhComponent dim=2'\"",
        "type=CompositeComponent num-components=1 component1='type=DropoutComponent dim=4 dropout-proportion=0.5'",
        "type=CompositeComponent num-components=1 component1='type=DistributeComponent input-dim=4 output-dim=2'",
        "type=CompositeComponent num-components=2 component1='type=TanhComponent dim=4' component2='type=SigmoidComponent dim=3'",
        "type=CompositeComponent num-components=2 component1='type=TanhComponent dim=4'",
        "type=CompositeComponent num-components=0",
        "type=CompositeComponent component1='type=TanhComponent dim=4'",
        "type=CompositeComponent num-components=1 max-rows-process=0 component1='type=TanhComponent dim=4'",
        "type=CompositeComponent num-components=1 component1='type=TanhComponent dim=4' learning-rate=0.1",
        "type=CompositeComponent num-components=1 component1='type=AffineComponent input-dim=4 output-dim=2 foo=3'",
        "type=CompositeComponent num-components=1 component1='type=NoSuchComponent dim=4'",
        "type=CompositeComponent num-components=1 component1='dim=4'",
        // Distribute: input-dim not a multiple of output-dim, zero dims.
        "type=DistributeComponent input-dim=6 output-dim=4",
        "type=DistributeComponent input-dim=6 output-dim=0",
        "type=DistributeComponent input-dim=6",
    ] {
        let cfg = ConfigLine::parse_str(line);
        let res = cfg.and_then(|cfg| {
            new_component_from_config(&cfg, &mut compnet::random::seeded_rng(0))
                .map(|_| ())
                .and_then(|_| cfg.check_all_used("component").map(|_| ()))
        });
        assert!(res.is_err(), "accepted: {line}");
    }
}

fn golden(case: &str, file: &str) -> Vec<u8> {
    std::fs::read(golden_path(&format!("cases/{case}/{file}"))).unwrap()
}

#[test]
fn damaged_models_are_errors_never_panics() {
    for (case, file) in [
        ("old-cnn", "model.raw"),
        ("old-cnn", "model.txt"),
        ("composite-distribute", "model.raw"),
        ("composite-distribute", "model.txt"),
    ] {
        let bytes = golden(case, file);
        assert!(
            Nnet::read_model(&bytes, file).is_ok(),
            "{case}/{file} itself"
        );
        // Every truncation is an error.
        let step = (bytes.len() / 1500).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            assert!(
                Nnet::read_model(&bytes[..cut], "cut").is_err(),
                "{case}/{file} cut at {cut} was accepted"
            );
        }
        // Random byte damage: errors are fine, so is success; a panic fails the test.
        let noise = lcg_matrix(1, 4000, bytes.len() as u64).to_vec();
        for k in 0..1000 {
            let mut b = bytes.clone();
            let at = ((noise[k * 2].abs() / 2.0) * b.len() as f32) as usize % b.len();
            b[at] = (noise[k * 2 + 1] * 60.0) as i32 as u8;
            let _ = Nnet::read_model(&b, "damaged");
        }
    }
    // Values that parse but describe an impossible component.
    let txt = String::from_utf8(golden("old-cnn", "model.txt")).unwrap();
    let comp = String::from_utf8(golden("composite-distribute", "model.txt")).unwrap();
    for (what, source, damaged) in [
        (
            "vectorization",
            &txt,
            txt.replacen("<InputVectorization> 0", "<InputVectorization> 7", 1),
        ),
        (
            "filter step",
            &txt,
            txt.replacen("<FiltYStep> 2", "<FiltYStep> 3", 1),
        ),
        (
            "pool step",
            &txt,
            txt.replacen("<PoolZStep> 1", "<PoolZStep> 0", 1),
        ),
        (
            "pool size",
            &txt,
            txt.replacen("<PoolZSize> 2", "<PoolZSize> 9", 1),
        ),
        (
            "num components",
            &comp,
            comp.replacen("<NumComponents> 3 <Affine", "<NumComponents> 2 <Affine", 1),
        ),
        (
            "huge num components",
            &comp,
            comp.replacen(
                "<NumComponents> 3 <Affine",
                "<NumComponents> 2000000000 <Affine",
                1,
            ),
        ),
        (
            "max rows",
            &comp,
            comp.replacen("<MaxRowsProcess> 4", "<MaxRowsProcess> -1", 1),
        ),
        (
            "distribute dims",
            &comp,
            comp.replacen("<OutputDim> 3", "<OutputDim> 4", 1),
        ),
    ] {
        assert_ne!(&damaged, source, "{what}: nothing replaced");
        assert!(
            Nnet::read_model(damaged.as_bytes(), "damaged").is_err(),
            "{what}: damaged model accepted"
        );
    }
}
