//! The computation checker: correct computations (compiled, and after every optimizer pass)
//! pass it, and each kind of broken computation fails with the error that names the command,
//! the matrix and what was expected.

use compnet::compile::checker::{check_computation, CheckError, Problem};
use compnet::compile::computation::MatrixInfo;
use compnet::compile::optimize::optimize_observed;
use compnet::compile::{
    compile_computation, Command, CompilerOptions, ComputationRequest, IoSpecification,
    NnetComputation, OptimizeOptions, RowsCommand, SubMatrixInfo,
};
use compnet::nnet::Nnet;

/// input (2) → affine (2→3) → batchnorm (3, training mode: uses a memo) → output.
fn nnet() -> Nnet {
    Nnet::from_config_text(
        "input-node name=input dim=2\n\
         component name=affine type=AffineComponent input-dim=2 output-dim=3\n\
         component-node name=affine component=affine input=input\n\
         component name=bn type=BatchNormComponent dim=3\n\
         component-node name=bn component=bn input=affine\n\
         output-node name=output input=bn\n",
        "<test>",
        &mut compnet::random::seeded_rng(0),
    )
    .expect("config")
}

fn request() -> ComputationRequest {
    ComputationRequest {
        inputs: vec![IoSpecification::from_ranges("input", 0..2, 0..3, true)],
        outputs: vec![IoSpecification::from_ranges("output", 0..2, 0..3, true)],
        need_model_derivative: true,
        ..Default::default()
    }
}

fn compiled(nnet: &Nnet) -> NnetComputation {
    compile_computation(nnet, &request(), &CompilerOptions::default()).expect("compile")
}

/// A computation with one 3×2 matrix per entry of `n` (sub-matrix k = all of matrix k) and
/// `commands`.
fn hand_made(n: usize, commands: Vec<Command>) -> NnetComputation {
    let mut c = NnetComputation::default();
    for _ in 0..n {
        let m = c.new_matrix(3, 2);
        c.whole_submatrix(m);
    }
    c.commands = commands;
    c
}

fn expect(c: &NnetComputation, nnet: &Nnet, command: Option<usize>, problem: Problem) {
    let got = check_computation(c, nnet);
    assert_eq!(got, Err(CheckError { command, problem }));
    // The message names the command.
    if let (Err(e), Some(k)) = (got, command) {
        assert!(e.to_string().starts_with(&format!("command {k}: ")), "{e}");
    }
}

fn alloc(m: usize) -> Command {
    Command::AllocMatrix { m }
}
fn undefined(m: usize) -> Command {
    Command::AllocMatrixUndefined { m }
}
fn free(m: usize) -> Command {
    Command::DeallocMatrix { m }
}
fn set(s: usize) -> Command {
    Command::SetConst { s, alpha: 1.0 }
}
fn copy(dst: usize, src: usize) -> Command {
    Command::MatrixCopy {
        dst,
        src,
        alpha: 1.0,
    }
}

#[test]
fn compiled_and_every_optimizer_pass_pass_the_checker() {
    let nnet = nnet();
    let mut c = compiled(&nnet);
    check_computation(&c, &nnet).expect("compiled");
    let mut passes = Vec::new();
    optimize_observed(
        &nnet,
        &mut c,
        &OptimizeOptions::default(),
        &mut |pass, c| {
            check_computation(c, &nnet).unwrap_or_else(|e| panic!("after {pass}: {e}"));
            passes.push(pass.to_string());
        },
    );
    assert_eq!(passes.len(), 11, "{passes:?}");
}

#[test]
fn read_of_undefined_matrix() {
    let nnet = nnet();
    // m1 allocated undefined, then read: an error; zeroed, it is fine.
    let body = |first: Command| {
        hand_made(
            2,
            vec![
                first,
                alloc(2),
                Command::MatrixAdd {
                    dst: 2,
                    src: 1,
                    alpha: 1.0,
                },
                free(1),
                free(2),
            ],
        )
    };
    check_computation(&body(alloc(1)), &nnet).expect("zeroed allocation");
    expect(
        &body(undefined(1)),
        &nnet,
        Some(2),
        Problem::UndefinedRead {
            submatrix: 1,
            matrix: 1,
        },
    );
    // An add reads its destination too.
    let c = hand_made(
        2,
        vec![
            alloc(1),
            undefined(2),
            Command::MatrixAdd {
                dst: 2,
                src: 1,
                alpha: 1.0,
            },
            free(1),
            free(2),
        ],
    );
    expect(
        &c,
        &nnet,
        Some(2),
        Problem::UndefinedRead {
            submatrix: 2,
            matrix: 2,
        },
    );
}

