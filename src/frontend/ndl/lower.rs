//! Lowering the evaluated NDL graph to an nnet3 network through [`NetworkBuilder`].
//!
//! | NDL | nnet3 |
//! |---|---|
//! | `Input`, `SparseInput`, `ImageInput` | input node (the first `feature`-tagged one is `input`) |
//! | `Times(W, x)` | LinearComponent named `W`; every use of `W` is a component node of that one component |
//! | `DiagTimes(w, x)`, `ElementTimes` with a vector Parameter | PerElementScaleComponent named `w` |
//! | `ElementTimes(a, b)` | ElementwiseProductComponent over `Append(a, b)` (a Constant: `Scale`) |
//! | a Parameter as a value (`Plus(x, b)`) | ConstantFunctionComponent named `b` (a learned vector per frame) |
//! | `Constant(v)` | `Const(v, dim)` in a Sum, or the factor of `Scale` |
//! | `Plus`, `Minus`, `Scale`, `RowStack` | `Sum`, `Sum(a, Scale(-1, b))`, `Scale`, `Append` |
//! | `Delay`/`PastValue(dim, x, k)`, `FutureValue` | `IfDefined(Offset(x, ∓k))`; with `defaultHiddenActivity=v≠0`, `Failover(Offset(x, ∓k), Const(v, dim))` |
//! | `Sigmoid`, `Tanh`, `RectifiedLinear`, `Softmax`, `LogSoftmax` | the Kaldi nonlinearity |
//! | `RowSlice(start, n, x)` | dim-range node |
//! | `Convolution`, `MaxPooling` | Kaldi's ConvolutionComponent and MaxpoolingComponent (x = width, y = height, z = channels) |
//! | criterion `CrossEntropyWithSoftmax(l, z)` | LogSoftmaxComponent `output.log-softmax` and output node `output`, objective `linear` |
//! | criterion `SquareError(l, z)` | output node `output` reading `z`, objective `quadratic` |
//! | `output`/`eval`-tagged node `n` | output node `n` (`ErrorPrediction` on a criterion's prediction adds nothing: accuracy is reported for `output`) |
//!
//! Only what the criteria and the output/eval nodes reach is lowered. The criterion's label
//! argument is the output's supervision, which the training data supplies. A node that must
//! be a node (a `Delay` or `RowSlice` argument) but lowers to a descriptor becomes a
//! NoOpComponent node of its own name.

use super::eval::{err, EResult, GNode, Graph, Init, NdlError, Op, Tag};
use crate::nnet::component::{new_component_from_config, Component};
use crate::nnet::config_line::ConfigLine;
use crate::nnet::{Desc, NetworkBuilder, ObjectiveType};
use rand::RngCore;
use std::collections::{HashMap, HashSet};

/// Lowering recurses along paths of the graph; longer paths are refused, not overflowed.
const MAX_DEPTH: usize = 400;

pub struct Lowerer<'g, 'r> {
    g: &'g Graph,
    pub b: NetworkBuilder,
    rng: &'r mut dyn RngCore,
    dims: HashMap<usize, Option<usize>>,
    dims_running: HashSet<usize>,
    memo: HashMap<usize, Desc>,
    running: HashSet<usize>,
    /// Nodes that must become a node of this name (read through a Delay before they exist).
    forced: HashMap<usize, String>,
    /// The component made of each Parameter, and in which role.
    params: HashMap<usize, (&'static str, String)>,
    feature: Option<usize>,
    /// Output names given so far.
    outputs: HashSet<String>,
}

fn is_func(n: &GNode, f: &str) -> bool {
    matches!(&n.op, Op::Apply { func, .. } if *func == f)
}

impl<'g, 'r> Lowerer<'g, 'r> {
    pub fn new(g: &'g Graph, rng: &'r mut dyn RngCore) -> Self {
        let feature = (0..g.nodes.len()).find(|&i| {
            g.nodes[i].tags.iter().any(|(t, _)| *t == Tag::Feature)
                && matches!(g.nodes[i].op, Op::Input { .. } | Op::ImageInput { .. })
        });
        Lowerer {
            g,
            b: NetworkBuilder::new(),
            rng,
            dims: HashMap::new(),
            dims_running: HashSet::new(),
            memo: HashMap::new(),
            running: HashSet::new(),
            forced: HashMap::new(),
            params: HashMap::new(),
            feature,
            outputs: HashSet::new(),
        }
    }

    fn node(&self, id: usize) -> &'g GNode {
        &self.g.nodes[self.g.resolve(id)]
    }

    fn fail(&self, id: usize, msg: impl Into<String>) -> NdlError {
        err(&self.node(id).origin, msg)
    }

