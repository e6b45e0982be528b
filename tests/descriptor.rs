//! Descriptor parsing, normalisation and printing: Kaldi's normalisation table (facts §5.3),
//! tokenizer edge cases, error positions, and property tests against an independent
//! reference evaluator (what each output Index reads, before and after normalisation).

use compnet::nnet::descriptor::parse::{tokenize, GeneralDescriptor, GeneralKind, TokenKind};
use compnet::nnet::descriptor::{Descriptor, ForwardingDescriptor, IndexVar, SumDescriptor};
use proptest::prelude::*;

fn names() -> Vec<String> {
    ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect()
}

fn norm(text: &str) -> String {
    let n = names();
    match Descriptor::parse(text, &n) {
        Ok(d) => d.to_config(&n),
        Err(e) => panic!("{text}: {e}"),
    }
}

/// The table asserted by Kaldi's `UnitTestGeneralDescriptorSpecial` (facts §5.3).
#[test]
fn kaldi_normalisation_table() {
    let table = [
        ("a", "a"),
        ("Scale(-1.0, a)", "Scale(-1, a)"),
        ("Scale(-1.0, Scale(-2.0, a))", "Scale(2, a)"),
        (
            "Scale(2.0, Sum(Scale(2.0, a), b, c))",
            "Sum(Scale(4, a), Sum(Scale(2, b), Scale(2, c)))",
        ),
        ("Const(1.0, 512)", "Const(1, 512)"),
        (
            "Sum(Const(1.0, 512), Scale(-1.0, a))",
            "Sum(Const(1, 512), Scale(-1, a))",
        ),
        ("Offset(Offset(a, 3, 5), 2, 1)", "Offset(a, 5, 6)"),
        (
            "Offset(Sum(a, b), 2, 1)",
            "Sum(Offset(a, 2, 1), Offset(b, 2, 1))",
        ),
        (
            "Sum(Append(a, b), Append(c, d))",
            "Append(Sum(a, c), Sum(b, d))",
        ),
        ("Append(Append(a, b), Append(c, d))", "Append(a, b, c, d)"),
        ("Sum(a, b, c, d)", "Sum(a, Sum(b, Sum(c, d)))"),
        ("Sum(a)", "a"),
        ("Offset(a, 0)", "a"),
    ];
    for (input, expected) in table {
        assert_eq!(norm(input), expected, "normalising {input}");
    }
}

/// Forms seen in xconfig output and in the golden `descriptors` case (facts §4.3, model.txt).
#[test]
fn xconfig_forms() {
    // Offset around Scale, Scale around Offset, zero offset without spaces.
    assert_eq!(norm("Offset(Scale(-1.0,b),-1)"), "Offset(Scale(-1, b), -1)");
    assert_eq!(
        norm("Scale(-0.5, Offset(a, -2))"),
        "Offset(Scale(-0.5, a), -2)"
    );
    assert_eq!(norm("Offset(a,0)"), "a");
    assert_eq!(
        norm("  Append( a ,Offset( b , +1 ) )  "),
        "Append(a, Offset(b, 1))"
    );
    // Nested offsets inside Append, from cases/descriptors.
    assert_eq!(
        norm("Append(Append(Offset(a, -1), a), Append(Offset(Offset(a, 1), 1), ReplaceIndex(b, t, 0)))"),
        "Append(Offset(a, -1), a, Offset(a, 2), ReplaceIndex(b, t, 0))"
    );
    assert_eq!(
        norm("Sum(a, Scale(-0.5, Offset(b, -2)), Const(0.25, 16))"),
        "Sum(a, Sum(Offset(Scale(-0.5, b), -2), Const(0.25, 16)))"
    );
    assert_eq!(
        norm("Sum(c, Scale(0.1, Offset(d, -1)))"),
        "Sum(c, Offset(Scale(0.1, d), -1))"
    );
    // Offsets with an x part, Round, Switch, IfDefined, Failover pass through.
    assert_eq!(norm("Offset(a, 0, 2)"), "Offset(a, 0, 2)");
    assert_eq!(norm("Switch(a, Offset(a, -1))"), "Switch(a, Offset(a, -1))");
    assert_eq!(
        norm("Offset(IfDefined(Failover(a, b)), 1)"),
        "IfDefined(Failover(Offset(a, 1), Offset(b, 1)))"
    );
    assert_eq!(norm("Round(Sum(a, b), 3)"), "Sum(Round(a, 3), Round(b, 3))");
    assert_eq!(norm("ReplaceIndex(a, x, 0)"), "ReplaceIndex(a, x, 0)");
    // Scale 1 prints as the bare name; scales print with 6 significant digits.
    assert_eq!(norm("Scale(1.0, a)"), "a");
    assert_eq!(norm("Scale(0.333333333, a)"), "Scale(0.333333, a)");
    assert_eq!(norm("Scale(1e-7, a)"), "Scale(1e-07, a)");
}

