//! Every one of the 46 component types Kaldi registers: a config line of it initialises inside
//! a small network, the network computes (chunked, as `compnet compute` runs it) finite
//! outputs of the right shape, and the model round-trips byte for byte in text and binary.
//! A type that is not registered, has no test config, or fails any step turns this red.

use compnet::matrix::Matrix;
use compnet::nnet::component::{component_type, new_component_from_config};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Nnet;
use compnet::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions};

/// Kaldi's 46 registered component types (kaldi-nnet3-facts.md, the component table).
const KALDI_TYPES: &[&str] = &[
    "AffineComponent",
    "BackpropTruncationComponent",
    "BatchNormComponent",
    "BlockAffineComponent",
    "ClipGradientComponent",
    "CompositeComponent",
    "ConstantComponent",
    "ConstantFunctionComponent",
    "ConvolutionComponent",
    "DistributeComponent",
    "DropoutComponent",
    "DropoutMaskComponent",
    "ElementwiseProductComponent",
    "FixedAffineComponent",
    "FixedBiasComponent",
    "FixedScaleComponent",
    "GeneralDropoutComponent",
    "GruNonlinearityComponent",
    "LinearComponent",
    "LogSoftmaxComponent",
    "LstmNonlinearityComponent",
    "MaxpoolingComponent",
    "NaturalGradientAffineComponent",
    "NaturalGradientPerElementScaleComponent",
    "NaturalGradientRepeatedAffineComponent",
    "NoOpComponent",
    "NormalizeComponent",
    "OutputGruNonlinearityComponent",
    "PerElementOffsetComponent",
    "PerElementScaleComponent",
    "PermuteComponent",
    "PnormComponent",
    "RectifiedLinearComponent",
    "RepeatedAffineComponent",
    "RestrictedAttentionComponent",
    "ScaleAndOffsetComponent",
    "SigmoidComponent",
    "SoftmaxComponent",
    "SpecAugmentTimeMaskComponent",
    "StatisticsExtractionComponent",
    "StatisticsPoolingComponent",
    "SumBlockComponent",
    "SumGroupComponent",
    "TanhComponent",
    "TdnnComponent",
    "TimeHeightConvolutionComponent",
];

/// Types that cannot stand alone between the input and the output node: the whole network to
/// use instead (the type must appear in it).
fn special_network(ty: &str) -> Option<&'static str> {
    Some(match ty {
        // Pooling reads the extraction's (n, t, x) layout.
        "StatisticsExtractionComponent" | "StatisticsPoolingComponent" => {
            "input-node name=input dim=4\n\
             component name=extract type=StatisticsExtractionComponent input-dim=4 \
             input-period=1 output-period=1 include-variance=true\n\
             component-node name=extract component=extract input=input\n\
             component name=pool type=StatisticsPoolingComponent input-dim=9 input-period=1 \
             left-context=3 right-context=3 num-log-count-features=0 output-stddevs=true\n\
             component-node name=pool component=pool input=extract\n\
             output-node name=output input=Round(pool, 1) objective=quadratic\n"
        }
        // Distribute spreads blocks of dims over x; the output node wants x = 0, so each
        // block is read back through a ReplaceIndex of its own x.
        "DistributeComponent" => {
            "input-node name=input dim=6\n\
             component name=dist type=DistributeComponent input-dim=6 output-dim=3\n\
             component-node name=dist component=dist input=input\n\
             output-node name=output input=Append(ReplaceIndex(dist, x, 0), ReplaceIndex(dist, x, 1)) \
             objective=quadratic\n"
        }
        // LSTM cells need the recurrent state.
        "LstmNonlinearityComponent" => {
            "input-node name=input dim=8\n\
             component name=affine type=NaturalGradientAffineComponent input-dim=10 output-dim=8\n\
             component-node name=affine component=affine input=Append(input, IfDefined(Offset(m, -1)))\n\
             component name=lstm type=LstmNonlinearityComponent cell-dim=2\n\
             component-node name=lstm component=lstm input=Append(affine, IfDefined(Offset(c, -1)))\n\
             dim-range-node name=c input-node=lstm dim-offset=0 dim=2\n\
             dim-range-node name=m input-node=lstm dim-offset=2 dim=2\n\
             output-node name=output input=m objective=quadratic\n"
        }
        _ => return None,
    })
}

/// The one-component network for `ty` built from its first registered test config.
fn network_config(ty: &str) -> Result<String, String> {
    if let Some(cfg) = special_network(ty) {
        return Ok(cfg.to_string());
    }
    let t = component_type(ty).ok_or("not registered")?;
    let cfg = t.test_configs.first().ok_or("no test config registered")?;
    let line = format!("type={ty} {cfg}");
    let parsed = ConfigLine::parse_str(&line).map_err(|e| format!("{line}: {e}"))?;
    let mut rng = compnet::random::seeded_rng(1);
    let c = new_component_from_config(&parsed, &mut rng).map_err(|e| format!("{line}: {e}"))?;
    Ok(format!(
        "input-node name=input dim={}\n\
         component name=c {line}\n\
         component-node name=c component=c input=input\n\
         output-node name=output input=c objective=quadratic\n",
        c.input_dim()
    ))
}

fn check_type(ty: &str) -> Result<(), String> {
    component_type(ty).ok_or("not registered")?;
    let config = network_config(ty)?;
    if !config.contains(ty) {
        return Err(format!("the network does not use {ty}:\n{config}"));
    }
    let mut rng = compnet::random::seeded_rng(7);
    let nnet = Nnet::from_config_text(&config, "<test>", &mut rng)
        .map_err(|e| format!("init: {e}\n{config}"))?;
    // Computes.
    let input = nnet.node_index("input").ok_or("no input node")?;
    let dim = nnet.node_dim(input);
    let frames = 20;
    let mut feats = Matrix::zeros(frames, dim);
    let mut g = compnet::random::seeded_rng(3);
    feats.view_mut().set_randn(&mut g);
    let opts = NnetSimpleComputationOptions {
        frames_per_chunk: 10,
        ..Default::default()
    };
    let mut cc = ChunkComputer::new(nnet.clone(), &opts, "output", None)
        .map_err(|e| format!("compile: {e}"))?;
    let out = cc
        .compute(&feats, IvectorSource::None)
        .map_err(|e| format!("compute: {e}"))?;
    let output = nnet.node_index("output").ok_or("no output node")?;
    if out.num_rows() != frames || out.num_cols() != nnet.node_dim(output) {
        return Err(format!(
            "output is {}x{}, expected {frames}x{}",
            out.num_rows(),
            out.num_cols(),
            nnet.node_dim(output)
        ));
    }
    if out.view().count_non_finite() != 0 {
        return Err("output has NaN or infinite values".into());
    }
    // Round-trips.
    for binary in [true, false] {
        let bytes = nnet.write_model(binary);
        let back = Nnet::read_model(&bytes, "<round trip>")
            .map_err(|e| format!("read back (binary={binary}): {e}"))?
            .nnet;
        if back.write_model(binary) != bytes {
            return Err(format!("binary={binary}: write(read(write(x))) differs"));
        }
    }
    Ok(())
}

#[test]
fn every_kaldi_component_type_initialises_computes_and_round_trips() {
    assert_eq!(KALDI_TYPES.len(), 46);
    let mut failures = Vec::new();
    for ty in KALDI_TYPES {
        let r = std::panic::catch_unwind(|| check_type(ty))
            .unwrap_or_else(|_| Err("panicked".to_string()));
        if let Err(e) = r {
            failures.push(format!("{ty}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 46 component types fail:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
