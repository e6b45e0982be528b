//! Lowering: each Brainstorm layer, in topological order, becomes nnet3 config lines
//! (components, component nodes, dim-range nodes, input and output nodes). Kaldi's naming:
//! the Input layer's data output is input node `input` (a second data output keeps its
//! name), the prediction the first loss scores is output node `output` (later losses:
//! `output-<layer>`), with softmax + cross-entropy → LogSoftmax + `objective=linear` and
//! squared error → `objective=quadratic`. Layer `L`'s default output is node `L` (its inner
//! nodes are `L.affine`, `L.c`, ...); an output that needs no node of its own (NoOp, Merge,
//! Highway's sum) is a descriptor expression that the layers after it inline.
//!
//! Every size is checked here, so the lines handed to the Kaldi reader are right by
//! construction; an error names the layer's key, property or connection in the JSON file.

use super::arch::{wrong_kind, Architecture, Connection, Layer};
use super::json::{Member, Source, Spanned, Value};
use crate::error::{Error, Result};
use crate::nnet::{Desc, ObjectiveType};
use rustc_hash::FxHashMap;

/// One step of building the network (a config line, or a builder call).
pub enum OpKind {
    /// A comment line in the printed config.
    Comment(String),
    Input {
        name: String,
        dim: usize,
    },
    /// A node used (by a recurrence) before it is defined.
    Declare(String),
    Component {
        name: String,
        config: String,
    },
    ComponentNode {
        name: String,
        component: String,
        input: Desc,
    },
    DimRange {
        name: String,
        input: String,
        offset: usize,
        dim: usize,
    },
    Output {
        name: String,
        input: Desc,
        objective: ObjectiveType,
    },
}

/// One step and the layer it came from (`None` for comments).
pub struct Op {
    pub kind: OpKind,
    pub layer: Option<usize>,
}

/// What a layer output is to the layers after it.
#[derive(Clone)]
struct Expr {
    /// Its descriptor (a node or an expression); unused for loss and target-only outputs.
    desc: Desc,
    /// Brainstorm's feature shape (without 'T', 'B'); the nnet3 dim is its product.
    shape: Vec<usize>,
    role: Role,
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Data,
    /// A loss (SoftmaxCE.loss, SquaredDifference's output): only a Loss layer takes it.
    Loss,
    /// An Input output used only as targets: supervision in the examples, not an input node.
    TargetOnly,
}

