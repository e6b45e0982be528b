//! A naive reference evaluator, written independently of the compiler, for testing.
//!
//! It computes the value of any Cindex recursively and memoises it: input nodes read the
//! supplied rows; a (simple) component node runs its component on the single row computed by
//! its input descriptor; a dim-range node slices its source; a descriptor evaluates its parts
//! with its own small interpretation of Descriptor semantics (below), not the compiler's.
//! A Cindex that cannot be computed from the supplied inputs has the value `None`; that is what
//! `IfDefined` (zero) and `Failover` (second argument) react to.
//!
//! Descriptor semantics as Kaldi applies them: a forwarding descriptor maps the output Index
//! through its inner descriptor first and then applies its own change (Offset adds, Round
//! rounds t down, ReplaceIndex overwrites); Switch picks argument `t mod n` of the *output*
//! Index. `Sum` needs both terms, `Failover(a, b)` is `a` where computable and `b` otherwise,
//! `IfDefined(a)` is `a` or zeros, `Const` is always available.

use crate::error::{Error, Result};
use crate::matrix::{MatView, MatViewMut, Matrix, Real};
use crate::nnet::component::{MiscComputationInfo, Propagate, Properties};
use crate::nnet::descriptor::{ForwardingDescriptor, IndexVar, SumDescriptor};
use crate::nnet::{Cindex, Index, NetworkNode, Nnet};
use std::collections::HashMap;
use std::rc::Rc;

/// A row value: `None` = not computable.
type RowValue = Option<Rc<Vec<Real>>>;

/// The reference evaluator.
pub struct ReferenceEvaluator<'a> {
    nnet: &'a Nnet,
    /// Supplied input rows, by (node, Index).
    supplied: HashMap<Cindex, Rc<Vec<Real>>>,
    memo: HashMap<Cindex, RowValue>,
    depth: usize,
}

/// Recursion limit (each level uses a few stack frames; run deep networks on a big stack).
const MAX_DEPTH: usize = 5000;

fn pos_mod(a: i32, m: i32) -> i32 {
    let m = m.max(1);
    ((a % m) + m) % m
}

impl<'a> ReferenceEvaluator<'a> {
    /// An evaluator for `nnet` with inputs given as (node name, row Indexes, matrix).
    pub fn new(nnet: &'a Nnet, inputs: &[(&str, &[Index], &Matrix)]) -> Result<Self> {
        let mut supplied = HashMap::new();
        for (name, indexes, m) in inputs {
            let node = nnet
                .node_index(name)
                .ok_or_else(|| Error::Compute(format!("reference: no node '{name}'")))?;
            if indexes.len() != m.num_rows() || nnet.node_dim(node) != m.num_cols() {
                return Err(Error::Compute(format!(
                    "reference: input '{name}' has the wrong shape"
                )));
            }
            for (r, ix) in indexes.iter().enumerate() {
                supplied.insert((node, *ix), Rc::new(m.row_to_vec(r)));
            }
        }
        Ok(ReferenceEvaluator {
            nnet,
            supplied,
            memo: HashMap::new(),
            depth: 0,
        })
    }

    /// The value of output (or any) node `name` at `indexes`, one row each; an error if some
    /// row is not computable.
    pub fn compute(&mut self, name: &str, indexes: &[Index]) -> Result<Matrix> {
        let node = self
            .nnet
            .node_index(name)
            .ok_or_else(|| Error::Compute(format!("reference: no node '{name}'")))?;
        let dim = self.nnet.node_dim(node);
        let mut out = Matrix::zeros(indexes.len(), dim);
        for (r, ix) in indexes.iter().enumerate() {
            let v = self.value((node, *ix))?.ok_or_else(|| {
                Error::Compute(format!("reference: {name} at {ix} is not computable"))
            })?;
            out.copy_row_from_slice(r, &v);
        }
        Ok(out)
    }

    /// The value of one Cindex (memoised).
    pub fn value(&mut self, c: Cindex) -> Result<RowValue> {
        if let Some(v) = self.memo.get(&c) {
            return Ok(v.clone());
        }
        if self.depth > MAX_DEPTH {
            return Err(Error::Compute(format!(
                "reference: recursion deeper than {MAX_DEPTH} Cindexes (at node {} t={})",
                c.0, c.1.t
            )));
        }
        self.depth += 1;
        let v = self.compute_value(c);
        self.depth -= 1;
        let v = v?;
        self.memo.insert(c, v.clone());
        Ok(v)
    }

    fn compute_value(&mut self, (node, ix): Cindex) -> Result<RowValue> {
        let nnet = self.nnet;
        let n = nnet
            .nodes
            .get(node)
            .ok_or_else(|| Error::Compute(format!("reference: node {node} out of range")))?;
        match n {
            NetworkNode::Input { .. } => Ok(self.supplied.get(&(node, ix)).cloned()),
            NetworkNode::DimRange {
                input_node,
                dim_offset,
                dim,
            } => Ok(self
                .value((*input_node, ix))?
                .map(|v| Rc::new(v[*dim_offset..*dim_offset + *dim].to_vec()))),
            NetworkNode::Descriptor { descriptor, .. } => {
                let mut row = Vec::with_capacity(descriptor.dim(nnet));
                for part in &descriptor.parts {
                    match self.sum_value(part, &ix)? {
                        Some(v) => row.extend_from_slice(&v),
                        None => return Ok(None),
                    }
                }
                Ok(Some(Rc::new(row)))
            }
            NetworkNode::Component { component } => {
                let comp = nnet.components.get(*component).ok_or_else(|| {
                    Error::Compute(format!("reference: component {component} out of range"))
                })?;
                if node == 0 {
                    return Err(Error::Compute(
                        "reference: component node without input".into(),
                    ));
                }
                if !comp.properties().has(Properties::SIMPLE) {
                    return self.general_component(node, ix);
                }
                let Some(input) = self.value((node - 1, ix))? else {
                    return Ok(None);
                };
                let in_m = MatView::from_slice(&input, 1, input.len());
                let mut out = vec![0.0; comp.output_dim()];
                let od = out.len();
                // Evaluated one row at a time, so it is meant for test mode; a fixed seed still
                // makes any random component deterministic.
                let mut rng = crate::random::seeded_rng(0);
                comp.propagate(Propagate::new(
                    in_m,
                    MatViewMut::from_slice(&mut out, 1, od),
                    &mut rng,
                ));
                Ok(Some(Rc::new(out)))
            }
        }
    }

