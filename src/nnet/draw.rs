//! A picture of a network (`compnet draw`): its nodes (input nodes, component nodes, dim-range
//! nodes, output nodes) as boxes with their text, and an edge from each node a descriptor
//! reads to the node that reads it, written as Graphviz DOT text or as an SVG laid out here.
//!
//! A component node's hidden descriptor node is not drawn: the component node's box shows
//! the descriptor (`input=...`), the component's type, its input and output dimensions and
//! its parameter count, and each edge into it is labelled with what the descriptor does to
//! that source (`Offset(·, -1)`, `IfDefined(...)`, `Round`, `ReplaceIndex`, `Switch`, `Sum`,
//! `Failover`, `Scale`; `·` stands for the source). Two nodes are joined by one edge, whose
//! label lists every use of the source in order.
//!
//! The SVG layout is layered by depth: the edges that close a cycle (a recurrence such as
//! `IfDefined(Offset(lstm.c, -1))`), found by a depth-first search in node order, are back
//! edges; the others form a DAG whose longest path from a source gives each node its layer,
//! drawn top to bottom. Within a layer the boxes are ordered by the mean position of their
//! predecessors (then by node order). Back edges are drawn dashed, routed around the right
//! side. Everything is computed from the network in node order, so the output is the same
//! on every run.

use super::descriptor::{ForwardingDescriptor, IndexVar, SumDescriptor};
use super::network::{NetworkNode, Nnet, ObjectiveType};
use std::collections::HashMap;
use std::fmt::Write;

/// What kind of node a box is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoxKind {
    Input,
    Component,
    DimRange,
    Output,
}

/// A drawn node: its name and the lines of text in its box (the first is the name).
#[derive(Clone, Debug)]
pub struct DrawnNode {
    pub name: String,
    pub kind: BoxKind,
    pub lines: Vec<String>,
}

/// An edge between drawn nodes (indexes into [`Picture::nodes`]).
#[derive(Clone, Debug)]
pub struct DrawnEdge {
    pub from: usize,
    pub to: usize,
    /// What the descriptor does to the source, per use; empty for a plain use.
    pub label: String,
    /// Closes a cycle (a recurrence): drawn against the layering.
    pub back: bool,
}

/// The nodes and edges of a network as they are drawn.
#[derive(Clone, Debug)]
pub struct Picture {
    pub nodes: Vec<DrawnNode>,
    pub edges: Vec<DrawnEdge>,
}

/// The source marker in edge labels.
const DOT: &str = "·";

impl Picture {
    /// The picture of `nnet`.
    pub fn of(nnet: &Nnet) -> Picture {
        let mut nodes = Vec::new();
        // Network node → drawn node; a component's hidden descriptor node maps to it too.
        let mut drawn = vec![usize::MAX; nnet.nodes.len()];
        for (n, d) in drawn.iter_mut().enumerate() {
            if nnet.is_component_input_node(n) {
                continue;
            }
            *d = nodes.len();
            nodes.push(DrawnNode {
                name: nnet.node_names[n].clone(),
                kind: match nnet.nodes[n] {
                    NetworkNode::Input { .. } => BoxKind::Input,
                    NetworkNode::Component { .. } => BoxKind::Component,
                    NetworkNode::DimRange { .. } => BoxKind::DimRange,
                    NetworkNode::Descriptor { .. } => BoxKind::Output,
                },
                lines: box_lines(nnet, n),
            });
        }
        let mut edges: Vec<DrawnEdge> = Vec::new();
        let mut edge_of: HashMap<(usize, usize), usize> = HashMap::new();
        for n in 0..nnet.nodes.len() {
            if nnet.is_component_input_node(n) {
                continue;
            }
            let mut uses: Vec<(usize, String)> = Vec::new();
            match &nnet.nodes[n] {
                NetworkNode::Input { .. } => {}
                NetworkNode::DimRange { input_node, .. } => uses.push((*input_node, DOT.into())),
                NetworkNode::Descriptor { descriptor, .. } => {
                    for part in &descriptor.parts {
                        sum_uses(part, &|s| s, &mut uses);
                    }
                }
                NetworkNode::Component { .. } => {
                    if let Some(NetworkNode::Descriptor { descriptor, .. }) =
                        n.checked_sub(1).map(|p| &nnet.nodes[p])
                    {
                        for part in &descriptor.parts {
                            sum_uses(part, &|s| s, &mut uses);
                        }
                    }
                }
            }
            for (src, text) in uses {
                let Some(&from) = drawn.get(src).filter(|&&d| d != usize::MAX) else {
                    continue;
                };
                let key = (from, drawn[n]);
                let e = *edge_of.entry(key).or_insert_with(|| {
                    edges.push(DrawnEdge {
                        from,
                        to: key.1,
                        label: String::new(),
                        back: false,
                    });
                    edges.len() - 1
                });
                let label = &mut edges[e].label;
                if !label.is_empty() {
                    label.push_str(", ");
                }
                label.push_str(&text);
            }
        }
        for e in &mut edges {
            if e.label.split(", ").all(|u| u == DOT) {
                e.label.clear();
            }
        }
        let mut picture = Picture { nodes, edges };
        for e in picture.back_edges() {
            picture.edges[e].back = true;
        }
        picture
    }

