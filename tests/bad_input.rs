//! Malformed configs and damaged model files: every one must give a non-zero exit and a
//! message naming the file and line:column (configs) or byte offset (models), never a panic,
//! and must not leave an output file behind. A property test throws random damage at golden
//! models through the library, which must never panic.

use compnet::nnet::Nnet;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Output;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn golden(case: &str, file: &str) -> PathBuf {
    Path::new(GOLDEN).join("cases").join(case).join(file)
}

fn compnet(args: &[&str]) -> Output {
    compnet::testing::cli::run(env!("CARGO_BIN_EXE_compnet"), args)
}

/// Runs a command that must fail; returns its stderr. Checks the output file stays absent.
fn must_fail(args: &[&str], out_file: &Path) -> String {
    compnet::testing::cli::must_fail(env!("CARGO_BIN_EXE_compnet"), args, out_file, true)
}

const GOOD: &str = "input-node name=input dim=4
component name=a type=AffineComponent input-dim=8 output-dim=3
component name=r type=RectifiedLinearComponent dim=3
component-node name=a component=a input=Append(Offset(input, -1), input)
component-node name=r component=r input=a
output-node name=output input=r
";

/// (what, config, expected "line:column", a fragment the message must contain).
const BAD_CONFIGS: &[(&str, &str, &str, &str)] = &[
    (
        "unknown component type",
        "input-node name=input dim=4\ncomponent name=a type=FooComponent dim=3\n",
        ":2:23:",
        "FooComponent",
    ),
    (
        "unknown option",
        "input-node name=input dim=4\ncomponent name=r type=RectifiedLinearComponent dim=4 bogus=3\ncomponent-node name=r component=r input=input\noutput-node name=output input=r\n",
        ":2:",
        "bogus",
    ),
    (
        "unterminated descriptor",
        "input-node name=input dim=4\ncomponent name=r type=RectifiedLinearComponent dim=8\ncomponent-node name=r component=r input=Append(input, \noutput-node name=output input=r\n",
        ":3:",
        "descriptor",
    ),
    (
        "bad descriptor function",
        "input-node name=input dim=4\ncomponent name=r type=RectifiedLinearComponent dim=4\ncomponent-node name=r component=r input=Shift(input, 1)\noutput-node name=output input=r\n",
        ":3:",
        "descriptor",
    ),
    (
        "dimension mismatch",
        "input-node name=input dim=4\ncomponent name=r type=RectifiedLinearComponent dim=5\ncomponent-node name=r component=r input=input\noutput-node name=output input=r\n",
        ":3:",
        "dim",
    ),
    (
        "missing node",
        "input-node name=input dim=4\ncomponent name=r type=RectifiedLinearComponent dim=4\ncomponent-node name=r component=r input=nothere\noutput-node name=output input=r\n",
        ":3:",
        "nothere",
    ),
    (
        "missing component",
        "input-node name=input dim=4\ncomponent-node name=r component=nothere input=input\noutput-node name=output input=r\n",
        ":2:",
        "nothere",
    ),
    (
        "bad integer",
        "input-node name=input dim=4x\n",
        ":1:",
        "4x",
    ),
    (
        "bad number",
        "input-node name=input dim=4\ncomponent name=a type=AffineComponent input-dim=4 output-dim=3 learning-rate=abc\n",
        ":2:",
        "abc",
    ),
    (
        "bad line type",
        "input-node name=input dim=4\nfrobnicate name=x\n",
        ":2:",
        "frobnicate",
    ),
    (
        "missing equals",
        "input-node name=input dim\n",
        ":1:",
        "dim",
    ),
];

