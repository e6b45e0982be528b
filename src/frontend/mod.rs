//! Front ends: readers that turn a network description in some toolkit's language into an
//! [`Nnet`](crate::nnet::Nnet), and the writers of that toolkit's files.
//!
//! Each front end lowers into the same network types (nodes, descriptors, components) and
//! gates the result with [`Nnet::validate`](crate::nnet::Nnet::validate), so the compiler,
//! the runtime and the trainer never know which language a network came from. Kaldi's is
//! the first; CNTK's NDL and Brainstorm's readers are meant to sit beside it.

pub mod kaldi;
pub mod ndl;
