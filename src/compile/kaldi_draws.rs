//! The `rand()` values Kaldi's compiler takes while it compiles a request, so that a trainer
//! that shares Kaldi's process-wide stream (`nnet3-train`: `srand(--srand)`) stays in step
//! with it. Kaldi draws them for its own consistency checks, so they change no result, but
//! every later draw (which minibatches a nonlinearity stores statistics on, self-repair)
//! depends on how many were taken:
//!
//! - `ComputationGraphBuilder::Compute`: after each breadth-first iteration at distance d,
//!   `RandInt(1, d + 1)`, and on 1 a `Check` of the graph built so far; after the loop
//!   `RandInt(1, 2)` and on 1 another `Check`. A `Check` walks the cindex_ids from 0 in
//!   random strides: `RandInt(0, id)` for each visited id, then a step of
//!   `1 + RandInt(0, n / 100)` (n = cindexes in the graph). The count of cindexes after each
//!   iteration is Kaldi's, so the builder is replayed here with Kaldi's queue discipline
//!   (every dependency added, computability settled through the queues), not taken from
//!   [`super::graph`], which prunes hopeless dependencies early.
//! - `TdnnComponent::PrecomputeIndexes`: `RandInt(0, 10)` per call.
//! - `InsertCommands`: `RandInt(0, 3)` each time it inserts anything: after split-row-ops
//!   when a `*Multi` command became two (Kaldi's splitter cuts at the first change of
//!   sub-matrix), and after memory compression.
//! - Shortcut compilation, widening each precomputed-index entry: `min(5, size)` draws for its
//!   input Indexes and again for its output Indexes, then the component's precompute again.
//!
//! [`KaldiCompileDraws`] remembers which requests Kaldi's cache would hold, since a cached
//! request draws nothing.

use super::cache::mini_request;
use super::computation::{Command, NnetComputation};
use super::graph::ComputationGraph;
use super::request::ComputationRequest;
use crate::kaldi_rand::kaldi_rand_int;
use crate::nnet::component::MiscComputationInfo;
use crate::nnet::{Cindex, NetworkNode, Nnet};
use rand::RngCore;
use rustc_hash::FxHashSet;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Computable {
    Unknown,
    Yes,
    No,
}

#[derive(Clone, Copy)]
struct Info {
    computable: Computable,
    usable_count: i32,
    queued: bool,
    deps_computed: bool,
}

/// Kaldi's graph builder, kept only as far as the number of cindexes per iteration needs.
struct Builder<'a> {
    nnet: &'a Nnet,
    misc: MiscComputationInfo,
    /// The cindexes, which were inputs, and their dependencies.
    graph: ComputationGraph,
    depend_on_this: Vec<Vec<usize>>,
    info: Vec<Info>,
    current: Vec<usize>,
    next: Vec<usize>,
}

impl<'a> Builder<'a> {
    fn new(nnet: &'a Nnet, request: &ComputationRequest) -> Self {
        Builder {
            nnet,
            misc: request.misc_info.clone(),
            graph: ComputationGraph::default(),
            depend_on_this: Vec::new(),
            info: Vec::new(),
            current: Vec::new(),
            next: Vec::new(),
        }
    }

    /// The id of `c`, adding it when new.
    fn get_or_add(&mut self, c: Cindex, is_input: bool) -> (usize, bool) {
        let (id, new) = self.graph.get_or_add(c, is_input);
        if new {
            self.depend_on_this.push(Vec::new());
            self.info.push(Info {
                computable: Computable::Unknown,
                usable_count: 0,
                queued: false,
                deps_computed: false,
            });
        }
        (id, new)
    }

    fn add_inputs_and_outputs(&mut self, request: &ComputationRequest) -> bool {
        for spec in &request.inputs {
            let Some(node) = self.nnet.node_index(&spec.name) else {
                return false;
            };
            for index in &spec.indexes {
                let (id, _) = self.get_or_add((node, *index), true);
                self.info[id].computable = Computable::Yes;
            }
        }
        for spec in &request.outputs {
            let Some(node) = self.nnet.node_index(&spec.name) else {
                return false;
            };
            for index in &spec.indexes {
                let (id, _) = self.get_or_add((node, *index), false);
                self.info[id].usable_count = 1;
                self.info[id].queued = true;
                self.next.push(id);
            }
        }
        std::mem::swap(&mut self.current, &mut self.next);
        true
    }

    fn input_cindexes(&self, c: Cindex) -> Vec<Cindex> {
        let (node, index) = c;
        let mut out = Vec::new();
        match &self.nnet.nodes[node] {
            NetworkNode::Descriptor { descriptor, .. } => {
                descriptor.get_dependencies(&index, &mut out)
            }
            NetworkNode::Component { component } => {
                if let Some(comp) = self.nnet.components.get(*component) {
                    let mut idx = Vec::new();
                    comp.get_input_indexes(&self.misc, &index, &mut idx);
                    out.extend(idx.into_iter().map(|i| (node.wrapping_sub(1), i)));
                }
            }
            NetworkNode::DimRange { input_node, .. } => out.push((*input_node, index)),
            NetworkNode::Input { .. } => {}
        }
        out
    }