    /// Why a recursion over the graph (dimensions, lowering) may not enter node `id` with
    /// the nodes of `running` already on its path: too deep, or a loop without a Delay.
    fn recursion_error(&self, id: usize, running: &HashSet<usize>) -> Option<NdlError> {
        if running.len() >= MAX_DEPTH {
            return Some(self.fail(
                id,
                format!("the network is deeper than {MAX_DEPTH} nodes on one path"),
            ));
        }
        running.contains(&id).then(|| {
            self.fail(
                id,
                format!(
                    "'{}' depends on itself without a Delay (PastValue/FutureValue)",
                    self.node(id).name
                ),
            )
        })
    }

    /// The name a node's own component node gets: its NDL name, with `.value` when an
    /// output node of that name reads it.
    fn node_name(&self, id: usize) -> String {
        let n = self.node(id);
        if n.tags
            .iter()
            .any(|(t, _)| matches!(t, Tag::Output | Tag::Eval))
        {
            format!("{}.value", n.name)
        } else {
            n.name.clone()
        }
    }

    fn param(&self, id: usize) -> Option<(usize, usize, usize)> {
        let r = self.g.resolve(id);
        match self.g.nodes[r].op {
            Op::Parameter { rows, cols, .. } => Some((r, rows, cols)),
            _ => None,
        }
    }

    fn constant(&self, id: usize) -> Option<f64> {
        match self.node(id).op {
            Op::Constant { value } => Some(value),
            _ => None,
        }
    }