impl Expr {
    fn dim(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Largest size accepted for any one dimension (Kaldi's dims are int32).
const MAX_DIM: u64 = i32::MAX as u64;

struct Lowering<'s, 'a, 'j> {
    src: &'s Source<'s>,
    arch: &'a Architecture<'j>,
    lines: Vec<Op>,
    /// Node names taken, with the layer that took each.
    names: FxHashMap<String, usize>,
    outs: FxHashMap<(usize, String), Expr>,
    num_outputs: usize,
    /// The layer being lowered.
    cur: usize,
}

/// Lowers the architecture into config lines.
pub fn lower(src: &Source<'_>, arch: &Architecture<'_>) -> Result<Vec<Op>> {
    check_every_layer_feeds_a_loss(src, arch)?;
    let mut lw = Lowering {
        src,
        arch,
        lines: Vec::new(),
        names: FxHashMap::default(),
        outs: FxHashMap::default(),
        num_outputs: 0,
        cur: 0,
    };
    for &l in &arch.order {
        lw.cur = l;
        let layer = &arch.layers[l];
        lw.lines.push(Op {
            kind: OpKind::Comment(format!("# layer '{}' ({})", layer.name, layer.kind.name)),
            layer: None,
        });
        lw.layer(layer)?;
    }
    Ok(lw.lines)
}

/// Brainstorm computes a layer nobody uses; an nnet3 network has no place for it (nothing
/// requests it), so a layer that contributes to no Loss is an error rather than dropped.
fn check_every_layer_feeds_a_loss(src: &Source<'_>, arch: &Architecture<'_>) -> Result<()> {
    let n = arch.layers.len();
    let mut feeds = vec![false; n];
    for &l in arch.order.iter().rev() {
        feeds[l] = arch.layers[l].kind.name == "Loss"
            || arch.connections.iter().any(|c| c.from == l && feeds[c.to]);
    }
    if !arch.layers.iter().any(|l| l.kind.name == "Loss") {
        return Err(src.error(
            0,
            "the architecture has no Loss layer, so nnet3 would have no output to train",
        ));
    }
    for &l in &arch.order {
        let layer = &arch.layers[l];
        if !feeds[l] && layer.kind.name != "Input" {
            return Err(src.error(
                layer.at,
                format!(
                    "layer '{}' ({}) contributes to no Loss layer; an nnet3 network computes \
                     only what an output needs, so connect or remove it",
                    layer.name, layer.kind.name
                ),
            ));
        }
    }
    Ok(())
}

impl<'a> Lowering<'_, 'a, '_> {
    fn layer_ref(&self) -> &Layer<'_> {
        &self.arch.layers[self.cur]
    }

    fn name(&self) -> String {
        self.layer_ref().name.clone()
    }

    fn err(&self, at: usize, msg: impl Into<String>) -> Error {
        let l = self.layer_ref();
        self.src.error(
            at,
            format!("layer '{}' ({}): {}", l.name, l.kind.name, msg.into()),
        )
    }

    fn emit(&mut self, kind: OpKind) {
        self.lines.push(Op {
            kind,
            layer: Some(self.cur),
        });
    }

    fn take_name(&mut self, node: &str) -> Result<()> {
        if let Some(&other) = self.names.get(node) {
            let by = &self.arch.layers[other].name;
            return Err(self.err(
                self.layer_ref().at,
                format!("its node name '{node}' is already used by layer '{by}'; rename a layer"),
            ));
        }
        self.names.insert(node.to_string(), self.cur);
        Ok(())
    }

    /// A component and the component node that applies it to `input`.
    fn apply(
        &mut self,
        node: &str,
        component: &str,
        config: &str,
        input: impl Into<Desc>,
    ) -> Result<()> {
        self.take_name(node)?;
        self.emit(OpKind::Component {
            name: component.into(),
            config: config.into(),
        });
        self.emit(OpKind::ComponentNode {
            name: node.into(),
            component: component.into(),
            input: input.into(),
        });
        Ok(())
    }

    /// Says that `node` is read (by a recurrence) before the layer defines it.
    fn declare(&mut self, node: &str) {
        self.emit(OpKind::Declare(node.into()));
    }

    fn set_out(&mut self, output: &str, e: Expr) {
        self.outs.insert((self.cur, output.to_string()), e);
    }

    /// The connection into `input` (present: `arch` checked every input is connected); an
    /// input that takes data may have several ([`Self::input`]), any other just one.
    fn conn(&self, input: &str) -> Result<&'a Connection> {
        let arch: &'a Architecture<'_> = self.arch;
        let all = arch.connections_into(self.cur, input);
        if all.len() > 1 {
            return Err(self.src.error(
                all[1].at,
                format!(
                    "input '{}.{input}' has {} connections; only an input that takes data \
                     concatenates several",
                    self.name(),
                    all.len()
                ),
            ));
        }
        arch.connection_into(self.cur, input).ok_or_else(|| {
            self.err(
                self.layer_ref().at,
                format!("input '{input}' is not connected"),
            )
        })
    }

    /// What feeds `input`, as data. Several connections into one input are concatenated on
    /// the last feature axis in Brainstorm's order (`combine_buffer_structures`, laid out
    /// by sorted source): an `Append`.
    fn input(&self, input: &str) -> Result<Expr> {
        let all = self.arch.connections_into(self.cur, input);
        if all.len() > 1 {
            let mut parts = Vec::with_capacity(all.len());
            let mut dim = 0;
            for c in all {
                let e = self.data_source(c)?;
                if e.shape.len() > 1 {
                    return Err(self.src.error(
                        c.at,
                        format!(
                            "'{}.{}' has shape {:?} and shares input '{}.{input}' with other \
                             connections; Brainstorm concatenates them on the last axis, which \
                             interleaves columns of a multi-dimensional shape, and nnet3's \
                             Append cannot",
                            self.arch.layers[c.from].name,
                            c.output,
                            e.shape,
                            self.name()
                        ),
                    ));
                }
                dim += e.dim();
                parts.push(e.desc);
            }
            return Ok(Expr {
                desc: Desc::append(parts),
                shape: vec![dim],
                role: Role::Data,
            });
        }
        self.data_source(self.conn(input)?)
    }

    /// [`Self::source`], refusing a loss (only a Loss layer takes one).
    fn data_source(&self, c: &Connection) -> Result<Expr> {
        let e = self.source(c)?;
        if e.role == Role::Loss {
            return Err(self.src.error(
                c.at,
                format!(
                    "'{}.{}' is a loss; only a Loss layer takes it",
                    self.arch.layers[c.from].name, c.output
                ),
            ));
        }
        Ok(e)
    }

    fn source(&self, c: &Connection) -> Result<Expr> {
        self.outs
            .get(&(c.from, c.output.clone()))
            .cloned()
            .ok_or_else(|| {
                self.src
                    .error(c.at, "internal: a connection from a layer not yet lowered")
            })
    }

