//! The example tools (`get-egs`, `get-egs-dense-targets`, `merge-egs`, `shuffle-egs`,
//! `copy-egs`) against Kaldi's own outputs in tests/data/kaldi: every `nnet3-*egs*` line of
//! each folder's `cmd.txt` is run with compnet (same options, same working folder, outputs
//! redirected to a scratch folder) and every archive it writes must equal Kaldi's byte for
//! byte; where Kaldi's stderr was kept, our LOG/WARNING lines must say the same. A golden file
//! that is missing fails the test.

use std::path::{Path, PathBuf};
use std::process::Output;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

/// Runs compnet in `dir`; a panic is always a failure.
fn compnet(dir: &Path, args: &[String]) -> Output {
    compnet::testing::cli::run_in(env!("CARGO_BIN_EXE_compnet"), dir, args)
}

/// A fresh scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compnet-egs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn read_golden(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("golden file {} is missing: {e}", p.display()))
}

/// The message of a Kaldi or compnet log line, without its `LOG (...)` prefix.
fn log_body(line: &str) -> Option<(String, String)> {
    let (kind, rest) = line.split_once(" (")?;
    if kind != "LOG" && kind != "WARNING" {
        return None;
    }
    // Kaldi's prefix holds nested parentheses ("...:~UtteranceSplitter():file.cc:373) ").
    let end = match rest.find(".cc:") {
        Some(i) => i + rest[i..].find(") ")?,
        None => rest.find(") ")?,
    };
    Some((kind.to_string(), rest[end + 2..].trim_end().to_string()))
}

fn log_bodies(text: &str) -> Vec<(String, String)> {
    text.lines().filter_map(log_body).collect()
}

/// One Kaldi command line of a cmd.txt, as compnet arguments with outputs redirected.
struct Case {
    line: String,
    args: Vec<String>,
    /// (golden output path relative to the folder, our output path).
    outputs: Vec<(String, PathBuf)>,
    /// Kaldi's stderr, if the line kept it.
    log: Option<String>,
}

fn parse_cmd_line(line: &str, out_dir: &Path) -> Option<Case> {
    let (cmd, redirect) = match line.split_once(" 2>") {
        Some((c, r)) => (c, Some(r.trim())),
        None => (line, None),
    };
    let mut words = cmd.split_whitespace();
    let (tool, inputs) = match words.next()? {
        "nnet3-get-egs" => ("get-egs", 2),
        "nnet3-get-egs-dense-targets" => ("get-egs-dense-targets", 2),
        "nnet3-merge-egs" => ("merge-egs", 1),
        "nnet3-shuffle-egs" => ("shuffle-egs", 1),
        "nnet3-copy-egs" => ("copy-egs", 1),
        _ => return None,
    };
    let mut args = vec![tool.to_string()];
    let mut outputs = Vec::new();
    let mut positional = 0;
    for w in words {
        if w.starts_with("--") {
            args.push(w.to_string());
            continue;
        }
        positional += 1;
        if positional <= inputs {
            args.push(w.to_string());
            continue;
        }
        let (spec, path) = w.split_once(':').expect("an output wspecifier");
        let ours = out_dir.join(path.replace('/', "_"));
        args.push(format!("{spec}:{}", ours.display()));
        outputs.push((path.to_string(), ours));
    }
    let log = redirect
        .filter(|r| *r != "/dev/null")
        .map(|r| r.to_string());
    Some(Case {
        line: line.to_string(),
        args,
        outputs,
        log,
    })
}

/// Runs every egs command of `folder/cmd.txt`; returns how many outputs were compared.
fn check_folder(folder: &str) -> usize {
    let dir = Path::new(GOLDEN).join(folder);
    let cmd = String::from_utf8(read_golden(&dir.join("cmd.txt"))).unwrap();
    let out_dir = scratch(&folder.replace('/', "_"));
    let mut compared = 0;
    for line in cmd.lines().filter(|l| l.starts_with("nnet3-")) {
        let Some(case) = parse_cmd_line(line, &out_dir) else {
            continue;
        };
        let out = compnet(&dir, &case.args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{folder}: `{}` failed:\n{stderr}",
            case.line
        );
        for (golden, ours) in &case.outputs {
            let want = read_golden(&dir.join(golden));
            let got = std::fs::read(ours).unwrap();
            assert!(
                want == got,
                "{folder}: `{}`: {golden} differs from Kaldi's ({} vs {} bytes)",
                case.line,
                got.len(),
                want.len()
            );
            compared += 1;
        }
        if let Some(log) = &case.log {
            let want = String::from_utf8(read_golden(&dir.join(log))).unwrap();
            assert_eq!(
                log_bodies(&stderr),
                log_bodies(&want),
                "{folder}: `{}`: log lines differ from {log}",
                case.line
            );
        }
    }
    assert!(compared > 0, "{folder}/cmd.txt has no egs commands");
    compared
}

