//! The network and everything it is made of: config lines, Indexes, Descriptors, nodes and
//! components.

pub mod component;
pub mod config_line;
pub mod descriptor;
pub mod index;
pub mod model_io;
pub mod network;
pub mod nnet_config;

pub use index::{Cindex, Index, TRange};
pub use network::{NetworkNode, Nnet, ObjectiveType};