    fn comes_from_input_layer(&self, c: &Connection) -> bool {
        self.arch.layers[c.from].kind.name == "Input"
    }

    fn size_mismatch(&self, c: &Connection, what: &str, expected: usize, got: usize) -> Error {
        self.src.error(
            c.at,
            format!(
                "size mismatch: {what} of layer '{}' must have size {expected}, but '{}.{}' has size {got}",
                self.name(),
                self.arch.layers[c.from].name,
                c.output
            ),
        )
    }

    // ---- properties ----

    fn prop(&self, key: &str) -> Option<&Spanned> {
        self.layer_ref().prop(key).map(|m: &Member| &m.value)
    }

    fn positive(&self, v: &Spanned, what: &str) -> Result<usize> {
        match v.value {
            Value::Number(x) if x.fract() == 0.0 && x >= 1.0 && x <= MAX_DIM as f64 => {
                Ok(x as usize)
            }
            _ => Err(self.err(
                v.at,
                format!(
                    "{what}: expected a positive whole number, found {}",
                    show(v)
                ),
            )),
        }
    }

    /// A size: a number, or a list of numbers (Brainstorm's shape tuple).
    fn shape_of(&self, v: &Spanned, what: &str) -> Result<Vec<usize>> {
        let dims = match &v.value {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .map(|i| self.positive(i, what))
                .collect::<Result<Vec<_>>>()?,
            Value::Array(_) => return Err(self.err(v.at, format!("{what}: an empty shape"))),
            _ => vec![self.positive(v, what)?],
        };
        let factors: Vec<u64> = dims.iter().map(|&d| d as u64).chain([4]).collect();
        crate::limits::check_product(&factors, what).map_err(|m| self.err(v.at, m))?;
        let total: u64 = dims.iter().map(|&d| d as u64).product();
        if total > MAX_DIM {
            return Err(self.err(v.at, format!("{what}: {total} is too large")));
        }
        Ok(dims)
    }

    fn size(&self) -> Result<Vec<usize>> {
        let v = self
            .prop("size")
            .ok_or_else(|| self.err(self.layer_ref().at, "\"size\" is required"))?;
        self.shape_of(v, "size")
    }

    /// A pair (kernel size, stride): a number for both, or a list of two.
    fn pair(&self, key: &str, default: Option<[usize; 2]>) -> Result<[usize; 2]> {
        let Some(v) = self.prop(key) else {
            return default
                .ok_or_else(|| self.err(self.layer_ref().at, format!("\"{key}\" is required")));
        };
        match &v.value {
            Value::Array(items) if items.len() == 2 => Ok([
                self.positive(&items[0], key)?,
                self.positive(&items[1], key)?,
            ]),
            Value::Number(_) => {
                let n = self.positive(v, key)?;
                Ok([n, n])
            }
            _ => Err(self.err(
                v.at,
                format!(
                    "{key}: expected a number or a list of two, found {}",
                    show(v)
                ),
            )),
        }
    }

    fn number(&self, key: &str, default: f64) -> Result<(f64, usize)> {
        match self.prop(key) {
            None => Ok((default, self.layer_ref().at)),
            Some(v) => match v.value {
                Value::Number(x) => Ok((x, v.at)),
                _ => Err(wrong_kind(self.src, v, &format!("{key} as a number"))),
            },
        }
    }

    fn string(&self, key: &str, default: &str) -> Result<(String, usize)> {
        match self.prop(key) {
            None => Ok((default.to_string(), self.layer_ref().at)),
            Some(v) => match &v.value {
                Value::String(s) => Ok((s.clone(), v.at)),
                _ => Err(wrong_kind(self.src, v, &format!("{key} as a string"))),
            },
        }
    }

    /// Brainstorm's `activation` → (name suffix, Kaldi component type); `None` for linear.
    fn activation(&self, default: &str) -> Result<Option<(&'static str, &'static str)>> {
        let (a, at) = self.string("activation", default)?;
        Ok(match a.as_str() {
            "rel" | "relu" => Some(("relu", "RectifiedLinearComponent")),
            "tanh" => Some(("tanh", "TanhComponent")),
            "sigmoid" => Some(("sigmoid", "SigmoidComponent")),
            "linear" => None,
            other => {
                return Err(self.err(
                    at,
                    format!(
                        "activation \"{other}\": expected rel, tanh, sigmoid or linear (the ones \
                         with an nnet3 component)"
                    ),
                ))
            }
        })
    }