    /// A non-simple component at one output Index: asks the component which input Indexes
    /// it wants, evaluates those that are computable, and runs it on exactly those rows.
    fn general_component(&mut self, node: usize, ix: Index) -> Result<RowValue> {
        let nnet = self.nnet;
        let NetworkNode::Component { component } = nnet.nodes[node] else {
            return Ok(None);
        };
        let comp = nnet.components[component].as_ref();
        #[allow(clippy::default_constructed_unit_structs)] // it may gain fields
        let misc = MiscComputationInfo::default();
        let mut desired = Vec::new();
        comp.get_input_indexes(&misc, &ix, &mut desired);
        let mut avail: HashMap<Index, Rc<Vec<Real>>> = HashMap::new();
        for d in &desired {
            if let Some(v) = self.value((node - 1, *d))? {
                avail.insert(*d, v);
            }
        }
        let mut used = Vec::new();
        if !comp.is_computable(
            &misc,
            &ix,
            &|i: &Index| avail.contains_key(i),
            Some(&mut used),
        ) {
            return Ok(None);
        }
        let mut outputs = vec![ix];
        comp.reorder_indexes(&mut used, &mut outputs);
        let pre = comp.precompute_indexes(&misc, &used, &outputs, false);
        let in_dim = comp.input_dim();
        let mut in_m = Matrix::zeros(used.len(), in_dim);
        for (r, i) in used.iter().enumerate() {
            if let Some(v) = avail.get(i) {
                in_m.copy_row_from_slice(r, v);
            }
        }
        let mut out_m = Matrix::zeros(outputs.len(), comp.output_dim());
        let mut rng = crate::random::seeded_rng(0);
        comp.propagate(Propagate {
            input: in_m.view(),
            output: out_m.view_mut(),
            indexes: pre.as_deref(),
            rng: &mut rng,
        });
        let row = outputs.iter().position(|o| *o == ix).ok_or_else(|| {
            Error::Compute("reference: component dropped the requested output index".into())
        })?;
        Ok(Some(Rc::new(out_m.row_to_vec(row))))
    }

    /// Maps an output Index through a forwarding descriptor: (node, input Index, scale).
    fn map(f: &ForwardingDescriptor, ix: &Index) -> (usize, Index, Real) {
        match f {
            ForwardingDescriptor::Simple { node, scale } => (*node, *ix, *scale),
            ForwardingDescriptor::Offset {
                src,
                t_offset,
                x_offset,
            } => {
                let (n, mut i, s) = Self::map(src, ix);
                i.t += t_offset;
                i.x += x_offset;
                (n, i, s)
            }
            ForwardingDescriptor::Switch(v) => {
                let k = pos_mod(ix.t, v.len() as i32) as usize;
                match v.get(k) {
                    Some(d) => Self::map(d, ix),
                    None => (usize::MAX, *ix, 1.0),
                }
            }
            ForwardingDescriptor::Round { src, t_modulus } => {
                let (n, mut i, s) = Self::map(src, ix);
                i.t -= pos_mod(i.t, *t_modulus);
                (n, i, s)
            }
            ForwardingDescriptor::ReplaceIndex { src, var, value } => {
                let (n, mut i, s) = Self::map(src, ix);
                match var {
                    IndexVar::T => i.t = *value,
                    IndexVar::X => i.x = *value,
                }
                (n, i, s)
            }
        }
    }

    fn sum_value(&mut self, d: &SumDescriptor, ix: &Index) -> Result<Option<Vec<Real>>> {
        Ok(match d {
            SumDescriptor::Simple(f) => {
                let (node, i, scale) = Self::map(f, ix);
                if node == usize::MAX {
                    return Err(Error::Compute("reference: empty Switch".into()));
                }
                self.value((node, i))?
                    .map(|v| v.iter().map(|x| x * scale).collect())
            }
            SumDescriptor::Optional(s) => Some(match self.sum_value(s, ix)? {
                Some(v) => v,
                None => vec![0.0; s.dim(self.nnet)],
            }),
            SumDescriptor::Sum(a, b) => {
                // Short-circuit: b is not even looked at when a is not computable, which keeps
                // recurrences like Sum(x, IfDefined(Offset(self, -1))) from descending forever.
                let Some(mut x) = self.sum_value(a, ix)? else {
                    return Ok(None);
                };
                match self.sum_value(b, ix)? {
                    Some(y) => {
                        for (p, q) in x.iter_mut().zip(&y) {
                            *p += q;
                        }
                        Some(x)
                    }
                    None => None,
                }
            }
            SumDescriptor::Failover(a, b) => match self.sum_value(a, ix)? {
                Some(v) => Some(v),
                None => self.sum_value(b, ix)?,
            },
            SumDescriptor::Const { value, dim } => Some(vec![*value; *dim]),
        })
    }
}
