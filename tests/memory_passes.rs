//! The optimizer's last three passes in Kaldi's order (extend-matrices, allocate-from-other,
//! memory-compression-level): each fires on a computation built for it, the checker accepts
//! what every pass leaves, and the results (outputs, input derivatives, parameter
//! gradients, statistics) are bit-identical to those with the pass off.

use compnet::compile::checker::{check_computation, Problem};
use compnet::compile::memory::peak_matrix_memory;
use compnet::compile::optimize::optimize_observed;
use compnet::compile::{
    compile_computation, Command, CompilerOptions, ComputationRequest, IoSpecification,
    NnetComputation, OptimizeOptions,
};
use compnet::matrix::{CompressionKind, Matrix};
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::random_matrix;

fn nnet(config: &str) -> Nnet {
    Nnet::from_config_text(config, "<test>", &mut seeded_rng(3)).expect("config")
}

/// Compiles `req` and optimizes with `opts`, checking the computation after every pass.
fn compiled(nnet: &Nnet, req: &ComputationRequest, opts: &OptimizeOptions) -> NnetComputation {
    let mut c = compile_computation(nnet, req, &CompilerOptions::default()).expect("compile");
    optimize_observed(nnet, &mut c, opts, &mut |pass, c| {
        check_computation(c, nnet).unwrap_or_else(|e| {
            panic!(
                "after {pass}: {e}\n{}",
                compnet::compile::print::format_computation(c, nnet)
            )
        });
    });
    c
}

