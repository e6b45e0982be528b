//! Looped computation (Kaldi's `CompileLooped`, facts §6.3): a network run over an endless
//! stream chunk by chunk, each chunk reusing the activations (recurrent state included) that
//! earlier chunks computed instead of recomputing its left context.
//!
//! Kaldi compiles three chunk requests into one program, finds two points where the live
//! matrices agree up to a time shift, and closes the loop with a `goto`. compnet gets the same
//! reuse from two ordinary computations over *persistent matrices*:
//!
//! * the **first chunk** (outputs `[0, w)`, inputs from `−left − extra_left_context_initial`);
//! * the **steady chunk** (outputs `[w, 2w)`), whose request gives, besides the new input
//!   frames, the values of every component node that earlier chunks computed and this chunk
//!   reads (component nodes may be request inputs, as in Kaldi). Both computations also
//!   provide, as extra outputs, the values the *next* chunk will read from them.
//!
//! Chunk k ≥ 1 runs the steady computation with every t shifted by (k−1)·w: the carried
//! matrices of one chunk are the next chunk's inputs row for row (Kaldi's matrix swaps at the
//! `goto`). Which (node, t) are carried is found from the compiled graphs, not assumed: the
//! first chunk's graph says how far each node is computed (its frontier); a steady chunk
//! offered everything below the frontiers says what it reads from the past; the carried set
//! is that pattern's periodic extension, so a chunk can always pass on what the next needs.
//! The repeat is then proven, not assumed: the chunk after the steady one is compiled too,
//! and its computation must print identically and its inputs be the steady chunk's shifted
//! by w ([`LoopedComputation::steady`]); otherwise the network is refused as not loopable.
//!
//! Why not Kaldi's single program with a goto: our compiler and optimizer work on one
//! request; the two-computation form needs neither multi-request compilation nor loop
//! detection over live matrices, runs the unchanged optimizer and checker on each part, and
//! hands the streaming runtime (`run::looped`) a natural place to exchange inputs, outputs
//! and iVectors per chunk. The cost is one copy of the carried rows per chunk (a few frames
//! per layer).

use super::context::{nnet_modulus, NnetContext};
use super::graph::{build_graph, ComputationGraph};
use super::print::format_computation;
use super::request::{ComputationRequest, IoSpecification};
use super::{compile_computation, optimize, CompilerOptions, NnetComputation, OptimizeOptions};
use crate::error::{Error, Result};
use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, IndexVar, SumDescriptor};
use crate::nnet::{Index, NetworkNode, Nnet, ObjectiveType};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Prefix of the output nodes added for the carried values of component node `C`.
pub const CARRY_PREFIX: &str = "compnet-carry:";

/// How a network is looped (the options of Kaldi's `NnetSimpleLoopedComputationOptions`).
#[derive(Clone, Debug)]
pub struct LoopedOptions {
    /// Input frames per chunk before [`get_chunk_size`] rounding.
    pub frames_per_chunk: i32,
    /// Output every n-th frame.
    pub frame_subsampling_factor: i32,
    /// Extra left context of the first chunk (beyond the network's own).
    pub extra_left_context_initial: i32,
    /// The optimizer's options.
    pub optimize: OptimizeOptions,
}

impl Default for LoopedOptions {
    fn default() -> Self {
        LoopedOptions {
            frames_per_chunk: 20,
            frame_subsampling_factor: 1,
            extra_left_context_initial: 0,
            optimize: OptimizeOptions::default(),
        }
    }
}

/// One chunk's compiled computation and what it exchanges with its neighbours.
#[derive(Debug)]
pub struct ChunkProgram {
    /// The request (absolute t: first chunk outputs `[0, w)`, steady chunk `[w, 2w)`).
    pub request: ComputationRequest,
    pub computation: NnetComputation,
    /// Per request input: `Some(i)` if it is the i-th carried matrix of the previous chunk.
    pub carried_in: Vec<Option<usize>>,
    /// The output nodes whose values the next chunk receives, in its carried order.
    pub carried_out: Vec<String>,
}

/// A network compiled for looped computation: the first and the steady chunk.
#[derive(Debug)]
pub struct LoopedComputation {
    /// The network plus one output node per carried component node (shared with the
    /// computations of other stream counts compiled from it).
    pub nnet: Arc<Nnet>,
    /// The output node computed.
    pub output_node: String,
    /// Input frames per chunk (w), a multiple of the modulus and the subsampling factor.
    pub chunk_size: i32,
    pub frame_subsampling_factor: i32,
    /// Streams per computation (sequence n of every request is stream n).
    pub num_streams: usize,
    pub first: ChunkProgram,
    pub steady: ChunkProgram,
}