    /// Requires `padding` to be absent or zero: Kaldi's ConvolutionComponent and
    /// MaxpoolingComponent have no padding.
    fn no_padding(&self) -> Result<()> {
        if let Some(v) = self.prop("padding") {
            let zero = |s: &Spanned| matches!(s.value, Value::Number(x) if x == 0.0);
            let ok = match &v.value {
                Value::Array(items) => items.iter().all(zero),
                _ => zero(v),
            };
            if !ok {
                return Err(self.err(
                    v.at,
                    "padding: only 0 can be lowered (Kaldi's ConvolutionComponent and \
                     MaxpoolingComponent do not pad)",
                ));
            }
        }
        Ok(())
    }

    // ---- layers ----

    fn layer(&mut self, layer: &Layer<'_>) -> Result<()> {
        let name = layer.name.clone();
        match layer.kind.name {
            "Input" => self.input_layer(),
            "FullyConnected" => {
                let x = self.input("default")?;
                let shape = self.size()?;
                let act = self.activation("rel")?;
                self.affine_then(&name, x.desc.clone(), x.dim(), shape, act)
            }
            "Recurrent" => {
                let x = self.input("default")?;
                let shape = self.size()?;
                let n: usize = shape.iter().product();
                let act = self.activation("tanh")?;
                let input =
                    Desc::append([x.desc.clone(), Desc::node(&name).offset(-1).if_defined()]);
                self.declare(&name);
                self.affine_then(&name, input, x.dim() + n, vec![n], act)
            }
            "Lstm" => self.lstm(&name),
            "Elementwise" => {
                let x = self.input("default")?;
                match self.activation("rel")? {
                    None => self.set_out("default", x),
                    Some((suffix, ty)) => {
                        let d = x.dim();
                        self.apply(
                            &name,
                            &format!("{name}.{suffix}"),
                            &format!("type={ty} dim={d}"),
                            x.desc.clone(),
                        )?;
                        self.set_out("default", node(&name, x.shape));
                    }
                }
                Ok(())
            }
            "NoOp" => {
                let x = self.input("default")?;
                self.set_out("default", x);
                Ok(())
            }
            "Dropout" => {
                let x = self.input("default")?;
                let (p, at) = self.number("drop_prob", 0.5)?;
                if !(0.0..1.0).contains(&p) {
                    return Err(self.err(at, format!("drop_prob {p}: expected 0 <= p < 1")));
                }
                // Brainstorm scales the kept units by 1/(1-p) in training and leaves the test
                // pass alone: Kaldi's GeneralDropoutComponent, not DropoutComponent (which
                // scales at test time instead).
                self.apply(
                    &name,
                    &format!("{name}.dropout"),
                    &format!(
                        "type=GeneralDropoutComponent dim={} dropout-proportion={p}",
                        x.dim()
                    ),
                    x.desc.clone(),
                )?;
                self.set_out("default", node(&name, x.shape));
                Ok(())
            }
            "BatchNorm" => self.batch_norm(&name),
            "Highway" => self.highway(&name),
            "Merge" => {
                let a = self.input("inputs_1")?;
                let b = self.input("inputs_2")?;
                for (e, inp) in [(&a, "inputs_1"), (&b, "inputs_2")] {
                    if e.shape.len() > 1 {
                        let c = self.conn(inp)?;
                        return Err(self.src.error(
                            c.at,
                            format!(
                                "layer '{name}' (Merge): '{}.{}' has shape {:?}; Brainstorm \
                                 merges along the last axis, which interleaves columns of a \
                                 multi-dimensional shape, and nnet3's Append cannot",
                                self.arch.layers[c.from].name, c.output, e.shape
                            ),
                        ));
                    }
                }
                let shape = vec![a.dim() + b.dim()];
                self.set_out(
                    "default",
                    Expr {
                        desc: Desc::append([a.desc, b.desc]),
                        shape,
                        role: Role::Data,
                    },
                );
                Ok(())
            }
            "Convolution2D" => self.convolution(&name),
            "Pooling2D" => self.pooling(&name),
            "SoftmaxCE" => {
                let x = self.input("default")?;
                self.softmax_ce(&name, x, "predictions")
            }
            "SoftmaxFC" => {
                let x = self.input("default")?;
                let shape = self.size()?;
                self.affine_then(&name, x.desc.clone(), x.dim(), shape.clone(), None)?;
                // affine_then named the affine node after the layer; the scores are that node.
                let scores = node(&name, shape);
                self.outs.remove(&(self.cur, "default".to_string()));
                self.softmax_ce(&name, scores, "probabilities")
            }
            "SquaredError" => {
                let x = self.input("default")?;
                let t = self.conn("targets")?;
                self.squared_error(x, t, "predictions")
            }
            "SquaredDifference" => self.squared_difference(&name),
            "Loss" => self.loss(),
            other => Err(self.err(layer.at, format!("internal: no lowering for {other}"))),
        }
    }