    /// The edges that close a cycle, by a depth-first search from each node in order.
    fn back_edges(&self) -> Vec<usize> {
        let n = self.nodes.len();
        let mut out_edges = vec![Vec::new(); n];
        for (i, e) in self.edges.iter().enumerate() {
            out_edges[e.from].push(i);
        }
        // 0 unvisited, 1 on the stack, 2 done.
        let mut state = vec![0u8; n];
        let mut back = Vec::new();
        for root in 0..n {
            if state[root] != 0 {
                continue;
            }
            state[root] = 1;
            let mut stack = vec![(root, 0usize)];
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if let Some(&e) = out_edges[node].get(*next) {
                    *next += 1;
                    let to = self.edges[e].to;
                    match state[to] {
                        0 => {
                            state[to] = 1;
                            stack.push((to, 0));
                        }
                        1 => back.push(e),
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    stack.pop();
                }
            }
        }
        back.sort_unstable();
        back
    }

    /// The layer of each node: the longest path to it from a node with no forward input.
    pub fn layers(&self) -> Vec<usize> {
        let n = self.nodes.len();
        let mut indegree = vec![0usize; n];
        let mut out_edges = vec![Vec::new(); n];
        for e in self.edges.iter().filter(|e| !e.back) {
            indegree[e.to] += 1;
            out_edges[e.from].push(e.to);
        }
        let mut layer = vec![0usize; n];
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| indegree[i] == 0).collect();
        while let Some(i) = ready.pop_first() {
            for &j in &out_edges[i] {
                layer[j] = layer[j].max(layer[i] + 1);
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        layer
    }

    /// The picture as Graphviz DOT text.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph nnet {\n");
        s += "  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\", fontsize=10];\n";
        s += "  edge [fontname=\"monospace\", fontsize=9];\n";
        for node in &self.nodes {
            let label: Vec<String> = node.lines.iter().map(|l| dot_escape(l)).collect();
            let _ = writeln!(
                s,
                "  \"{}\" [label=\"{}\", fillcolor=\"{}\"];",
                dot_escape(&node.name),
                label.join("\\n"),
                fill(node.kind)
            );
        }
        for e in &self.edges {
            let mut attrs = Vec::new();
            if !e.label.is_empty() {
                attrs.push(format!("label=\"{}\"", dot_escape(&e.label)));
            }
            if e.back {
                attrs.push("style=dashed, constraint=false".to_string());
            }
            let attrs = if attrs.is_empty() {
                String::new()
            } else {
                format!(" [{}]", attrs.join(", "))
            };
            let _ = writeln!(
                s,
                "  \"{}\" -> \"{}\"{attrs};",
                dot_escape(&self.nodes[e.from].name),
                dot_escape(&self.nodes[e.to].name)
            );
        }
        s += "}\n";
        s
    }

