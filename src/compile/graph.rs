//! The computation graph (Kaldi's `ComputationGraph`) and its builder
//! (`ComputationGraphBuilder`), as described in the "Compilation" document (seed 001):
//! Cindexes ↔ cindex_ids, `is_input`, dependencies; a `ComputableInfo` per Cindex and a
//! `usable_count` so that recurrences (t → −∞) terminate; breadth-first expansion with two
//! queues (Cindexes whose dependencies must be added, and Cindexes whose computability must be
//! re-evaluated); pruning to what the requested outputs actually use.

use super::request::{format_indexes, ComputationRequest};
use crate::error::{Error, Result};
use crate::nnet::component::MiscComputationInfo;
use crate::nnet::{Cindex, Index, NetworkNode, Nnet, TRange};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// The Cindex → cindex_id map: per (node, n, x), a dense array over `t`. The builder and the
/// compiler look Cindexes up in runs along `t` (a descriptor's splice, a pooling window of
/// thousands of frames); with one hash table over whole Cindexes every such lookup was a cache
/// miss (a whole-utterance x-vector graph has 15 M edges). `t` values too sparse for an array
/// go to a plain hash table.
/// (node, n, x): one dense row of the [`CindexMap`].
type RowKey = (usize, i32, i32);

#[derive(Clone, Debug, Default)]
struct CindexMap {
    rows: FxHashMap<RowKey, usize>,
    dense: Vec<DenseRow>,
    sparse: FxHashMap<Cindex, usize>,
    /// The row of the last lookup: runs along `t` skip the row hash.
    last_row: std::cell::Cell<Option<(RowKey, usize)>>,
}

/// The ids of one (node, n, x) for `t` in `t0 .. t0 + ids.len()` (`ABSENT` where none).
/// Entries too spread out for the array (e.g. every 10th t) are in the map's sparse table;
/// `t_min..=t_max` bounds all of the row's entries and `sparse` counts those in the table,
/// so a lookup outside the row, or in a row with no sparse entries, never hashes.
#[derive(Clone, Debug)]
struct DenseRow {
    t0: i64,
    ids: Vec<u32>,
    count: usize,
    t_min: i64,
    t_max: i64,
    sparse: usize,
}

const ABSENT: u32 = u32::MAX;

impl CindexMap {
    fn get(&self, c: &Cindex) -> Option<usize> {
        let (node, i) = *c;
        let key = (node, i.n, i.x);
        let r = match self.last_row.get() {
            Some((k, r)) if k == key => Some(r),
            _ => {
                let r = self.rows.get(&key).copied();
                if let Some(r) = r {
                    self.last_row.set(Some((key, r)));
                }
                r
            }
        };
        // Every Cindex has a row (dense or not), so no row means absent.
        let row = &self.dense[r?];
        let t = i.t as i64;
        if t < row.t_min || t > row.t_max {
            return None;
        }
        let k = t - row.t0;
        if k >= 0 && (k as usize) < row.ids.len() {
            let id = row.ids[k as usize];
            if id != ABSENT {
                return Some(id as usize);
            }
        }
        if row.sparse == 0 {
            None
        } else {
            self.sparse.get(c).copied()
        }
    }

    /// Records `id` for a Cindex that is not in the map.
    fn insert_new(&mut self, c: Cindex, id: usize) {
        let (node, i) = c;
        let t = i.t as i64;
        let dense = &mut self.dense;
        let r = *self.rows.entry((node, i.n, i.x)).or_insert_with(|| {
            dense.push(DenseRow {
                t0: t,
                ids: Vec::new(),
                count: 0,
                t_min: t,
                t_max: t,
                sparse: 0,
            });
            dense.len() - 1
        });
        let row = &mut self.dense[r];
        row.t_min = row.t_min.min(t);
        row.t_max = row.t_max.max(t);
        let (lo, hi) = (row.t0, row.t0 + row.ids.len() as i64);
        let span = hi.max(t + 1) - lo.min(t);
        // Dense while at most half empty (plus slack for short rows); else a hash entry.
        if id < ABSENT as usize && span as usize <= 2 * (row.count + 1) + 64 {
            if t < lo {
                // Grow at the front, doubling so that runs of decreasing t stay linear.
                let grow = ((lo - t) as usize).max(row.ids.len()).min(span as usize);
                let mut ids = vec![ABSENT; grow];
                ids.extend_from_slice(&row.ids);
                row.ids = ids;
                row.t0 = lo - grow as i64;
            } else if t >= hi {
                let want = (t - row.t0 + 1) as usize;
                let cap = want.max(2 * row.ids.len());
                row.ids.reserve(cap - row.ids.len());
                row.ids.resize(want, ABSENT);
            }
            row.ids[(t - row.t0) as usize] = id as u32;
            row.count += 1;
        } else {
            self.sparse.insert(c, id);
            row.sparse += 1;
        }
    }
}

