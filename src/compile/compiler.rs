//! The compiler (Kaldi's `Compiler::CreateComputation`): graph → phases → steps → location
//! info → which steps need derivatives → step info (matrices, sub-matrices, parts, input
//! locations) → forward commands, the NoOperationMarker, backward commands, deallocation, and
//! optional debug info.
//!
//! Conventions shared with the runtime (`run::NnetComputer`): every matrix, including those
//! of inputs and output derivatives, is allocated (zeroed) by `AllocMatrix` at the start;
//! `AcceptInput` copies the user's matrix into its sub-matrix and `ProvideOutput` hands one
//! out. Output values and requested input derivatives are never deallocated.

use super::computation::{
    BackpropCommand, Command, MatrixDebugInfo, NnetComputation, PropagateCommand, RowsCommand,
};
use super::graph::{build_graph, ComputationGraph};
use super::request::ComputationRequest;
use super::split::{
    convert_to_indexes, has_contiguous_property, kaldi_single_vector, kaldi_splits_in_two,
    split_locations, split_locations_backward, Loc,
};
use super::steps::{compute_phases, compute_steps, Steps};
use crate::error::{Error, Result};
use crate::nnet::component::Properties;
use crate::nnet::descriptor::eval::ScaleTarget;
use crate::nnet::{Cindex, Index, NetworkNode, Nnet};

/// Options of the compiler.
#[derive(Clone, Debug, Default)]
pub struct CompilerOptions {
    /// Fill `NnetComputation::matrix_debug_info` (what each matrix row is).
    pub output_debug_info: bool,
}

/// Everything the compiler knows about one step.
#[derive(Clone, Debug, Default)]
struct StepInfo {
    node: usize,
    is_input: bool,
    /// Sub-matrix of the value (0 for an empty step).
    value: usize,
    /// Sub-matrix of the derivative (0 if none).
    deriv: usize,
    precomputed: usize,
    output_indexes: Vec<Index>,
    value_parts: Vec<usize>,
    deriv_parts: Vec<usize>,
    /// [part][row] → list of (step, row) summed into that row.
    input_locations_list: Vec<Vec<Vec<(usize, usize)>>>,
}

struct Compiler<'a> {
    nnet: &'a Nnet,
    request: &'a ComputationRequest,
    graph: ComputationGraph,
    steps: Vec<StepInfo>,
    locations: Vec<(usize, usize)>,
}

/// Compiles `request` on `nnet` into a computation.
pub fn compile_computation(
    nnet: &Nnet,
    request: &ComputationRequest,
    opts: &CompilerOptions,
) -> Result<NnetComputation> {
    let timer = PhaseTimer::from_env();
    check_request(nnet, request)?;
    let mut graph = build_graph(nnet, request)?;
    timer.lap("graph");
    let phases = compute_phases(nnet, &graph)?;
    timer.lap("phases");
    let Steps {
        steps,
        locations,
        is_input_step,
    } = compute_steps(nnet, request, &phases, &mut graph)?;
    drop(phases);
    timer.lap("steps");
    let mut c = Compiler {
        nnet,
        request,
        graph,
        steps: Vec::new(),
        locations,
    };
    let deriv_needed = c.compute_deriv_needed(&steps, &is_input_step)?;
    let mut computation = NnetComputation::default();
    // Matrix and sub-matrix 0 are placeholders created by the first allocation.
    computation.component_precomputed_indexes.push(None);
    computation
        .component_precomputed_io
        .push(Default::default());
    c.create_step_info(&deriv_needed, &steps, &is_input_step, &mut computation)?;
    timer.lap("step info");
    c.add_commands(&deriv_needed, &mut computation)?;
    timer.lap("commands");
    if opts.output_debug_info {
        c.output_debug_info(&mut computation);
    }
    Ok(computation)
}

/// With `COMPNET_TIME_COMPILE=1` in the environment (or `--verbose=2`), prints how long each compiler phase took
/// (to stderr), so compile-time work can be aimed where it matters.
struct PhaseTimer(Option<std::cell::Cell<std::time::Instant>>);

