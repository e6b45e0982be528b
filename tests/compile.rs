//! Compiler tests: graph building on small fixed networks (simple, spliced, RNN, clockwork,
//! Failover, Round, ReplaceIndex, dim-range), steps rules, non-computable errors, Kaldi's
//! rejected goldens, network context vs golden info.txt, and compiled forward/backward vs
//! the independent per-Cindex reference evaluator and finite differences.

use compnet::compile::context::nnet_context;
use compnet::compile::graph::{build_graph, ComputationGraphBuilder};
use compnet::compile::print::format_computation;
use compnet::compile::request::format_indexes;
use compnet::compile::steps::{compute_phases, compute_steps, describe_steps};
use compnet::compile::{compile_computation, Command, CompilerOptions};
use compnet::compile::{ComputationRequest, IoSpecification};
use compnet::matrix::Matrix;
use compnet::matrix::{MatView, MatViewMut};
use compnet::nnet::component::{Propagate, Properties};
use compnet::nnet::descriptor::{ForwardingDescriptor, IndexVar, SumDescriptor};
use compnet::nnet::{Index, NetworkNode, Nnet};
use compnet::run::NnetComputer;
use std::collections::HashMap;
use std::path::Path;

use compnet::testing::golden::known_missing;
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn net(cfg: &str) -> Nnet {
    let mut n = Nnet::from_config_text(cfg, "<test>", &mut compnet::random::seeded_rng(0))
        .unwrap_or_else(|e| panic!("{e}\n{cfg}"));
    for c in n.components.iter_mut() {
        c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
    }
    n
}

fn io(
    name: &str,
    ns: std::ops::Range<i32>,
    ts: std::ops::Range<i32>,
    deriv: bool,
) -> IoSpecification {
    IoSpecification::from_ranges(name, ns, ts, deriv)
}

fn request(inputs: Vec<IoSpecification>, outputs: Vec<IoSpecification>) -> ComputationRequest {
    ComputationRequest {
        inputs,
        outputs,
        ..Default::default()
    }
}

/// Deterministic pseudo-random matrix (independent of the crate's RNG helpers).
fn pseudo_matrix(rows: usize, cols: usize, seed: u64) -> Matrix {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut m = Matrix::zeros(rows, cols);
    for r in 0..rows {
        for c in 0..cols {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0;
            m.set(r, c, v as f32);
        }
    }
    m
}

/// A naive per-Cindex evaluator written for these tests only (independent of the compiler
/// and of `descriptor::eval`): recursion with memoisation; `Sum` short-circuits so that
/// recurrences through `IfDefined` stop at the first missing input.
struct Reference<'a> {
    nnet: &'a Nnet,
    supplied: HashMap<(usize, Index), Vec<f32>>,
    memo: HashMap<(usize, Index), Option<Vec<f32>>>,
}

impl<'a> Reference<'a> {
    fn new(nnet: &'a Nnet, inputs: &[(&str, &[Index], &Matrix)]) -> Self {
        let mut supplied = HashMap::new();
        for (name, idx, m) in inputs {
            let node = nnet.node_index(name).unwrap();
            for (r, i) in idx.iter().enumerate() {
                supplied.insert((node, *i), m.row_to_vec(r));
            }
        }
        Reference {
            nnet,
            supplied,
            memo: HashMap::new(),
        }
    }

    fn compute(&mut self, name: &str, idx: &[Index]) -> Matrix {
        let node = self.nnet.node_index(name).unwrap();
        let dim = self.nnet.node_dim(node);
        let mut m = Matrix::zeros(idx.len(), dim);
        for (r, i) in idx.iter().enumerate() {
            let v = self
                .value(node, *i)
                .unwrap_or_else(|| panic!("reference: {name} {i} not computable"));
            m.copy_row_from_slice(r, &v);
        }
        m
    }

    fn map(f: &ForwardingDescriptor, i: Index) -> (usize, Index, f32) {
        match f {
            ForwardingDescriptor::Simple { node, scale } => (*node, i, *scale),
            ForwardingDescriptor::Offset {
                src,
                t_offset,
                x_offset,
            } => {
                let (n, j, s) = Self::map(src, i);
                (n, Index::new(j.n, j.t + t_offset, j.x + x_offset), s)
            }
            ForwardingDescriptor::Switch(v) => {
                let k = ((i.t % v.len() as i32) + v.len() as i32) % v.len() as i32;
                Self::map(&v[k as usize], i)
            }
            ForwardingDescriptor::Round { src, t_modulus } => {
                let (n, j, s) = Self::map(src, i);
                let t = (j.t as f64 / *t_modulus as f64).floor() as i32 * t_modulus;
                (n, Index::new(j.n, t, j.x), s)
            }
            ForwardingDescriptor::ReplaceIndex { src, var, value } => {
                let (n, mut j, s) = Self::map(src, i);
                match var {
                    IndexVar::T => j.t = *value,
                    IndexVar::X => j.x = *value,
                }
                (n, j, s)
            }
        }
    }