/// Everything a training step produces, as bit patterns: outputs, input derivatives, the
/// parameter gradient and the model after statistics were stored into it.
fn run(nnet: &Nnet, c: &NnetComputation, req: &ComputationRequest) -> Vec<Vec<u32>> {
    let mut model = nnet.clone();
    let mut delta = nnet.clone();
    for comp in delta.components.iter_mut() {
        if let Some(u) = comp.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let mut rng = seeded_rng(7);
    let bits = |m: &Matrix| m.to_vec().iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let mut got = Vec::new();
    {
        let mut computer = NnetComputer::for_training(c, &mut model, &mut delta)
            .with_seed(11)
            .poison_undefined();
        for i in &req.inputs {
            let dim = nnet.node_dim(nnet.node_index(&i.name).unwrap());
            // Whole numbers around zero, so some ReLU inputs are exactly 0.
            let mut x = random_matrix(i.indexes.len(), dim, &mut rng);
            for r in 0..x.num_rows() {
                for k in 0..x.num_cols() {
                    x.set(r, k, (x.get(r, k) * 2.0).round());
                }
            }
            computer.accept_input(&i.name, x).unwrap();
        }
        computer.run_forward().unwrap();
        for o in &req.outputs {
            got.push(bits(computer.output(&o.name).unwrap()));
            let dim = nnet.node_dim(nnet.node_index(&o.name).unwrap());
            let d = random_matrix(o.indexes.len(), dim, &mut rng);
            computer.accept_output_deriv(&o.name, d).unwrap();
        }
        computer.run_backward().unwrap();
        for i in req.inputs.iter().filter(|i| i.has_deriv) {
            got.push(bits(computer.input_deriv(&i.name).unwrap()));
        }
    }
    for net in [&delta, &model] {
        got.push(net.write_model(true).into_iter().map(u32::from).collect());
    }
    got
}

fn count(c: &NnetComputation, f: impl Fn(&Command) -> bool) -> usize {
    c.commands.iter().filter(|x| f(x)).count()
}

fn with_pass(pass: &str, on: bool) -> OptimizeOptions {
    let mut o = OptimizeOptions::default();
    assert!(o.set_pass(pass, on));
    o
}

/// `b` reads `a` two frames back, `c` reads all of `a`: the copy of `a`'s first rows into
/// `b`'s input is most of `a`, so extend-matrices grows `b`'s input to all of `a`, and the
/// copy then becomes an alias.
const OFFSET_NET: &str = "input-node name=input dim=3
component name=a type=AffineComponent input-dim=3 output-dim=3
component-node name=a component=a input=input
component name=b type=AffineComponent input-dim=3 output-dim=3
component-node name=b component=b input=Offset(a, -2)
component name=c type=AffineComponent input-dim=3 output-dim=3
component-node name=c component=c input=a
output-node name=output input=b
output-node name=output2 input=c
";

fn offset_request() -> ComputationRequest {
    ComputationRequest {
        inputs: vec![IoSpecification::from_ranges("input", 0..2, -2..8, true)],
        outputs: vec![
            IoSpecification::from_ranges("output", 0..2, 0..8, true),
            IoSpecification::from_ranges("output2", 0..2, -2..8, true),
        ],
        need_model_derivative: true,
        ..Default::default()
    }
}

#[test]
fn extend_matrices_fires_and_changes_nothing() {
    let (n, req) = (nnet(OFFSET_NET), offset_request());
    // The pass alone, after the row-op pass that makes the row copy a matrix copy: the copy
    // now reads all of a's matrix into a grown destination.
    let mut c = compile_computation(&n, &req, &CompilerOptions::default()).unwrap();
    compnet::compile::row_ops::replace_row_with_matrix_ops(&mut c);
    let before = c.matrices.clone();
    assert_eq!(
        compnet::compile::extend_matrices::extend_matrices(&mut c),
        1
    );
    check_computation(&c, &n).unwrap();
    let grown: Vec<usize> = (1..before.len())
        .filter(|&m| c.matrices[m].num_rows != before[m].num_rows)
        .collect();
    assert_eq!(grown.len(), 1, "{grown:?}");
    assert_eq!(
        c.matrices[grown[0]].num_rows, 20,
        "grown to a's 10 frames × 2 sequences"
    );
    // Then the merging removes the copy, which it cannot without the extension.
    let copies = |c: &NnetComputation| count(c, |x| matches!(x, Command::MatrixCopy { .. }));
    let on = compiled(&n, &req, &OptimizeOptions::default());
    let off = compiled(&n, &req, &with_pass("extend-matrices", false));
    assert_eq!(copies(&off), copies(&on) + 1);
    assert!(on.matrices.len() < off.matrices.len());
    let plain = compiled(
        &n,
        &req,
        &OptimizeOptions {
            optimize: false,
            ..Default::default()
        },
    );
    let want = run(&n, &plain, &req);
    assert_eq!(run(&n, &on, &req), want);
    assert_eq!(run(&n, &off, &req), want);
}

#[test]
fn allocate_from_other_reuses_storage_without_raising_the_peak() {
    let (n, req) = (nnet(OFFSET_NET), offset_request());
    let on = compiled(&n, &req, &OptimizeOptions::default());
    let off = compiled(&n, &req, &with_pass("allocate-from-other", false));
    let swaps = |c: &NnetComputation| count(c, |x| matches!(x, Command::SwapMatrix { .. }));
    let allocs = |c: &NnetComputation| {
        count(c, |x| {
            matches!(
                x,
                Command::AllocMatrix { .. } | Command::AllocMatrixUndefined { .. }
            )
        })
    };
    assert_eq!(swaps(&off), 0);
    assert!(swaps(&on) > 0, "no swap");
    assert_eq!(allocs(&on) + swaps(&on), allocs(&off));
    // Each swap takes the place of the allocation that came next after a free.
    assert_eq!(
        peak_matrix_memory(&on).peak_bytes,
        peak_matrix_memory(&off).peak_bytes
    );
    assert_eq!(run(&n, &on, &req), run(&n, &off, &req));
}

/// Two ReLU layers whose outputs only their own backprops read again.
const RELU_NET: &str = "input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=4 output-dim=16
component-node name=a1 component=a1 input=input
component name=r1 type=RectifiedLinearComponent dim=16 self-repair-scale=1e-2
component-node name=r1 component=r1 input=a1
component name=bn type=BatchNormComponent dim=16
component-node name=bn component=bn input=r1
component name=a2 type=AffineComponent input-dim=16 output-dim=16
component-node name=a2 component=a2 input=bn
component name=r2 type=RectifiedLinearComponent dim=16
component-node name=r2 component=r2 input=a2
component name=a3 type=AffineComponent input-dim=16 output-dim=2
component-node name=a3 component=a3 input=r2
output-node name=output input=a3
";

fn relu_request() -> ComputationRequest {
    ComputationRequest {
        inputs: vec![IoSpecification::from_ranges("input", 0..2, 0..6, true)],
        outputs: vec![IoSpecification::from_ranges("output", 0..2, 0..6, true)],
        need_model_derivative: true,
        store_component_stats: true,
        ..Default::default()
    }
}

#[test]
fn memory_compression_keeps_relu_signs_with_identical_derivatives() {
    let (n, req) = (nnet(RELU_NET), relu_request());
    let on = compiled(&n, &req, &OptimizeOptions::default());
    let off = compiled(&n, &req, &with_pass("memory-compression-level", false));
    let compressed: Vec<usize> = on
        .commands
        .iter()
        .filter_map(|x| match *x {
            Command::CompressMatrix { m, kind } => {
                assert_eq!(kind, CompressionKind::SignUint8);
                Some(m)
            }
            _ => None,
        })
        .collect();
    // r1's output (read by BatchNorm forward, then only by r1's backprop) is compressed; r2's
    // output is a3's input, which a3's backprop reads too, so it stays.
    assert_eq!(compressed.len(), 1, "{:?}", on.commands);
    assert_eq!(
        count(&on, |x| matches!(x, Command::DecompressMatrix { .. })),
        1
    );
    assert_eq!(
        count(&off, |x| matches!(
            x,
            Command::CompressMatrix { .. } | Command::DecompressMatrix { .. }
        )),
        0
    );
    let marker = |c: &NnetComputation| {
        c.commands
            .iter()
            .position(|x| matches!(x, Command::NoOperationMarker))
            .unwrap()
    };
    let at =
        |c: &NnetComputation, f: &dyn Fn(&Command) -> bool| c.commands.iter().position(f).unwrap();
    assert!(at(&on, &|x| matches!(x, Command::CompressMatrix { .. })) < marker(&on));
    assert!(at(&on, &|x| matches!(x, Command::DecompressMatrix { .. })) > marker(&on));
    assert!(peak_matrix_memory(&on).peak_bytes < peak_matrix_memory(&off).peak_bytes);
    // Self-repair and statistics included: the same bits.
    assert_eq!(run(&n, &on, &req), run(&n, &off, &req));
    // Forward-only computations have nothing to compress.
    let mut fwd = relu_request();
    fwd.inputs[0].has_deriv = false;
    fwd.outputs[0].has_deriv = false;
    fwd.need_model_derivative = false;
    let f = compiled(&n, &fwd, &OptimizeOptions::default());
    assert_eq!(
        count(&f, |x| matches!(x, Command::CompressMatrix { .. })),
        0
    );
}

#[test]
fn looped_chunks_skip_the_three_passes() {
    let (n, req) = (nnet(OFFSET_NET), offset_request());
    let looped = OptimizeOptions {
        looped: true,
        ..Default::default()
    };
    let mut off = OptimizeOptions {
        looped: true,
        ..Default::default()
    };
    for p in [
        "extend-matrices",
        "allocate-from-other",
        "memory-compression-level",
    ] {
        off.set_pass(p, false);
    }
    assert_eq!(
        compiled(&n, &req, &looped).commands,
        compiled(&n, &req, &off).commands
    );
}

/// The checker knows the new commands: a compressed matrix cannot be used, a decompressed
/// one read only by a backprop that needs just its signs, and a swap into an unallocated
/// matrix moves storage.
#[test]
fn checker_guards_compression_and_storage_moves() {
    let n = nnet(RELU_NET);
    let req = relu_request();
    let good = compiled(&n, &req, &OptimizeOptions::default());
    let find = |f: &dyn Fn(&Command) -> bool| good.commands.iter().position(f).unwrap();
    let compress = find(&|x| matches!(x, Command::CompressMatrix { .. }));
    let decompress = find(&|x| matches!(x, Command::DecompressMatrix { .. }));
    let problem = |c: &NnetComputation| check_computation(c, &n).unwrap_err().problem;
    // Decompressing too late: the backprop reads a compressed matrix.
    let mut late = good.commands.clone();
    let d = late.remove(decompress);
    late.insert(decompress + 1, d);
    let mut c = compiled(&n, &req, &OptimizeOptions::default());
    c.commands = late;
    assert!(
        matches!(problem(&c), Problem::UseWhileCompressed { .. }),
        "{:?}",
        problem(&c)
    );
    // Compressing before the last forward use: BatchNorm reads only signs.
    let mut early = good.commands.clone();
    let cm = early.remove(compress);
    early.insert(compress - 1, cm);
    let mut c = compiled(&n, &req, &OptimizeOptions::default());
    c.commands = early;
    let p = problem(&c);
    assert!(
        matches!(
            p,
            Problem::UseWhileCompressed { .. } | Problem::LossyRead { .. }
        ),
        "{p:?}"
    );
    // The swap frees its source: swapping it back in is a use after free.
    let mut c = compiled(&n, &req, &OptimizeOptions::default());
    let (k, a, b) = first_swap(&c).expect("a swap");
    c.commands.insert(k + 1, Command::SwapMatrix { a: b, b: a });
    assert!(matches!(problem(&c), Problem::UseAfterFree { .. }));
}

fn first_swap(c: &NnetComputation) -> Option<(usize, usize, usize)> {
    c.commands.iter().enumerate().find_map(|(k, x)| match *x {
        Command::SwapMatrix { a, b } => Some((k, a, b)),
        _ => None,
    })
}

/// Runs the compnet binary in `dir`; returns stdout, panicking on failure.
fn compnet(dir: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run compnet");
    assert!(
        out.status.success(),
        "compnet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A training golden (ReLU → BatchNorm layers, as in TDNN-F) trained with the storage passes
/// and without them gives the same model, byte for byte; its minibatch computation does
/// compress and swap. Memory compression is left on in both runs: switching it off removes
/// the draws Kaldi's `InsertCommands` makes from the training's `rand()` stream, which moves
/// every later statistics sample (in Kaldi too); its exactness is
/// `memory_compression_keeps_relu_signs_with_identical_derivatives`.
#[test]
fn training_golden_is_bit_identical_with_and_without_the_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kaldi/train/ng-batchnorm");
    let tmp = std::env::temp_dir().join(format!("compnet-memory-passes-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let printed = String::from_utf8(compnet(
        &dir,
        &[
            "compile",
            "before.raw",
            "--input=input:0..7:-3..6",
            "--output=output:0..7:0..4",
            "--backprop",
            "--shortcut",
        ],
    ))
    .unwrap();
    assert!(printed.contains("CompressMatrix(") && printed.contains("DecompressMatrix("));
    assert!(printed.contains(".swap("));
    let off = [
        "--optimization.extend-matrices=false",
        "--optimization.allocate-from-other=false",
    ];
    let mut models = Vec::new();
    for (name, extra) in [("on", &[][..]), ("off", &off[..])] {
        let out = tmp.join(format!("{name}.raw"));
        let mut args = vec!["train", "--srand=1", "before.raw", "ark:egs.ark"];
        args.splice(1..1, extra.iter().copied());
        args.push(out.to_str().unwrap());
        compnet(&dir, &args);
        models.push(std::fs::read(&out).unwrap());
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(models[0] == models[1], "the trained models differ");
}

/// (value or deriv, node name) of each matrix of Kaldi's printed computation, with the
/// matrices it compresses and the (to, from) pairs it swaps.
type KaldiMatrices = std::collections::BTreeSet<(bool, String)>;

fn kaldi_passes(
    printed: &str,
) -> (
    KaldiMatrices,
    std::collections::BTreeSet<[(bool, String); 2]>,
) {
    let mut of = std::collections::HashMap::new();
    let number = |s: &str| s.trim_start_matches('m').parse::<usize>().unwrap();
    for line in printed.lines() {
        if let Some((m, rest)) = line.split_once(" == ") {
            let (kind, node) = rest.split_once(": ").unwrap();
            let node = node.split('[').next().unwrap().to_string();
            of.insert(number(m), (kind == "deriv", node));
        }
    }
    let mut compressed = KaldiMatrices::new();
    let mut swaps = std::collections::BTreeSet::new();
    for line in printed.lines() {
        let Some((_, cmd)) = line.split_once(": ") else {
            continue;
        };
        if let Some(rest) = cmd.strip_prefix("CompressMatrix(") {
            compressed.insert(of[&number(rest.split(',').next().unwrap())].clone());
        } else if let Some((a, rest)) = cmd.split_once(".swap(") {
            let b = rest.split(')').next().unwrap();
            swaps.insert([of[&number(a)].clone(), of[&number(b)].clone()]);
        }
    }
    (compressed, swaps)
}

/// Kaldi's optimized computation of a training golden's minibatch (ReLU → BatchNorm layers):
/// compnet compresses the same nodes' values, and makes every swap Kaldi makes (Kaldi makes
/// fewer: it does not swap a matrix that a BatchNorm with block-dim needs laid out with
/// stride = columns, a GPU matter, and it merges away a matrix compnet keeps).
#[test]
fn compression_and_swaps_match_kaldi_on_a_training_golden() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kaldi/train/ng-batchnorm");
    let printed = std::fs::read_to_string(dir.join("optimized_computation.txt")).unwrap();
    let (kaldi_compressed, kaldi_swaps) = kaldi_passes(&printed);
    assert_eq!(kaldi_compressed.len(), 2);
    assert_eq!(kaldi_swaps.len(), 2);
    let n = Nnet::read_model(
        &std::fs::read(dir.join("before.raw")).unwrap(),
        "before.raw",
    )
    .unwrap()
    .nnet;
    let req = ComputationRequest {
        inputs: vec![IoSpecification::from_ranges("input", 0..2, -3..7, false)],
        outputs: vec![IoSpecification::from_ranges("output", 0..2, 0..5, true)],
        need_model_derivative: true,
        ..Default::default()
    };
    let mut c = compile_computation(
        &n,
        &req,
        &CompilerOptions {
            output_debug_info: true,
        },
    )
    .unwrap();
    compnet::compile::optimize(&n, &mut c, &OptimizeOptions::default());
    let name = |m: usize| {
        let d = &c.matrix_debug_info[m];
        (d.is_deriv, n.node_names[d.cindexes[0].0].clone())
    };
    let compressed: KaldiMatrices = c
        .commands
        .iter()
        .filter_map(|x| match *x {
            Command::CompressMatrix { m, .. } => Some(name(m)),
            _ => None,
        })
        .collect();
    let swaps: std::collections::BTreeSet<[(bool, String); 2]> = c
        .commands
        .iter()
        .filter_map(|x| match *x {
            Command::SwapMatrix { a, b } => Some([name(a), name(b)]),
            _ => None,
        })
        .collect();
    assert_eq!(compressed, kaldi_compressed);
    assert!(
        kaldi_swaps.is_subset(&swaps),
        "Kaldi's {kaldi_swaps:?}\nours {swaps:?}"
    );
}

/// Shortcut compilation widens what the three passes leave (a grown matrix, swaps, compressed
/// matrices) from 2 sequences to 4, with the results of compiling 4 sequences directly.
#[test]
fn shortcut_widens_the_passes_output() {
    use compnet::compile::cache::compile_with_shortcut;
    use compnet::compile::CachingCompilerOptions;
    for (config, four) in [
        (OFFSET_NET, {
            let mut r = offset_request();
            r.inputs[0] = IoSpecification::from_ranges("input", 0..4, -2..8, true);
            r.outputs[0] = IoSpecification::from_ranges("output", 0..4, 0..8, true);
            r.outputs[1] = IoSpecification::from_ranges("output2", 0..4, -2..8, true);
            r
        }),
        (RELU_NET, {
            let mut r = relu_request();
            r.inputs[0] = IoSpecification::from_ranges("input", 0..4, 0..6, true);
            r.outputs[0] = IoSpecification::from_ranges("output", 0..4, 0..6, true);
            r
        }),
    ] {
        let n = nnet(config);
        let widened = compile_with_shortcut(&n, &four, &CachingCompilerOptions::default())
            .unwrap()
            .unwrap_or_else(|why| panic!("not widened: {why}"));
        check_computation(&widened, &n).unwrap();
        let changed = count(&widened, |x| {
            matches!(
                x,
                Command::SwapMatrix { .. } | Command::CompressMatrix { .. }
            )
        });
        assert!(changed > 0);
        let direct = compiled(&n, &four, &OptimizeOptions::default());
        assert_eq!(run(&n, &widened, &four), run(&n, &direct, &four));
    }
}

/// extend-matrices' conditions on a hand-made computation: the copy of rows 0..8 of a
/// 10-row input is extended only where its destination is a whole matrix (which grows to 10
/// rows); a destination with rows after it that hold other data, or rows before it (which
/// Kaldi would extend, compnet's merging could not use) is left alone. Either way the output
/// is what it was.
#[test]
fn extend_matrices_only_into_a_whole_destination() {
    use compnet::compile::SubMatrixInfo;
    let n = compnet::testing::relu_nnet(false);
    let (input, output) = (
        n.node_index("input").unwrap(),
        n.node_index("output").unwrap(),
    );
    // m2 has `rows` rows; the copy goes to rows `dst_offset..dst_offset + 8`, and the other
    // rows of m2 (if any) get rows of the input, doubled, before it.
    let build = |rows: usize, dst_offset: usize| {
        let mut c = NnetComputation::default();
        let m1 = c.new_matrix(10, 2);
        let m2 = c.new_matrix(rows, 2);
        let m3 = c.new_matrix(rows, 2);
        let s1 = c.whole_submatrix(m1);
        let s2 = c.whole_submatrix(m2);
        let s3 = c.whole_submatrix(m3);
        let sub = |c: &mut NnetComputation, matrix, row_offset, num_rows| {
            c.new_submatrix(SubMatrixInfo {
                matrix,
                row_offset,
                num_rows,
                col_offset: 0,
                num_cols: 2,
            })
        };
        let src = sub(&mut c, m1, 0, 8);
        let dst = sub(&mut c, m2, dst_offset, 8);
        c.commands = vec![
            Command::AllocMatrix { m: m1 },
            Command::AllocMatrix { m: m2 },
            Command::AllocMatrix { m: m3 },
            Command::AcceptInput { s: s1, node: input },
        ];
        if rows > 8 {
            let other_offset = if dst_offset == 0 { 8 } else { 0 };
            let other = sub(&mut c, m2, other_offset, rows - 8);
            let other_src = sub(&mut c, m1, 10 - (rows - 8), rows - 8);
            c.commands.push(Command::MatrixCopy {
                dst: other,
                src: other_src,
                alpha: 2.0,
            });
        }
        c.commands.extend([
            Command::MatrixCopy {
                dst,
                src,
                alpha: 1.0,
            },
            Command::MatrixCopy {
                dst: s3,
                src: s2,
                alpha: 1.0,
            },
            Command::ProvideOutput {
                s: s3,
                node: output,
            },
            Command::DeallocMatrix { m: m1 },
            Command::DeallocMatrix { m: m2 },
        ]);
        c
    };
    let out = |c: &NnetComputation| {
        let mut computer = NnetComputer::new(c, &n, None).poison_undefined();
        let x = Matrix::from_vec(10, 2, (0..20).map(|v| v as f32).collect());
        computer.accept_input("input", x).unwrap();
        computer.run_forward().unwrap();
        computer.output("output").unwrap().clone()
    };
    for (rows, dst_offset, grown) in [(8, 0, Some(10)), (12, 0, None), (12, 4, None)] {
        let before = build(rows, dst_offset);
        let mut after = build(rows, dst_offset);
        let changed = compnet::compile::extend_matrices::extend_matrices(&mut after);
        let case = format!(
            "destination rows {dst_offset}..{} of {rows}",
            dst_offset + 8
        );
        assert_eq!(changed, usize::from(grown.is_some()), "{case}");
        check_computation(&after, &n).unwrap();
        assert_eq!(after.matrices[2].num_rows, grown.unwrap_or(rows), "{case}");
        assert_eq!(out(&after), out(&before), "{case}");
    }
}
