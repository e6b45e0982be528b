//! The network (Kaldi's `Nnet`): named components in no particular order, plus a list of
//! named nodes (input, descriptor, component, dim-range) glued together by Descriptors.
//!
//! A `component-node` line creates two nodes: the hidden descriptor node `<name>_input`, then
//! the component node `<name>` right after it. A descriptor node not followed by a component
//! node is an output node.

use super::component::Component;
use super::descriptor::Descriptor;

/// How an output node's objective is computed in training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ObjectiveType {
    #[default]
    Linear,
    Quadratic,
}

/// One node of the network.
#[derive(Clone, Debug)]
pub enum NetworkNode {
    /// Externally supplied data of a given dimension.
    Input { dim: usize },
    /// A descriptor: the hidden input of a component node, or an output node.
    Descriptor {
        descriptor: Descriptor,
        objective: ObjectiveType,
    },
    /// Applies component number `component` to the preceding descriptor node.
    Component { component: usize },
    /// Columns `[dim_offset, dim_offset + dim)` of node `input_node`.
    DimRange {
        input_node: usize,
        dim_offset: usize,
        dim: usize,
    },
}

/// Kaldi refuses networks with this many components or more.
pub const MAX_COMPONENTS: i32 = 100_000;

/// A whole network.
#[derive(Debug, Default)]
pub struct Nnet {
    /// Node names, parallel to `nodes`.
    pub node_names: Vec<String>,
    pub nodes: Vec<NetworkNode>,
    /// Component names, parallel to `components`.
    pub component_names: Vec<String>,
    pub components: Vec<Box<dyn Component>>,
}

impl Clone for Nnet {
    fn clone(&self) -> Self {
        Nnet {
            node_names: self.node_names.clone(),
            nodes: self.nodes.clone(),
            component_names: self.component_names.clone(),
            components: self.components.iter().map(|c| c.clone_box()).collect(),
        }
    }
}

impl Nnet {
    /// Index of the node with this name.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.node_names.iter().position(|n| n == name)
    }
    /// Index of the component with this name.
    pub fn component_index(&self, name: &str) -> Option<usize> {
        self.component_names.iter().position(|n| n == name)
    }
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    /// True for an output node: a descriptor node not followed by a component node.
    pub fn is_output_node(&self, node: usize) -> bool {
        matches!(self.nodes[node], NetworkNode::Descriptor { .. })
            && !matches!(
                self.nodes.get(node + 1),
                Some(NetworkNode::Component { .. })
            )
    }
    /// The objective of output node `name` (`None` if it is not an output node).
    pub fn objective_type(&self, name: &str) -> Option<ObjectiveType> {
        let node = self.node_index(name)?;
        match &self.nodes[node] {
            NetworkNode::Descriptor { objective, .. } if self.is_output_node(node) => {
                Some(*objective)
            }
            _ => None,
        }
    }
    /// True for an input node.
    pub fn is_input_node(&self, node: usize) -> bool {
        matches!(self.nodes[node], NetworkNode::Input { .. })
    }
    /// True for a component-input (hidden descriptor) node.
    pub fn is_component_input_node(&self, node: usize) -> bool {
        matches!(self.nodes[node], NetworkNode::Descriptor { .. })
            && matches!(
                self.nodes.get(node + 1),
                Some(NetworkNode::Component { .. })
            )
    }
    /// The output dimension of a node.
    pub fn node_dim(&self, node: usize) -> usize {
        match &self.nodes[node] {
            NetworkNode::Input { dim } => *dim,
            NetworkNode::Descriptor { descriptor, .. } => descriptor.dim(self),
            NetworkNode::Component { component } => self.components[*component].output_dim(),
            NetworkNode::DimRange { dim, .. } => *dim,
        }
    }
    /// Names of the output nodes, in node order.
    pub fn output_names(&self) -> Vec<&str> {
        (0..self.nodes.len())
            .filter(|&i| self.is_output_node(i))
            .map(|i| self.node_names[i].as_str())
            .collect()
    }
    /// Names of the input nodes, in node order.
    pub fn input_names(&self) -> Vec<&str> {
        (0..self.nodes.len())
            .filter(|&i| self.is_input_node(i))
            .map(|i| self.node_names[i].as_str())
            .collect()
    }

    /// The nodes node `node` reads directly (a component node reads its descriptor node).
    pub fn node_inputs(&self, node: usize) -> Vec<usize> {
        match &self.nodes[node] {
            NetworkNode::Input { .. } => Vec::new(),
            NetworkNode::Descriptor { descriptor, .. } => descriptor.node_dependencies(),
            NetworkNode::Component { .. } => node.checked_sub(1).into_iter().collect(),
            NetworkNode::DimRange { input_node, .. } => vec![*input_node],
        }
    }

    /// True if some node depends on itself through the graph (a recurrence such as
    /// `IfDefined(Offset(x, -1))` feeding back into x; Kaldi's `NnetIsRecurrent`).
    pub fn is_recurrent(&self) -> bool {
        // Depth-first search for a back edge; iterative, since a network may have 100,000
        // nodes. State: 0 unvisited, 1 on the stack, 2 done.
        let n = self.nodes.len();
        let mut state = vec![0u8; n];
        for root in 0..n {
            if state[root] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, Vec<usize>)> = vec![(root, self.node_inputs(root))];
            state[root] = 1;
            while let Some((node, deps)) = stack.last_mut() {
                match deps.pop() {
                    Some(d) if d < n => match state[d] {
                        0 => {
                            state[d] = 1;
                            let next = self.node_inputs(d);
                            stack.push((d, next));
                        }
                        1 => return true,
                        _ => {}
                    },
                    Some(_) => {}
                    None => {
                        state[*node] = 2;
                        stack.pop();
                    }
                }
            }
        }
        false
    }
}
