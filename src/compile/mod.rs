//! The compiler: ComputationRequest → ComputationGraph → steps → NnetComputation.
//!
//! Stages (seed 001): [`graph`] builds and prunes the graph of Cindexes, [`steps`] orders it
//! into epochs, phases and steps, [`compiler`] turns steps into matrices and commands,
//! [`t_range`] bounds where each node can be computable (so the builder skips the rest),
//! [`print`] renders the result, [`context`] computes a network's left/right context.

pub mod analysis;
pub mod checker;
pub mod compiler;
pub mod computation;
pub mod context;
pub mod graph;
pub mod optimize;
pub mod print;
pub mod request;
pub mod split;
pub mod steps;
pub mod t_range;

pub use compiler::{compile_computation, CompilerOptions};
pub use computation::{Command, NnetComputation, SubMatrixInfo};
pub use optimize::{optimize, OptimizeOptions};
pub use request::{ComputationRequest, IoSpecification};
