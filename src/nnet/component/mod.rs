//! The component interface and the registry of component types.
//!
//! A component is a named, typed function with optional parameters. The compiler and runtime
//! only consult its [`Properties`] flags and the methods here; they never special-case a type
//! by name. Simple components map one input row to one output row and ignore Indexes;
//! general ("non-simple") components see Indexes through the hooks `get_input_indexes`,
//! `is_computable`, `reorder_indexes` and `precompute_indexes`.
//!
//! Adding a component type = one file in this folder plus one line in [`registry`].

pub mod affine;
pub mod attention;
pub mod backprop_truncation;
pub mod block_affine;
pub mod column_groups;
pub mod composite;
pub mod constant;
pub mod distribute;
pub mod dropout;
pub mod dropout_general;
pub mod fixed_scale_bias;
pub mod gru;
pub mod info_summary;
pub mod kaldi_fields;
pub mod linear;
pub mod lstm;
pub mod nonlinear;
pub mod normalize;
pub mod old_cnn;
pub mod param_init;
pub mod param_ops;
pub mod pass_through;
pub mod per_element;
pub mod statistics;
pub mod tdnn;
pub mod time_height_convolution;
pub mod updatable;

use crate::error::Result;
use crate::index::Index;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use std::any::Any;

pub use updatable::{UpdatableCommon, UpdatableComponent};

/// Component property flags (Kaldi's `ComponentProperties`, same bit values).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Properties(pub u32);

impl Properties {
    pub const SIMPLE: Properties = Properties(0x001);
    pub const UPDATABLE: Properties = Properties(0x002);
    pub const PROPAGATE_IN_PLACE: Properties = Properties(0x004);
    pub const PROPAGATE_ADDS: Properties = Properties(0x008);
    pub const REORDERS_INDEXES: Properties = Properties(0x010);
    pub const BACKPROP_ADDS: Properties = Properties(0x020);
    pub const BACKPROP_NEEDS_INPUT: Properties = Properties(0x040);
    pub const BACKPROP_NEEDS_OUTPUT: Properties = Properties(0x080);
    pub const BACKPROP_IN_PLACE: Properties = Properties(0x100);
    pub const STORES_STATS: Properties = Properties(0x200);
    pub const INPUT_CONTIGUOUS: Properties = Properties(0x400);
    pub const OUTPUT_CONTIGUOUS: Properties = Properties(0x800);
    pub const USES_MEMO: Properties = Properties(0x1000);
    pub const RANDOM_COMPONENT: Properties = Properties(0x2000);
    /// compnet's own flag: the backprop reads its output value only for whether each element
    /// is > 0 (a ReLU), so memory compression may keep that output as one byte per element
    /// (Kaldi's optimizer tests for the type RectifiedLinearComponent instead).
    pub const BACKPROP_NEEDS_OUTPUT_SIGN: Properties = Properties(0x10000);
    /// compnet's own flag: in test mode the component normalises with statistics it
    /// gathered in training (BatchNorm), so the trainer decays them after every minibatch
    /// (`--batchnorm-stats-scale`), `combine` recomputes them and `compute-prob` switches the
    /// component to test mode (Kaldi finds these components by their type).
    pub const BATCH_STATISTICS: Properties = Properties(0x20000);

    /// True if every flag in `f` is set.
    pub fn has(self, f: Properties) -> bool {
        self.0 & f.0 == f.0
    }
    /// These flags plus `f` when `cond` holds (a flag that depends on the configuration).
    pub fn with_if(self, cond: bool, f: Properties) -> Properties {
        if cond {
            self | f
        } else {
            self
        }
    }
}
impl std::ops::BitOr for Properties {
    type Output = Properties;
    fn bitor(self, o: Properties) -> Properties {
        Properties(self.0 | o.0)
    }
}
impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Properties({:#x})", self.0)
    }
}

/// Whether two components are of the same type (Kaldi's type name), e.g. to add one's
/// parameters to the other's.
pub fn same_type(a: &dyn Component, b: &dyn Component) -> bool {
    a.type_name() == b.type_name()
}

/// What Propagate hands to Backprop for components with `USES_MEMO`.
pub type Memo = Box<dyn Any + Send + Sync>;

/// One forward step (Kaldi's `Propagate`): what the component reads and writes, and what
/// else it may consult, in one value so that every implementation has the same one-line
/// signature and reads the fields it needs (`p.input`, `p.output`).
pub struct Propagate<'a> {
    /// The input rows.
    pub input: MatView<'a>,
    /// Written, or added to with `PROPAGATE_ADDS`.
    pub output: MatViewMut<'a>,
    /// What `precompute_indexes` made for this step (general components only).
    pub indexes: Option<&'a dyn PrecomputedIndexes>,
    /// The only source of randomness (dropout masks); seeded by the caller, so a
    /// train-mode computation is reproducible.
    pub rng: &'a mut dyn RngCore,
}

impl<'a> Propagate<'a> {
    /// No precomputed indexes; randomness from `rng`.
    pub fn new(input: MatView<'a>, output: MatViewMut<'a>, rng: &'a mut dyn RngCore) -> Self {
        Propagate {
            input,
            output,
            indexes: None,
            rng,
        }
    }
    /// Whether the input has `input_dim` columns and the output `output_dim` (a component
    /// handed other matrices does nothing).
    pub fn cols_fit(&self, input_dim: usize, output_dim: usize) -> bool {
        self.input.num_cols() == input_dim && self.output.num_cols() == output_dim
    }
    /// [`Self::cols_fit`], and as many output rows as input rows (a simple component).
    pub fn fits(&self, input_dim: usize, output_dim: usize) -> bool {
        self.cols_fit(input_dim, output_dim) && self.output.num_rows() == self.input.num_rows()
    }
    /// The same step with `output` already holding the input (`PROPAGATE_IN_PLACE`).
    fn into_in_place(self) -> PropagateInPlace<'a> {
        let Propagate {
            input,
            mut output,
            indexes,
            rng,
        } = self;
        output.copy_from(input);
        PropagateInPlace {
            data: output,
            indexes,
            rng,
        }
    }
}

