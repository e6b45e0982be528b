//! Brainstorm's layer types: their named inputs, outputs and properties (the table), and the
//! Brainstorm layers that have no honest nnet3 counterpart, with the reason.
//!
//! What each type lowers to is in `lower.rs`.

/// One layer type.
pub struct LayerKind {
    pub name: &'static str,
    pub inputs: &'static [&'static str],
    /// Output names; the Input layer's come from its `out_shapes`.
    pub outputs: &'static [&'static str],
    /// Properties besides `@type` and `@outgoing_connections`.
    pub props: &'static [&'static str],
}

const fn kind(
    name: &'static str,
    inputs: &'static [&'static str],
    outputs: &'static [&'static str],
    props: &'static [&'static str],
) -> LayerKind {
    LayerKind {
        name,
        inputs,
        outputs,
        props,
    }
}

const DEFAULT: &[&str] = &["default"];

/// The layer types compnet lowers.
pub const KINDS: &[LayerKind] = &[
    kind("Input", &[], &[], &["out_shapes"]),
    kind("FullyConnected", DEFAULT, DEFAULT, &["size", "activation"]),
    kind("Recurrent", DEFAULT, DEFAULT, &["size", "activation"]),
    kind("Lstm", DEFAULT, DEFAULT, &["size", "activation"]),
    kind("Elementwise", DEFAULT, DEFAULT, &["activation"]),
    kind("NoOp", DEFAULT, DEFAULT, &[]),
    kind("Dropout", DEFAULT, DEFAULT, &["drop_prob"]),
    kind("BatchNorm", DEFAULT, DEFAULT, &["epsilon"]),
    kind("Highway", &["H", "T", "x"], DEFAULT, &[]),
    kind("Merge", &["inputs_1", "inputs_2"], DEFAULT, &[]),
    kind(
        "Convolution2D",
        DEFAULT,
        DEFAULT,
        &[
            "num_filters",
            "kernel_size",
            "stride",
            "padding",
            "activation",
        ],
    ),
    kind(
        "Pooling2D",
        DEFAULT,
        DEFAULT,
        &["kernel_size", "type", "stride", "padding"],
    ),
    kind(
        "SoftmaxCE",
        &["default", "targets"],
        &["predictions", "loss"],
        &[],
    ),
    kind(
        "SoftmaxFC",
        &["default", "targets"],
        &["probabilities", "loss"],
        &["size"],
    ),
    kind(
        "SquaredError",
        &["default", "targets"],
        &["predictions", "loss"],
        &[],
    ),
    kind("SquaredDifference", &["inputs_1", "inputs_2"], DEFAULT, &[]),
    kind("Loss", DEFAULT, &["loss"], &["importance"]),
];

/// The type named `name`.
pub fn kind_named(name: &str) -> Option<&'static LayerKind> {
    KINDS.iter().find(|k| k.name == name)
}

/// Brainstorm layers that are refused, and why.
pub const NOT_LOWERED: &[(&str, &str)] = &[
    (
        "SigmoidCE",
        "binary cross-entropy is not one of nnet3's objectives (linear, quadratic)",
    ),
    (
        "BinomialCE",
        "binary cross-entropy is not one of nnet3's objectives (linear, quadratic)",
    ),
    (
        "Mask",
        "a per-frame mask input is supervision weights in nnet3 (the examples' output weights), not a layer",
    ),
    (
        "Clockwork",
        "its modules update at different periods, which no nnet3 component or descriptor expresses",
    ),
    (
        "ClockworkLstm",
        "its modules update at different periods, which no nnet3 component or descriptor expresses",
    ),
    (
        "DeltasScaling",
        "it scales only the backward pass, and no nnet3 component does that alone",
    ),
    (
        "LstmOpt",
        "it is Brainstorm's internal fused layout of Lstm; write Lstm",
    ),
];
