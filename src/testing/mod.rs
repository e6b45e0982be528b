//! Test support, built only for tests (the `testing` feature): seeded random networks and
//! random computation requests in the spirit of Kaldi's `nnet-test-utils.cc` (facts §5.2,
//! here), the generic component harness (`component`), the Kaldi golden data in
//! `tests/data/kaldi` (`golden`) and the compiler-independent reference evaluator
//! (`reference`).

pub mod cli;
pub mod component;
pub mod golden;
pub mod numeric;
pub mod reference;

use crate::compile::request::{ComputationRequest, IoSpecification};
use crate::error::Result;
use crate::matrix::Matrix;
use crate::nnet::component::component_type;
use crate::nnet::{Index, Nnet};
use crate::random::{rand_gauss, seeded_rng};
use rand::rngs::StdRng;
use rand::Rng;

/// A generated network config plus what a request needs to know about it.
#[derive(Clone, Debug)]
pub struct RandomNet {
    /// The config text (for `Nnet::from_config_text`).
    pub config: String,
    /// Which generator shape produced it (for messages).
    pub kind: &'static str,
    /// Input nodes: (name, is an iVector read only at t = 0 through `ReplaceIndex`).
    pub inputs: Vec<(String, bool)>,
    /// Output node names.
    pub outputs: Vec<String>,
}

/// Builds config lines with fresh names.
struct Builder {
    lines: Vec<String>,
    rng: StdRng,
    next: usize,
    /// Use only plain AffineComponent (no natural gradient), for exact gradient checks.
    plain_affine: bool,
}

impl Builder {
    fn name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }
    fn dim(&mut self, lo: usize, hi: usize) -> usize {
        self.rng.random_range(lo..=hi)
    }
    /// A component node `name` of `ty` with `extra` options on `input`.
    fn comp(&mut self, prefix: &str, ty: &str, extra: &str, input: &str) -> String {
        let name = self.name(prefix);
        self.lines
            .push(format!("component name={name} type={ty} {extra}"));
        self.lines.push(format!(
            "component-node name={name} component={name} input={input}"
        ));
        name
    }
    fn affine(&mut self, input: &str, in_dim: usize, out_dim: usize) -> String {
        let ty = if self.plain_affine || self.rng.random_bool(0.5) {
            "AffineComponent"
        } else {
            "NaturalGradientAffineComponent"
        };
        let stddev = 1.0 / (in_dim as f32).sqrt();
        self.comp(
            "affine",
            ty,
            &format!(
                "input-dim={in_dim} output-dim={out_dim} param-stddev={stddev:.4} bias-stddev=0.5"
            ),
            input,
        )
    }
    fn nonlin(&mut self, input: &str, dim: usize) -> String {
        let ty = match self.rng.random_range(0..3) {
            0 => "RectifiedLinearComponent",
            1 => "TanhComponent",
            _ => "SigmoidComponent",
        };
        self.comp("nonlin", ty, &format!("dim={dim}"), input)
    }
    /// A dim-range node `name`: `dim` columns of `input` from column `offset`.
    fn dim_range(&mut self, name: &str, input: &str, offset: usize, dim: usize) {
        self.lines.push(format!(
            "dim-range-node name={name} input-node={input} dim-offset={offset} dim={dim}"
        ));
    }
    fn final_layer(&mut self, input: &str, dim: usize, output: &str) {
        let out_dim = self.dim(2, 9);
        let a = self.affine(input, dim, out_dim);
        let last = if self.rng.random_bool(0.5) {
            let ty = if self.rng.random_bool(0.7) {
                "LogSoftmaxComponent"
            } else {
                "SoftmaxComponent"
            };
            self.comp("final", ty, &format!("dim={out_dim}"), &a)
        } else {
            a
        };
        let obj = if self.rng.random_bool(0.3) {
            " objective=quadratic"
        } else {
            ""
        };
        self.lines
            .push(format!("output-node name={output} input={last}{obj}"));
    }
    /// A random splice of `node` (dim `dim`) over offsets from `lo..=hi`; returns the
    /// descriptor and its dim.
    fn splice(&mut self, node: &str, dim: usize, lo: i32, hi: i32) -> (String, usize) {
        let mut offs: Vec<i32> = (lo..=hi).filter(|_| self.rng.random_bool(0.5)).collect();
        if offs.is_empty() {
            offs.push(0);
        }
        let parts: Vec<String> = offs
            .iter()
            .map(|&o| {
                let base = if o == 0 {
                    node.to_string()
                } else {
                    format!("Offset({node}, {o})")
                };
                if self.rng.random_bool(0.15) {
                    format!("Scale(-1.0, {base})")
                } else {
                    base
                }
            })
            .collect();
        let d = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("Append({})", parts.join(", "))
        };
        (d, dim * offs.len())
    }
}

