//! From a training example (or merged minibatch) to what the compiler and the computer need
//! (Kaldi's `GetComputationRequest` and `NnetComputer::AcceptInputs`).

use crate::compile::request::{ComputationRequest, IoSpecification};
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::nnet::Nnet;

/// The request for `eg`: its inputs are supplied, its outputs wanted (with derivatives when
/// training), every io checked against the network: it must name an input or output node of
/// the same dimension.
pub fn computation_request(
    nnet: &Nnet,
    eg: &NnetExample,
    need_model_derivative: bool,
    store_component_stats: bool,
) -> Result<ComputationRequest> {
    let mut request = ComputationRequest {
        need_model_derivative,
        store_component_stats,
        ..Default::default()
    };
    for io in &eg.io {
        let Some(node) = nnet.node_index(&io.name) else {
            return Err(Error::Compute(format!(
                "the example has '{}' but the network has no node of that name",
                io.name
            )));
        };
        let (is_input, is_output) = (nnet.is_input_node(node), nnet.is_output_node(node));
        if !is_input && !is_output {
            return Err(Error::Compute(format!(
                "the example has '{}' but that node is neither an input nor an output",
                io.name
            )));
        }
        let dim = nnet.node_dim(node);
        if io.features.num_cols() != dim {
            return Err(Error::Compute(format!(
                "the example's '{}' has dimension {} but the network's node has {dim}",
                io.name,
                io.features.num_cols()
            )));
        }
        let spec = IoSpecification {
            name: io.name.clone(),
            indexes: io.indexes.clone(),
            has_deriv: is_output && need_model_derivative,
        };
        if is_input {
            request.inputs.push(spec);
        } else {
            request.outputs.push(spec);
        }
    }
    if request.outputs.is_empty() {
        return Err(Error::Compute(
            "the example has no supervision for any output node of the network".into(),
        ));
    }
    Ok(request)
}

/// The number of distinct sequences (`n` values) in the example, as Kaldi's
/// `GetNumNvalues` counts them: the L2 term is per sequence.
pub fn num_sequences(eg: &NnetExample) -> usize {
    let mut ns: Vec<i32> = eg
        .io
        .first()
        .map(|io| io.indexes.iter().map(|i| i.n).collect())
        .unwrap_or_default();
    ns.sort_unstable();
    ns.dedup();
    ns.len()
}