/// A forward step in one matrix: `data` holds the input on entry and the output on exit.
pub struct PropagateInPlace<'a> {
    pub data: MatViewMut<'a>,
    /// As in [`Propagate`].
    pub indexes: Option<&'a dyn PrecomputedIndexes>,
    pub rng: &'a mut dyn RngCore,
}

impl<'a> PropagateInPlace<'a> {
    /// No precomputed indexes; randomness from `rng`.
    pub fn new(data: MatViewMut<'a>, rng: &'a mut dyn RngCore) -> Self {
        PropagateInPlace {
            data,
            indexes: None,
            rng,
        }
    }
}

/// One backward step (Kaldi's `Backprop`): the output derivative, where the input
/// derivative goes, and what the forward step left behind.
pub struct Backprop<'a> {
    pub out_deriv: MatView<'a>,
    /// Written (or added to with `BACKPROP_ADDS`) when given.
    pub in_deriv: Option<MatViewMut<'a>>,
    /// What `precompute_indexes` made for this step (general components only).
    pub indexes: Option<&'a dyn PrecomputedIndexes>,
    /// The forward input (empty unless the component has `BACKPROP_NEEDS_INPUT`).
    pub in_value: MatView<'a>,
    /// The forward output (empty unless the component has `BACKPROP_NEEDS_OUTPUT`).
    pub out_value: MatView<'a>,
    /// What propagate returned (components with `USES_MEMO`).
    pub memo: Option<&'a Memo>,
    /// Receives the parameter change (a component of the same type), if any.
    pub to_update: Option<&'a mut dyn Component>,
    /// The only source of randomness (self-repair); seeded by the caller.
    pub rng: &'a mut dyn RngCore,
}

impl<'a> Backprop<'a> {
    /// Empty values, no memo, nothing to update; randomness from `rng`.
    pub fn new(
        out_deriv: MatView<'a>,
        in_deriv: Option<MatViewMut<'a>>,
        rng: &'a mut dyn RngCore,
    ) -> Self {
        Backprop {
            out_deriv,
            in_deriv,
            indexes: None,
            in_value: MatView::from_slice(&[], 0, 0),
            out_value: MatView::from_slice(&[], 0, 0),
            memo: None,
            to_update: None,
            rng,
        }
    }
    /// Whether a simple component's backward step has its shapes: `in_value` (and `in_deriv`
    /// when given) n × `input_dim`, `out_value` and `out_deriv` n × `output_dim`.
    pub fn fits(&self, input_dim: usize, output_dim: usize) -> bool {
        let n = self.in_value.num_rows();
        let fits = |m: MatView<'_>, cols: usize| m.num_rows() == n && m.num_cols() == cols;
        self.in_value.num_cols() == input_dim
            && fits(self.out_value, output_dim)
            && fits(self.out_deriv, output_dim)
            && self
                .in_deriv
                .as_ref()
                .is_none_or(|d| fits(d.as_view(), input_dim))
    }
    /// The same step with `deriv` holding the output derivative (`BACKPROP_IN_PLACE`).
    pub fn in_place(self, deriv: MatViewMut<'a>) -> BackpropInPlace<'a> {
        let Backprop {
            indexes,
            in_value,
            out_value,
            memo,
            to_update,
            rng,
            ..
        } = self;
        BackpropInPlace {
            deriv,
            indexes,
            in_value,
            out_value,
            memo,
            to_update,
            rng,
        }
    }
}

/// A backward step in one matrix: `deriv` holds the output derivative on entry and the
/// input derivative on exit. The other fields are [`Backprop`]'s.
pub struct BackpropInPlace<'a> {
    pub deriv: MatViewMut<'a>,
    pub indexes: Option<&'a dyn PrecomputedIndexes>,
    pub in_value: MatView<'a>,
    pub out_value: MatView<'a>,
    pub memo: Option<&'a Memo>,
    pub to_update: Option<&'a mut dyn Component>,
    pub rng: &'a mut dyn RngCore,
}

impl<'a> BackpropInPlace<'a> {
    /// Empty values, no memo, nothing to update; randomness from `rng`.
    pub fn new(deriv: MatViewMut<'a>, rng: &'a mut dyn RngCore) -> Self {
        Backprop::new(MatView::from_slice(&[], 0, 0), None, rng).in_place(deriv)
    }
}

/// The operands of [`Component::store_stats`]: the forward step's values and memo.
pub struct StatsStep<'a> {
    pub in_value: MatView<'a>,
    pub out_value: MatView<'a>,
    pub memo: Option<&'a Memo>,
    /// Kaldi samples some statistics on a random subset of minibatches; this decides which.
    pub rng: &'a mut dyn RngCore,
}

/// What a component is, as the compiler sees it: Kaldi's `Type()`, `InputDim()`,
/// `OutputDim()` and `Properties()` in one declaration.
#[derive(Clone, Copy, Debug)]
pub struct Description {
    /// Kaldi's type name, e.g. `AffineComponent`.
    pub type_name: &'static str,
    pub input_dim: usize,
    pub output_dim: usize,
    pub properties: Properties,
}

