//! `compnet draw`: the DOT text of a TDNN has every node and every edge of the network (and no
//! other), the SVG is well-formed XML naming every node, a recurrent network's recurrences are
//! drawn as back edges, a config and the model initialised from it give the same picture,
//! the output is the same on every run, and bad input is a clear error that writes nothing.

use compnet::nnet::{NetworkNode, Nnet};
use compnet::testing::cli;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn example(rel: &str) -> String {
    format!("{ROOT}/examples/{rel}")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Draws `input` into `out` and returns the file's text.
fn draw(input: &str, out: &Path) -> String {
    cli::succeeds(BIN, &["draw", input, s(out)]);
    std::fs::read_to_string(out).unwrap()
}

fn network(config: &str) -> Nnet {
    compnet::frontend::read_network(config, None, &mut compnet::random::seeded_rng(0)).unwrap()
}

/// The drawn nodes (all but the components' hidden descriptor nodes) and the edges: each
/// distinct (source, reader) pair, a component node reading through its descriptor node.
fn graph(nnet: &Nnet) -> (BTreeSet<String>, BTreeSet<(String, String)>) {
    let mut nodes = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for n in 0..nnet.nodes.len() {
        if nnet.is_component_input_node(n) {
            continue;
        }
        let name = nnet.node_names[n].clone();
        let reads = match nnet.nodes[n] {
            NetworkNode::Component { .. } => nnet.node_inputs(n - 1),
            _ => nnet.node_inputs(n),
        };
        for r in reads {
            edges.insert((nnet.node_names[r].clone(), name.clone()));
        }
        nodes.insert(name);
    }
    (nodes, edges)
}

/// The nodes (with their labels) and edges (with their attributes) of DOT text written one
/// statement a line, as `compnet draw` writes it.
type Dot = (BTreeMap<String, String>, Vec<(String, String, String)>);

fn parse_dot(text: &str) -> Dot {
    let quoted = |s: &str| -> (String, usize) {
        assert!(s.starts_with('"'), "{s}");
        let end = s[1..].find('"').unwrap() + 1;
        (s[1..end].to_string(), end + 1)
    };
    let mut nodes = BTreeMap::new();
    let mut edges = Vec::new();
    assert!(text.starts_with("digraph nnet {\n") && text.ends_with("}\n"));
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let (a, k) = quoted(line);
        let rest = &line[k..];
        if let Some(rest) = rest.strip_prefix(" -> ") {
            let (b, k) = quoted(rest);
            edges.push((a, b, rest[k..].to_string()));
        } else {
            assert!(
                nodes.insert(a.clone(), rest.to_string()).is_none(),
                "{a} twice"
            );
        }
    }
    (nodes, edges)
}

#[test]
fn dot_of_a_tdnn_has_every_node_and_edge() {
    let dir = tempfile::tempdir().unwrap();
    let config = example("tdnn/net.config");
    let dot = draw(&config, &dir.path().join("net.dot"));
    let (nodes, edges) = parse_dot(&dot);
    let (want_nodes, want_edges) = graph(&network(&config));
    assert_eq!(nodes.keys().cloned().collect::<BTreeSet<_>>(), want_nodes);
    let got: BTreeSet<(String, String)> = edges
        .iter()
        .map(|(a, b, _)| (a.clone(), b.clone()))
        .collect();
    assert_eq!(got, want_edges);
    assert_eq!(edges.len(), want_edges.len(), "one edge per pair:\n{dot}");
    assert_eq!(edges.len(), 7);
    // The splicing descriptor on its edge, the component's type, dims and parameter count in
    // its box (65·64 + 64 parameters).
    let splice = &edges
        .iter()
        .find(|(a, b, _)| a == "input" && b == "tdnn1.affine")
        .unwrap()
        .2;
    assert!(
        splice.contains("Offset(·, -2), Offset(·, -1), ·, Offset(·, 1), Offset(·, 2)"),
        "{splice}"
    );
    let affine = &nodes["tdnn1.affine"];
    for want in [
        "NaturalGradientAffineComponent",
        "dims 65 -> 64",
        "parameters=4224",
        "input=Append(Offset(input, -2)",
    ] {
        assert!(affine.contains(want), "{want}: {affine}");
    }
    assert!(nodes["output"].contains("output-node"));
    assert!(nodes["input"].contains("dim=13"));
    assert!(!dot.contains("dashed"), "a TDNN has no recurrence:\n{dot}");
}