#[test]
fn undefined_reads_are_tracked_per_block() {
    let nnet = nnet();
    let build = |read_whole: bool| {
        let mut c = hand_made(2, vec![]);
        let left = |c: &mut NnetComputation, m| {
            c.new_submatrix(SubMatrixInfo {
                matrix: m,
                row_offset: 0,
                num_rows: 3,
                col_offset: 0,
                num_cols: 1,
            })
        };
        let (l1, l2) = (left(&mut c, 1), left(&mut c, 2));
        let read = if read_whole { copy(2, 1) } else { copy(l2, l1) };
        c.commands = vec![undefined(1), alloc(2), set(l1), read, free(1), free(2)];
        c
    };
    // Only the left column was written: reading it is fine, reading all is not.
    check_computation(&build(false), &nnet).expect("left column only");
    expect(
        &build(true),
        &nnet,
        Some(3),
        Problem::UndefinedRead {
            submatrix: 1,
            matrix: 1,
        },
    );
}

#[test]
fn allocation_errors() {
    let nnet = nnet();
    expect(
        &hand_made(1, vec![alloc(1), free(1), set(1)]),
        &nnet,
        Some(2),
        Problem::UseAfterFree {
            matrix: 1,
            freed_at: 1,
        },
    );
    expect(
        &hand_made(1, vec![set(1), alloc(1), free(1)]),
        &nnet,
        Some(0),
        Problem::UseBeforeAlloc { matrix: 1 },
    );
    expect(
        &hand_made(1, vec![alloc(1), undefined(1), free(1)]),
        &nnet,
        Some(1),
        Problem::DoubleAlloc {
            matrix: 1,
            allocated_at: 0,
        },
    );
    expect(
        &hand_made(1, vec![alloc(1), free(1), free(1)]),
        &nnet,
        Some(2),
        Problem::DoubleFree {
            matrix: 1,
            freed_at: 1,
        },
    );
    expect(
        &hand_made(1, vec![free(1)]),
        &nnet,
        Some(0),
        Problem::FreeBeforeAlloc { matrix: 1 },
    );
    expect(
        &hand_made(2, vec![alloc(1), alloc(2), set(1), free(1)]),
        &nnet,
        None,
        Problem::NeverFreed {
            matrix: 2,
            allocated_at: 1,
        },
    );
    // A matrix handed out need not be freed.
    let output = nnet.node_index("output").expect("output");
    let c = hand_made(
        1,
        vec![alloc(1), Command::ProvideOutput { s: 1, node: output }],
    );
    check_computation(&c, &nnet).expect("handed out");
    expect(
        &hand_made(1, vec![alloc(2)]),
        &nnet,
        Some(0),
        Problem::MatrixOutOfRange {
            matrix: 2,
            num_matrices: 2,
        },
    );
}

