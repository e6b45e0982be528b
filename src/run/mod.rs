//! The runtime: NnetComputer executes an NnetComputation forward and backward on the matrix
//! backend. (The compiler-independent reference evaluator the tests compare it with is
//! `testing::reference`.)

pub mod computer;

pub use computer::NnetComputer;
