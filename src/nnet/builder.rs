//! `NetworkBuilder`: building an [`Nnet`] in code, one checked call at a time. Front ends
//! other than Kaldi's config reader (CNTK's NDL, Brainstorm's JSON) lower through it, and so
//! can programs that embed compnet.
//!
//! Nodes are named as in Kaldi's configs: `component_node("x", ...)` adds the hidden
//! descriptor node `x_input` followed by the component node `x`; an output node is a
//! descriptor node followed by no component node. Descriptors are written with [`Desc`]
//! (node names, not indexes) and normalised into Kaldi's three levels by the Kaldi front
//! end's normaliser, so both front ends give a descriptor one meaning.
//!
//! Every call checks what it can at once (names, unknown nodes, dimensions) and returns an
//! error, never panics. A node may be used before it is defined (recurrence) only after
//! [`NetworkBuilder::declare`]; the checks that need it wait for [`NetworkBuilder::build`],
//! which also runs [`Nnet::validate`].
//!
//! ```
//! use compnet::nnet::{Desc, NetworkBuilder, ObjectiveType};
//! use compnet::io::egs::{NnetExample, NnetIo};
//! use compnet::io::sparse::GeneralMatrix;
//! use compnet::matrix::Matrix;
//! use compnet::nnet::Index;
//! use compnet::train::trainer::{NnetTrainer, NnetTrainerOptions};
//!
//! let mut rng = compnet::random::seeded_rng(1);
//! let mut b = NetworkBuilder::new();
//! b.input("input", 4)?;
//! b.component_with_node(
//!     "affine1",
//!     "type=AffineComponent input-dim=8 output-dim=16 learning-rate=0.02",
//!     // The frame itself and the one before it (zero before the first).
//!     Desc::append([Desc::node("input"), Desc::node("input").offset(-1).if_defined()]),
//!     &mut rng,
//! )?;
//! b.component_with_node("relu1", "type=RectifiedLinearComponent dim=16", "affine1", &mut rng)?;
//! b.component_with_node(
//!     "affine2",
//!     "type=AffineComponent input-dim=16 output-dim=2 learning-rate=0.02",
//!     "relu1",
//!     &mut rng,
//! )?;
//! b.output("output", "affine2", ObjectiveType::Quadratic)?;
//! let mut nnet = b.build()?;
//!
//! // A regression target: the sum and the difference of the first two features.
//! let frames = 32;
//! let x: Vec<f32> = (0..frames * 4).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
//! let y: Vec<f32> = (0..frames)
//!     .flat_map(|r| [x[4 * r] + x[4 * r + 1], x[4 * r] - x[4 * r + 1]])
//!     .collect();
//! let indexes: Vec<Index> = (0..frames as i32).map(|t| Index { n: 0, t, x: 0 }).collect();
//! let io = |name: &str, cols: usize, v: &[f32]| NnetIo {
//!     name: name.into(),
//!     indexes: indexes.clone(),
//!     features: GeneralMatrix::Full(Matrix::from_vec(frames, cols, v.to_vec())),
//! };
//! let eg = NnetExample { io: vec![io("input", 4, &x), io("output", 2, &y)] };
//!
//! let objective_of = |nnet: &mut compnet::nnet::Nnet| -> compnet::Result<f64> {
//!     let mut t = NnetTrainer::new(NnetTrainerOptions::default(), nnet)?;
//!     t.train(&eg)?;
//!     Ok(t.objectives()["output"].average())
//! };
//! let first = objective_of(&mut nnet)?;
//! for _ in 0..20 {
//!     objective_of(&mut nnet)?;
//! }
//! let last = objective_of(&mut nnet)?;
//! assert!(last > first, "the (negated squared error) objective rises: {first} -> {last}");
//!
//! let dir = std::env::temp_dir().join(format!("compnet-builder-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).expect("temp dir");
//! let path = dir.join("final.raw");
//! nnet.write_model_file(path.to_str().expect("utf-8 path"), true)?;
//! assert!(compnet::nnet::Nnet::read_model_file(path.to_str().unwrap())?.nnet.num_nodes() > 0);
//! std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), compnet::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::nnet::component::{new_component_from_config, Component};
use crate::nnet::config_line::{is_valid_name, ConfigLine};
use crate::nnet::descriptor::parse::{GeneralDescriptor, GeneralKind};
use crate::nnet::descriptor::{Descriptor, IndexVar};
use crate::nnet::network::{NetworkNode, Nnet, ObjectiveType};
use rand::RngCore;
use std::collections::HashMap;

