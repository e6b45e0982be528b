//! Bad input to the training tools: egs that do not fit the model, supervision for a node
//! the model lacks, empty and truncated archives, NaN in the features. A clear error naming
//! the archive and the example (or, where Kaldi skips, a warning and a skipped update),
//! never a panic, and never a half-written model.

use compnet::io::egs::{NnetExample, NnetExampleWriter, SequentialNnetExampleReader};
use compnet::io::GeneralMatrix;
use compnet::testing::component::ParamCopies;
use std::path::{Path, PathBuf};
use std::process::Output;

const TRAIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/train");

fn golden(case: &str, file: &str) -> String {
    let p = Path::new(TRAIN).join(case).join(file);
    assert!(p.exists(), "golden file {} missing", p.display());
    p.display().to_string()
}

/// `name` in a folder of its own (tests run in parallel, and each checks its folder for
/// leftover temporaries).
fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compnet-train-bad-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn compnet(args: &[&str]) -> Output {
    compnet::testing::cli::run(env!("CARGO_BIN_EXE_compnet"), args)
}

/// Runs a command that must fail without writing `out` (or a temporary beside it); returns
/// its stderr.
fn must_fail(args: &[&str], out: &Path) -> String {
    compnet::testing::cli::must_fail(env!("CARGO_BIN_EXE_compnet"), args, out, false)
}

fn read_egs(case: &str) -> Vec<(String, NnetExample)> {
    SequentialNnetExampleReader::open(&format!("ark:{}", golden(case, "egs.ark")))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn write_egs(path: &Path, egs: &[(String, NnetExample)]) {
    let mut w = NnetExampleWriter::open(&format!("ark:{}", path.display())).unwrap();
    for (k, e) in egs {
        w.write(k, e).unwrap();
    }
    w.close().unwrap();
}

#[test]
fn egs_of_another_model_are_rejected_with_the_key() {
    // ng-batchnorm's egs have 12 pdfs; affine-plain's model has 10 outputs.
    let out = tmp("dims.raw");
    let egs = format!("ark:{}", golden("ng-batchnorm", "egs.ark"));
    let model = golden("affine-plain", "before.raw");
    for tool in ["train", "compute-prob"] {
        let mut args = vec![tool, &model, &egs];
        let o = out.display().to_string();
        if tool == "train" {
            args.push(&o);
        }
        let err = must_fail(&args, &out);
        assert!(
            err.contains("egs.ark") && err.contains("example merged-"),
            "{err}"
        );
        assert!(err.contains("dimension"), "{err}");
    }
}

#[test]
fn supervision_for_a_missing_output_is_rejected() {
    let mut egs = read_egs("affine-plain");
    for (_, e) in &mut egs {
        for io in &mut e.io {
            if io.name == "output" {
                io.name = "output-xent".into();
            }
        }
    }
    let ark = tmp("renamed.ark");
    write_egs(&ark, &egs);
    let out = tmp("renamed.raw");
    let err = must_fail(
        &[
            "train",
            &golden("affine-plain", "before.raw"),
            &format!("ark:{}", ark.display()),
            out.to_str().unwrap(),
        ],
        &out,
    );
    assert!(
        err.contains("output-xent") && err.contains("no node"),
        "{err}"
    );
}

#[test]
fn truncated_archives_fail_with_the_offset() {
    let bytes = std::fs::read(golden("affine-plain", "egs.ark")).unwrap();
    let ark = tmp("truncated.ark");
    let out = tmp("truncated.raw");
    for cut in [10, bytes.len() / 3, bytes.len() - 7] {
        std::fs::write(&ark, &bytes[..cut]).unwrap();
        let err = must_fail(
            &[
                "train",
                &golden("affine-plain", "before.raw"),
                &format!("ark:{}", ark.display()),
                out.to_str().unwrap(),
            ],
            &out,
        );
        assert!(err.contains("truncated.ark"), "cut {cut}: {err}");
        assert!(err.contains("byte"), "cut {cut}: {err}");
    }
}

/// As nnet3-train: an empty archive trains on nothing, the model is written unchanged and
/// the exit status says nothing was trained on.
#[test]
fn an_empty_archive_trains_nothing() {
    let ark = tmp("empty.ark");
    std::fs::write(&ark, b"").unwrap();
    let out = tmp("empty.raw");
    let o = compnet(&[
        "train",
        &golden("affine-plain", "before.raw"),
        &format!("ark:{}", ark.display()),
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(out.exists());
    let prob = compnet(&[
        "compute-prob",
        &golden("affine-plain", "before.raw"),
        &format!("ark:{}", ark.display()),
    ]);
    assert!(!prob.status.success());
}

/// NaN in the features: the minibatch's change is not finite, so (as Kaldi) it is skipped
/// with a warning and counted; the other minibatches train.
#[test]
fn nan_in_features_skips_that_update() {
    let mut egs = read_egs("affine-plain");
    let (_, first) = &mut egs[0];
    let io = first.io.iter_mut().find(|io| io.name == "input").unwrap();
    let mut m = io.features.to_matrix();
    m.set(0, 0, f32::NAN);
    io.features = GeneralMatrix::Full(m);
    let ark = tmp("nan.ark");
    write_egs(&ark, &egs);
    let out = tmp("nan.raw");
    let o = compnet(&[
        "train",
        &golden("affine-plain", "before.raw"),
        &format!("ark:{}", ark.display()),
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not finite") && err.contains("update skipped"),
        "{err}"
    );
    assert!(err.contains("1 of 4 minibatches"), "{err}");
    // The parameters are finite: the NaN never reached them.
    let nnet = compnet::nnet::Nnet::read_model_file(out.to_str().unwrap())
        .unwrap()
        .nnet;
    for c in &nnet.components {
        if let Some(u) = c.as_updatable() {
            let mut v = vec![0.0; u.num_parameters()];
            u.copy_params_to(&mut v);
            assert!(v.iter().all(|x| x.is_finite()));
        }
    }
}

#[test]
fn bad_options_are_usage_errors() {
    let out = tmp("opts.raw");
    let egs = format!("ark:{}", golden("affine-plain", "egs.ark"));
    let model = golden("affine-plain", "before.raw");
    for opt in [
        "--momentum=1.5",
        "--max-param-change=-1",
        "--print-interval=0",
        "--momentum=nan",
    ] {
        let err = must_fail(&["train", opt, &model, &egs, out.to_str().unwrap()], &out);
        assert!(err.len() < 400, "{opt}: {err}");
    }
    // Backstitch with momentum is refused, as in Kaldi.
    must_fail(
        &[
            "train",
            "--momentum=0.5",
            "--backstitch-training-scale=0.3",
            &model,
            &egs,
            out.to_str().unwrap(),
        ],
        &out,
    );
    // average: weights that do not match the models.
    must_fail(
        &[
            "average",
            "--weights=1:2:3",
            &model,
            &model,
            out.to_str().unwrap(),
        ],
        &out,
    );
    must_fail(
        &[
            "average",
            "--weights=a:b",
            &model,
            &model,
            out.to_str().unwrap(),
        ],
        &out,
    );
    // combine: models of different structure.
    must_fail(
        &[
            "combine",
            &model,
            &golden("ng-batchnorm", "before.raw"),
            &egs,
            out.to_str().unwrap(),
        ],
        &out,
    );
}