    fn input_layer(&mut self) -> Result<()> {
        let layer = self.layer_ref();
        let shapes = match layer.prop("out_shapes").map(|m| &m.value.value) {
            Some(Value::Object(outs)) => outs.clone(),
            _ => return Err(self.err(layer.at, "out_shapes must be an object")),
        };
        let target_use = |c: &Connection| {
            let to = self.arch.layers[c.to].kind.name;
            (c.input == "targets" && matches!(to, "SoftmaxCE" | "SoftmaxFC" | "SquaredError"))
                || to == "SquaredDifference"
        };
        let data: Vec<bool> = shapes
            .iter()
            .map(|o| self.arch.out_of(self.cur, &o.key).any(|c| !target_use(c)))
            .collect();
        let Some(first) = data.iter().position(|&d| d) else {
            return Err(self.err(
                layer.at,
                "none of its outputs feeds a layer as data, so the network has no input",
            ));
        };
        let main = shapes
            .iter()
            .zip(&data)
            .position(|(o, &d)| d && o.key == "default")
            .unwrap_or(first);
        for (i, o) in shapes.iter().enumerate() {
            let shape = self.input_shape(&o.value, &o.key)?;
            if !data[i] {
                self.set_out(
                    &o.key,
                    Expr {
                        desc: Desc::node(""),
                        shape,
                        role: Role::TargetOnly,
                    },
                );
                continue;
            }
            let node_name = if i == main { "input" } else { o.key.as_str() };
            self.take_name(node_name)?;
            let dim: usize = shape.iter().product();
            self.emit(OpKind::Input {
                name: node_name.into(),
                dim,
            });
            self.set_out(&o.key, node(node_name, shape));
        }
        Ok(())
    }

    /// An Input out_shape: `["T", "B", d1, d2, ...]`.
    fn input_shape(&self, v: &Spanned, output: &str) -> Result<Vec<usize>> {
        let Value::Array(items) = &v.value else {
            return Err(wrong_kind(
                self.src,
                v,
                &format!("the shape of '{output}' as a list [\"T\", \"B\", size, ...]"),
            ));
        };
        let is = |i: usize, s: &str| matches!(items.get(i).map(|x| &x.value), Some(Value::String(t)) if t == s);
        if is(0, "B") {
            return Err(self.err(
                v.at,
                format!(
                    "'{output}' is batch-sized (one value per sequence); nnet3 inputs have a \
                     value per frame, so only [\"T\", \"B\", ...] shapes can be lowered"
                ),
            ));
        }
        if !(is(0, "T") && is(1, "B")) || items.len() < 3 {
            return Err(self.err(
                v.at,
                format!("the shape of '{output}': expected [\"T\", \"B\", size, ...]"),
            ));
        }
        let rest = Spanned {
            value: Value::Array(items[2..].to_vec()),
            at: items[2].at,
        };
        self.shape_of(&rest, &format!("the shape of '{output}'"))
    }

    /// An affine layer (NaturalGradientAffineComponent, as Kaldi's xconfig layers use) from
    /// `input` and an optional nonlinearity after it; the last node is named `name`.
    fn affine_then(
        &mut self,
        name: &str,
        input: Desc,
        in_dim: usize,
        shape: Vec<usize>,
        act: Option<(&str, &str)>,
    ) -> Result<()> {
        let out_dim: usize = shape.iter().product();
        let affine =
            format!("type=NaturalGradientAffineComponent input-dim={in_dim} output-dim={out_dim}");
        self.component_then(name, ("affine", &affine), input, shape, act)
    }

    /// Layer `name`'s component `{name}.{part}` (config `config`) on `input`, and an optional
    /// nonlinearity `act` (name suffix, component type) after it; the last node is named
    /// `name`, its output of shape `shape`.
    fn component_then(
        &mut self,
        name: &str,
        (part, config): (&str, &str),
        input: Desc,
        shape: Vec<usize>,
        act: Option<(&str, &str)>,
    ) -> Result<()> {
        let inner = format!("{name}.{part}");
        match act {
            None => self.apply(name, &inner, config, input)?,
            Some((suffix, ty)) => {
                let out_dim: usize = shape.iter().product();
                self.apply(&inner, &inner, config, input)?;
                self.apply(
                    name,
                    &format!("{name}.{suffix}"),
                    &format!("type={ty} dim={out_dim}"),
                    inner.as_str(),
                )?;
            }
        }
        self.set_out("default", node(name, shape));
        Ok(())
    }

