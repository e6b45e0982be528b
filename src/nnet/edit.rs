//! Editing a network in place: Kaldi's edit-config directives (`nnet3-copy --edits`,
//! `--edits-config`; nnet-utils' `ReadEditConfig`), which Kaldi's training scripts use to set
//! learning rates and dropout proportions between iterations and to prune a network for
//! decoding (remove the cross-entropy output and what only it used).
//!
//! Directives, one per line (`#` comments; `;` separates lines in `--edits`), names matched with
//! `*` wildcards:
//! - `set-learning-rate [name=<pattern>] learning-rate=<r>`
//! - `set-learning-rate-factor [name=<pattern>] learning-rate-factor=<f>`
//! - `set-dropout-proportion [name=<pattern>] proportion=<p>`
//! - `convert-to-fixed-affine [name=<pattern>]`
//! - `rename-node old-name=<name> new-name=<name>`
//! - `remove-output-nodes name=<pattern>`
//! - `remove-orphan-nodes [remove-orphan-inputs=false]`, `remove-orphan-components`,
//!   `remove-orphans [remove-orphan-inputs=false]`
//!
//! Kaldi's `apply-svd` and `reduce-rank` are refused with a message saying so.

use crate::error::Result;
use crate::error::TextPos;
use crate::nnet::component::affine::{AffineComponent, FixedAffineComponent};
use crate::nnet::component::dropout::set_dropout_proportion;
use crate::nnet::config_line::{config_lines, is_valid_name, ConfigLine};
use crate::nnet::descriptor::{ForwardingDescriptor, SumDescriptor};
use crate::nnet::network::{NetworkNode, Nnet};

/// Kaldi's `NameMatchesPattern`: `*` matches any run of characters, everything else itself.
pub fn name_matches_pattern(name: &str, pattern: &str) -> bool {
    fn go(n: &[u8], p: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| go(&n[i..], rest)),
            Some((c, rest)) => n.first() == Some(c) && go(&n[1..], rest),
        }
    }
    go(name.as_bytes(), pattern.as_bytes())
}

/// Applies the directives of an edit config (`text`, from `file`) to `nnet`, in order, and
/// checks the result. Returns Kaldi's log messages (one per directive). On error `nnet` may be
/// partly edited; callers edit a copy they discard on error.
pub fn apply_edit_config(nnet: &mut Nnet, text: &str, file: &str) -> Result<Vec<String>> {
    let mut log = Vec::new();
    for (line_no, raw) in config_lines(text) {
        let cl = ConfigLine::parse(
            raw,
            TextPos {
                file: file.to_string(),
                line: line_no,
                ..Default::default()
            },
        )?;
        log.push(apply_directive(nnet, &cl)?);
        cl.check_all_used(&format!("edit directive '{}'", cl.first_token()))?;
    }
    nnet.validate()?;
    Ok(log)
}