/// Kaldi's `GetChunkSize`: the advised size rounded up to a multiple of the network's modulus
/// and of the frame-subsampling factor.
pub fn get_chunk_size(nnet: &Nnet, frame_subsampling_factor: i32, advised: i32) -> i32 {
    let m = nnet_modulus(nnet).max(1);
    let f = frame_subsampling_factor.max(1);
    let mut size = advised.max(1);
    while size % m != 0 || size % f != 0 {
        size += 1;
    }
    size
}

/// Kaldi's `ModifyNnetIvectorPeriod`: every `ReplaceIndex(ivector, t, 0)` becomes
/// `Round(ivector, period)`, so that the iVector may change every `period` frames of a
/// stream. Returns how many descriptors changed. (The looped computation here does not need
/// it: each chunk receives its iVector afresh; see the module doc.)
pub fn modify_nnet_ivector_period(nnet: &mut Nnet, period: i32) -> Result<usize> {
    if period < 1 {
        return Err(Error::Usage(format!(
            "iVector period must be >= 1, got {period}"
        )));
    }
    let Some(iv) = nnet
        .node_index("ivector")
        .filter(|&i| nnet.is_input_node(i))
    else {
        return Ok(0);
    };
    fn fwd(d: &mut ForwardingDescriptor, iv: usize, period: i32) -> bool {
        match d {
            ForwardingDescriptor::ReplaceIndex {
                src,
                var: IndexVar::T,
                value: 0,
            } if matches!(**src, ForwardingDescriptor::Simple { node, .. } if node == iv) => {
                let src = std::mem::replace(
                    src,
                    Box::new(ForwardingDescriptor::Simple {
                        node: iv,
                        scale: 1.0,
                    }),
                );
                *d = ForwardingDescriptor::Round {
                    src,
                    t_modulus: period,
                };
                true
            }
            ForwardingDescriptor::Simple { .. } => false,
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => fwd(src, iv, period),
            ForwardingDescriptor::Switch(v) => {
                let mut any = false;
                for x in v {
                    any |= fwd(x, iv, period);
                }
                any
            }
        }
    }
    fn sum(d: &mut SumDescriptor, iv: usize, period: i32) -> bool {
        match d {
            SumDescriptor::Simple(f) => fwd(f, iv, period),
            SumDescriptor::Optional(s) => sum(s, iv, period),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                let x = sum(a, iv, period);
                sum(b, iv, period) || x
            }
            SumDescriptor::Const { .. } => false,
        }
    }
    let mut changed = 0;
    for node in nnet.nodes.iter_mut() {
        if let NetworkNode::Descriptor { descriptor, .. } = node {
            let mut any = false;
            for p in descriptor.parts.iter_mut() {
                any |= sum(p, iv, period);
            }
            changed += usize::from(any);
        }
    }
    Ok(changed)
}

/// Per component node, the Indexes (sorted by t, then x) a graph computes (`inputs` false) or
/// that were given and are read (`inputs` true).
fn node_indexes(nnet: &Nnet, g: &ComputationGraph, inputs: bool) -> BTreeMap<usize, Vec<Index>> {
    let mut used = vec![false; g.cindexes.len()];
    for deps in &g.dependencies {
        for &d in deps {
            used[d] = true;
        }
    }
    let mut out: BTreeMap<usize, Vec<Index>> = BTreeMap::new();
    for (id, &(node, index)) in g.cindexes.iter().enumerate() {
        let keep = if inputs {
            g.is_input[id] && used[id]
        } else {
            !g.is_input[id]
        };
        if keep && matches!(nnet.nodes[node], NetworkNode::Component { .. }) {
            out.entry(node).or_default().push(index);
        }
    }
    for v in out.values_mut() {
        sort_indexes(v);
    }
    out
}

fn sort_indexes(v: &mut Vec<Index>) {
    v.sort_by_key(|i| (i.t, i.x, i.n));
    v.dedup();
}

fn shifted(v: &[Index], by: i32) -> Vec<Index> {
    v.iter().map(|i| Index::new(i.n, i.t + by, i.x)).collect()
}

