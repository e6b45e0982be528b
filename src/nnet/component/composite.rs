//! `CompositeComponent` (Kaldi's `nnet-simple-component.h`): a chain of simple components
//! run as one, processing at most `max-rows-process` rows at a time and recomputing the
//! intermediate values in backprop instead of keeping them (memory for time).
//!
//! Its properties come from its ends as Kaldi derives them: propagate-adds and the output
//! flags from the last component, backprop-adds and input contiguity from the first, always
//! backprop-needs-input (to recompute). It is updatable when a sub-component is; the
//! trainer's whole-network operations reach the sub-components through the
//! `UpdatableComponent` methods it overrides (learning rates, natural-gradient freezing,
//! L2, orthonormal constraints, gradients, statistics).

use super::kaldi_fields::{self, read_opt_into};
use super::param_ops::{updatable_boilerplate, updatable_common};
use super::{
    new_component_from_config, read_component, update_target, Backprop, Component, Description,
    Memo, Propagate, Properties, StatsStep, UpdatableCommon, UpdatableComponent,
};
use crate::error::Result;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut, Matrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const COMPOSITE: &str = "CompositeComponent";

/// Most sub-components a file may declare (Kaldi's reader refuses more).
const MAX_COMPONENTS: i32 = 100_000;

/// `CompositeComponent`.
#[derive(Clone, Debug)]
pub struct CompositeComponent {
    /// The composite's own learning-rate options (Kaldi writes them; only the learning rate
    /// and its factor matter, as the base of the sub-components' rates).
    pub common: UpdatableCommon,
    /// Rows processed at a time (≤ 0: all at once).
    pub max_rows_process: i32,
    /// The chain, first to last.
    pub components: Vec<Box<dyn Component>>,
}

/// The forward values of one chunk: `values[i]` is the input of sub-component i,
/// `values[n]` the output; `memos[i]` what sub-component i returned.
struct Recomputed {
    values: Vec<Matrix>,
    memos: Vec<Option<Memo>>,
}

impl CompositeComponent {
    /// Checks the chain (Kaldi's Init): simple, non-random, no nested composite, matching
    /// dimensions.
    fn new(
        common: UpdatableCommon,
        max_rows_process: i32,
        components: Vec<Box<dyn Component>>,
    ) -> std::result::Result<Self, String> {
        if components.is_empty() {
            return Err("a CompositeComponent needs at least one sub-component".into());
        }
        if max_rows_process <= 0 {
            return Err(format!(
                "max-rows-process must be positive (got {max_rows_process})"
            ));
        }
        for (i, c) in components.iter().enumerate() {
            let p = c.properties();
            if c.type_name() == COMPOSITE {
                return Err(format!(
                    "sub-component {} is a CompositeComponent (nesting is not allowed; lower max-rows-process instead)",
                    i + 1
                ));
            }
            if !p.has(Properties::SIMPLE) || p.has(Properties::RANDOM_COMPONENT) {
                return Err(format!(
                    "sub-component {} ({}) is not allowed: sub-components must be simple and not random",
                    i + 1,
                    c.type_name()
                ));
            }
            if let Some(next) = components.get(i + 1) {
                if c.output_dim() != next.input_dim() {
                    return Err(format!(
                        "sub-component {} has output-dim {} but sub-component {} has input-dim {}",
                        i + 1,
                        c.output_dim(),
                        i + 2,
                        next.input_dim()
                    ));
                }
            }
        }
        Ok(CompositeComponent {
            common,
            max_rows_process,
            components,
        })
    }