/// Whether a component type is registered (generators only use what exists).
fn have(ty: &str) -> bool {
    component_type(ty).is_some()
}

/// input → relu → output (dim 2), with `second_output` also output2 reading the input
/// directly: the small network of hand-made computations in unit tests.
pub fn relu_nnet(second_output: bool) -> crate::nnet::Nnet {
    let mut config = String::from(
        "input-node name=input dim=2\n\
         component name=relu type=RectifiedLinearComponent dim=2\n\
         component-node name=relu component=relu input=input\n\
         output-node name=output input=relu\n",
    );
    if second_output {
        config += "output-node name=output2 input=input\n";
    }
    crate::nnet::Nnet::from_config_text(&config, "<test>", &mut crate::random::seeded_rng(0))
        .expect("config")
}

/// A Propagate of `component` (node `node`) from sub-matrix `input` to `output`, with no
/// precomputed indexes, memo or statistics: for hand-made computations in unit tests.
pub fn propagate_command(
    component: usize,
    node: usize,
    input: usize,
    output: usize,
) -> crate::compile::Command {
    crate::compile::Command::Propagate(crate::compile::PropagateCommand {
        component,
        node,
        precomputed: 0,
        input,
        output,
        memo: 0,
        store_stats: false,
    })
}

/// A random network config for `seed`. With `plain_affine`, only AffineComponent is used
/// for affine layers (the natural-gradient variant updates differently from the gradient).
pub fn random_nnet_config(seed: u64, plain_affine: bool) -> RandomNet {
    let mut b = Builder {
        lines: Vec::new(),
        rng: seeded_rng(seed ^ 0x5eed_0000),
        next: 0,
        plain_affine,
    };
    let mut inputs = vec![("input".to_string(), false)];
    let mut outputs = vec!["output".to_string()];
    let in_dim = b.dim(3, 12);
    b.lines.push(format!("input-node name=input dim={in_dim}"));
    // One seed in eight is a CNN (decided from the seed, so the other kinds' networks stay
    // as they were).
    let kind = if seed % 8 == 7 && have("TimeHeightConvolutionComponent") {
        b.cnn(in_dim)
    } else {
        legacy_kind(&mut b, in_dim, &mut inputs, &mut outputs)
    };
    RandomNet {
        config: b.lines.join("\n") + "\n",
        kind,
        inputs,
        outputs,
    }
}

