//! `compnet info` (Kaldi's `nnet3-info`): context, parameter count, modulus, the config lines
//! with dimensions and one line per component.

use crate::error::Result;
use crate::nnet::descriptor::{ForwardingDescriptor, SumDescriptor};
use crate::nnet::{NetworkNode, Nnet};

/// Options of `compnet info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model (raw network or final.mdl; `-` = stdin).
    pub model: String,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let nnet = Nnet::read_model_file(&a.model)?.nnet;
    let text = info_text(&nnet)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| crate::error::Error::io("<stdout>", e))?;
    Ok(0)
}

/// The whole `nnet3-info` text for a network.
pub fn info_text(nnet: &Nnet) -> Result<String> {
    let mut s = String::new();
    // TODO(model): left-context/right-context need crate::compile::context (not written yet).
    s += &format!("num-parameters: {}\n", nnet.num_parameters());
    s += &format!("modulus: {}\n", nnet_modulus(nnet));
    for line in nnet.config_lines_with_dims() {
        s += &line;
        s.push('\n');
    }
    for (name, c) in nnet.component_names.iter().zip(&nnet.components) {
        s += &format!("component name={name} type={}\n", c.info());
    }
    Ok(s)
}

/// The network's time modulus (Kaldi's `Nnet::Modulus`): the least common multiple of the
/// moduli of all descriptors (Switch contributes its number of arguments, Round its modulus).
pub fn nnet_modulus(nnet: &Nnet) -> usize {
    let mut m = 1;
    for node in &nnet.nodes {
        if let NetworkNode::Descriptor { descriptor, .. } = node {
            for part in &descriptor.parts {
                m = lcm(m, sum_modulus(part));
            }
        }
    }
    m
}

fn sum_modulus(d: &SumDescriptor) -> usize {
    match d {
        SumDescriptor::Simple(f) => fwd_modulus(f),
        SumDescriptor::Optional(a) => sum_modulus(a),
        SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
            lcm(sum_modulus(a), sum_modulus(b))
        }
        SumDescriptor::Const { .. } => 1,
    }
}

fn fwd_modulus(f: &ForwardingDescriptor) -> usize {
    match f {
        ForwardingDescriptor::Simple { .. } => 1,
        ForwardingDescriptor::Offset { src, .. }
        | ForwardingDescriptor::ReplaceIndex { src, .. } => fwd_modulus(src),
        ForwardingDescriptor::Switch(v) => {
            v.iter().fold(v.len().max(1), |m, s| lcm(m, fwd_modulus(s)))
        }
        ForwardingDescriptor::Round { src, t_modulus } => {
            lcm(t_modulus.unsigned_abs().max(1) as usize, fwd_modulus(src))
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: usize, b: usize) -> usize {
    if a == 0 || b == 0 {
        a.max(b)
    } else {
        a / gcd(a, b) * b
    }
}
