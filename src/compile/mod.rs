//! The compiler: ComputationRequest → ComputationGraph → steps → NnetComputation.
//!
//! Stages (seed 001): [`graph`] builds and prunes the graph of Cindexes, [`steps`] orders it
//! into epochs, phases and steps, [`compiler`] turns steps into matrices and commands,
//! [`t_range`] bounds where each node can be computable (so the builder skips the rest),
//! [`print`] renders the result, [`context`] computes a network's left/right context.
//! [`deriv_time`] limits derivatives to a range of t (recurrent training on chunks).
//! [`optimize`] runs the optimizer's passes (their own modules: [`convert_addition`],
//! [`row_ops`], [`extend_matrices`], [`allocate_from_other`], [`memory_compression`]);
//! [`memory`] measures a computation's peak matrix memory.
//! [`cache`] compiles each request shape once and widens 2-sequence computations to N.
//! [`looped`] compiles a network for looped (streaming) computation: a first and a steady chunk.

pub mod allocate_from_other;
pub mod analysis;
pub mod cache;
pub mod checker;
pub mod compiler;
pub mod computation;
pub mod context;
pub mod convert_addition;
pub mod deriv_time;
pub mod extend_matrices;
pub mod graph;
pub mod kaldi_draws;
pub mod looped;
pub mod memory;
pub mod memory_compression;
pub mod optimize;
pub mod print;
pub mod request;
pub mod row_ops;
pub mod split;
pub mod steps;
pub mod t_range;

pub use cache::{CachingCompiler, CachingCompilerOptions, CompilerStats};
pub use compiler::{compile_computation, CompilerOptions};
pub use computation::{
    BackpropCommand, Command, NnetComputation, PropagateCommand, RowsCommand, SubMatrixInfo,
};
pub use optimize::{optimize, optimize_for_request, OptimizeOptions};
pub use request::{ComputationRequest, IoSpecification};
