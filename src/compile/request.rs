//! What the user asks of a network: which Indexes are supplied at which inputs, which are
//! wanted at which outputs, and which derivatives (Kaldi's `ComputationRequest`).

use crate::index::Index;
pub use crate::nnet::component::MiscComputationInfo;

/// One named input or output and its Indexes (Kaldi's `IoSpecification`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoSpecification {
    /// Node name (an input node or a component node for inputs; an output node for outputs).
    pub name: String,
    /// The Indexes, one per matrix row, in row order.
    pub indexes: Vec<Index>,
    /// For an input: the derivative w.r.t. it is wanted; for an output: a derivative will be
    /// supplied.
    pub has_deriv: bool,
}

impl IoSpecification {
    /// An IoSpecification with Indexes `(n, t, 0)` for every n in `ns` and t in `ts`, n-major
    /// (the usual order of a minibatch: all t of sequence 0, then sequence 1, ...).
    pub fn from_ranges(
        name: &str,
        ns: std::ops::Range<i32>,
        ts: std::ops::Range<i32>,
        has_deriv: bool,
    ) -> Self {
        let mut indexes = Vec::new();
        for n in ns {
            for t in ts.clone() {
                indexes.push(Index::new(n, t, 0));
            }
        }
        IoSpecification {
            name: name.to_string(),
            indexes,
            has_deriv,
        }
    }
}

/// A whole request (Kaldi's `ComputationRequest`).
#[derive(Clone, Debug, Default)]
pub struct ComputationRequest {
    pub inputs: Vec<IoSpecification>,
    pub outputs: Vec<IoSpecification>,
    /// Whether parameter derivatives are wanted (training).
    pub need_model_derivative: bool,
    /// Whether components with `STORES_STATS` should accumulate statistics.
    pub store_component_stats: bool,
    /// Extra information for non-simple components.
    pub misc_info: MiscComputationInfo,
}

impl ComputationRequest {
    /// Position of the input with this name.
    pub fn index_for_input(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|s| s.name == name)
    }
    /// Position of the output with this name.
    pub fn index_for_output(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|s| s.name == name)
    }
    /// True if some derivative is needed, i.e. the computation has a backward pass.
    pub fn need_derivatives(&self) -> bool {
        self.need_model_derivative
            || self.inputs.iter().any(|s| s.has_deriv)
            || self.outputs.iter().any(|s| s.has_deriv)
    }
}

/// Kaldi's compact printed form of an Index list: runs of consecutive t with the same n and x
/// are written `(n, t1:t2)`, single ones `(n, t)`, and a nonzero x is appended:
/// `[ (0, -1:1) (1, -1:1) ]`.
pub fn format_indexes(indexes: &[Index]) -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut j = i + 1;
        while j < indexes.len() {
            let (p, q) = (indexes[j - 1], indexes[j]);
            if q.n == p.n && q.x == p.x && p.t != i32::MAX && q.t == p.t + 1 {
                j += 1;
            } else {
                break;
            }
        }
        let end = indexes[j - 1];
        s.push_str(&format!(" ({}, ", start.n));
        if j - i == 1 {
            s.push_str(&fmt_t(start.t));
        } else {
            s.push_str(&format!("{}:{}", start.t, end.t));
        }
        if start.x != 0 {
            s.push_str(&format!(", {}", start.x));
        }
        s.push(')');
        i = j;
    }
    s.push_str(" ]");
    s
}

fn fmt_t(t: i32) -> String {
    if t == crate::index::NO_TIME {
        "NoTime".to_string()
    } else {
        t.to_string()
    }
}

impl std::fmt::Display for IoSpecification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "name={}, has-deriv={}, indexes={}",
            self.name,
            self.has_deriv,
            format_indexes(&self.indexes)
        )
    }
}

impl std::fmt::Display for ComputationRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "# Computation request:")?;
        for (i, s) in self.inputs.iter().enumerate() {
            writeln!(f, "input-{i}: {s}")?;
        }
        for (i, s) in self.outputs.iter().enumerate() {
            writeln!(f, "output-{i}: {s}")?;
        }
        writeln!(
            f,
            "need-model-derivative: {}, store-component-stats: {}",
            self.need_model_derivative, self.store_component_stats
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_form() {
        let s = IoSpecification::from_ranges("input", 0..2, -1..2, false);
        assert_eq!(format_indexes(&s.indexes), "[ (0, -1:1) (1, -1:1) ]");
        let v = vec![
            Index::new(0, 3, 0),
            Index::new(0, 5, 1),
            Index::new(0, 6, 1),
        ];
        assert_eq!(format_indexes(&v), "[ (0, 3) (0, 5:6, 1) ]");
        assert_eq!(format_indexes(&[]), "[ ]");
    }
}
