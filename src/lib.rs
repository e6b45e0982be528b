//! compnet: computational networks in the style of Kaldi's nnet3.
//!
//! Data flow (one module per stage): config text → [`frontend`] (Kaldi's config reader and
//! model files) → [`nnet`] (network, descriptors, components) → `compile` (request → graph →
//! steps → computation) → `run` (the executor on a [`matrix`] backend) → `train`. [`io`]
//! reads and writes Kaldi's archive formats.

pub mod cli;
pub mod collective;
pub mod compile;
pub mod egs;
pub mod error;
pub mod frontend;
pub mod gradient;
pub mod hmm;
pub mod index;
pub mod io;
pub mod kaldi_rand;
pub mod limits;
pub mod log;
pub mod matrix;
pub mod nnet;
pub mod random;
pub mod run;
/// Test support (random networks, the component harness, golden data, the reference
/// evaluator): built for the crate's own tests and with the `testing` feature only.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod train;

pub use error::{Error, Result};
pub use nnet::builder::{Desc, NetworkBuilder};