    /// The picture as an SVG document, laid out by [`Self::layers`].
    pub fn to_svg(&self) -> String {
        let layout = Layout::of(self);
        let mut s = String::new();
        let _ = writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"monospace\" font-size=\"{FONT}\">",
            w = layout.width,
            h = layout.height
        );
        s += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
              markerWidth=\"8\" markerHeight=\"8\" orient=\"auto\">\
              <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#333\"/></marker></defs>\n";
        let _ = writeln!(
            s,
            "<rect width=\"{}\" height=\"{}\" fill=\"white\"/>",
            layout.width, layout.height
        );
        for (i, e) in self.edges.iter().enumerate() {
            let (a, b) = (&layout.boxes[e.from], &layout.boxes[e.to]);
            let (path, lx, ly) = if e.back {
                // Around the right side, in a lane of its own.
                let lane = layout.width - MARGIN - (layout.lanes - layout.lane[i]) * LANE;
                let (x1, y1) = (a.x + a.w, a.y + a.h / 2);
                let (x2, y2) = (b.x + b.w, b.y + b.h / 2);
                (
                    format!("M{x1},{y1} C{lane},{y1} {lane},{y2} {x2},{y2}"),
                    lane,
                    (y1 + y2) / 2,
                )
            } else {
                let (x1, y1) = (a.x + a.w / 2, a.y + a.h);
                let (x2, y2) = (b.x + b.w / 2, b.y);
                (
                    format!("M{x1},{y1} L{x2},{y2}"),
                    (x1 + x2) / 2,
                    (y1 + y2) / 2,
                )
            };
            let dash = if e.back {
                " stroke-dasharray=\"6,4\""
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "<path d=\"{path}\" fill=\"none\" stroke=\"#333\"{dash} marker-end=\"url(#arrow)\">\
                 <title>{} -&gt; {}</title></path>",
                xml_escape(&self.nodes[e.from].name),
                xml_escape(&self.nodes[e.to].name)
            );
            if !e.label.is_empty() {
                let _ = writeln!(
                    s,
                    "<text x=\"{lx}\" y=\"{ly}\" font-size=\"{}\" fill=\"#555\" \
                     text-anchor=\"middle\">{}</text>",
                    FONT - 2,
                    xml_escape(&e.label)
                );
            }
        }
        for (node, b) in self.nodes.iter().zip(&layout.boxes) {
            let _ = writeln!(s, "<g>");
            let _ = writeln!(s, "<title>{}</title>", xml_escape(&node.name));
            let _ = writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"5\" fill=\"{}\" \
                 stroke=\"#333\"/>",
                b.x,
                b.y,
                b.w,
                b.h,
                fill(node.kind)
            );
            for (k, line) in node.lines.iter().enumerate() {
                let weight = if k == 0 { " font-weight=\"bold\"" } else { "" };
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{}\"{weight}>{}</text>",
                    b.x + PAD,
                    b.y + PAD + (k + 1) * LINE - 4,
                    xml_escape(line)
                );
            }
            let _ = writeln!(s, "</g>");
        }
        s += "</svg>\n";
        s
    }
}