/// A directed acyclic graph on Cindexes.
#[derive(Clone, Debug, Default)]
pub struct ComputationGraph {
    /// cindex_id → Cindex.
    pub cindexes: Vec<Cindex>,
    /// Whether each cindex_id was supplied as an input of the request.
    pub is_input: Vec<bool>,
    /// cindex_id → the cindex_ids it depends on (after pruning: only those it uses).
    pub dependencies: Vec<Vec<usize>>,
    cindex_to_id: CindexMap,
}

impl ComputationGraph {
    /// The cindex_id of a Cindex, if present.
    pub fn get_cindex_id(&self, c: &Cindex) -> Option<usize> {
        self.cindex_to_id.get(c)
    }

    /// Returns the cindex_id, adding the Cindex if new (then `.1` is true).
    pub fn get_or_add(&mut self, c: Cindex, is_input: bool) -> (usize, bool) {
        if let Some(id) = self.cindex_to_id.get(&c) {
            return (id, false);
        }
        let id = self.cindexes.len();
        self.cindex_to_id.insert_new(c, id);
        self.cindexes.push(c);
        self.is_input.push(is_input);
        self.dependencies.push(Vec::new());
        (id, true)
    }

    /// Number of cindex_ids.
    pub fn len(&self) -> usize {
        self.cindexes.len()
    }

    /// True if the graph has no Cindexes.
    pub fn is_empty(&self) -> bool {
        self.cindexes.is_empty()
    }

    /// Keeps only the cindex_ids with `keep[id]`, renumbering them in order; dependencies on
    /// removed cindex_ids are dropped.
    pub fn renumber(&mut self, keep: &[bool]) {
        let mut old_to_new = vec![usize::MAX; self.cindexes.len()];
        let mut n = 0;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                old_to_new[i] = n;
                n += 1;
            }
        }
        let mut cindexes = Vec::with_capacity(n);
        let mut is_input = Vec::with_capacity(n);
        let mut deps = Vec::with_capacity(n);
        for (i, &k) in keep.iter().enumerate() {
            if !k {
                continue;
            }
            cindexes.push(self.cindexes[i]);
            is_input.push(self.is_input[i]);
            let d: Vec<usize> = self.dependencies[i]
                .iter()
                .map(|&d| old_to_new[d])
                .filter(|&d| d != usize::MAX)
                .collect();
            deps.push(d);
        }
        self.cindex_to_id = CindexMap::default();
        for (i, c) in cindexes.iter().enumerate() {
            self.cindex_to_id.insert_new(*c, i);
        }
        self.cindexes = cindexes;
        self.is_input = is_input;
        self.dependencies = deps;
    }
}

/// Whether a Cindex is (known to be) computable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputableInfo {
    /// Not yet decided.
    Unknown,
    /// Computable from the supplied inputs.
    Computable,
    /// Not computable.
    NotComputable,
    /// Not going to be computed because nothing usable needs it.
    WillNotCompute,
}

/// Builds a [`ComputationGraph`] for a request.
pub struct ComputationGraphBuilder<'a> {
    nnet: &'a Nnet,
    request: &'a ComputationRequest,
    /// The graph being built.
    pub graph: ComputationGraph,
    computable_info: Vec<ComputableInfo>,
    computable_queued: Vec<bool>,
    usable_count: Vec<i32>,
    depend_on_this: Vec<Vec<usize>>,
    current_queue: Vec<usize>,
    next_queue: Vec<usize>,
    computable_queue: VecDeque<usize>,
    /// Output cindex_ids per request output, in request order.
    output_ids: Vec<Vec<usize>>,
    /// Per node, the t outside which nothing can be computable ([`super::t_range`]);
    /// dependencies outside it are not added. `None`: add everything.
    t_ranges: Option<Vec<TRange>>,
}

