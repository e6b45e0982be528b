//! CNTK's Model Editing Language (MEL), run on compnet's networks.
//!
//! ```text
//! m1=LoadModel($CurrModel$, format=cntk)
//! SetDefaultModel(m1)
//! HDim=64
//! L2=SBFF(L1.S, HDim, HDim)          # inline NDL: a new layer reading node L1.S
//! SetInput(CE.*.T, 1, L2.S)          # the output layer's Times now reads L2.S
//! SetProperty(L1.BFF.W, needGradient, false)
//! SaveModel(m1, $NewModel$, format=cntk)
//! ```
//!
//! Node names are those the NDL front end gives (`frontend::ndl::lower`): a macro's internal
//! nodes are `call.name` (`L1.S`, `CE.BFF.T`), its Parameters are components of that name
//! (`L1.BFF.W`). `*` in a name matches any run of characters (`CE.*.T`); a name may start with a
//! model's name (`m1.L1.S`). One statement per line; `#` starts a comment; `$var$` is filled
//! from the configuration before the file is read.
//!
//! Statements (names case-insensitive, CNTK's aliases in brackets):
//! - `m=LoadModel(path)`, `LoadModelWithName(m, path)`, `SetDefaultModel(m)`,
//!   `SaveModel(m, path)`, `SaveDefaultModel(path)`;
//! - `name=number` (a variable for inline NDL), `name=Macro(args)` or `name=Function(args)`
//!   (inline NDL, lowered with the `ndlMacros` of the edit block; arguments that name nodes
//!   of the model are read from those nodes; new parameters drawn as NDL draws them);
//! - `SetInput(node, i, from)` [`SetNodeInput`]: input `i` of every matching node (1 of a
//!   `Times`, 0 of a one-input node) now reads `from`; input 0 of a `Times` is its weight
//!   Parameter, so `from` may name a Parameter of the same type and size;
//! - `SetInputs(node, in1[, in2, in3])` [`SetNodeInputs`]: every input of one node (a
//!   `Times` takes its weight Parameter, then its data; a one-input node one);
//! - `CopyNodeInputs(from, to)` [`CopyInputs`]: `to` reads what `from` reads (a `Times`
//!   shares `from`'s weight Parameter); a `to` that does not exist is made; `*` pairs names as
//!   in `CopyNode`;
//! - `ReviseParameter(parameter, file)`: a Parameter's values from a text matrix (CNTK's
//!   format: a line per row; a vector Parameter from a column or one row);
//! - `CopyNode(from, to, [copy=all|value])` [`Copy`]: a Parameter or component node copied
//!   with its values under a new name (a copied node reads what the original reads), or
//!   with `copy=value` the values into an existing one; `*` pairs names as CNTK does
//!   (`CopyNode(L1.*, L3.*)` copies a layer, the links among the copies going to the copies;
//!   `*` only in `to` copies one node into every match);
//! - `CopySubTree(from, toModel, prefix, [copy=all|value])`: the node and every component
//!   node it reads, into `toModel` as `prefix` + name (reading that model's input nodes);
//! - `DeleteNode(node, ...)` [`Delete`, `RemoveNode`, `Remove`]: as in CNTK the nodes that
//!   read it lose that input; `SetInput` must give them another before `SaveModel`, which
//!   otherwise fails naming the readers and the `DeleteNode` line (until then the node stays,
//!   unread by the new links); a node nothing reads goes at once, with its component;
//! - `Rename(old, new)`: nodes (every reference follows) or Parameters, `*` as in CopyNode;
//! - `SetProperty(node, property, value)`: `needGradient`/`needsGradient`/`computeGradient`
//!   (learning-rate factor 1 or 0 for the node's component or the named Parameter),
//!   `learningRateMultiplier` (the factor), `criterion` (the output node `output` now reads
//!   the node), `feature` (true only on input nodes: compnet's features are its inputs),
//!   `evaluation`/`output` (accepted: compnet evaluates the criterion's accuracy and writes
//!   any node); `label` is refused (compnet's labels are the output's supervision);
//! - `DumpModel(m, file, [includeData=false])` [`Dump`]: the network's config lines, or the
//!   Kaldi text model with `includeData=true`; `DumpNode(node, file, [includeData])`.
//!
//! Errors name the MEL file and line.

use crate::error::{Error, Result};
use crate::nnet::component::Component;
use crate::nnet::edit::name_matches_pattern;
use crate::nnet::network::{NetworkNode, Nnet};
use crate::nnet::ObjectiveType;
use std::collections::BTreeMap;

/// One parsed statement.
#[derive(Debug)]
struct Stmt {
    line: usize,
    lhs: Option<String>,
    func: Option<String>,
    /// Positional and named (`key=value`) arguments, or the literal value of `name=value`.
    args: Vec<(Option<String>, String)>,
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() || !out.is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn top_level_eq(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '=' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_stmt(raw: &str, line: usize, file: &str) -> Result<Option<Stmt>> {
    let text = raw.split('#').next().unwrap_or("").trim();
    if text.is_empty() {
        return Ok(None);
    }
    let err = |m: &str| Error::Usage(format!("{file}:{line}: {m}: {}", raw.trim()));
    let (lhs, rhs) = match top_level_eq(text) {
        Some(p) => (Some(text[..p].trim().to_string()), text[p + 1..].trim()),
        None => (None, text),
    };
    if lhs.as_deref() == Some("") {
        return Err(err("an empty name before '='"));
    }
    let Some(open) = rhs.find('(') else {
        if lhs.is_none() {
            return Err(err("expected Command(arguments) or name=value"));
        }
        return Ok(Some(Stmt {
            line,
            lhs,
            func: None,
            args: vec![(None, rhs.to_string())],
        }));
    };
    if !rhs.ends_with(')') {
        return Err(err("expected ')' at the end"));
    }
    let func = rhs[..open].trim().to_string();
    let args = split_top(&rhs[open + 1..rhs.len() - 1])
        .into_iter()
        .map(|a| match top_level_eq(&a) {
            Some(p) => (
                Some(a[..p].trim().to_string()),
                a[p + 1..].trim().to_string(),
            ),
            None => (None, a),
        })
        .collect();
    Ok(Some(Stmt {
        line,
        lhs,
        func: Some(func),
        args,
    }))
}

/// The state of a MEL run: the loaded models and the variables.
pub struct Mel<'a> {
    file: String,
    macros: String,
    models: BTreeMap<String, Nnet>,
    default: Option<String>,
    vars: Vec<(String, String)>,
    pending: Vec<PendingDelete>,
    rng: rand::rngs::StdRng,
    /// What each statement did, for the log.
    pub log: Vec<String>,
    read_model: &'a dyn Fn(&str) -> Result<Nnet>,
}

impl<'a> Mel<'a> {
    /// `macros`: NDL macro definitions for inline NDL; `read_model` loads a model file.
    pub fn new(
        file: &str,
        macros: String,
        seed: u64,
        read_model: &'a dyn Fn(&str) -> Result<Nnet>,
    ) -> Self {
        Mel {
            file: file.to_string(),
            macros,
            models: BTreeMap::new(),
            default: None,
            vars: Vec::new(),
            pending: Vec::new(),
            rng: crate::random::seeded_rng(seed),
            log: Vec::new(),
            read_model,
        }
    }

