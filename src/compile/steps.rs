//! Ordering the computation: the network as a directed graph on nodes, strongly connected
//! components (Tarjan) → epochs, epochs → phases (Cindexes whose same-epoch dependencies are
//! all in earlier phases), phases → steps (one node each), obeying the rules of seed 001:
//! (a) a requested input or output is one step in request order; (b) a component step is
//! immediately preceded by its descriptor step with the same Indexes; (c) a dim-range step
//! mirrors a step of its source node row for row.

use super::graph::ComputationGraph;
use super::request::ComputationRequest;
use crate::error::{Error, Result};
use crate::nnet::component::Properties;
use crate::nnet::{Cindex, NetworkNode, Nnet};
use rustc_hash::FxHashSet;
use std::collections::BTreeSet;

/// The node-level graph: `arcs[a]` lists the nodes that read node `a` (Kaldi's
/// NnetToDirectedGraph).
pub fn nnet_to_directed_graph(nnet: &Nnet) -> Vec<Vec<usize>> {
    let n = nnet.nodes.len();
    let mut arcs = vec![Vec::new(); n];
    for (i, node) in nnet.nodes.iter().enumerate() {
        let mut deps = match node {
            NetworkNode::Input { .. } => Vec::new(),
            NetworkNode::Descriptor { descriptor, .. } => descriptor.node_dependencies(),
            NetworkNode::Component { .. } => i.checked_sub(1).into_iter().collect(),
            NetworkNode::DimRange { input_node, .. } => vec![*input_node],
        };
        deps.sort_unstable();
        deps.dedup();
        for d in deps {
            if d < n {
                arcs[d].push(i);
            }
        }
    }
    arcs
}

/// Strongly connected components by Tarjan's algorithm (iterative); each component lists its
/// nodes. Components come out in reverse topological order.
pub fn find_sccs_tarjan(graph: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = graph.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut sccs = Vec::new();
    let mut counter = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, next child position)
        let mut call: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = call.last_mut() {
            if *pos < graph[v].len() {
                let w = graph[v][*pos];
                *pos += 1;
                if w >= n {
                    continue;
                }
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    comp.sort_unstable();
                    sccs.push(comp);
                }
            }
        }
    }
    sccs
}

/// Maps each node to an epoch: nodes in one SCC share an epoch, and an epoch only reads
/// earlier epochs (Kaldi's ComputeNnetComputationEpochs). Among ready SCCs the one with the
/// smallest node index goes first, so the order is deterministic.
pub fn compute_epochs(nnet: &Nnet) -> Vec<usize> {
    let graph = nnet_to_directed_graph(nnet);
    let sccs = find_sccs_tarjan(&graph);
    let n = graph.len();
    let mut node_to_scc = vec![0; n];
    for (s, comp) in sccs.iter().enumerate() {
        for &v in comp {
            node_to_scc[v] = s;
        }
    }
    let ns = sccs.len();
    let mut scc_arcs: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); ns];
    let mut indeg = vec![0usize; ns];
    for (a, outs) in graph.iter().enumerate() {
        for &b in outs {
            let (sa, sb) = (node_to_scc[a], node_to_scc[b]);
            if sa != sb && scc_arcs[sa].insert(sb) {
                indeg[sb] += 1;
            }
        }
    }
    let mut ready: BTreeSet<(usize, usize)> = BTreeSet::new();
    for s in 0..ns {
        if indeg[s] == 0 {
            ready.insert((sccs[s][0], s));
        }
    }
    let mut scc_epoch = vec![0; ns];
    let mut next = 0;
    while let Some(first) = ready.iter().next().copied() {
        ready.remove(&first);
        let s = first.1;
        scc_epoch[s] = next;
        next += 1;
        for &t in &scc_arcs[s] {
            indeg[t] -= 1;
            if indeg[t] == 0 {
                ready.insert((sccs[t][0], t));
            }
        }
    }
    (0..n).map(|v| scc_epoch[node_to_scc[v]]).collect()
}