/// A descriptor written with node names: what a node's input is. The builder turns it into
/// Kaldi's normalised [`Descriptor`].
#[derive(Clone, Debug, PartialEq)]
pub enum Desc {
    /// A node's output at the same Index.
    Node(String),
    /// Columns of the parts side by side.
    Append(Vec<Desc>),
    /// Element-wise sum.
    Sum(Vec<Desc>),
    /// Part number (t mod #parts).
    Switch(Vec<Desc>),
    /// The first where it is computable, else the second.
    Failover(Box<Desc>, Box<Desc>),
    /// Zero where not computable.
    IfDefined(Box<Desc>),
    /// Reads (t + t_offset, x + x_offset).
    Offset(Box<Desc>, i32, i32),
    /// t rounded down to a multiple of the modulus.
    Round(Box<Desc>, i32),
    /// t or x replaced by a constant.
    ReplaceIndex(Box<Desc>, IndexVar, i32),
    /// Times a constant.
    Scale(f32, Box<Desc>),
    /// A constant vector of this value and dimension.
    Const(f32, usize),
}

impl From<&str> for Desc {
    fn from(name: &str) -> Desc {
        Desc::Node(name.to_string())
    }
}

impl From<String> for Desc {
    fn from(name: String) -> Desc {
        Desc::Node(name)
    }
}

impl Desc {
    /// The output of node `name`.
    pub fn node(name: impl Into<String>) -> Desc {
        Desc::Node(name.into())
    }
    /// `Append(parts...)`.
    pub fn append(parts: impl IntoIterator<Item = Desc>) -> Desc {
        Desc::Append(parts.into_iter().collect())
    }
    /// `Sum(terms...)`.
    pub fn sum(terms: impl IntoIterator<Item = Desc>) -> Desc {
        Desc::Sum(terms.into_iter().collect())
    }
    /// `Switch(parts...)`.
    pub fn switch(parts: impl IntoIterator<Item = Desc>) -> Desc {
        Desc::Switch(parts.into_iter().collect())
    }
    /// `Const(value, dim)`.
    pub fn constant(value: f32, dim: usize) -> Desc {
        Desc::Const(value, dim)
    }
    /// `Offset(self, t)`.
    pub fn offset(self, t: i32) -> Desc {
        Desc::Offset(Box::new(self), t, 0)
    }
    /// `Offset(self, t, x)`.
    pub fn offset_tx(self, t: i32, x: i32) -> Desc {
        Desc::Offset(Box::new(self), t, x)
    }
    /// `Scale(alpha, self)`.
    pub fn scale(self, alpha: f32) -> Desc {
        Desc::Scale(alpha, Box::new(self))
    }
    /// `IfDefined(self)`.
    pub fn if_defined(self) -> Desc {
        Desc::IfDefined(Box::new(self))
    }
    /// `Failover(self, other)`.
    pub fn failover(self, other: Desc) -> Desc {
        Desc::Failover(Box::new(self), Box::new(other))
    }
    /// `Round(self, t_modulus)`.
    pub fn round(self, t_modulus: i32) -> Desc {
        Desc::Round(Box::new(self), t_modulus)
    }
    /// `ReplaceIndex(self, var, value)`.
    pub fn replace_index(self, var: IndexVar, value: i32) -> Desc {
        Desc::ReplaceIndex(Box::new(self), var, value)
    }