/// The request inputs that are not carried: the network's input nodes over t in
/// `[lo, hi)` (and t = 0 for `ivector`, which `ReplaceIndex(ivector, t, 0)` reads), for
/// streams n = 0..`streams`, n-major.
fn plain_inputs(nnet: &Nnet, lo: i32, hi: i32, streams: i32) -> Vec<IoSpecification> {
    let mut v = Vec::new();
    for name in nnet.input_names() {
        let mut ts: Vec<i32> = (lo..hi).collect();
        if name == "ivector" && !(lo..hi).contains(&0) {
            ts.insert(0, 0);
        }
        v.push(IoSpecification {
            name: name.to_string(),
            indexes: (0..streams)
                .flat_map(|n| ts.iter().map(move |&t| Index::new(n, t, 0)))
                .collect(),
            has_deriv: false,
        });
    }
    v
}

/// Removes from the first `plain` inputs (those not carried) the Indexes the graph does not
/// read, and such inputs that are left empty; returns how many remain.
fn trim_inputs(nnet: &Nnet, req: &mut ComputationRequest, plain: usize) -> Result<usize> {
    let g = build_graph(nnet, req)?;
    let mut used = vec![false; g.cindexes.len()];
    for deps in &g.dependencies {
        for &d in deps {
            used[d] = true;
        }
    }
    for spec in req.inputs.iter_mut().take(plain) {
        let Some(node) = nnet.node_index(&spec.name) else {
            continue;
        };
        spec.indexes
            .retain(|i| g.get_cindex_id(&(node, *i)).is_some_and(|id| used[id]));
    }
    let before = req.inputs.len();
    let mut k = 0;
    req.inputs.retain(|s| {
        k += 1;
        k > plain || !s.indexes.is_empty()
    });
    Ok(plain - (before - req.inputs.len()))
}

/// What looping a network needs that does not depend on how many streams run together:
/// the network with its carry output nodes, the chunk size, the carried set and the
/// inputs each chunk reads, all for stream n = 0. Streams never mix (no descriptor or
/// component maps one n to another), so the request of N streams is stream 0's with every
/// Index repeated for n = 0..N; [`LoopedPlan::compile`] then builds one graph per chunk (the
/// compiler's), where finding all of this from the N-stream requests took two per chunk and
/// two more.
#[derive(Debug)]
pub struct LoopedPlan {
    /// The network plus one output node per carried component node (shared by every
    /// stream count's computation).
    pub nnet: Arc<Nnet>,
    /// The output node computed.
    pub output_node: String,
    /// Input frames per chunk (w), a multiple of the modulus and the subsampling factor.
    pub chunk_size: i32,
    pub frame_subsampling_factor: i32,
    /// Stream 0's carried (node, Indexes), sorted by t, x, n, as the first chunk leaves them.
    carried: Vec<(usize, Vec<Index>)>,
    /// The output node of each carried node, in the same order.
    carry_names: Vec<String>,
    /// Stream 0's plain (not carried) inputs of chunks 0, 1 and 2, those the chunk reads.
    plain: [Vec<IoSpecification>; 3],
    optimize: OptimizeOptions,
}

/// `v` (Indexes of stream 0) repeated for streams n = 0..`streams`, n-major.
fn for_streams(v: &[Index], streams: i32) -> Vec<Index> {
    (0..streams)
        .flat_map(|n| v.iter().map(move |i| Index::new(n, i.t, i.x)))
        .collect()
}

/// Where the chunks of a looped computation lie: `w` input frames per chunk, every `f`-th
/// output, the network's context and the first chunk's extra left context.
#[derive(Clone, Copy)]
struct Chunking {
    w: i32,
    f: i32,
    left: i32,
    right: i32,
    extra: i32,
}

impl Chunking {
    /// Chunk k's request with nothing carried: its plain inputs and its output, for
    /// `streams` streams.
    fn bare_request(
        &self,
        nnet: &Nnet,
        output_node: &str,
        k: i32,
        streams: i32,
    ) -> ComputationRequest {
        let w = self.w;
        ComputationRequest {
            inputs: plain_inputs(
                nnet,
                k * w - self.left - if k == 0 { self.extra } else { 0 },
                (k + 1) * w + self.right,
                streams,
            ),
            outputs: vec![outputs_of(output_node, w, self.f, k, streams)],
            ..Default::default()
        }
    }
}