    /// Brainstorm's Lstm (peepholes, tanh) is Kaldi's fast LSTM without projection: one
    /// affine of [x(t), y(t-1)] to the four gate inputs, then LstmNonlinearityComponent with
    /// c(t-1), whose output is [c(t), y(t)]. No gradient truncation: Brainstorm has none.
    fn lstm(&mut self, name: &str) -> Result<()> {
        let x = self.input("default")?;
        let n: usize = self.size()?.iter().product();
        if self.activation("tanh")? != Some(("tanh", "TanhComponent")) {
            let at = self
                .prop("activation")
                .map_or(self.layer_ref().at, |v| v.at);
            return Err(self.err(
                at,
                "Kaldi's LstmNonlinearityComponent has tanh built in; only activation \"tanh\" can be lowered",
            ));
        }
        let w = format!("{name}.W_all");
        let nl = format!("{name}.lstm_nonlin");
        let c = format!("{name}.c");
        self.declare(name);
        self.declare(&c);
        self.apply(
            &w,
            &w,
            &format!(
                "type=NaturalGradientAffineComponent input-dim={} output-dim={}",
                x.dim() + n,
                4 * n
            ),
            Desc::append([x.desc.clone(), Desc::node(name).offset(-1).if_defined()]),
        )?;
        self.apply(
            &nl,
            &nl,
            &format!("type=LstmNonlinearityComponent cell-dim={n}"),
            Desc::append([Desc::node(&w), Desc::node(&c).offset(-1).if_defined()]),
        )?;
        self.take_name(&c)?;
        self.emit(OpKind::DimRange {
            name: c.clone(),
            input: nl.clone(),
            offset: 0,
            dim: n,
        });
        self.take_name(name)?;
        self.emit(OpKind::DimRange {
            name: name.into(),
            input: nl,
            offset: n,
            dim: n,
        });
        self.set_out("default", node(name, vec![n]));
        Ok(())
    }

