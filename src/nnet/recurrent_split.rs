//! Splitting a recurrent affine layer into its feed-forward and its recurrent products, for
//! looped computation of whole utterances.
//!
//! An LSTM's `W_all` reads `Append(x, IfDefined(Offset(r, -3)))`: the layer's input x and the
//! recurrent projection r of an earlier frame, which itself depends on `W_all`'s output. The
//! compiler computes such a node one time step at a time, so every step multiplies the whole
//! of W (4096 × 1280 in the Switchboard TDNN-LSTM, 21 MB) by a few rows (one per stream).
//! Written as `W_x·x + b + W_r·r`, the x part has no recurrence and is computed for every
//! time step of a chunk in one product; only W_r (4096 × 256, 4 MB) is left per step.
//!
//! [`split_recurrent_affines`] rewrites each such component node `N` into
//! * `N.compnet-feedforward`: an affine component (W's columns of the non-recurrent parts,
//!   and the bias) reading those parts;
//! * `N.compnet-recurrent`: a linear component (the other columns) reading the recurrent
//!   parts, each of which must be `IfDefined(...)`;
//! * `N` itself: an identity reading `Sum(N.compnet-feedforward, IfDefined(N.compnet-recurrent))`,
//!   so every node that read `N` is unchanged.
//!
//! Where a recurrent part is undefined it contributes zero, as before. The outputs equal the
//! unsplit network's up to float rounding (the sum over W's columns is taken in two pieces);
//! chunked computation keeps the network as it is.

use super::component::affine::AffineComponent;
use super::component::linear::LinearComponent;
use super::component::pass_through::NoOpComponent;
use super::component::UpdatableCommon;
use super::descriptor::{Descriptor, ForwardingDescriptor, SumDescriptor};
use super::{NetworkNode, Nnet, ObjectiveType};
use crate::gradient::{NaturalGradientOptions, NaturalGradientState};
use crate::matrix::{Matrix, WeightMatrix};

/// Suffix of the node (and component) computing a split layer's non-recurrent product.
pub const FEEDFORWARD_SUFFIX: &str = ".compnet-feedforward";
/// Suffix of the node (and component) computing a split layer's recurrent product.
pub const RECURRENT_SUFFIX: &str = ".compnet-recurrent";

/// Splits every affine component node whose input appends recurrent parts (each under
/// `IfDefined`) to non-recurrent ones, as the module documentation says; returns the names of
/// the nodes split. Components with 8-bit weights, and nodes whose recurrent parts are not
/// all optional, are left alone.
pub fn split_recurrent_affines(nnet: &mut Nnet) -> Vec<String> {
    let mut split = Vec::new();
    if !nnet.is_recurrent() {
        return split;
    }
    for node in 0..nnet.nodes.len() {
        if let Some(plan) = plan_split(nnet, node) {
            split.push(nnet.node_names[node].clone());
            apply_split(nnet, node, plan);
        }
    }
    split
}

/// What [`apply_split`] needs: per part of the node's input, whether it is recurrent, and its
/// first column in W.
struct Plan {
    recurrent: Vec<bool>,
    col: Vec<usize>,
}

/// The split of component node `node`, if it is an affine node with both kinds of parts.
fn plan_split(nnet: &Nnet, node: usize) -> Option<Plan> {
    let NetworkNode::Component { component } = nnet.nodes[node] else {
        return None;
    };
    let affine = nnet.components[component]
        .as_any()
        .downcast_ref::<AffineComponent>()?;
    if affine.linear.is_int8() {
        return None;
    }
    let NetworkNode::Descriptor { descriptor, .. } = &nnet.nodes[node.checked_sub(1)?] else {
        return None;
    };
    let mut recurrent = Vec::with_capacity(descriptor.parts.len());
    let mut col = Vec::with_capacity(descriptor.parts.len());
    let mut c = 0;
    for part in &descriptor.parts {
        let mut deps = Vec::new();
        part.node_dependencies(&mut deps);
        let r = reaches(nnet, &deps, node);
        if r && !matches!(part, SumDescriptor::Optional(_)) {
            return None;
        }
        recurrent.push(r);
        col.push(c);
        c += part.dim(nnet);
    }
    let both = recurrent.iter().any(|&r| r) && recurrent.iter().any(|&r| !r);
    (both && c == affine.linear.num_cols()).then_some(Plan { recurrent, col })
}