    fn add_dependencies(&mut self, id: usize) {
        let inputs = self.input_cindexes(self.graph.cindexes[id]);
        let mut deps = Vec::with_capacity(inputs.len());
        for ic in inputs {
            if ic.0 >= self.nnet.nodes.len() {
                continue;
            }
            let (d, is_new) = self.get_or_add(ic, false);
            if is_new {
                self.info[d].queued = true;
                self.next.push(d);
            }
            deps.push(d);
        }
        deps.sort_unstable();
        deps.dedup();
        for &d in &deps {
            self.depend_on_this[d].push(id);
        }
        self.graph.dependencies[id] = deps.clone();
        for d in deps {
            self.increment_usable_count(d);
        }
    }

    fn increment_usable_count(&mut self, id: usize) {
        let was = self.info[id].usable_count;
        self.info[id].usable_count += 1;
        if was == 0 && self.info[id].computable != Computable::No {
            for k in 0..self.graph.dependencies[id].len() {
                let d = self.graph.dependencies[id][k];
                self.increment_usable_count(d);
            }
            if self.info[id].computable == Computable::Unknown && !self.info[id].queued {
                self.info[id].queued = true;
                self.next.push(id);
            }
        }
    }

    fn decrement_usable_count(&mut self, id: usize) {
        self.info[id].usable_count -= 1;
        if self.info[id].usable_count == 0 && self.info[id].computable != Computable::No {
            for k in 0..self.graph.dependencies[id].len() {
                let d = self.graph.dependencies[id][k];
                self.decrement_usable_count(d);
            }
        }
    }

    fn available(&self, c: &Cindex, unknown_ok: bool) -> bool {
        match self.graph.get_cindex_id(c) {
            None => false,
            Some(id) => match self.info[id].computable {
                Computable::Yes => true,
                Computable::Unknown => unknown_ok,
                Computable::No => false,
            },
        }
    }

    fn compute_computable(&self, id: usize) -> Computable {
        let (node, index) = self.graph.cindexes[id];
        let decide = |sure: bool, possible: bool| {
            if sure {
                Computable::Yes
            } else if !possible {
                Computable::No
            } else {
                Computable::Unknown
            }
        };
        match &self.nnet.nodes[node] {
            NetworkNode::Descriptor { descriptor, .. } => decide(
                descriptor.is_computable(&index, &|c| self.available(c, false), None),
                descriptor.is_computable(&index, &|c| self.available(c, true), None),
            ),
            NetworkNode::Component { component } => {
                let Some(comp) = self.nnet.components.get(*component) else {
                    return Computable::No;
                };
                let in_node = node.wrapping_sub(1);
                decide(
                    comp.is_computable(
                        &self.misc,
                        &index,
                        &|i| self.available(&(in_node, *i), false),
                        None,
                    ),
                    comp.is_computable(
                        &self.misc,
                        &index,
                        &|i| self.available(&(in_node, *i), true),
                        None,
                    ),
                )
            }
            NetworkNode::DimRange { input_node, .. } => {
                match self.graph.get_cindex_id(&(*input_node, index)) {
                    Some(d) => self.info[d].computable,
                    None => Computable::Unknown,
                }
            }
            NetworkNode::Input { .. } => {
                if self.graph.is_input[id] {
                    Computable::Yes
                } else {
                    Computable::No
                }
            }
        }
    }

    fn update_computable(&mut self, id: usize) {
        if self.info[id].usable_count == 0 {
            return;
        }
        let c = self.compute_computable(id);
        self.info[id].computable = c;
        if c == Computable::Unknown {
            return;
        }
        for k in 0..self.depend_on_this[id].len() {
            let o = self.depend_on_this[id][k];
            if self.info[o].computable == Computable::Unknown && !self.info[o].queued {
                self.info[o].queued = true;
                self.next.push(o);
            }
        }
        if c == Computable::No && self.info[id].usable_count != 0 {
            for k in 0..self.graph.dependencies[id].len() {
                let d = self.graph.dependencies[id][k];
                self.decrement_usable_count(d);
            }
        }
    }

    fn build_one_iter(&mut self) {
        while let Some(id) = self.current.pop() {
            self.info[id].queued = false;
            if !self.info[id].deps_computed && self.info[id].usable_count != 0 {
                self.info[id].deps_computed = true;
                self.add_dependencies(id);
                if !self.info[id].queued {
                    self.info[id].queued = true;
                    self.next.push(id);
                }
            } else if self.info[id].computable == Computable::Unknown {
                self.update_computable(id);
            }
        }
        std::mem::swap(&mut self.current, &mut self.next);
    }
}