/// The text lines of node `n`'s box.
fn box_lines(nnet: &Nnet, n: usize) -> Vec<String> {
    let name = nnet.node_names[n].clone();
    let dim = nnet.checked_node_dim(n).unwrap_or(0);
    let input_of = |d: usize| match &nnet.nodes[d] {
        NetworkNode::Descriptor { descriptor, .. } => {
            wrap(&format!("input={}", descriptor.to_config(&nnet.node_names)))
        }
        _ => Vec::new(),
    };
    let mut lines = vec![name];
    match &nnet.nodes[n] {
        NetworkNode::Input { dim } => {
            lines.push("input-node".into());
            lines.push(format!("dim={dim}"));
        }
        NetworkNode::Descriptor { objective, .. } => {
            lines.push("output-node".into());
            let objective = match objective {
                ObjectiveType::Linear => "linear",
                ObjectiveType::Quadratic => "quadratic",
            };
            lines.push(format!("dim={dim} objective={objective}"));
            lines.extend(input_of(n));
        }
        NetworkNode::Component { component } => {
            let c = &nnet.components[*component];
            lines.push(c.type_name().to_string());
            let cname = &nnet.component_names[*component];
            if *cname != nnet.node_names[n] {
                lines.push(format!("component={cname}"));
            }
            lines.push(format!("dims {} -> {}", c.input_dim(), c.output_dim()));
            let params = c.as_updatable().map_or(0, |u| u.num_parameters());
            lines.push(format!("parameters={params}"));
            if let Some(d) = n.checked_sub(1) {
                lines.extend(input_of(d));
            }
        }
        NetworkNode::DimRange {
            input_node,
            dim_offset,
            dim,
        } => {
            lines.push("dim-range-node".into());
            lines.push(format!(
                "{}[{dim_offset}..{}] dim={dim}",
                nnet.node_names[*input_node],
                dim_offset + dim
            ));
        }
    }
    lines
}

/// Longest line of a box, in characters; longer descriptors are broken after a comma.
const WRAP: usize = 56;

