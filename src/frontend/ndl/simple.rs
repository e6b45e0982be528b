//! CNTK's `SimpleNetworkBuilder` section: a feed-forward network from `layerSizes`
//! (`792:512*3:183`: input, hidden layers, output; `x*n` repeats), `layerTypes` (Sigmoid,
//! Tanh or RectifiedLinear) and `trainingCriterion` (CrossEntropyWithSoftmax or
//! SquareError). Each layer is an AffineComponent `L<k>` and its nonlinearity `L<k>.<type>`;
//! the output layer is `output.affine` (+ `output.log-softmax`) and output node `output`.
//! Settings about data or initialisation scale that nnet3 does not keep in the network
//! (`applyMeanVarNorm`, `needPrior`, `uniformInit`, `initValueScale`, `evalCriterion`:
//! accuracy is always reported for `output`) are accepted with a warning and have no effect.

use super::lexer::Pos;
use super::parser::Setting;
use crate::nnet::{Desc, NetworkBuilder, Nnet, ObjectiveType};
use rand::RngCore;

type SResult<T> = Result<T, (Pos, String)>;

const IGNORED: &[&str] = &[
    "applymeanvarnorm",
    "needprior",
    "uniforminit",
    "initvaluescale",
    "evalcriterion",
];

/// Parses `792:512*3:183`.
pub fn parse_layer_sizes(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in s.split(':') {
        let (size, count) = match item.split_once('*') {
            Some((a, n)) => (a, n),
            None => (item, "1"),
        };
        let size: usize = size
            .trim()
            .parse()
            .ok()
            .filter(|&d: &usize| d > 0 && d <= i32::MAX as usize)
            .ok_or_else(|| format!("'{item}' in layerSizes is not a positive size"))?;
        let count: usize = count
            .trim()
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0 && n <= 10_000)
            .ok_or_else(|| {
                format!("'{item}' in layerSizes: the repeat count must be 1 to 10000")
            })?;
        out.extend(std::iter::repeat_n(size, count));
    }
    if out.len() < 2 {
        return Err("layerSizes needs at least an input and an output size".into());
    }
    Ok(out)
}

pub fn build(settings: &[Setting], rng: &mut dyn RngCore) -> SResult<(Nnet, String)> {
    let mut sizes = None;
    let mut layer_type = "Sigmoid".to_string();
    let mut criterion = ("CrossEntropyWithSoftmax".to_string(), Pos::default());
    let mut first = Pos::default();
    for s in settings {
        if first.line == 0 {
            first = s.pos;
        }
        match s.key.to_ascii_lowercase().as_str() {
            "layersizes" => sizes = Some(parse_layer_sizes(&s.value).map_err(|m| (s.pos, m))?),
            "layertypes" => {
                layer_type = match s.value.to_ascii_lowercase().as_str() {
                    "sigmoid" => "Sigmoid",
                    "tanh" => "Tanh",
                    "rectifiedlinear" | "relu" => "RectifiedLinear",
                    _ => {
                        return Err((
                            s.pos,
                            format!(
                                "layerTypes '{}' is not supported: expected Sigmoid, Tanh or \
                                 RectifiedLinear",
                                s.value
                            ),
                        ))
                    }
                }
                .into()
            }
            "trainingcriterion" => {
                if !["crossentropywithsoftmax", "squareerror"]
                    .contains(&s.value.to_ascii_lowercase().as_str())
                {
                    return Err((
                        s.pos,
                        format!(
                            "trainingCriterion '{}' is not supported: expected \
                             CrossEntropyWithSoftmax or SquareError",
                            s.value
                        ),
                    ));
                }
                criterion = (s.value.to_ascii_lowercase(), s.pos);
            }
            k if IGNORED.contains(&k) => {
                // Accepted so CNTK configs load, but a user should know it did nothing.
                eprintln!(
                    "compnet: warning: SimpleNetworkBuilder setting '{}' (line {}) has no \
                     effect here (features are expected normalised; initial values are \
                     NDL's defaults; accuracy is always reported for 'output')",
                    s.key, s.pos.line
                );
            }
            _ => {
                return Err((
                    s.pos,
                    format!(
                        "SimpleNetworkBuilder setting '{}' is not supported (supported: \
                         layerSizes, layerTypes, trainingCriterion, and without effect: \
                         applyMeanVarNorm, needPrior, uniformInit, initValueScale, evalCriterion)",
                        s.key
                    ),
                ))
            }
        }
    }
    let sizes = sizes.ok_or((first, "SimpleNetworkBuilder needs layerSizes".to_string()))?;
    let fail = |e: crate::Error| (first, e.to_string());
    let mut b = NetworkBuilder::new();
    b.input("input", sizes[0]).map_err(fail)?;
    let mut prev = Desc::node("input");
    let last = sizes.len() - 1;
    for k in 1..last {
        let name = format!("L{k}");
        crate::limits::check_product(&[sizes[k - 1] as u64, sizes[k] as u64, 4], "a layer")
            .map_err(|m| (first, m))?;
        b.component_with_node(
            &name,
            &format!(
                "type=AffineComponent input-dim={} output-dim={}",
                sizes[k - 1],
                sizes[k]
            ),
            prev,
            rng,
        )
        .map_err(fail)?;
        let nl = format!("{name}.{}", layer_type.to_ascii_lowercase());
        b.component_with_node(
            &nl,
            &format!("type={layer_type}Component dim={}", sizes[k]),
            name.as_str(),
            rng,
        )
        .map_err(fail)?;
        prev = Desc::node(nl);
    }
    crate::limits::check_product(&[sizes[last - 1] as u64, sizes[last] as u64, 4], "a layer")
        .map_err(|m| (first, m))?;
    b.component_with_node(
        "output.affine",
        &format!(
            "type=AffineComponent input-dim={} output-dim={}",
            sizes[last - 1],
            sizes[last]
        ),
        prev,
        rng,
    )
    .map_err(fail)?;
    if criterion.0 == "squareerror" {
        b.output("output", "output.affine", ObjectiveType::Quadratic)
            .map_err(fail)?;
    } else {
        b.component_with_node(
            "output.log-softmax",
            &format!("type=LogSoftmaxComponent dim={}", sizes[last]),
            "output.affine",
            rng,
        )
        .map_err(fail)?;
        b.output("output", "output.log-softmax", ObjectiveType::Linear)
            .map_err(fail)?;
    }
    let (nnet, config) = b.build_with_config().map_err(fail)?;
    // Every component here comes from a config line, so the config is always known.
    Ok((nnet, config.unwrap_or_default()))
}