    /// Runs MEL text (with `$var$` already filled in).
    pub fn run(&mut self, text: &str) -> Result<()> {
        for (i, raw) in text.lines().enumerate() {
            if let Some(s) = parse_stmt(raw, i + 1, &self.file)? {
                self.exec(&s)
                    .map_err(|e| Error::Usage(format!("{}:{}: {e}", self.file, s.line)))?;
            }
        }
        Ok(())
    }

    /// A loaded model, by name.
    pub fn model(&self, name: &str) -> Option<&Nnet> {
        self.models.get(name)
    }

    fn positional(s: &Stmt, i: usize, what: &str) -> std::result::Result<String, String> {
        s.args
            .iter()
            .filter(|(k, _)| k.is_none())
            .nth(i)
            .map(|(_, v)| v.trim_matches('"').to_string())
            .ok_or_else(|| format!("{} needs {what}", s.func.as_deref().unwrap_or("")))
    }

    /// The first two positional names of `s` (`what` says what each is), which must be in
    /// one model (`verb` names the statement in the error): the model and both names in it.
    fn names_in_one_model(
        &self,
        s: &Stmt,
        what: [&str; 2],
        verb: &str,
    ) -> std::result::Result<(String, String, String), String> {
        let a = Self::positional(s, 0, what[0])?;
        let b = Self::positional(s, 1, what[1])?;
        let (ma, pa) = self.split_model(&a)?;
        let (mb, pb) = self.split_model(&b)?;
        if ma != mb {
            return Err(format!(
                "{verb} needs two names of one model ({ma} and {mb})"
            ));
        }
        Ok((ma, pa.to_string(), pb.to_string()))
    }

    /// The model a name refers to (`m1.L1.S` or the default model's `L1.S`) and the name in it.
    fn split_model<'n>(&self, name: &'n str) -> std::result::Result<(String, &'n str), String> {
        if let Some((m, rest)) = name.split_once('.') {
            if self.models.contains_key(m) {
                return Ok((m.to_string(), rest));
            }
        }
        let d = self
            .default
            .clone()
            .or_else(|| (self.models.len() == 1).then(|| self.models.keys().next().cloned())?)
            .ok_or_else(|| "no default model (LoadModel and SetDefaultModel first)".to_string())?;
        Ok((d, name))
    }

    fn exec(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let Some(func) = &s.func else {
            let name = s.lhs.clone().expect("name=value");
            let value = s.args[0].1.clone();
            self.vars.retain(|(n, _)| n != &name);
            self.vars.push((name, value));
            return Ok(());
        };
        match func.to_ascii_lowercase().as_str() {
            "loadmodel" | "loadmodelwithname" => {
                let with_name = func.eq_ignore_ascii_case("LoadModelWithName");
                let name = if with_name {
                    Self::positional(s, 0, "a model name")?
                } else {
                    s.lhs
                        .clone()
                        .ok_or("LoadModel needs a name: m=LoadModel(path)")?
                };
                let path = Self::positional(s, usize::from(with_name), "a file name")?;
                let nnet = (self.read_model)(&path).map_err(|e| e.to_string())?;
                self.log.push(format!("loaded {path} as {name}"));
                self.pending.retain(|p| p.model != name);
                self.models.insert(name.clone(), nnet);
                if self.default.is_none() {
                    self.default = Some(name);
                }
            }
            "setdefaultmodel" => {
                let m = Self::positional(s, 0, "a model name")?;
                if !self.models.contains_key(&m) {
                    return Err(format!("no model named {m}"));
                }
                self.default = Some(m);
            }
            "savemodel" | "savedefaultmodel" => {
                let default = func.eq_ignore_ascii_case("SaveDefaultModel");
                let m = if default {
                    self.split_model("")?.0
                } else {
                    Self::positional(s, 0, "a model name")?
                };
                let path = Self::positional(s, usize::from(!default), "a file name")?;
                let nnet = self.models.get(&m).ok_or(format!("no model named {m}"))?;
                if let Some(p) = self.pending.iter().find(|p| p.model == m) {
                    let lines = nnet.config_lines();
                    return Err(format!(
                        "model {m}: '{}', deleted on line {}, is still read by {} (SetInput \
                         them to another node first)",
                        p.name,
                        p.line,
                        readers_of(&lines, &p.name, p.param).join(", ")
                    ));
                }
                nnet.validate().map_err(|e| format!("model {m}: {e}"))?;
                nnet.write_model_file(&path, true)
                    .map_err(|e| e.to_string())?;
                self.log.push(format!("saved {m} to {path}"));
            }
            "dumpmodel" | "dump" | "dumpnode" => self.dump(s)?,
            "setinput" | "setnodeinput" => self.set_input(s)?,
            "setinputs" | "setnodeinputs" => self.set_inputs(s)?,
            "copyinputs" | "copynodeinputs" => self.copy_node_inputs(s)?,
            "reviseparameter" => self.revise_parameter(s)?,
            "setproperty" | "setnodeproperty" => self.set_property(s)?,
            "copynode" | "copy" => self.copy_node(s)?,
            "copysubtree" => self.copy_sub_tree(s)?,
            "deletenode" | "delete" | "removenode" | "remove" => {
                for i in 0..s.args.len() {
                    let target = Self::positional(s, i, "a node")?;
                    self.delete_node(&target, s.line)?;
                }
            }
            "rename" => self.rename(s)?,
            _ => self.inline_ndl(s)?,
        }
        Ok(())
    }

    /// The nodes of model `m` matching `pattern`.
    fn matching_nodes(&self, m: &str, pattern: &str) -> std::result::Result<Vec<String>, String> {
        let nnet = &self.models[m];
        let v: Vec<String> = script_nodes(nnet)
            .filter(|n| name_matches_pattern(n, pattern))
            .cloned()
            .collect();
        if v.is_empty() {
            return Err(format!("no node of model {m} matches '{pattern}'"));
        }
        Ok(v)
    }

    /// `SetInput(node, i, from)`: input `i` of the matching nodes now reads `from`. Input 0
    /// of a `Times` is its weight Parameter: `from` then names a parameter of the same type
    /// and size, which the node uses from now on.
    fn set_input(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let target = Self::positional(s, 0, "a node")?;
        let index: usize = Self::positional(s, 1, "an input number")?
            .parse()
            .map_err(|_| "SetInput's second argument is an input number (0, 1, ...)")?;
        let from = Self::positional(s, 2, "the node to read from")?;
        let (m, pattern) = self.split_model(&target)?;
        let (m2, from) = self.split_model(&from)?;
        if m2 != m {
            return Err(format!("SetInput across models ({m} and {m2})"));
        }
        if let Some(p) = self.pending.iter().find(|p| p.model == m && p.name == from) {
            return Err(format!("'{from}' was deleted on line {}", p.line));
        }
        let nodes = self.matching_nodes(&m, pattern)?;
        let nnet = self.models.get_mut(&m).expect("checked");
        let mut lines = String::new();
        for n in &nodes {
            let i = nnet.node_index(n).expect("matched");
            let NetworkNode::Component { component } = nnet.nodes[i] else {
                return Err(format!(
                    "'{n}' is not a component node (in compnet's network it is an input, \
                     output or dim-range node)"
                ));
            };
            let comp = &nnet.components[component];
            let times = is_times(comp.type_name());
            let old_input = nnet.node_config_line(i, false);
            let old_input = old_input
                .split_once(" input=")
                .map_or(String::new(), |(_, d)| d.to_string());
            if times && index == 0 {
                // The weight Parameter.
                check_weight(nnet, &m, from, n, component)?;
                lines.push_str(&format!(
                    "component-node name={n} component={from} input={old_input}\n"
                ));
                continue;
            }
            if nnet.node_index(from).is_none() {
                return Err(format!("model {m} has no node '{from}'"));
            }
            let want = usize::from(times);
            if index != want {
                return Err(format!(
                    "'{n}' ({}) takes its data as input {want}{}",
                    comp.type_name(),
                    if times {
                        " (input 0 of Times is its weight Parameter)"
                    } else {
                        ""
                    }
                ));
            }
            lines.push_str(&format!(
                "component-node name={n} component={} input={from}\n",
                nnet.component_names[component]
            ));
        }
        apply_lines(nnet, &lines, "<SetInput>", &mut self.rng)?;
        self.log
            .push(format!("SetInput: {} now read {from}", nodes.join(", ")));
        self.finish_deletes(&m)
    }

