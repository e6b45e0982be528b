//! Chunks of several utterances computed together (`ChunkComputer::compute_many`, what
//! `compnet compute` does) give each utterance the output it gets alone, for feed-forward and
//! recurrent networks, with chunks of several shapes (short utterances, partial last chunks,
//! extra context); and `Nnet::is_recurrent`, which picks the batch size, tells the two apart.

use compnet::matrix::Matrix;
use compnet::nnet::Nnet;
use compnet::run::chunked::{
    ChunkComputer, IvectorSource, NnetSimpleComputationOptions, Utterance,
};
use compnet::testing::numeric::{gauss, max_abs_diff};
use rand::SeedableRng;

const TDNN: &str = "input-node name=input dim=5
component name=a type=NaturalGradientAffineComponent input-dim=15 output-dim=8
component-node name=a component=a input=Append(Offset(input, -2), input, Offset(input, 1))
component name=r type=RectifiedLinearComponent dim=8
component-node name=r component=r input=a
component name=o type=AffineComponent input-dim=16 output-dim=4
component-node name=o component=o input=Append(Offset(r, -1), r)
output-node name=output input=o objective=linear
";

/// An Elman-style recurrence (the golden `rnn` case's shape) plus a period-2 one.
const RNN: &str = "input-node name=input dim=5
component name=a type=AffineComponent input-dim=13 output-dim=8
component-node name=a component=a input=Append(input, IfDefined(Offset(h, -1)))
component name=h type=TanhComponent dim=8
component-node name=h component=h input=a
component name=b type=AffineComponent input-dim=14 output-dim=6
component-node name=b component=b input=Append(h, IfDefined(Offset(s, -2)))
component name=s type=SigmoidComponent dim=6
component-node name=s component=s input=b
component name=o type=AffineComponent input-dim=6 output-dim=6
component-node name=o component=o input=s
component name=f type=AffineComponent input-dim=6 output-dim=4
component-node name=f component=f input=o
output-node name=output input=f objective=linear
";

fn nnet(config: &str, seed: u64) -> Nnet {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Nnet::from_config_text(config, "test.config", &mut rng).expect("config")
}

fn feats(rows: usize, seed: u64) -> Matrix {
    gauss(rows, 5, seed)
}

/// Every utterance's output from one `compute_many` call equals its output alone.
fn check_batched_equals_alone(config: &str, opts: &NnetSimpleComputationOptions) {
    // Lengths: shorter than a chunk, exactly one, a partial last chunk, many chunks.
    let lengths = [1usize, 3, 7, 8, 9, 23, 40, 41, 64, 5, 17];
    let utts: Vec<Matrix> = lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| feats(n, 100 + i as u64))
        .collect();
    let model = nnet(config, 7);
    let mut cc = ChunkComputer::new(model.clone(), opts, "output", None).expect("chunker");
    let batch: Vec<Utterance<'_>> = utts
        .iter()
        .map(|m| Utterance {
            feats: m,
            ivector: IvectorSource::None,
        })
        .collect();
    let together = cc
        .compute_many(&batch)
        .map_err(|(u, e)| format!("utt {u}: {e}"))
        .unwrap();
    assert_eq!(together.len(), utts.len());
    let mut alone_cc = ChunkComputer::new(model, opts, "output", None).expect("chunker");
    for (i, m) in utts.iter().enumerate() {
        let alone = alone_cc.compute(m, IvectorSource::None).expect("compute");
        assert_eq!(
            alone.num_rows(),
            lengths[i].div_ceil(opts.frame_subsampling_factor as usize)
        );
        let d = max_abs_diff(&alone, &together[i]);
        assert!(
            d <= 1e-5,
            "utterance {i} ({} frames): batched differs by {d}",
            lengths[i]
        );
        assert!(
            alone.num_rows() == 0 || alone.view().max_abs() > 0.0,
            "utterance {i}: all zero"
        );
    }
}

#[test]
fn batched_chunks_equal_single_utterances_feed_forward() {
    let opts = NnetSimpleComputationOptions {
        frames_per_chunk: 8,
        ..Default::default()
    };
    check_batched_equals_alone(TDNN, &opts);
    let opts = NnetSimpleComputationOptions {
        frames_per_chunk: 6,
        frame_subsampling_factor: 3,
        extra_left_context: 2,
        extra_right_context_final: 0,
        ..Default::default()
    };
    check_batched_equals_alone(TDNN, &opts);
}

#[test]
fn batched_chunks_equal_single_utterances_recurrent() {
    let opts = NnetSimpleComputationOptions {
        frames_per_chunk: 8,
        extra_left_context: 4,
        extra_left_context_initial: 0,
        ..Default::default()
    };
    check_batched_equals_alone(RNN, &opts);
}