impl Description {
    pub fn new(
        type_name: &'static str,
        input_dim: usize,
        output_dim: usize,
        properties: Properties,
    ) -> Self {
        Description {
            type_name,
            input_dim,
            output_dim,
            properties,
        }
    }
}

/// A backprop's update target as its concrete type (the target is always a component of the
/// backprop's own type; anything else gets no update).
pub fn update_target<T: Component + 'static>(
    to_update: Option<&mut dyn Component>,
) -> Option<&mut T> {
    to_update.and_then(|u| u.as_any_mut().downcast_mut::<T>())
}

/// Per-computation index information a general component precomputes once at compile time.
/// A type declares itself one with an empty `impl`; `as_any` comes from [`AsAny`].
pub trait PrecomputedIndexes: AsAny + Send + Sync + std::fmt::Debug {}

/// The downcast hook of [`PrecomputedIndexes`], for every sized type.
pub trait AsAny {
    fn as_any(&self) -> &dyn Any;
}
impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The step's precomputed indexes if they are a `P`, else `default()` (a caller that ran the
/// component without compiling), kept only if `fits` accepts them for these matrices.
pub fn precomputed_or_default<'a, P: PrecomputedIndexes + Clone + 'static>(
    indexes: Option<&'a dyn PrecomputedIndexes>,
    default: impl FnOnce() -> P,
    fits: impl FnOnce(&P) -> bool,
) -> Option<std::borrow::Cow<'a, P>> {
    use std::borrow::Cow;
    let p = match indexes.and_then(|p| p.as_any().downcast_ref::<P>()) {
        Some(p) => Cow::Borrowed(p),
        None => Cow::Owned(default()),
    };
    fits(&p).then_some(p)
}

/// Extra information passed to the non-simple hooks (Kaldi's MiscComputationInfo).
#[derive(Clone, Debug, Default)]
pub struct MiscComputationInfo {
    /// Set by the graph builder when it knows that the component's input node has no
    /// Cindex with t outside `lo..=hi` (`lo > hi`: none at all), so a component with a
    /// long window (statistics pooling over 10,001 frames) need not ask about the rest. A
    /// hint only: the answers must be the same with or without it.
    pub input_t_bounds: Option<(i64, i64)>,
}

