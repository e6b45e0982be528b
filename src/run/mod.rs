//! The runtime: NnetComputer executes an NnetComputation forward and backward on the matrix
//! backend.
