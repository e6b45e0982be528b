//! The runtime: NnetComputer executes an NnetComputation forward and backward on the matrix
//! backend; `reference` is a naive, compiler-independent evaluator used to test it.

pub mod computer;

pub use computer::NnetComputer;
pub mod reference;