/// Divides the (pruned) graph's cindex_ids into phases (Kaldi's ComputeComputationPhases).
pub fn compute_phases(nnet: &Nnet, graph: &ComputationGraph) -> Result<Vec<Vec<usize>>> {
    let node_to_epoch = compute_epochs(nnet);
    let num_epochs = node_to_epoch.iter().max().map_or(1, |m| m + 2);
    let mut nodes_per_epoch = vec![0usize; num_epochs];
    for &e in &node_to_epoch {
        nodes_per_epoch[e + 1] += 1;
    }
    let n = graph.len();
    let mut epoch_of = vec![0usize; n];
    let mut epochs: Vec<Vec<usize>> = vec![Vec::new(); num_epochs];
    for id in 0..n {
        let e = if graph.is_input[id] {
            0
        } else {
            node_to_epoch[graph.cindexes[id].0] + 1
        };
        epoch_of[id] = e;
        epochs[e].push(id);
    }
    // Dependencies within the same epoch, and their transpose.
    let deps_subset: Vec<Vec<usize>> = (0..n)
        .map(|id| {
            graph.dependencies[id]
                .iter()
                .copied()
                .filter(|&d| epoch_of[d] == epoch_of[id])
                .collect()
        })
        .collect();
    let mut depend_on_subset: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (id, ds) in deps_subset.iter().enumerate() {
        for &d in ds {
            depend_on_subset[d].push(id);
        }
    }
    let mut phase_index = vec![usize::MAX; n];
    let mut phases: Vec<Vec<usize>> = Vec::new();
    for (e, this_epoch) in epochs.iter().enumerate() {
        if this_epoch.is_empty() {
            continue;
        }
        let trivial = e == 0 || nodes_per_epoch[e] <= 1;
        let mut this_phase: Vec<usize> = if trivial {
            this_epoch.clone()
        } else {
            this_epoch
                .iter()
                .copied()
                .filter(|&c| deps_subset[c].is_empty())
                .collect()
        };
        if this_phase.is_empty() {
            return Err(Error::Compute(
                "trying to process a computation with cycles (a Cindex depends on itself)".into(),
            ));
        }
        let mut placed = 0usize;
        while !this_phase.is_empty() {
            let cur = phases.len();
            for &c in &this_phase {
                phase_index[c] = cur;
            }
            placed += this_phase.len();
            let mut candidates: Vec<usize> = Vec::new();
            if !trivial {
                for &c in &this_phase {
                    candidates.extend(depend_on_subset[c].iter().copied());
                }
            }
            phases.push(std::mem::take(&mut this_phase));
            if trivial {
                break;
            }
            candidates.sort_unstable();
            candidates.dedup();
            for c in candidates {
                if phase_index[c] == usize::MAX
                    && deps_subset[c].iter().all(|&d| phase_index[d] != usize::MAX)
                {
                    this_phase.push(c);
                }
            }
        }
        if placed != this_epoch.len() {
            return Err(Error::Compute(
                "trying to process a computation with cycles (Cindexes depend on each other)"
                    .into(),
            ));
        }
    }
    Ok(phases)
}

/// The result of step computation: steps of cindex_ids and each cindex_id's location
/// (step, row). The graph may have grown (dim-range mirrors, padding Indexes).
pub struct Steps {
    /// cindex_ids per step, in row order.
    pub steps: Vec<Vec<usize>>,
    /// cindex_id → (step, row); (usize::MAX, _) if not located.
    pub locations: Vec<(usize, usize)>,
    /// Which steps are inputs of the request.
    pub is_input_step: Vec<bool>,
}

struct StepsComputer<'a> {
    nnet: &'a Nnet,
    graph: &'a mut ComputationGraph,
    steps: Vec<Vec<usize>>,
    is_input_step: Vec<bool>,
    locations: Vec<(usize, usize)>,
}