/// A component: Propagate, Backprop, I/O and property flags.
pub trait Component: Send + Sync + std::fmt::Debug {
    /// Name, dimensions and property flags. The four accessors below read it; components
    /// implement only this.
    fn describe(&self) -> Description;
    /// Kaldi's type name, e.g. `AffineComponent`.
    fn type_name(&self) -> &'static str {
        self.describe().type_name
    }
    fn input_dim(&self) -> usize {
        self.describe().input_dim
    }
    fn output_dim(&self) -> usize {
        self.describe().output_dim
    }
    fn properties(&self) -> Properties {
        self.describe().properties
    }

    /// Computes `output` from `input`. If the component has `PROPAGATE_ADDS` it adds to
    /// `output`, otherwise it overwrites it. Returns a memo iff it has `USES_MEMO`.
    ///
    /// The default copies the input and runs [`Self::propagate_in_place`], so a component
    /// whose work is naturally in place implements only that. Every component overrides at
    /// least one of the two (the two defaults call each other).
    fn propagate(&self, p: Propagate<'_>) -> Option<Memo> {
        self.propagate_in_place(p.into_in_place())
    }

    /// [`Self::propagate`] followed by a ReLU of the output (`RectifiedLinearComponent`'s
    /// propagate in place) in one pass, with the same results, where the component has such
    /// a path (an affine layer with 8-bit products); returns false, having done nothing,
    /// where it has not. Only for a component without memo or `PROPAGATE_ADDS`.
    fn propagate_relu(&self, p: Propagate<'_>) -> bool {
        let _ = p;
        false
    }

    /// Back-propagates `out_deriv`. Writes (or with `BACKPROP_ADDS`, adds) the input
    /// derivative into `in_deriv` when given, and hands the parameter gradient to
    /// `to_update` (a component of the same type, usually in a separate "delta" network)
    /// when given, through its [`crate::gradient::Update`]. `in_value` / `out_value`
    /// are empty (0×0) views unless the component declared `BACKPROP_NEEDS_INPUT` /
    /// `BACKPROP_NEEDS_OUTPUT`.
    ///
    /// The default copies `out_deriv` into `in_deriv` and runs [`Self::backprop_in_place`];
    /// without `in_deriv` it does nothing, so a component that must update `to_update` even
    /// then overrides this. Every component overrides at least one of the two.
    fn backprop(&self, mut b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv.take() {
            d.copy_from(b.out_deriv);
            self.backprop_in_place(b.in_place(d));
        }
    }

    /// Propagate with input and output in the same memory (`data` holds the input on entry
    /// and the output on exit). The runtime calls it only for components with
    /// `PROPAGATE_IN_PLACE`; those override it with a true in-place kernel. The default goes
    /// through a temporary copy.
    fn propagate_in_place(&self, p: PropagateInPlace<'_>) -> Option<Memo> {
        let PropagateInPlace {
            data: output,
            indexes,
            rng,
        } = p;
        let input = output.as_view().to_matrix();
        self.propagate(Propagate {
            input: input.view(),
            output,
            indexes,
            rng,
        })
    }

    /// Backprop with `out_deriv` and `in_deriv` in the same memory (`deriv` holds the output
    /// derivative on entry and the input derivative on exit). Used only for components with
    /// `BACKPROP_IN_PLACE`; the default goes through a temporary copy.
    fn backprop_in_place(&self, b: BackpropInPlace<'_>) {
        let BackpropInPlace {
            mut deriv,
            indexes,
            in_value,
            out_value,
            memo,
            to_update,
            rng,
        } = b;
        let out_deriv = deriv.as_view().to_matrix();
        // Reborrowed, since the copy lives shorter than the step's operands.
        self.backprop(Backprop {
            out_deriv: out_deriv.view(),
            in_deriv: Some(deriv.rb()),
            indexes,
            in_value,
            out_value,
            memo,
            to_update: to_update.map(|u| &mut *u as &mut dyn Component),
            rng: &mut *rng,
        });
    }

    /// Writes the component exactly as Kaldi does, from `<TypeName>` to `</TypeName> `; by
    /// default [`Component::kaldi_fields`] between the two.
    fn write(&self, w: &mut TokenWriter) {
        kaldi_fields::write_component(w, self.type_name(), &self.kaldi_fields());
    }
    /// The `<Token> value` fields of the Kaldi file, in order, for the default `write`
    /// (components with another layout override `write` instead).
    fn kaldi_fields(&self) -> Vec<kaldi_fields::Field<'_>> {
        Vec::new()
    }

    /// One-line summary for `info` (Kaldi's `Info()`).
    fn info(&self) -> String;

    fn clone_box(&self) -> Box<dyn Component>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;

    /// The updatable interface, for components with parameters.
    fn as_updatable(&self) -> Option<&dyn UpdatableComponent> {
        None
    }
    fn as_updatable_mut(&mut self) -> Option<&mut dyn UpdatableComponent> {
        None
    }

    /// Accumulates statistics (components with `STORES_STATS`; Kaldi's `StoreStats`): the
    /// caller's entry, which hands its operands in one [`StatsStep`] to
    /// [`Self::store_stats_step`], the method components implement.
    fn store_stats(
        &mut self,
        in_value: MatView<'_>,
        out_value: MatView<'_>,
        memo: Option<&Memo>,
        rng: &mut dyn RngCore,
    ) {
        self.store_stats_step(StatsStep {
            in_value,
            out_value,
            memo,
            rng,
        });
    }
    /// What [`Self::store_stats`] does; nothing by default.
    fn store_stats_step(&mut self, _s: StatsStep<'_>) {}
    /// Zeroes stored statistics.
    fn zero_stats(&mut self) {}
    /// Scales stored statistics (Kaldi's ScaleStats-style decay), if any.
    fn scale_stats(&mut self, _scale: f32) {}
    /// Adds `alpha` times the statistics of `other` (same type) to this component's: how
    /// training-only statistics gathered in the delta network reach the model (Kaldi's
    /// `Component::Add` on components without parameters).
    fn add_stats(&mut self, _alpha: f32, _other: &dyn Component) {}
    /// The statistics exactly, as a flat list (the model file stores rounded averages):
    /// `compnet fit`'s checkpoints save them, so that a resumed run is bit-identical. Empty
    /// for components whose statistics do not influence training or evaluation.
    fn exact_stats(&self) -> crate::matrix::Vector64 {
        crate::matrix::Vector64::default()
    }
    /// Restores what [`Component::exact_stats`] returned; false when the list does not fit.
    fn set_exact_stats(&mut self, stats: &crate::matrix::Vector64) -> bool {
        stats.is_empty()
    }
    /// Switches train/test behaviour (Dropout, BatchNorm, ...); no-op for most components.
    /// `rng` serves BatchNorm without statistics, which invents some (as Kaldi does); callers
    /// switching a whole network pass one generator through all components in order.
    fn set_test_mode(&mut self, _test_mode: bool, _rng: &mut dyn RngCore) {}
    /// The weight matrices whose forward products go through [`WeightMatrix`]'s product
    /// paths, switched per network: 8-bit integers (`compute --quantize=int8`) and the
    /// few-row product of looped recurrent decoding. Those of the affine family (Affine,
    /// NaturalGradientAffine, FixedAffine, Linear, Tdnn, and the ones inside a
    /// CompositeComponent); empty for every other component.
    ///
    /// [`WeightMatrix`]: crate::matrix::WeightMatrix
    fn product_weights_mut(&mut self) -> Vec<&mut crate::matrix::WeightMatrix> {
        Vec::new()
    }

    // ---- Hooks for general (non-simple) components. The defaults are a simple component's.

    /// Where this component's output can be computable, given that its input can be computable
    /// only for t in `input` (an over-approximation is fine: the graph builder uses it only to
    /// skip Cindexes that cannot be computed). Simple components keep the range; a non-simple
    /// component that does not say better gives everything.
    fn output_t_range(&self, input: crate::index::TRange) -> crate::index::TRange {
        if self.properties().has(Properties::SIMPLE) {
            input
        } else {
            crate::index::TRange::All
        }
    }

    /// The input Indexes needed to compute `output_index`.
    fn get_input_indexes(
        &self,
        _misc: &MiscComputationInfo,
        output_index: &Index,
        desired: &mut Vec<Index>,
    ) {
        desired.push(*output_index);
    }
    /// Whether `output_index` can be computed given which inputs exist; fills `used_inputs`
    /// with the inputs it would use. A simple component needs its own Index; a general one
    /// is judged by [`inputs_computable`] from `get_input_indexes` and `input_required`.
    fn is_computable(
        &self,
        misc: &MiscComputationInfo,
        output_index: &Index,
        input_available: &dyn Fn(&Index) -> bool,
        used_inputs: Option<&mut Vec<Index>>,
    ) -> bool {
        if !self.properties().has(Properties::SIMPLE) {
            return inputs_computable(self, misc, output_index, input_available, used_inputs);
        }
        let ok = input_available(output_index);
        if let (true, Some(u)) = (ok, used_inputs) {
            u.clear();
            u.push(*output_index);
        }
        ok
    }
    /// Whether `input`, one of `get_input_indexes(output_index)`, must exist for
    /// `output_index` to be computable (general components; the others are optional: used
    /// when they exist). An output with no inputs listed is asked about its own Index: true
    /// (a component that needs no input, ConstantComponent) makes it computable, false (all
    /// inputs optional, and the window empty) does not.
    fn input_required(&self, _output_index: &Index, _input: &Index) -> bool {
        true
    }
    /// Reorders (and may pad with kNoTime indexes) the input and output Indexes of a step.
    fn reorder_indexes(&self, _input: &mut Vec<Index>, _output: &mut Vec<Index>) {}
    /// Whether Kaldi's `PrecomputeIndexes` of this component draws from Kaldi's `rand()`
    /// stream (TdnnComponent's spot check of its indexes), which the compiler's replay of
    /// Kaldi's draws (`compile::kaldi_draws`) follows.
    fn precompute_draws_kaldi_rand(&self) -> bool {
        self.type_name() == "TdnnComponent"
    }
    /// Precomputes whatever Propagate/Backprop need to know about the Indexes of a step.
    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        _input: &[Index],
        _output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        None
    }
}