fn apply_directive(nnet: &mut Nnet, cl: &ConfigLine) -> Result<String> {
    let pattern = || -> Result<String> { cl.get_or("name", "*".to_string()) };
    Ok(match cl.first_token() {
        "set-learning-rate" => {
            let pat = pattern()?;
            let lr: f32 = cl.require("learning-rate")?;
            let n = for_matching_updatable(nnet, &pat, |cm| {
                cm.learning_rate = lr * cm.learning_rate_factor;
            });
            format!("Set learning rates for {n} components.")
        }
        "set-learning-rate-factor" => {
            let pat = pattern()?;
            let f: f32 = cl.require("learning-rate-factor")?;
            if !(f >= 0.0 && f.is_finite()) {
                return Err(
                    cl.error_at_value("learning-rate-factor", "expected a finite number >= 0")
                );
            }
            let n = for_matching_updatable(nnet, &pat, |cm| cm.learning_rate_factor = f);
            format!("Set learning rate factors for {n} components.")
        }
        "set-dropout-proportion" => {
            let pat = pattern()?;
            let p: f32 = cl.require("proportion")?;
            if !(0.0..=1.0).contains(&p) {
                return Err(cl.error_at_value("proportion", "expected a number in [0, 1]"));
            }
            let mut n = 0;
            for (name, c) in nnet.component_names.iter().zip(&mut nnet.components) {
                if name_matches_pattern(name, &pat) && set_dropout_proportion(c.as_mut(), p) {
                    n += 1;
                }
            }
            format!("Set dropout proportions for {n} components.")
        }
        "convert-to-fixed-affine" => {
            let pat = pattern()?;
            let mut n = 0;
            for (name, c) in nnet.component_names.iter().zip(&mut nnet.components) {
                if !name_matches_pattern(name, &pat) {
                    continue;
                }
                if let Some(a) = c.as_any().downcast_ref::<AffineComponent>() {
                    *c = Box::new(FixedAffineComponent::new(
                        (*a.linear).clone(),
                        a.bias.clone(),
                    ));
                    n += 1;
                }
            }
            format!("Converted {n} components to FixedAffineComponent.")
        }
        "rename-node" => {
            let old: String = cl.require("old-name")?;
            let new: String = cl.require("new-name")?;
            let Some(i) = nnet.node_index(&old) else {
                return Err(cl.error_at_value("old-name", format!("there is no node '{old}'")));
            };
            if !is_valid_name(&new) {
                return Err(cl.error_at_value("new-name", format!("'{new}' is not a valid name")));
            }
            if nnet.node_index(&new).is_some() {
                return Err(
                    cl.error_at_value("new-name", format!("a node named '{new}' already exists"))
                );
            }
            nnet.node_names[i] = new.clone();
            // A component node's hidden input node is named after it.
            if matches!(nnet.nodes[i], NetworkNode::Component { .. }) && i > 0 {
                nnet.node_names[i - 1] = format!("{new}_input");
            }
            format!("Renamed node '{old}' to '{new}'.")
        }
        "remove-output-nodes" => {
            let pat: String = cl.require("name")?;
            let remove: Vec<bool> = (0..nnet.num_nodes())
                .map(|i| nnet.is_output_node(i) && name_matches_pattern(&nnet.node_names[i], &pat))
                .collect();
            let n = remove.iter().filter(|r| **r).count();
            if n == (0..nnet.num_nodes())
                .filter(|&i| nnet.is_output_node(i))
                .count()
            {
                return Err(cl.error_at_value("name", "this would remove every output node"));
            }
            remove_nodes(nnet, &remove);
            format!("Removing {n} output nodes.")
        }
        "remove-orphan-nodes" => {
            let inputs = cl.get_or("remove-orphan-inputs", false)?;
            let n = remove_orphan_nodes(nnet, inputs);
            format!("Removed {n} orphan nodes.")
        }
        "remove-orphan-components" => {
            let n = remove_orphan_components(nnet);
            format!("Removing {n} orphan components.")
        }
        "remove-orphans" => {
            let inputs = cl.get_or("remove-orphan-inputs", false)?;
            let nodes = remove_orphan_nodes(nnet, inputs);
            let comps = remove_orphan_components(nnet);
            format!("Removed {nodes} orphan nodes and {comps} orphan components.")
        }
        d @ ("apply-svd" | "reduce-rank") => {
            return Err(cl.error(format!(
                "the edit directive '{d}' is not supported by compnet yet"
            )))
        }
        d => {
            return Err(cl.error(format!(
                "unknown edit directive '{d}' (expected set-learning-rate, \
                 set-learning-rate-factor, set-dropout-proportion, convert-to-fixed-affine, \
                 rename-node, remove-output-nodes, remove-orphan-nodes, \
                 remove-orphan-components or remove-orphans)"
            )))
        }
    })
}

/// Applies `f` to the common fields of every updatable component whose name matches.
fn for_matching_updatable(
    nnet: &mut Nnet,
    pattern: &str,
    mut f: impl FnMut(&mut crate::nnet::component::updatable::UpdatableCommon),
) -> usize {
    let mut n = 0;
    for (name, c) in nnet.component_names.iter().zip(&mut nnet.components) {
        if name_matches_pattern(name, pattern) {
            if let Some(u) = c.as_updatable_mut() {
                f(u.common_mut());
                n += 1;
            }
        }
    }
    n
}

/// The nodes each node reads directly.
fn node_inputs(nnet: &Nnet, i: usize) -> Vec<usize> {
    match &nnet.nodes[i] {
        NetworkNode::Input { .. } => Vec::new(),
        NetworkNode::Descriptor { descriptor, .. } => descriptor.node_dependencies(),
        // A component node reads its hidden input node, just before it.
        NetworkNode::Component { .. } => vec![i.wrapping_sub(1)],
        NetworkNode::DimRange { input_node, .. } => vec![*input_node],
    }
}