impl PhaseTimer {
    fn from_env() -> PhaseTimer {
        let on = std::env::var("COMPNET_TIME_COMPILE").is_ok_and(|v| !v.is_empty() && v != "0")
            || crate::log::verbose_level() >= 2;
        PhaseTimer(on.then(|| std::cell::Cell::new(std::time::Instant::now())))
    }
    fn lap(&self, phase: &str) {
        if let Some(start) = &self.0 {
            let now = std::time::Instant::now();
            let ms = (now - start.get()).as_secs_f64() * 1e3;
            eprintln!("compile: {phase}: {ms:.1} ms");
            start.set(now);
        }
    }
}

/// Request-level checks that give clearer errors than the graph builder would.
fn check_request(nnet: &Nnet, request: &ComputationRequest) -> Result<()> {
    for s in &request.inputs {
        let Some(node) = nnet.node_index(&s.name) else {
            return Err(Error::Compute(format!(
                "the request supplies input '{}', but the network has no node of that name",
                s.name
            )));
        };
        if !nnet.is_input_node(node) && !matches!(nnet.nodes[node], NetworkNode::Component { .. }) {
            return Err(Error::Compute(format!(
                "the request supplies input '{}', which is not an input or component node",
                s.name
            )));
        }
    }
    for s in &request.outputs {
        let Some(node) = nnet.node_index(&s.name) else {
            return Err(Error::Compute(format!(
                "the request asks for output '{}', but the network has no node of that name",
                s.name
            )));
        };
        if !nnet.is_output_node(node) {
            return Err(Error::Compute(format!(
                "the request asks for output '{}', which is not an output node",
                s.name
            )));
        }
    }
    let mut names: Vec<&str> = request
        .inputs
        .iter()
        .chain(&request.outputs)
        .map(|s| s.name.as_str())
        .collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::Compute(format!(
            "the request names '{}' more than once",
            w[0]
        )));
    }
    Ok(())
}

/// What a step compiles to: nothing (an empty step, or an input or dim-range node's), the
/// matrix exchanged with the caller of an input step, a component's Propagate and Backprop,
/// or a descriptor's copies.
enum StepWork {
    Nothing,
    Input,
    /// The component's index and properties.
    Component(usize, Properties),
    Descriptor,
}

fn node_dim(nnet: &Nnet, node: usize) -> usize {
    nnet.node_dim(node)
}