/// True if `target` is among `from` or the nodes they read, directly or not.
fn reaches(nnet: &Nnet, from: &[usize], target: usize) -> bool {
    let mut seen = vec![false; nnet.nodes.len()];
    let mut stack: Vec<usize> = from.to_vec();
    while let Some(n) = stack.pop() {
        if n == target {
            return true;
        }
        if n < seen.len() && !seen[n] {
            seen[n] = true;
            stack.extend(nnet.node_inputs(n));
        }
    }
    false
}

/// The columns of `w` of the parts with `recurrent[i] == which`, in order.
fn columns(w: &Matrix, plan: &Plan, dims: &[usize], which: bool) -> Matrix {
    let ranges: Vec<(usize, usize)> = (0..dims.len())
        .filter(|&i| plan.recurrent[i] == which)
        .map(|i| (plan.col[i], dims[i]))
        .collect();
    let width: usize = ranges.iter().map(|r| r.1).sum();
    let mut data = Vec::with_capacity(w.num_rows() * width);
    for r in 0..w.num_rows() {
        for &(c0, n) in &ranges {
            data.extend_from_slice(&w.sub(r, 1, c0, n).to_vec());
        }
    }
    Matrix::from_vec(w.num_rows(), width, data)
}

fn apply_split(nnet: &mut Nnet, node: usize, plan: Plan) {
    let NetworkNode::Component { component } = nnet.nodes[node] else {
        return;
    };
    let Some(affine) = nnet.components[component]
        .as_any()
        .downcast_ref::<AffineComponent>()
    else {
        return;
    };
    let NetworkNode::Descriptor { descriptor, .. } = &nnet.nodes[node - 1] else {
        return;
    };
    let parts = descriptor.parts.clone();
    let dims: Vec<usize> = parts.iter().map(|p| p.dim(&*nnet)).collect();
    let (w, bias) = (&*affine.linear, affine.bias.clone());
    let w_ff = columns(w, &plan, &dims, false);
    let w_rec = columns(w, &plan, &dims, true);
    let out_dim = w.num_rows();
    let feedforward = AffineComponent::new(w_ff, bias);
    let recurrent = LinearComponent {
        common: UpdatableCommon::default(),
        ng: NaturalGradientOptions::for_weights(w_rec.num_cols(), out_dim),
        params: WeightMatrix::new(w_rec),
        orthonormal_constraint: 0.0,
        ng_state: NaturalGradientState::default(),
    };
    let name = nnet.node_names[node].clone();
    let component_name = nnet.component_names[component].clone();
    let mut add_node = |suffix: &str, component: Box<dyn super::component::Component>, which| {
        let c = nnet.components.len();
        nnet.components.push(component);
        nnet.component_names
            .push(format!("{component_name}{suffix}"));
        let node_parts = parts
            .iter()
            .zip(&plan.recurrent)
            .filter(|(_, &r)| r == which)
            .map(|(p, _)| p.clone())
            .collect();
        nnet.node_names.push(format!("{name}{suffix}_input"));
        nnet.nodes.push(NetworkNode::Descriptor {
            descriptor: Descriptor { parts: node_parts },
            objective: ObjectiveType::Linear,
        });
        nnet.node_names.push(format!("{name}{suffix}"));
        nnet.nodes.push(NetworkNode::Component { component: c });
        nnet.nodes.len() - 1
    };
    let ff_node = add_node(FEEDFORWARD_SUFFIX, Box::new(feedforward), false);
    let rec_node = add_node(RECURRENT_SUFFIX, Box::new(recurrent), true);
    let read = |node| SumDescriptor::Simple(ForwardingDescriptor::Simple { node, scale: 1.0 });
    nnet.nodes[node - 1] = NetworkNode::Descriptor {
        descriptor: Descriptor {
            parts: vec![SumDescriptor::Sum(
                Box::new(read(ff_node)),
                Box::new(SumDescriptor::Optional(Box::new(read(rec_node)))),
            )],
        },
        objective: ObjectiveType::Linear,
    };
    nnet.components.push(Box::new(NoOpComponent::new(out_dim)));
    nnet.component_names
        .push(format!("{component_name}.compnet-sum"));
    nnet.nodes[node] = NetworkNode::Component {
        component: nnet.components.len() - 1,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::seeded_rng;
    use crate::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions};
    use crate::run::looped::LoopedDecoder;

    /// A recurrent layer `a` reading `input` and two earlier frames of its own output `h`
    /// (one before the input, one after, so that W's columns are taken from both sides).
    fn rnn(rec: &str) -> Nnet {
        let config = format!(
            "input-node name=input dim=6
             component name=a type=NaturalGradientAffineComponent input-dim=14 output-dim=4
             component-node name=a component=a input=Append({rec}, input, IfDefined(Offset(h, -2)))
             component name=h type=TanhComponent dim=4
             component-node name=h component=h input=a
             component name=o type=AffineComponent input-dim=4 output-dim=3
             component-node name=o component=o input=h
             output-node name=output input=o"
        );
        Nnet::from_config_text(&config, "<rnn>", &mut seeded_rng(3)).expect("config")
    }

    fn whole_utterance(nnet: Nnet, feats: &Matrix) -> Matrix {
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: 1000,
            ..Default::default()
        };
        ChunkComputer::new(nnet, &opts, "output", None)
            .expect("computer")
            .compute(feats, IvectorSource::None)
            .expect("compute")
    }

    #[test]
    fn split_layer_computes_the_same_outputs() {
        let nnet = rnn("IfDefined(Offset(h, -1))");
        let mut split = nnet.clone();
        assert_eq!(split_recurrent_affines(&mut split), vec!["a".to_string()]);
        let ff = split.node_index("a.compnet-feedforward").expect("node");
        let rec = split.node_index("a.compnet-recurrent").expect("node");
        assert_eq!(split.node_dim(ff), 4);
        assert_eq!(split.node_dim(rec), 4);
        let feats = crate::testing::random_matrix(23, 6, &mut seeded_rng(4));
        let a = whole_utterance(nnet, &feats);
        let b = whole_utterance(split, &feats);
        assert_eq!((a.num_rows(), a.num_cols()), (b.num_rows(), b.num_cols()));
        let mut largest = 0f32;
        for r in 0..a.num_rows() {
            for (x, y) in a.row_to_vec(r).iter().zip(b.row_to_vec(r)) {
                largest = largest.max((x - y).abs());
            }
        }
        assert!(largest <= 1e-5, "split vs unsplit: {largest}");
    }

    #[test]
    fn required_recurrent_parts_and_feed_forward_layers_are_not_split() {
        // Offset(h, -1) without IfDefined: the layer needs that frame, so it stays whole.
        let mut nnet = rnn("Offset(h, -1)");
        assert!(split_recurrent_affines(&mut nnet).is_empty());
        let mut ff = Nnet::from_config_text(
            "input-node name=input dim=6
             component name=a type=AffineComponent input-dim=12 output-dim=4
             component-node name=a component=a input=Append(input, Offset(input, -1))
             output-node name=output input=a",
            "<ff>",
            &mut seeded_rng(3),
        )
        .expect("config");
        assert!(split_recurrent_affines(&mut ff).is_empty());
    }

    /// The point of the split: in the steady chunk of a looped computation the feed-forward
    /// product is one command for the whole chunk, and the recurrent one runs per time step.
    #[test]
    fn looped_chunk_computes_the_feedforward_part_at_once() {
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: 12,
            ..Default::default()
        };
        let dec = LoopedDecoder::new(rnn("IfDefined(Offset(h, -1))"), &opts, "output", None)
            .expect("looped");
        let l = dec.computation().expect("compiled");
        let text = crate::compile::print::format_computation(&l.steady.computation, &l.nnet);
        let count = |c: &str| {
            let call = format!("{c}.Propagate(");
            text.lines().filter(|l| l.contains(&call)).count()
        };
        assert_eq!(count("a.compnet-feedforward"), 1, "{text}");
        assert_eq!(count("a.compnet-recurrent"), 12, "{text}");
    }
}