impl StepsComputer<'_> {
    fn add_step(&mut self, cindexes: &[Cindex], add_if_absent: bool, is_input: bool) -> Result<()> {
        let step = self.steps.len();
        let mut ids = Vec::with_capacity(cindexes.len());
        for (row, c) in cindexes.iter().enumerate() {
            let id = match self.graph.get_cindex_id(c) {
                Some(id) => id,
                None if add_if_absent => {
                    let (id, _) = self.graph.get_or_add(*c, false);
                    // A dim-range Cindex depends on its source.
                    if let Some(NetworkNode::DimRange { input_node, .. }) = self.nnet.nodes.get(c.0)
                    {
                        if let Some(src) = self.graph.get_cindex_id(&(*input_node, c.1)) {
                            self.graph.dependencies[id].push(src);
                        }
                    }
                    id
                }
                None => {
                    return Err(Error::Compute(format!(
                        "internal error: Cindex ({}, {}) of a step is not in the graph",
                        c.0, c.1
                    )))
                }
            };
            if self.locations.len() <= id {
                self.locations.resize(id + 1, (usize::MAX, 0));
            }
            self.locations[id] = (step, row);
            ids.push(id);
        }
        self.steps.push(ids);
        self.is_input_step.push(is_input);
        Ok(())
    }

    fn process_io_step(
        &mut self,
        request: &ComputationRequest,
        is_output: bool,
        sub_phase: &[Cindex],
    ) -> Result<()> {
        let node = sub_phase[0].0;
        let name = &self.nnet.node_names[node];
        let specs = if is_output {
            &request.outputs
        } else {
            &request.inputs
        };
        let spec = specs.iter().find(|s| &s.name == name).ok_or_else(|| {
            Error::Compute(format!(
                "internal error: node '{name}' is not in the request"
            ))
        })?;
        if spec.indexes.len() != sub_phase.len() {
            return Err(Error::Compute(format!(
                "internal error: step for '{name}' has {} rows, the request lists {}",
                sub_phase.len(),
                spec.indexes.len()
            )));
        }
        let cs: Vec<Cindex> = spec.indexes.iter().map(|i| (node, *i)).collect();
        self.add_step(&cs, false, !is_output)
    }

    fn process_component_step(&mut self, step: &[Cindex]) -> Result<()> {
        let node = step[0].0;
        let in_node = node.wrapping_sub(1);
        let NetworkNode::Component { component } = &self.nnet.nodes[node] else {
            return Err(Error::Compute(
                "internal error: not a component node".into(),
            ));
        };
        let comp =
            self.nnet.components.get(*component).ok_or_else(|| {
                Error::Compute(format!("component index {component} out of range"))
            })?;
        let props = comp.properties();
        if props.has(Properties::SIMPLE) {
            let input: Vec<Cindex> = step.iter().map(|c| (in_node, c.1)).collect();
            self.add_step(&input, false, false)?;
            return self.add_step(step, false, false);
        }
        // The inputs the step's Cindexes use, each once. Dependencies overlap heavily (every
        // output of a pooling step shares most of its window with its neighbours: 1.1 M
        // entries for 1,500 distinct inputs), so they are made unique by id before sorting.
        let mut seen = FxHashSet::default();
        let mut input: Vec<Cindex> = Vec::new();
        for c in step {
            if let Some(id) = self.graph.get_cindex_id(c) {
                for &d in &self.graph.dependencies[id] {
                    if seen.insert(d) {
                        input.push(self.graph.cindexes[d]);
                    }
                }
            }
        }
        input.sort_unstable();
        if props.has(Properties::REORDERS_INDEXES) {
            let mut in_idx: Vec<_> = input.iter().map(|c| c.1).collect();
            let mut out_idx: Vec<_> = step.iter().map(|c| c.1).collect();
            comp.reorder_indexes(&mut in_idx, &mut out_idx);
            let input: Vec<Cindex> = in_idx.into_iter().map(|i| (in_node, i)).collect();
            let output: Vec<Cindex> = out_idx.into_iter().map(|i| (node, i)).collect();
            self.add_step(&input, true, false)?;
            self.add_step(&output, true, false)
        } else {
            self.add_step(&input, false, false)?;
            self.add_step(step, false, false)
        }
    }

    fn process_dim_range(&mut self, sub_phase: &[Cindex]) -> Result<()> {
        let node = sub_phase[0].0;
        let NetworkNode::DimRange { input_node, .. } = &self.nnet.nodes[node] else {
            return Err(Error::Compute(
                "internal error: not a dim-range node".into(),
            ));
        };
        let mut src_steps: Vec<usize> = Vec::new();
        for c in sub_phase {
            if let Some(id) = self.graph.get_cindex_id(c) {
                if self.locations.get(id).is_some_and(|l| l.0 != usize::MAX) {
                    continue; // already placed by an earlier mirror step
                }
            }
            let src = self
                .graph
                .get_cindex_id(&(*input_node, c.1))
                .ok_or_else(|| {
                    Error::Compute("internal error: dim-range source not in graph".into())
                })?;
            let loc = self.locations.get(src).copied().unwrap_or((usize::MAX, 0));
            if loc.0 == usize::MAX {
                return Err(Error::Compute(
                    "internal error: dim-range source not computed yet".into(),
                ));
            }
            src_steps.push(loc.0);
        }
        src_steps.sort_unstable();
        src_steps.dedup();
        for s in src_steps {
            let mirror: Vec<Cindex> = self.steps[s]
                .iter()
                .map(|&id| (node, self.graph.cindexes[id].1))
                .collect();
            self.add_step(&mirror, true, false)?;
        }
        Ok(())
    }
}