    /// Every node name this descriptor reads, in order.
    pub fn node_names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_names(&mut out);
        out
    }

    fn collect_names<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Desc::Node(n) => out.push(n),
            Desc::Append(v) | Desc::Sum(v) | Desc::Switch(v) => {
                v.iter().for_each(|d| d.collect_names(out))
            }
            Desc::Failover(a, b) => {
                a.collect_names(out);
                b.collect_names(out);
            }
            Desc::IfDefined(a)
            | Desc::Offset(a, ..)
            | Desc::Round(a, _)
            | Desc::ReplaceIndex(a, ..)
            | Desc::Scale(_, a) => a.collect_names(out),
            Desc::Const(..) => {}
        }
    }

    /// The general (unnormalised) tree with names resolved by `resolve`.
    fn to_general(
        &self,
        resolve: &dyn Fn(&str) -> std::result::Result<usize, String>,
    ) -> std::result::Result<GeneralDescriptor, String> {
        let list =
            |v: &[Desc], what: &str| -> std::result::Result<Vec<GeneralDescriptor>, String> {
                if v.is_empty() {
                    return Err(format!("{what}() needs at least one argument"));
                }
                v.iter().map(|d| d.to_general(resolve)).collect()
            };
        let b = |d: &Desc| d.to_general(resolve).map(Box::new);
        let kind = match self {
            Desc::Node(n) => GeneralKind::Node(resolve(n)?),
            Desc::Append(v) => GeneralKind::Append(list(v, "Append")?),
            Desc::Sum(v) => GeneralKind::Sum(list(v, "Sum")?),
            Desc::Switch(v) => GeneralKind::Switch(list(v, "Switch")?),
            Desc::Failover(a, c) => GeneralKind::Failover(b(a)?, b(c)?),
            Desc::IfDefined(a) => GeneralKind::IfDefined(b(a)?),
            Desc::Offset(a, t, x) => GeneralKind::Offset(b(a)?, *t, *x),
            Desc::Round(a, m) => {
                if *m <= 0 {
                    return Err(format!("Round needs a positive t-modulus, got {m}"));
                }
                GeneralKind::Round(b(a)?, *m)
            }
            Desc::ReplaceIndex(a, var, v) => GeneralKind::ReplaceIndex(b(a)?, *var, *v),
            Desc::Scale(alpha, a) => GeneralKind::Scale(*alpha, b(a)?),
            Desc::Const(v, dim) => {
                if *dim == 0 {
                    return Err("Const needs a positive dimension".into());
                }
                GeneralKind::Const(*v, *dim)
            }
        };
        Ok(GeneralDescriptor::new(kind))
    }
}

/// A descriptor node whose descriptor reads a node declared but not yet defined.
struct Pending {
    node: usize,
    desc: Desc,
}

/// Builds a network call by call; see the module documentation.
#[derive(Default)]
pub struct NetworkBuilder {
    nnet: Nnet,
    node_index: HashMap<String, usize>,
    component_index: HashMap<String, usize>,
    /// Names declared for later definition, in declaration order.
    declared: Vec<String>,
    pending: Vec<Pending>,
    /// Each component's config line (`type=... ` after `name=`), where it is known: made by
    /// [`Self::component_from_config`] or recorded with [`Self::record_component_config`].
    component_configs: HashMap<String, String>,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Network(msg.into())
}

/// An error about a component config string the caller gave, without the position and caret
/// inside the generated `component name=...` line: a front end puts its own position (the
/// NDL or JSON location) in front of it, and the generated line is nothing its user wrote.
fn config_err(name: &str, e: Error) -> Error {
    match e {
        Error::Parse { msg, .. } => err(format!("component '{name}': {msg}")),
        other => err(format!("component '{name}': {other}")),
    }
}