/// Hard limit on the breadth-first distance (a loop in the network otherwise).
const MAX_DISTANCE: usize = 10000;

impl<'a> ComputationGraphBuilder<'a> {
    /// A builder for this network and request.
    pub fn new(nnet: &'a Nnet, request: &'a ComputationRequest) -> Self {
        ComputationGraphBuilder {
            nnet,
            request,
            graph: ComputationGraph::default(),
            computable_info: Vec::new(),
            computable_queued: Vec::new(),
            usable_count: Vec::new(),
            depend_on_this: Vec::new(),
            current_queue: Vec::new(),
            next_queue: Vec::new(),
            computable_queue: VecDeque::new(),
            output_ids: Vec::new(),
            t_ranges: Some(super::t_range::node_t_ranges(nnet, request)),
        }
    }

    /// Adds every dependency, even those that cannot be computable: slower, but then the graph
    /// holds the whole chain behind a Cindex that is not computable (for error messages).
    pub fn without_t_ranges(mut self) -> Self {
        self.t_ranges = None;
        self
    }

    /// The computable state of each cindex_id (before pruning).
    pub fn computable_info(&self) -> &[ComputableInfo] {
        &self.computable_info
    }

    /// Populates the graph and decides which Cindexes are computable (no pruning).
    pub fn compute(&mut self) -> Result<()> {
        self.add_inputs()?;
        self.add_outputs()?;
        let mut distance = 0;
        loop {
            self.build_graph_one_iter();
            self.update_all_computable_info();
            distance += 1;
            if self.current_queue.is_empty() {
                break;
            }
            if distance >= MAX_DISTANCE {
                return Err(Error::Compute(
                    "loop detected while building the computation graph (bad network topology?)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    fn add_inputs(&mut self) -> Result<()> {
        for spec in &self.request.inputs {
            let node = self.nnet.node_index(&spec.name).ok_or_else(|| {
                Error::Compute(format!("network has no input node named '{}'", spec.name))
            })?;
            match self.nnet.nodes.get(node) {
                Some(NetworkNode::Input { .. }) | Some(NetworkNode::Component { .. }) => {}
                _ => {
                    return Err(Error::Compute(format!(
                        "request input '{}' is not an input or component node",
                        spec.name
                    )))
                }
            }
            self.add_request_cindexes(node, &spec.name, &spec.indexes, true)?;
        }
        Ok(())
    }

    /// Adds the cindexes of the request's input (`is_input`) or output `name` at `node`, each
    /// Index once; returns their ids.
    fn add_request_cindexes(
        &mut self,
        node: usize,
        name: &str,
        indexes: &[Index],
        is_input: bool,
    ) -> Result<Vec<usize>> {
        let what = if is_input { "input" } else { "output" };
        let mut ids = Vec::with_capacity(indexes.len());
        for index in indexes {
            let (id, is_new) = self.graph.get_or_add((node, *index), is_input);
            if !is_new {
                return Err(Error::Compute(format!(
                    "{what} '{name}': Index {index} is listed more than once"
                )));
            }
            self.add_cindex_id(id, is_input, !is_input);
            ids.push(id);
        }
        Ok(ids)
    }

    fn add_outputs(&mut self) -> Result<()> {
        let mut total = 0;
        for spec in &self.request.outputs {
            let node = self.nnet.node_index(&spec.name).ok_or_else(|| {
                Error::Compute(format!("network has no output node named '{}'", spec.name))
            })?;
            if !self.nnet.is_output_node(node) {
                return Err(Error::Compute(format!(
                    "request output '{}' is not an output node",
                    spec.name
                )));
            }
            let ids = self.add_request_cindexes(node, &spec.name, &spec.indexes, false)?;
            total += ids.len();
            self.output_ids.push(ids);
        }
        if total == 0 {
            return Err(Error::Compute(
                "cannot process a computation request with no outputs".into(),
            ));
        }
        std::mem::swap(&mut self.current_queue, &mut self.next_queue);
        Ok(())
    }

    fn add_cindex_id(&mut self, id: usize, is_input: bool, is_output: bool) {
        debug_assert_eq!(id, self.computable_info.len());
        if is_input {
            self.computable_info.push(ComputableInfo::Computable);
        } else {
            self.computable_info.push(ComputableInfo::Unknown);
            self.next_queue.push(id);
        }
        self.computable_queued.push(false);
        self.depend_on_this.push(Vec::new());
        self.usable_count.push(if is_output { 1 } else { 0 });
    }

    /// The input Cindexes a Cindex may depend on.
    fn input_cindexes(&self, c: &Cindex) -> Vec<Cindex> {
        let (node, index) = (c.0, c.1);
        let mut out = Vec::new();
        match &self.nnet.nodes[node] {
            NetworkNode::Descriptor { descriptor, .. } => {
                descriptor.get_dependencies(&index, &mut out)
            }
            NetworkNode::Component { component } => {
                let mut idx = Vec::new();
                if let Some(comp) = self.nnet.components.get(*component) {
                    comp.get_input_indexes(
                        &self.misc_for_input(node.wrapping_sub(1)),
                        &index,
                        &mut idx,
                    );
                }
                out.extend(idx.into_iter().map(|i| (node.wrapping_sub(1), i)));
            }
            NetworkNode::DimRange { input_node, .. } => out.push((*input_node, index)),
            NetworkNode::Input { .. } => {}
        }
        out
    }

    fn add_dependencies(&mut self, id: usize) {
        let c = self.graph.cindexes[id];
        let inputs = self.input_cindexes(&c);
        let mut deps = Vec::with_capacity(inputs.len());
        for ic in inputs {
            if ic.0 >= self.nnet.nodes.len() {
                continue; // malformed network (component node 0); never computable
            }
            if let Some(r) = &self.t_ranges {
                if !r[ic.0].contains(ic.1.t as i64) {
                    continue; // cannot be computable: leave it out (as if not available)
                }
            }
            let (d, is_new) = self.graph.get_or_add(ic, false);
            if is_new {
                self.add_cindex_id(d, false, false);
            }
            deps.push(d);
        }
        deps.sort_unstable();
        deps.dedup();
        for &d in &deps {
            self.depend_on_this[d].push(id);
            self.increment_usable_count(d);
        }
        self.graph.dependencies[id] = deps;
        if !self.computable_queued[id] {
            self.computable_queued[id] = true;
            self.computable_queue.push_back(id);
        }
    }

    fn increment_usable_count(&mut self, id: usize) {
        // Fast path (almost every call): already usable, nothing propagates.
        if self.usable_count[id] != 0 {
            self.usable_count[id] += 1;
            return;
        }
        let mut stack = vec![id];
        while let Some(c) = stack.pop() {
            let was = self.usable_count[c];
            self.usable_count[c] += 1;
            if was == 0 && self.computable_info[c] != ComputableInfo::NotComputable {
                if self.computable_info[c] == ComputableInfo::WillNotCompute {
                    // Needed after all (a user that was given up on early is not the only
                    // one): expand it in the next iteration.
                    self.computable_info[c] = ComputableInfo::Unknown;
                    self.next_queue.push(c);
                }
                stack.extend(self.graph.dependencies[c].iter().copied());
            }
        }
    }

    fn decrement_usable_count(&mut self, id: usize) {
        if self.usable_count[id] > 1 {
            self.usable_count[id] -= 1;
            return;
        }
        let mut stack = vec![id];
        while let Some(c) = stack.pop() {
            self.usable_count[c] -= 1;
            if self.usable_count[c] == 0 && self.computable_info[c] != ComputableInfo::NotComputable
            {
                stack.extend(self.graph.dependencies[c].iter().copied());
            }
        }
    }

    fn build_graph_one_iter(&mut self) {
        while let Some(id) = self.current_queue.pop() {
            if self.computable_info[id] != ComputableInfo::Unknown {
                continue;
            }
            if self.usable_count[id] == 0 {
                self.set_as_will_not_compute(id);
            } else {
                self.add_dependencies(id);
            }
        }
        std::mem::swap(&mut self.current_queue, &mut self.next_queue);
    }

    fn queue_dependents(&mut self, id: usize) {
        for k in 0..self.depend_on_this[id].len() {
            let o = self.depend_on_this[id][k];
            if self.computable_info[o] == ComputableInfo::Unknown && !self.computable_queued[o] {
                self.computable_queued[o] = true;
                self.computable_queue.push_back(o);
            }
        }
    }

    fn set_as_will_not_compute(&mut self, id: usize) {
        self.computable_info[id] = ComputableInfo::WillNotCompute;
        self.queue_dependents(id);
    }

    fn update_all_computable_info(&mut self) {
        while let Some(id) = self.computable_queue.pop_front() {
            self.computable_queued[id] = false;
            if self.computable_info[id] != ComputableInfo::Unknown {
                continue;
            }
            let info = self.compute_computable_info(id);
            self.computable_info[id] = info;
            if info != ComputableInfo::Unknown {
                self.queue_dependents(id);
                if info == ComputableInfo::NotComputable && self.usable_count[id] != 0 {
                    for k in 0..self.graph.dependencies[id].len() {
                        let d = self.graph.dependencies[id][k];
                        self.decrement_usable_count(d);
                    }
                }
            }
        }
    }

    /// The request's MiscComputationInfo plus, with t ranges on, the bounds outside which
    /// `in_node` has no Cindex in the graph (dependencies outside its range are never added).
    fn misc_for_input(&self, in_node: usize) -> MiscComputationInfo {
        let mut misc = self.request.misc_info.clone();
        if let Some(r) = self.t_ranges.as_ref().and_then(|r| r.get(in_node)) {
            misc.input_t_bounds = match *r {
                TRange::Empty => Some((1, 0)),
                TRange::Span(lo, hi) => Some((lo, hi)),
                TRange::All => None,
            };
        }
        misc
    }

    /// Whether `c` counts as available; with `unknown_ok`, Unknown counts as computable.
    fn available(&self, c: &Cindex, unknown_ok: bool) -> bool {
        match self.graph.get_cindex_id(c) {
            None => false,
            Some(id) => match self.computable_info[id] {
                ComputableInfo::Computable => true,
                // WillNotCompute is not final: a Cindex nothing needs *yet* is revived when
                // something usable comes to depend on it, so it must not make its users
                // NotComputable meanwhile.
                ComputableInfo::Unknown | ComputableInfo::WillNotCompute => unknown_ok,
                ComputableInfo::NotComputable => false,
            },
        }
    }

    fn compute_computable_info(&self, id: usize) -> ComputableInfo {
        let (node, index) = self.graph.cindexes[id];
        match &self.nnet.nodes[node] {
            NetworkNode::Descriptor { descriptor, .. } => {
                if descriptor.is_computable(&index, &|c| self.available(c, false), None) {
                    ComputableInfo::Computable
                } else if !descriptor.is_computable(&index, &|c| self.available(c, true), None) {
                    ComputableInfo::NotComputable
                } else {
                    ComputableInfo::Unknown
                }
            }
            NetworkNode::Component { component } => {
                let Some(comp) = self.nnet.components.get(*component) else {
                    return ComputableInfo::NotComputable;
                };
                let in_node = node.wrapping_sub(1);
                let misc = &self.misc_for_input(in_node);
                if comp.is_computable(
                    misc,
                    &index,
                    &|i| self.available(&(in_node, *i), false),
                    None,
                ) {
                    ComputableInfo::Computable
                } else if !comp.is_computable(
                    misc,
                    &index,
                    &|i| self.available(&(in_node, *i), true),
                    None,
                ) {
                    ComputableInfo::NotComputable
                } else {
                    ComputableInfo::Unknown
                }
            }
            NetworkNode::DimRange { input_node, .. } => {
                match self.graph.get_cindex_id(&(*input_node, index)) {
                    Some(d) => match self.computable_info[d] {
                        ComputableInfo::WillNotCompute => ComputableInfo::Unknown,
                        info => info,
                    },
                    None => ComputableInfo::Unknown,
                }
            }
            // Supplied inputs are Computable from the start; anything else at an input node
            // was not supplied.
            NetworkNode::Input { .. } => ComputableInfo::NotComputable,
        }
    }

    /// For each request output, whether each of its Indexes is computable (Kaldi's
    /// GetComputableInfo). Call after [`compute`](Self::compute).
    pub fn get_computable_info(&self) -> Vec<Vec<bool>> {
        self.output_ids
            .iter()
            .map(|ids| {
                ids.iter()
                    .map(|&id| self.computable_info[id] == ComputableInfo::Computable)
                    .collect()
            })
            .collect()
    }

    /// True if every requested output is computable.
    pub fn all_outputs_are_computable(&self) -> bool {
        self.output_ids
            .iter()
            .flatten()
            .all(|&id| self.computable_info[id] == ComputableInfo::Computable)
    }

    fn describe(&self, c: &Cindex) -> String {
        let name = self.nnet.node_names.get(c.0).map_or("?", |s| s.as_str());
        let i = c.1;
        if i.x != 0 {
            format!("'{}' (n={}, t={}, x={})", name, i.n, i.t, i.x)
        } else {
            format!("'{}' (n={}, t={})", name, i.n, i.t)
        }
    }

    /// A readable explanation of which outputs are not computable and why (the chain of
    /// missing inputs behind the first failure).
    pub fn explain_not_computable(&self) -> String {
        let mut msg = String::from("Not all outputs were computable, cannot create computation.");
        let mut first: Option<usize> = None;
        for (spec, ids) in self.request.outputs.iter().zip(&self.output_ids) {
            let bad: Vec<Index> = ids
                .iter()
                .filter(|&&id| self.computable_info[id] != ComputableInfo::Computable)
                .map(|&id| self.graph.cindexes[id].1)
                .collect();
            if bad.is_empty() {
                continue;
            }
            if first.is_none() {
                first = ids
                    .iter()
                    .copied()
                    .find(|&id| self.computable_info[id] != ComputableInfo::Computable);
            }
            msg.push_str(&format!(
                "\n  output '{}': {} of {} requested Indexes not computable: {}",
                spec.name,
                bad.len(),
                ids.len(),
                format_indexes(&bad)
            ));
        }
        let Some(mut cur) = first else { return msg };
        // Follow the chain of non-computable dependencies back to a leaf.
        let mut chain = vec![cur];
        let mut seen = FxHashSet::default();
        seen.insert(cur);
        loop {
            let next = self.graph.dependencies[cur].iter().copied().find(|&d| {
                self.computable_info[d] != ComputableInfo::Computable && !seen.contains(&d)
            });
            match next {
                Some(d) => {
                    seen.insert(d);
                    chain.push(d);
                    cur = d;
                }
                None => break,
            }
        }
        msg.push_str("\n  ");
        for (k, &id) in chain.iter().enumerate() {
            let c = self.graph.cindexes[id];
            if k == 0 {
                msg.push_str(&format!("output {}", self.describe(&c)));
            } else {
                msg.push_str(&format!(" needs {}", self.describe(&c)));
            }
        }
        let leaf = self.graph.cindexes[cur];
        if self.nnet.is_input_node(leaf.0) {
            msg.push_str(", which the request does not supply");
            let name = &self.nnet.node_names[leaf.0];
            let supplied: Vec<i32> = self
                .request
                .inputs
                .iter()
                .filter(|s| &s.name == name)
                .flat_map(|s| s.indexes.iter())
                .filter(|i| i.n == leaf.1.n && i.x == leaf.1.x)
                .map(|i| i.t)
                .collect();
            let t = leaf.1.t;
            match (supplied.iter().min(), supplied.iter().max()) {
                (Some(&lo), Some(&hi)) if t > hi => msg.push_str(&format!(
                    " (it supplies t = {lo}..{hi}): supply t up to {t} or add right context"
                )),
                (Some(&lo), Some(&hi)) if t < lo => msg.push_str(&format!(
                    " (it supplies t = {lo}..{hi}): supply t down to {t} or add left context"
                )),
                (Some(&lo), Some(&hi)) => msg.push_str(&format!(
                    " (it supplies t = {lo}..{hi} with a gap): supply t = {t}"
                )),
                _ => msg.push_str(&format!(": supply input '{name}' for n = {}", leaf.1.n)),
            }
        } else if self.computable_info[cur] == ComputableInfo::WillNotCompute {
            msg.push_str(", which was not expanded (its inputs are unavailable)");
        } else {
            msg.push_str(", which has no computable inputs");
        }
        msg
    }

    /// Removes optional dependencies that are not used and Cindexes not needed for the
    /// outputs (inputs are always kept), and returns the final graph. Requires all outputs
    /// to be computable.
    pub fn prune(mut self) -> Result<ComputationGraph> {
        if !self.all_outputs_are_computable() {
            return Err(Error::Compute(self.explain_not_computable()));
        }
        let n = self.graph.len();
        for id in 0..n {
            self.prune_dependencies(id)?;
        }
        // Required: reachable from the requested outputs.
        let mut required = vec![false; n];
        let mut queue: Vec<usize> = self.output_ids.iter().flatten().copied().collect();
        for &q in &queue {
            required[q] = true;
        }
        while let Some(c) = queue.pop() {
            for &d in &self.graph.dependencies[c] {
                if !required[d] {
                    required[d] = true;
                    queue.push(d);
                }
            }
        }
        let mut keep = vec![false; n];
        for id in 0..n {
            if required[id] || self.graph.is_input[id] {
                if self.computable_info[id] != ComputableInfo::Computable {
                    return Err(Error::Compute(format!(
                        "internal error: required Cindex {} is not computable",
                        self.describe(&self.graph.cindexes[id])
                    )));
                }
                keep[id] = true;
            }
        }
        self.graph.renumber(&keep);
        Ok(self.graph)
    }

    fn prune_dependencies(&mut self, id: usize) -> Result<()> {
        let info = self.computable_info[id];
        // A given Cindex (a component node's too, as looped computation supplies them)
        // depends on nothing.
        if info != ComputableInfo::Computable || self.graph.is_input[id] {
            self.graph.dependencies[id].clear();
            return Ok(());
        }
        let (node, index) = self.graph.cindexes[id];
        let used: Vec<Cindex> = match &self.nnet.nodes[node] {
            NetworkNode::Descriptor { descriptor, .. } => {
                let mut used = Vec::new();
                let ok = descriptor.is_computable(
                    &index,
                    &|c| self.available(c, false),
                    Some(&mut used),
                );
                if !ok {
                    return Err(Error::Compute(format!(
                        "internal error: {} lost computability while pruning",
                        self.describe(&(node, index))
                    )));
                }
                used
            }
            NetworkNode::Component { component } => {
                let in_node = node.wrapping_sub(1);
                let mut used = Vec::new();
                let misc = self.misc_for_input(in_node);
                let ok = self.nnet.components.get(*component).is_some_and(|c| {
                    c.is_computable(
                        &misc,
                        &index,
                        &|i| self.available(&(in_node, *i), false),
                        Some(&mut used),
                    )
                });
                if !ok {
                    return Err(Error::Compute(format!(
                        "internal error: {} lost computability while pruning",
                        self.describe(&(node, index))
                    )));
                }
                used.into_iter().map(|i| (in_node, i)).collect()
            }
            NetworkNode::DimRange { .. } | NetworkNode::Input { .. } => return Ok(()),
        };
        let mut ids: Vec<usize> = used
            .iter()
            .filter_map(|c| self.graph.get_cindex_id(c))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.graph.dependencies[id] = ids;
        Ok(())
    }
}

/// Builds, checks and prunes the graph for a request (Compute + AllOutputsAreComputable +
/// Prune).
pub fn build_graph(nnet: &Nnet, request: &ComputationRequest) -> Result<ComputationGraph> {
    let mut b = ComputationGraphBuilder::new(nnet, request);
    b.compute()?;
    if !b.all_outputs_are_computable() {
        // Explain from a graph with every dependency in it, so that the chain of missing
        // inputs behind the first failed output is complete.
        let mut full = ComputationGraphBuilder::new(nnet, request).without_t_ranges();
        full.compute()?;
        return Err(Error::Compute(full.explain_not_computable()));
    }
    b.prune()
}