    /// Brainstorm's BatchNorm normalises each feature (each channel of an image shape) and
    /// learns a scale and shift: Kaldi's BatchNormComponent then ScaleAndOffsetComponent,
    /// with block-dim the last axis.
    fn batch_norm(&mut self, name: &str) -> Result<()> {
        let x = self.input("default")?;
        let (eps, at) = self.number("epsilon", 1e-5)?;
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(self.err(at, format!("epsilon {eps}: expected a positive number")));
        }
        let d = x.dim();
        let block = *x.shape.last().unwrap_or(&d);
        let bn = format!("{name}.batchnorm");
        self.apply(
            &bn,
            &bn,
            &format!("type=BatchNormComponent dim={d} block-dim={block} epsilon={eps}"),
            x.desc.clone(),
        )?;
        self.apply(
            name,
            &format!("{name}.scale-offset"),
            &format!("type=ScaleAndOffsetComponent dim={d} block-dim={block}"),
            bn.as_str(),
        )?;
        self.set_out("default", node(name, x.shape));
        Ok(())
    }

    /// y = H ⊙ T + x ⊙ (1 − T) = x + T ⊙ (H − x): one ElementwiseProductComponent of
    /// [T, H − x], summed with x in the descriptors of the layers that use it.
    fn highway(&mut self, name: &str) -> Result<()> {
        let h = self.input("H")?;
        let t = self.input("T")?;
        let x = self.input("x")?;
        let d = x.dim();
        for (e, inp) in [(&h, "H"), (&t, "T")] {
            if e.dim() != d {
                let c = self.conn(inp)?;
                return Err(self.size_mismatch(
                    c,
                    &format!("input '{inp}' (the size of 'x')"),
                    d,
                    e.dim(),
                ));
            }
        }
        let gate = format!("{name}.gate");
        self.apply(
            &gate,
            &gate,
            &format!(
                "type=ElementwiseProductComponent input-dim={} output-dim={d}",
                2 * d
            ),
            Desc::append([t.desc, Desc::sum([h.desc, x.desc.clone().scale(-1.0)])]),
        )?;
        self.set_out(
            "default",
            Expr {
                desc: Desc::sum([x.desc, Desc::node(&gate)]),
                shape: x.shape,
                role: Role::Data,
            },
        );
        Ok(())
    }

    /// Brainstorm images are (height, width, channels) with channels fastest: Kaldi's
    /// x, y, z with `input-vectorization-order=zyx`, whose output is (x, y, filter) in the
    /// same order.
    fn image(&self, x: &Expr) -> Result<[usize; 3]> {
        match x.shape.as_slice() {
            &[h, w, c] => Ok([h, w, c]),
            s => {
                let c = self.conn("default")?;
                Err(self.src.error(
                    c.at,
                    format!(
                        "layer '{}' ({}) needs an image input of shape (height, width, channels), \
                         but '{}.{}' has shape {s:?}",
                        self.name(),
                        self.layer_ref().kind.name,
                        self.arch.layers[c.from].name,
                        c.output
                    ),
                ))
            }
        }
    }

    /// Checks that a window of `size` with `step` tiles `dim` exactly, as Kaldi requires.
    fn window(&self, key: &str, axis: &str, dim: usize, size: usize, step: usize) -> Result<usize> {
        let at = self.prop(key).map_or(self.layer_ref().at, |v| v.at);
        if size > dim {
            return Err(self.err(
                at,
                format!("{key}: {size} is larger than the input {axis} {dim}"),
            ));
        }
        if !(dim - size).is_multiple_of(step) {
            return Err(self.err(
                at,
                format!(
                    "{key}: ({axis} {dim} - window {size}) is not a multiple of the stride {step}; \
                     Kaldi's windows must tile the input exactly"
                ),
            ));
        }
        Ok((dim - size) / step + 1)
    }

    fn convolution(&mut self, name: &str) -> Result<()> {
        let x = self.input("default")?;
        let [h, w, c] = self.image(&x)?;
        let filters = match self.prop("num_filters") {
            Some(v) => self.positive(v, "num_filters")?,
            None => return Err(self.err(self.layer_ref().at, "\"num_filters\" is required")),
        };
        let [kh, kw] = self.pair("kernel_size", None)?;
        let [sh, sw] = self.pair("stride", Some([1, 1]))?;
        self.no_padding()?;
        let act = self.activation("rel")?;
        let oh = self.window("kernel_size", "height", h, kh, sh)?;
        let ow = self.window("kernel_size", "width", w, kw, sw)?;
        let config = format!(
            "type=ConvolutionComponent input-x-dim={h} input-y-dim={w} input-z-dim={c} \
             filt-x-dim={kh} filt-y-dim={kw} filt-x-step={sh} filt-y-step={sw} \
             num-filters={filters} input-vectorization-order=zyx"
        );
        self.component_then(name, ("conv", &config), x.desc, vec![oh, ow, filters], act)
    }

    fn pooling(&mut self, name: &str) -> Result<()> {
        let x = self.input("default")?;
        let [h, w, c] = self.image(&x)?;
        let (ty, at) = self.string("type", "max")?;
        if ty != "max" {
            return Err(self.err(
                at,
                format!("type \"{ty}\": only \"max\" pooling has an nnet3 component (MaxpoolingComponent)"),
            ));
        }
        let [kh, kw] = self.pair("kernel_size", None)?;
        let [sh, sw] = self.pair("stride", Some([1, 1]))?;
        self.no_padding()?;
        let oh = self.window("kernel_size", "height", h, kh, sh)?;
        let ow = self.window("kernel_size", "width", w, kw, sw)?;
        self.apply(
            name,
            &format!("{name}.maxpool"),
            &format!(
                "type=MaxpoolingComponent input-x-dim={h} input-y-dim={w} input-z-dim={c} \
                 pool-x-size={kh} pool-y-size={kw} pool-z-size=1 \
                 pool-x-step={sh} pool-y-step={sw} pool-z-step=1"
            ),
            x.desc,
        )?;
        self.set_out("default", node(name, vec![oh, ow, c]));
        Ok(())
    }

    /// The name of the next output node: `output` first, then `output-<layer>`.
    fn output_name(&mut self) -> Result<String> {
        let n = if self.num_outputs == 0 {
            "output".to_string()
        } else {
            format!("output-{}", self.name())
        };
        self.num_outputs += 1;
        self.take_name(&n)?;
        Ok(n)
    }

    /// Whether this layer's loss output (`loss`) reaches a Loss layer.
    fn scored(&self, loss_output: &str) -> bool {
        self.arch
            .out_of(self.cur, loss_output)
            .any(|c| self.arch.layers[c.to].kind.name == "Loss")
    }

    /// The targets connection must come straight from the Input layer: in nnet3 the
    /// supervision is in the examples, not computed by the network.
    fn targets_from_input(&self, t: &Connection) -> Result<Expr> {
        if !self.comes_from_input_layer(t) {
            return Err(self.src.error(
                t.at,
                format!(
                    "the targets of layer '{}' must come straight from the Input layer (nnet3 \
                     reads supervision from the examples)",
                    self.name()
                ),
            ));
        }
        self.source(t)
    }

    /// Softmax + cross-entropy on `scores`: LogSoftmax and a `linear` objective.
    fn softmax_ce(&mut self, name: &str, scores: Expr, predictions: &str) -> Result<()> {
        let t = self.conn("targets")?;
        let target = self.targets_from_input(t)?;
        if target.dim() != 1 {
            return Err(self.size_mismatch(t, "the targets (class indices)", 1, target.dim()));
        }
        let n = scores.dim();
        if self.arch.out_of(self.cur, predictions).next().is_some() {
            let p = format!("{name}.{predictions}");
            self.apply(
                &p,
                &format!("{name}.softmax"),
                &format!("type=SoftmaxComponent dim={n}"),
                scores.desc.clone(),
            )?;
            self.set_out(predictions, node(&p, vec![n]));
        }
        if self.scored("loss") {
            let ls = format!("{name}.log-softmax");
            self.apply(
                &ls,
                &ls,
                &format!("type=LogSoftmaxComponent dim={n}"),
                scores.desc,
            )?;
            let out = self.output_name()?;
            self.emit(OpKind::Output {
                name: out,
                input: Desc::node(ls),
                objective: ObjectiveType::Linear,
            });
        }
        self.set_out("loss", loss_expr());
        Ok(())
    }

    /// Squared error between `pred` and targets `t`: a `quadratic` objective (Kaldi's is
    /// −½‖y − t‖², Brainstorm's loss ½‖y − t‖²).
    fn squared_error(&mut self, pred: Expr, t: &Connection, predictions: &str) -> Result<()> {
        let target = self.targets_from_input(t)?;
        if target.dim() != pred.dim() {
            return Err(self.size_mismatch(
                t,
                "the targets (the size of the prediction)",
                pred.dim(),
                target.dim(),
            ));
        }
        let loss_output = if predictions == "default" {
            "default"
        } else {
            "loss"
        };
        if self.scored(loss_output) {
            let out = self.output_name()?;
            self.emit(OpKind::Output {
                name: out,
                input: pred.desc.clone(),
                objective: ObjectiveType::Quadratic,
            });
        }
        if predictions != "default" {
            self.set_out(predictions, pred);
        }
        self.set_out(loss_output, loss_expr());
        Ok(())
    }

    /// SquaredDifference of a network output and data from the Input layer (the targets).
    fn squared_difference(&mut self, name: &str) -> Result<()> {
        let c1 = self.conn("inputs_1")?;
        let c2 = self.conn("inputs_2")?;
        let (pred, t) = match (
            self.comes_from_input_layer(c1),
            self.comes_from_input_layer(c2),
        ) {
            (false, true) => (c1, c2),
            (true, false) => (c2, c1),
            (true, true) => return Err(self.err(
                self.layer_ref().at,
                "both inputs come from the Input layer, so nothing the network computes is scored",
            )),
            (false, false) => {
                return Err(self.err(
                    self.layer_ref().at,
                    format!(
                        "one of inputs_1 and inputs_2 must come from the Input layer (nnet3 \
                         compares an output with supervision from the examples); '{name}' \
                         compares two computed values"
                    ),
                ))
            }
        };
        let pred_input = if std::ptr::eq(pred, c1) {
            "inputs_1"
        } else {
            "inputs_2"
        };
        let p = self.input(pred_input)?;
        self.squared_error(p, t, "default")
    }

    fn loss(&mut self) -> Result<()> {
        let c = self.conn("default")?;
        let e = self.source(c)?;
        if e.role != Role::Loss {
            return Err(self.src.error(
                c.at,
                format!(
                    "layer '{}' (Loss) takes a loss (SoftmaxCE, SoftmaxFC, SquaredError, \
                     SquaredDifference), but '{}.{}' is not one",
                    self.name(),
                    self.arch.layers[c.from].name,
                    c.output
                ),
            ));
        }
        let (importance, at) = self.number("importance", 1.0)?;
        if importance != 1.0 {
            return Err(self.err(
                at,
                format!(
                    "importance {importance}: nnet3 output nodes carry no weight of their own; \
                     only 1.0 can be lowered"
                ),
            ));
        }
        Ok(())
    }
}

fn node(name: &str, shape: Vec<usize>) -> Expr {
    Expr {
        desc: Desc::node(name),
        shape,
        role: Role::Data,
    }
}

fn loss_expr() -> Expr {
    Expr {
        desc: Desc::node(""),
        shape: vec![1],
        role: Role::Loss,
    }
}

/// A short rendering of a value for messages.
fn show(v: &Spanned) -> String {
    match &v.value {
        Value::Number(x) => format!("{x}"),
        Value::String(s) => format!("\"{s}\""),
        other => other.kind().to_string(),
    }
}