/// A small XML well-formedness check: one root element, tags nested and closed, attribute
/// values quoted, no `<` or bare `&` in text or values. Returns the text of every element.
fn well_formed(xml: &str) -> Vec<String> {
    let body = xml
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .expect("XML declaration");
    let check_text = |t: &str| {
        assert!(!t.contains('<'), "{t}");
        let mut rest = t;
        while let Some(i) = rest.find('&') {
            let entity = &rest[i..rest[i..].find(';').map_or(rest.len(), |j| i + j + 1)];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity),
                "bad entity {entity}"
            );
            rest = &rest[i + 1..];
        }
    };
    let mut stack: Vec<String> = Vec::new();
    let mut texts = Vec::new();
    let mut roots = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            assert!(rest.trim().is_empty(), "text after the root: {rest}");
            break;
        };
        let text = &rest[..open];
        check_text(text);
        if !stack.is_empty() && !text.trim().is_empty() {
            texts.push(text.to_string());
        }
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            continue;
        }
        let empty = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let name = &tag[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "tag name {name}"
        );
        // Attributes: name="value" pairs, each name once.
        let mut attrs = tag[name_end..].trim();
        let mut seen = BTreeSet::new();
        while !attrs.is_empty() {
            let eq = attrs.find("=\"").expect("attribute without a quoted value");
            let key = attrs[..eq].trim();
            assert!(seen.insert(key.to_string()), "attribute {key} twice");
            let end = attrs[eq + 2..].find('"').expect("unterminated value") + eq + 2;
            check_text(&attrs[eq + 2..end]);
            attrs = attrs[end + 1..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !empty {
            stack.push(name.to_string());
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
    assert_eq!(roots, 1);
    texts
}

#[test]
fn svg_is_well_formed_and_names_every_node() {
    let dir = tempfile::tempdir().unwrap();
    for config in [example("tdnn/net.config"), example("digits/lstm.config")] {
        let svg = draw(&config, &dir.path().join("net.svg"));
        let texts = well_formed(&svg);
        assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        let (nodes, edges) = graph(&network(&config));
        for n in &nodes {
            assert!(texts.contains(n), "{n} is not in the picture");
        }
        assert_eq!(
            svg.matches("<path d=").count(),
            edges.len() + 1,
            "an arrow per edge"
        );
        assert_eq!(
            svg.matches("<rect x=").count(),
            nodes.len(),
            "a box per node"
        );
    }
}

#[test]
fn recurrences_are_back_edges() {
    let dir = tempfile::tempdir().unwrap();
    let config = example("digits/lstm.config");
    let dot = draw(&config, &dir.path().join("lstm.dot"));
    let (_, edges) = parse_dot(&dot);
    let back: BTreeSet<(&str, &str)> = edges
        .iter()
        .filter(|(_, _, attrs)| attrs.contains("style=dashed"))
        .map(|(a, b, _)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        back,
        BTreeSet::from([
            ("lstm1.c_trunc", "lstm1.lstm_nonlin"),
            ("lstm1.r_trunc", "lstm1.W_all")
        ]),
        "{dot}"
    );
    let (_, _, attrs) = edges
        .iter()
        .find(|(a, b, _)| a == "lstm1.r_trunc" && b == "lstm1.W_all")
        .unwrap();
    assert!(attrs.contains("IfDefined(Offset(·, -1))"), "{attrs}");
    let svg = draw(&config, &dir.path().join("lstm.svg"));
    assert_eq!(svg.matches("stroke-dasharray").count(), 2);
}

#[test]
fn same_picture_every_time_and_from_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let config = example("digits/lstm.config");
    let raw = dir.path().join("lstm.raw");
    cli::succeeds(BIN, &["init", "--srand=3", &config, s(&raw)]);
    for ext in ["svg", "dot"] {
        let a = draw(&config, &dir.path().join(format!("a.{ext}")));
        let b = draw(&config, &dir.path().join(format!("b.{ext}")));
        assert_eq!(a, b, "{ext} differs between runs");
        let m = draw(s(&raw), &dir.path().join(format!("m.{ext}")));
        assert_eq!(a, m, "{ext} of the binary model differs from the config's");
    }
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("net.svg");
    let missing = dir.path().join("missing.config");
    let err = cli::must_fail(BIN, &["draw", s(&missing), s(&out)], &out, true);
    assert!(err.contains("missing.config"), "{err}");
    let bad = dir.path().join("bad.config");
    std::fs::write(
        &bad,
        "input-node name=input dim=4\ncomponent-node name=x input=nowhere\n",
    )
    .unwrap();
    let err = cli::must_fail(BIN, &["draw", s(&bad), s(&out)], &out, true);
    assert!(err.contains("bad.config"), "{err}");
    let raw = dir.path().join("cut.raw");
    cli::succeeds(BIN, &["init", &example("tdnn/net.config"), s(&raw)]);
    let bytes = std::fs::read(&raw).unwrap();
    std::fs::write(&raw, &bytes[..bytes.len() / 2]).unwrap();
    let err = cli::must_fail(BIN, &["draw", s(&raw), s(&out)], &out, true);
    assert!(err.contains("cut.raw"), "{err}");
    let png = dir.path().join("net.png");
    let err = cli::must_fail(
        BIN,
        &["draw", &example("tdnn/net.config"), s(&png)],
        &png,
        true,
    );
    assert!(err.contains(".svg") && err.contains(".dot"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "only the inputs remain"
    );
}