/// The draws of one `Check` of a graph of `n` cindexes.
fn check_draws(n: usize, rng: &mut dyn RngCore) {
    let n = n as i64;
    let mut id: i64 = 0;
    while id < n {
        kaldi_rand_int(rng, 0, id as i32);
        id += 1 + kaldi_rand_int(rng, 0, (n / 100) as i32) as i64;
    }
}

/// The draws of `ComputationGraphBuilder::Compute` for `request` (one segment).
pub fn graph_builder_draws(nnet: &Nnet, request: &ComputationRequest, rng: &mut dyn RngCore) {
    let mut b = Builder::new(nnet, request);
    if !b.add_inputs_and_outputs(request) {
        return;
    }
    let mut distance: i32 = 0;
    while distance < 10_000 {
        b.build_one_iter();
        distance += 1;
        if kaldi_rand_int(rng, 1, distance + 1) == 1 {
            check_draws(b.graph.cindexes.len(), rng);
        }
        if b.current.is_empty() {
            break;
        }
    }
    if kaldi_rand_int(rng, 1, 2) == 1 {
        check_draws(b.graph.cindexes.len(), rng);
    }
}

/// Whether the component of a `Propagate` draws in its `PrecomputeIndexes` (Kaldi's
/// TdnnComponent spot check).
fn precompute_draws(nnet: &Nnet, comp: &NnetComputation, p: usize, rng: &mut dyn RngCore) {
    for c in &comp.commands {
        if let Command::Propagate(pr) = c {
            if pr.precomputed == p {
                if let Some(k) = nnet.components.get(pr.component) {
                    if k.precompute_draws_kaldi_rand() {
                        kaldi_rand_int(rng, 0, 10);
                    }
                }
                return;
            }
        }
    }
}

/// The draws after the graph of a compiled (optimized) computation: each precomputed-index
/// entry's precompute, then the insertions of split-row-ops and of memory compression.
fn compile_draws(nnet: &Nnet, comp: &NnetComputation, rng: &mut dyn RngCore) {
    for p in 1..comp.component_precomputed_io.len() {
        precompute_draws(nnet, comp, p, rng);
    }
    if comp.kaldi_split_inserts {
        kaldi_rand_int(rng, 0, 3);
    }
    if comp
        .commands
        .iter()
        .any(|c| matches!(c, Command::CompressMatrix { .. }))
    {
        kaldi_rand_int(rng, 0, 3);
    }
}

/// Widening a 2-sequence computation: each precomputed-index entry's Index checks and its
/// precompute again.
fn expand_draws(nnet: &Nnet, small: &NnetComputation, rng: &mut dyn RngCore) {
    for p in 1..small.component_precomputed_io.len() {
        let io = &small.component_precomputed_io[p];
        for _ in 0..io.input_indexes.len().min(5) {
            kaldi_rand_int(rng, 0, io.input_indexes.len() as i32 - 1);
        }
        for _ in 0..io.output_indexes.len().min(5) {
            kaldi_rand_int(rng, 0, io.output_indexes.len() as i32 - 1);
        }
        precompute_draws(nnet, small, p, rng);
    }
}

/// The requests Kaldi's compiler cache would hold, and the draws it makes on a miss.
#[derive(Default)]
pub struct KaldiCompileDraws {
    /// Hashes of the requests compiled so far.
    seen: FxHashSet<u64>,
}

fn request_key(request: &ComputationRequest) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    format!("{request:?}").hash(&mut h);
    h.finish()
}

impl KaldiCompileDraws {
    /// What a checkpoint keeps: the requests already compiled, sorted.
    pub fn keys(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.seen.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// The state [`Self::keys`] described.
    pub fn from_keys(keys: &[u64]) -> Self {
        KaldiCompileDraws {
            seen: keys.iter().copied().collect(),
        }
    }

    /// Draws what Kaldi draws compiling `request` (nothing when it would be cached).
    /// `compiled` gives compnet's optimized computation of a request (the 2-sequence one of
    /// the shortcut included), whose precomputed indexes and compression commands decide the
    /// draws after the graph.
    pub fn draw(
        &mut self,
        nnet: &Nnet,
        request: &ComputationRequest,
        use_shortcut: bool,
        compiled: &mut dyn FnMut(&ComputationRequest) -> Option<std::sync::Arc<NnetComputation>>,
        rng: &mut dyn RngCore,
    ) {
        let key = request_key(request);
        if self.seen.contains(&key) {
            return;
        }
        self.seen.insert(key);
        if use_shortcut {
            if let Ok((mini, _)) = mini_request(request) {
                let mini_key = request_key(&mini);
                let small = compiled(&mini);
                if !self.seen.contains(&mini_key) {
                    self.seen.insert(mini_key);
                    graph_builder_draws(nnet, &mini, rng);
                    if let Some(s) = &small {
                        compile_draws(nnet, s, rng);
                    }
                }
                if let Some(s) = &small {
                    expand_draws(nnet, s, rng);
                }
                return;
            }
        }
        graph_builder_draws(nnet, request, rng);
        if let Some(c) = compiled(request) {
            compile_draws(nnet, &c, rng);
        }
    }
}