impl Builder {
    /// TimeHeightConvolution layers on `input` read as height × filters, in the spirit of
    /// Kaldi's GenerateConfigSequenceCnnNew: padding or not, height subsampling, time offsets
    /// `-1,0,1`, `0` or `-2,0,2`, sometimes only t = 0 required (missing frames read zeros),
    /// a tiny max-memory-mb (the split path), natural gradient unless `plain_affine`, and
    /// sometimes a residual Sum.
    fn cnn(&mut self, in_dim: usize) -> &'static str {
        let (mut height, mut filters) = if in_dim.is_multiple_of(2) && self.rng.random_bool(0.5) {
            (in_dim / 2, 2)
        } else {
            (in_dim, 1)
        };
        let mut node = "input".to_string();
        let layers = self.rng.random_range(1..=2);
        for _ in 0..layers {
            let fout = self.dim(1, 4);
            let subsample = if height >= 4 && self.rng.random_bool(0.4) {
                2
            } else {
                1
            };
            let (h_offs, hout) = if subsample == 1 && height > 2 && self.rng.random_bool(0.3) {
                ("0,1,2", height - 2) // no padding
            } else {
                ("-1,0,1", height.div_ceil(subsample))
            };
            let t_offs = ["-1,0,1", "0", "-2,0,2"][self.rng.random_range(0..3)];
            let mut extra = format!(
                "num-filters-in={filters} num-filters-out={fout} height-in={height} \
                 height-out={hout} height-subsample-out={subsample} height-offsets={h_offs} \
                 time-offsets={t_offs} param-stddev=0.3 bias-stddev=0.2"
            );
            if t_offs != "0" && self.rng.random_bool(0.4) {
                extra += " required-time-offsets=0";
            }
            if self.rng.random_bool(0.3) {
                extra += " max-memory-mb=0.00005";
            }
            if self.plain_affine || self.rng.random_bool(0.5) {
                extra += " use-natural-gradient=false";
            }
            let c = self.comp("conv", "TimeHeightConvolutionComponent", &extra, &node);
            let dim = hout * fout;
            let input = if dim == height * filters && self.rng.random_bool(0.5) {
                format!("Sum({c}, {node})")
            } else {
                c
            };
            node = self.nonlin(&input, dim);
            (height, filters) = (hout, fout);
        }
        self.final_layer(&node, height * filters, "output");
        "cnn"
    }
}