impl Compiler<'_> {
    fn component_props(&self, node: usize) -> Properties {
        match self.nnet.nodes.get(node) {
            Some(NetworkNode::Component { component }) => self
                .nnet
                .components
                .get(*component)
                .map_or(Properties(0), |c| c.properties()),
            _ => Properties(0),
        }
    }

    /// True for an updatable component node with a nonzero learning rate.
    fn is_trainable(&self, node: usize) -> bool {
        let Some(NetworkNode::Component { component }) = self.nnet.nodes.get(node) else {
            return false;
        };
        let Some(c) = self.nnet.components.get(*component) else {
            return false;
        };
        if !c.properties().has(Properties::UPDATABLE) {
            return false;
        }
        match c.as_updatable() {
            Some(u) => u.common().learning_rate * u.common().learning_rate_factor != 0.0,
            None => true,
        }
    }

    fn node_of_step(&self, steps: &[Vec<usize>], s: usize) -> usize {
        match steps[s].first() {
            Some(&id) => self.graph.cindexes[id].0,
            // An empty step is the input of the (non-simple) component step after it.
            None => steps
                .get(s + 1)
                .and_then(|n| n.first())
                .map_or(0, |&id| self.graph.cindexes[id].0.saturating_sub(1)),
        }
    }

    fn compute_deriv_needed(&self, steps: &[Vec<usize>], is_input: &[bool]) -> Result<Vec<bool>> {
        let n = steps.len();
        let mut need = vec![false; n];
        for s in 0..n {
            let node = self.node_of_step(steps, s);
            let name = &self.nnet.node_names[node];
            let is_output = self.nnet.is_output_node(node);
            if is_input[s] {
                if let Some(i) = self.request.index_for_input(name) {
                    need[s] = self.request.inputs[i].has_deriv;
                }
                continue;
            }
            // Steps this step reads.
            let mut dep_needs = false;
            if matches!(self.nnet.nodes[node], NetworkNode::Component { .. }) {
                dep_needs = s > 0 && need[s - 1];
            } else {
                'outer: for &id in &steps[s] {
                    for &d in &self.graph.dependencies[id] {
                        let ds = self.locations.get(d).map_or(usize::MAX, |l| l.0);
                        if ds < s && need[ds] {
                            dep_needs = true;
                            break 'outer;
                        }
                    }
                }
            }
            need[s] = if is_output {
                // An output needs somewhere to put its derivative only if one is supplied;
                // nothing reads an output node, so without it there is nothing to propagate.
                self.request
                    .index_for_output(name)
                    .is_some_and(|i| self.request.outputs[i].has_deriv)
            } else {
                dep_needs || (self.request.need_model_derivative && self.is_trainable(node))
            };
        }
        Ok(need)
    }

    fn create_step_info(
        &mut self,
        deriv_needed: &[bool],
        steps: &[Vec<usize>],
        is_input: &[bool],
        comp: &mut NnetComputation,
    ) -> Result<()> {
        let n = steps.len();
        self.steps = vec![StepInfo::default(); n];
        for s in 0..n {
            let node = self.node_of_step(steps, s);
            let ids = &steps[s];
            let output_indexes: Vec<Index> =
                ids.iter().map(|&id| self.graph.cindexes[id].1).collect();
            let mut info = StepInfo {
                node,
                is_input: is_input[s],
                output_indexes,
                ..Default::default()
            };
            if ids.is_empty() {
                // The input step of a component that needs no input rows (e.g. a
                // ConstantComponent): a 0-row matrix of the right width, so Propagate gets
                // a well-formed (empty) input.
                let width = match self.nnet.nodes.get(node + 1) {
                    Some(NetworkNode::Component { component }) => self
                        .nnet
                        .components
                        .get(*component)
                        .map_or(0, |c| c.input_dim()),
                    _ => node_dim(self.nnet, node),
                };
                let m = comp.new_matrix(0, width);
                info.value = comp.whole_submatrix(m);
                self.steps[s] = info;
                continue;
            }
            let rows = ids.len();
            let cols = node_dim(self.nnet, node);
            match &self.nnet.nodes[node] {
                NetworkNode::DimRange {
                    input_node,
                    dim_offset,
                    dim,
                } => {
                    // The source step: where this step's first row's source lives.
                    let src = self
                        .graph
                        .get_cindex_id(&(*input_node, info.output_indexes[0]));
                    let src_step = src
                        .and_then(|id| self.locations.get(id))
                        .map(|l| l.0)
                        .filter(|&st| st < s)
                        .ok_or_else(|| {
                            Error::Compute("internal error: dim-range step without source".into())
                        })?;
                    let sv = self.steps[src_step].value;
                    info.value = sub_cols(comp, sv, *dim_offset, *dim)?;
                    if deriv_needed[s] {
                        let sd = self.steps[src_step].deriv;
                        if sd == 0 {
                            return Err(Error::Compute(
                                "internal error: dim-range needs a derivative its source lacks"
                                    .into(),
                            ));
                        }
                        info.deriv = sub_cols(comp, sd, *dim_offset, *dim)?;
                    }
                }
                _ => {
                    let m = comp.new_matrix(rows, cols);
                    info.value = comp.whole_submatrix(m);
                    if deriv_needed[s] {
                        let m = comp.new_matrix(rows, cols);
                        info.deriv = comp.whole_submatrix(m);
                    }
                }
            }
            if let NetworkNode::Descriptor { descriptor, .. } = &self.nnet.nodes[node] {
                let num_parts = descriptor.parts.len();
                for p in 0..num_parts {
                    let list = self.compute_input_locations_list(&info.output_indexes, node, p)?;
                    info.input_locations_list.push(list);
                }
                if num_parts == 1 {
                    info.value_parts.push(info.value);
                    if info.deriv != 0 {
                        info.deriv_parts.push(info.deriv);
                    }
                } else {
                    let mut off = 0;
                    for part in &descriptor.parts {
                        let d = part.dim(self.nnet);
                        info.value_parts.push(sub_cols(comp, info.value, off, d)?);
                        if info.deriv != 0 {
                            info.deriv_parts.push(sub_cols(comp, info.deriv, off, d)?);
                        }
                        off += d;
                    }
                }
            }
            self.steps[s] = info;
        }
        // Precomputed indexes of non-simple components (needs the input step's Indexes).
        for (s, &need) in deriv_needed.iter().enumerate().take(n) {
            let node = self.steps[s].node;
            if self.steps[s].is_input {
                continue;
            }
            if let NetworkNode::Component { component } = &self.nnet.nodes[node] {
                let Some(c) = self.nnet.components.get(*component) else {
                    continue;
                };
                if c.properties().has(Properties::SIMPLE) || s == 0 {
                    continue;
                }
                let pre = c.precompute_indexes(
                    &self.request.misc_info,
                    &self.steps[s - 1].output_indexes,
                    &self.steps[s].output_indexes,
                    need,
                );
                if let Some(p) = pre {
                    comp.component_precomputed_indexes.push(Some(p));
                    comp.component_precomputed_io
                        .push(super::computation::PrecomputedIo {
                            input_indexes: self.steps[s - 1].output_indexes.clone(),
                            output_indexes: self.steps[s].output_indexes.clone(),
                            need_backprop: need,
                        });
                    self.steps[s].precomputed = comp.component_precomputed_indexes.len() - 1;
                }
            }
        }
        Ok(())
    }

    /// For each row of a descriptor step's part: the (step, row) locations summed into it.
    fn compute_input_locations_list(
        &self,
        indexes: &[Index],
        node: usize,
        part: usize,
    ) -> Result<Vec<Vec<(usize, usize)>>> {
        let NetworkNode::Descriptor { descriptor, .. } = &self.nnet.nodes[node] else {
            return Err(Error::Compute("internal error: not a descriptor".into()));
        };
        let Some(p) = descriptor.parts.get(part) else {
            return Err(Error::Compute("internal error: no such part".into()));
        };
        let available = |c: &Cindex| {
            self.graph
                .get_cindex_id(c)
                .and_then(|id| self.locations.get(id))
                .is_some_and(|l| l.0 != usize::MAX)
        };
        let mut out = Vec::with_capacity(indexes.len());
        let mut used = Vec::new();
        for index in indexes {
            let mut locs = Vec::new();
            if index.t != crate::index::NO_TIME {
                used.clear();
                if !p.is_computable(index, &available, Some(&mut used)) {
                    return Err(Error::Compute(format!(
                        "internal error: descriptor of node '{}' not computable for {} at compile time",
                        self.nnet.node_names[node], index
                    )));
                }
                for c in &used {
                    if let Some(l) = self
                        .graph
                        .get_cindex_id(c)
                        .and_then(|id| self.locations.get(id))
                    {
                        locs.push(*l);
                    }
                }
            }
            out.push(locs);
        }
        Ok(out)
    }

    fn add_commands(&self, deriv_needed: &[bool], comp: &mut NnetComputation) -> Result<()> {
        comp.need_model_derivative = self.request.need_model_derivative;
        for m in 1..comp.matrices.len() {
            comp.commands.push(Command::AllocMatrix { m });
        }
        for s in 0..self.steps.len() {
            self.compile_forward(s, comp)?;
        }
        comp.commands.push(Command::NoOperationMarker);
        if self.request.need_derivatives() {
            for s in (0..self.steps.len()).rev() {
                if deriv_needed[s] {
                    self.compile_backward(s, comp)?;
                }
            }
        }
        self.deallocate(comp);
        Ok(())
    }

    /// What step `s` compiles to, forward and backward.
    fn step_work(&self, s: usize) -> StepWork {
        let info = &self.steps[s];
        if info.value == 0 {
            return StepWork::Nothing; // empty step
        }
        if info.is_input {
            return StepWork::Input;
        }
        match &self.nnet.nodes[info.node] {
            NetworkNode::Input { .. } | NetworkNode::DimRange { .. } => StepWork::Nothing,
            NetworkNode::Component { component } => {
                StepWork::Component(*component, self.component_props(info.node))
            }
            NetworkNode::Descriptor { .. } => StepWork::Descriptor,
        }
    }

    fn compile_forward(&self, s: usize, comp: &mut NnetComputation) -> Result<()> {
        let info = &self.steps[s];
        match self.step_work(s) {
            StepWork::Nothing => {}
            StepWork::Input => comp.commands.push(Command::AcceptInput {
                s: info.value,
                node: info.node,
            }),
            StepWork::Component(component, props) => {
                let input = if s > 0 { self.steps[s - 1].value } else { 0 };
                let memo = if info.deriv != 0 && props.has(Properties::USES_MEMO) {
                    s
                } else {
                    0
                };
                comp.commands.push(Command::Propagate(PropagateCommand {
                    component,
                    node: info.node,
                    precomputed: info.precomputed,
                    input,
                    output: info.value,
                    memo,
                    store_stats: self.request.store_component_stats
                        && props.has(Properties::STORES_STATS),
                }));
            }
            StepWork::Descriptor => {
                for p in 0..info.value_parts.len() {
                    self.forward_part(s, p, comp)?;
                }
                if self.nnet.is_output_node(info.node) {
                    comp.commands.push(Command::ProvideOutput {
                        s: info.value,
                        node: info.node,
                    });
                }
            }
        }
        Ok(())
    }

    /// Groups the per-row input locations of a part by the scale of their source node.
    #[allow(clippy::type_complexity)]
    fn split_by_scale(
        &self,
        s: usize,
        part: usize,
        deriv: bool,
    ) -> Result<(Option<f32>, Vec<(f32, Vec<Vec<Loc>>)>)> {
        let info = &self.steps[s];
        let NetworkNode::Descriptor { descriptor, .. } = &self.nnet.nodes[info.node] else {
            return Err(Error::Compute("internal error: not a descriptor".into()));
        };
        let sum = &descriptor.parts[part];
        let name = &self.nnet.node_names[info.node];
        sum.check_scales()
            .map_err(|e| Error::Compute(format!("node '{name}': {e}")))?;
        let const_term = sum
            .scale_for(ScaleTarget::Const)
            .map_err(|e| Error::Compute(format!("node '{name}': {e}")))?;
        let rows = info.input_locations_list[part].len();
        let mut groups: Vec<(f32, Vec<Vec<Loc>>)> = Vec::new();
        // Scale per source node, computed once.
        let mut scale_cache: Vec<(usize, f32)> = Vec::new();
        for (r, list) in info.input_locations_list[part].iter().enumerate() {
            for &(st, row) in list {
                let src = &self.steps[st];
                let alpha = match scale_cache.iter().find(|c| c.0 == src.node) {
                    Some(c) => c.1,
                    None => {
                        let a = sum
                            .scale_for(ScaleTarget::Node(src.node))
                            .map_err(|e| Error::Compute(format!("node '{name}': {e}")))?
                            .unwrap_or(1.0);
                        scale_cache.push((src.node, a));
                        a
                    }
                };
                let sub = if deriv { src.deriv } else { src.value };
                if sub == 0 {
                    continue; // no derivative wanted there
                }
                let g = match groups.iter().position(|g| g.0 == alpha) {
                    Some(g) => g,
                    None => {
                        groups.push((alpha, vec![Vec::new(); rows]));
                        groups.len() - 1
                    }
                };
                groups[g].1[r].push((sub as i32, row as i32));
            }
        }
        Ok((const_term, groups))
    }

    fn forward_part(&self, s: usize, part: usize, comp: &mut NnetComputation) -> Result<()> {
        let value = self.steps[s].value_parts[part];
        let (const_term, groups) = self.split_by_scale(s, part, false)?;
        let mut first = true;
        if let Some(c) = const_term {
            if c != 0.0 {
                comp.commands.push(Command::SetConst { s: value, alpha: c });
                first = false;
            }
        }
        for (alpha, lists) in groups {
            note_kaldi_multi(comp, &lists, !first);
            for v in split_locations(&lists) {
                forward_from_locations(comp, value, alpha, first, &v);
                first = false;
            }
        }
        Ok(())
    }

    fn compile_backward(&self, s: usize, comp: &mut NnetComputation) -> Result<()> {
        let info = &self.steps[s];
        match self.step_work(s) {
            StepWork::Nothing => {}
            StepWork::Input => {
                if info.deriv != 0 {
                    comp.commands.push(Command::ProvideOutput {
                        s: info.deriv,
                        node: info.node,
                    });
                }
            }
            StepWork::Component(component, props) => {
                let input = if s > 0 { &self.steps[s - 1] } else { info };
                let in_deriv = if s > 0 { input.deriv } else { 0 };
                // In training every component whose backprop runs gets its delta twin:
                // trainable ones take their gradient there, the others their training-only
                // work (self-repair, output-derivative statistics), as in Kaldi's trainer.
                let update = self.request.need_model_derivative
                    && (self.is_trainable(info.node)
                        || (in_deriv != 0 && !props.has(Properties::UPDATABLE)));
                if in_deriv == 0 && !update {
                    return Ok(());
                }
                comp.commands.push(Command::Backprop(BackpropCommand {
                    component,
                    node: info.node,
                    precomputed: info.precomputed,
                    in_value: if props.has(Properties::BACKPROP_NEEDS_INPUT) && s > 0 {
                        input.value
                    } else {
                        0
                    },
                    out_value: if props.has(Properties::BACKPROP_NEEDS_OUTPUT) {
                        info.value
                    } else {
                        0
                    },
                    out_deriv: info.deriv,
                    in_deriv,
                    memo: if props.has(Properties::USES_MEMO) {
                        s
                    } else {
                        0
                    },
                    update,
                }));
            }
            StepWork::Descriptor => {
                if self.nnet.is_output_node(info.node) && info.deriv != 0 {
                    comp.commands.push(Command::AcceptInput {
                        s: info.deriv,
                        node: info.node,
                    });
                }
                for p in 0..info.deriv_parts.len() {
                    let deriv = info.deriv_parts[p];
                    let (_, groups) = self.split_by_scale(s, p, true)?;
                    for (alpha, lists) in groups {
                        note_kaldi_multi(comp, &lists, true);
                        for v in split_locations_backward(&lists) {
                            backward_from_locations(comp, deriv, alpha, &v);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn deallocate(&self, comp: &mut NnetComputation) {
        let mut keep = vec![false; comp.matrices.len()];
        for info in &self.steps {
            if info.value == 0 {
                continue;
            }
            if self.nnet.is_output_node(info.node) {
                keep[comp.submatrices[info.value].matrix] = true;
            } else if info.is_input && info.deriv != 0 {
                keep[comp.submatrices[info.deriv].matrix] = true;
            }
        }
        for (m, k) in keep.iter().enumerate().skip(1) {
            if !k {
                comp.commands.push(Command::DeallocMatrix { m });
            }
        }
    }

    fn output_debug_info(&self, comp: &mut NnetComputation) {
        let mut dbg = vec![MatrixDebugInfo::default(); comp.matrices.len()];
        for info in &self.steps {
            for (sub, is_deriv) in [(info.value, false), (info.deriv, true)] {
                if sub == 0 {
                    continue;
                }
                let sm = comp.submatrices[sub];
                // Only whole-matrix sub-matrices describe their matrix (not dim-ranges).
                if sm.col_offset != 0 || sm.num_cols != comp.matrices[sm.matrix].num_cols {
                    continue;
                }
                let d = &mut dbg[sm.matrix];
                d.is_deriv = is_deriv;
                d.cindexes = info
                    .output_indexes
                    .iter()
                    .map(|i| (info.node, *i))
                    .collect();
            }
        }
        comp.matrix_debug_info = dbg;
    }
}

/// Notes on `comp` when Kaldi's compiler, which keeps lists of one location per row as one
/// vector, would have made a `*Multi` command of `lists` that its split-row-ops cuts in two
/// (an add's or scatter's table trimmed of its "none" ends first: `snipped`).
fn note_kaldi_multi(comp: &mut NnetComputation, lists: &[Vec<Loc>], snipped: bool) {
    if let Some(v) = kaldi_single_vector(lists) {
        if convert_to_indexes(&v).is_none() && kaldi_splits_in_two(&v, snipped) {
            comp.kaldi_split_inserts = true;
        }
    }
}

/// A new sub-matrix: columns [off, off+dim) of sub-matrix `parent`.
fn sub_cols(comp: &mut NnetComputation, parent: usize, off: usize, dim: usize) -> Result<usize> {
    let p = *comp
        .submatrices
        .get(parent)
        .ok_or_else(|| Error::Compute("internal error: bad parent sub-matrix".into()))?;
    if off + dim > p.num_cols {
        return Err(Error::Compute(format!(
            "column range {off}..{} exceeds the {} columns of its source",
            off + dim,
            p.num_cols
        )));
    }
    Ok(comp.new_submatrix(super::computation::SubMatrixInfo {
        matrix: p.matrix,
        row_offset: p.row_offset,
        num_rows: p.num_rows,
        col_offset: p.col_offset + off,
        num_cols: dim,
    }))
}

/// Forward: adds (or, as the first term into a zeroed matrix, copies) one split vector.
fn forward_from_locations(
    comp: &mut NnetComputation,
    value: usize,
    alpha: f32,
    first: bool,
    v: &[Loc],
) {
    if let Some((src, indexes)) = convert_to_indexes(v) {
        let src = src as usize;
        let identity = comp.submatrices[src].num_rows == indexes.len()
            && indexes.iter().enumerate().all(|(i, &x)| x == i as i32);
        if identity {
            comp.commands.push(if first {
                Command::MatrixCopy {
                    dst: value,
                    src,
                    alpha,
                }
            } else {
                Command::MatrixAdd {
                    dst: value,
                    src,
                    alpha,
                }
            });
            return;
        }
        let r = RowsCommand {
            dst: value,
            src,
            indexes: add_table(&mut comp.indexes, indexes),
            alpha,
        };
        comp.commands.push(if first {
            Command::CopyRows(r)
        } else {
            Command::AddRows(r)
        });
    } else {
        let ix = add_table(&mut comp.indexes_multi, v.to_vec());
        comp.commands.push(if first {
            Command::CopyRowsMulti {
                dst: value,
                indexes_multi: ix,
                alpha,
            }
        } else {
            Command::AddRowsMulti {
                dst: value,
                indexes_multi: ix,
                alpha,
            }
        });
    }
}

/// Adds `table` to `tables` and gives its index.
fn add_table<T>(tables: &mut Vec<T>, table: T) -> usize {
    tables.push(table);
    tables.len() - 1
}

/// Backward: adds `alpha` × the rows of `deriv` into the locations of one split vector.
fn backward_from_locations(comp: &mut NnetComputation, deriv: usize, alpha: f32, v: &[Loc]) {
    // With several destination sub-matrices, the split guarantees unique locations.
    let one = convert_to_indexes(v)
        .and_then(|(dst, indexes)| backward_to_one(comp, deriv, alpha, dst as usize, indexes));
    let command = one.unwrap_or_else(|| Command::AddToRowsMulti {
        src: deriv,
        indexes_multi: add_table(&mut comp.indexes_multi, v.to_vec()),
        alpha,
    });
    comp.commands.push(command);
}

/// [`backward_from_locations`] into the rows `indexes` of one sub-matrix `dst`: a whole-matrix
/// addition, AddRows when the destinations are unique, or AddRowRanges; None where only
/// AddToRowsMulti will do.
fn backward_to_one(
    comp: &mut NnetComputation,
    deriv: usize,
    alpha: f32,
    dst: usize,
    indexes: Vec<i32>,
) -> Option<Command> {
    let dst_rows = comp.submatrices[dst].num_rows;
    let num_rows = indexes.len();
    if dst_rows == num_rows && indexes.iter().enumerate().all(|(i, &x)| x == i as i32) {
        return Some(Command::MatrixAdd {
            dst,
            src: deriv,
            alpha,
        });
    }
    // Unique destinations: reverse the mapping and use AddRows.
    let mut reverse = vec![-1i32; dst_rows];
    let mut unique = true;
    for (r, &i) in indexes.iter().enumerate() {
        if i < 0 {
            continue;
        }
        match reverse.get_mut(i as usize) {
            Some(x) if *x == -1 => *x = r as i32,
            _ => {
                unique = false;
                break;
            }
        }
    }
    if unique {
        return Some(Command::AddRows(RowsCommand {
            dst,
            src: deriv,
            indexes: add_table(&mut comp.indexes, reverse),
            alpha,
        }));
    }
    let mut ranges = has_contiguous_property(&indexes).filter(|r| r.len() <= dst_rows)?;
    ranges.resize(dst_rows, (-1, -1));
    Some(Command::AddRowRanges(RowsCommand {
        dst,
        src: deriv,
        indexes: add_table(&mut comp.indexes_ranges, ranges),
        alpha,
    }))
}