    /// The one node (or, `param`, the one node or Parameter) of model `m` that `pattern`
    /// names; a wildcard must match exactly one.
    fn single(&self, m: &str, pattern: &str, param: bool) -> std::result::Result<String, String> {
        let nnet = &self.models[m];
        let mut found: Vec<String> = nnet
            .node_names
            .iter()
            .enumerate()
            .filter(|&(i, n)| !nnet.is_component_input_node(i) && name_matches_pattern(n, pattern))
            .map(|(_, n)| n.clone())
            .collect();
        if param {
            let extra: Vec<String> = nnet
                .component_names
                .iter()
                .filter(|c| name_matches_pattern(c, pattern) && !found.contains(c))
                .cloned()
                .collect();
            found.extend(extra);
        }
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(format!(
                "model {m} has no {} '{pattern}'",
                if param { "node or parameter" } else { "node" }
            )),
            many => Err(format!(
                "'{pattern}' names {} nodes ({}); each input is one node",
                many.len(),
                many.join(", ")
            )),
        }
    }

    /// `SetInputs(node, input1[, input2, input3])` [`SetNodeInputs`]: every input of one
    /// node at once. A `Times` takes two (its weight Parameter, then its data), a one-input
    /// node one; the count must be the node's.
    fn set_inputs(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let target = Self::positional(s, 0, "a node")?;
        let count = s.args.iter().filter(|(k, _)| k.is_none()).count();
        if !(2..=4).contains(&count) {
            return Err(
                "SetInputs(node, input1[, input2, input3]): a node and one to three inputs".into(),
            );
        }
        let (m, pattern) = self.split_model(&target)?;
        let nodes = self.matching_nodes(&m, pattern)?;
        let [node] = nodes.as_slice() else {
            return Err(format!(
                "SetInputs sets the inputs of one node; '{pattern}' matches {} ({})",
                nodes.len(),
                nodes.join(", ")
            ));
        };
        let nnet = &self.models[&m];
        let i = nnet.node_index(node).expect("matched");
        let NetworkNode::Component { component } = nnet.nodes[i] else {
            return Err(format!(
                "'{node}' is not a component node (in compnet's network it is an input, output \
                 or dim-range node)"
            ));
        };
        let times = is_times(nnet.components[component].type_name());
        let want = if times { 2 } else { 1 };
        if count - 1 != want {
            return Err(format!(
                "'{node}' ({}) has {want} input{}{}, SetInputs gave {}",
                nnet.components[component].type_name(),
                if want == 1 { "" } else { "s" },
                if times {
                    " (its weight Parameter, then its data)"
                } else {
                    ""
                },
                count - 1
            ));
        }
        let mut inputs = Vec::new();
        for k in 1..count {
            let raw = Self::positional(s, k, "an input")?;
            let (m2, name) = self.split_model(&raw)?;
            if m2 != m {
                return Err(format!("SetInputs across models ({m} and {m2})"));
            }
            let weight = times && k == 1;
            let name = self.single(&m, name, weight)?;
            if let Some(p) = self.pending.iter().find(|p| p.model == m && p.name == name) {
                return Err(format!("'{name}' was deleted on line {}", p.line));
            }
            inputs.push(name);
        }
        let nnet = &self.models[&m];
        let (comp, data) = if times {
            check_weight(nnet, &m, &inputs[0], node, component)?;
            (inputs[0].clone(), inputs[1].clone())
        } else {
            (nnet.component_names[component].clone(), inputs[0].clone())
        };
        if nnet.node_index(&data).is_none() {
            return Err(format!("model {m} has no node '{data}'"));
        }
        let line = format!("component-node name={node} component={comp} input={data}\n");
        let nnet = self.models.get_mut(&m).expect("checked");
        apply_lines(nnet, &line, "<SetInputs>", &mut self.rng)?;
        self.log
            .push(format!("SetInputs: {node} now reads {}", inputs.join(", ")));
        self.finish_deletes(&m)
    }

    /// `CopyNodeInputs(from, to)` [`CopyInputs`]: node `to` (names paired as `CopyNode`
    /// pairs them) reads what `from` reads; for a `Times` that includes its weight
    /// Parameter, which the two then share. A `to` that does not exist is made, reading
    /// `from`'s inputs (a `Times` sharing `from`'s weight, another node with a copy of
    /// `from`'s component).
    fn copy_node_inputs(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let (m, pf, pt) = self.names_in_one_model(
            s,
            [
                "the node whose inputs are copied",
                "the node that takes them",
            ],
            "CopyNodeInputs",
        )?;
        let (pf, pt) = (pf.as_str(), pt.as_str());
        let nnet = &self.models[&m];
        let names: Vec<String> = nnet
            .node_names
            .iter()
            .enumerate()
            .filter(|&(i, _)| !nnet.is_component_input_node(i))
            .map(|(_, n)| n.clone())
            .collect();
        let pairs = generate_names(pf, pt, &names, &names)?;
        let mut lines = Vec::new();
        let mut new_components: Vec<(String, Box<dyn crate::nnet::component::Component>)> =
            Vec::new();
        for (a, b) in &pairs {
            if a == b {
                return Err(format!("CopyNodeInputs: '{a}' onto itself"));
            }
            let i = nnet.node_index(a).expect("a node");
            let NetworkNode::Component { component: ca } = nnet.nodes[i] else {
                return Err(format!(
                    "'{a}' is an input, output or dim-range node; CopyNodeInputs copies the \
                     inputs of component nodes"
                ));
            };
            let line = nnet.node_config_line(i, false);
            let input = line.split_once(" input=").map_or("", |(_, d)| d);
            let a_times = is_times(nnet.components[ca].type_name());
            let comp = match nnet.node_index(b) {
                None => {
                    if nnet.component_index(b).is_some() {
                        return Err(format!(
                            "CopyNodeInputs: '{b}' is a Parameter, which has no inputs"
                        ));
                    }
                    if a_times {
                        nnet.component_names[ca].clone()
                    } else {
                        new_components.push((b.clone(), nnet.components[ca].clone()));
                        b.clone()
                    }
                }
                Some(j) => {
                    let NetworkNode::Component { component: cb } = nnet.nodes[j] else {
                        return Err(format!(
                            "'{b}' is an input, output or dim-range node; CopyNodeInputs sets \
                             the inputs of component nodes"
                        ));
                    };
                    let b_times = is_times(nnet.components[cb].type_name());
                    if a_times != b_times {
                        return Err(format!(
                            "CopyNodeInputs: '{a}' ({}) and '{b}' ({}) take different inputs",
                            nnet.components[ca].type_name(),
                            nnet.components[cb].type_name()
                        ));
                    }
                    if a_times {
                        check_weight(nnet, &m, &nnet.component_names[ca], b, cb)?;
                        nnet.component_names[ca].clone()
                    } else {
                        nnet.component_names[cb].clone()
                    }
                }
            };
            lines.push(format!(
                "component-node name={b} component={comp} input={input}"
            ));
        }
        let nnet = self.models.get_mut(&m).expect("checked");
        let mut edited = with_components(nnet, new_components);
        edited
            .apply_config_text(
                &(lines.join("\n") + "\n"),
                "<CopyNodeInputs>",
                &mut self.rng,
            )
            .map_err(|e| e.to_string())?;
        *nnet = edited;
        self.log.push(format!(
            "CopyNodeInputs: {}",
            pairs
                .iter()
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        self.finish_deletes(&m)
    }

    /// `ReviseParameter(parameter, file)`: the values of every Parameter matching the name
    /// from a text file in CNTK's matrix format (a line per row, numbers separated by white
    /// space, blank lines skipped); a vector Parameter reads a column (a number per line) or
    /// one row. Names of other nodes are skipped with a warning, as CNTK skips them.
    fn revise_parameter(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        if s.args.len() != 2 {
            return Err("ReviseParameter(parameter, file): two arguments".into());
        }
        let target = Self::positional(s, 0, "a Parameter")?;
        let path = Self::positional(s, 1, "a file name")?;
        let (m, pattern) = self.split_model(&target)?;
        let nnet = &self.models[&m];
        let params: Vec<usize> = nnet
            .component_names
            .iter()
            .enumerate()
            .filter(|&(_, c)| name_matches_pattern(c, pattern))
            .map(|(i, _)| i)
            .collect();
        for (i, n) in nnet.node_names.iter().enumerate() {
            if name_matches_pattern(n, pattern)
                && !nnet.is_component_input_node(i)
                && nnet.component_index(n).is_none()
            {
                self.log.push(format!(
                    "ReviseParameter: '{n}' is not a Parameter (skipped)"
                ));
            }
        }
        let (rows, cols, values) = read_text_matrix(&path).map_err(|e| e.to_string())?;
        let nnet = self.models.get_mut(&m).expect("checked");
        let mut revised = Vec::new();
        for c in params {
            let name = nnet.component_names[c].clone();
            let Some(u) = nnet.components[c].as_updatable_mut() else {
                continue;
            };
            let mut blocks = u.param_blocks_mut();
            let [block] = blocks.as_mut_slice() else {
                return Err(format!(
                    "ReviseParameter: '{name}' holds {} parameter blocks (CNTK's Parameters \
                     are one matrix each)",
                    blocks.len()
                ));
            };
            let (r, k) = (block.num_rows(), block.num_cols());
            let fits = (rows, cols) == (r, k) || (r == 1 && (rows, cols) == (k, 1));
            if !fits {
                return Err(format!(
                    "{path}: a {rows}x{cols} matrix, but Parameter '{name}' is {}",
                    if r == 1 {
                        format!("a vector of {k}")
                    } else {
                        format!("{r}x{k}")
                    }
                ));
            }
            block.copy_from_row_major(&values);
            revised.push(name);
        }
        if revised.is_empty() {
            return Err(format!(
                "no Parameter of model {m} matches '{pattern}' (ReviseParameter sets a \
                 Parameter's values: name it as the NDL did, e.g. L1.BFF.W)"
            ));
        }
        self.log.push(format!(
            "ReviseParameter: {} from {path}",
            revised.join(", ")
        ));
        Ok(())
    }

    /// Components named by `name`: the components of matching component nodes, or matching
    /// component (Parameter) names.
    fn components_of(&self, m: &str, pattern: &str) -> std::result::Result<Vec<usize>, String> {
        let nnet = &self.models[m];
        let mut out = Vec::new();
        for (i, n) in nnet.node_names.iter().enumerate() {
            if name_matches_pattern(n, pattern) {
                if let NetworkNode::Component { component } = nnet.nodes[i] {
                    out.push(component);
                }
            }
        }
        for (i, n) in nnet.component_names.iter().enumerate() {
            if name_matches_pattern(n, pattern) && !out.contains(&i) {
                out.push(i);
            }
        }
        if out.is_empty() {
            return Err(format!(
                "no node or parameter of model {m} matches '{pattern}'"
            ));
        }
        Ok(out)
    }

    /// `SetProperty(node, property, value)` with CNTK's properties.
    fn set_property(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let target = Self::positional(s, 0, "a node")?;
        let prop = Self::positional(s, 1, "a property")?;
        let value = Self::positional(s, 2, "a value")?;
        let flag = || match value.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => Ok(true),
            "false" | "f" | "0" => Ok(false),
            _ => Err(format!("{prop}={value}: expected true or false")),
        };
        let (m, pattern) = self.split_model(&target)?;
        let lower = prop.to_ascii_lowercase();
        match lower.as_str() {
            "needgradient" | "needsgradient" | "computegradient" | "learningratemultiplier" => {
                let factor: f32 = if lower == "learningratemultiplier" {
                    value
                        .parse()
                        .ok()
                        .filter(|f: &f32| f.is_finite() && *f >= 0.0)
                        .ok_or_else(|| {
                            format!("learningRateMultiplier={value}: expected a number >= 0")
                        })?
                } else if flag()? {
                    1.0
                } else {
                    0.0
                };
                let comps = self.components_of(&m, pattern)?;
                let nnet = self.models.get_mut(&m).expect("checked");
                let mut n = 0;
                for c in comps {
                    if let Some(u) = nnet.components[c].as_updatable_mut() {
                        u.common_mut().learning_rate_factor = factor;
                        n += 1;
                    }
                }
                self.log.push(format!(
                    "SetProperty: learning-rate factor {factor} for {n} parameter component(s) \
                     of '{pattern}'"
                ));
            }
            "criterion" | "finalcriterion" | "criteria" => {
                if !flag()? {
                    return Err(format!(
                        "{prop}=false: compnet's network keeps one criterion, the output node \
                         'output'; SetProperty(node, criterion, true) moves it"
                    ));
                }
                let nodes = self.matching_nodes(&m, pattern)?;
                let [node] = nodes.as_slice() else {
                    return Err(format!(
                        "criterion: '{pattern}' matches {} nodes; the criterion is one node",
                        nodes.len()
                    ));
                };
                let nnet = self.models.get_mut(&m).expect("checked");
                let out = nnet
                    .node_index("output")
                    .filter(|&i| nnet.is_output_node(i))
                    .ok_or("the model has no output node 'output'")?;
                let objective = match nnet.objective_type("output") {
                    Some(ObjectiveType::Quadratic) => "quadratic",
                    _ => "linear",
                };
                let _ = out;
                let line = format!("output-node name=output input={node} objective={objective}\n");
                apply_lines(nnet, &line, "<SetProperty>", &mut self.rng)?;
                self.log.push(format!(
                    "SetProperty: the criterion (output) now reads {node}"
                ));
            }
            "feature" => {
                let on = flag()?;
                for n in self.matching_nodes(&m, pattern)? {
                    let nnet = &self.models[&m];
                    let is_input = nnet.node_index(&n).is_some_and(|i| nnet.is_input_node(i));
                    if on != is_input {
                        return Err(format!(
                            "feature={on} on '{n}': in compnet's network the features are \
                             exactly its input nodes"
                        ));
                    }
                }
            }
            "evaluation" | "eval" | "output" => {
                flag()?;
                self.matching_nodes(&m, pattern)?;
                self.log.push(format!(
                    "SetProperty({prop}): nothing to change (compnet evaluates the criterion's \
                     accuracy, and writes any node named by outputNodeNames)"
                ));
            }
            "label" => {
                return Err(
                    "SetProperty(label): compnet's labels are the supervision of the output \
                     node, read by the reader, not a node of the network"
                        .into(),
                )
            }
            _ => {
                return Err(format!(
                    "SetProperty({prop}): not a property compnet knows (needGradient, \
                     computeGradient, learningRateMultiplier, criterion, feature, evaluation, \
                     output)"
                ))
            }
        }
        Ok(())
    }

    /// `CopyNode(from, to, [copy=all|value])`: pairs of names as CNTK makes them (`*` in
    /// both: the part `*` matched carried over; `*` only in `to`: every existing match).
    fn copy_node(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let from = Self::positional(s, 0, "the node to copy")?;
        let to = Self::positional(s, 1, "the name of the copy")?;
        let value_only = copy_flag(s)?;
        let (mf, pf) = self.split_model(&from)?;
        let (mt, pt) = self.split_model(&to)?;
        let src = &self.models[&mf];
        let dst = &self.models[&mt];
        let names: Vec<String> = script_nodes(src)
            .cloned()
            .chain(
                src.component_names
                    .iter()
                    .filter(|c| src.node_index(c).is_none())
                    .cloned(),
            )
            .collect();
        let existing: Vec<String> = dst
            .node_names
            .iter()
            .chain(dst.component_names.iter())
            .cloned()
            .collect();
        let pairs = generate_names(pf, pt, &names, &existing)?;
        let mut lines = Vec::new();
        let mut new_components: Vec<(String, Box<dyn crate::nnet::component::Component>)> =
            Vec::new();
        let renamed: BTreeMap<String, String> = pairs.iter().cloned().collect();
        for (a, b) in &pairs {
            let src = &self.models[&mf];
            let dst = &self.models[&mt];
            // A Parameter (a component not named as a node): its values.
            let src_node = src.node_index(a);
            if src_node.is_none() {
                let ca = src
                    .component_index(a)
                    .ok_or(format!("'{a}' is not a node or parameter"))?;
                match dst.component_index(b) {
                    Some(cb) => self.copy_values(&mf, ca, &mt, cb, a, b)?,
                    None if value_only => {
                        return Err(format!("copy=value: model {mt} has no parameter '{b}'"))
                    }
                    None => new_components.push((b.clone(), src.components[ca].clone())),
                }
                continue;
            }
            let i = src_node.expect("a node");
            let NetworkNode::Component { component } = src.nodes[i] else {
                return Err(format!(
                    "'{a}' is an input, output or dim-range node; CopyNode copies component \
                     nodes and parameters"
                ));
            };
            if value_only {
                let j = dst
                    .node_index(b)
                    .ok_or(format!("copy=value: model {mt} has no node '{b}'"))?;
                let NetworkNode::Component { component: cb } = dst.nodes[j] else {
                    return Err(format!("copy=value: '{b}' is not a component node"));
                };
                self.copy_values(&mf, component, &mt, cb, a, b)?;
                continue;
            }
            if dst.node_index(b).is_some() || dst.component_index(b).is_some() {
                return Err(format!("CopyNode: model {mt} has '{b}' already"));
            }
            let line = src.node_config_line(i, false);
            let input = line.split_once(" input=").map_or("", |(_, d)| d);
            let input = map_tokens(input, &|t| renamed.get(t).cloned());
            // A Parameter copied by the same call (CopyNode(L1.*, L3.*)) is the copy's.
            let comp = match renamed.get(&src.component_names[component]) {
                Some(c) if src.node_index(&src.component_names[component]).is_none() => c.clone(),
                _ => {
                    new_components.push((b.clone(), src.components[component].clone()));
                    b.clone()
                }
            };
            lines.push(format!(
                "component-node name={b} component={comp} input={input}"
            ));
        }
        let nnet = self.models.get_mut(&mt).expect("checked");
        let mut edited = with_components(nnet, new_components);
        if !lines.is_empty() {
            edited
                .apply_config_text(&(lines.join("\n") + "\n"), "<CopyNode>", &mut self.rng)
                .map_err(|e| e.to_string())?;
        }
        *nnet = edited;
        self.log.push(format!("CopyNode: {}", arrows(&pairs)));
        Ok(())
    }

    /// Copies the parameters of component `a` of model `ma` into component `b` of `mb`.
    fn copy_values(
        &mut self,
        ma: &str,
        a: usize,
        mb: &str,
        b: usize,
        an: &str,
        bn: &str,
    ) -> std::result::Result<(), String> {
        let c = self.models[ma].components[a].clone();
        let target = &mut self.models.get_mut(mb).expect("checked").components[b];
        if kind(c.as_ref()) != kind(target.as_ref()) {
            return Err(format!(
                "CopyNode: {an} ({}) and {bn} ({}) differ",
                kind(c.as_ref()),
                kind(target.as_ref())
            ));
        }
        *target = c;
        Ok(())
    }

    /// `CopySubTree(from, toModel, prefix, [copy=all|value])`: node `from` and every
    /// component node it reads, directly or not, copied into `toModel` as `prefix` + name,
    /// with their parameters and links; the input nodes they read are the target model's
    /// nodes of the same name. With copy=value the copies exist already and take the values.
    fn copy_sub_tree(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let from = Self::positional(s, 0, "the root node")?;
        let to_model = Self::positional(s, 1, "the model to copy into")?;
        let prefix = Self::positional(s, 2, "the prefix of the copies' names")?;
        let value_only = copy_flag(s)?;
        let (mf, root) = self.split_model(&from)?;
        if !self.models.contains_key(&to_model) {
            return Err(format!("no model named {to_model}"));
        }
        let src = &self.models[&mf];
        let root_i = src
            .node_index(root)
            .ok_or_else(|| format!("model {mf} has no node '{root}'"))?;
        // The component nodes under the root, inputs first.
        let mut order = Vec::new();
        let mut seen = vec![false; src.nodes.len()];
        let mut stack = vec![(root_i, false)];
        while let Some((i, done)) = stack.pop() {
            if done {
                if matches!(src.nodes[i], NetworkNode::Component { .. }) {
                    order.push(i);
                }
                continue;
            }
            if seen[i] {
                continue;
            }
            seen[i] = true;
            stack.push((i, true));
            for j in src.node_inputs(i) {
                if !seen[j] {
                    stack.push((j, false));
                }
            }
        }
        if order.is_empty() {
            return Err(format!("'{root}' is not a component node"));
        }
        let copied: BTreeMap<String, String> = order
            .iter()
            .map(|&i| {
                (
                    src.node_names[i].clone(),
                    format!("{prefix}{}", src.node_names[i]),
                )
            })
            .collect();
        let mut lines = Vec::new();
        let mut comps = Vec::new();
        for &i in &order {
            let NetworkNode::Component { component } = src.nodes[i] else {
                continue;
            };
            let name = &copied[&src.node_names[i]];
            let line = src.node_config_line(i, false);
            let input = line.split_once(" input=").map_or("", |(_, d)| d);
            lines.push(format!(
                "component-node name={name} component={name} input={}",
                map_tokens(input, &|t| copied.get(t).cloned())
            ));
            comps.push((name.clone(), src.components[component].clone()));
        }
        let target = self.models.get_mut(&to_model).expect("checked");
        if value_only {
            for (name, c) in comps {
                let i = target
                    .component_index(&name)
                    .ok_or_else(|| format!("copy=value: model {to_model} has no '{name}'"))?;
                let t = &mut target.components[i];
                if t.type_name() != c.type_name() || t.output_dim() != c.output_dim() {
                    return Err(format!("copy=value: '{name}' differs from its source"));
                }
                *t = c;
            }
        } else {
            let mut edited = target.clone();
            for (name, c) in comps {
                if edited.component_index(&name).is_some() || edited.node_index(&name).is_some() {
                    return Err(format!(
                        "CopySubTree: model {to_model} has '{name}' already"
                    ));
                }
                edited.component_names.push(name);
                edited.components.push(c);
            }
            edited
                .apply_config_text(&(lines.join("\n") + "\n"), "<CopySubTree>", &mut self.rng)
                .map_err(|e| e.to_string())?;
            *target = edited;
        }
        self.log.push(format!(
            "CopySubTree: {} node(s) under {root} into {to_model} as {prefix}*",
            order.len()
        ));
        Ok(())
    }

    /// `DeleteNode(node)`: as in CNTK, nodes that read it lose that input: they must be given
    /// another by `SetInput` before the model is saved (the node stays, unread, until then).
    /// A Parameter (component) name deletes the parameter the same way.
    fn delete_node(&mut self, target: &str, line: usize) -> std::result::Result<(), String> {
        let (m, pattern) = self.split_model(target)?;
        let nnet = &self.models[&m];
        let mut names: Vec<(String, bool)> = script_nodes(nnet)
            .filter(|n| name_matches_pattern(n, pattern))
            .map(|n| (n.clone(), false))
            .collect();
        if names.is_empty() {
            names = nnet
                .component_names
                .iter()
                .filter(|n| name_matches_pattern(n, pattern))
                .map(|n| (n.clone(), true))
                .collect();
        }
        if names.is_empty() {
            return Err(format!(
                "no node or parameter of model {m} matches '{pattern}'"
            ));
        }
        for (name, param) in &names {
            self.pending.push(PendingDelete {
                model: m.clone(),
                name: name.clone(),
                line,
                param: *param,
            });
        }
        self.log.push(format!(
            "DeleteNode: {}",
            names
                .iter()
                .map(|n| n.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        self.finish_deletes(&m)
    }

    /// Removes the pending deletions of model `m` nothing reads any more.
    fn finish_deletes(&mut self, m: &str) -> std::result::Result<(), String> {
        loop {
            let Some(nnet) = self.models.get(m) else {
                return Ok(());
            };
            let lines = nnet.config_lines();
            let Some(k) = self
                .pending
                .iter()
                .position(|p| p.model == m && readers_of(&lines, &p.name, p.param).is_empty())
            else {
                return Ok(());
            };
            let p = self.pending.remove(k);
            let keep: Vec<String> = if p.param {
                lines
            } else {
                lines
                    .into_iter()
                    .filter(|l| line_name(l) != Some(p.name.as_str()))
                    .collect()
            };
            let mut fresh = Nnet {
                components: nnet.components.clone(),
                component_names: nnet.component_names.clone(),
                ..Default::default()
            };
            // The deleted node's component goes when nothing else uses it.
            let comp = if p.param {
                Some(p.name.clone())
            } else {
                nnet.node_index(&p.name).and_then(|i| match nnet.nodes[i] {
                    NetworkNode::Component { component } => {
                        Some(nnet.component_names[component].clone())
                    }
                    _ => None,
                })
            };
            if let Some(c) = comp {
                if !keep
                    .iter()
                    .any(|l| l.split_whitespace().any(|w| w == format!("component={c}")))
                {
                    if let Some(ci) = fresh.component_index(&c) {
                        fresh.components.remove(ci);
                        fresh.component_names.remove(ci);
                    }
                }
            }
            fresh
                .apply_config_text(&(keep.join("\n") + "\n"), "<DeleteNode>", &mut self.rng)
                .map_err(|e| e.to_string())?;
            self.models.insert(m.to_string(), fresh);
            self.log.push(format!("DeleteNode: {} removed", p.name));
        }
    }

    /// `Rename(old, new)` (names as `CopyNode` pairs them): a node, with every reference to
    /// it, or a Parameter.
    fn rename(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let (m, po, pn) =
            self.names_in_one_model(s, ["the node to rename", "the new name"], "Rename")?;
        let (po, pn) = (po.as_str(), pn.as_str());
        let nnet = &self.models[&m];
        let nodes: Vec<String> = script_nodes(nnet).cloned().collect();
        let all: Vec<String> = nodes
            .iter()
            .chain(nnet.component_names.iter())
            .cloned()
            .collect();
        let pairs = generate_names(po, pn, &all, &[])?;
        let mut node_map = BTreeMap::new();
        let mut comp_map = BTreeMap::new();
        for (a, b) in &pairs {
            if nodes.contains(a) {
                if nnet.node_index(b).is_some() {
                    return Err(format!("Rename: model {m} has a node '{b}' already"));
                }
                node_map.insert(a.clone(), b.clone());
            } else {
                if nnet.component_index(b).is_some() {
                    return Err(format!("Rename: model {m} has a parameter '{b}' already"));
                }
                comp_map.insert(a.clone(), b.clone());
            }
        }
        let lines: Vec<String> = nnet
            .config_lines()
            .iter()
            .map(|l| map_line(l, &node_map, &comp_map))
            .collect();
        let mut fresh = Nnet {
            components: nnet.components.clone(),
            component_names: nnet
                .component_names
                .iter()
                .map(|c| comp_map.get(c).cloned().unwrap_or_else(|| c.clone()))
                .collect(),
            ..Default::default()
        };
        fresh
            .apply_config_text(&(lines.join("\n") + "\n"), "<Rename>", &mut self.rng)
            .map_err(|e| e.to_string())?;
        self.models.insert(m.clone(), fresh);
        for p in self.pending.iter_mut().filter(|p| p.model == m) {
            let map = if p.param { &comp_map } else { &node_map };
            if let Some(n) = map.get(&p.name) {
                p.name = n.clone();
            }
        }
        self.log.push(format!("Rename: {}", arrows(&pairs)));
        Ok(())
    }

    /// `DumpModel(model, file, [includeData=false])` (also `Dump`): the network's config
    /// lines, or with `includeData=true` the whole model as Kaldi's text model;
    /// `DumpNode(node, file, [includeData])`: the matching nodes' config lines (and their
    /// components' text form).
    fn dump(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let what = Self::positional(s, 0, "a model or node")?;
        let path = Self::positional(s, 1, "a file name")?;
        let data = match s.args.iter().find(|(k, _)| {
            k.as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case("includeData"))
        }) {
            None => false,
            Some((_, v)) => match v.to_ascii_lowercase().as_str() {
                "true" | "t" | "1" => true,
                "false" | "f" | "0" => false,
                _ => return Err(format!("includeData={v}: expected true or false")),
            },
        };
        let node = s
            .func
            .as_deref()
            .is_some_and(|f| f.eq_ignore_ascii_case("DumpNode"));
        let text = if node {
            let (m, pattern) = self.split_model(&what)?;
            let nnet = &self.models[&m];
            let mut out = String::new();
            for n in self.matching_nodes(&m, pattern)? {
                let i = nnet.node_index(&n).expect("matched");
                out.push_str(&nnet.node_config_line(i, true));
                out.push('\n');
                if let (true, NetworkNode::Component { component }) = (data, &nnet.nodes[i]) {
                    let mut w = crate::io::codec::TokenWriter::new(false);
                    nnet.components[*component].write(&mut w);
                    out.push_str(&String::from_utf8_lossy(&w.into_bytes()));
                    out.push('\n');
                }
            }
            out
        } else {
            let nnet = self
                .models
                .get(&what)
                .ok_or_else(|| format!("no model named {what}"))?;
            if data {
                nnet.write_model_file(&path, false)
                    .map_err(|e| e.to_string())?;
                self.log.push(format!("dumped {what} to {path}"));
                return Ok(());
            }
            nnet.config_lines().join("\n") + "\n"
        };
        crate::io::write_file_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())?;
        self.log.push(format!("dumped {what} to {path}"));
        Ok(())
    }

    /// `name=Macro(args)`: the NDL lowered against the model's nodes, added to it.
    fn inline_ndl(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let lhs = s
            .lhs
            .clone()
            .ok_or_else(|| format!("unknown MEL command {}", s.func.as_deref().unwrap_or("")))?;
        let (m, _) = self.split_model("")?;
        let nnet = &self.models[&m];
        let input_dim = nnet
            .node_index("input")
            .filter(|&i| nnet.is_input_node(i))
            .map(|i| nnet.node_dim(i))
            .ok_or("the model has no input node named 'input'")?;
        let mut ndl = self.macros.clone();
        ndl.push('\n');
        for (n, v) in &self.vars {
            ndl.push_str(&format!("{n}={v}\n"));
        }
        ndl.push_str(&format!("features=Input({input_dim}, tag=feature)\n"));
        let mut placeholders = Vec::new();
        let mut args = Vec::new();
        for (k, v) in &s.args {
            let node = self.split_model(v).ok().and_then(|(mm, name)| {
                (mm == m && self.models[&m].node_index(name).is_some()).then(|| name.to_string())
            });
            let text = match node {
                Some(name) if name != "input" => {
                    let i = self.models[&m].node_index(&name).expect("checked");
                    let ph = format!("melNode{}", placeholders.len());
                    ndl.push_str(&format!("{ph}=Input({})\n", self.models[&m].node_dim(i)));
                    placeholders.push((ph.clone(), name));
                    ph
                }
                Some(_) => "features".to_string(),
                None => v.clone(),
            };
            args.push(match k {
                Some(k) => format!("{k}={text}"),
                None => text,
            });
        }
        ndl.push_str(&format!(
            "{lhs}={}({})\nOutputNodes=({lhs})\n",
            s.func.as_deref().expect("a call"),
            args.join(", ")
        ));
        let (_, config) = crate::frontend::ndl::read_ndl_with_config(
            &ndl,
            &format!("{} (inline NDL)", self.file),
            &mut self.rng,
        )
        .map_err(|e| e.to_string())?;
        let text = adapt_inline_config(&config, &lhs, &placeholders);
        let nnet = self.models.get_mut(&m).expect("checked");
        for l in text.lines() {
            if let Some(name) = l.split_whitespace().find_map(|w| w.strip_prefix("name=")) {
                let exists = if l.starts_with("component ") {
                    nnet.component_index(name).is_some()
                } else {
                    nnet.node_index(name).is_some()
                };
                if exists {
                    return Err(format!(
                        "{lhs}: the inline NDL makes '{name}', which the model has already"
                    ));
                }
            }
        }
        apply_lines(nnet, &text, "<inline NDL>", &mut self.rng)?;
        self.log.push(format!("{lhs}: added by inline NDL"));
        Ok(())
    }
}

/// A `DeleteNode` waiting for the nodes that read its node to be given another input.
struct PendingDelete {
    model: String,
    name: String,
    line: usize,
    /// A Parameter (component) rather than a node.
    param: bool,
}

/// The names of the nodes a script can name: all but the input nodes compnet adds in front
/// of components.
fn script_nodes(nnet: &Nnet) -> impl Iterator<Item = &String> {
    nnet.node_names
        .iter()
        .enumerate()
        .filter(|&(i, _)| !nnet.is_component_input_node(i))
        .map(|(_, n)| n)
}

/// `a -> b, c -> d` for the (old, new) name pairs of a copy or rename, for the log.
fn arrows(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(a, b)| format!("{a} -> {b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies config `lines` to `nnet` (`what` names the edit in errors); on an error `nnet` is
/// unchanged.
fn apply_lines(
    nnet: &mut Nnet,
    lines: &str,
    what: &str,
    rng: &mut rand::rngs::StdRng,
) -> std::result::Result<(), String> {
    let mut edited = nnet.clone();
    edited
        .apply_config_text(lines, what, rng)
        .map_err(|e| e.to_string())?;
    *nnet = edited;
    Ok(())
}

/// A copy of `nnet` with `new` components (name, component) added after its own.
fn with_components(nnet: &Nnet, new: Vec<(String, Box<dyn Component>)>) -> Nnet {
    let mut edited = nnet.clone();
    for (name, c) in new {
        edited.component_names.push(name);
        edited.components.push(c);
    }
    edited
}

/// A component's type and dimensions as `Type INxOUT`: what must agree for one component to
/// take another's place or parameters.
fn kind(c: &dyn Component) -> String {
    format!("{} {}x{}", c.type_name(), c.input_dim(), c.output_dim())
}

/// The `name=` of a config line.
fn line_name(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("name="))
}

/// The nodes whose config lines read node `name` (or, `param`, use component `name`).
fn readers_of(lines: &[String], name: &str, param: bool) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            if param {
                l.split_whitespace()
                    .any(|w| w == format!("component={name}"))
            } else {
                line_name(l) != Some(name) && {
                    let mut hit = false;
                    map_tokens_keyed(l, &mut |key, t| {
                        hit |= key != "component" && key != "name" && t == name;
                        None
                    });
                    hit
                }
            }
        })
        .filter_map(|l| line_name(l).map(str::to_string))
        .collect()
}