/// Removes the nodes that no output needs (Kaldi's `RemoveOrphanNodes`): input nodes only if
/// `remove_inputs`. Returns how many were removed, counting a component node and its hidden
/// input node once, as Kaldi's log does.
pub fn remove_orphan_nodes(nnet: &mut Nnet, remove_inputs: bool) -> usize {
    let n = nnet.num_nodes();
    let mut needed = vec![false; n];
    let mut stack: Vec<usize> = (0..n).filter(|&i| nnet.is_output_node(i)).collect();
    while let Some(i) = stack.pop() {
        if i >= n || needed[i] {
            continue;
        }
        needed[i] = true;
        stack.extend(node_inputs(nnet, i));
    }
    let remove: Vec<bool> = (0..n)
        .map(|i| {
            !needed[i] && (remove_inputs || !matches!(nnet.nodes[i], NetworkNode::Input { .. }))
        })
        .collect();
    let counted = (0..n)
        .filter(|&i| remove[i] && !nnet.is_component_input_node(i))
        .count();
    remove_nodes(nnet, &remove);
    counted
}

/// Removes components no component node uses (Kaldi's `RemoveOrphanComponents`).
pub fn remove_orphan_components(nnet: &mut Nnet) -> usize {
    let mut used = vec![false; nnet.components.len()];
    for node in &nnet.nodes {
        if let NetworkNode::Component { component } = node {
            if let Some(u) = used.get_mut(*component) {
                *u = true;
            }
        }
    }
    let mut new_index = vec![usize::MAX; used.len()];
    let mut next = 0;
    for (i, u) in used.iter().enumerate() {
        if *u {
            new_index[i] = next;
            next += 1;
        }
    }
    let removed = used.len() - next;
    let mut keep = used.iter();
    nnet.components.retain(|_| *keep.next().unwrap_or(&true));
    let mut keep = used.iter();
    nnet.component_names
        .retain(|_| *keep.next().unwrap_or(&true));
    for node in &mut nnet.nodes {
        if let NetworkNode::Component { component } = node {
            *component = new_index[*component];
        }
    }
    removed
}

/// Removes the nodes marked in `remove` and renumbers the references of the others. A
/// component node and its hidden input node go together. Callers only remove nodes nothing
/// kept reads.
fn remove_nodes(nnet: &mut Nnet, remove: &[bool]) {
    let n = nnet.num_nodes();
    let mut remove = remove.to_vec();
    for i in 0..n {
        if remove[i] && matches!(nnet.nodes[i], NetworkNode::Component { .. }) && i > 0 {
            remove[i - 1] = true;
        }
    }
    let mut new_index = vec![usize::MAX; n];
    let mut next = 0;
    for i in 0..n {
        if !remove[i] {
            new_index[i] = next;
            next += 1;
        }
    }
    let mut keep = remove.iter();
    nnet.nodes.retain(|_| !*keep.next().unwrap_or(&false));
    let mut keep = remove.iter();
    nnet.node_names.retain(|_| !*keep.next().unwrap_or(&false));
    for node in &mut nnet.nodes {
        match node {
            NetworkNode::Descriptor { descriptor, .. } => {
                for part in &mut descriptor.parts {
                    renumber_sum(part, &new_index);
                }
            }
            NetworkNode::DimRange { input_node, .. } => *input_node = new_index[*input_node],
            NetworkNode::Input { .. } | NetworkNode::Component { .. } => {}
        }
    }
}

fn renumber_sum(d: &mut SumDescriptor, new_index: &[usize]) {
    match d {
        SumDescriptor::Simple(f) => renumber_forwarding(f, new_index),
        SumDescriptor::Optional(s) => renumber_sum(s, new_index),
        SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
            renumber_sum(a, new_index);
            renumber_sum(b, new_index);
        }
        SumDescriptor::Const { .. } => {}
    }
}

fn renumber_forwarding(d: &mut ForwardingDescriptor, new_index: &[usize]) {
    match d {
        ForwardingDescriptor::Simple { node, .. } => *node = new_index[*node],
        ForwardingDescriptor::Offset { src, .. }
        | ForwardingDescriptor::Round { src, .. }
        | ForwardingDescriptor::ReplaceIndex { src, .. } => renumber_forwarding(src, new_index),
        ForwardingDescriptor::Switch(v) => {
            for f in v {
                renumber_forwarding(f, new_index);
            }
        }
    }
}

/// Turns `--edits` text into edit-config lines: Kaldi converts `;` to newlines.
pub fn edits_option_text(edits: &str) -> String {
    edits.replace(';', "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(name_matches_pattern("tdnnf2.linear", "tdnnf2*"));
        assert!(name_matches_pattern("anything", "*"));
        assert!(name_matches_pattern("lstm1.c", "*.c"));
        assert!(name_matches_pattern("a.b.c", "a*c"));
        assert!(!name_matches_pattern("tdnnf12", "tdnnf2*"));
        assert!(!name_matches_pattern("ab", "a"));
        assert!(name_matches_pattern("", "*"));
    }
}