#[test]
fn bad_configs_fail_with_position() {
    let tmp = tempfile::tempdir().unwrap();
    // The good config really is good (so the failures below are about the damage).
    let good = tmp.path().join("good.config");
    std::fs::write(&good, GOOD).unwrap();
    let good_out = tmp.path().join("good.raw");
    let r = compnet(&["init", good.to_str().unwrap(), good_out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for (i, (what, cfg, pos, fragment)) in BAD_CONFIGS.iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.config"));
        std::fs::write(&path, cfg).unwrap();
        let out = tmp.path().join(format!("bad{i}.raw"));
        let err = must_fail(
            &["init", path.to_str().unwrap(), out.to_str().unwrap()],
            &out,
        );
        let want = format!("bad{i}.config{pos}");
        assert!(err.contains(&want), "{what}: expected {want} in: {err}");
        assert!(
            err.contains(fragment),
            "{what}: expected '{fragment}' in: {err}"
        );
    }
}

/// Applying a bad config to an existing model fails and leaves no output.
#[test]
fn bad_config_on_existing_model() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("extra.config");
    std::fs::write(&cfg, "output-node name=output input=nosuchnode\n").unwrap();
    let out = tmp.path().join("out.raw");
    let model = golden("simplest", "model.raw");
    let err = must_fail(
        &[
            "init",
            model.to_str().unwrap(),
            cfg.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        &out,
    );
    assert!(err.contains("extra.config:1:"), "{err}");
}

/// Returns the byte offset an error message names ("at byte N").
fn byte_offset(err: &str) -> Option<usize> {
    let i = err.find("at byte ")?;
    err[i + 8..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .ok()
}

/// Damaged models through the binary: truncations at many offsets, and specific damage.
#[test]
fn damaged_models_fail_with_byte_offset() {
    let tmp = tempfile::tempdir().unwrap();
    for (case, file) in [
        ("seed", "model.raw"),
        ("seed", "model.txt"),
        ("rnn", "model.raw"),
    ] {
        let bytes = std::fs::read(golden(case, file)).unwrap();
        let n = bytes.len();
        let mut cuts: Vec<usize> = (0..40).map(|k| k * n / 40).collect();
        cuts.extend([1, 2, 3, 9, n - 1, n - 2, n - 9]);
        for cut in cuts {
            let p = tmp.path().join(format!("cut-{case}-{cut}-{file}"));
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let out = tmp.path().join("out.raw");
            let err = must_fail(&["copy", p.to_str().unwrap(), out.to_str().unwrap()], &out);
            assert!(err.contains(p.to_str().unwrap()), "{err}");
            let at = byte_offset(&err).unwrap_or_else(|| panic!("no byte offset: {err}"));
            assert!(at <= cut, "offset {at} past the end {cut}: {err}");
        }
    }
}

/// Replaces the first occurrence of `from` in `bytes`.
fn replace_once(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let i = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    [&bytes[..i], to, &bytes[i + from.len()..]].concat()
}

#[test]
fn wrong_tokens_and_counts_fail_with_byte_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = std::fs::read(golden("seed", "model.raw")).unwrap();
    let txt = std::fs::read(golden("seed", "model.txt")).unwrap();
    // NumComponents = 0x7fffffff in binary.
    let huge_count = {
        let i = raw
            .windows(16)
            .position(|w| w == b"<NumComponents> ")
            .unwrap();
        let mut v = raw.clone();
        v[i + 17..i + 21].copy_from_slice(&i32::MAX.to_le_bytes());
        v
    };
    // The first matrix's row count = 0x7fffffff.
    let huge_rows = {
        let i = raw.windows(3).position(|w| w == b"FM ").unwrap();
        let mut v = raw.clone();
        v[i + 4..i + 8].copy_from_slice(&i32::MAX.to_le_bytes());
        v
    };
    let negative_cols = {
        let i = raw.windows(3).position(|w| w == b"FM ").unwrap();
        let mut v = raw.clone();
        v[i + 9..i + 13].copy_from_slice(&(-5i32).to_le_bytes());
        v
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "wrong header",
            replace_once(&raw, b"<Nnet3>", b"<Nnet4>"),
            "<Nnet3>",
        ),
        ("bad binary marker", replace_once(&raw, b"\0B", b"\0X"), "B"),
        (
            "wrong count token",
            replace_once(&txt, b"<NumComponents>", b"<NumComponentz>"),
            "NumComponents",
        ),
        (
            "wrong name token",
            replace_once(&txt, b"<ComponentName>", b"<ComponentNom>"),
            "ComponentName",
        ),
        (
            "unknown type",
            replace_once(
                &txt,
                b"<RectifiedLinearComponent>",
                b"<RectifiedLinearComponenT>",
            ),
            "unknown component type RectifiedLinearComponenT",
        ),
        (
            "bad number",
            replace_once(&txt, b"-0.1723013", b"-0.17x3013"),
            "byte",
        ),
        (
            "text count too big",
            replace_once(&txt, b"<NumComponents> 4", b"<NumComponents> 99999999"),
            "count",
        ),
        (
            "missing end",
            replace_once(&txt, b"</Nnet3>", b"</Nnet2>"),
            "</Nnet3>",
        ),
        ("trailing junk", [&raw[..], b"junk"].concat(), "end of file"),
        (
            "unknown node in config",
            replace_once(&txt, b"input=affine1_node", b"input=affine9"),
            "affine9",
        ),
        (
            "unknown component in config",
            replace_once(&txt, b"component=relu1", b"component=relu9"),
            "relu9",
        ),
        ("huge component count", huge_count, "count"),
        ("huge matrix", huge_rows, "byte"),
        ("negative matrix dim", negative_cols, "byte"),
        (
            "not utf-8 config",
            replace_once(&raw, b"input-node", b"\xffnput-node"),
            "UTF-8",
        ),
    ];
    for (i, (what, bytes, fragment)) in cases.iter().enumerate() {
        let p = tmp.path().join(format!("bad{i}.mdl"));
        std::fs::write(&p, bytes).unwrap();
        let out = tmp.path().join("out.raw");
        let err = must_fail(&["copy", p.to_str().unwrap(), out.to_str().unwrap()], &out);
        assert!(byte_offset(&err).is_some(), "{what}: no byte offset: {err}");
        assert!(
            err.contains(fragment),
            "{what}: expected '{fragment}' in: {err}"
        );
        assert!(err.contains(&format!("bad{i}.mdl")), "{what}: {err}");
    }
}

