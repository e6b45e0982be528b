//! Reading config files into a network (Kaldi's `Nnet::ReadConfig`). The result is checked
//! by the network's own [`Nnet::validate`] rules (`nnet/validate.rs`), with each problem
//! traced back to the config line that caused it.
//!
//! Reading works in two passes over the lines so a line may refer to nodes defined later:
//! pass 0 creates components and node slots, pass 1 parses descriptors and resolves names.
//! Applying a config to an existing network first regenerates the existing nodes as config
//! lines; a later definition of a node replaces the earlier one, and a `component` line with
//! an existing component's name replaces that component in place (how `nnet3-init old.raw
//! extra.config` adds layers).

use crate::error::{Error, Result, TextPos};
use crate::nnet::component::{new_component_from_config, Component};
use crate::nnet::config_line::{config_lines as split_config_lines, is_valid_name, ConfigLine};
use crate::nnet::descriptor::parse::DescriptorError;
use crate::nnet::descriptor::Descriptor;
use crate::nnet::network::{NetworkNode, Nnet, ObjectiveType};
use rand::RngCore;
use std::collections::HashMap;

/// Creates a component from a `component` config line whose `name` key is already consumed
/// (the default is [`new_component_from_config`]).
pub type ComponentFactory<'a> = dyn FnMut(&ConfigLine) -> Result<Box<dyn Component>> + 'a;

/// The first tokens a config line may start with.
const LINE_TYPES: &[&str] = &[
    "component",
    "component-node",
    "input-node",
    "output-node",
    "dim-range-node",
];

/// An error pointing at a character offset inside the value of `key`, allowing for a quote.
fn value_error(cl: &ConfigLine, key: &str, offset: usize, msg: impl Into<String>) -> Error {
    let msg = msg.into();
    match cl.error_in_value(key, offset, msg.clone()) {
        Error::Parse { mut pos, msg } => {
            // The value column points at an opening quote for quoted values.
            let quoted = pos
                .column
                .checked_sub(offset + 1)
                .and_then(|c| pos.line_text.chars().nth(c))
                .is_some_and(|c| c == '\'' || c == '"');
            if quoted {
                pos.column += 1;
            }
            Error::Parse { pos, msg }
        }
        other => other,
    }
}

fn descriptor_error(cl: &ConfigLine, key: &str, e: DescriptorError) -> Error {
    value_error(cl, key, e.offset, format!("bad descriptor: {}", e.msg))
}

impl Nnet {
    /// Builds a network from config text (Kaldi's `nnet3-init` on a config file). `file`
    /// names the text in error messages; random initial parameters come from `init_rng`
    /// (seeded by `compnet init --srand`).
    pub fn from_config_text(text: &str, file: &str, init_rng: &mut dyn RngCore) -> Result<Nnet> {
        let mut nnet = Nnet::default();
        nnet.apply_config_text(text, file, init_rng)?;
        Ok(nnet)
    }

    /// Applies config text to this network (Kaldi's `ReadConfig`), creating components with
    /// the registered component types from `init_rng`. On error the network is left
    /// unchanged.
    pub fn apply_config_text(
        &mut self,
        text: &str,
        file: &str,
        init_rng: &mut dyn RngCore,
    ) -> Result<()> {
        self.apply_config_text_with(text, file, &mut |cl: &ConfigLine| {
            new_component_from_config(cl, init_rng)
        })
    }