    /// Width, height, channels of an image-shaped node.
    fn shape(&mut self, id: usize) -> EResult<Option<[usize; 3]>> {
        let n = self.node(id);
        Ok(match &n.op {
            Op::ImageInput {
                width,
                height,
                channels,
            } => Some([*width, *height, *channels]),
            Op::Apply { func, inputs, nums } => match *func {
                "Convolution" => {
                    let [w, h, _] = self.image_of(id, inputs[1])?;
                    let (kw, kh, out, sw, sh) = (
                        nums[0] as usize,
                        nums[1] as usize,
                        nums[2] as usize,
                        nums[3] as usize,
                        nums[4] as usize,
                    );
                    if [nums[0], nums[1], nums[2], nums[3], nums[4]]
                        .iter()
                        .any(|v| *v < 1.0 || v.fract() != 0.0)
                    {
                        return Err(self.fail(id, "Convolution: kernel sizes, channels and steps must be positive whole numbers"));
                    }
                    if kw > w || kh > h {
                        return Err(self.fail(
                            id,
                            format!("Convolution: a {kw}x{kh} kernel does not fit a {w}x{h} image"),
                        ));
                    }
                    Some([(w - kw) / sw + 1, (h - kh) / sh + 1, out])
                }
                "MaxPooling" => {
                    let [w, h, c] = self.image_of(id, inputs[0])?;
                    let (ww, wh, sw, sh) = pooling_geometry(nums);
                    if ww > w || wh > h || ww == 0 || sw == 0 || sh == 0 {
                        return Err(self.fail(
                            id,
                            format!("MaxPooling: a {ww}x{wh} window does not fit a {w}x{h} image"),
                        ));
                    }
                    Some([(w - ww) / sw + 1, (h - wh) / sh + 1, c])
                }
                "Sigmoid" | "Tanh" | "RectifiedLinear" | "ReLU" | "Plus" | "Scale" => {
                    self.shape(inputs[0])?
                }
                _ => None,
            },
            Op::Alias(_) | Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } => None,
        })
    }

    fn image_of(&mut self, id: usize, x: usize) -> EResult<[usize; 3]> {
        self.shape(x)?.ok_or_else(|| {
            self.fail(
                id,
                "the input of Convolution and MaxPooling must be an image (ImageInput, \
                 Convolution, MaxPooling, or a nonlinearity or Plus of one)",
            )
        })
    }

    /// The dimension of a node (`None` for a Constant, which takes its user's).
    fn dim(&mut self, id: usize) -> EResult<Option<usize>> {
        let id = self.g.resolve(id);
        if let Some(d) = self.dims.get(&id) {
            return Ok(*d);
        }
        if let Some(e) = self.recursion_error(id, &self.dims_running) {
            return Err(e);
        }
        self.dims_running.insert(id);
        let d = self.compute_dim(id);
        self.dims_running.remove(&id);
        let d = d?;
        self.dims.insert(id, d);
        Ok(d)
    }

    /// `func(P, x)` at node `id` (Times, DiagTimes): P's rows and columns (P must be a
    /// Parameter, `role` says which) and x's dim.
    fn parameter_times(
        &mut self,
        func: &str,
        role: &str,
        inputs: &[usize],
        id: usize,
    ) -> EResult<(usize, usize, usize)> {
        let (_, rows, cols) = self.param(inputs[0]).ok_or_else(|| {
            self.fail(
                id,
                format!("{func}: the first argument must be a Parameter ({role})"),
            )
        })?;
        Ok((rows, cols, self.known_dim(inputs[1], id)?))
    }

    fn known_dim(&mut self, id: usize, user: usize) -> EResult<usize> {
        self.dim(id)?.ok_or_else(|| {
            self.fail(
                user,
                "a Constant can only be used in Plus, Minus, ElementTimes or Scale",
            )
        })
    }

    fn compute_dim(&mut self, id: usize) -> EResult<Option<usize>> {
        let n = self.node(id);
        let (func, inputs, nums) = match &n.op {
            Op::Alias(_) => return Err(self.fail(id, "a name used before it has a value")),
            Op::Input { dim } => return Ok(Some(*dim)),
            Op::ImageInput {
                width,
                height,
                channels,
            } => return Ok(Some(width * height * channels)),
            Op::Parameter { rows, .. } => return Ok(Some(*rows)),
            Op::Constant { .. } => return Ok(None),
            Op::Apply { func, inputs, nums } => (*func, inputs, nums),
        };
        let d = match func {
            "Times" => {
                let (rows, cols, x) = self.parameter_times(func, "the weights", inputs, id)?;
                if x != cols {
                    return Err(self.fail(
                        id,
                        format!(
                            "Times: the Parameter has {cols} columns but its input has dim {x}"
                        ),
                    ));
                }
                rows
            }
            "DiagTimes" => {
                let (rows, cols, x) = self.parameter_times(func, "the diagonal", inputs, id)?;
                if cols != 1 || rows != x {
                    return Err(self.fail(
                        id,
                        format!("DiagTimes: the Parameter is {rows}x{cols}; its input needs {x}x1"),
                    ));
                }
                x
            }
            "ElementTimes" | "Plus" | "Minus" => {
                let mut dims = Vec::new();
                for &a in inputs {
                    dims.push((a, self.dim(a)?));
                }
                let d = dims.iter().filter_map(|(_, d)| *d).max().ok_or_else(|| {
                    self.fail(
                        id,
                        format!("{func}: at least one argument must not be a Constant"),
                    )
                })?;
                for (a, da) in dims {
                    if let Some(da) = da {
                        let broadcast = func == "Plus" && self.param(a).is_some() && d % da == 0;
                        if da != d && !broadcast {
                            return Err(self.fail(
                                id,
                                format!("{func}: arguments of dims {da} and {d} do not match"),
                            ));
                        }
                    }
                }
                d
            }
            "Scale" => {
                if self.constant(inputs[0]).is_none() {
                    return Err(self.fail(
                        id,
                        "Scale: the first argument must be a number or a Constant",
                    ));
                }
                self.known_dim(inputs[1], id)?
            }
            "Sigmoid" | "Tanh" | "RectifiedLinear" | "ReLU" | "Softmax" | "LogSoftmax" => {
                self.known_dim(inputs[0], id)?
            }
            "RowSlice" => {
                let x = self.known_dim(inputs[0], id)?;
                let (start, num) = (nums[0], nums[1]);
                if start < 0.0
                    || num < 1.0
                    || start.fract() != 0.0
                    || num.fract() != 0.0
                    || start + num > x as f64
                {
                    return Err(self.fail(
                        id,
                        format!(
                            "RowSlice: rows [{start}, {}) do not fit in dim {x}",
                            start + num
                        ),
                    ));
                }
                num as usize
            }
            "RowStack" => {
                let mut total = 0;
                for &a in inputs {
                    total += self.known_dim(a, id)?;
                }
                total
            }
            "Delay" | "PastValue" | "FutureValue" => {
                if nums[0] < 1.0 || nums[0].fract() != 0.0 {
                    return Err(self.fail(
                        id,
                        format!("{func}: the dimension must be a positive whole number"),
                    ));
                }
                nums[0] as usize
            }
            "CrossEntropyWithSoftmax" | "SquareError" | "ErrorPrediction" => {
                let z = self.known_dim(inputs[1], id)?;
                if let Some(l) = self.dim(inputs[0])? {
                    if l != z {
                        return Err(self.fail(
                            id,
                            format!(
                                "{func}: the labels have dim {l} but the prediction has dim {z}"
                            ),
                        ));
                    }
                }
                z
            }
            "Convolution" | "MaxPooling" => {
                let [w, h, c] = self.shape(id)?.unwrap_or([0, 0, 0]);
                if func == "Convolution" {
                    let [_, _, in_c] = self.image_of(id, inputs[1])?;
                    let want = nums[0] as usize * nums[1] as usize * in_c;
                    match self.param(inputs[0]) {
                        Some((_, rows, cols)) if rows == nums[2] as usize && cols == want => {}
                        Some((_, rows, cols)) => {
                            return Err(self.fail(
                                id,
                                format!(
                                "Convolution: the weights are {rows}x{cols}, expected {}x{want} \
                                     (output channels x kernel width x height x input channels)",
                                nums[2]
                            ),
                            ))
                        }
                        None => {
                            return Err(self
                                .fail(id, "Convolution: the first argument must be a Parameter"))
                        }
                    }
                    if nums[5] != 0.0 {
                        return Err(self.fail(
                            id,
                            "Convolution: zeroPadding=true is not supported (Kaldi's ConvolutionComponent does not pad)",
                        ));
                    }
                }
                w * h * c
            }
            other => return Err(self.fail(id, format!("{other} cannot be lowered here"))),
        };
        Ok(Some(d))
    }

    /// A component made from a config line, with parameters drawn as `init` says.
    fn make_component(
        &mut self,
        id: usize,
        config: &str,
        init: Option<Init>,
        cols: usize,
    ) -> EResult<Box<dyn Component>> {
        let cl = ConfigLine::parse_str(&format!("component {config}"))
            .map_err(|e| self.fail(id, e.to_string()))?;
        cl.check_sizes().map_err(|e| self.fail(id, e.to_string()))?;
        let name = cl.get_str("name").map(str::to_string).unwrap_or_default();
        let mut c =
            new_component_from_config(&cl, self.rng).map_err(|e| self.fail(id, e.to_string()))?;
        // The config is kept so the network can be printed as nnet3 config lines.
        let rest = config
            .trim_start()
            .strip_prefix(&format!("name={name}"))
            .unwrap_or(config);
        self.b.record_component_config(&name, rest);
        if let (Some(init), Some(u)) = (init, c.as_updatable_mut()) {
            let n = u.num_parameters();
            let values: Vec<f32> = (0..n)
                .map(|_| match init {
                    Init::Uniform(s) => {
                        let r = self.rng.next_u32() as f64 / u32::MAX as f64;
                        ((2.0 * r - 1.0) * 0.05 * s) as f32
                    }
                    Init::Gaussian(s) => {
                        (0.2 * s / (cols as f64).sqrt()) as f32
                            * crate::random::rand_gauss(self.rng)
                    }
                    Init::Fixed(v) => v as f32,
                })
                .collect();
            let mut off = 0;
            for mut block in u.param_blocks_mut() {
                let n = block.num_rows() * block.num_cols();
                block.copy_from_row_major(&values[off..off + n]);
                off += n;
            }
        }
        Ok(c)
    }

    /// The component made of Parameter `p` in `role` (made on first use).
    fn param_component(
        &mut self,
        user: usize,
        p: usize,
        role: &'static str,
        config: impl FnOnce(&str, usize, usize) -> String,
    ) -> EResult<String> {
        let (p, rows, cols) = self
            .param(p)
            .ok_or_else(|| self.fail(user, "expected a Parameter"))?;
        if let Some((r, name)) = self.params.get(&p) {
            if *r != role {
                return Err(self.fail(
                    user,
                    format!(
                        "Parameter '{}' is used as {role} here but as {r} elsewhere; one Parameter \
                         is one nnet3 component, so it must be used one way",
                        self.g.nodes[p].name
                    ),
                ));
            }
            return Ok(name.clone());
        }
        let Op::Parameter {
            init,
            learning_rate_factor,
            ..
        } = self.g.nodes[p].op
        else {
            unreachable!("checked above")
        };
        crate::limits::check_product(&[rows as u64, cols as u64, 4], "a Parameter")
            .map_err(|m| self.fail(p, m))?;
        let name = self.g.nodes[p].name.clone();
        let mut line = format!("name={name} {}", config(&name, rows, cols));
        if learning_rate_factor != 1.0 {
            line.push_str(&format!(" learning-rate-factor={learning_rate_factor}"));
        }
        let c = self.make_component(p, &line, Some(init), cols)?;
        self.b
            .component(&name, c)
            .map_err(|e| self.fail(user, e.to_string()))?;
        self.params.insert(p, (role, name.clone()));
        Ok(name)
    }

    /// A component node named after node `id` over a new component of the same name.
    fn layer(&mut self, id: usize, config: &str, input: Desc) -> EResult<Desc> {
        let name = self.node_name(id);
        self.named_layer(id, &name, config, input)
    }

    /// A component node named after node `id` over the existing component `component`.
    fn node_over(&mut self, id: usize, component: &str, input: Desc) -> EResult<Desc> {
        let name = self.node_name(id);
        self.b
            .component_node(&name, component, input)
            .map_err(|e| self.fail(id, e.to_string()))?;
        Ok(Desc::node(name))
    }

    /// A component node `name` over a new component of the same name made from `config`
    /// (errors point at node `id`).
    fn named_layer(&mut self, id: usize, name: &str, config: &str, input: Desc) -> EResult<Desc> {
        let c = self.make_component(id, &format!("name={name} {config}"), None, 1)?;
        self.b
            .component(name, c)
            .map_err(|e| self.fail(id, e.to_string()))?;
        self.b
            .component_node(name, name, input)
            .map_err(|e| self.fail(id, e.to_string()))?;
        Ok(Desc::node(name))
    }

    /// Lowers a node to the descriptor that reads its value.
    pub fn lower(&mut self, id: usize) -> EResult<Desc> {
        let id = self.g.resolve(id);
        if let Some(d) = self.memo.get(&id) {
            return Ok(d.clone());
        }
        if let Some(e) = self.recursion_error(id, &self.running) {
            return Err(e);
        }
        self.running.insert(id);
        let d = self.lower_op(id);
        self.running.remove(&id);
        let mut d = d?;
        if let Some(name) = self.forced.get(&id).cloned() {
            if d != Desc::node(name.clone()) {
                d = self.materialize(id, &name, d)?;
            }
        }
        self.memo.insert(id, d.clone());
        Ok(d)
    }

    /// A NoOpComponent node `name` reading `input`.
    fn materialize(&mut self, id: usize, name: &str, input: Desc) -> EResult<Desc> {
        let dim = self.known_dim(id, id)?;
        self.named_layer(id, name, &format!("type=NoOpComponent dim={dim}"), input)
    }

    /// The name of a node holding `x`'s value, declaring it if `x` is still being lowered.
    fn node_ref(&mut self, x: usize) -> EResult<String> {
        let x = self.g.resolve(x);
        if self.running.contains(&x) {
            if let Some(name) = self.forced.get(&x) {
                return Ok(name.clone());
            }
            let name = self.node_name(x);
            self.b
                .declare(&name)
                .map_err(|e| self.fail(x, e.to_string()))?;
            self.forced.insert(x, name.clone());
            return Ok(name);
        }
        match self.lower(x)? {
            Desc::Node(n) => Ok(n),
            other => {
                let name = self.node_name(x);
                let d = self.materialize(x, &name, other)?;
                self.memo.insert(x, d);
                Ok(name)
            }
        }
    }

    /// A term of a Sum: Constants become `Const`, Parameters their constant-function node
    /// (repeated to fill `dim` when shorter, as CNTK broadcasts a column).
    fn term(&mut self, user: usize, a: usize, dim: usize, sign: f32) -> EResult<Desc> {
        if let Some(v) = self.constant(a) {
            return Ok(Desc::constant(sign * v as f32, dim));
        }
        let d = match self.param(a) {
            Some((p, rows, _)) => {
                let desc = self.param_value(user, p)?;
                if rows < dim {
                    // Kaldi's Sum cannot mix Append terms, so the repeats get a node.
                    let name = format!("{}.repeat{}", self.g.nodes[p].name, dim / rows);
                    if !self.b.has_node(&name) {
                        let c = self.make_component(
                            user,
                            &format!("name={name} type=NoOpComponent dim={dim}"),
                            None,
                            1,
                        )?;
                        self.b
                            .component(&name, c)
                            .map_err(|e| self.fail(user, e.to_string()))?;
                        self.b
                            .component_node(
                                &name,
                                &name,
                                Desc::append(std::iter::repeat_n(desc, dim / rows)),
                            )
                            .map_err(|e| self.fail(user, e.to_string()))?;
                    }
                    Desc::node(name)
                } else {
                    desc
                }
            }
            None => self.lower(a)?,
        };
        Ok(if sign == 1.0 { d } else { scaled(d, sign) })
    }

    /// A Parameter used as a value: a ConstantFunctionComponent node reading the features.
    fn param_value(&mut self, user: usize, p: usize) -> EResult<Desc> {
        let (p, _, cols) = self
            .param(p)
            .ok_or_else(|| self.fail(user, "expected a Parameter"))?;
        if cols != 1 {
            return Err(self.fail(
                user,
                format!(
                    "Parameter '{}' has {cols} columns; only a vector (one column) can be used as \
                     a value, a matrix only as the first argument of Times",
                    self.g.nodes[p].name
                ),
            ));
        }
        let feature = self.feature.ok_or_else(|| {
            self.fail(
                user,
                "a Parameter used as a value needs a feature input (tag=feature)",
            )
        })?;
        let feature_dim = self.known_dim(feature, user)?;
        let already = self.params.contains_key(&p);
        let name = self.param_component(user, p, "a value", |_, rows, _| {
            format!("type=ConstantFunctionComponent input-dim={feature_dim} output-dim={rows}")
        })?;
        if !already {
            let input = self.lower(feature)?;
            self.b
                .component_node(&name, &name, input)
                .map_err(|e| self.fail(user, e.to_string()))?;
        }
        Ok(Desc::node(name))
    }

    fn lower_op(&mut self, id: usize) -> EResult<Desc> {
        let n = self.node(id);
        let dim = self.dim(id)?;
        let (func, inputs, nums) = match &n.op {
            Op::Input { dim } => return self.input(id, *dim),
            Op::ImageInput { .. } => return self.input(id, dim.unwrap_or(0)),
            Op::Parameter { .. } => return self.param_value(id, id),
            Op::Constant { .. } => {
                return Err(self.fail(
                    id,
                    "a Constant can only be used in Plus, Minus, ElementTimes or Scale",
                ))
            }
            Op::Alias(_) => return Err(self.fail(id, "a name used before it has a value")),
            Op::Apply { func, inputs, nums } => (*func, inputs.as_slice(), nums.as_slice()),
        };
        let dim = dim.unwrap_or(0);
        match func {
            "Times" => {
                let x = self.lower(inputs[1])?;
                let w = self.param_component(
                    id,
                    inputs[0],
                    "the weights of Times",
                    |_, rows, cols| {
                        format!("type=LinearComponent input-dim={cols} output-dim={rows}")
                    },
                )?;
                self.node_over(id, &w, x)
            }
            "DiagTimes" => self.diag_times(id, inputs[0], inputs[1]),
            "ElementTimes" => {
                let (a, b) = (inputs[0], inputs[1]);
                if let Some(v) = self.constant(a) {
                    return Ok(scaled(self.lower(b)?, v as f32));
                }
                if let Some(v) = self.constant(b) {
                    return Ok(scaled(self.lower(a)?, v as f32));
                }
                if self.param(a).is_some() {
                    return self.diag_times(id, a, b);
                }
                if self.param(b).is_some() {
                    return self.diag_times(id, b, a);
                }
                let input = Desc::append([self.lower(a)?, self.lower(b)?]);
                self.layer(
                    id,
                    &format!(
                        "type=ElementwiseProductComponent input-dim={} output-dim={dim}",
                        2 * dim
                    ),
                    input,
                )
            }
            "Plus" => {
                let mut terms = Vec::new();
                for &a in inputs {
                    terms.push(self.term(id, a, dim, 1.0)?);
                }
                if terms.len() == 1 {
                    return Ok(terms.pop().expect("one"));
                }
                self.sum(id, terms, dim)
            }
            "Minus" => {
                let a = self.term(id, inputs[0], dim, 1.0)?;
                let b = self.term(id, inputs[1], dim, -1.0)?;
                self.sum(id, vec![a, b], dim)
            }
            "Scale" => {
                let c = self.constant(inputs[0]).unwrap_or(1.0);
                Ok(scaled(self.lower(inputs[1])?, c as f32))
            }
            "Sigmoid" | "Tanh" | "RectifiedLinear" | "ReLU" | "Softmax" | "LogSoftmax" => {
                let ty = match func {
                    "ReLU" => "RectifiedLinear",
                    f => f,
                };
                let x = self.lower(inputs[0])?;
                self.layer(id, &format!("type={ty}Component dim={dim}"), x)
            }
            "RowSlice" => {
                let x = self.node_ref(inputs[0])?;
                let name = self.node_name(id);
                self.b
                    .dim_range(&name, &x, nums[0] as usize, nums[1] as usize)
                    .map_err(|e| self.fail(id, e.to_string()))?;
                Ok(Desc::node(name))
            }
            "RowStack" => {
                let mut parts = Vec::new();
                for &a in inputs {
                    parts.push(self.lower(a)?);
                }
                Ok(Desc::append(parts))
            }
            "Delay" | "PastValue" | "FutureValue" => {
                let x = inputs[0];
                let xd = self.dim(x)?;
                if xd.is_some_and(|d| d != dim) {
                    return Err(self.fail(
                        id,
                        format!(
                            "{func}: the stated dimension is {dim} but its input has dim {}",
                            xd.unwrap_or(0)
                        ),
                    ));
                }
                let target = self.node_ref(x)?;
                let k = nums[1] as i32;
                let k = if func == "FutureValue" { k } else { -k };
                let shifted = Desc::node(target).offset(k);
                let default = nums[2];
                Ok(if default == 0.0 {
                    shifted.if_defined()
                } else {
                    shifted.failover(Desc::constant(default as f32, dim))
                })
            }
            "Convolution" => {
                let [w, h, c] = self.image_of(id, inputs[1])?;
                let (kw, kh, sw, sh) = (nums[0], nums[1], nums[3], nums[4]);
                let geometry = [kw as usize, kh as usize, sw as usize, sh as usize];
                let (x, w, h) = self.crop(id, inputs[1], [w, h, c], geometry)?;
                let comp = self.param_component(
                    id,
                    inputs[0],
                    "the weights of Convolution",
                    |_, rows, _| {
                        format!(
                        "type=ConvolutionComponent input-x-dim={w} input-y-dim={h} input-z-dim={c} \
                         filt-x-dim={kw} filt-y-dim={kh} filt-x-step={sw} filt-y-step={sh} \
                         num-filters={rows} input-vectorization-order=zyx"
                    )
                    },
                )?;
                self.node_over(id, &comp, x)
            }
            "MaxPooling" => {
                let [w, h, c] = self.image_of(id, inputs[0])?;
                let (ww, wh, sw, sh) = pooling_geometry(nums);
                let (x, w, h) = self.crop(id, inputs[0], [w, h, c], [ww, wh, sw, sh])?;
                self.layer(
                    id,
                    &format!(
                        "type=MaxpoolingComponent input-x-dim={w} input-y-dim={h} input-z-dim={c} \
                         pool-x-size={ww} pool-y-size={wh} pool-z-size=1 pool-x-step={sw} \
                         pool-y-step={sh} pool-z-step=1"
                    ),
                    x,
                )
            }
            "CrossEntropyWithSoftmax" | "SquareError" | "ErrorPrediction" => Err(self.fail(
                id,
                format!("{func} is a criterion; its value cannot be the input of another node"),
            )),
            other => Err(self.fail(id, format!("{other} cannot be lowered"))),
        }
    }

    /// The part of image `x` (width w, height h, c channels; channels fastest, then height)
    /// that windows of `kw`×`kh` at steps `sw`, `sh` cover, as CNTK drops the rest; Kaldi's
    /// components need the windows to fit exactly. Returns the descriptor and the used size.
    fn crop(
        &mut self,
        id: usize,
        x: usize,
        [w, h, c]: [usize; 3],
        [kw, kh, sw, sh]: [usize; 4],
    ) -> EResult<(Desc, usize, usize)> {
        let used_w = (w - kw) / sw * sw + kw;
        let used_h = (h - kh) / sh * sh + kh;
        if used_w == w && used_h == h {
            return Ok((self.lower(x)?, w, h));
        }
        let src = self.node_ref(x)?;
        let base = self.node_name(id);
        let rows = if used_h == h {
            vec![(0, used_w * h * c)]
        } else {
            (0..used_w).map(|k| (k * h * c, used_h * c)).collect()
        };
        let mut parts = Vec::new();
        for (k, (offset, dim)) in rows.into_iter().enumerate() {
            let name = format!("{base}.crop{k}");
            self.b
                .dim_range(&name, &src, offset, dim)
                .map_err(|e| self.fail(id, e.to_string()))?;
            parts.push(Desc::node(name));
        }
        Ok((Desc::append(parts), used_w, used_h))
    }

    /// `Sum(terms)`. Kaldi's compiler refuses a Sum that reads one node at one Index
    /// through two terms, so a term sharing a node with an earlier one gets a node.
    fn sum(&mut self, id: usize, terms: Vec<Desc>, dim: usize) -> EResult<Desc> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut out = Vec::new();
        for (k, t) in terms.into_iter().enumerate() {
            let names: Vec<String> = t.node_names().iter().map(|n| n.to_string()).collect();
            let t = if names.iter().any(|n| seen.contains(n)) {
                let name = format!("{}.term{k}", self.node_name(id));
                self.named_layer(id, &name, &format!("type=NoOpComponent dim={dim}"), t)?
            } else {
                t
            };
            seen.extend(names);
            out.push(t);
        }
        Ok(Desc::sum(out))
    }

    fn diag_times(&mut self, id: usize, w: usize, x: usize) -> EResult<Desc> {
        let input = self.lower(x)?;
        let comp = self.param_component(
            id,
            w,
            "a diagonal (DiagTimes/ElementTimes)",
            |_, rows, _| format!("type=PerElementScaleComponent dim={rows}"),
        )?;
        self.node_over(id, &comp, input)
    }

    fn input(&mut self, id: usize, dim: usize) -> EResult<Desc> {
        let name = if Some(id) == self.feature {
            "input".to_string()
        } else {
            self.node(id).name.clone()
        };
        self.b
            .input(&name, dim)
            .map_err(|e| self.fail(id, e.to_string()))?;
        Ok(Desc::node(name))
    }

    fn output(
        &mut self,
        id: usize,
        name: &str,
        input: Desc,
        objective: ObjectiveType,
    ) -> EResult<()> {
        self.b
            .output(name, input, objective)
            .map_err(|e| self.fail(id, e.to_string()))?;
        self.outputs.insert(name.to_string());
        Ok(())
    }

    /// Lowers the criteria, then the output- and eval-tagged nodes.
    pub fn lower_roots(&mut self) -> EResult<()> {
        let tagged = |tag: Tag| -> Vec<(usize, String)> {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for (i, n) in self.g.nodes.iter().enumerate() {
                for (t, name) in &n.tags {
                    let r = self.g.resolve(i);
                    if *t == tag && seen.insert(r) {
                        out.push((r, name.clone()));
                    }
                }
            }
            out
        };
        let criteria = tagged(Tag::Criteria);
        let mut predictions = HashSet::new();
        for (k, (id, tag_name)) in criteria.iter().enumerate() {
            let id = *id;
            let out = if k == 0 {
                "output".to_string()
            } else {
                tag_name.clone()
            };
            self.dim(id)?;
            let n = self.node(id);
            let z =
                match &n.op {
                    Op::Apply {
                        func: "CrossEntropyWithSoftmax" | "SquareError",
                        inputs,
                        ..
                    } => inputs[1],
                    _ => return Err(self.fail(
                        id,
                        "a criteria-tagged node must be CrossEntropyWithSoftmax or SquareError \
                         (each becomes an output node with its own objective)",
                    )),
                };
            predictions.insert(self.g.resolve(z));
            let zd = self.lower(z)?;
            if is_func(n, "CrossEntropyWithSoftmax") {
                let dim = self.known_dim(z, id)?;
                let name = format!("{out}.log-softmax");
                let d = self.named_layer(
                    id,
                    &name,
                    &format!("type=LogSoftmaxComponent dim={dim}"),
                    zd,
                )?;
                self.output(id, &out, d, ObjectiveType::Linear)?;
            } else {
                self.output(id, &out, zd, ObjectiveType::Quadratic)?;
            }
        }
        let criteria_ids: HashSet<usize> = criteria.iter().map(|(i, _)| *i).collect();
        let mut extra = tagged(Tag::Eval);
        extra.extend(tagged(Tag::Output));
        for (id, name) in extra {
            if criteria_ids.contains(&id) || self.outputs.contains(&name) {
                continue;
            }
            self.dim(id)?;
            let n = self.node(id);
            let read = match &n.op {
                Op::Apply {
                    func: "ErrorPrediction",
                    inputs,
                    ..
                } => {
                    if predictions.contains(&self.g.resolve(inputs[1])) {
                        continue;
                    }
                    inputs[1]
                }
                Op::Apply {
                    func: "CrossEntropyWithSoftmax" | "SquareError",
                    inputs,
                    ..
                } => inputs[1],
                _ => id,
            };
            let d = self.lower(read)?;
            self.output(id, &name, d, ObjectiveType::Linear)?;
        }
        if self.outputs.is_empty() {
            let origin = super::eval::Origin {
                pos: super::lexer::Pos { line: 1, column: 1 },
                chain: std::rc::Rc::new(Vec::new()),
            };
            return Err(err(
                &origin,
                "the network has no criterion (tag=criteria) and no output or eval node",
            ));
        }
        Ok(())
    }
}