#[test]
fn formats_egs_archives_are_kaldis() {
    // get-egs compressed and not (with iVectors), merge-egs plain and --compress=true, and
    // copy-egs to text (five archives, five text copies).
    assert_eq!(check_folder("formats"), 10);
}

#[test]
fn training_egs_are_kaldis() {
    for case in [
        "affine-plain",
        "backstitch",
        "momentum-l2",
        "ng-batchnorm",
        "quadratic",
    ] {
        // unmerged and merged archives, plus both of Kaldi's text copies
        assert_eq!(check_folder(&format!("train/{case}")), 4, "{case}");
    }
}

#[test]
fn tools_egs_are_kaldis() {
    assert!(check_folder("tools") >= 6);
}

#[test]
fn egs_tools_options_are_kaldis() {
    // Chunk-size lists, whole utterances, overlap, compressed input, dense targets with
    // subsampling, every minibatch rule form, shuffling and copy-egs options (per-example
    // weights and output names included).
    assert_eq!(check_folder("egs-tools"), 17);
}

#[test]
fn frame_subsampled_posteriors_take_one_row_per_output_frame() {
    // Kaldi f4007's nnet3-get-egs reads posteriors at `first_frame + i * factor` and weights
    // past their end when --frame-subsampling-factor > 1 (its output then holds memory
    // garbage), so there is no golden; we take row `first_frame / factor + i`, as its dense
    // variant does.
    let dir = scratch("fsf");
    let feats = dir.join("feats.txt");
    let post = dir.join("post.txt");
    let rows: Vec<String> = (0..12).map(|i| format!("  {i} 0")).collect();
    std::fs::write(&feats, format!("u  [\n{} ]\n", rows.join("\n"))).unwrap();
    std::fs::write(&post, "u [ 0 1 ] [ 1 1 ] [ 2 1 ] [ 3 1 ]\n").unwrap();
    let args: Vec<String> = [
        "get-egs",
        "--num-pdfs=4",
        "--num-frames=6",
        "--frame-subsampling-factor=3",
        "--compress=false",
        &format!("ark:{}", feats.display()),
        &format!("ark:{}", post.display()),
        "ark,t:egs.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = compnet(&dir, &args);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(dir.join("egs.txt")).unwrap();
    assert!(text.contains("u-0 "), "{text}");
    assert!(
        text.contains("rows=2 dim=4 [ 0 1 ] dim=4 [ 1 1 ]"),
        "{text}"
    );
    assert!(
        text.contains("rows=2 dim=4 [ 2 1 ] dim=4 [ 3 1 ]"),
        "{text}"
    );
}

/// Runs compnet in a scratch folder expecting failure; returns stderr.
fn fails(dir: &Path, args: &[&str], what: &str) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = compnet(dir, &args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_ne!(out.status.code(), Some(0), "{what}: should fail\n{err}");
    assert!(
        out.status.code().is_some(),
        "{what}: killed by a signal\n{err}"
    );
    err
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = scratch("bad");
    let g = Path::new(GOLDEN).join("egs-tools");
    let multi = format!("ark:{}", g.join("multi.ark").display());
    let feats = format!("ark:{}", g.join("feats.txt").display());
    let post = format!("ark:{}", g.join("post.txt").display());
    let targets = format!("ark:{}", g.join("targets.txt").display());

    // Minibatch rules that do not parse, as Kaldi refuses them.
    for rule in [
        "64/128", "0", "4:2", "1=", "8,", "a", "-3", "3=2/3=4", "5=0:3",
    ] {
        let err = fails(
            &dir,
            &[
                "merge-egs",
                &format!("--minibatch-size={rule}"),
                &multi,
                "ark:o.ark",
            ],
            rule,
        );
        assert!(err.contains("--minibatch-size"), "{rule}: {err}");
    }

    // A truncated archive: every reader says where it broke off.
    let bytes = read_golden(&g.join("multi.ark"));
    let cut = dir.join("cut.ark");
    std::fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let cut = format!("ark:{}", cut.display());
    for tool in ["merge-egs", "shuffle-egs", "copy-egs"] {
        let err = fails(&dir, &[tool, &cut, "ark:o.ark"], tool);
        assert!(err.contains("cut.ark"), "{tool}: {err}");
    }
    assert!(
        !dir.join("o.ark").exists(),
        "no partial output is left behind"
    );

    // Dimension mismatches: targets against --num-targets, pdf ids against --num-pdfs.
    let err = fails(
        &dir,
        &[
            "get-egs-dense-targets",
            "--num-targets=5",
            &feats,
            &targets,
            "ark:o.ark",
        ],
        "num-targets",
    );
    assert!(err.contains("--num-targets=5"), "{err}");
    let err = fails(
        &dir,
        &["get-egs", "--num-pdfs=3", &feats, &post, "ark:o.ark"],
        "num-pdfs",
    );
    assert!(err.contains("--num-pdfs=3"), "{err}");
    let err = fails(
        &dir,
        &["get-egs", &feats, &post, "ark:o.ark"],
        "no num-pdfs",
    );
    assert!(err.contains("--num-pdfs"), "{err}");

    // Supervision with none of the feature keys: a warning per utterance, no egs, exit 1.
    let other = dir.join("other.txt");
    std::fs::write(&other, "zz [ 0 1 ]\n").unwrap();
    let err = fails(
        &dir,
        &[
            "get-egs",
            "--num-pdfs=5",
            &feats,
            &format!("ark:{}", other.display()),
            "ark:o.ark",
        ],
        "missing keys",
    );
    assert!(err.contains("No pdf-level posterior for key a"), "{err}");

    // An example without the "input" io cannot have its frames selected.
    let lone = dir.join("lone.txt");
    std::fs::write(
        &lone,
        "k <Nnet3Eg> <NumIo> 1 <NnetIo> output <I1V> 1 <I1> 0 0 0  [\n  1 ]\n</NnetIo> </Nnet3Eg> \n",
    )
    .unwrap();
    let err = fails(
        &dir,
        &[
            "copy-egs",
            "--frame=0",
            &format!("ark:{}", lone.display()),
            "ark:o.ark",
        ],
        "no input",
    );
    assert!(err.contains("\"input\""), "{err}");

    // Out-of-range options are refused before any work.
    for (opt, tool) in [
        ("--left-context=-2", "get-egs"),
        ("--num-frames=1,100000", "get-egs"),
        ("--frame-subsampling-factor=0", "get-egs"),
        ("--num-frames=4,x", "get-egs"),
    ] {
        fails(
            &dir,
            &[tool, "--num-pdfs=5", opt, &feats, &post, "ark:o.ark"],
            opt,
        );
    }
    fails(
        &dir,
        &["shuffle-egs", "--buffer-size=-1", &multi, "ark:o.ark"],
        "buffer",
    );
    fails(
        &dir,
        &["copy-egs", "--keep-proportion=-1", &multi, "ark:o.ark"],
        "keep",
    );
}

mod rules {
    use compnet::egs::merge::MinibatchSizes;
    use proptest::prelude::*;

    fn ranges() -> impl Strategy<Value = Vec<(i32, i32)>> {
        prop::collection::vec((1..500i32, 0..300i32).prop_map(|(a, d)| (a, a + d)), 1..5)
    }

    proptest! {
        #[test]
        fn single_rule_round_trips(r in ranges()) {
            let text: Vec<String> = r.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}:{b}") }).collect();
            let text = text.join(",");
            let parsed = MinibatchSizes::parse(&text).unwrap();
            prop_assert_eq!(parsed.rules.len(), 1);
            prop_assert_eq!(&parsed.rules[0].ranges, &r);
            prop_assert_eq!(parsed.to_option_string(), text.clone());
            prop_assert_eq!(MinibatchSizes::parse(&parsed.to_option_string()).unwrap(), parsed);
        }

        #[test]
        fn per_size_rules_round_trip(rules in prop::collection::btree_map(1..2000i32, ranges(), 1..5)) {
            let text: Vec<String> = rules.iter().map(|(size, r)| {
                let r: Vec<String> = r.iter().map(|&(a, b)| format!("{a}:{b}")).collect();
                format!("{size}={}", r.join(","))
            }).collect();
            let parsed = MinibatchSizes::parse(&text.join("/")).unwrap();
            prop_assert_eq!(parsed.rules.len(), rules.len());
            for (rule, (size, r)) in parsed.rules.iter().zip(&rules) {
                prop_assert_eq!(rule.eg_size, *size);
                prop_assert_eq!(&rule.ranges, r);
            }
            prop_assert_eq!(MinibatchSizes::parse(&parsed.to_option_string()).unwrap(), parsed);
        }

        #[test]
        fn chosen_sizes_are_allowed(r in ranges(), avail in 1..1000usize, ended: bool) {
            let text: Vec<String> = r.iter().map(|&(a, b)| format!("{a}:{b}")).collect();
            let m = MinibatchSizes::parse(&text.join(",")).unwrap();
            let n = m.minibatch_size(10, avail, ended);
            prop_assert!(n <= avail);
            if n > 0 {
                prop_assert!(r.iter().any(|&(a, b)| a as usize <= n && n <= b as usize));
            }
            let largest = r.iter().map(|x| x.1).max().unwrap() as usize;
            if !ended {
                prop_assert_eq!(n, if avail >= largest { largest } else { 0 });
            }
        }

        #[test]
        fn garbage_never_panics(s in "[0-9=:,/ a-]{0,20}") {
            let _ = MinibatchSizes::parse(&s);
        }
    }
}

