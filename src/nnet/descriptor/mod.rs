//! Descriptors: the glue expressions that say where a node's input comes from.
//!
//! Grammar of the config form (Kaldi's "simplified" descriptor syntax):
//!
//! ```text
//! <descriptor> ::= <node-name>                       ;; the node's output at the same Index
//!     | Append(<descriptor>, <descriptor> [, ...])   ;; concatenate columns
//!     | Sum(<descriptor>, <descriptor> [, ...])      ;; element-wise sum (any arity)
//!     | Const(<value>, <dim>)                        ;; a constant vector
//!     | Scale(<scale>, <descriptor>)                 ;; multiply by a constant
//!     | Failover(<descriptor>, <descriptor>)         ;; the first if computable, else the second
//!     | IfDefined(<descriptor>)                      ;; zero where not computable
//!     | Offset(<descriptor>, <t-offset> [, <x-offset>])
//!     | Switch(<descriptor>, <descriptor> [, ...])   ;; argument (t mod #args)
//!     | Round(<descriptor>, <t-modulus>)             ;; t rounded down to a multiple
//!     | ReplaceIndex(<descriptor>, t|x, <value>)     ;; t or x replaced by a constant
//! ```
//!
//! After parsing, a descriptor is normalised into Kaldi's three levels:
//! [`Descriptor`] (a list of parts, concatenated = Append) → [`SumDescriptor`] (Sum, Failover,
//! IfDefined, Const, or one forwarding descriptor) → [`ForwardingDescriptor`] (a node with a
//! scale, wrapped in Offset / Switch / Round / ReplaceIndex). Append is pulled outward, Sum
//! with more than two arguments becomes right-nested binary sums, Offsets distribute into Sums
//! and nested Offsets add, nested Scales multiply (facts §5.3). The parser and the printer
//! of this syntax are Kaldi's front end's (`nnet::descriptor::parse`); `eval.rs`
//! gives a descriptor its meaning for the compiler.

pub mod eval;
pub mod parse;

/// Which index variable ReplaceIndex replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexVar {
    T,
    X,
}

/// The innermost level: maps an output Index to exactly one input Cindex (or none).
#[derive(Clone, Debug, PartialEq)]
pub enum ForwardingDescriptor {
    /// A node's output, times a scale (`Scale(...)` folds in here).
    Simple { node: usize, scale: f32 },
    /// Reads the source at (t + t_offset, x + x_offset).
    Offset {
        src: Box<ForwardingDescriptor>,
        t_offset: i32,
        x_offset: i32,
    },
    /// Reads argument number (t mod len).
    Switch(Vec<ForwardingDescriptor>),
    /// Reads the source at t rounded down to a multiple of t_modulus.
    Round {
        src: Box<ForwardingDescriptor>,
        t_modulus: i32,
    },
    /// Reads the source with t or x replaced by a constant.
    ReplaceIndex {
        src: Box<ForwardingDescriptor>,
        var: IndexVar,
        value: i32,
    },
}

/// The middle level: sums, failover, optional and constant terms.
#[derive(Clone, Debug, PartialEq)]
pub enum SumDescriptor {
    /// One forwarding descriptor.
    Simple(ForwardingDescriptor),
    /// `IfDefined(...)`: zero where not computable.
    Optional(Box<SumDescriptor>),
    /// `Sum(a, b)`.
    Sum(Box<SumDescriptor>, Box<SumDescriptor>),
    /// `Failover(a, b)`: a if computable, else b.
    Failover(Box<SumDescriptor>, Box<SumDescriptor>),
    /// `Const(value, dim)`.
    Const { value: f32, dim: usize },
}

/// The top level: parts concatenated column-wise (`Append`).
#[derive(Clone, Debug, PartialEq)]
pub struct Descriptor {
    pub parts: Vec<SumDescriptor>,
}

/// The dimensions of a network's nodes, as descriptors need them (the network implements it).
pub trait NodeDims {
    /// The output dimension of node `node`; None when there is no such node.
    fn dim_of_node(&self, node: usize) -> Option<usize>;
}

impl ForwardingDescriptor {
    /// Output dimension: that of the node it reads (the first argument's, for Switch);
    /// 0 for a node that does not exist (validation reports that).
    pub fn dim(&self, nnet: &dyn NodeDims) -> usize {
        match self {
            ForwardingDescriptor::Simple { node, .. } => nnet.dim_of_node(*node).unwrap_or(0),
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => src.dim(nnet),
            ForwardingDescriptor::Switch(v) => v.first().map_or(0, |d| d.dim(nnet)),
        }
    }
}

impl SumDescriptor {
    /// Output dimension (the first term's, for Sum/Failover; validation checks they agree).
    pub fn dim(&self, nnet: &dyn NodeDims) -> usize {
        match self {
            SumDescriptor::Simple(f) => f.dim(nnet),
            SumDescriptor::Optional(s) => s.dim(nnet),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                // A Const term takes its dim from the declaration; prefer a non-Const side.
                match **a {
                    SumDescriptor::Const { .. } => b.dim(nnet),
                    _ => a.dim(nnet),
                }
            }
            SumDescriptor::Const { dim, .. } => *dim,
        }
    }
}

impl Descriptor {
    /// Output dimension: the sum of the parts' dimensions.
    pub fn dim(&self, nnet: &dyn NodeDims) -> usize {
        self.parts.iter().map(|p| p.dim(nnet)).sum()
    }
}
