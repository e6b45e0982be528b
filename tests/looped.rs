//! Looped computation (`compile::looped`, `run::looped`, `compnet compute --looped`):
//! - feed-forward golden networks: looped outputs = Kaldi's chunked `nnet3-compute` outputs;
//! - recurrent golden networks: looped outputs = a whole-utterance computation (Kaldi's own
//!   output for utterances of at most one 50-frame chunk; compnet's single-chunk computation,
//!   itself checked against Kaldi in `golden_compute`, for all);
//! - the computation checker on every looped computation (golden and random networks);
//! - random networks looped vs a whole-utterance computation;
//! - the streaming API on bad input.
//!
//! Tolerance: `|ours − ref| ≤ 1e-5·(max(1, max|ref|) + |ref|)`, the golden tests' (text
//! archives carry 4–6 digits). Looped and whole-utterance computations multiply the same
//! rows by the same weights, but in GEMMs of other row counts, whose kernels may sum in
//! another order: float rounding, not bits.

use compnet::compile::checker::check_computation;
use compnet::io::table::SequentialTableReader;
use compnet::matrix::{Matrix, Vector};
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use compnet::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions};
use compnet::run::looped::LoopedDecoder;
use compnet::testing::golden::golden_dir;
use compnet::testing::numeric::assert_close_to_reference;
use compnet::testing::random_nnet_config;
use std::path::{Path, PathBuf};

/// Golden cases whose outputs depend on where chunks start, so that no chunking reproduces
/// another's outputs (Kaldi's chunked and whole-utterance outputs differ for them too), and
/// why. Every other case must be compared.
const CHUNK_DEPENDENT: &[(&str, &str)] = &[
    (
        "descriptors",
        "IfDefined(Offset(r1_hi, 2)) and Failover read frames a chunk may not have: zeros at \
         every chunk's end",
    ),
    (
        "xvector-small",
        "statistics pooling over the frames of the chunk",
    ),
    (
        "tdnn-splice-ivector",
        "online iVectors: a chunked computation takes the iVector of the chunk's middle, a \
         looped one that of the chunk's last input frame",
    ),
];

const RTOL: f32 = 1e-5;

