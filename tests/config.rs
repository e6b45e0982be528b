//! Reading configs into a network: every golden config parses, the regenerated config lines
//! match the headers of Kaldi's model files and `nnet3-info` output byte for byte, applying a
//! config to an existing network follows Kaldi's replacement rules, and malformed configs
//! give clear errors at the right line and column.
//!
//! Component types are written in parallel by other modules, so the structural tests create
//! components with a stub factory whose dimensions come from Kaldi's own `info.txt` (or, for
//! the benchmark configs, from the obvious config keys).

use compnet::io::TokenWriter;
use compnet::nnet::config_line::ConfigLine;

use compnet::nnet::component::{Backprop, Component, Description, Memo, Propagate, Properties};
use compnet::nnet::{NetworkNode, Nnet, ObjectiveType};
use compnet::Result;
use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use compnet::testing::golden::known_missing;
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

/// A component that only knows its dimensions.
#[derive(Clone, Debug)]
struct Stub {
    input_dim: usize,
    output_dim: usize,
}

impl Component for Stub {
    fn describe(&self) -> Description {
        Description::new(
            "StubComponent",
            self.input_dim,
            self.output_dim,
            Properties::SIMPLE,
        )
    }
    fn propagate(&self, _: Propagate<'_>) -> Option<Memo> {
        None
    }
    fn backprop(&self, _: Backprop<'_>) {}
    fn write(&self, _: &mut TokenWriter) {}
    fn info(&self) -> String {
        String::new()
    }
    fn clone_box(&self) -> Box<dyn Component> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Dimensions from the usual config keys (enough for the benchmark configs).
fn guess_dims(cl: &ConfigLine) -> (usize, usize) {
    let get = |k: &str| cl.get::<usize>(k).ok().flatten();
    let ty = cl.get_str("type").unwrap_or("").to_string();
    let flag = |k: &str| cl.get::<bool>(k).ok().flatten().unwrap_or(false);
    match ty.as_str() {
        "LstmNonlinearityComponent" => {
            let c = get("cell-dim").unwrap_or(1);
            (5 * c + if flag("use-dropout") { 3 } else { 0 }, 2 * c)
        }
        "StatisticsExtractionComponent" => {
            let d = get("input-dim").unwrap_or(1);
            (d, 1 + d + if flag("include-variance") { d } else { 0 })
        }
        "StatisticsPoolingComponent" => {
            let d = get("input-dim").unwrap_or(2);
            (d, d - 1 + get("num-log-count-features").unwrap_or(0))
        }
        "DropoutMaskComponent" => {
            let d = get("output-dim").unwrap_or(1);
            (d, d)
        }
        "TimeHeightConvolutionComponent" => {
            let d = |f: &str, h: &str| get(f).unwrap_or(1) * get(h).unwrap_or(1);
            (
                d("num-filters-in", "height-in"),
                d("num-filters-out", "height-out"),
            )
        }
        "NormalizeComponent" => {
            let d = get("dim").or(get("input-dim")).unwrap_or(1);
            (d, d + usize::from(flag("add-log-stddev")))
        }
        _ => match (get("input-dim"), get("output-dim"), get("dim")) {
            (Some(i), Some(o), _) => (i, o),
            (_, _, Some(d)) => (d, d),
            _ => (1, 1),
        },
    }
}

/// A factory making stubs: dims from `known` (component name -> (in, out)) or guessed.
fn stub_factory(
    known: HashMap<String, (usize, usize)>,
) -> impl FnMut(&ConfigLine) -> Result<Box<dyn Component>> {
    move |cl: &ConfigLine| {
        let guessed = guess_dims(cl);
        // The name was consumed by the reader; read it again without side effects.
        let name = cl.get_str("name").unwrap_or("").to_string();
        let keys: Vec<String> = cl.keys().iter().map(|s| s.to_string()).collect();
        for k in &keys {
            cl.get_str(k);
        }
        let (input_dim, output_dim) = known.get(&name).copied().unwrap_or(guessed);
        Ok(Box::new(Stub {
            input_dim,
            output_dim,
        }) as Box<dyn Component>)
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The config header of a model file (text or binary): lines after `<Nnet3> ` up to the
/// first empty line.
fn model_header(p: &Path) -> Vec<String> {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let text = String::from_utf8_lossy(&bytes);
    let start = text
        .find("<Nnet3> \n")
        .unwrap_or_else(|| panic!("{}: no <Nnet3>", p.display()))
        + "<Nnet3> \n".len();
    text[start..]
        .split('\n')
        .take_while(|l| !l.is_empty())
        .map(|s| s.to_string())
        .collect()
}

/// Node lines of an `nnet3-info` dump (between `modulus:` and the component lines).
fn info_node_lines(p: &Path) -> Vec<String> {
    read(p)
        .lines()
        .skip_while(|l| !l.starts_with("modulus:"))
        .skip(1)
        .take_while(|l| !l.starts_with("component name="))
        .map(|s| s.to_string())
        .collect()
}

/// Component dims from info node lines: `component-node ... component=C ... input-dim=I
/// output-dim=O`.
fn component_dims(info_lines: &[String]) -> HashMap<String, (usize, usize)> {
    let mut m = HashMap::new();
    for l in info_lines {
        if !l.starts_with("component-node ") {
            continue;
        }
        let field = |k: &str| {
            l.split(' ')
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .map(|s| s.to_string())
        };
        let (Some(c), Some(i), Some(o)) =
            (field("component"), field("input-dim"), field("output-dim"))
        else {
            continue;
        };
        m.insert(c, (i.parse().unwrap_or(0), o.parse().unwrap_or(0)));
    }
    m
}

fn build(config: &Path, known: HashMap<String, (usize, usize)>) -> Nnet {
    let text = read(config);
    let mut nnet = Nnet::default();
    let mut factory = stub_factory(known);
    if let Err(e) = nnet.apply_config_text_with(&text, &config.display().to_string(), &mut factory)
    {
        panic!("{e}");
    }
    nnet
}

fn dirs(sub: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(GOLDEN).join(sub))
        .unwrap_or_else(|e| panic!("golden {sub}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

fn assert_lines_eq(got: &[String], want: &[String], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "{what}: line {}", i + 1);
    }
    assert_eq!(got.len(), want.len(), "{what}: number of lines");
}

/// Every inference case: config lines equal the model.txt header, and the with-dims form
/// equals nnet3-info's node lines.
#[test]
fn golden_cases_regenerate_model_header_and_info() {
    let cases = dirs("cases");
    assert!(cases.len() >= 10, "golden cases not found");
    for case in cases {
        let info = info_node_lines(&case.join("info.txt"));
        let nnet = build(&case.join("net.config"), component_dims(&info));
        let name = case.display().to_string();
        assert_lines_eq(
            &nnet.config_lines(),
            &model_header(&case.join("model.txt")),
            &name,
        );
        assert_lines_eq(
            &nnet.config_lines_with_dims(),
            &info,
            &format!("{name} info"),
        );
        assert!(nnet.validate().is_ok());
    }
}

#[test]
fn golden_train_configs() {
    for case in dirs("train") {
        let info = info_node_lines(&case.join("before_info.txt"));
        let nnet = build(&case.join("net.config"), component_dims(&info));
        let name = case.display().to_string();
        assert_lines_eq(
            &nnet.config_lines(),
            &model_header(&case.join("before.txt")),
            &name,
        );
        assert_lines_eq(
            &nnet.config_lines_with_dims(),
            &info,
            &format!("{name} info"),
        );
    }
}

/// Kaldi's nnet3-init accepts these (they fail later, at compile time).
#[test]
fn golden_rejected_configs_parse() {
    let cases = dirs("rejected");
    assert_eq!(cases.len(), 3, "golden rejected cases");
    for case in cases {
        let cfg = case.join("net.config");
        let nnet = build(&cfg, HashMap::new());
        let header = model_header(&case.join("model.raw"));
        assert_lines_eq(&nnet.config_lines(), &header, &case.display().to_string());
    }
}

#[test]
fn perf_configs_parse() {
    let mut n = 0;
    for e in std::fs::read_dir(Path::new(GOLDEN).join("perf"))
        .expect("golden perf folder")
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "config") {
            let nnet = build(&p, HashMap::new());
            assert!(nnet.num_nodes() > 10);
            assert_eq!(nnet.output_names().len(), nnet.output_names().len());
            n += 1;
        }
    }
    assert_eq!(n, 5);
}

// ---------------------------------------------------------------------------------------

fn stub_net(text: &str) -> std::result::Result<Nnet, String> {
    let mut nnet = Nnet::default();
    let mut f = stub_factory(HashMap::new());
    nnet.apply_config_text_with(text, "t.config", &mut f)
        .map(|_| nnet)
        .map_err(|e| e.to_string())
}

#[test]
fn hidden_input_nodes_and_output_objective() {
    let nnet = stub_net(
        "input-node name=input dim=4\n\
         # a comment line\n\
         component name=a type=Stub input-dim=8 output-dim=3   # trailing comment\n\
         component-node name=a component=a input=Append(Offset(input,-1),input)\n\
         output-node name=output input=a objective=quadratic\n",
    )
    .unwrap();
    assert_eq!(nnet.node_names, vec!["input", "a_input", "a", "output"]);
    assert!(nnet.is_component_input_node(1));
    assert!(nnet.is_output_node(3));
    assert!(matches!(
        nnet.nodes[3],
        NetworkNode::Descriptor {
            objective: ObjectiveType::Quadratic,
            ..
        }
    ));
    assert_eq!(
        nnet.config_lines(),
        vec![
            "input-node name=input dim=4",
            "component-node name=a component=a input=Append(Offset(input, -1), input)",
            "output-node name=output input=a objective=quadratic",
        ]
    );
}

/// Lines may refer to nodes defined later; a component-node may read itself (DropoutMask).
#[test]
fn forward_references_and_self_reference() {
    let nnet = stub_net(
        "output-node name=output input=Sum(a, m)\n\
         component-node name=a component=a input=IfDefined(Offset(a, -1))\n\
         component-node name=m component=m input=m\n\
         component name=a type=Stub input-dim=3 output-dim=3\n\
         component name=m type=DropoutMaskComponent output-dim=3 dropout-proportion=0.0\n\
         input-node name=input dim=2\n",
    )
    .unwrap();
    assert_eq!(
        nnet.node_names,
        vec!["output", "a_input", "a", "m_input", "m", "input"]
    );
    assert_eq!(
        nnet.config_lines()[2],
        "component-node name=m component=m input=m"
    );
}

/// xconfig quirks: irregular spacing, True, 3-argument Sum, Offset around Scale, zero offset.
#[test]
fn xconfig_style_lines() {
    let nnet = stub_net(
        "input-node name=input dim=5\n\
         dim-range-node name=x_copy1 input-node=input dim-offset=0 dim=5\n\
         dim-range-node name=x_copy2 input-node=input  dim=5 dim-offset=0\n\
         component name=delta type=Stub dim=15  use-natural-gradient=True  \n\
         component-node name=delta component=delta input=Append(Offset(input,0), Sum(Offset(Scale(-1.0,x_copy1),-1), Offset(input,1)), Sum(Offset(input,-2), Offset(input,2), Offset(Scale(-2.0,x_copy2),0)))\n\
         output-node name=output input=delta\n",
    )
    .unwrap();
    // Expected form derived by hand from the normalisation rules (facts §2.6).
    assert_eq!(
        nnet.config_lines()[3],
        "component-node name=delta component=delta input=Append(input, \
         Sum(Offset(Scale(-1, x_copy1), -1), Offset(input, 1)), \
         Sum(Offset(input, -2), Sum(Offset(input, 2), Scale(-2, x_copy2))))"
    );
}

/// `nnet3-init existing.raw extra.config`: redefined nodes move to their new position,
/// redefined components are replaced in place, new ones are appended.
#[test]
fn applying_config_to_existing_network() {
    let mut nnet = stub_net(
        "input-node name=input dim=4\n\
         component name=a type=Stub input-dim=4 output-dim=6\n\
         component-node name=a component=a input=input\n\
         component name=final type=Stub input-dim=6 output-dim=2\n\
         component-node name=final component=final input=a\n\
         output-node name=output input=final\n",
    )
    .unwrap();
    let mut f = stub_factory(HashMap::new());
    nnet.apply_config_text_with(
        "component name=b type=Stub input-dim=6 output-dim=6\n\
         component-node name=b component=b input=a\n\
         component name=final type=Stub input-dim=6 output-dim=3\n\
         component-node name=final component=final input=b\n\
         output-node name=output input=final objective=quadratic\n",
        "extra.config",
        &mut f,
    )
    .unwrap();
    assert_eq!(nnet.component_names, vec!["a", "final", "b"]);
    assert_eq!(nnet.components[1].output_dim(), 3);
    assert_eq!(
        nnet.config_lines(),
        vec![
            "input-node name=input dim=4",
            "component-node name=a component=a input=input",
            "component-node name=b component=b input=a",
            "component-node name=final component=final input=b",
            "output-node name=output input=final objective=quadratic",
        ]
    );
    // A failed application leaves the network as it was.
    let before = nnet.config_lines();
    let mut f = stub_factory(HashMap::new());
    let r = nnet.apply_config_text_with(
        "component name=final type=Stub input-dim=7 output-dim=3\n",
        "bad.config",
        &mut f,
    );
    assert!(r.is_err());
    assert_eq!(nnet.config_lines(), before);
    assert_eq!(nnet.components[1].input_dim(), 6);
}

#[test]
fn unregistered_component_type_is_reported() {
    let e = Nnet::from_config_text(
        "input-node name=input dim=4\ncomponent name=a type=NoSuchComponent dim=3\n",
        "x.config",
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("x.config:2:"), "{e}");
    assert!(
        e.contains("unknown component type 'NoSuchComponent'"),
        "{e}"
    );
}

/// Malformed configs: (config, message substring, (line, text the caret must point at)).
/// The column is where that text first occurs in the line (with a trailing "\n" matching
/// the end of the line); line 0 means no position.
#[test]
fn malformed_configs() {
    let cases: &[(&str, &str, (usize, &str))] = &[
        (
            "input-node name=input dim=4\noutput-node name=output input=nosuch\n",
            "unknown node name 'nosuch'",
            (2, "nosuch"),
        ),
        (
            "input-node name=input dim=4\noutput-node name=output input=Append(input, Offset(input, 1x))\n",
            "neither a valid name nor a number",
            (2, "1x"),
        ),
        (
            "input-node name=input dim=4\noutput-node name=output input=Append(input,, input)\n",
            "expected a descriptor",
            (2, ", input)"),
        ),
        (
            "input-node name=input dim=4\noutput-node name=output input='Offset(input, q)'\n",
            "integer t-offset",
            (2, "q)"),
        ),
        (
            "input-node name=input dim=4\ncomponent name=a type=Stub input-dim=5 output-dim=3\ncomponent-node name=a component=a input=input\noutput-node name=output input=a\n",
            "input descriptor has dim 4 but component 'a'",
            (3, "input\n"),
        ),
        (
            "input-node name=input dim=4\ninput-node name=iv dim=3\noutput-node name=output input=Sum(input, iv)\n",
            "dimension mismatch in Sum()",
            (3, "Sum("),
        ),
        (
            "input-node name=input dim=4\ninput-node name=iv dim=3\noutput-node name=output input=Failover(input, iv)\n",
            "dimension mismatch in Failover()",
            (3, "Failover("),
        ),
        (
            "input-node name=input dim=4\ndim-range-node name=r input-node=input dim-offset=2 dim=3\noutput-node name=output input=r\n",
            "dim-range out of bounds",
            (2, "3\n"),
        ),
        (
            "input-node name=input dim=4\ndim-range-node name=r input-node=output dim-offset=0 dim=3\noutput-node name=output input=input\n",
            "must read an input node or a component node",
            (2, "output dim-offset"),
        ),
        (
            "input-node name=input dim=4\ncomponent-node name=a component=missing input=input\noutput-node name=output input=a\n",
            "no component named 'missing'",
            (2, "missing"),
        ),
        (
            "input-node name=input dim=4\ninput-node name=input dim=5\n",
            "node 'input' is defined twice (first on line 1)",
            (2, "input dim=5"),
        ),
        (
            "input-node name=input dim=4\ncomponent name=a type=Stub dim=4\ncomponent name=a type=Stub dim=4\n",
            "component 'a' is defined twice",
            (3, "a type"),
        ),
        (
            "input-node name=input dim=4\ninput-node name=a_input dim=4\ncomponent name=a type=Stub dim=4\ncomponent-node name=a component=a input=input\noutput-node name=output input=a\n",
            "already used",
            (4, "a component"),
        ),
        (
            "input-node name=9input dim=4\n",
            "invalid name '9input'",
            (1, "9input"),
        ),
        ("input-nod name=input dim=4
", "unknown config line type 'input-nod'", (1, "input-nod")),
        ("input-node dim=4
", "missing required option name", (1, "input-node")),
        (
            "input-node name=input dim=4\noutput-node name=output input=input objective=xent\n",
            "invalid objective type 'xent'",
            (2, "xent"),
        ),
        (
            "input-node name=input dim=4 foo=bar\noutput-node name=output input=input\n",
            "unknown option 'foo'",
            (1, "foo"),
        ),
        (
            "input-node name=input dim=0\noutput-node name=output input=input\n",
            "dim must be positive",
            (1, "0\n"),
        ),
        (
            "input-node name=input dim=4\noutput-node name=output input=input\noutput-node name=o2 input=output\n",
            "'output' is an output node",
            (3, "output\n"),
        ),
        (
            "input-node name=input dim=4\noutput-node name=output input=Scale(2, IfDefined(input))\n",
            "Scale()",
            (2, "IfDefined"),
        ),
        ("input-node name=input dim=4
", "no output node", (0, "")),
    ];
    for &(text, msg, (line, marker)) in cases {
        let e = match stub_net(text) {
            Ok(n) => panic!("expected an error for:\n{text}\ngot {:?}", n.config_lines()),
            Err(e) => e,
        };
        assert!(e.contains(msg), "{text}\n=> {e}\n(wanted '{msg}')");
        if line > 0 {
            let l = format!("{}\n", text.lines().nth(line - 1).unwrap_or(""));
            let col = l.find(marker).map(|b| l[..b].chars().count() + 1);
            let want = format!("t.config:{line}:{}:", col.unwrap_or(0));
            assert!(e.contains(&want), "{text}\n=> {e}\n(wanted {want})");
        }
    }
}

/// The caret display lines up with the offending character inside the descriptor.
#[test]
fn caret_points_into_descriptor() {
    let e = stub_net(
        "input-node name=input dim=4\noutput-node name=output input=Append(input, bogus)\n",
    )
    .unwrap_err();
    let lines: Vec<&str> = e.lines().collect();
    assert!(lines.len() >= 3, "{e}");
    let text_line = lines[lines.len() - 2].trim_start();
    let caret_line = lines[lines.len() - 1];
    let caret_col =
        caret_line.find('^').unwrap_or(0) - (lines[lines.len() - 2].len() - text_line.len());
    assert_eq!(&text_line[caret_col..caret_col + 5], "bogus", "{e}");
}

#[test]
fn validate_catches_programmatic_mistakes() {
    let mut nnet =
        stub_net("input-node name=input dim=4\noutput-node name=output input=input\n").unwrap();
    assert!(nnet.validate().is_ok());
    nnet.node_names[1] = "input".into();
    let e = nnet.validate().unwrap_err().to_string();
    assert!(e.contains("duplicate node name"), "{e}");
}

/// With the real component registry: every golden config whose component types are all
/// registered (and that reads no matrix files) builds, and its config lines and dims match
/// Kaldi's. Configs that read matrix files are skipped, and so are the known-missing cases
/// (`testing::golden::KNOWN_MISSING`); any other config with an unregistered type fails.
#[test]
fn golden_configs_with_registered_components() {
    use compnet::nnet::component::component_type;
    let mut checked = 0;
    let mut skipped = Vec::new();
    let mut cases: Vec<(PathBuf, Option<PathBuf>, Option<PathBuf>)> = Vec::new();
    for c in dirs("cases") {
        cases.push((
            c.join("net.config"),
            Some(c.join("model.txt")),
            Some(c.join("info.txt")),
        ));
    }
    for c in dirs("train") {
        cases.push((
            c.join("net.config"),
            Some(c.join("before.txt")),
            Some(c.join("before_info.txt")),
        ));
    }
    for c in dirs("rejected") {
        cases.push((c.join("net.config"), Some(c.join("model.raw")), None));
    }
    for (cfg, model, info) in cases {
        let text = read(&cfg);
        let missing: Vec<&str> = text
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("type="))
            .filter(|t| component_type(t).is_none())
            .collect();
        let case_name = cfg
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            missing.is_empty() || known_missing(&case_name).is_some(),
            "{}: unregistered types {missing:?}",
            cfg.display()
        );
        if !missing.is_empty() || text.contains(".mat") || text.contains(".vec") {
            skipped.push(format!("{} ({})", cfg.display(), missing.join(",")));
            continue;
        }
        let nnet = match Nnet::from_config_text(
            &text,
            &cfg.display().to_string(),
            &mut compnet::random::seeded_rng(0),
        ) {
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        };
        if let Some(m) = model {
            assert_lines_eq(
                &nnet.config_lines(),
                &model_header(&m),
                &cfg.display().to_string(),
            );
        }
        if let Some(i) = info {
            assert_lines_eq(
                &nnet.config_lines_with_dims(),
                &info_node_lines(&i),
                &format!("{} info", cfg.display()),
            );
        }
        checked += 1;
    }
    eprintln!("checked {checked} configs with real components; skipped: {skipped:#?}");
    // Raise this as component types land; it stops skips from growing unnoticed.
    assert!(checked >= 15, "only {checked} golden configs checked");
}