    /// Like [`Nnet::apply_config_text`], creating components with `factory`.
    pub fn apply_config_text_with(
        &mut self,
        text: &str,
        file: &str,
        factory: &mut ComponentFactory<'_>,
    ) -> Result<()> {
        // Existing nodes as config lines, then the new lines.
        let mut lines: Vec<ConfigLine> = Vec::new();
        for (i, l) in self.config_lines().iter().enumerate() {
            lines.push(ConfigLine::parse(
                l,
                TextPos {
                    file: "<existing network>".into(),
                    line: i + 1,
                    ..Default::default()
                },
            )?);
        }
        let num_initial = lines.len();
        for (line, raw) in split_config_lines(text) {
            lines.push(ConfigLine::parse(
                raw,
                TextPos {
                    file: file.to_string(),
                    line,
                    ..Default::default()
                },
            )?);
        }
        let lines = remove_redundant_lines(lines, num_initial)?;

        // Pass 0: components and node slots.
        let initial_num_components = self.components.len();
        let mut comp_names = self.component_names.clone();
        // Names are looked up by map: a config may have 100,000 component lines.
        let mut comp_index: HashMap<String, usize> = comp_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut replacements: Vec<(usize, Box<dyn Component>)> = Vec::new();
        let mut new_components: Vec<Box<dyn Component>> = Vec::new();
        let mut node_names: Vec<String> = Vec::new();
        let mut nodes: Vec<NetworkNode> = Vec::new();
        let mut node_line: Vec<usize> = Vec::new();
        let mut node_index: HashMap<String, usize> = HashMap::new();
        let mut add_node = |cl: &ConfigLine,
                            li: usize,
                            name: String,
                            node: NetworkNode,
                            names: &mut Vec<String>,
                            nodes: &mut Vec<NetworkNode>|
         -> Result<()> {
            if let Some(&prev) = node_index.get(&name) {
                let what = match (&nodes[prev], nodes.get(prev + 1)) {
                    (NetworkNode::Descriptor { .. }, Some(NetworkNode::Component { .. }))
                        if names.get(prev + 1).map(|n| format!("{n}_input"))
                            == Some(name.clone()) =>
                    {
                        format!(
                            "the hidden input node of component-node '{}'",
                            names[prev + 1]
                        )
                    }
                    _ => "another node".to_string(),
                };
                return Err(cl.error_at_value(
                    "name",
                    format!("node name '{name}' is already used by {what}"),
                ));
            }
            node_index.insert(name.clone(), names.len());
            names.push(name);
            nodes.push(node);
            node_line.push(li);
            Ok(())
        };
        for (li, cl) in lines.iter().enumerate() {
            let name = cl.get_str("name").unwrap_or_default().to_string();
            cl.check_sizes()?;
            match cl.first_token() {
                "component" => {
                    let c = factory(cl)?;
                    cl.check_all_used("a component line")?;
                    match comp_index.get(&name).copied() {
                        Some(idx) if idx < initial_num_components => replacements.push((idx, c)),
                        Some(_) => {
                            return Err(cl.error_at_value(
                                "name",
                                format!("component '{name}' is defined twice"),
                            ))
                        }
                        None => {
                            // What we write must read back, and the model format (Kaldi's
                            // reader too) holds fewer components than this.
                            let max = super::model_file::MAX_COMPONENTS as usize;
                            if comp_names.len() + 1 >= max {
                                return Err(cl.error(format!(
                                    "too many components: a network holds fewer than {max}"
                                )));
                            }
                            comp_index.insert(name.clone(), comp_names.len());
                            comp_names.push(name);
                            new_components.push(c);
                        }
                    }
                }
                "component-node" => {
                    let placeholder = NetworkNode::Descriptor {
                        descriptor: Descriptor { parts: Vec::new() },
                        objective: ObjectiveType::Linear,
                    };
                    add_node(
                        cl,
                        li,
                        format!("{name}_input"),
                        placeholder,
                        &mut node_names,
                        &mut nodes,
                    )?;
                    add_node(
                        cl,
                        li,
                        name,
                        NetworkNode::Component {
                            component: usize::MAX,
                        },
                        &mut node_names,
                        &mut nodes,
                    )?;
                }
                "input-node" => {
                    let dim: i32 = cl.require("dim")?;
                    if dim <= 0 {
                        return Err(
                            cl.error_at_value("dim", format!("dim must be positive, got {dim}"))
                        );
                    }
                    cl.check_all_used("input-node")?;
                    add_node(
                        cl,
                        li,
                        name,
                        NetworkNode::Input { dim: dim as usize },
                        &mut node_names,
                        &mut nodes,
                    )?;
                }
                "output-node" => {
                    let placeholder = NetworkNode::Descriptor {
                        descriptor: Descriptor { parts: Vec::new() },
                        objective: ObjectiveType::Linear,
                    };
                    add_node(cl, li, name, placeholder, &mut node_names, &mut nodes)?;
                }
                _ => {
                    // dim-range-node (the line types were checked already)
                    let placeholder = NetworkNode::DimRange {
                        input_node: usize::MAX,
                        dim_offset: 0,
                        dim: 0,
                    };
                    add_node(cl, li, name, placeholder, &mut node_names, &mut nodes)?;
                }
            }
        }

        // Pass 1: descriptors, component and node references.
        let kinds: Vec<NetworkNode> = nodes.clone();
        let resolve = |name: &str| -> std::result::Result<usize, String> {
            match node_index.get(name) {
                None => Err(format!("unknown node name '{name}'")),
                Some(&i) => match kinds.get(i) {
                    Some(NetworkNode::Descriptor { .. }) => Err(format!(
                        "'{name}' is an output node (or a component's hidden input); descriptors \
                         may only read input, component and dim-range nodes"
                    )),
                    _ => Ok(i),
                },
            }
        };
        let parse_input = |cl: &ConfigLine| -> Result<Descriptor> {
            let text = cl
                .get_str("input")
                .ok_or_else(|| cl.error("missing required option input=<descriptor>"))?;
            Descriptor::parse_with(text, &resolve).map_err(|e| descriptor_error(cl, "input", e))
        };
        let mut pos = 0;
        for cl in lines.iter() {
            match cl.first_token() {
                "component" => {}
                "component-node" => {
                    let cname: String = cl.require("component")?;
                    let c = comp_index.get(&cname).copied().ok_or_else(|| {
                        cl.error_at_value("component", format!("no component named '{cname}'"))
                    })?;
                    let descriptor = parse_input(cl)?;
                    cl.check_all_used("component-node")?;
                    nodes[pos] = NetworkNode::Descriptor {
                        descriptor,
                        objective: ObjectiveType::Linear,
                    };
                    nodes[pos + 1] = NetworkNode::Component { component: c };
                    pos += 2;
                }
                "input-node" => pos += 1,
                "output-node" => {
                    let descriptor = parse_input(cl)?;
                    let objective = match cl.get_str("objective") {
                        None | Some("linear") => ObjectiveType::Linear,
                        Some("quadratic") => ObjectiveType::Quadratic,
                        Some(other) => {
                            return Err(cl.error_at_value(
                                "objective",
                                format!(
                                "invalid objective type '{other}': expected linear or quadratic"
                            ),
                            ))
                        }
                    };
                    cl.check_all_used("output-node")?;
                    nodes[pos] = NetworkNode::Descriptor {
                        descriptor,
                        objective,
                    };
                    pos += 1;
                }
                _ => {
                    let input_name: String = cl.require("input-node")?;
                    let input_node = match node_index.get(&input_name) {
                        Some(&i)
                            if matches!(
                                kinds.get(i),
                                Some(NetworkNode::Input { .. } | NetworkNode::Component { .. })
                            ) =>
                        {
                            i
                        }
                        Some(_) => {
                            return Err(cl.error_at_value(
                                "input-node",
                                format!(
                                    "invalid input-node '{input_name}': a dim-range-node must read \
                                     an input node or a component node"
                                ),
                            ))
                        }
                        None => {
                            return Err(cl.error_at_value(
                                "input-node",
                                format!("unknown node name '{input_name}'"),
                            ))
                        }
                    };
                    let dim: i32 = cl.require("dim")?;
                    let dim_offset: i32 = cl.require("dim-offset")?;
                    if dim <= 0 {
                        return Err(
                            cl.error_at_value("dim", format!("dim must be positive, got {dim}"))
                        );
                    }
                    if dim_offset < 0 {
                        return Err(cl.error_at_value(
                            "dim-offset",
                            format!("dim-offset must be non-negative, got {dim_offset}"),
                        ));
                    }
                    cl.check_all_used("dim-range-node")?;
                    nodes[pos] = NetworkNode::DimRange {
                        input_node,
                        dim_offset: dim_offset as usize,
                        dim: dim as usize,
                    };
                    pos += 1;
                }
            }
        }

        // Install the new network, check it, and roll back on failure.
        let old_node_names = std::mem::replace(&mut self.node_names, node_names);
        let old_nodes = std::mem::replace(&mut self.nodes, nodes);
        let old_comp_names = std::mem::replace(&mut self.component_names, comp_names);
        let mut displaced = Vec::new();
        for (idx, c) in replacements {
            if let Some(slot) = self.components.get_mut(idx) {
                displaced.push((idx, std::mem::replace(slot, c)));
            }
        }
        self.components.extend(new_components);
        if let Err(p) = self.check() {
            let err = match p
                .node
                .and_then(|n| node_line.get(n))
                .and_then(|&li| lines.get(li))
            {
                Some(cl) => cl.error_at_value(p.key, p.msg),
                None => Error::Network(format!("{file}: {}", p.msg)),
            };
            self.components.truncate(initial_num_components);
            for (idx, c) in displaced {
                if let Some(slot) = self.components.get_mut(idx) {
                    *slot = c;
                }
            }
            self.node_names = old_node_names;
            self.nodes = old_nodes;
            self.component_names = old_comp_names;
            return Err(err);
        }
        Ok(())
    }
}