/// `text` with its name tokens (letters, digits, `_.-`) passed through `f`, which is given
/// the key of the `key=value` pair the token is in (empty before any key).
fn map_tokens_keyed(text: &str, f: &mut dyn FnMut(&str, &str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut token = String::new();
    let mut key = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_alphanumeric() || "_.-".contains(c) {
            token.push(c);
            let next = chars.get(i + 1).copied();
            if next.is_some_and(|n| n.is_alphanumeric() || "_.-".contains(n)) {
                continue;
            }
            if next == Some('=') {
                key = token.clone();
                out.push_str(&token);
            } else {
                out.push_str(&f(&key, &token).unwrap_or_else(|| token.clone()));
            }
            token.clear();
        } else {
            out.push(c);
        }
    }
    out
}

/// A descriptor with the node names `f` maps replaced.
fn map_tokens(text: &str, f: &dyn Fn(&str) -> Option<String>) -> String {
    map_tokens_keyed(text, &mut |_, t| f(t))
}

/// A config line with nodes and components renamed.
fn map_line(
    line: &str,
    nodes: &BTreeMap<String, String>,
    comps: &BTreeMap<String, String>,
) -> String {
    map_tokens_keyed(line, &mut |key, t| match key {
        "component" => comps.get(t).cloned(),
        "name" | "input" | "input-node" => nodes.get(t).cloned(),
        _ => None,
    })
}

