//! Training, Kaldi's way (facts §7): examples become computation requests, output nodes get
//! objectives, the backward pass fills a delta network, and the delta is applied with L2,
//! max-change and momentum (`NnetTrainer`); `compute-prob`, `average` and `combine` are the
//! diagnostics and model tools around it.
//!
//! Data flow: `example` (eg → request + inputs) → `objective` (output → objective value and
//! output derivative) → `trainer` (one minibatch: forward, objective, backward, update) using
//! `network_ops` (the whole-network parameter algebra: L2, max-change, BatchNorm stats,
//! orthonormal constraint); `diagnostics` evaluates without updating; `log` prints the
//! lines Kaldi's scripts parse.

pub mod diagnostics;
pub mod example;
pub mod fit;
pub mod network_ops;
pub mod objective;
pub mod parallel;
pub mod step;
pub mod trainer;

pub use diagnostics::{NnetComputeProb, NnetComputeProbOptions};
pub use trainer::{NnetTrainer, NnetTrainerOptions};