/// The network kinds other than the CNN kind.
fn legacy_kind(
    b: &mut Builder,
    in_dim: usize,
    inputs: &mut Vec<(String, bool)>,
    outputs: &mut Vec<String>,
) -> &'static str {
    match b.rng.random_range(0..8) {
        0 => {
            // Simplest: input -> affine -> output.
            let out = b.dim(2, 10);
            let a = b.affine("input", in_dim, out);
            b.lines.push(format!("output-node name=output input={a}"));
            "simplest"
        }
        1 => {
            // Splicing TDNN, optional iVector, optional second hidden layer.
            let (mut d, mut dim) = b.splice("input", in_dim, -3, 3);
            if b.rng.random_bool(0.4) {
                let iv = b.dim(2, 5);
                b.lines.push(format!("input-node name=ivector dim={iv}"));
                inputs.push(("ivector".to_string(), true));
                d = format!("Append({d}, ReplaceIndex(ivector, t, 0))");
                dim += iv;
            }
            let h = b.dim(4, 16);
            let a = b.affine(&d, dim, h);
            let n = b.nonlin(&a, h);
            let (n, h) = if b.rng.random_bool(0.5) {
                let (d2, dim2) = b.splice(&n, h, -2, 2);
                let h2 = b.dim(4, 12);
                let a2 = b.affine(&d2, dim2, h2);
                (b.nonlin(&a2, h2), h2)
            } else {
                (n, h)
            };
            b.final_layer(&n, h, "output");
            "context"
        }
        2 | 3 => {
            // Simple RNN, optionally clockwork (Switch over three affines + a Round branch).
            let clockwork = b.rng.random_range(2..4) == 3;
            let (d, dim) = b.splice("input", in_dim, -1, 1);
            let h = b.dim(4, 12);
            let a = b.affine(&d, dim, h);
            // Names must be known before the nodes exist: the recurrence reads the future node.
            let nl = format!("nonlin{}", b.next + 100);
            let r = b.affine(&format!("Offset({nl}, -1)"), h, h);
            let ty = if b.rng.random_bool(0.5) {
                "TanhComponent"
            } else {
                "RectifiedLinearComponent"
            };
            b.lines
                .push(format!("component name={nl} type={ty} dim={h}"));
            b.lines.push(format!(
                "component-node name={nl} component={nl} input=Sum({a}, IfDefined({r}))"
            ));
            if clockwork {
                let o = b.dim(2, 8);
                let f0 = b.affine(&nl, h, o);
                let f1 = b.affine(&format!("Offset({nl}, -1)"), h, o);
                let f2 = b.affine(&format!("Offset({nl}, 1)"), h, o);
                let slow = b.affine(&format!("Round({nl}, 2)"), h, o);
                let out = b.comp(
                    "final",
                    "LogSoftmaxComponent",
                    &format!("dim={o}"),
                    &format!("Sum(Switch({f0}, {f1}, {f2}), {slow})"),
                );
                b.lines.push(format!("output-node name=output input={out}"));
                "clockwork"
            } else {
                b.final_layer(&nl, h, "output");
                "rnn"
            }
        }
        4 => {
            // Descriptor zoo: dim-range nodes, Failover, IfDefined of the future, Sum with
            // Scale and Const, Round, nested Offsets, two outputs.
            let h = 2 * b.dim(2, 6);
            let a0 = b.affine("Offset(input, 1)", in_dim, h);
            let (d1, dim1) = b.splice("input", in_dim, -2, 1);
            let a1 = b.affine(&d1, dim1, h);
            let r1 = b.comp(
                "relu",
                "RectifiedLinearComponent",
                &format!("dim={h}"),
                &format!("Sum({a1}, Scale(-0.5, Offset({a0}, -2)), Const(0.25, {h}))"),
            );
            let half = h / 2;
            let lo = b.name("lo");
            let hi = b.name("hi");
            b.dim_range(&lo, &r1, 0, half);
            b.dim_range(&hi, &r1, half, half);
            let k = b.rng.random_range(1..4);
            let f = b.rng.random_range(1..3);
            let m = b.rng.random_range(2..4);
            let a2 = b.affine(
                &format!(
                    "Append(Failover(Offset({lo}, -{k}), {hi}), IfDefined(Offset({hi}, {f})), Round({lo}, {m}), Offset(Offset({hi}, 1), -1))"
                ),
                4 * half,
                h,
            );
            let t2 = b.nonlin(&a2, h);
            b.final_layer(&format!("Switch({t2}, Offset({t2}, -1))"), h, "output");
            b.final_layer(&t2, h, "output2");
            outputs.push("output2".into());
            "descriptors"
        }
        5 => {
            // Two inputs, two outputs; the second output reads the first's hidden layer.
            let d2 = b.dim(2, 6);
            b.lines.push(format!("input-node name=input2 dim={d2}"));
            inputs.push(("input2".to_string(), false));
            let (s1, dim1) = b.splice("input", in_dim, -1, 1);
            let (s2, dim2) = b.splice("input2", d2, -2, 0);
            let h = b.dim(3, 10);
            let a = b.affine(&format!("Append({s1}, {s2})"), dim1 + dim2, h);
            let n = b.nonlin(&a, h);
            b.final_layer(&n, h, "output");
            let o2 = b.dim(2, 5);
            let a3 = b.affine(&format!("Sum({n}, Offset({n}, 1))"), h, o2);
            b.lines.push(format!("output-node name=output2 input={a3}"));
            outputs.push("output2".into());
            "multi-io"
        }
        7 => {
            // DistributeComponent: blocks of a hidden layer spread over x, a layer evaluated
            // at every x, summed back with ReplaceIndex.
            let blocks = b.rng.random_range(2..4);
            let o = b.dim(2, 5);
            let (d, dim) = b.splice("input", in_dim, -1, 1);
            let a = b.affine(&d, dim, blocks * o);
            let dist = b.comp(
                "dist",
                "DistributeComponent",
                &format!("input-dim={} output-dim={o}", blocks * o),
                &a,
            );
            let h = b.dim(2, 6);
            let a2 = b.affine(&dist, o, h);
            let n = b.nonlin(&a2, h);
            let terms: Vec<String> = (0..blocks)
                .map(|x| format!("ReplaceIndex({n}, x, {x})"))
                .collect();
            b.final_layer(&format!("Sum({})", terms.join(", ")), h, "output");
            "distribute"
        }
        _ if have("RestrictedAttentionComponent") && b.rng.random_range(0..3) == 1 => {
            // Attention layer: an affine makes keys, values and queries for the heads;
            // sometimes fewer inputs are required than used (edges see zero padding).
            let heads = b.rng.random_range(1..3);
            let (kd, vd) = (b.dim(1, 4), b.dim(1, 4));
            let (left, right) = (b.rng.random_range(0..3), b.rng.random_range(1..3));
            let stride = b.rng.random_range(1..3);
            let (left_req, right_req) = if b.rng.random_bool(0.5) {
                (b.rng.random_range(0..=left), b.rng.random_range(0..=right))
            } else {
                (left, right)
            };
            let oc = b.rng.random_bool(0.7);
            let cd = (left + 1 + right) as usize;
            let a = b.affine("input", in_dim, heads * (2 * kd + vd + cd));
            let att = b.comp(
                "attention",
                "RestrictedAttentionComponent",
                &format!(
                    "num-heads={heads} key-dim={kd} value-dim={vd} num-left-inputs={left} \
                     num-right-inputs={right} time-stride={stride} \
                     num-left-inputs-required={left_req} num-right-inputs-required={right_req} \
                     output-context={oc}"
                ),
                &a,
            );
            let out_dim = heads * (vd + if oc { cd } else { 0 });
            b.final_layer(&att, out_dim, "output");
            "attention"
        }
        _ if have("GruNonlinearityComponent") && b.rng.random_bool(0.5) => {
            // Fast GRU (projected or not) or output-gate GRU, as Kaldi's xconfig builds them.
            let cell = b.dim(2, 6);
            let (d, dim) = b.splice("input", in_dim, -1, 0);
            let name = b.name("gru");
            let y = format!("{name}_y");
            let prev = format!("IfDefined(Offset({y}, -1))");
            if b.rng.random_bool(0.5) {
                let rec = b.rng.random_range(1..=cell);
                let s = if rec == cell {
                    y.clone()
                } else {
                    format!("{name}_s")
                };
                let sprev = format!("IfDefined(Offset({s}, -1))");
                let zp = b.affine(&format!("Append({d}, {sprev})"), dim + rec, cell);
                let z = b.comp("z", "SigmoidComponent", &format!("dim={cell}"), &zp);
                let rp = b.affine(&format!("Append({d}, {sprev})"), dim + rec, rec);
                let r = b.comp("r", "SigmoidComponent", &format!("dim={rec}"), &rp);
                let hp = b.affine(&d, dim, cell);
                let extra = if rec == cell {
                    String::new()
                } else {
                    format!(", {sprev}")
                };
                let g = b.comp(
                    "gru_nonlin",
                    "GruNonlinearityComponent",
                    &format!("cell-dim={cell} recurrent-dim={rec}"),
                    &format!("Append({z}, {r}, {hp}, {prev}{extra})"),
                );
                b.dim_range(&y, &g, cell, cell);
                if rec != cell {
                    b.dim_range(&s, &g, cell, rec);
                }
            } else {
                let zp = b.affine(&format!("Append({d}, {prev})"), dim + cell, cell);
                let z = b.comp("z", "SigmoidComponent", &format!("dim={cell}"), &zp);
                let hp = b.affine(&d, dim, cell);
                let g = b.comp(
                    "opgru_nonlin",
                    "OutputGruNonlinearityComponent",
                    &format!("cell-dim={cell} param-mean=0.5 param-stddev=0.3"),
                    &format!("Append({z}, {hp}, {prev})"),
                );
                b.dim_range(&y, &g, cell, cell);
            }
            b.final_layer(&y, cell, "output");
            "gru"
        }
        _ => {
            // LSTM-like cell with a Failover to a constant initial state (when a
            // ConstantComponent exists), else an IfDefined recurrence; ElementwiseProduct
            // gates when available.
            let h = b.dim(3, 8);
            let (d, dim) = b.splice("input", in_dim, -1, 0);
            let x = b.affine(&d, dim, h);
            let c = format!("cell{}", b.next + 100);
            let prev = if have("ConstantComponent") {
                // A ConstantComponent needs no input; as in Kaldi's configs it names itself.
                let c0 = b.name("c0");
                b.lines.push(format!(
                    "component name={c0} type=ConstantComponent output-dim={h} is-updatable=true"
                ));
                b.lines.push(format!(
                    "component-node name={c0} component={c0} input={c0}"
                ));
                format!("Failover(Offset({c}, -1), {c0})")
            } else {
                format!("IfDefined(Offset({c}, -1))")
            };
            let g = b.comp("gate", "SigmoidComponent", &format!("dim={h}"), &x);
            let cell_in = if have("ElementwiseProductComponent") {
                let gp = b.comp(
                    "gprod",
                    "ElementwiseProductComponent",
                    &format!("input-dim={} output-dim={h}", 2 * h),
                    &format!("Append({g}, {prev})"),
                );
                format!("Sum({x}, {gp})")
            } else {
                format!("Sum({x}, {prev})")
            };
            b.lines
                .push(format!("component name={c} type=TanhComponent dim={h}"));
            b.lines.push(format!(
                "component-node name={c} component={c} input={cell_in}"
            ));
            b.final_layer(&format!("Append({c}, {g})"), 2 * h, "output");
            "lstm-like"
        }
    }
}