/// A general component's `is_computable` (Kaldi's pattern for optional inputs): computable
/// when every required input exists and, when none is required, at least one input exists (see
/// [`Component::input_required`] for an output with none); it uses every input that exists,
/// in `get_input_indexes` order.
pub fn inputs_computable<C: Component + ?Sized>(
    c: &C,
    misc: &MiscComputationInfo,
    output_index: &Index,
    input_available: &dyn Fn(&Index) -> bool,
    used_inputs: Option<&mut Vec<Index>>,
) -> bool {
    let mut inputs = Vec::new();
    c.get_input_indexes(misc, output_index, &mut inputs);
    let num_inputs = inputs.len();
    let (mut used, mut any_required) = (Vec::with_capacity(num_inputs), false);
    let mut ok = true;
    for i in inputs {
        let required = c.input_required(output_index, &i);
        any_required |= required;
        if input_available(&i) {
            used.push(i);
        } else if required {
            ok = false;
            break;
        }
    }
    let ok = if num_inputs == 0 {
        c.input_required(output_index, output_index)
    } else {
        ok && (any_required || !used.is_empty())
    };
    if let Some(u) = used_inputs {
        u.clear();
        if ok {
            u.extend(used);
        }
    }
    ok
}

impl Clone for Box<dyn Component> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// One registered component type.
pub struct ComponentType {
    /// Kaldi's type name, e.g. `AffineComponent`.
    pub name: &'static str,
    /// Initialises from a `component` config line (Kaldi's InitFromConfig). The line's
    /// `type` and `name` keys are already consumed; every other key must be. Random
    /// parameters are drawn from the init generator (`compnet init --srand`).
    pub from_config: fn(&ConfigLine, &mut dyn RngCore) -> Result<Box<dyn Component>>,
    /// Reads the component after its opening `<TypeName>` token, through `</TypeName>`.
    pub read: fn(&mut TokenReader<'_>) -> Result<Box<dyn Component>>,
    /// Config lines (without `type=`) the generic test harness instantiates.
    pub test_configs: &'static [&'static str],
}

/// Every component type compnet knows.
pub fn registry() -> &'static [ComponentType] {
    REGISTRY
}