/// `copy=all|value` (also `copyFlag=`): true for value.
fn copy_flag(s: &Stmt) -> std::result::Result<bool, String> {
    match s.args.iter().find(|(k, _)| {
        k.as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case("copy") || k.eq_ignore_ascii_case("copyFlag"))
    }) {
        None => Ok(false),
        Some((_, v)) if v.eq_ignore_ascii_case("all") => Ok(false),
        Some((_, v)) if v.eq_ignore_ascii_case("value") => Ok(true),
        Some((_, v)) => Err(format!("copy={v}: expected all or value")),
    }
}

/// CNTK's pairing of names for CopyNode and Rename: `from` and `to` with one `*` each map
/// every name matching `from` to `to` with the part `*` matched; `*` only in `to` maps the
/// one name to every existing name matching `to`; no `*`: the one pair.
/// Whether a component is CNTK's `Times` (input 0 its weight Parameter, input 1 its data).
fn is_times(type_name: &str) -> bool {
    matches!(
        type_name,
        "LinearComponent" | "AffineComponent" | "NaturalGradientAffineComponent"
    )
}

/// Whether component `from` can be the weight of node `node`, whose component is `comp`.
fn check_weight(
    nnet: &Nnet,
    m: &str,
    from: &str,
    node: &str,
    comp: usize,
) -> std::result::Result<(), String> {
    let c = nnet.component_index(from).ok_or_else(|| {
        format!("model {m} has no parameter '{from}' (input 0 of '{node}' is its weight)")
    })?;
    let (new, old) = (nnet.components[c].as_ref(), nnet.components[comp].as_ref());
    if kind(new) != kind(old) {
        return Err(format!(
            "'{from}' ({}) cannot be the weight of '{node}' ({})",
            kind(new),
            kind(old)
        ));
    }
    Ok(())
}