/// Checks line types and names, and drops earlier definitions of nodes redefined later
/// (Kaldi's `RemoveRedundantConfigLines`). Lines before `num_initial` are the existing
/// network's; a name repeated within the new lines is an error.
fn remove_redundant_lines(lines: Vec<ConfigLine>, num_initial: usize) -> Result<Vec<ConfigLine>> {
    let mut node_line: HashMap<String, usize> = HashMap::new();
    let mut comp_line: HashMap<String, usize> = HashMap::new();
    let mut remove = vec![false; lines.len()];
    for (i, cl) in lines.iter().enumerate() {
        let tok = cl.first_token();
        if !LINE_TYPES.contains(&tok) {
            let what = if tok.is_empty() {
                "a config line must start with its type".to_string()
            } else {
                format!("unknown config line type '{tok}'")
            };
            return Err(cl.error(format!(
                "{what}; expected one of component, component-node, input-node, output-node, \
                 dim-range-node"
            )));
        }
        let name = cl
            .get_str("name")
            .ok_or_else(|| cl.error("missing required option name=..."))?
            .to_string();
        if !is_valid_name(&name) {
            return Err(cl.error_at_value(
                "name",
                format!(
                    "invalid name '{name}': names start with a letter or '_' and contain only \
                     letters, digits, '_', '-' and '.'"
                ),
            ));
        }
        let map = if tok == "component" {
            &mut comp_line
        } else {
            &mut node_line
        };
        if let Some(&prev) = map.get(&name) {
            if prev >= num_initial {
                let what = if tok == "component" {
                    "component"
                } else {
                    "node"
                };
                return Err(cl.error_at_value(
                    "name",
                    format!(
                        "{what} '{name}' is defined twice (first on line {})",
                        lines[prev].pos().line
                    ),
                ));
            }
            remove[prev] = true;
        }
        map.insert(name, i);
    }
    Ok(lines
        .into_iter()
        .zip(remove)
        .filter(|(_, r)| !r)
        .map(|(l, _)| l)
        .collect())
}