/// Every truncation of a model (text and binary) is an error with an offset, never a panic.
#[test]
fn every_truncation_is_an_error() {
    for (case, file) in [
        ("simplest", "model.raw"),
        ("simplest", "model.txt"),
        ("seed", "model.raw"),
    ] {
        let bytes = std::fs::read(golden(case, file)).unwrap();
        let step = (bytes.len() / 3000).max(1);
        for cut in (0..bytes.len())
            .step_by(step)
            .chain(bytes.len().saturating_sub(64)..bytes.len())
        {
            match Nnet::read_model(&bytes[..cut], "cut") {
                Ok(_) => panic!("{case}/{file} cut at {cut} was accepted"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(byte_offset(&msg).is_some(), "{msg}");
                }
            }
        }
    }
}

fn golden_bytes() -> Vec<Vec<u8>> {
    [
        ("seed", "model.raw"),
        ("seed", "model.txt"),
        ("simplest", "model.raw"),
        ("simplest", "model.txt"),
        ("descriptors", "model.raw"),
        ("misc-components", "model.txt"),
    ]
    .iter()
    .map(|(c, f)| std::fs::read(golden(c, f)).unwrap())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random byte damage never panics the reader (errors are fine, so is success).
    #[test]
    fn random_damage_never_panics(
        which in 0usize..6,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let models = golden_bytes();
        let mut bytes = models[which].clone();
        for (at, value, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = value,
                1 => bytes[i] ^= 1 << (value % 8),
                2 => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, value),
            }
        }
        if let Some(c) = cut {
            let n = c.index(bytes.len() + 1);
            bytes.truncate(n);
        }
        if let Err(e) = Nnet::read_model(&bytes, "damaged") {
            let msg = e.to_string();
            prop_assert!(!msg.is_empty());
        }
    }
}
