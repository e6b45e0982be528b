//! The architecture dictionary as a graph: layers (name, `@type`, properties) and the
//! connections `@outgoing_connections` spells out, checked against the layer table (which
//! outputs and inputs each type has), put in topological order.
//!
//! Brainstorm's rules kept here: `"LAYER"` means `"LAYER.default"`, `"LAYER.INPUT"` names an
//! input (the long form `"LAYER.inputs.INPUT"` is accepted too), an input takes at most one
//! connection, there is exactly one Input layer, and the connections form an acyclic graph
//! (recurrence lives inside layers). Every error points at the key or string concerned.

use super::json::{Member, Source, Spanned, Value};
use super::layers::{kind_named, LayerKind, NOT_LOWERED};
use crate::error::Result;

/// One layer of the dictionary.
pub struct Layer<'j> {
    pub name: String,
    /// Byte offset of the layer's key.
    pub at: usize,
    pub kind: &'static LayerKind,
    /// Properties other than `@type` and `@outgoing_connections`.
    pub props: Vec<&'j Member>,
    /// Output names of an Input layer (from `out_shapes`); the table's for other types.
    pub outputs: Vec<String>,
}

impl<'j> Layer<'j> {
    /// The property `key`, if given.
    pub fn prop(&self, key: &str) -> Option<&'j Member> {
        self.props.iter().copied().find(|m| m.key == key)
    }
}

/// One connection: output `output` of layer `from` feeds input `input` of layer `to`.
pub struct Connection {
    pub from: usize,
    pub output: String,
    pub to: usize,
    pub input: String,
    /// Byte offset of the target string in `@outgoing_connections`.
    pub at: usize,
}

/// The checked architecture.
pub struct Architecture<'j> {
    pub layers: Vec<Layer<'j>>,
    pub connections: Vec<Connection>,
    /// Layer indexes in topological order (file order among equals).
    pub order: Vec<usize>,
}

impl Architecture<'_> {
    /// The connection into input `input` of layer `to`.
    pub fn connection_into(&self, to: usize, input: &str) -> Option<&Connection> {
        self.connections
            .iter()
            .find(|c| c.to == to && c.input == input)
    }
    /// Every connection into input `input` of layer `to`, in the order Brainstorm lays their
    /// outputs side by side in the input's buffer: sorted by the source's path
    /// `LAYER.outputs.OUTPUT` (the sorted sources of its layout hub).
    pub fn connections_into(&self, to: usize, input: &str) -> Vec<&Connection> {
        let mut v: Vec<&Connection> = self
            .connections
            .iter()
            .filter(|c| c.to == to && c.input == input)
            .collect();
        let path = |c: &Connection| format!("{}.outputs.{}", self.layers[c.from].name, c.output);
        v.sort_by_key(|c| path(c));
        v
    }

    /// The connections out of output `output` of layer `from`.
    pub fn out_of<'s>(
        &'s self,
        from: usize,
        output: &'s str,
    ) -> impl Iterator<Item = &'s Connection> + 's {
        self.connections
            .iter()
            .filter(move |c| c.from == from && c.output == output)
    }
}

/// `"expected ..., found <kind>"` at a value.
pub fn wrong_kind(src: &Source<'_>, v: &Spanned, expected: &str) -> crate::error::Error {
    src.error(
        v.at,
        format!("expected {expected}, found {}", v.value.kind()),
    )
}

