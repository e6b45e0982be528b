//! A network's left/right context and modulus, as `nnet3-info` prints them (Kaldi's
//! ComputeSimpleNnetContext and Nnet::Modulus).
//!
//! For every shift s in 0..=modulus, the input `input` is supplied at t ∈ [s, s + W) (and
//! `ivector`, if the network has it, at t ∈ [s − modulus, s + W)), every output frame in the
//! same window is requested, and the graph builder says which are computable: left context =
//! the first computable frame's offset, right context = W − the first non-computable frame
//! after it. The window starts at W = 40 and doubles (up to 640) while some shift has no
//! computable frame; the maxima over the shifts are reported. As in Kaldi the answer depends
//! on W for a network with a recurrence into the future (`IfDefined(Offset(r, 2))`): only
//! the frames before the first one the recurrence cannot reach are computable, so the right
//! context is measured from the window's end. Optional inputs (IfDefined, Failover,
//! statistics pooling) contribute no required context.

use super::graph::ComputationGraphBuilder;
use super::request::{ComputationRequest, IoSpecification};
use crate::error::{Error, Result};
use crate::nnet::descriptor::eval::lcm;
use crate::nnet::{Index, NetworkNode, Nnet};

/// Kaldi's first window width, doubled while it is too narrow, while below the maximum.
const FIRST_WINDOW: i32 = 40;
const MAX_WINDOW: i32 = 800;

/// Left/right context and modulus of a network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NnetContext {
    pub left: i32,
    pub right: i32,
    pub modulus: i32,
}

/// The network's modulus: the lcm of its descriptors' moduli (from Switch and Round); the
/// network is invariant to time shifts by multiples of it.
pub fn nnet_modulus(nnet: &Nnet) -> i32 {
    nnet.nodes.iter().fold(1, |m, n| match n {
        NetworkNode::Descriptor { descriptor, .. } => lcm(m, descriptor.modulus()),
        _ => m,
    })
}

/// Which output frames of `[start, start + window)` are computable from input in the same
/// window.
fn computable_for_shift(
    nnet: &Nnet,
    output: &str,
    start: i32,
    window: i32,
    modulus: i32,
) -> Result<Vec<bool>> {
    let n = 0;
    let ts: Vec<Index> = (start..start + window)
        .map(|t| Index::new(n, t, 0))
        .collect();
    let mut request = ComputationRequest::default();
    // Kaldi supplies only `input` (and `ivector`); other input nodes (beyond Kaldi's "simple"
    // networks) are supplied like `input`, which gives Kaldi's answer whenever Kaldi has one.
    for name in nnet.input_names() {
        let indexes = if name == "ivector" {
            (start - modulus..start + window)
                .map(|t| Index::new(n, t, 0))
                .collect()
        } else {
            ts.clone()
        };
        request.inputs.push(IoSpecification {
            name: name.to_string(),
            indexes,
            has_deriv: false,
        });
    }
    request.outputs.push(IoSpecification {
        name: output.into(),
        indexes: ts,
        has_deriv: false,
    });
    let mut b = ComputationGraphBuilder::new(nnet, &request);
    b.compute()?;
    Ok(b.get_computable_info()
        .into_iter()
        .next()
        .unwrap_or_default())
}

/// Kaldi's ComputeSimpleNnetContext plus the modulus. Requires nodes named `input` (an
/// input node) and `output` (an output node).
pub fn nnet_context(nnet: &Nnet) -> Result<NnetContext> {
    match nnet.node_index("input") {
        Some(i) if nnet.is_input_node(i) => {}
        _ => {
            return Err(Error::Compute(
                "cannot compute the context: the network has no input node named 'input'".into(),
            ))
        }
    }
    match nnet.node_index("output") {
        Some(o) if nnet.is_output_node(o) => {}
        _ => {
            return Err(Error::Compute(
                "cannot compute the context: the network has no output node named 'output'".into(),
            ))
        }
    }
    let modulus = nnet_modulus(nnet);
    let (left, right) = context_for_output(nnet, "output", modulus)?;
    Ok(NnetContext {
        left,
        right,
        modulus,
    })
}

/// As [`nnet_context`], but the maximum over every output node (Kaldi looks at `output`
/// only); useful for requests that ask for all outputs of a multi-output network.
pub fn nnet_context_all_outputs(nnet: &Nnet) -> Result<NnetContext> {
    let modulus = nnet_modulus(nnet);
    let (mut left, mut right) = (0, 0);
    let outputs = nnet.output_names();
    if outputs.is_empty() {
        return Err(Error::Compute(
            "cannot compute the context: the network has no output nodes".into(),
        ));
    }
    for o in outputs {
        let (l, r) = context_for_output(nnet, o, modulus)?;
        left = left.max(l);
        right = right.max(r);
    }
    Ok(NnetContext {
        left,
        right,
        modulus,
    })
}

/// The (left, right) context one shift gives with window `window`; `None` when no output
/// frame is computable (the window is too narrow).
fn context_for_shift(
    nnet: &Nnet,
    output: &str,
    start: i32,
    window: i32,
    modulus: i32,
) -> Result<Option<(i32, i32)>> {
    let ok = computable_for_shift(nnet, output, start, window, modulus)?;
    let Some(first_ok) = ok.iter().position(|&b| b) else {
        return Ok(None);
    };
    let first_not_ok = ok[first_ok..]
        .iter()
        .position(|&b| !b)
        .map_or(ok.len(), |p| p + first_ok);
    Ok(Some((first_ok as i32, window - first_not_ok as i32)))
}

/// Left and right context of one output node (all shifts 0..=modulus, the window widened
/// until every shift has a computable frame).
fn context_for_output(nnet: &Nnet, output: &str, modulus: i32) -> Result<(i32, i32)> {
    let mut window = FIRST_WINDOW;
    let (left, right) = loop {
        if window >= MAX_WINDOW {
            return Err(Error::Compute(format!(
                "no frames of output '{output}' were computable in a window of {} frames \
                 (perhaps not a simple network?)",
                window / 2
            )));
        }
        let mut left = Vec::new();
        let mut right = Vec::new();
        for start in 0..=modulus {
            match context_for_shift(nnet, output, start, window, modulus)? {
                Some((l, r)) => {
                    left.push(l);
                    right.push(r);
                }
                None => break,
            }
        }
        if left.len() == modulus as usize + 1 {
            break (left, right);
        }
        window *= 2;
    };
    if left.first() != left.last() || right.first() != right.last() {
        return Err(Error::Compute(
            "the network's context is not periodic with its modulus (it does not have the \
             properties a simple network should have)"
                .into(),
        ));
    }
    Ok((
        left.into_iter().max().unwrap_or(0),
        right.into_iter().max().unwrap_or(0),
    ))
}