    fn sum(&mut self, d: &SumDescriptor, i: Index) -> Option<Vec<f32>> {
        match d {
            SumDescriptor::Simple(f) => {
                let (n, j, s) = Self::map(f, i);
                self.value(n, j).map(|v| v.iter().map(|x| x * s).collect())
            }
            SumDescriptor::Optional(x) => {
                let dim = x.dim(self.nnet);
                Some(self.sum(x, i).unwrap_or_else(|| vec![0.0; dim]))
            }
            SumDescriptor::Sum(a, b) => {
                let mut x = self.sum(a, i)?;
                let y = self.sum(b, i)?;
                x.iter_mut().zip(&y).for_each(|(p, q)| *p += q);
                Some(x)
            }
            SumDescriptor::Failover(a, b) => self.sum(a, i).or_else(|| self.sum(b, i)),
            SumDescriptor::Const { value, dim } => Some(vec![*value; *dim]),
        }
    }

    fn value(&mut self, node: usize, i: Index) -> Option<Vec<f32>> {
        if let Some(v) = self.memo.get(&(node, i)) {
            return v.clone();
        }
        let nnet = self.nnet;
        let v = match &nnet.nodes[node] {
            NetworkNode::Input { .. } => self.supplied.get(&(node, i)).cloned(),
            NetworkNode::DimRange {
                input_node,
                dim_offset,
                dim,
            } => self
                .value(*input_node, i)
                .map(|v| v[*dim_offset..dim_offset + dim].to_vec()),
            NetworkNode::Descriptor { descriptor, .. } => {
                let mut row = Vec::new();
                let mut ok = true;
                for p in &descriptor.parts {
                    match self.sum(p, i) {
                        Some(v) => row.extend(v),
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                ok.then_some(row)
            }
            NetworkNode::Component { component } => {
                let c = &nnet.components[*component];
                self.value(node - 1, i).map(|x| {
                    let mut out = vec![0.0; c.output_dim()];
                    let od = out.len();
                    c.propagate(Propagate::new(
                        MatView::from_slice(&x, 1, x.len()),
                        MatViewMut::from_slice(&mut out, 1, od),
                        &mut compnet::random::seeded_rng(0),
                    ));
                    out
                })
            }
        };
        self.memo.insert((node, i), v.clone());
        v
    }
}

/// Runs the compiled computation forward and compares every output with the reference.
fn check_against_reference(nnet: &Nnet, req: &ComputationRequest) -> NnetComputationOutputs {
    let comp = compile_computation(nnet, req, &CompilerOptions::default())
        .unwrap_or_else(|e| panic!("compile: {e}"));
    let inputs: Vec<Matrix> = req
        .inputs
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let dim = nnet.node_dim(nnet.node_index(&s.name).unwrap());
            pseudo_matrix(s.indexes.len(), dim, 17 + k as u64)
        })
        .collect();
    let refs: Vec<(&str, &[Index], &Matrix)> = req
        .inputs
        .iter()
        .zip(&inputs)
        .map(|(s, m)| (s.name.as_str(), s.indexes.as_slice(), m))
        .collect();
    // The recursive reference can go deep on recurrent networks: give it a big stack.
    let expected: Vec<Matrix> = std::thread::scope(|sc| {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn_scoped(sc, || {
                let mut reference = Reference::new(nnet, &refs);
                req.outputs
                    .iter()
                    .map(|o| reference.compute(&o.name, &o.indexes))
                    .collect()
            })
            .unwrap()
            .join()
            .unwrap()
    });
    let mut computer = NnetComputer::new(&comp, nnet, None);
    for (s, m) in req.inputs.iter().zip(&inputs) {
        computer.accept_input(&s.name, m.clone()).unwrap();
    }
    computer
        .run_forward()
        .unwrap_or_else(|e| panic!("run: {e}\n{}", format_computation(&comp, nnet)));
    let mut outs = Vec::new();
    for (o, want) in req.outputs.iter().zip(&expected) {
        let got = computer.output(&o.name).unwrap().clone();
        for r in 0..want.num_rows() {
            for (a, b) in got.row_to_vec(r).iter().zip(&want.row_to_vec(r)) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "output {} row {r} ({}) differs: {a} vs {b}\n{}",
                    o.name,
                    o.indexes[r],
                    format_computation(&comp, nnet)
                );
            }
        }
        outs.push(got);
    }
    NnetComputationOutputs { outs }
}

struct NnetComputationOutputs {
    outs: Vec<Matrix>,
}

/// Steps as (node name, rows).
fn steps_of(nnet: &Nnet, req: &ComputationRequest) -> Vec<(String, usize)> {
    let mut g = build_graph(nnet, req).unwrap();
    let phases = compute_phases(nnet, &g).unwrap();
    let steps = compute_steps(nnet, req, &phases, &mut g).unwrap();
    // Rule (b): a component step is immediately preceded by its descriptor step with the
    // same Indexes (simple components).
    for (k, s) in steps.steps.iter().enumerate() {
        let Some(&id) = s.first() else { continue };
        let node = g.cindexes[id].0;
        if matches!(nnet.nodes[node], NetworkNode::Component { .. }) && !steps.is_input_step[k] {
            let prev = &steps.steps[k - 1];
            assert_eq!(
                g.cindexes[prev[0]].0,
                node - 1,
                "rule (b): descriptor step first"
            );
            let a: Vec<Index> = s.iter().map(|&i| g.cindexes[i].1).collect();
            let b: Vec<Index> = prev.iter().map(|&i| g.cindexes[i].1).collect();
            assert_eq!(a, b, "rule (b): same Indexes");
        }
        // Rule (c): a dim-range step mirrors some step of its source node.
        if let NetworkNode::DimRange { input_node, .. } = nnet.nodes[node] {
            let a: Vec<Index> = s.iter().map(|&i| g.cindexes[i].1).collect();
            assert!(
                steps.steps[..k].iter().any(|t| {
                    t.first().is_some_and(|&f| g.cindexes[f].0 == input_node)
                        && t.iter().map(|&i| g.cindexes[i].1).collect::<Vec<_>>() == a
                }),
                "rule (c) violated"
            );
        }
    }
    // Rule (a): inputs and outputs in request order.
    for spec in req.inputs.iter().chain(&req.outputs) {
        let node = nnet.node_index(&spec.name).unwrap();
        let found: Vec<_> = steps
            .steps
            .iter()
            .filter(|s| s.first().is_some_and(|&f| g.cindexes[f].0 == node))
            .collect();
        assert_eq!(found.len(), 1, "rule (a): one step for {}", spec.name);
        let idx: Vec<Index> = found[0].iter().map(|&i| g.cindexes[i].1).collect();
        assert_eq!(
            idx, spec.indexes,
            "rule (a): request order for {}",
            spec.name
        );
    }
    describe_steps(nnet, &g, &steps)
}

