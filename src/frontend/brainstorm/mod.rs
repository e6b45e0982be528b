//! Brainstorm's architecture dictionary (seed 002), read as JSON (lists where Brainstorm's
//! Python has tuples), lowered to an nnet3 network.
//!
//! `json.rs` parses with positions, `arch.rs` turns the dictionary into checked layers and
//! connections in topological order, `layers.rs` is the table of layer types, and `lower.rs`
//! turns each layer into building steps (components from Kaldi component lines, nodes with
//! [`Desc`] inputs). [`read_brainstorm`] runs the steps through
//! [`NetworkBuilder`](crate::nnet::NetworkBuilder); [`Lowered::config_text`] prints the same
//! steps as an nnet3 config (`compnet convert`), in the same order, so that config
//! initialised with the same `--srand` is the same network, parameters included. The checks
//! happen while lowering, so errors point into the JSON file; if the builder still refuses a
//! step, its error is traced back to the layer that made it.

mod arch;
pub mod json;
pub mod layers;
mod lower;

use crate::error::Result;
use crate::nnet::{Desc, NetworkBuilder, Nnet, ObjectiveType};
use json::Source;
use lower::{Op, OpKind};

/// An architecture lowered to building steps.
pub struct Lowered {
    ops: Vec<Op>,
    /// (name, type, byte offset of its key) of each layer, to trace errors back.
    layers: Vec<(String, &'static str, usize)>,
}

impl Lowered {
    /// The steps as an nnet3 config, with a comment line before each layer's lines.
    pub fn config_text(&self) -> String {
        let mut s = String::new();
        for op in &self.ops {
            let line = match &op.kind {
                OpKind::Comment(c) => c.clone(),
                OpKind::Declare(_) => continue,
                OpKind::Input { name, dim } => format!("input-node name={name} dim={dim}"),
                OpKind::Component { name, config } => format!("component name={name} {config}"),
                OpKind::ComponentNode {
                    name,
                    component,
                    input,
                } => format!(
                    "component-node name={name} component={component} input={}",
                    desc_text(input)
                ),
                OpKind::DimRange {
                    name,
                    input,
                    offset,
                    dim,
                } => format!(
                    "dim-range-node name={name} input-node={input} dim-offset={offset} dim={dim}"
                ),
                OpKind::Output {
                    name,
                    input,
                    objective,
                } => format!(
                    "output-node name={name} input={} objective={}",
                    desc_text(input),
                    match objective {
                        ObjectiveType::Linear => "linear",
                        ObjectiveType::Quadratic => "quadratic",
                    }
                ),
            };
            s.push_str(&line);
            s.push('\n');
        }
        s
    }

    /// Builds the network, initialising parameters from `init_rng` in step order.
    fn build(&self, src: &Source<'_>, init_rng: &mut dyn rand::RngCore) -> Result<Nnet> {
        let mut b = NetworkBuilder::new();
        for op in &self.ops {
            let done = match &op.kind {
                OpKind::Comment(_) => Ok(()),
                OpKind::Declare(name) => b.declare(name),
                OpKind::Input { name, dim } => b.input(name, *dim),
                OpKind::Component { name, config } => {
                    b.component_from_config(name, config, init_rng)
                }
                OpKind::ComponentNode {
                    name,
                    component,
                    input,
                } => b.component_node(name, component, input.clone()),
                OpKind::DimRange {
                    name,
                    input,
                    offset,
                    dim,
                } => b.dim_range(name, input, *offset, *dim),
                OpKind::Output {
                    name,
                    input,
                    objective,
                } => b.output(name, input.clone(), *objective),
            };
            done.map_err(|e| match op.layer.and_then(|i| self.layers.get(i)) {
                Some((name, kind, at)) => src.error(
                    *at,
                    format!("layer '{name}' ({kind}) lowers to a network compnet refuses: {e}"),
                ),
                None => src.error(0, format!("the lowered network is refused: {e}")),
            })?;
        }
        b.build()
            .map_err(|e| src.error(0, format!("the lowered network is refused: {e}")))
    }
}

/// Kaldi's config text of a descriptor (binary `Sum`s, as Kaldi's grammar has them).
fn desc_text(d: &Desc) -> String {
    let list = |v: &[Desc]| v.iter().map(desc_text).collect::<Vec<_>>().join(", ");
    match d {
        Desc::Node(n) => n.clone(),
        Desc::Append(v) => format!("Append({})", list(v)),
        Desc::Switch(v) => format!("Switch({})", list(v)),
        Desc::Sum(v) => match v.as_slice() {
            [] => String::new(),
            [one] => desc_text(one),
            [first, rest @ ..] => {
                format!(
                    "Sum({}, {})",
                    desc_text(first),
                    desc_text(&Desc::Sum(rest.to_vec()))
                )
            }
        },
        Desc::Failover(a, b) => format!("Failover({}, {})", desc_text(a), desc_text(b)),
        Desc::IfDefined(a) => format!("IfDefined({})", desc_text(a)),
        Desc::Offset(a, t, 0) => format!("Offset({}, {t})", desc_text(a)),
        Desc::Offset(a, t, x) => format!("Offset({}, {t}, {x})", desc_text(a)),
        Desc::Round(a, m) => format!("Round({}, {m})", desc_text(a)),
        Desc::ReplaceIndex(a, var, v) => format!(
            "ReplaceIndex({}, {}, {v})",
            desc_text(a),
            match var {
                crate::nnet::descriptor::IndexVar::T => "t",
                crate::nnet::descriptor::IndexVar::X => "x",
            }
        ),
        Desc::Scale(s, a) => format!("Scale({s}, {})", desc_text(a)),
        Desc::Const(v, dim) => format!("Const({v}, {dim})"),
    }
}

/// Parses and lowers an architecture (`file` names it in errors).
pub fn lower(text: &str, file: &str) -> Result<Lowered> {
    let src = Source { text, file };
    let root = json::parse(&src)?;
    let arch = arch::read(&src, &root)?;
    let ops = lower::lower(&src, &arch)?;
    Ok(Lowered {
        ops,
        layers: arch
            .layers
            .iter()
            .map(|l| (l.name.clone(), l.kind.name, l.at))
            .collect(),
    })
}

/// Reads a Brainstorm architecture into a network, initialising parameters from `init_rng`.
pub fn read_brainstorm(text: &str, file: &str, init_rng: &mut dyn rand::RngCore) -> Result<Nnet> {
    let lowered = lower(text, file)?;
    lowered.build(&Source { text, file }, init_rng)
}