/// The carried set of `streams` streams, per component node, sorted by t, x, n: found from
/// the graphs of the first and the steady chunk.
fn carried_sets(
    nnet: &Nnet,
    output_node: &str,
    c: Chunking,
    streams: i32,
) -> Result<Vec<(usize, Vec<Index>)>> {
    // 1. How far the first chunk computes each component node.
    let g0 = build_graph(nnet, &c.bare_request(nnet, output_node, 0, streams))?;
    let comp0 = node_indexes(nnet, &g0, false);
    let frontier: BTreeMap<usize, i32> = comp0
        .iter()
        .filter_map(|(&n, v)| v.iter().map(|i| i.t).max().map(|t| (n, t + 1)))
        .collect();
    // 2. What a steady chunk reads of that past when all of it is offered.
    let mut r1 = c.bare_request(nnet, output_node, 1, streams);
    for (&node, v) in &comp0 {
        let old: Vec<Index> = v
            .iter()
            .copied()
            .filter(|i| i.t < frontier[&node])
            .collect();
        if !old.is_empty() {
            r1.inputs.push(IoSpecification {
                name: nnet.node_names[node].clone(),
                indexes: old,
                has_deriv: false,
            });
        }
    }
    let g1 = build_graph(nnet, &r1)?;
    let read1 = node_indexes(nnet, &g1, true);
    let comp1 = node_indexes(nnet, &g1, false);
    // 3. The carried set: the periodic extension of what a steady chunk computes, from the
    // earliest t it reads up to the frontier.
    let mut carried: Vec<(usize, Vec<Index>)> = Vec::new();
    for (&node, read) in &read1 {
        let (Some(&e1), Some(new)) = (frontier.get(&node), comp1.get(&node)) else {
            return Err(Error::Compute(format!(
                "looped computation: node '{}' is read from the past but not computed by every chunk",
                nnet.node_names[node]
            )));
        };
        let m = read.iter().map(|i| i.t).min().unwrap_or(e1);
        let mut set = Vec::new();
        for i in new.iter().filter(|i| i.t >= e1) {
            let mut t = i.t - c.w;
            while t >= m {
                if t < e1 {
                    set.push(Index::new(i.n, t, i.x));
                }
                t -= c.w;
            }
        }
        sort_indexes(&mut set);
        if !set.is_empty() {
            carried.push((node, set));
        }
    }
    Ok(carried)
}

/// Plans `nnet` for looped computation of `output_node` (which must exist) with the
/// network's `context` (left/right context of that output); each [`LoopedPlan::compile`]
/// then says how many streams run together.
///
/// The plan's network is `nnet` with an output node per carried component node added.
/// Given the network of an earlier plan of the same output, which has those nodes already,
/// it is that network, shared, not a copy: the weights are not copied (146 MB for the
/// Switchboard TDNN-LSTM). A network not shared elsewhere is extended in place.
pub fn plan_looped(
    mut net: Arc<Nnet>,
    output_node: &str,
    context: NnetContext,
    opts: &LoopedOptions,
) -> Result<LoopedPlan> {
    let f = opts.frame_subsampling_factor.max(1);
    let c = Chunking {
        w: get_chunk_size(&net, f, opts.frames_per_chunk),
        f,
        left: context.left.max(0),
        right: context.right.max(0),
        extra: opts.extra_left_context_initial.max(0),
    };
    let w = c.w;
    let carried = carried_sets(&net, output_node, c, 1)?;
    let nnet: &Nnet = &net;
    // 4. The network with one output node per carried component node (reading that node,
    // and nothing else, under its reserved name; present already in a network that an
    // earlier looped computation extended).
    let mut carry_names = Vec::new();
    let mut missing = Vec::new();
    for (node, _) in &carried {
        let name = format!("{CARRY_PREFIX}{}", nnet.node_names[*node]);
        let descriptor = Descriptor {
            parts: vec![SumDescriptor::Simple(ForwardingDescriptor::Simple {
                node: *node,
                scale: 1.0,
            })],
        };
        match nnet.node_index(&name).map(|i| &nnet.nodes[i]) {
            None => missing.push((name.clone(), descriptor)),
            Some(NetworkNode::Descriptor { descriptor: d, .. }) if *d == descriptor => {}
            Some(_) => {
                return Err(Error::Compute(format!(
                    "looped computation: the network has a node '{name}' of its own (the \
                     prefix '{CARRY_PREFIX}' is reserved)"
                )))
            }
        }
        carry_names.push(name);
    }
    if !missing.is_empty() {
        let n = Arc::make_mut(&mut net);
        for (name, descriptor) in missing {
            n.node_names.push(name);
            n.nodes.push(NetworkNode::Descriptor {
                descriptor,
                objective: ObjectiveType::Linear,
            });
        }
    }
    // 5. Which plain inputs each of chunks 0, 1 and 2 reads (with everything carried given).
    let mut plan = LoopedPlan {
        nnet: net,
        output_node: output_node.to_string(),
        chunk_size: w,
        frame_subsampling_factor: f,
        carried,
        carry_names,
        plain: Default::default(),
        optimize: opts.optimize.clone(),
    };
    for k in 0..3 {
        let bare = c.bare_request(&plan.nnet, output_node, k, 1);
        let (mut req, plain) = plan.request(bare.inputs, k, 1);
        let kept = trim_inputs(&plan.nnet, &mut req, plain)?;
        req.inputs.truncate(kept);
        plan.plain[k as usize] = req.inputs;
    }
    Ok(plan)
}