fn read_archive(path: &Path) -> Vec<(String, Matrix)> {
    let spec = format!("ark:{}", path.display());
    SequentialTableReader::<Matrix>::open(&spec)
        .unwrap_or_else(|e| panic!("open {spec}: {e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("read {spec}: {e}")))
        .collect()
}

fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(golden_dir().join("cases"))
        .expect("cases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .collect();
    v.sort();
    v
}

fn name_of(case: &Path) -> String {
    case.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn case_options(case: &Path) -> Vec<String> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).expect("json"))
            .expect("parse case.json");
    json.get("compute_options")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str())
                .map(|s| {
                    s.replace(
                        "ark:ivectors.txt",
                        &format!("ark:{}", case.join("ivectors.txt").display()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn run_compute(case: &Path, opts: &[String], out: &Path) {
    let mut args = vec!["compnet".to_string(), "compute".to_string()];
    args.extend(opts.iter().cloned());
    args.push(case.join("model.raw").display().to_string());
    args.push(format!("ark:{}", case.join("feats.txt").display()));
    args.push(format!("ark,t:{}", out.display()));
    match compnet::cli::main_with_args(args.clone()) {
        Ok(0) => {}
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Largest difference; panics past the tolerance. `rows` limits which utterances count (by
/// their row count in `reference`).
fn compare(
    what: &str,
    ours: &[(String, Matrix)],
    reference: &[(String, Matrix)],
    max_rows: usize,
) -> (f32, usize) {
    assert_eq!(ours.len(), reference.len(), "{what}: utterance count");
    let (mut worst, mut compared) = (0.0f32, 0);
    for ((k1, a), (k2, b)) in ours.iter().zip(reference) {
        assert_eq!(k1, k2, "{what}: keys");
        assert_eq!(
            (a.num_rows(), a.num_cols()),
            (b.num_rows(), b.num_cols()),
            "{what} {k1}: shape"
        );
        if b.num_rows() > max_rows {
            continue;
        }
        compared += 1;
        let d = assert_close_to_reference(&format!("{what} {k1} (looped)"), a, b, RTOL);
        worst = worst.max(d);
    }
    (worst, compared)
}

fn is_recurrent(case: &Path) -> bool {
    let r = Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
    r.nnet.is_recurrent()
}

#[test]
fn golden_looped_equals_chunked_or_whole_utterance() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut ff = Vec::new();
    let mut rec = Vec::new();
    for case in cases() {
        let name = name_of(&case);
        if CHUNK_DEPENDENT.iter().any(|(c, _)| *c == name) {
            continue;
        }
        let opts = case_options(&case);
        let recurrent = is_recurrent(&case);
        for fpc in [7, 10, 50] {
            let mut looped_opts = opts.clone();
            looped_opts.push("--looped".into());
            looped_opts.push(format!("--frames-per-chunk={fpc}"));
            let out = tmp.path().join(format!("{name}-{fpc}.txt"));
            run_compute(&case, &looped_opts, &out);
            let ours = read_archive(&out);
            let kaldi = read_archive(&case.join("output.txt"));
            if recurrent {
                // Kaldi's output.txt is one chunk of 50 frames, i.e. the whole utterance,
                // for utterances of at most 50 frames.
                let (w1, n) = compare(&format!("{name} fpc {fpc} vs Kaldi"), &ours, &kaldi, 50);
                assert!(n >= 1, "{name}: no utterance of at most 50 frames");
                let whole_out = tmp.path().join(format!("{name}-whole.txt"));
                let mut whole_opts = opts.clone();
                whole_opts.push("--frames-per-chunk=1000".into());
                run_compute(&case, &whole_opts, &whole_out);
                let (w2, _) = compare(
                    &format!("{name} fpc {fpc} vs whole utterance"),
                    &ours,
                    &read_archive(&whole_out),
                    usize::MAX,
                );
                rec.push(format!("{name}/{fpc}: {w1:.1e} (Kaldi) {w2:.1e} (whole)"));
            } else {
                let (w, _) = compare(&format!("{name} fpc {fpc}"), &ours, &kaldi, usize::MAX);
                ff.push(format!("{name}/{fpc}: {w:.1e}"));
                let fsf3 = case.join("output_fsf3.txt");
                if fsf3.is_file() {
                    let mut o = looped_opts.clone();
                    o.push("--frame-subsampling-factor=3".into());
                    let out3 = tmp.path().join(format!("{name}-{fpc}-fsf3.txt"));
                    run_compute(&case, &o, &out3);
                    let (w, _) = compare(
                        &format!("{name} fpc {fpc} fsf 3"),
                        &read_archive(&out3),
                        &read_archive(&fsf3),
                        usize::MAX,
                    );
                    ff.push(format!("{name}/{fpc}/fsf3: {w:.1e}"));
                }
            }
        }
    }
    eprintln!("feed-forward, looped = Kaldi chunked: {ff:?}");
    eprintln!("recurrent, looped = whole utterance: {rec:?}");
    assert!(
        ff.len() >= 8 * 3,
        "only {} feed-forward comparisons",
        ff.len()
    );
    assert!(
        rec.len() >= 4 * 3,
        "only {} recurrent comparisons",
        rec.len()
    );
}

/// The looped computations of every golden network pass the checker, and a recurrent
/// network's steady chunk reads its recurrent state instead of recomputing it.
#[test]
fn checker_passes_every_looped_computation() {
    let (mut checked, mut carrying) = (0, 0);
    for case in cases() {
        let name = name_of(&case);
        let r =
            Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: 8,
            ..Default::default()
        };
        let dec = LoopedDecoder::new(r.nnet, &opts, "output", None)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let l = dec.computation().unwrap_or_else(|e| panic!("{name}: {e}"));
        for (part, p) in [("first", &l.first), ("steady", &l.steady)] {
            check_computation(&p.computation, &l.nnet)
                .unwrap_or_else(|e| panic!("{name} {part}: {e:?}"));
            checked += 1;
        }
        if l.steady.carried_in.iter().any(|c| c.is_some()) {
            carrying += 1;
        }
    }
    assert!(checked >= 2 * 14, "only {checked} computations checked");
    // Networks without left context (composite-distribute, ...) carry nothing; 11 of 16 do.
    assert!(
        carrying >= 11,
        "only {carrying} steady chunks read the previous chunk's values"
    );
}

/// True if the config reads frames that may be missing without making its reader
/// uncomputable (`Failover`, `IfDefined` of a later frame, convolutions with optional time
/// offsets): its outputs then depend on where chunks end, in Kaldi as here. `IfDefined` of an
/// earlier frame (a recurrence) does not: every chunking sees the same past.
fn reads_optional_frames(config: &str) -> bool {
    if config.contains("Failover(") || config.contains("required-time-offsets=") {
        return true;
    }
    config.split("IfDefined(Offset(").skip(1).any(|rest| {
        let inner = rest.split(')').next().unwrap_or("");
        let offset = inner.rsplit(',').next().unwrap_or("").trim();
        offset.parse::<i32>().map_or(true, |o| o > 0)
    })
}

#[test]
fn random_networks_looped_vs_whole_utterance() {
    let (mut compared, mut refused, mut skipped) = (0, 0, 0);
    for seed in 0..90u64 {
        let net = random_nnet_config(seed, false);
        if net
            .inputs
            .iter()
            .any(|(n, _)| n != "input" && n != "ivector")
            || !net.outputs.iter().any(|o| o == "output")
        {
            continue;
        }
        let nnet =
            Nnet::from_config_text(&net.config, "<random>", &mut seeded_rng(seed)).expect("net");
        let in_dim = nnet.node_dim(nnet.node_index("input").expect("input"));
        let iv_dim = nnet
            .node_index("ivector")
            .map(|i| nnet.node_dim(i))
            .unwrap_or(0);
        let mut rng = seeded_rng(seed + 1000);
        let feats = compnet::testing::random_matrix(23 + (seed % 13) as usize, in_dim, &mut rng);
        let iv = Vector::from_vec(
            compnet::testing::random_matrix(1, iv_dim.max(1), &mut rng).row_to_vec(0)[..iv_dim]
                .to_vec(),
        );
        let src = if iv_dim > 0 {
            IvectorSource::Fixed(&iv)
        } else {
            IvectorSource::None
        };
        let fpc = 3 + (seed % 7) as i32;
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: fpc,
            ..Default::default()
        };
        // A network that does not loop is refused by the plan or by the first compilation.
        let dec = LoopedDecoder::new(nnet.clone(), &opts, "output", None)
            .and_then(|d| d.computation().map(|l| (d, l)));
        let (dec, l) = match dec {
            Ok(d) => d,
            Err(e) => {
                eprintln!("seed {seed} ({}): not loopable: {e}", net.kind);
                refused += 1;
                continue;
            }
        };
        for p in [&l.first, &l.steady] {
            check_computation(&p.computation, &l.nnet)
                .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
        }
        let looped = dec.compute(&feats, src).expect("looped");
        let whole_opts = NnetSimpleComputationOptions {
            frames_per_chunk: 1000,
            ..Default::default()
        };
        let whole = ChunkComputer::new(nnet, &whole_opts, "output", None)
            .expect("whole")
            .compute(&feats, src)
            .expect("whole compute");
        if reads_optional_frames(&net.config) {
            skipped += 1;
            continue;
        }
        compare(
            &format!("seed {seed} ({}) fpc {fpc}", net.kind),
            &[("u".into(), looped)],
            &[("u".into(), whole)],
            usize::MAX,
        );
        compared += 1;
    }
    eprintln!(
        "random networks: {compared} compared, {skipped} chunk-dependent, {refused} not loopable"
    );
    assert!(compared >= 40, "only {compared} random networks compared");
    assert!(
        refused == 0,
        "{refused} random networks could not be looped"
    );
}

fn tdnn_decoder() -> LoopedDecoder {
    let case = golden_dir().join("cases").join("tdnn-component");
    let r = Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
    LoopedDecoder::new(
        r.nnet,
        &NnetSimpleComputationOptions::default(),
        "output",
        None,
    )
    .expect("decoder")
}

#[test]
fn streaming_in_pieces_equals_whole_input() {
    let dec = tdnn_decoder();
    let case = golden_dir().join("cases").join("tdnn-component");
    let utts = read_archive(&case.join("feats.txt"));
    for (key, feats) in &utts {
        let whole = dec.compute(feats, IvectorSource::None).expect("compute");
        let mut s = dec.stream();
        let mut out_rows = Vec::new();
        // Frames one at a time; outputs appear with the network's latency.
        for r in 0..feats.num_rows() {
            let row = Matrix::from_vec(1, feats.num_cols(), feats.row_to_vec(r));
            s.accept_frames(&row).expect("accept");
            s.run_ready().expect("run");
            let o = s.take_output();
            for i in 0..o.num_rows() {
                out_rows.push(o.row_to_vec(i));
            }
            assert!(out_rows.len() <= r + 1, "{key}: output before its input");
        }
        s.input_finished();
        s.run_ready().expect("flush");
        let o = s.take_output();
        for i in 0..o.num_rows() {
            out_rows.push(o.row_to_vec(i));
        }
        assert_eq!(out_rows.len(), whole.num_rows(), "{key}: rows");
        for (i, row) in out_rows.iter().enumerate() {
            assert_eq!(row, &whole.row_to_vec(i), "{key}: row {i}");
        }
    }
}

#[test]
fn streaming_bad_input_is_a_clear_error() {
    let dec = tdnn_decoder();
    let mut s = dec.stream();
    let wrong = Matrix::zeros(3, 5);
    let e = s.accept_frames(&wrong).expect_err("wrong dim").to_string();
    assert!(e.contains("frames vs network input"), "{e}");
    let case = golden_dir().join("cases").join("tdnn-component");
    let (_, feats) = read_archive(&case.join("feats.txt")).remove(0);
    s.accept_frames(&feats).expect("accept");
    s.input_finished();
    let e = s.accept_frames(&feats).expect_err("after end").to_string();
    assert!(e.contains("after input_finished"), "{e}");
    let e = s
        .set_ivector(&[1.0])
        .expect_err("no ivector input")
        .to_string();
    assert!(e.contains("iVector"), "{e}");
    // A chunk too large for the memory limit is refused before anything is allocated.
    let case = golden_dir().join("cases").join("tdnn-component");
    let r = Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
    let huge = NnetSimpleComputationOptions {
        frames_per_chunk: 2_000_000_000,
        ..Default::default()
    };
    let e = LoopedDecoder::new(r.nnet, &huge, "output", None)
        .err()
        .expect("huge chunk")
        .to_string();
    assert!(e.contains("--frames-per-chunk"), "{e}");
    // An iVector network without an iVector.
    let case = golden_dir().join("cases").join("descriptors");
    let r = Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
    let dec = LoopedDecoder::new(
        r.nnet,
        &NnetSimpleComputationOptions::default(),
        "output",
        None,
    )
    .expect("decoder");
    let mut s = dec.stream();
    let in_dim = 13;
    s.accept_frames(&Matrix::zeros(80, in_dim)).expect("accept");
    let e = s.run_ready().expect_err("no ivector").to_string();
    assert!(e.contains("needs an iVector"), "{e}");
}

#[test]
fn chunk_size_and_ivector_period() {
    use compnet::compile::looped::{get_chunk_size, modify_nnet_ivector_period};
    let case = golden_dir().join("cases").join("descriptors");
    let r = Nnet::read_model_file(case.join("model.raw").to_str().expect("path")).expect("model");
    let mut nnet = r.nnet;
    // Modulus 2 (Round(r1_lo, 2)): 50 stays, 51 → 52; with fsf 3: lcm 6 → 54.
    assert_eq!(get_chunk_size(&nnet, 1, 50), 50);
    assert_eq!(get_chunk_size(&nnet, 1, 51), 52);
    assert_eq!(get_chunk_size(&nnet, 3, 50), 54);
    let before = nnet.config_lines().join("\n");
    assert!(before.contains("ReplaceIndex(ivector, t, 0)"), "{before}");
    assert_eq!(
        modify_nnet_ivector_period(&mut nnet, 10).expect("modify"),
        1
    );
    let after = nnet.config_lines().join("\n");
    assert!(!after.contains("ReplaceIndex(ivector"), "{after}");
    assert!(after.contains("Round(ivector, 10)"), "{after}");
    assert!(modify_nnet_ivector_period(&mut nnet, 0).is_err());
    // The network changed its modulus to lcm(2, 10).
    assert_eq!(get_chunk_size(&nnet, 1, 21), 30);
}

/// `LoopedDecoder::compute_each` (what `compute --looped` writes from) hands out the outputs
/// of `compute_many`, in order and bit for bit.
#[test]
fn outputs_handed_out_one_by_one_equal_the_batched_ones() {
    use compnet::run::chunked::Utterance;
    let dec = tdnn_decoder();
    let case = golden_dir().join("cases").join("tdnn-component");
    let utts = read_archive(&case.join("feats.txt"));
    let batch: Vec<Utterance<'_>> = utts
        .iter()
        .map(|(_, m)| Utterance {
            feats: m,
            ivector: IvectorSource::None,
        })
        .collect();
    let want = dec
        .compute_many(&batch)
        .map_err(|(u, e)| format!("utt {u}: {e}"))
        .unwrap();
    let mut got = Vec::new();
    dec.compute_each(&batch, |u, m| {
        got.push((u, m.clone()));
        Ok(())
    })
    .map_err(|(u, e)| format!("utt {u}: {e}"))
    .unwrap();
    assert!(utts.len() > 1);
    assert_eq!(got.len(), want.len());
    for (i, (u, m)) in got.iter().enumerate() {
        assert_eq!(*u, i);
        assert!(m == &want[i], "utterance {i}");
    }
}