#[test]
fn shape_and_index_errors() {
    let nnet = nnet();
    // A sub-matrix reaching past its matrix.
    let mut c = hand_made(1, vec![alloc(1), free(1)]);
    let bad = SubMatrixInfo {
        matrix: 1,
        row_offset: 2,
        num_rows: 2,
        col_offset: 0,
        num_cols: 2,
    };
    c.new_submatrix(bad);
    expect(
        &c,
        &nnet,
        None,
        Problem::SubmatrixBounds {
            submatrix: bad,
            index: 2,
            matrix_shape: (3, 2),
        },
    );
    // Copy between different shapes.
    let mut c = hand_made(2, vec![]);
    c.matrices[2] = MatrixInfo {
        num_rows: 2,
        num_cols: 2,
    };
    c.submatrices[2].num_rows = 2;
    c.commands = vec![alloc(1), alloc(2), copy(2, 1), free(1), free(2)];
    expect(
        &c,
        &nnet,
        Some(2),
        Problem::ShapeMismatch {
            operand: "src",
            submatrix: 1,
            expected: (2, 2),
            found: (3, 2),
        },
    );
    // Row indexes: one past the source, and one entry short.
    let rows = |indexes: Vec<i32>| {
        let mut c = hand_made(
            2,
            vec![
                alloc(1),
                alloc(2),
                Command::CopyRows(RowsCommand {
                    dst: 2,
                    src: 1,
                    indexes: 0,
                    alpha: 1.0,
                }),
                free(1),
                free(2),
            ],
        );
        c.indexes = vec![indexes];
        c
    };
    check_computation(&rows(vec![2, -1, 0]), &nnet).expect("valid indexes");
    expect(
        &rows(vec![0, 3, 1]),
        &nnet,
        Some(2),
        Problem::RowIndex {
            table: "indexes",
            row: 1,
            value: (3, 3),
            limit: 3,
        },
    );
    expect(
        &rows(vec![0, 1]),
        &nnet,
        Some(2),
        Problem::TableRows {
            table: "indexes",
            index: 0,
            expected: 3,
            found: 2,
        },
    );
    // A (sub-matrix, row) pair past its sub-matrix.
    let mut c = hand_made(
        2,
        vec![
            alloc(1),
            alloc(2),
            Command::AddToRowsMulti {
                src: 1,
                indexes_multi: 0,
                alpha: 1.0,
            },
            free(1),
            free(2),
        ],
    );
    c.indexes_multi = vec![vec![(2, 0), (-1, -1), (2, 3)]];
    expect(
        &c,
        &nnet,
        Some(2),
        Problem::RowIndex {
            table: "indexes_multi",
            row: 2,
            value: (2, 3),
            limit: 3,
        },
    );
    // A command naming a sub-matrix that does not exist.
    expect(
        &hand_made(1, vec![alloc(1), set(5), free(1)]),
        &nnet,
        Some(1),
        Problem::SubmatrixOutOfRange {
            operand: "",
            submatrix: 5,
            num_submatrices: 2,
        },
    );
}

/// The first command of `c` that `f` selects, and its index.
fn find(c: &mut NnetComputation, f: impl Fn(&Command) -> bool) -> (usize, &mut Command) {
    let k = c.commands.iter().position(f).expect("command");
    (k, &mut c.commands[k])
}

#[test]
fn component_errors() {
    let nnet = nnet();
    let affine = nnet.component_index("affine").expect("affine");
    let bn = nnet.component_index("bn").expect("bn");
    let is_backprop_of =
        |c: usize| move |x: &Command| matches!(x, Command::Backprop(b) if b.component == c);
    let is_propagate_of =
        |c: usize| move |x: &Command| matches!(x, Command::Propagate(p) if p.component == c);

    // The affine component's propagate reading the output-sized matrix.
    let mut c = compiled(&nnet);
    let (k, cmd) = find(&mut c, is_propagate_of(affine));
    let Command::Propagate(p) = cmd else {
        unreachable!()
    };
    p.input = p.output;
    let s = p.output;
    expect(
        &c,
        &nnet,
        Some(k),
        Problem::ComponentDim {
            operand: "input",
            submatrix: s,
            side: compnet::compile::analysis::Side::Input,
            expected: 2,
            found: 3,
        },
    );

    // The affine backprop without the input value it needs.
    let mut c = compiled(&nnet);
    let (k, cmd) = find(&mut c, is_backprop_of(affine));
    let Command::Backprop(b) = cmd else {
        unreachable!()
    };
    b.in_value = 0;
    expect(
        &c,
        &nnet,
        Some(k),
        Problem::MissingOperand {
            operand: "in-value",
            why: "the component's backprop needs its input",
        },
    );

    // Batchnorm's propagate no longer stores the memo its backprop needs.
    let mut c = compiled(&nnet);
    let memo = match find(&mut c, is_propagate_of(bn)).1 {
        Command::Propagate(p) => std::mem::take(&mut p.memo),
        _ => unreachable!(),
    };
    assert_ne!(memo, 0, "batchnorm in training mode uses a memo");
    let k = c
        .commands
        .iter()
        .position(is_backprop_of(bn))
        .expect("bn backprop");
    expect(
        &c,
        &nnet,
        Some(k),
        Problem::MemoMissing {
            memo,
            component: bn,
        },
    );

    // A second propagate into the same memo slot before the backprop used it.
    let mut c = compiled(&nnet);
    let (k, cmd) = find(&mut c, is_propagate_of(bn));
    let again = cmd.clone();
    c.commands.insert(k + 1, again);
    expect(
        &c,
        &nnet,
        Some(k + 1),
        Problem::MemoReused { memo, stored_at: k },
    );
}