const SIMPLE: &str = "
input-node name=input dim=5
component name=a type=AffineComponent input-dim=5 output-dim=4
component-node name=a component=a input=input
component name=r type=RectifiedLinearComponent dim=4
component-node name=r component=r input=a
output-node name=output input=r
";

const SPLICED: &str = "
input-node name=input dim=3
component name=a type=AffineComponent input-dim=12 output-dim=6
component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 1), Offset(input, 2))
component name=t type=TanhComponent dim=6
component-node name=t component=t input=a
component name=b type=AffineComponent input-dim=12 output-dim=4
component-node name=b component=b input=Append(Offset(t, -2), t)
output-node name=output input=b
";

const RNN: &str = "
input-node name=input dim=3
component name=a type=AffineComponent input-dim=3 output-dim=5
component-node name=a component=a input=input
component name=rec type=AffineComponent input-dim=5 output-dim=5
component-node name=rec component=rec input=Offset(h, -1)
component name=h type=TanhComponent dim=5
component-node name=h component=h input=Sum(a, IfDefined(rec))
component name=o type=AffineComponent input-dim=5 output-dim=2
component-node name=o component=o input=h
output-node name=output input=o
";

const CLOCKWORK: &str = "
input-node name=input dim=3
component name=a type=AffineComponent input-dim=3 output-dim=4
component-node name=a component=a input=input
component name=b0 type=AffineComponent input-dim=4 output-dim=2
component-node name=b0 component=b0 input=a
component name=b1 type=AffineComponent input-dim=4 output-dim=2
component-node name=b1 component=b1 input=Offset(a, -1)
component name=b2 type=AffineComponent input-dim=4 output-dim=2
component-node name=b2 component=b2 input=Offset(a, 1)
component name=slow type=AffineComponent input-dim=4 output-dim=2
component-node name=slow component=slow input=Round(a, 2)
output-node name=output input=Sum(Switch(b0, b1, b2), slow)
";

const DESCRIPTOR_ZOO: &str = "
input-node name=input dim=3
input-node name=ivector dim=2
component name=a type=AffineComponent input-dim=8 output-dim=6
component-node name=a component=a input=Append(Offset(input, -1), input, ReplaceIndex(ivector, t, 0))
dim-range-node name=lo input-node=a dim-offset=0 dim=3
dim-range-node name=hi input-node=a dim-offset=3 dim=3
component name=b type=AffineComponent input-dim=9 output-dim=3
component-node name=b component=b input=Append(Failover(Offset(lo, -2), hi), IfDefined(Offset(hi, 1)), Sum(Scale(0.5, lo), Const(0.25, 3)))
output-node name=output input=Sum(b, Scale(-2, Offset(hi, -1)))
";

#[test]
fn simple_net_graph_and_steps() {
    let n = net(SIMPLE);
    let req = request(
        vec![io("input", 0..2, 0..3, false)],
        vec![io("output", 0..2, 0..3, false)],
    );
    let g = build_graph(&n, &req).unwrap();
    // 6 Indexes at each of input, a_input, a, r_input, r, output.
    assert_eq!(g.len(), 36);
    let steps = steps_of(&n, &req);
    let names: Vec<&str> = steps.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["input", "a_input", "a", "r_input", "r", "output"]);
    check_against_reference(&n, &req);
}

#[test]
fn spliced_net_uses_only_needed_inputs() {
    let n = net(SPLICED);
    // Output t=0..4 needs t in [-3, 6] of the input; supply more than needed.
    let req = request(
        vec![io("input", 0..1, -5..9, false)],
        vec![io("output", 0..1, 0..4, false)],
    );
    let g = build_graph(&n, &req).unwrap();
    let tnode = n.node_index("t").unwrap();
    let mut ts: Vec<i32> = g
        .cindexes
        .iter()
        .filter(|c| c.0 == tnode)
        .map(|c| c.1.t)
        .collect();
    ts.sort();
    assert_eq!(ts, (-2..4).collect::<Vec<_>>());
    // All supplied inputs are kept (rule a), even unused ones.
    let inode = n.node_index("input").unwrap();
    assert_eq!(g.cindexes.iter().filter(|c| c.0 == inode).count(), 14);
    steps_of(&n, &req);
    check_against_reference(&n, &req);
}

