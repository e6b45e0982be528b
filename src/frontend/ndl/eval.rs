//! Evaluating NDL: macros expanded, names resolved (forward references included), the
//! result a graph of [`GNode`]s, each with its source position and macro call chain.
//!
//! A scope (the top level, a section, or one macro call) evaluates its statements in order;
//! a name used before its statement ran evaluates that statement first, and a name used
//! while its own statement is running (a loop through `Delay`) gets an alias node that is
//! bound when the statement finishes. Macro parameters are bound to the caller's values; a
//! block macro's value is its statement named like the macro, else its last statement, and
//! its other statements stay reachable by dot access (`L1.T`).

use super::lexer::Pos;
use super::parser::{Arg, Expr, MacroBody, Param, Setting, Stmt};
use std::collections::HashMap;
use std::rc::Rc;

/// A macro call on the way to an error: macro name and where it was called.
#[derive(Clone, Debug)]
pub struct CallSite {
    pub name: String,
    pub pos: Pos,
}

/// Where a node came from: its position and the macro calls around it (innermost last).
#[derive(Clone, Debug)]
pub struct Origin {
    pub pos: Pos,
    pub chain: Rc<Vec<CallSite>>,
}

/// An evaluation or lowering error before file names are attached.
#[derive(Debug)]
pub struct NdlError {
    pub origin: Origin,
    pub msg: String,
}

pub type EResult<T> = Result<T, NdlError>;

/// Tags of a node (CNTK's `tag=` and the root lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Feature,
    Label,
    Criteria,
    Eval,
    Output,
}

fn parse_tag(s: &str) -> Option<Tag> {
    Some(match s.to_ascii_lowercase().as_str() {
        "feature" | "features" => Tag::Feature,
        "label" | "labels" => Tag::Label,
        "criteria" | "criterion" => Tag::Criteria,
        "eval" | "evaluation" => Tag::Eval,
        "output" | "outputs" => Tag::Output,
        _ => return None,
    })
}

/// The root lists and the tag each gives.
fn root_list_tag(name: &str) -> Option<Tag> {
    Some(match name.to_ascii_lowercase().as_str() {
        "featurenodes" => Tag::Feature,
        "labelnodes" => Tag::Label,
        "criterianodes" | "criterionnodes" => Tag::Criteria,
        "evalnodes" => Tag::Eval,
        "outputnodes" => Tag::Output,
        _ => return None,
    })
}

/// How a Parameter's values are drawn (CNTK's `init=`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Uniform in ±0.05·scale.
    Uniform(f64),
    /// Gaussian, standard deviation 0.2·scale/√cols.
    Gaussian(f64),
    Fixed(f64),
}

#[derive(Clone, Debug)]
pub enum Op {
    /// Stands for a node whose statement was still running; bound afterwards.
    Alias(Option<usize>),
    Input {
        dim: usize,
    },
    /// An image of width × height × channels, as one vector (channels fastest).
    ImageInput {
        width: usize,
        height: usize,
        channels: usize,
    },
    Parameter {
        rows: usize,
        cols: usize,
        init: Init,
        learning_rate_factor: f64,
    },
    Constant {
        value: f64,
    },
    /// Any other node type: its canonical name, node inputs, numeric arguments.
    Apply {
        func: &'static str,
        inputs: Vec<usize>,
        nums: Vec<f64>,
    },
}

#[derive(Clone, Debug)]
pub struct GNode {
    pub op: Op,
    /// Qualified name: the statement that bound it (inside macros `L1.T`), or a generated one.
    pub name: String,
    /// True once a statement has named it (the first name wins).
    pub named: bool,
    pub origin: Origin,
    /// Tags with the name the tag was given under (the statement or the root-list entry).
    pub tags: Vec<(Tag, String)>,
}

/// The evaluated network.
#[derive(Default, Debug)]
pub struct Graph {
    pub nodes: Vec<GNode>,
    /// The SimpleNetworkBuilder section, if there is one.
    pub simple: Option<(Pos, Vec<Setting>)>,
}

/// The arguments of a call of a macro or a built-in function: positional and named values
/// (evaluated in the caller's scope, each with where it was written), where the call was
/// written and the name prefix of the nodes it makes.
struct Call<'a>(
    Vec<(Value, Origin)>,
    Vec<(String, Value, Origin)>,
    &'a Origin,
    &'a str,
);