/// Beyond Kaldi's get-egs (which wants `ali-to-post` first): integer pdf alignments, in text
/// or binary, give the same egs as the equivalent weight-1 posteriors.
#[test]
fn integer_alignments_give_the_egs_of_their_posteriors() {
    let dir = std::env::temp_dir().join(format!("compnet-egs-ali-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kaldi/train/affine-plain"
    );
    // One pdf per frame: the first of each golden posterior frame.
    let post = std::fs::read_to_string(format!("{case}/post.txt")).unwrap();
    let (mut ali_txt, mut post_txt, mut ali_bin) = (String::new(), String::new(), Vec::new());
    for line in post.lines() {
        let (key, rest) = line.split_once(' ').unwrap();
        let pdfs: Vec<i32> = rest
            .split(']')
            .filter_map(|f| f.trim().trim_start_matches('[').split_whitespace().next())
            .map(|p| p.parse().unwrap())
            .collect();
        assert!(!pdfs.is_empty());
        ali_txt += &format!(
            "{key} {}\n",
            pdfs.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        post_txt += &format!(
            "{key} {}\n",
            pdfs.iter()
                .map(|p| format!("[ {p} 1 ]"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        ali_bin.extend_from_slice(format!("{key} \0B\x04").as_bytes());
        ali_bin.extend_from_slice(&(pdfs.len() as i32).to_le_bytes());
        for p in &pdfs {
            ali_bin.push(4);
            ali_bin.extend_from_slice(&p.to_le_bytes());
        }
    }
    std::fs::write(dir.join("ali.txt"), ali_txt).unwrap();
    std::fs::write(dir.join("post.txt"), post_txt).unwrap();
    std::fs::write(dir.join("ali.ark"), ali_bin).unwrap();
    let egs_of = |sup: &str, out: &str| -> Vec<u8> {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
            .args([
                "get-egs",
                "--num-pdfs=10",
                "--left-context=1",
                "--right-context=1",
                "--num-frames=5",
                "--compress=false",
                &format!("ark:{case}/feats.txt"),
                &format!("ark:{}", dir.join(sup).display()),
                &format!("ark:{}", dir.join(out).display()),
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{sup}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::read(dir.join(out)).unwrap()
    };
    let from_post = egs_of("post.txt", "p.ark");
    assert!(from_post.len() > 1000);
    assert!(egs_of("ali.txt", "a.ark") == from_post, "text alignments");
    assert!(egs_of("ali.ark", "b.ark") == from_post, "binary alignments");
    let _ = std::fs::remove_dir_all(&dir);
}