#[test]
fn recurrence_is_detected() {
    assert!(!nnet(TDNN, 1).is_recurrent());
    assert!(nnet(RNN, 1).is_recurrent());
    // The golden networks: the recurrent cases and two feed-forward ones.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kaldi/cases");
    for (case, recurrent) in [
        ("rnn", true),
        ("lstm-primitives", true),
        ("fast-lstmp", true),
        ("clockwork", true),
        ("tdnnf", false),
        ("xvector-small", false),
        ("simplest", false),
    ] {
        let text = std::fs::read_to_string(dir.join(case).join("net.config"))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let n =
            Nnet::from_config_text(&text, case, &mut rng).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(n.is_recurrent(), recurrent, "{case}");
    }
}

/// The same utterances computed again by a fresh computer give the same bits, whatever the
/// threads' timing (equally shaped chunk batches run in parallel, and a weight matrix's first
/// products take another GEMM path than its later ones).
#[test]
fn batched_computation_is_bit_reproducible() {
    let opts = NnetSimpleComputationOptions {
        frames_per_chunk: 8,
        ..Default::default()
    };
    let utts: Vec<Matrix> = (0..12).map(|i| feats(40 + i, 300 + i as u64)).collect();
    let batch: Vec<Utterance<'_>> = utts
        .iter()
        .map(|m| Utterance {
            feats: m,
            ivector: IvectorSource::None,
        })
        .collect();
    for config in [TDNN, RNN] {
        let model = nnet(config, 9);
        let mut first: Option<Vec<Vec<f32>>> = None;
        for _ in 0..8 {
            let mut cc = ChunkComputer::new(model.clone(), &opts, "output", None).unwrap();
            let out: Vec<Vec<f32>> = cc
                .compute_many(&batch)
                .map_err(|(u, e)| format!("utt {u}: {e}"))
                .unwrap()
                .iter()
                .map(|m| m.to_vec())
                .collect();
            match &first {
                None => first = Some(out),
                Some(f) => assert!(
                    f.iter()
                        .flatten()
                        .map(|x| x.to_bits())
                        .eq(out.iter().flatten().map(|x| x.to_bits())),
                    "a second run differs"
                ),
            }
        }
    }
}

/// `compute_each` hands out the outputs of `compute_many`, bit for bit and in order, while
/// reusing the buffers it lent: the caller overwrites each lent output with NaN, and later
/// utterances (longer and shorter ones, in the same call and the next) still come out
/// right. With priors, their logs are subtracted in both. An error of the callback stops
/// the computation and comes back with the utterance's index.
#[test]
fn outputs_handed_out_one_by_one_equal_the_batched_ones() {
    let lengths = [40usize, 9, 64, 1, 23, 41, 8, 70];
    let utts: Vec<Matrix> = lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| feats(n, 500 + i as u64))
        .collect();
    let batch: Vec<Utterance<'_>> = utts
        .iter()
        .map(|m| Utterance {
            feats: m,
            ivector: IvectorSource::None,
        })
        .collect();
    let priors = compnet::matrix::Vector::from_vec(vec![0.1, 0.2, 0.3, 0.4]);
    for (config, priors) in [(TDNN, None), (TDNN, Some(&priors)), (RNN, None)] {
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: 8,
            ..Default::default()
        };
        let model = nnet(config, 11);
        let mut cc = ChunkComputer::new(model.clone(), &opts, "output", priors).unwrap();
        let want: Vec<Vec<u32>> = cc
            .compute_many(&batch)
            .map_err(|(u, e)| format!("utt {u}: {e}"))
            .unwrap()
            .iter()
            .map(|m| m.to_vec().iter().map(|x| x.to_bits()).collect())
            .collect();
        let mut cc = ChunkComputer::new(model, &opts, "output", priors).unwrap();
        for round in 0..2 {
            let mut got: Vec<(usize, Vec<u32>)> = Vec::new();
            cc.compute_each(&batch, |u, m| {
                got.push((u, m.to_vec().iter().map(|x| x.to_bits()).collect()));
                m.view_mut().set_const(f32::NAN);
                Ok(())
            })
            .map_err(|(u, e)| format!("utt {u}: {e}"))
            .unwrap();
            assert_eq!(got.len(), want.len(), "round {round}");
            for (i, (u, bits)) in got.iter().enumerate() {
                assert_eq!(*u, i, "round {round}: order");
                assert_eq!(bits, &want[i], "round {round}: utterance {i}");
            }
        }
        let mut seen = 0;
        let err = cc
            .compute_each(&batch, |u, _| {
                seen += 1;
                if u == 2 {
                    Err(compnet::error::Error::Compute("stop".into()))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert_eq!(err.0, 2);
        assert_eq!(seen, 3);
    }
}