/// Reads and checks the dictionary.
pub fn read<'j>(src: &Source<'_>, root: &'j Spanned) -> Result<Architecture<'j>> {
    let Value::Object(members) = &root.value else {
        return Err(wrong_kind(
            src,
            root,
            "an object mapping layer names to their properties",
        ));
    };
    let mut layers = Vec::new();
    let mut outgoing: Vec<Option<&Spanned>> = Vec::new();
    for m in members {
        let Value::Object(props) = &m.value.value else {
            return Err(wrong_kind(
                src,
                &m.value,
                &format!("the properties of layer '{}' (an object)", m.key),
            ));
        };
        if !is_layer_name(&m.key) {
            return Err(src.error(
                m.key_at,
                format!(
                    "layer name '{}': expected a letter or '_' followed by letters, digits, \
                     '_' or '-' (dots separate a layer from its inputs and outputs)",
                    m.key
                ),
            ));
        }
        let ty = props
            .iter()
            .find(|p| p.key == "@type")
            .ok_or_else(|| src.error(m.key_at, format!("layer '{}' has no \"@type\"", m.key)))?;
        let Value::String(type_name) = &ty.value.value else {
            return Err(wrong_kind(src, &ty.value, "the layer type as a string"));
        };
        let kind = match kind_named(type_name) {
            Some(k) => k,
            None => {
                let msg = match NOT_LOWERED.iter().find(|(n, _)| n == type_name) {
                    Some((_, why)) => format!(
                        "layer '{}': Brainstorm's {type_name} layer cannot be lowered to nnet3: {why}",
                        m.key
                    ),
                    None => format!(
                        "layer '{}': unknown layer type \"{type_name}\" (known: {})",
                        m.key,
                        super::layers::KINDS
                            .iter()
                            .map(|k| k.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                return Err(src.error(ty.value.at, msg));
            }
        };
        let mut rest = Vec::new();
        let mut out = None;
        for p in props {
            match p.key.as_str() {
                "@type" => {}
                "@outgoing_connections" => out = Some(&p.value),
                k if kind.props.contains(&k) => rest.push(p),
                k => {
                    return Err(src.error(
                        p.key_at,
                        format!(
                            "layer '{}' ({}): unknown property \"{k}\" (expected {})",
                            m.key,
                            kind.name,
                            if kind.props.is_empty() {
                                "none besides @type and @outgoing_connections".to_string()
                            } else {
                                kind.props.join(", ")
                            }
                        ),
                    ))
                }
            }
        }
        let mut layer = Layer {
            name: m.key.clone(),
            at: m.key_at,
            kind,
            props: rest,
            outputs: kind.outputs.iter().map(|s| s.to_string()).collect(),
        };
        if kind.name == "Input" {
            layer.outputs = input_outputs(src, &layer)?;
        }
        layers.push(layer);
        outgoing.push(out);
    }
    let inputs: Vec<usize> = (0..layers.len())
        .filter(|&i| layers[i].kind.name == "Input")
        .collect();
    match inputs.as_slice() {
        [_] => {}
        [] => {
            return Err(src.error(
                root.at,
                "the architecture has no layer of @type Input (Brainstorm needs exactly one)",
            ))
        }
        [_, second, ..] => {
            return Err(src.error(
                layers[*second].at,
                "a second layer of @type Input (Brainstorm allows exactly one; give it more out_shapes instead)",
            ))
        }
    }
    let connections = connections(src, &layers, &outgoing)?;
    for (i, l) in layers.iter().enumerate() {
        for input in l.kind.inputs {
            if !connections.iter().any(|c| c.to == i && c.input == *input) {
                return Err(src.error(
                    l.at,
                    format!(
                        "layer '{}' ({}): input '{input}' is not connected (no layer lists \
                         \"{}{}\" in its @outgoing_connections)",
                        l.name,
                        l.kind.name,
                        l.name,
                        if *input == "default" {
                            String::new()
                        } else {
                            format!(".{input}")
                        }
                    ),
                ));
            }
        }
    }
    let order = topological_order(src, &layers, &connections)?;
    Ok(Architecture {
        layers,
        connections,
        order,
    })
}

/// Brainstorm layer names: Python-identifier-like; `-` is allowed too (a Kaldi name
/// character), `.` is not (it separates a layer from its inputs and outputs).
fn is_layer_name(name: &str) -> bool {
    crate::nnet::config_line::is_valid_name(name) && !name.contains('.')
}

/// The output names of the Input layer: the keys of its `out_shapes`.
fn input_outputs(src: &Source<'_>, layer: &Layer<'_>) -> Result<Vec<String>> {
    let shapes = layer.prop("out_shapes").ok_or_else(|| {
        src.error(
            layer.at,
            format!(
                "Input layer '{}' needs \"out_shapes\" (its outputs and their shapes)",
                layer.name
            ),
        )
    })?;
    let Value::Object(outs) = &shapes.value.value else {
        return Err(wrong_kind(
            src,
            &shapes.value,
            "an object mapping output names to shapes",
        ));
    };
    if outs.is_empty() {
        return Err(src.error(shapes.value.at, "out_shapes names no outputs"));
    }
    for o in outs {
        if !is_layer_name(&o.key) {
            return Err(src.error(
                o.key_at,
                format!("output name '{}' is not a valid name", o.key),
            ));
        }
    }
    Ok(outs.iter().map(|o| o.key.clone()).collect())
}

/// The connections of every layer's `@outgoing_connections`, checked.
fn connections(
    src: &Source<'_>,
    layers: &[Layer<'_>],
    outgoing: &[Option<&Spanned>],
) -> Result<Vec<Connection>> {
    let mut conns: Vec<Connection> = Vec::new();
    for (from, out) in outgoing.iter().enumerate() {
        let Some(out) = out else { continue };
        let Value::Object(members) = &out.value else {
            return Err(wrong_kind(
                src,
                out,
                "an object mapping output names to lists of inputs",
            ));
        };
        let fl = &layers[from];
        for m in members {
            if !fl.outputs.contains(&m.key) {
                return Err(src.error(
                    m.key_at,
                    format!(
                        "layer '{}' ({}) has no output '{}' (its outputs: {})",
                        fl.name,
                        fl.kind.name,
                        m.key,
                        fl.outputs.join(", ")
                    ),
                ));
            }
            let Value::Array(targets) = &m.value.value else {
                return Err(wrong_kind(
                    src,
                    &m.value,
                    "a list of inputs (\"LAYER\" or \"LAYER.INPUT\")",
                ));
            };
            for t in targets {
                let Value::String(s) = &t.value else {
                    return Err(wrong_kind(
                        src,
                        t,
                        "an input as \"LAYER\" or \"LAYER.INPUT\"",
                    ));
                };
                let (layer_name, input) = split_target(s);
                let Some(to) = layers.iter().position(|l| l.name == layer_name) else {
                    return Err(src.error(
                        t.at,
                        format!(
                            "dangling connection: '{}.{}' goes to \"{s}\", but there is no layer '{layer_name}'",
                            fl.name, m.key
                        ),
                    ));
                };
                let tl = &layers[to];
                if !tl.kind.inputs.contains(&input) {
                    return Err(src.error(
                        t.at,
                        format!(
                            "layer '{}' ({}) has no input '{input}' (its inputs: {})",
                            tl.name,
                            tl.kind.name,
                            if tl.kind.inputs.is_empty() {
                                "none".to_string()
                            } else {
                                tl.kind.inputs.join(", ")
                            }
                        ),
                    ));
                }
                if conns
                    .iter()
                    .any(|c| c.to == to && c.input == input && c.from == from && c.output == m.key)
                {
                    return Err(src.error(
                        t.at,
                        format!(
                            "'{}.{}' is connected to '{}.{input}' twice",
                            fl.name, m.key, tl.name
                        ),
                    ));
                }
                conns.push(Connection {
                    from,
                    output: m.key.clone(),
                    to,
                    input: input.to_string(),
                    at: t.at,
                });
            }
        }
    }
    Ok(conns)
}

/// `"L"` → (L, default); `"L.I"` and `"L.inputs.I"` → (L, I).
fn split_target(s: &str) -> (&str, &str) {
    match s.split_once('.') {
        None => (s, "default"),
        Some((l, rest)) => (l, rest.strip_prefix("inputs.").unwrap_or(rest)),
    }
}

/// Kahn's algorithm, taking the earliest layer in file order among those ready.
fn topological_order(
    src: &Source<'_>,
    layers: &[Layer<'_>],
    conns: &[Connection],
) -> Result<Vec<usize>> {
    let n = layers.len();
    let mut pending: Vec<usize> = vec![0; n];
    for c in conns {
        pending[c.to] += 1;
    }
    let mut done = vec![false; n];
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        let Some(next) = (0..n).find(|&i| !done[i] && pending[i] == 0) else {
            let stuck = (0..n).find(|&i| !done[i]).unwrap_or(0);
            return Err(src.error(
                layers[stuck].at,
                format!(
                    "the connections form a cycle through layer '{}' (Brainstorm networks are \
                     acyclic; recurrence lives inside Lstm and Recurrent layers)",
                    layers[stuck].name
                ),
            ));
        };
        done[next] = true;
        order.push(next);
        for c in conns.iter().filter(|c| c.from == next) {
            pending[c.to] -= 1;
        }
    }
    Ok(order)
}