impl NetworkBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// True if a node of this name is defined.
    pub fn has_node(&self, name: &str) -> bool {
        self.node_index.contains_key(name)
    }

    /// True if a component of this name exists.
    pub fn has_component(&self, name: &str) -> bool {
        self.component_index.contains_key(name)
    }

    /// The component of this name.
    pub fn get_component(&self, name: &str) -> Option<&dyn Component> {
        self.component_index
            .get(name)
            .map(|&c| self.nnet.components[c].as_ref())
    }

    /// The output dimension of a defined node (`None` for unknown or declared-only nodes
    /// and for descriptors that read one).
    pub fn node_dim(&self, name: &str) -> Option<usize> {
        let &n = self.node_index.get(name)?;
        if self.pending.iter().any(|p| p.node == n) {
            return None;
        }
        self.nnet.checked_node_dim(n).ok()
    }

    /// The dimension of a descriptor over defined nodes, with Kaldi's checks (Sum and
    /// Failover terms agree, only input/component/dim-range nodes are read).
    pub fn desc_dim(&self, desc: &Desc) -> Result<usize> {
        let d = self.resolve(desc, false)?;
        self.nnet
            .checked_descriptor_dim(&d)
            .map_err(|e| err(format!("descriptor {desc:?}: {e}")))
    }

    fn check_new_name(&self, name: &str, what: &str) -> Result<()> {
        if !is_valid_name(name) {
            return Err(err(format!(
                "invalid {what} name '{name}': names start with a letter or '_' and contain \
                 only letters, digits, '_', '-' and '.'"
            )));
        }
        Ok(())
    }

    fn check_new_node(&self, name: &str) -> Result<()> {
        self.check_new_name(name, "node")?;
        if self.node_index.contains_key(name) {
            return Err(err(format!("node name '{name}' is already used")));
        }
        Ok(())
    }

    fn push_node(&mut self, name: &str, node: NetworkNode) {
        self.node_index
            .insert(name.to_string(), self.nnet.node_names.len());
        self.nnet.node_names.push(name.to_string());
        self.nnet.nodes.push(node);
        self.declared.retain(|d| d != name);
    }

    /// Says that a node of this name will be defined later, so descriptors may read it now
    /// (a recurrence: `Offset(name, -1)` inside its own input). `build` fails if it is not.
    pub fn declare(&mut self, name: &str) -> Result<()> {
        self.check_new_node(name)?;
        if !self.declared.iter().any(|d| d == name) {
            self.declared.push(name.to_string());
        }
        Ok(())
    }

    /// Normalises `desc`; with `allow_declared`, names only declared resolve to a dummy
    /// index (the caller re-resolves later).
    fn resolve(&self, desc: &Desc, allow_declared: bool) -> Result<Descriptor> {
        let resolve = |name: &str| -> std::result::Result<usize, String> {
            match self.node_index.get(name) {
                Some(&i) => match self.nnet.nodes[i] {
                    NetworkNode::Descriptor { .. } => Err(format!(
                        "'{name}' is an output node (or a component's hidden input); \
                         descriptors may only read input, component and dim-range nodes"
                    )),
                    _ => Ok(i),
                },
                None if allow_declared && self.declared.iter().any(|d| d == name) => Ok(usize::MAX),
                None if self.declared.iter().any(|d| d == name) => {
                    Err(format!("node '{name}' is declared but never defined"))
                }
                None => Err(format!("unknown node name '{name}'")),
            }
        };
        let general = desc.to_general(&resolve).map_err(err)?;
        general
            .normalize()
            .map_err(|e| err(format!("bad descriptor: {}", e.msg)))
    }

    /// Adds a descriptor node (`objective` matters for output nodes only); checks the
    /// descriptor now unless it reads a declared node. Returns its dim when known.
    fn push_descriptor(
        &mut self,
        name: &str,
        desc: Desc,
        objective: ObjectiveType,
    ) -> Result<Option<usize>> {
        let forward = desc
            .node_names()
            .iter()
            .any(|n| !self.node_index.contains_key(*n) && self.declared.iter().any(|d| d == n));
        if forward {
            // Structure checks now; names and dimensions at build time.
            self.resolve(&desc, true)?;
            let node = self.nnet.nodes.len();
            self.push_node(
                name,
                NetworkNode::Descriptor {
                    descriptor: Descriptor { parts: Vec::new() },
                    objective,
                },
            );
            self.pending.push(Pending { node, desc });
            return Ok(None);
        }
        let descriptor = self.resolve(&desc, false)?;
        let dim = self
            .nnet
            .checked_descriptor_dim(&descriptor)
            .map_err(|e| err(format!("input of node '{name}': {e}")))?;
        self.push_node(
            name,
            NetworkNode::Descriptor {
                descriptor,
                objective,
            },
        );
        Ok(Some(dim))
    }

    /// Adds input node `name` of dimension `dim`.
    pub fn input(&mut self, name: &str, dim: usize) -> Result<()> {
        self.check_new_node(name)?;
        if dim == 0 {
            return Err(err(format!("input node '{name}': dim must be positive")));
        }
        self.push_node(name, NetworkNode::Input { dim });
        Ok(())
    }

    /// Adds a ready component under `name`.
    pub fn component(&mut self, name: &str, component: Box<dyn Component>) -> Result<()> {
        self.check_new_name(name, "component")?;
        if self.component_index.contains_key(name) {
            return Err(err(format!("component '{name}' is defined twice")));
        }
        let max = crate::nnet::network::MAX_COMPONENTS as usize;
        if self.nnet.components.len() + 1 >= max {
            return Err(err(format!(
                "too many components: a network holds fewer than {max}"
            )));
        }
        self.component_index
            .insert(name.to_string(), self.nnet.components.len());
        self.nnet.component_names.push(name.to_string());
        self.nnet.components.push(component);
        Ok(())
    }

    /// Adds a component from the rest of a Kaldi `component` line, e.g.
    /// `type=AffineComponent input-dim=40 output-dim=512`, initialised from `rng`.
    pub fn component_from_config(
        &mut self,
        name: &str,
        config: &str,
        rng: &mut dyn RngCore,
    ) -> Result<()> {
        self.check_new_name(name, "component")?;
        let cl = ConfigLine::parse_str(&format!("component name={name} {config}"))
            .map_err(|e| config_err(name, e))?;
        cl.get_str("name");
        cl.check_sizes().map_err(|e| config_err(name, e))?;
        let c = new_component_from_config(&cl, rng).map_err(|e| config_err(name, e))?;
        self.component(name, c)?;
        self.record_component_config(name, config);
        Ok(())
    }

    /// Records the config line (without `name=`) that made component `name`, for a front end
    /// that creates components itself (and then, say, sets their initial values), so that
    /// [`Self::build_with_config`] can print the network as an nnet3 config.
    pub fn record_component_config(&mut self, name: &str, config: &str) {
        self.component_configs
            .insert(name.to_string(), config.trim().to_string());
    }

    /// Adds component node `name` applying component `component` to `input` (the hidden
    /// node `<name>_input` holds the descriptor). Checks the component's input dim.
    pub fn component_node(
        &mut self,
        name: &str,
        component: &str,
        input: impl Into<Desc>,
    ) -> Result<()> {
        self.check_new_node(name)?;
        let input_name = format!("{name}_input");
        self.check_new_node(&input_name)?;
        let &c = self.component_index.get(component).ok_or_else(|| {
            err(format!(
                "component node '{name}': no component named '{component}'"
            ))
        })?;
        let want = self.nnet.components[c].input_dim();
        // On a failed check the node is popped again, leaving the builder unchanged.
        let num_pending = self.pending.len();
        let dim = self.push_descriptor(&input_name, input.into(), ObjectiveType::Linear)?;
        if let Some(got) = dim {
            if got != want {
                self.pop_node(&input_name, num_pending);
                return Err(err(format!(
                    "component node '{name}': component '{component}' takes input dim \
                     {want}, but its input has dim {got}"
                )));
            }
        }
        self.push_node(name, NetworkNode::Component { component: c });
        Ok(())
    }

    /// Undoes the last `push_node` (a failed check after it).
    fn pop_node(&mut self, name: &str, num_pending: usize) {
        self.nnet.node_names.pop();
        self.nnet.nodes.pop();
        self.node_index.remove(name);
        self.pending.truncate(num_pending);
    }

    /// A component from a config line and a component node of the same name reading
    /// `input`: one layer, as Kaldi's xconfig writes them.
    pub fn component_with_node(
        &mut self,
        name: &str,
        config: &str,
        input: impl Into<Desc>,
        rng: &mut dyn RngCore,
    ) -> Result<()> {
        self.check_new_node(name)?;
        self.check_new_node(&format!("{name}_input"))?;
        self.component_from_config(name, config, rng)?;
        if let Err(e) = self.component_node(name, name, input) {
            // Leave no orphan component behind.
            self.component_index.remove(name);
            self.nnet.component_names.pop();
            self.nnet.components.pop();
            return Err(e);
        }
        Ok(())
    }

    /// Adds output node `name` reading `input`, trained with `objective`.
    pub fn output(
        &mut self,
        name: &str,
        input: impl Into<Desc>,
        objective: ObjectiveType,
    ) -> Result<()> {
        self.check_new_node(name)?;
        self.push_descriptor(name, input.into(), objective)?;
        Ok(())
    }

    /// Adds dim-range node `name`: columns `[offset, offset + dim)` of node `input_node`
    /// (an input or component node).
    pub fn dim_range(
        &mut self,
        name: &str,
        input_node: &str,
        offset: usize,
        dim: usize,
    ) -> Result<()> {
        self.check_new_node(name)?;
        let &n = self.node_index.get(input_node).ok_or_else(|| {
            err(format!(
                "dim-range node '{name}': unknown node name '{input_node}'"
            ))
        })?;
        if !matches!(
            self.nnet.nodes[n],
            NetworkNode::Input { .. } | NetworkNode::Component { .. }
        ) {
            return Err(err(format!(
                "dim-range node '{name}': '{input_node}' is not an input or component node"
            )));
        }
        let src = self
            .nnet
            .checked_node_dim(n)
            .map_err(|e| err(format!("dim-range node '{name}': {e}")))?;
        if dim == 0 || offset.checked_add(dim).is_none_or(|end| end > src) {
            return Err(err(format!(
                "dim-range node '{name}': columns [{offset}, {}) do not fit in '{input_node}' \
                 of dim {src}",
                offset.saturating_add(dim)
            )));
        }
        self.push_node(
            name,
            NetworkNode::DimRange {
                input_node: n,
                dim_offset: offset,
                dim,
            },
        );
        Ok(())
    }

    /// Finishes the network: resolves descriptors that read nodes declared earlier, checks
    /// that every declared node was defined and that the network is valid (Kaldi's
    /// `Nnet::Check`).
    pub fn build(mut self) -> Result<Nnet> {
        if let Some(d) = self.declared.first() {
            return Err(err(format!("node '{d}' is declared but never defined")));
        }
        for p in std::mem::take(&mut self.pending) {
            let descriptor = self.resolve(&p.desc, false)?;
            if let NetworkNode::Descriptor { objective, .. } = self.nnet.nodes[p.node] {
                self.nnet.nodes[p.node] = NetworkNode::Descriptor {
                    descriptor,
                    objective,
                };
            }
        }
        self.nnet.validate()?;
        Ok(self.nnet)
    }

    /// [`Self::build`], plus the network as an nnet3 config (component lines, then the node
    /// lines) when every component's config line is known (`None` otherwise). `compnet init`
    /// on that config makes the same network with Kaldi's initial values.
    pub fn build_with_config(mut self) -> Result<(Nnet, Option<String>)> {
        let configs = std::mem::take(&mut self.component_configs);
        let nnet = self.build()?;
        let mut text = String::new();
        for name in &nnet.component_names {
            match configs.get(name) {
                Some(c) => text.push_str(&format!("component name={name} {c}\n")),
                None => return Ok((nnet, None)),
            }
        }
        for line in nnet.config_lines() {
            text.push_str(&line);
            text.push('\n');
        }
        Ok((nnet, Some(text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::seeded_rng;

    fn small() -> NetworkBuilder {
        affine_builder(3, "a", "input-dim=6 output-dim=4")
    }

    /// An input of `input_dim` and an AffineComponent `name` with `dims`.
    fn affine_builder(input_dim: usize, name: &str, dims: &str) -> NetworkBuilder {
        let mut b = NetworkBuilder::new();
        b.input("input", input_dim).unwrap();
        let config = format!("type=AffineComponent {dims}");
        b.component_from_config(name, &config, &mut seeded_rng(0))
            .unwrap();
        b
    }

    fn msg(r: Result<impl std::fmt::Debug>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn builds_the_same_network_as_the_config_reader() {
        let mut b = small();
        b.component_node(
            "a",
            "a",
            Desc::append([Desc::node("input").offset(-1), "input".into()]),
        )
        .unwrap();
        b.output(
            "output",
            Desc::sum(["a".into(), Desc::constant(1.0, 4)]),
            ObjectiveType::Quadratic,
        )
        .unwrap();
        let built = b.build().unwrap();
        let config = "input-node name=input dim=3\n\
                      component name=a type=AffineComponent input-dim=6 output-dim=4\n\
                      component-node name=a component=a input=Append(Offset(input, -1), input)\n\
                      output-node name=output input=Sum(a, Const(1, 4)) objective=quadratic\n";
        let read = Nnet::from_config_text(config, "<t>", &mut seeded_rng(0)).unwrap();
        assert_eq!(built.config_lines(), read.config_lines());
        assert_eq!(built.write_model(false), read.write_model(false));
    }

    #[test]
    fn each_call_checks_its_arguments() {
        let mut b = small();
        assert!(msg(b.input("input", 2)).contains("node name 'input' is already used"));
        assert!(msg(b.input("x", 0)).contains("dim must be positive"));
        assert!(msg(b.input("1x", 2)).contains("invalid node name '1x'"));
        assert!(msg(b.component_node("n", "nope", "input")).contains("no component named 'nope'"));
        assert!(msg(b.component_node("n", "a", "missing")).contains("unknown node name 'missing'"));
        let e = msg(b.component_node("n", "a", "input"));
        assert!(
            e.contains("takes input dim 6, but its input has dim 3"),
            "{e}"
        );
        // The failed calls left nothing behind.
        assert!(!b.has_node("n") && !b.has_node("n_input"));
        let e = msg(b.output(
            "o",
            Desc::sum(["input".into(), Desc::constant(0.0, 2)]),
            ObjectiveType::Linear,
        ));
        assert!(e.contains("dim"), "{e}");
        assert!(msg(b.dim_range("d", "input", 2, 2)).contains("do not fit"));
        assert!(msg(b.component_from_config(
            "a",
            "type=SigmoidComponent dim=3",
            &mut seeded_rng(0)
        ))
        .contains("defined twice"));
        assert!(msg(b.component_from_config(
            "s",
            "type=NoSuchComponent dim=3",
            &mut seeded_rng(0)
        ))
        .contains("unknown component type"));
        assert!(msg(b.component_from_config(
            "s",
            "type=SigmoidComponent dim=3 bogus=1",
            &mut seeded_rng(0)
        ))
        .contains("bogus"));
        b.output("o", "input", ObjectiveType::Linear).unwrap();
        assert!(msg(b.output("p", "o", ObjectiveType::Linear)).contains("is an output node"));
    }

    #[test]
    fn declared_nodes_allow_recurrence() {
        let mut b = affine_builder(2, "r", "input-dim=4 output-dim=2");
        assert!(
            msg(b.component_node("r", "r", Desc::node("r").offset(-1))).contains("unknown node")
        );
        b.declare("r").unwrap();
        b.component_node(
            "r",
            "r",
            Desc::append(["input".into(), Desc::node("r").offset(-1).if_defined()]),
        )
        .unwrap();
        b.output("output", "r", ObjectiveType::Linear).unwrap();
        let nnet = b.build().unwrap();
        let lines = nnet.config_lines();
        assert!(
            lines.iter().any(|l| {
                l
                == "component-node name=r component=r input=Append(input, IfDefined(Offset(r, -1)))"
            }),
            "{lines:?}"
        );

        let mut b = NetworkBuilder::new();
        b.input("input", 2).unwrap();
        b.declare("later").unwrap();
        b.output(
            "output",
            Desc::sum(["input".into(), "later".into()]),
            ObjectiveType::Linear,
        )
        .unwrap();
        assert!(msg(b.build()).contains("node 'later' is declared but never defined"));
    }
}
