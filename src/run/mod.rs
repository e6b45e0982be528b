//! The runtime: `NnetComputer` executes an NnetComputation forward and backward on the matrix
//! backend; `chunked` runs a network over whole utterances chunk by chunk (Kaldi's
//! `DecodableNnetSimple`); `looped` streams it, each chunk reusing what earlier ones
//! computed (Kaldi's `DecodableNnetSimpleLooped`). The compiler-independent reference
//! evaluator the tests compare the runtime with is `testing::reference`.

pub mod chunked;
pub mod computer;
pub mod looped;
pub mod profile;

pub use computer::NnetComputer;

/// Bounds the numeric thread pools (0 = leave the defaults, i.e. all cores).
pub fn set_threads(n: usize) {
    if n > 0 {
        crate::matrix::set_num_threads(n);
        // Fails only if the global pool already exists; then it keeps its size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
}
