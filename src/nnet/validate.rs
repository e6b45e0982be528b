//! Checking that a network hangs together (Kaldi's `Nnet::Check`), whatever front end built
//! it: names, descriptor and component dimensions, dim-ranges, inputs and outputs.

use crate::error::{Error, Result};
use crate::nnet::config_line::is_valid_name;
use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, SumDescriptor};
use crate::nnet::network::{NetworkNode, Nnet};
use std::collections::HashSet;

/// A problem found by the network check, tied to a node where possible.
pub(crate) struct Problem {
    pub(crate) node: Option<usize>,
    /// The config key the problem is about (for the caret position).
    pub(crate) key: &'static str,
    pub(crate) msg: String,
}

impl Problem {
    fn at(node: usize, key: &'static str, msg: impl Into<String>) -> Self {
        Problem {
            node: Some(node),
            key,
            msg: msg.into(),
        }
    }
    fn global(msg: impl Into<String>) -> Self {
        Problem {
            node: None,
            key: "name",
            msg: msg.into(),
        }
    }
}

impl crate::nnet::descriptor::NodeDims for Nnet {
    fn dim_of_node(&self, node: usize) -> Option<usize> {
        self.checked_node_dim(node).ok()
    }
}

impl Nnet {
    /// Checks that the network hangs together (Kaldi's `Nnet::Check`): unique valid names,
    /// descriptors that read only input/component/dim-range nodes with agreeing dimensions,
    /// component input dims that match their descriptors, dim-ranges in bounds, and at least
    /// one input and one output node.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|p| match p.node {
            Some(n) => Error::Network(format!(
                "node '{}': {}",
                self.node_names.get(n).map_or("?", |s| s.as_str()),
                p.msg
            )),
            None => Error::Network(p.msg),
        })
    }

    /// The output dimension of a node, or why it cannot be computed (never panics).
    pub fn checked_node_dim(&self, n: usize) -> std::result::Result<usize, String> {
        match self.nodes.get(n) {
            None => Err(format!("node index {n} out of range")),
            Some(NetworkNode::Input { dim }) | Some(NetworkNode::DimRange { dim, .. }) => Ok(*dim),
            Some(NetworkNode::Component { component }) => self
                .components
                .get(*component)
                .map(|c| c.output_dim())
                .ok_or_else(|| format!("component index {component} out of range")),
            Some(NetworkNode::Descriptor { descriptor, .. }) => {
                self.checked_descriptor_dim(descriptor)
            }
        }
    }

    /// The dimension of a descriptor, checking that every Sum/Failover/Switch agrees and that
    /// only input, component and dim-range nodes are read.
    pub fn checked_descriptor_dim(&self, d: &Descriptor) -> std::result::Result<usize, String> {
        if d.parts.is_empty() {
            return Err("empty descriptor".into());
        }
        d.parts.iter().map(|p| self.sum_dim(p)).sum()
    }

    fn sum_dim(&self, s: &SumDescriptor) -> std::result::Result<usize, String> {
        match s {
            SumDescriptor::Simple(f) => self.fwd_dim(f),
            SumDescriptor::Optional(a) => self.sum_dim(a),
            SumDescriptor::Const { dim, .. } => Ok(*dim),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                let (da, db) = (self.sum_dim(a)?, self.sum_dim(b)?);
                if da != db {
                    let op = if matches!(s, SumDescriptor::Sum(..)) {
                        "Sum"
                    } else {
                        "Failover"
                    };
                    let mut ta = String::new();
                    let mut tb = String::new();
                    a.write_config(&self.node_names, &mut ta);
                    b.write_config(&self.node_names, &mut tb);
                    return Err(format!(
                        "dimension mismatch in {op}(): {ta} has dim {da} but {tb} has dim {db}"
                    ));
                }
                Ok(da)
            }
        }
    }

    fn fwd_dim(&self, f: &ForwardingDescriptor) -> std::result::Result<usize, String> {
        match f {
            ForwardingDescriptor::Simple { node, .. } => match self.nodes.get(*node) {
                None => Err(format!(
                    "descriptor reads node index {node}, which does not exist"
                )),
                Some(NetworkNode::Descriptor { .. }) => Err(format!(
                    "descriptor reads '{}', which is not an input, component or dim-range node",
                    self.node_names.get(*node).map_or("?", |s| s.as_str())
                )),
                Some(_) => self.checked_node_dim(*node),
            },
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => self.fwd_dim(src),
            ForwardingDescriptor::Switch(v) => {
                let mut dim = None;
                for g in v {
                    let d = self.fwd_dim(g)?;
                    match dim {
                        Some(prev) if prev != d => {
                            return Err(format!(
                                "dimension mismatch in Switch(): arguments have dims {prev} and {d}"
                            ))
                        }
                        _ => dim = Some(d),
                    }
                }
                dim.ok_or_else(|| "empty Switch()".to_string())
            }
        }
    }

    /// The check behind [`Nnet::validate`], with the node and config key at fault so a
    /// front end can point at the line that defined it.
    pub(crate) fn check(&self) -> std::result::Result<(), Problem> {
        if self.node_names.len() != self.nodes.len() {
            return Err(Problem::global("node names and nodes differ in number"));
        }
        if self.component_names.len() != self.components.len() {
            return Err(Problem::global(
                "component names and components differ in number",
            ));
        }
        let mut seen = HashSet::new();
        for (i, name) in self.node_names.iter().enumerate() {
            if !is_valid_name(name) {
                return Err(Problem::at(
                    i,
                    "name",
                    format!("invalid node name '{name}'"),
                ));
            }
            if !seen.insert(name.as_str()) {
                return Err(Problem::at(
                    i,
                    "name",
                    format!("duplicate node name '{name}'"),
                ));
            }
        }
        let mut seen = HashSet::new();
        for name in &self.component_names {
            if !is_valid_name(name) {
                return Err(Problem::global(format!("invalid component name '{name}'")));
            }
            if !seen.insert(name.as_str()) {
                return Err(Problem::global(format!(
                    "duplicate component name '{name}'"
                )));
            }
        }
        let (mut num_inputs, mut num_outputs) = (0, 0);
        for (n, node) in self.nodes.iter().enumerate() {
            match node {
                NetworkNode::Input { dim } => {
                    num_inputs += 1;
                    if *dim == 0 {
                        return Err(Problem::at(n, "dim", "input dim must be positive"));
                    }
                }
                NetworkNode::Descriptor { descriptor, .. } => {
                    let is_output =
                        !matches!(self.nodes.get(n + 1), Some(NetworkNode::Component { .. }));
                    let dim = self
                        .checked_descriptor_dim(descriptor)
                        .map_err(|m| Problem::at(n, "input", m))?;
                    if is_output {
                        num_outputs += 1;
                        if dim == 0 {
                            return Err(Problem::at(n, "input", "output dim must be positive"));
                        }
                    }
                }
                NetworkNode::Component { component } => {
                    let Some(c) = self.components.get(*component) else {
                        return Err(Problem::at(n, "component", "component index out of range"));
                    };
                    let Some(NetworkNode::Descriptor { descriptor, .. }) =
                        n.checked_sub(1).and_then(|p| self.nodes.get(p))
                    else {
                        return Err(Problem::at(
                            n,
                            "input",
                            "a component node must follow its input descriptor node",
                        ));
                    };
                    let src_dim = self
                        .checked_descriptor_dim(descriptor)
                        .map_err(|m| Problem::at(n, "input", m))?;
                    if src_dim != c.input_dim() {
                        return Err(Problem::at(
                            n,
                            "input",
                            format!(
                                "dimension mismatch: the input descriptor has dim {src_dim} but \
                                 component '{}' ({}) has input-dim {}",
                                self.component_names[*component],
                                c.type_name(),
                                c.input_dim()
                            ),
                        ));
                    }
                }
                NetworkNode::DimRange {
                    input_node,
                    dim_offset,
                    dim,
                } => {
                    let input_dim = match self.nodes.get(*input_node) {
                        Some(NetworkNode::Input { .. } | NetworkNode::Component { .. }) => self
                            .checked_node_dim(*input_node)
                            .map_err(|m| Problem::at(n, "input-node", m))?,
                        _ => {
                            return Err(Problem::at(
                                n,
                                "input-node",
                                "a dim-range-node must read an input node or a component node",
                            ))
                        }
                    };
                    if *dim == 0 || dim_offset + dim > input_dim {
                        return Err(Problem::at(
                            n,
                            "dim",
                            format!(
                                "dim-range out of bounds: dim-offset={dim_offset} dim={dim} but \
                                 input node '{}' has dim {input_dim}",
                                self.node_names[*input_node]
                            ),
                        ));
                    }
                }
            }
        }
        if num_inputs == 0 {
            return Err(Problem::global("the network has no input node"));
        }
        if num_outputs == 0 {
            return Err(Problem::global("the network has no output node"));
        }
        Ok(())
    }
}