#[test]
fn tokenizer_edge_cases() {
    let kinds = |s: &str| -> Vec<TokenKind> {
        tokenize(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .into_iter()
            .map(|t| t.kind)
            .collect()
    };
    assert_eq!(
        kinds("(,test )"),
        vec![
            TokenKind::LParen,
            TokenKind::Comma,
            TokenKind::Word("test".into()),
            TokenKind::RParen
        ]
    );
    assert_eq!(kinds("-112"), vec![TokenKind::Word("-112".into())]);
    assert_eq!(kinds("+112"), vec![TokenKind::Word("+112".into())]);
    assert_eq!(
        kinds("\ta.b-c_d\t"),
        vec![TokenKind::Word("a.b-c_d".into())]
    );
    assert_eq!(kinds(""), vec![]);
    // A token starting with a digit followed by letters is rejected, at its offset.
    let e = tokenize("Append(a, 1abc)").unwrap_err();
    assert_eq!(e.offset, 10, "{e}");
    assert!(tokenize("a$b").is_err());
    let toks = tokenize("Offset( a ,-1)").unwrap();
    let offsets: Vec<usize> = toks.iter().map(|t| t.offset).collect();
    assert_eq!(offsets, vec![0, 6, 8, 10, 11, 13]);
}

/// Error cases: (text, expected offset, substring of the message).
#[test]
fn error_positions() {
    let cases: &[(&str, usize, &str)] = &[
        ("e", 0, "unknown node name 'e'"),
        ("Append(a, e)", 10, "unknown node name 'e'"),
        ("Append(a b)", 9, "expected ',' or ')'"),
        ("Append(a, b", 11, "end of descriptor"),
        ("Offset(a, x)", 10, "integer t-offset"),
        ("Offset(a, 1.5)", 10, "integer t-offset"),
        ("a b", 2, "expected end of descriptor"),
        ("Scale(x, a)", 6, "a number"),
        ("Const(1.0, 0)", 11, "positive dimension"),
        ("Const(1.0, -3)", 11, "positive dimension"),
        ("ReplaceIndex(a, n, 0)", 16, "'t' or 'x'"),
        ("Sum", 3, "'('"),
        ("", 0, "expected a descriptor"),
        ("()", 0, "expected a descriptor"),
        ("Append(a, 9x)", 10, "neither a valid name nor a number"),
        (
            "Sum(Append(a, b), c)",
            0,
            "different numbers of Append() terms",
        ),
        ("Scale(2, IfDefined(a))", 9, "Scale()"),
        ("Scale(2, Const(1, 3))", 9, "Scale()"),
        ("Switch(Sum(a, b), c)", 7, "Switch()"),
        ("Offset(Const(1, 3), 1)", 0, "Const()"),
        ("Round(a, 0)", 0, "positive modulus"),
        ("Failover(a)", 10, "','"),
        ("IfDefined(a, b)", 11, "')'"),
        ("12", 0, "node name"),
    ];
    let n = names();
    for &(text, offset, msg) in cases {
        match Descriptor::parse(text, &n) {
            Ok(d) => panic!("{text}: expected an error, got {}", d.to_config(&n)),
            Err(e) => {
                assert_eq!(e.offset, offset, "{text}: {e}");
                assert!(e.msg.contains(msg), "{text}: {e} (wanted '{msg}')");
            }
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let mut s = String::new();
    for _ in 0..5000 {
        s.push_str("IfDefined(");
    }
    s.push('a');
    for _ in 0..5000 {
        s.push(')');
    }
    let e = Descriptor::parse(&s, &names()).unwrap_err();
    assert!(e.msg.contains("too deeply"), "{e}");
}

#[test]
fn node_dependencies_sorted_unique() {
    let n = names();
    let d = Descriptor::parse("Append(Sum(c, Offset(a, 1)), IfDefined(c), b)", &n).unwrap();
    assert_eq!(d.node_dependencies(), vec![0, 1, 2]);
}

// ---------------------------------------------------------------------------------------
// Independent reference: what an output Index (t, x) reads, as a list of Append parts, each
// a sorted list of terms (node, t, x, coefficient) or constants. Assumes everything is
// computable (Failover takes its first argument, IfDefined passes through).

#[derive(Clone, Debug, PartialEq, PartialOrd)]
enum Term {
    Node(usize, i64, i64, f64),
    Const(f64, usize),
}

type Parts = Vec<Vec<Term>>;

fn floor_round(t: i64, m: i64) -> i64 {
    t - t.rem_euclid(m)
}

/// Evaluates a general (un-normalised) tree; None where the tree is not well formed.
fn eval_general(g: &GeneralDescriptor, t: i64, x: i64) -> Option<Parts> {
    Some(match &g.kind {
        GeneralKind::Node(n) => vec![vec![Term::Node(*n, t, x, 1.0)]],
        GeneralKind::Const(v, d) => vec![vec![Term::Const(*v as f64, *d)]],
        GeneralKind::Append(v) => {
            let mut out = Vec::new();
            for c in v {
                out.extend(eval_general(c, t, x)?);
            }
            out
        }
        GeneralKind::Sum(v) => {
            let all: Vec<Parts> = v
                .iter()
                .map(|c| eval_general(c, t, x))
                .collect::<Option<_>>()?;
            let n = all.first()?.len();
            if all.iter().any(|p| p.len() != n) {
                return None;
            }
            (0..n)
                .map(|k| all.iter().flat_map(|p| p[k].clone()).collect())
                .collect()
        }
        GeneralKind::Failover(a, b) => {
            let pa = eval_general(a, t, x)?;
            if eval_general(b, t, x)?.len() != pa.len() {
                return None;
            }
            pa
        }
        GeneralKind::IfDefined(a) => eval_general(a, t, x)?,
        GeneralKind::Offset(a, dt, dx) => eval_general(a, t + *dt as i64, x + *dx as i64)?,
        GeneralKind::Round(a, m) => eval_general(a, floor_round(t, *m as i64), x)?,
        GeneralKind::ReplaceIndex(a, IndexVar::T, v) => eval_general(a, *v as i64, x)?,
        GeneralKind::ReplaceIndex(a, IndexVar::X, v) => eval_general(a, t, *v as i64)?,
        GeneralKind::Switch(v) => {
            let k = t.rem_euclid(v.len() as i64) as usize;
            eval_general(&v[k], t, x)?
        }
        GeneralKind::Scale(s, a) => eval_general(a, t, x)?
            .into_iter()
            .map(|p| {
                p.into_iter()
                    .map(|term| match term {
                        Term::Node(n, t, x, c) => Term::Node(n, t, x, c * *s as f64),
                        Term::Const(v, d) => Term::Const(v * *s as f64, d),
                    })
                    .collect()
            })
            .collect(),
    })
}

fn eval_fwd(f: &ForwardingDescriptor, t: i64, x: i64) -> Term {
    match f {
        ForwardingDescriptor::Simple { node, scale } => Term::Node(*node, t, x, *scale as f64),
        ForwardingDescriptor::Offset {
            src,
            t_offset,
            x_offset,
        } => eval_fwd(src, t + *t_offset as i64, x + *x_offset as i64),
        ForwardingDescriptor::Round { src, t_modulus } => {
            eval_fwd(src, floor_round(t, *t_modulus as i64), x)
        }
        ForwardingDescriptor::ReplaceIndex { src, var, value } => match var {
            IndexVar::T => eval_fwd(src, *value as i64, x),
            IndexVar::X => eval_fwd(src, t, *value as i64),
        },
        ForwardingDescriptor::Switch(v) => {
            let k = t.rem_euclid(v.len() as i64) as usize;
            eval_fwd(&v[k], t, x)
        }
    }
}

fn eval_sum(s: &SumDescriptor, t: i64, x: i64, out: &mut Vec<Term>) {
    match s {
        SumDescriptor::Simple(f) => out.push(eval_fwd(f, t, x)),
        SumDescriptor::Optional(a) => eval_sum(a, t, x, out),
        SumDescriptor::Sum(a, b) => {
            eval_sum(a, t, x, out);
            eval_sum(b, t, x, out);
        }
        SumDescriptor::Failover(a, _) => eval_sum(a, t, x, out),
        SumDescriptor::Const { value, dim } => out.push(Term::Const(*value as f64, *dim)),
    }
}

fn eval_desc(d: &Descriptor, t: i64, x: i64) -> Parts {
    d.parts
        .iter()
        .map(|p| {
            let mut v = Vec::new();
            eval_sum(p, t, x, &mut v);
            v
        })
        .collect()
}

fn sorted(mut p: Parts) -> Parts {
    for part in &mut p {
        part.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    }
    p
}

/// Scales whose products stay exact in f32 and print exactly with 6 digits.
const SCALES: &[f32] = &[-2.0, -1.0, -0.5, 0.5, 0.25, 2.0, 3.0];

fn general_strategy() -> impl Strategy<Value = GeneralDescriptor> {
    let leaf = prop_oneof![
        8 => (0usize..4).prop_map(GeneralKind::Node),
        1 => (prop::sample::select(SCALES), 1usize..4).prop_map(|(v, d)| GeneralKind::Const(v, d)),
    ]
    .prop_map(GeneralDescriptor::new);
    leaf.prop_recursive(4, 24, 3, |inner| {
        let b = |g: GeneralDescriptor| Box::new(g);
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(GeneralKind::Append),
            prop::collection::vec(inner.clone(), 1..4).prop_map(GeneralKind::Sum),
            prop::collection::vec(inner.clone(), 1..3).prop_map(GeneralKind::Switch),
            (inner.clone(), inner.clone())
                .prop_map(move |(x, y)| GeneralKind::Failover(b(x), b(y))),
            inner
                .clone()
                .prop_map(move |x| GeneralKind::IfDefined(b(x))),
            (
                inner.clone(),
                -3i32..4,
                prop_oneof![3 => Just(0i32), 1 => -2i32..3]
            )
                .prop_map(move |(x, t, xo)| GeneralKind::Offset(b(x), t, xo)),
            (inner.clone(), 1i32..4).prop_map(move |(x, m)| GeneralKind::Round(b(x), m)),
            (inner.clone(), prop::bool::ANY, -2i32..3).prop_map(move |(x, is_t, v)| {
                GeneralKind::ReplaceIndex(b(x), if is_t { IndexVar::T } else { IndexVar::X }, v)
            }),
            (prop::sample::select(SCALES), inner.clone())
                .prop_map(move |(s, x)| GeneralKind::Scale(s, b(x))),
        ]
        .prop_map(GeneralDescriptor::new)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// print → parse → normalise keeps the meaning; the normalised form prints to a fixed
    /// point and re-parses to the identical Descriptor.
    #[test]
    fn normalisation_preserves_meaning_and_round_trips(g in general_strategy()) {
        let n = names();
        let text = g.to_config(&n);
        // Re-parsing the printed general form gives the same tree (offsets aside).
        let reparsed = GeneralDescriptor::parse(&text, &|s: &str| {
            n.iter().position(|x| x == s).ok_or_else(|| "unknown".to_string())
        });
        prop_assert!(reparsed.is_ok(), "{}: {:?}", text, reparsed.err());
        match Descriptor::parse(&text, &n) {
            Err(e) => {
                // Errors point inside the text.
                prop_assert!(e.offset <= text.chars().count(), "{}: {}", text, e);
            }
            Ok(d) => {
                for (t, x) in [(0i64, 0i64), (1, 0), (-1, 2), (5, -1), (-7, 1), (2, 3)] {
                    let want = eval_general(&g, t, x);
                    prop_assert!(want.is_some(), "{} normalised but the reference rejects it", text);
                    prop_assert_eq!(
                        sorted(eval_desc(&d, t, x)),
                        sorted(want.unwrap_or_default()),
                        "{} at t={} x={}", text, t, x
                    );
                }
                let printed = d.to_config(&n);
                let d2 = Descriptor::parse(&printed, &n);
                prop_assert!(d2.is_ok(), "{} -> {}: {:?}", text, printed, d2.err());
                let d2 = d2.unwrap_or(Descriptor { parts: vec![] });
                prop_assert_eq!(&d2, &d, "{} -> {}", text, printed);
                prop_assert_eq!(d2.to_config(&n), printed);
            }
        }
    }
}
