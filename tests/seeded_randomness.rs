//! Every random number comes from a seeded generator: two runs of the same train-mode
//! computation with the same seed are bit-identical (outputs, input derivatives, parameter
//! gradients, stored statistics), and another seed changes them. The network has every
//! random component: Dropout, GeneralDropout (plain, continuous with a time period),
//! SpecAugmentTimeMask, DropoutMask, and nonlinearities with self-repair whose statistics
//! are stored in the same run (sampled on random minibatches); self-repair itself is checked
//! at the component level below.

use compnet::compile::request::{ComputationRequest, IoSpecification};
use compnet::compile::{compile_computation, optimize, CompilerOptions, OptimizeOptions};
use compnet::matrix::Matrix;
use compnet::nnet::component::nonlinear::NonlinearComponent;
use compnet::nnet::component::{new_component_from_config, Backprop, Propagate};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::component::ParamCopies;
use compnet::testing::random_matrix;

const CONFIG: &str = "\
input-node name=input dim=8
component name=affine1 type=AffineComponent input-dim=8 output-dim=12
component name=dropout type=DropoutComponent dim=12 dropout-proportion=0.3
component name=gdrop type=GeneralDropoutComponent dim=12 block-dim=4 dropout-proportion=0.4
component name=cdrop type=GeneralDropoutComponent dim=12 time-period=3 continuous=true dropout-proportion=0.3
component name=specaug type=SpecAugmentTimeMaskComponent dim=12 zeroed-proportion=0.3 time-mask-max-frames=3
component name=relu type=RectifiedLinearComponent dim=12 self-repair-scale=0.05
component name=affine2 type=AffineComponent input-dim=12 output-dim=6
component name=tanh type=TanhComponent dim=6 self-repair-scale=0.05 self-repair-lower-threshold=0.99
component name=sigmoid type=SigmoidComponent dim=6 self-repair-scale=0.05 self-repair-lower-threshold=0.99
component name=mask type=DropoutMaskComponent output-dim=6 dropout-proportion=0.5
component-node name=affine1 component=affine1 input=input
component-node name=dropout component=dropout input=affine1
component-node name=gdrop component=gdrop input=dropout
component-node name=cdrop component=cdrop input=gdrop
component-node name=specaug component=specaug input=cdrop
component-node name=relu component=relu input=specaug
component-node name=affine2 component=affine2 input=relu
component-node name=tanh component=tanh input=affine2
component-node name=sigmoid component=sigmoid input=tanh
component-node name=mask component=mask input=affine2
output-node name=output input=Sum(sigmoid, mask)
";

/// Everything one training step produces.
#[derive(PartialEq)]
struct Step {
    output: Vec<f32>,
    input_deriv: Vec<f32>,
    gradient: Vec<f32>,
    stats: Vec<String>,
}

/// One forward/backward pass on 2 sequences × 10 frames with computer seed `seed`; the
/// statistics go to a copy of the network, run three times so that the nonlinearities
/// have statistics (and so self-repair) on the later runs.
fn train_step(seed: u64) -> Step {
    let mut nnet = Nnet::from_config_text(CONFIG, "<test>", &mut seeded_rng(1)).expect("config");
    let request = ComputationRequest {
        inputs: vec![IoSpecification::from_ranges("input", 0..2, 0..10, true)],
        outputs: vec![IoSpecification::from_ranges("output", 0..2, 0..10, true)],
        need_model_derivative: true,
        store_component_stats: true,
        ..Default::default()
    };
    let mut computation =
        compile_computation(&nnet, &request, &CompilerOptions::default()).expect("compile");
    optimize(&nnet, &mut computation, &OptimizeOptions::default());
    let mut data = seeded_rng(99);
    let input = random_matrix(20, 8, &mut data);
    let out_deriv = random_matrix(20, 6, &mut data);
    let mut last = None;
    for minibatch in 0..3 {
        let mut delta = nnet.clone();
        for c in delta.components.iter_mut() {
            if let Some(u) = c.as_updatable_mut() {
                u.set_zero(true);
            }
        }
        let mut stats_nnet = nnet.clone();
        let (output, input_deriv) = {
            let mut c = NnetComputer::new(&computation, &nnet, Some(&mut delta))
                .with_stats_nnet(&mut stats_nnet)
                .with_seed(seed + minibatch);
            c.accept_input("input", input.clone()).expect("input");
            c.run_forward().expect("forward");
            let output = c.output("output").expect("output").to_vec();
            c.accept_output_deriv("output", out_deriv.clone())
                .expect("deriv");
            c.run_backward().expect("backward");
            (
                output,
                c.take_input_deriv("input").expect("input deriv").to_vec(),
            )
        };
        let mut gradient = Vec::new();
        for c in &delta.components {
            if let Some(u) = c.as_updatable() {
                let mut v = vec![0.0; u.num_parameters()];
                u.copy_params_to(&mut v);
                gradient.extend(v);
            }
        }
        // Statistics and self-repair counters show in the info lines.
        let stats = stats_nnet
            .components
            .iter()
            .chain(&delta.components)
            .map(|c| c.info())
            .collect();
        nnet = stats_nnet;
        last = Some(Step {
            output,
            input_deriv,
            gradient,
            stats,
        });
    }
    last.expect("three steps")
}