/// The output Indexes of chunk k for `streams` streams, n-major.
fn outputs_of(output_node: &str, w: i32, f: i32, k: i32, streams: i32) -> IoSpecification {
    IoSpecification {
        name: output_node.to_string(),
        indexes: (0..streams)
            .flat_map(|n| (0..w / f).map(move |i| Index::new(n, k * w + i * f, 0)))
            .collect(),
        has_deriv: false,
    }
}

impl LoopedPlan {
    /// Chunk k's request for `streams` streams, given stream 0's plain inputs: those inputs,
    /// then (k > 0) the carried values of chunk k − 1; the output, then the values carried
    /// to chunk k + 1. Also returns how many inputs are plain.
    fn request(
        &self,
        plain: Vec<IoSpecification>,
        k: i32,
        streams: i32,
    ) -> (ComputationRequest, usize) {
        let w = self.chunk_size;
        let mut inputs: Vec<IoSpecification> = plain
            .into_iter()
            .map(|s| IoSpecification {
                indexes: for_streams(&s.indexes, streams),
                ..s
            })
            .collect();
        let num_plain = inputs.len();
        let carried = |set: &[Index], by: i32| {
            let mut v = for_streams(&shifted(set, by), streams);
            sort_indexes(&mut v);
            v
        };
        if k > 0 {
            for (node, set) in &self.carried {
                inputs.push(IoSpecification {
                    name: self.nnet.node_names[*node].clone(),
                    indexes: carried(set, (k - 1) * w),
                    has_deriv: false,
                });
            }
        }
        let mut outputs = vec![outputs_of(
            &self.output_node,
            w,
            self.frame_subsampling_factor,
            k,
            streams,
        )];
        for ((_, set), name) in self.carried.iter().zip(&self.carry_names) {
            outputs.push(IoSpecification {
                name: name.clone(),
                indexes: carried(set, k * w),
                has_deriv: false,
            });
        }
        let req = ComputationRequest {
            inputs,
            outputs,
            ..Default::default()
        };
        (req, num_plain)
    }