static REGISTRY: &[ComponentType] = &[
    // Affine family and other updatable components:
    ComponentType {
        name: "AffineComponent",
        from_config: affine::AffineComponent::from_config,
        read: affine::AffineComponent::read,
        test_configs: &["input-dim=5 output-dim=4", "input-dim=3 output-dim=6 param-stddev=0.5 bias-stddev=0.2 learning-rate=0.01 max-change=0.75 orthonormal-constraint=1.0"],
    },
    ComponentType {
        name: "NaturalGradientAffineComponent",
        from_config: |cfg, rng| affine::AffineComponent::from_config_kind(cfg, rng, true),
        read: affine::AffineComponent::ng_read,
        test_configs: &["input-dim=6 output-dim=5", "input-dim=4 output-dim=3 bias-mean=1.0 rank-in=2 rank-out=2 update-period=2 num-samples-history=500 alpha=2 learning-rate-factor=0.5 l2-regularize=0.01"],
    },
    ComponentType {
        name: "FixedAffineComponent",
        from_config: affine::FixedAffineComponent::from_config,
        read: affine::FixedAffineComponent::read,
        test_configs: &["input-dim=5 output-dim=3"],
    },
    ComponentType {
        name: "LinearComponent",
        from_config: linear::LinearComponent::from_config,
        read: linear::LinearComponent::read,
        test_configs: &["input-dim=5 output-dim=4", "input-dim=4 output-dim=6 use-natural-gradient=false rank-in=2 rank-out=3 orthonormal-constraint=-1 max-change=0.75"],
    },
    ComponentType {
        name: "BlockAffineComponent",
        from_config: block_affine::BlockAffineComponent::from_config,
        read: block_affine::BlockAffineComponent::read,
        test_configs: &["input-dim=6 output-dim=4 num-blocks=2", "input-dim=9 output-dim=6 num-blocks=3 bias-mean=0.5 bias-stddev=0.1 param-stddev=0.3"],
    },
    ComponentType {
        name: "RepeatedAffineComponent",
        from_config: block_affine::RepeatedAffineComponent::from_config,
        read: block_affine::RepeatedAffineComponent::read,
        test_configs: &["input-dim=6 output-dim=8 num-repeats=2", "input-dim=9 output-dim=3 num-repeats=3 bias-stddev=1"],
    },
    ComponentType {
        name: "NaturalGradientRepeatedAffineComponent",
        from_config: |cfg, rng| {
            block_affine::RepeatedAffineComponent::from_config_kind(cfg, rng, true)
        },
        read: |r| block_affine::RepeatedAffineComponent::read_kind(r, true),
        test_configs: &["input-dim=8 output-dim=4 num-repeats=4 bias-stddev=0.5"],
    },
    ComponentType {
        name: "PerElementScaleComponent",
        from_config: per_element::PerElementScaleComponent::from_config,
        read: per_element::PerElementScaleComponent::read,
        test_configs: &["dim=5 param-stddev=0.5", "dim=3 param-mean=0.5 param-stddev=0.1 learning-rate=0.1"],
    },
    ComponentType {
        name: "NaturalGradientPerElementScaleComponent",
        from_config: |cfg, rng| {
            per_element::PerElementScaleComponent::from_config_kind(cfg, rng, true)
        },
        read: per_element::PerElementScaleComponent::ng_read,
        test_configs: &["dim=6 param-mean=0.5 param-stddev=0.2", "dim=4 rank=2 update-period=3 num-samples-history=100 alpha=2"],
    },
    ComponentType {
        name: "PerElementOffsetComponent",
        from_config: per_element::PerElementOffsetComponent::from_config,
        read: per_element::PerElementOffsetComponent::read,
        test_configs: &["dim=5 param-mean=0.1 param-stddev=0.3", "dim=6 block-dim=2 param-stddev=1 use-natural-gradient=false"],
    },
    ComponentType {
        name: "ScaleAndOffsetComponent",
        from_config: per_element::ScaleAndOffsetComponent::from_config,
        read: per_element::ScaleAndOffsetComponent::read,
        test_configs: &["dim=5", "dim=6 block-dim=3 rank=2 use-natural-gradient=false learning-rate=0.05"],
    },
    ComponentType {
        name: "ConstantFunctionComponent",
        from_config: per_element::ConstantFunctionComponent::from_config,
        read: per_element::ConstantFunctionComponent::read,
        test_configs: &["input-dim=4 output-dim=3 output-mean=0.5 output-stddev=1", "input-dim=3 output-dim=3 is-updatable=false use-natural-gradient=false output-stddev=1"],
    },
    // Nonlinearities, normalisation and fixed (non-updatable) components:
    ComponentType {
        name: "SigmoidComponent",
        from_config: nonlinear::sigmoid_from_config,
        read: nonlinear::sigmoid_read,
        test_configs: &["dim=6", "dim=5 self-repair-scale=1e-5"],
    },
    ComponentType {
        name: "TanhComponent",
        from_config: nonlinear::tanh_from_config,
        read: nonlinear::tanh_read,
        test_configs: &["dim=6", "dim=4 self-repair-scale=1e-5 self-repair-lower-threshold=0.3"],
    },
    ComponentType {
        name: "RectifiedLinearComponent",
        from_config: nonlinear::relu_from_config,
        read: nonlinear::relu_read,
        test_configs: &["dim=6", "dim=8 block-dim=4 self-repair-scale=1e-5"],
    },
    ComponentType {
        name: "SoftmaxComponent",
        from_config: nonlinear::softmax_from_config,
        read: nonlinear::softmax_read,
        test_configs: &["dim=5"],
    },
    ComponentType {
        name: "LogSoftmaxComponent",
        from_config: nonlinear::log_softmax_from_config,
        read: nonlinear::log_softmax_read,
        test_configs: &["dim=7"],
    },
    ComponentType {
        name: "NoOpComponent",
        from_config: pass_through::NoOpComponent::from_config,
        read: pass_through::NoOpComponent::read,
        test_configs: &["dim=5", "dim=4 backprop-scale=0.5"],
    },
    ComponentType {
        name: "ElementwiseProductComponent",
        from_config: column_groups::ElementwiseProductComponent::from_config,
        read: column_groups::ElementwiseProductComponent::read,
        test_configs: &["input-dim=8 output-dim=4", "input-dim=9 output-dim=3"],
    },
    ComponentType {
        name: "PermuteComponent",
        from_config: column_groups::PermuteComponent::from_config,
        read: column_groups::PermuteComponent::read,
        test_configs: &["column-map=3,1,0,4,2"],
    },
    ComponentType {
        name: "SumBlockComponent",
        from_config: column_groups::SumBlockComponent::from_config,
        read: column_groups::SumBlockComponent::read,
        test_configs: &["input-dim=6 output-dim=3", "input-dim=8 output-dim=2 scale=0.25"],
    },
    ComponentType {
        name: "SumGroupComponent",
        from_config: column_groups::SumGroupComponent::from_config,
        read: column_groups::SumGroupComponent::read,
        test_configs: &["sizes=1,2,3", "input-dim=6 output-dim=2"],
    },
    ComponentType {
        name: "PnormComponent",
        from_config: column_groups::PnormComponent::from_config,
        read: column_groups::PnormComponent::read,
        test_configs: &["input-dim=6 output-dim=3", "input-dim=8 output-dim=2"],
    },
    ComponentType {
        name: "FixedScaleComponent",
        from_config: fixed_scale_bias::FixedScaleComponent::from_config,
        read: fixed_scale_bias::FixedScaleComponent::read,
        test_configs: &["dim=5", "dim=4 scale=0.8"],
    },
    ComponentType {
        name: "FixedBiasComponent",
        from_config: fixed_scale_bias::FixedBiasComponent::from_config,
        read: fixed_scale_bias::FixedBiasComponent::read,
        test_configs: &["dim=5"],
    },
    ComponentType {
        name: "ClipGradientComponent",
        from_config: pass_through::ClipGradientComponent::from_config,
        read: pass_through::ClipGradientComponent::read,
        test_configs: &["dim=5 clipping-threshold=1000", "dim=4 clipping-threshold=1000 norm-based-clipping=true"],
    },
    ComponentType {
        name: "NormalizeComponent",
        from_config: normalize::NormalizeComponent::from_config,
        read: normalize::NormalizeComponent::read,
        test_configs: &[
            "dim=6",
            "input-dim=6 target-rms=0.5 add-log-stddev=true",
            "dim=8 block-dim=4 add-log-stddev=true",
        ],
    },
    ComponentType {
        name: "BatchNormComponent",
        from_config: normalize::BatchNormComponent::from_config,
        read: normalize::BatchNormComponent::read,
        test_configs: &["dim=6", "dim=8 block-dim=4 target-rms=0.5"],
    },
    ComponentType {
        name: "DropoutComponent",
        from_config: dropout::DropoutComponent::from_config,
        read: dropout::DropoutComponent::read,
        test_configs: &["dim=5 dropout-proportion=0.3 test-mode=true"],
    },
    // General (non-simple) components:
    ComponentType {
        name: "TdnnComponent",
        from_config: tdnn::TdnnComponent::from_config,
        read: tdnn::TdnnComponent::read,
        test_configs: &["input-dim=5 output-dim=4 time-offsets=-1,0,1", "input-dim=4 output-dim=3 time-offsets=-3,0 use-bias=false orthonormal-constraint=-1 l2-regularize=0.01 max-change=0.75"],
    },
    ComponentType {
        name: "TimeHeightConvolutionComponent",
        from_config: time_height_convolution::TimeHeightConvolutionComponent::from_config,
        read: time_height_convolution::TimeHeightConvolutionComponent::read,
        test_configs: &["num-filters-in=2 num-filters-out=3 height-in=5 height-out=5 height-offsets=-1,0,1 time-offsets=-1,0,1", "num-filters-in=3 num-filters-out=2 height-in=6 height-out=3 height-subsample-out=2 offsets=0,0;0,1;2,0 required-time-offsets=0 use-natural-gradient=false max-memory-mb=0.0001"],
    },
    ComponentType {
        name: "StatisticsExtractionComponent",
        from_config: statistics::StatisticsExtractionComponent::from_config,
        read: statistics::StatisticsExtractionComponent::read,
        test_configs: &["input-dim=4 input-period=1 output-period=3 include-variance=true", "input-dim=3 output-period=2 include-variance=false"],
    },
    ComponentType {
        name: "StatisticsPoolingComponent",
        from_config: statistics::StatisticsPoolingComponent::from_config,
        read: statistics::StatisticsPoolingComponent::read,
        test_configs: &["input-dim=9 input-period=3 left-context=6 right-context=6 num-log-count-features=1", "input-dim=5 left-context=0 right-context=4 output-stddevs=false"],
    },
    ComponentType {
        name: "RestrictedAttentionComponent",
        from_config: attention::RestrictedAttentionComponent::from_config,
        read: attention::RestrictedAttentionComponent::read,
        test_configs: &["key-dim=3 value-dim=4 num-left-inputs=2 num-right-inputs=1", "num-heads=3 key-dim=2 value-dim=3 num-left-inputs=1 num-right-inputs=2 time-stride=3 num-left-inputs-required=0 num-right-inputs-required=1 output-context=false key-scale=0.25"],
    },
    ComponentType {
        name: "ConstantComponent",
        from_config: constant::ConstantComponent::from_config,
        read: constant::ConstantComponent::read,
        test_configs: &["output-dim=5 output-mean=0.1 output-stddev=0.2", "output-dim=3 is-updatable=false use-natural-gradient=false"],
    },
    ComponentType {
        name: "DistributeComponent",
        from_config: distribute::DistributeComponent::from_config,
        read: distribute::DistributeComponent::read,
        test_configs: &["input-dim=6 output-dim=2", "input-dim=4 output-dim=4"],
    },
    // The pre-xconfig CNN components and the composite chain:
    ComponentType {
        name: "ConvolutionComponent",
        from_config: old_cnn::ConvolutionComponent::from_config,
        read: old_cnn::ConvolutionComponent::read,
        test_configs: &[
            "input-x-dim=3 input-y-dim=4 input-z-dim=2 filt-x-dim=2 filt-y-dim=2 filt-x-step=1 filt-y-step=2 num-filters=3",
            "input-x-dim=5 input-y-dim=3 input-z-dim=2 filt-x-dim=3 filt-y-dim=2 filt-x-step=2 filt-y-step=1 num-filters=2 input-vectorization-order=yzx param-stddev=0.5 bias-stddev=0.3 learning-rate=0.01 max-change=0.5",
        ],
    },
    ComponentType {
        name: "MaxpoolingComponent",
        from_config: old_cnn::MaxpoolingComponent::from_config,
        read: old_cnn::MaxpoolingComponent::read,
        test_configs: &[
            "input-x-dim=2 input-y-dim=6 input-z-dim=2 pool-x-size=2 pool-y-size=2 pool-z-size=1 pool-x-step=1 pool-y-step=2 pool-z-step=1",
            "input-x-dim=3 input-y-dim=5 input-z-dim=4 pool-x-size=2 pool-y-size=3 pool-z-size=2 pool-x-step=1 pool-y-step=1 pool-z-step=2",
        ],
    },
    ComponentType {
        name: "CompositeComponent",
        from_config: composite::CompositeComponent::from_config,
        read: composite::CompositeComponent::read,
        test_configs: &[
            "num-components=3 max-rows-process=3 component1='type=AffineComponent input-dim=5 output-dim=4' component2='type=TanhComponent dim=4' component3='type=NaturalGradientAffineComponent input-dim=4 output-dim=3'",
            "num-components=2 max-rows-process=2 component1='type=TanhComponent dim=12' component2='type=ConvolutionComponent input-x-dim=3 input-y-dim=4 input-z-dim=1 filt-x-dim=2 filt-y-dim=2 filt-x-step=1 filt-y-step=1 num-filters=2'",
            "num-components=2 component1='type=SigmoidComponent dim=4' component2='type=FixedAffineComponent input-dim=4 output-dim=3'",
        ],
    },
    // Recurrence and dropout components:
    ComponentType {
        name: "LstmNonlinearityComponent",
        from_config: lstm::LstmNonlinearityComponent::from_config,
        read: lstm::LstmNonlinearityComponent::read,
        test_configs: &["cell-dim=4", "cell-dim=3 use-dropout=true param-stddev=0.5 max-change=0.75 learning-rate=0.01", "cell-dim=5 sigmoid-self-repair-threshold=0.1 tanh-self-repair-threshold=0.3 self-repair-scale=1e-4 l2-regularize=0.001"],
    },
    ComponentType {
        name: "GruNonlinearityComponent",
        from_config: gru::GruNonlinearityComponent::from_config,
        read: gru::GruNonlinearityComponent::read,
        test_configs: &["cell-dim=4", "cell-dim=5 recurrent-dim=3 param-stddev=0.5 self-repair-threshold=0.3 alpha=2 rank-in=2 rank-out=3 update-period=2 max-change=0.75 learning-rate=0.01", "cell-dim=3 self-repair-scale=1e-3 learning-rate-factor=0.5"],
    },
    ComponentType {
        name: "OutputGruNonlinearityComponent",
        from_config: gru::OutputGruNonlinearityComponent::from_config,
        read: gru::OutputGruNonlinearityComponent::read,
        test_configs: &["cell-dim=4", "cell-dim=6 param-mean=0.5 param-stddev=0.3 self-repair-threshold=0.1 alpha=2 rank=3 update-period=5 l2-regularize=0.001", "cell-dim=3 self-repair-scale=1e-3 max-change=0.5"],
    },
    ComponentType {
        name: "BackpropTruncationComponent",
        from_config: backprop_truncation::BackpropTruncationComponent::from_config,
        read: backprop_truncation::BackpropTruncationComponent::read,
        test_configs: &["dim=6", "dim=24 clipping-threshold=30.0 zeroing-threshold=15.0 zeroing-interval=20 recurrence-interval=3 scale=0.95"],
    },
    ComponentType {
        name: "GeneralDropoutComponent",
        from_config: dropout_general::GeneralDropoutComponent::from_config,
        read: dropout_general::GeneralDropoutComponent::read,
        test_configs: &["dim=8 dropout-proportion=0.3", "dim=12 block-dim=4 time-period=5 continuous=true dropout-proportion=0.2", "dim=20 specaugment-max-proportion=0.5 specaugment-max-regions=2 test-mode=true"],
    },
    ComponentType {
        name: "DropoutMaskComponent",
        from_config: dropout_general::DropoutMaskComponent::from_config,
        read: dropout_general::DropoutMaskComponent::read,
        test_configs: &["output-dim=3 dropout-proportion=0.25", "output-dim=2 dropout-proportion=0.1 continuous=true test-mode=true"],
    },
    ComponentType {
        name: "SpecAugmentTimeMaskComponent",
        from_config: dropout_general::SpecAugmentTimeMaskComponent::from_config,
        read: dropout_general::SpecAugmentTimeMaskComponent::read,
        test_configs: &["dim=20 zeroed-proportion=0.2 time-mask-max-frames=5", "dim=4 test-mode=true"],
    },
];

