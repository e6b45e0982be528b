//! Writing a network's nodes as Kaldi config lines (Kaldi's `GetConfigLines`): the node
//! section of a model file and what `nnet3-info` prints.

use crate::nnet::network::{NetworkNode, Nnet, ObjectiveType};

impl Nnet {
    /// The network's nodes as config lines (Kaldi's `GetConfigLines(include_dim=false)`,
    /// the header of a model file), skipping hidden component-input nodes.
    pub fn config_lines(&self) -> Vec<String> {
        (0..self.nodes.len())
            .filter(|&n| !self.is_component_input_node(n))
            .map(|n| self.node_config_line(n, false))
            .collect()
    }

    /// Config lines with dimensions, as `nnet3-info` prints them
    /// (`GetConfigLines(include_dim=true)`).
    pub fn config_lines_with_dims(&self) -> Vec<String> {
        (0..self.nodes.len())
            .filter(|&n| !self.is_component_input_node(n))
            .map(|n| self.node_config_line(n, true))
            .collect()
    }

    /// One node as a config line (Kaldi's `GetAsConfigLine`).
    pub fn node_config_line(&self, n: usize, include_dim: bool) -> String {
        let name = self.node_names.get(n).map_or("", |s| s.as_str());
        let dim_of = |i: usize| self.checked_node_dim(i).unwrap_or(0);
        match self.nodes.get(n) {
            None => String::new(),
            Some(NetworkNode::Input { dim }) => format!("input-node name={name} dim={dim}"),
            Some(NetworkNode::Descriptor {
                descriptor,
                objective,
            }) => {
                let mut s = format!(
                    "output-node name={name} input={}",
                    descriptor.to_config(&self.node_names)
                );
                if include_dim {
                    s.push_str(&format!(" dim={}", dim_of(n)));
                }
                s.push_str(match objective {
                    ObjectiveType::Linear => " objective=linear",
                    ObjectiveType::Quadratic => " objective=quadratic",
                });
                s
            }
            Some(NetworkNode::Component { component }) => {
                let cname = self
                    .component_names
                    .get(*component)
                    .map_or("", |s| s.as_str());
                let input = match n.checked_sub(1).and_then(|p| self.nodes.get(p)) {
                    Some(NetworkNode::Descriptor { descriptor, .. }) => {
                        descriptor.to_config(&self.node_names)
                    }
                    _ => String::new(),
                };
                let mut s = format!("component-node name={name} component={cname} input={input}");
                if include_dim {
                    let in_dim = n.checked_sub(1).map_or(0, dim_of);
                    s.push_str(&format!(" input-dim={in_dim} output-dim={}", dim_of(n)));
                }
                s
            }
            Some(NetworkNode::DimRange {
                input_node,
                dim_offset,
                dim,
            }) => format!(
                "dim-range-node name={name} input-node={} dim-offset={dim_offset} dim={dim}",
                self.node_names.get(*input_node).map_or("", |s| s.as_str())
            ),
        }
    }
}