#[test]
fn rnn_terminates_and_splits_per_time() {
    let n = net(RNN);
    let req = request(
        vec![io("input", 0..2, 0..6, false)],
        vec![io("output", 0..2, 0..6, false)],
    );
    let steps = steps_of(&n, &req);
    let count = |name: &str| steps.iter().filter(|s| s.0 == name).count();
    // The recurrent layer is one step per time; the layers before and after are one step.
    assert_eq!(count("h"), 6);
    assert_eq!(count("rec"), 5);
    assert_eq!(count("a"), 1);
    assert_eq!(count("o"), 1);
    assert!(steps.iter().filter(|s| s.0 == "h").all(|s| s.1 == 2));
    check_against_reference(&n, &req);
}

#[test]
fn clockwork_switch_round() {
    let n = net(CLOCKWORK);
    let ctx = nnet_context(&n).unwrap();
    assert_eq!(ctx.modulus, 6);
    assert_eq!((ctx.left, ctx.right), (1, 1));
    for start in [-3, 0, 1, 5] {
        let req = request(
            vec![io("input", 0..2, start - 2..start + 9, false)],
            vec![io("output", 0..2, start..start + 7, false)],
        );
        steps_of(&n, &req);
        check_against_reference(&n, &req);
    }
}

#[test]
fn descriptor_zoo_failover_dimrange_replaceindex() {
    let n = net(DESCRIPTOR_ZOO);
    let req = request(
        vec![
            io("input", 0..2, 0..10, false),
            io("ivector", 0..2, 0..1, false),
        ],
        vec![io("output", 0..2, 2..9, false)],
    );
    steps_of(&n, &req);
    check_against_reference(&n, &req);
    // Failover chooses its second argument at the first frames: output must be computable
    // from t=1 (a needs t-1; b at t-1 needs a at t-1 and IfDefined is optional).
    let req = request(
        vec![
            io("input", 0..1, 0..10, false),
            io("ivector", 0..1, 0..1, false),
        ],
        vec![io("output", 0..1, 2..9, false)],
    );
    check_against_reference(&n, &req);
}

#[test]
fn not_computable_message_names_outputs_and_missing_input() {
    let n = net(SPLICED);
    let req = request(
        vec![io("input", 0..1, -3..6, false)],
        vec![io("output", 0..1, 0..5, false)],
    );
    let e = compile_computation(&n, &req, &CompilerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("Not all outputs were computable"), "{e}");
    assert!(e.contains("output 'output': 1 of 5"), "{e}");
    assert!(e.contains("[ (0, 4) ]"), "{e}");
    assert!(
        e.contains("'input' (n=0, t=6), which the request does not supply"),
        "{e}"
    );
    assert!(e.contains("supply t up to 6"), "{e}");
}

#[test]
fn request_errors_are_clear() {
    let n = net(SIMPLE);
    let bad = request(
        vec![io("nosuch", 0..1, 0..1, false)],
        vec![io("output", 0..1, 0..1, false)],
    );
    let e = compile_computation(&n, &bad, &CompilerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("'nosuch'"), "{e}");
    let bad = request(
        vec![io("input", 0..1, 0..1, false)],
        vec![io("r", 0..1, 0..1, false)],
    );
    let e = compile_computation(&n, &bad, &CompilerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an output node"), "{e}");
    let mut dup = io("input", 0..1, 0..2, false);
    dup.indexes.push(Index::new(0, 0, 0));
    let bad = request(vec![dup], vec![io("output", 0..1, 0..1, false)]);
    let e = compile_computation(&n, &bad, &CompilerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than once"), "{e}");
}

#[test]
fn graph_builder_computable_info() {
    let n = net(RNN);
    let req = request(
        vec![io("input", 0..1, 0..4, false)],
        vec![io("output", 0..1, -2..6, false)],
    );
    let mut b = ComputationGraphBuilder::new(&n, &req);
    b.compute().unwrap();
    let info = b.get_computable_info();
    assert_eq!(
        info[0],
        [false, false, true, true, true, true, false, false]
    );
    assert!(!b.all_outputs_are_computable());
}

/// Finite-difference check of the input derivative: objective = Σ output ⊙ W.
fn check_input_deriv(nnet: &Nnet, req: &ComputationRequest) {
    let comp = compile_computation(nnet, req, &CompilerOptions::default()).unwrap();
    let dims: Vec<usize> = req
        .inputs
        .iter()
        .map(|s| nnet.node_dim(nnet.node_index(&s.name).unwrap()))
        .collect();
    let inputs: Vec<Matrix> = req
        .inputs
        .iter()
        .zip(&dims)
        .enumerate()
        .map(|(k, (s, &d))| pseudo_matrix(s.indexes.len(), d, 5 + k as u64))
        .collect();
    let weights: Vec<Matrix> = req
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            pseudo_matrix(
                o.indexes.len(),
                nnet.node_dim(nnet.node_index(&o.name).unwrap()),
                99 + k as u64,
            )
        })
        .collect();
    let objective = |ins: &[Matrix]| -> f64 {
        let mut c = NnetComputer::new(&comp, nnet, None);
        for (s, m) in req.inputs.iter().zip(ins) {
            c.accept_input(&s.name, m.clone()).unwrap();
        }
        c.run_forward().unwrap();
        let mut obj = 0.0f64;
        for (o, w) in req.outputs.iter().zip(&weights) {
            let y = c.output(&o.name).unwrap();
            for r in 0..y.num_rows() {
                for (a, b) in y.row_to_vec(r).iter().zip(&w.row_to_vec(r)) {
                    obj += (*a as f64) * (*b as f64);
                }
            }
        }
        obj
    };
    let mut c = NnetComputer::new(&comp, nnet, None);
    for (s, m) in req.inputs.iter().zip(&inputs) {
        c.accept_input(&s.name, m.clone()).unwrap();
    }
    c.run_forward().unwrap();
    for (o, w) in req.outputs.iter().zip(&weights) {
        c.accept_output_deriv(&o.name, w.clone()).unwrap();
    }
    c.run_backward().unwrap();
    let eps = 1e-2f32;
    for (k, s) in req.inputs.iter().enumerate() {
        if !s.has_deriv {
            continue;
        }
        let d = c.input_deriv(&s.name).unwrap().clone();
        for r in 0..d.num_rows() {
            for col in 0..d.num_cols() {
                let mut plus = inputs.clone();
                plus[k].set(r, col, inputs[k].get(r, col) + eps);
                let mut minus = inputs.clone();
                minus[k].set(r, col, inputs[k].get(r, col) - eps);
                let num = (objective(&plus) - objective(&minus)) / (2.0 * eps as f64);
                let an = d.get(r, col) as f64;
                assert!(
                    (num - an).abs() <= 2e-2 * (1.0 + num.abs()),
                    "input {} row {r} col {col}: analytic {an} vs numeric {num}\n{}",
                    s.name,
                    format_computation(&comp, nnet)
                );
            }
        }
    }
}

