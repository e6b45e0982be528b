//! The network and everything it is made of: config lines, Indexes, Descriptors, nodes and
//! components.

pub mod component;
pub mod config_line;
pub mod descriptor;
pub mod model_io;
pub mod network;
pub mod nnet_config;

// Index and Cindex live in the top-level `index` module (io/ uses them too); the
// re-exports keep `nnet::Index` and `nnet::index::...` paths working.
pub use crate::index;
pub use crate::index::{Cindex, Index, TRange};
pub use network::{NetworkNode, Nnet, ObjectiveType};
