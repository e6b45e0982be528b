//! How a gradient becomes a parameter change.

pub mod natural_gradient;
