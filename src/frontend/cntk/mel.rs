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
//! Statements: `m=LoadModel(path)`, `SetDefaultModel(m)`, `SaveModel(m, path)`, `name=number`
//! (a variable for inline NDL), `name=Macro(args)` or `name=Function(args)` (inline NDL,
//! lowered with the `ndlMacros` of the edit block; arguments that name nodes of the model are
//! read from those nodes; new parameters drawn as NDL draws them), `SetInput(node, i, from)`
//! (input `i` of a node: 1 of a `Times`, 0 of a one-input node), `SetProperty(node,
//! needGradient, true|false)` (a learning-rate factor of 1 or 0 for the node's component or
//! the named Parameter), `CopyNode(from, to)` (the parameters of component `from` into `to`,
//! of the same type and size) and `DeleteNode(node)` (a node nothing reads; components left
//! unused go too).

use crate::error::{Error, Result};
use crate::nnet::edit::{name_matches_pattern, remove_orphan_components};
use crate::nnet::network::{NetworkNode, Nnet};
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
            "loadmodel" => {
                let name = s
                    .lhs
                    .clone()
                    .ok_or("LoadModel needs a name: m=LoadModel(path)")?;
                let path = Self::positional(s, 0, "a file name")?;
                let nnet = (self.read_model)(&path).map_err(|e| e.to_string())?;
                self.log.push(format!("loaded {path} as {name}"));
                self.models.insert(name, nnet);
            }
            "setdefaultmodel" => {
                let m = Self::positional(s, 0, "a model name")?;
                if !self.models.contains_key(&m) {
                    return Err(format!("no model named {m}"));
                }
                self.default = Some(m);
            }
            "savemodel" => {
                let m = Self::positional(s, 0, "a model name")?;
                let path = Self::positional(s, 1, "a file name")?;
                let nnet = self.models.get(&m).ok_or(format!("no model named {m}"))?;
                nnet.validate().map_err(|e| format!("model {m}: {e}"))?;
                nnet.write_model_file(&path, true)
                    .map_err(|e| e.to_string())?;
                self.log.push(format!("saved {m} to {path}"));
            }
            "setinput" | "setnodeinput" => self.set_input(s)?,
            "setproperty" | "setnodeproperty" => self.set_property(s)?,
            "copynode" => self.copy_node(s)?,
            "deletenode" => self.delete_node(s)?,
            _ => self.inline_ndl(s)?,
        }
        Ok(())
    }

    /// The nodes of model `m` matching `pattern`.
    fn matching_nodes(&self, m: &str, pattern: &str) -> std::result::Result<Vec<String>, String> {
        let nnet = &self.models[m];
        let v: Vec<String> = nnet
            .node_names
            .iter()
            .filter(|n| name_matches_pattern(n, pattern))
            .cloned()
            .collect();
        if v.is_empty() {
            return Err(format!("no node of model {m} matches '{pattern}'"));
        }
        Ok(v)
    }

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
        let nodes = self.matching_nodes(&m, pattern)?;
        let nnet = self.models.get_mut(&m).expect("checked");
        if nnet.node_index(from).is_none() {
            return Err(format!("model {m} has no node '{from}'"));
        }
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
            let times = matches!(
                comp.type_name(),
                "LinearComponent" | "AffineComponent" | "NaturalGradientAffineComponent"
            );
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
        let mut edited = nnet.clone();
        edited
            .apply_config_text(&lines, "<SetInput>", &mut self.rng)
            .map_err(|e| e.to_string())?;
        *nnet = edited;
        self.log
            .push(format!("SetInput: {} now read {from}", nodes.join(", ")));
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

    fn set_property(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let target = Self::positional(s, 0, "a node")?;
        let prop = Self::positional(s, 1, "a property")?;
        let value = Self::positional(s, 2, "a value")?;
        if !prop.eq_ignore_ascii_case("needGradient") {
            return Err(format!(
                "SetProperty({prop}): only needGradient is supported"
            ));
        }
        let on = match value.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => true,
            "false" | "f" | "0" => false,
            _ => return Err(format!("needGradient={value}: expected true or false")),
        };
        let (m, pattern) = self.split_model(&target)?;
        let comps = self.components_of(&m, pattern)?;
        let nnet = self.models.get_mut(&m).expect("checked");
        let mut n = 0;
        for c in comps {
            if let Some(u) = nnet.components[c].as_updatable_mut() {
                u.common_mut().learning_rate_factor = if on { 1.0 } else { 0.0 };
                n += 1;
            }
        }
        self.log.push(format!(
            "SetProperty: needGradient={on} for {n} parameter component(s) of '{pattern}'"
        ));
        Ok(())
    }

    fn copy_node(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let from = Self::positional(s, 0, "the node to copy")?;
        let to = Self::positional(s, 1, "the node to copy into")?;
        let (mf, pf) = self.split_model(&from)?;
        let (mt, pt) = self.split_model(&to)?;
        let src = self.components_of(&mf, pf)?;
        let dst = self.components_of(&mt, pt)?;
        let ([a], [b]) = (src.as_slice(), dst.as_slice()) else {
            return Err("CopyNode copies one parameter component into one other".into());
        };
        let c = self.models[&mf].components[*a].clone();
        let target = &mut self.models.get_mut(&mt).expect("checked").components[*b];
        if c.type_name() != target.type_name()
            || c.input_dim() != target.input_dim()
            || c.output_dim() != target.output_dim()
        {
            return Err(format!(
                "CopyNode: {from} ({} {}x{}) and {to} ({} {}x{}) differ",
                c.type_name(),
                c.input_dim(),
                c.output_dim(),
                target.type_name(),
                target.input_dim(),
                target.output_dim()
            ));
        }
        *target = c;
        self.log.push(format!("CopyNode: {from} into {to}"));
        Ok(())
    }

    fn delete_node(&mut self, s: &Stmt) -> std::result::Result<(), String> {
        let target = Self::positional(s, 0, "a node")?;
        let (m, pattern) = self.split_model(&target)?;
        let nodes = self.matching_nodes(&m, pattern)?;
        let nnet = self.models.get_mut(&m).expect("checked");
        let config = nnet.config_lines();
        for n in &nodes {
            // Nothing else may read it.
            let reader = config.iter().find(|l| {
                !l.contains(&format!("name={n} "))
                    && l.split(|c: char| !(c.is_alphanumeric() || "_.-".contains(c)))
                        .any(|t| t == n)
            });
            if let Some(l) = reader {
                return Err(format!("'{n}' is read by: {l}"));
            }
        }
        let keep: Vec<String> = config
            .iter()
            .filter(|l| !nodes.iter().any(|n| l.contains(&format!("name={n} "))))
            .cloned()
            .collect();
        let mut fresh = Nnet {
            components: nnet.components.clone(),
            component_names: nnet.component_names.clone(),
            ..Default::default()
        };
        fresh
            .apply_config_text(&(keep.join("\n") + "\n"), "<DeleteNode>", &mut self.rng)
            .map_err(|e| e.to_string())?;
        remove_orphan_components(&mut fresh);
        *nnet = fresh;
        self.log.push(format!("DeleteNode: {}", nodes.join(", ")));
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
        let mut edited = nnet.clone();
        edited
            .apply_config_text(&text, "<inline NDL>", &mut self.rng)
            .map_err(|e| e.to_string())?;
        *nnet = edited;
        self.log.push(format!("{lhs}: added by inline NDL"));
        Ok(())
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

    const MACROS: &str = "BFF(in, rows, cols)\n{\n B=Parameter(rows, init=fixedvalue, value=0)\n \
        W=Parameter(rows, cols)\n T=Times(W, in)\n BFF=Plus(T, B)\n}\n\
        SBFF(in, rows, cols)\n{\n BFF=BFF(in, rows, cols)\n S=Sigmoid(BFF)\n}\n";

    fn model() -> Nnet {
        let ndl = format!(
            "{MACROS}features=Input(4, tag=feature)\nlabels=Input(3, tag=label)\n\
             L1=SBFF(features, 5, 4)\nO=BFF(L1, 3, 5)\n\
             CE=CrossEntropyWithSoftmax(labels, O, tag=criteria)\n"
        );
        crate::frontend::ndl::read_ndl(&ndl, "m.ndl", &mut crate::random::seeded_rng(1)).unwrap()
    }

    fn run(text: &str) -> Result<Nnet> {
        let read = |_: &str| Ok(model());
        let mut mel = Mel::new("e.mel", MACROS.to_string(), 2, &read);
        mel.run(text)?;
        Ok(mel.model("m").expect("loaded").clone())
    }

    fn lr_factor(n: &Nnet, comp: &str) -> f32 {
        let i = n.component_index(comp).unwrap();
        n.components[i]
            .as_updatable()
            .unwrap()
            .common()
            .learning_rate_factor
    }

    #[test]
    fn editing_statements_act_on_the_ndl_names() {
        // A layer inserted between L1 and the output, as discriminative pre-training does.
        let n = run(
            "m=LoadModel(x)\nSetDefaultModel(m)\nH=5\nL2=SBFF(L1.S, H, H)\n\
                     SetInput(O.*T, 1, L2.S)\n",
        )
        .unwrap();
        let lines = n.config_lines();
        assert!(
            lines.contains(&"component-node name=O.T component=O.W input=L2.S".to_string()),
            "{lines:?}"
        );
        assert!(lines
            .contains(&"component-node name=L2.BFF.T component=L2.BFF.W input=L1.S".to_string()));
        // needGradient=false freezes a Parameter; the node form reaches its component.
        let n = run(
            "m=LoadModel(x)\nSetProperty(L1.BFF.W, needGradient, false)\n\
                     SetProperty(m.O.T, needGradient, false)\n",
        )
        .unwrap();
        assert_eq!(lr_factor(&n, "L1.BFF.W"), 0.0);
        assert_eq!(lr_factor(&n, "O.W"), 0.0);
        assert_eq!(lr_factor(&n, "L1.BFF.B"), 1.0);
        // CopyNode copies parameters between components of one shape.
        let n = run("m=LoadModel(x)\nL2=SBFF(L1.S, 5, 5)\nCopyNode(L2.BFF.W, L2.BFF.W)\n").unwrap();
        assert!(n.component_index("L2.BFF.W").is_some());
        // DeleteNode removes a node nothing reads (and its component).
        let n = run("m=LoadModel(x)\nL2=SBFF(L1.S, 5, 5)\nDeleteNode(L2.S)\n").unwrap();
        assert!(n.node_index("L2.S").is_none());
        assert!(n.component_index("L2.S").is_none());
        for (text, want) in [
            ("SetDefaultModel(m)\n", "e.mel:1: no model named m"),
            (
                "m=LoadModel(x)\nSetInput(Nope, 0, L1.S)\n",
                "e.mel:2: no node of model m matches 'Nope'",
            ),
            (
                "m=LoadModel(x)\nSetInput(O.T, 0, L1.S)\n",
                "e.mel:2: 'O.T' (LinearComponent) takes its data as input 1",
            ),
            (
                "m=LoadModel(x)\nSetInput(O.T, 1, Ghost)\n",
                "e.mel:2: model m has no node 'Ghost'",
            ),
            (
                "m=LoadModel(x)\nDeleteNode(L1.S)\n",
                "e.mel:2: 'L1.S' is read by",
            ),
            (
                "m=LoadModel(x)\nSetProperty(L1.S, learningRate, 0)\n",
                "only needGradient",
            ),
            (
                "m=LoadModel(x)\nCopyNode(L1.BFF.W, O.W)\n",
                "e.mel:2: CopyNode: L1.BFF.W (LinearComponent 4x5) and O.W",
            ),
            (
                "m=LoadModel(x)\nL1=SBFF(L1.S, 5, 5)\n",
                "makes 'L1.BFF.W', which the model has already",
            ),
        ] {
            let e = run(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
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