impl Graph {
    /// Follows aliases to the real node.
    pub fn resolve(&self, mut id: usize) -> usize {
        for _ in 0..self.nodes.len() + 1 {
            match self.nodes[id].op {
                Op::Alias(Some(t)) => id = t,
                _ => return id,
            }
        }
        id
    }
}

#[derive(Clone, Debug)]
enum Value {
    Num(f64),
    Str(String),
    Node(usize),
    Instance(Rc<Instance>),
    /// What a root list (`OutputNodes=(...)`) statement leaves behind.
    List,
}

#[derive(Debug)]
struct Instance {
    members: HashMap<String, Value>,
    result: Value,
}

struct MacroDef {
    name: String,
    params: Vec<Param>,
    body: MacroBody,
}

/// Node types and how their arguments read: `n` a number, `x` a node, `*` any number of
/// nodes; criteria take (label, prediction).
const FUNCTIONS: &[(&str, &str)] = &[
    ("Times", "xx"),
    ("DiagTimes", "xx"),
    ("ElementTimes", "xx"),
    ("Plus", "x*"),
    ("Minus", "xx"),
    ("Scale", "xx"),
    ("Sigmoid", "x"),
    ("Tanh", "x"),
    ("RectifiedLinear", "x"),
    ("ReLU", "x"),
    ("Softmax", "x"),
    ("LogSoftmax", "x"),
    ("RowSlice", "nnx"),
    ("RowStack", "x*"),
    ("Delay", "nx"),
    ("PastValue", "nx"),
    ("FutureValue", "nx"),
    ("CrossEntropyWithSoftmax", "xx"),
    ("SquareError", "xx"),
    ("ErrorPrediction", "xx"),
    ("Convolution", "xxnnnnn"),
    ("MaxPooling", "xnnn*"),
];

/// Node types CNTK has that do not lower to nnet3, with the reason.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "ClassBasedCrossEntropyWithSoftmax",
        "the class-based criterion needs a softmax over the words of each label's class, \
         chosen per frame by the label; nnet3's components and objectives (linear, quadratic) \
         cannot express that, so it is not lowered (use CrossEntropyWithSoftmax over the whole \
         vocabulary)",
    ),
    (
        "MeanVarNorm",
        "feature normalisation from data statistics is not a network node in nnet3 \
         (normalise the features, e.g. with apply-cmvn, before training)",
    ),
    ("LogPrior", "priors are not part of an nnet3 network"),
];

struct Scope {
    /// Index of the scope's statements in `stmts`.
    stmts: Vec<Stmt>,
    values: HashMap<String, Value>,
    /// Statements running now, with the alias handed to early users.
    running: HashMap<String, Option<usize>>,
    /// Qualified-name prefix (`L1.` inside the call bound to `L1`).
    prefix: String,
    chain: Rc<Vec<CallSite>>,
}

#[derive(Default)]
pub struct Evaluator {
    pub graph: Graph,
    macros: HashMap<String, Rc<MacroDef>>,
    /// Generated-name counters per prefix.
    counters: HashMap<String, usize>,
    depth: usize,
    /// Statements being evaluated now (nested through forward references).
    pending_statements: usize,
}

/// How many statements may be in evaluation at once.
const MAX_PENDING: usize = 500;

/// Macro calls nest at most this deep (a recursive macro would not end).
const MAX_DEPTH: usize = 64;

pub fn err(origin: &Origin, msg: impl Into<String>) -> NdlError {
    NdlError {
        origin: origin.clone(),
        msg: msg.into(),
    }
}

