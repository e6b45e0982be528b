//! The network and everything it is made of: Indexes, Descriptors, nodes and components,
//! with its validation and parameter maths. Reading and writing it in a toolkit's language
//! is a front end's job ([`crate::frontend`]).

pub mod builder;
pub mod component;
pub mod config_line;
pub mod descriptor;
pub mod draw;
pub mod edit;
pub mod network;
pub mod params;
pub mod recurrent_split;
pub mod validate;

// Index and Cindex live in the top-level `index` module (io/ uses them too); the
// re-exports keep `nnet::Index` and `nnet::index::...` paths working.
pub use crate::index;
pub use crate::index::{Cindex, Index, TRange};
pub use builder::{Desc, NetworkBuilder};
pub use network::{NetworkNode, Nnet, ObjectiveType};