/// A matrix in CNTK's text format (`LoadMatrixFromTextFile`): a line per row, numbers
/// separated by white space, blank lines skipped; (rows, columns, values row by row). Errors
/// name the file and line.
pub fn read_text_matrix(path: &str) -> Result<(usize, usize, Vec<f32>)> {
    let text = crate::frontend::read_text(path)?;
    let mut values = Vec::new();
    let (mut rows, mut cols) = (0usize, 0usize);
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        for w in &words {
            let v: f32 = w
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    Error::Usage(format!("{path}:{}: '{w}' is not a finite number", i + 1))
                })?;
            values.push(v);
        }
        if rows == 0 {
            cols = words.len();
        } else if words.len() != cols {
            return Err(Error::Usage(format!(
                "{path}:{}: {} numbers, but the rows above have {cols}",
                i + 1,
                words.len()
            )));
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(Error::Usage(format!(
            "{path}: no numbers (an empty matrix)"
        )));
    }
    Ok((rows, cols, values))
}

fn generate_names(
    from: &str,
    to: &str,
    names: &[String],
    existing: &[String],
) -> std::result::Result<Vec<(String, String)>, String> {
    let sources: Vec<&String> = names
        .iter()
        .filter(|n| name_matches_pattern(n, from))
        .collect();
    if sources.is_empty() {
        return Err(format!("no node or parameter matches '{from}'"));
    }
    let (fw, tw) = (from.matches('*').count(), to.matches('*').count());
    match (fw, tw) {
        (0, 0) => Ok(vec![(sources[0].clone(), to.to_string())]),
        (0, 1) => {
            let targets: Vec<(String, String)> = existing
                .iter()
                .filter(|n| name_matches_pattern(n, to))
                .map(|n| (sources[0].clone(), n.clone()))
                .collect();
            if targets.is_empty() {
                return Err(format!("no existing node matches '{to}'"));
            }
            Ok(targets)
        }
        (1, 1) => {
            let (fa, fb) = from.split_once('*').expect("one *");
            let (ta, tb) = to.split_once('*').expect("one *");
            Ok(sources
                .into_iter()
                .map(|n| {
                    let mid = &n[fa.len()..n.len() - fb.len()];
                    (n.clone(), format!("{ta}{mid}{tb}"))
                })
                .collect())
        }
        _ => Err(format!(
            "'{from}' and '{to}': use one '*' in both names, or one in the target only"
        )),
    }
}