    /// Kaldi's CompositeComponent::InitFromConfig: `num-components`, `component1='…'` …
    /// (each a quoted config line with its own `type=`), `max-rows-process` (4096).
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let max_rows_process: i32 = cfg.get_or("max-rows-process", 4096)?;
        let n: i32 = cfg.require("num-components")?;
        if !(1..=MAX_COMPONENTS).contains(&n) {
            return Err(cfg.error_at_value(
                "num-components",
                format!("num-components must be between 1 and {MAX_COMPONENTS} (got {n})"),
            ));
        }
        let mut components = Vec::with_capacity(n as usize);
        for i in 1..=n {
            let key = format!("component{i}");
            let text: String = cfg.get(&key)?.ok_or_else(|| {
                cfg.error(format!("missing {key}='type=... ...' (num-components={n})"))
            })?;
            let nested = ConfigLine::parse(&text, cfg.pos().clone())
                .map_err(|e| cfg.error_at_value(&key, format!("in {key}: {e}")))?;
            if nested.first_token() != "" {
                return Err(cfg.error_at_value(
                    &key,
                    format!(
                        "{key} must be key=value pairs (found '{}')",
                        nested.first_token()
                    ),
                ));
            }
            if nested.get_str("type") == Some(COMPOSITE) {
                return Err(cfg.error_at_value(
                    &key,
                    "a CompositeComponent cannot contain a CompositeComponent",
                ));
            }
            // The sizes a sub-config asks for are held against the memory limit as a
            // top-level line's are.
            nested
                .check_sizes()
                .map_err(|e| cfg.error_at_value(&key, format!("in {key}: {e}")))?;
            let c = new_component_from_config(&nested, init_rng)
                .map_err(|e| cfg.error_at_value(&key, format!("in {key}: {e}")))?;
            components.push(c);
        }
        let c = Self::new(UpdatableCommon::default(), max_rows_process, components)
            .map_err(|m| cfg.error(format!("CompositeComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Reads a CompositeComponent body: the learning-rate fields (each optional, as Kaldi's
    /// reader takes them), `<MaxRowsProcess>`, `<NumComponents>` and the components.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let at = r.pos();
        r.try_token(&format!("<{COMPOSITE}>"))?;
        let mut common = UpdatableCommon::default();
        read_opt_into(r, "<LearningRateFactor>", &mut common.learning_rate_factor)?;
        read_opt_into(r, "<IsGradient>", &mut common.is_gradient)?;
        read_opt_into(r, "<MaxChange>", &mut common.max_change)?;
        read_opt_into(r, "<L2Regularize>", &mut common.l2_regularize)?;
        read_opt_into(r, "<LearningRate>", &mut common.learning_rate)?;
        let max_rows_process: i32 = kaldi_fields::read_field(r, "<MaxRowsProcess>")?;
        let n = kaldi_fields::read_count_field(r, "<NumComponents>", "number of components")?;
        if n > MAX_COMPONENTS {
            return Err(r.err_at(at, format!("at most {MAX_COMPONENTS} sub-components")));
        }
        let mut components = Vec::new();
        for _ in 0..n {
            components.push(read_component(r)?);
        }
        kaldi_fields::expect_closing(r, COMPOSITE)?;
        let c = Self::new(common, max_rows_process, components)
            .map_err(|m| r.err_at(at, format!("a valid CompositeComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Row chunks `[start, start + len)` of `rows` rows.
    fn chunks(&self, rows: usize) -> Vec<(usize, usize)> {
        let step = (self.max_rows_process.max(1) as usize).max(1);
        (0..rows)
            .step_by(step)
            .map(|s| (s, step.min(rows - s)))
            .collect()
    }

    /// Runs the chain on `input`; the last sub-component writes into `output` (adding if it
    /// propagates by adding, as the composite then does).
    fn forward_chunk(&self, rng: &mut dyn RngCore, input: MatView<'_>, mut output: MatViewMut<'_>) {
        let n = self.components.len();
        let mut cur: Option<Matrix> = None;
        for (i, c) in self.components.iter().enumerate() {
            let x = cur.as_ref().map_or(input, |m| m.view());
            if i + 1 == n {
                c.propagate(Propagate::new(x, output.rb(), rng));
            } else {
                let mut y = Matrix::zeros(input.num_rows(), c.output_dim());
                c.propagate(Propagate::new(x, y.view_mut(), rng));
                cur = Some(y);
            }
        }
    }

    /// Recomputes every intermediate value of a chunk, keeping them and the memos.
    fn recompute(&self, rng: &mut dyn RngCore, input: MatView<'_>) -> Recomputed {
        let mut values = vec![input.to_matrix()];
        let mut memos = Vec::with_capacity(self.components.len());
        for c in &self.components {
            let mut y = Matrix::zeros(input.num_rows(), c.output_dim());
            let x = values.last().map_or(input, |m| m.view());
            memos.push(c.propagate(Propagate::new(x, y.view_mut(), &mut *rng)));
            values.push(y);
        }
        Recomputed { values, memos }
    }

    /// The chain's flags: simple, the first's input-side and the last's output-side flags.
    fn chain_properties(&self) -> Properties {
        let first = self.components.first().map_or(0, |c| c.properties().0);
        let last = self.components.last().map_or(0, |c| c.properties().0);
        let mut p = Properties::SIMPLE.0 | Properties::BACKPROP_NEEDS_INPUT.0;
        p |= last
            & (Properties::PROPAGATE_ADDS.0
                | Properties::BACKPROP_NEEDS_OUTPUT.0
                | Properties::OUTPUT_CONTIGUOUS.0);
        p |= first & (Properties::BACKPROP_ADDS.0 | Properties::INPUT_CONTIGUOUS.0);
        if self.is_updatable() {
            p |= Properties::UPDATABLE.0;
        }
        if last & Properties::STORES_STATS.0 != 0 {
            p |= Properties::BACKPROP_NEEDS_OUTPUT.0;
        }
        // Kaldi stores the sub-components' statistics during backprop; here the runtime
        // asks for them after propagate, so the flag is raised when any sub-component has
        // statistics (they are recomputed from the input in `store_stats`).
        if self
            .components
            .iter()
            .any(|c| c.properties().has(Properties::STORES_STATS))
        {
            p |= Properties::STORES_STATS.0;
        }
        Properties(p)
    }

    fn is_updatable(&self) -> bool {
        self.components.iter().any(|c| c.as_updatable().is_some())
    }

    /// Pairs of (own, other's) sub-components when `other` is a composite of the same shape.
    fn pair_with<'a>(&'a self, other: &'a dyn Component) -> Option<&'a CompositeComponent> {
        Self::of_length(self.components.len(), other)
    }
    /// `other` as a composite of `len` sub-components, if it is one.
    fn of_length(len: usize, other: &dyn Component) -> Option<&CompositeComponent> {
        other
            .as_any()
            .downcast_ref::<CompositeComponent>()
            .filter(|o| o.components.len() == len)
    }
    /// Calls `f` with each sub-component and its counterpart in `other` (a composite of the
    /// same length; anything else: no call).
    fn zip_mut(
        &mut self,
        other: &dyn Component,
        mut f: impl FnMut(&mut dyn Component, &dyn Component),
    ) {
        if let Some(o) = Self::of_length(self.components.len(), other) {
            for (c, oc) in self.components.iter_mut().zip(&o.components) {
                f(c.as_mut(), oc.as_ref());
            }
        }
    }
}

impl Component for CompositeComponent {
    fn describe(&self) -> Description {
        Description::new(
            COMPOSITE,
            self.components.first().map_or(0, |c| c.input_dim()),
            self.components.last().map_or(0, |c| c.output_dim()),
            self.chain_properties(),
        )
    }
    fn product_weights_mut(&mut self) -> Vec<&mut crate::matrix::WeightMatrix> {
        self.components
            .iter_mut()
            .flat_map(|c| c.product_weights_mut())
            .collect()
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        for (start, len) in self.chunks(p.input.num_rows()) {
            self.forward_chunk(
                &mut *p.rng,
                p.input.rows_range(start, len),
                p.output.rows_range_mut(start, len),
            );
        }
        None
    }
    fn backprop(&self, mut step: Backprop<'_>) {
        let mut to_update = update_target::<CompositeComponent>(step.to_update);
        let n = self.components.len();
        for (start, len) in self.chunks(step.out_deriv.num_rows()) {
            let rec = self.recompute(&mut *step.rng, step.in_value.rows_range(start, len));
            let mut deriv = step.out_deriv.rows_range(start, len).to_matrix();
            for i in (0..n).rev() {
                let c = &self.components[i];
                let sub_update: Option<&mut dyn Component> = match to_update
                    .as_deref_mut()
                    .and_then(|u| u.components.get_mut(i))
                {
                    Some(b) => Some(&mut **b),
                    None => None,
                };
                let mut prev = None;
                let target = if i == 0 {
                    step.in_deriv.as_mut().map(|d| d.rows_range_mut(start, len))
                } else {
                    Some(prev.insert(Matrix::zeros(len, c.input_dim())).view_mut())
                };
                c.backprop(Backprop {
                    in_value: rec.values[i].view(),
                    out_value: rec.values[i + 1].view(),
                    memo: rec.memos[i].as_ref(),
                    to_update: sub_update,
                    ..Backprop::new(deriv.view(), target, &mut *step.rng)
                });
                if let Some(prev) = prev {
                    deriv = prev;
                }
            }
        }
    }
    fn store_stats_step(&mut self, s: StatsStep<'_>) {
        let (in_value, rng) = (s.in_value, s.rng);
        if in_value.num_cols() != self.input_dim() {
            return;
        }
        for (start, len) in self.chunks(in_value.num_rows()) {
            let rec = self.recompute(&mut *rng, in_value.rows_range(start, len));
            for (i, c) in self.components.iter_mut().enumerate() {
                if c.properties().has(Properties::STORES_STATS) {
                    c.store_stats(
                        rec.values[i].view(),
                        rec.values[i + 1].view(),
                        rec.memos[i].as_ref(),
                        &mut *rng,
                    );
                }
            }
        }
    }
    fn zero_stats(&mut self) {
        for c in &mut self.components {
            c.zero_stats();
        }
    }
    fn scale_stats(&mut self, scale: f32) {
        for c in &mut self.components {
            c.scale_stats(scale);
        }
    }
    fn add_stats(&mut self, alpha: f32, other: &dyn Component) {
        if let Some(o) = other.as_any().downcast_ref::<CompositeComponent>() {
            for (c, oc) in self.components.iter_mut().zip(&o.components) {
                c.add_stats(alpha, oc.as_ref());
            }
        }
    }
    fn set_test_mode(&mut self, test_mode: bool, rng: &mut dyn RngCore) {
        for c in &mut self.components {
            c.set_test_mode(test_mode, rng);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        self.common.write(w, COMPOSITE);
        w.token("<MaxRowsProcess>");
        w.i32(self.max_rows_process);
        w.token("<NumComponents>");
        w.i32(self.components.len() as i32);
        for c in &self.components {
            c.write(w);
        }
        w.token(&format!("</{COMPOSITE}>"));
    }
    fn info(&self) -> String {
        let parts: Vec<String> = self
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| format!("sub-component{} = {{ {} }}", i + 1, c.info()))
            .collect();
        format!("{COMPOSITE} {}", parts.join(", "))
    }
    updatable_boilerplate!(if is_updatable());
}

/// The parameters are those of the updatable sub-components, in order; operations on the
/// parameters reach every sub-component (statistics of the others included, as Kaldi's
/// `Add`/`Scale` on a composite do).
impl UpdatableComponent for CompositeComponent {
    updatable_common!();
    fn natural_gradient_slots(&mut self) -> Vec<&mut dyn crate::gradient::NgSlot> {
        self.components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
            .flat_map(|u| u.natural_gradient_slots())
            .collect()
    }
    fn num_parameters(&self) -> usize {
        self.components
            .iter()
            .filter_map(|c| c.as_updatable())
            .map(|u| u.num_parameters())
            .sum()
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        self.components
            .iter()
            .filter_map(|c| c.as_updatable())
            .flat_map(|u| u.param_blocks())
            .collect()
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        self.components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
            .flat_map(|u| u.param_blocks_mut())
            .collect()
    }
    fn scale(&mut self, alpha: f32) {
        for c in &mut self.components {
            match c.as_updatable_mut() {
                Some(u) => u.scale(alpha),
                None => c.scale_stats(alpha),
            }
        }
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        self.zip_mut(other, |c, oc| match c.as_updatable_mut() {
            Some(u) => u.add(alpha, oc),
            None => c.add_stats(alpha, oc),
        });
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        let Some(o) = self.pair_with(other) else {
            return 0.0;
        };
        self.components
            .iter()
            .zip(&o.components)
            .filter_map(|(c, oc)| c.as_updatable().map(|u| u.dot_product(oc.as_ref())))
            .sum()
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn RngCore) {
        for u in self
            .components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
        {
            u.perturb_params(stddev, rng);
        }
    }
    fn set_zero(&mut self, treat_as_gradient: bool) {
        for c in &mut self.components {
            match c.as_updatable_mut() {
                Some(u) => u.set_zero(treat_as_gradient),
                None => c.zero_stats(),
            }
        }
        if treat_as_gradient {
            self.common.learning_rate = 1.0;
            self.common.is_gradient = true;
        }
    }
    fn set_underlying_learning_rate(&mut self, learning_rate: f32) {
        // Kaldi: the composite's own factor applies first, then each sub-component's.
        let c = &mut self.common;
        c.learning_rate = learning_rate * c.learning_rate_factor;
        let effective = c.learning_rate;
        for u in self
            .components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
        {
            u.set_underlying_learning_rate(effective);
        }
    }
    fn freeze_natural_gradient(&mut self, freeze: bool) {
        self.common.natural_gradient_frozen = freeze;
        for u in self
            .components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
        {
            u.freeze_natural_gradient(freeze);
        }
    }
    fn add_l2_term(&mut self, l2_scale: f32, params: &dyn Component) {
        self.zip_mut(params, |c, oc| {
            if let Some(u) = c.as_updatable_mut() {
                u.add_l2_term(l2_scale, oc);
            }
        });
    }
    fn orthonormal_constraints(&mut self) -> Vec<(f32, MatViewMut<'_>)> {
        self.components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
            .flat_map(|u| u.orthonormal_constraints())
            .collect()
    }
}