/// The registered type with this name.
pub fn component_type(name: &str) -> Option<&'static ComponentType> {
    registry().iter().find(|t| t.name == name)
}

/// Creates a component from a `component name=... type=... ...` config line, drawing random
/// parameters from `init_rng`.
pub fn new_component_from_config(
    cfg: &ConfigLine,
    init_rng: &mut dyn RngCore,
) -> Result<Box<dyn Component>> {
    let type_name: String = cfg.require("type")?;
    let ty = component_type(&type_name).ok_or_else(|| {
        cfg.error_at_value("type", format!("unknown component type '{type_name}'"))
    })?;
    let c = (ty.from_config)(cfg, init_rng)?;
    cfg.check_all_used(&format!("component type {type_name}"))?;
    Ok(c)
}

/// The type name in a component's opening token `<TypeName>`.
pub fn type_of_token(tok: &str) -> Option<&str> {
    tok.strip_prefix('<').and_then(|t| t.strip_suffix('>'))
}

/// Reads a component: its `<TypeName>` token, then the body (Kaldi's Component::ReadNew).
pub fn read_component(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
    let at = r.pos();
    let tok = r.token()?;
    let name = type_of_token(&tok)
        .ok_or_else(|| r.err_at(at, "a component type token like <AffineComponent>"))?;
    let ty = component_type(name)
        .ok_or_else(|| r.err_at(at, format!("a known component type (got {name})")))?;
    (ty.read)(r)
}