/// The config of inline NDL made fit for the model: the placeholder inputs become the
/// model's nodes, the `input` and output lines go, and the result node loses the `.value`
/// the output gave it.
fn adapt_inline_config(config: &str, lhs: &str, placeholders: &[(String, String)]) -> String {
    let mut renames: Vec<(String, String)> = placeholders.to_vec();
    for l in config.lines() {
        if let Some(rest) = l.strip_prefix("output-node ") {
            let input = rest
                .split_whitespace()
                .find_map(|w| w.strip_prefix("input="))
                .unwrap_or("");
            if let Some(base) = input.strip_suffix(".value") {
                if base.starts_with(lhs) && !config.contains(&format!("name={base} ")) {
                    renames.push((input.to_string(), base.to_string()));
                }
            }
        }
    }
    let mut out = String::new();
    for l in config.lines() {
        let l = l.trim();
        if l.is_empty()
            || l.starts_with('#')
            || l.starts_with("output-node ")
            || l.starts_with("input-node ")
        {
            continue;
        }
        let mut line = String::new();
        let mut token = String::new();
        let flush = |token: &mut String, line: &mut String| {
            let t = renames
                .iter()
                .find(|(a, _)| a == token)
                .map_or(token.as_str(), |(_, b)| b.as_str());
            line.push_str(t);
            token.clear();
        };
        for c in l.chars() {
            if c.is_alphanumeric() || "_.-".contains(c) {
                token.push(c);
            } else {
                flush(&mut token, &mut line);
                line.push(c);
            }
        }
        flush(&mut token, &mut line);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_parse_with_names_arguments_and_comments() {
        let s = parse_stmt("L2=SBFF(L1.S, HDim, f(x, y)) # new", 3, "a.mel")
            .unwrap()
            .unwrap();
        assert_eq!(s.lhs.as_deref(), Some("L2"));
        assert_eq!(s.func.as_deref(), Some("SBFF"));
        assert_eq!(s.args.len(), 3);
        assert_eq!(s.args[2].1, "f(x, y)");
        let s = parse_stmt("SaveModel(m1, out.dnn, format=cntk)", 1, "a.mel")
            .unwrap()
            .unwrap();
        assert_eq!(s.args[2], (Some("format".into()), "cntk".into()));
        assert!(parse_stmt("  # only a comment", 1, "a.mel")
            .unwrap()
            .is_none());
        let e = parse_stmt("SetInput(a, 1", 4, "a.mel")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.mel:4: expected ')'"), "{e}");
        let e = parse_stmt("justaword", 2, "a.mel").unwrap_err().to_string();
        assert!(e.contains("a.mel:2: expected Command"), "{e}");
    }

    #[test]
    fn the_inline_config_reads_the_models_nodes() {
        let config = "component name=L2.W type=LinearComponent input-dim=64 output-dim=64\n\
            input-node name=melNode0 dim=64\n\
            component-node name=L2.T component=L2.W input=melNode0\n\
            input-node name=input dim=24\n\
            component-node name=L2.S.value component=L2.S.value input=Sum(L2.T, L2.B)\n\
            output-node name=L2 input=L2.S.value objective=linear\n";
        let out = adapt_inline_config(config, "L2", &[("melNode0".into(), "L1.S".into())]);
        assert_eq!(
            out,
            "component name=L2.W type=LinearComponent input-dim=64 output-dim=64\n\
             component-node name=L2.T component=L2.W input=L1.S\n\
             component-node name=L2.S component=L2.S input=Sum(L2.T, L2.B)\n"
        );
    }
}