#[test]
fn backward_matches_finite_differences() {
    let n = net(SPLICED);
    let req = request(
        vec![io("input", 0..2, -3..7, true)],
        vec![io("output", 0..2, 0..4, true)],
    );
    check_input_deriv(&n, &req);
    let n = net(DESCRIPTOR_ZOO);
    let req = request(
        vec![
            io("input", 0..1, 0..8, true),
            io("ivector", 0..1, 0..1, true),
        ],
        vec![io("output", 0..1, 2..7, true)],
    );
    check_input_deriv(&n, &req);
    let n = net(RNN);
    let req = request(
        vec![io("input", 0..2, 0..4, true)],
        vec![io("output", 0..2, 0..4, true)],
    );
    check_input_deriv(&n, &req);
    let n = net(CLOCKWORK);
    let req = request(
        vec![io("input", 0..1, -2..9, true)],
        vec![io("output", 0..1, 0..7, true)],
    );
    check_input_deriv(&n, &req);
}

#[test]
fn computation_structure() {
    let n = net(SIMPLE);
    let mut req = request(
        vec![io("input", 0..1, 0..3, true)],
        vec![io("output", 0..1, 0..3, true)],
    );
    req.need_model_derivative = true;
    let comp = compile_computation(
        &n,
        &req,
        &CompilerOptions {
            output_debug_info: true,
        },
    )
    .unwrap();
    let marker = comp
        .commands
        .iter()
        .position(|c| matches!(c, Command::NoOperationMarker))
        .unwrap();
    let fwd = &comp.commands[..marker];
    let bwd = &comp.commands[marker + 1..];
    assert!(fwd.iter().any(|c| matches!(c, Command::AcceptInput { .. })));
    assert!(fwd
        .iter()
        .any(|c| matches!(c, Command::ProvideOutput { .. })));
    assert!(bwd.iter().any(|c| matches!(c, Command::AcceptInput { .. })));
    assert!(bwd
        .iter()
        .any(|c| matches!(c, Command::ProvideOutput { .. })));
    assert!(bwd
        .iter()
        .any(|c| matches!(c, Command::Backprop(b) if b.update)));
    let text = format_computation(&comp, &n);
    assert!(text.contains("a.Propagate(NULL, m"), "{text}");
    assert!(text.contains("= user input [for node: 'input']"), "{text}");
    assert!(text.contains("m1 == input.value [ (0, 0:2) ]"), "{text}");
    // No backward part without derivatives.
    let req = request(
        vec![io("input", 0..1, 0..3, false)],
        vec![io("output", 0..1, 0..3, false)],
    );
    let comp = compile_computation(&n, &req, &CompilerOptions::default()).unwrap();
    assert!(matches!(
        comp.commands
            .iter()
            .rev()
            .find(|c| !matches!(c, Command::DeallocMatrix { .. })),
        Some(Command::NoOperationMarker)
    ));
}

#[test]
fn compact_index_printing() {
    let s = io("input", 0..2, -1..2, false);
    assert_eq!(format_indexes(&s.indexes), "[ (0, -1:1) (1, -1:1) ]");
}

fn load_golden(path: &Path) -> Result<Nnet, String> {
    let p = path.to_str().unwrap();
    Nnet::read_model_file(p)
        .map(|r| r.nnet)
        .map_err(|e| e.to_string())
}

fn is_unknown_type(e: &str) -> bool {
    e.contains("unknown component type") || e.contains("a known component type")
}

