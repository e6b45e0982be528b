//! Training-example policy (not formats, which live in `io::egs`): how utterances are cut
//! into chunks (Kaldi's `UtteranceSplitter`), how a chunk's rows become an example (`cut`),
//! and how examples are grouped into minibatches (Kaldi's `ExampleMergingConfig` /
//! `ExampleMerger`).

pub mod cut;
pub mod merge;
pub mod splitter;
pub mod stl_order;