impl Evaluator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Evaluates a whole file: macro definitions first (anywhere in the file, sections
    /// included), then the top-level statements and the NDL sections.
    pub fn run(&mut self, stmts: Vec<Stmt>) -> EResult<()> {
        let root = Origin {
            pos: Pos::default(),
            chain: Rc::new(Vec::new()),
        };
        let mut body = Vec::new();
        self.collect(stmts, &mut body, &root)?;
        let mut scope = Scope {
            stmts: body,
            values: HashMap::new(),
            running: HashMap::new(),
            prefix: String::new(),
            chain: Rc::new(Vec::new()),
        };
        self.run_scope(&mut scope)
    }

    /// Registers macros and settings; flattens NDL sections into `out`.
    fn collect(&mut self, stmts: Vec<Stmt>, out: &mut Vec<Stmt>, root: &Origin) -> EResult<()> {
        for s in stmts {
            match s {
                Stmt::Macro {
                    name,
                    pos,
                    params,
                    body,
                } => {
                    if self.macros.contains_key(&name) {
                        let o = Origin {
                            pos,
                            ..root.clone()
                        };
                        return Err(err(&o, format!("macro '{name}' is defined twice")));
                    }
                    self.macros
                        .insert(name.clone(), Rc::new(MacroDef { name, params, body }));
                }
                Stmt::Section { body, .. } => self.collect(body, out, root)?,
                Stmt::Settings { name, pos, entries } => {
                    if name.eq_ignore_ascii_case("SimpleNetworkBuilder") {
                        self.graph.simple = Some((pos, entries));
                    }
                }
                assign => out.push(assign),
            }
        }
        Ok(())
    }

    fn run_scope(&mut self, scope: &mut Scope) -> EResult<()> {
        for k in 0..scope.stmts.len() {
            if let Stmt::Assign { name, .. } = &scope.stmts[k] {
                let name = name.clone();
                if !scope.values.contains_key(&name) {
                    self.run_statement(scope, k)?;
                }
            }
        }
        Ok(())
    }

    fn run_statement(&mut self, scope: &mut Scope, k: usize) -> EResult<Value> {
        let Some(Stmt::Assign { name, pos, expr }) = scope.stmts.get(k).cloned() else {
            return Err(err(
                &Origin {
                    pos: Pos::default(),
                    chain: scope.chain.clone(),
                },
                "internal: not an assignment",
            ));
        };
        let origin = Origin {
            pos,
            chain: scope.chain.clone(),
        };
        // Forward references evaluate statements recursively; bound the depth.
        if self.pending_statements >= MAX_PENDING {
            return Err(err(
                &origin,
                format!(
                    "more than {MAX_PENDING} statements wait on names defined later; define \
                     names before their use"
                ),
            ));
        }
        self.pending_statements += 1;
        let r = self.run_statement_inner(scope, name, origin, expr);
        self.pending_statements -= 1;
        r
    }

    fn run_statement_inner(
        &mut self,
        scope: &mut Scope,
        name: String,
        origin: Origin,
        expr: Expr,
    ) -> EResult<Value> {
        if let Some(tag) = root_list_tag(&name) {
            let items = match &expr {
                Expr::List(items, _) => items.clone(),
                one => vec![one.clone()],
            };
            for item in items {
                let v = self.eval(scope, &item, &name)?;
                let o = Origin {
                    pos: item.pos(),
                    chain: scope.chain.clone(),
                };
                let id = self.node_of(&v, &o, &format!("an entry of {name}"))?;
                let written = match &item {
                    Expr::Name(path, _) => format!("{}{}", scope.prefix, path.join(".")),
                    _ => self.graph.nodes[id].name.clone(),
                };
                self.graph.nodes[id].tags.push((tag, written));
            }
            scope.values.insert(name, Value::List);
            return Ok(Value::List);
        }
        scope.running.insert(name.clone(), None);
        let qualified = format!("{}{name}", scope.prefix);
        let v = self.eval(scope, &expr, &qualified);
        let alias = scope.running.remove(&name).flatten();
        let v = v?;
        if let Value::Node(id) = v {
            let g = &mut self.graph.nodes[id];
            if !g.named {
                g.named = true;
                g.name = qualified;
            }
        }
        if let Some(a) = alias {
            match v {
                Value::Node(id) => self.graph.nodes[a].op = Op::Alias(Some(id)),
                _ => {
                    return Err(err(
                        &origin,
                        format!("'{name}' is used in its own definition but is not a node"),
                    ))
                }
            }
        }
        scope.values.insert(name, v.clone());
        Ok(v)
    }

    fn new_node(&mut self, op: Op, prefix: &str, origin: Origin) -> usize {
        let base = if prefix.is_empty() { "node" } else { prefix };
        let n = self.counters.entry(base.to_string()).or_insert(0);
        *n += 1;
        let name = format!("{base}.{n}");
        self.graph.nodes.push(GNode {
            op,
            name,
            named: false,
            origin,
            tags: Vec::new(),
        });
        self.graph.nodes.len() - 1
    }

    fn lookup(&mut self, scope: &mut Scope, name: &str, origin: &Origin) -> EResult<Value> {
        if let Some(v) = scope.values.get(name) {
            return Ok(v.clone());
        }
        if let Some(running) = scope.running.get(name) {
            if let Some(a) = running {
                return Ok(Value::Node(*a));
            }
            let a = self.new_node(
                Op::Alias(None),
                &format!("{}{name}", scope.prefix),
                origin.clone(),
            );
            scope.running.insert(name.to_string(), Some(a));
            return Ok(Value::Node(a));
        }
        let k = scope
            .stmts
            .iter()
            .position(|s| matches!(s, Stmt::Assign { name: n, .. } if n == name));
        match k {
            Some(k) => self.run_statement(scope, k),
            None => Err(err(origin, format!("unknown name '{name}'"))),
        }
    }

    fn node_of(&self, v: &Value, origin: &Origin, what: &str) -> EResult<usize> {
        match v {
            Value::Node(id) => Ok(*id),
            Value::Instance(i) => self.node_of(&i.result, origin, what),
            Value::Num(x) => Err(err(
                origin,
                format!("{what} must be a node, not the number {x}"),
            )),
            Value::Str(s) => Err(err(origin, format!("{what}: unknown name '{s}'"))),
            Value::List => Err(err(origin, format!("{what} must be a node, not a list"))),
        }
    }

    fn eval(&mut self, scope: &mut Scope, e: &Expr, prefix: &str) -> EResult<Value> {
        let origin = Origin {
            pos: e.pos(),
            chain: scope.chain.clone(),
        };
        match e {
            Expr::Num(v, _) => Ok(Value::Num(*v)),
            Expr::Str(s, _) => Ok(Value::Str(s.clone())),
            Expr::List(..) => Err(err(
                &origin,
                "a list (a, b, ...) is only allowed in FeatureNodes, LabelNodes, CriteriaNodes, \
                 EvalNodes and OutputNodes",
            )),
            Expr::Name(path, _) => {
                let first = &path[0];
                let known = scope.values.contains_key(first)
                    || scope.running.contains_key(first)
                    || scope
                        .stmts
                        .iter()
                        .any(|s| matches!(s, Stmt::Assign { name, .. } if name == first));
                let mut v = if known || path.len() > 1 {
                    self.lookup(scope, first, &origin)?
                } else {
                    // Bare words (`init=uniform`, `tag=feature`, `true`) are strings.
                    Value::Str(first.clone())
                };
                for (k, member) in path.iter().enumerate().skip(1) {
                    v = match &v {
                        Value::Instance(inst) => match inst.members.get(member) {
                            Some(m) => m.clone(),
                            None => {
                                return Err(err(
                                    &origin,
                                    format!("'{}' has no member '{member}'", path[..k].join(".")),
                                ))
                            }
                        },
                        _ => {
                            return Err(err(
                                &origin,
                                format!(
                                    "'{}' is not a macro call, so '.{member}' cannot be read",
                                    path[..k].join(".")
                                ),
                            ))
                        }
                    };
                }
                Ok(v)
            }
            Expr::Call { name, args, .. } => self.call(scope, name, args, &origin, prefix),
        }
    }

    fn call(
        &mut self,
        scope: &mut Scope,
        name: &str,
        args: &[Arg],
        origin: &Origin,
        prefix: &str,
    ) -> EResult<Value> {
        // Positional and named arguments, evaluated in the caller's scope.
        let mut pos_args = Vec::new();
        let mut named: Vec<(String, Value, Origin)> = Vec::new();
        for a in args {
            let o = Origin {
                pos: a.value.pos(),
                chain: scope.chain.clone(),
            };
            let v = self.eval(scope, &a.value, prefix)?;
            match &a.name {
                None => pos_args.push((v, o)),
                Some((k, _)) => named.push((k.clone(), v, o)),
            }
        }
        let mut tags = Vec::new();
        named.retain(|(k, v, o)| {
            if k.eq_ignore_ascii_case("tag") {
                tags.push((v.clone(), o.clone()));
                false
            } else {
                true
            }
        });
        let call = Call(pos_args, named, origin, prefix);
        let result = if let Some(m) = self.macros.get(name).cloned() {
            self.call_macro(&m, call)?
        } else {
            self.builtin(name, call)?
        };
        for (t, o) in tags {
            let tag = match &t {
                Value::Str(s) => parse_tag(s),
                _ => None,
            }
            .ok_or_else(|| {
                err(
                    &o,
                    "unknown tag: expected feature, label, criteria, eval or output",
                )
            })?;
            let id = self.node_of(&result, origin, "a tagged value")?;
            self.graph.nodes[id].tags.push((tag, prefix.to_string()));
        }
        Ok(result)
    }

    fn call_macro(&mut self, m: &MacroDef, call: Call<'_>) -> EResult<Value> {
        let Call(pos_args, named, origin, prefix) = call;
        if self.depth >= MAX_DEPTH {
            return Err(err(
                origin,
                format!("macro calls nest deeper than {MAX_DEPTH} (a recursive macro?)"),
            ));
        }
        if pos_args.len() > m.params.len() {
            return Err(err(
                origin,
                format!(
                    "macro '{}' takes {} arguments, {} given",
                    m.name,
                    m.params.len(),
                    pos_args.len()
                ),
            ));
        }
        let mut chain = (*origin.chain).clone();
        chain.push(CallSite {
            name: m.name.clone(),
            pos: origin.pos,
        });
        let mut values = HashMap::new();
        for (p, (v, _)) in m.params.iter().zip(pos_args) {
            values.insert(p.name.clone(), v);
        }
        for (k, v, o) in named {
            if !m.params.iter().any(|p| p.name == k) {
                return Err(err(
                    &o,
                    format!("macro '{}' has no parameter '{k}'", m.name),
                ));
            }
            if values.insert(k.clone(), v).is_some() {
                return Err(err(&o, format!("parameter '{k}' is given twice")));
            }
        }
        let mut scope = Scope {
            stmts: Vec::new(),
            values: HashMap::new(),
            running: HashMap::new(),
            prefix: format!("{prefix}."),
            chain: Rc::new(chain),
        };
        for p in &m.params {
            if !values.contains_key(&p.name) {
                match &p.default {
                    // Defaults are evaluated in the macro's own scope.
                    Some(d) => {
                        let v = self.eval(&mut scope, d, prefix)?;
                        values.insert(p.name.clone(), v);
                    }
                    None => {
                        return Err(err(
                            origin,
                            format!("macro '{}': missing argument '{}'", m.name, p.name),
                        ))
                    }
                }
            }
        }
        scope.values = values;
        self.depth += 1;
        let r = self.macro_body(m, &mut scope, prefix);
        self.depth -= 1;
        r
    }

    fn macro_body(&mut self, m: &MacroDef, scope: &mut Scope, prefix: &str) -> EResult<Value> {
        match &m.body {
            MacroBody::Expr(e) => self.eval(scope, e, prefix),
            MacroBody::Block(stmts) => {
                scope.stmts = stmts
                    .iter()
                    .filter(|s| matches!(s, Stmt::Assign { .. }))
                    .cloned()
                    .collect();
                let origin = Origin {
                    pos: scope.chain.last().map_or(Pos::default(), |c| c.pos),
                    chain: scope.chain.clone(),
                };
                if scope.stmts.is_empty() {
                    return Err(err(
                        &origin,
                        format!("macro '{}' has no statements", m.name),
                    ));
                }
                self.run_scope(scope)?;
                let result_name = match scope.stmts.iter().find_map(|s| match s {
                    Stmt::Assign { name, .. } if *name == m.name => Some(name.clone()),
                    _ => None,
                }) {
                    Some(n) => n,
                    None => match scope.stmts.last() {
                        Some(Stmt::Assign { name, .. }) => name.clone(),
                        _ => unreachable!("assignments only"),
                    },
                };
                let result = scope.values[&result_name].clone();
                Ok(Value::Instance(Rc::new(Instance {
                    members: std::mem::take(&mut scope.values),
                    result,
                })))
            }
        }
    }

    fn builtin(&mut self, name: &str, call: Call<'_>) -> EResult<Value> {
        let Call(pos_args, named, origin, prefix) = call;
        let lower = name.to_ascii_lowercase();
        if let Some((_, why)) = UNSUPPORTED
            .iter()
            .find(|(n, _)| n.to_ascii_lowercase() == lower)
        {
            return Err(err(origin, format!("{name} is not supported: {why}")));
        }
        let num = |v: &Value, o: &Origin, what: &str| -> EResult<f64> {
            match v {
                Value::Num(x) => Ok(*x),
                _ => Err(err(o, format!("{name}: {what} must be a number"))),
            }
        };
        let size = |v: &Value, o: &Origin, what: &str| -> EResult<usize> {
            let x = num(v, o, what)?;
            if x < 1.0 || x.fract() != 0.0 || x > i32::MAX as f64 {
                return Err(err(
                    o,
                    format!("{name}: {what} must be a positive whole number, got {x}"),
                ));
            }
            Ok(x as usize)
        };
        let get = |key: &str| -> Option<&(String, Value, Origin)> {
            named.iter().find(|(k, _, _)| k.eq_ignore_ascii_case(key))
        };
        let check_named = |allowed: &[&str]| -> EResult<()> {
            for (k, _, o) in &named {
                if !allowed.iter().any(|a| a.eq_ignore_ascii_case(k)) {
                    return Err(err(
                        o,
                        format!(
                            "{name}: unknown option '{k}' (expected one of: {})",
                            if allowed.is_empty() {
                                "none".into()
                            } else {
                                allowed.join(", ")
                            }
                        ),
                    ));
                }
            }
            Ok(())
        };
        let arity = |lo: usize, hi: usize| -> EResult<()> {
            if pos_args.len() < lo || pos_args.len() > hi {
                let want = if lo == hi {
                    format!("{lo}")
                } else {
                    format!("{lo} to {hi}")
                };
                return Err(err(
                    origin,
                    format!("{name} takes {want} arguments, {} given", pos_args.len()),
                ));
            }
            Ok(())
        };
        let op = match lower.as_str() {
            "input" | "sparseinput" => {
                arity(1, 1)?;
                check_named(&[])?;
                Op::Input {
                    dim: size(&pos_args[0].0, &pos_args[0].1, "the dimension")?,
                }
            }
            "imageinput" => {
                arity(3, 3)?;
                check_named(&[])?;
                let op = Op::ImageInput {
                    width: size(&pos_args[0].0, &pos_args[0].1, "the width")?,
                    height: size(&pos_args[1].0, &pos_args[1].1, "the height")?,
                    channels: size(&pos_args[2].0, &pos_args[2].1, "the channels")?,
                };
                if let Op::ImageInput {
                    width,
                    height,
                    channels,
                } = op
                {
                    if width as u64 * height as u64 * channels as u64 > i32::MAX as u64 {
                        return Err(err(
                            origin,
                            "ImageInput: the image has more than 2^31 values",
                        ));
                    }
                }
                op
            }
            "parameter" | "learnableparameter" => {
                arity(1, 2)?;
                check_named(&[
                    "init",
                    "value",
                    "initValueScale",
                    "initialValueScale",
                    "learningRateMultiplier",
                    "needGradient",
                    "rows",
                    "cols",
                ])?;
                let rows = size(&pos_args[0].0, &pos_args[0].1, "the number of rows")?;
                let cols = match pos_args.get(1) {
                    Some((v, o)) => size(v, o, "the number of columns")?,
                    None => 1,
                };
                let scale = match get("initValueScale").or_else(|| get("initialValueScale")) {
                    Some((_, v, o)) => num(v, o, "initValueScale")?,
                    None => 1.0,
                };
                let init = match get("init") {
                    None => Init::Uniform(scale),
                    Some((_, Value::Str(s), o)) => match s.to_ascii_lowercase().as_str() {
                        "uniform" => Init::Uniform(scale),
                        "gaussian" => Init::Gaussian(scale),
                        "fixedvalue" => match get("value") {
                            Some((_, v, o)) => Init::Fixed(num(v, o, "value")?),
                            None => return Err(err(o, "init=fixedvalue needs value=<number>")),
                        },
                        _ => {
                            return Err(err(
                                o,
                                format!(
                                    "unknown init '{s}': expected uniform, gaussian or fixedvalue"
                                ),
                            ))
                        }
                    },
                    Some((_, _, o)) => {
                        return Err(err(o, "init must be uniform, gaussian or fixedvalue"))
                    }
                };
                let mut learning_rate_factor = match get("learningRateMultiplier") {
                    Some((_, v, o)) => num(v, o, "learningRateMultiplier")?,
                    None => 1.0,
                };
                if let Some((_, v, o)) = get("needGradient") {
                    match v {
                        Value::Str(s) if s.eq_ignore_ascii_case("false") => {
                            learning_rate_factor = 0.0
                        }
                        Value::Str(s) if s.eq_ignore_ascii_case("true") => {}
                        _ => return Err(err(o, "needGradient must be true or false")),
                    }
                }
                Op::Parameter {
                    rows,
                    cols,
                    init,
                    learning_rate_factor,
                }
            }
            "constant" => {
                arity(1, 2)?;
                check_named(&["rows", "cols", "value"])?;
                Op::Constant {
                    value: num(&pos_args[0].0, &pos_args[0].1, "the value")?,
                }
            }
            _ => {
                let Some(&(canon, sig)) = FUNCTIONS
                    .iter()
                    .find(|(n, _)| n.to_ascii_lowercase() == lower)
                else {
                    return Err(err(origin, format!("unknown node type or macro '{name}'")));
                };
                let allowed: &[&str] = match canon {
                    "Delay" | "PastValue" | "FutureValue" => &[
                        "delayTime",
                        "timeStep",
                        "defaultHiddenActivity",
                        "needGradient",
                    ],
                    "Convolution" => &["zeroPadding", "maxTempMemSizeInSamples"],
                    "ErrorPrediction" | "CrossEntropyWithSoftmax" | "SquareError" => &[],
                    _ => &[],
                };
                check_named(allowed)?;
                let variadic = sig.ends_with('*');
                let fixed = sig.trim_end_matches('*');
                if pos_args.len() < fixed.len().max(1)
                    || (!variadic && pos_args.len() != fixed.len())
                {
                    return Err(err(
                        origin,
                        format!(
                            "{canon} takes {}{} arguments, {} given",
                            if variadic { "at least " } else { "" },
                            fixed.len().max(1),
                            pos_args.len()
                        ),
                    ));
                }
                let mut inputs = Vec::new();
                let mut nums = Vec::new();
                for (k, (v, o)) in pos_args.iter().enumerate() {
                    let kind = fixed
                        .as_bytes()
                        .get(k)
                        .copied()
                        .unwrap_or(if canon == "MaxPooling" { b'n' } else { b'x' });
                    if kind == b'n' {
                        nums.push(num(v, o, &format!("argument {}", k + 1))?);
                    } else {
                        let what = format!("{canon}'s argument {}", k + 1);
                        match v {
                            Value::Num(x) if canon == "Scale" && k == 0 => {
                                let c =
                                    self.new_node(Op::Constant { value: *x }, prefix, o.clone());
                                inputs.push(c);
                            }
                            _ => inputs.push(self.node_of(v, o, &what)?),
                        }
                    }
                }
                match canon {
                    "Delay" | "PastValue" | "FutureValue" => {
                        let steps = match get("delayTime").or_else(|| get("timeStep")) {
                            Some((_, v, o)) => size(v, o, "the delay")?,
                            None => 1,
                        };
                        let default = match get("defaultHiddenActivity") {
                            Some((_, v, o)) => num(v, o, "defaultHiddenActivity")?,
                            None => 0.0,
                        };
                        nums.push(steps as f64);
                        nums.push(default);
                    }
                    "Convolution" => {
                        let zero_padding = match get("zeroPadding") {
                            Some((_, Value::Str(s), _)) if s.eq_ignore_ascii_case("true") => 1.0,
                            Some((_, Value::Str(s), _)) if s.eq_ignore_ascii_case("false") => 0.0,
                            Some((_, _, o)) => {
                                return Err(err(o, "zeroPadding must be true or false"))
                            }
                            None => 0.0,
                        };
                        nums.push(zero_padding);
                    }
                    _ => {}
                }
                Op::Apply {
                    func: canon,
                    inputs,
                    nums,
                }
            }
        };
        let id = self.new_node(op, prefix, origin.clone());
        Ok(Value::Node(id))
    }
}
