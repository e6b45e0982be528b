//! The compiler: ComputationRequest → ComputationGraph → steps → NnetComputation.

pub mod computation;

pub use computation::{Command, NnetComputation, SubMatrixInfo};