    /// The looped computation of `num_streams` streams (sequences n = 0..N−1, each its own
    /// utterance) on the plan's network.
    pub fn compile(&self, num_streams: usize) -> Result<LoopedComputation> {
        let streams = num_streams.clamp(1, 1 << 16) as i32;
        let w = self.chunk_size;
        let net = &self.nnet;
        let program = |k: i32| -> Result<ChunkProgram> {
            let (req, plain) = self.request(self.plain[k as usize].clone(), k, streams);
            let mut computation = compile_computation(net, &req, &CompilerOptions::default())?;
            let optimize_opts = OptimizeOptions {
                looped: true,
                ..self.optimize.clone()
            };
            optimize(net, &mut computation, &optimize_opts);
            let carried_in = (0..req.inputs.len())
                .map(|i| i.checked_sub(plain))
                .collect();
            Ok(ChunkProgram {
                request: req,
                computation,
                carried_in,
                carried_out: self.carry_names.clone(),
            })
        };
        let first = program(0)?;
        let steady = program(1)?;
        let next = program(2)?;
        // 6. The repeat: chunk 2 must be chunk 1 shifted by w.
        let same_inputs = steady.request.inputs.len() == next.request.inputs.len()
            && steady
                .request
                .inputs
                .iter()
                .zip(&next.request.inputs)
                .all(|(a, b)| {
                    a.name == b.name
                        && if a.name == "ivector" {
                            a.indexes.len() == b.indexes.len()
                        } else {
                            shifted(&a.indexes, w) == b.indexes
                        }
                });
        if !same_inputs
            || format_computation(&steady.computation, net)
                != format_computation(&next.computation, net)
        {
            return Err(Error::Compute(format!(
                "looped computation: chunks of {w} frames do not repeat (is the network recurrent \
             towards the future, or is its context not shift-invariant?)"
            )));
        }
        Ok(LoopedComputation {
            nnet: Arc::clone(net),
            output_node: self.output_node.clone(),
            chunk_size: w,
            frame_subsampling_factor: self.frame_subsampling_factor,
            num_streams: streams as usize,
            first,
            steady,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::context::nnet_context;
    use crate::random::seeded_rng;

    /// The plan's N-stream requests (stream 0's, repeated) are those found from N-stream
    /// graphs: the same carried sets, and the same inputs left after trimming, for a
    /// recurrent network with an iVector, a spliced TDNN and the first chunk's extra context.
    #[test]
    fn requests_of_n_streams_are_stream_zero_repeated() {
        let configs = [
            "input-node name=input dim=3
             input-node name=ivector dim=2
             component name=a type=AffineComponent input-dim=9 output-dim=4
             component-node name=a component=a input=Append(input, ReplaceIndex(ivector, t, 0), IfDefined(Offset(h, -2)))
             component name=h type=TanhComponent dim=4
             component-node name=h component=h input=a
             component name=o type=AffineComponent input-dim=4 output-dim=3
             component-node name=o component=o input=h
             output-node name=output input=o",
            "input-node name=input dim=3
             component name=l1 type=AffineComponent input-dim=9 output-dim=4
             component-node name=l1 component=l1 input=Append(Offset(input, -1), input, Offset(input, 2))
             component name=l2 type=AffineComponent input-dim=8 output-dim=3
             component-node name=l2 component=l2 input=Append(Offset(l1, -3), l1)
             output-node name=output input=l2",
        ];
        for (i, config) in configs.iter().enumerate() {
            let nnet = Nnet::from_config_text(config, "<looped>", &mut seeded_rng(i as u64))
                .expect("config");
            let context = nnet_context(&nnet).expect("context");
            let opts = LoopedOptions {
                frames_per_chunk: 6,
                frame_subsampling_factor: 2 - i as i32,
                extra_left_context_initial: 2,
                ..Default::default()
            };
            let plan = plan_looped(Arc::new(nnet), "output", context, &opts).expect("plan");
            let c = Chunking {
                w: plan.chunk_size,
                f: plan.frame_subsampling_factor,
                left: context.left.max(0),
                right: context.right.max(0),
                extra: 2,
            };
            let streams = 3;
            let direct = carried_sets(&plan.nnet, "output", c, streams).expect("carried");
            assert!(!direct.is_empty(), "config {i} carries nothing");
            let repeated: Vec<(usize, Vec<Index>)> = plan
                .carried
                .iter()
                .map(|(node, set)| {
                    let mut v = for_streams(set, streams);
                    sort_indexes(&mut v);
                    (*node, v)
                })
                .collect();
            assert_eq!(direct, repeated, "config {i}: carried sets");
            for k in 0..3 {
                // Chunk k's N-stream request built from the N-stream carried sets.
                let mut found = c.bare_request(&plan.nnet, "output", k, streams);
                let plain = found.inputs.len();
                for ((node, set), name) in direct.iter().zip(&plan.carry_names) {
                    if k > 0 {
                        found.inputs.push(IoSpecification {
                            name: plan.nnet.node_names[*node].clone(),
                            indexes: shifted(set, (k - 1) * c.w),
                            has_deriv: false,
                        });
                    }
                    found.outputs.push(IoSpecification {
                        name: name.clone(),
                        indexes: shifted(set, k * c.w),
                        has_deriv: false,
                    });
                }
                let kept = trim_inputs(&plan.nnet, &mut found, plain).expect("trim");
                let (planned, planned_plain) =
                    plan.request(plan.plain[k as usize].clone(), k, streams);
                assert_eq!(kept, planned_plain, "config {i} chunk {k}");
                assert_eq!(found.inputs, planned.inputs, "config {i} chunk {k}: inputs");
                assert_eq!(found.outputs, planned.outputs, "config {i} chunk {k}");
            }
            // Trimming dropped something, so the comparison is not between untouched lists.
            let bare = c.bare_request(&plan.nnet, "output", 1, 1);
            let before: usize = bare.inputs.iter().map(|s| s.indexes.len()).sum();
            let after: usize = plan.plain[1].iter().map(|s| s.indexes.len()).sum();
            assert!(
                after < before,
                "config {i}: {after} of {before} plain inputs kept"
            );
        }
    }
}