/// A random request plus matching input matrices.
#[derive(Clone, Debug)]
pub struct RandomRequest {
    pub request: ComputationRequest,
    /// One matrix per request input, rows in the order of its indexes.
    pub input_values: Vec<Matrix>,
}

/// A random request for `net`: 1–4 sequences, 1–10 output frames starting at t 0–9, input
/// frames covering `left`/`right` context plus 0–2 extra frames on each side; iVector inputs
/// get one row at t = 0 per sequence. Row orders are shuffled now and then.
pub fn random_request(
    nnet: &Nnet,
    net: &RandomNet,
    left: i32,
    right: i32,
    seed: u64,
    derivs: bool,
) -> Result<RandomRequest> {
    let mut rng = seeded_rng(seed ^ 0x0e0e_0000);
    let num_n = rng.random_range(1..=4);
    let t0 = rng.random_range(0..10);
    let len = rng.random_range(1..=10);
    // Now and then one frame of context too few, so edge outputs are not computable and the
    // compiler's refusal can be checked against the reference.
    let extra_l = if rng.random_bool(0.1) {
        -1
    } else {
        rng.random_range(0..=2)
    };
    let extra_r = rng.random_range(0..=2);
    let mut request = ComputationRequest {
        need_model_derivative: derivs && rng.random_bool(0.7),
        ..Default::default()
    };
    let mut input_values = Vec::new();
    for (name, is_ivector) in &net.inputs {
        let mut idx: Vec<Index> = Vec::new();
        for n in 0..num_n {
            if *is_ivector {
                idx.push(Index::new(n, 0, 0));
            } else {
                for t in (t0 - left - extra_l)..(t0 + len + right + extra_r) {
                    idx.push(Index::new(n, t, 0));
                }
            }
        }
        shuffle_sometimes(&mut idx, &mut rng);
        let dim = nnet.node_index(name).map(|i| nnet.node_dim(i)).unwrap_or(0);
        let m = Matrix::from_vec(
            idx.len(),
            dim,
            (0..idx.len() * dim).map(|_| rand_gauss(&mut rng)).collect(),
        );
        request.inputs.push(IoSpecification {
            name: name.clone(),
            indexes: idx,
            has_deriv: derivs && rng.random_bool(0.7),
        });
        input_values.push(m);
    }
    for name in &net.outputs {
        // The second output is sometimes left out of the request.
        if name != "output" && rng.random_bool(0.3) {
            continue;
        }
        let mut idx = Vec::new();
        for n in 0..num_n {
            for t in t0..t0 + len {
                idx.push(Index::new(n, t, 0));
            }
        }
        shuffle_sometimes(&mut idx, &mut rng);
        request.outputs.push(IoSpecification {
            name: name.clone(),
            indexes: idx,
            has_deriv: derivs,
        });
    }
    Ok(RandomRequest {
        request,
        input_values,
    })
}

/// Reorders the rows: t-major (Kaldi's usual order), or a random shuffle, or unchanged.
fn shuffle_sometimes(idx: &mut [Index], rng: &mut StdRng) {
    match rng.random_range(0..4) {
        0 => idx.sort(),
        1 => {
            for i in (1..idx.len()).rev() {
                let j = rng.random_range(0..=i);
                idx.swap(i, j);
            }
        }
        _ => {}
    }
}

/// A matrix of standard-normal values.
pub fn random_matrix(rows: usize, cols: usize, rng: &mut StdRng) -> Matrix {
    Matrix::from_vec(
        rows,
        cols,
        (0..rows * cols).map(|_| rand_gauss(rng)).collect(),
    )
}