/// `text` broken into lines of at most [`WRAP`] characters after ", " where it can be.
fn wrap(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for piece in text.split_inclusive(", ") {
        if !line.trim().is_empty() && line.chars().count() + piece.chars().count() > WRAP {
            lines.push(line.trim_end().to_string());
            line = String::from("  ");
        }
        line.push_str(piece);
    }
    if !line.trim().is_empty() {
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Adds to `uses` each node `s` reads, with the text of what it does to the node (`·` for
/// the node itself); `wrap` puts a use's text inside the expressions around it.
fn sum_uses(s: &SumDescriptor, wrap: &dyn Fn(String) -> String, uses: &mut Vec<(usize, String)>) {
    match s {
        SumDescriptor::Simple(f) => fwd_uses(f, wrap, uses),
        SumDescriptor::Optional(x) => sum_uses(x, &|t| wrap(format!("IfDefined({t})")), uses),
        SumDescriptor::Sum(a, b) => {
            sum_uses(a, &|t| wrap(format!("Sum({t}, …)")), uses);
            sum_uses(b, &|t| wrap(format!("Sum(…, {t})")), uses);
        }
        SumDescriptor::Failover(a, b) => {
            sum_uses(a, &|t| wrap(format!("Failover({t}, …)")), uses);
            sum_uses(b, &|t| wrap(format!("Failover(…, {t})")), uses);
        }
        SumDescriptor::Const { .. } => {}
    }
}

fn fwd_uses(
    f: &ForwardingDescriptor,
    wrap: &dyn Fn(String) -> String,
    uses: &mut Vec<(usize, String)>,
) {
    match f {
        ForwardingDescriptor::Simple { node, scale } => {
            let t = if *scale == 1.0 {
                DOT.to_string()
            } else {
                format!("Scale({scale}, {DOT})")
            };
            uses.push((*node, wrap(t)));
        }
        ForwardingDescriptor::Offset {
            src,
            t_offset,
            x_offset,
        } => {
            let o = if *x_offset == 0 {
                format!("{t_offset}")
            } else {
                format!("{t_offset}, {x_offset}")
            };
            fwd_uses(src, &|t| wrap(format!("Offset({t}, {o})")), uses);
        }
        ForwardingDescriptor::Switch(v) => {
            let n = v.len();
            for (i, d) in v.iter().enumerate() {
                let k = i + 1;
                fwd_uses(d, &|t| wrap(format!("Switch({t} as {k} of {n})")), uses);
            }
        }
        ForwardingDescriptor::Round { src, t_modulus } => {
            fwd_uses(src, &|t| wrap(format!("Round({t}, {t_modulus})")), uses)
        }
        ForwardingDescriptor::ReplaceIndex { src, var, value } => {
            let v = match var {
                IndexVar::T => "t",
                IndexVar::X => "x",
            };
            fwd_uses(
                src,
                &|t| wrap(format!("ReplaceIndex({t}, {v}, {value})")),
                uses,
            )
        }
    }
}

fn fill(kind: BoxKind) -> &'static str {
    match kind {
        BoxKind::Input => "#dff0d8",
        BoxKind::Component => "#d9edf7",
        BoxKind::DimRange => "#fcf8e3",
        BoxKind::Output => "#f2dede",
    }
}

/// `s` inside a DOT string.
fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `s` as XML character data or attribute text.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// Font size, line height, padding inside a box, the gaps between boxes and between layers,
/// the margin and the spacing of the back edges' lanes, in pixels.
const FONT: usize = 12;
const LINE: usize = 15;
const CHAR: usize = 7;
const PAD: usize = 6;
const GAP: usize = 30;
const LAYER_GAP: usize = 50;
const MARGIN: usize = 20;
const LANE: usize = 14;

/// A box's place: top-left corner, width and height.
struct Place {
    x: usize,
    y: usize,
    w: usize,
    h: usize,
}

/// Where everything goes in the SVG.
struct Layout {
    boxes: Vec<Place>,
    /// Per edge: the lane of a back edge (1 = innermost).
    lane: Vec<usize>,
    lanes: usize,
    width: usize,
    height: usize,
}

impl Layout {
    fn of(p: &Picture) -> Layout {
        let layer = p.layers();
        let num_layers = layer.iter().max().map_or(0, |m| m + 1);
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); num_layers];
        for (i, &l) in layer.iter().enumerate() {
            rows[l].push(i);
        }
        let mut boxes: Vec<Place> = p
            .nodes
            .iter()
            .map(|n| Place {
                x: 0,
                y: 0,
                w: n.lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) * CHAR + 2 * PAD,
                h: n.lines.len() * LINE + 2 * PAD - 4,
            })
            .collect();
        // Order each layer by the mean position of its forward predecessors.
        let mut preds = vec![Vec::new(); p.nodes.len()];
        for e in p.edges.iter().filter(|e| !e.back) {
            preds[e.to].push(e.from);
        }
        let mut position = vec![0f64; p.nodes.len()];
        for row in &mut rows {
            let key = |i: usize| -> f64 {
                if preds[i].is_empty() {
                    f64::MAX
                } else {
                    preds[i].iter().map(|&j| position[j]).sum::<f64>() / preds[i].len() as f64
                }
            };
            let mut keyed: Vec<(f64, usize)> = row.iter().map(|&i| (key(i), i)).collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            *row = keyed.into_iter().map(|(_, i)| i).collect();
            for (k, &i) in row.iter().enumerate() {
                position[i] = k as f64;
            }
        }
        let widths: Vec<usize> = rows
            .iter()
            .map(|row| {
                row.iter().map(|&i| boxes[i].w).sum::<usize>() + GAP * row.len().saturating_sub(1)
            })
            .collect();
        let content = widths.iter().copied().max().unwrap_or(0);
        let mut y = MARGIN;
        for (row, width) in rows.iter().zip(&widths) {
            let mut x = MARGIN + (content - width) / 2;
            let mut tallest = 0;
            for &i in row {
                boxes[i].x = x;
                boxes[i].y = y;
                x += boxes[i].w + GAP;
                tallest = tallest.max(boxes[i].h);
            }
            y += tallest + LAYER_GAP;
        }
        let mut lane = vec![0; p.edges.len()];
        let mut lanes = 0;
        for (i, e) in p.edges.iter().enumerate() {
            if e.back {
                lanes += 1;
                lane[i] = lanes;
            }
        }
        Layout {
            boxes,
            lane,
            lanes,
            width: 2 * MARGIN + content + if lanes > 0 { GAP + lanes * LANE } else { 0 },
            height: (y + MARGIN).saturating_sub(LAYER_GAP).max(2 * MARGIN),
        }
    }
}