/// `Scale(alpha, d)` pushed inside IfDefined, Failover, Sum and Append, which Kaldi's
/// normal form cannot scale from outside.
fn scaled(d: Desc, alpha: f32) -> Desc {
    match d {
        Desc::IfDefined(a) => scaled(*a, alpha).if_defined(),
        Desc::Failover(a, b) => scaled(*a, alpha).failover(scaled(*b, alpha)),
        Desc::Sum(v) => Desc::Sum(v.into_iter().map(|t| scaled(t, alpha)).collect()),
        Desc::Append(v) => Desc::Append(v.into_iter().map(|t| scaled(t, alpha)).collect()),
        Desc::Const(v, dim) => Desc::Const(v * alpha, dim),
        Desc::Scale(b, a) => Desc::Scale(alpha * b, a),
        other => other.scale(alpha),
    }
}

/// Window width and height and steps of MaxPooling: CNTK's (width, height, stepW, stepH), or
/// the seed's three-number form (height, stepW, stepH) with a square window.
fn pooling_geometry(nums: &[f64]) -> (usize, usize, usize, usize) {
    let u = |k: usize| nums.get(k).copied().unwrap_or(0.0).max(0.0) as usize;
    if nums.len() >= 4 {
        (u(0), u(1), u(2), u(3))
    } else {
        (u(0), u(0), u(1), u(2))
    }
}