#[test]
fn rejected_goldens_give_kaldis_errors() {
    for (case, want) in [
        (
            "failover-const",
            "Illegal combination of Failover operation with Const() expression",
        ),
        (
            "sum-inconsistent-scale",
            "Inconsistent value for sum descriptor: for node 2, it can have scales 1 vs. -0.5",
        ),
    ] {
        let n = load_golden(
            &Path::new(GOLDEN)
                .join("rejected")
                .join(case)
                .join("model.raw"),
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        let ctx = nnet_context(&n).unwrap();
        let req = request(
            vec![io("input", 0..1, -ctx.left..7 + ctx.right, false)],
            vec![io("output", 0..1, 0..7, false)],
        );
        let e = compile_computation(&n, &req, &CompilerOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{case} compiled"))
            .to_string();
        assert!(e.contains(want), "{case}: {e}");
    }
    // xvector on 7 frames: the TDNN below the pooling needs more.
    let n = load_golden(&Path::new(GOLDEN).join("rejected/xvector-short-utterance/model.raw"))
        .unwrap_or_else(|e| panic!("xvector-short-utterance: {e}"));
    let req = request(
        vec![io("input", 0..1, 0..7, false)],
        vec![io("output", 0..1, 0..7, false)],
    );
    let e = compile_computation(&n, &req, &CompilerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("Not all outputs were computable"), "{e}");
}

#[test]
fn context_matches_golden_info() {
    let mut checked = Vec::new();
    let mut skipped = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let info = std::fs::read_to_string(d.join("info.txt")).unwrap();
        let field = |k: &str| -> i32 {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap_or_else(|| panic!("{name}: no {k}"))
                .trim()
                .parse()
                .unwrap()
        };
        let want = (
            field("left-context:"),
            field("right-context:"),
            field("modulus:"),
        );
        match load_golden(&d.join("model.raw")) {
            Err(e) => {
                assert!(
                    is_unknown_type(&e) && known_missing(&name).is_some(),
                    "{name}: {e}"
                );
                skipped.push(name);
            }
            Ok(n) => {
                let c = nnet_context(&n).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!((c.left, c.right, c.modulus), want, "{name}");
                checked.push(name);
            }
        }
    }
    eprintln!("context checked: {checked:?}; skipped (known missing): {skipped:?}");
    // Every case but the known-missing ones (12 of the 14 today).
    assert!(checked.len() >= 12, "only {} cases checked", checked.len());
}

#[test]
fn golden_nets_compile_and_match_reference() {
    // Every loadable golden network compiles a chunk-like request and agrees with the
    // reference evaluator.
    let mut n_ok = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let mut n = match load_golden(&d.join("model.raw")) {
            Ok(n) => n,
            Err(e) if known_missing(&name).is_some() && is_unknown_type(&e) => continue,
            Err(e) => panic!("{name}: {e}"),
        };
        // The test's reference evaluates simple components only.
        if n.components
            .iter()
            .any(|c| !c.properties().has(Properties::SIMPLE))
        {
            continue;
        }
        for c in n.components.iter_mut() {
            c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
        }
        let ctx = nnet_context(&n).unwrap();
        let mut inputs = vec![io("input", 0..1, -ctx.left..12 + ctx.right, false)];
        if n.node_index("ivector").is_some() {
            inputs.push(io("ivector", 0..1, 0..1, false));
        }
        let req = request(inputs, vec![io("output", 0..1, 0..12, false)]);
        check_against_reference(&n, &req);
        n_ok += 1;
    }
    assert!(n_ok >= 5);
}