#[test]
fn same_seed_is_bit_identical_and_another_seed_differs() {
    let (a, b, c) = (train_step(7), train_step(7), train_step(8));
    assert!(a.output == b.output, "outputs differ for the same seed");
    assert!(a.input_deriv == b.input_deriv, "input derivatives differ");
    assert!(a.gradient == b.gradient, "parameter gradients differ");
    assert!(a.stats == b.stats, "statistics differ");
    assert!(a.output != c.output, "another seed gives the same outputs");
    assert!(
        a.input_deriv != c.input_deriv,
        "another seed: same input derivatives"
    );
    assert!(a.gradient != c.gradient, "another seed: same gradients");
}

/// Self-repair at the component level (the compiler hands a `to_update` component only to
/// updatable components, so inside a compiled computation nonlinearities are not repaired):
/// each nonlinearity with statistics and self-repair is back-propagated 8 times, drawing
/// from one generator; the same seed repeats every derivative and counter, another seed
/// repairs on other calls.
fn self_repair_run(seed: u64) -> (Vec<f32>, Vec<f64>) {
    let mut rng = seeded_rng(seed);
    let mut data = seeded_rng(5);
    let (mut derivs, mut repaired) = (Vec::new(), Vec::new());
    for config in [
        "type=SigmoidComponent dim=6 self-repair-scale=0.05 self-repair-lower-threshold=0.99",
        "type=TanhComponent dim=6 self-repair-scale=0.05 self-repair-lower-threshold=0.99",
        "type=RectifiedLinearComponent dim=6 self-repair-scale=0.05 self-repair-lower-threshold=0.9",
    ] {
        let cfg = ConfigLine::parse_str(config).expect("config");
        let mut c = new_component_from_config(&cfg, &mut seeded_rng(0)).expect("component");
        let x = random_matrix(10, 6, &mut data);
        let mut y = Matrix::zeros(10, 6);
        c.propagate(Propagate::new(x.view(), y.view_mut(), &mut rng));
        c.store_stats(x.view(), y.view(), None, &mut rng);
        let mut to_update = c.clone_box();
        for _ in 0..8 {
            let d = random_matrix(10, 6, &mut data);
            let mut g = Matrix::zeros(10, 6);
            c.backprop(Backprop {
                in_value: x.view(),
                out_value: y.view(),
                to_update: Some(to_update.as_mut()),
                ..Backprop::new(d.view(), Some(g.view_mut()), &mut rng)
});
            derivs.extend(g.to_vec());
        }
        let n = to_update
            .as_any()
            .downcast_ref::<NonlinearComponent>()
            .expect("nonlinearity");
        repaired.push(n.self_repair_counts().0);
    }
    (derivs, repaired)
}

#[test]
fn self_repair_follows_the_seed() {
    let (a, b, c) = (self_repair_run(3), self_repair_run(3), self_repair_run(4));
    assert!(
        a.1.iter().all(|&r| r > 0.0),
        "a nonlinearity was never self-repaired: {:?}",
        a.1
    );
    assert!(a == b, "self-repair differs for the same seed");
    assert!(a.0 != c.0, "another seed repairs on the same calls");
}