/// Turns phases into steps (Kaldi's ComputationStepsComputer).
pub fn compute_steps(
    nnet: &Nnet,
    request: &ComputationRequest,
    phases: &[Vec<usize>],
    graph: &mut ComputationGraph,
) -> Result<Steps> {
    let n = graph.len();
    let mut sc = StepsComputer {
        nnet,
        graph,
        steps: Vec::new(),
        is_input_step: Vec::new(),
        locations: vec![(usize::MAX, 0); n],
    };
    for phase in phases {
        let mut cs: Vec<(Cindex, bool)> = phase
            .iter()
            .map(|&id| (sc.graph.cindexes[id], sc.graph.is_input[id]))
            .collect();
        cs.sort_by_key(|a| (!a.1, a.0 .0, a.0 .1));
        // Sub-phases: runs of the same (is_input, node).
        let mut start = 0;
        while start < cs.len() {
            let (node, is_in) = (cs[start].0 .0, cs[start].1);
            let mut end = start;
            while end < cs.len() && cs[end].0 .0 == node && cs[end].1 == is_in {
                end += 1;
            }
            let sub: Vec<Cindex> = cs[start..end].iter().map(|x| x.0).collect();
            start = end;
            if is_in {
                sc.process_io_step(request, false, &sub)?;
                continue;
            }
            match &nnet.nodes[node] {
                NetworkNode::Component { .. } => sc.process_component_step(&sub)?,
                NetworkNode::Input { .. } => sc.process_io_step(request, false, &sub)?,
                NetworkNode::DimRange { .. } => sc.process_dim_range(&sub)?,
                NetworkNode::Descriptor { .. } => {
                    if nnet.is_output_node(node) {
                        sc.process_io_step(request, true, &sub)?;
                    }
                    // Component-input descriptors are emitted with their component step.
                }
            }
        }
    }
    let n = sc.graph.len();
    sc.locations.resize(n, (usize::MAX, 0));
    Ok(Steps {
        steps: sc.steps,
        locations: sc.locations,
        is_input_step: sc.is_input_step,
    })
}

/// Steps grouped per node, for tests and diagnostics: (node name, number of rows) per step.
pub fn describe_steps(
    nnet: &Nnet,
    graph: &ComputationGraph,
    steps: &Steps,
) -> Vec<(String, usize)> {
    steps
        .steps
        .iter()
        .map(|s| {
            let name = s
                .first()
                .and_then(|&id| nnet.node_names.get(graph.cindexes[id].0))
                .cloned()
                .unwrap_or_else(|| "<empty>".into());
            (name, s.len())
        })
        .collect()
}