/// Every loadable golden network (general components included), forward only and with all
/// derivatives: the compiled computation and what every optimizer pass leaves pass the
/// computation checker.
#[test]
fn golden_nets_pass_the_checker_after_every_optimizer_pass() {
    use compnet::compile::checker::check_computation;
    use compnet::compile::optimize::{optimize_observed, OptimizeOptions};
    let mut dirs: Vec<_> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    let mut checked = Vec::new();
    for d in dirs {
        let Ok(n) = load_golden(&d.join("model.raw")) else {
            continue;
        };
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let ctx = nnet_context(&n).unwrap_or_else(|e| panic!("{name}: {e}"));
        for with_derivs in [false, true] {
            let mut inputs = vec![io("input", 0..2, -ctx.left..12 + ctx.right, with_derivs)];
            if n.node_index("ivector").is_some() {
                inputs.push(io("ivector", 0..2, 0..1, false));
            }
            let mut req = request(inputs, vec![io("output", 0..2, 0..12, with_derivs)]);
            req.need_model_derivative = with_derivs;
            let mut comp = compile_computation(&n, &req, &CompilerOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            check_computation(&comp, &n).unwrap_or_else(|e| {
                panic!("{name}: compiled: {e}\n{}", format_computation(&comp, &n))
            });
            let mut passes = 0;
            optimize_observed(
                &n,
                &mut comp,
                &OptimizeOptions::default(),
                &mut |pass, c| {
                    passes += 1;
                    check_computation(c, &n).unwrap_or_else(|e| {
                        panic!("{name}: after {pass}: {e}\n{}", format_computation(c, &n))
                    });
                },
            );
            assert_eq!(passes, 11, "{name}");
        }
        checked.push(name);
    }
    eprintln!("checked: {checked:?}");
    // Every case whose component types exist (12 of the 14 today).
    assert!(checked.len() >= 12, "only {} cases checked", checked.len());
}

#[test]
fn outputs_are_deterministic() {
    let n = net(RNN);
    let req = request(
        vec![io("input", 0..2, 0..5, false)],
        vec![io("output", 0..2, 0..5, false)],
    );
    let a = check_against_reference(&n, &req);
    let b = check_against_reference(&n, &req);
    assert_eq!(a.outs[0].to_vec(), b.outs[0].to_vec());
}

#[test]
fn cli_compile_prints_computation() {
    let model = Path::new(GOLDEN).join("cases/seed/model.raw");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args([
            "compile",
            model.to_str().unwrap(),
            "--input=input:0..1:-1..11",
            "--output=output:0..1:0..9",
            "--backprop",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("input-0: name=input, has-deriv=true, indexes=[ (0, -1:11) (1, -1:11) ]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("= user input [for node: 'input']"),
        "{stdout}"
    );
    assert!(stdout.contains(".Backprop("), "{stdout}");
    // Too little right context: a clear error, non-zero exit.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args([
            "compile",
            model.to_str().unwrap(),
            "--input=input:0:-1..10",
            "--output=output:0:0..9",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("supply t up to 11"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `compnet compile --memory`: the optimized peak is below the unoptimized one (which, as
/// compiled, holds every matrix at once), and switching every pass off gives 100 %.
#[test]
fn cli_compile_reports_peak_memory() {
    let model = Path::new(GOLDEN).join("cases/seed/model.raw");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "compile".to_string(),
            model.to_str().unwrap().to_string(),
            "--input=input:0..1:-1..11".into(),
            "--output=output:0..1:0..9".into(),
            "--backprop".into(),
            "--memory".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let bytes = |prefix: &str| -> u64 {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no '{prefix}' line in {stdout}"));
            let (_, rest) = line.split_once(" (").expect("bytes");
            rest.split(' ').next().unwrap().parse().expect("number")
        };
        (bytes("# peak matrix memory:"), bytes("# unoptimized:"))
    };
    let (opt, plain) = run(&[]);
    assert!(opt > 0 && opt < plain, "{opt} vs {plain}");
    let (off, plain2) = run(&["--optimization.optimize=false"]);
    assert_eq!((off, plain2), (plain, plain));
}

/// Random networks from the shared generator: every one whose config loads and whose
/// components are simple compiles, and the compiled forward pass equals this file's
/// reference; with derivatives, the backward pass runs and gives derivatives of the right
/// shape. `COMPNET_COMPILE_RANDOM_NETS` sets the count (default 300).
#[test]
fn random_networks_match_reference() {
    use compnet::testing::{random_nnet_config, random_request};
    let count: u64 = std::env::var("COMPNET_COMPILE_RANDOM_NETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut ran = 0;
    let mut refused = 0;
    let mut config_errors = Vec::new();
    for seed in 0..count {
        let rnet = random_nnet_config(seed, false);
        let mut n = match Nnet::from_config_text(
            &rnet.config,
            "<random>",
            &mut compnet::random::seeded_rng(0),
        ) {
            Ok(n) => n,
            Err(e) => {
                config_errors.push(format!("seed {seed}: {e}"));
                continue;
            }
        };
        for c in n.components.iter_mut() {
            c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
        }
        if n.components
            .iter()
            .any(|c| !c.properties().has(Properties::SIMPLE))
        {
            continue;
        }
        let ctx = compnet::compile::context::nnet_context_all_outputs(&n)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", rnet.config));
        let rr = random_request(&n, &rnet, ctx.left, ctx.right, seed, seed % 2 == 1)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // The generator sometimes supplies one frame too few: then the reference and the
        // compiler must agree that some output is not computable.
        let all_computable = {
            let refs: Vec<(&str, &[Index], &Matrix)> = rr
                .request
                .inputs
                .iter()
                .zip(&rr.input_values)
                .map(|(s, m)| (s.name.as_str(), s.indexes.as_slice(), m))
                .collect();
            let req = &rr.request;
            let n = &n;
            std::thread::scope(|sc| {
                std::thread::Builder::new()
                    .stack_size(512 << 20)
                    .spawn_scoped(sc, move || {
                        let mut r = Reference::new(n, &refs);
                        req.outputs.iter().all(|o| {
                            let node = n.node_index(&o.name).unwrap();
                            o.indexes.iter().all(|i| r.value(node, *i).is_some())
                        })
                    })
                    .unwrap()
                    .join()
                    .unwrap()
            })
        };
        if !all_computable {
            let e = compile_computation(&n, &rr.request, &CompilerOptions::default())
                .err()
                .unwrap_or_else(|| panic!("seed {seed}: compiled a non-computable request"));
            assert!(
                e.to_string().contains("Not all outputs were computable"),
                "{e}"
            );
            refused += 1;
            continue;
        }
        check_against_reference(&n, &rr.request);
        if seed % 2 == 1 {
            check_input_deriv_shapes(&n, &rr.request);
        }
        ran += 1;
    }
    eprintln!("random nets run: {ran}, correctly refused: {refused}; config errors (not the compiler's): {config_errors:?}");
    assert!(ran >= count / 4, "too few random nets ran: {ran}");
}

fn check_input_deriv_shapes(nnet: &Nnet, req: &ComputationRequest) {
    let comp = compile_computation(nnet, req, &CompilerOptions::default()).unwrap();
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let mut c = NnetComputer::new(&comp, nnet, Some(&mut delta));
    for (k, s) in req.inputs.iter().enumerate() {
        let dim = nnet.node_dim(nnet.node_index(&s.name).unwrap());
        c.accept_input(&s.name, pseudo_matrix(s.indexes.len(), dim, k as u64))
            .unwrap();
    }
    c.run_forward().unwrap();
    for o in req.outputs.iter().filter(|o| o.has_deriv) {
        let dim = nnet.node_dim(nnet.node_index(&o.name).unwrap());
        c.accept_output_deriv(&o.name, pseudo_matrix(o.indexes.len(), dim, 3))
            .unwrap();
    }
    c.run_backward()
        .unwrap_or_else(|e| panic!("{e}\n{}", format_computation(&comp, nnet)));
    for i in req.inputs.iter().filter(|i| i.has_deriv) {
        assert_eq!(c.input_deriv(&i.name).unwrap().num_rows(), i.indexes.len());
    }
}

/// The graph of `req` built with the t-range shortcut and without it: the outputs' computable
/// info, and (when all are computable) the pruned graphs as Cindex → (is_input, dependency
/// Cindexes), must be identical. Returns whether all outputs were computable.
fn check_t_ranges_change_nothing(n: &Nnet, req: &ComputationRequest, what: &str) -> bool {
    type Pruned = HashMap<(usize, Index), (bool, Vec<(usize, Index)>)>;
    let build = |with_ranges: bool| -> (Vec<Vec<bool>>, Option<Pruned>) {
        let mut b = ComputationGraphBuilder::new(n, req);
        if !with_ranges {
            b = b.without_t_ranges();
        }
        b.compute().unwrap_or_else(|e| panic!("{what}: {e}"));
        let info = b.get_computable_info();
        if !b.all_outputs_are_computable() {
            return (info, None);
        }
        let g = b.prune().unwrap_or_else(|e| panic!("{what}: {e}"));
        let map = (0..g.len())
            .map(|id| {
                let mut deps: Vec<(usize, Index)> =
                    g.dependencies[id].iter().map(|&d| g.cindexes[d]).collect();
                deps.sort();
                (g.cindexes[id], (g.is_input[id], deps))
            })
            .collect();
        (info, Some(map))
    };
    let (info_with, graph_with) = build(true);
    let (info_without, graph_without) = build(false);
    assert_eq!(info_with, info_without, "{what}: computable outputs differ");
    assert_eq!(graph_with.is_some(), graph_without.is_some(), "{what}");
    if let (Some(a), Some(b)) = (&graph_with, &graph_without) {
        assert_eq!(a.len(), b.len(), "{what}: pruned graph sizes differ");
        assert!(a == b, "{what}: pruned graphs differ");
    }
    graph_with.is_some()
}

/// The t-range analysis (src/compile/t_range.rs) only lets the graph builder skip Cindexes
/// that cannot be computed: on random networks (all generator shapes: splicing, recurrence,
/// clockwork Switch/Round, Failover, ReplaceIndex, dim-range), on the golden configs with
/// non-simple components (Tdnn, statistics extraction and pooling), and on the real-size
/// x-vector net (pooling right-context 10000), the graphs are the same with and without it.
#[test]
fn t_ranges_change_no_graph() {
    use compnet::testing::{random_nnet_config, random_request};
    let mut compared = 0;
    let mut computable = 0;
    for seed in 0..300 {
        let rnet = random_nnet_config(seed, false);
        let Ok(n) = Nnet::from_config_text(
            &rnet.config,
            "<random>",
            &mut compnet::random::seeded_rng(0),
        ) else {
            continue;
        };
        let Ok(ctx) = compnet::compile::context::nnet_context_all_outputs(&n) else {
            continue;
        };
        // Also requests one frame short of the context, so that some are not computable.
        for (k, short) in [(0, 0), (1, 1)] {
            let Ok(rr) = random_request(&n, &rnet, ctx.left - short, ctx.right, seed + k, false)
            else {
                continue;
            };
            computable +=
                check_t_ranges_change_nothing(&n, &rr.request, &format!("seed {seed}")) as usize;
            compared += 1;
        }
    }
    assert!(compared >= 400, "only {compared} random requests compared");
    assert!(
        computable >= 200 && computable < compared,
        "{computable} of {compared} computable"
    );

    for case in [
        "tdnn-component",
        "tdnnf",
        "xvector-small",
        "clockwork",
        "descriptors",
    ] {
        let cfg = std::fs::read_to_string(
            Path::new(GOLDEN)
                .join("cases")
                .join(case)
                .join("net.config"),
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        let n = net(&cfg);
        let has_ivector = n.node_index("ivector").is_some_and(|i| n.is_input_node(i));
        for (lo, hi) in [(-30, 60), (0, 12), (-5, 300)] {
            let mut inputs = vec![io("input", 0..2, lo..hi, false)];
            if has_ivector {
                inputs.push(io("ivector", 0..2, 0..1, false));
            }
            let req = request(inputs, vec![io("output", 0..2, lo - 40..hi + 40, false)]);
            // Outputs outside the input span are not computable: compare the info only.
            check_t_ranges_change_nothing(&n, &req, &format!("{case} [{lo}, {hi})"));
            let ctx = nnet_context(&n).unwrap();
            let req = request(
                req.inputs.clone(),
                vec![io("output", 0..2, lo + ctx.left..hi - ctx.right, false)],
            );
            assert!(
                check_t_ranges_change_nothing(&n, &req, &format!("{case} [{lo}, {hi}) inner")),
                "{case}: the inner outputs should be computable"
            );
        }
    }

    let cfg = std::fs::read_to_string(Path::new(GOLDEN).join("perf/voxceleb_xvector_1a.config"))
        .expect("x-vector config");
    let n = net(&cfg);
    let req = request(
        vec![io("input", 0..1, 0..207, false)],
        vec![io("output", 0..1, 0..200, false)],
    );
    assert!(check_t_ranges_change_nothing(
        &n,
        &req,
        "x-vector 200 frames"
    ));
}
